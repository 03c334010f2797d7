//! The data path on the software ConnectX, RC: every opcode with data checked byte for byte,
//! inline and gather lists, immediates, BlueFlame and doorbells, unsignaled runs.

use crate::datapath_support;

use datapath_support::*;
use mlx5_qp::{SendWr, WcFlags, WcOpcode, WcStatus};

#[test]
fn rc_write_inline_and_gather() {
    let (f, mut a, b) = pair(&Opts::default());
    let msg: Vec<u8> = (0..100u8).collect();
    a.qp.post(&SendWr::write(1, b.buf.remote(0)).inline(&msg).signaled())
        .unwrap();
    let wcs = pump(&f, &mut a.cq, &mut a.qp, 4);
    assert_eq!(wcs.len(), 1, "{wcs:?}");
    assert_eq!(
        (wcs[0].wr_id(), wcs[0].status(), wcs[0].opcode()),
        (1, WcStatus::Success, WcOpcode::RdmaWrite)
    );
    assert_eq!(&b.buf.bytes()[..100], &msg[..]);

    // Gather from three pieces of the local buffer.
    a.buf.bytes_mut()[1000..1010].copy_from_slice(b"0123456789");
    a.buf.bytes_mut()[2000..2005].copy_from_slice(b"abcde");
    a.buf.bytes_mut()[3000..3003].copy_from_slice(b"XYZ");
    let sg = [a.buf.sge(1000, 10), a.buf.sge(2000, 5), a.buf.sge(3000, 3)];
    a.qp.post(&SendWr::write(2, b.buf.remote(500)).sges(&sg).signaled())
        .unwrap();
    let wcs = pump(&f, &mut a.cq, &mut a.qp, 4);
    assert_eq!(wcs.len(), 1);
    assert_eq!(&b.buf.bytes()[500..518], b"0123456789abcdeXYZ");
    no_driver_bugs(&f);
}

#[test]
fn rc_send_and_send_imm_land_in_receives() {
    let (f, mut a, mut b) = pair(&Opts::default());
    b.qp.post_recv(10, &[b.buf.sge(0, 256)]).unwrap();
    b.qp.post_recv(11, &[b.buf.sge(256, 16), b.buf.sge(512, 64)])
        .unwrap();
    let msg = b"a message sent inline";
    a.qp.post(&SendWr::send(1).inline(msg).signaled()).unwrap();
    a.buf.bytes_mut()[..40].copy_from_slice(&[7u8; 40]);
    a.qp.post(
        &SendWr::send_imm(2, 0xcafe_f00d)
            .sges(&[a.buf.sge(0, 40)])
            .signaled(),
    )
    .unwrap();
    let wa = pump(&f, &mut a.cq, &mut a.qp, 4);
    assert_eq!(
        wa.iter()
            .map(|w| (w.wr_id(), w.opcode()))
            .collect::<Vec<_>>(),
        vec![(1, WcOpcode::Send), (2, WcOpcode::Send)]
    );
    let wb = pump(&f, &mut b.cq, &mut b.qp, 4);
    assert_eq!(wb.len(), 2, "{wb:?}");
    assert_eq!(
        (wb[0].wr_id(), wb[0].opcode(), wb[0].byte_len()),
        (10, WcOpcode::Recv, msg.len() as u32)
    );
    assert_eq!(&b.buf.bytes()[..msg.len()], msg);
    assert_eq!(
        (wb[1].wr_id(), wb[1].byte_len(), wb[1].imm_data()),
        (11, 40, 0xcafe_f00d)
    );
    assert!(wb[1].flags().contains(WcFlags::WITH_IMM));
    assert_eq!(&b.buf.bytes()[256..272], &[7u8; 16]);
    assert_eq!(&b.buf.bytes()[512..536], &[7u8; 24]);
    assert_eq!(wb[1].src_qp(), a.info.qpn);
    no_driver_bugs(&f);
}

#[test]
fn rc_write_imm_consumes_a_receive() {
    let (f, mut a, mut b) = pair(&Opts::default());
    b.qp.post_recv(50, &[]).unwrap();
    a.qp.post(
        &SendWr::write_imm(3, b.buf.remote(64), 0x0102_0304)
            .inline(b"imm write")
            .signaled(),
    )
    .unwrap();
    let wa = pump(&f, &mut a.cq, &mut a.qp, 4);
    assert_eq!((wa[0].wr_id(), wa[0].opcode()), (3, WcOpcode::RdmaWrite));
    let wb = pump(&f, &mut b.cq, &mut b.qp, 4);
    assert_eq!(wb.len(), 1);
    assert_eq!(
        (wb[0].wr_id(), wb[0].opcode(), wb[0].imm_data()),
        (50, WcOpcode::RecvRdmaWithImm, 0x0102_0304)
    );
    assert_eq!(wb[0].byte_len(), 9);
    assert_eq!(&b.buf.bytes()[64..73], b"imm write");
    no_driver_bugs(&f);
}

#[test]
fn rc_read_scatters_into_the_local_buffer() {
    let (f, mut a, mut b) = pair(&Opts::default());
    let src: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
    b.buf.bytes_mut()[4096..7096].copy_from_slice(&src);
    let sg = [a.buf.sge(100, 1000), a.buf.sge(5000, 2000)];
    a.qp.post(&SendWr::read(9, b.buf.remote(4096)).sges(&sg).signaled())
        .unwrap();
    let wa = pump(&f, &mut a.cq, &mut a.qp, 4);
    assert_eq!(wa.len(), 1, "{wa:?}");
    assert_eq!(
        (wa[0].status(), wa[0].opcode(), wa[0].byte_len()),
        (WcStatus::Success, WcOpcode::RdmaRead, 3000)
    );
    assert_eq!(&a.buf.bytes()[100..1100], &src[..1000]);
    assert_eq!(&a.buf.bytes()[5000..7000], &src[1000..]);
    no_driver_bugs(&f);
}

fn ne64(b: &[u8], off: usize) -> u64 {
    u64::from_ne_bytes(b[off..off + 8].try_into().unwrap())
}
fn ne32(b: &[u8], off: usize) -> u32 {
    u32::from_ne_bytes(b[off..off + 4].try_into().unwrap())
}
fn be32(b: &[u8], off: usize) -> u32 {
    u32::from_be_bytes(b[off..off + 4].try_into().unwrap())
}

#[test]
fn rc_atomics_plain_and_masked() {
    let (f, mut a, mut b) = pair(&Opts::default());
    // Remote words are in host order, and so are 8-byte replies: the software ConnectX runs
    // atomics in the host-endianness mode `mlx5_core` selects; 32-bit masked replies are
    // big-endian (`docs/sources.md` §3, `docs/software-connectx.md`).
    b.buf.bytes_mut()[0..8].copy_from_slice(&100u64.to_ne_bytes());
    let r = b.buf.remote(0);
    let l = a.buf.sge(0, 8);
    a.qp.post(&SendWr::fetch_add(1, r, l, 5).signaled())
        .unwrap();
    let w = pump(&f, &mut a.cq, &mut a.qp, 2);
    assert_eq!((w[0].opcode(), w[0].byte_len()), (WcOpcode::FetchAdd, 8));
    assert_eq!(ne64(a.buf.bytes(), 0), 100);
    assert_eq!(ne64(b.buf.bytes(), 0), 105);

    a.qp.post(&SendWr::comp_swap(2, r, a.buf.sge(8, 8), 105, 7).signaled())
        .unwrap();
    a.qp.post(&SendWr::comp_swap(3, r, a.buf.sge(16, 8), 105, 9).signaled())
        .unwrap();
    let w = pump(&f, &mut a.cq, &mut a.qp, 4);
    assert_eq!(
        w.iter().map(|w| w.opcode()).collect::<Vec<_>>(),
        vec![WcOpcode::CompSwap; 2]
    );
    assert_eq!(ne64(a.buf.bytes(), 8), 105, "first CAS matched");
    assert_eq!(
        ne64(a.buf.bytes(), 16),
        7,
        "second CAS saw the swapped value"
    );
    assert_eq!(ne64(b.buf.bytes(), 0), 7);

    // Masked 64-bit CAS: compare only the low byte, swap only the high byte.
    b.buf.bytes_mut()[64..72].copy_from_slice(&0x1100_0000_0000_0022u64.to_ne_bytes());
    a.qp.post(
        &SendWr::masked_comp_swap64(
            4,
            b.buf.remote(64),
            a.buf.sge(24, 8),
            0x22,
            0xff,
            0xaa << 56,
            0xff << 56,
        )
        .signaled(),
    )
    .unwrap();
    // Masked 64-bit FA with a field boundary at bit 7: the low byte wraps without carry.
    b.buf.bytes_mut()[72..80].copy_from_slice(&0x0000_0000_0000_01ffu64.to_ne_bytes());
    a.qp.post(
        &SendWr::masked_fetch_add64(5, b.buf.remote(72), a.buf.sge(32, 8), 1, 0x80).signaled(),
    )
    .unwrap();
    // 32-bit variants at 4-byte aligned addresses.
    b.buf.bytes_mut()[84..88].copy_from_slice(&0x0000_1234u32.to_ne_bytes());
    a.qp.post(
        &SendWr::masked_comp_swap32(
            6,
            b.buf.remote(84),
            a.buf.sge(40, 4),
            0x34,
            0xff,
            0xab00_0000,
            0xff00_0000,
        )
        .signaled(),
    )
    .unwrap();
    b.buf.bytes_mut()[88..92].copy_from_slice(&0x0001_ffffu32.to_ne_bytes());
    a.qp.post(
        &SendWr::masked_fetch_add32(7, b.buf.remote(88), a.buf.sge(44, 4), 1, 0x8000).signaled(),
    )
    .unwrap();
    let w = pump(&f, &mut a.cq, &mut a.qp, 8);
    assert_eq!(w.len(), 4, "{w:?}");
    assert!(w.iter().all(|w| w.status() == WcStatus::Success));
    assert_eq!(
        w.iter()
            .map(|w| (w.opcode(), w.byte_len()))
            .collect::<Vec<_>>(),
        vec![
            (WcOpcode::MaskedCompSwap, 8),
            (WcOpcode::MaskedFetchAdd, 8),
            (WcOpcode::MaskedCompSwap, 4),
            (WcOpcode::MaskedFetchAdd, 4)
        ]
    );
    assert_eq!(ne64(b.buf.bytes(), 64), 0xaa00_0000_0000_0022);
    assert_eq!(ne64(a.buf.bytes(), 24), 0x1100_0000_0000_0022);
    assert_eq!(
        ne64(b.buf.bytes(), 72),
        0x0000_0000_0000_0100,
        "carry stops at the boundary"
    );
    assert_eq!(ne64(a.buf.bytes(), 32), 0x1ff);
    assert_eq!(ne32(b.buf.bytes(), 84), 0xab00_1234);
    assert_eq!(be32(a.buf.bytes(), 40), 0x1234);
    assert_eq!(ne32(b.buf.bytes(), 88), 0x0001_0000);
    assert_eq!(be32(a.buf.bytes(), 44), 0x0001_ffff);
    no_driver_bugs(&f);
}

#[test]
fn rc_unsignaled_runs_and_batches() {
    let (f, mut a, b) = pair(&Opts::default());
    // 40 unsignaled writes in batches of 8, then one signaled: one completion, all retired.
    for batch in 0..5u64 {
        let mut bt = a.qp.batch();
        for k in 0..8u64 {
            let i = batch * 8 + k;
            bt.post(&SendWr::write(i, b.buf.remote(i as usize * 8)).inline(&i.to_le_bytes()))
                .unwrap();
        }
    }
    let wcs = pump(&f, &mut a.cq, &mut a.qp, 8);
    assert!(wcs.is_empty(), "{wcs:?}");
    a.qp.post(
        &SendWr::write(100, b.buf.remote(4000))
            .inline(b"done")
            .signaled(),
    )
    .unwrap();
    let wcs = pump(&f, &mut a.cq, &mut a.qp, 8);
    assert_eq!(wcs.iter().map(|w| w.wr_id()).collect::<Vec<_>>(), vec![100]);
    assert_eq!(a.qp.sq_outstanding_bbs(), 0);
    for i in 0..40u64 {
        assert_eq!(
            &b.buf.bytes()[i as usize * 8..i as usize * 8 + 8],
            &i.to_le_bytes()
        );
    }
    no_driver_bugs(&f);
}

#[test]
fn rc_with_128_byte_cqes() {
    let (f, mut a, mut b) = pair(&Opts {
        cqe_size: 128,
        cqe: 4,
        ..Opts::default()
    });
    // A 4-entry CQ (rounded as the device does) wrapped many times: owner flips and set_ci.
    for i in 0..40u64 {
        b.qp.post_recv(i, &[b.buf.sge(0, 64)]).unwrap();
        a.qp.post(
            &SendWr::send_imm(i, i as u32)
                .inline(&i.to_be_bytes())
                .signaled(),
        )
        .unwrap();
        let wa = pump(&f, &mut a.cq, &mut a.qp, 2);
        assert_eq!(wa.iter().map(|w| w.wr_id()).collect::<Vec<_>>(), vec![i]);
        let wb = pump(&f, &mut b.cq, &mut b.qp, 2);
        assert_eq!(
            (wb[0].wr_id(), wb[0].imm_data(), wb[0].byte_len()),
            (i, i as u32, 8)
        );
        assert_eq!(&b.buf.bytes()[..8], &i.to_be_bytes());
    }
    assert_eq!(a.cq.ci(), 40);
    no_driver_bugs(&f);
}

#[test]
fn arming_delivers_one_event_per_arm() {
    use mlx5_hw::Device;
    use std::time::Duration;
    let (f, mut a, mut b) = pair(&Opts {
        channel: true,
        ..Opts::default()
    });
    let ch = b.channel.unwrap();
    for round in 0..3u64 {
        b.cq.arm(round % 2 == 1);
        b.qp.post_recv(round, &[b.buf.sge(0, 16)]).unwrap();
        let wr = SendWr::send(round).inline(b"wake up");
        // The solicited-only arm needs a solicited message.
        a.qp.post(&wr.solicited().signaled()).unwrap();
        f.run_until_idle();
        assert_eq!(
            b.dev.wait_cq_event(ch, Duration::from_millis(10)).unwrap(),
            Some(b.cq_id),
            "round {round}"
        );
        b.cq.ack_event();
        b.dev.ack_cq_events(b.cq_id, 1).unwrap();
        assert_eq!(b.cq.arm_sn(), (round as u32 + 1) & 3);
        let wb = pump(&f, &mut b.cq, &mut b.qp, 2);
        assert_eq!(wb[0].wr_id(), round);
        pump(&f, &mut a.cq, &mut a.qp, 2);
        // Not armed: no further event.
        assert_eq!(
            b.dev.wait_cq_event(ch, Duration::from_millis(1)).unwrap(),
            None
        );
    }
    no_driver_bugs(&f);
}
