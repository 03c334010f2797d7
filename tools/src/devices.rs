//! Which devices a run uses, opened as [`mlx5_ctx::Context`]s: the software ConnectX (two on
//! one fabric for `--loopback`, else one per process that reaches its peer process over UDP)
//! or a verbs device (`mlx5_0`, `rxe0`: rdma-core, loaded when it is first opened), and the
//! checks that depend on the device: the data
//! path it has ([`Devices::check_path`]) and the source GID a RoCE port uses
//! ([`Devices::gid_index`]).
//!
//! Every object made from a context keeps it alive (`mlx5-ctx`), so nothing here has to be
//! dropped in a particular order.

use crate::args::PathKind;
use crate::{Error, Result};
use mlx5_ctx::{Context, SimFabric};
use mlx5_sim::DeviceConfig;
use std::net::SocketAddr;
use std::sync::OnceLock;

/// The IPv4 address of the server's software ConnectX in a run across processes.
pub const SERVER_SIM_IP: [u8; 4] = [10, 0, 0, 1];
/// The IPv4 address of the client's.
pub const CLIENT_SIM_IP: [u8; 4] = [10, 0, 0, 2];

/// The devices a run uses.
pub struct Devices {
    /// This side's device.
    pub local: Context,
    /// The other end's device in loopback mode (for a verbs device: the same device).
    pub peer: Option<Context>,
    /// Name for the banner.
    pub name: String,
    /// Where the software ConnectX's frames arrive, once bound (runs across processes).
    pub udp: OnceLock<SocketAddr>,
    /// The device is software that needs this machine's cores to move packets (the software
    /// ConnectX's thread, Soft-RoCE's kernel work): a waiting poller yields its core instead
    /// of spinning.
    pub software: bool,
    /// The verbs device, for the libibverbs baseline path (`--path verbs`).
    pub verbs: Option<std::sync::Arc<mlx5_hw::verbs::VerbsDevice>>,
}

impl Devices {
    /// Two software ConnectX devices (10.0.0.1 and 10.0.0.2) on one fabric run by its own
    /// thread (`threaded`) or stepped by the caller ([`Context::progress`]).
    pub fn sim_pair(threaded: bool) -> Result<Devices> {
        let fabric = if threaded {
            SimFabric::threaded()?
        } else {
            SimFabric::deterministic()
        };
        let a = fabric.add_device_with(DeviceConfig::new([10, 0, 0, 1]));
        let b = fabric.add_device_with(DeviceConfig::new([10, 0, 0, 2]));
        Ok(Devices {
            local: a,
            peer: Some(b),
            udp: OnceLock::new(),
            software: true,
            verbs: None,
            name: "sim0 + sim1 (software ConnectX, one process)".into(),
        })
    }

    /// One software ConnectX for a run across processes, threaded: the server's has address
    /// [`SERVER_SIM_IP`], the client's [`CLIENT_SIM_IP`]. Its UDP socket is bound, and the
    /// peer's address learnt, when the control connection opens
    /// ([`crate::rendezvous::Rendezvous::control`]).
    pub fn sim_process(client: bool) -> Result<Devices> {
        let (ip, name) = if client {
            (CLIENT_SIM_IP, "sim1")
        } else {
            (SERVER_SIM_IP, "sim0")
        };
        let fabric = SimFabric::threaded()?;
        let d = fabric.add_device_with(DeviceConfig::new(ip).name(name));
        Ok(Devices {
            local: d,
            peer: None,
            udp: OnceLock::new(),
            software: true,
            verbs: None,
            name: format!(
                "{name} (software ConnectX {}, frames to the peer process over UDP)",
                std::net::Ipv4Addr::from(ip)
            ),
        })
    }

    /// One software ConnectX with address `ip` bound to the Linux TAP interface `tap`, threaded:
    /// it speaks native RoCEv2 on that link, so its peer is another RoCE implementation (e.g.
    /// Soft-RoCE bound to the TAP netdev), not a software ConnectX in another process
    /// (`mlx5_sim::tap_port`). Selected with `--tap NAME` (and `--tap-ip IPV4`) on the command
    /// line of `lat` / `bw`, or `MLX5_SIM_TAP=NAME[,IPV4]` in their environment ([`TAP_ENV`]).
    pub fn sim_tap(tap: &str, ip: [u8; 4]) -> Result<Devices> {
        let name = format!("sim-{tap}");
        let fabric = SimFabric::threaded()?;
        let d = fabric.add_device_with(DeviceConfig::new(ip).name(&name));
        let sim = d
            .sim_device()
            .ok_or_else(|| Error::Usage("not a software ConnectX".into()))?;
        sim.bind_tap(tap).map_err(|e| Error::Net {
            during: format!("bind the software ConnectX to TAP {tap}"),
            source: e,
        })?;
        Ok(Devices {
            local: d,
            peer: None,
            udp: OnceLock::new(),
            software: true,
            verbs: None,
            name: format!(
                "{name} (software ConnectX {}, native RoCEv2 on TAP {tap})",
                std::net::Ipv4Addr::from(ip)
            ),
        })
    }

    /// Whether the software ConnectX is bound to a TAP interface (its peer is not a software
    /// ConnectX: no UDP link to swap).
    pub fn on_tap(&self) -> bool {
        self.sim().is_some_and(|s| s.tap_stats().is_some())
    }

    /// The device the other end of a loopback run uses (this one when there is no other).
    pub fn peer_or_local(&self) -> &Context {
        self.peer.as_ref().unwrap_or(&self.local)
    }

    /// The software ConnectX of this side, if that is what it is.
    pub fn sim(&self) -> Option<&mlx5_sim::SimDevice> {
        self.local.sim_device()
    }

    /// What the software ConnectX reported as driver bugs, one per line (empty when none or
    /// on a verbs device): printed when a run fails, since it says which side was wrong.
    pub fn driver_bugs(&self) -> Vec<String> {
        self.local
            .sim_fabric()
            .map(|f| {
                f.fabric()
                    .driver_bugs()
                    .iter()
                    .map(|b| b.to_string())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Print every driver bug the software ConnectX reported, prefixed with the tool's name
    /// (after a failed run: the bug is usually the cause).
    pub fn print_driver_bugs(&self, tool: &str) {
        for b in self.driver_bugs() {
            eprintln!("{tool}: the software ConnectX reported a driver bug: {b}");
        }
    }

    /// Whether these are software ConnectX devices.
    pub fn is_sim(&self) -> bool {
        self.local.sim_device().is_some()
    }

    /// Refuse a data path the device does not have: `--path verbs` on the software ConnectX
    /// (it has no libibverbs), `--path direct` on a verbs device that is not driven by mlx5
    /// (Soft-RoCE, another vendor: no mlx5dv rings to write).
    pub fn check_path(&self, path: PathKind) -> Result<()> {
        match path {
            PathKind::Verbs if self.is_sim() => Err(Error::Usage(
                "--path verbs needs a verbs device: the software ConnectX has no libibverbs \
                 data path. Use -d mlx5_N or -d rxe0, or --path direct"
                    .into(),
            )),
            PathKind::Direct if !self.local.query_device()?.direct_path => {
                Err(Error::Usage(format!(
                    "--path direct needs an mlx5 device: {} is driven by another provider \
                     (Soft-RoCE or another vendor's NIC), which has no mlx5 rings for this \
                     library to write. Use --path verbs to measure libibverbs on it",
                    self.name
                )))
            }
            _ => Ok(()),
        }
    }

    /// The verbs device of a `--path verbs` run (the software ConnectX has none:
    /// [`Devices::check_path`] refuses it first).
    pub fn verbs_device(&self) -> Result<std::sync::Arc<mlx5_hw::verbs::VerbsDevice>> {
        self.verbs
            .clone()
            .ok_or_else(|| Error::Usage("--path verbs needs a verbs device".into()))
    }

    /// The source GID index on `port`: `gid_index` (`-x`) when given; else on a verbs device
    /// with a RoCE port the one [`crate::gid::pick`] prefers; else 0.
    pub fn gid_index(&self, port: u8, gid_index: Option<u8>) -> Result<u8> {
        self.gid_index_for(port, gid_index, false)
    }

    /// [`Devices::gid_index`], preferring a GID of an IPv6 address when `ipv6` (perftest's
    /// `--ipv6`) and `-x` is not given.
    pub fn gid_index_for(&self, port: u8, gid_index: Option<u8>, ipv6: bool) -> Result<u8> {
        let dev = self.local.device();
        if let Some(x) = gid_index {
            // An empty slot would only fail later, as ENODATA from the modify to RTR.
            let gid = dev.query_gid(port, u32::from(x)).ok();
            let empty = !gid.is_some_and(|g| g != mlx5_hw::Gid::default());
            let roce = dev.query_port(port)?.link_layer == mlx5_hw::LinkLayer::Ethernet;
            if roce && empty {
                return Err(Error::Usage(format!(
                    "-x {x}: GID {x} of port {port} of {} is empty (list a verbs device's GIDs \
                     with `ibv_devinfo -v -d NAME`), or leave -x out: a RoCE v2 GID of an IPv4 \
                     address is chosen",
                    self.name
                )));
            }
            return Ok(x);
        }
        if let Some(v) = &self.verbs {
            return auto_gid_index(v, port, ipv6);
        }
        Ok(0)
    }

    /// Refuse port `port` (`-i`) when the device has no such port, naming the ports it has.
    pub fn check_port(&self, port: u8) -> Result<()> {
        let ports = self.local.query_device()?.phys_port_cnt;
        if port == 0 || port > ports {
            return Err(Error::Usage(format!(
                "-i {port}: {} has {} (ports are numbered from 1)",
                self.name,
                if ports == 1 {
                    "port 1 only".to_string()
                } else {
                    format!("ports 1 to {ports}")
                }
            )));
        }
        Ok(())
    }
}

/// The GID index [`crate::gid::pick`] chooses on a verbs device's RoCE port (0 on
/// InfiniBand, where the path needs no GRH).
fn auto_gid_index(v: &mlx5_hw::verbs::VerbsDevice, port: u8, ipv6: bool) -> Result<u8> {
    use crate::gid::{pick_for, GidEntry};
    use mlx5_hw::{Device, LinkLayer};
    let attr = v.query_port(port)?;
    if attr.link_layer != LinkLayer::Ethernet {
        return Ok(0);
    }
    // The kernel's GID type of each entry (Linux Documentation/ABI/stable/
    // sysfs-class-infiniband, `ports/N/gid_attrs/types/INDEX`).
    let types = std::path::Path::new(mlx5_hw::verbs::SYSFS_INFINIBAND)
        .join(v.name())
        .join(format!("ports/{port}/gid_attrs/types"));
    // Each query is a system call (a few ms under emulation) and tables are long (rxe: 1024
    // entries, mostly empty): stop at the first entry nothing can beat.
    let mut entries = Vec::new();
    for index in 0..attr.gid_tbl_len.min(256) {
        let Ok(gid) = v.query_gid(port, index) else {
            continue;
        };
        let kind = std::fs::read_to_string(types.join(index.to_string())).ok();
        let e = GidEntry { index, gid, kind };
        let best = e.is_best_for(ipv6);
        entries.push(e);
        if best {
            break;
        }
    }
    let index = pick_for(&entries, ipv6);
    tracing::debug!(device = v.name(), port, index, "source GID index chosen");
    u8::try_from(index).map_err(|_| {
        Error::Usage(format!(
            "the GID table of {} port {port} has its usable entry at index {index}; choose one \
             below 256 with -x",
            v.name()
        ))
    })
}

/// Open the devices the command line names and run `f` on them; when it fails, print what the
/// software ConnectX logged as driver bugs (`tool` names the program in those lines; not after a
/// timeout, whose cause may still hold the software ConnectX's lock). `tap` is `--tap` /
/// `--tap-ip` ([`crate::args::Common::tap`]); without it [`TAP_ENV`] is consulted.
pub fn on_devices<T>(
    tool: &str,
    name: &str,
    tap: Option<(String, [u8; 4])>,
    loopback: bool,
    client: bool,
    f: impl FnOnce(&Devices) -> Result<T>,
) -> Result<T> {
    let devs = open_devices_on(name, tap, loopback, client)?;
    let r = f(&devs);
    if r.as_ref()
        .is_err_and(|e| !matches!(e, Error::Timeout { .. }))
    {
        devs.print_driver_bugs(tool);
    }
    r
}

/// Open the device named on the command line: `sim` is the software ConnectX (with `loopback`
/// two devices in this process, else one that reaches the peer process over UDP; `client`
/// says which end this is); anything else is a verbs device, opened through rdma-core (loaded
/// at this first open; a host without it gets an error naming the packages to install).
pub fn open_devices(name: &str, loopback: bool, client: bool) -> Result<Devices> {
    open_devices_on(name, None, loopback, client)
}

/// Whether `-d NAME` names the software ConnectX (`sim`, `sim0`, `sim1`, ...).
pub fn is_sim_name(name: &str) -> bool {
    name.strip_prefix("sim")
        .is_some_and(|n| n.chars().all(|c| c.is_ascii_digit()))
}

/// [`open_devices`] with the software ConnectX bound to the TAP interface `tap` names
/// (`--tap`), or when that is `None` to the one [`TAP_ENV`] names, if any.
pub fn open_devices_on(
    name: &str,
    tap: Option<(String, [u8; 4])>,
    loopback: bool,
    client: bool,
) -> Result<Devices> {
    if is_sim_name(name) {
        let tap = match tap {
            Some(t) => Some(t),
            None => tap_from_env()?,
        };
        if let (Some((tap, ip)), false) = (tap, loopback) {
            check_tap(&tap)?;
            return Devices::sim_tap(&tap, ip);
        }
        return if loopback {
            Devices::sim_pair(true)
        } else {
            Devices::sim_process(client)
        };
    }
    open_verbs(name, loopback)
}

/// The environment variable that binds `-d sim` to a TAP interface: `NAME[,IPV4]` (the
/// address defaults to [`TAP_SIM_IP`]).
pub const TAP_ENV: &str = "MLX5_SIM_TAP";

/// The software ConnectX's address on a TAP link when [`TAP_ENV`] names none.
pub const TAP_SIM_IP: [u8; 4] = [192, 168, 77, 2];

/// Refuse a TAP interface that is not there: opening `/dev/net/tun` with a name that exists
/// nowhere would create a new, unconnected TAP device (`TUNSETIFF`, the kernel's
/// Documentation/networking/tuntap.rst) and the run would wait for a peer that never comes.
/// A TUN/TAP netdev has the sysfs attribute `tun_flags` (the kernel's drivers/net/tun.c).
fn check_tap(tap: &str) -> Result<()> {
    let dir = std::path::Path::new("/sys/class/net").join(tap);
    if !dir.exists() {
        return Err(Error::Usage(format!(
            "TAP interface {tap:?}: no network interface of that name here (create it with              `ip tuntap add {tap} mode tap`, or name another with --tap)"
        )));
    }
    if !dir.join("tun_flags").exists() {
        return Err(Error::Usage(format!(
            "TAP interface {tap:?}: that network interface is not a TUN/TAP device (no              /sys/class/net/{tap}/tun_flags); the software ConnectX opens a TAP interface"
        )));
    }
    Ok(())
}

fn tap_from_env() -> Result<Option<(String, [u8; 4])>> {
    let Ok(v) = std::env::var(TAP_ENV) else {
        return Ok(None);
    };
    let (name, ip) = match v.split_once(',') {
        Some((n, ip)) => {
            let ip: std::net::Ipv4Addr = ip.parse().map_err(|_| {
                Error::Usage(format!("{TAP_ENV}={v}: {ip:?} is not an IPv4 address"))
            })?;
            (n.to_string(), ip.octets())
        }
        None => (v.clone(), TAP_SIM_IP),
    };
    if name.is_empty() {
        return Err(Error::Usage(format!(
            "{TAP_ENV}={v}: no TAP interface named"
        )));
    }
    crate::args::parse_tap_name(&name).map_err(|e| Error::Usage(format!("{TAP_ENV}={v}: {e}")))?;
    Ok(Some((name, ip)))
}

fn open_verbs(name: &str, loopback: bool) -> Result<Devices> {
    use std::sync::Arc;
    let verbs = Arc::new(mlx5_hw::verbs::VerbsDevice::open(name)?);
    let ctx = Context::from_device(verbs.clone());
    // Software RDMA devices (rxe, siw) name their net device in `parent`; a NIC has a
    // `device` link to its PCI function instead (Linux drivers/infiniband/sw/rxe/rxe_verbs.c
    // `parent_show`).
    let software = std::path::Path::new(mlx5_hw::verbs::SYSFS_INFINIBAND)
        .join(name)
        .join("parent")
        .exists();
    Ok(Devices {
        software,
        verbs: Some(verbs),
        peer: loopback.then(|| ctx.clone()),
        local: ctx,
        name: name.to_string(),
        udp: OnceLock::new(),
    })
}
