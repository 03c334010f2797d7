//! `bw`: message rate and bandwidth like perftest's `ib_write_bw`, `ib_send_bw`, `ib_read_bw`
//! and `ib_atomic_bw`, through this library's data path, over one or many QPs, in one
//! direction or both (`-b`).
//!
//! ```text
//! bw write                                server (passive: it only serves), software ConnectX
//! bw write 127.0.0.1                      client, in another terminal
//! bw write --loopback -s 8 -n 100000      both ends in one process
//! bw send -c UD --loopback -s 1024        UD datagrams; the receiver reposts its receives
//! bw send -b --loopback                   both directions at once, the sum reported
//! bw atomic -A CMP_AND_SWAP --loopback    64-bit atomics
//! bw write -d mlx5_0 -q 4 192.0.2.1       client on a ConnectX (--features verbs)
//! ```
//!
//! The sender keeps up to `-t` WRs in flight on every QP, asks for a completion every `-Q`
//! WRs (and on the last), and times from the first post to the last completion; the peak is
//! the best rate over any window of at least `-t` messages (none with `-D`, as perftest). The
//! SEND test's receiver keeps `-r` receives posted per QP (UC/UD: as many as the run has
//! messages, up to 16000, as perftest does) and reposts each one as it completes. With `-b`
//! both ends send, and both print the sum of the two directions (the ends swap their figures
//! at the end, `mlx5_tools::results`). A server and a client started with different flags
//! (test, `-c`, `-q`, `-s`/`-a`, `-n`/`-D`, `-b`) both stop when they connect, naming both
//! values (`mlx5_tools::hello`).
//!
//! Across processes each has its own software ConnectX; they swap UDP addresses on the first
//! control connection, and RoCEv2 frames travel between them over UDP, at most as many in
//! flight as the smaller UDP receive buffer holds (`UdpBudget::frames`: `-t` is lowered for
//! large messages, sizes above that many frames are left out).
#![forbid(unsafe_code)]

use clap::Parser;
use mlx5_connect::{AbortCode, ConnectParams, Connection, ControlEvent, RemoteBuffer};
use mlx5_ctx::Mr;
use mlx5_hw::QpType;
use mlx5_qp::{DoorbellMode, RemoteAddr, Sge};
use mlx5_tools::args::{describe_doorbell, AtomicArg, BwArgs, Length, OutputArg, PathKind, Test};
use mlx5_tools::connecting::{connect_all, Connected, DirectLinks, End, Receives};
use mlx5_tools::devices::{on_devices, Devices};
use mlx5_tools::hello::{RunShape, Sizes, Tool};
use mlx5_tools::inline::InlineRequest;
use mlx5_tools::limits;
use mlx5_tools::path::{DataPath, Direct, Done, Op, Post, GRH};
use mlx5_tools::progress::Progress;
use mlx5_tools::rendezvous::{
    describe_endpoint, sizes_for_udp_link, Rendezvous, UdpBudget, UdpLink,
};
use mlx5_tools::report::{self, Banner};
use mlx5_tools::resources::{Resources, ResourcesCfg};
use mlx5_tools::results;
use mlx5_tools::serve::{exit_on_failure, say, serve_until_closed};
use mlx5_tools::stats::{BwStats, PERFTEST_GBIT, PERFTEST_MB};
use mlx5_tools::{Error, Result};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// How long a run may go without a completion before it is declared stuck.
const STALL: Duration = Duration::from_secs(10);
/// How long a receiver whose sender is done waits for datagrams that may have been dropped
/// (UC, UD: a message that finds no receive is lost, IBTA Vol. 1 §9.7.5.2.4 / §9.8.3.1).
const LOSS_GRACE: Duration = Duration::from_millis(500);
/// Receives perftest posts at most on a UC/UD QP (`UC_MAX_RX`).
const UC_MAX_RX: u64 = 16000;

fn main() -> ExitCode {
    let args = BwArgs::parse();
    mlx5_tools::log::init(args.common.verbose);
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bw: error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// The run's plan, from the arguments, checked before any device is opened.
struct Plan {
    /// `-e`: wait on a completion channel.
    events: bool,
    test: Test,
    conn: QpType,
    atomic: AtomicArg,
    sizes: Vec<u64>,
    length: Length,
    qps: u32,
    depth: u32,
    cq_mod: u64,
    rx_depth: u32,
    bidirectional: bool,
    /// What to ask the device for (READ, atomics: nothing).
    inline: InlineRequest,
    doorbell: Option<DoorbellMode>,
    /// Offset of the receive area of every buffer (sends start at 0).
    half: usize,
    shape: RunShape,
    params: ConnectParams,
    output: Option<OutputArg>,
    gbits: bool,
}

fn plan(a: &BwArgs) -> Result<Plan> {
    let c = &a.common;
    c.check(
        a.test,
        &[OutputArg::Bandwidth, OutputArg::MessageRate],
        "bw",
    )?;
    a.check()?;
    let default_iters = if a.test == Test::Write { 5000 } else { 1000 };
    let sizes = c.sizes(a.test, 65536)?;
    let length = c.length(
        default_iters,
        limits::MAX_ITERS,
        "perftest's limit, MAX_ITER",
    )?;
    let conn = c.connection.qp_type();
    let max = sizes.iter().copied().max().unwrap_or(8) as usize;
    let recv = if conn == QpType::Ud { max + GRH } else { max };
    let half = recv.next_multiple_of(64);
    let ends = if c.loopback { 2 } else { 1 };
    limits::check_memory(
        &format!(
            "the buffers of {ends} end(s), 2 × {} each,",
            limits::human(half as u64)
        ),
        (ends * 2 * half) as u64,
    )?;
    // perftest `force_dependecies`: no deeper queues than the run has messages, and on UC/UD
    // the default receive depth is every message of the run (at most UC_MAX_RX).
    let iters = length.iters();
    let depth = match iters {
        Some(n) => u64::from(a.tx_depth).min(n) as u32,
        None => a.tx_depth,
    };
    let mut rx_depth = c.rx_depth;
    if a.test == Test::Send {
        if matches!(conn, QpType::Uc | QpType::Ud) && rx_depth == 512 {
            rx_depth = iters.unwrap_or(UC_MAX_RX).min(UC_MAX_RX) as u32;
        }
        if let Some(n) = iters {
            rx_depth = u64::from(rx_depth).min(n) as u32;
        }
    }
    let mut shape = RunShape::new(
        Tool::Bw,
        a.test.kind(),
        if c.all {
            Sizes::All
        } else {
            Sizes::One(sizes[0])
        },
        0,
    );
    shape.qps = a.qps;
    shape.conn = conn;
    shape.bidirectional = a.bidirectional;
    match length {
        Length::Iters(n) => shape.iters = n,
        Length::Duration { secs, .. } => {
            shape.iters = secs;
            shape.duration = true;
        }
    }
    Ok(Plan {
        events: a.common.events,
        test: a.test,
        conn,
        atomic: c.atomic_type,
        sizes,
        length,
        qps: a.qps,
        depth,
        // A completion at least every `depth` WRs, or the window never reopens.
        cq_mod: u64::from(a.cq_mod.min(depth.max(1))),
        rx_depth,
        bidirectional: a.bidirectional,
        inline: InlineRequest::new(c.inline, a.test.default_inline(c.connection)),
        doorbell: c.doorbell_mode()?,
        half,
        shape,
        params: ConnectParams {
            port: c.ib_port,
            max_mtu: c.mtu()?,
            timeout: c.qp_timeout,
            ..ConnectParams::default()
        },
        output: c.output,
        gbits: a.report_gbits,
    })
}

impl Plan {
    fn cfg(&self) -> ResourcesCfg {
        ResourcesCfg {
            qp_type: self.conn,
            qps: self.qps,
            sq_depth: self.depth,
            rq_depth: if self.test == Test::Send {
                self.rx_depth
            } else {
                1
            },
            inline: self.inline.bytes,
            buf_len: 2 * self.half,
            srq: None,
            events: self.events,
        }
    }

    fn receives(&self, mr: &Mr) -> Result<Option<Receives>> {
        if self.test != Test::Send {
            return Ok(None);
        }
        Ok(Some(Receives {
            sge: mr.sge(self.half, self.half as u32)?,
            depth: self.rx_depth,
        }))
    }

    fn quiet(&self) -> bool {
        self.output.is_some()
    }

    fn say(&self, line: &str) {
        if !self.quiet() {
            say(line);
        }
    }

    /// The row of `s`, or with `--output` its one number.
    fn row(&self, s: &BwStats) {
        let unit = if self.gbits {
            PERFTEST_GBIT
        } else {
            PERFTEST_MB
        };
        match self.output {
            Some(OutputArg::Bandwidth) => say(&format!("{:.6}", s.avg_bps / unit)),
            Some(OutputArg::MessageRate) => say(&format!("{:.6}", s.msg_rate / 1e6)),
            _ => say(&report::bw_row(s, self.gbits)),
        }
    }

    /// Whether an end of this run sends: the client always, the server with `-b`.
    fn sends(&self, client: bool) -> bool {
        client || self.bidirectional
    }

    /// Whether an end of this run receives SENDs: the server of the send test, and with `-b`
    /// both ends.
    fn receives_sends(&self, client: bool) -> bool {
        self.test == Test::Send && (!client || self.bidirectional)
    }
}

/// The sender's state for one message size.
struct Flow {
    size: u64,
    depth: u64,
    cq_mod: u64,
    /// Messages per QP (`None`: until `stop`).
    iters: Option<u64>,
    posted: Vec<u64>,
    done: Vec<u64>,
    completed: u64,
    start: Instant,
    /// `-D`: stop posting at this time; the figures count what completes in `window`.
    stop: Option<Instant>,
    window: Option<(Instant, Instant)>,
    in_window: u64,
    window_span: Option<(Instant, Instant)>,
    /// The best (messages, time) of any window of at least `depth` messages.
    best: Option<(u64, Duration)>,
    mark: (Instant, u64),
    finished: Option<Instant>,
}

impl Flow {
    fn new(p: &Plan, size: u64, depth: u32) -> Flow {
        let now = Instant::now();
        let n = p.qps as usize;
        let (stop, window) = match p.length {
            Length::Iters(_) => (None, None),
            Length::Duration { secs, margin } => (
                Some(now + Duration::from_secs(secs)),
                Some((
                    now + Duration::from_secs(margin),
                    now + Duration::from_secs(secs - margin),
                )),
            ),
        };
        let depth = u64::from(depth.max(1));
        Flow {
            size,
            depth,
            cq_mod: p.cq_mod.min(depth),
            iters: p.length.iters(),
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

    fn total(&self) -> Option<u64> {
        self.iters.map(|n| n * self.posted.len() as u64)
    }

    fn is_done(&self) -> bool {
        self.finished.is_some()
    }

    /// Count `retired` more completions at `now`.
    fn retire(&mut self, q: usize, wr_id: u64, now: Instant) {
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
    fn check_finished(&mut self, now: Instant) {
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

    fn stats(&self) -> BwStats {
        match (self.window_span, self.stop) {
            (_, None) => BwStats::new(
                self.size,
                self.completed,
                self.finished.unwrap_or_else(Instant::now) - self.start,
                self.best,
            ),
            (Some((a, b)), Some(_)) => {
                BwStats::new(self.size, self.in_window, b - a, None).without_peak()
            }
            (None, Some(_)) => BwStats::new(self.size, 0, Duration::from_secs(1), None),
        }
    }
}

/// The receiver's state (SEND): receives counted and reposted per QP.
struct Sink {
    /// Messages per QP to expect (`None`: until told to stop).
    iters: Option<u64>,
    rx_depth: u64,
    received: Vec<u64>,
    posted: Vec<u64>,
    last_arrival: Instant,
}

impl Sink {
    fn new(p: &Plan) -> Sink {
        let n = p.qps as usize;
        Sink {
            iters: p.length.iters(),
            rx_depth: u64::from(p.rx_depth),
            received: vec![0; n],
            posted: vec![u64::from(p.rx_depth); n],
            last_arrival: Instant::now(),
        }
    }

    fn total(&self) -> Option<u64> {
        self.iters.map(|n| n * self.received.len() as u64)
    }

    fn got(&self) -> u64 {
        self.received.iter().sum()
    }

    fn is_done(&self) -> bool {
        self.total().is_some_and(|t| self.got() >= t)
    }

    /// Prepare for the next size: the receives still posted carry over.
    fn next_size(&mut self) {
        for (r, p) in self.received.iter_mut().zip(self.posted.iter_mut()) {
            *p = p.saturating_sub(*r).max(self.rx_depth.min(*p));
            *r = 0;
        }
    }
}

/// One end of a bandwidth run: its data path, what it sends (`flow`) and receives (`sink`).
struct BwEnd<'a, P> {
    path: P,
    test: Test,
    atomic: AtomicArg,
    sge: Sge,
    recv_sge: Sge,
    payload: Vec<u8>,
    inline: u32,
    peers: Vec<RemoteBuffer>,
    remote_off: u64,
    flow: Option<Flow>,
    sink: Option<Sink>,
    got: [Done; 32],
    /// The figures' time base is the first post; a -D flow is re-timed there.
    yield_idle: bool,
    mr: &'a Mr,
    last_progress: Instant,
}

impl<'a, P: DataPath> BwEnd<'a, P> {
    fn new(path: P, p: &Plan, mr: &'a Mr, peers: Vec<RemoteBuffer>, inline: u32) -> Result<Self> {
        Ok(BwEnd {
            path,
            test: p.test,
            atomic: p.atomic,
            sge: mr.sge(0, 8)?,
            recv_sge: mr.sge(p.half, p.half as u32)?,
            payload: Vec::new(),
            inline,
            peers,
            remote_off: if matches!(p.test, Test::Atomic) {
                p.half as u64
            } else {
                0
            },
            flow: None,
            sink: None,
            got: [Done::default(); 32],
            yield_idle: false,
            mr,
            last_progress: Instant::now(),
        })
    }

    /// Start a size: a flow when this end sends, a sink when it receives SENDs.
    fn start(&mut self, p: &Plan, size: u64, depth: u32, sends: bool, recvs: bool) -> Result<()> {
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
        match (&mut self.sink, recvs) {
            (Some(s), true) => s.next_size(),
            (s, true) => *s = Some(Sink::new(p)),
            (s, false) => *s = None,
        }
        self.last_progress = Instant::now();
        Ok(())
    }

    fn op(test: Test, atomic: AtomicArg, peer: &RemoteBuffer, off: u64, i: u64) -> Op {
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
    fn step(&mut self) -> Result<bool> {
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
                s.received[d.qp] += 1;
                s.last_arrival = now;
                if s.iters.is_none_or(|n| s.posted[d.qp] < n) {
                    self.path.post_recv(d.qp, d.wr_id, self.recv_sge)?;
                    s.posted[d.qp] += 1;
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

    fn flow_done(&self) -> bool {
        self.flow.as_ref().is_none_or(Flow::is_done)
    }

    /// Whether the receiver has everything, or (its own flow done, UC/UD, a `-D` run) has
    /// waited long enough for what was lost.
    fn sink_done(&self, lossy_or_timed: bool) -> bool {
        match &self.sink {
            None => true,
            Some(s) => {
                s.is_done()
                    || (lossy_or_timed && self.flow_done() && s.last_arrival.elapsed() > LOSS_GRACE)
            }
        }
    }

    fn stalled(&self) -> Result<()> {
        if self.last_progress.elapsed() > STALL {
            let what = if self.flow_done() {
                "the peer's SENDs"
            } else {
                "send completions"
            };
            return Err(Error::stalled(what, STALL.as_secs()));
        }
        Ok(())
    }

    fn idle(&self) {
        if self.yield_idle {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

/// Drive `a` (and in loopback `b`) until both are done; `control` is a server's control
/// connection to watch for the client's goodbye (`-D`, lost datagrams).
fn drive<P: DataPath, Q: DataPath>(
    p: &Plan,
    a: &mut BwEnd<'_, P>,
    mut b: Option<&mut BwEnd<'_, Q>>,
    mut control: Option<&mut Connection>,
    progress: &mut Progress,
) -> Result<bool> {
    let lossy = matches!(p.conn, QpType::Uc | QpType::Ud) || p.length.iters().is_none();
    let mut spins = 0u32;
    loop {
        let mut busy = a.step()?;
        if let Some(b) = b.as_deref_mut() {
            busy |= b.step()?;
        }
        let b_done = b
            .as_deref()
            .is_none_or(|b| b.flow_done() && b.sink_done(lossy));
        if a.flow_done() && a.sink_done(lossy && control.is_none()) && b_done {
            return Ok(true);
        }
        spins = spins.wrapping_add(1);
        if let Some(f) = &a.flow {
            progress.update(f.completed & !1023);
        }
        if !busy {
            if spins.is_multiple_of(1024) {
                if let Some(c) = control.as_deref_mut() {
                    match c.poll_control()? {
                        Some(ControlEvent::PeerAborted(AbortCode::Shutdown)) => return Ok(false),
                        Some(ControlEvent::PeerAborted(code)) => {
                            return Err(Error::Peer {
                                peer: "the client".into(),
                                why: format!("it aborted: {}", code.describe()),
                            })
                        }
                        _ => {}
                    }
                }
                // A receiver waits for its peer's traffic as long as the peer is there.
                if control.is_none() || !a.flow_done() {
                    a.stalled()?;
                }
                if let Some(b) = b.as_deref() {
                    b.stalled()?;
                }
            }
            a.idle();
        }
    }
}

/// The send queue depth for `size`-byte messages over the UDP link: `-t`, lowered so that all
/// QPs together keep at most the frames the link holds ([`UdpBudget::frames`]) in flight.
fn udp_depth(p: &Plan, size: u64, budget: &UdpBudget) -> u32 {
    let frames = size.div_ceil(u64::from(budget.mtu.max(1))).max(1) * u64::from(p.qps.max(1));
    let fit = (budget.frames() / frames).max(1);
    p.depth.min(fit.min(u64::from(u32::MAX)) as u32)
}

#[allow(clippy::too_many_arguments)]
fn banner(
    a: &BwArgs,
    p: &Plan,
    devs: &Devices,
    inline: u32,
    doorbell: &str,
    conns: &[Connection],
    udp: Option<&UdpLink>,
) -> String {
    let mut extra = vec![("Doorbell".into(), doorbell.to_string())];
    if p.events {
        extra.push((
            "Completions".into(),
            "events (-e): sleeps on the CQ's completion channel".into(),
        ));
    }
    if p.test == Test::Send {
        extra.push(("RX depth".into(), p.rx_depth.to_string()));
    }
    if a.test != Test::Send || a.common.is_client() || p.bidirectional {
        extra.push(("CQ Moderation".into(), p.cq_mod.to_string()));
    }
    if let Length::Duration { secs, margin } = p.length {
        extra.push((
            "Duration".into(),
            format!(
                "{secs} s, figures between {margin} s and {} s",
                secs - margin
            ),
        ));
    }
    if let Some(u) = udp {
        extra.push(("UDP link".into(), u.to_string()));
    }
    for (i, c) in conns.iter().enumerate().take(4) {
        extra.push((
            format!("QP {i}"),
            format!(
                "local {}, remote {}",
                describe_endpoint(c.local()),
                describe_endpoint(c.peer())
            ),
        ));
    }
    let title = p.test.title(true, p.atomic, p.bidirectional);
    Banner {
        title: &title,
        device: &devs.name,
        path: a.common.path.describe(),
        connection: p.conn.name(),
        qps: p.qps,
        inline,
        tx_depth: p.depth,
        mtu: conns.first().map_or(0, |c| c.path_mtu().bytes()),
        extra,
    }
    .render()
}

fn run(a: &BwArgs) -> Result<()> {
    let p = plan(a)?;
    let c = &a.common;
    if c.cpu_freq {
        eprintln!(
            "bw: note: -F changes nothing here: these tools time with the monotonic clock, \
             not the CPU's cycle counter, and give no CPU frequency warning to silence"
        );
    }
    on_devices(
        "bw",
        &c.device,
        c.tap(),
        c.loopback,
        c.server.is_some(),
        |devs| run_on(a, &p, devs),
    )
}

fn run_on(a: &BwArgs, p: &Plan, devs: &Devices) -> Result<()> {
    let c = &a.common;
    devs.check_port(c.ib_port)?;
    devs.check_path(c.path)?;
    let max_wr = devs.local.query_device()?.max_qp_wr;
    for (flag, n) in [("-t", p.depth), ("-r", p.rx_depth)] {
        if n > max_wr {
            return Err(Error::Usage(format!(
                "{flag} {n}: {} holds at most {max_wr} WRs per queue",
                devs.name
            )));
        }
    }
    let params = ConnectParams {
        gid_index: devs.gid_index(c.ib_port, c.gid_index)?,
        ..p.params.clone()
    };
    let rv = if c.loopback {
        None
    } else {
        let rv = Rendezvous::new(c.server.as_deref(), c.port)?;
        if let Rendezvous::Server(_) = &rv {
            let line = format!(
                " Waiting for client to connect on TCP port {} ...",
                rv.port().unwrap_or(c.port)
            );
            if p.quiet() {
                eprintln!("{line}");
            } else {
                say(&line);
            }
        }
        Some(rv)
    };
    match c.path {
        PathKind::Direct => run_direct(a, p, devs, &params, rv.as_ref()),
        PathKind::Verbs => run_verbs(a, p, devs, &params, rv.as_ref()),
    }
}

/// One end on this library's data path, with the doorbell mode `--doorbell` asks for.
fn direct_end(ctx: &mlx5_ctx::Context, p: &Plan) -> Result<(Resources, u32)> {
    let (mut r, inline) = Resources::with_inline(ctx, &p.cfg(), p.inline)?;
    if let Some(mode) = p.doorbell {
        r.set_doorbell_mode(mode)?;
    }
    Ok((r, inline))
}

fn buffers(conns: &[Connection]) -> Result<Vec<RemoteBuffer>> {
    conns
        .iter()
        .map(|c| {
            c.remote_buffer().ok_or_else(|| Error::Peer {
                peer: format!("QP {:#x}", c.peer().qpn),
                why: "the peer announced no buffer".into(),
            })
        })
        .collect()
}

/// UD: where each QP's SENDs go.
fn aim<P: DataPath>(path: &mut P, conns: &[Connection]) {
    for (q, c) in conns.iter().enumerate() {
        if let Some(peer) = c.ud_peer() {
            path.set_ud_peer(q, peer);
        }
    }
}

/// This library's data path.
fn run_direct(
    a: &BwArgs,
    p: &Plan,
    devs: &Devices,
    params: &ConnectParams,
    rv: Option<&Rendezvous>,
) -> Result<()> {
    let (mut me, inline_a) = direct_end(&devs.local, p)?;
    let doorbell = match (me.doorbell_mode(), me.other_doorbell_modes()) {
        (Some(m), 0) => describe_doorbell(m, p.doorbell.is_some()),
        (Some(m), k) => format!(
            "{}; {k} of {} QPs on shared BlueFlame registers: 8-byte doorbell",
            describe_doorbell(m, p.doorbell.is_some()),
            me.qps.len()
        ),
        (None, _) => String::new(),
    };
    let ctx_a = me.context().clone();
    let end_a = End {
        ctx: &ctx_a,
        qps: (0..me.qps.len()).map(|q| me.qp_ref(q)).collect(),
        params: params.clone().with_buffer(me.remote_buffer()),
    };
    let recv_a = p.receives(&me.mr)?;
    let Resources { qps, cq, mr, .. } = &mut me;
    let mut links_a = DirectLinks {
        qps,
        cq,
        recv: recv_a,
    };
    match rv {
        None => {
            let (mut peer, inline_b) = direct_end(devs.peer_or_local(), p)?;
            let ctx_b = peer.context().clone();
            let end_b = End {
                ctx: &ctx_b,
                qps: (0..peer.qps.len()).map(|q| peer.qp_ref(q)).collect(),
                params: params.clone().with_buffer(peer.remote_buffer()),
            };
            let recv_b = p.receives(&peer.mr)?;
            let Resources {
                qps: qps_b,
                cq: cq_b,
                mr: mr_b,
                ..
            } = &mut peer;
            let mut links_b = DirectLinks {
                qps: qps_b,
                cq: cq_b,
                recv: recv_b,
            };
            let conn = connect_all(
                devs,
                &end_a,
                &mut links_a,
                Some((&end_b, &mut links_b)),
                None,
                None,
            )?;
            let inline = inline_a.min(inline_b);
            let mut da = Direct::new(links_a.qps, links_a.cq);
            let mut db = Direct::new(links_b.qps, links_b.cq);
            aim(&mut da, &conn.conns);
            aim(&mut db, &conn.peer);
            let ea = BwEnd::new(da, p, mr, buffers(&conn.conns)?, inline)?;
            let eb = BwEnd::new(db, p, mr_b, buffers(&conn.peer)?, inline)?;
            exit_on_failure(
                "bw",
                devs,
                measure_loopback(a, p, devs, ea, eb, conn, (inline, &doorbell)),
            )
        }
        Some(rv) => {
            let conn = connect_all(devs, &end_a, &mut links_a, None, Some(rv), Some(&p.shape))?;
            let mut da = Direct::new(links_a.qps, links_a.cq);
            aim(&mut da, &conn.conns);
            let e = BwEnd::new(da, p, mr, buffers(&conn.conns)?, inline_a)?;
            exit_on_failure(
                "bw",
                devs,
                measure_end(a, p, devs, e, conn, rv.is_client(), (inline_a, &doorbell)),
            )
        }
    }
}

/// The sizes the run can do: UD messages of at most one MTU; over a UDP link, what it holds.
fn usable_sizes(
    p: &Plan,
    conns: &[Connection],
    udp: Option<&UdpLink>,
) -> Result<(Vec<u64>, Option<UdpBudget>)> {
    let mtu = conns.first().map_or(1024, |c| c.path_mtu().bytes());
    if p.conn == QpType::Ud {
        if let Some(&s) = p.sizes.iter().find(|&&s| s > u64::from(mtu)) {
            return Err(Error::Usage(format!(
                "-s {s}: a UD message is one packet, at most the path MTU ({mtu} bytes): use -s \
                 {mtu} or less (or -m)"
            )));
        }
    }
    let budget = udp.map(|u| u.budget(mtu));
    let (sizes, note) = sizes_for_udp_link(&p.sizes, budget.as_ref())?;
    if let Some(b) = &budget {
        p.say(&format!(
            " note: the UDP link holds {b}: messages go fewer at a time than -t {} when \
             -t of them would not fit",
            p.depth
        ));
    }
    if let Some(n) = note {
        p.say(&n);
    }
    Ok((sizes, budget))
}

/// A note when a UC/UD receiver got fewer messages than were sent (they are dropped when no
/// receive is posted; perftest's receiver would wait for them until its alarm).
fn loss_note<P: DataPath>(p: &Plan, e: &BwEnd<'_, P>) {
    if let Some(s) = &e.sink {
        if let Some(t) = s.total() {
            if s.got() < t {
                p.say(&format!(
                    " note: {} of {t} messages arrived: {} drops a message that finds no \
                     receive posted",
                    s.got(),
                    p.conn.name()
                ));
            }
        }
    }
}

/// Both ends here: A sends (and with -b, B too); B receives the SENDs.
fn measure_loopback<P: DataPath, Q: DataPath>(
    a: &BwArgs,
    p: &Plan,
    devs: &Devices,
    mut ea: BwEnd<'_, P>,
    mut eb: BwEnd<'_, Q>,
    conn: Connected,
    (inline, doorbell): (u32, &str),
) -> Result<()> {
    (ea.yield_idle, eb.yield_idle) = (devs.software, devs.software);
    p.say(&banner(a, p, devs, inline, doorbell, &conn.conns, None));
    let (sizes, _) = usable_sizes(p, &conn.conns, None)?;
    p.say(report::bw_header(p.gbits));
    for &size in &sizes {
        ea.start(p, size, p.depth, true, p.receives_sends(true))?;
        eb.start(p, size, p.depth, p.bidirectional, p.receives_sends(false))?;
        let total = ea.flow.as_ref().and_then(Flow::total).unwrap_or(0);
        let mut progress = Progress::new(format!("{size} bytes"), total);
        drive(p, &mut ea, Some(&mut eb), None, &mut progress)?;
        drop(progress);
        loss_note(p, &eb);
        loss_note(p, &ea);
        let mut s = ea.flow.as_ref().map(Flow::stats);
        if let (Some(sa), Some(fb)) = (s, eb.flow.as_ref()) {
            s = Some(sa.plus(&fb.stats()));
        }
        if let Some(s) = s {
            p.row(&s);
        }
    }
    p.say(report::RESULT_LINE);
    Ok(())
}

/// This end of a run across processes: the client sends and reports; the server serves (a
/// write/read/atomic server only waits for the goodbye), receives the SENDs, and with -b sends
/// too and reports the sum as well.
fn measure_end<P: DataPath>(
    a: &BwArgs,
    p: &Plan,
    devs: &Devices,
    mut e: BwEnd<'_, P>,
    conn: Connected,
    client: bool,
    (inline, doorbell): (u32, &str),
) -> Result<()> {
    e.yield_idle = devs.software;
    let Connected {
        mut conns,
        udp,
        mut streams,
        ..
    } = conn;
    p.say(&banner(a, p, devs, inline, doorbell, &conns, udp.as_ref()));
    let (sizes, budget) = usable_sizes(p, &conns, udp.as_ref())?;
    let sends = p.sends(client);
    let recvs = p.receives_sends(client);
    if !sends && !recvs {
        // The server of a one-sided test only serves; the client closes when done.
        serve_until_closed(&mut conns)?;
        p.say(report::RESULT_LINE);
        return Ok(());
    }
    if client || p.bidirectional {
        p.say(report::bw_header(p.gbits));
    }
    let mut goodbye = false;
    for &size in &sizes {
        let depth = match &budget {
            Some(b) => udp_depth(p, size, b),
            None => p.depth,
        };
        e.start(p, size, depth, sends, recvs)?;
        let mut progress = Progress::new(format!("{size} bytes"), 0);
        // A receiving server watches for the client's goodbye (which ends a -D run, or a run
        // whose lost datagrams will never come).
        let watch = if client { None } else { conns.first_mut() };
        let finished = drive::<P, P>(p, &mut e, None, watch, &mut progress)?;
        drop(progress);
        loss_note(p, &e);
        if !finished {
            goodbye = true;
        }
        if let Some(f) = &e.flow {
            let mine = f.stats();
            let s = if p.bidirectional {
                let stream = streams.first_mut().ok_or_else(|| {
                    Error::Usage("no control connection to swap the results on".into())
                })?;
                let theirs = results::swap(stream, &mine, p.params.io_timeout)?;
                mine.plus(&theirs)
            } else {
                mine
            };
            p.row(&s);
        }
        if goodbye {
            break;
        }
    }
    p.say(report::RESULT_LINE);
    if client {
        for c in conns {
            c.close()?;
        }
    } else if !goodbye {
        serve_until_closed(&mut conns)?;
    }
    Ok(())
}

#[cfg(not(feature = "verbs"))]
fn run_verbs(
    _a: &BwArgs,
    _p: &Plan,
    _devs: &Devices,
    _params: &ConnectParams,
    _rv: Option<&Rendezvous>,
) -> Result<()> {
    Err(Error::Usage(
        "--path verbs needs the `verbs` feature (rebuild with --features verbs)".into(),
    ))
}

/// `--path verbs`: QPs created through libibverbs on any verbs device (Soft-RoCE too), posted
/// with `ibv_post_send` and polled with `ibv_poll_cq`.
#[cfg(feature = "verbs")]
fn run_verbs(
    a: &BwArgs,
    p: &Plan,
    devs: &Devices,
    params: &ConnectParams,
    rv: Option<&Rendezvous>,
) -> Result<()> {
    use mlx5_tools::connecting::{Links, VerbsLinks};
    use mlx5_tools::path::Verbs;
    use mlx5_tools::resources::VerbsResources;
    let dev = devs
        .verbs
        .clone()
        .ok_or_else(|| Error::Usage("--path verbs needs a verbs device".into()))?;
    let doorbell = "libibverbs' own (ibv_post_send)";
    let (me, inline_a) = VerbsResources::with_inline(&devs.local, dev.clone(), &p.cfg(), p.inline)?;
    let end_a = End {
        ctx: me.context(),
        qps: (0..me.qps.len()).map(|q| me.qp_ref(q)).collect(),
        params: params.clone().with_buffer(me.remote_buffer()),
    };
    let mut va = Verbs::claim(&me)?;
    let recv_a = p.receives(&me.mr)?;
    match rv {
        None => {
            // Loopback: the other end on the same device (rxe and ConnectX deliver packets to
            // their own GID internally).
            let (peer, inline_b) =
                VerbsResources::with_inline(&devs.local, dev, &p.cfg(), p.inline)?;
            let end_b = End {
                ctx: peer.context(),
                qps: (0..peer.qps.len()).map(|q| peer.qp_ref(q)).collect(),
                params: params.clone().with_buffer(peer.remote_buffer()),
            };
            let mut vb = Verbs::claim(&peer)?;
            let recv_b = p.receives(&peer.mr)?;
            let conn = {
                let mut la = VerbsLinks {
                    verbs: &mut va,
                    recv: recv_a,
                    failed: None,
                };
                let mut lb = VerbsLinks {
                    verbs: &mut vb,
                    recv: recv_b,
                    failed: None,
                };
                connect_all(
                    devs,
                    &end_a,
                    &mut la,
                    Some((&end_b, &mut lb as &mut dyn Links)),
                    None,
                    None,
                )?
            };
            aim(&mut va, &conn.conns);
            aim(&mut vb, &conn.peer);
            let inline = inline_a.min(inline_b);
            let ea = BwEnd::new(va, p, &me.mr, buffers(&conn.conns)?, inline)?;
            let eb = BwEnd::new(vb, p, &peer.mr, buffers(&conn.peer)?, inline)?;
            exit_on_failure(
                "bw",
                devs,
                measure_loopback(a, p, devs, ea, eb, conn, (inline, doorbell)),
            )
        }
        Some(rv) => {
            let conn = {
                let mut la = VerbsLinks {
                    verbs: &mut va,
                    recv: recv_a,
                    failed: None,
                };
                connect_all(devs, &end_a, &mut la, None, Some(rv), Some(&p.shape))?
            };
            aim(&mut va, &conn.conns);
            let e = BwEnd::new(va, p, &me.mr, buffers(&conn.conns)?, inline_a)?;
            exit_on_failure(
                "bw",
                devs,
                measure_end(a, p, devs, e, conn, rv.is_client(), (inline_a, doorbell)),
            )
        }
    }
}
