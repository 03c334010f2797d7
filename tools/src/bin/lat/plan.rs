//! The run's plan: the arguments checked and turned into what every end needs before any
//! device is opened.

use super::pinger::Nic;
use mlx5_tools::args::{LatArgs, Length, OutputArg, Test};
use mlx5_tools::hello::Tool;
use mlx5_tools::limits;
use mlx5_tools::resources::ResourcesCfg;
use mlx5_tools::run::RunPlan;
use mlx5_tools::timestamps::{Marker, NicRecorder};
use mlx5_tools::{Error, Result};
use std::fs::File;

/// Send WRs of each end's QP.
pub(super) const SQ_DEPTH: u32 = 128;

/// Signaled sends a pinger leaves outstanding before it drains: well under the SQ depth
/// ([`SQ_DEPTH`]) and the CQ the ends are created with.
pub(super) const MAX_OUTSTANDING_SENDS: u64 = 64;

/// The run's plan, from the arguments, checked before any device is opened.
pub(super) struct Plan {
    /// What `bw` plans alike.
    pub(super) run: RunPlan,
    /// `-H` / `-U`.
    pub(super) listing: Listing,
    /// `--histogram`, `--hlog`, opened before the run.
    pub(super) svg: Option<(File, String)>,
    pub(super) hlog: Option<(File, String)>,
    /// `--timestamps`: the measuring end's CQ has completion timestamps.
    pub(super) timestamps: bool,
}

/// What `-H` / `-U` print.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Listing {
    None,
    Sorted,
    Unsorted,
}

pub(super) fn plan(args: &LatArgs) -> Result<Plan> {
    let c = &args.common;
    c.check(args.test, &[OutputArg::Latency], "lat")?;
    let sizes = c.sizes(args.test, 2)?;
    let (max_iters, why) = limits::max_lat_iters();
    let length = c.length(1000, max_iters, &why)?;
    let run = RunPlan::new(c, Tool::Lat, args.test, sizes, length)?;
    let open = |flag: &str, p: &Option<std::path::PathBuf>| -> Result<Option<(File, String)>> {
        p.as_ref()
            .map(|p| Ok((limits::create_output(flag, p)?, p.display().to_string())))
            .transpose()
    };
    if args.timestamps {
        // The NIC's samples are kept like the CPU's, one per iteration of -n; -e polls with
        // the blocking call, which reads no timestamps; --output prints one figure only.
        let clash = if matches!(length, Length::Duration { .. }) {
            Some("-D (it needs -n: every timestamp is kept)")
        } else if c.events {
            Some("-e (the blocking poll reads no timestamps)")
        } else if c.output.is_some() {
            Some("--output (it prints one figure only)")
        } else {
            None
        };
        if let Some(what) = clash {
            return Err(Error::Usage(format!(
                "--timestamps cannot be used with {what}"
            )));
        }
    }
    let svg = open("--histogram", &args.histogram)?;
    let hlog = open("--hlog", &args.hlog)?;
    Ok(Plan {
        run,
        listing: if args.report_unsorted {
            Listing::Unsorted
        } else if args.report_histogram {
            Listing::Sorted
        } else {
            Listing::None
        },
        svg,
        hlog,
        timestamps: args.timestamps,
    })
}

impl Plan {
    pub(super) fn cfg(&self) -> ResourcesCfg {
        self.run.cfg(1, SQ_DEPTH)
    }

    /// How many halves of a round trip one sample is: 2 for a ping-pong, 1 for READ and
    /// atomics (perftest's `rtt_factor`).
    pub(super) fn halves(&self) -> u32 {
        match self.run.test {
            Test::Write | Test::Send => 2,
            Test::Read | Test::Atomic => 1,
        }
    }

    /// Which completion ends an iteration on the measuring end (`--timestamps`).
    pub(super) fn marker(&self) -> Marker {
        match self.run.test {
            Test::Send => Marker::Receive,
            Test::Write | Test::Read | Test::Atomic => Marker::Send,
        }
    }

    /// The NIC's clock and recorder of the measuring end (`--timestamps`), `None` without it.
    pub(super) fn nic(&self, clock: Option<mlx5_hw::ClockInfo>) -> Result<Option<Nic>> {
        match clock {
            Some(clock) if self.timestamps => Ok(Some(Nic {
                clock,
                rec: NicRecorder::new(self.marker(), self.run.length.iters().unwrap_or(0))?,
            })),
            _ => Ok(None),
        }
    }
}
