//! The lean posts' gates and limits against the generic post's.

//! The lean gates and limits against the generic post they stand for: for every QP shape
//! tried, a lean entry point takes exactly the inline payloads the generic post accepts
//! whose WRITE WQE fits the blocks a lean WQE may take (`SendQueue::wr_bbs`), and its gate
//! is open exactly in the states, types and doorbell modes the docs say. The integration tests compare what
//! both paths write, which is the same by design; only these say which path a post takes
//! (a limit one byte too small, or a gate that never opens, writes the same bytes slower).

use super::*;
use crate::wc::{WcOpcode, WcStatus};
use mlx5_hw::{BfLayout, WqLayout};

/// Zeroed page-aligned memory standing in for the device's rings and registers.
#[repr(C, align(4096))]
#[derive(Clone, Copy)]
struct Page([u8; 4096]);

/// A QP on its own memory (the `Vec`'s buffer does not move with it).
struct Fixture {
    mem: Vec<Page>,
    qp: Qp,
}

fn fixture(qp_type: QpType, wqe_cnt: u32, max_inline: u32, max_send_sge: u32) -> Fixture {
    let sq_pages = (wqe_cnt as usize * SEND_WQE_BB).div_ceil(4096);
    let mut mem = vec![Page([0; 4096]); sq_pages + 2];
    let base = mem.as_mut_ptr() as *mut u8;
    // SAFETY: the pages after the ring: a doorbell record and a UAR page.
    let (dbrec, uar) = unsafe { (base.add(sq_pages * 4096), base.add((sq_pages + 1) * 4096)) };
    let layout = QpLayout {
        qpn: 0x1234,
        qp_type,
        dbrec: dbrec as *mut u32,
        sq: WqLayout {
            buf: base,
            wqe_cnt,
            stride: SEND_WQE_BB as u32,
        },
        rq: WqLayout {
            buf: core::ptr::null_mut(),
            wqe_cnt: 0,
            stride: 0,
        },
        bf: BfLayout {
            // SAFETY: 0x800 + two halves of 256 bytes fit the page.
            reg: unsafe { uar.add(0x800) },
            size: 256,
            shared: false,
        },
        max_inline_data: max_inline,
        max_send_sge,
        max_recv_sge: 0,
        sq_sig_all: false,
        uses_srq: false,
    };
    // SAFETY: the memory lives in the fixture with the QP.
    let qp = unsafe { Qp::from_layout(&layout, None) }.unwrap();
    Fixture { mem, qp }
}

/// What `lean_post!` decides for an inline payload of `len` bytes against `limit`.
fn lean_takes(qp: &Qp, len: usize, limit: usize) -> bool {
    Qp::inline_len_ok(len, limit) && qp.sq.lean_open(qp.sq.fast)
}

/// Whether the generic post accepts the inline WR of `len` bytes and a WRITE's WQE of
/// that payload (ctrl + raddr + inline) fits the `wr_bbs` blocks a lean WQE may take
/// (`wqe_cnt / max_post`): one clamp for both opcodes (`Qp::update_fast_limits`; within
/// the caps `wr_limit` computes it never binds, with a WR limit set by hand it may, and a
/// SEND then gives up 16 bytes).
fn generic_takes(qp: &Qp, wr: &SendWr<'_>, len: usize, wr_bbs: u32) -> bool {
    let inline = if len == 0 {
        0
    } else {
        (4 + len).div_ceil(16) * 16
    };
    let bbs = (RDMA_HDR + inline).div_ceil(SEND_WQE_BB) as u32;
    qp.plan(wr).is_ok() && bbs <= wr_bbs
}

#[test]
fn lean_inline_limits_are_the_generic_posts_within_the_lean_blocks() {
    let payload = [0x5au8; 1100];
    let remote = RemoteAddr::new(0x1000, 7);
    for qp_type in [QpType::Rc, QpType::Uc] {
        for wqe_cnt in [1u32, 4, 16, 64] {
            for max_post in [1u32, 2, 3, wqe_cnt].into_iter().filter(|&m| m <= wqe_cnt) {
                for max_inline in [12u32, 13, 28, 44, 60, 220, 988, 1000] {
                    let mut f = fixture(qp_type, wqe_cnt, max_inline, 1);
                    f.qp.set_max_send_wr(max_post).unwrap();
                    f.qp.set_state(QpState::Rts);
                    let qp = &f.qp;
                    let wr_bbs = wqe_cnt / max_post;
                    assert_eq!(qp.sq.wr_bbs(), wr_bbs);
                    let what = format!(
                        "{qp_type:?}, {wqe_cnt} blocks, max_post {max_post}, \
                         max_inline {max_inline}"
                    );
                    assert!(qp.sq.lean_open(qp.sq.fast), "gate open: {what}");
                    for len in 0..=max_inline as usize + 64 {
                        let d = &payload[..len];
                        let w = SendWr::write(1, remote).inline(d);
                        assert_eq!(
                            lean_takes(qp, len, qp.fast.inline_rdma),
                            generic_takes(qp, &w, len, wr_bbs),
                            "WRITE of {len} inline bytes: {what}"
                        );
                        let s = SendWr::send(1).inline(d);
                        assert_eq!(
                            lean_takes(qp, len, qp.fast.inline_send),
                            generic_takes(qp, &s, len, wr_bbs),
                            "SEND of {len} inline bytes: {what}"
                        );
                    }
                }
            }
        }
    }
}

/// The send poll's fast path (`SendQueue::complete_success`) takes a success CQE naming the
/// oldest outstanding WQE of one block that is not an atomic, and nothing else (the full
/// path then gives the same completion: only this says which one served it).
#[test]
fn the_fast_send_completion_takes_the_oldest_one_block_wqe_only() {
    let mut f = fixture(QpType::Rc, 16, 64, 1);
    f.qp.set_max_send_wr(16).unwrap();
    f.qp.set_state(QpState::Rts);
    let qp = &mut f.qp;
    let sge = Sge {
        addr: 0x2000,
        length: 64,
        lkey: 3,
    };
    let remote = RemoteAddr::new(0x1000, 7);
    qp.post_send_inline(10, b"abc", SendFlags::SIGNALED)
        .unwrap();
    qp.post(&SendWr::read(11, remote).sges(&[sge]).signaled())
        .unwrap();
    // Two blocks (meta byte not 0).
    qp.post_write_inline(12, &[1; 60], remote, SendFlags::SIGNALED)
        .unwrap();
    let mut wc = Wc::default();
    assert!(
        !qp.send_queue()
            .complete_success(1, op::OPCODE_RDMA_WRITE, 0x1234, 0, &mut wc),
        "not the oldest"
    );
    assert_eq!(qp.sq_outstanding_wrs(), 3, "nothing retired");
    assert!(qp
        .send_queue()
        .complete_success(0, op::OPCODE_SEND, 0x1234, 99, &mut wc));
    assert_eq!(
        (
            wc.wr_id(),
            wc.opcode(),
            wc.byte_len(),
            wc.status(),
            wc.qp_num()
        ),
        (10, WcOpcode::Send, 0, WcStatus::Success, 0x1234)
    );
    assert!(qp
        .send_queue()
        .complete_success(1, op::OPCODE_RDMA_READ, 0x1234, 64, &mut wc));
    assert_eq!(
        (wc.wr_id(), wc.opcode(), wc.byte_len()),
        (11, WcOpcode::RdmaRead, 64)
    );
    assert!(
        !qp.send_queue()
            .complete_success(2, op::OPCODE_RDMA_WRITE, 0x1234, 0, &mut wc),
        "two blocks"
    );
    // A later WQE behind the two-block one: neither the oldest nor one block at `ci`.
    qp.post_send_inline(14, b"d", SendFlags::SIGNALED).unwrap();
    assert!(
        !qp.send_queue()
            .complete_success(4, op::OPCODE_RDMA_WRITE, 0x1234, 0, &mut wc),
        "behind an uncommon WQE"
    );
    assert_eq!(qp.sq_outstanding_wrs(), 2);
    let fa = SendOp::FetchAdd {
        remote,
        local: sge,
        add: 1,
    };
    let mut f = fixture(QpType::Rc, 16, 64, 1);
    f.qp.set_state(QpState::Rts);
    f.qp.post(&SendWr::new(13, fa).signaled()).unwrap();
    assert!(
        !f.qp
            .send_queue()
            .complete_success(0, op::OPCODE_RDMA_WRITE, 0x1234, 0, &mut wc),
        "an atomic"
    );
    assert!(
        !f.qp
            .send_queue()
            .complete_success(1, op::OPCODE_RDMA_WRITE, 0x1234, 0, &mut wc),
        "nothing outstanding there"
    );
    let mut empty = fixture(QpType::Rc, 16, 64, 1);
    empty.qp.set_state(QpState::Rts);
    assert!(
        !empty
            .qp
            .send_queue()
            .complete_success(0, op::OPCODE_RDMA_WRITE, 0x1234, 0, &mut wc),
        "nothing outstanding"
    );
    for counter in [1, 5, 0xffff] {
        assert!(
            !empty.qp.send_queue().complete_success(
                counter,
                op::OPCODE_RDMA_WRITE,
                0x1234,
                0,
                &mut wc
            ),
            "nothing outstanding, counter {counter}"
        );
    }
    assert_eq!(empty.qp.sq_outstanding_bbs(), 0);
}

/// `SendQueue::all_common`, which lets the lean send poll skip the meta bytes, says whether
/// every outstanding WQE is one block and not an atomic.
#[test]
fn all_common_follows_the_uncommon_wqes_outstanding() {
    let mut f = fixture(QpType::Rc, 16, 64, 1);
    f.qp.set_max_send_wr(16).unwrap();
    f.qp.set_state(QpState::Rts);
    let qp = &mut f.qp;
    let remote = RemoteAddr::new(0x1000, 7);
    assert!(qp.send_queue().all_common(), "nothing outstanding");
    qp.post_send_inline(1, b"a", SendFlags::SIGNALED).unwrap();
    assert!(qp.send_queue().all_common(), "one one-block WQE");
    qp.post_write_inline(2, &[1; 60], remote, SendFlags::SIGNALED)
        .unwrap();
    assert!(!qp.send_queue().all_common(), "a two-block WQE");
    let mut wc = Wc::default();
    assert!(qp
        .send_queue()
        .complete_success(0, op::OPCODE_RDMA_WRITE, 0x1234, 0, &mut wc));
    assert!(
        !qp.send_queue().all_common(),
        "the two-block WQE is still outstanding"
    );
    let info = crate::sq::CqeInfo {
        qpn: 0x1234,
        send_opcode: op::OPCODE_RDMA_WRITE,
        status: WcStatus::Success,
        syndrome: 0,
        vendor_err: 0,
        byte_cnt: 0,
    };
    let mut out = [Wc::default(); 2];
    assert_eq!(qp.complete_send(1, &info, &mut out), Progress::Done(1));
    assert_eq!(out[0].wr_id(), 2);
    assert!(qp.send_queue().all_common(), "retired");
    let sge = Sge {
        addr: 0x2000,
        length: 8,
        lkey: 3,
    };
    let fa = SendOp::FetchAdd {
        remote,
        local: sge,
        add: 1,
    };
    qp.post(&SendWr::new(3, fa).signaled()).unwrap();
    assert!(!qp.send_queue().all_common(), "an atomic");
}

#[test]
fn the_lean_gates_open_for_rc_and_uc_in_the_states_that_take_sends() {
    use QpState::*;
    for qp_type in [QpType::Rc, QpType::Uc, QpType::Ud, QpType::XrcSend] {
        for state in [Reset, Init, Rtr, Rts, Sqd, Sqe, Error] {
            let mut f = fixture(qp_type, 16, 64, 1);
            f.qp.set_state(state);
            // SQE and Error take sends too: the device flushes them.
            let open = matches!(state, Rts | Sqd | Sqe | Error)
                && matches!(qp_type, QpType::Rc | QpType::Uc);
            let qp = &f.qp;
            assert_eq!(
                qp.sq.lean_open(qp.sq.fast),
                open,
                "{qp_type:?} in {state:?}"
            );
            assert!(!qp.sq.lean_open(qp.sq.other), "BfPost: only the fast gate");
        }
    }
}

#[test]
fn too_little_inline_room_or_no_gather_entry_closes_the_gates() {
    for (max_inline, max_send_sge, open) in [
        (0, 1, false),
        (11, 1, false),
        (12, 1, true),
        (64, 0, false),
        (64, 1, true),
    ] {
        let mut f = fixture(QpType::Rc, 16, max_inline, max_send_sge);
        f.qp.set_state(QpState::Rts);
        assert_eq!(
            f.qp.sq.lean_open(f.qp.sq.fast),
            open,
            "max_inline {max_inline}, max_send_sge {max_send_sge}"
        );
    }
}

#[test]
fn other_doorbell_modes_take_the_other_gate() {
    for (mode, fast, other) in [
        (DoorbellMode::BfPost, true, false),
        (DoorbellMode::Bf, false, true),
        (DoorbellMode::Db, false, true),
    ] {
        let mut f = fixture(QpType::Rc, 16, 64, 1);
        f.qp.set_state(QpState::Rts);
        f.qp.set_doorbell_mode(mode).unwrap();
        let qp = &f.qp;
        assert_eq!(
            (qp.sq.lean_open(qp.sq.fast), qp.sq.lean_open(qp.sq.other)),
            (fast, other),
            "{mode:?}"
        );
    }
}

mod dc;

/// `Qp::post` and `Batch::post` send each of the four common shapes (WRITE or SEND, inline or
/// one gather entry) down its lean path, never through the planner nor the general doorbell
/// sequence, in every doorbell mode;
/// anything else goes through it. (Both paths write the same bytes; only the planner's
/// test-only count tells them apart, so a dispatch arm lost in `Qp::post` or
/// `Qp::post_batched` fails here.)
#[test]
fn post_sends_the_common_shapes_down_their_lean_paths() {
    use crate::qp::plan::planned;
    let remote = RemoteAddr::new(0x1000, 7);
    let sge = [Sge {
        addr: 0x2000,
        length: 64,
        lkey: 9,
    }];
    let payload = [7u8; 8];
    let common = [
        SendWr::write(1, remote).inline(&payload),
        SendWr::write(2, remote).sges(&sge),
        SendWr::send(3).inline(&payload),
        SendWr::send(4).sges(&sge),
    ];
    for mode in [DoorbellMode::BfPost, DoorbellMode::Bf, DoorbellMode::Db] {
        let mut f = fixture(QpType::Rc, 64, 64, 1);
        f.qp.set_max_send_wr(32).unwrap();
        f.qp.set_state(QpState::Rts);
        f.qp.set_doorbell_mode(mode).unwrap();
        for wr in &common {
            let (before, rung) = (planned::count(), crate::sq::rung::counts());
            f.qp.post(wr).unwrap();
            assert_eq!(planned::count(), before, "{mode:?}: {:?} planned", wr.op());
            assert_eq!(
                crate::sq::rung::counts(),
                rung,
                "{mode:?}: {:?} not rung by its own sequence",
                wr.op()
            );
        }
        let before = planned::count();
        {
            let mut b = f.qp.batch();
            for wr in &common {
                b.post(wr).unwrap();
            }
        }
        assert_eq!(planned::count(), before, "{mode:?}: a batch planned");
        // The count moves for what the lean paths do not take.
        f.qp.post(&SendWr::read(5, remote).sges(&sge)).unwrap();
        assert_eq!(planned::count(), before + 1, "{mode:?}: a READ not planned");
        assert_eq!(f.qp.sq_outstanding_wrs(), 9);
    }
}

/// The RC gates count blocks: a QP takes as many lean posts of two-block WQEs (an inline
/// WRITE of 40 bytes) as its WR limit allows, in every doorbell mode, none through the
/// planner, each rung with the two-block sequence of its mode; the next is planned (and
/// refused: the WR limit). Before the gates counted
/// blocks, half of them went to the generic post.
#[test]
fn two_block_posts_take_the_lean_path_up_to_the_wr_limit() {
    use crate::qp::plan::planned;
    let remote = RemoteAddr::new(0x1000, 7);
    let payload = [3u8; 40];
    for mode in [DoorbellMode::BfPost, DoorbellMode::Bf, DoorbellMode::Db] {
        let mut f = fixture(QpType::Rc, 64, 64, 1);
        f.qp.set_max_send_wr(16).unwrap();
        f.qp.set_state(QpState::Rts);
        f.qp.set_doorbell_mode(mode).unwrap();
        let before = planned::count();
        let rung = crate::sq::rung::counts();
        for id in 0..16 {
            f.qp.post(&SendWr::write(id, remote).inline(&payload))
                .unwrap();
            if id == 0 && mode != DoorbellMode::Db {
                // The BlueFlame half the first post took (the register at 0x800 of the page
                // after the ring and its record) holds the WQE's two blocks.
                // SAFETY: the fixture's pages: the ring (one page), the record, the UAR.
                let (ring, bf) = unsafe {
                    let base = f.mem.as_ptr() as *const u8;
                    (
                        core::slice::from_raw_parts(base, 128),
                        core::slice::from_raw_parts(base.add(2 * 4096 + 0x800), 128),
                    )
                };
                assert_eq!(bf, ring, "{mode:?}: the BlueFlame copy");
            }
        }
        assert_eq!(planned::count(), before, "{mode:?}: planned");
        assert_eq!(
            crate::sq::rung::counts(),
            (rung.0 + 16, rung.1),
            "{mode:?}: not the two-block doorbell"
        );
        assert_eq!(f.qp.sq_outstanding_bbs(), 32);
        assert!(f
            .qp
            .post(&SendWr::write(16, remote).inline(&payload))
            .is_err());
        assert_eq!(
            planned::count(),
            before + 1,
            "{mode:?}: the 17th not planned"
        );
    }
}

/// The RC gates' ring bound (`lean_cap`) binds when the generic post wrote a WQE larger than
/// a lean one may be: with three of four blocks taken by one WQE, a WR is free but a
/// two-block WQE does not fit, so a post of one is refused and writes nothing, and a
/// one-block one goes through the planner (the lean gate is shut) into the last block.
#[test]
fn the_ring_bound_keeps_lean_posts_out_of_a_big_wqes_blocks() {
    use crate::qp::plan::planned;
    let remote = RemoteAddr::new(0x1000, 7);
    for mode in [DoorbellMode::BfPost, DoorbellMode::Bf, DoorbellMode::Db] {
        let mut f = fixture(QpType::Rc, 4, 200, 1);
        f.qp.set_max_send_wr(2).unwrap();
        f.qp.set_state(QpState::Rts);
        f.qp.set_doorbell_mode(mode).unwrap();
        // 16 + 16 + 4 + 140 bytes: three blocks, through the planner.
        f.qp.post(&SendWr::write(1, remote).inline(&[9; 140]))
            .unwrap();
        assert_eq!(f.qp.sq_outstanding_bbs(), 3);
        let ring = |f: &Fixture| {
            // SAFETY: the fixture's first pages are the four-block ring.
            unsafe { core::slice::from_raw_parts(f.mem.as_ptr() as *const u8, 256) }.to_vec()
        };
        let before = ring(&f);
        let planned_before = planned::count();
        assert!(
            f.qp.post(&SendWr::write(2, remote).inline(&[3; 40]))
                .is_err(),
            "{mode:?}: a two-block WQE in one free block"
        );
        assert_eq!(ring(&f), before, "{mode:?}: the refused post wrote");
        assert_eq!(
            planned::count(),
            planned_before + 1,
            "{mode:?}: not planned"
        );
        f.qp.post(&SendWr::write(3, remote).inline(&[3; 8]))
            .unwrap();
        assert_eq!(
            planned::count(),
            planned_before + 2,
            "{mode:?}: a lean post"
        );
        assert_eq!(
            ring(&f)[..192],
            before[..192],
            "{mode:?}: the big WQE overwritten"
        );
    }
}
