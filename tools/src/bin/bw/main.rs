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
//! bw write -d mlx5_0 -q 4 192.0.2.1       client on a ConnectX
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
//!
//! Here: the runs (loopback, server, client; direct path or verbs), the loop that drives the
//! ends, and the report. Beside it: `plan` (the arguments checked), `end` (one end's flow,
//! sink and data path).
#![forbid(unsafe_code)]

mod end;
mod perftest;
mod plan;

use clap::Parser;
use end::{BwEnd, Flow};
use mlx5_connect::{AbortCode, ConnectParams, Connection, ControlEvent, RemoteBuffer};
use mlx5_hw::QpType;
use mlx5_tools::args::{describe_doorbell, BwArgs, PathKind, Test};
use mlx5_tools::connecting::{connect_all, Connected};
use mlx5_tools::dc;
use mlx5_tools::devices::Devices;
use mlx5_tools::path::{DataPath, Direct};
use mlx5_tools::patience::Pace;
use mlx5_tools::progress::Progress;
use mlx5_tools::rendezvous::{describe_endpoint, Rendezvous, UdpBudget, UdpLink};
use mlx5_tools::report::{self, Banner};
use mlx5_tools::resources::Resources;
use mlx5_tools::results;
use mlx5_tools::run;
use mlx5_tools::serve::{exit_on_failure, serve_until_closed};
use mlx5_tools::xrc::{self, XrcEnd};
use mlx5_tools::{Error, Result};
use plan::Plan;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// How long a receiver whose sender is done waits for datagrams that may have been dropped
/// (UC, UD: a message that finds no receive is lost, IBTA Vol. 1 §9.7.5.2.4 / §9.8.3.1).
const LOSS_GRACE: Duration = Duration::from_millis(500);
/// Receives perftest posts at most on a UC/UD QP (`UC_MAX_RX`).
const UC_MAX_RX: u64 = 16000;

fn main() -> ExitCode {
    let args = BwArgs::parse();
    mlx5_tools::log::init(args.common.verbose);
    run::exit_code(
        "bw",
        plan::plan(&args)
            .and_then(|p| run::on_run_devices("bw", &args.common, |devs| run_on(&args, &p, devs))),
    )
}

/// The control connection [`drive`] watches while the ends run.
enum Watch<'c> {
    /// Nothing (loopback; a bidirectional client, whose server swaps results on it).
    None,
    /// A server's: the client's goodbye ends a `-D` run, or a size whose lost datagrams will
    /// never come.
    Server(&'c mut Connection),
    /// A client's: a server that went away (killed, crashed) ends the run with an error
    /// instead of figures of sends that completed only here (UC and UD sends complete without
    /// the peer).
    Client(&'c mut Connection),
}

/// How often a client looks at its control connection while it sends.
const CLIENT_WATCH: Duration = Duration::from_millis(50);

/// Drive `a` (and in loopback `b`) until both are done, watching `watch`; `false` when a
/// server saw its client's goodbye.
fn drive<P: DataPath, Q: DataPath>(
    p: &Plan,
    a: &mut BwEnd<'_, P>,
    mut b: Option<&mut BwEnd<'_, Q>>,
    mut watch: Watch<'_>,
    progress: &mut Progress,
) -> Result<bool> {
    let lossy = matches!(p.run.conn, QpType::Uc | QpType::Ud) || p.run.length.iters().is_none();
    let server = matches!(watch, Watch::Server(_));
    let mut spins = 0u32;
    let mut looked = Instant::now();
    loop {
        let mut busy = a.step()?;
        if let Some(b) = b.as_deref_mut() {
            busy |= b.step()?;
        }
        let b_done = b
            .as_deref()
            .is_none_or(|b| b.flow_done() && b.sink_done(lossy));
        let done = a.flow_done() && a.sink_done(lossy && !server) && b_done;
        spins = spins.wrapping_add(1);
        if let Watch::Client(c) = &mut watch {
            if done || (spins.is_multiple_of(256) && looked.elapsed() >= CLIENT_WATCH) {
                looked = Instant::now();
                server_still_there(c)?;
            }
        }
        if done {
            return Ok(true);
        }
        if let Some(f) = &a.flow {
            progress.update(f.completed & !1023);
        }
        if !busy {
            if spins.is_multiple_of(1024) {
                if let Watch::Server(c) = &mut watch {
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
                if !server || !a.flow_done() {
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

/// A client's look at its control connection: the server must not have closed it or aborted.
fn server_still_there(c: &mut Connection) -> Result<()> {
    let gone = |why: String| Error::Peer {
        peer: "the server".into(),
        why,
    };
    match c.poll_control() {
        Ok(Some(ControlEvent::PeerAborted(code))) => Err(gone(format!(
            "it gave up during the run: {}",
            code.describe()
        ))),
        Err(mlx5_connect::ConnectError::PeerClosed { .. }) => Err(gone(
            "it closed the control connection during the run (it exited or was killed): this \
             side stops rather than report sends that completed only here (UC and UD sends \
             complete without the peer)"
                .into(),
        )),
        Err(e) => Err(e.into()),
        // A rebuild request (or an event a later mlx5-connect adds) says the server is there.
        Ok(None) | Ok(Some(_)) => Ok(()),
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
    if p.run.test == Test::Send {
        extra.push(("RX depth".into(), p.run.rx_depth.to_string()));
    }
    if a.test != Test::Send || a.common.is_client() || p.bidirectional {
        extra.push(("CQ Moderation".into(), p.cq_mod.to_string()));
    }
    extra.extend(run::run_lines(p.run.events, p.run.length, udp));
    extra.extend(run::srq_line(&p.run));
    extra.extend(run::numa_line(devs, "bw"));
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
    let title = p.run.test.title(true, p.run.atomic, p.bidirectional);
    Banner {
        title: &title,
        device: &devs.name,
        path: a.common.path.describe(),
        connection: p.run.conn_name(),
        qps: p.qps,
        inline,
        tx_depth: p.depth,
        mtu: conns.first().map_or(0, |c| c.path_mtu().bytes()),
        extra,
    }
    .render()
}

/// The device-dependent checks, then the run on the data path `--path` names.
fn run_on(a: &BwArgs, p: &Plan, devs: &Devices) -> Result<()> {
    let c = &a.common;
    let params = run::checked_params(devs, c, &p.run.params)?;
    let max_wr = devs.local.query_device()?.max_qp_wr;
    for (flag, n) in [("-t", p.depth), ("-r", p.run.rx_depth)] {
        if n > max_wr {
            return Err(Error::Usage(format!(
                "{flag} {n}: {} holds at most {max_wr} WRs per queue",
                devs.name
            )));
        }
    }
    run::check_perftest(c, devs)?;
    let rv = run::rendezvous(c, p.run.quiet)?;
    if let Some(rv) = &rv {
        if let Some(session) = run::first_contact(rv, c, devs, params.io_timeout)? {
            return perftest::run(a, p, devs, &params, session);
        }
    }
    match c.path {
        PathKind::Direct => run_direct(a, p, devs, &params, rv.as_ref()),
        PathKind::Verbs => run_verbs(a, p, devs, &params, rv.as_ref()),
    }
}

/// One end on this library's data path, with the doorbell mode `--doorbell` asks for.
fn direct_end(ctx: &mlx5_ctx::Context, p: &Plan) -> Result<(Resources, u32)> {
    direct_end_with(ctx, p, &p.cfg())
}

/// [`direct_end`] of the shape `cfg`.
fn direct_end_with(
    ctx: &mlx5_ctx::Context,
    p: &Plan,
    cfg: &mlx5_tools::resources::ResourcesCfg,
) -> Result<(Resources, u32)> {
    let (mut r, inline) = Resources::with_inline(ctx, cfg, p.run.inline)?;
    if let Some(mode) = p.run.doorbell {
        r.set_doorbell_mode(mode)?;
    }
    Ok((r, inline))
}

/// The banner's doorbell line of an end on this library's data path.
fn doorbell_of(p: &Plan, me: &Resources) -> String {
    match (me.doorbell_mode(), me.other_doorbell_modes()) {
        (Some(m), 0) => describe_doorbell(m, p.run.doorbell.is_some()),
        (Some(m), k) => format!(
            "{}; {k} of {} QPs on shared BlueFlame registers: 8-byte doorbell",
            describe_doorbell(m, p.run.doorbell.is_some()),
            me.qps.len()
        ),
        (None, _) => String::new(),
    }
}

/// `-c DC`: the DC objects of end `r` (a DCT per QP, and its DCIs once the addresses are
/// swapped).
fn dc_end(r: &mut Resources, p: &Plan, inline: u32) -> Result<Option<dc::DcEnd>> {
    if !p.run.conn.is_dc() {
        return Ok(None);
    }
    Ok(Some(dc::DcEnd::new(r, &p.run, p.qps, p.depth, inline)?))
}

/// `-c XRC`: the XRC objects of end `r` (an initiator and a target per QP, the XRC SRQ),
/// connected once the addresses are swapped.
fn xrc_end(r: &mut Resources, p: &Plan, inline: u32) -> Result<Option<XrcEnd>> {
    if !p.run.conn.is_xrc() {
        return Ok(None);
    }
    Ok(Some(XrcEnd::new(r, &p.run, p.qps, p.depth, inline)?))
}

fn buffers(conns: &[Connection]) -> Result<Vec<RemoteBuffer>> {
    conns.iter().map(run::remote_buffer_of).collect()
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
    let doorbell = doorbell_of(p, &me);
    let mut dc_a = dc_end(&mut me, p, inline_a)?;
    let mut xrc_a = xrc_end(&mut me, p, inline_a)?;
    let end_a = me.end(params);
    let recv_a = xrc::receives(&p.run, &me, xrc_a.as_ref())?;
    let (mut links_a, mr) = me.links(recv_a)?;
    match rv {
        None => {
            let (mut peer, inline_b) = direct_end(devs.peer_or_local(), p)?;
            let mut dc_b = dc_end(&mut peer, p, inline_b)?;
            let mut xrc_b = xrc_end(&mut peer, p, inline_b)?;
            let end_b = peer.end(params);
            let recv_b = xrc::receives(&p.run, &peer, xrc_b.as_ref())?;
            let (mut links_b, mr_b) = peer.links(recv_b)?;
            let conn = connect_all(
                devs,
                &end_a,
                &mut links_a,
                Some((&end_b, &mut links_b)),
                None,
                None,
            )?;
            let inline = inline_a.min(inline_b);
            if let (Some(da), Some(db)) = (dc_a.as_mut(), dc_b.as_mut()) {
                // `-c DC`: the RC QPs carry the DC addresses; the run goes DCI -> DCT.
                let mtu = conn.conns[0].path_mtu();
                dc::exchange(
                    &mut [
                        (&mut *da, &mut links_a, mr, mtu),
                        (&mut *db, &mut links_b, mr_b, mtu),
                    ],
                    p.run.params.io_timeout,
                )?;
                p.run.say(&da.describe());
                let ea = BwEnd::new(
                    da.path(links_a.cq, false)?,
                    p,
                    mr,
                    buffers(&conn.conns)?,
                    inline,
                )?;
                let eb = BwEnd::new(
                    db.path(links_b.cq, false)?,
                    p,
                    mr_b,
                    buffers(&conn.peer)?,
                    inline,
                )?;
                return exit_on_failure(
                    "bw",
                    devs,
                    measure_loopback(a, p, devs, ea, eb, conn, (inline, &doorbell)),
                );
            }
            if let (Some(xa), Some(xb)) = (xrc_a.as_mut(), xrc_b.as_mut()) {
                // `-c XRC`: the RC QPs carry the XRC addresses; the run goes initiator ->
                // target.
                let inline = xrc::connect_ends(
                    &mut [
                        (&mut *xa, &mut links_a, mr, &conn.conns[0]),
                        (&mut *xb, &mut links_b, mr_b, &conn.peer[0]),
                    ],
                    &p.run,
                    inline,
                )?;
                let ea = BwEnd::new(xa.path(links_a.cq)?, p, mr, buffers(&conn.conns)?, inline)?;
                let eb = BwEnd::new(xb.path(links_b.cq)?, p, mr_b, buffers(&conn.peer)?, inline)?;
                return exit_on_failure(
                    "bw",
                    devs,
                    measure_loopback(a, p, devs, ea, eb, conn, (inline, &doorbell)),
                );
            }
            let mut da = Direct::new(links_a.qps, links_a.cq).with_srq(links_a.srq);
            let mut db = Direct::new(links_b.qps, links_b.cq).with_srq(links_b.srq);
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
            let conn = connect_all(
                devs,
                &end_a,
                &mut links_a,
                None,
                Some(rv),
                Some(&p.run.shape),
            )?;
            if let Some(da) = dc_a.as_mut() {
                let mtu = conn.conns[0].path_mtu();
                dc::exchange(&mut [(da, &mut links_a, mr, mtu)], p.run.params.io_timeout)?;
                p.run.say(&da.describe());
                let e = BwEnd::new(
                    da.path(links_a.cq, false)?,
                    p,
                    mr,
                    buffers(&conn.conns)?,
                    inline_a,
                )?;
                return exit_on_failure(
                    "bw",
                    devs,
                    measure_end(a, p, devs, e, conn, rv.is_client(), (inline_a, &doorbell)),
                );
            }
            if let Some(xa) = xrc_a.as_mut() {
                let inline = xrc::connect_ends(
                    &mut [(&mut *xa, &mut links_a, mr, &conn.conns[0])],
                    &p.run,
                    inline_a,
                )?;
                let e = BwEnd::new(xa.path(links_a.cq)?, p, mr, buffers(&conn.conns)?, inline)?;
                return exit_on_failure(
                    "bw",
                    devs,
                    measure_end(a, p, devs, e, conn, rv.is_client(), (inline, &doorbell)),
                );
            }
            let mut da = Direct::new(links_a.qps, links_a.cq).with_srq(links_a.srq);
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
    let run::Sizes {
        sizes,
        budget,
        note,
    } = run::usable_sizes(p.run.conn, &p.run.sizes, mtu, udp)?;
    if let Some(b) = &budget {
        p.run.say(&format!(
            " note: the UDP link holds {b}: messages go fewer at a time than -t {} when \
             -t of them would not fit",
            p.depth
        ));
    }
    if let Some(n) = note {
        p.run.say(&n);
    }
    Ok((sizes, budget))
}

/// A note when a UC/UD receiver got fewer messages than were sent (they are dropped when no
/// receive is posted; perftest's receiver would wait for them until its alarm).
fn loss_note<P: DataPath>(p: &Plan, e: &BwEnd<'_, P>) {
    if let Some(s) = &e.sink {
        if let Some(t) = s.total() {
            if s.got() < t {
                // What the receiving device counted meanwhile says which loss it was.
                let seen = e.loss_counters_since();
                let why = if seen.is_empty() {
                    "its device counted no dropped packet".to_string()
                } else {
                    format!("its device counted {}", seen.join(", "))
                };
                p.run.say(&format!(
                    " note: {} of {t} messages arrived ({} drops a message that finds no \
                     receive posted, or one of whose packets was lost; {why})",
                    s.got(),
                    p.run.conn.name()
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
    (ea.pace, eb.pace) = (Pace::of(devs), Pace::of(devs));
    p.run
        .say(&banner(a, p, devs, inline, doorbell, &conn.conns, None));
    let (sizes, _) = usable_sizes(p, &conn.conns, None)?;
    p.run.say(&p.header());
    for &size in &sizes {
        ea.start(p, size, p.depth, true, p.receives_sends(true))?;
        eb.start(p, size, p.depth, p.bidirectional, p.receives_sends(false))?;
        let total = ea.flow.as_ref().and_then(Flow::total).unwrap_or(0);
        let mut progress = Progress::new(format!("{size} bytes"), total);
        drive(p, &mut ea, Some(&mut eb), Watch::None, &mut progress)?;
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
    p.run.say(report::RESULT_LINE);
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
    e.pace = Pace::of(devs);
    let Connected {
        mut conns,
        udp,
        mut streams,
        ..
    } = conn;
    p.run
        .say(&banner(a, p, devs, inline, doorbell, &conns, udp.as_ref()));
    let (sizes, budget) = usable_sizes(p, &conns, udp.as_ref())?;
    let sends = p.sends(client);
    let recvs = p.receives_sends(client);
    if !sends && !recvs {
        // The server of a one-sided test only serves; the client closes when done.
        serve_until_closed(&mut conns)?;
        p.run.say(report::RESULT_LINE);
        return Ok(());
    }
    if client || p.bidirectional {
        p.run.say(&p.header());
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
        let watch = match (client, conns.first_mut()) {
            (false, Some(c)) => Watch::Server(c),
            (true, Some(c)) if !p.bidirectional => Watch::Client(c),
            _ => Watch::None,
        };
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
                let theirs = results::swap(stream, &mine, p.run.params.io_timeout)?;
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
    p.run.say(report::RESULT_LINE);
    if client {
        for c in conns {
            c.close()?;
        }
    } else if !goodbye {
        serve_until_closed(&mut conns)?;
    }
    Ok(())
}

/// `--path verbs`: QPs created through libibverbs on any verbs device (Soft-RoCE too), posted
/// with `ibv_post_send` and polled with `ibv_poll_cq`.
fn run_verbs(
    a: &BwArgs,
    p: &Plan,
    devs: &Devices,
    params: &ConnectParams,
    rv: Option<&Rendezvous>,
) -> Result<()> {
    use mlx5_tools::connecting::connect_verbs;
    use mlx5_tools::path::Verbs;
    use mlx5_tools::resources::VerbsResources;
    let dev = devs.verbs_device()?;
    let doorbell = "libibverbs' own (ibv_post_send)";
    let (me, inline_a) =
        VerbsResources::with_inline(&devs.local, dev.clone(), &p.cfg(), p.run.inline)?;
    let end_a = me.end(params);
    let mut va = Verbs::claim(&me)?;
    let recv_a = p.run.receives(&me.mr)?;
    match rv {
        None => {
            // Loopback: the other end on the same device (rxe and ConnectX deliver packets to
            // their own GID internally).
            let (peer, inline_b) =
                VerbsResources::with_inline(&devs.local, dev, &p.cfg(), p.run.inline)?;
            let end_b = peer.end(params);
            let mut vb = Verbs::claim(&peer)?;
            let recv_b = p.run.receives(&peer.mr)?;
            let conn = connect_verbs(
                devs,
                (&end_a, &mut va, recv_a),
                Some((&end_b, &mut vb, recv_b)),
                None,
                None,
            )?;
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
            let conn = connect_verbs(
                devs,
                (&end_a, &mut va, recv_a),
                None,
                Some(rv),
                Some(&p.run.shape),
            )?;
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
