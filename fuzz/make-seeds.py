#!/usr/bin/env python3
"""Write the hand-made seed inputs of every fuzz target into corpus/TARGET/seed-NAME.

The seeds come from the repository's own test vectors (docs/samples/*.hex) and from the
layouts the harnesses document (fuzz/harness/*.rs); libFuzzer grows the corpus from them.
Inputs worth keeping after a run (a crash turned regression, a new path) are copied in as
seed-* files by hand; the seed-cov-* files are a sample of a libFuzzer-minimised corpus
(`-merge=1`) from the first runs, kept as they are. Usage: fuzz/make-seeds.py (from anywhere)."""
import os, struct, glob

here = os.path.dirname(os.path.abspath(__file__))
samples = os.path.join(here, "..", "docs", "samples")


def hexfile(name):
    out = bytearray()
    for line in open(os.path.join(samples, name)):
        line = line.split("#", 1)[0].replace(",", " ")
        for t in line.split():
            t = t[2:] if t.lower().startswith("0x") else t
            out += bytes.fromhex(t)
    return bytes(out)


def put(target, name, data):
    d = os.path.join(here, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


# decode: selector byte (kind = sel % 5, QP type = (sel >> 3) % 4, bit 5 CQE 128, bit 7 enhanced).
put("decode", "rc-write-inline", b"\x00" + hexfile("rc-write-inline.hex"))
put("decode", "ud-send", b"\x14" + hexfile("ud-send.hex"))
put("decode", "srq-recv", b"\x02" + hexfile("srq-recv.hex"))
put("decode", "recv", b"\x01" + hexfile("srq-recv.hex")[16:])
put("decode", "cqe-req-err", b"\x03" + hexfile("cqe-req-err.hex"))
put("decode", "cqe-sig-err", b"\x03" + hexfile("cqe-sig-err.hex"))
put("decode", "cq-zip-basic", b"\x04" + hexfile("cq-zip-basic.hex"))
put("decode", "cq-zip-enhanced", b"\x81" + hexfile("cq-zip-enhanced.hex"))
put("decode", "cqe128", b"\x23" + bytes(64) + hexfile("cqe-req-err.hex"))
put("decode", "short", b"\x00\x00")

# connect_wire: header M5QP, version 1, kind, BE16 length, BE32 generation, body.
def msg(kind, gen, body):
    n = 12 + len(body)
    return b"M5QP" + bytes([1, kind]) + struct.pack(">HI", n, gen) + body

put("connect_wire", "ready", msg(2, 0, struct.pack(">I", 0x1234) + bytes([3, 0, 0, 0])))
put("connect_wire", "abort", msg(4, 7, bytes([1, 0, 0, 0])))
put("connect_wire", "hello", msg(1, 0, bytes(56)))
put("connect_wire", "rebuild", msg(3, 1, bytes(56) + bytes(4)))
put("connect_wire", "truncated", b"M5QP\x01\x02\x00")

# tools_hello: MX5S, version 2, the rest zero (a hello with nothing to say), then variants.
put("tools_hello", "plain", b"MX5S\x02" + bytes(51))
put("tools_hello", "sim", b"MX5S\x02" + bytes(23) + b"\x01" + bytes(27))
put("tools_hello", "old-version", b"MX5S\x01" + bytes(51))
# Found by the fuzzer: bytes in a section no flag announces (ignored by the decoder, so the
# harness compares decoded hellos, not bytes).
put("tools_hello", "unannounced-bytes", bytes.fromhex("4d58355302000000400000") + bytes(45))

# cq_poll: sel (bit 0 CQE 128, bit 1 16 CQEs, bits 2-4 sends, bits 5-7 receives), then per
# CQE a control byte (1 owner of the lap, 2 the QP's number, 4 a requester opcode) and bytes.
def cqe(opcode, wqe_counter, qpn=0x1234, byte_cnt=0, syndrome=0):
    b = bytearray(64)
    b[44:48] = struct.pack(">I", byte_cnt)
    b[55] = syndrome
    b[56:60] = struct.pack(">I", qpn)
    b[60:62] = struct.pack(">H", wqe_counter)
    b[63] = opcode << 4
    return bytes(b)

sel = (4 << 2) | (2 << 5)
put("cq_poll", "req", bytes([sel]) + b"\x07" + cqe(0, 0) + b"\x07" + cqe(0, 2))
put("cq_poll", "resp", bytes([sel]) + b"\x03" + cqe(2, 0, byte_cnt=4) + b"\x03" + cqe(2, 1, byte_cnt=4))
put("cq_poll", "req-err", bytes([sel]) + b"\x03" + cqe(13, 0, syndrome=0x05))
put("cq_poll", "resp-err", bytes([sel]) + b"\x03" + cqe(14, 0, syndrome=0x22))
put("cq_poll", "wrap", bytes([sel]) + (b"\x07" + cqe(0, 0)) * 12)
put("cq_poll", "cqe128", bytes([sel | 1]) + b"\x07" + bytes(64) + cqe(0, 0))
put("cq_poll", "sample-err", bytes([sel]) + b"\x01" + hexfile("cqe-req-err.hex"))
put("cq_poll", "zip", bytes([sel]) + b"\x01" + hexfile("cq-zip-basic.hex"))
# Found by the fuzzer (a harness bug: the receive named memory that was not there): a
# responder CQE carrying its data (scatter to CQE, format 1), copied into the receive buffer.
sc = bytearray(cqe(2, 0, byte_cnt=32))
sc[63] |= 0x04
put("cq_poll", "scatter-to-cqe", bytes([sel]) + b"\x03" + bytes(sc))
put("cq_poll", "unknown-qp", bytes([sel]) + b"\x05" + cqe(0, 0, qpn=0x999))

# sim_wqe: per WQE a byte (bits 0-1 QP: RC, UC, UD; bits 2-5 length in 16-byte units - 1).
def wqe(q, data):
    units = len(data) // 16
    return bytes([q | ((units - 1) << 2)]) + data

put("sim_wqe", "rc-write-inline", wqe(0, hexfile("rc-write-inline.hex")))
put("sim_wqe", "ud-send", wqe(2, hexfile("ud-send.hex")))
put("sim_wqe", "nop", wqe(0, bytes([0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 8]) + bytes(4)))
put("sim_wqe", "uc-write-inline", wqe(1, hexfile("rc-write-inline.hex")))
put("sim_wqe", "two", wqe(0, hexfile("rc-write-inline.hex")) + wqe(0, hexfile("rc-write-inline.hex")))

# roce_frames: records of selector (bits 0-2 QP: A RC/UC/UD, B RC/UC/UD; bit 3 raw frame),
# length, bytes (BTH first unless raw).
def bth(opcode, psn, ackreq=0):
    return bytes([opcode, 0, 0xff, 0xff, 0, 0, 0, 0, ackreq << 7]) + struct.pack(">I", psn)[1:]

def rec(sel, body):
    return bytes([sel, len(body)]) + body

# A sends from PSN 0 (fuzz/harness/sim_world.rs): after the first traffic (WRITE, READ, SEND
# on RC; one SEND on UC) B expects PSN 3 on RC and 1 on UC; B sends from 0x100.
put("roce_frames", "rc-send-to-b", rec(3, bth(0x04, 3, 1) + b"hello!!!"))
put("roce_frames", "rc-dup-send-to-b", rec(3, bth(0x04, 0, 1) + b"hello!!!"))
put("roce_frames", "uc-send-to-b", rec(4, bth(0x24, 1) + b"hi uc..."))
put("roce_frames", "ud-send-to-b", rec(5, bth(0x64, 0) + struct.pack(">II", 0x11111111, 1) + b"ud!!"))
put("roce_frames", "ack-to-a", rec(0, bth(0x11, 3) + struct.pack(">I", 0x1f000000)))
put("roce_frames", "old-ack-to-a", rec(0, bth(0x11, 0) + struct.pack(">I", 0x1f000000)))
put("roce_frames", "nak-to-a", rec(0, bth(0x11, 0) + struct.pack(">I", 0x60000000)))
put("roce_frames", "read-resp-to-a", rec(0, bth(0x10, 1) + struct.pack(">I", 0x1f000000) + bytes(64)))
put("roce_frames", "write-to-b", rec(3, bth(0x0a, 0, 1) + struct.pack(">QII", 0, 0, 8) + bytes(8)))
put("roce_frames", "raw-garbage", rec(8, bytes(60)))
