//! One end of a bandwidth run: the sender's flow of WRs (its window, the completions it
//! reaps), the receiver's sink, and the end that drives them over its data path.

use super::plan::Plan;
use super::LOSS_GRACE;
use mlx5_connect::RemoteBuffer;
use mlx5_ctx::Mr;
use mlx5_qp::{RemoteAddr, Sge};
use mlx5_tools::args::{AtomicArg, Length, Test};
use mlx5_tools::path::{DataPath, Done, Op, Post};
use mlx5_tools::patience::{self, Pace, Patience};
use mlx5_tools::resources;
use mlx5_tools::stats::BwStats;
use mlx5_tools::{Error, Result};
use std::time::{Duration, Instant};

/// The sender's state for one message size.
pub(super) struct Flow {
    pub(super) size: u64,
    pub(super) depth: u64,
    pub(super) cq_mod: u64,
    /// Messages per QP (`None`: until `stop`).
    pub(super) iters: Option<u64>,
    pub(super) posted: Vec<u64>,
    pub(super) done: Vec<u64>,
    pub(super) completed: u64,
    pub(super) start: Instant,
    /// `-D`: stop posting at this time; the figures count what completes in `window`.
    pub(super) stop: Option<Instant>,
    pub(super) window: Option<(Instant, Instant)>,
    pub(super) in_window: u64,
    pub(super) window_span: Option<(Instant, Instant)>,
    /// The best (messages, time) of any window of at least `depth` messages.
    pub(super) best: Option<(u64, Duration)>,
    pub(super) mark: (Instant, u64),
    pub(super) finished: Option<Instant>,
}

impl Flow {
    pub(super) fn new(p: &Plan, size: u64, depth: u32) -> Flow {
        let now = Instant::now();
        let n = p.qps as usize;
        let (stop, window) = match p.run.length {
            Length::Iters(_) => (None, None),
            Length::Duration { secs, margin } => (
                Some(now + Duration::from_secs(secs)),
                Some((
                    now + Duration::from_secs(margin),
                    now + Duration::from_secs(secs - margin),
                )),
            ),
        };
        if let Some((w0, w1)) = window {
            p.run.cpu_util.watch(w0, w1);
        }
        let depth = u64::from(depth.max(1));
        Flow {
            size,
            depth,
            cq_mod: p.cq_mod.min(depth),
            iters: p.run.length.iters(),
            posted: vec![0; n],
            done: vec![0; n],
            completed: 0,
            start: now,
            stop,
            window,
            in_window: 0,
            window_span: None,
            best: None,
            mark: (now, 0),
            finished: None,
        }
    }

    pub(super) fn total(&self) -> Option<u64> {
        self.iters.map(|n| n * self.posted.len() as u64)
    }

    pub(super) fn is_done(&self) -> bool {
        self.finished.is_some()
    }

    /// Count `retired` more completions at `now`.
    pub(super) fn retire(&mut self, q: usize, wr_id: u64, now: Instant) {
        // Completions are in order per QP: this one retires every WR up to it.
        let upto = wr_id + 1;
        let n = upto.saturating_sub(self.done[q]);
        self.done[q] = self.done[q].max(upto);
        self.completed += n;
        if let Some((w0, w1)) = self.window {
            if now >= w0 && now <= w1 {
                self.in_window += n;
                let first = self.window_span.map_or(now, |s| s.0);
                self.window_span = Some((first, now));
            }
        }
        let window = self.depth.max(self.cq_mod);
        if self.stop.is_none() && self.completed - self.mark.1 >= window {
            let w = (self.completed - self.mark.1, now - self.mark.0);
            let faster = match self.best {
                None => true,
                Some((m, d)) => w.0 as f64 / w.1.as_secs_f64() > m as f64 / d.as_secs_f64(),
            };
            if faster {
                self.best = Some(w);
            }
            self.mark = (now, self.completed);
        }
    }

    /// Whether everything posted that will complete has.
    pub(super) fn check_finished(&mut self, now: Instant) {
        if self.finished.is_some() {
            return;
        }
        let all_posted_done = self.posted.iter().zip(&self.done).all(|(p, d)| p == d);
        let finished = match (self.total(), self.stop) {
            (Some(t), _) => self.completed >= t,
            // -D: no more posting; what is signaled has completed (an unsignaled tail of a
            // QP never completes by itself).
            (None, Some(stop)) => {
                now >= stop
                    && (all_posted_done
                        || self
                            .posted
                            .iter()
                            .zip(&self.done)
                            .all(|(p, d)| p - d < self.cq_mod))
            }
            (None, None) => false,
        };
        if finished {
            self.finished = Some(now);
        }
    }

    pub(super) fn stats(&self) -> BwStats {
        match (self.window_span, self.stop) {
            (_, None) => BwStats::new(
                self.size,
                self.completed,
                self.finished.unwrap_or_else(Instant::now) - self.start,
                self.best,
            ),
            // -D: what completed inside the window over the window's own span, as perftest
            // (`catch_alarm` stamps the window's start and end; the completions between its
            // first and last signaled completion would span nothing when one falls inside).
            (Some((a, b)), Some(_)) => {
                let span = self.window.map_or(b - a, |(w0, w1)| w1 - w0);
                BwStats::new(self.size, self.in_window, span, None).without_peak()
            }
            (None, Some(_)) => BwStats::new(self.size, 0, Duration::from_secs(1), None),
        }
    }
}

/// The receiver's state (SEND): receives counted and reposted per QP.
pub(super) struct Sink {
    /// Messages per QP to expect (`None`: until told to stop).
    pub(super) iters: Option<u64>,
    pub(super) rx_depth: u64,
    /// Messages received this size, per QP.
    pub(super) received: Vec<u64>,
    /// Receives posted and not consumed yet, per receive queue: each QP's (the connect posted
    /// `rx_depth` of them), or with `--use-srq` one, the SRQ's, which every QP consumes from
    /// (`links` posted each QP's share there).
    pub(super) outstanding: Vec<u64>,
    pub(super) last_arrival: Instant,
    /// When this size's first message arrived.
    pub(super) first_arrival: Option<Instant>,
}

impl Sink {
    pub(super) fn new(p: &Plan) -> Sink {
        let n = p.qps as usize;
        let (rx_depth, queues) = if p.run.srq {
            (resources::srq_receives(p.run.rx_depth, n), 1)
        } else {
            (p.run.rx_depth, n)
        };
        Sink {
            iters: p.run.length.iters(),
            rx_depth: u64::from(rx_depth),
            received: vec![0; n],
            outstanding: vec![u64::from(rx_depth); queues],
            last_arrival: Instant::now(),
            first_arrival: None,
        }
    }

    /// The receive queue QP `q` consumes from.
    fn queue(&self, q: usize) -> usize {
        if self.outstanding.len() == 1 {
            0
        } else {
            q
        }
    }

    /// Messages the receive queue `rq` is still to take this size: its QP's, or every QP's
    /// when shared (`None`: until told to stop).
    fn left_for(&self, rq: usize) -> Option<u64> {
        let n = self.iters?;
        Some(if self.outstanding.len() == 1 {
            (n * self.received.len() as u64).saturating_sub(self.got())
        } else {
            n.saturating_sub(self.received[rq])
        })
    }

    pub(super) fn total(&self) -> Option<u64> {
        self.iters.map(|n| n * self.received.len() as u64)
    }

    pub(super) fn got(&self) -> u64 {
        self.received.iter().sum()
    }

    pub(super) fn is_done(&self) -> bool {
        self.total().is_some_and(|t| self.got() >= t)
    }

    /// The receives QP `q` wants posted at the start of a size: up to `-r`, or the size's
    /// messages if fewer, less those still posted from the last size (perftest posts `-r`
    /// receives for every size, `ctx_set_recv_wqes`).
    pub(super) fn top_up(&self, rq: usize) -> u64 {
        let want = self
            .left_for(rq)
            .map_or(self.rx_depth, |n| self.rx_depth.min(n));
        want.saturating_sub(self.outstanding[rq])
    }

    /// One message arrived on QP `q` at `now`: whether to post its receive again (while the
    /// receives posted do not cover the rest of the size's messages), to its receive queue.
    pub(super) fn arrived(&mut self, q: usize, now: Instant) -> bool {
        let rq = self.queue(q);
        self.received[q] += 1;
        self.outstanding[rq] = self.outstanding[rq].saturating_sub(1);
        self.last_arrival = now;
        self.first_arrival.get_or_insert(now);
        let again = self
            .left_for(rq)
            .is_none_or(|left| self.outstanding[rq] < left);
        if again {
            self.outstanding[rq] += 1;
        }
        again
    }

    /// Prepare for the next size: the receives still posted carry over.
    pub(super) fn next_size(&mut self) {
        for r in &mut self.received {
            *r = 0;
        }
        self.first_arrival = None;
        self.last_arrival = Instant::now();
    }
}

/// How long an end of a size may go without a completion: between two completions at most a
/// window of `depth` messages of `size` bytes on each of `qps` QPs moves, which takes at most
/// what [`Patience::for_work`] makes of it at `pace`, with the transport's retry `budget`.
pub(super) fn window_patience(
    pace: Pace,
    budget: &(Option<Duration>, String),
    size: u64,
    depth: u32,
    qps: usize,
) -> Patience {
    let window = u64::from(depth.max(1)).saturating_mul(qps.max(1) as u64);
    Patience::for_work(
        pace,
        size.saturating_mul(window),
        window,
        Duration::ZERO,
        budget.0,
        &budget.1,
    )
}

/// One end of a bandwidth run: its data path, what it sends (`flow`) and receives (`sink`).
pub(super) struct BwEnd<'a, P> {
    pub(super) path: P,
    pub(super) test: Test,
    pub(super) atomic: AtomicArg,
    pub(super) sge: Sge,
    pub(super) recv_sge: Sge,
    pub(super) payload: Vec<u8>,
    pub(super) inline: u32,
    pub(super) peers: Vec<RemoteBuffer>,
    pub(super) remote_off: u64,
    pub(super) flow: Option<Flow>,
    pub(super) sink: Option<Sink>,
    pub(super) got: [Done; 32],
    /// The figures' time base is the first post; a -D flow is re-timed there.
    pub(super) yield_idle: bool,
    pub(super) mr: &'a Mr,
    pub(super) last_progress: Instant,
    /// The device's slowest legitimate pace ([`Pace::of`]; the caller sets it).
    pub(super) pace: Pace,
    /// The transport's retry budget and how a user names it.
    pub(super) budget: (Option<Duration>, String),
    /// How long a wait of the current size may go without a completion ([`BwEnd::start`]).
    pub(super) patience: Patience,
    /// The device port, for its counters.
    pub(super) port: u8,
    /// The current size's message size, and its window: the messages the sender keeps in
    /// flight on all QPs (`-t` × `-q`), or with UC/UD every message of the size it may have
    /// sent ahead of the receiver.
    pub(super) size: u64,
    pub(super) window: u64,
    /// The loss counters of the device when the size started ([`LOSS_COUNTERS`]).
    pub(super) counters_at_start: Vec<(String, u64)>,
}

/// Counters that move when a receiver loses a message: no receive posted (`out_of_buffer`),
/// a packet of it lost (`out_of_sequence`, `uc_dropped_packets`; rxe `rcvd_seq_err`), a frame
/// no QP took (`rx_dropped`) (mlx5 `hw_counters`, Linux `drivers/infiniband/hw/mlx5/counters.c`;
/// rxe `drivers/infiniband/sw/rxe/rxe_hw_counters.c`).
const LOSS_COUNTERS: [&str; 5] = [
    "out_of_buffer",
    "out_of_sequence",
    "uc_dropped_packets",
    "rcvd_seq_err",
    "rx_dropped",
];

impl<'a, P: DataPath> BwEnd<'a, P> {
    pub(super) fn new(
        path: P,
        p: &Plan,
        mr: &'a Mr,
        peers: Vec<RemoteBuffer>,
        inline: u32,
    ) -> Result<Self> {
        Ok(BwEnd {
            path,
            test: p.run.test,
            atomic: p.run.atomic,
            sge: mr.sge(0, 8)?,
            recv_sge: mr.sge(p.run.half, p.run.half as u32)?,
            payload: Vec::new(),
            inline,
            peers,
            remote_off: if matches!(p.run.test, Test::Atomic) {
                p.run.half as u64
            } else {
                0
            },
            flow: None,
            sink: None,
            got: [Done::default(); 32],
            yield_idle: false,
            mr,
            last_progress: Instant::now(),
            pace: Pace::SOFTWARE_VERBS,
            budget: (
                patience::retry_budget(p.run.conn, p.run.params.timeout, p.run.params.retry_cnt),
                patience::describe_budget(p.run.conn, p.run.params.timeout, p.run.params.retry_cnt),
            ),
            patience: Patience {
                limit: patience::MIN_PATIENCE,
                why: String::new(),
            },
            port: p.run.params.port,
            counters_at_start: Vec::new(),
            size: 0,
            window: 1,
        })
    }

    /// Start a size: a flow when this end sends, a sink when it receives SENDs.
    pub(super) fn start(
        &mut self,
        p: &Plan,
        size: u64,
        depth: u32,
        sends: bool,
        recvs: bool,
    ) -> Result<()> {
        self.sge = self.mr.sge(
            0,
            if self.test == Test::Atomic {
                8
            } else {
                size as u32
            },
        )?;
        if size <= u64::from(self.inline) && matches!(self.test, Test::Write | Test::Send) {
            self.payload = vec![0xa5; size as usize];
        } else {
            self.payload.clear();
            self.mr.fill(0, size as usize, 0xa5)?;
        }
        self.flow = sends.then(|| Flow::new(p, size, depth));
        self.patience = window_patience(self.pace, &self.budget, size, depth, self.peers.len());
        self.size = size;
        self.window = match p.run.length.iters() {
            // UC and UD sends complete locally: the sender may be the whole size ahead.
            Some(n) => n.saturating_mul(self.peers.len() as u64),
            None => u64::from(depth.max(1)).saturating_mul(self.peers.len() as u64),
        };
        match (&mut self.sink, recvs) {
            (Some(s), true) => s.next_size(),
            (s, true) => *s = Some(Sink::new(p)),
            (s, false) => *s = None,
        }
        if self.sink.is_some() {
            self.counters_at_start = self.loss_counters();
        }
        if let Some(s) = &mut self.sink {
            // Every message of the size finds a receive: what the last size consumed is
            // posted again now (a SEND that finds none waits for RNR retries on RC, and is
            // dropped on UC and UD).
            for q in 0..s.outstanding.len() {
                for _ in 0..s.top_up(q) {
                    self.path.post_recv(q, 0, self.recv_sge)?;
                    s.outstanding[q] += 1;
                }
            }
        }
        self.last_progress = Instant::now();
        Ok(())
    }

    pub(super) fn op(test: Test, atomic: AtomicArg, peer: &RemoteBuffer, off: u64, i: u64) -> Op {
        let remote = RemoteAddr::new(peer.addr + off, peer.rkey);
        match (test, atomic) {
            (Test::Write, _) => Op::Write(remote),
            (Test::Send, _) => Op::Send,
            (Test::Read, _) => Op::Read(remote),
            (Test::Atomic, AtomicArg::FetchAndAdd) => Op::FetchAdd { remote, add: 1 },
            (Test::Atomic, AtomicArg::CmpAndSwap) => Op::CompSwap {
                remote,
                compare: i,
                swap: i + 1,
            },
        }
    }

    /// Post what the window allows, poll what is ready; whether anything happened.
    #[inline]
    pub(super) fn step(&mut self) -> Result<bool> {
        let mut busy = false;
        if let Some(f) = &mut self.flow {
            let now_ok = f.stop.is_none_or(|s| Instant::now() < s);
            if now_ok {
                for q in 0..f.posted.len() {
                    while f.iters.is_none_or(|n| f.posted[q] < n)
                        && f.posted[q] - f.done[q] < f.depth
                    {
                        let i = f.posted[q];
                        let last = f.iters.is_some_and(|n| i + 1 == n);
                        let wr_id = i;
                        let op =
                            Self::op(self.test, self.atomic, &self.peers[q], self.remote_off, i);
                        let post = Post {
                            wr_id,
                            op,
                            sge: self.sge,
                            inline: (!self.payload.is_empty()).then_some(&self.payload[..]),
                            signaled: (i + 1) % f.cq_mod == 0 || last,
                        };
                        self.path.post(q, &post)?;
                        f.posted[q] += 1;
                        busy = true;
                    }
                }
            }
        }
        let n = self.path.poll(&mut self.got)?;
        let now = Instant::now();
        for i in 0..n {
            let d = self.got[i];
            if d.recv {
                let Some(s) = &mut self.sink else {
                    return Err(Error::Check(format!(
                        "a receive completion (WR {}) on an end that posted no receive",
                        d.wr_id
                    )));
                };
                if s.arrived(d.qp, now) {
                    self.path.post_recv(d.qp, d.wr_id, self.recv_sge)?;
                }
            } else if let Some(f) = &mut self.flow {
                f.retire(d.qp, d.wr_id, now);
            }
        }
        if n > 0 {
            busy = true;
            self.last_progress = now;
        }
        if let Some(f) = &mut self.flow {
            f.check_finished(now);
        }
        Ok(busy)
    }

    /// The device's loss counters ([`LOSS_COUNTERS`]) it has, now.
    fn loss_counters(&self) -> Vec<(String, u64)> {
        let dev = self.mr.pd().context().device();
        dev.counters(self.port)
            .map(|all| {
                all.into_iter()
                    .filter(|c| LOSS_COUNTERS.contains(&c.name.as_str()))
                    .map(|c| (c.name, c.value))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The loss counters that moved since the size started: `out_of_sequence +3`, ...
    pub(super) fn loss_counters_since(&self) -> Vec<String> {
        self.loss_counters()
            .into_iter()
            .filter_map(|(name, now)| {
                let then = self
                    .counters_at_start
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map_or(0, |(_, v)| *v);
                (now > then).then(|| format!("{name} +{}", now - then))
            })
            .collect()
    }

    pub(super) fn flow_done(&self) -> bool {
        self.flow.as_ref().is_none_or(Flow::is_done)
    }

    /// Whether the receiver has everything, or (its own flow done, UC/UD, a `-D` run) has
    /// waited long enough for what was lost ([`BwEnd::loss_grace`]).
    pub(super) fn sink_done(&self, lossy_or_timed: bool) -> bool {
        match &self.sink {
            None => true,
            Some(s) => {
                s.is_done()
                    || (lossy_or_timed
                        && self.flow_done()
                        && s.last_arrival.elapsed() > self.loss_grace())
            }
        }
    }

    /// How long a receiver that got nothing for a while may still expect messages: a UC or
    /// UD sender completes its sends before they arrive, so the messages missing may still be
    /// on their way: what they take at the device's slowest pace, and [`LOSS_GRACE`]. (A
    /// fixed half second gave up on 2 MiB UC messages a debug build was still moving.)
    pub(super) fn loss_grace(&self) -> Duration {
        let missing = self.sink.as_ref().map_or(0, |s| {
            s.total()
                .map_or(self.window, |t| t.saturating_sub(s.got()).min(self.window))
        });
        let bytes = missing.saturating_mul(self.size) as f64;
        LOSS_GRACE + Duration::from_secs_f64(bytes / self.pace.floor_bps.max(1) as f64)
    }

    /// An error when this end waits for something (its flow's completions, its sink's
    /// messages) and nothing came for longer than the size's patience; `Ok` otherwise (an end
    /// with nothing to wait for never stalls, however long the run).
    pub(super) fn stalled(&self) -> Result<()> {
        let flow = self.flow.as_ref().filter(|f| !f.is_done());
        let sink = self.sink.as_ref().filter(|s| !s.is_done());
        if (flow.is_none() && sink.is_none()) || self.last_progress.elapsed() <= self.patience.limit
        {
            return Ok(());
        }
        let name = match self.test {
            Test::Write => "RDMA WRITE",
            Test::Send => "SEND",
            Test::Read => "RDMA READ",
            Test::Atomic => "atomic",
        };
        let (what, doing) = match (flow, sink) {
            (Some(f), _) => {
                let out: u64 = f.posted.iter().zip(&f.done).map(|(p, d)| p - d).sum();
                (
                    "send completions",
                    format!(
                        "{out} {name}(s) of {} were outstanding on {} QP(s) ({} of {} done)",
                        mlx5_tools::limits::human(f.size),
                        f.posted.len(),
                        f.completed,
                        f.total()
                            .map_or_else(|| "a timed run".into(), |t| t.to_string())
                    ),
                )
            }
            (None, Some(s)) => (
                "the peer's SENDs",
                format!(
                    "this side waited for SENDs ({} received{})",
                    s.got(),
                    s.total().map_or_else(String::new, |t| format!(" of {t}"))
                ),
            ),
            (None, None) => ("nothing", String::new()),
        };
        Err(Error::stuck(
            what,
            self.patience.limit,
            &doing,
            &self.patience.why,
        ))
    }

    pub(super) fn idle(&self) {
        if self.yield_idle {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use mlx5_tools::args::BwArgs;
    use mlx5_tools::devices::Devices;
    use mlx5_tools::resources::{Resources, ResourcesCfg};

    /// A data path that takes every post and never completes anything.
    struct Silent;

    impl DataPath for Silent {
        fn post(&mut self, _q: usize, _p: &Post<'_>) -> Result<()> {
            Ok(())
        }
        fn post_recv(&mut self, _q: usize, _wr_id: u64, _sge: Sge) -> Result<()> {
            Ok(())
        }
        fn poll(&mut self, _out: &mut [Done]) -> Result<usize> {
            Ok(0)
        }
        fn set_ud_peer(&mut self, _q: usize, _peer: &mlx5_connect::UdPeer) {}
    }

    fn plan_of(args: &[&str]) -> Plan {
        super::super::plan::plan(&BwArgs::try_parse_from(args).unwrap()).unwrap()
    }

    #[test]
    fn every_size_finds_its_receives_posted() {
        // -n 100: the connect posted 100 receives (-r, at most -n); the first size consumes
        // them all and reposts none. The second size must post 100 again: the old count
        // said they were still there, and the SENDs of the second size of `bw send -a` on RC
        // waited for RNR retries forever (on UC they were all dropped).
        let p = plan_of(&["bw", "send", "-n", "100"]);
        let mut s = Sink::new(&p);
        let now = Instant::now();
        assert_eq!(s.top_up(0), 0);
        for _ in 0..100 {
            assert!(
                !s.arrived(0, now),
                "no receive is needed past the size's messages"
            );
        }
        assert_eq!((s.got(), s.outstanding[0]), (100, 0));
        s.next_size();
        assert_eq!(s.top_up(0), 100);
        // More messages than -r: each arrival reposts until the receives cover the rest.
        let p = plan_of(&["bw", "send", "-n", "1000", "-r", "512"]);
        let mut s = Sink::new(&p);
        let again = (0..1000).filter(|_| s.arrived(0, now)).count();
        assert_eq!((again, s.outstanding[0]), (488, 0));
        // -D: every arrival reposts.
        let p = plan_of(&["bw", "send", "-D", "3"]);
        let mut s = Sink::new(&p);
        assert!((0..2000).all(|_| s.arrived(0, now)));
    }

    #[test]
    fn an_srq_is_one_pool_whatever_qp_the_messages_arrive_on() {
        // --use-srq -q 4 -r 64 -n 100: the SRQ holds each QP's share, 16, 64 in all; the QPs
        // take from it unevenly (here QP 0 gets everything first). Per-QP counts would have
        // run QP 0's below zero; the pool reposts while the receives posted do not cover the
        // 400 messages still to come, and not one more.
        let p = plan_of(&[
            "bw",
            "send",
            "--use-srq",
            "-q",
            "4",
            "-r",
            "64",
            "-n",
            "100",
        ]);
        let mut s = Sink::new(&p);
        assert_eq!((s.outstanding.len(), s.outstanding[0]), (1, 64));
        assert_eq!(s.top_up(0), 0);
        let now = Instant::now();
        let mut reposted = 0;
        for q in [0, 0, 0, 1, 2, 3].iter().cycle().take(400) {
            if s.arrived(*q, now) {
                reposted += 1;
            }
        }
        assert_eq!((s.got(), reposted, s.outstanding[0]), (400, 336, 0));
        assert!(s.is_done());
        s.next_size();
        assert_eq!(s.top_up(0), 64);
        // -r not a multiple of -q: perftest's share, rounded down (10 / 4 = 2 each).
        let p = plan_of(&[
            "bw",
            "send",
            "--use-srq",
            "-q",
            "4",
            "-r",
            "10",
            "-n",
            "100",
        ]);
        assert_eq!(Sink::new(&p).outstanding, vec![8]);
    }

    #[test]
    fn an_end_with_nothing_to_wait_for_never_stalls_and_one_that_waits_says_why() {
        // `bw write -D 11`: the passive end of a loopback run waits for nothing; it was
        // declared stuck ("waiting for the peer's SENDs") when a fixed 10 s had passed.
        let p = plan_of(&["bw", "write", "--loopback", "-D", "11"]);
        let devs = Devices::sim_pair(false).unwrap();
        let cfg = ResourcesCfg {
            buf_len: 2 * p.run.half,
            ..ResourcesCfg::rc()
        };
        let r = Resources::new(&devs.local, &cfg).unwrap();
        let peer = RemoteBuffer {
            addr: 0,
            rkey: 0,
            len: 0,
        };
        let mut e = BwEnd::new(Silent, &p, &r.mr, vec![peer], 0).unwrap();
        e.pace = Pace::SOFTWARE_CONNECTX;
        let long_ago = Instant::now()
            .checked_sub(Duration::from_secs(7200))
            .unwrap();
        e.start(&p, 65536, p.depth, false, false).unwrap();
        e.last_progress = long_ago;
        e.stalled().unwrap();
        // The sending end of the same run: nothing completed for two hours, far past what a
        // window of 128 WRITEs of 64 KiB takes at the device's slowest pace.
        e.start(&p, 65536, p.depth, true, false).unwrap();
        e.step().unwrap();
        e.last_progress = long_ago;
        let msg = e.stalled().unwrap_err().to_string();
        for want in [
            "waiting for send completions",
            "128 RDMA WRITE(s) of 64 KiB were outstanding on 1 QP(s)",
            "8.0 MiB at no less than 1.0 MiB/s",
            "-u 14: the RC transport's 8 tries of 67 ms",
            "The peer stopped answering, or the device is stuck",
        ] {
            assert!(msg.contains(want), "{want:?} not in: {msg}");
        }
        assert!(!msg.contains("debug build"), "{msg}");
    }

    #[test]
    fn the_patience_of_a_size_follows_the_work_asked_for() {
        // `bw write -q 64 -s 1073741824 -n 5`: 64 QPs of 5 WRITEs of 1 GiB in flight; the first
        // completion may come after all of them moved: 320 GiB at 1 MiB/s, not 10 s.
        let p = plan_of(&["bw", "write", "-q", "64", "-s", "1073741824", "-n", "5"]);
        assert_eq!(p.depth, 5);
        let budget = (
            mlx5_tools::patience::retry_budget(p.run.conn, 14, 7),
            "the retries".to_string(),
        );
        let w = window_patience(Pace::SOFTWARE_CONNECTX, &budget, 1 << 30, p.depth, 64);
        assert!(w.limit > Duration::from_secs(320 * 1024), "{w:?}");
        assert!(
            w.why.starts_with("320 operation(s) moving 320.0 GiB"),
            "{}",
            w.why
        );
    }
}
