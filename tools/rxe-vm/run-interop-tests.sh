#!/usr/bin/env bash
# Interop of the software ConnectX with the Linux kernel's Soft-RoCE, on a real (virtual) wire.
#
#   tools/rxe-vm/run-interop-tests.sh
#
# 1. builds `lat`, `bw` and `rxe-interop` of mlx5-tools (the verbs backend is in every build);
# 2. boots the Soft-RoCE VM once (run.sh, without its veth devices);
# 3. inside it (interop-guest.sh): creates tap0 (192.168.77.1/24) with Soft-RoCE `rxe_tap` bound
#    to it; the software ConnectX opens tap0 as 192.168.77.2 and speaks native RoCEv2 (Ethernet,
#    IPv4, UDP 4791, BTH..., ICRC) to rxe. Cases: lat and bw with `--path direct` on the
#    software ConnectX against `--path verbs` on rxe (both roles), against stock perftest
#    (ib_write_lat, ib_send_bw, ... on rxe; perftest-interop.sh tap, both roles), then
#    rxe-interop's cases
#    (RC SEND/SEND_IMM/WRITE/WRITE_IMM/READ/CAS/FAA both ways, UD and UC both ways, RNR and RNR
#    exhaustion, loss recovered both ways, PSN wrap, masked atomics refused), ARP, every frame
#    of the software ConnectX accepted by rxe (its counters), a capture on tap0 decoded by
#    tshark with the expected QPNs and PSNs.
#
# The last line is `N passed, M failed`; exit 0 only when M is 0 (2: build or VM setup failed).
# The VM knobs of run.sh apply (RXE_VM_TIMEOUT, RXE_VM_VERBOSE); INTEROP_ITERS (default 50)
# sets the lat/bw iterations.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
say() { printf 'run-interop-tests: %s\n' "$*" >&2; }
"$here/setup.sh" || { say "FAILED: the VM could not be prepared (tools/rxe-vm/setup.sh)"; exit 2; }
say "building lat, bw and rxe-interop (cargo build -p mlx5-tools)"
json=$(mktemp); trap 'rm -f "$json"' EXIT
if ! cargo build -p mlx5-tools --message-format=json \
    --bin lat --bin bw --bin rxe-interop >"$json"; then
  say "FAILED: cargo could not build the tools"; exit 2
fi
mapfile -t bins < <(python3 - "$json" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable"):
        print(m["target"]["name"], m["executable"])
PY
)
lat= bw= peer=
for b in "${bins[@]}"; do
  case $b in
    "lat "*) lat=${b#lat } ;; "bw "*) bw=${b#bw } ;; "rxe-interop "*) peer=${b#rxe-interop } ;;
  esac
done
[ -n "$lat" ] && [ -n "$bw" ] && [ -n "$peer" ] || { say "FAILED: binaries not found in cargo's output"; exit 2; }
export RXE_VM_NDEV=0 RXE_VM_TIMEOUT=${RXE_VM_TIMEOUT:-900}
export RXE_VM_ENV="INTEROP_ITERS INTEROP_ONLY INTEROP_SKIP_TOOLS PERFTEST_INTEROP_ITERS PERFTEST_INTEROP_KEEP RUST_BACKTRACE ${RXE_VM_ENV:-}"
say "booting the Soft-RoCE VM (about 8 s under TCG) and running the interop suite inside"
set +e
"$here/run.sh" "$(printf '%q ' "$here/interop-guest.sh" "$lat" "$bw" "$peer")"
rc=$?
set -e
[ $rc = 0 ] && say "passed" || say "FAILED (exit $rc)"
exit $rc
