//! The waiting helpers (`Cq::poll_until`, `Cq::wait_for`, `Cq::poll_blocking`, and with the
//! `tokio` feature `AsyncCq`): they sleep rather than spin (a wait of about a second costs a
//! small part of a second of the waiting thread's CPU, measured with its CPU clock: a resource
//! bound, not a timing), their timeout message names what this side had outstanding, and a
//! device that reports `IBV_EVENT_DEVICE_FATAL` ends every wait with `Error::DeviceFatal`
//! instead of a timeout, whoever takes the event. Threaded software ConnectX.

use std::time::Duration;

use mlx5_ctx::{AsyncEvent, Context, Cq, Error, Mr, Pd, Qp, QpInit};
use mlx5_qp::{SendWr, WcStatus};

use crate::support::connect_pair_rc;

/// CPU time the calling thread has used so far (`clock_gettime(CLOCK_THREAD_CPUTIME_ID)`).
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer; the clock id is a constant every Linux knows.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Far above what a sleeping wait of [`WAIT`] uses (some milliseconds), far below what a
/// spinning one used (all of it): a bound on resources, whatever the machine's speed.
const CPU_BOUND: Duration = Duration::from_millis(300);
const WAIT: Duration = Duration::from_secs(1);

/// One end: a QP on `cq`.
struct End {
    qp: Qp,
    cq: Cq,
    pd: Pd,
    ctx: Context,
}

/// Two connected RC QPs on a threaded fabric; `channel`: each CQ on a channel of its own.
fn pair(channel: bool) -> (End, End) {
    let (a, b) = crate::support::contexts();
    let mk = |ctx: Context| {
        let pd = ctx.alloc_pd().unwrap();
        let cq = if channel {
            let ch = ctx.create_comp_channel().unwrap();
            ctx.create_cq_on(64, &ch).unwrap()
        } else {
            ctx.create_cq(64).unwrap()
        };
        let qp = pd.create_qp(&QpInit::rc(&cq)).unwrap();
        End { qp, cq, pd, ctx }
    };
    let (mut a, mut b) = (mk(a), mk(b));
    connect_pair_rc(&mut a.qp, &mut b.qp);
    (a, b)
}

fn timeout_detail(e: Error) -> String {
    match e {
        Error::Timeout { detail, .. } => detail,
        other => panic!("expected a timeout, got {other}"),
    }
}

#[test]
fn a_wait_of_a_second_sleeps_instead_of_spinning() {
    for channel in [false, true] {
        let (mut a, _b) = pair(channel);
        let mr = a.pd.alloc_mr(64).unwrap();
        a.qp.post_recv(1, &[mr.sge(0, 64).unwrap()]).unwrap();
        // poll_until: nothing comes (the peer sends nothing).
        let before = thread_cpu();
        let e = a.cq.poll_until(&mut a.qp, WAIT, |_| true).unwrap_err();
        let used = thread_cpu() - before;
        assert!(matches!(e, Error::Timeout { .. }), "{e}");
        eprintln!("channel {channel}: poll_until for {WAIT:?} used {used:?} of CPU");
        assert!(
            used < CPU_BOUND,
            "channel {channel}: waiting {WAIT:?} cost {used:?} of CPU"
        );
        // wait_for, the same.
        let before = thread_cpu();
        let e = a.cq.wait_for(&mut a.qp, 1, WAIT).unwrap_err();
        let used = thread_cpu() - before;
        assert!(matches!(e, Error::Timeout { .. }), "{e}");
        assert!(
            used < CPU_BOUND,
            "channel {channel}: wait_for cost {used:?}"
        );
    }
}

#[test]
fn a_sleeping_wait_still_sees_its_completion() {
    for channel in [false, true] {
        let (mut a, mut b) = pair(channel);
        let mr_a = a.pd.alloc_mr(64).unwrap();
        let mr_b = b.pd.alloc_mr(64).unwrap();
        a.qp.post_recv(7, &[mr_a.sge(0, 64).unwrap()]).unwrap();
        let sender = std::thread::spawn(move || {
            // Long enough for the waiter to be asleep (the test holds either way).
            std::thread::sleep(Duration::from_millis(50));
            let sge = [mr_b.sge(0, 8).unwrap()];
            b.qp.post(&SendWr::send(9).sges(&sge).signaled()).unwrap();
            b.cq.wait_for(&mut b.qp, 9, Duration::from_secs(10))
                .unwrap();
            (b, mr_b)
        });
        let wc =
            a.cq.wait_for(&mut a.qp, 7, Duration::from_secs(10))
                .unwrap();
        assert_eq!(wc.byte_len(), 8);
        drop(sender.join().unwrap());
    }
}

#[test]
fn the_timeout_message_says_what_this_side_had_outstanding() {
    // Nothing posted on this side: no peer is to blame.
    let (mut a, _b) = pair(false);
    let d = timeout_detail(
        a.cq.poll_until(&mut a.qp, Duration::from_millis(50), |_| true)
            .unwrap_err(),
    );
    assert!(d.contains("no receive posted"), "{d}");
    assert!(d.contains("nothing on this side can complete"), "{d}");
    assert!(!d.contains("peer"), "{d}");
    // A receive posted, and the peer sends nothing.
    let mr = a.pd.alloc_mr(64).unwrap();
    a.qp.post_recv(1, &[mr.sge(0, 64).unwrap()]).unwrap();
    let d = timeout_detail(
        a.cq.wait_for(&mut a.qp, 1, Duration::from_millis(50))
            .unwrap_err(),
    );
    assert!(d.contains("1 receive(s) posted"), "{d}");
    assert!(d.contains("the peer has not sent"), "{d}");
    // A send the peer never acknowledges: the link between the two is down.
    let (mut a, b) = pair(false);
    let mr = a.pd.alloc_mr(64).unwrap();
    let remote = b.pd.alloc_mr(64).unwrap();
    let f = a.ctx.sim_fabric().unwrap().fabric();
    f.faults()
        .link(a.ctx.sim_device().unwrap(), b.ctx.sim_device().unwrap())
        .down();
    let sge = [mr.sge(0, 8).unwrap()];
    a.qp.post(
        &SendWr::write(3, remote.remote(0).unwrap())
            .sges(&sge)
            .signaled(),
    )
    .unwrap();
    let d = timeout_detail(
        a.cq.wait_for(&mut a.qp, 3, Duration::from_millis(50))
            .unwrap_err(),
    );
    assert!(d.contains("1 send WR(s) outstanding"), "{d}");
    assert!(d.contains("not acknowledged"), "{d}");
    // A QP never connected.
    let ctx = Context::sim().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let mut cq = ctx.create_cq(16).unwrap();
    let mut qp = pd.create_qp(&QpInit::rc(&cq)).unwrap();
    let d = timeout_detail(
        cq.poll_until(&mut qp, Duration::from_millis(50), |_| true)
            .unwrap_err(),
    );
    assert!(d.contains("neither sends nor receives"), "{d}");
}

/// `e`'s device enters its fatal state.
fn kill(e: &End) {
    crate::support::kill(&e.ctx);
}

fn fatal_completions(e: Error) -> Vec<mlx5_qp::Wc> {
    match e {
        Error::DeviceFatal {
            device,
            completions,
            ..
        } => {
            assert!(
                device.starts_with("sim")
                    || Some(&device) == crate::support::test_device().as_ref(),
                "{device}"
            );
            completions
        }
        other => panic!("expected DeviceFatal, got {other}"),
    }
}

/// Each case in a process of its own when run through rdma-core (one device a process, and
/// it stays dead).
fn a_dead_device_ends_every_wait(channel: bool) {
    // Long enough that a wait the death did not end fails the test as a timeout.
    const LONG: Duration = Duration::from_secs(60);
    {
        // Nothing outstanding: the death writes no completion, only the event wakes the wait.
        let (mut a, _b) = pair(channel);
        let ka = a.ctx.clone();
        let killer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            crate::support::kill(&ka);
        });
        let e = a.cq.poll_until(&mut a.qp, LONG, |_| true).unwrap_err();
        assert_eq!(fatal_completions(e), []);
        killer.join().unwrap();
        assert!(a.ctx.is_fatal());
        // The event the helper took is handed to the next AsyncEvents, not lost.
        let ev = a.ctx.async_events().unwrap();
        assert_eq!(ev.next_event(), Some(AsyncEvent::DeviceFatal));
        assert_eq!(ev.next_event(), None);
        // Every later wait fails at once, and nothing new can be made.
        let e = a.cq.wait_for(&mut a.qp, 1, LONG).unwrap_err();
        assert!(matches!(e, Error::DeviceFatal { .. }), "{e}");
        let e = a.ctx.alloc_pd().unwrap_err();
        assert!(e.to_string().contains("IBV_EVENT_DEVICE_FATAL"), "{e}");
    }
}

#[test]
fn a_dead_device_ends_every_wait_with_an_error_not_a_timeout() {
    a_dead_device_ends_every_wait(false);
}

#[test]
fn a_dead_device_ends_every_wait_on_a_channel() {
    a_dead_device_ends_every_wait(true);
}

#[test]
fn a_dead_device_wakes_a_wait_while_another_thread_takes_the_events() {
    let (mut a, _b) = pair(true);
    let events = a.ctx.async_events().unwrap();
    let ka = a.ctx.clone();
    let watcher = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        crate::support::kill(&ka);
        events.wait_event(Duration::from_secs(60)).unwrap()
    });
    let e =
        a.cq.poll_until(&mut a.qp, Duration::from_secs(60), |_| true)
            .unwrap_err();
    assert_eq!(fatal_completions(e), []);
    assert_eq!(watcher.join().unwrap(), Some(AsyncEvent::DeviceFatal));
}

#[test]
fn a_dead_device_returns_the_completions_polled_before() {
    let (mut a, _b) = pair(false);
    let mr: Mr = a.pd.alloc_mr(64).unwrap();
    a.qp.post_recv(5, &[mr.sge(0, 64).unwrap()]).unwrap();
    kill(&a);
    // The device writes no CQE after its death: the wait finds it dead and retires the
    // receive itself (Cq::flush_dead), on either device.
    let e =
        a.cq.poll_until(&mut a.qp, Duration::from_secs(60), |_| false)
            .unwrap_err();
    let got = fatal_completions(e);
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].wr_id(), got[0].status()), (5, WcStatus::WrFlushErr));
}

#[test]
fn a_dead_device_ends_poll_blocking() {
    let (mut a, _b) = pair(true);
    kill(&a);
    let mut wcs = [mlx5_qp::Wc::default(); 4];
    let e =
        a.cq.poll_blocking(&mut a.qp, &mut wcs, 0, Duration::from_secs(60))
            .unwrap_err();
    assert!(matches!(e, Error::DeviceFatal { .. }), "{e}");
}

#[cfg(feature = "tokio")]
#[test]
fn a_dead_device_ends_an_async_wait() {
    let (a, _b) = pair(true);
    let End {
        mut qp, cq, ctx, ..
    } = a;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut acq = mlx5_ctx::AsyncCq::new(cq).unwrap();
        let k = ctx.clone();
        let killer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            crate::support::kill(&k);
        });
        let r = tokio::time::timeout(Duration::from_secs(60), acq.next(&mut qp)).await;
        let e = r
            .expect("the async wait hung on a dead device")
            .unwrap_err();
        assert!(matches!(e, Error::DeviceFatal { .. }), "{e}");
        killer.join().unwrap();
    });
}
