#!/usr/bin/env bash
# interop-guest.sh LAT BW PEER -- the interop suite between the software ConnectX and the
# kernel's Soft-RoCE. Runs INSIDE the rxe-vm guest (run-interop-tests.sh boots it once).
#
# Sets up a TAP link: tap0 = 192.168.77.1/24 with Soft-RoCE `rxe_tap` bound to it; the software
# ConnectX (in the test processes) opens tap0 and is 192.168.77.2, speaking native RoCEv2 on it
# (MAC 02:00:c0:a8:4d:02, answering ARP). Every case prints `ok NAME` or `FAIL NAME: why`; the
# last line is `N passed, M failed` and the exit status is 0 only when M is 0.
set -uo pipefail
[ $# -eq 3 ] || { echo "usage: $0 LAT BW PEER" >&2; exit 2; }
lat=$1 bw=$2 peer=$3
work=$(mktemp -d /tmp/interop.XXXXXX)
pass=0 failn=0
ok() { echo "ok $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1: $2"; failn=$((failn + 1)); }
T=${INTEROP_TIMEOUT:-120}
RXE=rxe_tap TAPIF=tap0 KIP=192.168.77.1 SIP=192.168.77.2

modprobe tun 2>/dev/null
ip tuntap add $TAPIF mode tap || { echo "cannot create $TAPIF"; echo "0 passed, 1 failed"; exit 1; }
ip link set $TAPIF up
ip addr add $KIP/24 dev $TAPIF
rdma link add $RXE type rxe netdev $TAPIF || { echo "rdma link add failed"; echo "0 passed, 1 failed"; exit 1; }
for i in $(seq 200); do
  g=$(cat /sys/class/infiniband/$RXE/ports/1/gids/1 2>/dev/null)
  [[ $g == 0000:0000:0000:0000:0000:ffff:* ]] && break
  sleep 0.05
done
# The sim ends are bound to the tap by --tap/--tap-ip; no MLX5_SIM_TAP in the environment,
# so nothing but the flag selects it.
unset MLX5_SIM_TAP
counters=/sys/class/infiniband/$RXE/ports/1/hw_counters

# pair NAME WHO_SERVES TOOL TEST ARGS...: a server and a client, one on the software ConnectX
# (--path direct, bound to tap0) and one on rxe_tap (--path verbs); WHO_SERVES is sim or rxe.
# The sim end starts first either way: opening tap0 gives the link carrier.
port=18600
pair() {
  local name=$1 serves=$2 tool=$3 test=$4; shift 4
  local bin; [ "$tool" = lat ] && bin=$lat || bin=$bw
  port=$((port + 1))
  local sim_args=(-d sim --tap $TAPIF --tap-ip $SIP --path direct -p $port)
  local rxe_args=(-d $RXE --path verbs -p $port)
  if [ "$serves" = sim ]; then
    timeout $T "$bin" "$test" "${sim_args[@]}" "$@" >"$work/$name.sim" 2>&1 &
    local s=$!
    sleep 0.3
    timeout $T "$bin" "$test" "${rxe_args[@]}" "$@" 127.0.0.1 >"$work/$name.rxe" 2>&1
    local rc2=$?
  else
    timeout $T "$bin" "$test" "${sim_args[@]}" "$@" 127.0.0.1 >"$work/$name.sim" 2>&1 &
    local s=$!
    timeout $T "$bin" "$test" "${rxe_args[@]}" "$@" >"$work/$name.rxe" 2>&1
    local rc2=$?
  fi
  wait $s; local rc1=$?
  # The client reports the figures (as perftest's tools do).
  local client=$work/$name.sim; [ "$serves" = sim ] && client=$work/$name.rxe
  if [ $rc1 = 0 ] && [ $rc2 = 0 ] && grep -qE '^ *[0-9]+ +[0-9]+ +[0-9.]+' "$client"; then
    ok "$name"
  else
    bad "$name" "sim exit $rc1, rxe exit $rc2"
    sed 's/^/    sim: /' "$work/$name.sim" | tail -n 15
    sed 's/^/    rxe: /' "$work/$name.rxe" | tail -n 15
  fi
}

n=${INTEROP_ITERS:-50}
[ -z "${INTEROP_SKIP_TOOLS:-}" ] && {
pair lat-send-64-sim-serves sim lat send -s 64 -n $n
pair lat-send-3000-rxe-serves rxe lat send -s 3000 -n $n
pair lat-write-64-sim-serves sim lat write -s 64 -n $n
pair lat-write-5000-rxe-serves rxe lat write -s 5000 -n $n
pair lat-read-64-sim-serves sim lat read -s 64 -n $n
pair lat-read-8192-rxe-serves rxe lat read -s 8192 -n $n
# Atomics: the client checks each returned value in host order, the byte order of both ends
# (rxe's native u64, the software ConnectX's default host-endianness mode).
pair lat-atomic-faa-sim-serves sim lat atomic -n $n
pair lat-atomic-cas-rxe-serves rxe lat atomic -A CMP_AND_SWAP -n $n
pair bw-write-65536-sim-client rxe bw write -s 65536 -n $n
pair bw-write-65536-rxe-client sim bw write -s 65536 -n $n
pair bw-read-16384-sim-client rxe bw read -s 16384 -n $n
# rxe reading from the software ConnectX with 9 READs of 16 PSNs in flight (rxe_req.c stops at
# RXE_MAX_UNACKED_PSNS, 128, unacknowledged PSNs): the
# sim answers at most 16 response packets a step, so the oldest READ's response starts at
# once and rxe's ACK timer (-u 14: 67 ms) is re-armed by each packet it takes.
pair bw-read-16384-rxe-client sim bw read -s 16384 -n $n
# Stock perftest on rxe_tap against lat/bw on the software ConnectX, each way.
"$(dirname "$0")/perftest-interop.sh" tap "$lat" "$bw" >"$work/perftest.out" 2>&1
grep -vE '^perftest-interop: ' "$work/perftest.out"
pass=$((pass + $(grep -c '^ok ' "$work/perftest.out")))
failn=$((failn + $(grep -c '^FAIL ' "$work/perftest.out")))
grep -q '^perftest-interop: ' "$work/perftest.out" || bad perftest-interop "did not finish"
}

# The interop cases, in one process holding the tap for the whole run: a capture is taken on
# the tap meanwhile (libpcap stops when the link loses carrier, so it starts once the process
# has opened the tap), and rxe's counters are read before and after.
pcap=$work/tap0.pcap
rcvd0=$(cat $counters/rcvd_pkts)
timeout $((T * 4)) "$peer" --tap $TAPIF --ip $SIP --rxe $RXE --delay-ms 1500 \
  ${INTEROP_ONLY:+--only "$INTEROP_ONLY"} >"$work/peer.out" 2>&1 &
pid=$!
for i in $(seq 600); do grep -q '^tap open' "$work/peer.out" && break; sleep 0.05; done
# The peer waits 1.5 s after opening the tap, but dumpcap can take longer than that to start
# under emulation (a capture that began only after the PSN-wrap case was seen): the peer is
# held (SIGSTOP; `timeout` runs it as its child) until dumpcap says it is capturing.
held=$(pgrep -P $pid)
[ -n "$held" ] && kill -STOP $held
dumpcap -q -B 64 -i $TAPIF -w "$pcap" >"$work/dumpcap.err" 2>&1 &
cap=$!
for i in $(seq 600); do grep -q '^Capturing on' "$work/dumpcap.err" && break; sleep 0.05; done
sleep 0.3
[ -n "$held" ] && kill -CONT $held
wait $pid
sleep 0.3
kill -INT $cap 2>/dev/null; wait $cap 2>/dev/null
rcvd=$(( $(cat $counters/rcvd_pkts) - rcvd0 ))
grep -E '^(ok|FAIL) ' "$work/peer.out"
pass=$((pass + $(grep -c '^ok ' "$work/peer.out")))
failn=$((failn + $(grep -c '^FAIL ' "$work/peer.out")))
grep -q '^done' "$work/peer.out" || { bad interop-peer "did not finish"; tail -n 20 "$work/peer.out"; }
grep -E '^(tap|driver bug):' "$work/peer.out"
# tap: R RoCE frames received, S sent, A ARP replies, D dropped
sent=$(awk '/^tap:/{print $6}' "$work/peer.out"); arp=$(awk '/^tap:/{print $8}' "$work/peer.out")
sent=${sent:-0} arp=${arp:-0}
# ARP: the software ConnectX answered the kernel's ARP for its address.
if [ "$arp" -gt 0 ]; then ok "arp-answered ($arp)"; else bad arp-answered "no ARP reply sent"; fi
# Every RoCE frame the software ConnectX put on the tap was accepted by rxe: rcvd_pkts (which
# only moves for a packet rxe took) moved by exactly that many.
roce=$((sent - arp))
if [ "$roce" -gt 0 ] && [ "$roce" = "$rcvd" ]; then ok "rxe-accepted-every-sim-frame ($roce)"
else bad rxe-accepted-every-sim-frame "the sim sent $roce RoCE frames, rxe rcvd_pkts moved by $rcvd"; fi
# The capture decodes as RoCE (BTH over UDP 4791) with the QPNs and PSNs of the PSN-wrap case:
# the sim's requests to the rxe QP at PSN 0xffffff and 0, and rxe's ACKs to the sim QP at both.
read -r _ _ sq _ rq _ <<<"$(awk '/^qpn /{q=$0} /^ok rc-psn-wrap/{print q}' "$work/peer.out")"
if [ -n "${sq:-}" ] && [ -s "$pcap" ]; then
  f() { tshark -r "$pcap" -Y "$1" 2>/dev/null | wc -l; }
  a=$(f "ip.src == $SIP && infiniband.bth.destqp == $rq && infiniband.bth.psn == 0xffffff")
  b=$(f "ip.src == $SIP && infiniband.bth.destqp == $rq && infiniband.bth.psn == 0")
  c=$(f "ip.src == $KIP && infiniband.bth.destqp == $sq && infiniband.bth.psn == 0xffffff")
  d=$(f "ip.src == $KIP && infiniband.bth.destqp == $sq && infiniband.bth.psn == 0")
  all=$(f "infiniband.bth")
  if [ "$a" -gt 0 ] && [ "$b" -gt 0 ] && [ "$c" -gt 0 ] && [ "$d" -gt 0 ]; then
    ok "pcap-decodes-as-roce ($all RoCE frames; wrap case QPs $sq/$rq at PSN 0xffffff and 0)"
  else
    bad pcap-decodes-as-roce "$all RoCE frames; wrap case sim->rxe $a/$b, rxe->sim $c/$d"
  fi
else
  bad pcap-decodes-as-roce "no capture or no PSN-wrap case ($(cat "$work/dumpcap.err"))"
fi
for c in $counters/*; do printf '  rxe %s %s\n' "${c##*/}" "$(cat "$c")"; done | grep -v ' 0$'
[ -n "${INTEROP_KEEP:-}" ] && cp "$pcap" "$INTEROP_KEEP/" 2>/dev/null
echo "$pass passed, $failn failed"
[ $failn = 0 ]
