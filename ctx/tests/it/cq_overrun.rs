//! Issue 28: a CQ smaller than the completions its QP produces. The device puts the CQ in
//! error (`IBV_EVENT_CQ_ERR`) and the QP in Error (`IBV_EVENT_QP_FATAL`); the waits of the
//! owning [`Cq`](mlx5_ctx::Cq) end with the named error [`Error::CqError`] once the ring is
//! empty, carrying what they polled; the events stay for the program's `AsyncEvents`; and
//! `flush_outstanding` retires the WRs whose completions were lost, so every WR is accounted
//! for once. Nothing here depends on the software ConnectX: a ConnectX reports the same
//! events and states.

use std::time::Duration;

use mlx5_ctx::{Error, QpInit, SimFabric};
use mlx5_hw::transition::Step;
use mlx5_hw::{AsyncEvent, QpState};
use mlx5_qp::{SendWr, Wc, WcStatus};

use crate::support::connect_pair_rc;

#[test]
fn a_wait_on_an_overrun_cq_ends_with_cq_error_and_the_lost_wrs_are_flushed() {
    for events_first in [false, true] {
        let f = SimFabric::deterministic();
        let (a, b) = (f.add_device(), f.add_device());
        let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
        // 3 asked, 4 entries: six signaled WRITEs are two too many.
        let mut cq = a.create_cq(3).unwrap();
        let cq_b = b.create_cq(16).unwrap();
        let mut qa = pa.create_qp(&QpInit::rc(&cq).max_send_wr(8)).unwrap();
        let mut qb = pb.create_qp(&QpInit::rc(&cq_b)).unwrap();
        connect_pair_rc(&mut qa, &mut qb);
        // A program that holds the event queue from the start sees the events there first;
        // one that does not still gets them later, in order.
        let held = events_first.then(|| a.async_events().unwrap());
        let (src, dst) = (pa.alloc_mr(64).unwrap(), pb.alloc_mr(64).unwrap());
        for id in 1..=6u64 {
            let sge = [src.sge(0, 8).unwrap()];
            let wr = SendWr::write(id, dst.remote(0).unwrap()).sges(&sge);
            qa.post(&wr.signaled()).unwrap();
        }
        let cq_ev = AsyncEvent::CqError(cq.id());
        let qp_ev = AsyncEvent::QpFatal(qa.id());
        if let Some(ev) = &held {
            assert_eq!(ev.wait_event(Duration::from_secs(5)).unwrap(), Some(cq_ev));
            assert_eq!(ev.next_event(), Some(qp_ev));
        }
        let e = cq
            .poll_until(&mut qa, Duration::from_secs(5), |wc| wc.wr_id() == 6)
            .unwrap_err();
        let Error::CqError { cqn, completions } = &e else {
            panic!("want CqError, got {e}");
        };
        assert_eq!(*cqn, cq.cqn());
        let ok: Vec<u64> = completions.iter().map(Wc::wr_id).collect();
        assert_eq!(ok, [1, 2, 3, 4], "the four that fit, delivered first");
        assert!(completions.iter().all(Wc::is_ok));
        assert!(e.to_string().contains("IBV_EVENT_CQ_ERR"), "{e}");
        assert!(cq.in_error());
        // Asking again answers at once, without a timeout.
        let again = cq.wait_for(&mut qa, 5, Duration::from_secs(3600));
        assert!(matches!(again, Err(Error::CqError { .. })), "{again:?}");
        let ev = held.unwrap_or_else(|| a.async_events().unwrap());
        if !events_first {
            // The wait took them from the device and kept them for the program.
            assert_eq!(ev.next_event(), Some(cq_ev));
            assert_eq!(ev.next_event(), Some(qp_ev));
        }
        assert_eq!(ev.next_event(), None);
        // The device moved the QP to Error; the program tells the data path and retires
        // what the dead CQ will never report.
        assert_eq!(qa.query().unwrap().qp_state, QpState::Error);
        qa.modify(&Step::Error).unwrap();
        let mut out = [Wc::default(); 8];
        let n = qa.data_path().flush_outstanding(&mut out).unwrap();
        let flushed: Vec<(u64, WcStatus)> =
            out[..n].iter().map(|w| (w.wr_id(), w.status())).collect();
        assert_eq!(
            flushed,
            [(5, WcStatus::WrFlushErr), (6, WcStatus::WrFlushErr)],
            "every WR once: 1..=4 completed, 5 and 6 flushed"
        );
        assert_eq!(qa.data_path().flush_outstanding(&mut out).unwrap(), 0);
        let bugs = f.fabric().take_driver_bugs();
        assert!(bugs.is_empty(), "{bugs:?}");
    }
}
