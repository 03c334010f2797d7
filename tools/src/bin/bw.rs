//! `bw`: message rate and bandwidth like perftest's `ib_write_bw` / `ib_read_bw`, through this
//! library's data path, over one or many QPs.
//!
//! ```text
//! bw write                                server (passive: it only serves), software ConnectX
//! bw write 127.0.0.1                      client, in another terminal
//! bw write --loopback -s 8 -n 100000      both ends in one process
//! bw write -d mlx5_0 -q 4                 server on a ConnectX (--features verbs)
//! bw write -d mlx5_0 -q 4 192.0.2.1       client
//! bw write -d rxe0 --path verbs --loopback  libibverbs on Soft-RoCE (tools/rxe-vm)
//! ```
//!
//! `--path verbs` creates its QPs and CQ with `VerbsDevice::create_*_verbs` and posts with
//! `ibv_post_send`, on any verbs device; `--path direct` needs an mlx5 device.
//! `--doorbell bfpost|bf|db` chooses how the direct path rings the doorbell on every QP
//! (`mlx5_qp::DoorbellMode`); the banner names the mode in use. `-I` above what the device
//! grants a QP is refused, naming the largest size it grants.
//!
//! A server and a client started with different flags (test, `-q`, `-s`/`-a`, `-n`) both stop
//! when they connect, naming both values (`mlx5_tools::hello`).
//!
//! Across processes each has its own software ConnectX; they swap UDP addresses on the first
//! control connection, and RoCEv2 frames travel between them over UDP. `-p 0` lets the server
//! pick a free TCP port (it prints it). With `-q N` there is one control connection per QP.
//! Between processes the frames in flight must fit in the receiving UDP socket's buffer (a
//! lost frame is retransmitted only after the ACK timeout): both ends announce the buffer the
//! kernel gave them, and the client keeps at most what the smaller one holds in flight
//! ([`UdpBudget::frames`]: about 2400 frames of 1 KiB with the 4 MiB the software ConnectX
//! asks for, about 60 with the kernel's default 208 KiB), lowering `-t` for large messages
//! and leaving out sizes above that many frames (`sizes_for_udp_link`).
//!
//! The client keeps up to `-t` WRs in flight on every QP, asks for a completion every
//! `--cq-mod` WRs (and on the last), and times from the first post to the last completion.
//! The peak is the best rate over any window of at least `-t` messages.

use mlx5_tools::side;

use clap::Parser;
use mlx5_connect::{
    connect_pair, ConnectParams, Connection, ControlOnly, Link, PairSide, QpLink, QpRef,
    RemoteBuffer,
};
use mlx5_hw::{Device, QpType};
use mlx5_qp::{Cq, DoorbellMode, Qp, RemoteAddr, SendWr, Sge, Wc};
use mlx5_tools::args::{describe_doorbell, BwArgs, BwTest, PathKind};
use mlx5_tools::hello::{RunShape, Sizes, TestKind, Tool};
use mlx5_tools::inline::InlineRequest;
use mlx5_tools::progress::Progress;
use mlx5_tools::rendezvous::{sizes_for_udp_link, UdpBudget};
use mlx5_tools::report::{self, Banner};
use mlx5_tools::serve::{say, serve_until_closed};
use mlx5_tools::stats::BwStats;
use mlx5_tools::{Error, Result};
use side::{
    describe_endpoint, on_devices, remote, sizes_and_iters, Devices, Rendezvous, Side, SideCfg,
    UdpLink,
};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// How long the client may wait for a completion before the run is declared stuck.
const STALL: Duration = Duration::from_secs(10);
/// Default largest inline message, taken down to what the QP grants.
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
    /// What to ask the device for (READ: nothing).
    inline: InlineRequest,
    /// `--doorbell` (direct path only).
    doorbell: Option<DoorbellMode>,
    buf_len: usize,
    /// What the peer process must have been started for.
    shape: RunShape,
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
    let shape = RunShape {
        tool: Tool::Bw,
        test: match a.test {
            BwTest::Write => TestKind::Write,
            BwTest::Read => TestKind::Read,
        },
        qps: a.qps,
        sizes: if c.all {
            Sizes::All
        } else {
            Sizes::One(sizes.first().copied().unwrap_or(65536))
        },
        iters,
    };
    Ok(Plan {
        sizes,
        iters,
        qps: a.qps,
        depth: a.tx_depth,
        cq_mod: a.cq_mod.clamp(1, a.tx_depth) as u64,
        inline: if a.test == BwTest::Read {
            InlineRequest::none()
        } else {
            InlineRequest::new(c.inline, DEFAULT_INLINE)
        },
        doorbell: c.doorbell_mode()?,
        buf_len: max.next_multiple_of(64),
        shape,
    })
}

fn side_cfg(p: &Plan) -> SideCfg {
    SideCfg {
        qp_type: QpType::Rc,
        qps: p.qps,
        sq_depth: p.depth,
        rq_depth: 1,
        inline: p.inline.bytes,
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
    qps: Vec<mlx5_hw::verbs::baseline::BaselineQp<'d>>,
    qpns: Vec<u32>,
    cq: mlx5_hw::verbs::baseline::BaselineCq<'d>,
    done: Vec<mlx5_hw::verbs::baseline::Completion>,
}

#[cfg(feature = "verbs")]
impl Poster for Verbs<'_> {
    fn post(&mut self, q: usize, m: &Msg<'_>) -> Result<()> {
        use mlx5_hw::verbs::baseline::{SendOp, SendWr as VWr, Sge as VSge};
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
/// QPs together keep at most the frames the link holds ([`UdpBudget::frames`]) in flight.
fn udp_depth(p: &Plan, size: u64, budget: &UdpBudget) -> u32 {
    let frames = size.div_ceil(u64::from(budget.mtu.max(1))).max(1) * u64::from(p.qps.max(1));
    let fit = (budget.frames() / frames).max(1);
    p.depth.min(fit.min(u64::from(u32::MAX)) as u32)
}

fn banner(
    a: &BwArgs,
    devs: &Devices,
    p: &Plan,
    inline: u32,
    doorbell: &str,
    conns: &[Connection],
    udp: Option<&UdpLink>,
) -> String {
    let mut extra = vec![("Doorbell".into(), doorbell.to_string())];
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

fn run(a: &BwArgs) -> Result<()> {
    let p = plan(a)?;
    on_devices("bw", &a.common, |devs| run_on(a, &p, devs))
}

fn run_on(a: &BwArgs, p: &Plan, devs: &Devices) -> Result<()> {
    let c = &a.common;
    devs.check_path(c.path)?;
    let how = How {
        a,
        p,
        devs,
        cfg: side_cfg(p),
        gid: devs.gid_index(c)?,
        rv: if c.loopback {
            None
        } else {
            let rv = Rendezvous::new(c.server.as_deref(), c.port)?;
            if let Rendezvous::Server(l) = &rv {
                let port = l.local_addr().map_or(c.port, |a| a.port());
                say(&format!(
                    " Waiting for client to connect on TCP port {port} ..."
                ));
            }
            Some(rv)
        },
    };
    match c.path {
        PathKind::Direct => run_direct(&how),
        PathKind::Verbs => run_verbs(&how),
    }
}

/// What a run is, whichever data path it measures.
struct How<'a> {
    a: &'a BwArgs,
    p: &'a Plan,
    devs: &'a Devices,
    cfg: SideCfg,
    /// Source GID index (RoCE).
    gid: u8,
    /// The control connection to the peer process; `None` in loopback.
    rv: Option<Rendezvous>,
}

impl How<'_> {
    /// The connection parameters of an end that announces `buf`.
    fn params(&self, buf: RemoteBuffer) -> ConnectParams {
        ConnectParams {
            port: self.a.common.ib_port,
            gid_index: self.gid,
            ..ConnectParams::default()
        }
        .with_buffer(buf)
    }
}

/// Hands out, one at a time, the [`Link`] of each local QP for its connect.
trait Links {
    /// QP `q`'s link.
    fn link(&mut self, q: usize) -> Box<dyn Link + '_>;
}

/// The links of this library's data path (no receives: WRITE and READ need none).
struct DirectLinks<'a> {
    qps: &'a mut [Qp],
    cq: &'a mut Cq,
}

impl Links for DirectLinks<'_> {
    fn link(&mut self, q: usize) -> Box<dyn Link + '_> {
        Box::new(QpLink::new(
            &mut self.qps[q],
            &mut *self.cq,
            |_: &mut Qp| Ok(()),
        ))
    }
}

/// Links for QPs whose data path the control path need not reach (the verbs path, whose
/// posts go through libibverbs).
#[cfg(feature = "verbs")]
struct NoLinks;

#[cfg(feature = "verbs")]
impl Links for NoLinks {
    fn link(&mut self, _q: usize) -> Box<dyn Link + '_> {
        Box::new(ControlOnly)
    }
}

/// One end as the control path sees it: its device, QPs and parameters.
struct End<'a> {
    dev: &'a dyn Device,
    qps: Vec<QpRef>,
    params: ConnectParams,
}

/// Connect every local QP: to `peer`'s in this process (loopback), else to the peer
/// process's through `how.rv`, one control connection per QP in QP order on both sides.
fn connect_all(
    how: &How<'_>,
    me: &End<'_>,
    links: &mut dyn Links,
    peer: Option<&End<'_>>,
) -> Result<(Vec<Connection>, Option<UdpLink>)> {
    let mut conns = Vec::new();
    let mut udp = None;
    for (q, &qp) in me.qps.iter().enumerate() {
        let mut link = links.link(q);
        let conn = match (peer, &how.rv) {
            (Some(peer), _) => {
                let (ca, _cb) = connect_pair(
                    PairSide {
                        dev: me.dev,
                        qp,
                        link: &mut *link,
                        params: &me.params,
                    },
                    PairSide {
                        dev: peer.dev,
                        qp: peer.qps[q],
                        link: &mut ControlOnly,
                        params: &peer.params,
                    },
                )?;
                ca
            }
            (None, Some(rv)) => {
                let (control, l) =
                    rv.control_for(how.devs, me.params.io_timeout, Some(&how.p.shape))?;
                udp = udp.or(l);
                Connection::over(control, me.dev, qp, &mut *link, &me.params)?
            }
            (None, None) => {
                return Err(Error::Usage(
                    "nothing to connect to: neither --loopback nor a peer".into(),
                ))
            }
        };
        conns.push(conn);
    }
    Ok((conns, udp))
}

/// This library's data path.
fn run_direct(how: &How<'_>) -> Result<()> {
    let devs = how.devs;
    let (mut me, inline) = direct_side(devs.local.clone(), how)?;
    let end = End {
        dev: &*devs.local,
        qps: (0..me.qps.len()).map(|q| me.qp_ref(q)).collect(),
        params: how.params(me.buf.remote_buffer()),
    };
    // In loopback the peer is passive: its data path is never touched, so it connects
    // without one.
    let peer_side = match how.rv {
        None => Some(direct_side(devs.peer.clone().unwrap_or_else(|| devs.local.clone()), how)?.0),
        Some(_) => None,
    };
    let peer = peer_side.as_ref().map(|s| End {
        dev: &*s.dev,
        qps: (0..s.qps.len()).map(|q| s.qp_ref(q)).collect(),
        params: how.params(s.buf.remote_buffer()),
    });
    let (conns, udp) = {
        let mut links = DirectLinks {
            qps: &mut me.qps,
            cq: &mut me.cq,
        };
        connect_all(how, &end, &mut links, peer.as_ref())?
    };
    let doorbell = match me.doorbell_mode() {
        Some(m) => describe_doorbell(m, how.p.doorbell.is_some()),
        None => String::new(),
    };
    let mut d = Direct {
        qps: &mut me.qps,
        cq: &mut me.cq,
        wcs: [Wc::default(); 32],
    };
    serve_or_measure(how, (inline, &doorbell), conns, udp, &mut d, &me.buf)
}

/// One end on this library's data path: the side and the inline size it can use, with the
/// doorbell mode `--doorbell` asks for. In loopback the passive end gets the same mode, though
/// it never posts.
fn direct_side(dev: std::sync::Arc<dyn Device>, how: &How<'_>) -> Result<(Side, u32)> {
    let (mut side, inline) = Side::with_inline(dev, &how.cfg, how.p.inline)?;
    if let Some(mode) = how.p.doorbell {
        side.set_doorbell_mode(mode)?;
    }
    Ok((side, inline))
}

/// `--path verbs`: QPs created through libibverbs on any verbs device (Soft-RoCE too), posted
/// with `ibv_post_send` and polled with `ibv_poll_cq`.
#[cfg(feature = "verbs")]
fn run_verbs(how: &How<'_>) -> Result<()> {
    use mlx5_hw::verbs::baseline::{BaselineCq, BaselineQp, Completion};
    use side::VerbsSide;
    let verbs = how
        .devs
        .verbs
        .clone()
        .ok_or_else(|| Error::Usage("--path verbs needs a verbs device".into()))?;
    let (me, inline) = VerbsSide::with_inline(verbs.clone(), &how.cfg, how.p.inline)?;
    let end = End {
        dev: &*me.dev,
        qps: (0..me.qps.len()).map(|q| me.qp_ref(q)).collect(),
        params: how.params(me.buf.remote_buffer()),
    };
    // Loopback: the passive end on the same device (rxe and ConnectX deliver packets to their
    // own GID internally).
    let peer_side = match how.rv {
        None => Some(VerbsSide::with_inline(verbs.clone(), &how.cfg, how.p.inline)?.0),
        Some(_) => None,
    };
    let peer = peer_side.as_ref().map(|s| End {
        dev: &*s.dev,
        qps: (0..s.qps.len()).map(|q| s.qp_ref(q)).collect(),
        params: how.params(s.buf.remote_buffer()),
    });
    let (conns, udp) = connect_all(how, &end, &mut NoLinks, peer.as_ref())?;
    let mut v = Verbs {
        qps: me
            .qps
            .iter()
            .map(|q| BaselineQp::new(&verbs, q.id))
            .collect::<std::result::Result<Vec<_>, _>>()?,
        qpns: me.qps.iter().map(|q| q.qpn).collect(),
        cq: BaselineCq::new(&verbs, me.cq.id)?,
        done: vec![Completion::default(); 32],
    };
    let doorbell = "libibverbs' own (ibv_post_send)";
    serve_or_measure(how, (inline, doorbell), conns, udp, &mut v, &me.buf)
}

#[cfg(not(feature = "verbs"))]
fn run_verbs(_how: &How<'_>) -> Result<()> {
    Err(Error::Usage(
        "--path verbs needs the `verbs` feature (rebuild with --features verbs)".into(),
    ))
}

/// With the QPs connected: the server serves until the client closes every control
/// connection; the client (or a loopback run) measures every size through `poster`.
/// `inline` is the inline size the QPs can take, `doorbell` how the banner names their
/// doorbell.
fn serve_or_measure(
    how: &How<'_>,
    (inline, doorbell): (u32, &str),
    mut conns: Vec<Connection>,
    udp: Option<UdpLink>,
    poster: &mut dyn Poster,
    buf: &side::Buf,
) -> Result<()> {
    let (a, p, devs) = (how.a, how.p, how.devs);
    let c = &a.common;
    say(&banner(a, devs, p, inline, doorbell, &conns, udp.as_ref()));
    let client = c.loopback || c.server.is_some();
    if !client {
        // The server only serves; the client closes the control connections when done.
        serve_until_closed(&mut conns)?;
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
    let budget = udp.as_ref().map(|u| u.budget(mtu));
    let (sizes, note) = sizes_for_udp_link(&p.sizes, budget.as_ref())?;
    if let Some(b) = &budget {
        say(&format!(
            " note: the UDP link holds {b}: messages go fewer at a time than -t {} when \
             -t of them would not fit",
            p.depth
        ));
    }
    if let Some(n) = note {
        say(&n);
    }
    say(report::bw_header(a.report_gbits));
    let yield_idle = devs.software;
    for &size in &sizes {
        let depth = match &budget {
            Some(b) => udp_depth(p, size, b),
            None => p.depth,
        };
        let s = measure(
            poster,
            buf,
            a.test,
            &peers,
            p,
            u64::from(inline),
            size,
            depth,
            yield_idle,
        )?;
        say(&report::bw_row(&s, a.report_gbits));
    }
    say(report::RESULT_LINE);
    if !c.loopback {
        for conn in conns {
            conn.close()?;
        }
    }
    Ok(())
}
