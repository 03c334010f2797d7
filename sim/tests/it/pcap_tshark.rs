//! Wireshark's reading of the software ConnectX's frames: a capture with frames of every kind
//! (SEND, WRITE first/middle/last, READ request and responses, ACK, NAK, RNR NAK, atomics,
//! UD SEND with DETH) written with the pcap writer, decoded by `tshark`, field by field.
//!
//! A second test captures a real fabric run with a lost packet (NAK, retransmission), a READ, a
//! masked atomic (with its operand trailer) and a SEND, and checks that tshark sees every frame
//! the devices transmitted, in order, and flags none.
//!
//! tshark is required: install it with
//! `DEBIAN_FRONTEND=noninteractive apt-get install -y tshark`. (tshark 4.0 does not verify the
//! ICRC; `wire_golden_rxe.rs` checks the ICRC against the Linux kernel's frames.)

use crate::common;

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use mlx5_hw::Mtu;
use mlx5_sim::pcap::{PcapWriter, Resolution};
use mlx5_sim::wire::{
    segment, Addressing, Aeth, AtomicAckEth, AtomicEth, Bth, Deth, ImmDt, MacAddr, MessageKind,
    NakCode, Opcode, Packet, Psn, Reth, RnrTimer, Syndrome, Transport,
};

/// The fields compared, in `-e` order.
const FIELDS: [&str; 17] = [
    "infiniband.bth.opcode",
    "infiniband.bth.destqp",
    "infiniband.bth.psn",
    "infiniband.bth.padcnt",
    "infiniband.bth.a",
    "infiniband.reth.va",
    "infiniband.reth.r_key",
    "infiniband.reth.dmalen",
    "infiniband.aeth.syndrome",
    "infiniband.aeth.msn",
    "infiniband.deth.q_key",
    "infiniband.deth.srcqp",
    "infiniband.atomiceth.swapdt",
    "infiniband.atomiceth.cmpdt",
    "infiniband.atomicacketh.origremdt",
    "ip.checksum.status",
    "udp.length",
];

fn addr(reverse: bool) -> Addressing {
    let a = Addressing::new(
        MacAddr([0x02, 0x00, 0x00, 0x00, 0x00, 0x01]),
        MacAddr([0x02, 0x00, 0x00, 0x00, 0x00, 0x02]),
        Ipv4Addr::new(192, 0, 2, 1),
        Ipv4Addr::new(192, 0, 2, 2),
        0xc0de,
    );
    if reverse {
        a.reversed()
    } else {
        a
    }
}

fn packet(op: Opcode, qp: u32, psn: u32) -> Packet {
    let mut bth = Bth::new(op, qp, Psn::new(psn));
    bth.ack_req = op.transport() == Transport::Rc && op.is_request() && op.is_last();
    Packet::new(addr(op.is_response()), bth)
}

fn aeth(syndrome: Syndrome, msn: u32) -> Option<Aeth> {
    Some(Aeth { syndrome, msn })
}

/// One frame of each kind the fabric sends.
fn frames() -> Vec<Packet> {
    let mut v = Vec::new();

    let mut send = packet(Opcode::RC_SEND_ONLY, 0x11, 100);
    send.bth.solicited = true;
    send.payload = b"hello, world!".to_vec(); // 13 bytes: pad 3
    v.push(send);

    for s in segment(Transport::Rc, MessageKind::RdmaWrite, 600, Mtu::Mtu256).unwrap() {
        let mut w = packet(s.opcode, 0x12, 200 + s.index);
        if s.opcode.has_reth() {
            w.reth = Some(Reth {
                va: 0x7f00_1234_5000,
                rkey: 0xabcd,
                dma_len: 600,
            });
        }
        w.payload = vec![s.index as u8; s.len as usize];
        v.push(w);
    }

    let mut read = packet(Opcode::RC_RDMA_READ_REQUEST, 0x13, 300);
    read.reth = Some(Reth {
        va: 0x1000,
        rkey: 0x77,
        dma_len: 300,
    });
    v.push(read);
    for s in segment(Transport::Rc, MessageKind::ReadResponse, 300, Mtu::Mtu256).unwrap() {
        let mut r = packet(s.opcode, 0x13, 300 + s.index);
        r.aeth = s.opcode.has_aeth().then_some(Aeth {
            syndrome: Syndrome::Ack { credits: 0x1f },
            msn: 7,
        });
        r.payload = vec![0x5a; s.len as usize];
        v.push(r);
    }

    let mut ack = packet(Opcode::RC_ACKNOWLEDGE, 0x11, 100);
    ack.aeth = aeth(Syndrome::Ack { credits: 0x1f }, 1);
    v.push(ack);
    let mut nak = packet(Opcode::RC_ACKNOWLEDGE, 0x12, 201);
    nak.aeth = aeth(Syndrome::Nak(NakCode::PsnSequenceError), 0);
    v.push(nak);
    let mut rnr = packet(Opcode::RC_ACKNOWLEDGE, 0x11, 101);
    rnr.aeth = aeth(Syndrome::RnrNak(RnrTimer::new(14).unwrap()), 1);
    v.push(rnr);

    let mut cas = packet(Opcode::RC_COMPARE_SWAP, 0x14, 400);
    cas.atomic_eth = Some(AtomicEth {
        va: 0x2000,
        rkey: 0x88,
        swap_add: 5,
        compare: 4,
    });
    v.push(cas);
    let mut atomic_ack = packet(Opcode::RC_ATOMIC_ACKNOWLEDGE, 0x14, 400);
    atomic_ack.aeth = aeth(Syndrome::Ack { credits: 0x1f }, 2);
    atomic_ack.atomic_ack_eth = Some(AtomicAckEth { orig: 4 });
    v.push(atomic_ack);

    let mut ud = packet(Opcode::UD_SEND_ONLY, 0x33, 500);
    ud.deth = Some(Deth {
        qkey: 0x1111_1111,
        src_qp: 0x22,
    });
    ud.payload = vec![0x7b; 100];
    v.push(ud);

    let mut uc = packet(Opcode::UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, 0x15, 600);
    uc.reth = Some(Reth {
        va: 0x3000,
        rkey: 0x99,
        dma_len: 2,
    });
    uc.imm = Some(ImmDt(0x1234_5678));
    uc.payload = vec![1, 2];
    v.push(uc);
    v
}

/// What tshark 4.0 prints for `p`, field by field (its formatting: QPNs, keys and addresses in
/// zero-padded hex, the rest in decimal).
fn expected(p: &Packet, frame_len: usize) -> Vec<String> {
    let opt = |o: Option<String>| o.unwrap_or_default();
    // Wireshark's AtomicETH dissector reports its VA and R_Key in the RETH's fields.
    let remote = p
        .reth
        .map(|r| (r.va, r.rkey))
        .or(p.atomic_eth.map(|a| (a.va, a.rkey)));
    vec![
        p.bth.opcode.as_u8().to_string(),
        format!("{:#08x}", p.bth.dest_qp),
        p.bth.psn.get().to_string(),
        Packet::pad_for(p.payload.len()).to_string(),
        u8::from(p.bth.ack_req).to_string(),
        opt(remote.map(|(va, _)| format!("{va:#018x}"))),
        opt(remote.map(|(_, rkey)| format!("{rkey:#010x}"))),
        opt(p.reth.map(|r| r.dma_len.to_string())),
        opt(p.aeth.map(|a| a.syndrome.to_u8().to_string())),
        opt(p.aeth.map(|a| a.msn.to_string())),
        opt(p.deth.map(|d| format!("{:#018x}", d.qkey))),
        opt(p.deth.map(|d| format!("{:#010x}", d.src_qp))),
        opt(p.atomic_eth.map(|a| a.swap_add.to_string())),
        opt(p.atomic_eth.map(|a| a.compare.to_string())),
        opt(p.atomic_ack_eth.map(|a| a.orig.to_string())),
        "1".to_string(), // PROTO_CHECKSUM_E_GOOD (0 bad, 2 unverified)
        (frame_len - 34).to_string(),
    ]
}

fn tshark() -> Command {
    let mut c = Command::new("tshark");
    c.env("LC_ALL", "C");
    c
}

#[test]
fn tshark_decodes_every_frame_as_encoded() {
    match tshark().arg("--version").output() {
        Ok(out) if out.status.success() => {}
        _ => panic!(
            "tshark is required for this test and was not found or does not run; install it with \
             `DEBIAN_FRONTEND=noninteractive apt-get install -y tshark`"
        ),
    }

    let packets = frames();
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("pcap_tshark.pcap");
    let mut w = PcapWriter::create(&path, Resolution::Nanos).unwrap();
    let mut lens = Vec::new();
    for (i, p) in packets.iter().enumerate() {
        let frame = p.emit().unwrap();
        lens.push(frame.len());
        w.write_frame(Duration::from_nanos(1_000 * i as u64 + 17), &frame)
            .unwrap();
    }
    w.into_inner().unwrap();

    let mut cmd = tshark();
    cmd.args(["-r"])
        .arg(&path)
        .args(["-o", "ip.check_checksum:TRUE", "-T", "fields"]);
    for f in FIELDS {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<Vec<String>> = text
        .lines()
        .map(|l| l.split('\t').map(str::to_string).collect())
        .collect();
    assert_eq!(rows.len(), packets.len(), "one line per frame:\n{text}");
    for (i, (row, p)) in rows.iter().zip(&packets).enumerate() {
        assert_eq!(
            row,
            &expected(p, lens[i]),
            "frame {} ({})",
            i + 1,
            p.bth.opcode
        );
    }

    // Nothing in the capture is flagged malformed or unexpected by any dissector.
    let out = tshark()
        .arg("-r")
        .arg(&path)
        .args([
            "-o",
            "ip.check_checksum:TRUE",
            "-Y",
            "_ws.malformed || _ws.expert.severity >= warning",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "",
        "frames tshark flags"
    );
}

#[test]
fn tshark_reads_a_capture_of_a_lossy_fabric_run() {
    use common::ops::*;
    use common::*;
    use mlx5_hw::QpType;
    use mlx5_wqe::*;

    let mut o = Opts::new(QpType::Rc);
    o.timeout = 4;
    let mut p = Pair::new(o);
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("pcap_tshark_fabric.pcap");
    p.fabric.capture_to(&path).unwrap();
    let (local, remote) = (p.mem(false, 16384), p.mem(true, 16384));
    local.write(0, &[0x42; 3000]);
    p.fabric
        .faults()
        .path(&p.a.dev, &p.b.dev)
        .drop_psns(p.b.qp.qpn(), [201]);
    write(&mut p.a.qp, &local, 0, &remote, 0, 3000); // PSNs 200..=202, 201 lost once
    read(&mut p.a.qp, &local, 4096, &remote, 0, 100, false); // 203
    let (ra, rk, ll, la) = (
        remote.addr() + 8192,
        remote.rkey(),
        local.lkey(),
        local.addr(),
    );
    p.a.qp.post(
        OPCODE_ATOMIC_MASKED_FA,
        OPMOD_EXT_ATOMIC_64,
        CTRL_CQ_UPDATE,
        0,
        |w| {
            w.push(&RaddrSeg::new(ra, rk)).unwrap();
            w.push(&MaskedFa64Seg::new(3, 0)).unwrap();
            w.push(&DataSeg::new(8, ll, la + 8192)).unwrap();
        },
    ); // 204
    p.b.qp.post_recv(&[remote.sge(12288, 64)]);
    local.write(12288, b"hello sim!");
    send(&mut p.a.qp, &local, 12288, 10); // 205
    p.run();
    assert_eq!(p.a.scq.drain().len(), 4);
    let captured = p.fabric.stop_capture().unwrap();
    let sent = p.a.dev.counter("port_xmit_packets") + p.b.dev.counter("port_xmit_packets");
    assert_eq!(
        captured, sent,
        "every transmitted frame, the lost one included"
    );

    // The sim's own reading of the capture.
    let ours: Vec<Packet> = mlx5_sim::pcap::PcapReader::open(&path)
        .unwrap()
        .map(|r| Packet::parse(&r.unwrap().data).unwrap())
        .collect();
    let write_201 = ours
        .iter()
        .filter(|q| q.bth.opcode == Opcode::RC_RDMA_WRITE_MIDDLE && q.bth.psn.get() == 201)
        .count();
    assert_eq!(write_201, 2, "the lost packet and its retransmission");
    assert!(ours.iter().any(|q| q
        .aeth
        .is_some_and(|a| a.syndrome == Syndrome::Nak(NakCode::PsnSequenceError))));

    // tshark's reading: the same opcodes and PSNs, nothing flagged.
    let out = tshark()
        .arg("-r")
        .arg(&path)
        .args([
            "-T",
            "fields",
            "-e",
            "infiniband.bth.opcode",
            "-e",
            "infiniband.bth.psn",
        ])
        .output()
        .expect("tshark is required for this test");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let theirs: Vec<(u8, u32)> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let mut f = l.split('\t');
            let op = f.next().and_then(|x| x.parse().ok()).unwrap_or(0xff);
            let psn = f.next().and_then(|x| x.parse().ok()).unwrap_or(u32::MAX);
            (op, psn)
        })
        .collect();
    let expect: Vec<(u8, u32)> = ours
        .iter()
        .map(|q| (q.bth.opcode.as_u8(), q.bth.psn.get()))
        .collect();
    assert_eq!(theirs, expect);
    let out = tshark()
        .arg("-r")
        .arg(&path)
        // Payloads are application bytes: Wireshark's RPC-over-RDMA heuristic would take a
        // short SEND payload for its header and call it malformed.
        .args(["--disable-heuristic", "rpcordma"])
        .args(["-Y", "_ws.malformed || _ws.expert.severity >= warning"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "",
        "frames tshark flags"
    );
    p.assert_no_bugs();
}
