//! `SimDevice`: one software ConnectX, implementing the project's device contract
//! (`mlx5_hw::Device`) the way libibverbs + libmlx5 + the kernel driver would on a ConnectX:
//! the objects it creates hand out memory laid out as `mlx5dv_init_obj` describes it.

use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::Arc;

use mlx5_hw::{
    AccessFlags, AhAttr, AhId, AhInfo, AsyncEvent, AttrMask, BfLayout, ChannelId, ClockInfo,
    Counter, CqId, CqInfo, CqInitAttr, CqLayout, Device, DeviceAttr, Error, Gid, LinkLayer, MrId,
    MrInfo, Mtu, PdId, PortAttr, PortState, QpAttr, QpCreateFlags, QpId, QpInfo, QpInitAttr,
    QpInitEx, QpLayout, QpState, QpType, Result, SrqId, SrqInfo, SrqInitAttr, SrqLayout,
    TimestampFormat, WqLayout, XrcSrqInitAttr, XrcdId,
};

use crate::bugs::DriverBug;
use crate::cq::Cq;
use crate::doorbell::DoorbellStats;
use crate::mem::Region;
use crate::modify::{modify_qp, query_qp, MAX_RD_ATOMIC};
use crate::notify::CompChannel;
use crate::qp::Qp;
use crate::shared::Inner;
use crate::sizing::{self, cq_entries, qp_geometry, srq_geometry};
use crate::srq::Srq;
use crate::tap_port::{TapPort, TapStats};
use crate::transport::flow_label_to_udp_sport;
use crate::udp_port::{UdpPeer, UdpPort};
use crate::world::{Dev, World};

/// Objects a device holds ([`SimDevice::live_objects`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiveObjects {
    /// Protection domains.
    pub pds: usize,
    /// Memory regions.
    pub mrs: usize,
    /// Completion queues.
    pub cqs: usize,
    /// Queue pairs.
    pub qps: usize,
    /// Shared receive queues.
    pub srqs: usize,
    /// Address handles.
    pub ahs: usize,
}

/// The host memory a device's queues take ([`SimDevice::queue_memory`]): what the rings
/// of its QPs and SRQs occupy, as rdma-core sizes them (`mlx5_calc_wq_size`,
/// `mlx5_alloc_srq_buf`), and their doorbell records.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueMemory {
    /// QPs.
    pub qps: usize,
    /// Bytes of their send and receive rings and doorbell records (a DC target has none).
    pub qp_bytes: usize,
    /// SRQs.
    pub srqs: usize,
    /// Bytes of the SRQs' rings and doorbell records.
    pub srq_bytes: usize,
}

impl QueueMemory {
    /// Every byte counted.
    pub fn total(&self) -> usize {
        self.qp_bytes + self.srq_bytes
    }
}

/// One software ConnectX on a [`crate::Fabric`].
#[derive(Clone)]
pub struct SimDevice {
    inner: Arc<Inner>,
    idx: usize,
    name: String,
}

impl std::fmt::Debug for SimDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimDevice")
            .field("name", &self.name)
            .finish()
    }
}

impl SimDevice {
    pub(crate) fn new(inner: Arc<Inner>, idx: usize, name: String) -> SimDevice {
        SimDevice { inner, idx, name }
    }

    /// Run `f` on the device under the fabric's lock, then wake a sleeping fabric thread: a
    /// device call often comes with doorbells the thread should see soon
    /// ([`crate::fabric`]).
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut Dev) -> Result<R>) -> Result<R> {
        let r = {
            let mut w = self.inner.lock();
            match w.devs.get_mut(self.idx) {
                Some(d) => f(d),
                None => Err(Error::UnknownHandle {
                    kind: "device",
                    id: self.idx as u32,
                }),
            }
        };
        self.inner.waker.kick();
        r
    }

    /// [`Self::with`] on the whole fabric.
    fn with_world<R>(&self, f: impl FnOnce(&mut World) -> Result<R>) -> Result<R> {
        let r = {
            let mut w = self.inner.lock();
            f(&mut w)
        };
        self.inner.waker.kick();
        r
    }

    /// GID 0 of port 1.
    pub fn gid(&self) -> Gid {
        self.with(|d| Ok(d.port.gid)).unwrap_or_default()
    }

    /// IPv4 address of port 1.
    pub fn ipv4(&self) -> std::net::Ipv4Addr {
        self.with(|d| Ok(d.port.ip))
            .unwrap_or(std::net::Ipv4Addr::UNSPECIFIED)
    }

    /// MAC address of port 1.
    pub fn mac(&self) -> [u8; 6] {
        self.with(|d| Ok(d.port.mac.0)).unwrap_or_default()
    }

    /// Bind the device to a local UDP socket (e.g. `127.0.0.1:0`), so frames to devices in
    /// other processes travel as UDP datagrams ([`crate::udp_port`]); returns the bound address
    /// to give to the peers. Binding again replaces the socket (the peer table is kept).
    pub fn bind_udp(&self, addr: impl std::net::ToSocketAddrs) -> std::io::Result<SocketAddr> {
        let addr = addr.to_socket_addrs()?.next().ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "no socket address")
        })?;
        let mut port = UdpPort::bind(addr)?;
        let local = port.local_addr()?;
        let mut w = self.inner.lock();
        let d = w.devs.get_mut(self.idx).ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::NotFound, "device left the fabric")
        })?;
        if let Some(old) = d.udp.take() {
            old.copy_peers_to(&mut port);
        }
        d.udp = Some(port);
        d.sync_udp_groups();
        Ok(local)
    }

    /// Bind the device to the Linux TAP interface `name` (created beforehand with
    /// `ip tuntap add NAME mode tap`, or created now with CAP_NET_ADMIN): the device then sends
    /// and receives native RoCEv2 frames on that link, answers ARP for its IPv4 address, and
    /// reaches every address that is not a device of this fabric (or a UDP peer) through it
    /// ([`crate::tap_port`]). The port's active MTU follows the netdev's as on rxe (1500 gives
    /// 1024). Binding again replaces the interface.
    pub fn bind_tap(&self, name: &str) -> std::io::Result<()> {
        let port = TapPort::open(name)?;
        let mtu = crate::tap_port::roce_mtu(port.mtu());
        let mut w = self.inner.lock();
        let d = w.devs.get_mut(self.idx).ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::NotFound, "device left the fabric")
        })?;
        if mtu.bytes() < d.port.mtu.bytes() {
            d.port.mtu = mtu;
        }
        d.tap = Some(port);
        drop(w);
        self.inner.waker.kick();
        Ok(())
    }

    /// What the device's TAP interface received, answered and dropped; `None` before
    /// [`bind_tap`](Self::bind_tap).
    pub fn tap_stats(&self) -> Option<TapStats> {
        let w = self.inner.lock();
        Some(w.devs.get(self.idx)?.tap.as_ref()?.stats())
    }

    /// The receive buffer of the device's UDP socket as the kernel granted it
    /// ([`UdpPort::recv_buffer`]); `None` before [`bind_udp`](Self::bind_udp).
    pub fn udp_recv_buffer(&self) -> Option<usize> {
        let w = self.inner.lock();
        w.devs.get(self.idx)?.udp.as_ref()?.recv_buffer().ok()
    }

    /// Add (or replace) a device in another process: the device with IPv4 address `ipv4`
    /// (GID `::ffff:ipv4`, MAC `02:00:` + the address, as [`crate::DeviceConfig`] derives it)
    /// is reached through the UDP socket at `addr`. Requires [`bind_udp`](Self::bind_udp).
    pub fn add_udp_peer(&self, ipv4: [u8; 4], addr: SocketAddr) -> std::io::Result<()> {
        let mac = [0x02, 0x00, ipv4[0], ipv4[1], ipv4[2], ipv4[3]];
        let mut w = self.inner.lock();
        let port = w
            .devs
            .get_mut(self.idx)
            .and_then(|d| d.udp.as_mut())
            .ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::NotConnected,
                    "add_udp_peer: bind the device to a UDP socket first (bind_udp)",
                )
            })?;
        port.add_peer(
            ipv4.into(),
            UdpPeer {
                addr,
                mac: crate::wire::MacAddr(mac),
            },
        );
        Ok(())
    }

    /// Driver bugs this device reported.
    pub fn driver_bugs(&self) -> Vec<DriverBug> {
        self.with(|d| Ok(d.bugs.all().to_vec())).unwrap_or_default()
    }

    /// Remove and return the driver bugs this device reported.
    pub fn take_driver_bugs(&self) -> Vec<DriverBug> {
        self.with(|d| Ok(d.bugs.take())).unwrap_or_default()
    }

    /// The QPs ringing each shared BlueFlame register of the device, one list per register
    /// made so far ([`crate::doorbell::shared`]); QPs on dedicated registers are in none.
    pub fn shared_bfregs(&self) -> Vec<Vec<u32>> {
        self.with(|d| Ok(d.bfregs.sharing())).unwrap_or_default()
    }

    /// What the doorbell scanners saw on this device's QPs: doorbells, and in threaded mode how
    /// many BlueFlame copies were verified against the ring ([`crate::doorbell::threaded`]).
    pub fn doorbell_stats(&self) -> DoorbellStats {
        self.with(|d| {
            let mut s = DoorbellStats::default();
            for qp in d.qps.values() {
                s.add(&qp.db);
            }
            Ok(s)
        })
        .unwrap_or_default()
    }

    /// How many objects of each kind the device holds now (a leak or a wrong destruction
    /// order shows here).
    pub fn live_objects(&self) -> LiveObjects {
        self.with(|d| {
            Ok(LiveObjects {
                pds: d.pds.len(),
                mrs: d.mrs.len(),
                cqs: d.cqs.len(),
                qps: d.qps.len(),
                srqs: d.srqs.len(),
                ahs: d.ahs.len(),
            })
        })
        .unwrap_or_default()
    }

    /// What DC QP `qp` counted: connections opened and closed, open now, a target's key
    /// violations, an initiator's waits for its previous target ([`crate::dc::DcStats`]).
    pub fn dc_stats(&self, qp: QpId) -> Result<crate::dc::DcStats> {
        self.with(|d| crate::dc::stats(d, qp.0))
    }

    /// Give QP `qp`, created with a DC type outside [`Device::create_qp_ex`] (an rdma-core
    /// emulation creates a DCI on the program's own rings), its DC attributes, as
    /// `mlx5dv_create_qp` with `MLX5DV_QP_INIT_ATTR_MASK_DC` would have: refused unless the
    /// QP is of the matching type, in Reset and shaped as mlx5 requires
    /// ([`crate::dc::make_dc`]).
    pub fn make_dc(&self, qp: QpId, dc: mlx5_hw::DcInit) -> Result<()> {
        self.with(|d| crate::dc::make_dc(d, qp.0, dc))
    }

    /// The host memory its QPs and SRQs take now ([`QueueMemory`]).
    pub fn queue_memory(&self) -> QueueMemory {
        self.with(|d| {
            let qp_bytes = d
                .qps
                .values()
                .map(|q| {
                    let b = q.geom.buf_size as usize;
                    if b == 0 {
                        0
                    } else {
                        b + q.dbrec.len()
                    }
                })
                .sum();
            let srq_bytes = d.srqs.values().map(|s| s.buf.len() + s.dbrec.len()).sum();
            Ok(QueueMemory {
                qps: d.qps.len(),
                qp_bytes,
                srqs: d.srqs.len(),
                srq_bytes,
            })
        })
        .unwrap_or_default()
    }

    /// The value of one counter by its name ([`crate::counters::CounterId`] lists them; 0 for a
    /// name the device does not have).
    pub fn counter(&self, name: &str) -> u64 {
        self.with(|d| Ok(d.counters.by_name(name))).unwrap_or(0)
    }

    /// Take port 1 up or down, raising `IBV_EVENT_PORT_ACTIVE` or `IBV_EVENT_PORT_ERR` when
    /// its state changes (as the kernel does for a link that comes up or goes down: mlx5
    /// `mlx5_ib_handle_event` on a port change event, rxe `rxe_port_up` / `rxe_port_down`).
    /// A device in its fatal state keeps its port down.
    pub fn set_port_state(&self, state: PortState) {
        let _ = self.with(|d| {
            if d.fatal {
                return Ok(());
            }
            let was = d.port.state;
            d.port.state = state;
            if was != state {
                d.events.push_back(if state == PortState::Active {
                    AsyncEvent::PortActive(1)
                } else {
                    AsyncEvent::PortError(1)
                });
            }
            Ok(())
        });
    }

    /// Refuse `call` on a device in its fatal state ([`Error::DeviceFatal`]): mlx5 answers
    /// every firmware command that creates, modifies or queries an object with EIO after an
    /// internal error, and every destroy with success (`mlx5_internal_err_ret_value`,
    /// drivers/net/ethernet/mellanox/mlx5/core/cmd.c).
    fn alive(&self, call: &'static str) -> Result<()> {
        self.with(|d| {
            if d.fatal {
                Err(Error::DeviceFatal {
                    device: d.name.clone(),
                    call,
                })
            } else {
                Ok(())
            }
        })
    }

    /// Whether the device is in its fatal state ([`crate::faults::Faults::device_fatal`]).
    pub fn is_fatal(&self) -> bool {
        self.with(|d| Ok(d.fatal)).unwrap_or(true)
    }

    /// [`crate::faults::Faults::device_fatal`]: the device stops. Every QP moves to Error and
    /// `IBV_EVENT_DEVICE_FATAL` is raised; from then on the device writes no CQE (not even a
    /// flush CQE for the work its QPs hold), fires no completion event, reads no doorbell,
    /// sends and receives nothing, fires no timer, and refuses every call that creates,
    /// modifies (but to Reset or Error) or queries an object ([`Error::DeviceFatal`]);
    /// destroying objects still works. Nothing brings it back: the program closes the device
    /// and opens a new one. A second call does nothing.
    ///
    /// No CQE, as a ConnectX in internal error: the kernel makes software completions for its
    /// own QPs only (`drivers/infiniband/hw/mlx5/cq.c` `mlx5_ib_poll_cq`, which calls
    /// `mlx5_ib_poll_sw_comp` instead of reading the ring once `mdev->state ==
    /// MLX5_DEVICE_STATE_INTERNAL_ERROR`), and wakes only the CQs of QPs whose kernel-tracked
    /// queues hold work (`drivers/infiniband/hw/mlx5/main.c` `mlx5_ib_handle_internal_error`:
    /// `sq.tail != sq.head`, which a user QP's never differ in); rdma-core v44's libmlx5 reads
    /// the ring only (`providers/mlx5/cq.c` `mlx5_poll_cq`). The owner of the objects retires
    /// what they hold (`mlx5-ctx`'s `Cq::flush_dead`).
    pub(crate) fn inject_fatal_error(&self) {
        let mut w = self.inner.lock();
        let Some(d) = w.devs.get_mut(self.idx) else {
            return;
        };
        if d.fatal {
            return;
        }
        tracing::error!(device = %d.name, "fault: the device enters its fatal state (IBV_EVENT_DEVICE_FATAL)");
        d.fatal = true;
        // Nothing enters or leaves the port any more (the port's events are not raised: the
        // device reports one event, its own).
        d.port.state = PortState::Down;
        // Every CQ first: nothing below (nor a later modify to Error) writes a CQE.
        for cq in d.cqs.values_mut() {
            cq.device_dead = true;
            cq.arm = None;
        }
        for qp in d.qps.values_mut() {
            if qp.state() == QpState::Error {
                continue;
            }
            qp.attr.qp_state = QpState::Error;
            qp.attr.cur_qp_state = QpState::Error;
            // The QP raises no event of its own (LAST_WQE_REACHED included): the device
            // reports one, DEVICE_FATAL.
            qp.last_wqe_sent = true;
        }
        d.events.push_back(AsyncEvent::DeviceFatal);
        drop(w);
        self.inner.waker.kick();
    }

    /// [`crate::faults::Faults::srq_error`]: SRQ `srq` hands out no more receive WQEs and
    /// `IBV_EVENT_SRQ_ERR` is raised.
    pub(crate) fn inject_srq_error(&self, srq: SrqId) -> Result<()> {
        self.with(|d| {
            let s = d.srqs.get_mut(&srq.0).ok_or(Error::UnknownHandle {
                kind: "SRQ",
                id: srq.0,
            })?;
            if !s.error {
                tracing::warn!(device = %d.name, srqn = srq.0, "fault: SRQ catastrophic error (IBV_EVENT_SRQ_ERR)");
                s.error = true;
                d.events.push_back(AsyncEvent::SrqError(srq));
            }
            Ok(())
        })
    }

    fn pd_exists(d: &Dev, pd: PdId) -> Result<()> {
        if d.pds.contains(&pd.0) {
            Ok(())
        } else {
            Err(Error::UnknownHandle {
                kind: "PD",
                id: pd.0,
            })
        }
    }

    /// `create_cq`, with completion timestamps if `timestamps`.
    fn create_cq_inner(&self, attr: &CqInitAttr, timestamps: bool) -> Result<CqInfo> {
        self.alive("create_cq")?;
        if attr.cqe_size != 64 && attr.cqe_size != 128 {
            return Err(Error::InvalidArgument(format!(
                "cqe_size {} (must be 64 or 128)",
                attr.cqe_size
            )));
        }
        if attr.cqe == 0 || attr.cqe > (1 << 22) - 1 {
            return Err(Error::InvalidArgument(format!(
                "cqe {} (must be 1..=4194303)",
                attr.cqe
            )));
        }
        self.with(|d| {
            let channel = match attr.channel {
                Some(c) => Some((c.0, channel_of(d, c)?.clone())),
                None => None,
            };
            let cqn = d.alloc_id();
            let mut cq = Cq::new(
                cqn,
                cq_entries(attr.cqe),
                attr.cqe_size,
                attr.ignore_overrun,
                channel,
            )
            .ok_or_else(|| no_mem("CQ"))?;
            cq.timestamps = timestamps;
            let layout = CqLayout {
                buf: cq.buf.as_ptr(),
                dbrec: cq.dbrec.as_ptr().cast(),
                cqe_cnt: cq.cqe_cnt,
                cqe_size: cq.cqe_size,
                cq_uar: cq.uar.as_ptr(),
                cqn,
                ignore_overrun: attr.ignore_overrun,
            };
            d.cqs.insert(cqn, cq);
            Ok(CqInfo {
                id: CqId(cqn),
                layout,
            })
        })
    }

    /// The checks of `ib_attach_mcast` / `ib_detach_mcast` (Linux `drivers/infiniband/core/
    /// verbs.c`): a multicast GID and a UD QP, else EINVAL; and the software ConnectX's own
    /// limit, IPv4-mapped groups only.
    fn check_mcast(&self, qp: QpId, gid: &Gid, call: &str) -> Result<()> {
        if !gid.is_multicast() {
            return Err(Error::InvalidArgument(format!(
                "{call}: {gid:?} is not a multicast GID (ff00::/8 or IPv4-mapped 224.0.0.0/4)"
            )));
        }
        if gid.ipv4().is_none() {
            return Err(Error::Unsupported(format!(
                "{call}: the software ConnectX runs RoCE v2 over IPv4 only; use an IPv4-mapped \
                 group (::ffff:224.0.0.0/100), not {gid:?}"
            )));
        }
        self.with(|d| {
            let q = d.qps.get(&qp.0).ok_or(Error::UnknownHandle {
                kind: "QP",
                id: qp.0,
            })?;
            if q.qp_type != QpType::Ud {
                return Err(Error::InvalidArgument(format!(
                    "{call}: QP {:#x} is {:?}; only UD QPs join multicast groups",
                    qp.0, q.qp_type
                )));
            }
            Ok(())
        })
    }

    /// Create a QP whose attributes were checked: its memory, and a BlueFlame register when
    /// `bfreg` (every QP with a send queue).
    fn create_qp_unchecked(&self, pd: PdId, attr: &QpInitAttr, bfreg: bool) -> Result<QpInfo> {
        // An XRC or DC initiator has no receive side (rdma-core creates no RQ for
        // IBV_QPT_XRC_SEND; `crate::dc::check_create` refuses one on a DCI).
        let no_rq = attr.srq.is_some() || matches!(attr.qp_type, QpType::XrcSend | QpType::Dci);
        let g = qp_geometry(attr.qp_type, &attr.cap, no_rq).map_err(sizing_err)?;
        self.with(|d| {
            Self::pd_exists(d, pd)?;
            for cq in [attr.send_cq, attr.recv_cq] {
                if !d.cqs.contains_key(&cq.0) {
                    return Err(Error::UnknownHandle {
                        kind: "CQ",
                        id: cq.0,
                    });
                }
            }
            if let Some(s) = attr.srq {
                if !d.srqs.contains_key(&s.0) {
                    return Err(Error::UnknownHandle {
                        kind: "SRQ",
                        id: s.0,
                    });
                }
            }
            let qpn = d.alloc_id();
            let mut qp = Qp::new(
                qpn,
                attr.qp_type,
                pd.0,
                attr.send_cq.0,
                attr.recv_cq.0,
                attr.srq.map(|s| s.0),
                attr.sq_sig_all,
                g,
            )
            .ok_or_else(|| no_mem("QP"))?;
            // A dedicated register while the context has one free, else a shared one
            // (kernel `alloc_bfreg`, `crate::doorbell::shared`).
            if bfreg {
                let reg = d.bfregs.assign(qpn).ok_or_else(|| no_mem("UAR page"))?;
                match reg.page {
                    Some((page, off, size)) => qp.use_register(reg.class, page, off, size),
                    None => qp.bf_class = reg.class,
                }
            }
            let layout = QpLayout {
                qpn,
                qp_type: attr.qp_type,
                dbrec: qp.dbrec.as_ptr().cast(),
                sq: WqLayout {
                    buf: qp.buf.as_ptr().wrapping_add(g.sq_offset as usize),
                    wqe_cnt: g.sq_wqe_cnt,
                    stride: 64,
                },
                rq: WqLayout {
                    buf: qp.buf.as_ptr(),
                    wqe_cnt: g.rq_wqe_cnt,
                    stride: g.rq_stride,
                },
                bf: BfLayout {
                    reg: qp.bf_reg(),
                    size: qp.bf_size,
                    shared: qp.bf_shared(),
                },
                max_inline_data: g.cap.max_inline_data,
                max_send_sge: g.cap.max_send_sge,
                max_recv_sge: g.cap.max_recv_sge,
                sq_sig_all: attr.sq_sig_all,
                uses_srq: attr.srq.is_some(),
            };
            for cq in [attr.send_cq, attr.recv_cq] {
                if let Some(c) = d.cqs.get_mut(&cq.0) {
                    c.users += 1;
                }
            }
            if let Some(s) = attr.srq.and_then(|s| d.srqs.get_mut(&s.0)) {
                s.users += 1;
            }
            d.qps.insert(qpn, qp);
            Ok(QpInfo {
                id: QpId(qpn),
                qpn,
                qp_type: attr.qp_type,
                cap: g.cap,
                layout,
            })
        })
    }

    fn link_layer(&self) -> LinkLayer {
        let ll = self
            .inner
            .link_layer
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        ll.get(self.idx).copied().unwrap_or(LinkLayer::Ethernet)
    }
}

fn channel_of(d: &Dev, ch: ChannelId) -> Result<&Arc<CompChannel>> {
    d.channels.get(&ch.0).ok_or(Error::UnknownHandle {
        kind: "completion channel",
        id: ch.0,
    })
}

fn sizing_err(e: sizing::SizingError) -> Error {
    Error::InvalidArgument(e.to_string())
}

fn no_mem(what: &str) -> Error {
    Error::Resources(format!("could not allocate {what}"))
}

impl Device for SimDevice {
    fn name(&self) -> &str {
        &self.name
    }

    fn query_device(&self) -> Result<DeviceAttr> {
        self.with(|d| {
            Ok(DeviceAttr {
                fw_ver: "16.35.0000 (software ConnectX)".into(),
                vendor_id: 0x02c9,
                vendor_part_id: 4119,
                node_guid: d.guid,
                phys_port_cnt: 1,
                max_qp: 1 << 17,
                max_qp_wr: sizing::MAX_QP_WR,
                max_sge: 30,
                max_cq: 1 << 16,
                max_cqe: (1 << 22) - 1,
                max_mr: 1 << 20,
                max_qp_rd_atom: MAX_RD_ATOMIC,
                max_qp_init_rd_atom: MAX_RD_ATOMIC,
                max_srq: 1 << 16,
                max_srq_wr: sizing::MAX_QP_WR - 1,
                direct_path: true,
                blueflame: true,
            })
        })
    }

    fn query_port(&self, port: u8) -> Result<PortAttr> {
        self.alive("query_port")?;
        if port != 1 {
            return Err(Error::InvalidArgument(format!(
                "port {port}: the device has port 1 only"
            )));
        }
        let ll = self.link_layer();
        self.with(|d| {
            Ok(PortAttr {
                state: d.port.state,
                max_mtu: Mtu::Mtu4096,
                active_mtu: d.port.mtu,
                lid: if ll == LinkLayer::InfiniBand {
                    d.port.lid
                } else {
                    0
                },
                link_layer: ll,
                gid_tbl_len: 1,
            })
        })
    }

    fn query_gid(&self, port: u8, index: u32) -> Result<Gid> {
        if port != 1 || index != 0 {
            return Err(Error::InvalidArgument(format!(
                "GID {index} of port {port}: the device has one GID on port 1"
            )));
        }
        Ok(self.gid())
    }

    fn alloc_pd(&self) -> Result<PdId> {
        self.alive("alloc_pd")?;
        self.with(|d| {
            let id = d.alloc_id();
            d.pds.insert(id);
            Ok(PdId(id))
        })
    }

    fn dealloc_pd(&self, pd: PdId) -> Result<()> {
        self.with(|d| {
            Self::pd_exists(d, pd)?;
            let used = d.mrs.uses_pd(pd.0)
                || d.qps.values().any(|q| q.pd == pd.0)
                || d.srqs.values().any(|s| s.pd == pd.0)
                || d.ahs.values().any(|a| a.0 == pd.0);
            if used {
                return Err(Error::Busy(format!(
                    "PD {} still has MRs, QPs, SRQs or AHs",
                    pd.0
                )));
            }
            d.pds.remove(&pd.0);
            Ok(())
        })
    }

    unsafe fn reg_mr(
        &self,
        pd: PdId,
        addr: *mut u8,
        len: usize,
        access: AccessFlags,
    ) -> Result<MrInfo> {
        self.alive("reg_mr")?;
        // ibv_reg_mr(3): remote write or atomic access requires local write.
        if access.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC)
            && !access.contains(AccessFlags::LOCAL_WRITE)
        {
            return Err(Error::InvalidArgument(
                "IBV_ACCESS_REMOTE_WRITE / REMOTE_ATOMIC require IBV_ACCESS_LOCAL_WRITE".into(),
            ));
        }
        if addr.is_null() && len > 0 {
            return Err(Error::InvalidArgument("reg_mr of a null address".into()));
        }
        let base = addr as u64;
        base.checked_add(len as u64)
            .ok_or_else(|| Error::InvalidArgument("address range wraps".into()))?;
        // SAFETY: the caller of this unsafe trait method promises the range stays valid until
        // dereg_mr and every operation on it completed (the `Device::reg_mr` contract).
        let region = unsafe { Region::new(base, len as u64) };
        self.with(|d| {
            Self::pd_exists(d, pd)?;
            let (idx, lkey, rkey) = d.mrs.insert(pd.0, region, access);
            Ok(MrInfo {
                id: MrId(idx),
                addr: base,
                length: len as u64,
                lkey,
                rkey,
                access,
            })
        })
    }

    fn dereg_mr(&self, mr: MrId) -> Result<()> {
        self.with(|d| {
            d.mrs.remove(mr.0).map(|_| ()).ok_or(Error::UnknownHandle {
                kind: "MR",
                id: mr.0,
            })
        })
    }

    fn create_cq(&self, attr: &CqInitAttr) -> Result<CqInfo> {
        self.create_cq_inner(attr, false)
    }

    fn create_cq_with_timestamps(&self, attr: &CqInitAttr) -> Result<CqInfo> {
        self.create_cq_inner(attr, true)
    }

    fn create_qp_ex(&self, pd: PdId, attr: &QpInitAttr, ex: &QpInitEx) -> Result<QpInfo> {
        self.alive("create_qp_ex")?;
        crate::dc::check_create(attr, ex.dc)?;
        if let Some(dc) = ex.dc {
            if ex.xrcd.is_some() || !ex.create_flags.is_empty() {
                return Err(Error::InvalidArgument(format!(
                    "create_qp_ex: a {} QP takes no XRC domain and no create flags",
                    attr.qp_type
                )));
            }
            // No register for a DCT: it has no send queue (kernel `create_dct` allocates no
            // UAR).
            let mut info = self.create_qp_unchecked(pd, attr, attr.qp_type == QpType::Dci)?;
            // The same entry an rdma-core emulation takes for a QP made on its own rings.
            if let Err(e) = self.make_dc(info.id, dc) {
                let _ = self.destroy_qp(info.id);
                return Err(e);
            }
            if attr.qp_type == QpType::Dct {
                // `ibv_qp.qp_num` of a DCT is 0 until RTR (rdma-core `modify_dct`).
                info.qpn = 0;
            }
            return Ok(info);
        }
        if let Some(x) = ex.xrcd {
            if attr.qp_type != QpType::XrcRecv || !ex.create_flags.is_empty() {
                return Err(Error::InvalidArgument(format!(
                    "create_qp_ex: an XRC domain is for XRC_RECV QPs without create flags, not \
                     {} with {:?}",
                    attr.qp_type, ex.create_flags
                )));
            }
            return self.with(|d| crate::xrc::create_target(d, x.0));
        }
        let unknown = ex.create_flags - QpCreateFlags::BLOCK_SELF_MCAST_LB;
        if !unknown.is_empty() {
            // mlx5 refuses create flags it does not know (kernel mlx5 `create_qp`: EINVAL).
            return Err(Error::InvalidArgument(format!(
                "create_qp_ex: unsupported create flags {unknown:?}"
            )));
        }
        if ex.create_flags.contains(QpCreateFlags::BLOCK_SELF_MCAST_LB)
            && attr.qp_type != QpType::Ud
        {
            return Err(Error::InvalidArgument(
                "create_qp_ex: IBV_QP_CREATE_BLOCK_SELF_MCAST_LB is for UD QPs".into(),
            ));
        }
        let info = self.create_qp(pd, attr)?;
        if ex.create_flags.contains(QpCreateFlags::BLOCK_SELF_MCAST_LB) {
            self.with(|d| {
                d.mcast.block_self_loopback(info.qpn);
                Ok(())
            })?;
        }
        Ok(info)
    }

    fn attach_mcast(&self, qp: QpId, gid: &Gid, lid: u16) -> Result<()> {
        self.alive("attach_mcast")?;
        let _ = lid; // RoCE ignores the multicast LID (Linux `is_valid_mcast_lid`).
        self.check_mcast(qp, gid, "attach_mcast")?;
        self.with(|d| {
            d.mcast.attach(gid, qp.0);
            d.sync_udp_groups();
            Ok(())
        })
    }

    fn detach_mcast(&self, qp: QpId, gid: &Gid, lid: u16) -> Result<()> {
        let _ = lid;
        self.check_mcast(qp, gid, "detach_mcast")?;
        self.with(|d| {
            if d.mcast.detach(gid, qp.0) {
                d.sync_udp_groups();
                Ok(())
            } else {
                // uverbs `ib_uverbs_detach_mcast`: not on the QP's list, EINVAL.
                Err(Error::InvalidArgument(format!(
                    "detach_mcast: QP {:#x} is not attached to {gid:?}",
                    qp.0
                )))
            }
        })
    }

    fn open_xrcd(&self) -> Result<XrcdId> {
        self.alive("open_xrcd")?;
        self.with(|d| {
            let id = d.alloc_id();
            d.xrc.xrcds.insert(id, Default::default());
            Ok(XrcdId(id))
        })
    }

    fn close_xrcd(&self, xrcd: XrcdId) -> Result<()> {
        self.with(|d| crate::xrc::close_xrcd(d, xrcd.0))
    }

    fn create_srq_xrc(&self, pd: PdId, attr: &XrcSrqInitAttr) -> Result<SrqInfo> {
        self.alive("create_srq_xrc")?;
        self.with(|d| {
            crate::xrc::check_srq(d, attr)?;
            Ok(())
        })?;
        let info = self.create_srq(pd, &attr.attr)?;
        self.with(|d| {
            crate::xrc::adopt_srq(d, info.id.0, attr);
            Ok(info)
        })
    }

    fn open_qp(&self, xrcd: XrcdId, qpn: u32) -> Result<QpId> {
        self.with(|d| crate::xrc::open_qp(d, xrcd.0, qpn))
    }

    fn query_clock(&self) -> Result<ClockInfo> {
        Ok(ClockInfo {
            hca_core_clock_khz: crate::cq::CORE_CLOCK_KHZ,
            mask: u64::MAX,
            format: TimestampFormat::FreeRunning,
        })
    }

    fn destroy_cq(&self, cq: CqId) -> Result<()> {
        self.with(|d| {
            let c = d.cqs.get(&cq.0).ok_or(Error::UnknownHandle {
                kind: "CQ",
                id: cq.0,
            })?;
            if c.users > 0 {
                return Err(Error::Busy(format!(
                    "CQ {:#x} is used by {} QP(s)",
                    cq.0, c.users
                )));
            }
            if c.events_unacked > 0 {
                // libibverbs `ibv_destroy_cq` waits until every event taken is acknowledged
                // (`ibv_cmd_destroy_cq`): with the caller's thread, forever.
                return Err(Error::Busy(format!(
                    "CQ {:#x} has {n} completion event(s) taken with get_cq_event and not \
                     acknowledged; call ack_cq_events(cq, {n}) first",
                    cq.0,
                    n = c.events_unacked
                )));
            }
            if let Some((_, ch)) = d.cqs.remove(&cq.0).and_then(|c| c.channel) {
                ch.forget(cq.0);
            }
            Ok(())
        })
    }

    fn create_srq(&self, pd: PdId, attr: &SrqInitAttr) -> Result<SrqInfo> {
        self.alive("create_srq")?;
        let g = srq_geometry(attr.max_wr, attr.max_sge).map_err(sizing_err)?;
        self.with(|d| {
            Self::pd_exists(d, pd)?;
            let srqn = d.alloc_id();
            let srq = Srq::new(srqn, pd.0, g, attr.srq_limit).ok_or_else(|| no_mem("SRQ"))?;
            let layout = SrqLayout {
                buf: srq.buf.as_ptr(),
                dbrec: srq.dbrec.as_ptr().cast(),
                stride: g.stride,
                wqe_cnt: g.wqe_cnt,
                head: 0,
                tail: g.wqe_cnt - 1,
                srqn,
                cqe_index: srqn,
                max_sge: g.max_sge,
            };
            d.srqs.insert(srqn, srq);
            Ok(SrqInfo {
                id: SrqId(srqn),
                layout,
            })
        })
    }

    fn arm_srq_limit(&self, srq: SrqId, limit: u32) -> Result<()> {
        self.alive("arm_srq_limit")?;
        self.with(|d| {
            let s = d.srqs.get_mut(&srq.0).ok_or(Error::UnknownHandle {
                kind: "SRQ",
                id: srq.0,
            })?;
            if limit >= s.geom.wqe_cnt {
                return Err(Error::InvalidArgument(format!(
                    "srq_limit {limit} is not below the SRQ's {} WQEs",
                    s.geom.wqe_cnt - 1
                )));
            }
            s.limit = limit;
            Ok(())
        })
    }

    fn destroy_srq(&self, srq: SrqId) -> Result<()> {
        self.with(|d| {
            let s = d.srqs.get(&srq.0).ok_or(Error::UnknownHandle {
                kind: "SRQ",
                id: srq.0,
            })?;
            if s.users > 0 {
                return Err(Error::Busy(format!(
                    "SRQ {:#x} is used by {} QP(s)",
                    srq.0, s.users
                )));
            }
            if let Some(s) = d.srqs.remove(&srq.0) {
                crate::xrc::release_srq(d, &s);
            }
            Ok(())
        })
    }

    fn create_qp(&self, pd: PdId, attr: &QpInitAttr) -> Result<QpInfo> {
        self.alive("create_qp")?;
        crate::transport::xrc::check_plain_create(attr)?;
        crate::dc::check_create(attr, None)?;
        self.create_qp_unchecked(pd, attr, true)
    }

    fn dct_number(&self, qp: QpId) -> Result<u32> {
        self.alive("dct_number")?;
        self.with(|d| crate::dc::dct_number(d, qp.0))
    }

    fn modify_qp(&self, qp: QpId, attr: &QpAttr, mask: AttrMask) -> Result<()> {
        // After an internal error mlx5 completes 2RST_QP and 2ERR_QP and fails the others.
        let to_reset_or_error = mask.contains(AttrMask::STATE)
            && matches!(attr.qp_state, QpState::Reset | QpState::Error);
        if !to_reset_or_error {
            self.alive("modify_qp")?;
        }
        let link_layer = self.link_layer();
        self.with_world(|w| modify_qp(w, self.idx, qp.0, attr, mask, link_layer))
    }

    fn query_qp(&self, qp: QpId) -> Result<QpAttr> {
        self.alive("query_qp")?;
        self.with(|d| crate::dc::check_query(d, qp.0))?;
        self.with_world(|w| query_qp(w, self.idx, qp.0))
    }

    fn destroy_qp(&self, qp: QpId) -> Result<()> {
        self.with(|d| {
            if crate::xrc::drop_handle(d, qp.0) {
                return Ok(());
            }
            let q = d.qps.remove(&qp.0).ok_or(Error::UnknownHandle {
                kind: "QP",
                id: qp.0,
            })?;
            d.mcast.forget_qp(qp.0);
            d.sync_udp_groups();
            d.bfregs.release(q.bf_class, q.qpn);
            for cq in [q.send_cq, q.recv_cq] {
                if let Some(c) = d.cqs.get_mut(&cq) {
                    c.users = c.users.saturating_sub(1);
                }
            }
            if let Some(s) = q.srq.and_then(|s| d.srqs.get_mut(&s)) {
                s.users = s.users.saturating_sub(1);
            }
            Ok(())
        })
    }

    fn create_ah(&self, pd: PdId, attr: &AhAttr) -> Result<AhInfo> {
        self.with_world(|w| {
            let d = w.devs.get(self.idx).ok_or(Error::UnknownHandle {
                kind: "device",
                id: self.idx as u32,
            })?;
            Self::pd_exists(d, pd)?;
            let av = build_av(w, self.idx, attr)?;
            let d = &mut w.devs[self.idx];
            let id = d.alloc_id();
            d.ahs.insert(id, (pd.0, av));
            Ok(AhInfo { id: AhId(id), av })
        })
    }

    fn destroy_ah(&self, ah: AhId) -> Result<()> {
        self.with(|d| {
            d.ahs.remove(&ah.0).map(|_| ()).ok_or(Error::UnknownHandle {
                kind: "AH",
                id: ah.0,
            })
        })
    }

    fn poll_async_event(&self) -> Option<AsyncEvent> {
        self.with(|d| Ok(d.events.pop_front())).ok().flatten()
    }

    fn async_event_fd(&self) -> Result<RawFd> {
        self.with(|d| {
            d.events
                .raw_fd()
                .ok_or_else(|| no_mem("the async event eventfd (out of file descriptors)"))
        })
    }

    fn create_comp_channel(&self) -> Result<ChannelId> {
        self.with(|d| {
            let ch = CompChannel::new().ok_or_else(|| no_mem("a completion channel eventfd"))?;
            let id = d.alloc_id();
            d.channels.insert(id, ch);
            Ok(ChannelId(id))
        })
    }

    fn destroy_comp_channel(&self, channel: ChannelId) -> Result<()> {
        self.with(|d| {
            channel_of(d, channel)?;
            let users: Vec<String> = d
                .cqs
                .values()
                .filter(|c| c.channel_id() == Some(channel.0))
                .map(|c| format!("{:#x}", c.cqn))
                .collect();
            if !users.is_empty() {
                // libibverbs answers EBUSY while CQs use the channel
                // (`ibv_destroy_comp_channel`).
                return Err(Error::Busy(format!(
                    "completion channel {:#x} still has CQ(s) {} attached; destroy them first",
                    channel.0,
                    users.join(", ")
                )));
            }
            d.channels.remove(&channel.0);
            Ok(())
        })
    }

    fn comp_channel_fd(&self, channel: ChannelId) -> Result<RawFd> {
        self.with(|d| Ok(channel_of(d, channel)?.raw_fd()))
    }

    fn get_cq_event(&self, channel: ChannelId) -> Result<Option<CqId>> {
        self.with(|d| {
            let ch = channel_of(d, channel)?.clone();
            // Let the device see the arm doorbells already written for this channel's CQs
            // before an event is taken (a ConnectX has long seen them), so each arm's
            // sequence number is judged against the events taken when it was written.
            let Dev {
                name,
                cqs,
                bugs,
                cq_arm_pages,
                ..
            } = d;
            crate::cq_uar::forward(cq_arm_pages.values(), cqs, name, bugs);
            for cq in cqs.values_mut() {
                if cq.channel_id() == Some(channel.0) {
                    cq.scan_arm(name, bugs);
                }
            }
            while let Some(cqn) = ch.take() {
                // Destroying a CQ discards its queued events, so the CQ exists.
                if let Some(cq) = d.cqs.get_mut(&cqn) {
                    cq.events_taken = cq.events_taken.wrapping_add(1);
                    cq.events_unacked += 1;
                    return Ok(Some(CqId(cqn)));
                }
            }
            Ok(None)
        })
    }

    fn ack_cq_events(&self, cq: CqId, n: u32) -> Result<()> {
        self.with(|d| {
            let c = d.cqs.get_mut(&cq.0).ok_or(Error::UnknownHandle {
                kind: "CQ",
                id: cq.0,
            })?;
            if n > c.events_unacked {
                return Err(Error::InvalidArgument(format!(
                    "ack_cq_events(CQ {:#x}, {n}): only {} event(s) were taken from it and \
                     not yet acknowledged",
                    cq.0, c.events_unacked
                )));
            }
            c.events_unacked -= n;
            Ok(())
        })
    }

    fn counters(&self, port: u8) -> Result<Vec<Counter>> {
        self.alive("counters")?;
        if port != 1 {
            return Err(Error::InvalidArgument(format!(
                "port {port}: the device has port 1 only"
            )));
        }
        self.with(|d| {
            let v: Vec<Counter> = d
                .counters
                .iter()
                .map(|(c, value)| Counter {
                    name: c.name().to_string(),
                    value,
                })
                .collect();
            Ok(v)
        })
    }

    fn progress(&self) {
        self.inner.lock().run_until_idle();
    }
}

/// The 48-byte address vector of an AH, as rdma-core's `mlx5_create_ah` fills `struct
/// mlx5_wqe_av` (`docs/sources.md` §3): extended bit in `dqp_dct`, static rate and SL, the UDP
/// source port in `rlid` on RoCE (from the flow label, `mlx5_ah_set_udp_sport`; rdma-core
/// picks a random port when the label is 0, the software ConnectX a fixed one from the GID so
/// runs repeat), destination MAC, traffic class, hop limit, SGID index + flow label, GID.
fn build_av(w: &World, idx: usize, attr: &AhAttr) -> Result<[u8; 48]> {
    let mut av = [0u8; 48];
    av[8..12].copy_from_slice(&mlx5_wqe::EXTENDED_UD_AV.to_be_bytes());
    match &attr.grh {
        Some(grh) => {
            let (_, peer_mac) = w.resolve_gid(idx, &grh.dgid).ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "create_ah: no device on the fabric (or UDP peer) has GID {}",
                    grh.dgid
                ))
            })?;
            av[12] = (attr.static_rate & 0xf) << 4 | (attr.sl & 7) << 1;
            let fl = if grh.flow_label != 0 {
                grh.flow_label & 0xf_ffff
            } else {
                grh.dgid
                    .0
                    .iter()
                    .fold(0u32, |a, &b| a.rotate_left(5) ^ b as u32)
                    & 0xf_ffff
            };
            av[14..16].copy_from_slice(&flow_label_to_udp_sport(fl).to_be_bytes());
            av[20..26].copy_from_slice(&peer_mac.0);
            av[26] = grh.traffic_class;
            av[27] = grh.hop_limit;
            let gfl = (grh.sgid_index as u32) << 20 | (grh.flow_label & 0xf_ffff);
            av[28..32].copy_from_slice(&gfl.to_be_bytes());
            av[32..48].copy_from_slice(&grh.dgid.0);
        }
        None => {
            av[12] = (attr.static_rate & 0xf) << 4 | (attr.sl & 0xf);
            av[13] = attr.src_path_bits & 0x7f;
            av[14..16].copy_from_slice(&attr.dlid.to_be_bytes());
        }
    }
    Ok(av)
}
