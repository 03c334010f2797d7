//! The library's settings, from the environment (what `mlx5sim` sets, or a test runner or MPI
//! launcher sets itself). Every variable is optional.
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `MLX5SIM_IP` | IPv4 address of the device's port; its RoCE v2 GID is `::ffff:ADDR` | a free `127.77.x.y` |
//! | `MLX5SIM_PORT` | UDP port every software ConnectX's socket is bound to (frames travel as its datagrams) | 14791 |
//! | `MLX5SIM_PEERS` | `ADDR=HOST:PORT,...`: devices whose socket is elsewhere than `ADDR:MLX5SIM_PORT` | none |
//! | `MLX5SIM_TAP` | `NAME`: speak native RoCE v2 on this TAP interface (Soft-RoCE on the other end) | none |
//! | `MLX5SIM_MTU` | active MTU of the port: 256, 512, 1024, 2048 or 4096 | 1024 |
//! | `MLX5SIM_ACK_FLOOR_MS` | least local ACK timeout, in ms, of a QP whose peer is in another process (0: the timer `timeout` asks for, as on a ConnectX) | 250 |
//! | `MLX5SIM_FAULTS` | fault rules (`faultspec`), or `@FILE` to read them from a file | none |
//! | `MLX5SIM_CONTROL` | a file whose fault rules replace the current ones whenever it changes | none |
//! | `MLX5SIM_PCAP` | capture every frame the device transmits to this pcap file | none |
//! | `MLX5SIM_REPORT` | write the report (driver bugs, counters, doorbells) to this file at exit | stderr only when there is a driver bug |
//! | `MLX5SIM_LOG` | the library's log filter (`RUST_LOG` syntax), on standard error | `warn` |
//! | `MLX5SIM_DIR` | where the emulated sysfs tree is made | `$TMPDIR` or `/tmp` |
//!
//! In the file names, `%p` is replaced by the process id, so one setting serves both ends of a
//! ping-pong.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use mlx5_hw::Mtu;

/// The default UDP port of the devices' sockets. Not 4791: the frames carried are whole
/// RoCE v2 frames, not the UDP payload of one, and a kernel RoCE stack may hold 4791.
pub const DEFAULT_PORT: u16 = 14791;

/// Everything the environment sets.
#[derive(Clone, Debug)]
pub struct Config {
    /// `MLX5SIM_IP`.
    pub ip: Option<Ipv4Addr>,
    /// `MLX5SIM_PORT`.
    pub port: u16,
    /// `MLX5SIM_PEERS`.
    pub peers: Vec<(Ipv4Addr, SocketAddr)>,
    /// `MLX5SIM_TAP`.
    pub tap: Option<String>,
    /// `MLX5SIM_MTU`.
    pub mtu: Mtu,
    /// `MLX5SIM_ACK_FLOOR_MS` (`mlx5_sim::Fabric::set_remote_ack_timeout_floor`); `None`: the
    /// fabric's default.
    pub ack_floor: Option<std::time::Duration>,
    /// `MLX5SIM_FAULTS`, read (a `@FILE` replaced by the file's text).
    pub faults: Option<String>,
    /// `MLX5SIM_CONTROL`.
    pub control: Option<PathBuf>,
    /// `MLX5SIM_PCAP`.
    pub pcap: Option<PathBuf>,
    /// `MLX5SIM_REPORT`.
    pub report: Option<PathBuf>,
    /// `MLX5SIM_LOG`.
    pub log: Option<String>,
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// `%p` → the process id.
fn path(v: String) -> PathBuf {
    PathBuf::from(v.replace("%p", &std::process::id().to_string()))
}

impl Config {
    /// Read the environment; the error names the variable and what is wrong with it.
    pub fn from_env() -> Result<Config, String> {
        let ip = match var("MLX5SIM_IP") {
            Some(v) => Some(
                v.trim()
                    .parse::<Ipv4Addr>()
                    .map_err(|_| format!("MLX5SIM_IP={v}: not an IPv4 address"))?,
            ),
            None => None,
        };
        if ip.is_some_and(|a| a.is_multicast() || a.is_unspecified() || a.is_broadcast()) {
            return Err(format!(
                "MLX5SIM_IP={}: a device needs a unicast address",
                ip.unwrap_or(Ipv4Addr::UNSPECIFIED)
            ));
        }
        let port = match var("MLX5SIM_PORT") {
            Some(v) => v
                .trim()
                .parse::<u16>()
                .ok()
                .filter(|&p| p != 0)
                .ok_or_else(|| format!("MLX5SIM_PORT={v}: not a UDP port (1..65535)"))?,
            None => DEFAULT_PORT,
        };
        let mut peers = Vec::new();
        if let Some(v) = var("MLX5SIM_PEERS") {
            for item in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                let (ip, addr) = item
                    .split_once('=')
                    .ok_or_else(|| format!("MLX5SIM_PEERS: '{item}' is not ADDR=HOST:PORT"))?;
                let ip = ip
                    .trim()
                    .parse::<Ipv4Addr>()
                    .map_err(|_| format!("MLX5SIM_PEERS: '{ip}' is not an IPv4 address"))?;
                let addr = addr
                    .trim()
                    .parse::<SocketAddr>()
                    .map_err(|_| format!("MLX5SIM_PEERS: '{addr}' is not HOST:PORT"))?;
                peers.push((ip, addr));
            }
        }
        let mtu = match var("MLX5SIM_MTU") {
            Some(v) => v
                .trim()
                .parse::<u32>()
                .ok()
                .and_then(Mtu::from_bytes)
                .ok_or_else(|| format!("MLX5SIM_MTU={v}: 256, 512, 1024, 2048 or 4096"))?,
            None => Mtu::Mtu1024,
        };
        let ack_floor = match var("MLX5SIM_ACK_FLOOR_MS") {
            Some(v) => Some(
                v.trim()
                    .parse::<u32>()
                    .ok()
                    .filter(|&ms| ms <= 3_600_000)
                    .map(|ms| std::time::Duration::from_millis(ms.into()))
                    .ok_or_else(|| {
                        format!("MLX5SIM_ACK_FLOOR_MS={v}: milliseconds, 0 to 3600000")
                    })?,
            ),
            None => None,
        };
        let faults = match var("MLX5SIM_FAULTS") {
            Some(v) => match v.strip_prefix('@') {
                Some(file) => Some(
                    std::fs::read_to_string(path(file.to_string()))
                        .map_err(|e| format!("MLX5SIM_FAULTS={v}: {e}"))?,
                ),
                None => Some(v),
            },
            None => None,
        };
        if let Some(f) = &faults {
            crate::faultspec::parse(f).map_err(|e| format!("MLX5SIM_FAULTS: {e}"))?;
        }
        Ok(Config {
            ip,
            port,
            peers,
            tap: var("MLX5SIM_TAP"),
            mtu,
            ack_floor,
            faults,
            control: var("MLX5SIM_CONTROL").map(path),
            pcap: var("MLX5SIM_PCAP").map(path),
            report: var("MLX5SIM_REPORT").map(path),
            log: var("MLX5SIM_LOG"),
        })
    }
}
