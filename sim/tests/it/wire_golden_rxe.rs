//! Golden vectors: RoCEv2 frames put on the wire by the Linux kernel's Soft-RoCE (rdma_rxe,
//! Debian kernel 6.1.0-56, rdma-core 44), captured with tcpdump on veth0 of the rxe VM by
//! `sim/tests/data/capture-rxe.sh` (`ibv_rc_pingpong`, `ib_write_lat`, `ib_read_lat`,
//! `ib_atomic_lat`, `ibv_ud_pingpong`, `ib_send_lat` between rxe1 192.0.2.2 and rxe0 192.0.2.1).
//!
//! They check the parser field by field, the ICRC computation (the kernel computes it in
//! `rxe_icrc.c`; tshark does not verify it), and that emitting the parsed packet reproduces the
//! frame byte for byte.

use std::net::Ipv4Addr;

use mlx5_sim::pcap::PcapReader;
use mlx5_sim::wire::{
    icrc, Aeth, AtomicAckEth, AtomicEth, Ecn, MacAddr, Opcode, Packet, ParseError, Psn, Reth,
    Syndrome, ICRC_LEN, IPV4_OFFSET,
};

const MAC_RXE0: MacAddr = MacAddr([0x2e, 0xc2, 0xf1, 0x76, 0x85, 0xa5]);
const MAC_RXE1: MacAddr = MacAddr([0x4e, 0x4f, 0x5d, 0xd2, 0x78, 0x0a]);
const IP_RXE0: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const IP_RXE1: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);

/// Frame 4 of the capture: RC ACKNOWLEDGE from rxe0 to QP 0x11, PSN 0x3988f0, AETH ACK with the
/// invalid credit code (0x1f), MSN 1.
#[rustfmt::skip]
const RC_ACK: [u8; 62] = [
    0x4e, 0x4f, 0x5d, 0xd2, 0x78, 0x0a, 0x2e, 0xc2, 0xf1, 0x76, 0x85, 0xa5, 0x08, 0x00, 0x45, 0x00,
    0x00, 0x30, 0xb6, 0x49, 0x40, 0x00, 0x40, 0x11, 0x00, 0x70, 0xc0, 0x00, 0x02, 0x01, 0xc0, 0x00,
    0x02, 0x02, 0xc1, 0x21, 0x12, 0xb7, 0x00, 0x1c, 0x00, 0x00, 0x11, 0x00, 0xff, 0xff, 0x00, 0x00,
    0x00, 0x11, 0x00, 0x39, 0x88, 0xf0, 0x1f, 0x00, 0x00, 0x01, 0x88, 0x8f, 0x25, 0xff,
];

/// Frame 57: RC RDMA READ request (AckReq set) from rxe1 to QP 0x13 for 3000 bytes.
#[rustfmt::skip]
const RC_READ_REQUEST: [u8; 74] = [
    0x2e, 0xc2, 0xf1, 0x76, 0x85, 0xa5, 0x4e, 0x4f, 0x5d, 0xd2, 0x78, 0x0a, 0x08, 0x00, 0x45, 0x00,
    0x00, 0x3c, 0x68, 0x6f, 0x40, 0x00, 0x40, 0x11, 0x4e, 0x3e, 0xc0, 0x00, 0x02, 0x02, 0xc0, 0x00,
    0x02, 0x01, 0xc1, 0x69, 0x12, 0xb7, 0x00, 0x28, 0x00, 0x00, 0x0c, 0x00, 0xff, 0xff, 0x00, 0x00,
    0x00, 0x13, 0x80, 0xbd, 0x89, 0x97, 0x00, 0x00, 0x55, 0x64, 0x97, 0x5a, 0x50, 0x00, 0x00, 0x00,
    0x04, 0x3b, 0x00, 0x00, 0x0b, 0xb8, 0xd5, 0xeb, 0x2b, 0x43,
];

/// Frame 77: RC FETCH_ADD of 1 from rxe1 to QP 0x14.
#[rustfmt::skip]
const RC_FETCH_ADD: [u8; 86] = [
    0x2e, 0xc2, 0xf1, 0x76, 0x85, 0xa5, 0x4e, 0x4f, 0x5d, 0xd2, 0x78, 0x0a, 0x08, 0x00, 0x45, 0x00,
    0x00, 0x48, 0x6a, 0x04, 0x40, 0x00, 0x40, 0x11, 0x4c, 0x9d, 0xc0, 0x00, 0x02, 0x02, 0xc0, 0x00,
    0x02, 0x01, 0xc1, 0x90, 0x12, 0xb7, 0x00, 0x34, 0x00, 0x00, 0x14, 0x00, 0xff, 0xff, 0x00, 0x00,
    0x00, 0x14, 0x80, 0x47, 0xa0, 0xa8, 0x00, 0x00, 0x56, 0x3c, 0x97, 0x71, 0xe0, 0x00, 0x00, 0x00,
    0x05, 0x76, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0xcc, 0xca, 0x3c, 0x5d,
];

/// Frame 78: the ATOMIC ACKNOWLEDGE of frame 77 (original value from uninitialised memory).
#[rustfmt::skip]
const RC_ATOMIC_ACK: [u8; 70] = [
    0x4e, 0x4f, 0x5d, 0xd2, 0x78, 0x0a, 0x2e, 0xc2, 0xf1, 0x76, 0x85, 0xa5, 0x08, 0x00, 0x45, 0x00,
    0x00, 0x38, 0xb9, 0x0a, 0x40, 0x00, 0x40, 0x11, 0xfd, 0xa6, 0xc0, 0x00, 0x02, 0x01, 0xc0, 0x00,
    0x02, 0x02, 0xc1, 0x90, 0x12, 0xb7, 0x00, 0x24, 0x00, 0x00, 0x12, 0x00, 0xff, 0xff, 0x00, 0x00,
    0x00, 0x14, 0x00, 0x47, 0xa0, 0xa8, 0x1f, 0x00, 0x00, 0x01, 0x7d, 0xa7, 0xbe, 0x6a, 0x72, 0x6c,
    0xfd, 0x24, 0xa0, 0xc9, 0x56, 0x76,
];

/// The ICRC as the frame carries it (its last 4 bytes, least significant first).
fn trailer_icrc(frame: &[u8]) -> u32 {
    let n = frame.len();
    u32::from_le_bytes([frame[n - 4], frame[n - 3], frame[n - 2], frame[n - 1]])
}

#[test]
fn icrc_matches_the_kernel() {
    for frame in [&RC_ACK[..], &RC_READ_REQUEST, &RC_FETCH_ADD, &RC_ATOMIC_ACK] {
        let datagram = &frame[IPV4_OFFSET..frame.len() - ICRC_LEN];
        assert_eq!(icrc(datagram), trailer_icrc(frame), "frame {frame:02x?}");
    }
}

#[test]
fn ack() {
    let p = Packet::parse(&RC_ACK).unwrap();
    assert_eq!(p.addr.src_mac, MAC_RXE0);
    assert_eq!(p.addr.dst_mac, MAC_RXE1);
    assert_eq!((p.addr.src_ip, p.addr.dst_ip), (IP_RXE0, IP_RXE1));
    assert_eq!(p.addr.udp_src_port, 0xc121);
    assert_eq!(
        (p.addr.dscp, p.addr.ecn, p.addr.ttl, p.addr.ip_id),
        (0, Ecn::NotEct, 64, 0xb649)
    );
    assert_eq!(p.bth.opcode, Opcode::RC_ACKNOWLEDGE);
    assert_eq!(p.bth.pkey, 0xffff);
    assert_eq!(p.bth.dest_qp, 0x11);
    assert_eq!(p.bth.psn, Psn::new(0x3988f0));
    assert!(!p.bth.ack_req && !p.bth.solicited && !p.bth.fecn && !p.bth.becn);
    let aeth = Aeth {
        syndrome: Syndrome::Ack {
            credits: Syndrome::CREDITS_INVALID,
        },
        msn: 1,
    };
    assert_eq!(p.aeth, Some(aeth));
    assert_eq!(p.aeth.unwrap().syndrome.credit_count(), None);
    assert!(p.payload.is_empty());
    assert_eq!(p.emit().unwrap(), RC_ACK);
}

#[test]
fn read_request() {
    let p = Packet::parse(&RC_READ_REQUEST).unwrap();
    assert_eq!(p.bth.opcode, Opcode::RC_RDMA_READ_REQUEST);
    assert_eq!(p.bth.dest_qp, 0x13);
    assert_eq!(p.bth.psn, Psn::new(0xbd8997));
    assert!(p.bth.ack_req);
    let reth = Reth {
        va: 0x0000_5564_975a_5000,
        rkey: 0x43b,
        dma_len: 3000,
    };
    assert_eq!(p.reth, Some(reth));
    assert_eq!((p.aeth, p.imm, p.deth), (None, None, None));
    assert_eq!(p.emit().unwrap(), RC_READ_REQUEST);
}

#[test]
fn fetch_add_and_its_atomic_ack() {
    let req = Packet::parse(&RC_FETCH_ADD).unwrap();
    assert_eq!(req.bth.opcode, Opcode::RC_FETCH_ADD);
    assert_eq!((req.bth.dest_qp, req.bth.psn), (0x14, Psn::new(0x47a0a8)));
    let eth = AtomicEth {
        va: 0x0000_563c_9771_e000,
        rkey: 0x576,
        swap_add: 1,
        compare: 0,
    };
    assert_eq!(req.atomic_eth, Some(eth));
    assert_eq!(req.emit().unwrap(), RC_FETCH_ADD);

    let ack = Packet::parse(&RC_ATOMIC_ACK).unwrap();
    assert_eq!(ack.bth.opcode, Opcode::RC_ATOMIC_ACKNOWLEDGE);
    assert_eq!(ack.bth.psn, req.bth.psn);
    let mut reverse = req.addr.reversed();
    reverse.ip_id = ack.addr.ip_id; // each host numbers its own datagrams
    assert_eq!(ack.addr, reverse);
    assert_eq!(
        ack.aeth.map(|a| a.syndrome),
        Some(Syndrome::Ack { credits: 0x1f })
    );
    assert_eq!(
        ack.atomic_ack_eth,
        Some(AtomicAckEth {
            orig: 0x7da7_be6a_726c_fd24
        })
    );
    assert_eq!(ack.emit().unwrap(), RC_ATOMIC_ACK);
}

#[test]
fn a_flipped_bit_is_an_icrc_mismatch() {
    let mut frame = RC_READ_REQUEST;
    frame[60] ^= 0x01; // inside the RETH's R_Key
    match Packet::parse(&frame) {
        Err(ParseError::IcrcMismatch { found, .. }) => assert_eq!(found, trailer_icrc(&frame)),
        other => panic!("expected an ICRC mismatch, got {other:?}"),
    }
}

#[test]
fn every_frame_of_the_capture() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/rxe-6.1.pcap");
    let mut seen = std::collections::BTreeSet::new();
    let mut n = 0;
    for record in PcapReader::open(path).unwrap() {
        let record = record.unwrap();
        let p = Packet::parse(&record.data).unwrap_or_else(|e| panic!("frame {}: {e}", n + 1));
        assert_eq!(
            p.emit().unwrap(),
            record.data,
            "frame {} re-emits identically",
            n + 1
        );
        seen.insert(p.bth.opcode.as_u8());
        n += 1;
    }
    assert_eq!(n, 20);
    // SEND F/M/L/ONLY, WRITE F/M/L, READ request and responses, ACK, atomics, UD SEND ONLY.
    let expected = [
        0x00, 0x01, 0x02, 0x04, 0x06, 0x07, 0x08, 0x0c, 0x0d, 0x0e, 0x0f, 0x11, 0x12,
    ];
    let expected = expected.into_iter().chain([0x13, 0x14, 0x64]).collect();
    assert_eq!(seen, expected);
}
