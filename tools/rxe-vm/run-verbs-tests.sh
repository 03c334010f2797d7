#!/usr/bin/env bash
# Run the verbs backend's tests against the real Linux kernel verbs stack (Soft-RoCE).
#
#   tools/rxe-vm/run-verbs-tests.sh [extra libtest args, e.g. a test name filter]
#
# 1. builds the test binary of mlx5-hw (its verbs_rxe and verbs_host modules) and the
#    perftest-compatible tools `lat` and `bw` (every build has the verbs backend: rdma-core is
#    loaded at run time, and inside the VM it is the host's own, through the shared root);
# 2. boots the Soft-RoCE VM once (run.sh: Debian's 6.1 kernel under QEMU, rxe0 + rxe1);
# 3. runs both test binaries inside it, the rxe tests with --include-ignored and
#    MLX5_HW_RXE_VM=1, then perf-tools.sh: lat and bw on --path verbs, in one process and as a
#    server on rxe0 and a client on rxe1, with their output checked (RXE_VM_PERF_TOOLS=0 skips
#    this part).
#
# Exits non-zero with a clear message if the build fails, the VM cannot start (no QEMU, no
# kernel package, Soft-RoCE setup failed, timeout), any test fails or a tool run fails its
# checks. Honours CARGO_TARGET_DIR; the VM knobs of run.sh (RXE_VM_TIMEOUT, RXE_VM_VERBOSE,
# ...) apply.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
say() { printf 'run-verbs-tests: %s\n' "$*" >&2; }

# Packages, kernel and initramfs first (rdma-core's libraries for the runs; the build needs none).
"$here/setup.sh" || { say "FAILED: the VM could not be prepared (tools/rxe-vm/setup.sh; run it as root once)"; exit 2; }

say "building the verbs test binary (cargo test -p mlx5-hw --no-run)"
json=$(mktemp); trap 'rm -f "$json"' EXIT
if ! cargo test -p mlx5-hw --no-run --message-format=json \
       --test it >"$json"; then
  say "FAILED: cargo could not build the verbs tests"
  exit 1
fi
perf_tools=${RXE_VM_PERF_TOOLS:-1}
if [ "$perf_tools" != 0 ]; then
  say "building lat and bw (cargo build -p mlx5-tools --bin lat --bin bw)"
  if ! cargo build -p mlx5-tools --message-format=json \
         --bin lat --bin bw >>"$json"; then
    say "FAILED: cargo could not build lat and bw"
    exit 1
  fi
fi
mapfile -t bins < <(python3 - "$json" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") \
            and (m["target"]["name"], m["target"]["kind"][0]) in (
                ("it", "test"), ("lat", "bin"), ("bw", "bin")):
        print(m["target"]["name"], m["executable"])
PY
)
it_bin= lat_bin= bw_bin=
for b in "${bins[@]}"; do
  case $b in
    "it "*) it_bin=${b#it } ;;
    "lat "*) lat_bin=${b#lat } ;;
    "bw "*) bw_bin=${b#bw } ;;
  esac
done
[ -n "$it_bin" ] || { say "FAILED: the test binary was not found in cargo's output"; exit 1; }
tools_cmd=
if [ "$perf_tools" != 0 ]; then
  [ -n "$lat_bin" ] && [ -n "$bw_bin" ] || { say "FAILED: lat and bw not found in cargo's output"; exit 1; }
  tools_cmd=" && $(printf '%q ' "$here/perf-tools.sh" "$lat_bin" "$bw_bin")"
fi

# (Without arguments, `printf ' %q'` would print '' : an empty filter, which matches every test.)
args=
[ $# -eq 0 ] || args=$(printf ' %q' "$@")
export MLX5_HW_RXE_VM=1 RUST_BACKTRACE=${RUST_BACKTRACE:-1}
export RXE_VM_ENV="MLX5_HW_RXE_VM RUST_BACKTRACE RXE_VM_PERFTEST PERFTEST_INTEROP_ITERS PERFTEST_INTEROP_KEEP ${RXE_VM_ENV:-}"
say "booting the Soft-RoCE VM (TCG: about 8 s) and running the tests inside"
start=$SECONDS
set +e
"$here/run.sh" "$(printf '%q' "$it_bin") verbs_rxe:: --include-ignored --test-threads=2$args && $(printf '%q' "$it_bin") verbs_host::$args$tools_cmd"
rc=$?
set -e
case $rc in
  0)   say "passed ($((SECONDS - start)) s in the VM)" ;;
  2)   say "FAILED: the VM could not be prepared (tools/rxe-vm/setup.sh; needs root for apt-get once)" ;;
  124) say "FAILED: the VM timed out (RXE_VM_TIMEOUT=${RXE_VM_TIMEOUT:-600})" ;;
  125) say "FAILED: the VM did not start or died before the tests ended (see the console above)" ;;
  126) say "FAILED: Soft-RoCE could not be set up inside the VM" ;;
  *)   say "FAILED: tests or tool runs failed inside the VM (exit $rc; see above)" ;;
esac
exit $rc
