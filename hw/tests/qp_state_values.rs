//! `check_values`, `check_limits` and `validate`: ranges, the attribute named in each error,
//! and `IBV_QP_CUR_STATE` checked against the real state.

use mlx5_hw::qp_state::{check_limits, check_values, validate, validate_with_limits, DeviceLimits};
use mlx5_hw::{AhAttr, AttrMask, GlobalRoute, ModifyError, Mtu, QpAttr, QpState, QpType};
use proptest::prelude::*;

fn attr_name(r: Result<impl Sized, ModifyError>) -> Option<&'static str> {
    match r {
        Err(ModifyError::InvalidValue { attr, .. }) => Some(attr),
        _ => None,
    }
}

fn limits() -> DeviceLimits {
    DeviceLimits {
        num_ports: 1,
        pkey_tbl_len: Some(1),
        gid_tbl_len: 4,
        max_mtu: Mtu::Mtu1024,
        max_rd_atomic: 16,
        max_dest_rd_atomic: 16,
        privileged_qkey: false,
    }
}

#[test]
fn each_range_boundary_and_the_attribute_named() {
    type Set = fn(&mut QpAttr, u32);
    let cases: [(AttrMask, &str, Set, u32); 7] = [
        (
            AttrMask::SQ_PSN,
            "IBV_QP_SQ_PSN",
            |a, v| a.sq_psn = v,
            0xff_ffff,
        ),
        (
            AttrMask::RQ_PSN,
            "IBV_QP_RQ_PSN",
            |a, v| a.rq_psn = v,
            0xff_ffff,
        ),
        (
            AttrMask::DEST_QPN,
            "IBV_QP_DEST_QPN",
            |a, v| a.dest_qp_num = v,
            0xff_ffff,
        ),
        (
            AttrMask::TIMEOUT,
            "IBV_QP_TIMEOUT",
            |a, v| a.timeout = v as u8,
            31,
        ),
        (
            AttrMask::RETRY_CNT,
            "IBV_QP_RETRY_CNT",
            |a, v| a.retry_cnt = v as u8,
            7,
        ),
        (
            AttrMask::RNR_RETRY,
            "IBV_QP_RNR_RETRY",
            |a, v| a.rnr_retry = v as u8,
            7,
        ),
        (
            AttrMask::MIN_RNR_TIMER,
            "IBV_QP_MIN_RNR_TIMER",
            |a, v| a.min_rnr_timer = v as u8,
            31,
        ),
    ];
    for (bit, name, set, max) in cases {
        for ty in QpType::ALL {
            let mut a = QpAttr::default();
            set(&mut a, max);
            assert!(check_values(&a, bit, ty).is_ok(), "{name} = max must pass");
            set(&mut a, max + 1);
            assert_eq!(attr_name(check_values(&a, bit, ty)), Some(name));
            // Out of range but not in the mask: not looked at.
            assert!(
                check_values(&a, AttrMask::STATE, ty).is_ok(),
                "{name} outside the mask"
            );
        }
    }
}

#[test]
fn port_and_address_vector() {
    let mut a = QpAttr {
        port_num: 0,
        ..QpAttr::default()
    };
    assert_eq!(
        attr_name(check_values(&a, AttrMask::PORT, QpType::Rc)),
        Some("IBV_QP_PORT")
    );
    a.port_num = 1;
    assert!(check_values(&a, AttrMask::PORT, QpType::Rc).is_ok());

    a.ah_attr = AhAttr {
        port_num: 0,
        ..AhAttr::default()
    };
    assert_eq!(
        attr_name(check_values(&a, AttrMask::AV, QpType::Rc)),
        Some("IBV_QP_AV")
    );
    a.ah_attr.port_num = 1;
    assert!(check_values(&a, AttrMask::AV, QpType::Rc).is_ok());
    a.ah_attr.sl = 16;
    assert_eq!(
        attr_name(check_values(&a, AttrMask::AV, QpType::Rc)),
        Some("IBV_QP_AV")
    );
    a.ah_attr.sl = 15;
    a.ah_attr.grh = Some(GlobalRoute {
        flow_label: 1 << 20,
        ..GlobalRoute::default()
    });
    let e = check_values(&a, AttrMask::AV, QpType::Rc).unwrap_err();
    assert!(e.to_string().contains("flow_label"), "{e}");
    a.ah_attr.grh = Some(GlobalRoute::default());
    assert!(check_values(&a, AttrMask::AV, QpType::Rc).is_ok());
    // AV and PORT together must name the same port.
    a.port_num = 2;
    let e = check_values(&a, AttrMask::AV | AttrMask::PORT, QpType::Rc).unwrap_err();
    assert!(e.to_string().contains("port_num = 2"), "{e}");
}

#[test]
fn device_limits() {
    let l = limits();
    let mut a = QpAttr {
        path_mtu: Mtu::Mtu4096,
        ..QpAttr::default()
    };
    let e = check_limits(&a, AttrMask::PATH_MTU, &l).unwrap_err();
    assert!(
        e.to_string().contains("4096") && e.to_string().contains("1024"),
        "{e}"
    );
    a.path_mtu = Mtu::Mtu1024;
    assert!(check_limits(&a, AttrMask::PATH_MTU, &l).is_ok());

    a.port_num = 2;
    assert_eq!(
        attr_name(check_limits(&a, AttrMask::PORT, &l)),
        Some("IBV_QP_PORT")
    );
    a.pkey_index = 1;
    assert_eq!(
        attr_name(check_limits(&a, AttrMask::PKEY_INDEX, &l)),
        Some("IBV_QP_PKEY_INDEX")
    );
    a.max_rd_atomic = 17;
    assert_eq!(
        attr_name(check_limits(&a, AttrMask::MAX_QP_RD_ATOMIC, &l)),
        Some("IBV_QP_MAX_QP_RD_ATOMIC")
    );
    a.max_dest_rd_atomic = 17;
    assert_eq!(
        attr_name(check_limits(&a, AttrMask::MAX_DEST_RD_ATOMIC, &l)),
        Some("IBV_QP_MAX_DEST_RD_ATOMIC")
    );
    a.ah_attr = AhAttr {
        port_num: 1,
        grh: Some(GlobalRoute {
            sgid_index: 4,
            ..GlobalRoute::default()
        }),
        ..AhAttr::default()
    };
    assert!(check_limits(&a, AttrMask::AV, &l)
        .unwrap_err()
        .to_string()
        .contains("sgid_index"));
    a.qkey = 0x8000_0000;
    assert_eq!(
        attr_name(check_limits(&a, AttrMask::QKEY, &l)),
        Some("IBV_QP_QKEY")
    );
    let privileged = DeviceLimits {
        privileged_qkey: true,
        ..l
    };
    assert!(check_limits(&a, AttrMask::QKEY, &privileged).is_ok());
    a.qkey = 0x1111_1111;
    assert!(check_limits(&a, AttrMask::QKEY, &l).is_ok());
}

#[test]
fn validate_checks_cur_state_against_the_real_state() {
    let mut a = QpAttr {
        qp_state: QpState::Rts,
        cur_qp_state: QpState::Rtr,
        sq_psn: 5,
        ..QpAttr::default()
    };
    let m = AttrMask::STATE | AttrMask::CUR_STATE | AttrMask::SQ_PSN;
    assert_eq!(validate(QpState::Rtr, &a, m, QpType::Ud), Ok(QpState::Rts));
    // The kernel would believe the claim; we compare it with the state the QP is in.
    assert_eq!(
        validate(QpState::Sqd, &a, m, QpType::Ud),
        Err(ModifyError::CurrentStateMismatch {
            claimed: QpState::Rtr,
            actual: QpState::Sqd
        })
    );
    // Without IBV_QP_STATE the target is the current state: RTS->RTS with a new Q_Key.
    a.qkey = 7;
    assert_eq!(
        validate(QpState::Rts, &a, AttrMask::QKEY, QpType::Ud),
        Ok(QpState::Rts)
    );
    // ... which RTR does not allow (no RTR->RTR).
    assert!(matches!(
        validate(QpState::Rtr, &a, AttrMask::QKEY, QpType::Ud),
        Err(ModifyError::IllegalTransition { .. })
    ));
    // Table first, then values.
    a.sq_psn = 1 << 24;
    assert_eq!(
        attr_name(validate(
            QpState::Rtr,
            &a,
            AttrMask::STATE | AttrMask::SQ_PSN,
            QpType::Uc
        )),
        Some("IBV_QP_SQ_PSN")
    );
    a.path_mtu = Mtu::Mtu4096;
    a.sq_psn = 0;
    let m = AttrMask::STATE | AttrMask::SQ_PSN;
    assert!(validate(QpState::Rtr, &a, m, QpType::Uc).is_ok());
    assert!(validate_with_limits(QpState::Rtr, &a, m, QpType::Uc, &limits()).is_ok());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, rng_seed: proptest::test_runner::RngSeed::Fixed(0x5eed), ..ProptestConfig::default() })]

    /// A PSN or QPN is accepted exactly when it fits 24 bits.
    #[test]
    fn psn_and_qpn_accepted_iff_24_bits(v in any::<u32>()) {
        let a = QpAttr { sq_psn: v, rq_psn: v, dest_qp_num: v, ..QpAttr::default() };
        for bit in [AttrMask::SQ_PSN, AttrMask::RQ_PSN, AttrMask::DEST_QPN] {
            prop_assert_eq!(check_values(&a, bit, QpType::Rc).is_ok(), v < (1 << 24));
        }
    }
}
