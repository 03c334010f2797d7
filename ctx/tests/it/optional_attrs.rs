//! The typed steps take every optional attribute of their transition in the kernel's table,
//! and the table refuses the ones a QP type's transition does not accept, naming them.

use mlx5_ctx::{QpInit, SimFabric};
use mlx5_hw::transition::{Changes, StateStep, Step, ToRts};
use mlx5_hw::{AccessFlags, MigState, QpState};

use crate::support::{pair, uc_to_rtr, Params};

/// An RC pair connected with optional attributes at RTR (access flags, P_Key index) and at RTS
/// (min_rnr_timer, path migration state): the QPs report what was set.
#[test]
fn rc_steps_take_their_optional_attributes() {
    let (_f, a, _b) = pair(&Params::default());
    let attr = a.qp.query().unwrap();
    assert_eq!(attr.qp_state, QpState::Rts);
    assert!(attr.qp_access_flags.contains(AccessFlags::REMOTE_ATOMIC));
    assert_eq!(attr.min_rnr_timer, 1);
    assert_eq!(attr.path_mig_state, MigState::Migrated);
}

/// UC RTR→RTS has no min_rnr_timer (the kernel's table lists it for RC only): refused before the
/// device, with the attribute named, and the QP stays in RTR.
#[test]
fn uc_rts_refuses_min_rnr_timer() {
    let f = SimFabric::deterministic();
    let (x, y) = (f.add_device(), f.add_device());
    let (cx, cy) = (x.create_cq(16).unwrap(), y.create_cq(16).unwrap());
    let mut qa = x.alloc_pd().unwrap().create_qp(&QpInit::uc(&cx)).unwrap();
    let qb = y.alloc_pd().unwrap().create_qp(&QpInit::uc(&cy)).unwrap();
    qa.modify_all(&uc_to_rtr(&qb, 0)).unwrap();
    let e = qa
        .modify(&Step::WithOptional(
            StateStep::Rts(ToRts::Unreliable { sq_psn: 0 }),
            Changes {
                min_rnr_timer: Some(3),
                ..Changes::default()
            },
        ))
        .unwrap_err();
    assert!(
        format!("{e}").to_lowercase().contains("min_rnr_timer"),
        "{e}"
    );
    assert_eq!(qa.query().unwrap().qp_state, QpState::Rtr);
    assert_eq!(qa.state(), QpState::Rtr);
    // The same step with what UC RTR→RTS does accept.
    qa.modify(&Step::WithOptional(
        StateStep::Rts(ToRts::Unreliable { sq_psn: 0 }),
        Changes {
            path_mig_state: Some(MigState::Migrated),
            ..Changes::default()
        },
    ))
    .unwrap();
    assert_eq!(qa.state(), QpState::Rts);
}
