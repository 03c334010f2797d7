#!/usr/bin/env bash
# Unmodified rdma-core programs on the software ConnectX against the kernel's Soft-RoCE, on a
# real (virtual) wire.
#
#   tools/rxe-vm/run-preload-interop.sh
#
# 1. builds the mlx5sim launcher and libmlx5sim.so (cargo build -p mlx5-sim-uverbs);
# 2. boots the Soft-RoCE VM once (run.sh, without its veth devices);
# 3. inside it (preload-interop-guest.sh): tap0 (192.168.77.1/24) with Soft-RoCE `rxe_tap`
#    bound to it; `mlx5sim --tap tap0 --ip 192.168.77.2 -- PROGRAM` runs Debian's
#    ibv_rc_pingpong, ibv_ud_pingpong, ib_write_lat and ib_send_lat on the software ConnectX
#    against the same program on rxe_tap, each end serving once.
#
# The last line is `N passed, M failed`; exit 0 only when M is 0 (2: build or VM setup failed).
# The VM knobs of run.sh apply (RXE_VM_TIMEOUT, RXE_VM_VERBOSE); PRELOAD_INTEROP_ITERS (default
# 50) sets the iterations.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
say() { printf 'run-preload-interop: %s\n' "$*" >&2; }
"$here/setup.sh" || { say "FAILED: the VM could not be prepared (tools/rxe-vm/setup.sh)"; exit 2; }
say "building the mlx5sim launcher and libmlx5sim.so (cargo build -p mlx5-sim-uverbs)"
json=$(mktemp); trap 'rm -f "$json"' EXIT
if ! cargo build -p mlx5-sim-uverbs --message-format=json >"$json"; then
  say "FAILED: cargo could not build the emulation"; exit 2
fi
launcher=$(python3 - "$json" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "mlx5sim" \
            and m.get("executable"):
        print(m["executable"])
PY
)
[ -n "$launcher" ] && [ -f "$(dirname "$launcher")/libmlx5sim.so" ] ||
  { say "FAILED: the launcher or libmlx5sim.so not found in cargo's output"; exit 2; }
export RXE_VM_NDEV=0 RXE_VM_TIMEOUT=${RXE_VM_TIMEOUT:-900}
export RXE_VM_ENV="PRELOAD_INTEROP_ITERS PRELOAD_INTEROP_TIMEOUT ${RXE_VM_ENV:-}"
say "booting the Soft-RoCE VM and running the preloaded programs against rxe inside"
set +e
"$here/run.sh" "$(printf '%q ' "$here/preload-interop-guest.sh" "$launcher")"
rc=$?
set -e
[ $rc = 0 ] && say "passed" || say "FAILED (exit $rc)"
exit $rc
