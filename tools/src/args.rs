//! Command-line arguments of `lat` and `bw`, with perftest's flag names where they make sense
//! (perftest `src/perftest_parameters.c` `usage`): `-d/--ib-dev`, `-i/--ib-port`,
//! `-p/--port`, `-s/--size`, `-n/--iters`, `-a/--all`, `-I/--inline_size`, `-q/--qp`,
//! `-t/--tx-depth`, `-x/--gid-index`, `--report_gbits`; the server is the side started
//! without an address. `--doorbell` is this library's own: how the direct path rings the
//! doorbell (`mlx5_qp::DoorbellMode`).

use super::error::{Error, Result};
use clap::{Args, Parser, ValueEnum};
use mlx5_qp::DoorbellMode;
use std::path::PathBuf;

/// Which post path to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PathKind {
    /// This library's data path: WQEs written by Rust, doorbell/BlueFlame, raw CQEs.
    Direct,
    /// libibverbs' `ibv_post_send` / `ibv_poll_cq` on the same device (needs a verbs device).
    Verbs,
}

impl PathKind {
    /// How the banner names it.
    pub fn describe(self) -> &'static str {
        match self {
            PathKind::Direct => "direct (mlx5-direct post/poll)",
            PathKind::Verbs => "verbs (ibv_post_send/ibv_poll_cq)",
        }
    }
}

/// How the direct path rings the doorbell (`--doorbell`), one per [`DoorbellMode`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DoorbellArg {
    /// BlueFlame copy with no flush after a whole-line copy (UCX `BF_POST`).
    #[value(name = "bfpost")]
    BfPost,
    /// BlueFlame copy, flushed after every copy (rdma-core `post_send_db`).
    Bf,
    /// 8-byte doorbells only (rdma-core with `MLX5_SHUT_UP_BF=1`).
    Db,
}

impl DoorbellArg {
    /// The data path's mode.
    pub fn mode(self) -> DoorbellMode {
        match self {
            DoorbellArg::BfPost => DoorbellMode::BfPost,
            DoorbellArg::Bf => DoorbellMode::Bf,
            DoorbellArg::Db => DoorbellMode::Db,
        }
    }

    /// The flag's value for `mode`.
    pub fn of(mode: DoorbellMode) -> DoorbellArg {
        match mode {
            DoorbellMode::BfPost => DoorbellArg::BfPost,
            DoorbellMode::Bf => DoorbellArg::Bf,
            DoorbellMode::Db => DoorbellArg::Db,
        }
    }

    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            DoorbellArg::BfPost => "bfpost",
            DoorbellArg::Bf => "bf",
            DoorbellArg::Db => "db",
        }
    }
}

/// How the banner names a QP's doorbell mode: the flag's value and what it does (`chosen`:
/// `--doorbell` asked for it, else it is the QP's default), e.g. `bf: BlueFlame, flushed after
/// every copy (rdma-core post_send_db)`.
pub fn describe_doorbell(mode: DoorbellMode, chosen: bool) -> String {
    let what = match mode {
        DoorbellMode::BfPost => "BlueFlame, no flush after a whole-line copy (UCX BF_POST)",
        DoorbellMode::Bf => "BlueFlame, flushed after every copy (rdma-core post_send_db)",
        DoorbellMode::Db => "8-byte doorbell only (rdma-core with MLX5_SHUT_UP_BF=1)",
    };
    let how = if chosen { "" } else { "; the QP's default" };
    format!("{}: {what}{how}", DoorbellArg::of(mode).name())
}

/// What both tools share.
#[derive(Args, Clone, Debug)]
pub struct Common {
    /// The server's address: given, this side is the client; omitted, the server.
    pub server: Option<String>,
    /// Device: `sim` (the software ConnectX, default) or a verbs device such as `mlx5_0`
    /// (needs the `verbs` feature).
    #[arg(short = 'd', long = "ib-dev", default_value = "sim")]
    pub device: String,
    /// Device port.
    #[arg(short = 'i', long = "ib-port", default_value_t = 1)]
    pub ib_port: u8,
    /// Source GID index on a RoCE port (default: a RoCE v2 GID of an IPv4 address, as
    /// perftest picks one; index 0 on the software ConnectX).
    #[arg(short = 'x', long = "gid-index")]
    pub gid_index: Option<u8>,
    /// TCP port of the endpoint exchange (perftest's default; 0: the server picks a free one
    /// and prints it).
    #[arg(short = 'p', long = "port", default_value_t = 18515)]
    pub port: u16,
    /// Message size in bytes.
    #[arg(short = 's', long = "size")]
    pub size: Option<u64>,
    /// Iterations per message size.
    #[arg(short = 'n', long = "iters")]
    pub iters: Option<u64>,
    /// Run every size from 2 bytes to 8 MiB (powers of two).
    #[arg(short = 'a', long = "all")]
    pub all: bool,
    /// Largest message sent inline (copied into the WQE). Refused when the device grants a
    /// QP less; without it, 220 bytes or what the QP grants, whichever is smaller.
    #[arg(short = 'I', long = "inline_size")]
    pub inline: Option<u32>,
    /// Which post path to measure.
    #[arg(long, value_enum, default_value_t = PathKind::Direct)]
    pub path: PathKind,
    /// How the direct path rings the doorbell, on every QP of the run (default: the QP's own,
    /// bfpost when it has BlueFlame registers, else db). `--path verbs` rings libibverbs'.
    #[arg(long, value_enum, value_name = "MODE")]
    pub doorbell: Option<DoorbellArg>,
    /// Both ends in this process, on two software ConnectX devices (threaded mode), or on one
    /// verbs device. Without it, this process is the server (no address) or the client, and
    /// on the software ConnectX each process has its own device, reaching the other over UDP.
    #[arg(long)]
    pub loopback: bool,
}

impl Common {
    /// The doorbell mode `--doorbell` asks for (`None`: leave the QP's default); refused on
    /// `--path verbs`, where libibverbs rings its own doorbell.
    pub fn doorbell_mode(&self) -> Result<Option<DoorbellMode>> {
        match (self.doorbell, self.path) {
            (Some(d), PathKind::Verbs) => Err(Error::Usage(format!(
                "--doorbell {}: --path verbs rings the doorbell libibverbs chooses (rdma-core \
                 mlx5 post_send_db: BlueFlame when the QP has it; MLX5_SHUT_UP_BF=1 in the \
                 environment for 8-byte doorbells only); --doorbell is for --path direct",
                d.name()
            ))),
            (d, _) => Ok(d.map(DoorbellArg::mode)),
        }
    }
}

/// The latency tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LatTest {
    /// RDMA WRITE ping-pong (`ib_write_lat`): half the round trip.
    Write,
    /// SEND/RECV ping-pong (`ib_send_lat`): half the round trip.
    Send,
    /// RDMA READ (`ib_read_lat`): the whole READ.
    Read,
}

impl LatTest {
    /// perftest's title.
    pub fn title(self) -> &'static str {
        match self {
            LatTest::Write => "RDMA_Write Latency Test",
            LatTest::Send => "Send Latency Test",
            LatTest::Read => "RDMA_Read Latency Test",
        }
    }
}

/// `lat`: ping-pong latency like perftest's `ib_write_lat`, `ib_send_lat`, `ib_read_lat`.
#[derive(Parser, Clone, Debug)]
#[command(
    name = "lat",
    version,
    about = "Latency of RDMA WRITE, SEND and READ, perftest style",
    after_help = "Examples:\n  lat write                     server, software ConnectX (-d sim)\n  lat write 127.0.0.1           client, another process\n  lat write --loopback -n 1000  both ends in one process\n  lat send -d mlx5_0            server on a ConnectX (--features verbs)\n  lat send -d mlx5_0 192.0.2.1  client"
)]
pub struct LatArgs {
    /// Which latency test.
    #[arg(value_enum)]
    pub test: LatTest,
    /// Shared flags.
    #[command(flatten)]
    pub common: Common,
    /// Also write the latency histogram (of the last size) as an SVG picture.
    #[arg(long, value_name = "FILE")]
    pub histogram: Option<PathBuf>,
}

/// The bandwidth tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BwTest {
    /// RDMA WRITE (`ib_write_bw`).
    Write,
    /// RDMA READ (`ib_read_bw`).
    Read,
}

impl BwTest {
    /// perftest's title.
    pub fn title(self) -> &'static str {
        match self {
            BwTest::Write => "RDMA_Write BW Test",
            BwTest::Read => "RDMA_Read BW Test",
        }
    }
}

/// `bw`: message rate and bandwidth like perftest's `ib_write_bw` / `ib_read_bw`.
#[derive(Parser, Clone, Debug)]
#[command(
    name = "bw",
    version,
    about = "Message rate and bandwidth of RDMA WRITE and READ, perftest style",
    after_help = "Examples:\n  bw write                            server, software ConnectX (-d sim)\n  bw write 127.0.0.1                  client, another process\n  bw write --loopback -s 8 -n 100000  both ends in one process\n  bw write -q 4 -d mlx5_0 192.0.2.1 --report_gbits"
)]
pub struct BwArgs {
    /// Which bandwidth test.
    #[arg(value_enum)]
    pub test: BwTest,
    /// Shared flags.
    #[command(flatten)]
    pub common: Common,
    /// Number of QPs; messages go round-robin, `-n` per QP.
    #[arg(short = 'q', long = "qp", default_value_t = 1)]
    pub qps: u32,
    /// Send queue depth: WRs in flight per QP.
    #[arg(short = 't', long = "tx-depth", default_value_t = 128)]
    pub tx_depth: u32,
    /// Request a completion every this many WRs (perftest `--cq-mod`).
    #[arg(long = "cq-mod", default_value_t = 100)]
    pub cq_mod: u32,
    /// Report Gb/sec instead of MB/sec.
    #[arg(long = "report_gbits", alias = "report-gbits")]
    pub report_gbits: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perftest_flags_parse() {
        let a = LatArgs::try_parse_from([
            "lat", "write", "-s", "64", "-n", "10", "-I", "32", "-d", "mlx5_0", "-p", "9999", "-x",
            "3", "10.0.0.1",
        ])
        .unwrap();
        assert_eq!(a.common.gid_index, Some(3));
        assert_eq!(a.test, LatTest::Write);
        assert_eq!(a.common.size, Some(64));
        assert_eq!(a.common.iters, Some(10));
        assert_eq!(a.common.inline, Some(32));
        assert_eq!(a.common.device, "mlx5_0");
        assert_eq!(a.common.port, 9999);
        assert_eq!(a.common.server.as_deref(), Some("10.0.0.1"));
        let b = BwArgs::try_parse_from([
            "bw",
            "read",
            "-q",
            "4",
            "-a",
            "--report_gbits",
            "--loopback",
            "--path",
            "verbs",
        ])
        .unwrap();
        assert_eq!(b.qps, 4);
        assert!(b.common.all && b.report_gbits && b.common.loopback);
        assert_eq!(b.common.path, PathKind::Verbs);
        assert!(b.common.server.is_none());
        assert_eq!(b.common.gid_index, None);
    }

    #[test]
    fn doorbell_modes_parse_and_verbs_refuses_them() {
        for (flag, mode) in [
            ("bfpost", DoorbellMode::BfPost),
            ("bf", DoorbellMode::Bf),
            ("db", DoorbellMode::Db),
        ] {
            let a = BwArgs::try_parse_from(["bw", "write", "--doorbell", flag]).unwrap();
            assert_eq!(a.common.doorbell_mode().unwrap(), Some(mode));
            assert_eq!(DoorbellArg::of(mode).name(), flag);
            assert!(describe_doorbell(mode, true).starts_with(&format!("{flag}: ")));
            let v = LatArgs::try_parse_from(["lat", "send", "--doorbell", flag, "--path", "verbs"])
                .unwrap();
            let e = v.common.doorbell_mode().unwrap_err().to_string();
            assert!(
                e.contains(&format!("--doorbell {flag}")) && e.contains("--path direct"),
                "{e}"
            );
        }
        let none = LatArgs::try_parse_from(["lat", "read", "--path", "verbs"]).unwrap();
        assert_eq!(none.common.doorbell_mode().unwrap(), None);
        assert!(describe_doorbell(DoorbellMode::BfPost, false).ends_with("the QP's default"));
        assert!(LatArgs::try_parse_from(["lat", "write", "--doorbell", "BF_POST"]).is_err());
    }

    #[test]
    fn unknown_test_is_rejected() {
        assert!(LatArgs::try_parse_from(["lat", "atomic"]).is_err());
    }
}
