//! The run's plan: the arguments checked and turned into what every end needs before any
//! device is opened.

use super::UC_MAX_RX;
use mlx5_hw::QpType;
use mlx5_tools::args::{BwArgs, OutputArg, Test};
use mlx5_tools::hello::Tool;
use mlx5_tools::limits;
use mlx5_tools::report;
use mlx5_tools::resources::ResourcesCfg;
use mlx5_tools::run::RunPlan;
use mlx5_tools::serve::say;
use mlx5_tools::stats::{BwStats, PERFTEST_GBIT, PERFTEST_MB};
use mlx5_tools::Result;

/// The run's plan, from the arguments, checked before any device is opened.
pub(super) struct Plan {
    /// What `lat` plans alike.
    pub(super) run: RunPlan,
    /// `-q`.
    pub(super) qps: u32,
    /// Send WRs in flight per QP: `-t`, at most the run's messages.
    pub(super) depth: u32,
    /// `-Q`: a signaled WR every this many, at most `depth`.
    pub(super) cq_mod: u64,
    /// `-b`.
    pub(super) bidirectional: bool,
    /// `--output`.
    pub(super) output: Option<OutputArg>,
    /// `--report_gbits`.
    pub(super) gbits: bool,
}

pub(super) fn plan(a: &BwArgs) -> Result<Plan> {
    let c = &a.common;
    c.check(
        a.test,
        &[OutputArg::Bandwidth, OutputArg::MessageRate],
        "bw",
    )?;
    a.check()?;
    let default_iters = if a.test == Test::Write { 5000 } else { 1000 };
    let sizes = c.sizes(a.test, 65536)?;
    let length = c.length(
        default_iters,
        limits::MAX_ITERS,
        "perftest's limit, MAX_ITER",
    )?;
    let mut run = RunPlan::new(c, Tool::Bw, a.test, sizes, length)?;
    // perftest `force_dependecies`: no deeper queues than the run has messages, and on UC/UD
    // the default receive depth is every message of the run (at most UC_MAX_RX).
    let iters = length.iters();
    let depth = match iters {
        Some(n) => u64::from(a.tx_depth).min(n) as u32,
        None => a.tx_depth,
    };
    if a.test == Test::Send {
        if matches!(run.conn, QpType::Uc | QpType::Ud) && run.rx_depth == 512 {
            run.rx_depth = iters.unwrap_or(UC_MAX_RX).min(UC_MAX_RX) as u32;
        }
        if let Some(n) = iters {
            run.rx_depth = u64::from(run.rx_depth).min(n) as u32;
        }
    }
    run.shape.qps = a.qps;
    run.shape.bidirectional = a.bidirectional;
    run.shape.gbits = a.report_gbits;
    Ok(Plan {
        run,
        qps: a.qps,
        depth,
        // A completion at least every `depth` WRs, or the window never reopens.
        cq_mod: u64::from(a.cq_mod.min(depth.max(1))),
        bidirectional: a.bidirectional,
        output: c.output,
        gbits: a.report_gbits,
    })
}

impl Plan {
    pub(super) fn cfg(&self) -> ResourcesCfg {
        self.run.cfg(self.qps, self.depth)
    }

    /// The row of `s`, or with `--output` its one number.
    pub(super) fn row(&self, s: &BwStats) {
        let unit = if self.gbits {
            PERFTEST_GBIT
        } else {
            PERFTEST_MB
        };
        match self.output {
            Some(OutputArg::Bandwidth) => say(&format!("{:.6}", s.avg_bps / unit)),
            Some(OutputArg::MessageRate) => say(&format!("{:.6}", s.msg_rate / 1e6)),
            _ => say(&format!(
                "{}{}",
                report::bw_row(s, self.gbits),
                self.run.cpu_util.row_ext()
            )),
        }
    }

    /// The column header (`--cpu_util` adds perftest's `CPU_Util[%]`).
    pub(super) fn header(&self) -> String {
        format!(
            "{}{}",
            report::bw_header(self.gbits),
            self.run.cpu_util.header_ext()
        )
    }

    /// Whether an end of this run sends: the client always, the server with `-b`.
    pub(super) fn sends(&self, client: bool) -> bool {
        client || self.bidirectional
    }

    /// Whether an end of this run receives SENDs: the server of the send test, and with `-b`
    /// both ends.
    pub(super) fn receives_sends(&self, client: bool) -> bool {
        self.run.test == Test::Send && (!client || self.bidirectional)
    }
}
