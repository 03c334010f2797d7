//! Property tests of the frame codec: round trips, and no panic on garbage, truncated or
//! corrupted frames (every corruption the ICRC covers is reported as an ICRC mismatch).

use std::net::Ipv4Addr;

use mlx5_sim::wire::{
    icrc, Addressing, Aeth, AtomicAckEth, AtomicEth, Bth, Deth, Ecn, Ieth, ImmDt, MacAddr, NakCode,
    Opcode, Packet, ParseError, Psn, Reth, RnrTimer, Syndrome, Xrceth, BTH_OFFSET, ICRC_LEN,
    IPV4_OFFSET, UDP_OFFSET,
};
use proptest::prelude::*;
use proptest::test_runner::RngSeed;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 128,
        rng_seed: RngSeed::Fixed(0x4791),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn opcodes() -> Vec<Opcode> {
    (0..=255u8).filter_map(Opcode::from_u8).collect()
}

prop_compose! {
    fn addressing()(
        src_mac: [u8; 6], dst_mac: [u8; 6], src_ip: u32, dst_ip: u32, port: u16,
        dscp in 0u8..64, ecn in 0u8..4, ttl: u8, ip_id: u16,
    ) -> Addressing {
        let mut a = Addressing::new(MacAddr(src_mac), MacAddr(dst_mac), Ipv4Addr::from(src_ip),
            Ipv4Addr::from(dst_ip), port);
        a.dscp = dscp;
        a.ecn = Ecn::from_bits(ecn);
        a.ttl = ttl;
        a.ip_id = ip_id;
        a
    }
}

fn syndrome() -> impl Strategy<Value = Syndrome> {
    prop_oneof![
        (0u8..32).prop_map(|credits| Syndrome::Ack { credits }),
        (0u8..32).prop_map(|c| Syndrome::RnrNak(RnrTimer::from_low_bits(c))),
        (0u8..5)
            .prop_map(|c| Syndrome::Nak(NakCode::from_bits(c).unwrap_or(NakCode::InvalidRequest))),
    ]
}

prop_compose! {
    fn packet()(
        op in proptest::sample::select(opcodes()),
        addr in addressing(),
        flags in 0u8..32, pkey: u16, qp in 0u32..1 << 24, psn in 0u32..1 << 24,
        va: u64, rkey: u32, len: u32, swap: u64, cmp: u64, orig: u64, imm: u32,
        qkey: u32, src_qp in 0u32..1 << 24, msn in 0u32..1 << 24, syndrome in syndrome(),
        payload in proptest::collection::vec(any::<u8>(), 0..300),
    ) -> Packet {
        let mut bth = Bth::new(op, qp, Psn::new(psn));
        bth.solicited = flags & 1 != 0;
        bth.migreq = flags & 2 != 0;
        bth.fecn = flags & 4 != 0;
        bth.becn = flags & 8 != 0;
        bth.ack_req = flags & 16 != 0;
        bth.pkey = pkey;
        let mut p = Packet::new(addr, bth);
        p.xrceth = op.has_xrceth().then_some(Xrceth { srqn: src_qp });
        p.dceth = op.has_dceth().then_some(mlx5_sim::wire::Dceth { key: va, connect: flags & 1 != 0, dci: src_qp });
        p.deth = op.has_deth().then_some(Deth { qkey, src_qp });
        p.reth = op.has_reth().then_some(Reth { va, rkey, dma_len: len });
        p.atomic_eth = op.has_atomic_eth().then_some(AtomicEth { va, rkey, swap_add: swap, compare: cmp });
        p.aeth = op.has_aeth().then_some(Aeth { syndrome, msn });
        p.atomic_ack_eth = op.has_atomic_ack_eth().then_some(AtomicAckEth { orig });
        p.imm = op.has_immediate().then_some(ImmDt(imm));
        p.ieth = op.has_ieth().then_some(Ieth { rkey });
        if op.has_payload() {
            p.payload = payload;
        }
        p.bth.pad_count = Packet::pad_for(p.payload.len());
        p
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn emit_then_parse_is_the_identity(p in packet()) {
        let frame = p.emit().unwrap();
        prop_assert_eq!(frame.len(), p.frame_len());
        prop_assert_eq!(frame.len() % 4, (IPV4_OFFSET + 20 + 8) % 4, "transport part is 4-byte aligned");
        let back = Packet::parse(&frame).unwrap();
        prop_assert_eq!(&back, &p);
        prop_assert_eq!(back.emit().unwrap(), frame);
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let _ = Packet::parse(&bytes);
    }

    /// Random transport bytes behind valid Ethernet/IPv4/UDP headers and a correct ICRC: the
    /// parser reaches the BTH and extension headers and must still not panic.
    #[test]
    fn random_transport_bytes_never_panic(
        p in packet(),
        body in proptest::collection::vec(any::<u8>(), 12..200),
    ) {
        let mut frame = p.emit().unwrap();
        frame.truncate(BTH_OFFSET);
        frame.extend_from_slice(&body);
        frame.extend_from_slice(&[0; ICRC_LEN]);
        let udp_len = (frame.len() - UDP_OFFSET) as u16;
        frame[UDP_OFFSET + 4..UDP_OFFSET + 6].copy_from_slice(&udp_len.to_be_bytes());
        let ip_len = (frame.len() - IPV4_OFFSET) as u16;
        frame[IPV4_OFFSET + 2..IPV4_OFFSET + 4].copy_from_slice(&ip_len.to_be_bytes());
        frame[IPV4_OFFSET + 10..IPV4_OFFSET + 12].fill(0);
        let sum = mlx5_sim::wire::ipv4::internet_checksum(&frame[IPV4_OFFSET..UDP_OFFSET]);
        frame[IPV4_OFFSET + 10..IPV4_OFFSET + 12].copy_from_slice(&sum.to_be_bytes());
        let n = frame.len();
        let crc = icrc(&frame[IPV4_OFFSET..n - ICRC_LEN]);
        frame[n - ICRC_LEN..].copy_from_slice(&crc.to_le_bytes());
        match Packet::parse(&frame) {
            Err(ParseError::IcrcMismatch { .. }) => prop_assert!(false, "the ICRC was fixed"),
            Err(ParseError::Truncated { .. } | ParseError::Opcode(_) | ParseError::TransportVersion(_)
                | ParseError::Syndrome(_) | ParseError::Pad { .. } | ParseError::UnexpectedPayload(..)) => {}
            Err(e) => prop_assert!(false, "outer headers are valid, got {}", e),
            Ok(q) => prop_assert_eq!(q.emit().unwrap().len(), frame.len()),
        }
    }

    /// One corrupted byte: covered by the ICRC (BTH onwards, bar the FECN/BECN byte) it is an
    /// ICRC mismatch; in the IPv4 header the checksum catches it; the UDP checksum and the
    /// Ethernet addresses are not checked.
    #[test]
    fn corrupted_byte(p in packet(), pos_seed: usize, flip in 1u8..=255) {
        let frame = p.emit().unwrap();
        let pos = pos_seed % frame.len();
        let mut bad = frame.clone();
        bad[pos] ^= flip;
        let result = Packet::parse(&bad);
        if pos < 12 {
            prop_assert!(result.is_ok());
        } else if pos < IPV4_OFFSET {
            prop_assert!(matches!(result, Err(ParseError::EtherType(_))));
        } else if pos < UDP_OFFSET {
            prop_assert!(result.is_err());
        } else if pos == UDP_OFFSET + 6 || pos == UDP_OFFSET + 7 {
            prop_assert_eq!(result.unwrap(), p);
        } else if pos == UDP_OFFSET + 2 || pos == UDP_OFFSET + 3 {
            prop_assert!(matches!(result, Err(ParseError::UdpPort(_))), "{:?}", result);
        } else if pos == UDP_OFFSET + 4 || pos == UDP_OFFSET + 5 {
            prop_assert!(matches!(result, Err(ParseError::UdpLength { .. })), "{:?}", result);
        } else if pos == BTH_OFFSET + 4 {
            // FECN, BECN and reserved bits: masked in the ICRC; the QPN bytes follow.
            let q = result.unwrap();
            prop_assert_eq!(q.bth.dest_qp, p.bth.dest_qp);
        } else {
            prop_assert!(matches!(result, Err(ParseError::IcrcMismatch { .. })), "byte {} gave {:?}", pos, result);
        }
    }

    #[test]
    fn truncated_frames_are_errors(p in packet(), cut_seed: usize) {
        let frame = p.emit().unwrap();
        let cut = cut_seed % frame.len();
        prop_assert!(Packet::parse(&frame[..cut]).is_err());
    }
}
