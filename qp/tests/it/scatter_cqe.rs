//! Requester scatter-to-CQE at the byte offsets current rdma-core reads (issue 28): a READ or
//! atomic reply the device wrote into the CQE is copied from
//! - `MLX5_INLINE_SCATTER_32` (format 1, up to 32 bytes): the first byte of the 64-byte CQE
//!   descriptor, which is byte 0 of a 64-byte CQE and byte **64** of a 128-byte one;
//! - `MLX5_INLINE_SCATTER_64` (format 2, up to 64 bytes, 128-byte CQEs only): byte 0 of the
//!   128-byte CQE, the half before the descriptor.
//!
//! rdma-core `providers/mlx5/cq.c` `mlx5_parse_cqe`, as of commit 45184d2c87ee ("mlx5: Fix
//! inline-scatter source address on 128B CQE REQ completions", 2026, in v64.0): before it,
//! libmlx5 read format 1 from byte 0 of a 128-byte CQE (64 bytes early: the tail of the
//! previous entry's half, here poisoned) and format 2 from one byte before the entry, since its
//! first version. Every case writes the whole CQE entry with poison around the reply, so a
//! read from any other offset fails.

use crate::common;

use common::{req_bytes, FakeCq, FakeQp, QpCfg};
use mlx5_cq::*;
use mlx5_hw::QpState;
use mlx5_qp::{Cq, Qp, RemoteAddr, SendWr, Sge, Wc, WcStatus};
use mlx5_wqe::opcode::{OPCODE_ATOMIC_FA, OPCODE_RDMA_READ};

const QPN: u32 = 0x1234;
/// What the local buffer holds before the reply.
const UNTOUCHED: u8 = 0x5a;
/// What the CQE entry holds wherever the reply is not.
const POISON: u8 = 0xee;

fn rts(fake: &FakeQp) -> Qp {
    // SAFETY: `fake` outlives the QP.
    let mut qp = unsafe { Qp::from_layout(&fake.layout, None) }.unwrap();
    qp.set_state(QpState::Rts);
    qp
}

fn cq(fake: &FakeCq) -> Cq {
    // SAFETY: `fake` outlives the CQ.
    unsafe { Cq::from_layout(&fake.layout) }.unwrap()
}

fn reply(len: usize, seed: u8) -> Vec<u8> {
    (0..len as u8)
        .map(|i| i.wrapping_mul(7).wrapping_add(seed))
        .collect()
}

/// Push the requester CQE of WQE `index` (`send_opcode`, `len` bytes) carrying `data` as the
/// device lays it out in an entry of the CQ's size and `format` (1 or 2), everything else of
/// the entry's data bytes poisoned.
fn push_reply(fcq: &mut FakeCq, index: u16, send_opcode: u8, data: &[u8], format: u8) {
    let size = fcq.layout.cqe_size as usize;
    let mut desc = *req_bytes(QPN, index, send_opcode, data.len() as u32).as_bytes();
    let mut front = [POISON; 64];
    match format {
        1 => {
            // The descriptor's inline area (its first 32 bytes) holds the reply.
            desc[..32].fill(POISON);
            desc[..data.len()].copy_from_slice(data);
            desc[63] |= INLINE_SCATTER_32;
        }
        2 => {
            assert_eq!(size, 128, "format 2 exists in 128-byte CQEs only");
            front[..data.len()].copy_from_slice(data);
            desc[..32].fill(POISON);
            desc[63] |= INLINE_SCATTER_64;
        }
        _ => unreachable!(),
    }
    let front = (size == 128).then_some(&front[..]);
    fcq.push_with(Cqe64::from_bytes(&desc), front);
}

fn poll_one(c: &mut Cq, qp: &mut Qp) -> Wc {
    let mut wcs = [Wc::default(); 1];
    assert_eq!(c.poll(qp, &mut wcs).unwrap(), 1);
    assert_eq!(wcs[0].status(), WcStatus::Success);
    wcs[0]
}

#[test]
fn read_and_atomic_replies_of_32_bytes_or_less_come_from_the_cqe_descriptor() {
    for cqe_size in [64u32, 128] {
        for len in [1usize, 8, 31, 32] {
            // A READ of `len` bytes.
            let fake = FakeQp::new(&QpCfg::default());
            let mut qp = rts(&fake);
            let mut fcq = FakeCq::new(4, cqe_size, false);
            let mut c = cq(&fcq);
            let mut dst = [UNTOUCHED; 40];
            let sge = [Sge {
                addr: dst.as_mut_ptr() as u64,
                length: len as u32,
                lkey: 1,
            }];
            qp.post(
                &SendWr::read(7, RemoteAddr::new(0x1000, 2))
                    .sges(&sge)
                    .signaled(),
            )
            .unwrap();
            let data = reply(len, cqe_size as u8);
            push_reply(&mut fcq, 0, OPCODE_RDMA_READ, &data, 1);
            let wc = poll_one(&mut c, &mut qp);
            assert_eq!((wc.wr_id(), wc.byte_len()), (7, len as u32));
            assert_eq!(
                &dst[..len],
                &data[..],
                "{cqe_size}-byte CQE, {len}-byte READ"
            );
            assert!(dst[len..].iter().all(|&b| b == UNTOUCHED));
        }
        // An 8-byte fetch-and-add: its original value arrives the same way.
        let fake = FakeQp::new(&QpCfg::default());
        let mut qp = rts(&fake);
        let mut fcq = FakeCq::new(4, cqe_size, false);
        let mut c = cq(&fcq);
        let mut old = [UNTOUCHED; 16];
        let local = Sge {
            addr: old.as_mut_ptr() as u64,
            length: 8,
            lkey: 1,
        };
        qp.post(&SendWr::fetch_add(9, RemoteAddr::new(0x2000, 2), local, 5).signaled())
            .unwrap();
        let data = 0x0102_0304_0506_0708u64.to_be_bytes();
        push_reply(&mut fcq, 0, OPCODE_ATOMIC_FA, &data, 1);
        let wc = poll_one(&mut c, &mut qp);
        assert_eq!(wc.wr_id(), 9);
        assert_eq!(&old[..8], &data, "{cqe_size}-byte CQE, atomic reply");
        assert!(old[8..].iter().all(|&b| b == UNTOUCHED));
    }
}

#[test]
fn a_read_reply_of_up_to_64_bytes_comes_from_the_front_half_of_a_128_byte_cqe() {
    for len in [33usize, 48, 64] {
        let fake = FakeQp::new(&QpCfg::default());
        let mut qp = rts(&fake);
        let mut fcq = FakeCq::new(4, 128, false);
        let mut c = cq(&fcq);
        let mut dst = [UNTOUCHED; 72];
        let sge = [Sge {
            addr: dst.as_mut_ptr() as u64,
            length: len as u32,
            lkey: 1,
        }];
        qp.post(
            &SendWr::read(3, RemoteAddr::new(0x1000, 2))
                .sges(&sge)
                .signaled(),
        )
        .unwrap();
        let data = reply(len, 0x40);
        push_reply(&mut fcq, 0, OPCODE_RDMA_READ, &data, 2);
        let wc = poll_one(&mut c, &mut qp);
        assert_eq!((wc.wr_id(), wc.byte_len()), (3, len as u32));
        assert_eq!(&dst[..len], &data[..], "{len}-byte READ, format 2");
        assert!(dst[len..].iter().all(|&b| b == UNTOUCHED));
    }
}
