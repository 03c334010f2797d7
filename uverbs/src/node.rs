//! This process's software ConnectX: a fabric with one device (`mlx5_0`) bound to a UDP socket
//! (and a TAP interface if asked), the fault rules and the capture of the environment, and the
//! fabric's thread.
//!
//! **Finding the other end.** Every software ConnectX binds its socket to its own IPv4 address
//! on one agreed port (`MLX5SIM_PORT`, default [`crate::config::DEFAULT_PORT`]), so a GID names
//! a socket: two unmodified programs that exchange only GIDs and QPNs (`ibv_rc_pingpong`,
//! perftest, UCX) reach each other with nothing configured
//! (`mlx5_sim::udp_port::UdpPort::set_peer_port`). On one host each process takes a loopback
//! address of its own (`127.77.x.y` from its process id, the next one if taken; all of
//! 127.0.0.0/8 is the loopback interface); across hosts `MLX5SIM_IP` names the host's own
//! address. `MLX5SIM_PEERS` adds devices whose socket is elsewhere. With `MLX5SIM_TAP` the
//! device speaks native RoCE v2 on a TAP interface instead (to Linux Soft-RoCE), and reaches
//! only the listed peers over UDP.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use mlx5_hw::{Device, Gid};
use mlx5_sim::{Class, DeviceConfig, Fabric, FabricThread, Rate, SimDevice};

use crate::config::Config;
use crate::faultspec::{Action, PacketClass, Spec};

/// The process's device and everything around it.
pub struct Node {
    /// The fabric.
    pub fabric: Fabric,
    /// The device.
    pub dev: SimDevice,
    /// The fabric's thread (stopped at exit).
    pub thread: Mutex<Option<FabricThread>>,
    /// Port 1's IPv4 address.
    pub ip: Ipv4Addr,
    /// Node GUID.
    pub guid: u64,
    /// The settings.
    pub cfg: Config,
    /// The sysfs tree's root.
    pub tree: PathBuf,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("ip", &self.ip)
            .field("guid", &format_args!("{:#x}", self.guid))
            .finish()
    }
}

/// The loopback addresses tried for a process without `MLX5SIM_IP`: `127.77.x.y` from the
/// process id, then the following ones.
fn candidates() -> impl Iterator<Item = Ipv4Addr> {
    let pid = std::process::id();
    (0..4096u32).map(move |k| {
        let v = (pid.wrapping_add(k)) % 65023 + 257; // never .0.0 or .0.x below 1.1
        Ipv4Addr::new(127, 77, (v >> 8) as u8, (v & 0xff) as u8)
    })
}

impl Node {
    /// Build the device from the settings: bind its socket, apply faults and capture, start the
    /// fabric thread.
    pub fn start(cfg: Config, tree: PathBuf) -> Result<Node, String> {
        let fabric = Fabric::new();
        if cfg.tap.is_some() {
            return Self::start_on_tap(cfg, tree, fabric);
        }
        let mut bound = None;
        let ips: Vec<Ipv4Addr> = match cfg.ip {
            Some(ip) => vec![ip],
            None => candidates().collect(),
        };
        let mut last_err = None;
        for ip in ips {
            // Bind before the device exists, to find a free address without leaving devices.
            match std::net::UdpSocket::bind(SocketAddr::new(ip.into(), cfg.port)) {
                Ok(s) => {
                    drop(s);
                    bound = Some(ip);
                    break;
                }
                Err(e) => last_err = Some((ip, e)),
            }
        }
        let ip = bound.ok_or_else(|| match last_err {
            Some((ip, e)) => format!(
                "cannot bind the device's UDP socket to {ip}:{} ({e}); choose another address \
                 (MLX5SIM_IP, mlx5sim --ip) or port (MLX5SIM_PORT)",
                cfg.port
            ),
            None => "no address to bind the device to".into(),
        })?;
        let dev = fabric.add_device(
            DeviceConfig::new(ip.octets())
                .name(crate::sysfs::IBDEV)
                .mtu(cfg.mtu),
        );
        let guid = 0x0002_c903_0000_0000 | u64::from(u32::from(ip));
        dev.set_node_guid(guid);
        dev.bind_udp(SocketAddr::new(ip.into(), cfg.port))
            .map_err(|e| {
                format!(
                    "cannot bind the device's UDP socket to {ip}:{}: {e}",
                    cfg.port
                )
            })?;
        for (peer, addr) in &cfg.peers {
            dev.add_udp_peer(peer.octets(), *addr)
                .map_err(|e| format!("MLX5SIM_PEERS: {e}"))?;
        }
        dev.set_udp_peer_port(Some(cfg.port))
            .map_err(|e| e.to_string())?;
        Self::finish(cfg, tree, fabric, dev, ip, guid)
    }

    /// The device on a TAP interface (`MLX5SIM_TAP`): its address (`MLX5SIM_IP`, required) is
    /// on the TAP link, not one of this host's, so its UDP socket, needed only for the
    /// `MLX5SIM_PEERS` devices, is bound to any address on the agreed port.
    fn start_on_tap(cfg: Config, tree: PathBuf, fabric: Fabric) -> Result<Node, String> {
        let tap = cfg.tap.clone().unwrap_or_default();
        let ip = cfg.ip.ok_or_else(|| {
            format!(
                "MLX5SIM_TAP={tap}: give the device's address on the TAP link (MLX5SIM_IP, \
                 mlx5sim --ip)"
            )
        })?;
        let dev = fabric.add_device(
            DeviceConfig::new(ip.octets())
                .name(crate::sysfs::IBDEV)
                .mtu(cfg.mtu),
        );
        let guid = 0x0002_c903_0000_0000 | u64::from(u32::from(ip));
        dev.set_node_guid(guid);
        if !cfg.peers.is_empty() {
            let any = SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), cfg.port);
            dev.bind_udp(any)
                .map_err(|e| format!("cannot bind the device's UDP socket to {any}: {e}"))?;
            for (peer, addr) in &cfg.peers {
                dev.add_udp_peer(peer.octets(), *addr)
                    .map_err(|e| format!("MLX5SIM_PEERS: {e}"))?;
            }
        }
        dev.bind_tap(&tap)
            .map_err(|e| format!("MLX5SIM_TAP={tap}: {e}"))?;
        Self::finish(cfg, tree, fabric, dev, ip, guid)
    }

    /// Faults, capture and the fabric's thread, once the device is bound.
    fn finish(
        cfg: Config,
        tree: PathBuf,
        fabric: Fabric,
        dev: SimDevice,
        ip: Ipv4Addr,
        guid: u64,
    ) -> Result<Node, String> {
        if let Some(f) = &cfg.faults {
            let spec = crate::faultspec::parse(f).map_err(|e| format!("MLX5SIM_FAULTS: {e}"))?;
            apply_faults(&fabric, &dev, &spec);
        }
        if let Some(f) = cfg.ack_floor {
            fabric.set_remote_ack_timeout_floor(f);
        }
        if let Some(p) = &cfg.pcap {
            fabric
                .capture_to(p)
                .map_err(|e| format!("MLX5SIM_PCAP={}: {e}", p.display()))?;
        }
        let thread = fabric.start_thread();
        if !thread.is_running() {
            return Err("could not start the software ConnectX's thread".into());
        }
        Ok(Node {
            fabric,
            dev,
            thread: Mutex::new(Some(thread)),
            ip,
            guid,
            cfg,
            tree,
        })
    }

    /// Port 1's GID.
    pub fn gid(&self) -> Gid {
        Gid::from_ipv4(self.ip.octets())
    }

    /// The device's counters, by name.
    pub fn counters(&self) -> Vec<(String, u64)> {
        self.dev
            .counters(1)
            .map(|v| v.into_iter().map(|c| (c.name, c.value)).collect())
            .unwrap_or_default()
    }

    /// The facts the sysfs tree shows.
    pub fn facts(&self) -> crate::sysfs::DeviceFacts {
        crate::sysfs::DeviceFacts {
            guid: self.guid,
            ip: self.ip,
            fw_ver: FW_VER.into(),
        }
    }

    /// Let the frames already on the wire leave (the last ACK of a program that exits as soon
    /// as it saw its last completion is sent in the device's next step; without it the peer
    /// would retry into RETRY_EXC_ERR), then stop the fabric thread and flush the capture (at
    /// exit).
    pub fn stop(&self) {
        let end = std::time::Instant::now() + DRAIN;
        while self.fabric.in_flight() > 0 && std::time::Instant::now() < end {
            std::thread::sleep(Duration::from_millis(1));
        }
        let t = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        drop(t);
        let _ = self.fabric.stop_capture();
    }
}

/// The firmware version the device reports (`fw_ver`; `ibv_devinfo` prints it).
pub const FW_VER: &str = "16.35.0000";

fn class(c: PacketClass) -> Class {
    match c {
        PacketClass::Any => Class::Any,
        PacketClass::Requests => Class::Requests,
        PacketClass::Data => Class::Data,
        PacketClass::Reads => Class::ReadRequests,
        PacketClass::Atomics => Class::AtomicRequests,
        PacketClass::Responses => Class::Responses,
        PacketClass::Acks => Class::Acks,
        PacketClass::ReadResponses => Class::ReadResponses,
        PacketClass::AtomicAcks => Class::AtomicAcks,
    }
}

/// Replace the fabric's fault rules by those of `spec`.
pub fn apply_faults(fabric: &Fabric, dev: &SimDevice, spec: &Spec) {
    let faults = fabric.faults();
    if spec.fatal {
        // The device's fatal state: every QP to Error, IBV_EVENT_DEVICE_FATAL, every later
        // command refused (`crate::cmd`: the kernel disassociates the contexts).
        faults.device_fatal(dev);
    }
    faults.clear();
    if let Some(s) = spec.seed {
        fabric.set_seed(s);
    }
    for r in &spec.rules {
        let mut t = faults.all().only(class(r.class));
        if let Some(q) = r.qpn {
            t = t.qpn(q);
        }
        if let Some(n) = r.times {
            t = t.times(n);
        }
        if r.skip > 0 {
            t = t.skip(r.skip);
        }
        match r.action {
            Action::Loss(p) => t.loss(Rate(p)),
            Action::Duplicate(p) => t.duplicate(Rate(p)),
            Action::Corrupt(p) => t.corrupt(Rate(p)),
            Action::Reorder(d) => t.reorder(d),
            Action::Delay(d) => t.delay(d),
            Action::Down => t.down(),
            Action::Rnr(p) => t.rnr(Rate(p)),
            Action::RnrFor(d) => t.rnr_for(d),
        };
    }
}

/// How long the exit waits for the frames on the wire to leave.
pub const DRAIN: Duration = Duration::from_millis(200);

/// How often the control file is looked at.
pub const CONTROL_POLL: Duration = Duration::from_millis(100);
