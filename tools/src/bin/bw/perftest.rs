//! `bw` against stock perftest (`ib_write_bw`, `ib_send_bw`, `ib_read_bw`, `ib_atomic_bw`) in
//! either role, over perftest's exchange (`mlx5_tools::perftest`): the prelude, the buffer the
//! peer may use, each program's steps, and the traffic as perftest's makes it: the client
//! sends (`run_iter_bw`), the server of the SEND test receives and reposts (`run_iter_bw_server`)
//! and reports what it received, the server of the other tests only serves and prints the
//! client's figures from its report (`xchg_bw_reports`); with `-b` both send and both print the
//! sum of the two reports.

use super::end::BwEnd;
use super::plan::Plan;
use super::{aim, buffers, direct_end_with};
use mlx5_connect::{ConnectParams, RemoteBuffer};
use mlx5_hw::{LinkLayer, Mtu, QpType};
use mlx5_tools::args::{BwArgs, Length, PathKind, Test};
use mlx5_tools::connecting::{Connected, End, Links, Receives};
use mlx5_tools::devices::Devices;
use mlx5_tools::path::{DataPath, Direct, GRH};
use mlx5_tools::patience::{self, Pace, Patience};
use mlx5_tools::perftest::connect::Announce;
use mlx5_tools::perftest::wire::BwReport;
use mlx5_tools::perftest::{self, Agreed, Driver, Ours, Program, RunFacts, Session, Shape, Step};
use mlx5_tools::progress::Progress;
use mlx5_tools::rendezvous::describe_endpoint;
use mlx5_tools::report::{self, Banner};
use mlx5_tools::resources::ResourcesCfg;
use mlx5_tools::run;
use mlx5_tools::serve::exit_on_failure;
use mlx5_tools::stats::{BwStats, PERFTEST_GBIT, PERFTEST_MB};
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
    a: &BwArgs,
    p: &Plan,
    devs: &Devices,
    params: &ConnectParams,
    mut session: Session,
) -> Result<()> {
    let c = &a.common;
    let test = p.run.test;
    let program = Program::of(test, true);
    let client = session.is_client();
    let port = devs.local.device().query_port(c.ib_port)?;
    let mtu = params
        .max_mtu
        .map_or(port.active_mtu, |m| m.min(port.active_mtu))
        .bytes();
    let facts = RunFacts {
        program,
        conn: p.run.conn,
        atomic: p.run.atomic,
        all: c.all,
        size: p.run.sizes.first().copied().unwrap_or(65536),
        size_given: c.size.is_some(),
        iters: p.run.length.iters(),
        duration: c.duration,
        qps: p.qps,
        gbits: p.gbits,
    };
    let ours = Ours {
        dont_xchg_versions: c.dont_xchg_versions,
        mtu,
        facts,
        device: perftest::device_summary(&devs.local.query_device()?),
    };
    let agreed = perftest::prelude(&mut session, &ours, params.io_timeout)?;
    let mtu = u64::from(agreed.mtu);
    let sizes = if p.run.conn != QpType::Ud {
        p.run.sizes.clone()
    } else if c.all {
        p.run.sizes.iter().copied().filter(|&s| s <= mtu).collect()
    } else {
        run::usable_sizes(p.run.conn, &p.run.sizes, agreed.mtu, None)?.sizes
    };
    let max = sizes.iter().copied().max().unwrap_or(8) as usize;
    let recv = if p.run.conn == QpType::Ud {
        max + GRH
    } else {
        max
    };
    let half = recv.max(agreed.cycle_buffer as usize).next_multiple_of(64);
    let xrc = p.run.conn.is_xrc();
    let shape = Shape {
        program,
        client,
        // perftest doubles the QPs of an XRC run with -b after its parser (an initiator and a
        // target per pair, each with its endpoint message: `write_bw.c`/`send_bw.c` `main`,
        // `num_of_qps *= 2`); a one-way run keeps -q (initiators or targets).
        qps: if xrc && p.bidirectional {
            2 * p.qps as usize
        } else {
            p.qps as usize
        },
        sizes: sizes.len(),
        all: c.all,
        duplex: p.bidirectional,
        duration: c.duration.is_some(),
    };
    let s = Settled {
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
        PathKind::Direct => direct(a, p, devs, s),
        PathKind::Verbs => verbs(a, p, devs, s),
    }
}

fn cfg(p: &Plan, s: &Settled) -> ResourcesCfg {
    ResourcesCfg {
        buf_len: 2 * s.half,
        ..p.cfg()
    }
}

fn announce(p: &Plan, s: &Settled, mr: &mlx5_ctx::Mr) -> Announce {
    Announce {
        test: p.run.test,
        target: RemoteBuffer {
            addr: mr.addr() + s.half as u64,
            rkey: mr.rkey(),
            len: s.half as u64,
        },
        gid: s.gid_form,
        uses: s.sizes.iter().copied().max().unwrap_or(8),
    }
}

fn connect(s: &mut Settled, end: &End, links: &mut dyn Links, how: Announce) -> Result<Connected> {
    let timeout = s.params.io_timeout;
    let agreed = s.agreed.clone();
    s.driver.connect(end, links, &agreed, how, timeout)
}

/// This library's data path.
fn direct(a: &BwArgs, p: &Plan, devs: &Devices, mut s: Settled) -> Result<()> {
    let (mut me, inline) = direct_end_with(&devs.local, p, &cfg(p, &s))?;
    let doorbell = super::doorbell_of(p, &me);
    let recv = Receives::for_test(p.run.test, &me.mr, s.half, p.run.rx_depth)?;
    let how = announce(p, &s, &me.mr);
    if p.run.conn.is_xrc() {
        return xrc(a, p, devs, s, me, (inline, recv, how, &doorbell));
    }
    let end = me.end(&s.params);
    let (mut links, mr) = me.links(recv)?;
    let conn = connect(&mut s, &end, &mut links, how)?;
    let mut path = Direct::new(links.qps, links.cq).with_srq(links.srq);
    aim(&mut path, &conn.conns);
    let e = BwEnd::new(path, p, mr, buffers(&conn.conns)?, inline)?;
    let view = View::of(conn);
    exit_on_failure(
        "bw",
        devs,
        drive(a, p, devs, e, s, view, (inline, &doorbell)),
    )
}

/// `-c XRC` in perftest's layout (`mlx5_tools::perftest::xrc`): in a one-way run the client
/// has `-q` initiators and the server `-q` targets (`src/perftest_resources.c`
/// `ctx_xrc_qp_create`); with `-b` each end has one of each. The XRC SRQ takes the SEND
/// test's receives; the run's RC QPs stay in Reset.
fn xrc(
    a: &BwArgs,
    p: &Plan,
    devs: &Devices,
    mut s: Settled,
    mut me: mlx5_tools::resources::Resources,
    (inline, recv, how, doorbell): (u32, Option<Receives>, Announce, &str),
) -> Result<()> {
    let client = s.driver.session.is_client();
    let layout = perftest::xrc::Layout::of(p.qps as usize, p.bidirectional, client)?;
    let roles = (layout.initiators() as u32, layout.targets() as u32);
    // Only an end that receives SENDs posts receives (on its XRC SRQ).
    let recv = recv.filter(|_| p.receives_sends(client));
    let mut x = mlx5_tools::xrc::XrcEnd::with_roles(&mut me, &p.run, roles, p.depth, inline, recv)?;
    let peers = s.driver.connect_xrc(
        &mut x,
        &devs.local,
        &s.params,
        layout,
        how,
        (&s.agreed, s.params.io_timeout),
    )?;
    p.run.say(&x.describe_via(if layout.both {
        "perftest's endpoint messages carried the addresses (initiators first, then targets)"
    } else {
        "perftest's endpoint messages carried the addresses (one per QP)"
    }));
    let inline = if roles.0 > 0 {
        inline.min(x.max_inline())
    } else {
        inline
    };
    // A one-way server posts nothing: the peer's buffers only size its waits, one per QP.
    let remotes = if peers.remotes.is_empty() {
        vec![how.target; layout.pairs]
    } else {
        peers.remotes.clone()
    };
    let view = View {
        qps: vec![(peers.local, peers.peer)],
        mtu: peers.path_mtu.bytes(),
        _conn: None,
    };
    let e = BwEnd::new(x.path(&mut me.cq)?, p, &me.mr, remotes, inline)?;
    exit_on_failure(
        "bw",
        devs,
        drive(a, p, devs, e, s, view, (inline, doorbell)),
    )
}

/// What the banner shows of the connection (each QP's endpoints, the path MTU), and what
/// keeps it alive.
struct View {
    qps: Vec<(mlx5_connect::Endpoint, mlx5_connect::Endpoint)>,
    mtu: u32,
    _conn: Option<Connected>,
}

impl View {
    /// The QPs of `conn`, which the view keeps until the run ends.
    fn of(conn: Connected) -> View {
        View {
            qps: conn.conns.iter().map(|c| (*c.local(), *c.peer())).collect(),
            mtu: conn.conns.first().map_or(0, |c| c.path_mtu().bytes()),
            _conn: Some(conn),
        }
    }
}

/// libibverbs' data path (`--path verbs`), on any verbs device.
fn verbs(a: &BwArgs, p: &Plan, devs: &Devices, mut s: Settled) -> Result<()> {
    use mlx5_tools::connecting::VerbsLinks;
    use mlx5_tools::path::Verbs;
    use mlx5_tools::resources::VerbsResources;
    let dev = devs.verbs_device()?;
    let (me, inline) = VerbsResources::with_inline(&devs.local, dev, &cfg(p, &s), p.run.inline)?;
    let end = me.end(&s.params);
    let mut v = Verbs::claim(&me)?;
    let recv = Receives::for_test(p.run.test, &me.mr, s.half, p.run.rx_depth)?;
    let how = announce(p, &s, &me.mr);
    let conn = {
        let mut links = VerbsLinks::new(&mut v, recv);
        connect(&mut s, &end, &mut links, how)?
    };
    aim(&mut v, &conn.conns);
    let e = BwEnd::new(v, p, &me.mr, buffers(&conn.conns)?, inline)?;
    let doorbell = "libibverbs' own (ibv_post_send)";
    let view = View::of(conn);
    exit_on_failure(
        "bw",
        devs,
        drive(a, p, devs, e, s, view, (inline, doorbell)),
    )
}

/// The unit of the figures in a report: bytes per second of one MiB/s, or of one Gb/s.
fn unit(p: &Plan) -> f64 {
    if p.gbits {
        PERFTEST_GBIT
    } else {
        PERFTEST_MB
    }
}

/// perftest's report of `s` (`print_report_bw`'s fields, in the run's unit).
fn report_of(p: &Plan, s: &BwStats) -> BwReport {
    BwReport {
        size: s.bytes,
        iters: s.iterations,
        bw_peak: s.peak_bps / unit(p),
        bw_avg: s.avg_bps / unit(p),
        msg_rate: s.msg_rate / 1e6,
    }
}

/// The figures of a peer's report.
fn stats_of(p: &Plan, r: &BwReport) -> BwStats {
    BwStats {
        bytes: r.size,
        iterations: r.iters,
        peak_bps: r.bw_peak * unit(p),
        avg_bps: r.bw_avg * unit(p),
        msg_rate: r.msg_rate * 1e6,
    }
}

/// How long the peer may take for its part of the run (what this side waits through in a
/// handshake): every size's messages on every QP at the device's pace, and a `-D` run's time.
fn peer_run(p: &Plan, devs: &Devices, s: &Settled) -> Patience {
    let n = p.run.length.iters().unwrap_or(0) * u64::from(p.qps);
    let bytes: u64 = s.sizes.iter().map(|&z| z.saturating_mul(n)).sum();
    let extra = match p.run.length {
        Length::Duration { secs, .. } => Duration::from_secs(secs),
        Length::Iters(_) => Duration::ZERO,
    };
    budget(
        p,
        devs,
        s,
        bytes,
        n.saturating_mul(s.sizes.len() as u64),
        extra,
    )
}

fn budget(
    p: &Plan,
    devs: &Devices,
    s: &Settled,
    bytes: u64,
    ops: u64,
    extra: Duration,
) -> Patience {
    let prm = &s.params;
    Patience::for_work(
        Pace::of(devs),
        bytes,
        ops,
        extra,
        patience::retry_budget(p.run.conn, prm.timeout, prm.retry_cnt),
        &patience::describe_budget(p.run.conn, prm.timeout, prm.retry_cnt),
    )
}

/// The steps after the connect, each size's traffic and the report.
fn drive<P: DataPath>(
    a: &BwArgs,
    p: &Plan,
    devs: &Devices,
    mut e: BwEnd<'_, P>,
    mut s: Settled,
    view: View,
    (inline, doorbell): (u32, &str),
) -> Result<()> {
    e.yield_idle = devs.software;
    e.pace = Pace::of(devs);
    // perftest announces the target itself: atomics and messages go to its start.
    e.remote_off = 0;
    e.recv_sge = e.mr.sge(s.half, s.half as u32)?;
    let client = s.driver.session.is_client();
    let sends = p.sends(client);
    let recvs = p.receives_sends(client);
    let version = s
        .agreed
        .peer_version
        .as_ref()
        .map_or_else(|| "versions not exchanged".into(), |v| v.to_string());
    let mut extra = vec![
        ("Doorbell".into(), doorbell.to_string()),
        (
            "Exchange".into(),
            format!(
                "perftest {version} ({}), {}",
                Program::of(p.run.test, true).name(),
                s.driver.session.peer()
            ),
        ),
    ];
    if p.run.test == Test::Send {
        extra.push(("RX depth".into(), p.run.rx_depth.to_string()));
    }
    extra.push(("CQ Moderation".into(), p.cq_mod.to_string()));
    extra.extend(run::run_lines(p.run.events, p.run.length, None));
    extra.extend(run::srq_line(&p.run));
    extra.extend(run::numa_line(devs, "bw"));
    for (i, (local, peer)) in view.qps.iter().enumerate().take(4) {
        extra.push((
            format!("QP {i}"),
            format!(
                "local {}, remote {}",
                describe_endpoint(local),
                describe_endpoint(peer)
            ),
        ));
    }
    let title = p.run.test.title(true, p.run.atomic, p.bidirectional);
    p.run.say(
        &Banner {
            title: &title,
            device: &devs.name,
            path: a.common.path.describe(),
            connection: p.run.conn_name(),
            qps: p.qps,
            inline,
            tx_depth: p.depth,
            mtu: view.mtu,
            extra,
        }
        .render(),
    );
    p.run.say(&p.header());
    let whole = peer_run(p, devs, &s);
    let setup = s.params.io_timeout;
    let mut last: Option<BwStats> = None;
    while let Some(step) = s.driver.next_step() {
        match step {
            Step::Run { size } => {
                let size = s.sizes[size];
                let mine = one_size(p, &mut e, size, sends, recvs)?;
                // A bidirectional run prints the sum once the peer's report is in.
                if !p.bidirectional {
                    if let Some(m) = &mine {
                        p.row(m);
                    }
                }
                last = mine;
            }
            Step::Sync { qp } => s.driver.sync(qp, whole.limit)?,
            Step::Reports => {
                let mine = last.unwrap_or(BwStats {
                    bytes: s.sizes.last().copied().unwrap_or(0),
                    iterations: 0,
                    peak_bps: 0.0,
                    avg_bps: 0.0,
                    msg_rate: 0.0,
                });
                let raw = s.driver.reports(&report_of(p, &mine), whole.limit)?;
                // The peer's report holds figures only where it measured: in a bidirectional
                // run, and from the client of a one-sided run (a passive server's report is
                // whatever its memory held).
                if p.bidirectional || !client {
                    let theirs = BwReport::decode(&raw).map_err(|why| Error::Peer {
                        peer: s.driver.session.peer().to_string(),
                        why,
                    })?;
                    let t = stats_of(p, &theirs);
                    p.row(&if p.bidirectional { mine.plus(&t) } else { t });
                }
            }
            Step::Close => s.driver.close(if client { setup } else { whole.limit })?,
            other => {
                return Err(Error::Usage(format!(
                    "a perftest bandwidth run has no step {other:?}"
                )))
            }
        }
    }
    p.run.say(report::RESULT_LINE);
    Ok(())
}

/// One size's traffic: this side's flow (`sends`) and receives (`recvs`) until both are done;
/// its figures: the flow's, or a receiving server's from its first to its last receive
/// (perftest's server of the SEND test reports so, without a peak).
fn one_size<P: DataPath>(
    p: &Plan,
    e: &mut BwEnd<'_, P>,
    size: u64,
    sends: bool,
    recvs: bool,
) -> Result<Option<BwStats>> {
    e.start(p, size, p.depth, sends, recvs)?;
    let end = match p.run.length {
        Length::Duration { secs, .. } => Some(Instant::now() + Duration::from_secs(secs)),
        Length::Iters(_) => None,
    };
    let lossy = matches!(p.run.conn, QpType::Uc | QpType::Ud);
    let total = e.flow.as_ref().and_then(|f| f.total()).unwrap_or(0);
    let mut progress = Progress::new(format!("{size} bytes"), total);
    let mut spins = 0u32;
    loop {
        let busy = e.step()?;
        let sink_done = match (&e.sink, end) {
            (None, _) => true,
            // A -D receiver runs for its own duration, as perftest's server does.
            (Some(_), Some(end)) => Instant::now() >= end,
            // A lost UC/UD message never comes: once messages came, a pause ends the wait.
            (Some(k), None) => {
                k.is_done() || (lossy && k.got() > 0 && k.last_arrival.elapsed() > e.loss_grace())
            }
        };
        if e.flow_done() && sink_done {
            break;
        }
        if !busy {
            spins = spins.wrapping_add(1);
            // A -D receiver waits for the peer's SENDs until its own end, however few come.
            if spins.is_multiple_of(1024) && end.is_none() {
                e.stalled()?;
            }
            e.idle();
        }
        if let Some(f) = &e.flow {
            progress.update(f.completed & !1023);
        }
    }
    drop(progress);
    super::loss_note(p, e);
    if let Some(f) = &e.flow {
        return Ok(Some(f.stats()));
    }
    Ok(e.sink.as_ref().and_then(|k| {
        let first = k.first_arrival?;
        let span = k.last_arrival.saturating_duration_since(first);
        Some(BwStats::new(size, k.got(), span.max(Duration::from_nanos(1)), None).without_peak())
    }))
}
