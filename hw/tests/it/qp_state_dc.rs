//! The DCI and DCT columns of the state table: what `mlx5_ib_modify_qp` accepts for a DC
//! initiator (`modify_dci_qp_is_ok`) and `mlx5_ib_modify_dct` for a DC target
//! (drivers/infiniband/hw/mlx5/qp.c), transition by transition and bit by bit.

use mlx5_hw::qp_state::{check_modify, check_modify_for, legal_targets, rule, KernelVersion};
use mlx5_hw::{AttrMask, ModifyError, QpState, QpType};

use QpState::*;

fn m(bits: &[AttrMask]) -> AttrMask {
    bits.iter().fold(AttrMask::empty(), |a, b| a | *b)
}

#[test]
fn a_dci_goes_reset_init_rtr_rts_with_no_destination_and_back_to_reset_from_anywhere() {
    let t = QpType::Dci;
    let legal: Vec<(QpState, QpState)> = QpState::ALL
        .into_iter()
        .flat_map(|c| legal_targets(c, t).map(move |n| (c, n)))
        .collect();
    let mut want = vec![
        (Reset, Init),
        (Init, Init),
        (Init, Rtr),
        (Rtr, Rts),
        (Rts, Rts),
    ];
    for s in QpState::ALL {
        want.push((s, Reset));
        if s != Reset {
            want.push((s, Error));
        }
    }
    want.sort();
    let mut got = legal.clone();
    got.sort();
    assert_eq!(got, want);
    let r = rule(Init, Rtr, t).unwrap();
    assert_eq!(r.required, AttrMask::PATH_MTU);
    assert_eq!(r.optional, AttrMask::PKEY_INDEX | AttrMask::AV);
    let r = rule(Rtr, Rts, t).unwrap();
    assert_eq!(
        r.required,
        m(&[
            AttrMask::TIMEOUT,
            AttrMask::RETRY_CNT,
            AttrMask::RNR_RETRY,
            AttrMask::MAX_QP_RD_ATOMIC,
            AttrMask::SQ_PSN
        ])
    );
    assert_eq!(r.optional, AttrMask::MIN_RNR_TIMER);
    assert_eq!(
        rule(Reset, Init, t).unwrap().required,
        AttrMask::PKEY_INDEX | AttrMask::PORT
    );
    // What an RC QP needs at RTR is refused: a DCI has no fixed peer.
    let rc_rtr =
        AttrMask::STATE | AttrMask::PATH_MTU | AttrMask::AV | AttrMask::DEST_QPN | AttrMask::RQ_PSN;
    match check_modify(Init, Rtr, t, rc_rtr) {
        Err(ModifyError::ForbiddenAttributes { forbidden, .. }) => {
            assert_eq!(forbidden, AttrMask::DEST_QPN | AttrMask::RQ_PSN)
        }
        e => panic!("{e:?}"),
    }
    check_modify(Init, Rtr, t, AttrMask::STATE | AttrMask::PATH_MTU).unwrap();
    // No access flags at Init (a DCI is never a responder), no IBV_QP_CUR_STATE anywhere.
    assert!(check_modify(
        Reset,
        Init,
        t,
        AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS
    )
    .is_err());
    let rts = AttrMask::STATE | rule(Rtr, Rts, t).unwrap().required;
    check_modify(Rtr, Rts, t, rts).unwrap();
    assert!(check_modify(Rtr, Rts, t, rts | AttrMask::CUR_STATE).is_err());
    // No SQD: the drain steps of RC do not exist for a DCI.
    assert!(matches!(
        check_modify(Rts, Sqd, t, AttrMask::STATE),
        Err(ModifyError::IllegalTransition { .. })
    ));
}

#[test]
fn a_dct_goes_to_rtr_and_stays_there() {
    let t = QpType::Dct;
    for cur in QpState::ALL {
        let targets: Vec<QpState> = legal_targets(cur, t).collect();
        let want: &[QpState] = match cur {
            Reset => &[Init],
            Init => &[Rtr],
            _ => &[],
        };
        assert_eq!(targets, want, "from {cur}");
    }
    let init = rule(Reset, Init, t).unwrap();
    assert_eq!(
        (init.required, init.optional),
        (
            AttrMask::ACCESS_FLAGS | AttrMask::PKEY_INDEX | AttrMask::PORT,
            AttrMask::empty()
        )
    );
    let rtr = rule(Init, Rtr, t).unwrap();
    assert_eq!(
        (rtr.required, rtr.optional),
        (
            AttrMask::MIN_RNR_TIMER | AttrMask::AV | AttrMask::PATH_MTU,
            AttrMask::empty()
        )
    );
    // Neither Error nor Reset: "Modify DCT: Invalid transition".
    for next in [Error, Reset, Rts] {
        assert!(matches!(
            check_modify(Rtr, next, t, AttrMask::STATE),
            Err(ModifyError::IllegalTransition { .. })
        ));
    }
}

#[test]
fn the_rate_limit_pass_through_of_ib_modify_qp_is_ok_is_not_theirs() {
    let k = KernelVersion::Linux7_2;
    let rc = AttrMask::STATE | rule(Rts, Rts, QpType::Rc).unwrap().required;
    check_modify_for(k, Rts, Rts, QpType::Rc, rc | AttrMask::RATE_LIMIT).unwrap();
    assert!(check_modify_for(
        k,
        Rts,
        Rts,
        QpType::Dci,
        AttrMask::STATE | AttrMask::RATE_LIMIT
    )
    .is_err());
}
