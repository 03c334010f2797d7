#!/usr/bin/env bash
# preload-interop-guest.sh MLX5SIM -- unmodified rdma-core programs on the software ConnectX
# (preloaded with libmlx5sim.so by the mlx5sim launcher, bound to a TAP link with --tap)
# against the same programs on the kernel's Soft-RoCE. Runs INSIDE the rxe-vm guest
# (run-preload-interop.sh boots it).
#
# The link: tap0 is a port of the bridge br0 (192.168.77.1/24), Soft-RoCE `rxe_br` is bound to
# br0, and the preloaded program's device opens tap0 as 192.168.77.2 and speaks native RoCE v2
# on it. The bridge is there for the port state: a TAP interface has carrier only while a
# process holds it (and refuses `ip link set carrier on` without one), perftest refuses a port
# that is down, and stock perftest's client does not retry its connection, so rxe bound to
# tap0 itself could not serve a program that starts after it. A dummy port keeps br0 up.
# Cases, each with the software ConnectX serving and with rxe serving: ibv_rc_pingpong,
# ibv_ud_pingpong, ib_write_lat and ib_send_lat. Each must exit 0 at both ends with its
# figures, the software ConnectX must report no driver bug, and rxe must have received every
# RoCE frame the software ConnectX sent (its rcvd_pkts counter). Every case prints `ok NAME` or
# `FAIL NAME: why`; the last line is `N passed, M failed`, the status 0 only when M is 0.
set -uo pipefail
[ $# -eq 1 ] || { echo "usage: $0 MLX5SIM" >&2; exit 2; }
mlx5sim=$1
work=$(mktemp -d /tmp/preload-interop.XXXXXX)
pass=0 failn=0
ok() { echo "ok $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1: $2"; failn=$((failn + 1)); }
T=${PRELOAD_INTEROP_TIMEOUT:-120}
N=${PRELOAD_INTEROP_ITERS:-50}
RXE=rxe_br TAPIF=tap0 BR=br0 KIP=192.168.77.1 SIP=192.168.77.2

fail_setup() { echo "setup: $1"; echo "0 passed, 1 failed"; exit 1; }
modprobe tun 2>/dev/null
modprobe dummy 2>/dev/null
ip link add $BR type bridge || fail_setup "cannot create $BR"
ip link add dummy0 type dummy || fail_setup "cannot create dummy0"
ip link set dummy0 master $BR && ip link set dummy0 up || fail_setup "dummy0"
ip tuntap add $TAPIF mode tap || fail_setup "cannot create $TAPIF"
ip link set $TAPIF master $BR && ip link set $TAPIF up || fail_setup "$TAPIF"
ip link set $BR up && ip addr add $KIP/24 dev $BR || fail_setup "$BR"
rdma link add $RXE type rxe netdev $BR || fail_setup "rdma link add failed"
for i in $(seq 200); do
  g=$(cat /sys/class/infiniband/$RXE/ports/1/gids/1 2>/dev/null)
  st=$(cat /sys/class/infiniband/$RXE/ports/1/state 2>/dev/null)
  [[ $g == 0000:0000:0000:0000:0000:ffff:* && $st == *ACTIVE* ]] && break
  sleep 0.05
done
[[ $st == *ACTIVE* ]] || fail_setup "$RXE's port is not ACTIVE: $st"
counter() { cat /sys/class/infiniband/$RXE/ports/1/hw_counters/rcvd_pkts; }

# listening PORT: wait (at most 20 s) until a TCP server listens on PORT.
listening() {
  local want line end=$((SECONDS + 20))
  printf -v want ':%04X 00000000:0000 0A' "$1"
  while [ $SECONDS -lt $end ]; do
    while read -r line; do
      [[ $line == *"$want"* ]] && return 0
    done </proc/net/tcp
    sleep 0.05
  done
  return 1
}

# value FILE NAME: a counter of the software ConnectX's report.
value() { awk -v k="$2" '$1 == k { print $2 }' "$1"; }

# pair NAME WHO_SERVES CHECK SIM_ARGS -- RXE_ARGS: the program of SIM_ARGS under mlx5sim (the
# software ConnectX on tap0) and the one of RXE_ARGS on rxe_tap, WHO_SERVES (sim or rxe)
# started first, the client given 127.0.0.1; CHECK (pingpong or lat) is what both outputs
# must show.
port=19900
pair() {
  local name=$1 serves=$2 check=$3; shift 3
  local sim=() rxe=()
  while [ "$1" != -- ]; do sim+=("$1"); shift; done
  shift
  rxe=("$@")
  port=$((port + 1))
  local so=$work/$name.sim ro=$work/$name.rxe rep=$work/$name.report s rc1 rc2
  local launch=(timeout "$T" "$mlx5sim" --tap $TAPIF --ip $SIP --report "$rep" --)
  local before; before=$(counter)
  if [ "$serves" = sim ]; then
    "${launch[@]}" "${sim[@]}" -p $port >"$so" 2>&1 &
    s=$!
    listening $port || { kill $s 2>/dev/null; }
    timeout "$T" "${rxe[@]}" -p $port 127.0.0.1 >"$ro" 2>&1
    rc2=$?
  else
    timeout "$T" "${rxe[@]}" -p $port >"$ro" 2>&1 &
    s=$!
    listening $port || { kill $s 2>/dev/null; }
    "${launch[@]}" "${sim[@]}" -p $port 127.0.0.1 >"$so" 2>&1
    rc2=$?
  fi
  wait $s; rc1=$?
  local why=
  [ $rc1 = 0 ] && [ $rc2 = 0 ] || why="exit $rc1/$rc2"
  for f in "$so" "$ro"; do
    [ -n "$why" ] && break
    case $check in
      pingpong) grep -qE "^[0-9]+ iters in [0-9.]+ seconds" "$f" || why="no iterations line in $(basename "$f")" ;;
      lat) grep -qE "^ *[0-9]+ +$N +[0-9.]+ +[0-9.]+" "$f" || why="no figures in $(basename "$f")" ;;
    esac
  done
  if [ -z "$why" ]; then
    local bugs sent got
    bugs=$(value "$rep" driver_bugs)
    sent=$(value "$rep" port_xmit_packets)
    got=$(( $(counter) - before ))
    [ "$bugs" = 0 ] || why="driver bugs: $(grep '^bug' "$rep")"
    [ -n "$why" ] || [ "$sent" -gt 0 ] && [ "$got" = "$sent" ] ||
      why="${why:-rxe received $got RoCE frames, the software ConnectX sent $sent}"
  fi
  if [ -z "$why" ]; then
    ok "$name"
  else
    bad "$name" "$why"
    for f in "$so" "$ro"; do echo "--- $(basename "$f")"; tail -20 "$f"; done
  fi
}

for who in sim rxe; do
  pair rc_pingpong-$who-serves $who pingpong \
    ibv_rc_pingpong -g 0 -n $N -- ibv_rc_pingpong -d $RXE -g 1 -n $N
  pair ud_pingpong-$who-serves $who pingpong \
    ibv_ud_pingpong -g 0 -n $N -s 512 -- ibv_ud_pingpong -d $RXE -g 1 -n $N -s 512
  pair ib_write_lat-$who-serves $who lat \
    ib_write_lat -d mlx5_0 -x 0 -n $N -- ib_write_lat -d $RXE -x 1 -n $N
  pair ib_send_lat-$who-serves $who lat \
    ib_send_lat -d mlx5_0 -x 0 -n $N -- ib_send_lat -d $RXE -x 1 -n $N
done

rm -rf "$work"
echo "$pass passed, $failn failed"
[ $failn = 0 ]
