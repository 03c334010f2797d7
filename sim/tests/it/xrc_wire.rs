//! XRC on the wire (IBTA Annex A14): opcodes 0xA0 + the RC operation, the 4-byte XRCETH
//! (the target XRC SRQ) right after the BTH of every request and of no response. Each kind of
//! XRC frame round-trips through the encoder and parser, a request without its XRCETH is
//! refused, and tshark decodes the captured frames as XRC with no malformed packet. (tshark
//! 4.0 names the XRC opcodes and reads the BTH, but dissects neither the XRCETH nor the
//! extension headers behind it, so only the BTH fields are compared.)

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use mlx5_sim::pcap::{PcapWriter, Resolution};
use mlx5_sim::wire::{
    Addressing, Aeth, AtomicAckEth, AtomicEth, Bth, EmitError, ImmDt, MacAddr, Opcode, Operation,
    Packet, Psn, Reth, Syndrome, Transport, Xrceth,
};

fn xrc(op: Operation) -> Opcode {
    Opcode::new(Transport::Xrc, op).unwrap()
}

fn packet(op: Operation, psn: u32) -> Packet {
    let op = xrc(op);
    let mut a = Addressing::new(
        MacAddr([0x02, 0, 0, 0, 0, 1]),
        MacAddr([0x02, 0, 0, 0, 0, 2]),
        Ipv4Addr::new(192, 0, 2, 1),
        Ipv4Addr::new(192, 0, 2, 2),
        0xc0de,
    );
    if op.is_response() {
        a = a.reversed();
    }
    let mut bth = Bth::new(op, 0x42, Psn::new(psn));
    bth.ack_req = op.is_request() && op.is_last();
    let mut p = Packet::new(a, bth);
    if op.is_request() {
        p.xrceth = Some(Xrceth { srqn: 0x00ab_cdef });
    }
    p
}

fn frames() -> Vec<Packet> {
    let mut v = Vec::new();
    let mut send = packet(Operation::SendOnlyWithImmediate, 10);
    send.imm = Some(ImmDt(0x1234_5678));
    send.payload = b"xrc".to_vec();
    v.push(send);
    let mut w = packet(Operation::RdmaWriteOnly, 11);
    w.reth = Some(Reth {
        va: 0x7f00_0000_1000,
        rkey: 0x99,
        dma_len: 8,
    });
    w.payload = vec![7; 8];
    v.push(w);
    let mut r = packet(Operation::RdmaReadRequest, 12);
    r.reth = Some(Reth {
        va: 0x2000,
        rkey: 0x77,
        dma_len: 16,
    });
    v.push(r);
    let mut resp = packet(Operation::RdmaReadResponseOnly, 12);
    resp.aeth = Some(Aeth {
        syndrome: Syndrome::Ack { credits: 0x1f },
        msn: 3,
    });
    resp.payload = vec![5; 16];
    v.push(resp);
    let mut cas = packet(Operation::CompareSwap, 13);
    cas.atomic_eth = Some(AtomicEth {
        va: 0x3000,
        rkey: 0x88,
        swap_add: 2,
        compare: 1,
    });
    v.push(cas);
    let mut aack = packet(Operation::AtomicAcknowledge, 13);
    aack.aeth = Some(Aeth {
        syndrome: Syndrome::Ack { credits: 0x1f },
        msn: 4,
    });
    aack.atomic_ack_eth = Some(AtomicAckEth { orig: 1 });
    v.push(aack);
    let mut ack = packet(Operation::Acknowledge, 14);
    ack.aeth = Some(Aeth {
        syndrome: Syndrome::Ack { credits: 0x1f },
        msn: 5,
    });
    v.push(ack);
    v
}

#[test]
fn xrc_frames_round_trip_with_the_xrceth_after_the_bth() {
    for p in frames() {
        let bytes = p.emit().unwrap();
        // Ethernet 14 + IPv4 20 + UDP 8, then the BTH (12): the XRCETH at offset 54.
        if p.bth.opcode.is_request() {
            assert_eq!(
                &bytes[54..58],
                &[0x00, 0xab, 0xcd, 0xef],
                "{}",
                p.bth.opcode
            );
        }
        assert_eq!(bytes[42] & 0xe0, 0xa0, "XRC transport bits");
        let mut want = p.clone();
        want.bth.pad_count = Packet::pad_for(p.payload.len());
        assert_eq!(Packet::parse(&bytes).unwrap(), want, "{}", p.bth.opcode);
    }
    // A request without its XRCETH, or a response with one, is refused.
    let mut bad = packet(Operation::SendOnly, 1);
    bad.xrceth = None;
    assert!(matches!(bad.emit(), Err(EmitError::MissingHeader { .. })));
    let mut bad = packet(Operation::Acknowledge, 1);
    bad.aeth = Some(Aeth {
        syndrome: Syndrome::Ack { credits: 0x1f },
        msn: 0,
    });
    bad.xrceth = Some(Xrceth { srqn: 1 });
    assert!(matches!(
        bad.emit(),
        Err(EmitError::UnexpectedHeader { .. })
    ));
}

#[test]
fn tshark_decodes_xrc_frames() {
    let packets = frames();
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("xrc_wire.pcap");
    let mut w = PcapWriter::create(&path, Resolution::Nanos).unwrap();
    for (i, p) in packets.iter().enumerate() {
        w.write_frame(Duration::from_nanos(1000 * i as u64), &p.emit().unwrap())
            .unwrap();
    }
    w.into_inner().unwrap();
    let out = Command::new("tshark")
        .env("LC_ALL", "C")
        .arg("-r")
        .arg(&path)
        .args([
            "-T",
            "fields",
            "-e",
            "infiniband.bth.opcode",
            "-e",
            "infiniband.bth.destqp",
        ])
        .args(["-e", "infiniband.bth.psn"])
        .output()
        .expect("tshark is required (apt-get install -y tshark)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!(rows.len(), packets.len(), "{text}");
    for (row, p) in rows.iter().zip(&packets) {
        assert_eq!(row[0], p.bth.opcode.as_u8().to_string(), "{text}");
        assert_eq!(row[1], format!("{:#08x}", p.bth.dest_qp));
        assert_eq!(row[2], p.bth.psn.get().to_string());
    }
    let out = Command::new("tshark")
        .env("LC_ALL", "C")
        .arg("-r")
        .arg(&path)
        .args(["-Y", "_ws.malformed || _ws.expert.severity >= warning"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "",
        "frames tshark flags"
    );
}
