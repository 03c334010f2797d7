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
export MLX5_SIM_TAP=$TAPIF,$SIP
counters=/sys/class/infiniband/$RXE/ports/1/hw_counters
rcvd0=$(cat $counters/rcvd_pkts)

# The capture of the whole run, on the real wire.
pcap=$work/tap0.pcap
dumpcap -q -B 64 -i $TAPIF -w "$pcap" >/dev/null 2>&1 &
cap=$!
sleep 0.5

# pair NAME WHO_SERVES TOOL TEST ARGS...: a server and a client, one on the software ConnectX
# (--path direct, bound to tap0) and one on rxe_tap (--path verbs); WHO_SERVES is sim or rxe.
# The sim end starts first either way: opening tap0 gives the link carrier.
port=18600
pair() {
  local name=$1 serves=$2 tool=$3 test=$4; shift 4
  local bin; [ "$tool" = lat ] && bin=$lat || bin=$bw
  port=$((port + 1))
  local sim_args=(-d sim --path direct -p $port) rxe_args=(-d $RXE --path verbs -p $port)
  if [ "$serves" = sim ]; then
    timeout $T "$bin" "$test" "${sim_args[@]}" "$@" >"$work/$name.sim" 2>&1 &
    local s=$!
    sleep 0.3
    timeout $T env -u MLX5_SIM_TAP "$bin" "$test" "${rxe_args[@]}" "$@" 127.0.0.1 >"$work/$name.rxe" 2>&1
    local rc2=$?
  else
    timeout $T "$bin" "$test" "${sim_args[@]}" "$@" 127.0.0.1 >"$work/$name.sim" 2>&1 &
    local s=$!
    timeout $T env -u MLX5_SIM_TAP "$bin" "$test" "${rxe_args[@]}" "$@" >"$work/$name.rxe" 2>&1
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
pair lat-send-64-sim-serves sim lat send -s 64 -n $n
pair lat-send-3000-rxe-serves rxe lat send -s 3000 -n $n
pair lat-write-64-sim-serves sim lat write -s 64 -n $n
pair lat-write-5000-rxe-serves rxe lat write -s 5000 -n $n
pair lat-read-64-sim-serves sim lat read -s 64 -n $n
pair lat-read-8192-rxe-serves rxe lat read -s 8192 -n $n
pair bw-write-65536-sim-client rxe bw write -s 65536 -n $n
pair bw-write-65536-rxe-client sim bw write -s 65536 -n $n
pair bw-read-16384-sim-client rxe bw read -s 16384 -n $n
pair bw-read-16384-rxe-client sim bw read -s 16384 -n $n

[ -n "$peer" ] && [ -x "$peer" ] && {
  timeout $T "$peer" --tap $TAPIF --ip $SIP --rxe $RXE >"$work/peer.out" 2>&1
  grep -E '^(ok|FAIL) ' "$work/peer.out"
  pass=$((pass + $(grep -c '^ok ' "$work/peer.out")))
  failn=$((failn + $(grep -c '^FAIL ' "$work/peer.out")))
  grep -q '^done' "$work/peer.out" || { bad interop-peer "did not finish"; tail -n 20 "$work/peer.out"; }
}

sleep 0.5
kill $cap 2>/dev/null; wait $cap 2>/dev/null
# ARP: the software ConnectX answered the kernel's ARP requests for its address.
arp=$(tshark -r "$pcap" -Y "arp.opcode == 2 && arp.src.hw_mac == 02:00:c0:a8:4d:02 && arp.src.proto_ipv4 == $SIP" 2>/dev/null | wc -l)
if [ "$arp" -gt 0 ]; then ok "arp-answered ($arp replies)"; else bad arp-answered "no ARP reply from the software ConnectX in the capture"; fi
rcvd=$(( $(cat $counters/rcvd_pkts) - rcvd0 ))
# Every RoCE frame the software ConnectX sent on the wire (source MAC 02:00:c0:a8:4d:02) was
# accepted by rxe: its rcvd_pkts moved by exactly that many.
sent=$(tshark -r "$pcap" -Y "eth.src == 02:00:c0:a8:4d:02 && udp.dstport == 4791" 2>/dev/null | wc -l)
if [ "$sent" -gt 0 ] && [ "$sent" = "$rcvd" ]; then ok "rxe-accepted-every-sim-frame ($sent)"
else bad rxe-accepted-every-sim-frame "sim sent $sent RoCE frames, rxe rcvd_pkts moved by $rcvd"; fi
# The capture decodes as RoCE (InfiniBand BTH over UDP 4791) in both directions.
dec=$(tshark -r "$pcap" -Y "infiniband.bth.opcode" -T fields -e eth.src -e infiniband.bth.destqp -e infiniband.bth.psn 2>/dev/null | sort -u | wc -l)
from_rxe=$(tshark -r "$pcap" -Y "infiniband.bth && ip.src == $KIP" 2>/dev/null | wc -l)
from_sim=$(tshark -r "$pcap" -Y "infiniband.bth && ip.src == $SIP" 2>/dev/null | wc -l)
if [ "$dec" -gt 0 ] && [ "$from_rxe" -gt 0 ] && [ "$from_sim" = "$sent" ]; then ok "pcap-decodes-as-roce ($from_sim from sim, $from_rxe from rxe)"
else bad pcap-decodes-as-roce "decoded $dec distinct (mac,qp,psn), $from_sim from sim of $sent, $from_rxe from rxe"; fi
for c in $counters/*; do printf '  rxe %s %s\n' "${c##*/}" "$(cat "$c")"; done | grep -v ' 0$'
[ -n "${INTEROP_KEEP:-}" ] && cp "$pcap" "$INTEROP_KEEP/" 2>/dev/null
echo "$pass passed, $failn failed"
[ $failn = 0 ]
