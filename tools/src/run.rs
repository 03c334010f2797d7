//! What `lat` and `bw` do alike around their runs: the process's exit status ([`exit_code`]), the
//! devices the command line names ([`on_run_devices`]), the checks that need a device and the
//! connect parameters they give ([`checked_params`]), the rendezvous of a run across processes
//! ([`rendezvous`]), the buffer a peer announced ([`remote_buffer_of`]), the message sizes a
//! connection carries ([`usable_sizes`]), the banner's lines about the run ([`run_lines`]), and
//! the part of a run's plan the common arguments make ([`RunPlan`]).

use crate::args::{AtomicArg, Common, ConnArg, Length, PathKind, Test};
use crate::connecting::Receives;
use crate::devices::{on_devices, Devices};
use crate::hello::{RunShape, Tool};
use crate::inline::InlineRequest;
use crate::rendezvous::{sizes_for_udp_link, FirstContact, Rendezvous, UdpBudget, UdpLink};
use crate::resources::ResourcesCfg;
use crate::serve::say;
use crate::{Error, Result};
use mlx5_connect::{ConnectParams, Connection, RemoteBuffer};
use mlx5_ctx::Mr;
use mlx5_hw::QpType;
use mlx5_qp::DoorbellMode;
use std::process::ExitCode;

/// The exit status of `tool` after its run `r`: success, or its error printed as
/// `tool: error: ...` and the error's status ([`Error::exit_code`]).
pub fn exit_code(tool: &str, r: Result<()>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{tool}: error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// Open the devices `c` names and run `f` on them ([`on_devices`]); first, with `-F`, the note
/// that it changes nothing here.
pub fn on_run_devices<T>(
    tool: &str,
    c: &Common,
    f: impl FnOnce(&Devices) -> Result<T>,
) -> Result<T> {
    for n in c.notes() {
        eprintln!("{tool}: note: {n}");
    }
    if c.cpu_freq {
        eprintln!(
            "{tool}: note: -F changes nothing here: these tools time with the monotonic clock, \
             not the CPU's cycle counter, and give no CPU frequency warning to silence"
        );
    }
    on_devices(tool, &c.device, c.tap(), c.loopback, c.server.is_some(), f)
}

/// The checks of `c` that need the device (`-i`, `--path`), and `params` with the source GID
/// index `-x` names (or the port's default, [`Devices::gid_index`]).
pub fn checked_params(devs: &Devices, c: &Common, params: &ConnectParams) -> Result<ConnectParams> {
    devs.check_port(c.ib_port)?;
    devs.check_path(c.path)?;
    Ok({
        let mut p = params.clone();
        p.gid_index = devs.gid_index_for(c.ib_port, c.gid_index, c.ipv6)?;
        p
    })
}

/// Across processes (no `--loopback`), the rendezvous `c` names (`-p`, the server's address);
/// a server first says that it waits, on standard error when `quiet` (`--output` keeps standard
/// output to the figures).
pub fn rendezvous(c: &Common, quiet: bool) -> Result<Option<Rendezvous>> {
    if c.loopback {
        return Ok(None);
    }
    let rv = Rendezvous::with_net(c.server.as_deref(), c.port, c.control_net())?;
    if !rv.is_client() {
        let line = format!(
            " Waiting for client to connect on TCP port {} ...",
            rv.port().unwrap_or(c.port)
        );
        if quiet {
            eprintln!("{line}");
        } else {
            say(&line);
        }
    }
    Ok(Some(rv))
}

/// Refuse perftest's exchange (`--perftest`) where it cannot carry the run: a software
/// ConnectX that reaches its peer process over UDP (perftest's messages have no field for a UDP
/// address: bind it to a TAP link instead, where it speaks native RoCEv2).
pub fn check_perftest(c: &Common, devs: &Devices) -> Result<()> {
    if c.plain_perftest() && c.connection == ConnArg::Dc {
        return Err(dc_with_perftest("--perftest"));
    }
    if c.plain_perftest() && c.connection == ConnArg::Xrc && c.path == PathKind::Verbs {
        return Err(xrc_with_perftest("--perftest"));
    }
    if c.plain_perftest() && devs.is_sim() && !devs.on_tap() {
        return Err(perftest_over_udp("--perftest"));
    }
    Ok(())
}

/// `-c DC` cannot run over perftest's exchange: these tools swap the DC addresses over RC QPs
/// of their own after their exchange (`crate::dc`), which stock perftest does not do.
fn dc_with_perftest(who: &str) -> Error {
    Error::Usage(format!(
        "{who}: -c DC runs only between these tools: they swap the DC addresses (DCT numbers \
         and keys) over RC QPs of their own after their exchange (docs/perftest.md, DC), which \
         stock perftest does not do; run both ends with these tools, without --perftest"
    ))
}

/// `-c XRC` over perftest's exchange runs on the direct path only: the verbs flows do not build
/// the XRC objects (`docs/perftest.md`, XRC).
fn xrc_with_perftest(who: &str) -> Error {
    Error::Usage(format!(
        "{who}: -c XRC --path verbs: not in this build (the verbs flows of lat and bw build no \
         XRC domain, SRQ or XRC QPs; docs/perftest.md, XRC): run -c XRC on --path direct"
    ))
}

fn perftest_over_udp(who: &str) -> Error {
    Error::Usage(format!(
        "{who}: the software ConnectX of this process reaches its peer over UDP, and perftest's \
         exchange has no field for a UDP address (docs/perftest.md): bind it to a TAP link \
         (--tap NAME, where it speaks native RoCEv2 to a RoCE peer such as Soft-RoCE), or run \
         this tool on both ends without --perftest"
    ))
}

/// Across processes, the first control connection and who the peer is: another of these
/// tools (`None`: the run goes on with their own exchange) or perftest (its session: stock
/// perftest connected, or `--perftest` asked for its exchange), each step within `timeout`.
pub fn first_contact(
    rv: &Rendezvous,
    c: &Common,
    devs: &Devices,
    timeout: std::time::Duration,
) -> Result<Option<crate::perftest::Session>> {
    let contact = if c.dont_xchg_versions {
        rv.first_raw(timeout)?
    } else {
        rv.first(timeout, c.perftest)?
    };
    match contact {
        FirstContact::Ours => Ok(None),
        FirstContact::Perftest(s) => {
            if c.connection == ConnArg::Dc {
                return Err(dc_with_perftest(&format!(
                    "the peer {} is stock perftest",
                    s.peer()
                )));
            }
            if c.connection == ConnArg::Xrc && c.path == PathKind::Verbs {
                return Err(xrc_with_perftest(&format!(
                    "the peer {} is stock perftest",
                    s.peer()
                )));
            }
            if devs.is_sim() && !devs.on_tap() {
                let who = match &s.peer_version {
                    Some(v) => format!("the peer {} is stock perftest (version {v})", s.peer()),
                    None => format!("the peer {}", s.peer()),
                };
                return Err(perftest_over_udp(&who));
            }
            Ok(Some(s))
        }
    }
}

/// The buffer the peer of `conn` announced.
pub fn remote_buffer_of(conn: &Connection) -> Result<RemoteBuffer> {
    conn.remote_buffer().ok_or_else(|| Error::Peer {
        peer: format!("QP {:#x}", conn.peer().qpn),
        why: "the peer announced no buffer".into(),
    })
}

/// The message sizes a run can do ([`usable_sizes`]).
#[derive(Debug)]
pub struct Sizes {
    /// The sizes, in the order asked for.
    pub sizes: Vec<u64>,
    /// Over a UDP link between processes, what it holds.
    pub budget: Option<UdpBudget>,
    /// A note naming the sizes left out (they do not fit the link), to print.
    pub note: Option<String>,
}

/// Of `sizes`, those a connection of `qp_type` with path MTU `mtu` over `udp` (a software
/// ConnectX reaching its peer process) carries: on a UD QP every size must be at most one MTU
/// (IBTA Vol. 1 §9.6: a UD message is one packet) or the run is refused; over a UDP link the
/// sizes it cannot hold at once are left out ([`sizes_for_udp_link`]).
pub fn usable_sizes(
    qp_type: QpType,
    sizes: &[u64],
    mtu: u32,
    udp: Option<&UdpLink>,
) -> Result<Sizes> {
    if qp_type == QpType::Ud {
        if let Some(&s) = sizes.iter().find(|&&s| s > u64::from(mtu)) {
            return Err(Error::Usage(format!(
                "-s {s}: a UD message is one packet, at most the path MTU ({mtu} bytes): use -s \
                 {mtu} or less (or -m)"
            )));
        }
    }
    let budget = udp.map(|u| u.budget(mtu));
    let (sizes, note) = sizes_for_udp_link(sizes, budget.as_ref())?;
    Ok(Sizes {
        sizes,
        budget,
        note,
    })
}

/// The banner's lines about the run, for [`crate::report::Banner::extra`]: how completions are
/// waited for (`-e`), the duration of a `-D` run, the UDP link between processes.
pub fn run_lines(events: bool, length: Length, udp: Option<&UdpLink>) -> Vec<(String, String)> {
    let mut lines = Vec::new();
    if events {
        lines.push((
            "Completions".into(),
            "events (-e): sleeps on the CQ's completion channel".into(),
        ));
    }
    if let Length::Duration { secs, margin } = length {
        lines.push((
            "Duration".into(),
            format!(
                "{secs} s, figures between {margin} s and {} s",
                secs - margin
            ),
        ));
    }
    if let Some(u) = udp {
        lines.push(("UDP link".into(), u.to_string()));
    }
    lines
}

/// The banner's `Using SRQ` line (perftest's `Using SRQ      : ON`) of a `--use-srq` run.
pub fn srq_line(p: &RunPlan) -> Option<(String, String)> {
    p.srq.then(|| {
        (
            "Using SRQ".into(),
            format!("ON ({} WRs shared)", p.rx_depth),
        )
    })
}

/// The banner's `NUMA node` line of a verbs device with a NUMA node (none on the software
/// ConnectX), saying on standard error, when this process is not bound to that node, how to
/// bind it (`crate::cpu`: perftest binds itself; these tools do not).
pub fn numa_line(devs: &Devices, tool: &str) -> Option<(String, String)> {
    devs.verbs.as_ref()?;
    let dir = std::path::Path::new(mlx5_hw::verbs::SYSFS_INFINIBAND).join(&devs.name);
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let p = crate::cpu::Placement::read(&dir, &status)?;
    if let Some(n) = p.note(&devs.name, tool) {
        eprintln!("{n}");
    }
    Some(p.banner_line())
}

/// What `lat` and `bw` plan alike from the common arguments, checked before any device is
/// opened; each tool's own plan holds it beside what is the tool's alone.
#[derive(Debug)]
pub struct RunPlan {
    /// `-e`: wait on a completion channel.
    pub events: bool,
    /// The test.
    pub test: Test,
    /// The connection type (`-c`).
    pub conn: QpType,
    /// The atomic of the atomic test (`-A`).
    pub atomic: AtomicArg,
    /// The message sizes, in the order they run.
    pub sizes: Vec<u64>,
    /// `-n` iterations or a `-D` duration.
    pub length: Length,
    /// What to ask the device for (READ, atomics: nothing).
    pub inline: InlineRequest,
    /// `--doorbell` (direct path only).
    pub doorbell: Option<DoorbellMode>,
    /// Offset of the receive half of every end's buffer (the send half starts at 0,
    /// [`Common::buffer_half`]).
    pub half: usize,
    /// Receives kept posted on each QP (the SEND test; `bw` derives it from `-r`).
    pub rx_depth: u32,
    /// What the peer process must have been started for.
    pub shape: RunShape,
    /// Connection parameters every QP starts from.
    pub params: ConnectParams,
    /// `--output`: standard output holds the figure only.
    pub quiet: bool,
    /// `--use-srq`: the SEND test's receives go through one shared receive queue of
    /// `rx_depth` WRs.
    pub srq: bool,
    /// `--cpu_util`: the CPU utilisation column of a `-D` run.
    pub cpu_util: crate::cpu::CpuUtil,
}

impl RunPlan {
    /// The plan `c` makes for `tool`'s `test` of `sizes` ([`Common::sizes`]) and `length`
    /// ([`Common::length`]), each tool having checked those its own way: the buffer halves
    /// (their memory checked), the run's shape, the inline request, the doorbell mode and the
    /// connect parameters.
    pub fn new(
        c: &Common,
        tool: Tool,
        test: Test,
        sizes: Vec<u64>,
        length: Length,
    ) -> Result<RunPlan> {
        let half = c.buffer_half(&sizes)?;
        let shape = c.run_shape(tool, test, &sizes, length);
        Ok(RunPlan {
            events: c.events,
            test,
            conn: c.connection.qp_type(),
            atomic: c.atomic_type,
            sizes,
            length,
            inline: InlineRequest::new(
                c.inline,
                test.default_inline(c.connection, tool == Tool::Bw),
            ),
            doorbell: c.doorbell_mode()?,
            half,
            rx_depth: c.rx_depth,
            shape,
            params: c.connect_params()?,
            quiet: c.output.is_some(),
            srq: c.use_srq,
            cpu_util: crate::cpu::CpuUtil::new(c.cpu_util),
        })
    }

    /// What each end of the run creates: `qps` QPs of `sq_depth` send WRs, receive queues of
    /// [`RunPlan::rx_depth`] for the SEND test (of one WR otherwise), the inline bytes asked
    /// for, both halves of the buffer.
    pub fn cfg(&self, qps: u32, sq_depth: u32) -> ResourcesCfg {
        let cfg = ResourcesCfg {
            qp_type: self.conn,
            qps,
            sq_depth,
            rq_depth: if self.test == Test::Send {
                self.rx_depth
            } else {
                1
            },
            inline: self.inline.bytes,
            buf_len: 2 * self.half,
            srq: (self.srq && self.test == Test::Send).then_some(self.rx_depth),
            events: self.events,
        };
        if self.conn.is_dc() {
            // `-c DC`: RC QPs connect the ends and carry the DC addresses (`crate::dc`).
            crate::dc::carrier_cfg(cfg, self)
        } else if self.conn.is_xrc() {
            // `-c XRC`: RC QPs connect the ends and carry the XRC addresses (`crate::xrc`).
            crate::xrc::carrier_cfg(cfg, self)
        } else {
            cfg
        }
    }

    /// The receives of the SEND test to post on each QP when it reaches Init, in the receive
    /// half of `mr` (`None` for the others, and for `-c DC`, whose receives go on the DCTs'
    /// SRQ: [`RunPlan::receives_on_srq`]).
    pub fn receives(&self, mr: &Mr) -> Result<Option<Receives>> {
        if self.conn.is_dc() || self.conn.is_xrc() {
            return Ok(None);
        }
        Receives::for_test(self.test, mr, self.half, self.rx_depth)
    }

    /// `-c DC`: the receives of the SEND test each DCT brings to the shared receive queue.
    pub fn receives_on_srq(&self, mr: &Mr) -> Result<Option<Receives>> {
        Receives::for_test(self.test, mr, self.half, self.rx_depth)
    }

    /// The connection type as the report names it (perftest's `-c` names: `DC` for a DCI
    /// sending to a DCT).
    pub fn conn_name(&self) -> &'static str {
        if self.conn.is_dc() {
            "DC"
        } else if self.conn.is_xrc() {
            "XRC"
        } else {
            self.conn.name()
        }
    }

    /// Say a line of the report, unless `--output` asks for the figure only.
    pub fn say(&self, line: &str) {
        if !self.quiet {
            say(line);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ud_size_above_the_mtu_is_refused_and_others_pass_whole() {
        let e = usable_sizes(QpType::Ud, &[64, 4096], 1024, None).unwrap_err();
        assert!(matches!(&e, Error::Usage(m) if m.contains("-s 4096") && m.contains("1024")));
        for qp_type in [QpType::Rc, QpType::Uc] {
            let s = usable_sizes(qp_type, &[2, 4096, 1 << 20], 1024, None).unwrap();
            assert_eq!(s.sizes, [2, 4096, 1 << 20]);
            assert!(s.budget.is_none() && s.note.is_none());
        }
        let s = usable_sizes(QpType::Ud, &[1024], 1024, None).unwrap();
        assert_eq!(s.sizes, [1024]);
    }

    #[test]
    fn the_run_lines_say_events_and_duration() {
        assert!(run_lines(false, Length::Iters(1000), None).is_empty());
        let lines = run_lines(true, Length::Duration { secs: 8, margin: 2 }, None);
        let names: Vec<&str> = lines.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["Completions", "Duration"]);
        assert_eq!(lines[1].1, "8 s, figures between 2 s and 6 s");
    }

    #[test]
    fn a_run_plan_sizes_the_ends_from_the_common_arguments() {
        use crate::args::LatArgs;
        use clap::Parser;
        let a =
            LatArgs::try_parse_from(["lat", "send", "-c", "UD", "-s", "100", "-r", "7"]).unwrap();
        let c = &a.common;
        let sizes = c.sizes(a.test, 2).unwrap();
        let length = c.length(1000, 10_000, "the test's limit").unwrap();
        let p = RunPlan::new(c, Tool::Lat, a.test, sizes, length).unwrap();
        assert_eq!((p.test, p.conn, p.rx_depth), (Test::Send, QpType::Ud, 7));
        assert_eq!(p.sizes, [100]);
        // 100 bytes and the 40-byte GRH of a UD receive, in whole lines.
        assert_eq!(p.half, 192);
        assert!(!p.quiet && !p.events);
        let cfg = p.cfg(3, 64);
        assert_eq!((cfg.qps, cfg.sq_depth, cfg.rq_depth), (3, 64, 7));
        assert_eq!(cfg.buf_len, 2 * 192);
        // Only the SEND test posts receives; the others keep a receive queue of one WR.
        let w = LatArgs::try_parse_from(["lat", "write", "--output", "latency"]).unwrap();
        let c = &w.common;
        let p = RunPlan::new(c, Tool::Lat, w.test, vec![2], Length::Iters(10)).unwrap();
        assert!(p.quiet);
        assert_eq!(p.cfg(1, 128).rq_depth, 1);
    }
}
