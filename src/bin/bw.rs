//! `bw`: message rate and bandwidth like perftest's `ib_write_bw` / `ib_read_bw`, through this
//! library's data path, over one or many QPs.
//!
//! ```text
//! bw write                                server (passive: it only serves), software ConnectX
//! bw write 127.0.0.1                      client, in another terminal
//! bw write --loopback -s 8 -n 100000      both ends in one process
//! bw write -d mlx5_0 -q 4                 server on a ConnectX (--features verbs)
//! bw write -d mlx5_0 -q 4 192.0.2.1       client
//! ```
//!
//! Across processes each has its own software ConnectX; they swap UDP addresses on the first
//! control connection, and RoCEv2 frames travel between them over UDP. `-p 0` lets the server
//! pick a free TCP port (it prints it). With `-q N` there is one control connection per QP.
//! Between processes a deep queue of large messages (`-t 128` of 4 KiB: 512 frames at once)
//! would overflow the kernel's UDP receive buffer, and a lost frame is retransmitted only
//! after the ACK timeout; so there the client keeps at most
//! [`UDP_FRAMES_IN_FLIGHT`] frames in flight, and leaves out sizes
//! above that many frames (`sizes_for_udp_link`).
//!
//! The client keeps up to `-t` WRs in flight on every QP, asks for a completion every
//! `--cq-mod` WRs (and on the last), and times from the first post to the last completion.
//! The peak is the best rate over any window of at least `-t` messages.

#[path = "support/side.rs"]
mod side;

use clap::Parser;
use mlx5_direct::hw::QpType;
use mlx5_direct::perf::args::{BwArgs, BwTest, PathKind};
use mlx5_direct::perf::progress::Progress;
use mlx5_direct::perf::rendezvous::{sizes_for_udp_link, UDP_FRAMES_IN_FLIGHT};
use mlx5_direct::perf::report::{self, Banner};
use mlx5_direct::perf::stats::BwStats;
use mlx5_direct::perf::{Error, Result};
use mlx5_direct::qp::connect::{
    connect_pair, AbortCode, ConnectParams, Connection, ControlEvent, ControlOnly, PairSide,
    QpLink, RemoteBuffer,
};
use mlx5_direct::qp::{Cq, Qp, RemoteAddr, SendWr, Sge, Wc};
use side::{open_devices, remote, sizes_and_iters, Devices, Rendezvous, Side, SideCfg, UdpLink};
use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// How long the client may wait for a completion before the run is declared stuck.
const STALL: Duration = Duration::from_secs(10);
/// Default largest inline message, capped by what the QP grants.
const DEFAULT_INLINE: u32 = 220;

fn main() -> ExitCode {
    let args = BwArgs::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bw: error: {e}");
            ExitCode::FAILURE
        }
    }
}

struct Plan {
    sizes: Vec<u64>,
    iters: u64,
    qps: u32,
    depth: u32,
    cq_mod: u64,
    inline: u32,
    buf_len: usize,
}

fn plan(a: &BwArgs) -> Result<Plan> {
    let c = &a.common;
    let (sizes, iters) = sizes_and_iters(c, 65536, 5000)?;
    if a.qps == 0 || a.qps > 64 {
        return Err(Error::Usage("-q must be between 1 and 64".into()));
    }
    if a.tx_depth == 0 || a.tx_depth > 8192 {
        return Err(Error::Usage("-t must be between 1 and 8192".into()));
    }
    let max = sizes.iter().copied().max().unwrap_or(8) as usize;
    Ok(Plan {
        sizes,
        iters,
        qps: a.qps,
        depth: a.tx_depth,
        cq_mod: a.cq_mod.clamp(1, a.tx_depth) as u64,
        inline: if a.test == BwTest::Read {
            0
        } else {
            c.inline.unwrap_or(DEFAULT_INLINE)
        },
        buf_len: max.next_multiple_of(64),
    })
}

fn side_cfg(p: &Plan) -> SideCfg {
    SideCfg {
        qp_type: QpType::Rc,
        qps: p.qps,
        sq_depth: p.depth,
        rq_depth: 1,
        inline: p.inline.min(512),
        buf_len: p.buf_len,
        srq: None,
    }
}

/// One message to post.
#[derive(Clone, Copy)]
struct Msg<'a> {
    wr_id: u64,
    test: BwTest,
    remote: RemoteAddr,
    /// The message in the registered buffer.
    sge: Sge,
    /// The same bytes, when the message goes inline.
    inline: Option<&'a [u8]>,
    signaled: bool,
}

/// The post/poll path under measurement: this library's, or libibverbs' (`--path verbs`).
trait Poster {
    /// Post `m` on QP `q`.
    fn post(&mut self, q: usize, m: &Msg<'_>) -> Result<()>;
    /// Poll completions as (QP index, wr_id); an error completion is an error.
    fn poll(&mut self, out: &mut [(usize, u64)]) -> Result<usize>;
}

/// This library's data path.
struct Direct<'a> {
    qps: &'a mut [Qp],
    cq: &'a mut Cq,
    wcs: [Wc; 32],
}

impl Poster for Direct<'_> {
    #[inline]
    fn post(&mut self, q: usize, m: &Msg<'_>) -> Result<()> {
        let wr = match m.test {
            BwTest::Write => SendWr::write(m.wr_id, m.remote),
            BwTest::Read => SendWr::read(m.wr_id, m.remote),
        };
        let wr = if m.signaled { wr.signaled() } else { wr };
        let sge = [m.sge];
        match m.inline {
            Some(bytes) => self.qps[q].post(&wr.inline(bytes))?,
            None => self.qps[q].post(&wr.sges(&sge))?,
        }
        Ok(())
    }

    #[inline]
    fn poll(&mut self, out: &mut [(usize, u64)]) -> Result<usize> {
        let max = out.len().min(self.wcs.len());
        let n = self.cq.poll(&mut *self.qps, &mut self.wcs[..max])?;
        for (o, wc) in out.iter_mut().zip(&self.wcs[..n]) {
            if !wc.is_ok() {
                return Err(Error::completion(wc));
            }
            let q = self
                .qps
                .iter()
                .position(|qp| qp.qpn() == wc.qp_num)
                .unwrap_or(0);
            *o = (q, wc.wr_id);
        }
        Ok(n)
    }
}

/// libibverbs' `ibv_post_send` / `ibv_poll_cq` on the same QPs and CQ.
#[cfg(feature = "verbs")]
struct Verbs<'d> {
    qps: Vec<mlx5_direct::hw::verbs::baseline::BaselineQp<'d>>,
    qpns: Vec<u32>,
    cq: mlx5_direct::hw::verbs::baseline::BaselineCq<'d>,
    done: Vec<mlx5_direct::hw::verbs::baseline::Completion>,
}

#[cfg(feature = "verbs")]
impl Poster for Verbs<'_> {
    fn post(&mut self, q: usize, m: &Msg<'_>) -> Result<()> {
        use mlx5_direct::hw::verbs::baseline::{SendOp, SendWr as VWr, Sge as VSge};
        let op = match m.test {
            BwTest::Write => SendOp::Write {
                remote_addr: m.remote.addr,
                rkey: m.remote.rkey,
            },
            BwTest::Read => SendOp::Read {
                remote_addr: m.remote.addr,
                rkey: m.remote.rkey,
            },
        };
        let sge = [VSge {
            addr: m.sge.addr,
            length: m.sge.length,
            lkey: m.sge.lkey,
        }];
        let mut wr = VWr::new(m.wr_id, op, &sge);
        wr.signaled = m.signaled;
        wr.inline = m.inline.is_some();
        self.qps[q].post_send(&wr)?;
        Ok(())
    }

    fn poll(&mut self, out: &mut [(usize, u64)]) -> Result<usize> {
        let max = out.len().min(self.done.len());
        let n = self.cq.poll(&mut self.done[..max])?;
        for (o, c) in out.iter_mut().zip(&self.done[..n]) {
            if !c.is_success() {
                return Err(Error::Completion {
                    wr_id: c.wr_id,
                    what: "RDMA (verbs)",
                    status: c.status_str(),
                    hint: format!("; vendor syndrome {:#x}", c.vendor_err),
                });
            }
            let q = self.qpns.iter().position(|&n| n == c.qp_num).unwrap_or(0);
            *o = (q, c.wr_id);
        }
        Ok(n)
    }
}

/// Post `iters` messages of `size` on every QP, at most `depth` in flight per QP, and wait for
/// them all; returns the figures. `yield_idle`: give the core away when no completion is ready
/// (on the software ConnectX, whose device thread needs a core to move the frames).
#[allow(clippy::too_many_arguments)]
fn measure(
    poster: &mut dyn Poster,
    buf: &side::Buf,
    test: BwTest,
    peers: &[RemoteBuffer],
    p: &Plan,
    inline: u64,
    size: u64,
    depth: u32,
    yield_idle: bool,
) -> Result<BwStats> {
    let depth = u64::from(depth.max(1));
    // A completion at least every `depth` WRs, or the window never reopens.
    let cq_mod = p.cq_mod.min(depth);
    // One peer buffer per QP.
    let nq = peers.len();
    let payload = vec![0xa5u8; size.min(inline) as usize];
    buf.write(0, &payload);
    let sge = buf.sge(0, size as u32);
    let mut posted = vec![0u64; nq];
    let mut done = vec![0u64; nq];
    let total = p.iters * nq as u64;
    let mut completed = 0u64;
    let mut got = [(0usize, 0u64); 32];
    let window = depth.max(cq_mod);
    let mut best: Option<(u64, Duration)> = None;
    let mut mark = (Instant::now(), 0u64);
    let mut last_progress = Instant::now();
    let mut progress = Progress::new(format!("{size} bytes"), total);
    let start = Instant::now();
    while completed < total {
        for q in 0..nq {
            while posted[q] < p.iters && posted[q] - done[q] < depth {
                let i = posted[q];
                poster.post(
                    q,
                    &Msg {
                        wr_id: i,
                        test,
                        remote: remote(&peers[q], 0),
                        sge,
                        inline: (size <= inline).then_some(&payload[..]),
                        signaled: (i + 1).is_multiple_of(cq_mod) || i + 1 == p.iters,
                    },
                )?;
                posted[q] += 1;
            }
        }
        let n = poster.poll(&mut got)?;
        if n == 0 {
            if last_progress.elapsed() > STALL {
                return Err(Error::Timeout {
                    what: "send completions",
                    secs: STALL.as_secs(),
                });
            }
            if yield_idle {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
            continue;
        }
        last_progress = Instant::now();
        for &(q, wr_id) in &got[..n] {
            // Completions are in order per QP: this one retires every WR up to it.
            let now_done = wr_id + 1;
            completed += now_done.saturating_sub(done[q]);
            done[q] = done[q].max(now_done);
        }
        if completed - mark.1 >= window {
            let now = Instant::now();
            let w = (completed - mark.1, now - mark.0);
            let faster = match best {
                None => true,
                Some((m, d)) => w.0 as f64 / w.1.as_secs_f64() > m as f64 / d.as_secs_f64(),
            };
            if faster {
                best = Some(w);
            }
            mark = (now, completed);
        }
        progress.update(completed & !1023);
    }
    let took = start.elapsed();
    Ok(BwStats::new(size, total, took, best))
}

/// The send queue depth for `size`-byte messages over the UDP link: `-t`, lowered so that all
/// QPs together keep at most [`UDP_FRAMES_IN_FLIGHT`] frames of `mtu` bytes in flight.
fn udp_depth(p: &Plan, size: u64, mtu: u32) -> u32 {
    let frames = size.div_ceil(u64::from(mtu.max(1))).max(1) * u64::from(p.qps.max(1));
    let fit = (UDP_FRAMES_IN_FLIGHT / frames).max(1);
    p.depth.min(fit.min(u64::from(u32::MAX)) as u32)
}

fn check_path(a: &BwArgs, devs: &Devices) -> Result<()> {
    match (a.common.path, devs.is_sim()) {
        (PathKind::Direct, _) | (PathKind::Verbs, false) => Ok(()),
        (PathKind::Verbs, true) => Err(Error::Usage(
            "--path verbs needs a verbs device: the software ConnectX has no libibverbs data \
             path. Use -d mlx5_N (built with --features verbs), or --path direct"
                .into(),
        )),
    }
}

fn banner(
    a: &BwArgs,
    devs: &Devices,
    p: &Plan,
    inline: u32,
    conns: &[Connection],
    udp: Option<&UdpLink>,
) -> String {
    let mut extra = Vec::new();
    if let Some(u) = udp {
        extra.push(("UDP link".into(), u.to_string()));
    }
    for (i, c) in conns.iter().enumerate().take(4) {
        extra.push((
            format!("QP {i}"),
            format!(
                "local QPN {:#08x} PSN {:#08x}, remote QPN {:#08x} PSN {:#08x}",
                c.local().qpn,
                c.local().psn,
                c.peer().qpn,
                c.peer().psn
            ),
        ));
    }
    Banner {
        title: a.test.title(),
        device: &devs.name,
        path: a.common.path.describe(),
        connection: "RC",
        qps: p.qps,
        inline,
        tx_depth: p.depth,
        mtu: conns.first().map_or(0, |c| c.path_mtu().bytes()),
        extra,
    }
    .render()
}

/// `--path verbs`: the same QPs and CQ, driven through libibverbs.
#[cfg(feature = "verbs")]
fn measure_verbs(
    a: &BwArgs,
    devs: &Devices,
    me: &Side,
    peers: &[RemoteBuffer],
    p: &Plan,
    inline: u64,
) -> Result<()> {
    use mlx5_direct::hw::verbs::baseline::{BaselineCq, BaselineQp, Completion};
    let dev = devs
        .verbs
        .as_ref()
        .ok_or_else(|| Error::Usage("--path verbs needs a verbs device".into()))?;
    let qps = me
        .infos
        .iter()
        .map(|i| BaselineQp::new(dev, i.id))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let mut v = Verbs {
        qps,
        qpns: me.infos.iter().map(|i| i.qpn).collect(),
        cq: BaselineCq::new(dev, me.cq_id)?,
        done: vec![Completion::default(); 32],
    };
    for &size in &p.sizes {
        let s = measure(
            &mut v, &me.buf, a.test, peers, p, inline, size, p.depth, false,
        )?;
        say(&report::bw_row(&s, a.report_gbits));
    }
    Ok(())
}

#[cfg(not(feature = "verbs"))]
fn measure_verbs(
    _a: &BwArgs,
    _devs: &Devices,
    _me: &Side,
    _peers: &[RemoteBuffer],
    _p: &Plan,
    _inline: u64,
) -> Result<()> {
    Err(Error::Usage(
        "--path verbs needs the `verbs` feature (rebuild with --features verbs)".into(),
    ))
}

fn run(a: &BwArgs) -> Result<()> {
    let p = plan(a)?;
    let c = &a.common;
    let devs = open_devices(&c.device, c.loopback, c.server.is_some())?;
    let r = run_on(a, &p, &devs);
    if r.is_err() {
        devs.print_driver_bugs("bw");
    }
    r
}

fn run_on(a: &BwArgs, p: &Plan, devs: &Devices) -> Result<()> {
    let c = &a.common;
    check_path(a, devs)?;
    let cfg = side_cfg(p);
    let mut me = Side::new(devs.local.clone(), &cfg)?;
    let params = ConnectParams {
        port: c.ib_port,
        ..ConnectParams::default()
    }
    .with_buffer(me.buf.remote_buffer());
    let mut conns = Vec::new();
    let mut udp = None;
    // In loopback the peer is passive: its data path is never touched, so it connects
    // without one.
    let mut peer_side = None;
    if c.loopback {
        let peer_dev = devs.peer.clone().unwrap_or_else(|| devs.local.clone());
        let peer = Side::new(peer_dev, &cfg)?;
        let pp = ConnectParams::default().with_buffer(peer.buf.remote_buffer());
        for q in 0..p.qps as usize {
            let (ra, rb) = (me.qp_ref(q), peer.qp_ref(q));
            let dev = me.dev.clone();
            let mut la = QpLink::new(&mut me.qps[q], &mut me.cq, |_: &mut _| Ok(()));
            let (ca, _cb) = connect_pair(
                PairSide {
                    dev: &*dev,
                    qp: ra,
                    link: &mut la,
                    params: &params,
                },
                PairSide {
                    dev: &*peer.dev,
                    qp: rb,
                    link: &mut ControlOnly,
                    params: &pp,
                },
            )?;
            conns.push(ca);
        }
        peer_side = Some(peer);
    } else {
        let rv = Rendezvous::new(c.server.as_deref(), c.port)?;
        if let Rendezvous::Server(l) = &rv {
            let port = l.local_addr().map_or(c.port, |a| a.port());
            say(&format!(
                " Waiting for client to connect on TCP port {port} ..."
            ));
        }
        // One control connection per QP, in QP order on both sides.
        for q in 0..p.qps as usize {
            let r = me.qp_ref(q);
            let dev = me.dev.clone();
            let (control, link) = rv.control(devs, params.io_timeout)?;
            udp = udp.or(link);
            let mut link = QpLink::new(&mut me.qps[q], &mut me.cq, |_: &mut _| Ok(()));
            conns.push(Connection::over(control, &*dev, r, &mut link, &params)?);
        }
    }
    let inline = p.inline.min(me.qps[0].max_inline_data());
    say(&banner(a, devs, p, inline, &conns, udp.as_ref()));
    let client = c.loopback || c.server.is_some();
    if !client {
        // The server only serves; the client closes the control connections when done.
        let mut open: Vec<bool> = vec![true; conns.len()];
        while open.iter().any(|&o| o) {
            for (conn, open) in conns.iter_mut().zip(open.iter_mut()) {
                if !*open {
                    continue;
                }
                match conn.poll_control()? {
                    Some(ControlEvent::PeerAborted(AbortCode::Shutdown)) => *open = false,
                    Some(ControlEvent::PeerAborted(code)) => {
                        return Err(Error::Usage(format!(
                            "the client aborted: {}",
                            code.describe()
                        )))
                    }
                    Some(ControlEvent::RebuildRequested { .. }) | None => {}
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        say(report::RESULT_LINE);
        return Ok(());
    }
    let peers: Vec<RemoteBuffer> = conns
        .iter()
        .map(|c| {
            c.remote_buffer()
                .ok_or_else(|| Error::Usage("the peer announced no buffer".into()))
        })
        .collect::<Result<_>>()?;
    let mtu = conns.first().map_or(1024, |c| c.path_mtu().bytes());
    let (sizes, note) = sizes_for_udp_link(&p.sizes, udp.is_some(), mtu)?;
    if udp.is_some() {
        say(&format!(
            " note: at most {UDP_FRAMES_IN_FLIGHT} frames in flight on the UDP link: larger \
             messages go fewer at a time than -t {}",
            p.depth
        ));
    }
    if let Some(n) = note {
        say(&n);
    }
    say(report::bw_header(a.report_gbits));
    let inline = inline as u64;
    match a.common.path {
        PathKind::Direct => {
            let mut d = Direct {
                qps: &mut me.qps,
                cq: &mut me.cq,
                wcs: [Wc::default(); 32],
            };
            let yield_idle = devs.is_sim();
            for &size in &sizes {
                let depth = match udp {
                    Some(_) => udp_depth(p, size, mtu),
                    None => p.depth,
                };
                let s = measure(
                    &mut d, &me.buf, a.test, &peers, p, inline, size, depth, yield_idle,
                )?;
                say(&report::bw_row(&s, a.report_gbits));
            }
        }
        PathKind::Verbs => measure_verbs(a, devs, &me, &peers, p, inline)?,
    }
    say(report::RESULT_LINE);
    for conn in conns {
        if !c.loopback {
            conn.close()?;
        }
    }
    drop(peer_side);
    Ok(())
}

/// Print a line now: a script or test may be waiting for it.
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}
