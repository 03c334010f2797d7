//! Segmentation of messages into packets (IBTA Vol 1 §9.4).

use mlx5_hw::Mtu;
use mlx5_sim::wire::{
    packet_count, segment, MessageKind, Opcode, Segment, SegmentError, Transport,
};
use proptest::prelude::*;

fn seg(t: Transport, kind: MessageKind, len: u32, mtu: Mtu) -> Vec<(u8, u32, u32)> {
    segment(t, kind, len, mtu)
        .unwrap()
        .map(|s| (s.opcode.as_u8(), s.offset, s.len))
        .collect()
}

#[test]
fn rc_write_with_immediate_over_three_packets() {
    let s = seg(
        Transport::Rc,
        MessageKind::RdmaWriteWithImmediate,
        2500,
        Mtu::Mtu1024,
    );
    assert_eq!(s, [(0x06, 0, 1024), (0x07, 1024, 1024), (0x09, 2048, 452)]);
    assert!(Opcode::RC_RDMA_WRITE_FIRST.has_reth() && !Opcode::RC_RDMA_WRITE_MIDDLE.has_reth());
}

#[test]
fn exact_multiple_of_the_mtu_has_a_full_last_packet() {
    let s = seg(Transport::Uc, MessageKind::Send, 512, Mtu::Mtu256);
    assert_eq!(s, [(0x20, 0, 256), (0x22, 256, 256)]);
    let s = seg(Transport::Rc, MessageKind::ReadResponse, 4096, Mtu::Mtu4096);
    assert_eq!(s, [(0x10, 0, 4096)]);
    let s = seg(Transport::Rc, MessageKind::ReadResponse, 4097, Mtu::Mtu4096);
    assert_eq!(s, [(0x0d, 0, 4096), (0x0f, 4096, 1)]);
}

#[test]
fn zero_length_messages_are_one_only_packet() {
    assert_eq!(
        seg(Transport::Rc, MessageKind::Send, 0, Mtu::Mtu1024),
        [(0x04, 0, 0)]
    );
    assert_eq!(
        seg(
            Transport::Rc,
            MessageKind::SendWithImmediate,
            0,
            Mtu::Mtu256
        ),
        [(0x05, 0, 0)]
    );
    assert_eq!(
        seg(Transport::Uc, MessageKind::RdmaWrite, 0, Mtu::Mtu256),
        [(0x2a, 0, 0)]
    );
    assert_eq!(
        seg(Transport::Rc, MessageKind::ReadResponse, 0, Mtu::Mtu256),
        [(0x10, 0, 0)]
    );
    assert_eq!(
        seg(
            Transport::Ud,
            MessageKind::SendWithImmediate,
            0,
            Mtu::Mtu256
        ),
        [(0x65, 0, 0)]
    );
    assert_eq!(packet_count(0, Mtu::Mtu4096), 1);
}

#[test]
fn invalidate_on_the_last_packet_only() {
    let s = seg(
        Transport::Rc,
        MessageKind::SendWithInvalidate,
        300,
        Mtu::Mtu256,
    );
    assert_eq!(s, [(0x00, 0, 256), (0x16, 256, 44)]);
}

#[test]
fn transports_reject_what_they_do_not_carry() {
    let unsupported = |t, kind| {
        matches!(
            segment(t, kind, 10, Mtu::Mtu1024),
            Err(SegmentError::Unsupported { .. })
        )
    };
    assert!(unsupported(Transport::Ud, MessageKind::RdmaWrite));
    assert!(unsupported(Transport::Ud, MessageKind::ReadResponse));
    assert!(unsupported(Transport::Uc, MessageKind::ReadResponse));
    assert!(unsupported(Transport::Uc, MessageKind::SendWithInvalidate));
    assert_eq!(
        segment(Transport::Ud, MessageKind::Send, 1025, Mtu::Mtu1024).unwrap_err(),
        SegmentError::UdTooLong {
            len: 1025,
            mtu: 1024
        }
    );
    assert_eq!(
        seg(Transport::Ud, MessageKind::Send, 1024, Mtu::Mtu1024),
        [(0x64, 0, 1024)]
    );
}

const KINDS: [MessageKind; 6] = [
    MessageKind::Send,
    MessageKind::SendWithImmediate,
    MessageKind::SendWithInvalidate,
    MessageKind::RdmaWrite,
    MessageKind::RdmaWriteWithImmediate,
    MessageKind::ReadResponse,
];
const MTUS: [Mtu; 5] = [
    Mtu::Mtu256,
    Mtu::Mtu512,
    Mtu::Mtu1024,
    Mtu::Mtu2048,
    Mtu::Mtu4096,
];

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        rng_seed: proptest::test_runner::RngSeed::Fixed(0x5e6),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// The packets tile the message in order, every packet but the last is a full MTU, the
    /// opcodes follow first/middle*/last or only, and the message-level headers sit where
    /// IBTA §9.4 puts them.
    #[test]
    fn segments_tile_the_message(len in 0u32..20_000, k in 0usize..6, m in 0usize..5, uc: bool) {
        let (kind, mtu) = (KINDS[k], MTUS[m]);
        let t = if uc && !matches!(kind, MessageKind::ReadResponse | MessageKind::SendWithInvalidate) {
            Transport::Uc
        } else {
            Transport::Rc
        };
        let segs: Vec<Segment> = segment(t, kind, len, mtu).unwrap().collect();
        prop_assert_eq!(segs.len() as u32, packet_count(len, mtu));
        let mut next = 0;
        for (i, s) in segs.iter().enumerate() {
            let (first, last) = (i == 0, i + 1 == segs.len());
            prop_assert_eq!(s.index as usize, i);
            prop_assert_eq!(s.offset, next);
            next += s.len;
            prop_assert_eq!(s.opcode.transport(), t);
            prop_assert_eq!(s.opcode.is_first(), first);
            prop_assert_eq!(s.opcode.is_last(), last);
            if !last {
                prop_assert_eq!(s.len, mtu.bytes());
            } else {
                prop_assert!(s.len <= mtu.bytes() && (s.len > 0 || len == 0));
            }
            let imm = matches!(kind, MessageKind::SendWithImmediate | MessageKind::RdmaWriteWithImmediate);
            prop_assert_eq!(s.opcode.has_immediate(), imm && last);
            prop_assert_eq!(s.opcode.has_ieth(), kind == MessageKind::SendWithInvalidate && last);
            prop_assert_eq!(s.opcode.has_reth(), s.opcode.is_rdma_write() && first);
        }
        prop_assert_eq!(next, len);
    }
}
