//! Byte-exact layouts of the RoCEv2 headers and the opcode table, pinned against the spec
//! (IBTA Vol 1 §9.2, §9.3, Table 38; RFC 791; RFC 768) rather than against the encoder itself.

use std::net::Ipv4Addr;

use mlx5_sim::wire::ipv4::internet_checksum;
use mlx5_sim::wire::{
    icrc, Addressing, Aeth, AtomicAckEth, AtomicEth, Bth, Deth, EmitError, Ieth, ImmDt, MacAddr,
    NakCode, Opcode, Packet, ParseError, Psn, Reth, RnrTimer, Syndrome, WireHeader, BTH_OFFSET,
    ICRC_LEN, IPV4_OFFSET, UDP_OFFSET,
};

fn bytes<H: WireHeader>(h: &H) -> Vec<u8> {
    let mut out = Vec::new();
    h.emit(&mut out);
    assert_eq!(out.len(), H::WIRE_LEN);
    let (back, rest) = H::parse(&out).unwrap();
    assert!(rest.is_empty());
    let mut again = Vec::new();
    back.emit(&mut again);
    assert_eq!(again, out, "parse then emit is the identity");
    out
}

/// (opcode, BTH + extension header length) for every RC/UC/UD opcode of IBTA Vol 1 Table 38
/// and every XRC opcode of Annex A14 (RC's operations at 0xA0, the requests with the 4-byte
/// XRCETH after the BTH).
const HEADER_LEN: [(u8, usize); 84] = [
    (0x00, 12),
    (0x01, 12),
    (0x02, 12),
    (0x03, 16),
    (0x04, 12),
    (0x05, 16),
    (0x06, 28),
    (0x07, 12),
    (0x08, 12),
    (0x09, 16),
    (0x0a, 28),
    (0x0b, 32),
    (0x0c, 28),
    (0x0d, 16),
    (0x0e, 12),
    (0x0f, 16),
    (0x10, 16),
    (0x11, 16),
    (0x12, 24),
    (0x13, 40),
    (0x14, 40),
    (0x16, 16),
    (0x17, 16),
    (0x20, 12),
    (0x21, 12),
    (0x22, 12),
    (0x23, 16),
    (0x24, 12),
    (0x25, 16),
    (0x26, 28),
    (0x27, 12),
    (0x28, 12),
    (0x29, 16),
    (0x2a, 28),
    (0x2b, 32),
    (0x64, 20),
    (0x65, 24),
    (0xa0, 16),
    (0xa1, 16),
    (0xa2, 16),
    (0xa3, 20),
    (0xa4, 16),
    (0xa5, 20),
    (0xa6, 32),
    (0xa7, 16),
    (0xa8, 16),
    (0xa9, 20),
    (0xaa, 32),
    (0xab, 36),
    (0xac, 32),
    (0xad, 16),
    (0xae, 12),
    (0xaf, 16),
    (0xb0, 16),
    (0xb1, 16),
    (0xb2, 24),
    (0xb3, 44),
    (0xb4, 44),
    (0xb6, 20),
    (0xb7, 20),
    // DC (the software ConnectX's own: RC's headers and, on requests, the 16-byte DCETH; 0xdf
    // the disconnect request).
    (0xc0, 28),
    (0xc1, 28),
    (0xc2, 28),
    (0xc3, 32),
    (0xc4, 28),
    (0xc5, 32),
    (0xc6, 44),
    (0xc7, 28),
    (0xc8, 28),
    (0xc9, 32),
    (0xca, 44),
    (0xcb, 48),
    (0xcc, 44),
    (0xcd, 16),
    (0xce, 12),
    (0xcf, 16),
    (0xd0, 16),
    (0xd1, 16),
    (0xd2, 24),
    (0xd3, 56),
    (0xd4, 56),
    (0xd6, 32),
    (0xd7, 32),
    (0xdf, 28),
];

/// Opcodes that carry a payload (SEND, WRITE, READ response).
const WITH_PAYLOAD: [u8; 68] = [
    0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0d, 0x0e, 0x0f, 0x10,
    0x16, 0x17, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2a, 0x2b, 0x64, 0x65,
    0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8, 0xa9, 0xaa, 0xab, 0xad, 0xae, 0xaf, 0xb0,
    0xb6, 0xb7, 0xc0, 0xc1, 0xc2, 0xc3, 0xc4, 0xc5, 0xc6, 0xc7, 0xc8, 0xc9, 0xca, 0xcb, 0xcd, 0xce,
    0xcf, 0xd0, 0xd6, 0xd7,
];

#[test]
fn opcode_table() {
    let valid: Vec<u8> = (0..=255u8)
        .filter(|&b| Opcode::from_u8(b).is_some())
        .collect();
    let expected: Vec<u8> = HEADER_LEN.iter().map(|&(b, _)| b).collect();
    assert_eq!(valid, expected);
    for (byte, len) in HEADER_LEN {
        let op = Opcode::from_u8(byte).unwrap();
        assert_eq!(op.as_u8(), byte);
        let p = Packet::new(addressing(), Bth::new(op, 1, Psn::new(0)));
        assert_eq!(p.transport_header_len(), len, "{op}");
        assert_eq!(op.has_payload(), WITH_PAYLOAD.contains(&byte), "{op}");
        assert_eq!(
            op.is_response(),
            matches!(byte, 0x0d..=0x12 | 0xad..=0xb2 | 0xcd..=0xd2),
            "{op}"
        );
    }
    assert_eq!(Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE.as_u8(), 0x0b);
    assert_eq!(Opcode::UC_SEND_LAST.as_u8(), 0x22);
    assert_eq!(Opcode::UD_SEND_ONLY_WITH_IMMEDIATE.as_u8(), 0x65);
    assert!(Opcode::RC_RDMA_READ_RESPONSE_MIDDLE.is_middle());
    assert!(
        Opcode::RC_SEND_LAST_WITH_INVALIDATE.is_last()
            && Opcode::RC_SEND_LAST_WITH_INVALIDATE.has_ieth()
    );
    assert!(Opcode::RC_COMPARE_SWAP.is_only() && Opcode::RC_COMPARE_SWAP.is_request());
}

#[test]
fn bth_layout() {
    let mut bth = Bth::new(
        Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
        0xab_cdef,
        Psn::new(0x12_3456),
    );
    bth.solicited = true;
    bth.pad_count = 2;
    bth.pkey = 0x1234;
    bth.fecn = true;
    bth.ack_req = true;
    assert_eq!(
        bytes(&bth),
        [0x0b, 0xa0, 0x12, 0x34, 0x80, 0xab, 0xcd, 0xef, 0x80, 0x12, 0x34, 0x56]
    );
    let mut bth = Bth::new(Opcode::UC_SEND_FIRST, 1, Psn::new(0xff_ffff));
    bth.migreq = true;
    bth.becn = true;
    assert_eq!(
        bytes(&bth),
        [0x20, 0x40, 0xff, 0xff, 0x40, 0x00, 0x00, 0x01, 0x00, 0xff, 0xff, 0xff]
    );
}

#[test]
fn bth_rejects_bad_opcode_and_version() {
    let mut raw = [0x04, 0x00, 0xff, 0xff, 0, 0, 0, 1, 0, 0, 0, 1];
    assert!(Bth::parse(&raw).is_ok());
    raw[1] = 0x01; // TVer 1
    assert_eq!(
        Bth::parse(&raw).unwrap_err(),
        ParseError::TransportVersion(1)
    );
    raw[1] = 0;
    raw[0] = 0x15; // RD RESYNC slot, reserved for RC
    assert_eq!(Bth::parse(&raw).unwrap_err(), ParseError::Opcode(0x15));
    assert!(matches!(
        Bth::parse(&raw[..11]),
        Err(ParseError::Truncated {
            needed: 12,
            available: 11,
            ..
        })
    ));
}

#[test]
fn extension_header_layouts() {
    let reth = Reth {
        va: 0x0102_0304_0506_0708,
        rkey: 0x090a_0b0c,
        dma_len: 0x0d0e_0f10,
    };
    assert_eq!(bytes(&reth), (1..=16).collect::<Vec<u8>>());

    let rnr = Aeth {
        syndrome: Syndrome::RnrNak(RnrTimer::new(14).unwrap()),
        msn: 0x00_0102,
    };
    assert_eq!(bytes(&rnr), [0x2e, 0x00, 0x01, 0x02]);
    let nak = Aeth {
        syndrome: Syndrome::Nak(NakCode::RemoteAccessError),
        msn: 5,
    };
    assert_eq!(bytes(&nak), [0x62, 0x00, 0x00, 0x05]);
    let ack = Aeth {
        syndrome: Syndrome::Ack { credits: 3 },
        msn: 0xff_ffff,
    };
    assert_eq!(bytes(&ack), [0x03, 0xff, 0xff, 0xff]);

    let atomic = AtomicEth {
        va: 0x1111_2222_3333_4440,
        rkey: 0x5566_7788,
        swap_add: 0x99aa_bbcc_ddee_ff00,
        compare: 0x0102_0304_0506_0708,
    };
    let expected: [u8; 28] = [
        0x11, 0x11, 0x22, 0x22, 0x33, 0x33, 0x44, 0x40, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb,
        0xcc, 0xdd, 0xee, 0xff, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,
    ];
    assert_eq!(bytes(&atomic), expected);

    assert_eq!(
        bytes(&AtomicAckEth {
            orig: 0x0807_0605_0403_0201
        }),
        [8, 7, 6, 5, 4, 3, 2, 1]
    );
    assert_eq!(bytes(&ImmDt(0xdead_beef)), [0xde, 0xad, 0xbe, 0xef]);
    assert_eq!(bytes(&Ieth { rkey: 0x0000_1234 }), [0, 0, 0x12, 0x34]);
    let deth = Deth {
        qkey: 0x1111_1111,
        src_qp: 0x16,
    };
    assert_eq!(
        bytes(&deth),
        [0x11, 0x11, 0x11, 0x11, 0x00, 0x00, 0x00, 0x16]
    );
}

#[test]
fn aeth_syndromes() {
    for byte in 0..=255u8 {
        let decoded = Syndrome::from_u8(byte);
        let valid = matches!(byte, 0x00..=0x3f | 0x60..=0x64);
        assert_eq!(decoded.is_some(), valid, "syndrome {byte:#04x}");
        if let Some(s) = decoded {
            assert_eq!(s.to_u8(), byte);
        }
    }
    assert_eq!(
        Syndrome::from_u8(0x60),
        Some(Syndrome::Nak(NakCode::PsnSequenceError))
    );
    assert_eq!(
        Syndrome::from_u8(0x61),
        Some(Syndrome::Nak(NakCode::InvalidRequest))
    );
    assert_eq!(
        Syndrome::from_u8(0x63),
        Some(Syndrome::Nak(NakCode::RemoteOperationalError))
    );
    assert_eq!(
        Syndrome::from_u8(0x64),
        Some(Syndrome::Nak(NakCode::InvalidRdRequest))
    );
    assert_eq!(
        Syndrome::from_u8(0x3f),
        Some(Syndrome::RnrNak(RnrTimer::new(31).unwrap()))
    );
    assert_eq!(Syndrome::Ack { credits: 5 }.credit_count(), Some(6));
    assert_eq!(Syndrome::Ack { credits: 30 }.credit_count(), Some(32_768));
    assert_eq!(Syndrome::Ack { credits: 31 }.credit_count(), None);
    assert!(
        Syndrome::Ack { credits: 0 }.is_ack() && !Syndrome::Nak(NakCode::InvalidRequest).is_ack()
    );
    let (parsed, _) = Aeth::parse(&[0x40, 0, 0, 0])
        .map(|(a, r)| (Some(a), r))
        .unwrap_or((None, &[]));
    assert_eq!(parsed, None, "syndrome 0x40 (kind 10) is reserved");
}

#[test]
fn ipv4_checksum_known_vector() {
    // The classic example header (Wikipedia "IPv4 header checksum"): checksum 0xb861.
    let header = [
        0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8, 0x00,
        0x01, 0xc0, 0xa8, 0x00, 0xc7,
    ];
    assert_eq!(internet_checksum(&header), 0xb861);
}

fn addressing() -> Addressing {
    let mut a = Addressing::new(
        MacAddr([0x02, 0, 0, 0, 0, 0x01]),
        MacAddr([0x02, 0, 0, 0, 0, 0x02]),
        Ipv4Addr::new(10, 0, 0, 1),
        Ipv4Addr::new(10, 0, 0, 2),
        0xc000,
    );
    a.dscp = 26;
    a.ecn = mlx5_sim::wire::Ecn::Ect0;
    a.ip_id = 0x0102;
    a
}

fn ud_send_imm() -> Packet {
    let mut p = Packet::new(
        addressing(),
        Bth::new(Opcode::UD_SEND_ONLY_WITH_IMMEDIATE, 0x42, Psn::new(7)),
    );
    p.deth = Some(Deth {
        qkey: 0x1111_1111,
        src_qp: 0x99,
    });
    p.imm = Some(ImmDt(0xcafe_f00d));
    p.payload = b"hello".to_vec();
    p
}

#[test]
fn whole_frame_layout() {
    let p = ud_send_imm();
    let f = p.emit().unwrap();
    // 14 + 20 + 8 + BTH 12 + DETH 8 + ImmDt 4 + payload 5 + pad 3 + ICRC 4.
    assert_eq!(f.len(), 78);
    assert_eq!(p.frame_len(), 78);
    assert_eq!(&f[..14], [2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00]);
    let ip = &f[IPV4_OFFSET..UDP_OFFSET];
    assert_eq!(ip[0], 0x45);
    assert_eq!(ip[1], (26 << 2) | 0b10, "DSCP 26, ECT(0)");
    assert_eq!(u16::from_be_bytes([ip[2], ip[3]]), 78 - 14);
    assert_eq!(
        &ip[4..10],
        [0x01, 0x02, 0x40, 0x00, 64, 17],
        "id, DF, TTL, UDP"
    );
    assert_eq!(internet_checksum(ip), 0, "the header checksum verifies");
    assert_eq!(&ip[12..], [10, 0, 0, 1, 10, 0, 0, 2]);
    let udp = &f[UDP_OFFSET..BTH_OFFSET];
    assert_eq!(udp, [0xc0, 0x00, 0x12, 0xb7, 0x00, 78 - 34, 0x00, 0x00]);
    let t = &f[BTH_OFFSET..];
    assert_eq!(
        &t[..12],
        [0x65, 0x30, 0xff, 0xff, 0, 0, 0, 0x42, 0, 0, 0, 7],
        "pad count 3"
    );
    assert_eq!(&t[12..20], [0x11, 0x11, 0x11, 0x11, 0, 0, 0, 0x99]);
    assert_eq!(&t[20..24], [0xca, 0xfe, 0xf0, 0x0d]);
    assert_eq!(&t[24..32], b"hello\0\0\0");
    let crc = icrc(&f[IPV4_OFFSET..f.len() - ICRC_LEN]).to_le_bytes();
    assert_eq!(&f[f.len() - 4..], crc);

    let mut back = Packet::parse(&f).unwrap();
    assert_eq!(back.bth.pad_count, 3);
    back.bth.pad_count = 0;
    assert_eq!(back, p);
}

#[test]
fn ethernet_padding_is_ignored() {
    let mut ack = Packet::new(addressing(), Bth::new(Opcode::RC_SEND_ONLY, 3, Psn::new(9)));
    ack.payload.clear();
    let mut f = ack.emit().unwrap();
    assert_eq!(f.len(), 58);
    f.resize(60, 0); // a NIC pads to the 60-byte Ethernet minimum
    assert_eq!(Packet::parse(&f).unwrap(), ack);
}

#[test]
fn emit_checks_the_packet_against_its_opcode() {
    let a = addressing();
    let write = Packet::new(a, Bth::new(Opcode::RC_RDMA_WRITE_FIRST, 1, Psn::new(0)));
    assert_eq!(
        write.emit().unwrap_err(),
        EmitError::MissingHeader {
            opcode: Opcode::RC_RDMA_WRITE_FIRST,
            header: "RETH"
        }
    );
    let mut ack = Packet::new(a, Bth::new(Opcode::RC_ACKNOWLEDGE, 1, Psn::new(0)));
    ack.aeth = Some(Aeth {
        syndrome: Syndrome::Ack { credits: 0 },
        msn: 0,
    });
    ack.payload = vec![1];
    assert_eq!(
        ack.emit().unwrap_err(),
        EmitError::UnexpectedPayload(Opcode::RC_ACKNOWLEDGE)
    );
    ack.payload.clear();
    ack.imm = Some(ImmDt(1));
    assert!(matches!(
        ack.emit(),
        Err(EmitError::UnexpectedHeader {
            header: "ImmDt",
            ..
        })
    ));
    ack.imm = None;
    ack.bth.dest_qp = 1 << 24;
    assert!(matches!(
        ack.emit(),
        Err(EmitError::FieldRange {
            field: "BTH DestQP",
            ..
        })
    ));
    ack.bth.dest_qp = 1;
    ack.aeth = Some(Aeth {
        syndrome: Syndrome::Ack { credits: 0 },
        msn: 1 << 24,
    });
    assert!(matches!(
        ack.emit(),
        Err(EmitError::FieldRange {
            field: "AETH MSN",
            ..
        })
    ));
    let mut out = vec![0xaa];
    assert!(ack.emit_into(&mut out).is_err());
    assert_eq!(out, [0xaa], "a failed emit leaves the buffer alone");
}

/// Recomputes the ICRC of a frame whose headers a test edited on purpose.
fn fix_icrc(f: &mut [u8]) {
    let n = f.len();
    let crc = icrc(&f[IPV4_OFFSET..n - ICRC_LEN]);
    f[n - ICRC_LEN..].copy_from_slice(&crc.to_le_bytes());
}

#[test]
fn parse_errors() {
    let good = ud_send_imm().emit().unwrap();
    assert!(Packet::parse(&good).is_ok());

    let mut f = good.clone();
    f[12] = 0x86;
    f[13] = 0xdd;
    assert_eq!(
        Packet::parse(&f).unwrap_err(),
        ParseError::EtherType(0x86dd)
    );

    let mut f = good.clone();
    f[IPV4_OFFSET + 8] = 63; // TTL changed without fixing the header checksum
    assert!(matches!(
        Packet::parse(&f),
        Err(ParseError::Ipv4Checksum { .. })
    ));

    let mut f = good.clone();
    f[UDP_OFFSET + 3] = 0xb8; // port 4792
    assert_eq!(Packet::parse(&f).unwrap_err(), ParseError::UdpPort(4792));

    let mut f = good.clone();
    f[BTH_OFFSET + 1] |= 0x01; // TVer 1, with a valid ICRC
    fix_icrc(&mut f);
    assert_eq!(
        Packet::parse(&f).unwrap_err(),
        ParseError::TransportVersion(1)
    );

    let mut f = good.clone();
    f[BTH_OFFSET] = 0x40; // RD SEND FIRST
    fix_icrc(&mut f);
    assert_eq!(Packet::parse(&f).unwrap_err(), ParseError::Opcode(0x40));

    let mut f = good.clone();
    f[BTH_OFFSET + 20] ^= 0xff; // immediate data, ICRC not fixed
    assert!(matches!(
        Packet::parse(&f),
        Err(ParseError::IcrcMismatch { .. })
    ));

    // FECN/BECN and the ECN bits are outside the ICRC: a switch may set them.
    let mut f = good.clone();
    f[BTH_OFFSET + 4] |= 0x80;
    assert!(Packet::parse(&f).unwrap().bth.fecn);

    for len in 0..good.len() {
        assert!(
            Packet::parse(&good[..len]).is_err(),
            "a frame cut to {len} bytes"
        );
    }
}
