//! The lean DC post (`Qp::post_dc_write_inline`) against the generic post of the same WR:
//! its gates open exactly on a DCI in the states and doorbell modes that take it, it takes
//! every WR the queue has room for and none more, and it writes the same ring bytes, the same
//! doorbell record and the same doorbell (the BlueFlame copy's first `ds × 16` bytes, the
//! ones the device reads; the lean copy pads the rest of its last line) at every position of
//! the ring, wrapped or not, with any payload up to its limit, flags and stream.

use super::*;
use crate::dc::DcDest;

const REMOTE: RemoteAddr = RemoteAddr::new(0x7f00_0000_1000, 0x0bad_cafe);

/// A DCI fixture in `mode`, in RTS.
fn dci(wqe_cnt: u32, max_inline: u32, mode: DoorbellMode) -> Fixture {
    let mut f = fixture(QpType::Dci, wqe_cnt, max_inline, 1);
    f.qp.set_state(QpState::Rts);
    f.qp.set_doorbell_mode(mode).unwrap();
    f
}

/// An address vector (RoCE, extended) naming DCT `dctn` with key `key`, on stream `stream`.
fn dest(dctn: u32, key: u64, stream: u16) -> DcDest {
    let mut av = [0u8; 48];
    av[8] = 0x80;
    av[20..26].copy_from_slice(&[0x02, 0, 0, 0, 0, 2]);
    av[27] = 64;
    av[42..44].copy_from_slice(&[0xff, 0xff]);
    av[44..48].copy_from_slice(&[10, 0, 0, 2]);
    DcDest::new(&av, dctn, key).stream(stream)
}

/// Retire the oldest outstanding WQE (a success CQE naming it), as the full path does.
fn retire_oldest(qp: &mut Qp) {
    let info = crate::sq::CqeInfo {
        qpn: 0x1234,
        send_opcode: op::OPCODE_RDMA_WRITE,
        status: WcStatus::Success,
        syndrome: 0,
        vendor_err: 0,
        byte_cnt: 0,
    };
    let mut out = [Wc::default(); 1];
    let p = qp.complete_send(qp.sq.ci as u16, &info, &mut out);
    assert_eq!(p, Progress::Done(1));
}

/// The memory a post writes: the ring, the doorbell record page, and of the UAR page the
/// first `bf_bytes` bytes of the BlueFlame half at `half` (the one the post wrote; the rest
/// of its copy is padding, which the lean copy fills from its own line).
fn written(f: &Fixture, half: usize, bf_bytes: usize) -> Vec<u8> {
    let pages = f.mem.len();
    let mut v: Vec<u8> = f.mem[..pages - 1].iter().flat_map(|p| p.0).collect();
    let uar = &f.mem[pages - 1].0;
    v.extend_from_slice(&uar[0x800 + half..0x800 + half + bf_bytes]);
    v
}

/// The same memory on both fixtures (the first byte that differs, if any), `half` the
/// BlueFlame half the post wrote.
fn assert_same(a: &Fixture, b: &Fixture, half: usize, bf_bytes: usize, what: &str) {
    let (x, y) = (written(a, half, bf_bytes), written(b, half, bf_bytes));
    let at = x.iter().zip(&y).position(|(p, q)| p != q);
    assert!(
        at.is_none(),
        "{what}: byte {at:?} of {}: {:?} vs {:?}",
        x.len(),
        at.map(|i| &x[i.saturating_sub(8)..(i + 8).min(x.len())]),
        at.map(|i| &y[i.saturating_sub(8)..(i + 8).min(y.len())])
    );
}

#[test]
fn the_dc_gates_open_on_a_dci_in_the_states_and_modes_that_take_sends() {
    use QpState::*;
    for qp_type in [
        QpType::Rc,
        QpType::Uc,
        QpType::Ud,
        QpType::XrcSend,
        QpType::Dci,
    ] {
        for state in [Reset, Init, Rtr, Rts, Sqd, Sqe, Error] {
            for mode in [DoorbellMode::BfPost, DoorbellMode::Bf, DoorbellMode::Db] {
                let mut f = fixture(qp_type, 16, 64, 1);
                f.qp.set_state(state);
                f.qp.set_doorbell_mode(mode).unwrap();
                let qp = &f.qp;
                let open = qp_type == QpType::Dci && matches!(state, Rts | Sqd | Sqe | Error);
                let fast = mode == DoorbellMode::BfPost;
                assert_eq!(
                    (
                        qp.sq.lean_open(qp.sq.dc_fast),
                        qp.sq.lean_open(qp.sq.dc_other)
                    ),
                    (open && fast, open && !fast),
                    "{qp_type:?} in {state:?}, {mode:?}"
                );
                if qp_type == QpType::Dci {
                    assert!(!qp.sq.lean_open(qp.sq.fast), "the RC gates stay shut");
                    assert!(!qp.sq.lean_open(qp.sq.other), "the RC gates stay shut");
                }
            }
        }
    }
}

#[test]
fn too_little_inline_room_a_pending_wqe_or_a_batch_shuts_the_dc_gates() {
    for (max_inline, open) in [(0, false), (11, false), (12, true), (64, true)] {
        let f = dci(16, max_inline, DoorbellMode::BfPost);
        assert_eq!(f.qp.sq.lean_open(f.qp.sq.dc_fast), open, "{max_inline}");
    }
    let d = dest(0x3a1, 7, 0);
    let mut f = dci(16, 64, DoorbellMode::BfPost);
    let wr = SendWr::write(1, REMOTE).inline(b"x").dc(&d);
    f.qp.post_deferred(&wr).unwrap();
    assert!(!f.qp.sq.lean_open(f.qp.sq.dc_fast), "a WQE pending");
    f.qp.ring_doorbell();
    drop(f.qp.batch());
    let b = f.qp.batch();
    assert!(!b.qp().sq.lean_open(b.qp().sq.dc_fast), "in a batch");
}

/// The same WRs on two DCIs, one through the lean DC post and one through the generic post,
/// with retires in between so that the WQEs go round the ring (and wrap at its end): the same
/// results, the same bytes; every WR the generic post accepted found the lean post's gate
/// open (and the lean post accepts every WR whose gate is open).
#[test]
fn the_lean_dc_post_writes_the_generic_posts_bytes_all_round_the_ring() {
    let payload: Vec<u8> = (0..200u8).collect();
    for mode in [DoorbellMode::BfPost, DoorbellMode::Bf, DoorbellMode::Db] {
        for (wqe_cnt, max_post) in [(16u32, 8u32), (16, 4), (32, 5), (8, 2)] {
            let mut lean = dci(wqe_cnt, 64, mode);
            let mut generic = dci(wqe_cnt, 64, mode);
            for f in [&mut lean, &mut generic] {
                f.qp.set_max_send_wr(max_post).unwrap();
            }
            let limit = lean.qp.dc_inline;
            assert!(limit >= LEAN_INLINE, "{wqe_cnt}/{max_post}: {limit}");
            let mut seed = 0x2545_f491_4f6c_dd1du64;
            let (mut lean_taken, mut accepted) = (0, 0);
            for i in 0..400u64 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let len = (seed % (limit as u64 + 1)) as usize;
                let d = dest(
                    0x3a1 + (seed >> 40) as u32 % 3,
                    seed >> 8,
                    (seed >> 20) as u16 % 3,
                );
                let flags = SendFlags::from_bits_truncate((seed >> 30) as u8 & 7);
                if (seed >> 50).is_multiple_of(3) && lean.qp.sq_outstanding_wrs() != 0 {
                    for f in [&mut lean, &mut generic] {
                        retire_oldest(&mut f.qp);
                    }
                    continue;
                }
                let gate_open = lean.qp.sq.lean_open(lean.qp.sq.dc_fast)
                    || lean.qp.sq.lean_open(lean.qp.sq.dc_other);
                let half = lean.qp.sq.db.offset() as usize;
                assert_eq!(half, generic.qp.sq.db.offset() as usize);
                let a = lean
                    .qp
                    .post_dc_write_inline(i, &payload[..len], REMOTE, &d, flags);
                let wr = SendWr::write(i, REMOTE)
                    .inline(&payload[..len])
                    .flags(flags)
                    .dc(&d);
                let b = generic.qp.post_planned(&wr);
                let what = format!("{mode:?}, {wqe_cnt}/{max_post}, post {i}, {len} bytes");
                assert_eq!(a, b, "{what}");
                accepted += a.is_ok() as u32;
                if gate_open {
                    assert!(a.is_ok(), "an open gate: {what}");
                    lean_taken += 1;
                }
                let ds = (64
                    + 16
                    + if len == 0 {
                        0
                    } else {
                        (4 + len).div_ceil(16) * 16
                    })
                    / 16;
                // A refused post wrote nothing: the half holds an older copy's padding.
                let bf = if a.is_ok() { ds * 16 } else { 0 };
                assert_same(&lean, &generic, half, bf, &what);
                assert_eq!(
                    lean.qp.sq_outstanding_wrs(),
                    generic.qp.sq_outstanding_wrs()
                );
            }
            // Every WR the queue took, the hot gate had let through: the full path's retires
            // move the DC gates.
            assert_eq!(lean_taken, accepted, "{mode:?}, {wqe_cnt}/{max_post}");
            assert!(accepted > 100, "{mode:?}, {wqe_cnt}/{max_post}: {accepted}");
        }
    }
}

/// From an idle DCI the hot gate takes exactly `max_post` WQEs of two blocks, one per free
/// WR (the gate moves by one block per post, the producer index by two); the next is refused
/// as the generic post refuses it, with nothing written.
#[test]
fn the_dc_gate_counts_wrs_not_blocks() {
    let d = dest(0x3a1, 7, 0);
    for (wqe_cnt, max_post) in [(16u32, 8u32), (16, 5), (64, 16)] {
        let mut f = dci(wqe_cnt, 64, DoorbellMode::BfPost);
        f.qp.set_max_send_wr(max_post).unwrap();
        for i in 0..max_post {
            assert!(
                f.qp.sq.lean_open(f.qp.sq.dc_fast),
                "{wqe_cnt}/{max_post}: post {i}"
            );
            f.qp.post_dc_write_inline(i as u64, b"8 bytes!", REMOTE, &d, SendFlags::SIGNALED)
                .unwrap();
        }
        assert!(!f.qp.sq.lean_open(f.qp.sq.dc_fast));
        let pi = f.qp.sq.pi;
        let wr = SendWr::write(99, REMOTE).inline(b"8 bytes!").dc(&d);
        let got =
            f.qp.post_dc_write_inline(99, b"8 bytes!", REMOTE, &d, SendFlags::SIGNALED);
        assert!(got.is_err(), "the queue is full");
        assert_eq!(got, f.qp.post_planned(&wr), "the generic post's error");
        assert_eq!(f.qp.sq.pi, pi, "nothing written");
        // A retire frees one WR; the shut gate opens again at the next post.
        retire_oldest(&mut f.qp);
        f.qp.post_dc_write_inline(100, b"8 bytes!", REMOTE, &d, SendFlags::SIGNALED)
            .unwrap();
        assert_eq!(f.qp.sq_outstanding_wrs(), max_post);
    }
}

/// A WQE of the generic path larger than `wr_bbs` blocks outstanding: the gate keeps room
/// for a lean WQE of `wr_bbs` blocks per free WR, or stays shut (the generic post decides).
#[test]
fn a_large_generic_wqe_keeps_the_blocks_counted() {
    let d = dest(0x3a1, 7, 0);
    let big = [0x11u8; 400];
    let mut lean = dci(16, 512, DoorbellMode::BfPost);
    let mut generic = dci(16, 512, DoorbellMode::BfPost);
    for f in [&mut lean, &mut generic] {
        f.qp.set_max_send_wr(8).unwrap();
        assert_eq!(f.qp.sq.wr_bbs(), 2);
        // ctrl + AV + raddr + 404 inline bytes: 8 blocks.
        f.qp.post(&SendWr::write(1, REMOTE).inline(&big).dc(&d))
            .unwrap();
    }
    let mut accepted = 0;
    for i in 0..8 {
        let half = lean.qp.sq.db.offset() as usize;
        let a = lean
            .qp
            .post_dc_write_inline(i, b"abc", REMOTE, &d, SendFlags::SIGNALED);
        let b = generic
            .qp
            .post_planned(&SendWr::write(i, REMOTE).inline(b"abc").signaled().dc(&d));
        assert_eq!(a, b, "post {i}");
        accepted += a.is_ok() as u32;
        let bf = if a.is_ok() { 96 } else { 0 };
        assert_same(&lean, &generic, half, bf, &format!("post {i}"));
    }
    assert_eq!(accepted, 4, "8 blocks left: four WQEs of two");
}

/// `Qp::post` sends a DC WRITE with inline data down the lean DC post, never through the
/// planner, in each doorbell mode with a DC sequence; a DC SEND goes through it.
#[test]
fn post_sends_a_dc_inline_write_down_the_lean_path() {
    use crate::qp::plan::planned;
    let d = dest(0x00ab_cdef, 0x1122_3344_5566_7788, 0);
    for mode in [DoorbellMode::BfPost, DoorbellMode::Bf, DoorbellMode::Db] {
        let mut f = dci(64, 64, mode);
        f.qp.set_max_send_wr(16).unwrap();
        let before = planned::count();
        f.qp.post(&SendWr::write(1, REMOTE).inline(&[1; 8]).dc(&d))
            .unwrap();
        assert_eq!(planned::count(), before, "{mode:?}: planned");
        f.qp.post(&SendWr::send(2).inline(&[1; 8]).dc(&d)).unwrap();
        assert_eq!(planned::count(), before + 1, "{mode:?}: a SEND not planned");
    }
}
