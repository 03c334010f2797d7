#!/usr/bin/env bash
# perftest-interop.sh MODE LAT BW -- lat and bw against stock perftest (Debian's ib_write_lat,
# ib_send_bw, ...; perftest 4.5, version string 6.06), each way. Runs INSIDE the rxe-vm guest.
#
#   MODE rxe: lat/bw --path verbs on one Soft-RoCE device, ib_* on the other (rxe0 and rxe1 of
#             run-verbs-tests.sh's boot; perf-tools.sh calls this);
#   MODE tap: lat/bw --path direct on the software ConnectX bound to tap0 (192.168.77.2), ib_*
#             on Soft-RoCE rxe_tap bound to the same TAP link (interop-guest.sh sets it up and
#             calls this): the wire is native RoCEv2 between the software ConnectX and the
#             kernel.
#
# Every case runs twice, these tools as the server and stock perftest as the client, then the
# other way (the write, send, read and atomic latency tests and the write and send bandwidth
# tests; the rest of each tool's tests, connection types and -b once). A case passes when both
# processes exit 0, this tool's banner says it spoke to perftest 6.06, and both outputs have
# one row of positive figures for the size and iterations asked for. Prints `ok NAME` or
# `FAIL NAME: why` (with both outputs), then `perftest-interop: N passed, M failed`; exit 0
# only when M is 0. PERFTEST_INTEROP_KEEP=DIR copies every output there.
set -uo pipefail
[ $# -eq 3 ] || { echo "usage: $0 rxe|tap LAT BW" >&2; exit 2; }
mode=$1 lat=$2 bw=$3
work=$(mktemp -d /tmp/perftest-interop.XXXXXX)
pass=0 failn=0
T=${PERFTEST_INTEROP_TIMEOUT:-120}
case $mode in
  rxe) ours_srv=(-d rxe0 --path verbs) ours_cli=(-d rxe1 --path verbs)
       perf_srv=(-d rxe0) perf_cli=(-d rxe1) ;;
  tap) ours_srv=(-d sim --tap tap0 --tap-ip 192.168.77.2 --path direct)
       ours_cli=("${ours_srv[@]}") perf_srv=(-d rxe_tap) perf_cli=(-d rxe_tap) ;;
  *) echo "mode rxe or tap" >&2; exit 2 ;;
esac

# nap: 50 ms without starting a process (read times out on a pipe nobody writes).
exec {napfd}<> <(:)
nap() { read -rt 0.05 -u "$napfd" || true; }

# listening PORT: wait (at most 20 s) until a TCP server listens on PORT (stock perftest
# connects once and gives up when nobody listens yet). Bash builtins only: a process start
# costs about 0.3 s under TCG.
listening() {
  local want line end=$((SECONDS + 20))
  printf -v want ':%04X 00000000:0000 0A' "$1"
  while [ $SECONDS -lt $end ]; do
    while read -r line; do
      [[ $line == *"$want"* ]] && return 0
    done </proc/net/tcp
    nap
  done
  return 1
}

# carrier: in tap mode, wait (at most 20 s) until rxe_tap's port is ACTIVE: the TAP link has
# carrier only while the software ConnectX holds tap0, and perftest refuses a port that is
# down ("Port number 1 state is Down").
carrier() {
  local st end=$((SECONDS + 20))
  while [ $SECONDS -lt $end ]; do
    read -r st </sys/class/infiniband/rxe_tap/ports/1/state
    [[ $st == *ACTIVE* ]] && return 0
    nap
  done
  return 1
}

# check FILE KIND SIZE ITERS: one row of positive figures of SIZE bytes and ITERS iterations
# under the KIND (lat|bw) header, perftest's or ours.
check() {
  python3 - "$@" <<'PY'
import sys
path, kind, size, iters = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
key = {"lat": "t_typical[usec]", "bw": "MsgRate[Mpps]"}[kind]
lines = open(path).read().splitlines()
at = [i for i, l in enumerate(lines) if key in l]
if not at:
    sys.exit(f"no {kind} header")
rows = []
for l in lines[at[-1] + 1:]:
    if l.startswith("---") or not l.strip():
        break
    try:
        rows.append([float(t) for t in l.split()])
    except ValueError:
        sys.exit(f"not a row of figures: {l!r}")
if len(rows) != 1:
    sys.exit(f"want one row, got {rows}")
r = rows[0]
if (r[0], r[1]) != (size, iters):
    sys.exit(f"row for {r[0]:g} bytes x {r[1]:g}, want {size:g} x {iters:g}")
# A bandwidth server that receives reports no peak (0.00), and 8-byte atomics under emulation
# move less than 0.005 MiB/s (0.00, as perftest prints it): the message rate must be positive.
figs = r[4:] if kind == "bw" else r[2:]
if not all(v > 0 for v in figs) or min(r[2:]) < 0:
    sys.exit(f"non-positive figure in {r}")
PY
}

port=19700
# Arguments only stock perftest gets (a flag that is one end's own affair, as --use-srq).
perf_only=()
# pair NAME WHO_SERVES TOOL TEST PROGRAM KIND SIZE ITERS OURS_ITERS ARGS...: one run, these
# tools serving (WHO_SERVES ours) or perftest serving (perftest); KIND SIZE ITERS is the row
# both must print, OURS_ITERS the one this tool prints when it differs (a send bw server that
# receives reports what it received: the same).
pair() {
  local name=$1 serves=$2 tool=$3 test=$4 prog=$5 kind=$6 size=$7 iters=$8; shift 8
  local bin; [ "$tool" = lat ] && bin=$lat || bin=$bw
  port=$((port + 1))
  local o=$work/$name.ours p=$work/$name.perftest s rc1 rc2
  if [ "$serves" = ours ]; then
    timeout "$T" "$bin" "$test" "${ours_srv[@]}" -p $port "$@" >"$o" 2>&1 &
    s=$!
    listening $port || { kill $s 2>/dev/null; }
    timeout "$T" "$prog" "${perf_cli[@]}" -p $port "$@" "${perf_only[@]}" 127.0.0.1 >"$p" 2>&1
    rc2=$?
    wait $s; rc1=$?
  elif [ "$mode" = tap ]; then
    # The software ConnectX gives the TAP link its carrier: this client starts first (it
    # retries its connect while the server does not listen yet), perftest's server once the
    # port is up.
    timeout "$T" "$bin" "$test" "${ours_cli[@]}" -p $port "$@" 127.0.0.1 >"$o" 2>&1 &
    s=$!
    carrier
    timeout "$T" "$prog" "${perf_srv[@]}" -p $port "$@" "${perf_only[@]}" >"$p" 2>&1
    rc2=$?
    wait $s; rc1=$?
  else
    timeout "$T" "$prog" "${perf_srv[@]}" -p $port "$@" "${perf_only[@]}" >"$p" 2>&1 &
    s=$!
    listening $port || { kill $s 2>/dev/null; }
    timeout "$T" "$bin" "$test" "${ours_cli[@]}" -p $port "$@" 127.0.0.1 >"$o" 2>&1
    rc1=$?
    wait $s; rc2=$?
  fi
  local why=""
  [ "$rc1" = 0 ] || why="$tool exited $rc1"
  [ "$rc2" = 0 ] || why="${why:+$why, }$prog exited $rc2"
  if [ -z "$why" ]; then
    grep -q "Exchange *: perftest 6.06 ($prog)" "$o" || why="no 'Exchange: perftest 6.06 ($prog)' line"
  fi
  # READ and atomic latency servers only serve (perftest's print no row either).
  local quiet_server=false
  [[ $kind = lat && ( $test = read || $test = atomic ) ]] && quiet_server=true
  if [ -z "$why" ]; then
    if [ "$serves" = ours ] && $quiet_server; then :
    else
      e=$(check "$o" "$kind" "$size" "$iters" 2>&1) || why="$tool: $e"
    fi
  fi
  if [ -z "$why" ] && ! { [ "$serves" = perftest ] && $quiet_server; }; then
    e=$(check "$p" "$kind" "$size" "$iters" 2>&1) || why="$prog: $e"
  fi
  [ -n "${PERFTEST_INTEROP_KEEP:-}" ] && cp "$o" "$p" "$PERFTEST_INTEROP_KEEP/" 2>/dev/null
  if [ -z "$why" ]; then
    echo "ok $mode-$name"
    pass=$((pass + 1))
  else
    echo "FAIL $mode-$name: $why"
    sed 's/^/    ours: /' "$o" | tail -n 25
    sed 's/^/    perftest: /' "$p" | tail -n 25
    failn=$((failn + 1))
  fi
}

n=${PERFTEST_INTEROP_ITERS:-50}
for who in ours perftest; do
  pair lat-write-$who-serves $who lat write ib_write_lat lat 64 $n -s 64 -n $n
  pair lat-send-$who-serves $who lat send ib_send_lat lat 64 $n -s 64 -n $n
  pair lat-read-$who-serves $who lat read ib_read_lat lat 64 $n -s 64 -n $n
  pair lat-atomic-$who-serves $who lat atomic ib_atomic_lat lat 8 $n -n $n
  pair bw-write-$who-serves $who bw write ib_write_bw bw 4096 $((2 * n)) -s 4096 -n $((2 * n))
  pair bw-send-$who-serves $who bw send ib_send_bw bw 4096 $((2 * n)) -s 4096 -n $((2 * n))
done
# The rest once: compare-and-swap, UD, two QPs, READ and atomic bandwidth, both directions.
pair lat-atomic-cas-ours-serves ours lat atomic ib_atomic_lat lat 8 $n -n $n -A CMP_AND_SWAP
pair lat-send-ud-perftest-serves perftest lat send ib_send_lat lat 512 $n -s 512 -n $n -c UD
pair bw-read-q2-ours-serves ours bw read ib_read_bw bw 2048 $((4 * n)) -s 2048 -n $((2 * n)) -q 2
pair bw-atomic-perftest-serves perftest bw atomic ib_atomic_bw bw 8 $((2 * n)) -n $((2 * n))
pair bw-send-b-ours-serves ours bw send ib_send_bw bw 1024 $((2 * n)) -s 1024 -n $((2 * n)) -b
pair bw-write-b-perftest-serves perftest bw write ib_write_bw bw 1024 $((2 * n)) -s 1024 -n $((2 * n)) -b
# perftest 4.5's --source_ip (--bind_source_ip since 26.01; both are these tools' names): the
# server listens on it only, the client connects from it.
pair lat-write-source-ip-ours-serves ours lat write ib_write_lat lat 64 $n -s 64 -n $n --source_ip 127.0.0.1
pair bw-send-source-ip-perftest-serves perftest bw send ib_send_bw bw 4096 $((2 * n)) -s 4096 -n $((2 * n)) --source_ip 127.0.0.1
# --use-srq: stock perftest receives through its SRQ in either role; these tools too on the
# direct path (tap), where --path verbs (rxe) has no SRQ and runs without one: the SRQ is each
# end's own, not part of the exchange.
for who in ours perftest; do
  if [ "$mode" = tap ]; then
    pair bw-send-srq-q2-$who-serves $who bw send ib_send_bw bw 4096 $((4 * n)) -s 4096 -n $((2 * n)) -q 2 --use-srq
    pair lat-send-srq-$who-serves $who lat send ib_send_lat lat 64 $n -s 64 -n $n --use-srq
  else
    perf_only=(--use-srq)
    pair bw-send-srq-q2-$who-serves $who bw send ib_send_bw bw 4096 $((4 * n)) -s 4096 -n $((2 * n)) -q 2
    pair lat-send-srq-$who-serves $who lat send ib_send_lat lat 64 $n -s 64 -n $n
    perf_only=()
  fi
done

rm -rf "$work"
echo "perftest-interop: $pass passed, $failn failed"
[ "$failn" = 0 ]
