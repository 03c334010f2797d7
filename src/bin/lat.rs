//! `lat`: ping-pong latency like perftest's `ib_write_lat`, `ib_send_lat` and `ib_read_lat`,
//! through this library's data path.
//!
//! ```text
//! lat write --loopback -n 1000          both ends here, on the software ConnectX
//! lat send -d mlx5_0                    server
//! lat send -d mlx5_0 10.0.0.1           client
//! ```
//!
//! WRITE: each side writes the message into the other's buffer and waits for its last byte to
//! change (perftest's method); SEND: each side waits for the receive completion; the figure is
//! half the round trip. READ: the client reads and waits for the completion; the figure is the
//! whole READ. The table has perftest's columns; percentiles come from an HdrHistogram.

#[path = "support/side.rs"]
mod side;

use clap::Parser;
use mlx5_direct::hw::QpType;
use mlx5_direct::perf::args::{Common, LatArgs, LatTest, PathKind};
use mlx5_direct::perf::progress::Progress;
use mlx5_direct::perf::report::{self, Banner};
use mlx5_direct::perf::stats::LatencyStats;
use mlx5_direct::perf::{svg, Error, Result};
use mlx5_direct::qp::connect::{
    connect_pair, ConnectParams, Connection, ControlEvent, PairSide, QpLink, RemoteBuffer,
};
use mlx5_direct::qp::{Qp, SendWr, Sge, Wc};
use side::{open_devices, remote, Devices, Side, SideCfg};
use std::net::TcpListener;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// How long any one wait may take before the run is declared stuck.
const STALL: Duration = Duration::from_secs(10);
/// Default largest inline message, capped by what the QP grants.
const DEFAULT_INLINE: u32 = 220;
/// Receives kept posted for SEND.
const RECV_DEPTH: u32 = 64;

fn main() -> ExitCode {
    let args = LatArgs::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lat: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// One end's data path during a ping-pong.
struct Pinger<'a> {
    side: &'a mut Side,
    remote: RemoteBuffer,
    /// Offset of the receive half of both buffers (the send half starts at 0).
    half: usize,
    inline: u32,
    payload: Vec<u8>,
    next_wr: u64,
    sends_posted: u64,
    sends_done: u64,
    recvs: u64,
    wcs: [Wc; 16],
}

impl Pinger<'_> {
    fn post(&mut self, wr: &SendWr<'_>) -> Result<()> {
        self.side.qps[0].post(wr)?;
        self.sends_posted += 1;
        Ok(())
    }

    /// Post one message of `size` bytes ending in `stamp`: an RDMA WRITE into the peer's
    /// receive half, or a SEND.
    fn post_msg(&mut self, test: LatTest, size: usize, stamp: u8) -> Result<()> {
        let id = self.next_wr;
        self.next_wr += 1;
        let wr = match test {
            LatTest::Write => SendWr::write(id, remote(&self.remote, self.half as u64)),
            _ => SendWr::send(id),
        }
        .signaled();
        if size as u32 <= self.inline {
            self.payload[size - 1] = stamp;
            let payload = std::mem::take(&mut self.payload);
            let r = self.post(&wr.inline(&payload[..size]));
            self.payload = payload;
            r
        } else {
            self.side.buf.write_u8(size - 1, stamp);
            let sge = [self.side.buf.sge(0, size as u32)];
            self.post(&wr.sges(&sge))
        }
    }

    /// Poll what is ready: count send completions and receives (reposting each receive);
    /// an error completion ends the run.
    fn drain(&mut self) -> Result<()> {
        let n = self.side.cq.poll(&mut self.side.qps[..], &mut self.wcs)?;
        for i in 0..n {
            let wc = self.wcs[i];
            if !wc.is_ok() {
                return Err(Error::completion(&wc));
            }
            if wc.opcode.is_recv() {
                self.recvs += 1;
                let sge = [self.side.buf.sge(self.half, self.half as u32)];
                self.side.qps[0].post_recv(wc.wr_id, &sge)?;
            } else {
                self.sends_done += 1;
            }
        }
        Ok(())
    }

    fn wait(&mut self, what: &'static str, mut done: impl FnMut(&Self) -> bool) -> Result<()> {
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            if done(self) {
                return Ok(());
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(64) {
                self.drain()?;
                if spins.is_multiple_of(65536) && start.elapsed() > STALL {
                    return Err(Error::Timeout {
                        what,
                        secs: STALL.as_secs(),
                    });
                }
            }
            std::hint::spin_loop();
        }
    }

    /// Wait for the peer's message `stamp` of `size` bytes.
    fn wait_msg(&mut self, test: LatTest, size: usize, stamp: u8) -> Result<()> {
        match test {
            LatTest::Write => {
                let off = self.half + size - 1;
                self.wait("the peer's RDMA WRITE", |p| {
                    p.side.buf.read_u8(off) == stamp
                })
            }
            _ => {
                let want = self.recvs + 1;
                loop {
                    self.drain()?;
                    if self.recvs >= want {
                        return Ok(());
                    }
                    self.wait("the peer's SEND", |p| p.recvs >= want)?;
                }
            }
        }
    }

    /// One RDMA READ of `size` bytes from the peer's send half, waited for.
    fn read(&mut self, size: usize) -> Result<()> {
        let id = self.next_wr;
        self.next_wr += 1;
        let sge = [self.side.buf.sge(self.half, size as u32)];
        let wr = SendWr::read(id, remote(&self.remote, 0))
            .sges(&sge)
            .signaled();
        self.post(&wr)?;
        let want = self.sends_posted;
        loop {
            self.drain()?;
            if self.sends_done >= want {
                return Ok(());
            }
        }
    }

    /// Wait for every send to complete (between sizes, outside the timed loops).
    fn settle(&mut self) -> Result<()> {
        let want = self.sends_posted;
        self.wait("send completions", |p| p.sends_done >= want)
    }
}

/// The run's plan, from the arguments.
struct Plan {
    test: LatTest,
    sizes: Vec<u64>,
    iters: u64,
    inline: u32,
    half: usize,
}

fn plan(args: &LatArgs) -> Result<Plan> {
    let c = &args.common;
    let sizes = if c.all {
        report::all_sizes(u64::MAX)
    } else {
        vec![c.size.unwrap_or(2)]
    };
    if sizes.iter().any(|&s| s == 0 || s > 1 << 30) {
        return Err(Error::Usage("-s must be between 1 and 1 GiB".into()));
    }
    let iters = c.iters.unwrap_or(1000);
    if iters == 0 {
        return Err(Error::Usage("-n must be at least 1".into()));
    }
    let max = sizes.iter().copied().max().unwrap_or(2) as usize;
    Ok(Plan {
        test: args.test,
        sizes,
        iters,
        inline: if args.test == LatTest::Read {
            0
        } else {
            c.inline.unwrap_or(DEFAULT_INLINE)
        },
        half: max.next_multiple_of(64),
    })
}

fn check_path(c: &Common, devs: &Devices) -> Result<()> {
    match (c.path, devs.is_sim()) {
        (PathKind::Direct, _) => Ok(()),
        (PathKind::Verbs, true) => Err(Error::Usage(
            "--path verbs needs a verbs device: the software ConnectX has no libibverbs data \
             path. Use -d mlx5_N (built with --features verbs), or --path direct"
                .into(),
        )),
        (PathKind::Verbs, false) => Err(Error::Usage(
            "--path verbs is not wired into lat yet (bw has it); the libibverbs baseline lives in \
             mlx5_hw::verbs::baseline (run --path direct meanwhile)"
                .into(),
        )),
    }
}

fn side_cfg(p: &Plan) -> SideCfg {
    SideCfg {
        qp_type: QpType::Rc,
        qps: 1,
        sq_depth: 128,
        rq_depth: RECV_DEPTH,
        inline: p.inline.min(512),
        buf_len: 2 * p.half,
        srq: None,
    }
}

/// The closure that posts the receives when the QP reaches Init.
fn receives(test: LatTest, sge: Sge) -> impl FnMut(&mut Qp) -> mlx5_direct::qp::Result<()> {
    move |qp: &mut Qp| {
        if test == LatTest::Send {
            for i in 0..RECV_DEPTH as u64 {
                qp.post_recv(i, std::slice::from_ref(&sge))?;
            }
        }
        Ok(())
    }
}

fn pinger<'a>(side: &'a mut Side, peer: RemoteBuffer, p: &Plan) -> Pinger<'a> {
    let inline = p.inline.min(side.qps[0].max_inline_data());
    Pinger {
        side,
        remote: peer,
        half: p.half,
        inline,
        payload: vec![0; inline as usize + 1],
        next_wr: 0,
        sends_posted: 0,
        sends_done: 0,
        recvs: 0,
        wcs: [Wc::default(); 16],
    }
}

fn banner(args: &LatArgs, devs: &Devices, inline: u32, conn: &Connection) -> String {
    let mtu = conn.path_mtu().bytes();
    Banner {
        title: args.test.title(),
        device: &devs.name,
        path: args.common.path.describe(),
        connection: "RC",
        qps: 1,
        inline,
        tx_depth: 1,
        mtu,
        extra: vec![
            (
                "local address".into(),
                format!(
                    "QPN {:#08x} PSN {:#08x}",
                    conn.local().qpn,
                    conn.local().psn
                ),
            ),
            (
                "remote address".into(),
                format!("QPN {:#08x} PSN {:#08x}", conn.peer().qpn, conn.peer().psn),
            ),
        ],
    }
    .render()
}

fn run(args: &LatArgs) -> Result<()> {
    let p = plan(args)?;
    let c = &args.common;
    let devs = open_devices(&c.device, c.loopback)?;
    let r = run_on(args, &p, &devs);
    if r.is_err() {
        for b in devs.driver_bugs() {
            eprintln!("lat: the software ConnectX reported a driver bug: {b}");
        }
    }
    r
}

fn run_on(args: &LatArgs, p: &Plan, devs: &Devices) -> Result<()> {
    let c = &args.common;
    check_path(c, devs)?;
    let cfg = side_cfg(p);
    if c.loopback {
        let peer_dev = devs.peer.clone().unwrap_or_else(|| devs.local.clone());
        let mut a = Side::new(devs.local.clone(), &cfg)?;
        let mut b = Side::new(peer_dev, &cfg)?;
        let (ca, cb) = {
            let (pa, pb) = (
                ConnectParams::default().with_buffer(a.buf.remote_buffer()),
                ConnectParams::default().with_buffer(b.buf.remote_buffer()),
            );
            let (ra, rb) = (a.qp_ref(0), b.qp_ref(0));
            let (sa, sb) = (
                a.buf.sge(p.half, p.half as u32),
                b.buf.sge(p.half, p.half as u32),
            );
            let (da, db) = (a.dev.clone(), b.dev.clone());
            let mut la = QpLink::new(&mut a.qps[0], &mut a.cq, receives(p.test, sa));
            let mut lb = QpLink::new(&mut b.qps[0], &mut b.cq, receives(p.test, sb));
            connect_pair(
                PairSide {
                    dev: &*da,
                    qp: ra,
                    link: &mut la,
                    params: &pa,
                },
                PairSide {
                    dev: &*db,
                    qp: rb,
                    link: &mut lb,
                    params: &pb,
                },
            )?
        };
        let (ba, bb) = (buffer_of(&ca)?, buffer_of(&cb)?);
        let mut pa = pinger(&mut a, ba, p);
        let mut pb = pinger(&mut b, bb, p);
        println!("{}", banner(args, devs, pa.inline, &ca));
        println!("{}", report::LAT_HEADER);
        let mut last = None;
        let mut stamp = 0u8;
        for &size in &p.sizes {
            let size = size as usize;
            let mut samples = Vec::with_capacity(p.iters as usize);
            let mut progress = Progress::new(format!("{size} bytes"), p.iters);
            for i in 0..p.iters {
                stamp = next_stamp(stamp);
                let t0 = Instant::now();
                let ns = match p.test {
                    LatTest::Read => {
                        pa.read(size)?;
                        t0.elapsed().as_nanos() as u64
                    }
                    t => {
                        pa.post_msg(t, size, stamp)?;
                        pb.wait_msg(t, size, stamp)?;
                        pb.post_msg(t, size, stamp)?;
                        pa.wait_msg(t, size, stamp)?;
                        t0.elapsed().as_nanos() as u64 / 2
                    }
                };
                samples.push(ns);
                progress.update(i);
            }
            drop(progress);
            pa.settle()?;
            pb.settle()?;
            last = print_row(size as u64, &samples).or(last);
        }
        finish(args, last)?;
        drop((ca, cb));
        return Ok(());
    }
    // Server or client over TCP, one process per end.
    let mut s = Side::new(devs.local.clone(), &cfg)?;
    let params = ConnectParams {
        port: c.ib_port,
        ..ConnectParams::default()
    }
    .with_buffer(s.buf.remote_buffer());
    let qp_ref = s.qp_ref(0);
    let sge = s.buf.sge(p.half, p.half as u32);
    let dev = s.dev.clone();
    let conn = {
        let mut link = QpLink::new(&mut s.qps[0], &mut s.cq, receives(p.test, sge));
        match &c.server {
            None => {
                let listener = TcpListener::bind(("0.0.0.0", c.port)).map_err(|e| Error::Io {
                    path: format!("TCP port {}", c.port),
                    source: e,
                })?;
                eprintln!(" Waiting for client to connect on TCP port {} ...", c.port);
                Connection::accept(&listener, &*dev, qp_ref, &mut link, &params)?
            }
            Some(host) => {
                Connection::connect((host.as_str(), c.port), &*dev, qp_ref, &mut link, &params)?
            }
        }
    };
    let peer = buffer_of(&conn)?;
    let mut me = pinger(&mut s, peer, p);
    let client = c.server.is_some();
    println!("{}", banner(args, devs, me.inline, &conn));
    if client {
        println!("{}", report::LAT_HEADER);
    }
    let mut last = None;
    let mut stamp = 0u8;
    for &size in &p.sizes {
        let size = size as usize;
        let mut samples = Vec::with_capacity(p.iters as usize);
        for _ in 0..p.iters {
            stamp = next_stamp(stamp);
            let t0 = Instant::now();
            match (p.test, client) {
                (LatTest::Read, true) => {
                    me.read(size)?;
                    samples.push(t0.elapsed().as_nanos() as u64);
                }
                (LatTest::Read, false) => {}
                (t, true) => {
                    me.post_msg(t, size, stamp)?;
                    me.wait_msg(t, size, stamp)?;
                    samples.push(t0.elapsed().as_nanos() as u64 / 2);
                }
                (t, false) => {
                    me.wait_msg(t, size, stamp)?;
                    me.post_msg(t, size, stamp)?;
                }
            }
        }
        me.settle()?;
        if client {
            last = print_row(size as u64, &samples).or(last);
        }
    }
    let mut conn = conn;
    if client {
        conn.close()?;
        finish(args, last)?;
    } else {
        // The client says when it is done (READ: the server only serves).
        let start = Instant::now();
        loop {
            match conn.poll_control()? {
                Some(ControlEvent::PeerAborted(_)) => break,
                Some(ControlEvent::RebuildRequested { .. }) | None => {}
            }
            if start.elapsed() > Duration::from_secs(3600) {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        println!("{}", report::RESULT_LINE);
    }
    Ok(())
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

fn buffer_of(conn: &Connection) -> Result<RemoteBuffer> {
    conn.remote_buffer()
        .ok_or_else(|| Error::Usage("the peer announced no buffer".into()))
}

fn print_row(size: u64, samples: &[u64]) -> Option<LatencyStats> {
    let s = LatencyStats::from_nanos(size, samples)?;
    println!("{}", report::lat_row(&s));
    Some(s)
}

fn finish(args: &LatArgs, last: Option<LatencyStats>) -> Result<()> {
    println!("{}", report::RESULT_LINE);
    if let Some(s) = &last {
        println!("{}", report::lat_percentiles(s));
        if let Some(path) = &args.histogram {
            std::fs::write(path, svg::histogram_svg(args.test.title(), s)).map_err(|e| {
                Error::Io {
                    path: path.display().to_string(),
                    source: e,
                }
            })?;
            println!(" histogram written to {}", path.display());
        }
    }
    Ok(())
}
