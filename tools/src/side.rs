//! What the tools and examples need that takes `unsafe`: registering a buffer with a device and
//! building the data path ([`Qp`], [`Cq`], [`Srq`]) from the layouts the device hands out. The
//! facade library forbids unsafe code, so this file is included with `#[path]` by the `lat` and
//! `bw` binaries and by the examples. Also here, since every one of them opens devices the same
//! way: [`open_devices`] and the control connection to a peer process, [`Rendezvous`], which
//! swaps a [`Hello`] with the peer first; the checks of the arguments `lat` and `bw` share,
//! [`sizes_and_iters`] and [`Devices::check_path`], and of what the device grants them,
//! [`Side::with_inline`] (`-I`) and [`Side::set_doorbell_mode`] (`--doorbell`); and with the
//! `verbs` feature `VerbsSide`, one end on any verbs device (Soft-RoCE too) for the libibverbs
//! data path.
//!
//! Lifetimes: a [`Side`] owns its buffer and data-path objects and drops the data path first;
//! the device objects (QPs, CQs, MRs) live as long as the device, which every program here
//! keeps until it exits. Keep the fabric (and its thread) alive longer than the sides: declare
//! it first.

use crate::args::{Common, DoorbellArg, PathKind};
use crate::hello::{self, Hello, RunShape, SimHello};
use crate::inline::{self, InlineRequest};
use crate::rendezvous::{self, UdpBudget};
use crate::report;
use crate::{Error, Result};
use mlx5_connect::{Control, Endpoint, QpRef, RemoteBuffer};
use mlx5_hw::{
    AccessFlags, CqId, CqInitAttr, Device, MrInfo, PdId, QpCap, QpId, QpInfo, QpInitAttr, QpType,
    SrqId, SrqInfo, SrqInitAttr,
};
use mlx5_qp::{Cq, DoorbellMode, Qp, RemoteAddr, Sge, Srq};
use mlx5_sim::{DeviceConfig, Fabric, FabricThread, SimDevice};
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// The IPv4 address of the server's software ConnectX in a run across processes.
pub const SERVER_SIM_IP: [u8; 4] = [10, 0, 0, 1];
/// The IPv4 address of the client's.
pub const CLIENT_SIM_IP: [u8; 4] = [10, 0, 0, 2];

/// The message sizes (`-a`: all of them; else `-s`, or `default_size`) and the iteration
/// count (`-n`, or `default_iters`) of a `lat` or `bw` run, refusing sizes outside
/// 1 B..=1 GiB, zero iterations, and `--loopback` with a server address.
pub fn sizes_and_iters(
    c: &Common,
    default_size: u64,
    default_iters: u64,
) -> Result<(Vec<u64>, u64)> {
    let sizes = if c.all {
        report::all_sizes(u64::MAX)
    } else {
        vec![c.size.unwrap_or(default_size)]
    };
    if sizes.iter().any(|&s| s == 0 || s > 1 << 30) {
        return Err(Error::Usage("-s must be between 1 and 1 GiB".into()));
    }
    if c.loopback && c.server.is_some() {
        return Err(Error::Usage(
            "--loopback runs both ends here: give no server address".into(),
        ));
    }
    let iters = c.iters.unwrap_or(default_iters);
    if iters == 0 {
        return Err(Error::Usage("-n must be at least 1".into()));
    }
    Ok((sizes, iters))
}

/// Every right a test buffer needs: local write (receives, READ targets) and remote
/// READ/WRITE/atomics.
pub fn all_access() -> AccessFlags {
    AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC
}

/// A buffer registered with a device. The device (the software ConnectX thread or a NIC)
/// reads and writes it behind Rust's back, so every access goes through volatile reads and
/// writes.
pub struct Buf {
    mem: Vec<u64>,
    len: usize,
    /// The registration: lkey, rkey, address.
    pub mr: MrInfo,
}

impl Buf {
    /// `len` zero bytes (8-byte aligned) registered in `pd` with `access`.
    pub fn new(dev: &dyn Device, pd: PdId, len: usize, access: AccessFlags) -> Result<Buf> {
        let mut mem = vec![0u64; len.div_ceil(8).max(1)];
        // SAFETY: `mem` is owned by the returned Buf and is never reallocated; the programs
        // that use it keep it (and the device) alive until the device is done with it.
        let mr = unsafe { dev.reg_mr(pd, mem.as_mut_ptr() as *mut u8, len, access) }?;
        Ok(Buf { mem, len, mr })
    }

    /// Start address.
    pub fn addr(&self) -> u64 {
        self.mem.as_ptr() as u64
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// A gather/scatter entry for `len` bytes at `off`.
    pub fn sge(&self, off: usize, len: u32) -> Sge {
        Sge {
            addr: self.addr() + off as u64,
            length: len,
            lkey: self.mr.lkey,
        }
    }

    /// What to announce to the peer.
    pub fn remote_buffer(&self) -> RemoteBuffer {
        RemoteBuffer {
            addr: self.addr(),
            rkey: self.mr.rkey,
            len: self.len as u64,
        }
    }

    fn check(&self, off: usize, n: usize) {
        assert!(
            off.checked_add(n).is_some_and(|e| e <= self.len),
            "buffer access {off}+{n} outside {} bytes",
            self.len
        );
    }

    /// Read one byte the device may have written.
    #[inline]
    pub fn read_u8(&self, off: usize) -> u8 {
        self.check(off, 1);
        // SAFETY: in bounds (checked); volatile because the device writes this memory.
        unsafe { core::ptr::read_volatile((self.mem.as_ptr() as *const u8).add(off)) }
    }

    /// Write one byte (before posting a WR that sends it).
    #[inline]
    pub fn write_u8(&self, off: usize, v: u8) {
        self.check(off, 1);
        // SAFETY: in bounds; volatile because the device reads this memory. The Vec's
        // memory is only reached through raw pointers once registered.
        unsafe { core::ptr::write_volatile((self.mem.as_ptr() as *mut u8).add(off), v) }
    }

    /// Copy bytes in.
    pub fn write(&self, off: usize, src: &[u8]) {
        for (i, &b) in src.iter().enumerate() {
            self.write_u8(off + i, b);
        }
    }

    /// Copy bytes out.
    pub fn read(&self, off: usize, n: usize) -> Vec<u8> {
        (0..n).map(|i| self.read_u8(off + i)).collect()
    }

    /// An 8-byte value in the byte order it sits in memory (big-endian for atomic results
    /// and operands, `docs/sources.md` §3).
    pub fn read_be64(&self, off: usize) -> u64 {
        let b = self.read(off, 8);
        u64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
    }

    /// Store an 8-byte big-endian value (an atomic target as the responder sees it).
    pub fn write_be64(&self, off: usize, v: u64) {
        self.write(off, &v.to_be_bytes());
    }
}

/// The remote address `off` bytes into a buffer the peer announced.
pub fn remote(b: &RemoteBuffer, off: u64) -> RemoteAddr {
    RemoteAddr::new(b.addr + off, b.rkey)
}

/// How a banner names one end of a connection: `QPN 0x000011 PSN 0xa21b53`, and the GID the
/// path uses when it has one (RoCE), e.g. `GID ::ffff:192.0.2.1`.
pub fn describe_endpoint(e: &Endpoint) -> String {
    let mut s = format!("QPN {:#08x} PSN {:#08x}", e.qpn, e.psn);
    if e.gid != mlx5_hw::Gid::default() {
        s.push_str(&format!(" GID {}", std::net::Ipv6Addr::from(e.gid.0)));
    }
    s
}

/// Shape of one side.
#[derive(Clone, Copy, Debug)]
pub struct SideCfg {
    /// Transport.
    pub qp_type: QpType,
    /// QPs sharing the CQ.
    pub qps: u32,
    /// Send WRs per QP.
    pub sq_depth: u32,
    /// Receive WRs per QP (ignored with an SRQ).
    pub rq_depth: u32,
    /// Inline bytes per WR.
    pub inline: u32,
    /// Buffer size.
    pub buf_len: usize,
    /// Receive through a shared receive queue of this many WRs.
    pub srq: Option<u32>,
}

impl SideCfg {
    /// The attributes of each of this side's QPs, on CQ `cq` (and SRQ `srq`), asking for
    /// `inline` bytes of inline data.
    fn qp_attr(&self, cq: CqId, srq: Option<SrqId>, inline: u32) -> QpInitAttr {
        QpInitAttr {
            qp_type: self.qp_type,
            send_cq: cq,
            recv_cq: cq,
            srq,
            cap: QpCap {
                max_send_wr: self.sq_depth,
                max_recv_wr: if self.srq.is_some() { 0 } else { self.rq_depth },
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: inline,
            },
            sq_sig_all: false,
        }
    }

    /// The entries this side's CQ needs.
    fn cqe(&self) -> u32 {
        let n = (self.sq_depth + self.rq_depth.max(self.srq.unwrap_or(0))) * self.qps.max(1);
        n.max(64)
    }

    /// One RC QP with room for 128 sends and 128 receives, 220 bytes inline, a 64 KiB buffer.
    pub fn rc() -> SideCfg {
        SideCfg {
            qp_type: QpType::Rc,
            qps: 1,
            sq_depth: 128,
            rq_depth: 128,
            inline: 220,
            buf_len: 1 << 16,
            srq: None,
        }
    }
}

/// One end: a PD, a CQ, one or more QPs (Reset) with their data paths, maybe an SRQ, and a
/// registered buffer.
pub struct Side {
    // Data-path objects first: they point into device memory and drop before anything else.
    /// The data paths of the QPs, in creation order.
    pub qps: Vec<Qp>,
    /// The CQ every QP (and the SRQ) completes on.
    pub cq: Cq,
    /// The shared receive queue, if configured.
    pub srq: Option<Srq>,
    /// The device's records of the QPs.
    pub infos: Vec<QpInfo>,
    /// The SRQ's record.
    pub srq_info: Option<SrqInfo>,
    /// Protection domain.
    pub pd: PdId,
    /// The CQ's handle.
    pub cq_id: CqId,
    /// The registered buffer.
    pub buf: Buf,
    /// The device.
    pub dev: Arc<dyn Device>,
}

impl Side {
    /// Create everything on `dev`.
    pub fn new(dev: Arc<dyn Device>, cfg: &SideCfg) -> Result<Side> {
        let pd = dev.alloc_pd()?;
        let cqi = dev.create_cq(&cq_attr(cfg.cqe()))?;
        // SAFETY: the CQ is never destroyed while the device lives, and this `Cq` is its only
        // consumer.
        let cq = unsafe { Cq::from_layout(&cqi.layout) }?;
        let (srq, srq_info) = match cfg.srq {
            Some(n) => {
                let si = dev.create_srq(
                    pd,
                    &SrqInitAttr {
                        max_wr: n,
                        max_sge: 1,
                        srq_limit: 0,
                    },
                )?;
                // SAFETY: the SRQ is never destroyed while the device lives; this `Srq` is the
                // only one posting to it.
                let s = unsafe { Srq::from_layout(&si.layout) }?;
                (Some(s), Some(si))
            }
            None => (None, None),
        };
        let mut qps = Vec::new();
        let mut infos = Vec::new();
        for _ in 0..cfg.qps.max(1) {
            let info =
                dev.create_qp(pd, &cfg.qp_attr(cqi.id, srq_info.map(|s| s.id), cfg.inline))?;
            let srqn = srq_info.map(|s| s.layout.srqn);
            // SAFETY: the QP is never destroyed while this `Qp` exists (the device outlives
            // it), and nothing else posts to it.
            let qp = unsafe { Qp::from_layout(&info.layout, srqn) }?;
            qps.push(qp);
            infos.push(info);
        }
        let buf = Buf::new(&*dev, pd, cfg.buf_len, all_access())?;
        Ok(Side {
            qps,
            cq,
            srq,
            infos,
            srq_info,
            pd,
            cq_id: cqi.id,
            buf,
            dev,
        })
    }

    /// [`Side::new`] asking for the inline size of `req` (`cfg.inline` is replaced by it), and
    /// the inline size the run can use ([`InlineRequest::settle`]): an explicit `-I` the device
    /// does not grant is refused with the largest size it does grant.
    pub fn with_inline(
        dev: Arc<dyn Device>,
        cfg: &SideCfg,
        req: InlineRequest,
    ) -> Result<(Side, u32)> {
        let name = dev.name().to_string();
        let cfg = SideCfg {
            inline: req.bytes,
            ..*cfg
        };
        match Side::new(dev.clone(), &cfg) {
            Ok(side) => {
                let granted = side.qps.iter().map(Qp::max_inline_data).min().unwrap_or(0);
                let inline = req.settle(granted, &name)?;
                Ok((side, inline))
            }
            Err(e) if req.explicit => Err(refuse_inline(
                e,
                &*dev,
                &cfg,
                req.bytes,
                &name,
                |pd, a| {
                    let q = dev.create_qp(pd, a)?;
                    Ok((q.id, q.layout.max_inline_data))
                },
                |a| Ok(dev.create_cq(a)?.id),
            )),
            Err(e) => Err(e),
        }
    }

    /// Ring every QP's doorbells in `mode` (`--doorbell`); a BlueFlame mode on a QP without
    /// BlueFlame registers is refused with the data path's reason.
    pub fn set_doorbell_mode(&mut self, mode: DoorbellMode) -> Result<()> {
        let name = self.dev.name().to_string();
        for qp in &mut self.qps {
            qp.set_doorbell_mode(mode).map_err(|e| {
                Error::Usage(format!(
                    "--doorbell {}: QP {:#08x} on {name}: {e}; use --doorbell db, or leave \
                     --doorbell out",
                    DoorbellArg::of(mode).name(),
                    qp.qpn()
                ))
            })?;
        }
        Ok(())
    }

    /// The doorbell mode of the QPs (the first one's; [`Side::set_doorbell_mode`] sets them
    /// all alike).
    pub fn doorbell_mode(&self) -> Option<DoorbellMode> {
        self.qps.first().map(Qp::doorbell_mode)
    }

    /// The control path's name for QP `i`.
    pub fn qp_ref(&self, i: usize) -> QpRef {
        QpRef::new(&self.infos[i], self.pd)
    }
}

/// A CQ of `cqe` entries, as every side here creates them.
fn cq_attr(cqe: u32) -> CqInitAttr {
    CqInitAttr {
        cqe,
        cqe_size: 64,
        ignore_overrun: false,
        channel: None,
    }
}

/// The error for an explicit `-I asked` after creating a side failed with `cause`: when a QP of
/// the same shape with less inline data can be created, [`inline::refused`] naming the largest
/// size `dev` grants ([`inline::largest_granted`], asking the device with `create_qp` and a
/// CQ from `create_cq`, destroying what it made); else `cause`.
fn refuse_inline(
    cause: Error,
    dev: &dyn Device,
    cfg: &SideCfg,
    asked: u32,
    name: &str,
    create_qp: impl Fn(PdId, &QpInitAttr) -> Result<(QpId, u32)>,
    create_cq: impl FnOnce(&CqInitAttr) -> Result<CqId>,
) -> Error {
    let probe = || -> Result<Option<u32>> {
        let pd = dev.alloc_pd()?;
        let cq = create_cq(&cq_attr(cfg.cqe()))?;
        // No SRQ: the receive queue does not change the send WQE's size.
        let cfg = SideCfg { srq: None, ..*cfg };
        let largest = inline::largest_granted(asked, |n| {
            let (id, granted) = create_qp(pd, &cfg.qp_attr(cq, None, n)).ok()?;
            dev.destroy_qp(id).ok()?;
            Some(granted)
        });
        dev.destroy_cq(cq)?;
        dev.dealloc_pd(pd)?;
        Ok(largest)
    };
    match probe() {
        Ok(Some(largest)) => inline::refused(asked, largest, name),
        Ok(None) => cause,
        Err(e) => {
            tracing::debug!(%e, "could not look for the largest inline size");
            cause
        }
    }
}

/// The devices a run uses, and the software ConnectX's fabric when that is what they are.
pub struct Devices {
    /// This side's device.
    pub local: Arc<dyn Device>,
    /// The other end's device in loopback mode.
    pub peer: Option<Arc<dyn Device>>,
    /// Name for the banner.
    pub name: String,
    /// The fabric of the software ConnectX (None for a verbs device).
    pub fabric: Option<Fabric>,
    /// Its background thread, when threaded.
    pub thread: Option<FabricThread>,
    /// The software ConnectX devices themselves (fault injection: port state, counters).
    pub sims: Vec<SimDevice>,
    /// Where the software ConnectX's frames arrive, once bound (runs across processes).
    pub udp: OnceLock<SocketAddr>,
    /// The device is software that needs this machine's cores to move packets (the software
    /// ConnectX's thread, Soft-RoCE's kernel work): a waiting poller yields its core instead
    /// of spinning.
    pub software: bool,
    /// The verbs device, for the libibverbs baseline path (`--path verbs`).
    #[cfg(feature = "verbs")]
    pub verbs: Option<Arc<mlx5_hw::verbs::VerbsDevice>>,
}

impl Devices {
    /// Two software ConnectX devices (10.0.0.1 and 10.0.0.2) on one fabric; threaded when
    /// `threaded`, else stepped by the caller (`fabric.run_until_idle()`).
    pub fn sim_pair(threaded: bool) -> Devices {
        let fabric = Fabric::new();
        let a: SimDevice = fabric.add_device(DeviceConfig::new([10, 0, 0, 1]));
        let b: SimDevice = fabric.add_device(DeviceConfig::new([10, 0, 0, 2]));
        let thread = threaded.then(|| fabric.start_thread());
        Devices {
            local: Arc::new(a.clone()),
            peer: Some(Arc::new(b.clone())),
            sims: vec![a, b],
            udp: OnceLock::new(),
            software: true,
            #[cfg(feature = "verbs")]
            verbs: None,
            name: "sim0 + sim1 (software ConnectX, one process)".into(),
            fabric: Some(fabric),
            thread,
        }
    }

    /// One software ConnectX for a run across processes, threaded: the server's has address
    /// [`SERVER_SIM_IP`], the client's [`CLIENT_SIM_IP`]. Its UDP socket is bound, and the
    /// peer's address learnt, when the control connection opens ([`Rendezvous::control`]).
    pub fn sim_process(client: bool) -> Devices {
        let fabric = Fabric::new();
        let (ip, name) = if client {
            (CLIENT_SIM_IP, "sim1")
        } else {
            (SERVER_SIM_IP, "sim0")
        };
        let d: SimDevice = fabric.add_device(DeviceConfig::new(ip).name(name));
        let thread = Some(fabric.start_thread());
        Devices {
            local: Arc::new(d.clone()),
            peer: None,
            sims: vec![d],
            udp: OnceLock::new(),
            software: true,
            #[cfg(feature = "verbs")]
            verbs: None,
            name: format!(
                "{name} (software ConnectX {}, frames to the peer process over UDP)",
                std::net::Ipv4Addr::from(ip)
            ),
            fabric: Some(fabric),
            thread,
        }
    }

    /// One software ConnectX with address `ip` bound to the Linux TAP interface `tap`, threaded:
    /// it speaks native RoCEv2 on that link, so its peer is another RoCE implementation (e.g.
    /// Soft-RoCE bound to the TAP netdev), not a software ConnectX in another process
    /// ([`mlx5_sim::tap_port`]). Selected with `MLX5_SIM_TAP=NAME[,IPV4]` in the environment
    /// of `lat` / `bw` ([`TAP_ENV`]).
    pub fn sim_tap(tap: &str, ip: [u8; 4]) -> Result<Devices> {
        let fabric = Fabric::new();
        let name = format!("sim-{tap}");
        let d: SimDevice = fabric.add_device(DeviceConfig::new(ip).name(&name));
        d.bind_tap(tap).map_err(|e| Error::Net {
            during: format!("bind the software ConnectX to TAP {tap}"),
            source: e,
        })?;
        let thread = Some(fabric.start_thread());
        Ok(Devices {
            local: Arc::new(d.clone()),
            peer: None,
            sims: vec![d],
            udp: OnceLock::new(),
            software: true,
            #[cfg(feature = "verbs")]
            verbs: None,
            name: format!(
                "{name} (software ConnectX {}, native RoCEv2 on TAP {tap})",
                std::net::Ipv4Addr::from(ip)
            ),
            fabric: Some(fabric),
            thread,
        })
    }

    /// Whether the software ConnectX is bound to a TAP interface (its peer is not a software
    /// ConnectX: no UDP link to swap).
    pub fn on_tap(&self) -> bool {
        self.sims.first().is_some_and(|s| s.tap_stats().is_some())
    }

    /// What the software ConnectX reported as driver bugs, one per line (empty when none or
    /// on a verbs device): printed when a run fails, since it says which side was wrong.
    pub fn driver_bugs(&self) -> Vec<String> {
        self.fabric
            .as_ref()
            .map(|f| f.driver_bugs().iter().map(|b| b.to_string()).collect())
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
        self.fabric.is_some()
    }

    /// Refuse a data path the device does not have: `--path verbs` on the software ConnectX
    /// (it has no libibverbs), `--path direct` on a verbs device that is not driven by mlx5
    /// (Soft-RoCE, another vendor: no mlx5dv rings to write).
    pub fn check_path(&self, path: PathKind) -> Result<()> {
        match path {
            PathKind::Verbs if self.is_sim() => Err(Error::Usage(
                "--path verbs needs a verbs device: the software ConnectX has no libibverbs \
                 data path. Use -d mlx5_N or -d rxe0 (built with --features verbs), or \
                 --path direct"
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

    /// The source GID index on `port`: `-x` when given; else on a verbs device with a RoCE
    /// port the one [`crate::gid::pick`] prefers; else 0.
    pub fn gid_index(&self, c: &Common) -> Result<u8> {
        if let Some(x) = c.gid_index {
            // An empty slot would only fail later, as ENODATA from the modify to RTR.
            let gid = self.local.query_gid(c.ib_port, u32::from(x)).ok();
            let empty = !gid.is_some_and(|g| g != mlx5_hw::Gid::default());
            let roce = self.local.query_port(c.ib_port)?.link_layer == mlx5_hw::LinkLayer::Ethernet;
            if roce && empty {
                return Err(Error::Usage(format!(
                    "-x {x}: GID {x} of port {} of {} is empty (list a verbs device's GIDs with \
                     `ibv_devinfo -v -d NAME`), or leave -x out: a RoCE v2 GID of an IPv4 \
                     address is chosen",
                    c.ib_port, self.name
                )));
            }
            return Ok(x);
        }
        #[cfg(feature = "verbs")]
        if let Some(v) = &self.verbs {
            return auto_gid_index(v, c.ib_port);
        }
        Ok(0)
    }
}

/// The GID index [`crate::gid::pick`] chooses on a verbs device's RoCE port (0 on
/// InfiniBand, where the path needs no GRH).
#[cfg(feature = "verbs")]
fn auto_gid_index(v: &mlx5_hw::verbs::VerbsDevice, port: u8) -> Result<u8> {
    use crate::gid::{pick, GidEntry};
    use mlx5_hw::LinkLayer;
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
        let best = e.is_best();
        entries.push(e);
        if best {
            break;
        }
    }
    let index = pick(&entries);
    tracing::debug!(device = v.name(), port, index, "source GID index chosen");
    u8::try_from(index).map_err(|_| {
        Error::Usage(format!(
            "the GID table of {} port {port} has its usable entry at index {index}; choose one \
             below 256 with -x",
            v.name()
        ))
    })
}

/// Open the devices the common flags name (`-d`, `--loopback`, server or client) and run `f`
/// on them; when it fails, print what the software ConnectX logged as driver bugs (`tool`
/// names the program in those lines).
pub fn on_devices<T>(tool: &str, c: &Common, f: impl FnOnce(&Devices) -> Result<T>) -> Result<T> {
    let devs = open_devices(&c.device, c.loopback, c.server.is_some())?;
    let r = f(&devs);
    if r.is_err() {
        devs.print_driver_bugs(tool);
    }
    r
}

/// Open the device named on the command line: `sim` is the software ConnectX (with `loopback`
/// two devices in this process, else one that reaches the peer process over UDP; `client`
/// says which end this is); anything else is a verbs device, which needs the `verbs` feature.
pub fn open_devices(name: &str, loopback: bool, client: bool) -> Result<Devices> {
    if let (Some(tap), false) = (tap_from_env()?, loopback) {
        if name == "sim" || name.starts_with("sim") {
            return Devices::sim_tap(&tap.0, tap.1);
        }
    }
    if name == "sim" || name.starts_with("sim") && name[3..].chars().all(|c| c.is_ascii_digit()) {
        let d = if loopback {
            Devices::sim_pair(true)
        } else {
            Devices::sim_process(client)
        };
        if d.thread.as_ref().is_some_and(|t| !t.is_running()) {
            return Err(Error::Usage(
                "could not start the software ConnectX thread".into(),
            ));
        }
        return Ok(d);
    }
    open_verbs(name, loopback)
}

/// The environment variable that binds `-d sim` to a TAP interface: `NAME[,IPV4]` (the
/// address defaults to [`TAP_SIM_IP`]).
pub const TAP_ENV: &str = "MLX5_SIM_TAP";

/// The software ConnectX's address on a TAP link when [`TAP_ENV`] names none.
pub const TAP_SIM_IP: [u8; 4] = [192, 168, 77, 2];

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
    Ok(Some((name, ip)))
}

#[cfg(feature = "verbs")]
fn open_verbs(name: &str, loopback: bool) -> Result<Devices> {
    let verbs = Arc::new(mlx5_hw::verbs::VerbsDevice::open(name)?);
    let dev: Arc<dyn Device> = verbs.clone();
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
        peer: loopback.then(|| dev.clone()),
        local: dev,
        name: name.to_string(),
        fabric: None,
        thread: None,
        sims: Vec::new(),
        udp: OnceLock::new(),
    })
}

#[cfg(not(feature = "verbs"))]
fn open_verbs(name: &str, _loopback: bool) -> Result<Devices> {
    Err(Error::Usage(format!(
        "device {name:?}: this build has no verbs backend. Rebuild with `--features verbs` \
         (needs libibverbs-dev) to use a ConnectX, or use -d sim --loopback for the software \
         ConnectX"
    )))
}

/// One end on a verbs device, for the libibverbs data path (`--path verbs`): a PD, a CQ, one
/// or more RC/UC QPs (Reset) created with `create_*_verbs`, which work on any provider
/// (Soft-RoCE included), and a registered buffer. Posting and polling go through
/// `mlx5_hw::verbs::baseline` handles claimed from it ([`VerbsSide::claim`]).
#[cfg(feature = "verbs")]
pub struct VerbsSide {
    /// The QPs, in creation order, with the capabilities the device granted.
    pub qps: Vec<mlx5_hw::verbs::VerbsQp>,
    /// Their transport.
    pub qp_type: QpType,
    /// The CQ every QP completes on.
    pub cq: mlx5_hw::verbs::VerbsCq,
    /// Protection domain.
    pub pd: PdId,
    /// The registered buffer.
    pub buf: Buf,
    /// The device, as the verbs backend.
    pub verbs: Arc<mlx5_hw::verbs::VerbsDevice>,
    /// The same device, as the control path sees it.
    pub dev: Arc<dyn Device>,
}

#[cfg(feature = "verbs")]
impl VerbsSide {
    /// Create everything on `verbs` (`cfg.srq` is not supported here).
    pub fn new(verbs: Arc<mlx5_hw::verbs::VerbsDevice>, cfg: &SideCfg) -> Result<Self> {
        if cfg.srq.is_some() {
            return Err(Error::Usage(
                "a shared receive queue is not supported on --path verbs".into(),
            ));
        }
        let dev: Arc<dyn Device> = verbs.clone();
        let pd = dev.alloc_pd()?;
        let cq = verbs.create_cq_verbs(&cq_attr(cfg.cqe()))?;
        let mut qps = Vec::new();
        for _ in 0..cfg.qps.max(1) {
            qps.push(verbs.create_qp_verbs(pd, &cfg.qp_attr(cq.id, None, cfg.inline))?);
        }
        let buf = Buf::new(&*dev, pd, cfg.buf_len, all_access())?;
        Ok(VerbsSide {
            qps,
            qp_type: cfg.qp_type,
            cq,
            pd,
            buf,
            verbs,
            dev,
        })
    }

    /// [`VerbsSide::new`] asking for the inline size of `req`, and the inline size the run can
    /// use: an explicit `-I` that `ibv_create_qp` does not grant is refused with the largest size
    /// it does grant, as [`Side::with_inline`].
    pub fn with_inline(
        verbs: Arc<mlx5_hw::verbs::VerbsDevice>,
        cfg: &SideCfg,
        req: InlineRequest,
    ) -> Result<(Self, u32)> {
        let cfg = SideCfg {
            inline: req.bytes,
            ..*cfg
        };
        let name = verbs.name().to_string();
        match VerbsSide::new(verbs.clone(), &cfg) {
            Ok(side) => {
                let inline = req.settle(side.max_inline(), &name)?;
                Ok((side, inline))
            }
            Err(e) if req.explicit => Err(refuse_inline(
                e,
                &*verbs,
                &cfg,
                req.bytes,
                &name,
                |pd, a| {
                    let q = verbs.create_qp_verbs(pd, a)?;
                    Ok((q.id, q.cap.max_inline_data))
                },
                |a| Ok(verbs.create_cq_verbs(a)?.id),
            )),
            Err(e) => Err(e),
        }
    }

    /// The control path's name for QP `i`.
    pub fn qp_ref(&self, i: usize) -> QpRef {
        let q = &self.qps[i];
        QpRef {
            id: q.id,
            qpn: q.qpn,
            qp_type: self.qp_type,
            pd: self.pd,
        }
    }

    /// The inline bytes every QP was granted (the provider may round the request up).
    pub fn max_inline(&self) -> u32 {
        self.qps
            .iter()
            .map(|q| q.cap.max_inline_data)
            .min()
            .unwrap_or(0)
    }

    /// Claim QP `i` and the CQ for the libibverbs data path.
    pub fn claim(
        &self,
        i: usize,
    ) -> Result<(
        mlx5_hw::verbs::baseline::BaselineQp<'_>,
        mlx5_hw::verbs::baseline::BaselineCq<'_>,
    )> {
        use mlx5_hw::verbs::baseline::{BaselineCq, BaselineQp};
        Ok((
            BaselineQp::new(&self.verbs, self.qps[i].id)?,
            BaselineCq::new(&self.verbs, self.cq.id)?,
        ))
    }
}

/// How this process reaches its peer: the TCP control connection (the server listens, the
/// client connects), and the [`Hello`] both ends swap on it first: the run each was started
/// for, and for a software ConnectX in another process, where each device's frames go.
pub enum Rendezvous {
    /// The server: waits for its client on this listener.
    Server(TcpListener),
    /// The client: connects to the server.
    Client {
        /// The server's host name or address.
        host: String,
        /// Its TCP port.
        port: u16,
    },
}

/// The UDP path between the software ConnectX of two processes, as agreed on the control
/// socket.
#[derive(Clone, Copy, Debug)]
pub struct UdpLink {
    /// This process's device.
    pub local: SimHello,
    /// The peer's.
    pub peer: SimHello,
}

impl UdpLink {
    /// What the link holds at once with path MTU `mtu`: the frames that fit in the smaller of
    /// the two ends' UDP receive buffers.
    pub fn budget(&self, mtu: u32) -> UdpBudget {
        UdpBudget::new(self.local.recv_buffer, self.peer.recv_buffer, mtu)
    }
}

impl std::fmt::Display for UdpLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ⇄ peer {}", self.local, self.peer)
    }
}

impl Rendezvous {
    /// The server (`server` is `None`) binds TCP `port` on every address; the client will
    /// connect to `server`:`port`.
    pub fn new(server: Option<&str>, port: u16) -> Result<Rendezvous> {
        Ok(match server {
            None => Rendezvous::Server(rendezvous::listen(port)?),
            Some(h) => Rendezvous::Client {
                host: h.to_string(),
                port,
            },
        })
    }

    /// Whether this side is the client.
    pub fn is_client(&self) -> bool {
        matches!(self, Rendezvous::Client { .. })
    }

    /// Open one control connection (the server waits for its client as long as it takes; the
    /// client retries for `timeout` while the server does not listen yet). On a software
    /// ConnectX that talks to another process, bind its UDP socket on the address the control
    /// connection uses (the first time) and swap UDP addresses with the peer first.
    pub fn control(&self, devs: &Devices, timeout: Duration) -> Result<(Control, Option<UdpLink>)> {
        self.control_for(devs, timeout, None)
    }

    /// [`Rendezvous::control`] for a run of this `shape` (`lat`, `bw`): the peer must have
    /// been started for the same run, else both ends stop here, each naming both values
    /// ([`Hello::check_peer`]). With a shape the hello is swapped on every device, not only
    /// on a software ConnectX.
    pub fn control_for(
        &self,
        devs: &Devices,
        timeout: Duration,
        shape: Option<&RunShape>,
    ) -> Result<(Control, Option<UdpLink>)> {
        let (mut stream, peer) = match self {
            Rendezvous::Server(l) => rendezvous::accept(l)?,
            Rendezvous::Client { host, port } => rendezvous::connect(host, *port, timeout)?,
        };
        let sim = match (devs.sims.first(), devs.peer.is_none() && !devs.on_tap()) {
            (Some(sim), true) => Some((sim, bind_udp(devs, sim, &stream)?)),
            _ => None,
        };
        let me = Hello {
            sim: sim.map(|(_, s)| s),
            shape: shape.copied(),
        };
        let mut link = None;
        if me.sim.is_some() || me.shape.is_some() {
            let theirs = hello::exchange(&mut stream, &me, timeout)?;
            me.check_peer(&theirs, self.is_client(), &peer.to_string())?;
            if let (Some((dev, local)), Some(remote)) = (sim, theirs.sim) {
                dev.add_udp_peer(remote.ipv4.octets(), remote.udp)
                    .map_err(|e| Error::Net {
                        during: "add the peer's UDP address".into(),
                        source: e,
                    })?;
                tracing::info!(
                    %local,
                    peer = %remote,
                    "software ConnectX linked to the peer process over UDP"
                );
                link = Some(UdpLink {
                    local,
                    peer: remote,
                });
            }
        }
        Ok((Control::from_stream(stream, peer, timeout)?, link))
    }
}

/// Bind the device's UDP socket (once) on the control connection's local address; what this
/// side's hello says about it.
fn bind_udp(devs: &Devices, sim: &SimDevice, stream: &std::net::TcpStream) -> Result<SimHello> {
    let net = |during: &str, source| Error::Net {
        during: during.to_string(),
        source,
    };
    let udp = match devs.udp.get() {
        Some(a) => *a,
        None => {
            let ip = stream
                .local_addr()
                .map_err(|e| net("the control connection's local address", e))?
                .ip();
            let a = sim
                .bind_udp(SocketAddr::new(ip, 0))
                .map_err(|e| net("bind the software ConnectX to UDP", e))?;
            *devs.udp.get_or_init(|| a)
        }
    };
    Ok(SimHello {
        ipv4: sim.ipv4(),
        udp,
        recv_buffer: sim.udp_recv_buffer().map(|b| b as u64),
    })
}
