//! Posting against rings in ordinary memory, the rules: misuse is an error and writes
//! nothing, a full send queue is an error and not an overwrite, layouts are validated, the
//! data-path objects are `Send` and own whole cache lines.

use crate::common;
use crate::post::rts;

use common::{FakeQp, QpCfg};
use mlx5_hw::{QpState, QpType};
use mlx5_qp::{Error, Qp, RemoteAddr, SendOp, SendWr, Sge, SqLimit, UdDest};

#[test]
fn misuse_is_an_error_and_writes_nothing() {
    let fake = FakeQp::new(&QpCfg {
        max_send_sge: 2,
        max_inline: 64,
        ..QpCfg::default()
    });
    // SAFETY: `fake` outlives the QP.
    let mut qp = unsafe { Qp::from_layout(&fake.layout, None) }.unwrap();
    let sg = [Sge {
        addr: 0,
        length: 1,
        lkey: 0,
    }; 3];
    let local = Sge {
        addr: 0x100,
        length: 8,
        lkey: 1,
    };
    // Not in RTS yet.
    for st in [QpState::Reset, QpState::Init, QpState::Rtr] {
        qp.set_state(st);
        assert!(matches!(
            qp.post(&SendWr::send(0)),
            Err(Error::WrongState { .. })
        ));
    }
    // In SQE and Error a send is accepted: the device flushes it.
    for st in [QpState::Error, QpState::Sqe] {
        qp.set_state(st);
        qp.post(&SendWr::send(0)).unwrap();
    }
    qp.set_state(QpState::Rts);
    let pi = qp.sq_pi();
    let snapshot = fake.sq.bytes().to_vec();
    type Check = fn(&Error) -> bool;
    let bad: Vec<(SendWr, Check)> = vec![
        (SendWr::send(0).sges(&sg), |e| {
            matches!(e, Error::TooManySges { given: 3, max: 2 })
        }),
        (SendWr::send(0).inline(&[0; 65]), |e| {
            matches!(e, Error::InlineTooLarge { len: 65, max: 64 })
        }),
        (SendWr::fetch_add(0, RemoteAddr::new(4, 1), local, 1), |e| {
            matches!(e, Error::UnalignedAtomic { addr: 4, align: 8 })
        }),
        (
            SendWr::new(
                0,
                SendOp::MaskedFetchAdd32 {
                    remote: RemoteAddr::new(2, 1),
                    local,
                    add: 1,
                    field_boundary: 0,
                },
            ),
            |e| matches!(e, Error::UnalignedAtomic { addr: 2, align: 4 }),
        ),
        (
            SendWr::comp_swap(0, RemoteAddr::new(8, 1), Sge { length: 4, ..local }, 0, 0),
            |e| matches!(e, Error::AtomicBufferTooShort { len: 4, size: 8 }),
        ),
        (
            SendWr::comp_swap(0, RemoteAddr::new(8, 1), local, 0, 0).sges(&sg[..1]),
            |e| matches!(e, Error::UnexpectedData { .. }),
        ),
        (SendWr::read(0, RemoteAddr::new(8, 1)).inline(b"x"), |e| {
            matches!(e, Error::InlineRead)
        }),
        (
            SendWr::send(0).sges(&[Sge {
                addr: 0,
                length: 0x8000_0000,
                lkey: 0,
            }]),
            |e| matches!(e, Error::SgeTooLong { .. }),
        ),
    ];
    for (i, (wr, ok)) in bad.iter().enumerate() {
        let e = qp.post(wr).unwrap_err();
        assert!(ok(&e), "case {i}: {e}");
        assert!(!e.to_string().is_empty());
    }
    // 32-bit masked op at a 4-aligned address is fine.
    let l4 = Sge { length: 4, ..local };
    let ok = SendOp::MaskedFetchAdd32 {
        remote: RemoteAddr::new(4, 1),
        local: l4,
        add: 1,
        field_boundary: 0,
    };
    assert_eq!(qp.sq_pi(), pi);
    assert_eq!(
        fake.sq.bytes(),
        &snapshot[..],
        "no byte written by a refused post"
    );
    qp.post(&SendWr::new(0, ok)).unwrap();

    // QP-type rules.
    let av = [0u8; 48];
    let dest = UdDest::new(&av, 1, 1);
    assert!(matches!(
        qp.post(&SendWr::send(0).ud(&dest)),
        Err(Error::UnexpectedAddress { .. })
    ));
    let uc = FakeQp::new(&QpCfg {
        qp_type: QpType::Uc,
        ..QpCfg::default()
    });
    let mut uq = rts(&uc);
    assert!(matches!(
        uq.post(&SendWr::read(0, RemoteAddr::new(0, 0))),
        Err(Error::OpNotSupported {
            qp_type: QpType::Uc,
            ..
        })
    ));
    assert!(matches!(
        uq.post(&SendWr::comp_swap(0, RemoteAddr::new(0, 0), local, 0, 0)),
        Err(Error::OpNotSupported { .. })
    ));
    uq.post(&SendWr::write_imm(0, RemoteAddr::new(0, 0), 1))
        .unwrap();
    let ud = FakeQp::new(&QpCfg {
        qp_type: QpType::Ud,
        ..QpCfg::default()
    });
    let mut dq = rts(&ud);
    assert!(matches!(
        dq.post(&SendWr::send(0)),
        Err(Error::MissingAddress)
    ));
    assert!(matches!(
        dq.post(&SendWr::write(0, RemoteAddr::new(0, 0)).ud(&dest)),
        Err(Error::OpNotSupported {
            qp_type: QpType::Ud,
            ..
        })
    ));
}

#[test]
fn full_sq_is_an_error_not_an_overwrite() {
    let fake = FakeQp::new(&QpCfg {
        sq_bbs: 4,
        max_inline: 512,
        ..QpCfg::default()
    });
    let mut qp = rts(&fake);
    for i in 0..4 {
        qp.post(&SendWr::send(i).inline(b"a")).unwrap();
    }
    let snapshot = fake.sq.bytes().to_vec();
    assert_eq!(
        qp.post(&SendWr::send(9).inline(b"a")),
        Err(Error::SqFull {
            limit: SqLimit::WorkRequests,
            needed: 1,
            free: 0
        })
    );
    assert_eq!(fake.sq.bytes(), &snapshot[..]);
    assert_eq!(fake.sq_dbrec(), 4);
    // A WQE too large for the ring at all.
    let big = [0u8; 300];
    assert_eq!(
        qp.post(&SendWr::send(9).inline(&big)),
        Err(Error::WqeTooLarge {
            bytes: 320,
            max: 256
        })
    );
}

#[test]
fn layouts_are_validated() {
    let mut fake = FakeQp::new(&QpCfg::default());
    fake.layout.sq.wqe_cnt = 12;
    // SAFETY: `fake`'s memory is mapped and outlives the call; the bad layout (12 blocks, not a
    // power of two) is refused before anything is touched.
    let r = unsafe { Qp::from_layout(&fake.layout, None) };
    assert!(matches!(r, Err(Error::BadLayout(_))));
    fake.layout.sq.wqe_cnt = 16;
    fake.layout.sq.stride = 32;
    // SAFETY: as above; a 32-byte SQ stride is refused.
    let r = unsafe { Qp::from_layout(&fake.layout, None) };
    assert!(matches!(r, Err(Error::BadLayout(_))));
    fake.layout.sq.stride = 64;
    // SAFETY: as above; an SRQ number for a QP whose layout has its own RQ is refused.
    let r = unsafe { Qp::from_layout(&fake.layout, Some(3)) };
    assert!(matches!(r, Err(Error::BadLayout(_))));
    // SAFETY: `fake` outlives the QP (dropped at the end of the statement) and nothing else
    // posts to it.
    assert!(unsafe { Qp::from_layout(&fake.layout, None) }.is_ok());
}

#[test]
fn qp_is_send() {
    fn is_send<T: Send>() {}
    is_send::<Qp>();
    is_send::<mlx5_qp::Cq>();
    is_send::<mlx5_qp::Srq>();
}

/// The layout rule for one QP and CQ per thread (`mlx5_qp` `lines` module): a `Qp`, `Cq` and
/// `Srq` each own whole cache lines, so two threads' objects side by side (in a `Vec`, in
/// boxes) never share a written line.
#[test]
fn data_path_objects_own_whole_cache_lines() {
    use mlx5_qp::{Cq, Qp, Srq};
    for (align, size) in [
        (core::mem::align_of::<Qp>(), core::mem::size_of::<Qp>()),
        (core::mem::align_of::<Cq>(), core::mem::size_of::<Cq>()),
        (core::mem::align_of::<Srq>(), core::mem::size_of::<Srq>()),
    ] {
        assert_eq!(align, 64);
        assert_eq!(size % 64, 0);
    }
}
