//! Exhaustive check of `mlx5_hw::qp_state` against an independent transcription of the Linux
//! kernel's `qp_state_table` (drivers/infiniband/core/verbs.c) and `ib_modify_qp_is_ok`.
//!
//! The expected table is written as text, with the kernel's `IB_QP_*` names, in the kernel's
//! own row order (`data/kernel_qp_state_table.rs`, shared with the root crate's
//! `tests/sim_transition_table.rs`, which also parses it); the library encodes the same facts
//! as Rust constants. A typo on either side makes a case disagree.

use mlx5_hw::qp_state::{check_modify, rule, Rule};
use mlx5_hw::{AttrMask, ModifyError, QpState, QpType};
use std::collections::HashMap;

include!("data/kernel_qp_state_table.rs");

/// The kernel's `ib_modify_qp_is_ok`, re-derived from its description, on the text table.
/// Plus the caller rule: without IB_QP_STATE the target is the current state.
fn kernel_is_ok(
    t: &HashMap<Key, (u32, u32)>,
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
    mask & !(req | opt | STATE) == 0
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
fn rule_matches_kernel_table_for_every_pair_and_type() {
    let t = expected_table();
    let mut valid = 0;
    for cur in QpState::ALL {
        for next in QpState::ALL {
            for ty in QpType::ALL {
                let ours = rule(cur, next, ty);
                match t.get(&(cur, next, ty)) {
                    None => assert_eq!(ours, None, "{cur}->{next} {ty} must be illegal"),
                    Some(&(req, opt)) => {
                        valid += 1;
                        let ours =
                            ours.unwrap_or_else(|| panic!("{cur}->{next} {ty} must be legal"));
                        assert_eq!(
                            ours,
                            Rule {
                                required: AttrMask::from_bits_retain(req),
                                optional: AttrMask::from_bits_retain(opt)
                            },
                            "{cur}->{next} {ty}"
                        );
                    }
                }
            }
        }
    }
    // 22 valid cells (2 + 4 + 3 + 4 + 4 + 3 + 2) for each of 3 types.
    assert_eq!(valid, 22 * 3);
}

/// Every state pair × every single attribute bit (alone, added to the required set, and removed
/// from it) × RC/UC/UD, with and without IB_QP_STATE.
#[test]
fn check_modify_matches_kernel_for_every_pair_bit_and_type() {
    let t = expected_table();
    let mut cases = 0u32;
    for cur in QpState::ALL {
        for next in QpState::ALL {
            for ty in QpType::ALL {
                let req = t.get(&(cur, next, ty)).map_or(0, |e| e.0);
                let mut masks = vec![0u32, 1, req, req | 1];
                for b in all_single_bits() {
                    masks.extend([b, b | 1, req | b, req | b | 1, (req & !b) | 1]);
                }
                for mask in masks {
                    cases += 1;
                    let want = kernel_is_ok(&t, cur, next, ty, mask);
                    let got = check_modify(cur, next, ty, AttrMask::from_bits_retain(mask));
                    assert_eq!(
                        got.is_ok(),
                        want,
                        "{cur}->{next} {ty} mask {mask:#x}: kernel says {want}, we say {got:?}"
                    );
                }
            }
        }
    }
    assert!(cases > 49 * 3 * 22 * 5);
}

#[test]
fn error_kind_names_the_offending_bits() {
    // Missing MIN_RNR_TIMER on RC Init->RTR: the article's "silently defaulted" attribute.
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

    // Bits verbs does not define.
    let e = check_modify(
        QpState::Reset,
        QpState::Reset,
        QpType::Rc,
        AttrMask::from_bits_retain(1 << 22),
    );
    assert!(matches!(
        e,
        Err(ModifyError::InvalidValue {
            attr: "attr_mask",
            ..
        })
    ));
}

/// The moves the QP article lists (`docs/sources.md` §17) as legal (with the attributes it says are usually set)
/// and the ones it warns against.
#[test]
fn article_transitions() {
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
        for ty in QpType::ALL {
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
        for ty in QpType::ALL {
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

    /// Arbitrary combinations of defined bits, on every cell: same answer as the kernel.
    #[test]
    fn random_masks_agree_with_kernel(raw in proptest::prelude::any::<u32>()) {
        let t = expected_table();
        let mask = raw & AttrMask::all().bits();
        for cur in QpState::ALL {
            for next in QpState::ALL {
                for ty in QpType::ALL {
                    let want = kernel_is_ok(&t, cur, next, ty, mask);
                    let got = check_modify(cur, next, ty, AttrMask::from_bits_retain(mask)).is_ok();
                    proptest::prop_assert_eq!(got, want, "{}->{} {} mask {:#x}", cur, next, ty, mask);
                }
            }
        }
    }
}
