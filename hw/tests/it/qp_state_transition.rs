//! Typed transition steps: every step for every QP type it is meant for passes the state table
//! with exactly the transition's full mask, dropping any needed bit fails; and `apply` drives a
//! (fake, call-recording) device correctly.

use mlx5_hw::qp_state::{check_modify, rule};
use mlx5_hw::transition::{apply, apply_all, Changes, PeerPath, Step, ToInit, ToRtr, ToRts};
use mlx5_hw::*;
use std::sync::{Arc, Mutex};

fn path() -> PeerPath {
    PeerPath {
        path_mtu: Mtu::Mtu1024,
        dest_qpn: 0x12,
        rq_psn: 0x77,
        ah: AhAttr {
            port_num: 1,
            grh: Some(GlobalRoute {
                dgid: Gid::from_ipv4([10, 0, 0, 2]),
                ..GlobalRoute::default()
            }),
            ..AhAttr::default()
        },
    }
}

fn connect_steps(t: QpType) -> [Step; 3] {
    let init = match t {
        QpType::Ud => ToInit::Datagram {
            port: 1,
            pkey_index: 0,
            qkey: 0x1111,
        },
        _ => ToInit::Connected {
            port: 1,
            pkey_index: 0,
            access: AccessFlags::REMOTE_WRITE,
        },
    };
    let rtr = match t {
        QpType::Rc => ToRtr::Rc {
            path: path(),
            max_dest_rd_atomic: 4,
            min_rnr_timer: 12,
        },
        QpType::Uc => ToRtr::Uc { path: path() },
        QpType::Ud => ToRtr::Ud,
        _ => unreachable!("typed steps cover RC, UC and UD"),
    };
    let rts = match t {
        QpType::Rc => ToRts::Rc {
            sq_psn: 5,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 4,
        },
        _ => ToRts::Unreliable { sq_psn: 5 },
    };
    [Step::Init(init), Step::Rtr(rtr), Step::Rts(rts)]
}

/// Every (step, from state) a QP of type `t` may legally take, with changes valid for `t`.
fn meant(t: QpType) -> Vec<(Step, QpState)> {
    use QpState::*;
    let [i, r, s] = connect_steps(t);
    let mut v = vec![(i, Reset), (r, Init), (s, Rtr)];
    v.push((Step::Drain { notify: false }, Rts));
    v.push((Step::Drain { notify: true }, Rts));
    let resume = match t {
        QpType::Rc => Changes {
            access: Some(AccessFlags::REMOTE_READ),
            min_rnr_timer: Some(3),
            ..Changes::default()
        },
        QpType::Uc => Changes {
            access: Some(AccessFlags::REMOTE_WRITE),
            ..Changes::default()
        },
        QpType::Ud => Changes {
            qkey: Some(9),
            ..Changes::default()
        },
        _ => unreachable!("typed steps cover RC, UC and UD"),
    };
    v.push((Step::Resume(resume), Sqd));
    v.push((Step::Resume(Changes::default()), Sqd));
    if t != QpType::Rc {
        v.push((Step::Resume(resume), Sqe));
    }
    let in_sqd = match t {
        QpType::Rc => Changes {
            ah: Some(path().ah),
            port: Some(1),
            timeout: Some(16),
            retry_cnt: Some(3),
            rnr_retry: Some(6),
            max_rd_atomic: Some(2),
            max_dest_rd_atomic: Some(2),
            ..Changes::default()
        },
        QpType::Uc => Changes {
            ah: Some(path().ah),
            pkey_index: Some(0),
            ..Changes::default()
        },
        QpType::Ud => Changes {
            pkey_index: Some(0),
            qkey: Some(3),
            ..Changes::default()
        },
        _ => unreachable!("typed steps cover RC, UC and UD"),
    };
    v.push((Step::Change(in_sqd), Sqd));
    v.push((
        Step::Change(Changes {
            pkey_index: Some(0),
            ..Changes::default()
        }),
        Init,
    ));
    if t == QpType::Ud {
        for from in [Init, Rts, Sqd] {
            v.push((Step::SetQkey(0x42), from));
        }
    }
    for from in QpState::ALL {
        v.push((Step::Reset, from));
        if from != Reset {
            v.push((Step::Error, from));
        }
    }
    v
}

/// Serialises the tests of this file. tracing caches each callsite's interest; a callsite first
/// hit on another test thread while `one_structured_event_per_transition` installs its scoped
/// subscriber can be cached as uninteresting and drop that test's events (a race in
/// tracing-core's interest cache), so the tests that emit transition events never overlap.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

#[test]
fn every_step_passes_the_table_and_needs_every_bit_it_sets() {
    let _serial = serial();
    let mut checked = 0;
    for t in QpType::ALL {
        for (step, from) in meant(t) {
            let (attr, mask) = step
                .build(from, t)
                .unwrap_or_else(|e| panic!("{step:?} {t}: {e}"));
            let to = step.target(from);
            assert_eq!(attr.qp_state, to);
            check_modify(from, to, t, mask)
                .unwrap_or_else(|e| panic!("{} from {from} on {t}: {e}", step.name()));
            let r = rule(from, to, t).expect("legal");
            assert!(mask.contains(r.required | AttrMask::STATE));
            // Dropping IBV_QP_STATE (when the state changes) or any required bit must fail.
            let mut needed = r.required;
            if from != to {
                needed |= AttrMask::STATE;
            }
            for bit in needed.iter() {
                assert!(
                    check_modify(from, to, t, mask.difference(bit)).is_err(),
                    "{} {t}: mask without {bit:?} must be refused",
                    step.name()
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 30, "{checked}");
}

#[test]
fn connect_steps_carry_exactly_the_full_mask() {
    let _serial = serial();
    for t in QpType::ALL {
        for (step, from) in
            connect_steps(t)
                .into_iter()
                .zip([QpState::Reset, QpState::Init, QpState::Rtr])
        {
            let (_, mask) = step.build(from, t).expect("build");
            let r = rule(from, step.target(from), t).expect("legal");
            assert_eq!(mask, r.required | AttrMask::STATE, "{} on {t}", step.name());
        }
    }
    // The RC Init->RTR mask has the RNR timer: it is never left to a default.
    let (a, m) = connect_steps(QpType::Rc)[1]
        .build(QpState::Init, QpType::Rc)
        .expect("build");
    assert!(m.contains(AttrMask::MIN_RNR_TIMER));
    assert_eq!(a.min_rnr_timer, 12);
    assert_eq!(
        (a.dest_qp_num, a.rq_psn, a.max_dest_rd_atomic),
        (0x12, 0x77, 4)
    );
}

#[test]
fn steps_refuse_the_wrong_qp_type() {
    let _serial = serial();
    let rc = connect_steps(QpType::Rc);
    let ud = connect_steps(QpType::Ud);
    for (step, from, t) in [
        (rc[0], QpState::Reset, QpType::Ud),
        (rc[1], QpState::Init, QpType::Uc),
        (rc[1], QpState::Init, QpType::Ud),
        (rc[2], QpState::Rtr, QpType::Uc),
        (ud[0], QpState::Reset, QpType::Rc),
        (ud[1], QpState::Init, QpType::Rc),
        (ud[2], QpState::Rtr, QpType::Rc),
        (Step::SetQkey(1), QpState::Rts, QpType::Rc),
    ] {
        assert!(
            matches!(step.build(from, t), Err(ModifyError::WrongQpType { qp_type, .. }) if qp_type == t),
            "{} on {t}",
            step.name()
        );
    }
}

// ---------------------------------------------------------------------------------------------
// A fake device that records modify/query calls (for `apply` only).

#[derive(Default)]
struct FakeState {
    state: Option<QpState>,
    modifies: Vec<(QpAttr, AttrMask)>,
    queries: usize,
    /// Accept modifies without changing state (a device that lies).
    stuck: bool,
}

#[derive(Default)]
struct FakeDevice(Mutex<FakeState>);

impl FakeDevice {
    fn lock(&self) -> std::sync::MutexGuard<'_, FakeState> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn unsupported<T>() -> Result<T> {
    Err(Error::Unsupported("fake".into()))
}

impl Device for FakeDevice {
    fn name(&self) -> &str {
        "fake"
    }
    fn query_device(&self) -> Result<DeviceAttr> {
        unsupported()
    }
    fn query_port(&self, _: u8) -> Result<PortAttr> {
        unsupported()
    }
    fn query_gid(&self, _: u8, _: u32) -> Result<Gid> {
        unsupported()
    }
    fn alloc_pd(&self) -> Result<PdId> {
        unsupported()
    }
    fn dealloc_pd(&self, _: PdId) -> Result<()> {
        unsupported()
    }
    unsafe fn reg_mr(&self, _: PdId, _: *mut u8, _: usize, _: AccessFlags) -> Result<MrInfo> {
        unsupported()
    }
    fn dereg_mr(&self, _: MrId) -> Result<()> {
        unsupported()
    }
    fn create_cq(&self, _: &CqInitAttr) -> Result<CqInfo> {
        unsupported()
    }
    fn destroy_cq(&self, _: CqId) -> Result<()> {
        unsupported()
    }
    fn create_srq(&self, _: PdId, _: &SrqInitAttr) -> Result<SrqInfo> {
        unsupported()
    }
    fn arm_srq_limit(&self, _: SrqId, _: u32) -> Result<()> {
        unsupported()
    }
    fn destroy_srq(&self, _: SrqId) -> Result<()> {
        unsupported()
    }
    fn create_qp(&self, _: PdId, _: &QpInitAttr) -> Result<QpInfo> {
        unsupported()
    }
    fn modify_qp(&self, _: QpId, attr: &QpAttr, mask: AttrMask) -> Result<()> {
        let mut s = self.lock();
        s.modifies.push((*attr, mask));
        if !s.stuck && mask.contains(AttrMask::STATE) {
            s.state = Some(attr.qp_state);
        }
        Ok(())
    }
    fn query_qp(&self, _: QpId) -> Result<QpAttr> {
        let mut s = self.lock();
        s.queries += 1;
        let mut a = s.modifies.last().map(|m| m.0).unwrap_or_default();
        a.qp_state = s.state.unwrap_or(QpState::Reset);
        Ok(a)
    }
    fn destroy_qp(&self, _: QpId) -> Result<()> {
        unsupported()
    }
    fn create_ah(&self, _: PdId, _: &AhAttr) -> Result<AhInfo> {
        unsupported()
    }
    fn destroy_ah(&self, _: AhId) -> Result<()> {
        unsupported()
    }
    fn poll_async_event(&self) -> Option<AsyncEvent> {
        None
    }
    fn counters(&self, _: u8) -> Result<Vec<Counter>> {
        unsupported()
    }
}

const QP: QpId = QpId(7);

#[test]
fn apply_connects_every_qp_type_with_one_modify_and_one_query_per_step() {
    let _serial = serial();
    for t in QpType::ALL {
        let dev = FakeDevice::default();
        let got =
            apply_all(&dev, QP, t, 0x100, QpState::Reset, &connect_steps(t)).expect("connect");
        assert_eq!(got.qp_state, QpState::Rts);
        let s = dev.lock();
        assert_eq!(s.queries, 3);
        let masks: Vec<AttrMask> = s.modifies.iter().map(|m| m.1).collect();
        let want: Vec<AttrMask> = [
            (QpState::Reset, QpState::Init),
            (QpState::Init, QpState::Rtr),
            (QpState::Rtr, QpState::Rts),
        ]
        .iter()
        .map(|&(f, n)| rule(f, n, t).expect("legal").required | AttrMask::STATE)
        .collect();
        assert_eq!(masks, want, "{t}");
    }
}

#[test]
fn apply_refuses_before_the_device_sees_anything() {
    let _serial = serial();
    let dev = FakeDevice::default();
    // Skipping RTR.
    let rts = connect_steps(QpType::Rc)[2];
    let e = apply(&dev, QP, QpType::Rc, 1, QpState::Init, &rts).unwrap_err();
    assert!(
        matches!(e, Error::Modify(ModifyError::IllegalTransition { .. })),
        "{e}"
    );
    // A 25-bit PSN.
    let bad = Step::Rts(ToRts::Rc {
        sq_psn: 1 << 24,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 1,
    });
    let e = apply(&dev, QP, QpType::Rc, 1, QpState::Rtr, &bad).unwrap_err();
    assert!(e.to_string().contains("IBV_QP_SQ_PSN"), "{e}");
    // A UD step on an RC QP.
    let e = apply(
        &dev,
        QP,
        QpType::Rc,
        1,
        QpState::Reset,
        &connect_steps(QpType::Ud)[0],
    )
    .unwrap_err();
    assert!(
        matches!(e, Error::Modify(ModifyError::WrongQpType { .. })),
        "{e}"
    );
    // Reset -> Error is not in the kernel's table.
    let e = apply(&dev, QP, QpType::Uc, 1, QpState::Reset, &Step::Error).unwrap_err();
    assert!(
        matches!(e, Error::Modify(ModifyError::IllegalTransition { .. })),
        "{e}"
    );
    let s = dev.lock();
    assert!(s.modifies.is_empty() && s.queries == 0);
}

#[test]
fn apply_reports_a_state_the_device_did_not_reach() {
    let _serial = serial();
    let dev = FakeDevice::default();
    dev.lock().stuck = true;
    let e = apply(
        &dev,
        QP,
        QpType::Rc,
        1,
        QpState::Reset,
        &connect_steps(QpType::Rc)[0],
    )
    .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Modify(ModifyError::StateNotReached {
                wanted: QpState::Init,
                reached: QpState::Reset
            })
        ),
        "{e}"
    );
}

#[test]
fn rebuild_from_error() {
    let _serial = serial();
    let dev = FakeDevice::default();
    dev.lock().state = Some(QpState::Error);
    let mut steps = vec![Step::Reset];
    steps.extend(connect_steps(QpType::Rc));
    let got = apply_all(&dev, QP, QpType::Rc, 3, QpState::Error, &steps).expect("rebuild");
    assert_eq!(got.qp_state, QpState::Rts);
    assert_eq!(dev.lock().modifies.len(), 4);
}

// ---------------------------------------------------------------------------------------------
// Capturing tracing events without a subscriber crate.

mod capture {
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};
    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Metadata, Subscriber};

    pub type Events = Arc<Mutex<Vec<(tracing::Level, BTreeMap<String, String>)>>>;

    pub struct Capture(pub Events);

    struct Fields<'a>(&'a mut BTreeMap<String, String>);
    impl Visit for Fields<'_> {
        fn record_debug(&mut self, f: &Field, v: &dyn std::fmt::Debug) {
            self.0.insert(f.name().to_string(), format!("{v:?}"));
        }
        fn record_str(&mut self, f: &Field, v: &str) {
            self.0.insert(f.name().to_string(), v.to_string());
        }
    }

    impl Subscriber for Capture {
        fn enabled(&self, _: &Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &Attributes<'_>) -> Id {
            Id::from_u64(1)
        }
        fn record(&self, _: &Id, _: &Record<'_>) {}
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, e: &Event<'_>) {
            if e.metadata().target() != "mlx5_hw::transition" {
                return;
            }
            let mut m = BTreeMap::new();
            e.record(&mut Fields(&mut m));
            self.0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((*e.metadata().level(), m));
        }
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
    }
}

#[test]
fn one_structured_event_per_transition() {
    let _serial = serial();
    let events: capture::Events = Arc::new(Mutex::new(Vec::new()));
    let dev = FakeDevice::default();
    tracing::subscriber::with_default(capture::Capture(events.clone()), || {
        apply_all(
            &dev,
            QP,
            QpType::Rc,
            0x100,
            QpState::Reset,
            &connect_steps(QpType::Rc),
        )
        .expect("connect");
        let _ = apply(
            &dev,
            QP,
            QpType::Rc,
            0x100,
            QpState::Rts,
            &Step::Rtr(ToRtr::Uc { path: path() }),
        );
    });
    let ev = events.lock().unwrap_or_else(|p| p.into_inner());
    assert_eq!(ev.len(), 4, "{ev:#?}");
    for (_, f) in ev.iter() {
        for k in [
            "old_state",
            "new_state",
            "qpn",
            "dest_qpn",
            "rq_psn",
            "sq_psn",
            "path_mtu",
            "dlid",
            "dgid",
            "timeout",
            "retry_cnt",
            "rnr_retry",
            "max_rd_atomic",
            "max_dest_rd_atomic",
            "min_rnr_timer",
        ] {
            assert!(f.contains_key(k), "missing field {k} in {f:?}");
        }
    }
    let (lvl, rtr) = &ev[1];
    assert_eq!(*lvl, tracing::Level::INFO);
    assert_eq!(rtr["old_state"], "INIT");
    assert_eq!(rtr["new_state"], "RTR");
    assert_eq!(rtr["qpn"], "256");
    assert_eq!(rtr["dest_qpn"], "18");
    assert_eq!(rtr["rq_psn"], "119");
    assert_eq!(rtr["min_rnr_timer"], "12");
    assert_eq!(rtr["path_mtu"], "1024");
    assert!(
        rtr["dgid"].contains("ffff") && rtr["dgid"].ends_with("0a00:0002"),
        "{}",
        rtr["dgid"]
    );
    assert_eq!(ev[2].1["sq_psn"], "5");
    // The refused UC step on an RC QP is logged once, as a warning naming the error.
    let (lvl, bad) = &ev[3];
    assert_eq!(*lvl, tracing::Level::WARN);
    assert!(bad["error"].contains("UC"), "{bad:?}");
}
