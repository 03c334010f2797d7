//! The tokio side (feature `tokio`): one task serving many CQs on one channel, the async CQ
//! under cancellation (futures dropped before and while they sleep lose no completion, each
//! completion comes out exactly once), the busy-poll budget, the async event stream (also
//! under cancellation), and the refusals that would otherwise hang or panic. Threaded software
//! ConnectX; a current-thread runtime built by hand; every await has a deadline that only a
//! hang reaches (no timed assertion).

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use mlx5_ctx::{AsyncChannel, AsyncCq, AsyncEvent, Error, QpInit, SimFabric};
use mlx5_qp::{RemoteAddr, SendWr};

use crate::channel::Rig;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// `f`, or a failure naming `what` if it hangs (only a bug makes it take this long).
async fn within<F: Future>(what: &str, f: F) -> F::Output {
    match tokio::time::timeout(Duration::from_secs(30), f).await {
        Ok(v) => v,
        Err(_) => panic!("hung: {what}"),
    }
}

/// Poll `fut` once from this task: its output if it finished.
async fn poll_once<F: Future>(mut fut: Pin<&mut F>) -> Option<F::Output> {
    poll_fn(|cx| {
        Poll::Ready(match fut.as_mut().poll(cx) {
            Poll::Ready(v) => Some(v),
            Poll::Pending => None,
        })
    })
    .await
}

/// A small deterministic generator (xorshift64*), seeded per test.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

#[test]
fn one_task_serves_many_cqs_on_one_channel() {
    let (a, b) = crate::support::contexts();
    let n = 4;
    let per = 40u64;
    let mut r = Rig::new(a, b, n);
    for i in 0..n {
        for k in 0..per {
            r.post_recv(i, k);
        }
    }
    runtime().block_on(async {
        let mut ach = AsyncChannel::new(&r.ch).unwrap();
        let mut idx = Vec::new();
        for cq in std::mem::take(&mut r.b_cqs) {
            idx.push(ach.add(cq).unwrap());
        }
        let mut rng = Rng(0x5eed_0001);
        let mut got = vec![0u64; n];
        // Each round sends on one QP (random) and waits: the task polls, arms all four CQs,
        // sleeps on the one fd, and wakes for whichever fired.
        for _ in 0..per * n as u64 / 2 {
            let i = loop {
                let i = rng.below(n as u64) as usize;
                if got[i] < per {
                    break i;
                }
            };
            r.send(i, got[i], false);
            let (at, wc) = within("a completion", ach.next(&mut r.b_qps[..]))
                .await
                .unwrap();
            assert_eq!(at, idx[i], "the completion comes with its CQ's index");
            assert!(wc.is_ok(), "{wc:?}");
            assert_eq!(wc.qp_num(), r.b_qps[i].qpn());
            assert_eq!(wc.wr_id(), got[i], "in order per QP");
            got[i] += 1;
        }
        // The rest in one burst on every QP: the events of several CQs at once.
        for (i, done) in got.clone().into_iter().enumerate() {
            for k in done..per {
                r.send(i, k, false);
            }
        }
        let mut batch = Vec::new();
        while got.iter().sum::<u64>() < per * n as u64 {
            batch.clear();
            within("a batch", ach.next_batch(&mut r.b_qps[..], &mut batch, 7))
                .await
                .unwrap();
            assert!((1..=7).contains(&batch.len()));
            for &(at, wc) in &batch {
                let i = idx.iter().position(|&x| x == at).unwrap();
                assert_eq!(wc.wr_id(), got[i], "in order per QP");
                got[i] += 1;
            }
        }
        assert_eq!(got, vec![per; n]);
        assert_eq!(ach.pending(), 0);
        // A CQ comes back out with nothing lost, and its index is free again.
        let (cq, left) = ach.remove(idx[1]).unwrap();
        assert!(left.is_empty());
        assert_eq!(ach.add(cq).unwrap(), idx[1]);
    });
    r.drain_a();
    let bugs = crate::support::take_driver_bugs(&r.a);
    assert!(bugs.is_empty(), "{bugs:?}");
}

#[test]
fn a_dropped_future_loses_no_completion() {
    let (a, b) = crate::support::contexts();
    let mut r = Rig::new(a.clone(), b, 1);
    let total = 120u64;
    for k in 0..total {
        r.post_recv(0, k);
    }
    runtime().block_on(async {
        let mut acq = AsyncCq::new(r.b_cqs.pop().unwrap()).unwrap();
        // Started with nothing to find: it arms and sleeps; dropped there.
        {
            let fut = std::pin::pin!(acq.next(&mut r.b_qps[..]));
            assert!(poll_once(fut).await.is_none(), "nothing was sent");
        }
        // The completion sent after the drop still arrives (the arm it left fires).
        r.send(0, 0, false);
        let wc = within("the first completion", acq.next(&mut r.b_qps[..]))
            .await
            .unwrap();
        assert_eq!(wc.wr_id(), 0);
        // Bursts of sends; futures polled a random number of times (0 to 3, yielding between
        // so the device moves) and then dropped, or awaited to the end; single and batch
        // calls. Every completion comes out once, in order.
        let mut rng = Rng(0x5eed_0002);
        let (mut sent, mut next) = (1u64, 1u64);
        let mut cancelled_asleep = 0;
        while next < total {
            if rng.below(3) == 0 {
                // Nothing outstanding (every completion so far taken): a future polled now
                // sleeps on the armed CQ for sure, and is dropped asleep. (The random drops
                // below sleep only when the device is slower than the polls.)
                let mut fut = std::pin::pin!(acq.next(&mut r.b_qps[..]));
                assert!(
                    poll_once(fut.as_mut()).await.is_none(),
                    "a completion with nothing sent"
                );
                cancelled_asleep += 1;
            }
            let burst = (1 + rng.below(6)).min(total - sent);
            for _ in 0..burst {
                r.send(0, sent, false);
                sent += 1;
            }
            while next < sent {
                let polls = rng.below(5);
                let mut out = Vec::new();
                let got: Vec<u64> = if polls == 4 {
                    let n = within("a batch", acq.next_batch(&mut r.b_qps[..], &mut out, 3))
                        .await
                        .unwrap();
                    assert_eq!(n, out.len());
                    out.iter().map(|w| w.wr_id()).collect()
                } else if polls == 3 {
                    let wc = within("a completion", acq.next(&mut r.b_qps[..]))
                        .await
                        .unwrap();
                    vec![wc.wr_id()]
                } else {
                    let mut fut = std::pin::pin!(acq.next(&mut r.b_qps[..]));
                    let mut done = None;
                    for _ in 0..polls {
                        if let Some(v) = poll_once(fut.as_mut()).await {
                            done = Some(v);
                            break;
                        }
                        tokio::task::yield_now().await;
                    }
                    match done {
                        Some(v) => vec![v.unwrap().wr_id()],
                        None => {
                            if polls > 0 {
                                cancelled_asleep += 1;
                            }
                            vec![]
                        }
                    }
                };
                for id in got {
                    assert_eq!(id, next, "every completion once, in order");
                    next += 1;
                }
            }
        }
        assert_eq!(next, total);
        assert_eq!(acq.pending(), 0);
        assert!(acq.try_next(&mut r.b_qps[..]).unwrap().is_none());
        assert!(cancelled_asleep > 0, "some futures were dropped asleep");
        let (cq, left) = acq.into_inner().unwrap();
        assert!(left.is_empty());
        r.b_cqs.push(cq);
    });
    let bugs = crate::support::take_driver_bugs(&a);
    assert!(bugs.is_empty(), "{bugs:?}");
}

#[test]
fn a_busy_poll_budget_before_sleeping() {
    let (a, b) = crate::support::contexts();
    let mut r = Rig::new(a.clone(), b, 1);
    for k in 0..20 {
        r.post_recv(0, k);
    }
    runtime().block_on(async {
        let mut acq = AsyncCq::new(r.b_cqs.pop().unwrap()).unwrap();
        let mut k = 0;
        for budget in [0, 1, 1000, 100_000] {
            acq.set_busy_polls(budget);
            for _ in 0..5 {
                r.send(0, k, false);
                let wc = within("a completion", acq.next(&mut r.b_qps[..]))
                    .await
                    .unwrap();
                assert!(wc.is_ok());
                assert_eq!(wc.wr_id(), k);
                k += 1;
            }
        }
    });
}

#[test]
fn the_async_event_stream_under_cancellation() {
    let (a, b) = crate::support::contexts();
    let mut r = Rig::new(a.clone(), b, 1);
    runtime().block_on(async {
        let mut ev = a.async_events().unwrap().into_async().unwrap();
        {
            let fut = std::pin::pin!(ev.next());
            assert!(poll_once(fut).await.is_none(), "no event yet");
        }
        // A WRITE to an rkey B never gave: A's QP goes fatal.
        let src = [r.a_mr.sge(0, 8).unwrap()];
        r.a_qps[0]
            .post(
                &SendWr::write(9, RemoteAddr::new(0x1000, 0xdead_beef))
                    .sges(&src)
                    .signaled(),
            )
            .unwrap();
        let e = within("QP fatal", ev.next()).await.unwrap();
        assert_eq!(e, AsyncEvent::QpFatal(r.a_qps[0].id()));
        assert_eq!(ev.try_next(), None);
        // Back to the synchronous queue, and the device's one consumer is still that.
        let sync = ev.into_inner();
        assert!(a.async_events().is_err());
        drop(sync);
        assert!(a.async_events().is_ok());
    });
    let mut wcs = [mlx5_qp::Wc::default(); 4];
    let n = r.a_cq.poll(&mut r.a_qps[..], &mut wcs).unwrap();
    assert_eq!(n, 1);
    assert!(!wcs[0].is_ok());
    let _ = crate::support::take_driver_bugs(&r.a);
}

#[test]
fn what_would_hang_or_steal_events_is_refused() {
    let (a, b) = crate::support::contexts();
    let mut r = Rig::new(a.clone(), b.clone(), 2);
    // Outside a runtime.
    let e = AsyncChannel::new(&r.ch).unwrap_err();
    assert!(matches!(e, Error::Events(_)), "{e}");
    assert!(e.to_string().contains("tokio runtime"), "{e}");
    // A runtime without I/O: tokio would panic; this is an error (tokio's message is printed).
    let no_io = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let e = no_io.block_on(async { AsyncChannel::new(&r.ch).unwrap_err() });
    assert!(e.to_string().contains("I/O enabled"), "{e}");
    runtime().block_on(async {
        // A deterministic software ConnectX: nothing would step it while the task sleeps.
        let f = SimFabric::deterministic();
        let d = f.add_device();
        let ch = d.create_comp_channel().unwrap();
        let e = AsyncChannel::new(&ch).unwrap_err();
        assert!(e.to_string().contains("deterministic"), "{e}");
        let e = d.async_events().unwrap().into_async().unwrap_err();
        assert!(e.to_string().contains("deterministic"), "{e}");

        let mut ach = AsyncChannel::new(&r.ch).unwrap();
        let e = ach.next(&mut r.b_qps[..]).await.unwrap_err();
        assert!(e.to_string().contains("no CQ"), "{e}");
        // One consumer per channel.
        let e = AsyncChannel::new(&r.ch).unwrap_err();
        assert!(e.to_string().contains("already served"), "{e}");
        let e = r.ch.get_event().unwrap_err();
        assert!(e.to_string().contains("served by an AsyncChannel"), "{e}");
        // A CQ of another channel (or none).
        let other = b.create_comp_channel().unwrap();
        let e = ach.add(b.create_cq_on(16, &other).unwrap()).unwrap_err();
        assert!(e.to_string().contains("does not report"), "{e}");
        assert!(ach.add(b.create_cq(16).unwrap()).is_err());
        // An AsyncCq needs a channel of its own.
        let e = AsyncCq::new(r.b_cqs.pop().unwrap()).unwrap_err();
        assert!(
            e.to_string().contains("shares its completion channel"),
            "{e}"
        );
        drop(ach);
        // Served no more: the channel is the program's again.
        assert_eq!(r.ch.get_event().unwrap(), None);
        assert!(AsyncChannel::new(&r.ch).is_ok());
    });
    // A QP on a CQ of a channel served: creating it is unaffected.
    let cq = b.create_cq_on(16, &r.ch).unwrap();
    assert!(r.b_pd.create_qp(&QpInit::rc(&cq)).is_ok());
}
