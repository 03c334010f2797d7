#!/usr/bin/env bash
# The whole test suite of mlx5-direct, on a fresh Debian machine with a Rust toolchain.
# Installs the Debian packages it needs when they are missing, then builds and tests every crate
# with all features, fuzzes each cargo-fuzz target for a bounded time (nightly; skipped, and
# said so, where nightly or cargo-fuzz cannot be installed), then runs the verbs suite against
# the real kernel (Soft-RoCE in a VM).
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
for p in libibverbs-dev librdmacm-dev libclang-dev clang pkg-config tshark valgrind; do
  have_pkg "$p" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "== installing Debian packages: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
fi

mkdir -p target
echo "== cargo test (workspace, all features)"
cargo test --workspace --all-features 2>&1 | tee target/test-output.txt

# The doorbell sequence has aarch64 arms (dmb/dsb/DGH, hw/src/mmio.rs): make sure they compile.
echo "== aarch64: the data path compiles for arm64 (cargo check)"
# Adding the target needs rustup's download server; a machine that cannot reach it skips the
# check and says so (a failing check, once the target is there, fails the suite).
if command -v rustup >/dev/null 2>&1 &&
  { rustup target list --installed | grep -qx aarch64-unknown-linux-gnu ||
    timeout 300 rustup target add aarch64-unknown-linux-gnu; }; then
  cargo check --target aarch64-unknown-linux-gnu -p mlx5-wqe -p mlx5-cq -p mlx5-hw -p mlx5-qp \
    -p mlx5-sim -p mlx5-direct --lib
  # The arm64 arms of the MMIO trace and the per-architecture sequences its tests expect
  # (docs/testing.md) compile too.
  cargo check --target aarch64-unknown-linux-gnu -p mlx5-hw -p mlx5-qp --tests
else
  echo "aarch64 check skipped: the aarch64-unknown-linux-gnu target could not be added (rustup)"
fi

# Bounded fuzzing (docs/testing.md): each cargo-fuzz target of fuzz/ runs for FUZZ_SECONDS
# (default 30) from its checked-in corpus; a crash fails the suite (the input is in
# fuzz/artifacts/TARGET/, to be added to the corpus as a regression test). libFuzzer needs the
# nightly toolchain and cargo-fuzz: a machine that cannot install them skips and says so.
echo "== fuzzing: each fuzz/ target for ${FUZZ_SECONDS:-30} s (cargo +nightly fuzz)"
fuzz_ok=1
if ! command -v rustup >/dev/null 2>&1; then
  echo "fuzzing skipped: no rustup to install the nightly toolchain"; fuzz_ok=0
elif ! { rustup toolchain list | grep -q '^nightly' ||
  timeout 600 rustup toolchain install nightly --profile minimal >/dev/null 2>&1; }; then
  echo "fuzzing skipped: the nightly toolchain could not be installed (rustup)"; fuzz_ok=0
elif ! { cargo fuzz --version >/dev/null 2>&1 ||
  timeout 900 cargo install cargo-fuzz --locked >/dev/null 2>&1; }; then
  echo "fuzzing skipped: cargo-fuzz could not be installed (cargo install cargo-fuzz)"; fuzz_ok=0
fi
if [ "$fuzz_ok" -eq 1 ]; then
  (cd fuzz && cargo +nightly fuzz build -O 2>&1 | tail -n 3)
  for t in $(cd fuzz && cargo +nightly fuzz list); do
    # The checked-in seeds are the corpus; what libFuzzer adds goes to a scratch directory.
    work="target/fuzz-corpus/$t"
    mkdir -p "$work"
    if (cd fuzz && cargo +nightly fuzz run -O "$t" "../$work" "corpus/$t" -- \
      -max_total_time="${FUZZ_SECONDS:-30}" -rss_limit_mb=2048 >"../target/fuzz-$t.log" 2>&1); then
      echo "fuzz $t: $(grep -Eo 'Done [0-9]+ runs in [0-9]+ second' "target/fuzz-$t.log" | tail -n 1), no crash"
    else
      echo "fuzz $t: CRASH (target/fuzz-$t.log; the input is in fuzz/artifacts/$t/)"
      tail -n 30 "target/fuzz-$t.log"
      echo "test result: FAILED. 0 passed; 1 failed (fuzz $t)" >>target/test-output.txt
    fi
  done
fi

if [ -x tools/rxe-vm/run-verbs-tests.sh ]; then
  echo "== verbs suite against the Linux kernel (Soft-RoCE VM)"
  tools/rxe-vm/run-verbs-tests.sh 2>&1 | tee -a target/test-output.txt
fi

passed=$(grep -Eo '^test result: [a-zA-Z]+\. [0-9]+ passed' target/test-output.txt | awk '{s+=$4} END {print s+0}')
failed=$(grep -Eo '[0-9]+ failed' target/test-output.txt | awk '{s+=$1} END {print s+0}')
echo "summary: ${passed} passed, ${failed} failed"
[ "$failed" -eq 0 ]
