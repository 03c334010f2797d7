//! `lat` against stock perftest (`ib_write_lat`, `ib_send_lat`, `ib_read_lat`,
//! `ib_atomic_lat`) in either role, over perftest's exchange (`mlx5_tools::perftest`): the
//! prelude, the buffer perftest's peer may use, each program's steps, and its traffic as
//! perftest's loops make it (`src/perftest_resources.c` `run_iter_lat_write`,
//! `run_iter_lat_send`, `run_iter_lat`): the WRITE ping-pong starts at the server and each side
//! waits for the last byte of the message to hold its count; SEND starts at the client; READ
//! and atomics run on the client while the server waits to close. Each side reports what it
//! measured, the time between its consecutive posts halved (perftest's samples); the server of
//! a READ or atomic test only serves.

use super::pinger::Pinger;
use super::plan::Plan;
use super::record::{Recorder, Reporter};
use super::{direct_path, doorbell_line, nic_clock};
use mlx5_connect::{ConnectParams, RemoteBuffer};
use mlx5_hw::{LinkLayer, Mtu, QpType};
use mlx5_tools::args::{LatArgs, PathKind, Test};
use mlx5_tools::connecting::{Connected, End};
use mlx5_tools::devices::Devices;
use mlx5_tools::path::{DataPath, GRH};
use mlx5_tools::patience::{self, Pace, Patience};
use mlx5_tools::perftest::connect::Announce;
use mlx5_tools::perftest::{self, Agreed, Driver, Ours, Program, RunFacts, Session, Shape, Step};
use mlx5_tools::progress::Progress;
use mlx5_tools::rendezvous::describe_endpoint;
use mlx5_tools::report::{self, Banner};
use mlx5_tools::resources::Resources;
use mlx5_tools::run;
use mlx5_tools::serve::exit_on_failure;
use mlx5_tools::{Error, Result};
use std::time::{Duration, Instant};

/// What the run settled with the peer before creating anything.
struct Settled {
    agreed: Agreed,
    sizes: Vec<u64>,
    half: usize,
    params: ConnectParams,
    gid_form: bool,
    driver: Driver,
}

/// The run against a perftest peer on `session` (the first control connection, greeted).
pub(super) fn run(
    args: &LatArgs,
    p: &Plan,
    devs: &Devices,
    params: &ConnectParams,
    mut session: Session,
) -> Result<()> {
    let c = &args.common;
    let test = p.run.test;
    let program = Program::of(test, false);
    let client = session.is_client();
    let dev = devs.local.device();
    let port = dev.query_port(c.ib_port)?;
    let mtu = params
        .max_mtu
        .map_or(port.active_mtu, |m| m.min(port.active_mtu))
        .bytes();
    let facts = RunFacts {
        program,
        conn: p.run.conn,
        atomic: p.run.atomic,
        all: c.all,
        size: p.run.sizes.first().copied().unwrap_or(2),
        size_given: c.size.is_some(),
        iters: p.run.length.iters(),
        duration: c.duration,
        qps: 1,
        gbits: false,
    };
    let ours = Ours {
        dont_xchg_versions: c.dont_xchg_versions,
        mtu,
        facts,
        device: perftest::device_summary(&devs.local.query_device()?),
    };
    let agreed = perftest::prelude(&mut session, &ours, params.io_timeout)?;
    let sizes = sizes(p, &agreed)?;
    let max = sizes.iter().copied().max().unwrap_or(2) as usize;
    let recv = if p.run.conn == QpType::Ud {
        max + GRH
    } else {
        max
    };
    // The peer may use the first `cycle_buffer` bytes of the buffer it is given.
    let half = recv.max(agreed.cycle_buffer as usize).next_multiple_of(64);
    let shape = Shape {
        program,
        client,
        // perftest doubles the QPs of an XRC latency run after its parser: an initiator and a
        // target, each with its endpoint message (`write_lat.c` `main`, `num_of_qps *= 2`).
        qps: if p.run.conn.is_xrc() { 2 } else { 1 },
        sizes: sizes.len(),
        all: c.all,
        duplex: false,
        duration: c.duration.is_some(),
    };
    let settled = Settled {
        params: {
            let mut p = params.clone();
            p.max_mtu = Mtu::from_bytes(agreed.mtu);
            p
        },
        agreed,
        sizes,
        half,
        gid_form: port.link_layer == LinkLayer::Ethernet || c.gid_index.is_some(),
        driver: Driver::new(session, perftest::script(&shape)),
    };
    match c.path {
        PathKind::Direct => direct(args, p, devs, settled),
        PathKind::Verbs => verbs(args, p, devs, settled),
    }
}

/// The sizes of the run with a perftest peer: `-a` on UD runs up to the MTU, as perftest's
/// `send_lat` does; a `-s` above it is refused (perftest's `check_mtu`).
fn sizes(p: &Plan, agreed: &Agreed) -> Result<Vec<u64>> {
    let mtu = u64::from(agreed.mtu);
    if p.run.conn != QpType::Ud {
        return Ok(p.run.sizes.clone());
    }
    if p.run.sizes.len() > 1 {
        return Ok(p.run.sizes.iter().copied().filter(|&s| s <= mtu).collect());
    }
    run::usable_sizes(p.run.conn, &p.run.sizes, agreed.mtu, None).map(|s| s.sizes)
}

/// This side's buffer as the peer is to use it: the receive half.
fn target(mr: &mlx5_ctx::Mr, half: usize) -> RemoteBuffer {
    RemoteBuffer {
        addr: mr.addr() + half as u64,
        rkey: mr.rkey(),
        len: half as u64,
    }
}

fn announce(p: &Plan, s: &Settled, mr: &mlx5_ctx::Mr) -> Announce {
    Announce {
        test: p.run.test,
        target: target(mr, s.half),
        gid: s.gid_form,
        uses: s.sizes.iter().copied().max().unwrap_or(8),
    }
}

/// This library's data path.
fn direct(args: &LatArgs, p: &Plan, devs: &Devices, mut s: Settled) -> Result<()> {
    let measuring = s.driver.session.is_client();
    let clock = nic_clock(p, &devs.local, measuring)?;
    let cfg = mlx5_tools::resources::ResourcesCfg {
        buf_len: 2 * s.half,
        ..p.cfg()
    };
    let (mut r, inline) = if clock.is_some() {
        Resources::with_inline_timestamped(&devs.local, &cfg, p.run.inline)?
    } else {
        Resources::with_inline(&devs.local, &cfg, p.run.inline)?
    };
    if let Some(mode) = p.run.doorbell {
        r.set_doorbell_mode(mode)?;
    }
    let doorbell = doorbell_line(p, r.doorbell_mode());
    let recv =
        mlx5_tools::connecting::Receives::for_test(p.run.test, &r.mr, s.half, p.run.rx_depth)?;
    let how = announce(p, &s, &r.mr);
    if p.run.conn.is_xrc() {
        return xrc(args, p, devs, s, r, (inline, recv, how, &doorbell));
    }
    let end = r.end(&s.params);
    let (mut links, mr) = r.links(recv)?;
    let conn = connect(&mut s, &end, &mut links, how)?;
    let path = direct_path(links, clock.is_some());
    let mut me = Pinger::new(path, mr, &conn.conns[0], inline, p, clock)?;
    if let Some(peer) = conn.conns[0].ud_peer() {
        me.path.set_ud_peer(0, peer);
    }
    let mut view = View::of(&conn)?;
    view._conn = Some(conn);
    exit_on_failure("lat", devs, drive(args, p, devs, me, s, view, &doorbell))
}

/// `-c XRC` in perftest's layout (`mlx5_tools::perftest::xrc`): one initiator and one target
/// on each end, the XRC SRQ taking the SEND test's receives; the run's RC QP stays in Reset.
fn xrc(
    args: &LatArgs,
    p: &Plan,
    devs: &Devices,
    mut s: Settled,
    mut r: Resources,
    (inline, recv, how, doorbell): (
        u32,
        Option<mlx5_tools::connecting::Receives>,
        Announce,
        &str,
    ),
) -> Result<()> {
    if p.timestamps {
        return Err(Error::Usage(
            "--timestamps with -c XRC: not in this build (the XRC data path reads no CQE \
             timestamps)"
                .into(),
        ));
    }
    let client = s.driver.session.is_client();
    let layout = perftest::xrc::Layout::of(1, true, client)?;
    let mut x = mlx5_tools::xrc::XrcEnd::with_roles(
        &mut r,
        &p.run,
        (1, 1),
        super::plan::SQ_DEPTH,
        inline,
        recv,
    )?;
    let peers = s.driver.connect_xrc(
        &mut x,
        &devs.local,
        &s.params,
        layout,
        how,
        (&s.agreed, s.params.io_timeout),
    )?;
    p.run.say(&x.describe_via(
        "perftest's endpoint messages carried the addresses (initiator first, then target)",
    ));
    let inline = inline.min(x.max_inline());
    let remote = *peers
        .remotes
        .first()
        .ok_or_else(|| Error::Usage("-c XRC: the peer announced no target".into()))?;
    let view = View {
        local: peers.local,
        peer: peers.peer,
        mtu: peers.path_mtu.bytes(),
        _conn: None,
    };
    let me = Pinger::to(x.path(&mut r.cq)?, &r.mr, remote, inline, p, None)?;
    exit_on_failure("lat", devs, drive(args, p, devs, me, s, view, doorbell))
}

/// What the banner shows of the connection, and what keeps it alive.
struct View {
    local: mlx5_connect::Endpoint,
    peer: mlx5_connect::Endpoint,
    mtu: u32,
    _conn: Option<Connected>,
}

impl View {
    /// The first QP's of `conn`.
    fn of(conn: &Connected) -> Result<View> {
        let c = conn
            .conns
            .first()
            .ok_or_else(|| Error::Usage("no connection".into()))?;
        Ok(View {
            local: *c.local(),
            peer: *c.peer(),
            mtu: c.path_mtu().bytes(),
            _conn: None,
        })
    }
}

fn connect(
    s: &mut Settled,
    end: &End,
    links: &mut dyn mlx5_tools::connecting::Links,
    how: Announce,
) -> Result<Connected> {
    let timeout = s.params.io_timeout;
    let agreed = s.agreed.clone();
    s.driver.connect(end, links, &agreed, how, timeout)
}

/// libibverbs' data path (`--path verbs`), on any verbs device.
fn verbs(args: &LatArgs, p: &Plan, devs: &Devices, mut s: Settled) -> Result<()> {
    use mlx5_tools::connecting::VerbsLinks;
    use mlx5_tools::path::Verbs;
    use mlx5_tools::resources::VerbsResources;
    let dev = devs.verbs_device()?;
    let measuring = s.driver.session.is_client();
    let clock = nic_clock(p, &devs.local, measuring)?;
    let cfg = mlx5_tools::resources::ResourcesCfg {
        buf_len: 2 * s.half,
        ..p.cfg()
    };
    let (r, inline) = if clock.is_some() {
        VerbsResources::with_inline_timestamped(&devs.local, dev, &cfg, p.run.inline)?
    } else {
        VerbsResources::with_inline(&devs.local, dev, &cfg, p.run.inline)?
    };
    let end = r.end(&s.params);
    let mut v = Verbs::claim(&r)?;
    let recv =
        mlx5_tools::connecting::Receives::for_test(p.run.test, &r.mr, s.half, p.run.rx_depth)?;
    let how = announce(p, &s, &r.mr);
    let conn = {
        let mut links = VerbsLinks::new(&mut v, recv);
        connect(&mut s, &end, &mut links, how)?
    };
    let mut me = Pinger::new(v, &r.mr, &conn.conns[0], inline, p, clock)?;
    if let Some(peer) = conn.conns[0].ud_peer() {
        me.path.set_ud_peer(0, peer);
    }
    let mut view = View::of(&conn)?;
    view._conn = Some(conn);
    exit_on_failure(
        "lat",
        devs,
        drive(args, p, devs, me, s, view, &doorbell_line(p, None)),
    )
}

/// How long the peer may take for its part of the run (what this side waits through in a
/// handshake): every size's iterations at the device's pace, and a `-D` run's duration.
fn peer_run(p: &Plan, devs: &Devices, s: &Settled) -> Patience {
    let n = p.run.length.iters().unwrap_or(0);
    let bytes: u64 = s.sizes.iter().map(|&z| z.saturating_mul(n)).sum();
    let ops = n.saturating_mul(s.sizes.len() as u64);
    let extra = match p.run.length {
        mlx5_tools::args::Length::Duration { secs, .. } => {
            Duration::from_secs(secs.saturating_mul(s.sizes.len() as u64))
        }
        mlx5_tools::args::Length::Iters(_) => Duration::ZERO,
    };
    let prm = &s.params;
    Patience::for_work(
        Pace::of(devs),
        bytes.saturating_mul(2),
        ops.saturating_mul(2),
        extra,
        patience::retry_budget(p.run.conn, prm.timeout, prm.retry_cnt),
        &patience::describe_budget(p.run.conn, prm.timeout, prm.retry_cnt),
    )
}

/// The steps after the connect, the traffic of each size, and this side's report.
fn drive<P: DataPath>(
    args: &LatArgs,
    p: &Plan,
    devs: &Devices,
    mut me: Pinger<'_, P>,
    mut s: Settled,
    view: View,
    doorbell: &str,
) -> Result<()> {
    me.yield_idle = devs.software;
    me.remote_off = 0;
    // perftest fills its buffers: what the atomics' target holds is learnt from the first.
    me.target = None;
    me.half = s.half;
    let test = p.run.test;
    let client = s.driver.session.is_client();
    // perftest's servers of the WRITE and SEND tests measure too; of READ and atomics, not.
    let reports = client || matches!(test, Test::Write | Test::Send);
    let title = args.test.title(false, p.run.atomic, false);
    let peer_line = match &s.agreed.peer_version {
        Some(v) => format!(
            "perftest {v} ({}), {}",
            Program::of(test, false).name(),
            s.driver.session.peer()
        ),
        None => format!(
            "perftest, versions not exchanged, {}",
            s.driver.session.peer()
        ),
    };
    let mut extra = vec![
        ("Doorbell".into(), doorbell.to_string()),
        ("Exchange".into(), peer_line),
        ("local address".into(), describe_endpoint(&view.local)),
        ("remote address".into(), describe_endpoint(&view.peer)),
    ];
    extra.extend(run::run_lines(p.run.events, p.run.length, None));
    extra.extend(run::srq_line(&p.run));
    extra.extend(run::numa_line(devs, "lat"));
    p.run.say(
        &Banner {
            title: &title,
            device: &devs.name,
            path: args.common.path.describe(),
            connection: p.run.conn_name(),
            qps: 1,
            inline: me.inline,
            tx_depth: 1,
            mtu: view.mtu,
            extra,
        }
        .render(),
    );
    let whole = peer_run(p, devs, &s);
    me.pace(Pace::of(devs), p, &s.params);
    let mut rep = Reporter::new(p, title);
    rep.iterations = p.run.length.iters();
    if reports {
        rep.header();
    }
    let setup = s.params.io_timeout;
    while let Some(step) = s.driver.next_step() {
        match step {
            Step::Run { size } => {
                let size = s.sizes[size];
                let from = Instant::now();
                let rec = one_size(p, &mut me, size as usize, client)?;
                let took = from.elapsed();
                if reports {
                    rep.row(size, rec.finish(), from, took)?;
                }
            }
            Step::Sync { qp } => s.driver.sync(qp, whole.limit)?,
            Step::Close => s.driver.close(if client { setup } else { whole.limit })?,
            other => {
                return Err(Error::Usage(format!(
                    "a perftest latency run has no step {other:?}"
                )))
            }
        }
    }
    if reports {
        rep.finish()
    } else {
        p.run.say(report::RESULT_LINE);
        Ok(())
    }
}

/// One size's traffic as perftest's loop makes it, recorded: the time between consecutive
/// posts (WRITE, SEND; a round trip, halved), or each operation's own time (READ, atomics).
fn one_size<P: DataPath>(
    p: &Plan,
    me: &mut Pinger<'_, P>,
    size: usize,
    client: bool,
) -> Result<Recorder> {
    let test = p.run.test;
    let mut rec = Recorder::new(p)?;
    let n = p.run.length.iters();
    let end = match p.run.length {
        mlx5_tools::args::Length::Duration { secs, .. } => {
            Some(Instant::now() + Duration::from_secs(secs))
        }
        mlx5_tools::args::Length::Iters(_) => None,
    };
    let more = |k: u64| n.map_or_else(|| end.is_some_and(|e| Instant::now() < e), |n| k <= n);
    let mut progress = Progress::new(format!("{size} bytes"), n.unwrap_or(0));
    // Every message's last byte is its count, modulo 256, from 1 (perftest's `(char)scnt`).
    let stamp = |k: u64| k as u8;
    let mut last_post: Option<Instant> = None;
    let mut post = |me: &mut Pinger<'_, P>, rec: &mut Recorder, k: u64| -> Result<()> {
        let t = Instant::now();
        me.post_msg(test, size, stamp(k))?;
        if let Some(t0) = last_post {
            rec.record(t0, t);
        }
        last_post = Some(t);
        Ok(())
    };
    match (test, client) {
        (Test::Read | Test::Atomic, _) => {
            let mut k = 1;
            while more(k) {
                let t0 = Instant::now();
                me.one_op(test, p.run.atomic, size)?;
                rec.record(t0, Instant::now());
                progress.update(k);
                k += 1;
            }
        }
        (Test::Write, false) => {
            // The server posts first, then answers each of the client's messages.
            me.deadline = end;
            post(me, &mut rec, 1)?;
            let mut k = 1;
            while more(k) {
                if me.wait_msg(test, size, stamp(k))? == super::pinger::Waited::Stopped {
                    break;
                }
                if n.is_none_or(|n| k < n) {
                    post(me, &mut rec, k + 1)?;
                }
                progress.update(k);
                k += 1;
            }
        }
        (Test::Write, true) | (Test::Send, false) => {
            // The WRITE client and the SEND server wait for the peer's message, then post.
            me.deadline = end;
            let mut k = 1;
            while more(k) {
                if me.wait_msg(test, size, stamp(k))? == super::pinger::Waited::Stopped {
                    break;
                }
                post(me, &mut rec, k)?;
                progress.update(k);
                k += 1;
            }
        }
        (Test::Send, true) => {
            // The SEND client posts first and waits for each answer.
            me.deadline = end;
            let mut k = 1;
            while more(k) {
                post(me, &mut rec, k)?;
                if me.wait_msg(test, size, stamp(k))? == super::pinger::Waited::Stopped {
                    break;
                }
                progress.update(k);
                k += 1;
            }
        }
    }
    drop(progress);
    me.deadline = None;
    me.settle()?;
    Ok(rec)
}
