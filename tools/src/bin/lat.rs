//! `lat`: ping-pong latency like perftest's `ib_write_lat`, `ib_send_lat` and `ib_read_lat`,
//! through this library's data path.
//!
//! ```text
//! lat write                             server, on the software ConnectX (-d sim)
//! lat write 127.0.0.1                   client, in another terminal
//! lat write --loopback -n 1000          both ends in one process
//! lat send -d mlx5_0                    server on a ConnectX (--features verbs)
//! lat send -d mlx5_0 192.0.2.1          client
//! lat send -d mlx5_0 --path verbs ...   the same through libibverbs, for comparison
//! lat send -d rxe0 --path verbs --loopback   libibverbs on Soft-RoCE (tools/rxe-vm)
//! ```
//!
//! `--path verbs` creates its QPs and CQ with `VerbsDevice::create_*_verbs`, so it runs on any
//! verbs device, Soft-RoCE included; `--path direct` needs an mlx5 device and says so on any
//! other. On RoCE the source GID is `-x`, else a RoCE v2 GID of an IPv4 address.
//! `--doorbell bfpost|bf|db` chooses how the direct path rings the doorbell on both ends
//! (`mlx5_qp::DoorbellMode`), to compare them on hardware; the banner names the mode in use.
//! `-I` above what the device grants a QP is refused, naming the largest size it grants.
//!
//! A server and a client started with different flags (test, `-s`/`-a`, `-n`) both stop when
//! they connect, naming both values (`mlx5_tools::hello`).
//!
//! Across processes each has its own software ConnectX; they swap UDP addresses on the
//! control connection, and RoCEv2 frames travel between them over UDP. `-p 0` lets the server
//! pick a free TCP port (it prints it).
//!
//! WRITE: each side writes the message into the other's buffer and waits for its last byte to
//! change (perftest's method); SEND: each side waits for the receive completion; the figure is
//! half the round trip. READ: the client reads and waits for the completion; the figure is the
//! whole READ. The table has perftest's columns; percentiles come from an HdrHistogram.

use mlx5_tools::side;

use clap::Parser;
use mlx5_connect::{
    connect_pair, ConnectParams, Connection, Link, PairSide, QpLink, QpRef, RemoteBuffer,
};
use mlx5_hw::Device;
use mlx5_hw::QpType;
use mlx5_qp::{Cq, DoorbellMode, Qp, RemoteAddr, SendWr, Sge, Wc};
use mlx5_tools::args::{describe_doorbell, Common, LatArgs, LatTest, PathKind};
use mlx5_tools::hello::{RunShape, Sizes, TestKind, Tool};
use mlx5_tools::inline::InlineRequest;
use mlx5_tools::progress::Progress;
use mlx5_tools::rendezvous::sizes_for_udp_link;
use mlx5_tools::report::{self, Banner};
use mlx5_tools::serve::{say, serve_until_closed};
use mlx5_tools::stats::LatencyStats;
use mlx5_tools::{svg, Error, Result};
use side::{
    describe_endpoint, on_devices, remote, sizes_and_iters, Buf, Devices, Rendezvous, Side,
    SideCfg, UdpLink,
};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long any one wait may take before the run is declared stuck.
const STALL: Duration = Duration::from_secs(10);
/// Default largest inline message, taken down to what the QP grants.
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

/// A completion as the ping-pong sees it.
#[derive(Clone, Copy, Debug, Default)]
struct Done {
    /// A receive (of the peer's SEND), else a send-side completion.
    recv: bool,
    wr_id: u64,
}

/// What one message is.
#[derive(Clone, Copy, Debug)]
enum Op {
    /// RDMA WRITE to this remote address.
    Write(RemoteAddr),
    /// SEND.
    Send,
    /// RDMA READ from this remote address.
    Read(RemoteAddr),
}

/// The post/poll path under measurement: this library's ([`Direct`]), or libibverbs'
/// (`Verbs`, `--path verbs`).
trait LatPath {
    /// Post one signaled WR: `sge` is the local buffer (the READ's destination), `inline` the
    /// same bytes when they go inline.
    fn post(&mut self, wr_id: u64, op: Op, sge: Sge, inline: Option<&[u8]>) -> Result<()>;
    /// Post one receive.
    fn post_recv(&mut self, wr_id: u64, sge: Sge) -> Result<()>;
    /// Poll ready completions; an error completion is an error.
    fn poll(&mut self, out: &mut [Done]) -> Result<usize>;
}

/// This library's data path.
struct Direct<'a> {
    qp: &'a mut Qp,
    cq: &'a mut Cq,
    wcs: [Wc; 16],
}

impl<'a> Direct<'a> {
    fn new(qp: &'a mut Qp, cq: &'a mut Cq) -> Self {
        Direct {
            qp,
            cq,
            wcs: [Wc::default(); 16],
        }
    }
}

impl LatPath for Direct<'_> {
    #[inline]
    fn post(&mut self, wr_id: u64, op: Op, sge: Sge, inline: Option<&[u8]>) -> Result<()> {
        let wr = match op {
            Op::Write(to) => SendWr::write(wr_id, to),
            Op::Send => SendWr::send(wr_id),
            Op::Read(from) => SendWr::read(wr_id, from),
        }
        .signaled();
        let sges = [sge];
        match inline {
            Some(bytes) => self.qp.post(&wr.inline(bytes))?,
            None => self.qp.post(&wr.sges(&sges))?,
        }
        Ok(())
    }

    fn post_recv(&mut self, wr_id: u64, sge: Sge) -> Result<()> {
        self.qp.post_recv(wr_id, std::slice::from_ref(&sge))?;
        Ok(())
    }

    #[inline]
    fn poll(&mut self, out: &mut [Done]) -> Result<usize> {
        let max = out.len().min(self.wcs.len());
        let n = self.cq.poll(&mut *self.qp, &mut self.wcs[..max])?;
        for (o, wc) in out.iter_mut().zip(&self.wcs[..n]) {
            if !wc.is_ok() {
                return Err(Error::completion(wc));
            }
            *o = Done {
                recv: wc.opcode.is_recv(),
                wr_id: wc.wr_id,
            };
        }
        Ok(n)
    }
}

/// Signaled sends a pinger leaves outstanding before it drains: well under the SQ depth
/// (128 WRs) and the CQ (256 entries) the sides are created with.
const MAX_OUTSTANDING_SENDS: u64 = 64;

/// One end's data path during a ping-pong.
struct Pinger<'a, P> {
    path: P,
    buf: &'a Buf,
    remote: RemoteBuffer,
    /// Offset of the receive half of both buffers (the send half starts at 0).
    half: usize,
    inline: u32,
    payload: Vec<u8>,
    next_wr: u64,
    sends_posted: u64,
    sends_done: u64,
    recvs: u64,
    done: [Done; 16],
    /// Give the core away while waiting instead of spinning: on a software device, whose work
    /// needs a core (the software ConnectX's thread: two processes on two cores are four busy
    /// threads; Soft-RoCE's kernel tasks).
    yield_idle: bool,
}

impl<'a, P: LatPath> Pinger<'a, P> {
    fn new(path: P, buf: &'a Buf, remote: RemoteBuffer, inline: u32, p: &Plan) -> Self {
        Pinger {
            path,
            buf,
            remote,
            half: p.half,
            inline,
            payload: vec![0; inline as usize + 1],
            next_wr: 0,
            sends_posted: 0,
            sends_done: 0,
            recvs: 0,
            done: [Done::default(); 16],
            yield_idle: false,
        }
    }

    /// Post one message of `size` bytes ending in `stamp`: an RDMA WRITE into the peer's
    /// receive half, or a SEND.
    fn post_msg(&mut self, test: LatTest, size: usize, stamp: u8) -> Result<()> {
        // Every send is signaled, and `wait_msg` drains only every 64 spins: when the peer
        // answers sooner, nothing drains, and the completions would overrun the CQ (sized for
        // `sq_depth` WRs; a small WQE takes one block, so the SQ holds more of them).
        // Retire before posting past the bound.
        if self.sends_posted - self.sends_done >= MAX_OUTSTANDING_SENDS {
            self.wait("send completions", 1, |p| {
                p.sends_posted - p.sends_done < MAX_OUTSTANDING_SENDS
            })?;
        }
        let id = self.next_wr;
        self.next_wr += 1;
        let op = match test {
            LatTest::Write => Op::Write(remote(&self.remote, self.half as u64)),
            _ => Op::Send,
        };
        let sge = self.buf.sge(0, size as u32);
        if size as u32 <= self.inline {
            self.payload[size - 1] = stamp;
            self.path.post(id, op, sge, Some(&self.payload[..size]))?;
        } else {
            self.buf.write_u8(size - 1, stamp);
            self.path.post(id, op, sge, None)?;
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
            if d.recv {
                self.recvs += 1;
                let sge = self.buf.sge(self.half, self.half as u32);
                self.path.post_recv(d.wr_id, sge)?;
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
    ) -> Result<()> {
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            if done(self) {
                return Ok(());
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(every) {
                self.drain()?;
                if spins.is_multiple_of(65536) && start.elapsed() > STALL {
                    return Err(Error::Timeout {
                        what,
                        secs: STALL.as_secs(),
                    });
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
    fn wait_msg(&mut self, test: LatTest, size: usize, stamp: u8) -> Result<()> {
        match test {
            LatTest::Write => {
                let off = self.half + size - 1;
                self.wait("the peer's RDMA WRITE", 64, |p| p.buf.read_u8(off) == stamp)
            }
            _ => {
                let want = self.recvs + 1;
                self.wait("the peer's SEND", 1, |p| p.recvs >= want)
            }
        }
    }

    /// One RDMA READ of `size` bytes from the peer's send half, waited for.
    fn read(&mut self, size: usize) -> Result<()> {
        let id = self.next_wr;
        self.next_wr += 1;
        let sge = self.buf.sge(self.half, size as u32);
        self.path
            .post(id, Op::Read(remote(&self.remote, 0)), sge, None)?;
        self.sends_posted += 1;
        let want = self.sends_posted;
        self.wait("the RDMA READ's completion", 1, |p| p.sends_done >= want)
    }

    /// Wait for every send to complete (between sizes, outside the timed loops).
    fn settle(&mut self) -> Result<()> {
        let want = self.sends_posted;
        self.wait("send completions", 1, |p| p.sends_done >= want)
    }
}

/// The run's plan, from the arguments.
struct Plan {
    test: LatTest,
    sizes: Vec<u64>,
    iters: u64,
    /// What to ask the device for (READ: nothing).
    inline: InlineRequest,
    /// `--doorbell` (direct path only).
    doorbell: Option<DoorbellMode>,
    half: usize,
    /// What the peer process must have been started for.
    shape: RunShape,
}

fn plan(args: &LatArgs) -> Result<Plan> {
    let c = &args.common;
    let (sizes, iters) = sizes_and_iters(c, 2, 1000)?;
    let max = sizes.iter().copied().max().unwrap_or(2) as usize;
    let shape = RunShape {
        tool: Tool::Lat,
        test: match args.test {
            LatTest::Write => TestKind::Write,
            LatTest::Send => TestKind::Send,
            LatTest::Read => TestKind::Read,
        },
        qps: 1,
        sizes: if c.all {
            Sizes::All
        } else {
            Sizes::One(sizes.first().copied().unwrap_or(2))
        },
        iters,
    };
    Ok(Plan {
        test: args.test,
        sizes,
        iters,
        inline: if args.test == LatTest::Read {
            InlineRequest::none()
        } else {
            InlineRequest::new(c.inline, DEFAULT_INLINE)
        },
        doorbell: c.doorbell_mode()?,
        half: max.next_multiple_of(64),
        shape,
    })
}

fn side_cfg(p: &Plan) -> SideCfg {
    SideCfg {
        qp_type: QpType::Rc,
        qps: 1,
        sq_depth: 128,
        rq_depth: RECV_DEPTH,
        inline: p.inline.bytes,
        buf_len: 2 * p.half,
        srq: None,
    }
}

/// One end on this library's data path: the side, the inline size it can use, with the
/// doorbell mode `--doorbell` asks for.
fn direct_side(dev: Arc<dyn Device>, cfg: &SideCfg, p: &Plan) -> Result<(Side, u32)> {
    let (mut side, inline) = Side::with_inline(dev, cfg, p.inline)?;
    if let Some(mode) = p.doorbell {
        side.set_doorbell_mode(mode)?;
    }
    Ok((side, inline))
}

/// The banner's doorbell line: the direct path's mode (as `--doorbell` chose it, or the QP's
/// default), or libibverbs' own.
fn doorbell_line(p: &Plan, mode: Option<DoorbellMode>) -> String {
    match mode {
        Some(m) => describe_doorbell(m, p.doorbell.is_some()),
        None => "libibverbs' own (ibv_post_send)".into(),
    }
}

/// The closure that posts the receives (SEND test) when the QP reaches Init.
fn receives(test: LatTest, sge: Sge) -> impl FnMut(&mut Qp) -> mlx5_qp::Result<()> {
    move |qp: &mut Qp| {
        if test == LatTest::Send {
            for i in 0..RECV_DEPTH as u64 {
                qp.post_recv(i, std::slice::from_ref(&sge))?;
            }
        }
        Ok(())
    }
}

/// What connecting one end needs, taken from its [`Side`] before its data path is borrowed.
struct EndInfo {
    dev: Arc<dyn Device>,
    qp: QpRef,
    params: ConnectParams,
    /// The receive half: where the peer's messages land.
    recv: Sge,
}

/// `gid_index`: the source GID on a RoCE port ([`Devices::gid_index`]).
fn end_info(
    dev: Arc<dyn Device>,
    qp: QpRef,
    buf: &Buf,
    c: &Common,
    p: &Plan,
    gid_index: u8,
) -> EndInfo {
    EndInfo {
        dev,
        qp,
        params: ConnectParams {
            port: c.ib_port,
            gid_index,
            ..ConnectParams::default()
        }
        .with_buffer(buf.remote_buffer()),
        recv: buf.sge(p.half, p.half as u32),
    }
}

/// Connect the two ends of a loopback run.
fn connect_loopback(
    a: &EndInfo,
    la: &mut dyn Link,
    b: &EndInfo,
    lb: &mut dyn Link,
) -> Result<(Connection, Connection)> {
    Ok(connect_pair(
        PairSide {
            dev: &*a.dev,
            qp: a.qp,
            link: la,
            params: &a.params,
        },
        PairSide {
            dev: &*b.dev,
            qp: b.qp,
            link: lb,
            params: &b.params,
        },
    )?)
}

/// Connect this end to the peer process through `rv`, which must have been started for the
/// same run (`shape`).
fn connect_end(
    me: &EndInfo,
    link: &mut dyn Link,
    rv: &Rendezvous,
    devs: &Devices,
    shape: &RunShape,
) -> Result<(Connection, Option<UdpLink>)> {
    let (control, udp) = rv.control_for(devs, me.params.io_timeout, Some(shape))?;
    let conn = Connection::over(control, &*me.dev, me.qp, link, &me.params)?;
    Ok((conn, udp))
}

fn banner(
    args: &LatArgs,
    devs: &Devices,
    inline: u32,
    doorbell: &str,
    conn: &Connection,
    udp: Option<&UdpLink>,
) -> String {
    let mtu = conn.path_mtu().bytes();
    let mut extra = vec![
        ("Doorbell".into(), doorbell.to_string()),
        ("local address".into(), describe_endpoint(conn.local())),
        ("remote address".into(), describe_endpoint(conn.peer())),
    ];
    if let Some(u) = udp {
        extra.push(("UDP link".into(), u.to_string()));
    }
    Banner {
        title: args.test.title(),
        device: &devs.name,
        path: args.common.path.describe(),
        connection: "RC",
        qps: 1,
        inline,
        tx_depth: 1,
        mtu,
        extra,
    }
    .render()
}

fn run(args: &LatArgs) -> Result<()> {
    let p = plan(args)?;
    on_devices("lat", &args.common, |devs| run_on(args, &p, devs))
}

fn run_on(args: &LatArgs, p: &Plan, devs: &Devices) -> Result<()> {
    let c = &args.common;
    devs.check_path(c.path)?;
    let gid = devs.gid_index(c)?;
    let cfg = side_cfg(p);
    let rv = if c.loopback {
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
    };
    match c.path {
        PathKind::Direct => run_direct(args, p, devs, &cfg, gid, rv.as_ref()),
        PathKind::Verbs => run_verbs(args, p, devs, &cfg, gid, rv.as_ref()),
    }
}

/// This library's data path: both ends here (`rv` is `None`) or this end of two processes.
fn run_direct(
    args: &LatArgs,
    p: &Plan,
    devs: &Devices,
    cfg: &SideCfg,
    gid: u8,
    rv: Option<&Rendezvous>,
) -> Result<()> {
    let c = &args.common;
    let (mut a, inline) = direct_side(devs.local.clone(), cfg, p)?;
    let doorbell = doorbell_line(p, a.doorbell_mode());
    let ia = end_info(a.dev.clone(), a.qp_ref(0), &a.buf, c, p, gid);
    let Side { qps, cq, buf, .. } = &mut a;
    let Some(rv) = rv else {
        let peer_dev = devs.peer.clone().unwrap_or_else(|| devs.local.clone());
        let (mut b, inline_b) = direct_side(peer_dev, cfg, p)?;
        let ib = end_info(b.dev.clone(), b.qp_ref(0), &b.buf, c, p, gid);
        let Side {
            qps: qps_b,
            cq: cq_b,
            buf: buf_b,
            ..
        } = &mut b;
        let (ca, cb) = {
            let mut la = QpLink::new(&mut qps[0], cq, receives(p.test, ia.recv));
            let mut lb = QpLink::new(&mut qps_b[0], cq_b, receives(p.test, ib.recv));
            connect_loopback(&ia, &mut la, &ib, &mut lb)?
        };
        let inline = inline.min(inline_b);
        let mut pa = Pinger::new(
            Direct::new(&mut qps[0], cq),
            buf,
            buffer_of(&ca)?,
            inline,
            p,
        );
        let mut pb = Pinger::new(
            Direct::new(&mut qps_b[0], cq_b),
            buf_b,
            buffer_of(&cb)?,
            inline,
            p,
        );
        (pa.yield_idle, pb.yield_idle) = (devs.software, devs.software);
        return measure_loopback(args, p, devs, pa, pb, &ca, &doorbell);
    };
    let (conn, udp) = {
        let mut link = QpLink::new(&mut qps[0], cq, receives(p.test, ia.recv));
        connect_end(&ia, &mut link, rv, devs, &p.shape)?
    };
    let mut me = Pinger::new(
        Direct::new(&mut qps[0], cq),
        buf,
        buffer_of(&conn)?,
        inline,
        p,
    );
    me.yield_idle = devs.software;
    measure_end(args, p, devs, me, conn, udp, rv.is_client(), &doorbell)
}

/// Both ends here: A pings, B answers, A measures.
fn measure_loopback<P: LatPath, Q: LatPath>(
    args: &LatArgs,
    p: &Plan,
    devs: &Devices,
    mut pa: Pinger<'_, P>,
    mut pb: Pinger<'_, Q>,
    ca: &Connection,
    doorbell: &str,
) -> Result<()> {
    println!("{}", banner(args, devs, pa.inline, doorbell, ca, None));
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
    finish(args, last)
}

/// This end of a run across processes: the client pings and measures, the server answers
/// (READ: the server only serves) until the client says goodbye.
#[allow(clippy::too_many_arguments)]
fn measure_end<P: LatPath>(
    args: &LatArgs,
    p: &Plan,
    devs: &Devices,
    mut me: Pinger<'_, P>,
    mut conn: Connection,
    udp: Option<UdpLink>,
    client: bool,
    doorbell: &str,
) -> Result<()> {
    say(&banner(
        args,
        devs,
        me.inline,
        doorbell,
        &conn,
        udp.as_ref(),
    ));
    // Both ends leave out the same sizes, so they stay in step.
    let mtu = conn.path_mtu().bytes();
    let budget = udp.as_ref().map(|u| u.budget(mtu));
    let (sizes, note) = sizes_for_udp_link(&p.sizes, budget.as_ref())?;
    if let Some(n) = note {
        say(&n);
    }
    if client {
        say(report::LAT_HEADER);
    }
    let mut last = None;
    let mut stamp = 0u8;
    for &size in &sizes {
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
    if client {
        conn.close()?;
        return finish(args, last);
    }
    // The client says when it is done (READ: the server only serves until then).
    serve_until_closed(std::slice::from_mut(&mut conn))?;
    say(report::RESULT_LINE);
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
    say(&report::lat_row(&s));
    Some(s)
}

fn finish(args: &LatArgs, last: Option<LatencyStats>) -> Result<()> {
    say(report::RESULT_LINE);
    if let Some(s) = &last {
        say(&report::lat_percentiles(s));
        if let Some(path) = &args.histogram {
            std::fs::write(path, svg::histogram_svg(args.test.title(), s)).map_err(|e| {
                Error::Io {
                    path: path.display().to_string(),
                    source: e,
                }
            })?;
            say(&format!(" histogram written to {}", path.display()));
        }
    }
    Ok(())
}

/// `--path verbs` needs the `verbs` feature.
#[cfg(not(feature = "verbs"))]
fn run_verbs(
    _args: &LatArgs,
    _p: &Plan,
    _devs: &Devices,
    _cfg: &SideCfg,
    _gid: u8,
    _rv: Option<&Rendezvous>,
) -> Result<()> {
    Err(Error::Usage(
        "--path verbs needs the `verbs` feature (rebuild with --features verbs)".into(),
    ))
}

#[cfg(feature = "verbs")]
use verbs_path::run_verbs;

/// `--path verbs`: the same QPs and CQs, driven through libibverbs' `ibv_post_send`,
/// `ibv_post_recv` and `ibv_poll_cq` (`mlx5_hw::verbs::baseline`), as perftest drives them.
#[cfg(feature = "verbs")]
mod verbs_path {
    use super::*;
    use mlx5_hw::verbs::baseline::{
        BaselineCq, BaselineQp, Completion, SendOp, SendWr as VWr, Sge as VSge,
    };
    use mlx5_tools::side::VerbsSide;

    /// `IBV_WC_RECV`: every receive opcode has this bit (rdma-core `libibverbs/verbs.h`,
    /// `enum ibv_wc_opcode`: "consumers can test if a completion is a receive by testing
    /// (opcode & IBV_WC_RECV)").
    const IBV_WC_RECV: u32 = 1 << 7;

    fn vsge(s: Sge) -> VSge {
        VSge {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        }
    }

    /// libibverbs' data path on one QP and its CQ.
    pub(super) struct Verbs<'d> {
        qp: BaselineQp<'d>,
        cq: BaselineCq<'d>,
        done: [Completion; 16],
    }

    impl LatPath for Verbs<'_> {
        fn post(&mut self, wr_id: u64, op: Op, sge: Sge, inline: Option<&[u8]>) -> Result<()> {
            let op = match op {
                Op::Write(to) => SendOp::Write {
                    remote_addr: to.addr,
                    rkey: to.rkey,
                },
                Op::Send => SendOp::Send,
                Op::Read(from) => SendOp::Read {
                    remote_addr: from.addr,
                    rkey: from.rkey,
                },
            };
            // IBV_SEND_INLINE copies from the SGE's address: the bytes must be there.
            let sges = [match inline {
                Some(bytes) => VSge {
                    addr: bytes.as_ptr() as u64,
                    length: bytes.len() as u32,
                    lkey: sge.lkey,
                },
                None => vsge(sge),
            }];
            let mut wr = VWr::new(wr_id, op, &sges);
            wr.inline = inline.is_some();
            self.qp.post_send(&wr)?;
            Ok(())
        }

        fn post_recv(&mut self, wr_id: u64, sge: Sge) -> Result<()> {
            self.qp.post_recv(wr_id, &[vsge(sge)])?;
            Ok(())
        }

        fn poll(&mut self, out: &mut [Done]) -> Result<usize> {
            let max = out.len().min(self.done.len());
            let n = self.cq.poll(&mut self.done[..max])?;
            for (o, c) in out.iter_mut().zip(&self.done[..n]) {
                if !c.is_success() {
                    return Err(Error::Completion {
                        wr_id: c.wr_id,
                        what: "verbs work request",
                        status: c.status_str(),
                        hint: format!("; vendor syndrome {:#x}", c.vendor_err),
                    });
                }
                *o = Done {
                    recv: c.opcode & IBV_WC_RECV != 0,
                    wr_id: c.wr_id,
                };
            }
            Ok(n)
        }
    }

    /// The control path's view of a verbs data path: receives are posted through
    /// `ibv_post_recv` when the QP reaches Init, so none is missing when the peer starts.
    struct VerbsLink<'q, 'd> {
        qp: &'q mut BaselineQp<'d>,
        test: LatTest,
        recv: Sge,
        /// Why posting a receive failed (the link's error type cannot carry it).
        failed: Option<mlx5_hw::Error>,
    }

    impl Link for VerbsLink<'_, '_> {
        fn set_state(&mut self, _state: mlx5_hw::QpState) {}
        fn post_receives(&mut self) -> mlx5_qp::Result<()> {
            if self.test != LatTest::Send {
                return Ok(());
            }
            for i in 0..RECV_DEPTH as u64 {
                if let Err(e) = self.qp.post_recv(i, &[vsge(self.recv)]) {
                    self.failed = Some(e);
                    return Err(mlx5_qp::Error::BadLayout("ibv_post_recv refused a receive"));
                }
            }
            Ok(())
        }
        fn poll(&mut self, _out: &mut [Wc]) -> mlx5_qp::Result<usize> {
            Ok(0)
        }
        fn flush_outstanding(&mut self, _out: &mut [Wc]) -> mlx5_qp::Result<usize> {
            Ok(0)
        }
    }

    impl<'q, 'd> VerbsLink<'q, 'd> {
        fn new(qp: &'q mut BaselineQp<'d>, test: LatTest, recv: Sge) -> Self {
            VerbsLink {
                qp,
                test,
                recv,
                failed: None,
            }
        }
        /// The real cause of a failed connect, when it was a receive.
        fn cause(&mut self, e: Error) -> Error {
            self.failed.take().map_or(e, Error::from)
        }
    }

    fn verbs<'d>((qp, cq): (BaselineQp<'d>, BaselineCq<'d>)) -> Verbs<'d> {
        Verbs {
            qp,
            cq,
            done: [Completion::default(); 16],
        }
    }

    fn verbs_end(s: &VerbsSide, c: &Common, p: &Plan, gid: u8) -> EndInfo {
        end_info(s.dev.clone(), s.qp_ref(0), &s.buf, c, p, gid)
    }

    pub(super) fn run_verbs(
        args: &LatArgs,
        p: &Plan,
        devs: &Devices,
        cfg: &SideCfg,
        gid: u8,
        rv: Option<&Rendezvous>,
    ) -> Result<()> {
        let c = &args.common;
        let dev = devs
            .verbs
            .clone()
            .ok_or_else(|| Error::Usage("--path verbs needs a verbs device".into()))?;
        let doorbell = doorbell_line(p, None);
        let (a, inline) = VerbsSide::with_inline(dev.clone(), cfg, p.inline)?;
        let ia = verbs_end(&a, c, p, gid);
        let (mut qa, cqa) = a.claim(0)?;
        let Some(rv) = rv else {
            // Both ends on this device: rxe and ConnectX deliver a packet to their own GID
            // internally (loopback), so one port is enough.
            let (b, inline_b) = VerbsSide::with_inline(dev, cfg, p.inline)?;
            let ib = verbs_end(&b, c, p, gid);
            let (mut qb, cqb) = b.claim(0)?;
            let (ca, cb) = {
                let mut la = VerbsLink::new(&mut qa, p.test, ia.recv);
                let mut lb = VerbsLink::new(&mut qb, p.test, ib.recv);
                connect_loopback(&ia, &mut la, &ib, &mut lb).map_err(|e| lb.cause(la.cause(e)))?
            };
            let inline = inline.min(inline_b);
            let mut pa = Pinger::new(verbs((qa, cqa)), &a.buf, buffer_of(&ca)?, inline, p);
            let mut pb = Pinger::new(verbs((qb, cqb)), &b.buf, buffer_of(&cb)?, inline, p);
            (pa.yield_idle, pb.yield_idle) = (devs.software, devs.software);
            return measure_loopback(args, p, devs, pa, pb, &ca, &doorbell);
        };
        let (conn, udp) = {
            let mut link = VerbsLink::new(&mut qa, p.test, ia.recv);
            connect_end(&ia, &mut link, rv, devs, &p.shape).map_err(|e| link.cause(e))?
        };
        let mut me = Pinger::new(verbs((qa, cqa)), &a.buf, buffer_of(&conn)?, inline, p);
        me.yield_idle = devs.software;
        measure_end(args, p, devs, me, conn, udp, rv.is_client(), &doorbell)
    }
}
