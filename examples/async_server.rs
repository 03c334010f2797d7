//! A tokio server on the software ConnectX serving several clients, event-driven: each client
//! has its own RC QP, the server's CQs (one per client) all report to one completion channel,
//! and one task serves them all (`ctx::AsyncChannel`). Requests travel as SEND; each reply is
//! an RDMA WRITE with immediate into the client's reply buffer, the immediate naming the
//! request. Every task sleeps on its channel's fd between completions; nothing spins.
//!
//! ```text
//! cargo run --example async_server --features tokio -- --loopback      both ends here
//! cargo run --example async_server --features tokio                    server
//! cargo run --example async_server --features tokio -- 127.0.0.1       client (another shell)
//! ```
//!
//! Flags: `-c CLIENTS` (default 4, at most 64), `-n REQUESTS` per client (default 100), `-p
//! PORT` (TCP, default 18517), `--busy-polls N` (polls before each sleep, default 0). The
//! server and the client must be given the same `-c` and `-n`. Each client keeps up to
//! [`WINDOW`] requests in flight and checks every reply byte for byte; the server checks every
//! request. `--loopback` runs the server and the clients on two software ConnectX devices of one
//! fabric in this process and exits 0 once every reply was checked. As a server and a client,
//! each process has its own software ConnectX and the frames travel between them over UDP (the
//! addresses are swapped on each client's control connection first, [`linked_control`]).

use mlx5_direct::connect::{
    connect_qps_with, qp_ref, ConnectParams, Connection, Control, QpLink, RemoteBuffer,
};
use mlx5_direct::ctx::{AsyncChannel, AsyncCq};
use mlx5_direct::datapath::{RemoteAddr, SendWr, Wc, WcOpcode};
use mlx5_direct::sim::DeviceConfig;
use mlx5_direct::{Context, Cq, Mr, Pd, Qp, QpInit, SimFabric};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::process::ExitCode;
use std::time::{Duration, Instant};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Bytes per request and per reply.
const SLOT: usize = 64;
/// Requests a client keeps in flight (receives the server keeps posted per client).
const WINDOW: u64 = 4;
/// How long the whole run may take before it is called stuck.
const DEADLINE: Duration = Duration::from_secs(60);

#[derive(Clone, Debug)]
struct Opts {
    clients: usize,
    requests: u64,
    port: u16,
    busy_polls: u32,
    loopback: bool,
    server: Option<String>,
}

const USAGE: &str =
    "usage: async_server --loopback [-c CLIENTS] [-n REQUESTS] [--busy-polls N]\n       \
                     async_server [-p PORT] [-c CLIENTS] [-n REQUESTS]            server\n       \
                     async_server HOST [-p PORT] [-c CLIENTS] [-n REQUESTS]       client";

fn parse() -> std::result::Result<Opts, String> {
    let mut o = Opts {
        clients: 4,
        requests: 100,
        port: 18517,
        busy_polls: 0,
        loopback: false,
        server: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = |what: &str| {
            args.next()
                .ok_or_else(|| format!("{a} needs {what}\n{USAGE}"))
        };
        let bad = |v: &str| format!("{a} {v}: not a number in range\n{USAGE}");
        match a.as_str() {
            "--loopback" => o.loopback = true,
            "-c" => {
                let v = val("a count")?;
                o.clients = v
                    .parse()
                    .ok()
                    .filter(|n| (1..=64).contains(n))
                    .ok_or_else(|| bad(&v))?;
            }
            "-n" => {
                let v = val("a count")?;
                o.requests = v
                    .parse()
                    .ok()
                    .filter(|n| (1..=1_000_000).contains(n))
                    .ok_or_else(|| bad(&v))?;
            }
            "-p" => {
                let v = val("a port")?;
                o.port = v.parse().map_err(|_| bad(&v))?;
            }
            "--busy-polls" => {
                let v = val("a count")?;
                o.busy_polls = v.parse().map_err(|_| bad(&v))?;
            }
            "-h" | "--help" => return Err(USAGE.into()),
            h if !h.starts_with('-') && o.server.is_none() => o.server = Some(h.to_string()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    if o.loopback && o.server.is_some() {
        return Err(format!("--loopback runs both ends: no HOST\n{USAGE}"));
    }
    Ok(o)
}

fn main() -> ExitCode {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("async_server: FAILED: no tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let r = rt.block_on(async {
        match tokio::time::timeout(DEADLINE, run(&o)).await {
            Ok(r) => r,
            Err(_) => Err(format!("stuck: not done after {DEADLINE:?}").into()),
        }
    });
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("async_server: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Request `k` of client `c`: its number (8 bytes, big-endian), then text, padded.
fn request(c: usize, k: u64) -> [u8; SLOT] {
    let mut m = [b'.'; SLOT];
    m[..8].copy_from_slice(&k.to_be_bytes());
    let t = format!(" request {k} from client {c}");
    m[8..8 + t.len()].copy_from_slice(t.as_bytes());
    m
}

/// The reply to request `k` of client `c`.
fn reply(c: usize, k: u64) -> [u8; SLOT] {
    let mut m = [b'-'; SLOT];
    let t = format!("reply to request {k} of client {c}");
    m[..t.len()].copy_from_slice(t.as_bytes());
    m
}

fn remote_buffer(mr: &Mr) -> RemoteBuffer {
    RemoteBuffer {
        addr: mr.addr(),
        rkey: mr.rkey(),
        len: mr.len() as u64,
    }
}

/// What the server holds for one client.
struct ServerConn {
    qp: Qp,
    cq: Cq,
    /// The client's reply buffer (`WINDOW` slots).
    reply_to: RemoteBuffer,
}

/// The server's side: its context, PD and the receive slots of every client (`WINDOW` each).
struct ServerSide {
    ctx: Context,
    pd: Pd,
    recv: Mr,
}

impl ServerSide {
    fn new(ctx: Context, clients: usize) -> Result<ServerSide> {
        let pd = ctx.alloc_pd()?;
        let recv = pd.alloc_mr(clients * WINDOW as usize * SLOT)?;
        Ok(ServerSide { ctx, pd, recv })
    }

    fn qp_for(&self, ch: &mlx5_direct::ctx::CompChannel) -> Result<(Qp, Cq)> {
        let cq = self.ctx.create_cq_on(4 * WINDOW as u32, ch)?;
        let qp = self.pd.create_qp(
            &QpInit::rc(&cq)
                .max_send_wr(2 * WINDOW as u32)
                .max_recv_wr(WINDOW as u32)
                .max_inline_data(SLOT as u32),
        )?;
        Ok((qp, cq))
    }
}

/// Post receive `j` of client `c`'s window on its server QP.
fn post_server_recv(qp: &mut mlx5_direct::datapath::Qp, recv: &Mr, c: usize, j: u64) -> Result<()> {
    let sge = recv.sge((c * WINDOW as usize + j as usize) * SLOT, SLOT as u32)?;
    qp.post_recv(j, &[sge])?;
    Ok(())
}

/// Serve every client until each has had `requests` replies: one task, one channel, one CQ per
/// client on it.
async fn serve(
    side: ServerSide,
    ch: mlx5_direct::ctx::CompChannel,
    conns: Vec<ServerConn>,
    requests: u64,
    busy_polls: u32,
) -> Result<()> {
    let mut ach = AsyncChannel::new(&ch)?;
    ach.set_busy_polls(busy_polls);
    let n = conns.len();
    let mut qps = Vec::with_capacity(n);
    let mut peers = Vec::with_capacity(n);
    // The index each CQ's completions come with → the client.
    let mut client_of = vec![usize::MAX; n];
    for (c, conn) in conns.into_iter().enumerate() {
        let at = ach.add(conn.cq)?;
        if at >= client_of.len() {
            client_of.resize(at + 1, usize::MAX);
        }
        client_of[at] = c;
        qps.push(conn.qp);
        peers.push(conn.reply_to);
    }
    let mut next = vec![0u64; n];
    let (mut served, mut written) = (0u64, 0u64);
    let total = requests * n as u64;
    let mut buf = [0u8; SLOT];
    while served < total || written < total {
        let (at, wc) = ach.next(&mut qps[..]).await?;
        let c = client_of
            .get(at)
            .copied()
            .filter(|&c| c < n)
            .ok_or("a completion of a CQ not served")?;
        check(&wc, &format!("server, client {c}"))?;
        match wc.opcode() {
            WcOpcode::RdmaWrite => written += 1,
            WcOpcode::Recv => {
                let j = wc.wr_id();
                side.recv
                    .read_into((c * WINDOW as usize + j as usize) * SLOT, &mut buf)?;
                let k = next[c];
                if wc.byte_len() as usize != SLOT || buf != request(c, k) {
                    return Err(format!(
                        "server: request {k} of client {c} arrived wrong: {:?}",
                        String::from_utf8_lossy(&buf)
                    )
                    .into());
                }
                next[c] += 1;
                served += 1;
                post_server_recv(&mut qps[c], &side.recv, c, j)?;
                // The reply goes inline (copied into the WQE): no source buffer to reuse.
                let to = RemoteAddr::new(peers[c].addr + (k % WINDOW) * SLOT as u64, peers[c].rkey);
                let r = reply(c, k);
                let imm = u32::try_from(k).map_err(|_| "request number past 32 bits")?;
                qps[c].post(&SendWr::write_imm(k, to, imm).inline(&r).signaled())?;
            }
            other => return Err(format!("server: unexpected {} completion", other.name()).into()),
        }
    }
    println!("server: {served} requests from {n} clients served, {written} replies written");
    Ok(())
}

fn check(wc: &Wc, who: &str) -> Result<()> {
    if wc.is_ok() {
        return Ok(());
    }
    Err(format!(
        "{who}: WR {} ({}) completed with {}{}",
        wc.wr_id(),
        wc.opcode().name(),
        wc.status().name(),
        wc.syndrome_name()
            .map(|s| format!(", syndrome {s}"))
            .unwrap_or_default()
    )
    .into())
}

/// One client: its QP, its CQ on a channel of its own, and its reply buffer.
struct Client {
    c: usize,
    qp: Qp,
    cq: Cq,
    replies: Mr,
    /// Where the receives for the WRITE-with-immediate point (a WRITE with immediate consumes
    /// a receive WQE but writes to the address it names, not to the WQE's buffer).
    scratch: Mr,
}

impl Client {
    fn new(ctx: &Context, pd: &Pd, c: usize) -> Result<Client> {
        let ch = ctx.create_comp_channel()?;
        let cq = ctx.create_cq_on(4 * WINDOW as u32, &ch)?;
        let qp = pd.create_qp(
            &QpInit::rc(&cq)
                .max_send_wr(2 * WINDOW as u32)
                .max_recv_wr(WINDOW as u32)
                .max_inline_data(SLOT as u32),
        )?;
        Ok(Client {
            c,
            qp,
            cq,
            replies: pd.alloc_mr(WINDOW as usize * SLOT)?,
            scratch: pd.alloc_mr(SLOT)?,
        })
    }

    fn post_recv(qp: &mut mlx5_direct::datapath::Qp, scratch: &Mr, j: u64) -> Result<()> {
        qp.post_recv(j, &[scratch.sge(0, SLOT as u32)?])?;
        Ok(())
    }

    /// Send `requests` requests, `WINDOW` in flight, checking every reply.
    async fn run(self, requests: u64, busy_polls: u32) -> Result<u64> {
        let Client {
            c,
            mut qp,
            cq,
            replies,
            scratch,
        } = self;
        let mut acq = AsyncCq::new(cq)?;
        acq.set_busy_polls(busy_polls);
        let send = |qp: &mut Qp, k: u64| -> Result<()> {
            let m = request(c, k);
            qp.post(&SendWr::send(k).inline(&m).signaled())?;
            Ok(())
        };
        let mut sent = 0;
        while sent < requests.min(WINDOW) {
            send(&mut qp, sent)?;
            sent += 1;
        }
        let (mut checked, mut buf) = (0u64, [0u8; SLOT]);
        let mut sends_done = 0u64;
        while checked < requests || sends_done < sent {
            let wc = acq.next(&mut qp).await?;
            check(&wc, &format!("client {c}"))?;
            match wc.opcode() {
                WcOpcode::Send => sends_done += 1,
                WcOpcode::RecvRdmaWithImm => {
                    let k = u64::from(wc.imm_data());
                    if k != checked {
                        return Err(
                            format!("client {c}: reply {k} came when {checked} was due").into()
                        );
                    }
                    replies.read_into((k % WINDOW) as usize * SLOT, &mut buf)?;
                    if buf != reply(c, k) {
                        return Err(format!(
                            "client {c}: reply {k} arrived wrong: {:?}",
                            String::from_utf8_lossy(&buf)
                        )
                        .into());
                    }
                    checked += 1;
                    Self::post_recv(&mut qp, &scratch, wc.wr_id())?;
                    if sent < requests {
                        send(&mut qp, sent)?;
                        sent += 1;
                    }
                }
                other => {
                    return Err(
                        format!("client {c}: unexpected {} completion", other.name()).into(),
                    )
                }
            }
        }
        Ok(checked)
    }
}

async fn run(o: &Opts) -> Result<()> {
    if o.loopback {
        loopback(o).await
    } else if let Some(host) = &o.server {
        client_process(o, host).await
    } else {
        server_process(o).await
    }
}

/// Both ends in this process: the server on one software ConnectX, every client on the other.
async fn loopback(o: &Opts) -> Result<()> {
    let (s_ctx, c_ctx) = Context::sim_pair()?;
    let side = ServerSide::new(s_ctx.clone(), o.clients)?;
    let ch = s_ctx.create_comp_channel()?;
    let c_pd = c_ctx.alloc_pd()?;
    let mut conns = Vec::new();
    let mut clients = Vec::new();
    for c in 0..o.clients {
        let (mut sqp, scq) = side.qp_for(&ch)?;
        let mut cl = Client::new(&c_ctx, &c_pd, c)?;
        let cparams = ConnectParams::default().with_buffer(remote_buffer(&cl.replies));
        let (_, s_conn) = connect_qps_with(
            (&mut cl.qp, &cparams),
            (&mut sqp, &ConnectParams::default()),
        )?;
        let reply_to = s_conn
            .remote_buffer()
            .ok_or("the client announced no reply buffer")?;
        for j in 0..WINDOW {
            post_server_recv(&mut sqp, &side.recv, c, j)?;
            Client::post_recv(&mut cl.qp, &cl.scratch, j)?;
        }
        conns.push(ServerConn {
            qp: sqp,
            cq: scq,
            reply_to,
        });
        clients.push(cl);
    }
    println!(
        "async_server: {} clients on {}, server on {}, one completion channel for the server's {} CQs",
        o.clients,
        c_ctx.name(),
        s_ctx.name(),
        conns.len()
    );
    let start = Instant::now();
    let server = tokio::spawn(serve(side, ch, conns, o.requests, o.busy_polls));
    let tasks: Vec<_> = clients
        .into_iter()
        .map(|cl| tokio::spawn(cl.run(o.requests, o.busy_polls)))
        .collect();
    let mut checked = 0;
    for t in tasks {
        checked += t.await??;
    }
    server.await??;
    let el = start.elapsed();
    println!(
        "async_server: {checked} replies checked ({} clients × {} requests) in {:.1} ms ({:.1} µs of run per reply)",
        o.clients,
        o.requests,
        el.as_secs_f64() * 1e3,
        el.as_secs_f64() * 1e6 / checked.max(1) as f64
    );
    let bugs = s_ctx
        .sim_fabric()
        .map(|f| f.fabric().take_driver_bugs())
        .unwrap_or_default();
    if !bugs.is_empty() {
        return Err(format!("the software ConnectX reported driver bugs: {bugs:?}").into());
    }
    Ok(())
}

/// Control connections and QP setup block (TCP): they run on a blocking thread.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f).await?
}

/// The software ConnectX of the server process and of the client process: each process has
/// its own, on a threaded fabric of its own; their frames travel over UDP.
const SERVER_IP: [u8; 4] = [10, 0, 0, 1];
const CLIENT_IP: [u8; 4] = [10, 0, 0, 2];

/// This process's own software ConnectX, `ip`, named `name`: the fabric (keep it alive) and
/// the device's context.
fn own_device(ip: [u8; 4], name: &str) -> Result<(SimFabric, Context)> {
    let fabric = SimFabric::threaded()?;
    let ctx = fabric.add_device_with(DeviceConfig::new(ip).name(name));
    Ok((fabric, ctx))
}

/// A control connection whose first bytes link this process's software ConnectX to the peer
/// process's: each side binds its device's UDP socket (once) on the connection's local address
/// and sends one line, `IPV4 UDP_ADDRESS`; each adds the other's device as a UDP peer. Then
/// the connection carries the QP endpoints as usual ([`Connection::over`]). The peer's line is
/// read byte by byte, so that nothing of what follows it is read ahead. `udp` keeps the
/// address the device was bound to, for the next connection.
fn linked_control(
    mut stream: TcpStream,
    ctx: &Context,
    udp: &mut Option<SocketAddr>,
    timeout: Duration,
) -> Result<Control> {
    let sim = ctx.sim_device().ok_or("not a software ConnectX")?;
    let udp = match *udp {
        Some(a) => a,
        None => *udp.insert(sim.bind_udp(SocketAddr::new(stream.local_addr()?.ip(), 0))?),
    };
    stream.set_read_timeout(Some(timeout))?;
    writeln!(stream, "{} {udp}", sim.ipv4())?;
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while line.len() < 128 {
        stream.read_exact(&mut byte)?;
        if byte[0] == b'\n' {
            break;
        }
        line.push(byte[0]);
    }
    let line = String::from_utf8_lossy(&line).into_owned();
    let (ip, addr) = line
        .split_once(' ')
        .and_then(|(ip, a)| Some((ip.parse::<Ipv4Addr>().ok()?, a.parse::<SocketAddr>().ok()?)))
        .ok_or_else(|| format!("the peer sent {line:?}, not its device's address"))?;
    sim.add_udp_peer(ip.octets(), addr)?;
    let peer = stream.peer_addr()?;
    Ok(Control::from_stream(stream, peer, timeout)?)
}

/// Connect to the server at `host:port`, retrying while it is not listening yet (up to
/// `timeout`).
fn connect_retrying(host: &str, port: u16, timeout: Duration) -> Result<TcpStream> {
    let deadline = Instant::now() + timeout;
    loop {
        match TcpStream::connect((host, port)) {
            Ok(s) => return Ok(s),
            Err(e) if Instant::now() < deadline => {
                if e.kind() != std::io::ErrorKind::ConnectionRefused {
                    return Err(format!("connect to {host}:{port}: {e}").into());
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => return Err(format!("connect to {host}:{port}: {e}").into()),
        }
    }
}

/// The server as a process of its own: accept `clients` control connections, connect a QP for
/// each, then serve.
async fn server_process(o: &Opts) -> Result<()> {
    let (clients, port) = (o.clients, o.port);
    let (devs, side, ch, conns, links) = blocking(move || {
        let devs = own_device(SERVER_IP, "sim0")?;
        let listener = TcpListener::bind(("0.0.0.0", port))?;
        println!("async_server: listening on TCP port {port} for {clients} client(s)");
        let ctx = devs.1.clone();
        let side = ServerSide::new(ctx.clone(), clients)?;
        let ch = ctx.create_comp_channel()?;
        let mut conns = Vec::new();
        let mut links = Vec::new();
        let mut udp = None;
        for c in 0..clients {
            let params = ConnectParams::default();
            let (stream, _) = listener.accept()?;
            let control = linked_control(stream, &ctx, &mut udp, params.io_timeout)?;
            let (mut qp, mut cq) = side.qp_for(&ch)?;
            let qref = qp_ref(&qp);
            let sges = (0..WINDOW as usize)
                .map(|j| side.recv.sge((c * WINDOW as usize + j) * SLOT, SLOT as u32))
                .collect::<mlx5_direct::ctx::Result<Vec<_>>>()?;
            let conn = {
                // The receives go up with the QP in Init, before the client hears it is ready.
                let mut link =
                    QpLink::new(&mut qp, &mut cq, |qp: &mut mlx5_direct::datapath::Qp| {
                        for (j, s) in sges.iter().enumerate() {
                            qp.post_recv(j as u64, std::slice::from_ref(s))?;
                        }
                        Ok(())
                    });
                Connection::over(control, ctx.device(), qref, &mut link, &params)?
            };
            let reply_to = conn
                .remote_buffer()
                .ok_or("the client announced no reply buffer")?;
            println!("async_server: client {c} connected (QPN {:#x})", qp.qpn());
            conns.push(ServerConn { qp, cq, reply_to });
            links.push(conn);
        }
        Ok((devs, side, ch, conns, links))
    })
    .await?;
    serve(side, ch, conns, o.requests, o.busy_polls).await?;
    drop(links);
    drop(devs);
    Ok(())
}

/// The clients as a process of their own: connect each to the server at `host`, then run them
/// all as tasks.
async fn client_process(o: &Opts, host: &str) -> Result<()> {
    let (clients, port, host) = (o.clients, o.port, host.to_string());
    let (devs, cls, links) = blocking(move || {
        let devs = own_device(CLIENT_IP, "sim1")?;
        let ctx = devs.1.clone();
        let pd = ctx.alloc_pd()?;
        let mut cls = Vec::new();
        let mut links = Vec::new();
        let mut udp = None;
        for c in 0..clients {
            let mut cl = Client::new(&ctx, &pd, c)?;
            let params = ConnectParams::default().with_buffer(remote_buffer(&cl.replies));
            let stream = connect_retrying(&host, port, params.io_timeout)?;
            let control = linked_control(stream, &ctx, &mut udp, params.io_timeout)?;
            let qref = qp_ref(&cl.qp);
            let sge = cl.scratch.sge(0, SLOT as u32)?;
            let conn = {
                let mut link = QpLink::new(
                    &mut cl.qp,
                    &mut cl.cq,
                    |qp: &mut mlx5_direct::datapath::Qp| {
                        for j in 0..WINDOW {
                            qp.post_recv(j, std::slice::from_ref(&sge))?;
                        }
                        Ok(())
                    },
                );
                Connection::over(control, ctx.device(), qref, &mut link, &params)?
            };
            cls.push(cl);
            links.push(conn);
        }
        Ok((devs, cls, links))
    })
    .await?;
    let start = Instant::now();
    let tasks: Vec<_> = cls
        .into_iter()
        .map(|cl| tokio::spawn(cl.run(o.requests, o.busy_polls)))
        .collect();
    let mut checked = 0;
    for t in tasks {
        checked += t.await??;
    }
    println!(
        "async_server: {checked} replies checked ({clients} clients × {} requests) in {:.1} ms",
        o.requests,
        start.elapsed().as_secs_f64() * 1e3
    );
    drop(links);
    drop(devs);
    Ok(())
}
