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
//! lat send -d mlx5_0                    server on a ConnectX
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
//!
//! Here: the runs (loopback, server, client; direct path or verbs) and their measuring loop.
//! Beside it: `plan` (the arguments checked), `pinger` (one end's ping-pong), `record` (the
//! samples and the report).
#![forbid(unsafe_code)]

mod perftest;
mod pinger;
mod plan;
mod record;

use clap::Parser;
use mlx5_connect::{ConnectParams, Connection};
use mlx5_qp::DoorbellMode;
use mlx5_tools::args::{describe_doorbell, LatArgs, PathKind, Test};
use mlx5_tools::connecting::{connect_all, Connected, DirectLinks};
use mlx5_tools::dc;
use mlx5_tools::devices::Devices;
use mlx5_tools::path::{DataPath, Direct};
use mlx5_tools::patience::Pace;
use mlx5_tools::progress::Progress;
use mlx5_tools::rendezvous::{describe_endpoint, Rendezvous, UdpLink};
use mlx5_tools::report::{self, Banner};
use mlx5_tools::resources::Resources;
use mlx5_tools::run;
use mlx5_tools::serve::{exit_on_failure, say, serve_until_closed};
use mlx5_tools::timestamps;
use mlx5_tools::xrc::{self, XrcEnd};
use mlx5_tools::{Error, Result};
use pinger::{next_stamp, Pinger, Waited};
use plan::Plan;
use record::{Recorder, Reporter};
use std::process::ExitCode;
use std::time::Instant;

fn main() -> ExitCode {
    let args = LatArgs::parse();
    mlx5_tools::log::init(args.common.verbose);
    run::exit_code(
        "lat",
        plan::plan(&args)
            .and_then(|p| run::on_run_devices("lat", &args.common, |devs| run_on(&args, &p, devs))),
    )
}

/// The device-dependent checks, then the run on the data path `--path` names.
fn run_on(args: &LatArgs, p: &Plan, devs: &Devices) -> Result<()> {
    let c = &args.common;
    let params = run::checked_params(devs, c, &p.run.params)?;
    run::check_perftest(c, devs)?;
    let rv = run::rendezvous(c, p.run.quiet)?;
    if let Some(rv) = &rv {
        if let Some(session) = run::first_contact(rv, c, devs, params.io_timeout)? {
            return perftest::run(args, p, devs, &params, session);
        }
    }
    match c.path {
        PathKind::Direct => run_direct(args, p, devs, &params, rv.as_ref()),
        PathKind::Verbs => run_verbs(args, p, devs, &params, rv.as_ref()),
    }
}

/// One end of this library's data path, with the doorbell mode `--doorbell` asks for; the
/// measuring end of a `--timestamps` run (`stamped`) on a CQ with completion timestamps.
fn direct_end(ctx: &mlx5_ctx::Context, p: &Plan, stamped: bool) -> Result<(Resources, u32)> {
    let (mut r, inline) = if stamped {
        Resources::with_inline_timestamped(ctx, &p.cfg(), p.run.inline)
            .map_err(|e| timestamps_refused(ctx.name(), e))?
    } else {
        Resources::with_inline(ctx, &p.cfg(), p.run.inline)?
    };
    if let Some(mode) = p.run.doorbell {
        r.set_doorbell_mode(mode)?;
    }
    Ok((r, inline))
}

/// `-c DC`: the DC objects of end `r` (one DCT, and its DCI once the addresses are swapped).
fn dc_end(r: &mut Resources, p: &Plan, inline: u32) -> Result<Option<dc::DcEnd>> {
    if !p.run.conn.is_dc() {
        return Ok(None);
    }
    Ok(Some(dc::DcEnd::new(r, &p.run, 1, plan::SQ_DEPTH, inline)?))
}

/// `-c XRC`: the XRC objects of end `r` (an initiator, a target and the XRC SRQ), connected
/// once the addresses are swapped; `--timestamps` is not read through them.
fn xrc_end(r: &mut Resources, p: &Plan, inline: u32, stamped: bool) -> Result<Option<XrcEnd>> {
    if !p.run.conn.is_xrc() {
        return Ok(None);
    }
    if stamped {
        return Err(Error::Usage(
            "--timestamps with -c XRC: not in this build (the XRC data path reads no CQE \
             timestamps)"
                .into(),
        ));
    }
    Ok(Some(XrcEnd::new(r, &p.run, 1, plan::SQ_DEPTH, inline)?))
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
        Some(m) => describe_doorbell(m, p.run.doorbell.is_some()),
        None => "libibverbs' own (ibv_post_send)".into(),
    }
}

/// The data path of an end's QPs and CQ; the measuring end's of a `--timestamps` run
/// (`stamped`) reads each completion's timestamp.
fn direct_path(links: DirectLinks<'_>, stamped: bool) -> Direct<'_> {
    let path = Direct::new(links.qps, links.cq).with_srq(links.srq);
    if stamped {
        path.timestamped()
    } else {
        path
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
    let mut dc_a = dc_end(&mut a, p, inline_a)?;
    let mut xrc_a = xrc_end(&mut a, p, inline_a, clock.is_some())?;
    let recv_a = xrc::receives(&p.run, &a, xrc_a.as_ref())?;
    let end_a = a.end(params);
    let (mut links_a, mr) = a.links(recv_a)?;
    match rv {
        None => {
            let (mut b, inline_b) = direct_end(devs.peer_or_local(), p, false)?;
            let mut dc_b = dc_end(&mut b, p, inline_b)?;
            let mut xrc_b = xrc_end(&mut b, p, inline_b, false)?;
            let recv_b = xrc::receives(&p.run, &b, xrc_b.as_ref())?;
            let end_b = b.end(params);
            let (mut links_b, mr_b) = b.links(recv_b)?;
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
                let path_a = da.path(links_a.cq, clock.is_some())?;
                let pa = Pinger::new(path_a, mr, &conn.conns[0], inline, p, clock)?;
                let pb = Pinger::new(
                    db.path(links_b.cq, false)?,
                    mr_b,
                    &conn.peer[0],
                    inline,
                    p,
                    None,
                )?;
                return exit_on_failure(
                    "lat",
                    devs,
                    measure_loopback(args, p, devs, pa, pb, conn, &doorbell),
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
                let pa = Pinger::new(xa.path(links_a.cq)?, mr, &conn.conns[0], inline, p, None)?;
                let pb = Pinger::new(xb.path(links_b.cq)?, mr_b, &conn.peer[0], inline, p, None)?;
                return exit_on_failure(
                    "lat",
                    devs,
                    measure_loopback(args, p, devs, pa, pb, conn, &doorbell),
                );
            }
            let path_a = direct_path(links_a, clock.is_some());
            let pa = Pinger::new(path_a, mr, &conn.conns[0], inline, p, clock)?;
            let path_b = direct_path(links_b, false);
            let pb = Pinger::new(path_b, mr_b, &conn.peer[0], inline, p, None)?;
            exit_on_failure(
                "lat",
                devs,
                measure_loopback(args, p, devs, pa, pb, conn, &doorbell),
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
                let path_a = da.path(links_a.cq, clock.is_some())?;
                let me = Pinger::new(path_a, mr, &conn.conns[0], inline_a, p, clock)?;
                return exit_on_failure(
                    "lat",
                    devs,
                    measure_end(args, p, devs, me, conn, rv.is_client(), &doorbell),
                );
            }
            if let Some(xa) = xrc_a.as_mut() {
                let inline = xrc::connect_ends(
                    &mut [(&mut *xa, &mut links_a, mr, &conn.conns[0])],
                    &p.run,
                    inline_a,
                )?;
                let me = Pinger::new(xa.path(links_a.cq)?, mr, &conn.conns[0], inline, p, None)?;
                return exit_on_failure(
                    "lat",
                    devs,
                    measure_end(args, p, devs, me, conn, rv.is_client(), &doorbell),
                );
            }
            let path_a = direct_path(links_a, clock.is_some());
            let me = Pinger::new(path_a, mr, &conn.conns[0], inline_a, p, clock)?;
            exit_on_failure(
                "lat",
                devs,
                measure_end(args, p, devs, me, conn, rv.is_client(), &doorbell),
            )
        }
    }
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
    let s = run::usable_sizes(p.run.conn, &p.run.sizes, conn.path_mtu().bytes(), udp)?;
    if let Some(n) = s.note {
        p.run.say(&n);
    }
    Ok(s.sizes)
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
    pa.pace(Pace::of(devs), p, &p.run.params);
    pb.pace(Pace::of(devs), p, &p.run.params);
    aim(&mut pa, &conn.conns[0]);
    aim(&mut pb, &conn.peer[0]);
    let sizes = usable_sizes(p, &conn.conns[0], None)?;
    let title = args.test.title(false, p.run.atomic, false);
    p.run.say(&banner(
        args,
        p,
        &title,
        devs,
        pa.inline,
        doorbell,
        &conn.conns[0],
        None,
    ));
    measure(p, title, &sizes, &mut pa, Some(&mut pb))?.finish()
}

/// The measuring end's table: for each of `sizes`, the run's iterations (or its duration) of
/// `me`'s operation, timed one by one — a READ or an atomic, or a message that `answer` (in
/// loopback; across processes the server) waits for and sends back — then its row (and under a
/// `--timestamps` run its NIC line). Returns the report for its last lines.
fn measure<'p, P: DataPath, Q: DataPath>(
    p: &'p Plan,
    title: String,
    sizes: &[u64],
    me: &mut Pinger<'_, P>,
    mut answer: Option<&mut Pinger<'_, Q>>,
) -> Result<Reporter<'p>> {
    let mut rep = Reporter::new(p, title);
    rep.header();
    let mut stamp = 0u8;
    for &size in sizes {
        let size = size as usize;
        let mut rec = Recorder::new(p)?;
        let total = p.run.length.iters().unwrap_or(0);
        let mut progress = Progress::new(format!("{size} bytes"), total);
        let from = Instant::now();
        let mut i = 0;
        while rec.more(i) {
            stamp = next_stamp(stamp);
            let t0 = Instant::now();
            match p.run.test {
                Test::Read | Test::Atomic => me.one_op(p.run.test, p.run.atomic, size)?,
                t => {
                    me.post_msg(t, size, stamp)?;
                    if let Some(b) = answer.as_deref_mut() {
                        b.wait_msg(t, size, stamp)?;
                        b.post_msg(t, size, stamp)?;
                    }
                    me.wait_msg(t, size, stamp)?;
                }
            }
            rec.record(t0, Instant::now());
            i += 1;
            progress.update(i);
        }
        let took = from.elapsed();
        drop(progress);
        me.settle()?;
        if let Some(b) = answer.as_deref_mut() {
            b.settle()?;
        }
        rep.row(size as u64, rec.finish(), from, took)?;
        if let Some(nic) = me.nic.as_mut() {
            say(&nic.line(size as u64, p.halves())?);
        }
    }
    Ok(rep)
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
    me.pace(Pace::of(devs), p, &p.run.params);
    let Connected { mut conns, udp, .. } = conn;
    if conns.is_empty() {
        return Err(Error::Usage("no connection".into()));
    }
    let mut conn = conns.remove(0);
    aim(&mut me, &conn);
    let title = args.test.title(false, p.run.atomic, false);
    p.run.say(&banner(
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
    let passive = matches!(p.run.test, Test::Read | Test::Atomic);
    if !client {
        let mut stopped = false;
        let mut said_goodbye = false;
        if !passive {
            me.watch = Some(conn);
            let mut stamp = 0u8;
            'sizes: for &size in &sizes {
                let size = size as usize;
                let mut i = 0u64;
                while p.run.length.iters().is_none_or(|n| i < n) {
                    stamp = next_stamp(stamp);
                    if me.wait_msg(p.run.test, size, stamp)? == Waited::Stopped {
                        stopped = true;
                        break 'sizes;
                    }
                    me.post_msg(p.run.test, size, stamp)?;
                    i += 1;
                }
                if me.settle()? == Waited::Stopped {
                    // The goodbye came while this side's last answers were being
                    // acknowledged: the client had them all (it says goodbye after its
                    // run), so the run is complete and the goodbye is not to be waited
                    // for again (it was taken off the connection).
                    said_goodbye = true;
                    me.linger();
                    break 'sizes;
                }
            }
            conn = me
                .watch
                .take()
                .ok_or_else(|| Error::Usage("the control connection went missing".into()))?;
            if stopped && p.run.length.iters().is_some() {
                return Err(Error::Peer {
                    peer: "the client".into(),
                    why: "it said goodbye before the last iteration".into(),
                });
            }
        }
        // The client says when it is done (READ, atomics: the server only serves until
        // then); a -D server that saw the goodbye already is done.
        if !stopped && !said_goodbye {
            serve_until_closed(std::slice::from_mut(&mut conn))?;
        }
        p.run.say(report::RESULT_LINE);
        return Ok(());
    }
    let rep = measure::<P, P>(p, title, &sizes, &mut me, None)?;
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
    if p.timestamps {
        extra.push((
            "Timestamps".into(),
            "CQE completion timestamps on the measuring end: a NIC line under each row".into(),
        ));
    }
    extra.extend(run::run_lines(p.run.events, p.run.length, udp));
    extra.extend(run::srq_line(&p.run));
    extra.extend(run::numa_line(devs, "lat"));
    Banner {
        title,
        device: &devs.name,
        path: args.common.path.describe(),
        connection: p.run.conn_name(),
        qps: 1,
        inline,
        tx_depth: 1,
        mtu: conn.path_mtu().bytes(),
        extra,
    }
    .render()
}

/// `--path verbs`: the same QPs and CQs, driven through libibverbs' `ibv_post_send`,
/// `ibv_post_recv` and `ibv_poll_cq` (`mlx5_hw::verbs::baseline`), as perftest drives them.
fn run_verbs(
    args: &LatArgs,
    p: &Plan,
    devs: &Devices,
    params: &ConnectParams,
    rv: Option<&Rendezvous>,
) -> Result<()> {
    use mlx5_tools::connecting::connect_verbs;
    use mlx5_tools::path::Verbs;
    use mlx5_tools::resources::VerbsResources;
    let dev = devs.verbs_device()?;
    let doorbell = doorbell_line(p, None);
    let measuring = rv.is_none_or(|r| r.is_client());
    let clock = nic_clock(p, &devs.local, measuring)?;
    let (a, inline_a) = if clock.is_some() {
        VerbsResources::with_inline_timestamped(&devs.local, dev.clone(), &p.cfg(), p.run.inline)
            .map_err(|e| timestamps_refused(&devs.name, e))?
    } else {
        VerbsResources::with_inline(&devs.local, dev.clone(), &p.cfg(), p.run.inline)?
    };
    let end_a = a.end(params);
    let mut va = Verbs::claim(&a)?;
    let recv_a = p.run.receives(&a.mr)?;
    match rv {
        None => {
            // Both ends on this device: rxe and ConnectX deliver a packet to their own GID
            // internally (loopback), so one port is enough.
            let (b, inline_b) =
                VerbsResources::with_inline(&devs.local, dev, &p.cfg(), p.run.inline)?;
            let end_b = b.end(params);
            let mut vb = Verbs::claim(&b)?;
            let recv_b = p.run.receives(&b.mr)?;
            let conn = connect_verbs(
                devs,
                (&end_a, &mut va, recv_a),
                Some((&end_b, &mut vb, recv_b)),
                None,
                None,
            )?;
            let inline = inline_a.min(inline_b);
            let pa = Pinger::new(va, &a.mr, &conn.conns[0], inline, p, clock)?;
            let pb = Pinger::new(vb, &b.mr, &conn.peer[0], inline, p, None)?;
            exit_on_failure(
                "lat",
                devs,
                measure_loopback(args, p, devs, pa, pb, conn, &doorbell),
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
            let me = Pinger::new(va, &a.mr, &conn.conns[0], inline_a, p, clock)?;
            exit_on_failure(
                "lat",
                devs,
                measure_end(args, p, devs, me, conn, rv.is_client(), &doorbell),
            )
        }
    }
}
