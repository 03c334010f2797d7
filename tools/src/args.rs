//! Command-line arguments of `lat` and `bw`, with perftest's flag names and defaults (perftest
//! `src/perftest_parameters.c` `usage`, `src/perftest_parameters.h` `DEF_*`): `-d/--ib-dev`,
//! `-i/--ib-port`, `-p/--port`, `-s/--size`, `-n/--iters`, `-a/--all`, `-D/--duration`,
//! `-f/--margin`, `-c/--connection`, `-A/--atomic_type`, `-m/--mtu`, `-r/--rx-depth`,
//! `-u/--qp-timeout`, `-I/--inline_size`, `-e/--events`, `-F/--CPU-freq`, `--output`,
//! `-x/--gid-index`; `lat`: `-H`, `-U`; `bw`: `-q/--qp`, `-t/--tx-depth`, `-Q/--cq-mod`,
//! `-b/--bidirectional`, `--report_gbits`. The server is the side started without an address.
//! `--path`, `--doorbell`, `--loopback`, `--histogram`, `--hlog` and `-v` are these tools' own
//! (`docs/perftest.md` has the side-by-side table).

use super::error::{Error, Result};
use crate::hello::{AtomicOp, RunShape, Sizes, TestKind, Tool};
use crate::path::GRH;
use crate::{limits, report};
use clap::{Args, Parser, ValueEnum};
use mlx5_connect::ConnectParams;
use mlx5_hw::{Mtu, QpType};
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

    /// The flag's value for `mode`; `None` for a mode of a newer data path that this flag
    /// does not name.
    pub fn of(mode: DoorbellMode) -> Option<DoorbellArg> {
        match mode {
            DoorbellMode::BfPost => Some(DoorbellArg::BfPost),
            DoorbellMode::Bf => Some(DoorbellArg::Bf),
            DoorbellMode::Db => Some(DoorbellArg::Db),
            _ => None,
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
        _ => "a mode --doorbell does not name",
    };
    let how = if chosen { "" } else { "; the QP's default" };
    let name = DoorbellArg::of(mode).map_or("other", DoorbellArg::name);
    format!("{name}: {what}{how}")
}

/// perftest's connection types (`-c`), those this library has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ConnArg {
    /// Reliable connected.
    #[value(name = "RC", alias = "rc")]
    Rc,
    /// Unreliable connected (WRITE and SEND).
    #[value(name = "UC", alias = "uc")]
    Uc,
    /// Unreliable datagram (SEND only; one MTU per message).
    #[value(name = "UD", alias = "ud")]
    Ud,
    /// Dynamically connected: DC initiators sending to the peer's DC targets
    /// (`mlx5_tools::dc`).
    #[value(name = "DC", alias = "dc")]
    Dc,
    /// eXtended reliable connected: per QP an XRC initiator sending to the peer's XRC target
    /// and its XRC SRQ (`mlx5_tools::xrc`).
    #[value(name = "XRC", alias = "xrc")]
    Xrc,
}

impl ConnArg {
    /// The QP type.
    pub fn qp_type(self) -> QpType {
        match self {
            ConnArg::Rc => QpType::Rc,
            ConnArg::Uc => QpType::Uc,
            ConnArg::Ud => QpType::Ud,
            ConnArg::Dc => QpType::Dci,
            ConnArg::Xrc => QpType::XrcSend,
        }
    }
}

/// perftest's atomic operations (`-A`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum AtomicArg {
    /// 64-bit compare and swap.
    #[value(name = "CMP_AND_SWAP")]
    CmpAndSwap,
    /// 64-bit fetch and add (perftest's default).
    #[value(name = "FETCH_AND_ADD")]
    FetchAndAdd,
}

impl AtomicArg {
    /// perftest's name.
    pub fn name(self) -> &'static str {
        match self {
            AtomicArg::CmpAndSwap => "CMP_AND_SWAP",
            AtomicArg::FetchAndAdd => "FETCH_AND_ADD",
        }
    }
}

/// What `--output` prints instead of the report (perftest `--output=<units>`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutputArg {
    /// The average latency in microseconds (`lat`).
    #[value(name = "latency")]
    Latency,
    /// The average bandwidth, MiB/s or with `--report_gbits` Gb/s (`bw`).
    #[value(name = "bandwidth")]
    Bandwidth,
    /// The message rate in millions per second (`bw`).
    #[value(name = "message_rate")]
    MessageRate,
}

impl OutputArg {
    /// The flag's value.
    pub fn name(self) -> &'static str {
        match self {
            OutputArg::Latency => "latency",
            OutputArg::Bandwidth => "bandwidth",
            OutputArg::MessageRate => "message_rate",
        }
    }
}

/// The tests, as perftest's programs are named: `ib_<test>_lat` / `ib_<test>_bw`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Test {
    /// RDMA WRITE (`ib_write_lat`, `ib_write_bw`).
    Write,
    /// SEND/RECV (`ib_send_lat`, `ib_send_bw`).
    Send,
    /// RDMA READ (`ib_read_lat`, `ib_read_bw`).
    Read,
    /// 64-bit atomics, `-A` (`ib_atomic_lat`, `ib_atomic_bw`).
    Atomic,
}

impl Test {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Test::Write => "write",
            Test::Send => "send",
            Test::Read => "read",
            Test::Atomic => "atomic",
        }
    }

    /// The connection types perftest allows for the test (`change_conn_type`: UC has no READ
    /// or atomics, UD only SEND; IBTA Vol. 1 §9.4 and table 38; DC carries what RC does,
    /// rdma-core `providers/mlx5/qp.c` `MLX5_SUPPORTED_SEND_OPS_FLAGS_DCI`).
    pub fn allows(self, c: ConnArg) -> bool {
        matches!(
            (self, c),
            (_, ConnArg::Rc | ConnArg::Dc | ConnArg::Xrc)
                | (Test::Write | Test::Send, ConnArg::Uc)
                | (Test::Send, ConnArg::Ud)
        )
    }

    /// perftest's message for a connection type the test does not allow.
    pub fn refuse(self, c: ConnArg) -> Error {
        let why = match c {
            ConnArg::Ud => "UD connection only possible in SEND verb",
            _ => "UC connection not possible in READ/ATOMIC verbs",
        };
        Error::Usage(format!(
            "-c {c:?}: {why} (perftest's rule; IBTA Vol. 1 §9.4: UC carries SEND and RDMA \
             WRITE, UD only SEND)",
            c = c.qp_type().name()
        ))
    }

    /// perftest's title line (`ctx_print_test_info`): `RDMA_Write Latency Test`, `Atomic
    /// FETCH_AND_ADD BW Test`, `Send Bidirectional BW Test`; `bw` for the bandwidth tool.
    pub fn title(self, bw: bool, atomic: AtomicArg, bidirectional: bool) -> String {
        let verb = match self {
            Test::Write => "RDMA_Write".to_string(),
            Test::Send => "Send".to_string(),
            Test::Read => "RDMA_Read".to_string(),
            Test::Atomic => format!("Atomic {}", atomic.name()),
        };
        match (bw, bidirectional) {
            (true, true) => format!("{verb} Bidirectional BW Test"),
            (true, false) => format!("{verb} BW Test"),
            (false, _) => format!("{verb} Latency Test"),
        }
    }

    /// The hello's name of the test.
    pub fn kind(self) -> TestKind {
        match self {
            Test::Write => TestKind::Write,
            Test::Send => TestKind::Send,
            Test::Read => TestKind::Read,
            Test::Atomic => TestKind::Atomic,
        }
    }

    /// The inline size asked for without `-I`, perftest's (`ctx_set_max_inline`): for the
    /// latency tests (`bw` false) `DEF_INLINE_WRITE`, `DEF_INLINE_DC`, `DEF_INLINE_SEND_RC_UC`,
    /// `DEF_INLINE_SEND_UD` (READ and atomics send nothing inline); for the bandwidth tests 0,
    /// so that small-message figures compare with `ib_*_bw`'s (`-I` asks for more).
    pub fn default_inline(self, c: ConnArg, bw: bool) -> u32 {
        match (self, c, bw) {
            (_, _, true) => 0,
            (Test::Write | Test::Send, ConnArg::Dc, _) => crate::dc::DEF_INLINE_DC,
            (Test::Write, _, _) => 220,
            (Test::Send, ConnArg::Ud, _) => 188,
            (Test::Send, _, _) => 236,
            _ => 0,
        }
    }
}

/// What both tools share.
#[derive(Args, Clone, Debug)]
pub struct Common {
    /// The server's address: given, this side is the client; omitted, the server.
    pub server: Option<String>,
    /// Device: `sim` (the software ConnectX) or a verbs device such as `mlx5_0` or `rxe0`
    /// (through rdma-core's libibverbs, loaded when the device is opened).
    #[arg(short = 'd', long = "ib-dev", default_value = "sim")]
    pub device: String,
    /// Device port.
    #[arg(short = 'i', long = "ib-port", default_value_t = 1)]
    pub ib_port: u8,
    /// Source GID index on a RoCE port [default: a RoCE v2 GID of an IPv4 address, as
    /// perftest picks one; index 0 on the software ConnectX].
    #[arg(short = 'x', long = "gid-index")]
    pub gid_index: Option<u8>,
    /// TCP port of the endpoint exchange (0: the server picks a free one and prints it).
    #[arg(short = 'p', long = "port", default_value_t = 18515)]
    pub port: u16,
    /// Message size in bytes, 1 to 1 GiB, as perftest reads it: decimal, 0x hexadecimal, with a
    /// K or M suffix (64K, 0x10M) [default: lat 2, bw 65536; atomic: 8, the only size].
    #[arg(short = 's', long = "size", value_parser = parse_size)]
    pub size: Option<u64>,
    /// Iterations per message size [default: lat 1000; bw write 5000, others 1000].
    #[arg(short = 'n', long = "iters")]
    pub iters: Option<u64>,
    /// Run every size from 2 bytes to 8 MiB (powers of two).
    #[arg(short = 'a', long = "all")]
    pub all: bool,
    /// Run for this many seconds instead of -n iterations; the figures are taken between the
    /// margins (-f).
    #[arg(short = 'D', long = "duration", value_name = "SECONDS")]
    pub duration: Option<u64>,
    /// With -D: seconds at the start and the end left out of the figures [default: -D / 4].
    #[arg(short = 'f', long = "margin", value_name = "SECONDS")]
    pub margin: Option<u64>,
    /// Connection type.
    #[arg(short = 'c', long = "connection", value_enum, default_value_t = ConnArg::Rc)]
    pub connection: ConnArg,
    /// Atomic operation of the atomic test.
    #[arg(short = 'A', long = "atomic_type", value_enum, default_value_t = AtomicArg::FetchAndAdd)]
    pub atomic_type: AtomicArg,
    /// Path MTU: 256, 512, 1024, 2048 or 4096 [default: the port's active MTU].
    #[arg(short = 'm', long = "mtu")]
    pub mtu: Option<u32>,
    /// Receive queue depth (the send test).
    #[arg(short = 'r', long = "rx-depth", default_value_t = 512)]
    pub rx_depth: u32,
    /// RC local ACK timeout: 4.096 µs × 2^timeout (0..=31; 0 waits forever).
    #[arg(short = 'u', long = "qp-timeout", default_value_t = 14)]
    pub qp_timeout: u8,
    /// Largest message sent inline (copied into the WQE). Refused when the device grants a
    /// QP less [default, perftest's: lat write 220, lat send 236, UD 188, or what the QP
    /// grants if less; bw 0].
    #[arg(short = 'I', long = "inline_size")]
    pub inline: Option<u32>,
    /// Sleep on completion events (the CQ's completion channel) instead of busy-polling.
    #[arg(short = 'e', long = "events")]
    pub events: bool,
    /// perftest: do not warn about CPU frequency scaling. These tools read the monotonic
    /// clock, not the CPU's cycle counter, and never give that warning.
    #[arg(short = 'F', long = "CPU-freq")]
    pub cpu_freq: bool,
    /// Print only this figure, one line per size (lat: latency; bw: bandwidth, message_rate).
    #[arg(long, value_enum, value_name = "UNITS")]
    pub output: Option<OutputArg>,
    /// Which post path to measure.
    #[arg(long, value_enum, default_value_t = PathKind::Direct)]
    pub path: PathKind,
    /// How the direct path rings the doorbell, on every QP of the run [default: the QP's own,
    /// bfpost when it has BlueFlame registers, else db]. `--path verbs` rings libibverbs'.
    #[arg(long, value_enum, value_name = "MODE")]
    pub doorbell: Option<DoorbellArg>,
    /// Both ends in this process, on two software ConnectX devices (threaded mode), or on one
    /// verbs device. Without it, this process is the server (no address) or the client, and
    /// on the software ConnectX each process has its own device, reaching the other over UDP.
    #[arg(long)]
    pub loopback: bool,
    /// With `-d sim`, not `--loopback`: bind this process's software ConnectX to the Linux TAP
    /// interface NAME, where it speaks native RoCEv2 to the kernel's netdev (e.g. Soft-RoCE
    /// bound to it) instead of reaching a peer process over UDP. The interface must exist
    /// (`ip tuntap add NAME mode tap`) [default: the MLX5_SIM_TAP environment variable,
    /// NAME or NAME,IPV4; else no TAP].
    #[arg(long, value_name = "NAME", value_parser = parse_tap_name)]
    pub tap: Option<String>,
    /// With --tap: the software ConnectX's IPv4 address on the TAP link [default: 192.168.77.2].
    #[arg(long = "tap-ip", value_name = "IPV4", requires = "tap")]
    pub tap_ip: Option<std::net::Ipv4Addr>,
    /// Speak perftest's exchange to the peer even when it is another lat/bw (without it the
    /// exchange is chosen by the peer: these tools recognise each other in their first 16
    /// bytes and speak perftest's to stock perftest, ib_write_lat, ib_send_bw, ...).
    #[arg(long)]
    pub perftest: bool,
    /// perftest's --dont_xchg_versions: exchange no versions, system data or MTU (implies
    /// --perftest; stock perftest 4.5 and 26.04 exit at once with it, see docs/perftest.md).
    #[arg(long = "dont_xchg_versions", alias = "dont-xchg-versions")]
    pub dont_xchg_versions: bool,
    /// perftest's --ipv6: without -x, prefer a GID of an IPv6 address (a RoCE v2 one first)
    /// over one of an IPv4 address [default: IPv4, as perftest].
    #[arg(long)]
    pub ipv6: bool,
    /// perftest's --ipv6-addr: the control connection over IPv6 (the server listens on `::`,
    /// the client connects to an IPv6 address of the server's name) [default: IPv4, as
    /// perftest].
    #[arg(long = "ipv6-addr", alias = "ipv6_addr")]
    pub ipv6_addr: bool,
    /// perftest's --bind_source_ip (perftest 4.5: --source_ip): the control connection's
    /// address on this host: the client connects from it, the server listens only on it. An
    /// IPv6 address needs --ipv6-addr [default: the routing table's choice; the server listens
    /// on every address].
    #[arg(long = "bind_source_ip", alias = "source_ip", value_name = "IP")]
    pub bind_source_ip: Option<std::net::IpAddr>,
    /// perftest's --use-srq: the send test's receives go to a shared receive queue of -r WRs
    /// that every QP receives through (each QP's share, -r / -q, posted at the start, as
    /// perftest; ibv_post_srq_recv on --path verbs).
    #[arg(long = "use-srq", alias = "use_srq")]
    pub use_srq: bool,
    /// perftest's --cpu_util: with -D, the CPU utilisation over the measured window as
    /// perftest computes it (user / (user + idle) of /proc/stat's `cpu` line, every CPU of the
    /// host) in a `CPU_Util[%]` column.
    #[arg(long = "cpu_util", alias = "cpu-util")]
    pub cpu_util: bool,
    /// Log more on standard error (-v: every QP state transition; -vv debug; -vvv trace).
    /// RUST_LOG, when set, decides instead (e.g. RUST_LOG=mlx5=info).
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count)]
    pub verbose: u8,
}

/// `-s`: a size as perftest reads it (`strtol(optarg, NULL, 0)` times 1024 for a `K` suffix,
/// 1048576 for `M`: `src/perftest_parameters.c`, `parser`): decimal, or hexadecimal after
/// `0x`. A leading 0 before more digits, which perftest reads as octal (`-s 010` is 8 bytes),
/// is refused rather than read either way; so is any other suffix.
pub fn parse_size(text: &str) -> std::result::Result<u64, String> {
    let t = text.trim();
    let forms = "perftest's forms: 4096, 0x1000, 4K, 1M, 0x10K";
    let (num, factor) = match t.as_bytes().last() {
        Some(b'K') => (&t[..t.len() - 1], 1u64 << 10),
        Some(b'M') => (&t[..t.len() - 1], 1u64 << 20),
        _ => (t, 1),
    };
    let v = if let Some(hex) = num.strip_prefix("0x").or_else(|| num.strip_prefix("0X")) {
        if hex.is_empty() || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!("{text:?} is not a size ({forms})"));
        }
        u64::from_str_radix(hex, 16).map_err(|_| format!("{text:?} is too large"))?
    } else {
        if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!("{text:?} is not a size ({forms})"));
        }
        if num.len() > 1 && num.starts_with('0') {
            return Err(format!(
                "{text:?}: perftest reads a leading 0 as octal ({} bytes), most people as \
                 decimal: write it without the 0, or in hexadecimal with 0x",
                u64::from_str_radix(num, 8)
                    .map_or_else(|_| "not an octal number".into(), |v| v.to_string())
            ));
        }
        num.parse::<u64>()
            .map_err(|_| format!("{text:?} is too large"))?
    };
    v.checked_mul(factor)
        .ok_or_else(|| format!("{text:?} is too large"))
}

/// `--tap NAME`: a name Linux accepts for a network interface (`dev_valid_name`,
/// net/core/dev.c: 1 to 15 bytes, IFNAMSIZ less the NUL; not `.` or `..`; no `/`, `:` or
/// white space).
pub fn parse_tap_name(name: &str) -> std::result::Result<String, String> {
    if name.is_empty() || name.len() > 15 {
        return Err(format!(
            "{name:?}: an interface name is 1 to 15 bytes (IFNAMSIZ), this is {}",
            name.len()
        ));
    }
    if name == "." || name == ".." {
        return Err(format!("{name:?} is not an interface name"));
    }
    if let Some(c) = name
        .chars()
        .find(|c| *c == '/' || *c == ':' || *c == '\0' || c.is_whitespace())
    {
        return Err(format!(
            "{name:?}: an interface name has no {c:?} (Linux dev_valid_name)"
        ));
    }
    Ok(name.to_string())
}

impl Common {
    /// `--tap` and `--tap-ip`: the TAP interface and the software ConnectX's address on it
    /// (`None` without `--tap`; the environment is consulted by [`crate::devices`] then).
    pub fn tap(&self) -> Option<(String, [u8; 4])> {
        self.tap.as_ref().map(|t| {
            let ip = self
                .tap_ip
                .map_or(crate::devices::TAP_SIM_IP, |ip| ip.octets());
            (t.clone(), ip)
        })
    }

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

    /// What the command line asks that the run will not do, for the user to know: `-n` with
    /// `-D` (the duration wins, as perftest's: `force_dependecies` sets the iterations to 0).
    pub fn notes(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let (Some(n), Some(d)) = (self.iters, self.duration) {
            out.push(format!(
                "-n {n} is ignored: -D {d} runs for a time (as perftest: the duration wins)"
            ));
        }
        out
    }

    /// `--ipv6-addr` and `--bind_source_ip`: a control connection to shape (not with
    /// `--loopback`), a source address of the family the connection uses (perftest: "--ipv6-addr
    /// flag must be used when specifying an IPv6 source IP").
    fn check_control(&self) -> Result<()> {
        if self.loopback && (self.ipv6_addr || self.bind_source_ip.is_some()) {
            return Err(Error::Usage(format!(
                "{}: --loopback runs both ends in this process, with no control connection",
                if self.ipv6_addr {
                    "--ipv6-addr"
                } else {
                    "--bind_source_ip"
                }
            )));
        }
        match self.bind_source_ip {
            Some(ip @ std::net::IpAddr::V6(_)) if !self.ipv6_addr => Err(Error::Usage(format!(
                "--bind_source_ip {ip}: an IPv6 source address is for a control connection over \
                 IPv6: add --ipv6-addr (as perftest)"
            ))),
            Some(ip @ std::net::IpAddr::V4(_)) if self.ipv6_addr => Err(Error::Usage(format!(
                "--bind_source_ip {ip}: --ipv6-addr makes the control connection IPv6; give an \
                 IPv6 source address, or leave out --ipv6-addr"
            ))),
            Some(ip) if ip.is_unspecified() || ip.is_multicast() => Err(Error::Usage(format!(
                "--bind_source_ip {ip}: not an address of one interface (leave the flag out to \
                 listen on every address)"
            ))),
            _ => Ok(()),
        }
    }

    /// How the control connection is made (`--ipv6-addr`, `--bind_source_ip`).
    pub fn control_net(&self) -> crate::rendezvous::ControlNet {
        crate::rendezvous::ControlNet {
            ipv6: self.ipv6_addr,
            source: self.bind_source_ip,
        }
    }

    /// Whether perftest's exchange is asked for (`--perftest`, `--dont_xchg_versions`).
    pub fn plain_perftest(&self) -> bool {
        self.perftest || self.dont_xchg_versions
    }

    /// Whether this process measures: the client, or both ends here.
    pub fn is_client(&self) -> bool {
        self.loopback || self.server.is_some()
    }

    /// `-m` as the MTU enum, refusing other values (perftest `set_mtu`).
    pub fn mtu(&self) -> Result<Option<Mtu>> {
        match self.mtu {
            None => Ok(None),
            Some(m) => Mtu::from_bytes(m).map(Some).ok_or_else(|| {
                Error::Usage(format!(
                    "-m {m}: the MTU is one of 256, 512, 1024, 2048, 4096 (IBTA Vol. 1 §7.7.8)"
                ))
            }),
        }
    }

    /// The checks of the flags both tools share that need no device: the test and the
    /// connection type (`-c`), `-A`/`-r`/`-I` only where they mean something, `-D` with its
    /// margin and not with `-a` or `-n`, `-m`, `-u`, `-e`, `-F` (said to do nothing),
    /// `--output` against the tool's figures (`outputs`), `--loopback` without an address.
    pub fn check(&self, test: Test, outputs: &[OutputArg], tool: &str) -> Result<()> {
        if !test.allows(self.connection) {
            return Err(test.refuse(self.connection));
        }
        if self.connection == ConnArg::Dc && self.path == PathKind::Verbs {
            return Err(Error::Usage(
                "-c DC --path verbs: ibv_post_send has no DC destination; perftest posts DC \
                 only through the ibv_wr_* API (\"DC does not support old post send flow\", \
                 src/perftest_parameters.c): leave out --path verbs"
                    .into(),
            ));
        }
        if self.connection == ConnArg::Xrc && self.path == PathKind::Verbs {
            return Err(Error::Usage(
                "-c XRC --path verbs: not in this build; -c XRC runs on --path direct \
                 (docs/perftest.md)"
                    .into(),
            ));
        }
        if self.loopback && self.server.is_some() {
            return Err(Error::Usage(
                "--loopback runs both ends here: give no server address".into(),
            ));
        }
        if self.loopback && (self.perftest || self.dont_xchg_versions) {
            return Err(Error::Usage(format!(
                "{}: --loopback runs both ends in this process, with no exchange on a socket; \
                 perftest's exchange is for a server and a client process",
                if self.perftest {
                    "--perftest"
                } else {
                    "--dont_xchg_versions"
                }
            )));
        }
        self.check_control()?;
        if self.use_srq && test != Test::Send {
            return Err(Error::Usage(format!(
                "--use-srq: only the send test posts receives (perftest: \"Using SRQ only \
                 avavilible in SEND tests\"), not {}",
                test.name()
            )));
        }
        if self.cpu_util && self.duration.is_none() {
            return Err(Error::Usage(
                "--cpu_util: the utilisation is taken over a run's measured window, which only \
                 a run of a duration has: add -D (perftest: \"CPU Utilization works only with \
                 Duration mode\")"
                    .into(),
            ));
        }
        if let Some(t) = &self.tap {
            if self.loopback {
                return Err(Error::Usage(format!(
                    "--tap {t}: --loopback runs two software ConnectX devices in this process, \
                     on one fabric; --tap binds the one device of a server or client process \
                     to a TAP link: leave out one of them"
                )));
            }
            if !crate::devices::is_sim_name(&self.device) {
                return Err(Error::Usage(format!(
                    "--tap {t}: -d {} is not the software ConnectX; --tap is for -d sim (a \
                     verbs device has its own netdev)",
                    self.device
                )));
            }
        }
        if test != Test::Atomic && self.atomic_type != AtomicArg::FetchAndAdd {
            return Err(Error::Usage(format!(
                "-A {}: the atomic operation is for the atomic test, not {}",
                self.atomic_type.name(),
                test.name()
            )));
        }
        if test == Test::Atomic && (self.all || self.size.is_some_and(|s| s != 8)) {
            return Err(Error::Usage(
                "the atomic test moves 8 bytes per operation (64-bit atomics, IBTA Vol. 1 \
                 §9.4.5): leave out -s and -a"
                    .into(),
            ));
        }
        if matches!(test, Test::Read | Test::Atomic) && self.inline.is_some() {
            return Err(Error::Usage(format!(
                "-I: a {} sends no data for the device to copy inline (the reply lands in the \
                 local buffer); leave -I out",
                test.name()
            )));
        }
        if let Some(i) = self.inline.filter(|&i| i > 1024) {
            return Err(Error::Usage(format!(
                "-I {i}: at most 1024 bytes inline (perftest MAX_INLINE; a WQE is at most 1 KiB, \
                 PRM `max_wqe_sz_sq`)"
            )));
        }
        if test != Test::Send && self.rx_depth != 512 {
            return Err(Error::Usage(format!(
                "-r {}: only the send test posts receives; leave -r out",
                self.rx_depth
            )));
        }
        if !(1..=16384).contains(&self.rx_depth) {
            return Err(Error::Usage(format!(
                "-r {}: the receive queue depth is 1 to 16384 (perftest MIN_RX, MAX_RX)",
                self.rx_depth
            )));
        }
        if self.qp_timeout > 31 {
            return Err(Error::Usage(format!(
                "-u {}: the ACK timeout exponent is 0 to 31 (a 5-bit field, IBTA Vol. 1 \
                 §9.7.6.1.3)",
                self.qp_timeout
            )));
        }
        self.mtu()?;
        if let Some(d) = self.duration {
            if d == 0 || d > 86_400 {
                return Err(Error::Usage(format!(
                    "-D {d}: the duration is 1 to 86400 seconds"
                )));
            }
            if self.all {
                return Err(Error::Usage(
                    "-D runs one size for a time: leave out -a (perftest: \"Duration mode \
                     currently doesn't support running on all sizes\")"
                        .into(),
                ));
            }
            if self.margin.unwrap_or(d / 4) * 2 >= d {
                return Err(Error::Usage(format!(
                    "-D {d} -f {}: the duration must be more than twice the margin (perftest: \
                     DURATION > 2*MARGIN)",
                    self.margin.unwrap_or(d / 4)
                )));
            }
        } else if self.margin.is_some() {
            return Err(Error::Usage(
                "-f: the margin is for runs of a duration (-D)".into(),
            ));
        }
        if let Some(o) = self.output {
            if !outputs.contains(&o) {
                let names: Vec<&str> = outputs.iter().map(|o| o.name()).collect();
                return Err(Error::Usage(format!(
                    "--output={}: {tool} reports {}",
                    o.name(),
                    names.join(" or ")
                )));
            }
        }
        self.doorbell_mode()?;
        Ok(())
    }

    /// The message sizes (`-a`: all of them; else `-s`, or `default_size`) of a run.
    pub fn sizes(&self, test: Test, default_size: u64) -> Result<Vec<u64>> {
        let sizes = if test == Test::Atomic {
            vec![8]
        } else if self.all {
            report::all_sizes(u64::MAX)
        } else {
            vec![self.size.unwrap_or(default_size)]
        };
        for &s in &sizes {
            limits::check_size("-s", s)?;
        }
        Ok(sizes)
    }

    /// The run's length: `-D` seconds with its margin, or `-n` (else `default_iters`), at most
    /// `max` iterations (`why` says where that cap comes from).
    pub fn length(&self, default_iters: u64, max: u64, why: &str) -> Result<Length> {
        if let Some(d) = self.duration {
            return Ok(Length::Duration {
                secs: d,
                margin: self.margin.unwrap_or(d / 4),
            });
        }
        let n = self.iters.unwrap_or(default_iters);
        limits::check_iters("-n", n, max, why)?;
        Ok(Length::Iters(n))
    }

    /// The half of every end's buffer for messages of up to the largest of `sizes` (a UD
    /// receive starts with the 40-byte GRH, [`GRH`]), in whole 64-byte lines: the send half
    /// starts at 0, the receive half there. The memory of both halves on every end in this
    /// process is checked against the machine's ([`limits::check_memory`]).
    pub fn buffer_half(&self, sizes: &[u64]) -> Result<usize> {
        let max = sizes.iter().copied().max().unwrap_or(8) as usize;
        let recv = if self.connection.qp_type() == QpType::Ud {
            max + GRH
        } else {
            max
        };
        let half = recv.next_multiple_of(64);
        let ends = if self.loopback { 2 } else { 1 };
        limits::check_memory(
            &format!(
                "the buffers of {ends} end(s), 2 × {} each,",
                limits::human(half as u64)
            ),
            (ends * 2 * half) as u64,
        )?;
        Ok(half)
    }

    /// What a server and its client must agree on ([`RunShape`]): `tool`'s `test` over the
    /// connection type `-c`, `-a` or the first of `sizes`, the run's `length`; one QP, one
    /// direction (`bw` sets `-q` and `-b`).
    pub fn run_shape(&self, tool: Tool, test: Test, sizes: &[u64], length: Length) -> RunShape {
        let which = match (self.all, sizes.first()) {
            (false, Some(&s)) => Sizes::One(s),
            _ => Sizes::All,
        };
        let mut shape = RunShape::new(tool, test.kind(), which, 0);
        shape.conn = self.connection.qp_type();
        shape.atomic = (test == Test::Atomic).then_some(match self.atomic_type {
            AtomicArg::CmpAndSwap => AtomicOp::CmpAndSwap,
            AtomicArg::FetchAndAdd => AtomicOp::FetchAndAdd,
        });
        match length {
            Length::Iters(n) => shape.iters = n,
            Length::Duration { secs, margin } => {
                shape.iters = secs;
                shape.duration = true;
                shape.margin = margin;
            }
        }
        shape
    }

    /// The connect parameters every QP of the run starts from: the port (`-i`), the path MTU
    /// at most (`-m`), the local ACK timeout (`-u`).
    pub fn connect_params(&self) -> Result<ConnectParams> {
        Ok({
            let mut p = ConnectParams::default();
            p.port = self.ib_port;
            p.max_mtu = self.mtu()?;
            p.timeout = self.qp_timeout;
            p
        })
    }
}

/// How long a run is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Length {
    /// `-n`: this many iterations per size.
    Iters(u64),
    /// `-D`: this many seconds, the figures taken between the margins.
    Duration {
        /// The whole run.
        secs: u64,
        /// Left out at the start and at the end.
        margin: u64,
    },
}

impl Length {
    /// The iterations of a run of `-n` (`None` for `-D`).
    pub fn iters(self) -> Option<u64> {
        match self {
            Length::Iters(n) => Some(n),
            Length::Duration { .. } => None,
        }
    }
}

/// `lat`: ping-pong latency like perftest's `ib_write_lat`, `ib_send_lat`, `ib_read_lat`,
/// `ib_atomic_lat`.
#[derive(Parser, Clone, Debug)]
#[command(
    name = "lat",
    version,
    about = "Latency of RDMA WRITE, SEND, READ and atomics, perftest style",
    after_help = "Examples:\n  lat write                     server, software ConnectX (-d sim)\n  lat write 127.0.0.1           client, another process\n  lat write --loopback -n 1000  both ends in one process\n  lat atomic -A CMP_AND_SWAP --loopback\n  lat send -c UD --loopback -s 512\n  lat send -d mlx5_0            server on a ConnectX\n  lat send -d mlx5_0 192.0.2.1  client\n\nRUST_LOG=mlx5=info (or -v) logs every QP state transition on standard error."
)]
pub struct LatArgs {
    /// Which latency test.
    #[arg(value_enum)]
    pub test: Test,
    /// Shared flags.
    #[command(flatten)]
    pub common: Common,
    /// Print every sample, sorted, before each row (perftest -H); with -D, the histogram.
    #[arg(short = 'H', long = "report-histogram")]
    pub report_histogram: bool,
    /// Print every sample in the order measured, then sorted (perftest -U; implies -H).
    #[arg(short = 'U', long = "report-unsorted")]
    pub report_unsorted: bool,
    /// Also write the latency histogram (of the last size) as an SVG picture.
    #[arg(long, value_name = "FILE")]
    pub histogram: Option<PathBuf>,
    /// Also write every size's histogram as an HdrHistogram interval log (.hlog), for
    /// HdrHistogram's HistogramLogAnalyzer and plotter.
    #[arg(long, value_name = "FILE")]
    pub hlog: Option<PathBuf>,
    /// Also report the latency measured with the NIC's clock: the CQ is created with
    /// completion timestamps and a second line gives the device-clock intervals between
    /// consecutive iterations' completions, in microseconds (converted with the device's
    /// clock info). Needs -n; not with -D, -e or --output.
    #[arg(long)]
    pub timestamps: bool,
}

/// `bw`: message rate and bandwidth like perftest's `ib_write_bw`, `ib_send_bw`,
/// `ib_read_bw`, `ib_atomic_bw`.
#[derive(Parser, Clone, Debug)]
#[command(
    name = "bw",
    version,
    about = "Message rate and bandwidth of RDMA WRITE, SEND, READ and atomics, perftest style",
    after_help = "Examples:\n  bw write                            server, software ConnectX (-d sim)\n  bw write 127.0.0.1                  client, another process\n  bw write --loopback -s 8 -n 100000  both ends in one process\n  bw send -b --loopback               both directions at once\n  bw write -q 4 -d mlx5_0 192.0.2.1 --report_gbits\n\nRUST_LOG=mlx5=info (or -v) logs every QP state transition on standard error."
)]
pub struct BwArgs {
    /// Which bandwidth test.
    #[arg(value_enum)]
    pub test: Test,
    /// Shared flags.
    #[command(flatten)]
    pub common: Common,
    /// Number of QPs (1 to 64); messages go round-robin, `-n` per QP.
    #[arg(short = 'q', long = "qp", default_value_t = 1)]
    pub qps: u32,
    /// Send queue depth: WRs in flight per QP (1 to 15000, perftest MAX_TX, and what the
    /// device grants).
    #[arg(short = 't', long = "tx-depth", default_value_t = 128)]
    pub tx_depth: u32,
    /// Request a completion every this many WRs (1 to 1024).
    #[arg(short = 'Q', long = "cq-mod", default_value_t = 100)]
    pub cq_mod: u32,
    /// Both ends send at once; the figures are the sum of both directions.
    #[arg(short = 'b', long = "bidirectional")]
    pub bidirectional: bool,
    /// Report Gb/sec instead of MiB/sec.
    #[arg(long = "report_gbits", alias = "report-gbits")]
    pub report_gbits: bool,
}

impl BwArgs {
    /// The checks of `-q`, `-t` and `-Q` (perftest `MAX_TX`, `MIN_CQ_MOD`/`MAX_CQ_MOD`).
    pub fn check(&self) -> Result<()> {
        if !(1..=64).contains(&self.qps) {
            return Err(Error::Usage(format!(
                "-q {}: -q must be between 1 and 64 (one control connection per QP)",
                self.qps
            )));
        }
        if self.common.use_srq && self.qps > self.common.rx_depth {
            return Err(Error::Usage(format!(
                "--use-srq -q {} -r {}: each QP's share of the SRQ is -r / -q receives, none \
                 here (perftest: \"Using SRQ depth should be greater than number of QPs\")",
                self.qps, self.common.rx_depth
            )));
        }
        if !(1..=15000).contains(&self.tx_depth) {
            return Err(Error::Usage(format!(
                "-t {}: -t must be between 1 and 15000 (perftest MAX_TX)",
                self.tx_depth
            )));
        }
        if !(1..=1024).contains(&self.cq_mod) {
            return Err(Error::Usage(format!(
                "--cq-mod {}: -Q must be between 1 and 1024 (perftest MIN_CQ_MOD, MAX_CQ_MOD)",
                self.cq_mod
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tap_flags_parse() {
        let a = LatArgs::try_parse_from(["lat", "send", "--tap", "tap0"]).unwrap();
        assert_eq!(a.common.tap(), Some(("tap0".into(), [192, 168, 77, 2])));
        a.common
            .check(a.test, &[OutputArg::Latency], "lat")
            .unwrap();
        let b = BwArgs::try_parse_from([
            "bw",
            "read",
            "--tap",
            "tap1",
            "--tap-ip",
            "10.1.2.3",
            "127.0.0.1",
        ])
        .unwrap();
        assert_eq!(b.common.tap(), Some(("tap1".into(), [10, 1, 2, 3])));
        assert_eq!(
            LatArgs::try_parse_from(["lat", "send"])
                .unwrap()
                .common
                .tap(),
            None
        );
        for bad in [
            &["--tap", ""][..],
            &["--tap", "x y"],
            &["--tap", ".."],
            &["--tap-ip", "1.2.3.4"],
        ] {
            let mut v = vec!["lat", "send"];
            v.extend_from_slice(bad);
            assert!(LatArgs::try_parse_from(&v).is_err(), "{bad:?} parsed");
        }
        let l = LatArgs::try_parse_from(["lat", "send", "--tap", "tap0", "--loopback"]).unwrap();
        assert!(l
            .common
            .check(l.test, &[OutputArg::Latency], "lat")
            .is_err());
    }

    #[test]
    fn perftest_flags_parse() {
        let a = LatArgs::try_parse_from([
            "lat", "write", "-s", "64", "-n", "10", "-I", "32", "-d", "mlx5_0", "-p", "9999", "-x",
            "3", "-c", "UC", "-m", "2048", "-u", "12", "-H", "10.0.0.1",
        ])
        .unwrap();
        assert_eq!(a.common.gid_index, Some(3));
        assert_eq!(a.test, Test::Write);
        assert_eq!(a.common.size, Some(64));
        assert_eq!(a.common.iters, Some(10));
        assert_eq!(a.common.inline, Some(32));
        assert_eq!(a.common.device, "mlx5_0");
        assert_eq!(a.common.port, 9999);
        assert_eq!(a.common.connection, ConnArg::Uc);
        assert_eq!(a.common.mtu().unwrap(), Some(Mtu::Mtu2048));
        assert_eq!(a.common.qp_timeout, 12);
        assert!(a.report_histogram);
        assert_eq!(a.common.server.as_deref(), Some("10.0.0.1"));
        a.common
            .check(a.test, &[OutputArg::Latency], "lat")
            .unwrap();
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
            "-Q",
            "7",
            "-t",
            "64",
        ])
        .unwrap();
        assert_eq!((b.qps, b.cq_mod, b.tx_depth), (4, 7, 64));
        assert!(b.common.all && b.report_gbits && b.common.loopback);
        assert_eq!(b.common.path, PathKind::Verbs);
        assert!(b.common.server.is_none());
        assert_eq!(b.common.gid_index, None);
        let c = BwArgs::try_parse_from([
            "bw",
            "atomic",
            "-A",
            "CMP_AND_SWAP",
            "-b",
            "-D",
            "4",
            "--output",
            "message_rate",
        ])
        .unwrap();
        assert_eq!(c.common.atomic_type, AtomicArg::CmpAndSwap);
        assert!(c.bidirectional);
        assert_eq!(
            c.common.length(1000, 10, "").unwrap(),
            Length::Duration { secs: 4, margin: 1 }
        );
        assert_eq!(c.common.sizes(c.test, 65536).unwrap(), [8]);
        c.common
            .check(
                c.test,
                &[OutputArg::Bandwidth, OutputArg::MessageRate],
                "bw",
            )
            .unwrap();
        assert_eq!(
            c.test.title(true, c.common.atomic_type, true),
            "Atomic CMP_AND_SWAP Bidirectional BW Test"
        );
        assert_eq!(
            Test::Write.title(false, AtomicArg::FetchAndAdd, false),
            "RDMA_Write Latency Test"
        );
    }

    #[test]
    fn flags_that_do_not_fit_the_test_are_refused() {
        let refused = |args: &[&str], needle: &str| {
            let a = LatArgs::try_parse_from(args).unwrap();
            let e = a
                .common
                .check(a.test, &[OutputArg::Latency], "lat")
                .unwrap_err();
            assert_eq!(e.exit_code(), 2, "{e}");
            assert!(e.to_string().contains(needle), "{args:?}: {e}");
        };
        refused(&["lat", "read", "-c", "UC"], "UC connection not possible");
        refused(
            &["lat", "write", "-c", "UD"],
            "UD connection only possible in SEND",
        );
        refused(
            &["lat", "atomic", "-c", "UD"],
            "UD connection only possible",
        );
        refused(&["lat", "atomic", "-s", "64"], "8 bytes per operation");
        refused(
            &["lat", "write", "-A", "CMP_AND_SWAP"],
            "for the atomic test",
        );
        refused(&["lat", "read", "-I", "64"], "leave -I out");
        refused(
            &["lat", "write", "-r", "64"],
            "only the send test posts receives",
        );
        refused(&["lat", "send", "-r", "0"], "1 to 16384");
        refused(&["lat", "write", "-u", "32"], "0 to 31");
        refused(
            &["lat", "write", "-m", "1000"],
            "256, 512, 1024, 2048, 4096",
        );
        refused(&["lat", "write", "-D", "0"], "1 to 86400");
        refused(
            &["lat", "write", "-D", "2", "-f", "1"],
            "more than twice the margin",
        );
        refused(&["lat", "write", "-D", "4", "-a"], "leave out -a");
        // -D with -n: the duration wins, as perftest's (force_dependecies sets iters to 0).
        let dn = LatArgs::try_parse_from(["lat", "write", "-D", "4", "-n", "5"]).unwrap();
        dn.common
            .check(dn.test, &[OutputArg::Latency], "lat")
            .unwrap();
        assert_eq!(
            dn.common.length(1000, 10, "").unwrap(),
            Length::Duration { secs: 4, margin: 1 }
        );
        assert!(dn.common.notes()[0].contains("-n 5 is ignored"));
        refused(&["lat", "write", "-f", "1"], "for runs of a duration");
        refused(
            &["lat", "write", "--output", "bandwidth"],
            "lat reports latency",
        );
        refused(
            &["lat", "write", "--loopback", "10.0.0.1"],
            "give no server address",
        );
        let b = BwArgs::try_parse_from(["bw", "write", "--cq-mod", "0"]).unwrap();
        assert!(b
            .check()
            .unwrap_err()
            .to_string()
            .contains("-Q must be between 1 and 1024"));
        let b = BwArgs::try_parse_from(["bw", "write", "-t", "0"]).unwrap();
        assert!(b
            .check()
            .unwrap_err()
            .to_string()
            .contains("-t must be between"));
        let b = BwArgs::try_parse_from(["bw", "write", "-q", "65"]).unwrap();
        assert!(b.check().is_err());
        let c = LatArgs::try_parse_from(["lat", "write", "-n", "18446744073709551615"]).unwrap();
        let e = c.common.length(1000, limits::MAX_ITERS, "cap").unwrap_err();
        assert!(e.to_string().contains("at most 4294967296"), "{e}");
        assert!(LatArgs::try_parse_from(["lat", "write", "-n", "18446744073709551616"]).is_err());
        assert!(LatArgs::try_parse_from(["lat", "write", "-n", "-1"]).is_err());
        assert!(LatArgs::try_parse_from(["lat", "write", "-c", "SRD"]).is_err());
        let x = LatArgs::try_parse_from(["lat", "read", "-c", "XRC"]).unwrap();
        assert_eq!(x.common.connection.qp_type(), QpType::XrcSend);
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
            assert_eq!(DoorbellArg::of(mode).map(DoorbellArg::name), Some(flag));
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
    fn sizes_take_perftests_forms() {
        for (text, want) in [
            ("4096", 4096),
            ("0x1000", 4096),
            ("0X10", 16),
            ("64K", 65536),
            ("1M", 1 << 20),
            ("0x10K", 16 << 10),
            ("2", 2),
            ("0", 0),
        ] {
            assert_eq!(parse_size(text), Ok(want), "{text}");
        }
        for (text, why) in [
            ("010", "octal (8 bytes)"),
            ("64k", "not a size"),
            ("1G", "not a size"),
            ("0x", "not a size"),
            ("-1", "not a size"),
            ("K", "not a size"),
            ("18446744073709551615K", "too large"),
            ("99999999999999999999", "too large"),
        ] {
            let e = parse_size(text).unwrap_err();
            assert!(e.contains(why), "{text}: {e}");
        }
        let a = LatArgs::try_parse_from(["lat", "write", "-s", "4K"]).unwrap();
        assert_eq!(a.common.size, Some(4096));
        // 0 parses; the run refuses it with the range.
        let z = LatArgs::try_parse_from(["lat", "write", "-s", "0"]).unwrap();
        assert!(z.common.sizes(Test::Write, 2).is_err());
    }

    #[test]
    fn unknown_test_is_rejected() {
        assert!(LatArgs::try_parse_from(["lat", "atomics"]).is_err());
        assert!(LatArgs::try_parse_from(["lat", "atomic"]).is_ok());
    }

    #[test]
    fn the_buffer_half_holds_the_largest_message_and_a_ud_grh_in_whole_lines() {
        let common = |argv: &[&str]| LatArgs::try_parse_from(argv).unwrap().common;
        let rc = common(&["lat", "write", "-s", "100"]);
        assert_eq!(rc.buffer_half(&[2, 100]).unwrap(), 128);
        let ud = common(&["lat", "send", "-c", "UD", "-s", "100"]);
        assert_eq!(
            ud.buffer_half(&[100]).unwrap(),
            192,
            "100 + the 40-byte GRH, in lines"
        );
        assert_eq!(ud.buffer_half(&[24]).unwrap(), 64);
    }

    #[test]
    fn the_run_shape_names_what_both_ends_must_agree_on() {
        let a = BwArgs::try_parse_from(["bw", "send", "-c", "UC", "-a", "-D", "6"]).unwrap();
        let shape = a.common.run_shape(
            Tool::Bw,
            a.test,
            &[2, 4],
            Length::Duration { secs: 6, margin: 1 },
        );
        assert_eq!(
            (shape.conn, shape.iters, shape.duration),
            (QpType::Uc, 6, true)
        );
        assert!(matches!(shape.sizes, Sizes::All));
        let l = LatArgs::try_parse_from(["lat", "read", "-s", "64"]).unwrap();
        let shape = l
            .common
            .run_shape(Tool::Lat, l.test, &[64], Length::Iters(500));
        assert_eq!(
            (shape.conn, shape.iters, shape.duration),
            (QpType::Rc, 500, false)
        );
        assert!(matches!(shape.sizes, Sizes::One(64)));
        assert_eq!(shape.qps, 1);
    }
}
