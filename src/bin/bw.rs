//! `bw`: message rate and bandwidth like perftest's `ib_write_bw` / `ib_read_bw`, through this
//! library's data path, over one or many QPs.
//!
//! ```text
//! bw write --loopback -s 8 -n 100000      both ends here, on the software ConnectX
//! bw write -d mlx5_0 -q 4                 server (passive: it only serves)
//! bw write -d mlx5_0 -q 4 10.0.0.1        client
//! ```
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
use mlx5_direct::perf::report::{self, Banner};
use mlx5_direct::perf::stats::BwStats;
use mlx5_direct::perf::{Error, Result};
use mlx5_direct::qp::connect::{
    connect_pair, ConnectParams, Connection, ControlEvent, ControlOnly, PairSide, QpLink,
    RemoteBuffer,
};
use mlx5_direct::qp::{Cq, Qp, RemoteAddr, SendWr, Sge, Wc};
use side::{open_devices, remote, Devices, Side, SideCfg};
use std::net::TcpListener;
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
    let sizes = if c.all {
        report::all_sizes(u64::MAX)
    } else {
        vec![c.size.unwrap_or(65536)]
    };
    if sizes.iter().any(|&s| s == 0 || s > 1 << 30) {
        return Err(Error::Usage("-s must be between 1 and 1 GiB".into()));
    }
    let iters = c.iters.unwrap_or(5000);
    if iters == 0 {
        return Err(Error::Usage("-n must be at least 1".into()));
    }
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

/// Post `iters` messages of `size` on every QP and wait for them all; returns the figures.
fn measure(
    poster: &mut dyn Poster,
    buf: &side::Buf,
    test: BwTest,
    peers: &[RemoteBuffer],
    p: &Plan,
    inline: u64,
    size: u64,
) -> Result<BwStats> {
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
    let window = (p.depth as u64).max(p.cq_mod);
    let mut best: Option<(u64, Duration)> = None;
    let mut mark = (Instant::now(), 0u64);
    let mut last_progress = Instant::now();
    let mut progress = Progress::new(format!("{size} bytes"), total);
    let start = Instant::now();
    while completed < total {
        for q in 0..nq {
            while posted[q] < p.iters && posted[q] - done[q] < p.depth as u64 {
                let i = posted[q];
                poster.post(
                    q,
                    &Msg {
                        wr_id: i,
                        test,
                        remote: remote(&peers[q], 0),
                        sge,
                        inline: (size <= inline).then_some(&payload[..]),
                        signaled: (i + 1).is_multiple_of(p.cq_mod) || i + 1 == p.iters,
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
            std::hint::spin_loop();
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

fn banner(a: &BwArgs, devs: &Devices, p: &Plan, inline: u32, conns: &[Connection]) -> String {
    let mut extra = Vec::new();
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
        let s = measure(&mut v, &me.buf, a.test, peers, p, inline, size)?;
        println!("{}", report::bw_row(&s, a.report_gbits));
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
    let devs = open_devices(&c.device, c.loopback)?;
    let r = run_on(a, &p, &devs);
    if r.is_err() {
        for b in devs.driver_bugs() {
            eprintln!("bw: the software ConnectX reported a driver bug: {b}");
        }
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
        let listener = if c.server.is_none() {
            let l = TcpListener::bind(("0.0.0.0", c.port)).map_err(|e| Error::Io {
                path: format!("TCP port {}", c.port),
                source: e,
            })?;
            eprintln!(" Waiting for client to connect on TCP port {} ...", c.port);
            Some(l)
        } else {
            None
        };
        for q in 0..p.qps as usize {
            let r = me.qp_ref(q);
            let dev = me.dev.clone();
            let mut link = QpLink::new(&mut me.qps[q], &mut me.cq, |_: &mut _| Ok(()));
            let conn = match (&listener, &c.server) {
                (Some(l), _) => Connection::accept(l, &*dev, r, &mut link, &params)?,
                (None, Some(host)) => {
                    Connection::connect((host.as_str(), c.port), &*dev, r, &mut link, &params)?
                }
                (None, None) => return Err(Error::Usage("neither server nor client".into())),
            };
            conns.push(conn);
        }
    }
    let inline = p.inline.min(me.qps[0].max_inline_data());
    println!("{}", banner(a, devs, p, inline, &conns));
    let client = c.loopback || c.server.is_some();
    if !client {
        // The server only serves; the client closes the control connections when done.
        let mut open = conns.len();
        while open > 0 {
            for conn in conns.iter_mut() {
                if let Some(ControlEvent::PeerAborted(_)) = conn.poll_control()? {
                    open -= 1;
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        println!("{}", report::RESULT_LINE);
        return Ok(());
    }
    let peers: Vec<RemoteBuffer> = conns
        .iter()
        .map(|c| {
            c.remote_buffer()
                .ok_or_else(|| Error::Usage("the peer announced no buffer".into()))
        })
        .collect::<Result<_>>()?;
    println!("{}", report::bw_header(a.report_gbits));
    let inline = inline as u64;
    match a.common.path {
        PathKind::Direct => {
            let mut d = Direct {
                qps: &mut me.qps,
                cq: &mut me.cq,
                wcs: [Wc::default(); 32],
            };
            for &size in &p.sizes {
                let s = measure(&mut d, &me.buf, a.test, &peers, p, inline, size)?;
                println!("{}", report::bw_row(&s, a.report_gbits));
            }
        }
        PathKind::Verbs => measure_verbs(a, devs, &me, &peers, p, inline)?,
    }
    println!("{}", report::RESULT_LINE);
    for conn in conns {
        if !c.loopback {
            conn.close()?;
        }
    }
    drop(peer_side);
    Ok(())
}
