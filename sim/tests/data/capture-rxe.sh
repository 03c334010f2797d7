#!/bin/sh
# Captures RoCEv2 frames put on the wire by the Linux kernel's Soft-RoCE (rdma_rxe), to check
# the software ConnectX's parser and ICRC against them (sim/tests/wire_golden_rxe.rs holds the
# bytes taken from such a capture).
#
# Runs inside the rxe VM (`tools/rxe-vm/`), which
# pairs rxe0/veth0 (192.0.2.1) with rxe1/veth1 (192.0.2.2). From the host:
#
#   out=/tmp/rxe-cap; mkdir -p $out
#   RXE_VM_RWDIRS=$out rxe-run.sh "sh sim/tests/data/capture-rxe.sh $out"
#
# Needs tcpdump, ibverbs-utils and perftest on the host (the guest's root is the host's /).
#
# tests/data/rxe-6.1.pcap holds 20 frames of one such capture (Debian kernel 6.1.0-56), one
# exchange of each kind, selected with
#   editcap -F pcap -r $out/rxe.pcap rxe-6.1.pcap 1-4 17-20 57-60 77-78 87-88 97-98 101-102
set -eu
out=${1:?usage: capture-rxe.sh OUTPUT_DIR}

tcpdump -i veth0 -U -s 0 -w "$out/rxe.pcap" udp port 4791 2>"$out/tcpdump.log" &
dump=$!
sleep 1

# Each pair: the server on rxe0 first, then the client on rxe1 (out-of-band exchange over lo).
pair() {
    "$@" -d rxe0 >"$out/server.log" 2>&1 &
    server=$!
    sleep 1
    "$@" -d rxe1 localhost >"$out/client.log" 2>&1
    wait "$server"
}

# RC SEND, 2500 bytes at MTU 1024: SEND FIRST/MIDDLE/LAST and ACKs.
pair ibv_rc_pingpong -g 1 -m 1024 -s 2500 -n 2
# RC RDMA WRITE, 3000 bytes: WRITE FIRST/MIDDLE/LAST; 1 byte: WRITE ONLY.
pair ib_write_lat -x 1 -m 1024 -s 3000 -n 5
# RC RDMA READ, 3000 bytes: READ request, READ RESPONSE FIRST/MIDDLE/LAST.
pair ib_read_lat -x 1 -m 1024 -s 3000 -n 5
# RC FETCH_ADD and CMP_SWAP: AtomicETH and ATOMIC ACKNOWLEDGE.
pair ib_atomic_lat -x 1 -n 5
pair ib_atomic_lat -x 1 -n 5 -A CMP_AND_SWAP
# UD SEND ONLY with DETH.
pair ibv_ud_pingpong -g 1 -s 100 -n 2
# RC SEND with immediate (perftest's send latency test uses immediate data on RC).
pair ib_send_lat -x 1 -s 64 -n 5

sleep 1
kill "$dump"
wait "$dump" || true
