//! The run's plan: the arguments checked and turned into what every end needs before any
//! device is opened.

use super::UC_MAX_RX;
use mlx5_connect::ConnectParams;
use mlx5_ctx::Mr;
use mlx5_hw::QpType;
use mlx5_qp::DoorbellMode;
use mlx5_tools::args::{AtomicArg, BwArgs, Length, OutputArg, Test};
use mlx5_tools::connecting::Receives;
use mlx5_tools::hello::{RunShape, Tool};
use mlx5_tools::inline::InlineRequest;
use mlx5_tools::limits;
use mlx5_tools::report;
use mlx5_tools::resources::ResourcesCfg;
use mlx5_tools::serve::say;
use mlx5_tools::stats::{BwStats, PERFTEST_GBIT, PERFTEST_MB};
use mlx5_tools::Result;

/// The run's plan, from the arguments, checked before any device is opened.
pub(super) struct Plan {
    /// `-e`: wait on a completion channel.
    pub(super) events: bool,
    pub(super) test: Test,
    pub(super) conn: QpType,
    pub(super) atomic: AtomicArg,
    pub(super) sizes: Vec<u64>,
    pub(super) length: Length,
    pub(super) qps: u32,
    pub(super) depth: u32,
    pub(super) cq_mod: u64,
    pub(super) rx_depth: u32,
    pub(super) bidirectional: bool,
    /// What to ask the device for (READ, atomics: nothing).
    pub(super) inline: InlineRequest,
    pub(super) doorbell: Option<DoorbellMode>,
    /// Offset of the receive area of every buffer (sends start at 0).
    pub(super) half: usize,
    pub(super) shape: RunShape,
    pub(super) params: ConnectParams,
    pub(super) output: Option<OutputArg>,
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
    let conn = c.connection.qp_type();
    let half = c.buffer_half(&sizes)?;
    // perftest `force_dependecies`: no deeper queues than the run has messages, and on UC/UD
    // the default receive depth is every message of the run (at most UC_MAX_RX).
    let iters = length.iters();
    let depth = match iters {
        Some(n) => u64::from(a.tx_depth).min(n) as u32,
        None => a.tx_depth,
    };
    let mut rx_depth = c.rx_depth;
    if a.test == Test::Send {
        if matches!(conn, QpType::Uc | QpType::Ud) && rx_depth == 512 {
            rx_depth = iters.unwrap_or(UC_MAX_RX).min(UC_MAX_RX) as u32;
        }
        if let Some(n) = iters {
            rx_depth = u64::from(rx_depth).min(n) as u32;
        }
    }
    let mut shape = c.run_shape(Tool::Bw, a.test, &sizes, length);
    shape.qps = a.qps;
    shape.bidirectional = a.bidirectional;
    Ok(Plan {
        events: a.common.events,
        test: a.test,
        conn,
        atomic: c.atomic_type,
        sizes,
        length,
        qps: a.qps,
        depth,
        // A completion at least every `depth` WRs, or the window never reopens.
        cq_mod: u64::from(a.cq_mod.min(depth.max(1))),
        rx_depth,
        bidirectional: a.bidirectional,
        inline: InlineRequest::new(c.inline, a.test.default_inline(c.connection)),
        doorbell: c.doorbell_mode()?,
        half,
        shape,
        params: c.connect_params()?,
        output: c.output,
        gbits: a.report_gbits,
    })
}

impl Plan {
    pub(super) fn cfg(&self) -> ResourcesCfg {
        ResourcesCfg {
            qp_type: self.conn,
            qps: self.qps,
            sq_depth: self.depth,
            rq_depth: if self.test == Test::Send {
                self.rx_depth
            } else {
                1
            },
            inline: self.inline.bytes,
            buf_len: 2 * self.half,
            srq: None,
            events: self.events,
        }
    }

    /// The receives of the SEND test, in the receive half of `mr`.
    pub(super) fn receives(&self, mr: &Mr) -> Result<Option<Receives>> {
        Receives::for_test(self.test, mr, self.half, self.rx_depth)
    }

    pub(super) fn quiet(&self) -> bool {
        self.output.is_some()
    }

    pub(super) fn say(&self, line: &str) {
        if !self.quiet() {
            say(line);
        }
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
            _ => say(&report::bw_row(s, self.gbits)),
        }
    }

    /// Whether an end of this run sends: the client always, the server with `-b`.
    pub(super) fn sends(&self, client: bool) -> bool {
        client || self.bidirectional
    }

    /// Whether an end of this run receives SENDs: the server of the send test, and with `-b`
    /// both ends.
    pub(super) fn receives_sends(&self, client: bool) -> bool {
        self.test == Test::Send && (!client || self.bidirectional)
    }
}
