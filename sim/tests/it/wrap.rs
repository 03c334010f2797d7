//! Ring wrap over many laps with mixed WQE sizes (inline payloads and masked atomics split at
//! the ring end), and CQ wrap with owner flips.

use crate::common;

use common::*;
use mlx5_cq::*;
use mlx5_hw::QpType;
use mlx5_wqe::*;

#[test]
fn many_laps_of_mixed_wqes_and_cq_owner_flips() {
    let mut o = Opts::new(QpType::Rc);
    o.cap.max_send_wr = 4;
    o.cap.max_send_sge = 2;
    o.cap.max_inline_data = 100;
    o.cqe = 7;
    o.mode = Ring::Bf;
    let mut p = Pair::new(o);
    let wqe_cnt = p.a.qp.info.layout.sq.wqe_cnt as usize;
    assert_eq!(wqe_cnt, 32);
    let max_inl = p.a.qp.info.layout.max_inline_data as usize;
    assert_eq!(max_inl, 320 - 192 - 4);
    let local = p.mem(false, 4096);
    let remote = p.mem(true, 4096);
    let dst = p.mem(true, 4096);
    let mut words = [0u64; 8];
    let (mut wrapped_inline, mut wrapped_masked) = (0, 0);
    for k in 0..400usize {
        let start = p.a.qp.sq_pi as usize % wqe_cnt;
        let seed = k as u8;
        let expect_idx = p.a.qp.sq_pi;
        match k % 4 {
            0 => {
                let len = 1 + (k * 37) % max_inl;
                let data: Vec<u8> = (0..len).map(|i| seed.wrapping_add(i as u8)).collect();
                if start * 64 + 36 < wqe_cnt * 64 && start * 64 + 36 + len > wqe_cnt * 64 {
                    wrapped_inline += 1;
                }
                let (ra, rk) = (remote.addr() + 1024, remote.rkey());
                p.a.qp.post(OPCODE_RDMA_WRITE, 0, CTRL_CQ_UPDATE, 0, |w| {
                    w.push(&RaddrSeg::new(ra, rk)).unwrap();
                    w.push_inline(&[&data]).unwrap();
                });
                p.run();
                assert_eq!(remote.read(1024, len), data, "WQE {k}");
            }
            1 => {
                if start == wqe_cnt - 1 {
                    wrapped_masked += 1;
                }
                let wi = k % 8;
                let old = words[wi];
                let new = (old & !0xffff) | (k as u64 & 0xffff);
                let (ra, rk, ll, la) = (
                    remote.addr() + wi as u64 * 8,
                    remote.rkey(),
                    local.lkey(),
                    local.addr(),
                );
                p.a.qp.post(
                    OPCODE_ATOMIC_MASKED_CS,
                    OPMOD_EXT_ATOMIC_64,
                    CTRL_CQ_UPDATE,
                    0,
                    |w| {
                        w.push(&RaddrSeg::new(ra, rk)).unwrap();
                        w.push(&MaskedCs64Seg::new(old, u64::MAX, new, 0xffff))
                            .unwrap();
                        w.push(&DataSeg::new(8, ll, la)).unwrap();
                    },
                );
                p.run();
                words[wi] = new;
                assert_eq!(remote.read(wi * 8, 8), new.to_ne_bytes(), "WQE {k}");
                assert_eq!(local.read(0, 8), old.to_ne_bytes());
            }
            2 => {
                let data = [seed; 24];
                local.write(64, &data[..12]);
                local.write(128, &data[12..]);
                p.b.qp.post_recv(&[dst.sge(0, 64)]);
                let (ll, la) = (local.lkey(), local.addr());
                p.a.qp.post(OPCODE_SEND, 0, CTRL_CQ_UPDATE, 0, |w| {
                    w.push(&DataSeg::new(12, ll, la + 64)).unwrap();
                    w.push(&DataSeg::new(12, ll, la + 128)).unwrap();
                });
                p.run();
                let r = p.b.rcq.poll().expect("recv");
                assert_eq!(r.byte_cnt(), 24);
                assert_eq!(dst.read(0, 24), data);
            }
            _ => {
                remote.write(2048, &[seed; 40]);
                let (ra, rk, ll, la) = (
                    remote.addr() + 2048,
                    remote.rkey(),
                    local.lkey(),
                    local.addr(),
                );
                p.a.qp.post(OPCODE_RDMA_READ, 0, CTRL_CQ_UPDATE, 0, |w| {
                    w.push(&RaddrSeg::new(ra, rk)).unwrap();
                    w.push(&DataSeg::new(40, ll, la + 256)).unwrap();
                });
                p.run();
                assert_eq!(local.read(256, 40), [seed; 40]);
            }
        }
        let c = p.a.scq.poll().expect("send CQE");
        assert_eq!(c.wqe_counter(), expect_idx, "WQE {k}");
        assert_eq!(c.opcode(), CQE_REQ, "WQE {k}");
        // The owner bit is the lap parity of the CQE's position.
        assert_eq!(c.owner() as u32, (k as u32 >> 3) & 1);
    }
    assert!(p.a.qp.sq_pi as usize > 10 * wqe_cnt, "many laps");
    assert!(
        wrapped_inline >= 2,
        "inline payloads split at the ring end: {wrapped_inline}"
    );
    assert!(
        wrapped_masked >= 3,
        "masked atomics whose data segment wrapped: {wrapped_masked}"
    );
    p.assert_no_bugs();
}

#[test]
fn sq_index_wraps_past_0xffff() {
    let mut o = Opts::new(QpType::Rc);
    o.cap.max_send_wr = 2;
    o.cqe = 15;
    let mut p = Pair::new(o);
    let remote = p.mem(true, 64);
    // Jump close to the 16-bit wrap by posting NOPs in batches.
    let mut last = 0u16;
    for k in 0..70_000u32 {
        let signaled = if k % 64 == 63 { CTRL_CQ_UPDATE } else { 0 };
        last = p.a.qp.post(OPCODE_NOP, 0, signaled, 0, |_| {});
        if k % 4 == 3 {
            p.run();
            p.a.scq.drain();
        }
    }
    let (ra, rk) = (remote.addr(), remote.rkey());
    let idx = p.a.qp.post(OPCODE_RDMA_WRITE, 0, CTRL_CQ_UPDATE, 0, |w| {
        w.push(&RaddrSeg::new(ra, rk)).unwrap();
        w.push_inline(&[b"wrapped"]).unwrap();
    });
    assert_eq!(idx, last.wrapping_add(1));
    p.run();
    assert_eq!(remote.read(0, 7), b"wrapped");
    let c = p.a.scq.drain();
    assert_eq!(c.last().map(|c| c.wqe_counter()), Some(idx));
    p.assert_no_bugs();
}
