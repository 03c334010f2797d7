#!/usr/bin/env bash
# The whole test suite of mlx5-direct, on a fresh Debian machine with a Rust toolchain.
# Installs the Debian packages it needs when they are missing, then builds and tests every crate
# with all features, fuzzes each cargo-fuzz target for a bounded time (nightly; skipped, and
# said so, where nightly or cargo-fuzz cannot be installed), then runs the verbs suite against
# the real kernel (Soft-RoCE in a VM).
set -euo pipefail
cd "$(dirname "$0")/.."

# libibverbs-dev is not a build dependency (rdma-core is loaded at run time, `docs/hardware.md`):
# its headers are what mlx5-conformance checks the hand-written declarations against, and
# ibverbs-providers (pulled in with it) is what the verbs tests load. The suite builds and
# passes without it, skipping the conformance tests; here they are required
# (MLX5_CONFORMANCE_REQUIRED=1 makes a missing header a build error, never a silent skip).
export MLX5_CONFORMANCE_REQUIRED=1
need=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
# ibverbs-utils, ibverbs-providers, perftest and ucx-utils: the unmodified programs the preload
# library of uverbs/ (mlx5-sim-uverbs) runs on the software ConnectX (uverbs/tests/it).
for p in libibverbs-dev gcc tshark valgrind ibverbs-utils ibverbs-providers perftest ucx-utils; do
  have_pkg "$p" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "== installing Debian packages: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
fi

# The aarch64 standard library: the aarch64 compile check below and the arm64 assembly check
# of the barriers (tests/it/mmio_fences.rs) need it. Adding it needs rustup's download server;
# a machine that cannot reach it skips both and says so.
have_aarch64=false
if command -v rustup >/dev/null 2>&1 &&
  { rustup target list --installed | grep -qx aarch64-unknown-linux-gnu ||
    timeout 300 rustup target add aarch64-unknown-linux-gnu; }; then
  have_aarch64=true
fi

mkdir -p target
echo "== cargo test (workspace, all features)"
cargo test --workspace --all-features 2>&1 | tee target/test-output.txt

# docs/testing.md "The suites through rdma-core": the ctx and connect tests that need no
# deterministic stepping run again, with their contexts opened through unmodified libibverbs +
# libmlx5 on the software ConnectX behind the preload library (the test binaries built above).
echo "== the ctx and connect suites through rdma-core (mlx5_0 = libmlx5sim.so, tools/rdma-core-suites.sh)"
tools/rdma-core-suites.sh --workspace --all-features 2>&1 | tee -a target/test-output.txt || true

echo "== clippy (workspace, all targets and features; incompatible_msrv checks the declared rust-version)"
if cargo clippy --version >/dev/null 2>&1; then
  if ! cargo clippy --workspace --all-targets --all-features -- -D warnings >target/clippy.txt 2>&1; then
    tail -n 30 target/clippy.txt
    echo "test result: FAILED. 0 passed; 1 failed (clippy)" | tee -a target/test-output.txt
  fi
else
  echo "clippy skipped: cargo clippy is not installed (rustup component add clippy)"
fi

echo "== cargo doc (every public item documented, no broken links)"
if ! RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --all-features >target/doc.txt 2>&1; then
  tail -n 30 target/doc.txt
  echo "test result: FAILED. 0 passed; 1 failed (cargo doc)" | tee -a target/test-output.txt
fi

echo "== rust-version: no dependency needs a newer Rust than the workspace declares"
cargo metadata --format-version 1 --all-features 2>/dev/null | python3 -c '
import json, sys
m = json.load(sys.stdin)
ws = set(m["workspace_members"])
def v(s): return tuple(int(x) for x in (s or "0").split("."))
declared = max(v(p.get("rust_version")) for p in m["packages"] if p["id"] in ws)
bad = [(p["name"], p["version"], p["rust_version"]) for p in m["packages"]
       if p["id"] not in ws and v(p.get("rust_version")) > declared]
for b in bad: print("  %s %s needs Rust %s" % b)
print("rust-version %s: %d dependencies need a newer Rust" % (".".join(map(str, declared)), len(bad)))
sys.exit(1 if bad else 0)
' || echo "test result: FAILED. 0 passed; 1 failed (rust-version)" | tee -a target/test-output.txt

echo "== cargo package (every crate packages, in dependency order)"
if cargo package --workspace --no-verify --allow-dirty >target/package-output.txt 2>&1; then
  grep -c '^ *Packaged' target/package-output.txt | sed 's/^/crates packaged: /'
else
  tail -n 20 target/package-output.txt
  echo "test result: FAILED. 0 passed; 1 failed (cargo package)" | tee -a target/test-output.txt
fi

# The doorbell sequence has aarch64 arms (dmb/dsb/DGH, hw/src/mmio.rs): make sure they compile.
echo "== aarch64: the data path compiles for arm64 (cargo check)"
# A failing check, once the target is there (added at the top), fails the suite.
if $have_aarch64; then
  cargo check --target aarch64-unknown-linux-gnu -p mlx5-wqe -p mlx5-cq -p mlx5-hw -p mlx5-qp \
    -p mlx5-sim -p mlx5-ctx -p mlx5-connect -p mlx5-direct --lib
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

if [ -x tools/rxe-vm/run-interop-tests.sh ]; then
  echo "== interop: the software ConnectX on a TAP link against Soft-RoCE (VM)"
  tools/rxe-vm/run-interop-tests.sh 2>&1 | tee -a target/test-output.txt
fi

if [ -x tools/rxe-vm/run-preload-interop.sh ]; then
  echo "== interop: unmodified programs under mlx5sim --tap against Soft-RoCE (VM)"
  tools/rxe-vm/run-preload-interop.sh 2>&1 | tee -a target/test-output.txt
fi

# Memory bounded by the wire, not the message (per-packet gather/scatter): 50 WRITEs of 8 MiB
# stay under 512 MB of peak RSS (the message was once gathered whole: 2.7 GB).
echo "== bw write --loopback -s 8388608 -n 50: peak RSS"
cargo build --release -p mlx5-tools --bin bw
python3 - <<'PY'
import resource, subprocess, sys
subprocess.run(["target/release/bw", "write", "--loopback", "-s", "8388608", "-n", "50"],
               check=True, stdout=subprocess.DEVNULL)
kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(f"peak RSS {kb // 1024} MB")
sys.exit(0 if kb < 512 * 1024 else 1)
PY

# An idle server costs almost nothing: the software ConnectX's thread sleeps when it has no
# work (docs/software-connectx.md). A `lat write` server waiting 5 s for its client must use
# under 0.25 s of CPU.
echo "== an idle lat write server for 5 s: CPU time"
cargo build --release -p mlx5-tools --bin lat
python3 - <<'PY'
import os, signal, subprocess, sys, time
p = subprocess.Popen(["target/release/lat", "write", "-p", "18599"],
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
time.sleep(5)
with open(f"/proc/{p.pid}/stat") as f:
    fields = f.read().rsplit(")", 1)[1].split()
cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
p.send_signal(signal.SIGKILL)
p.wait()
print(f"idle lat write server: {cpu:.3f} s of CPU in 5 s")
sys.exit(0 if cpu < 0.25 else 1)
PY

# A 1 GiB WRITE and a 1 GiB READ: the memory is the registered buffers the run touches (the
# source filled, the target written: 2 GiB) and a window of packets, not another copy of the
# message (which the whole-message gather added, with all its frames in flight).
echo "== bw write / read --loopback -s 1073741824 -n 1: peak RSS within the buffers + 256 MB"
python3 - <<'PY'
import resource, subprocess, sys
for test in ("write", "read"):
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    subprocess.run(["target/release/bw", test, "--loopback", "-s", "1073741824", "-n", "1"],
                   check=True, stdout=subprocess.DEVNULL)
    kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print(f"bw {test} 1 GiB: peak RSS {max(kb, before) // 1024} MB (buffers touched: 2048 MB)")
    if kb > (2048 + 256) * 1024:
        sys.exit(1)
PY

passed=$(grep -Eo '^test result: [a-zA-Z]+\. [0-9]+ passed' target/test-output.txt | awk '{s+=$4} END {print s+0}')
failed=$(grep -Eo '[0-9]+ failed' target/test-output.txt | awk '{s+=$1} END {print s+0}')
echo "summary: ${passed} passed, ${failed} failed"
[ "$failed" -eq 0 ]
