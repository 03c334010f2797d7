//! The lean entry points (`post_write_inline`, `post_write`, `post_send_inline`, `post_send`)
//! and the fast poll path: pinned bytes, and the promise that a lean post is exactly the
//! generic `post` of the equivalent WR — same result or error, same ring, doorbell record,
//! BlueFlame bytes and completions — checked on random sequences against a twin QP.

use crate::common;

use common::{req, FakeCq, FakeQp, QpCfg};
use mlx5_cq::Cqe64;
use mlx5_hw::{QpState, QpType};
use mlx5_qp::{
    Cq, DoorbellMode, Error, Qp, RemoteAddr, SendFlags, SendWr, Sge, SqLimit, Wc, WcOpcode,
    WcStatus,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};

const QPN: u32 = 0x1234;

pub(crate) fn qp_in(fake: &FakeQp, state: QpState) -> Qp {
    // SAFETY: `fake` owns the memory and outlives the QP in every test.
    let mut qp = unsafe { Qp::from_layout(&fake.layout, None) }.unwrap();
    qp.set_state(state);
    qp
}

fn be32(b: &[u8], off: usize) -> u32 {
    u32::from_be_bytes(b[off..off + 4].try_into().unwrap())
}
fn be64(b: &[u8], off: usize) -> u64 {
    u64::from_be_bytes(b[off..off + 8].try_into().unwrap())
}

#[test]
fn write_inline_bytes_blueflame_and_toggle() {
    let fake = FakeQp::new(&QpCfg::default());
    let mut qp = qp_in(&fake, QpState::Rts);
    let remote = RemoteAddr::new(0x1122_3344_5566_7788, 0xabcd);
    qp.post_write_inline(7, b"8 bytes!", remote, SendFlags::SIGNALED)
        .unwrap();
    let b = fake.bb(0).to_vec();
    // ctrl: opmod 0, wqe_index 0, opcode RDMA_WRITE; qpn, ds 3; signature 0; CE = 2; imm 0.
    assert_eq!(
        &b[0..16],
        &[0, 0, 0, 0x08, 0, 0x12, 0x34, 3, 0, 0, 0, 0x08, 0, 0, 0, 0]
    );
    assert_eq!(be64(&b, 16), 0x1122_3344_5566_7788);
    assert_eq!(be32(&b, 24), 0xabcd);
    assert_eq!(be32(&b, 28), 0);
    assert_eq!(be32(&b, 32), 0x8000_0008);
    assert_eq!(&b[36..44], b"8 bytes!");
    assert_eq!(fake.sq_dbrec(), 1);
    assert_eq!(
        &fake.bf()[..64],
        &fake.bf_line(0)[..],
        "one block through BlueFlame"
    );
    assert_eq!(
        &fake.bf()[48..64],
        &b[32..48],
        "the line padded with its third unit"
    );
    assert_eq!(qp.bf_offset(), 256);
    assert_eq!(qp.pending_doorbell(), 0);

    // The second WQE: index 1, the other half, fence and solicited bits.
    qp.post_write_inline(8, b"", remote, SendFlags::FENCE | SendFlags::SOLICITED)
        .unwrap();
    let b = fake.bb(1).to_vec();
    assert_eq!(
        &b[0..8],
        &[0, 0, 1, 0x08, 0, 0x12, 0x34, 2],
        "no inline segment"
    );
    assert_eq!(b[11], 0x80 | 0x02);
    assert_eq!(&fake.bf()[256..320], &fake.bf_line(1)[..]);
    assert_eq!(qp.bf_offset(), 0);
    assert_eq!(fake.sq_dbrec(), 2);
}

#[test]
fn write_sge_rings_the_8_byte_doorbell_without_blueflame() {
    let fake = FakeQp::new(&QpCfg {
        bf_size: 0,
        ..QpCfg::default()
    });
    let mut qp = qp_in(&fake, QpState::Rts);
    let sge = Sge {
        addr: 0xdead_beef_0000,
        length: 4096,
        lkey: 0x55,
    };
    qp.post_write(1, sge, RemoteAddr::new(0x2000, 9), SendFlags::empty())
        .unwrap();
    let b = fake.bb(0).to_vec();
    assert_eq!(&b[0..12], &[0, 0, 0, 0x08, 0, 0x12, 0x34, 3, 0, 0, 0, 0]);
    assert_eq!(be64(&b, 16), 0x2000);
    assert_eq!(be32(&b, 24), 9);
    assert_eq!(
        (be32(&b, 32), be32(&b, 36), be64(&b, 40)),
        (4096, 0x55, 0xdead_beef_0000)
    );
    assert_eq!(
        &fake.bf()[..8],
        &b[..8],
        "the 8-byte doorbell is ctrl bytes 0..8"
    );
    assert!(fake.bf()[8..].iter().all(|&x| x == 0));
    assert_eq!(fake.sq_dbrec(), 1);
    assert_eq!(qp.bf_offset(), 0, "no half to toggle");
}

#[test]
fn send_inline_and_send_sge_bytes() {
    let fake = FakeQp::new(&QpCfg {
        sig_all: true,
        ..QpCfg::default()
    });
    let mut qp = qp_in(&fake, QpState::Rts);
    qp.post_send_inline(1, b"hi", SendFlags::empty()).unwrap();
    let b = fake.bb(0).to_vec();
    // ctrl + align16(4 + 2): 2 DS; sq_sig_all sets CE.
    assert_eq!(&b[0..12], &[0, 0, 0, 0x0a, 0, 0x12, 0x34, 2, 0, 0, 0, 0x08]);
    assert_eq!(be32(&b, 16), 0x8000_0002);
    assert_eq!(&b[20..22], b"hi");
    let sge = Sge {
        addr: 0x1000,
        length: 8,
        lkey: 7,
    };
    qp.post_send(2, sge, SendFlags::SIGNALED).unwrap();
    let b = fake.bb(1).to_vec();
    assert_eq!(&b[0..12], &[0, 0, 1, 0x0a, 0, 0x12, 0x34, 2, 0, 0, 0, 0x08]);
    assert_eq!((be32(&b, 16), be32(&b, 20), be64(&b, 24)), (8, 7, 0x1000));
}

#[test]
fn long_inline_spans_blocks_and_wraps_like_post() {
    let cfg = QpCfg {
        sq_bbs: 4,
        ..QpCfg::default()
    };
    let (mut a, mut b) = (Twin::new(&cfg), Twin::new(&cfg));
    // Two WRs of up to two blocks each (the computed limit, 1, would leave no room for the
    // refused WQE below to be refused for its blocks).
    for t in [&mut a, &mut b] {
        t.qp.set_max_send_wr(2).unwrap();
    }
    let remote = RemoteAddr::new(0x10, 1);
    let payload: Vec<u8> = (0..100u8).collect();
    // Three one-block posts, each retired; then a two-block WQE starting in the last block
    // wraps.
    for id in 0..3 {
        generic_post(
            &mut a.qp,
            &SendWr::write(id, remote).inline(b"x").signaled(),
        )
        .unwrap();
        b.qp.post_write_inline(id, b"x", remote, SendFlags::SIGNALED)
            .unwrap();
        for t in [&mut a, &mut b] {
            t.fcq.push(req(QPN, id as u16, 0x08));
            let mut wcs = [Wc::default(); 4];
            assert_eq!(t.cq.poll(&mut t.qp, &mut wcs), Ok(1));
            t.fake.clear_bf();
        }
    }
    generic_post(&mut a.qp, &SendWr::write(9, remote).inline(&payload[..60])).unwrap();
    b.qp.post_write_inline(9, &payload[..60], remote, SendFlags::empty())
        .unwrap();
    assert_eq!(b.fake.bb(3)[7], 6, "ctrl + raddr + align16(4 + 60) = 6 DS");
    assert_eq!(
        &b.fake.bb(0)[..32],
        &payload[28..60],
        "the payload continues at block 0"
    );
    assert_eq!(
        &b.fake.bf()[256..384],
        &b.fake.wqe(3, 2)[..],
        "BlueFlame gets the logical WQE"
    );
    assert_eq!(a.fake.sq.bytes(), b.fake.sq.bytes());
    assert_eq!(a.fake.bf(), b.fake.bf());
    // Two blocks free: a three-block WQE is refused the same way.
    let ea = generic_post(&mut a.qp, &SendWr::write(10, remote).inline(&payload));
    let eb =
        b.qp.post_write_inline(10, &payload, remote, SendFlags::empty());
    assert_eq!(
        ea,
        Err(Error::SqFull {
            limit: SqLimit::Blocks,
            needed: 3,
            free: 2
        })
    );
    assert_eq!(eb, ea);
}

#[test]
fn lean_posts_fall_back_to_the_generic_errors() {
    let fake = FakeQp::new(&QpCfg {
        max_inline: 16,
        ..QpCfg::default()
    });
    let remote = RemoteAddr::new(0, 0);
    let mut qp = qp_in(&fake, QpState::Rtr);
    assert!(matches!(
        qp.post_write_inline(1, b"x", remote, SendFlags::empty()),
        Err(Error::WrongState { .. })
    ));
    qp.set_state(QpState::Rts);
    assert_eq!(
        qp.post_write_inline(1, &[0; 17], remote, SendFlags::empty()),
        Err(Error::InlineTooLarge { len: 17, max: 16 })
    );
    let long = Sge {
        addr: 0,
        length: 0x8000_0000,
        lkey: 1,
    };
    assert_eq!(
        qp.post_send(1, long, SendFlags::empty()),
        Err(Error::SgeTooLong { len: 0x8000_0000 })
    );
    assert_eq!(qp.sq_pi(), 0, "nothing written");
    assert_eq!(fake.sq_dbrec(), 0);
    // A zero-length gather entry is skipped, as `post` does: ctrl + raddr only.
    let empty = Sge {
        addr: 0,
        length: 0,
        lkey: 1,
    };
    qp.post_write(2, empty, remote, SendFlags::empty()).unwrap();
    assert_eq!(fake.bb(0)[7], 2);

    let ud = FakeQp::new(&QpCfg {
        qp_type: QpType::Ud,
        ..QpCfg::default()
    });
    let mut qp = qp_in(&ud, QpState::Rts);
    assert_eq!(
        qp.post_send_inline(1, b"x", SendFlags::empty()),
        Err(Error::MissingAddress)
    );
}

#[test]
fn a_pending_wqe_makes_the_lean_post_ring_for_both() {
    let fake = FakeQp::new(&QpCfg::default());
    let mut qp = qp_in(&fake, QpState::Rts);
    qp.post_deferred(&SendWr::send(1)).unwrap();
    qp.post_send_inline(2, b"x", SendFlags::empty()).unwrap();
    assert_eq!(qp.pending_doorbell(), 0);
    assert_eq!(fake.sq_dbrec(), 2);
    assert_eq!(
        &fake.bf()[..8],
        &fake.bb(1)[..8],
        "8-byte doorbell of the last WQE"
    );
    assert!(
        fake.bf()[8..64].iter().all(|&x| x == 0),
        "no BlueFlame for two WQEs"
    );
}

#[test]
fn fast_poll_path_keeps_every_check() {
    let fake = FakeQp::new(&QpCfg::default());
    let mut qp = qp_in(&fake, QpState::Rts);
    let mut fcq = FakeCq::new(8, 64, false);
    // SAFETY: `fcq` owns the memory and outlives the CQ.
    let mut cq = unsafe { Cq::from_layout(&fcq.layout) }.unwrap();
    let remote = RemoteAddr::new(0, 0);
    qp.post_write_inline(1, b"a", remote, SendFlags::empty())
        .unwrap();
    qp.post_write_inline(2, b"b", remote, SendFlags::SIGNALED)
        .unwrap();
    // The SE bit does not take a requester CQE off the fast path.
    let mut c = req(QPN, 1, 0x08);
    c.op_own |= 0x02;
    fcq.push(c);
    fcq.push(req(QPN, 1, 0x08)); // the same WQE again: already retired
    let mut wcs = [Wc::default(); 4];
    assert_eq!(cq.poll(&mut qp, &mut wcs), Ok(1));
    assert_eq!(
        (
            wcs[0].wr_id(),
            wcs[0].status(),
            wcs[0].opcode(),
            wcs[0].qp_num()
        ),
        (2, WcStatus::Success, WcOpcode::RdmaWrite, QPN)
    );
    assert_eq!(
        qp.sq_outstanding_bbs(),
        0,
        "the unsignaled WQE is retired with it"
    );
    assert!(matches!(
        cq.poll(&mut qp, &mut wcs),
        Err(Error::BadCqe { wqe_counter: 1, .. })
    ));
    assert_eq!(fcq.set_ci(), 2);
    // A CQE of the next lap's parity is not consumed.
    let mut b = *req(QPN, 2, 0x08).as_bytes();
    b[63] = 0x01;
    fcq.buf.bytes_mut()[2 * 64..3 * 64].copy_from_slice(&Cqe64::from_bytes(&b).as_bytes()[..]);
    assert_eq!(cq.poll(&mut qp, &mut wcs), Ok(0));
}

/// One step of the twin run.
#[derive(Clone, Debug)]
enum Step {
    /// A lean post (kind 0..4) and its generic twin.
    Post {
        kind: u8,
        len: usize,
        sge_len: u32,
        flags: u8,
        remote: u64,
    },
    /// A generic post left pending on both.
    Defer(usize),
    /// `n` posts of one lean shape (kind 0..4, as in `Post`) in one `Qp::batch` on the lean
    /// twin, through `post_deferred` and one `ring_doorbell` on the generic one; with `mixed`,
    /// a generic-only shape (a SEND with immediate) in the middle.
    Batch {
        n: u8,
        kind: u8,
        len: usize,
        sge_len: u32,
        flags: u8,
        mixed: bool,
    },
    /// Ring both.
    Ring,
    /// The device completes the last posted WQE on both; both poll.
    Retire,
    /// The control path moves both QPs.
    State(QpState),
    /// Both QPs change their doorbell mode (refused alike without BlueFlame).
    Mode(u8),
}

fn mode_of(m: u8) -> DoorbellMode {
    match m % 3 {
        0 => DoorbellMode::BfPost,
        1 => DoorbellMode::Bf,
        _ => DoorbellMode::Db,
    }
}

fn step() -> impl Strategy<Value = Step> {
    let sge_len = prop_oneof![
        Just(0u32),
        1u32..5000,
        Just(i32::MAX as u32),
        Just(0x8000_0000u32),
    ];
    let state = prop_oneof![
        4 => Just(QpState::Rts),
        1 => Just(QpState::Sqd),
        1 => Just(QpState::Rtr),
        1 => Just(QpState::Error),
    ];
    prop_oneof![
        8 => (0u8..4, 0usize..300, sge_len, 0u8..8, any::<u64>())
            .prop_map(|(kind, len, sge_len, flags, remote)| Step::Post { kind, len, sge_len, flags, remote }),
        1 => (0usize..40).prop_map(Step::Defer),
        2 => (0u8..6, 0u8..4, 0usize..40, 1u32..100, 0u8..8, any::<bool>())
            .prop_map(|(n, kind, len, sge_len, flags, mixed)| Step::Batch { n, kind, len, sge_len, flags, mixed }),
        1 => Just(Step::Ring),
        3 => Just(Step::Retire),
        1 => state.prop_map(Step::State),
        1 => (0u8..3).prop_map(Step::Mode),
    ]
}

struct Twin {
    fake: FakeQp,
    fcq: FakeCq,
    qp: Qp,
    cq: Cq,
}

impl Twin {
    fn new(cfg: &QpCfg) -> Twin {
        let fake = FakeQp::new(cfg);
        let fcq = FakeCq::new(64, 64, false);
        let qp = qp_in(&fake, QpState::Rts);
        // SAFETY: `fcq` owns the memory and outlives the CQ (fields drop in order).
        let cq = unsafe { Cq::from_layout(&fcq.layout) }.unwrap();
        Twin { fake, fcq, qp, cq }
    }
}

/// The generic path alone (`post` would take the lean one for these shapes): write the WQE,
/// then ring only if it was accepted, as `post` does.
fn generic_post(qp: &mut Qp, wr: &SendWr<'_>) -> Result<(), Error> {
    qp.post_deferred(wr)?;
    qp.ring_doorbell();
    Ok(())
}

fn same(a: &Twin, b: &Twin) -> Result<(), TestCaseError> {
    prop_assert_eq!(a.fake.sq.bytes(), b.fake.sq.bytes(), "ring bytes");
    prop_assert_eq!(a.fake.bf(), b.fake.bf(), "BlueFlame bytes");
    prop_assert_eq!(a.fake.sq_dbrec(), b.fake.sq_dbrec());
    prop_assert_eq!(a.qp.sq_pi(), b.qp.sq_pi());
    prop_assert_eq!(a.qp.bf_offset(), b.qp.bf_offset());
    prop_assert_eq!(a.qp.pending_doorbell(), b.qp.pending_doorbell());
    prop_assert_eq!(a.qp.sq_outstanding_bbs(), b.qp.sq_outstanding_bbs());
    prop_assert_eq!(a.qp.sq_outstanding_wrs(), b.qp.sq_outstanding_wrs());
    prop_assert_eq!(a.qp.sq_free_wrs(), b.qp.sq_free_wrs());
    prop_assert_eq!(a.qp.doorbell_mode(), b.qp.doorbell_mode());
    Ok(())
}

proptest! {
    #![proptest_config(Config {
        cases: 64,
        rng_seed: RngSeed::Fixed(0x6c65_616e),
        failure_persistence: None,
        ..Config::default()
    })]

    #[test]
    fn lean_posts_equal_generic_posts(
        qp_type in prop_oneof![4 => Just(QpType::Rc), 1 => Just(QpType::Uc), 1 => Just(QpType::Ud)],
        sq_bbs in prop_oneof![Just(1u32), Just(2), Just(4), Just(16)],
        bf_size in prop_oneof![Just(0u32), Just(64), Just(256)],
        max_inline in prop_oneof![Just(0u32), Just(12), Just(60), Just(220), Just(1000)],
        max_send_sge in 0u32..3,
        sig_all in any::<bool>(),
        steps in proptest::collection::vec(step(), 1..80),
    ) {
        let cfg = QpCfg { qp_type, sq_bbs, bf_size, max_inline, max_send_sge, sig_all, ..QpCfg::default() };
        let (mut g, mut l) = (Twin::new(&cfg), Twin::new(&cfg));
        let mut last_pi = None;
        let payload: Vec<u8> = (0..300).map(|i| (i * 7 + 3) as u8).collect();
        for (id, s) in steps.into_iter().enumerate() {
            let id = id as u64;
            match s {
                Step::Post { kind, len, sge_len, flags, remote } => {
                    let flags = SendFlags::from_bits_truncate(flags);
                    let remote = RemoteAddr::new(remote, remote as u32 ^ 0x5a5a);
                    let data = &payload[..len];
                    let sge = Sge { addr: remote.addr.rotate_left(7), length: sge_len, lkey: 0x77 };
                    let sges = [sge];
                    let wr = match kind {
                        0 => SendWr::write(id, remote).inline(data),
                        1 => SendWr::write(id, remote).sges(&sges),
                        2 => SendWr::send(id).inline(data),
                        _ => SendWr::send(id).sges(&sges),
                    }
                    .flags(flags);
                    let pi = g.qp.sq_pi();
                    let rg = generic_post(&mut g.qp, &wr);
                    // Half the time through `post`, which dispatches to the lean paths.
                    let rl = match kind {
                        _ if remote.addr & 1 == 1 => l.qp.post(&wr),
                        0 => l.qp.post_write_inline(id, data, remote, flags),
                        1 => l.qp.post_write(id, sge, remote, flags),
                        2 => l.qp.post_send_inline(id, data, flags),
                        _ => l.qp.post_send(id, sge, flags),
                    };
                    prop_assert_eq!(rg, rl, "{:?}", wr);
                    if rg.is_ok() {
                        last_pi = Some(pi);
                    }
                }
                Step::Batch { n, kind, len, sge_len, flags, mixed } => {
                    let flags = SendFlags::from_bits_truncate(flags);
                    let remote = RemoteAddr::new(0x1000 + id, 0x42);
                    let sges = [Sge { addr: 0x3000, length: sge_len, lkey: 0x77 }];
                    let mut bl = l.qp.batch();
                    for i in 0..n as u64 {
                        let wr = if mixed && i == n as u64 / 2 {
                            SendWr::send_imm(id + i, 7).sges(&sges)
                        } else {
                            match kind {
                                0 => SendWr::write(id + i, remote).inline(&payload[..len]),
                                1 => SendWr::write(id + i, remote).sges(&sges),
                                2 => SendWr::send(id + i).inline(&payload[..len]),
                                _ => SendWr::send(id + i).sges(&sges),
                            }
                            .flags(flags)
                        };
                        let pi = g.qp.sq_pi();
                        let rg = g.qp.post_deferred(&wr);
                        prop_assert_eq!(rg, bl.post(&wr), "{:?}", wr);
                        prop_assert_eq!(bl.qp().pending_doorbell(), g.qp.pending_doorbell());
                        if rg.is_ok() {
                            last_pi = Some(pi);
                        }
                    }
                    drop(bl);
                    g.qp.ring_doorbell();
                }
                Step::Defer(len) => {
                    let wr = SendWr::send(id).inline(&payload[..len]);
                    let pi = g.qp.sq_pi();
                    let r = g.qp.post_deferred(&wr);
                    prop_assert_eq!(r, l.qp.post_deferred(&wr));
                    if r.is_ok() {
                        last_pi = Some(pi);
                    }
                }
                Step::Ring => {
                    g.qp.ring_doorbell();
                    l.qp.ring_doorbell();
                }
                Step::Retire => {
                    g.qp.ring_doorbell();
                    l.qp.ring_doorbell();
                    if let Some(pi) = last_pi.take() {
                        for t in [&mut g, &mut l] {
                            t.fcq.push(req(QPN, pi, 0x0a));
                        }
                        let (mut wg, mut wl) = ([Wc::default(); 4], [Wc::default(); 4]);
                        let ng = g.cq.poll(&mut g.qp, &mut wg);
                        let nl = l.cq.poll(&mut l.qp, &mut wl);
                        prop_assert_eq!(&ng, &nl);
                        let n = ng.unwrap_or(0);
                        prop_assert_eq!(&wg[..n], &wl[..n]);
                    }
                }
                Step::State(s) => {
                    if s == QpState::Error {
                        last_pi = None;
                    }
                    g.qp.set_state(s);
                    l.qp.set_state(s);
                }
                Step::Mode(m) => {
                    let r = g.qp.set_doorbell_mode(mode_of(m));
                    prop_assert_eq!(r.is_ok(), bf_size > 0 || mode_of(m) == DoorbellMode::Db);
                    prop_assert_eq!(r, l.qp.set_doorbell_mode(mode_of(m)));
                }
            }
            same(&g, &l)?;
        }
    }
}
