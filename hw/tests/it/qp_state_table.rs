//! Exhaustive check of `mlx5_hw::qp_state` against an independent transcription of the Linux
//! kernel's `qp_state_table` (drivers/infiniband/core/verbs.c) and `ib_modify_qp_is_ok`, for
//! every kernel version the library models (6.1, 7.0, 7.2).
//!
//! The expected tables are written as text, with the kernel's `IB_QP_*` names, in the kernel's
//! own row order (`data/kernel_qp_state_table.rs`, shared with the root crate's
//! `tests/sim_transition_table.rs`, which also parses it); the library encodes the same facts
//! as Rust constants. A typo on either side makes a case disagree.

use mlx5_hw::qp_state::{check_modify, check_modify_for, rule, rule_for, KernelVersion, Rule};
use mlx5_hw::{AttrMask, Errno, ModifyError, QpState, QpType};
use std::collections::HashMap;

include!("../data/kernel_qp_state_table.rs");

/// The library's name for a transcribed kernel.
fn version(k: Kernel) -> KernelVersion {
    match k {
        Kernel::V6_1 => KernelVersion::Linux6_1,
        Kernel::V7_0 => KernelVersion::Linux7_0,
        Kernel::V7_2 => KernelVersion::Linux7_2,
    }
}

/// The kernel's `ib_modify_qp_is_ok`, re-derived from its description, on the text table of a
/// version (with the bits that version passes through). Plus the caller rule: without
/// IB_QP_STATE the target is the current state.
fn kernel_is_ok(
    t: &HashMap<Key, (u32, u32)>,
    pass: u32,
    cur: QpState,
    next: QpState,
    ty: QpType,
    mask: u32,
) -> bool {
    const STATE: u32 = 1;
    const CUR: u32 = 2;
    if next != cur && mask & STATE == 0 {
        return false;
    }
    if mask & CUR != 0
        && !matches!(
            cur,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        )
    {
        return false;
    }
    let Some(&(req, opt)) = t.get(&(cur, next, ty)) else {
        return false;
    };
    if mask & req != req {
        return false;
    }
    mask & !(req | opt | STATE | pass) == 0
}

fn all_single_bits() -> impl Iterator<Item = u32> {
    KERNEL_BITS.iter().map(|(_, b)| *b)
}

#[test]
fn kernel_bit_values_match_attr_mask() {
    for (name, v) in KERNEL_BITS {
        let ours = AttrMask::from_name(name.trim_start_matches("IB_QP_"))
            .unwrap_or_else(|| panic!("AttrMask lacks {name}"));
        assert_eq!(ours.bits(), v, "{name}");
    }
    assert_eq!(AttrMask::all().iter().count(), KERNEL_BITS.len());
}

#[test]
fn versions_are_the_transcribed_ones_and_the_default_is_the_newest() {
    assert_eq!(
        KernelVersion::ALL.to_vec(),
        KERNELS.iter().map(|&k| version(k)).collect::<Vec<_>>()
    );
    assert_eq!(KernelVersion::DEFAULT, KernelVersion::Linux7_2);
    assert_eq!(KernelVersion::NEWEST, KernelVersion::Linux7_2);
    assert_eq!(KernelVersion::default(), KernelVersion::DEFAULT);
    for (r, want) in [
        ("6.1.0-26-amd64", Some(KernelVersion::Linux6_1)),
        ("5.15.0-91-generic", Some(KernelVersion::Linux6_1)),
        ("6.19.3", Some(KernelVersion::Linux6_1)),
        ("7.0.0", Some(KernelVersion::Linux7_0)),
        ("7.1-rc3\n", Some(KernelVersion::Linux7_0)),
        ("7.2.1-arch1", Some(KernelVersion::Linux7_2)),
        ("7.10.0", Some(KernelVersion::Linux7_2)),
        ("8.0", Some(KernelVersion::Linux7_2)),
        ("", None),
        ("linux", None),
        ("7", None),
    ] {
        assert_eq!(KernelVersion::from_release(r), want, "{r:?}");
    }
    // This machine runs some kernel, and /proc says which.
    assert!(KernelVersion::running().is_some());
}

#[test]
fn rule_matches_kernel_table_for_every_pair_type_and_version() {
    for k in KERNELS {
        let t = expected_table(k);
        let mut valid = 0;
        for cur in QpState::ALL {
            for next in QpState::ALL {
                for ty in QpType::WITH_XRC {
                    let ours = rule_for(version(k), cur, next, ty);
                    match t.get(&(cur, next, ty)) {
                        None => assert_eq!(ours, None, "{k:?} {cur}->{next} {ty} must be illegal"),
                        Some(&(req, opt)) => {
                            valid += 1;
                            let ours = ours.unwrap_or_else(|| {
                                panic!("{k:?} {cur}->{next} {ty} must be legal")
                            });
                            assert_eq!(
                                ours,
                                Rule {
                                    required: AttrMask::from_bits_retain(req),
                                    optional: AttrMask::from_bits_retain(opt)
                                },
                                "{k:?} {cur}->{next} {ty}"
                            );
                        }
                    }
                    if k == Kernel::V7_2 {
                        assert_eq!(rule(cur, next, ty), ours, "the default is 7.2's table");
                    }
                }
            }
        }
        // 22 valid cells (2 + 4 + 3 + 4 + 4 + 3 + 2) for each of 5 types (RC, UC, UD,
        // XRC_INI, XRC_TGT).
        assert_eq!(valid, 22 * 5, "{k:?}");
        assert_eq!(
            version(k).passes_through().bits(),
            pass_through(k),
            "{k:?} bits passed through"
        );
    }
}

/// Every state pair × every single attribute bit (alone, added to the required set, and removed
/// from it) × RC/UC/UD/XRC_INI/XRC_TGT × kernel version, with and without IB_QP_STATE.
#[test]
fn check_modify_matches_kernel_for_every_pair_bit_type_and_version() {
    let mut cases = 0u32;
    for k in KERNELS {
        let t = expected_table(k);
        let pass = pass_through(k);
        for cur in QpState::ALL {
            for next in QpState::ALL {
                for ty in QpType::WITH_XRC {
                    let req = t.get(&(cur, next, ty)).map_or(0, |e| e.0);
                    let mut masks = vec![0u32, 1, req, req | 1];
                    for b in all_single_bits() {
                        masks.extend([b, b | 1, req | b, req | b | 1, (req & !b) | 1]);
                    }
                    for mask in masks {
                        cases += 1;
                        let want = kernel_is_ok(&t, pass, cur, next, ty, mask);
                        let got = check_modify_for(
                            version(k),
                            cur,
                            next,
                            ty,
                            AttrMask::from_bits_retain(mask),
                        );
                        assert_eq!(
                            got.is_ok(),
                            want,
                            "{k:?} {cur}->{next} {ty} mask {mask:#x}: kernel says {want}, we say {got:?}"
                        );
                        if let Err(e) = got {
                            // Every refusal of the table is EINVAL (the drivers return -EINVAL
                            // when ib_modify_qp_is_ok says no).
                            assert_eq!(e.errno(), Errno::Inval, "{e}");
                        }
                    }
                }
            }
        }
    }
    assert!(cases > 3 * 49 * 3 * 22 * 5);
}

/// `IBV_QP_RATE_LIMIT`, the one bit whose verdict depends on the kernel version.
#[test]
fn rate_limit_per_kernel_version() {
    use KernelVersion::*;
    use QpState::*;
    let rl = AttrMask::STATE | AttrMask::RATE_LIMIT;
    let rc_rtr = rl
        | AttrMask::AV
        | AttrMask::PATH_MTU
        | AttrMask::DEST_QPN
        | AttrMask::RQ_PSN
        | AttrMask::MAX_DEST_RD_ATOMIC
        | AttrMask::MIN_RNR_TIMER;
    let rc_rts = rl
        | AttrMask::SQ_PSN
        | AttrMask::TIMEOUT
        | AttrMask::RETRY_CNT
        | AttrMask::RNR_RETRY
        | AttrMask::MAX_QP_RD_ATOMIC;
    let ud_rts = rl | AttrMask::SQ_PSN;
    let init = rl | AttrMask::PORT | AttrMask::PKEY_INDEX | AttrMask::ACCESS_FLAGS;
    // (from, to, type, mask, [6.1, 7.0, 7.2] accepts)
    let cases = [
        (Init, Rtr, QpType::Rc, rc_rtr, [false, true, true]),
        (Rtr, Rts, QpType::Rc, rc_rts, [false, true, true]),
        (Rts, Rts, QpType::Rc, rl, [false, true, true]),
        // Not one of 7.0's three RC cells, but 7.2 lets it through everywhere.
        (Sqd, Rts, QpType::Rc, rl, [false, false, true]),
        (Reset, Init, QpType::Rc, init, [false, false, true]),
        (Rtr, Rts, QpType::Ud, ud_rts, [false, false, true]),
        (Rts, Rts, QpType::Uc, rl, [false, false, true]),
        // A transition that does not exist stays refused.
        (Init, Rts, QpType::Rc, rc_rts, [false, false, false]),
    ];
    for (from, to, ty, mask, want) in cases {
        for (v, ok) in [Linux6_1, Linux7_0, Linux7_2].into_iter().zip(want) {
            let got = check_modify_for(v, from, to, ty, mask);
            assert_eq!(got.is_ok(), ok, "{v} {ty} {from}->{to}: {got:?}");
            if let Err(e) = got {
                assert_eq!(e.errno(), Errno::Inval, "{e}");
                if matches!(e, ModifyError::ForbiddenAttributes { .. }) {
                    assert!(e.to_string().contains("IBV_QP_RATE_LIMIT"), "{e}");
                }
            }
        }
        assert_eq!(
            check_modify(from, to, ty, mask).is_ok(),
            want[2],
            "the default is 7.2"
        );
    }
}

#[test]
fn error_kind_names_the_offending_bits() {
    // Missing MIN_RNR_TIMER on RC Init->RTR: the attribute most often left to a default.
    let mask = AttrMask::STATE
        | AttrMask::AV
        | AttrMask::PATH_MTU
        | AttrMask::DEST_QPN
        | AttrMask::RQ_PSN
        | AttrMask::MAX_DEST_RD_ATOMIC;
    let e = check_modify(QpState::Init, QpState::Rtr, QpType::Rc, mask).unwrap_err();
    assert_eq!(
        e,
        ModifyError::MissingAttributes {
            from: QpState::Init,
            to: QpState::Rtr,
            qp_type: QpType::Rc,
            missing: AttrMask::MIN_RNR_TIMER
        }
    );
    let msg = e.to_string();
    assert!(msg.contains("IBV_QP_MIN_RNR_TIMER"), "{msg}");
    assert!(msg.contains("INIT -> RTR"), "{msg}");

    // The same mask on UC: MAX_DEST_RD_ATOMIC is not a UC attribute.
    let uc = mask.difference(AttrMask::MAX_DEST_RD_ATOMIC) | AttrMask::MAX_DEST_RD_ATOMIC;
    let e = check_modify(QpState::Init, QpState::Rtr, QpType::Uc, uc).unwrap_err();
    assert!(
        matches!(e, ModifyError::ForbiddenAttributes { forbidden, .. } if forbidden == AttrMask::MAX_DEST_RD_ATOMIC)
    );
    assert!(e.to_string().contains("IBV_QP_MAX_DEST_RD_ATOMIC"), "{e}");

    // CUR_STATE from Init is refused even though Init->Init accepts other optional bits.
    let e = check_modify(
        QpState::Init,
        QpState::Init,
        QpType::Rc,
        AttrMask::CUR_STATE,
    )
    .unwrap_err();
    assert!(
        matches!(e, ModifyError::ForbiddenAttributes { forbidden, .. } if forbidden == AttrMask::CUR_STATE)
    );

    // A state change without IBV_QP_STATE.
    let e = check_modify(QpState::Rts, QpState::Error, QpType::Ud, AttrMask::empty()).unwrap_err();
    assert!(
        matches!(e, ModifyError::MissingAttributes { missing, .. } if missing == AttrMask::STATE)
    );

    // Bits verbs does not define: EOPNOTSUPP, as uverbs answers before the table.
    let e = check_modify(
        QpState::Reset,
        QpState::Reset,
        QpType::Rc,
        AttrMask::from_bits_retain(1 << 22 | 1),
    )
    .unwrap_err();
    assert_eq!(e, ModifyError::UnknownAttributes { bits: 1 << 22 });
    assert_eq!(e.errno(), Errno::OpNotSupp);
    assert_eq!(e.errno().raw(), libc::EOPNOTSUPP);
    assert!(e.to_string().contains("attr_mask"), "{e}");
}

/// The moves a connection makes (with the attributes usually set at each)
/// and moves that are illegal.
#[test]
fn connection_moves_and_illegal_ones() {
    use QpState::*;
    let rc = QpType::Rc;
    let s = AttrMask::STATE;
    let ok = |from, to, m: AttrMask| check_modify(from, to, rc, s | m);
    assert!(ok(
        Reset,
        Init,
        AttrMask::PORT | AttrMask::PKEY_INDEX | AttrMask::ACCESS_FLAGS
    )
    .is_ok());
    assert!(ok(
        Init,
        Rtr,
        AttrMask::PATH_MTU
            | AttrMask::DEST_QPN
            | AttrMask::RQ_PSN
            | AttrMask::AV
            | AttrMask::MAX_DEST_RD_ATOMIC
            | AttrMask::MIN_RNR_TIMER
    )
    .is_ok());
    assert!(ok(Init, Reset, AttrMask::empty()).is_ok());
    assert!(ok(
        Rtr,
        Rts,
        AttrMask::SQ_PSN
            | AttrMask::TIMEOUT
            | AttrMask::RETRY_CNT
            | AttrMask::RNR_RETRY
            | AttrMask::MAX_QP_RD_ATOMIC
    )
    .is_ok());
    for (from, to) in [
        (Rtr, Error),
        (Rts, Sqd),
        (Rts, Error),
        (Sqd, Rts),
        (Sqd, Error),
        (Sqe, Error),
        (Error, Reset),
    ] {
        assert!(ok(from, to, AttrMask::empty()).is_ok(), "{from}->{to}");
    }
    // SQD->RTS with the attributes being changed (RC accepts access flags and the RNR timer).
    assert!(ok(Sqd, Rts, AttrMask::ACCESS_FLAGS | AttrMask::MIN_RNR_TIMER).is_ok());
    // Skipping a state, and leaving Error other than through Reset, are illegal.
    for (from, to) in [
        (Init, Rts),
        (Reset, Rtr),
        (Reset, Rts),
        (Error, Rts),
        (Error, Init),
        (Error, Rtr),
        (Rtr, Init),
        (Rts, Rtr),
    ] {
        for ty in QpType::WITH_XRC {
            assert!(
                matches!(
                    check_modify(from, to, ty, AttrMask::all()),
                    Err(ModifyError::IllegalTransition { .. })
                ),
                "{from}->{to} {ty} must be illegal"
            );
        }
    }
    // Every state but Reset may go to Error; every state may go to Reset; both with STATE only.
    for from in QpState::ALL {
        for ty in QpType::WITH_XRC {
            assert!(
                check_modify(from, Reset, ty, s).is_ok(),
                "{from}->RESET {ty}"
            );
            assert_eq!(
                check_modify(from, Error, ty, s).is_ok(),
                from != Reset,
                "{from}->ERR {ty}"
            );
        }
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: 64,
        rng_seed: proptest::test_runner::RngSeed::Fixed(0x9e37_79b9),
        ..proptest::prelude::ProptestConfig::default()
    })]

    /// Arbitrary combinations of defined bits, on every cell of every version: same answer as
    /// the kernel.
    #[test]
    fn random_masks_agree_with_kernel(raw in proptest::prelude::any::<u32>()) {
        let mask = raw & AttrMask::all().bits();
        for k in KERNELS {
            let t = expected_table(k);
            let pass = pass_through(k);
            for cur in QpState::ALL {
                for next in QpState::ALL {
                    for ty in QpType::WITH_XRC {
                        let want = kernel_is_ok(&t, pass, cur, next, ty, mask);
                        let got = check_modify_for(
                            version(k), cur, next, ty, AttrMask::from_bits_retain(mask),
                        )
                        .is_ok();
                        proptest::prop_assert_eq!(
                            got, want, "{:?} {}->{} {} mask {:#x}", k, cur, next, ty, mask
                        );
                    }
                }
            }
        }
    }
}
