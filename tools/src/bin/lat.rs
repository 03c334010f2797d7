//! `lat`: ping-pong latency like perftest's `ib_write_lat`, `ib_send_lat`, `ib_read_lat` and
//! `ib_atomic_lat`, through this library's data path.
//!
//! ```text
//! lat write                             server, on the software ConnectX (-d sim)
//! lat write 127.0.0.1                   client, in another terminal
//! lat write --loopback -n 1000          both ends in one process
//! lat send -c UD --loopback -s 512      UD datagrams (one MTU at most)
//! lat atomic -A CMP_AND_SWAP --loopback 64-bit atomics
//! lat write --loopback -D 5             for 5 seconds instead of -n iterations
//! lat send -d mlx5_0                    server on a ConnectX (--features verbs)
//! lat send -d mlx5_0 --path verbs ...   the same through libibverbs, for comparison
//! ```
//!
//! WRITE: each side writes the message into the other's buffer and waits for its last byte to
//! change (perftest's method); SEND: each side waits for the receive completion; the figure is
//! half the round trip. READ and atomics: the client posts one and waits for its completion;
//! the figure is the whole operation. With `-n` every sample is kept, as perftest keeps them
//! (the run's `-n` is capped by memory: `mlx5_tools::limits`); with `-D` a bounded histogram
//! is kept instead and the report has perftest's duration columns (`t_avg`, `tps average`).
//!
//! `--timestamps` creates the measuring end's CQ with completion timestamps and prints, under
//! each row, the same latency measured with the NIC's clock (`mlx5_tools::timestamps`).
//!
//! A server and a client started with different flags (test, `-c`, `-s`/`-a`, `-n`/`-D`) both
//! stop when they connect, naming both values (`mlx5_tools::hello`). Across processes each has
//! its own software ConnectX; they swap UDP addresses on the control connection, and RoCEv2
//! frames travel between them over UDP. `-p 0` lets the server pick a free TCP port.
#![forbid(unsafe_code)]

use clap::Parser;
use hdrhistogram::Histogram;
use mlx5_connect::{AbortCode, ConnectParams, Connection, ControlEvent, RemoteBuffer};
use mlx5_ctx::Mr;
use mlx5_hw::QpType;
use mlx5_qp::{DoorbellMode, RemoteAddr, Sge};
use mlx5_tools::args::{describe_doorbell, AtomicArg, LatArgs, Length, OutputArg, PathKind, Test};
use mlx5_tools::connecting::{connect_all, Connected, DirectLinks, End, Receives};
use mlx5_tools::devices::{on_devices, Devices};
use mlx5_tools::hello::{RunShape, Sizes, Tool};
use mlx5_tools::hlog;
use mlx5_tools::inline::InlineRequest;
use mlx5_tools::limits;
use mlx5_tools::path::{DataPath, Direct, Done, Op, Post, GRH};
use mlx5_tools::progress::Progress;
use mlx5_tools::rendezvous::{describe_endpoint, sizes_for_udp_link, Rendezvous, UdpLink};
use mlx5_tools::report::{self, Banner};
use mlx5_tools::resources::{Resources, ResourcesCfg};
use mlx5_tools::serve::{exit_on_failure, say, serve_until_closed};
use mlx5_tools::stats::{self, DurationStats, LatencyStats};
use mlx5_tools::timestamps::{self, Marker, NicRecorder};
use mlx5_tools::{svg, Error, Result};
use std::fs::File;
use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime};

/// How long any one wait may take before the run is declared stuck.
const STALL: Duration = Duration::from_secs(10);

fn main() -> ExitCode {
    let args = LatArgs::parse();
    mlx5_tools::log::init(args.common.verbose);
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lat: error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// Signaled sends a pinger leaves outstanding before it drains: well under the SQ depth
/// (128 WRs) and the CQ the ends are created with.
const MAX_OUTSTANDING_SENDS: u64 = 64;

/// The run's plan, from the arguments, checked before any device is opened.
struct Plan {
    /// `-e`: wait on a completion channel.
    events: bool,
    test: Test,
    conn: QpType,
    atomic: AtomicArg,
    sizes: Vec<u64>,
    length: Length,
    /// What to ask the device for (READ, atomics: nothing).
    inline: InlineRequest,
    /// `--doorbell` (direct path only).
    doorbell: Option<DoorbellMode>,
    /// Offset of the receive half of both buffers (the send half starts at 0).
    half: usize,
    /// Receives kept posted (SEND).
    rx_depth: u32,
    /// What the peer process must have been started for.
    shape: RunShape,
    /// Connection parameters every QP starts from.
    params: ConnectParams,
    /// `--output`: only the number.
    quiet: bool,
    /// `-H` / `-U`.
    listing: Listing,
    /// `--histogram`, `--hlog`, opened before the run.
    svg: Option<(File, String)>,
    hlog: Option<(File, String)>,
    /// `--timestamps`: the measuring end's CQ has completion timestamps.
    timestamps: bool,
}

/// What `-H` / `-U` print.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Listing {
    None,
    Sorted,
    Unsorted,
}

fn plan(args: &LatArgs) -> Result<Plan> {
    let c = &args.common;
    c.check(args.test, &[OutputArg::Latency], "lat")?;
    let sizes = c.sizes(args.test, 2)?;
    let (max_iters, why) = limits::max_lat_iters();
    let length = c.length(1000, max_iters, &why)?;
    let max = sizes.iter().copied().max().unwrap_or(2) as usize;
    let conn = c.connection.qp_type();
    // A UD receive starts with the 40-byte GRH.
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
    let mut shape = RunShape::new(
        Tool::Lat,
        args.test.kind(),
        if c.all {
            Sizes::All
        } else {
            Sizes::One(sizes[0])
        },
        0,
    );
    shape.conn = conn;
    match length {
        Length::Iters(n) => shape.iters = n,
        Length::Duration { secs, .. } => {
            shape.iters = secs;
            shape.duration = true;
        }
    }
    let open = |flag: &str, p: &Option<std::path::PathBuf>| -> Result<Option<(File, String)>> {
        p.as_ref()
            .map(|p| Ok((limits::create_output(flag, p)?, p.display().to_string())))
            .transpose()
    };
    if args.timestamps {
        // The NIC's samples are kept like the CPU's, one per iteration of -n; -e polls with
        // the blocking call, which reads no timestamps; --output prints one figure only.
        let clash = if matches!(length, Length::Duration { .. }) {
            Some("-D (it needs -n: every timestamp is kept)")
        } else if c.events {
            Some("-e (the blocking poll reads no timestamps)")
        } else if c.output.is_some() {
            Some("--output (it prints one figure only)")
        } else {
            None
        };
        if let Some(what) = clash {
            return Err(Error::Usage(format!(
                "--timestamps cannot be used with {what}"
            )));
        }
    }
    let svg = open("--histogram", &args.histogram)?;
    let hlog = open("--hlog", &args.hlog)?;
    Ok(Plan {
        events: args.common.events,
        test: args.test,
        conn,
        atomic: c.atomic_type,
        sizes,
        length,
        inline: InlineRequest::new(c.inline, args.test.default_inline(c.connection)),
        doorbell: c.doorbell_mode()?,
        half,
        rx_depth: c.rx_depth,
        shape,
        params: ConnectParams {
            port: c.ib_port,
            max_mtu: c.mtu()?,
            timeout: c.qp_timeout,
            ..ConnectParams::default()
        },
        quiet: c.output.is_some(),
        listing: if args.report_unsorted {
            Listing::Unsorted
        } else if args.report_histogram {
            Listing::Sorted
        } else {
            Listing::None
        },
        svg,
        hlog,
        timestamps: args.timestamps,
    })
}

impl Plan {
    fn cfg(&self) -> ResourcesCfg {
        ResourcesCfg {
            qp_type: self.conn,
            qps: 1,
            sq_depth: 128,
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

    /// The receives of the SEND test, in the receive half of `mr`.
    fn receives(&self, mr: &Mr) -> Result<Option<Receives>> {
        if self.test != Test::Send {
            return Ok(None);
        }
        Ok(Some(Receives {
            sge: mr.sge(self.half, self.half as u32)?,
            depth: self.rx_depth,
        }))
    }

    /// How many halves of a round trip one sample is: 2 for a ping-pong, 1 for READ and
    /// atomics (perftest's `rtt_factor`).
    fn halves(&self) -> u32 {
        match self.test {
            Test::Write | Test::Send => 2,
            Test::Read | Test::Atomic => 1,
        }
    }

    /// Which completion ends an iteration on the measuring end (`--timestamps`).
    fn marker(&self) -> Marker {
        match self.test {
            Test::Send => Marker::Receive,
            Test::Write | Test::Read | Test::Atomic => Marker::Send,
        }
    }

    /// The NIC's clock and recorder of the measuring end (`--timestamps`), `None` without it.
    fn nic(&self, clock: Option<mlx5_hw::ClockInfo>) -> Result<Option<Nic>> {
        match clock {
            Some(clock) if self.timestamps => Ok(Some(Nic {
                clock,
                rec: NicRecorder::new(self.marker(), self.length.iters().unwrap_or(0))?,
            })),
            _ => Ok(None),
        }
    }

    /// Say a line of the report, unless `--output` asks for the number only.
    fn say(&self, line: &str) {
        if !self.quiet {
            say(line);
        }
    }
}

/// `--timestamps` on the measuring end: the device clock and the markers' stamps.
struct Nic {
    clock: mlx5_hw::ClockInfo,
    rec: NicRecorder,
}

impl Nic {
    /// The NIC's line for the size just measured (its stamps are taken).
    fn line(&mut self, size: u64, halves: u32) -> Result<String> {
        let stamps = self.rec.take();
        let ns = timestamps::samples(&self.clock, &stamps, halves)?;
        Ok(timestamps::nic_line(&self.clock, size, ns))
    }
}

/// One end's data path during a ping-pong.
struct Pinger<'a, P> {
    path: P,
    mr: &'a Mr,
    remote: RemoteBuffer,
    half: usize,
    inline: u32,
    payload: Vec<u8>,
    next_wr: u64,
    sends_posted: u64,
    sends_done: u64,
    recvs: u64,
    /// The receive of the last message (its byte count is checked).
    last_recv_len: u32,
    /// Atomics completed (the next result to expect).
    atomics: u64,
    done: [Done; 16],
    /// Give the core away while waiting instead of spinning: on a software device, whose work
    /// needs a core (the software ConnectX's thread; Soft-RoCE's kernel tasks).
    yield_idle: bool,
    /// A server watches the control connection while it answers: the client's goodbye ends
    /// a `-D` run.
    watch: Option<Connection>,
    /// `--timestamps` on the measuring end: every completion drained is noted.
    nic: Option<Nic>,
}

/// What a wait ended with.
#[derive(PartialEq, Eq)]
enum Waited {
    /// What was waited for happened.
    Done,
    /// The client said goodbye (a `-D` server).
    Stopped,
}

impl<'a, P: DataPath> Pinger<'a, P> {
    fn new(path: P, mr: &'a Mr, remote: RemoteBuffer, inline: u32, p: &Plan) -> Self {
        Pinger {
            path,
            mr,
            remote,
            half: p.half,
            inline,
            payload: vec![0; inline as usize + 1],
            next_wr: 0,
            sends_posted: 0,
            sends_done: 0,
            recvs: 0,
            last_recv_len: 0,
            atomics: 0,
            done: [Done::default(); 16],
            yield_idle: false,
            watch: None,
            nic: None,
        }
    }

    fn remote(&self, off: usize) -> RemoteAddr {
        RemoteAddr::new(self.remote.addr + off as u64, self.remote.rkey)
    }

    fn sge(&self, off: usize, len: usize) -> Result<Sge> {
        Ok(self.mr.sge(off, len as u32)?)
    }

    /// Post one message of `size` bytes ending in `stamp`: an RDMA WRITE into the peer's
    /// receive half, or a SEND.
    fn post_msg(&mut self, test: Test, size: usize, stamp: u8) -> Result<()> {
        // Every send is signaled, and the WRITE wait drains only every 64 spins: when the
        // peer answers sooner, nothing drains, and the completions would overrun the CQ.
        // Retire before posting past the bound.
        if self.sends_posted - self.sends_done >= MAX_OUTSTANDING_SENDS {
            self.wait("send completions", 1, |p| {
                p.sends_posted - p.sends_done < MAX_OUTSTANDING_SENDS
            })?;
        }
        let wr_id = self.next_wr;
        self.next_wr += 1;
        let op = match test {
            Test::Write => Op::Write(self.remote(self.half)),
            _ => Op::Send,
        };
        let sge = self.sge(0, size)?;
        if size as u32 <= self.inline {
            self.payload[size - 1] = stamp;
            let post = Post {
                wr_id,
                op,
                sge,
                inline: Some(&self.payload[..size]),
                signaled: true,
            };
            self.path.post(0, &post)?;
        } else {
            self.mr.write_u8(size - 1, stamp)?;
            let post = Post {
                wr_id,
                op,
                sge,
                inline: None,
                signaled: true,
            };
            self.path.post(0, &post)?;
        }
        self.sends_posted += 1;
        Ok(())
    }

    /// Poll what is ready: count send completions and receives (reposting each receive);
    /// an error completion ends the run.
    fn drain(&mut self) -> Result<()> {
        let n = self.path.poll(&mut self.done)?;
        for i in 0..n {
            let d = self.done[i];
            if let Some(nic) = self.nic.as_mut() {
                nic.rec.note(&d);
            }
            if d.recv {
                self.recvs += 1;
                self.last_recv_len = d.byte_len;
                let sge = self.sge(self.half, self.half)?;
                self.path.post_recv(0, d.wr_id, sge)?;
            } else {
                self.sends_done += 1;
            }
        }
        Ok(())
    }

    /// Spin until `done`, draining the CQ every `every` spins (1 when `done` waits for a
    /// completion; more when it watches memory and the drain only retires sends).
    fn wait(
        &mut self,
        what: &'static str,
        every: u32,
        mut done: impl FnMut(&Self) -> bool,
    ) -> Result<Waited> {
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            if done(self) {
                return Ok(Waited::Done);
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(every) {
                self.drain()?;
            }
            if spins.is_multiple_of(4096) {
                if let Some(conn) = self.watch.as_mut() {
                    match conn.poll_control()? {
                        Some(ControlEvent::PeerAborted(AbortCode::Shutdown)) => {
                            return Ok(Waited::Stopped)
                        }
                        Some(ControlEvent::PeerAborted(code)) => {
                            return Err(Error::Peer {
                                peer: "the client".into(),
                                why: format!("it aborted: {}", code.describe()),
                            })
                        }
                        Some(ControlEvent::RebuildRequested { .. }) | None => {}
                    }
                }
                if start.elapsed() > STALL {
                    return Err(Error::stalled(what, STALL.as_secs()));
                }
            }
            if self.yield_idle {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }

    /// Wait for the peer's message `stamp` of `size` bytes.
    fn wait_msg(&mut self, test: Test, size: usize, stamp: u8) -> Result<Waited> {
        match test {
            Test::Write => {
                let off = self.half + size - 1;
                self.wait("the peer's RDMA WRITE", 64, |p| {
                    p.mr.read_u8(off).is_ok_and(|b| b == stamp)
                })
            }
            _ => {
                let want = self.recvs + 1;
                let w = self.wait("the peer's SEND", 1, |p| p.recvs >= want)?;
                if w == Waited::Done && self.last_recv_len as usize != size {
                    return Err(Error::Check(format!(
                        "a receive of {} bytes, the peer sent {size}",
                        self.last_recv_len
                    )));
                }
                Ok(w)
            }
        }
    }

    /// One RDMA READ of `size` bytes from the peer's send half, or one atomic on the 8 bytes
    /// at the start of its receive half, waited for.
    fn one_op(&mut self, test: Test, atomic: AtomicArg, size: usize) -> Result<()> {
        let wr_id = self.next_wr;
        self.next_wr += 1;
        let k = self.atomics;
        let (op, sge) = match test {
            Test::Atomic => {
                let remote = self.remote(self.half);
                let op = match atomic {
                    // k-th operation: the target holds k; swap it for k + 1.
                    AtomicArg::CmpAndSwap => Op::CompSwap {
                        remote,
                        compare: k,
                        swap: k + 1,
                    },
                    AtomicArg::FetchAndAdd => Op::FetchAdd { remote, add: 1 },
                };
                (op, self.sge(0, 8)?)
            }
            _ => (Op::Read(self.remote(0)), self.sge(self.half, size)?),
        };
        let post = Post {
            wr_id,
            op,
            sge,
            inline: None,
            signaled: true,
        };
        self.path.post(0, &post)?;
        self.sends_posted += 1;
        let want = self.sends_posted;
        self.wait("the operation's completion", 1, |p| p.sends_done >= want)?;
        if test == Test::Atomic {
            // The original value in host order: Soft-RoCE runs atomics on host-order memory
            // (`rxe_resp.c`), as a ConnectX does in the host-endianness mode `mlx5_core` selects
            // whenever the device offers it (`handle_hca_cap_atomic`), and as the software
            // ConnectX does by default (`docs/software-connectx.md`).
            let b: [u8; 8] = self.mr.read(0, 8)?.try_into().unwrap_or_default();
            let got = u64::from_ne_bytes(b);
            if got != k {
                return Err(Error::Check(format!(
                    "atomic {} #{k} returned {got}, the target should have held {k}",
                    atomic.name()
                )));
            }
            self.atomics += 1;
        }
        Ok(())
    }

    /// Wait for every send to complete (between sizes, outside the timed loops).
    fn settle(&mut self) -> Result<()> {
        let want = self.sends_posted;
        self.wait("send completions", 1, |p| p.sends_done >= want)?;
        Ok(())
    }
}

/// Stamps cycle through 1..=255 so that consecutive messages always differ from each other
/// and from the zeroed buffer.
fn next_stamp(s: u8) -> u8 {
    if s == 255 {
        1
    } else {
        s + 1
    }
}

/// What one size measured.
enum Measured {
    /// `-n`: every sample (nanoseconds), in the order taken.
    Samples(Vec<u64>),
    /// `-D`: the samples in the window, as a histogram, with the window's span.
    Window {
        histogram: Histogram<u64>,
        iterations: u64,
        span: Duration,
    },
}

/// Collects the samples of one size.
struct Recorder {
    length: Length,
    halves: u32,
    samples: Vec<u64>,
    histogram: Option<Histogram<u64>>,
    start: Instant,
    window: (Instant, Instant),
    first: Option<Instant>,
    last: Instant,
    iterations: u64,
}

impl Recorder {
    fn new(p: &Plan) -> Result<Recorder> {
        let now = Instant::now();
        let mut r = Recorder {
            length: p.length,
            halves: p.halves(),
            samples: Vec::new(),
            histogram: None,
            start: now,
            window: (now, now),
            first: None,
            last: now,
            iterations: 0,
        };
        match p.length {
            Length::Iters(n) => {
                let n = usize::try_from(n).unwrap_or(usize::MAX);
                r.samples.try_reserve_exact(n).map_err(|_| {
                    Error::Usage(format!(
                        "-n {n}: could not allocate {} for the samples",
                        limits::human((n as u64).saturating_mul(limits::SAMPLE_BYTES))
                    ))
                })?;
            }
            Length::Duration { secs, margin } => {
                r.histogram = Some(
                    stats::new_histogram()
                        .ok_or_else(|| Error::Check("no histogram could be made".into()))?,
                );
                r.window = (
                    now + Duration::from_secs(margin),
                    now + Duration::from_secs(secs - margin),
                );
            }
        }
        Ok(r)
    }

    /// Whether another iteration is due after `i` of them.
    fn more(&self, i: u64) -> bool {
        match self.length {
            Length::Iters(n) => i < n,
            Length::Duration { secs, .. } => self.start.elapsed() < Duration::from_secs(secs),
        }
    }

    /// One iteration from `t0` to `t1`.
    #[inline]
    fn record(&mut self, t0: Instant, t1: Instant) {
        let ns = (t1 - t0).as_nanos() as u64 / u64::from(self.halves);
        match &mut self.histogram {
            None => self.samples.push(ns),
            Some(h) => {
                if t0 >= self.window.0 && t1 <= self.window.1 {
                    stats::record(h, ns);
                    self.first.get_or_insert(t0);
                    self.last = t1;
                    self.iterations += 1;
                }
            }
        }
    }

    fn finish(self) -> Measured {
        match self.histogram {
            None => Measured::Samples(self.samples),
            Some(histogram) => Measured::Window {
                histogram,
                iterations: self.iterations,
                span: self.first.map_or(Duration::ZERO, |f| self.last - f),
            },
        }
    }
}

/// What the report of a run collects for the files written at its end.
struct Reporter<'p> {
    p: &'p Plan,
    title: String,
    started: SystemTime,
    t0: Instant,
    /// For the SVG: the last size's figures and histogram.
    last: Option<(LatencyStats, Histogram<u64>)>,
    /// For the log: every size's histogram and when it ran.
    intervals: Vec<(u64, Histogram<u64>, Duration, Duration)>,
}

impl<'p> Reporter<'p> {
    fn new(p: &'p Plan, title: String) -> Reporter<'p> {
        Reporter {
            p,
            title,
            started: SystemTime::now(),
            t0: Instant::now(),
            last: None,
            intervals: Vec::new(),
        }
    }

    fn header(&self) {
        let h = match self.p.length {
            Length::Iters(_) => report::LAT_HEADER,
            Length::Duration { .. } => report::LAT_DUR_HEADER,
        };
        self.p.say(h);
    }

    /// The row (and listing) of one size that started at `from` and took `took`.
    fn row(&mut self, size: u64, m: Measured, from: Instant, took: Duration) -> Result<()> {
        let p = self.p;
        let keep = p.svg.is_some() || p.hlog.is_some();
        let start = from.saturating_duration_since(self.t0);
        match m {
            Measured::Samples(mut samples) => {
                if p.listing == Listing::Unsorted {
                    p.say(&report::sample_listing(&samples));
                }
                let hist = if keep {
                    stats::histogram_of(&samples)
                } else {
                    None
                };
                let Some(s) = LatencyStats::from_samples(size, &mut samples) else {
                    return Ok(());
                };
                if p.listing != Listing::None {
                    p.say(&report::sample_listing(&samples));
                    p.say(report::RESULT_LINE);
                    p.say(report::LAT_HEADER);
                }
                if p.quiet {
                    say(&format!("{:.6}", s.avg));
                } else {
                    say(&report::lat_row(&s));
                }
                if let Some(h) = hist {
                    self.intervals.push((size, h.clone(), start, took));
                    self.last = Some((s, h));
                }
                if !p.quiet && p.sizes.len() == 1 {
                    say(report::RESULT_LINE);
                    say(&report::lat_percentiles(size, &samples));
                }
            }
            Measured::Window {
                histogram,
                iterations,
                span,
            } => {
                if iterations == 0 {
                    return Err(Error::Check(
                        "no iteration ended inside the measuring window of -D: use a longer -D \
                         or a smaller -f"
                            .into(),
                    ));
                }
                let d = DurationStats::new(size, iterations, span, p.halves());
                if p.listing != Listing::None {
                    p.say(&report::histogram_listing(&histogram));
                    p.say(report::RESULT_LINE);
                    p.say(report::LAT_DUR_HEADER);
                }
                if p.quiet {
                    say(&format!("{:.6}", d.avg));
                } else {
                    say(&report::lat_dur_row(&d));
                }
                if keep {
                    let s = LatencyStats {
                        bytes: size,
                        iterations,
                        min: histogram.min() as f64 / 1000.0,
                        max: histogram.max() as f64 / 1000.0,
                        typical: histogram.value_at_quantile(0.5) as f64 / 1000.0,
                        avg: histogram.mean() / 1000.0,
                        stdev: histogram.stdev() / 1000.0,
                        p99: histogram.value_at_quantile(0.99) as f64 / 1000.0,
                        p999: histogram.value_at_quantile(0.999) as f64 / 1000.0,
                    };
                    self.intervals.push((size, histogram.clone(), start, took));
                    self.last = Some((s, histogram));
                }
            }
        }
        Ok(())
    }

    /// The end of the report, and the files.
    fn finish(self) -> Result<()> {
        let p = self.p;
        if !(p.quiet || p.sizes.len() == 1 && matches!(p.length, Length::Iters(_))) {
            say(report::RESULT_LINE);
        }
        let io = |path: &str, source| Error::Io {
            path: path.to_string(),
            source,
        };
        if let (Some((file, path)), Some((s, h))) = (&p.svg, &self.last) {
            let mut f = file;
            f.write_all(svg::histogram_svg(&self.title, s, h).as_bytes())
                .map_err(|e| io(path, e))?;
            p.say(&format!(" histogram written to {path}"));
        }
        if let Some((file, path)) = &p.hlog {
            let intervals: Vec<hlog::Interval<'_>> = self
                .intervals
                .iter()
                .map(|(bytes, h, start, length)| hlog::Interval {
                    bytes: *bytes,
                    histogram: h,
                    start: *start,
                    length: *length,
                })
                .collect();
            let mut w = std::io::BufWriter::new(file);
            hlog::write(&mut w, &self.title, self.started, &intervals)
                .and_then(|()| w.flush())
                .map_err(|e| io(path, e))?;
            p.say(&format!(" HdrHistogram log written to {path}"));
        }
        Ok(())
    }
}

fn run(args: &LatArgs) -> Result<()> {
    let p = plan(args)?;
    let c = &args.common;
    if c.cpu_freq {
        eprintln!(
            "lat: note: -F changes nothing here: these tools time with the monotonic clock, \
             not the CPU's cycle counter, and give no CPU frequency warning to silence"
        );
    }
    on_devices(
        "lat",
        &c.device,
        c.tap(),
        c.loopback,
        c.server.is_some(),
        |devs| run_on(args, &p, devs),
    )
}

/// The device-dependent checks, then the run on the data path `--path` names.
fn run_on(args: &LatArgs, p: &Plan, devs: &Devices) -> Result<()> {
    let c = &args.common;
    devs.check_port(c.ib_port)?;
    devs.check_path(c.path)?;
    let gid = devs.gid_index(c.ib_port, c.gid_index)?;
    let params = ConnectParams {
        gid_index: gid,
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
            if p.quiet {
                eprintln!("{line}");
            } else {
                say(&line);
            }
        }
        Some(rv)
    };
    match c.path {
        PathKind::Direct => run_direct(args, p, devs, &params, rv.as_ref()),
        PathKind::Verbs => run_verbs(args, p, devs, &params, rv.as_ref()),
    }
}

/// One end of this library's data path, with the doorbell mode `--doorbell` asks for; the
/// measuring end of a `--timestamps` run (`stamped`) on a CQ with completion timestamps.
fn direct_end(ctx: &mlx5_ctx::Context, p: &Plan, stamped: bool) -> Result<(Resources, u32)> {
    let (mut r, inline) = if stamped {
        Resources::with_inline_timestamped(ctx, &p.cfg(), p.inline)
            .map_err(|e| timestamps_refused(ctx.name(), e))?
    } else {
        Resources::with_inline(ctx, &p.cfg(), p.inline)?
    };
    if let Some(mode) = p.doorbell {
        r.set_doorbell_mode(mode)?;
    }
    Ok((r, inline))
}

/// The device clock of the measuring end of a `--timestamps` run (`measuring`), checked before
/// anything is created; `None` otherwise.
fn nic_clock(
    p: &Plan,
    ctx: &mlx5_ctx::Context,
    measuring: bool,
) -> Result<Option<mlx5_hw::ClockInfo>> {
    if p.timestamps && measuring {
        Ok(Some(timestamps::clock_of(ctx)?))
    } else {
        Ok(None)
    }
}

/// A device's refusal to create a CQ with completion timestamps, as the clear usage error of
/// `--timestamps`; any other error as it is.
fn timestamps_refused(device: &str, e: Error) -> Error {
    match e {
        Error::Device(mlx5_hw::Error::Unsupported(why))
        | Error::Ctx(mlx5_ctx::Error::Device(mlx5_hw::Error::Unsupported(why))) => {
            timestamps::unsupported(device, why)
        }
        e => e,
    }
}

/// The banner's doorbell line: the direct path's mode (as `--doorbell` chose it, or the QP's
/// default), or libibverbs' own.
fn doorbell_line(p: &Plan, mode: Option<DoorbellMode>) -> String {
    match mode {
        Some(m) => describe_doorbell(m, p.doorbell.is_some()),
        None => "libibverbs' own (ibv_post_send)".into(),
    }
}

/// This library's data path: both ends here (`rv` is `None`) or this end of two processes.
fn run_direct(
    args: &LatArgs,
    p: &Plan,
    devs: &Devices,
    params: &ConnectParams,
    rv: Option<&Rendezvous>,
) -> Result<()> {
    let measuring = rv.is_none_or(|r| r.is_client());
    let clock = nic_clock(p, &devs.local, measuring)?;
    let (mut a, inline_a) = direct_end(&devs.local, p, clock.is_some())?;
    let doorbell = doorbell_line(p, a.doorbell_mode());
    let recv_a = p.receives(&a.mr)?;
    let ctx_a = a.context().clone();
    let end_a = End {
        ctx: &ctx_a,
        qps: vec![a.qp_ref(0)],
        params: params.clone().with_buffer(a.remote_buffer()),
    };
    let Resources { qps, cq, mr, .. } = &mut a;
    let mut links_a = DirectLinks {
        qps,
        cq,
        recv: recv_a,
    };
    match rv {
        None => {
            let (mut b, inline_b) = direct_end(devs.peer_or_local(), p, false)?;
            let recv_b = p.receives(&b.mr)?;
            let ctx_b = b.context().clone();
            let end_b = End {
                ctx: &ctx_b,
                qps: vec![b.qp_ref(0)],
                params: params.clone().with_buffer(b.remote_buffer()),
            };
            let Resources {
                qps: qps_b,
                cq: cq_b,
                mr: mr_b,
                ..
            } = &mut b;
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
            let path_a = Direct::new(links_a.qps, links_a.cq);
            let mut pa = Pinger::new(
                if clock.is_some() {
                    path_a.timestamped()
                } else {
                    path_a
                },
                mr,
                buffer_of(&conn.conns[0])?,
                inline,
                p,
            );
            pa.nic = p.nic(clock)?;
            let pb = Pinger::new(
                Direct::new(links_b.qps, links_b.cq),
                mr_b,
                buffer_of(&conn.peer[0])?,
                inline,
                p,
            );
            exit_on_failure(
                "lat",
                devs,
                measure_loopback(args, p, devs, pa, pb, conn, &doorbell),
            )
        }
        Some(rv) => {
            let conn = connect_all(devs, &end_a, &mut links_a, None, Some(rv), Some(&p.shape))?;
            let path_a = Direct::new(links_a.qps, links_a.cq);
            let mut me = Pinger::new(
                if clock.is_some() {
                    path_a.timestamped()
                } else {
                    path_a
                },
                mr,
                buffer_of(&conn.conns[0])?,
                inline_a,
                p,
            );
            me.nic = p.nic(clock)?;
            exit_on_failure(
                "lat",
                devs,
                measure_end(args, p, devs, me, conn, rv.is_client(), &doorbell),
            )
        }
    }
}

fn buffer_of(conn: &Connection) -> Result<RemoteBuffer> {
    conn.remote_buffer().ok_or_else(|| Error::Peer {
        peer: conn.peer().qpn.to_string(),
        why: "the peer announced no buffer".into(),
    })
}

/// UD: where the pinger's SENDs go.
fn aim<P: DataPath>(pinger: &mut Pinger<'_, P>, conn: &Connection) {
    if let Some(peer) = conn.ud_peer() {
        pinger.path.set_ud_peer(0, peer);
    }
}

/// The sizes this run can do: on a UD QP at most one path MTU (IBTA Vol. 1 §9.6: a UD message
/// is one packet); over a UDP link between processes, what it holds at once.
fn usable_sizes(p: &Plan, conn: &Connection, udp: Option<&UdpLink>) -> Result<Vec<u64>> {
    let mtu = conn.path_mtu().bytes();
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
    if let Some(n) = note {
        p.say(&n);
    }
    Ok(sizes)
}

/// Both ends here: A pings, B answers, A measures.
fn measure_loopback<P: DataPath, Q: DataPath>(
    args: &LatArgs,
    p: &Plan,
    devs: &Devices,
    mut pa: Pinger<'_, P>,
    mut pb: Pinger<'_, Q>,
    conn: Connected,
    doorbell: &str,
) -> Result<()> {
    (pa.yield_idle, pb.yield_idle) = (devs.software, devs.software);
    aim(&mut pa, &conn.conns[0]);
    aim(&mut pb, &conn.peer[0]);
    let sizes = usable_sizes(p, &conn.conns[0], None)?;
    let title = args.test.title(false, p.atomic, false);
    p.say(&banner(
        args,
        p,
        &title,
        devs,
        pa.inline,
        doorbell,
        &conn.conns[0],
        None,
    ));
    let mut rep = Reporter::new(p, title);
    rep.header();
    let mut stamp = 0u8;
    for &size in &sizes {
        let size = size as usize;
        let mut rec = Recorder::new(p)?;
        let total = p.length.iters().unwrap_or(0);
        let mut progress = Progress::new(format!("{size} bytes"), total);
        let from = Instant::now();
        let mut i = 0;
        while rec.more(i) {
            stamp = next_stamp(stamp);
            let t0 = Instant::now();
            match p.test {
                Test::Read | Test::Atomic => pa.one_op(p.test, p.atomic, size)?,
                t => {
                    pa.post_msg(t, size, stamp)?;
                    pb.wait_msg(t, size, stamp)?;
                    pb.post_msg(t, size, stamp)?;
                    pa.wait_msg(t, size, stamp)?;
                }
            }
            rec.record(t0, Instant::now());
            i += 1;
            progress.update(i);
        }
        let took = from.elapsed();
        drop(progress);
        pa.settle()?;
        pb.settle()?;
        rep.row(size as u64, rec.finish(), from, took)?;
        if let Some(nic) = pa.nic.as_mut() {
            say(&nic.line(size as u64, p.halves())?);
        }
    }
    rep.finish()
}

/// This end of a run across processes: the client pings and measures, the server answers
/// (READ and atomics: the server only serves) until the client says goodbye.
fn measure_end<P: DataPath>(
    args: &LatArgs,
    p: &Plan,
    devs: &Devices,
    mut me: Pinger<'_, P>,
    conn: Connected,
    client: bool,
    doorbell: &str,
) -> Result<()> {
    me.yield_idle = devs.software;
    let Connected { mut conns, udp, .. } = conn;
    if conns.is_empty() {
        return Err(Error::Usage("no connection".into()));
    }
    let mut conn = conns.remove(0);
    aim(&mut me, &conn);
    let title = args.test.title(false, p.atomic, false);
    p.say(&banner(
        args,
        p,
        &title,
        devs,
        me.inline,
        doorbell,
        &conn,
        udp.as_ref(),
    ));
    // Both ends leave out the same sizes, so they stay in step.
    let sizes = usable_sizes(p, &conn, udp.as_ref())?;
    let passive = matches!(p.test, Test::Read | Test::Atomic);
    if !client {
        let mut stopped = false;
        if !passive {
            me.watch = Some(conn);
            let mut stamp = 0u8;
            'sizes: for &size in &sizes {
                let size = size as usize;
                let mut i = 0u64;
                while p.length.iters().is_none_or(|n| i < n) {
                    stamp = next_stamp(stamp);
                    if me.wait_msg(p.test, size, stamp)? == Waited::Stopped {
                        stopped = true;
                        break 'sizes;
                    }
                    me.post_msg(p.test, size, stamp)?;
                    i += 1;
                }
                me.settle()?;
            }
            conn = me
                .watch
                .take()
                .ok_or_else(|| Error::Usage("the control connection went missing".into()))?;
            if stopped && p.length.iters().is_some() {
                return Err(Error::Peer {
                    peer: "the client".into(),
                    why: "it said goodbye before the last iteration".into(),
                });
            }
        }
        // The client says when it is done (READ, atomics: the server only serves until
        // then); a -D server that saw the goodbye already is done.
        if !stopped {
            serve_until_closed(std::slice::from_mut(&mut conn))?;
        }
        p.say(report::RESULT_LINE);
        return Ok(());
    }
    let mut rep = Reporter::new(p, title);
    rep.header();
    let mut stamp = 0u8;
    for &size in &sizes {
        let size = size as usize;
        let mut rec = Recorder::new(p)?;
        let from = Instant::now();
        let mut i = 0;
        while rec.more(i) {
            stamp = next_stamp(stamp);
            let t0 = Instant::now();
            match p.test {
                Test::Read | Test::Atomic => me.one_op(p.test, p.atomic, size)?,
                t => {
                    me.post_msg(t, size, stamp)?;
                    me.wait_msg(t, size, stamp)?;
                }
            }
            rec.record(t0, Instant::now());
            i += 1;
        }
        let took = from.elapsed();
        me.settle()?;
        rep.row(size as u64, rec.finish(), from, took)?;
        if let Some(nic) = me.nic.as_mut() {
            say(&nic.line(size as u64, p.halves())?);
        }
    }
    conn.close()?;
    rep.finish()
}

#[allow(clippy::too_many_arguments)]
fn banner(
    args: &LatArgs,
    p: &Plan,
    title: &str,
    devs: &Devices,
    inline: u32,
    doorbell: &str,
    conn: &Connection,
    udp: Option<&UdpLink>,
) -> String {
    let mut extra = vec![
        ("Doorbell".into(), doorbell.to_string()),
        ("local address".into(), describe_endpoint(conn.local())),
        ("remote address".into(), describe_endpoint(conn.peer())),
    ];
    if p.events {
        extra.push((
            "Completions".into(),
            "events (-e): sleeps on the CQ's completion channel".into(),
        ));
    }
    if p.timestamps {
        extra.push((
            "Timestamps".into(),
            "CQE completion timestamps on the measuring end: a NIC line under each row".into(),
        ));
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
    Banner {
        title,
        device: &devs.name,
        path: args.common.path.describe(),
        connection: p.conn.name(),
        qps: 1,
        inline,
        tx_depth: 1,
        mtu: conn.path_mtu().bytes(),
        extra,
    }
    .render()
}

/// `--path verbs` needs the `verbs` feature.
#[cfg(not(feature = "verbs"))]
fn run_verbs(
    _args: &LatArgs,
    _p: &Plan,
    _devs: &Devices,
    _params: &ConnectParams,
    _rv: Option<&Rendezvous>,
) -> Result<()> {
    Err(Error::Usage(
        "--path verbs needs the `verbs` feature (rebuild with --features verbs)".into(),
    ))
}

/// `--path verbs`: the same QPs and CQs, driven through libibverbs' `ibv_post_send`,
/// `ibv_post_recv` and `ibv_poll_cq` (`mlx5_hw::verbs::baseline`), as perftest drives them.
#[cfg(feature = "verbs")]
fn run_verbs(
    args: &LatArgs,
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
    let doorbell = doorbell_line(p, None);
    let measuring = rv.is_none_or(|r| r.is_client());
    let clock = nic_clock(p, &devs.local, measuring)?;
    let (a, inline_a) = if clock.is_some() {
        VerbsResources::with_inline_timestamped(&devs.local, dev.clone(), &p.cfg(), p.inline)
            .map_err(|e| timestamps_refused(&devs.name, e))?
    } else {
        VerbsResources::with_inline(&devs.local, dev.clone(), &p.cfg(), p.inline)?
    };
    let end_a = End {
        ctx: a.context(),
        qps: vec![a.qp_ref(0)],
        params: params.clone().with_buffer(a.remote_buffer()),
    };
    let mut va = Verbs::claim(&a)?;
    let recv_a = p.receives(&a.mr)?;
    match rv {
        None => {
            // Both ends on this device: rxe and ConnectX deliver a packet to their own GID
            // internally (loopback), so one port is enough.
            let (b, inline_b) = VerbsResources::with_inline(&devs.local, dev, &p.cfg(), p.inline)?;
            let end_b = End {
                ctx: b.context(),
                qps: vec![b.qp_ref(0)],
                params: params.clone().with_buffer(b.remote_buffer()),
            };
            let mut vb = Verbs::claim(&b)?;
            let recv_b = p.receives(&b.mr)?;
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
            let inline = inline_a.min(inline_b);
            let mut pa = Pinger::new(va, &a.mr, buffer_of(&conn.conns[0])?, inline, p);
            pa.nic = p.nic(clock)?;
            let pb = Pinger::new(vb, &b.mr, buffer_of(&conn.peer[0])?, inline, p);
            exit_on_failure(
                "lat",
                devs,
                measure_loopback(args, p, devs, pa, pb, conn, &doorbell),
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
            let mut me = Pinger::new(va, &a.mr, buffer_of(&conn.conns[0])?, inline_a, p);
            me.nic = p.nic(clock)?;
            exit_on_failure(
                "lat",
                devs,
                measure_end(args, p, devs, me, conn, rv.is_client(), &doorbell),
            )
        }
    }
}
