//! What waiting on a completion channel costs against busy polling: round-trip latency of an
//! 8-byte RC SEND ping-pong between two software ConnectX devices on a threaded fabric, both
//! ends waiting the same way —
//!
//! - `busy`: poll the CQ in a loop (`Cq::poll`);
//! - `busy+yield`: the same, yielding the core after each empty poll (`sched_yield`), as the
//!   waiting helpers and the tools do on a software device;
//! - `event`: the race-free wait of `mlx5_ctx::channel` with no busy polls
//!   (`Cq::poll_blocking`: poll, arm, poll, sleep on the channel's fd in `ppoll`, take the
//!   event, poll);
//! - `event+spin`: the same after a budget of 2000 empty polls, the setting for
//!   latency-sensitive programs;
//! - `tokio` (feature `tokio`): the pinging end awaits an `AsyncCq` on a current-thread
//!   runtime (the echoing end waits as in `event`); each await is bounded by a tokio timer,
//!   whose registration the figure includes.
//!
//! Every sleep is bounded ([`WAKE_BOUND`]): one that reaches the bound polls again and is
//! counted, so a lost wake-up shows as a count in the summary instead of a hang.
//!
//! Run: `cargo bench -p mlx5-direct --bench events` (with `--features tokio` for the tokio
//! case; about 30 s). The run ends with each case's median round trip and its ratio to
//! `busy`, measured in the same run. The software ConnectX is a thread of this process, so on
//! a machine with few cores a busy poller competes with it and with the other end for a core:
//! compare ratios on one machine, and read them as the cost of the wait on *this* device, not
//! a ConnectX's (where the wake-up is an interrupt, an EQE and the kernel's event path).

use criterion::{criterion_group, Criterion};
use mlx5_ctx::{Context, Cq, Mr, Pd, Qp, QpInit};
use mlx5_qp::{SendWr, Wc};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Per-case nanoseconds per round trip, one entry per criterion call of `iter_custom`.
static SAMPLES: Mutex<Vec<(&'static str, Vec<f64>)>> = Mutex::new(Vec::new());

/// Per case, the sleeps that missed their wake-up ([`LOST_WAKEUPS`] over the case).
static LOST: Mutex<Vec<(&'static str, u64)>> = Mutex::new(Vec::new());

/// Remember `LOST_WAKEUPS` for `name` and start counting again.
fn close_case(name: &'static str) {
    let n = LOST_WAKEUPS.swap(0, std::sync::atomic::Ordering::Relaxed);
    LOST.lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((name, n));
}

/// Receives kept posted on each end.
const RECVS: u64 = 64;
/// Every this many sends one is signaled, so the send queue gets its slots back.
const SIGNAL_EVERY: u64 = 32;
/// The immediate that tells the echoing end to stop.
const STOP: u32 = 0x5709;
/// No round trip takes this long unless something is broken.
const STALL: Duration = Duration::from_secs(10);
/// A sleep on the channel longer than this is a lost wake-up: the waiter polls again (and
/// counts it in [`LOST_WAKEUPS`]) rather than hang; a correct device makes it 0.
const WAKE_BOUND: Duration = Duration::from_millis(20);

/// Sleeps that ended at [`WAKE_BOUND`] with the completion there right after (a lost
/// wake-up, or one later than the bound), printed in the summary.
static LOST_WAKEUPS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

#[derive(Clone, Copy, Debug, PartialEq)]
enum Wait {
    Busy,
    BusyYield,
    Event { busy_polls: u32 },
}

/// One end: a QP whose sends and receives complete on one CQ, alone on its channel.
struct End {
    qp: Qp,
    cq: Cq,
    mr: Mr,
    _pd: Pd,
    sent: u64,
    ctx: Context,
}

impl End {
    fn new(ctx: &Context) -> End {
        let pd = ctx.alloc_pd().expect("PD");
        let ch = ctx.create_comp_channel().expect("channel");
        let cq = ctx.create_cq_on(256, &ch).expect("CQ");
        let qp = pd
            .create_qp(&QpInit::rc(&cq).max_send_wr(128).max_recv_wr(RECVS as u32))
            .expect("QP");
        let mr = pd.alloc_mr(4096).expect("MR");
        End {
            qp,
            cq,
            mr,
            _pd: pd,
            sent: 0,
            ctx: ctx.clone(),
        }
    }

    fn post_recv(&mut self, wr_id: u64) {
        let sge = self.mr.sge(0, 64).expect("SGE");
        self.qp.post_recv(wr_id, &[sge]).expect("post_recv");
    }

    /// SEND 8 bytes inline with immediate `imm`.
    fn send(&mut self, imm: u32) {
        let wr = SendWr::send_imm(self.sent, imm).inline(&[0x5a; 8]);
        let wr = if self.sent.is_multiple_of(SIGNAL_EVERY) {
            wr.signaled()
        } else {
            wr
        };
        self.qp.post(&wr).expect("post");
        self.sent += 1;
    }

    /// Wait for the next receive (send completions retire on the way); re-posts it.
    fn wait_recv(&mut self, how: Wait) -> Wc {
        let mut wcs = [Wc::default(); 1];
        let deadline = Instant::now() + STALL;
        loop {
            let n = match how {
                Wait::Busy | Wait::BusyYield => self.cq.poll(&mut self.qp, &mut wcs).expect("poll"),
                Wait::Event { busy_polls } => {
                    let n = self
                        .cq
                        .poll_blocking(&mut self.qp, &mut wcs, busy_polls, WAKE_BOUND)
                        .expect("poll_blocking");
                    if n == 0 && self.cq.poll(&mut self.qp, &mut wcs).expect("poll") == 1 {
                        LOST_WAKEUPS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        1
                    } else {
                        n
                    }
                }
            };
            if n == 1 {
                let wc = wcs[0];
                assert!(wc.is_ok(), "completion failed: {wc:?}");
                if wc.opcode().is_recv() {
                    self.post_recv(wc.wr_id());
                    return wc;
                }
            } else {
                if Instant::now() >= deadline {
                    let bugs = self.ctx.sim_fabric().map(|f| f.fabric().take_driver_bugs());
                    let counters: Vec<String> = self
                        .ctx
                        .device()
                        .counters(1)
                        .unwrap_or_default()
                        .into_iter()
                        .filter(|c| c.value != 0)
                        .map(|c| format!("{}={}", c.name, c.value))
                        .collect();
                    panic!(
                        "no completion for {STALL:?} on {} (qp {:?}, cq {:?}, unacked {}); driver bugs {bugs:?}; counters {counters:?}",
                        self.ctx.name(),
                        self.qp,
                        self.cq,
                        self.cq.channel().map_or(0, |c| c.unacked(self.cq.id()))
                    );
                }
                match how {
                    Wait::Busy => std::hint::spin_loop(),
                    Wait::BusyYield => std::thread::yield_now(),
                    Wait::Event { .. } => {}
                }
            }
        }
    }
}

/// Two connected ends, the second echoing every message on its own thread (waiting `how`)
/// until told to stop.
fn rig(how: Wait) -> (End, std::thread::JoinHandle<End>, Context) {
    let (a, b) = Context::sim_pair().expect("software ConnectX");
    let (mut pa, mut pb) = (End::new(&a), End::new(&b));
    mlx5_connect::connect_qps(&mut pa.qp, &mut pb.qp, &Default::default()).expect("connect");
    for k in 0..RECVS {
        pa.post_recv(k);
        pb.post_recv(k);
    }
    let echo = std::thread::spawn(move || loop {
        let wc = pb.wait_recv(how);
        if wc.imm_data() == STOP {
            return pb;
        }
        pb.send(0);
    });
    (pa, echo, a)
}

fn record(name: &'static str, iters: u64, took: Duration) {
    if iters == 0 {
        return;
    }
    let ns = took.as_nanos() as f64 / iters as f64;
    let mut s = SAMPLES.lock().unwrap_or_else(|e| e.into_inner());
    match s.iter_mut().find(|e| e.0 == name) {
        Some(e) => e.1.push(ns),
        None => s.push((name, vec![ns])),
    }
}

fn bench_wait(c: &mut Criterion, name: &'static str, how: Wait) {
    let (mut pa, echo, _ctx) = rig(how);
    c.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let t = Instant::now();
            for _ in 0..iters {
                pa.send(0);
                pa.wait_recv(how);
            }
            let took = t.elapsed();
            record(name, iters, took);
            took
        })
    });
    pa.send(STOP);
    let _ = echo.join();
    close_case(name);
}

fn pingpong(c: &mut Criterion) {
    bench_wait(c, "rtt/busy", Wait::Busy);
    bench_wait(c, "rtt/busy+yield", Wait::BusyYield);
    bench_wait(c, "rtt/event", Wait::Event { busy_polls: 0 });
    bench_wait(c, "rtt/event+spin", Wait::Event { busy_polls: 2000 });
    #[cfg(feature = "tokio")]
    tokio_case(c);
}

/// The pinging end awaits an `AsyncCq`; the echoing end waits on its channel as in `event`.
#[cfg(feature = "tokio")]
fn tokio_case(c: &mut Criterion) {
    let name = "rtt/tokio";
    let how = Wait::Event { busy_polls: 0 };
    let (pa, echo, _ctx) = rig(how);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let End {
        mut qp,
        cq,
        mr,
        _pd,
        mut sent,
        ctx: _,
    } = pa;
    let mut acq = rt
        .block_on(async { mlx5_ctx::AsyncCq::new(cq) })
        .expect("AsyncCq");
    let sge = mr.sge(0, 64).expect("SGE");
    c.bench_function(name, |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let t = Instant::now();
                for _ in 0..iters {
                    let wr = SendWr::send_imm(sent, 0).inline(&[0x5a; 8]);
                    let wr = if sent % SIGNAL_EVERY == 0 {
                        wr.signaled()
                    } else {
                        wr
                    };
                    qp.post(&wr).expect("post");
                    sent += 1;
                    loop {
                        // Bounded like the other cases' sleeps; dropping the future at the
                        // bound loses nothing (the async CQ is cancellation-safe).
                        let wc = match tokio::time::timeout(WAKE_BOUND, acq.next(&mut qp)).await {
                            Ok(r) => r.expect("next"),
                            Err(_) => match acq.try_next(&mut qp).expect("try_next") {
                                Some(wc) => {
                                    LOST_WAKEUPS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                    // The arm it slept on is suspect: arm again next time.
                                    acq.rearm();
                                    wc
                                }
                                None => continue,
                            },
                        };
                        assert!(wc.is_ok(), "completion failed: {wc:?}");
                        if wc.opcode().is_recv() {
                            qp.post_recv(wc.wr_id(), &[sge]).expect("post_recv");
                            break;
                        }
                    }
                }
                let took = t.elapsed();
                record(name, iters, took);
                took
            })
        })
    });
    qp.post(&SendWr::send_imm(sent, STOP).inline(&[0; 8]).signaled())
        .expect("post");
    let _ = echo.join();
    close_case(name);
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Each case's median round trip over criterion's calls, and its ratio to busy polling.
fn summary() {
    let mut s = SAMPLES.lock().unwrap_or_else(|e| e.into_inner());
    let rows: Vec<(&str, f64)> = s.iter_mut().map(|(n, v)| (*n, median(v))).collect();
    let Some(busy) = rows.iter().find(|r| r.0 == "rtt/busy").map(|r| r.1) else {
        return;
    };
    println!();
    println!("summary: median round trip (8-byte RC SEND ping-pong, threaded software ConnectX)");
    let lost = LOST.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let yielding = rows.iter().find(|r| r.0 == "rtt/busy+yield").map(|r| r.1);
    println!(
        "{:<20} {:>10} {:>9} {:>12} {:>13}",
        "case", "µs", "x busy", "x busy+yield", "missed wakes"
    );
    for (name, ns) in rows {
        let y = yielding.map_or("-".into(), |y| format!("{:.2}", ns / y));
        let m = lost.iter().find(|l| l.0 == name).map_or(0, |l| l.1);
        println!(
            "{name:<20} {:>10.2} {:>9.3} {y:>12} {m:>13}",
            ns / 1e3,
            ns / busy
        );
    }
    println!(
        "missed wakes: sleeps that reached the {WAKE_BOUND:?} bound with the completion there \
         (0 on a correct device)"
    );
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4))
        .sample_size(20)
        .configure_from_args()
}

criterion_group! {
    name = benches;
    config = config();
    targets = pingpong
}

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    if !std::env::args().any(|a| a == "--test" || a == "--list") {
        summary();
    }
}
