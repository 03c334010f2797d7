//! `check_values`, `check_limits` and `validate`: ranges, the attribute named in each error,
//! `IBV_QP_CUR_STATE` checked against the real state, what uverbs and `_ib_modify_qp` add to
//! the table (the `IBV_QP_PORT` that follows an `IBV_QP_AV`, a RoCE address without a GRH,
//! `IBV_QP_ALT_PATH` on RoCE) and the errno class of every refusal.

use mlx5_hw::qp_state::{
    check_limits, check_modify_for, check_port_protocol, check_values, uverbs_adds_port,
    uverbs_view, validate, validate_for, validate_with_limits, DeviceLimits, KernelVersion,
};
use mlx5_hw::{
    AhAttr, AttrMask, Errno, Error, GlobalRoute, LinkLayer, MigState, ModifyError, Mtu, QpAttr,
    QpState, QpType,
};
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
        link_layer: LinkLayer::Ethernet,
        kernel: KernelVersion::DEFAULT,
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
    let e = check_limits(&a, AttrMask::QKEY, &l).unwrap_err();
    assert_eq!(e, ModifyError::PrivilegedQkey { qkey: 0x8000_0000 });
    assert!(e.to_string().contains("IBV_QP_QKEY"), "{e}");
    assert_eq!(e.errno(), Errno::Perm, "uverbs answers EPERM");
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

/// An RC Init→RTR modify with every required attribute, addressed with a GRH (RoCE v2).
fn rc_rtr() -> (QpAttr, AttrMask) {
    let a = QpAttr {
        qp_state: QpState::Rtr,
        cur_qp_state: QpState::Init,
        path_mtu: Mtu::Mtu1024,
        dest_qp_num: 0x42,
        rq_psn: 0x100,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 12,
        ah_attr: AhAttr {
            port_num: 1,
            grh: Some(GlobalRoute {
                sgid_index: 1,
                hop_limit: 64,
                ..GlobalRoute::default()
            }),
            ..AhAttr::default()
        },
        ..QpAttr::default()
    };
    let m = AttrMask::STATE
        | AttrMask::AV
        | AttrMask::PATH_MTU
        | AttrMask::DEST_QPN
        | AttrMask::RQ_PSN
        | AttrMask::MAX_DEST_RD_ATOMIC
        | AttrMask::MIN_RNR_TIMER;
    (a, m)
}

/// A valid alternate path on port 1.
fn with_alt_path(mut a: QpAttr) -> QpAttr {
    a.alt_ah_attr = AhAttr {
        dlid: 0x22,
        sl: 1,
        port_num: 1,
        ..AhAttr::default()
    };
    a.alt_port_num = 1;
    a.alt_pkey_index = 0;
    a.alt_timeout = 14;
    a
}

fn infiniband() -> DeviceLimits {
    DeviceLimits {
        link_layer: LinkLayer::InfiniBand,
        ..limits()
    }
}

#[test]
fn alt_path_is_refused_on_roce_with_einval_before_the_table() {
    let (a, m) = rc_rtr();
    let a = with_alt_path(a);
    let m = m | AttrMask::ALT_PATH;
    let e = validate_with_limits(QpState::Init, &a, m, QpType::Rc, &limits()).unwrap_err();
    assert_eq!(e, ModifyError::AltPathOnRoce);
    assert_eq!(e.errno(), Errno::Inval);
    let msg = e.to_string();
    assert!(
        msg.contains("IBV_QP_ALT_PATH") && msg.contains("RoCE") && msg.contains("InfiniBand"),
        "{msg}"
    );
    assert_eq!(
        check_port_protocol(&a, m, &limits()),
        Err(ModifyError::AltPathOnRoce)
    );
    // The table alone accepts it (RC Init->RTR lists IB_QP_ALT_PATH) ...
    assert_eq!(validate(QpState::Init, &a, m, QpType::Rc), Ok(QpState::Rtr));
    // ... and so does an InfiniBand port.
    assert_eq!(
        validate_with_limits(QpState::Init, &a, m, QpType::Rc, &infiniband()),
        Ok(QpState::Rtr)
    );
    // Before the table: on RoCE the refusal names the link layer even where the table would
    // refuse the bit anyway (UD takes no alternate path).
    let ud = QpAttr {
        qp_state: QpState::Rts,
        ..with_alt_path(QpAttr::default())
    };
    let m = AttrMask::STATE | AttrMask::ALT_PATH;
    assert_eq!(
        validate_with_limits(QpState::Rts, &ud, m, QpType::Ud, &limits()),
        Err(ModifyError::AltPathOnRoce)
    );
    assert!(matches!(
        validate_with_limits(QpState::Rts, &ud, m, QpType::Ud, &infiniband()),
        Err(ModifyError::ForbiddenAttributes { forbidden, .. }) if forbidden == AttrMask::ALT_PATH
    ));
    // The path-migration state is no path: RoCE ports take it (the kernel stores it).
    let mut rts = QpAttr {
        qp_state: QpState::Rts,
        path_mig_state: MigState::Armed,
        ..QpAttr::default()
    };
    let pm = AttrMask::STATE | AttrMask::PATH_MIG_STATE;
    assert_eq!(
        validate_with_limits(QpState::Rts, &rts, pm, QpType::Rc, &limits()),
        Ok(QpState::Rts)
    );
    rts.path_mig_state = MigState::Migrated;
    assert_eq!(check_port_protocol(&rts, pm, &limits()), Ok(()));
}

#[test]
fn alternate_path_values_on_infiniband() {
    let (a, m) = rc_rtr();
    let m = m | AttrMask::ALT_PATH;
    let ib = infiniband();
    let ok = with_alt_path(a);
    assert!(validate_with_limits(QpState::Init, &ok, m, QpType::Rc, &ib).is_ok());
    type Break = fn(&mut QpAttr);
    let cases: [(Break, &str); 7] = [
        (|a| a.alt_port_num = 0, "alt_port_num = 0"),
        (|a| a.alt_ah_attr.port_num = 0, "alt_ah_attr.port_num = 0"),
        (|a| a.alt_ah_attr.sl = 16, "alt_ah_attr.sl"),
        (|a| a.alt_timeout = 32, "alt_timeout"),
        (
            |a| {
                a.alt_port_num = 2;
                a.alt_ah_attr.port_num = 2
            },
            "alt_port_num = 2",
        ),
        (|a| a.alt_pkey_index = 1, "alt_pkey_index"),
        (
            |a| {
                a.alt_ah_attr.grh = Some(GlobalRoute {
                    sgid_index: 9,
                    ..GlobalRoute::default()
                })
            },
            "alt_ah_attr.grh.sgid_index",
        ),
    ];
    for (brk, words) in cases {
        let mut a = ok;
        brk(&mut a);
        let e = validate_with_limits(QpState::Init, &a, m, QpType::Rc, &ib).unwrap_err();
        assert_eq!(
            attr_name(Err::<(), _>(e.clone())),
            Some("IBV_QP_ALT_PATH"),
            "{e}"
        );
        assert!(e.to_string().contains(words), "{words}: {e}");
        assert_eq!(e.errno(), Errno::Inval);
    }
    // uverbs: the alternate port and the alternate address's port must agree.
    let mut a = ok;
    a.alt_ah_attr.port_num = 2;
    let e = check_values(&a, AttrMask::ALT_PATH, QpType::Rc).unwrap_err();
    assert!(e.to_string().contains("alt_port_num = 1"), "{e}");
    // Outside the mask the alternate fields are not looked at.
    let mut a = ok;
    a.alt_port_num = 0;
    assert!(check_values(&a, AttrMask::AV, QpType::Rc).is_ok());
}

#[test]
fn a_roce_address_without_a_grh_names_the_grh() {
    let (mut a, m) = rc_rtr();
    a.ah_attr.grh = None;
    a.ah_attr.dlid = 0;
    let e = validate_with_limits(QpState::Init, &a, m, QpType::Rc, &limits()).unwrap_err();
    assert_eq!(e, ModifyError::MissingGrh { attr: "IBV_QP_AV" });
    assert_eq!(e.errno(), Errno::Inval);
    let msg = e.to_string();
    assert!(
        msg.contains("GRH") && msg.contains("is_global = 1") && msg.contains("RoCE"),
        "{msg}"
    );
    // check_limits makes the same check (connect plans call it alone).
    assert_eq!(check_limits(&a, m, &limits()), Err(e));
    // On InfiniBand a LID is an address.
    a.ah_attr.dlid = 7;
    assert!(validate_with_limits(QpState::Init, &a, m, QpType::Rc, &infiniband()).is_ok());
}

#[test]
fn uverbs_adds_the_port_to_an_address_outside_init_to_rtr() {
    let ah = AhAttr {
        port_num: 1,
        grh: Some(GlobalRoute::default()),
        ..AhAttr::default()
    };
    let sqd = QpAttr {
        qp_state: QpState::Sqd,
        cur_qp_state: QpState::Sqd,
        ah_attr: ah,
        // What the caller left in port_num; uverbs replaces it with the address's port.
        port_num: 7,
        ..QpAttr::default()
    };
    let av = AttrMask::STATE | AttrMask::AV;
    assert!(uverbs_adds_port(&sqd, av));
    assert!(uverbs_adds_port(&sqd, AttrMask::AV), "no STATE: SQD->SQD");
    assert!(!uverbs_adds_port(&sqd, av | AttrMask::PORT), "PORT given");
    assert!(!uverbs_adds_port(&sqd, AttrMask::STATE), "no AV");
    let (rtr, m) = rc_rtr();
    assert!(!uverbs_adds_port(&rtr, m), "Init->RTR keeps its mask");
    let (seen, seen_mask) = uverbs_view(&sqd, av);
    assert_eq!(seen_mask, av | AttrMask::PORT);
    assert_eq!(seen.port_num, 1);
    assert_eq!(uverbs_view(&rtr, m), (rtr, m));

    // UC SQD->SQD lists IB_QP_AV but not IB_QP_PORT: what uverbs hands the table is refused.
    for mask in [av, AttrMask::AV, av | AttrMask::ACCESS_FLAGS] {
        let e = validate(QpState::Sqd, &sqd, mask, QpType::Uc).unwrap_err();
        assert_eq!(
            e,
            ModifyError::PortAddedWithAv {
                from: QpState::Sqd,
                to: QpState::Sqd,
                qp_type: QpType::Uc
            },
            "{mask:?}"
        );
        assert_eq!(e.errno(), Errno::Inval);
        let msg = e.to_string();
        assert!(
            msg.contains("IBV_QP_PORT") && msg.contains("IBV_QP_AV") && msg.contains("uverbs"),
            "{msg}"
        );
    }
    // ... in every kernel version (uverbs is the same in all).
    for v in KernelVersion::ALL {
        assert!(matches!(
            validate_for(v, QpState::Sqd, &sqd, av, QpType::Uc),
            Err(ModifyError::PortAddedWithAv { .. })
        ));
    }
    // RC SQD->SQD lists both, and the stale port_num does not matter: uverbs replaced it.
    assert_eq!(
        validate(QpState::Sqd, &sqd, av, QpType::Rc),
        Ok(QpState::Sqd)
    );
    assert_eq!(
        validate_with_limits(QpState::Sqd, &sqd, av, QpType::Rc, &limits()),
        Ok(QpState::Sqd)
    );
    // A port given by the caller is checked against the address as before.
    assert!(
        validate(QpState::Sqd, &sqd, av | AttrMask::PORT, QpType::Rc)
            .unwrap_err()
            .to_string()
            .contains("port_num = 7")
    );
    // Where the address itself is refused, the refusal names it, not the added port.
    assert_eq!(
        validate(QpState::Sqd, &sqd, av, QpType::Ud),
        Err(ModifyError::ForbiddenAttributes {
            from: QpState::Sqd,
            to: QpState::Sqd,
            qp_type: QpType::Ud,
            forbidden: AttrMask::AV
        })
    );
}

#[test]
fn validate_with_limits_follows_the_limits_kernel() {
    let a = QpAttr {
        qp_state: QpState::Rts,
        rate_limit: 1000,
        ..QpAttr::default()
    };
    let m = AttrMask::STATE | AttrMask::RATE_LIMIT;
    for (kernel, ok) in [
        (KernelVersion::Linux6_1, false),
        (KernelVersion::Linux7_0, true),
        (KernelVersion::Linux7_2, true),
    ] {
        let l = DeviceLimits { kernel, ..limits() };
        let got = validate_with_limits(QpState::Rts, &a, m, QpType::Rc, &l);
        assert_eq!(got.is_ok(), ok, "{kernel}: {got:?}");
        assert_eq!(validate_for(kernel, QpState::Rts, &a, m, QpType::Rc), got);
    }
    assert!(
        validate(QpState::Rts, &a, m, QpType::Rc).is_ok(),
        "default 7.2"
    );
}

/// Issue 28: under 6.1 every modify carrying `IBV_QP_RATE_LIMIT` is EOPNOTSUPP, as Linux 6.1
/// answers it (the driver's `attr_mask & ~IB_QP_ATTR_STANDARD_BITS` check before its state
/// table; on Soft-RoCE rdma-core's legacy command even before the kernel) — on every
/// transition, legal or not, with the rest of the mask right or wrong. 7.0 and 7.2 leave it
/// to their tables: the same modifies without the bit get the same verdict there.
#[test]
fn linux_6_1_refuses_the_rate_limit_with_eopnotsupp_before_its_table() {
    let types = [
        QpType::Rc,
        QpType::Uc,
        QpType::Ud,
        QpType::XrcSend,
        QpType::XrcRecv,
    ];
    let masks = [
        AttrMask::RATE_LIMIT,
        AttrMask::STATE | AttrMask::RATE_LIMIT,
        AttrMask::STATE | AttrMask::RATE_LIMIT | AttrMask::SQ_PSN,
        AttrMask::STATE | AttrMask::RATE_LIMIT | AttrMask::QKEY | AttrMask::CUR_STATE,
    ];
    let mut cases = 0;
    for ty in types {
        for cur in QpState::ALL {
            for next in QpState::ALL {
                for m in masks {
                    let a = QpAttr {
                        qp_state: next,
                        cur_qp_state: cur,
                        rate_limit: 1000,
                        ..QpAttr::default()
                    };
                    let e = validate_for(KernelVersion::Linux6_1, cur, &a, m, ty).unwrap_err();
                    assert!(
                        matches!(
                            e,
                            ModifyError::Unsupported {
                                attr: "IBV_QP_RATE_LIMIT",
                                ..
                            }
                        ),
                        "{ty} {cur}->{next} {m:?}: {e}"
                    );
                    assert_eq!(e.errno(), Errno::OpNotSupp, "{e}");
                    assert_eq!(Error::from(e).errno(), libc::EOPNOTSUPP);
                    // The table itself still says EINVAL (ib_modify_qp_is_ok), and 7.0 / 7.2
                    // judge the bit there.
                    if let Err(t) = check_modify_for(KernelVersion::Linux6_1, cur, next, ty, m) {
                        assert_eq!(t.errno(), Errno::Inval, "{t}");
                    }
                    for k in [KernelVersion::Linux7_0, KernelVersion::Linux7_2] {
                        if let Err(e) = validate_for(k, cur, &a, m, ty) {
                            assert!(!matches!(e, ModifyError::Unsupported { .. }), "{k}: {e}");
                        }
                    }
                    cases += 1;
                }
            }
        }
    }
    assert_eq!(cases, 5 * 7 * 7 * 4);
    // Undefined bits still come first (uverbs), as in every version.
    let e = validate_for(
        KernelVersion::Linux6_1,
        QpState::Rts,
        &QpAttr::default(),
        AttrMask::RATE_LIMIT | AttrMask::from_bits_retain(1 << 22),
        QpType::Rc,
    )
    .unwrap_err();
    assert!(matches!(e, ModifyError::UnknownAttributes { .. }), "{e}");
}

#[test]
fn every_refusal_has_an_errno_class() {
    let inval: Vec<ModifyError> = vec![
        ModifyError::IllegalTransition {
            from: QpState::Reset,
            to: QpState::Rts,
            qp_type: QpType::Rc,
        },
        ModifyError::MissingAttributes {
            from: QpState::Init,
            to: QpState::Rtr,
            qp_type: QpType::Rc,
            missing: AttrMask::MIN_RNR_TIMER,
        },
        ModifyError::ForbiddenAttributes {
            from: QpState::Rts,
            to: QpState::Rts,
            qp_type: QpType::Rc,
            forbidden: AttrMask::TIMEOUT,
        },
        ModifyError::InvalidValue {
            attr: "IBV_QP_SQ_PSN",
            why: "too wide".into(),
        },
        ModifyError::PortAddedWithAv {
            from: QpState::Sqd,
            to: QpState::Sqd,
            qp_type: QpType::Uc,
        },
        ModifyError::MissingGrh { attr: "IBV_QP_AV" },
        ModifyError::AltPathOnRoce,
        ModifyError::CurrentStateMismatch {
            claimed: QpState::Rtr,
            actual: QpState::Rts,
        },
    ];
    for e in inval {
        assert_eq!(e.errno(), Errno::Inval, "{e}");
        assert_eq!(Error::from(e).errno(), libc::EINVAL);
    }
    for e in [
        ModifyError::UnknownAttributes { bits: 1 << 21 },
        ModifyError::Unsupported {
            attr: "IBV_QP_RATE_LIMIT",
            why: "no pacing".into(),
        },
    ] {
        assert_eq!(e.errno(), Errno::OpNotSupp, "{e}");
        assert_eq!(Error::from(e).errno(), libc::EOPNOTSUPP);
    }
    assert_eq!(
        ModifyError::PrivilegedQkey { qkey: 1 << 31 }.errno(),
        Errno::Perm
    );
    assert_eq!(Error::Resources("QPs".into()).errno(), libc::ENOMEM);
    assert_eq!(Error::Unsupported("x".into()).errno(), libc::EOPNOTSUPP);
    assert_eq!(Error::InvalidArgument("x".into()).errno(), libc::EINVAL);
    let verbs = Error::Verbs {
        call: "ibv_modify_qp",
        source: std::io::Error::from_raw_os_error(libc::ENOMEM),
    };
    assert_eq!(verbs.errno(), libc::ENOMEM);
    for c in [Errno::Inval, Errno::OpNotSupp, Errno::NoMem, Errno::Perm] {
        assert_eq!(Errno::from_raw(c.raw()), Some(c));
        assert!(c.to_string().starts_with('E'));
    }
    assert_eq!(Errno::from_raw(0), None);
}
