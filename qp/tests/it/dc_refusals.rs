//! DC: what mlx5 refuses is refused — a DCI WR without its target, a target on another QP
//! type, a DCT number over 24 bits, the RC lean entry on a DCI, the DC lean entry on RC or
//! above the inline limit; DC attributes that do not fit the QP (rdma-core `mlx5_create_qp`,
//! `create_dct`); the emulation's entry (`SimDevice::make_dc`) on a QP that is DC already, of
//! another type or unknown; a DCT moved out of RTR (it stays there), a DCI's DCT number.

use crate::datapath_support::*;
use crate::dc::{dest, fabric3, initiator, target, KEY};
use mlx5_hw::{
    AttrMask, CqInitAttr, DcInit, DciStreams, Device, QpAttr, QpCap, QpId, QpInitAttr, QpInitEx,
    QpState, QpType, SrqInitAttr,
};
use mlx5_qp::{DcDest, SendWr};

#[test]
fn what_mlx5_refuses_is_refused() {
    let (_f, da, db, _) = fabric3();
    let mut ini = initiator(&da, None, 14, 7);
    let t = target(&db, KEY);
    let d = dest(&ini, &t, KEY);
    // A DCI WR without its target; a target on an RC QP; a DCT number beyond 24 bits.
    assert!(matches!(
        ini.qp.post(&SendWr::send(1).inline(b"x")),
        Err(mlx5_qp::Error::DcDest(_))
    ));
    let far = DcDest::new(&[0; 48], 1 << 24, KEY);
    assert!(matches!(
        ini.qp.post(&SendWr::send(1).inline(b"x").dc(&far)),
        Err(mlx5_qp::Error::DcDest(_))
    ));
    let (_f2, mut rc, _) = pair(&Opts::default());
    assert!(matches!(
        rc.qp.post(&SendWr::send(1).inline(b"x").dc(&d)),
        Err(mlx5_qp::Error::DcDest(_))
    ));
    // The RC lean entry point is never a DCI's: without a target the WQE would be malformed.
    assert!(ini
        .qp
        .post_write_inline(1, b"x", t.buf.remote(0), Default::default())
        .is_err());
    // The lean DC entry point refuses what the generic path refuses: another QP type, a
    // payload above max_inline_data.
    assert!(matches!(
        rc.qp
            .post_dc_write_inline(1, b"x", t.buf.remote(0), &d, Default::default()),
        Err(mlx5_qp::Error::DcDest(_))
    ));
    assert!(matches!(
        ini.qp
            .post_dc_write_inline(1, &[0; 2000], t.buf.remote(0), &d, Default::default()),
        Err(mlx5_qp::Error::InlineTooLarge { .. })
    ));
    let pd = da.alloc_pd().unwrap();
    let cq = da.create_cq(&CqInitAttr::default()).unwrap();
    let srq = da
        .create_srq(
            pd,
            &SrqInitAttr {
                max_wr: 4,
                max_sge: 1,
                srq_limit: 0,
            },
        )
        .unwrap();
    let base = QpInitAttr {
        qp_type: QpType::Dct,
        send_cq: cq.id,
        recv_cq: cq.id,
        srq: Some(srq.id),
        cap: QpCap::default(),
        sq_sig_all: false,
    };
    let dct = |attr: &QpInitAttr, dc: Option<DcInit>| {
        da.create_qp_ex(
            pd,
            attr,
            &QpInitEx {
                dc,
                ..QpInitEx::default()
            },
        )
    };
    let target_ex = Some(DcInit::Target { access_key: 1 });
    // No SRQ; a send queue; no DC attributes; the initiator kind; plain create_qp.
    assert!(dct(&QpInitAttr { srq: None, ..base }, target_ex).is_err());
    let mut sq = base;
    sq.cap.max_send_wr = 4;
    assert!(dct(&sq, target_ex).is_err());
    assert!(dct(&base, None).is_err());
    assert!(dct(&base, Some(DcInit::Initiator { streams: None })).is_err());
    assert!(da.create_qp(pd, &base).is_err());
    // The emulation's entry (a DC type made on its own rings, then given its DC attributes):
    // refused for a QP that is DC already, of another type, or unknown.
    let made = dct(&base, target_ex).unwrap();
    let again = da.make_dc(made.id, DcInit::Target { access_key: 2 });
    assert!(again.unwrap_err().to_string().contains("already DC"));
    assert!(rc
        .dev
        .make_dc(rc.info.id, DcInit::Initiator { streams: None })
        .is_err());
    assert!(da
        .make_dc(QpId(0xdead), DcInit::Target { access_key: 1 })
        .is_err());
    da.destroy_qp(made.id).unwrap();
    // A DCI with a receive side, with more streams than the caps, DC attributes on RC.
    let dci = QpInitAttr {
        qp_type: QpType::Dci,
        srq: None,
        cap: QpCap {
            max_send_wr: 4,
            max_send_sge: 1,
            ..QpCap::default()
        },
        ..base
    };
    let mut with_rq = dci;
    with_rq.cap.max_recv_wr = 4;
    assert!(dct(&with_rq, Some(DcInit::Initiator { streams: None })).is_err());
    let many = DciStreams {
        log_num_concurent: 5,
        log_num_errored: 1,
    };
    assert!(dct(
        &dci,
        Some(DcInit::Initiator {
            streams: Some(many)
        })
    )
    .is_err());
    let ok = DciStreams {
        log_num_concurent: 4,
        log_num_errored: 4,
    };
    let made = dct(&dci, Some(DcInit::Initiator { streams: Some(ok) })).unwrap();
    assert_ne!(made.qpn, 0);
    let rc = QpInitAttr {
        qp_type: QpType::Rc,
        ..dci
    };
    assert!(dct(&rc, Some(DcInit::Initiator { streams: None })).is_err());
    // A DCT stays in RTR: no Error, no Reset; its number is not a DCI's.
    for s in [QpState::Error, QpState::Reset] {
        let e = t
            .dev
            .modify_qp(
                t.dct.id,
                &QpAttr {
                    qp_state: s,
                    ..QpAttr::default()
                },
                AttrMask::STATE,
            )
            .unwrap_err();
        assert!(e.to_string().contains("DCT"), "{e}");
    }
    assert!(da.dct_number(made.id).is_err());
    assert!(da.dct_number(QpId(0xdead)).is_err());
    // The DCT is destroyed from RTR.
    t.dev.destroy_qp(t.dct.id).unwrap();
}
