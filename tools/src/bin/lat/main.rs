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
//!
//! Here: the runs (loopback, server, client; direct path or verbs) and their measuring loop.
//! Beside it: `plan` (the arguments checked), `pinger` (one end's ping-pong), `record` (the
//! samples and the report).
#![forbid(unsafe_code)]

mod pinger;
mod plan;
mod record;

use clap::Parser;
use mlx5_connect::{ConnectParams, Connection, RemoteBuffer};
use mlx5_hw::QpType;
use mlx5_qp::DoorbellMode;
use mlx5_tools::args::{describe_doorbell, LatArgs, Length, PathKind, Test};
use mlx5_tools::connecting::{connect_all, Connected, DirectLinks, End};
use mlx5_tools::devices::{on_devices, Devices};
use mlx5_tools::path::{DataPath, Direct};
use mlx5_tools::progress::Progress;
use mlx5_tools::rendezvous::{describe_endpoint, sizes_for_udp_link, Rendezvous, UdpLink};
use mlx5_tools::report::{self, Banner};
use mlx5_tools::resources::Resources;
use mlx5_tools::serve::{exit_on_failure, say, serve_until_closed};
use mlx5_tools::timestamps;
use mlx5_tools::{Error, Result};
use pinger::{next_stamp, Pinger, Waited};
use plan::Plan;
use record::{Recorder, Reporter};
use std::process::ExitCode;
use std::time::{Duration, Instant};

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

fn run(args: &LatArgs) -> Result<()> {
    let p = plan::plan(args)?;
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
