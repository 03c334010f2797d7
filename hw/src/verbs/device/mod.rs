//! [`VerbsDevice`]: one opened RDMA device and every object created on it.
//!
//! Objects live in per-kind tables behind one mutex (this is the control path); handles are
//! the table ids. A device that is not driven by mlx5 (Soft-RoCE `rxe0`, ...) still opens and
//! creates, modifies and destroys objects through the `*_verbs` methods; only the direct data
//! path (the mlx5dv ring layouts) needs mlx5, and the [`Device`] methods that return layouts say
//! so with [`Error::Unsupported`].

mod contract;
mod dc;
mod events;
mod mcast;
mod xrc;

use std::ffi::{c_int, CStr};
use std::os::fd::RawFd;
use std::sync::{Mutex, MutexGuard};

use super::convert::{
    cap_from_ibv, cap_to_ibv, port_from_ibv, qp_attr_from_ibv, qp_attr_to_ibv, qp_type_to_ibv,
    zeroed_qp_attr,
};
use super::counters::{read_counters, SYSFS_INFINIBAND};
use super::ffi::{check, classify, dv, errno, ibv, null_error, status_io_error, RdmaCore};
use super::list::DeviceList;
use super::mlx5;
use super::table::Table;
use crate::attr::{AccessFlags, AhAttr, AttrMask, Gid, QpAttr, QpCap, QpState, QpType};
use crate::device::{
    AhId, AhInfo, AsyncEvent, ChannelId, Counter, CqId, CqInfo, CqInitAttr, Device, DeviceAttr,
    MrId, MrInfo, PdId, PortAttr, QpId, QpInfo, QpInitAttr, SrqId, SrqInfo, SrqInitAttr, XrcdId,
};
use crate::error::{Error, Result};
use crate::layout::{CqLayout, QpLayout, SrqLayout};
use crate::qp_state::{self, DeviceLimits};

/// A CQ created through [`VerbsDevice::create_cq_verbs`].
#[derive(Clone, Copy, Debug)]
pub struct VerbsCq {
    /// Handle.
    pub id: CqId,
    /// CQEs the device actually allocated (`ibv_cq.cqe`; at least what was asked).
    pub cqe: u32,
    /// The mlx5 ring layout; `None` on a device without the direct data path.
    pub layout: Option<CqLayout>,
    /// Created with completion timestamps
    /// ([`VerbsDevice::create_cq_verbs_with_timestamps`]): an `ibv_cq_ex` whose completions
    /// [`super::baseline::BaselineCq::poll_timestamped`] reads with their timestamps.
    pub timestamps: bool,
    /// Created through `ibv_create_cq_ex` with `IBV_WC_STANDARD_FLAGS`
    /// ([`VerbsDevice::create_cq_verbs_extended`], or with timestamps): it can be polled
    /// through the extended interface ([`super::baseline::BaselineCq::poll_timestamped`]).
    pub extended: bool,
}

/// How a CQ is created for polling through libibverbs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum CqPoll {
    /// `ibv_poll_cq` only.
    Plain,
    /// An `ibv_cq_ex` with `IBV_WC_STANDARD_FLAGS`: the extended poll too.
    Extended,
    /// [`CqPoll::Extended`] with `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`.
    Timestamps,
}

impl CqPoll {
    /// The `wc_flags` of a CQ created for `poll`: none for [`CqPoll::Plain`]; else
    /// `IBV_WC_STANDARD_FLAGS` (verbs.h: byte count, immediate, QP number, source QP, SLID, SL,
    /// DLID path bits), so that the extended poll's readers of those fields exist (a provider
    /// installs a reader only for the fields asked for: rdma-core cq.c `mlx5_cq_fill_pfns`), and
    /// with [`CqPoll::Timestamps`] `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`. The ring the direct
    /// path reads is the same either way.
    pub(super) fn wc_flags(self) -> u64 {
        use ibv::ibv_create_cq_wc_flags as f;
        let standard = f::IBV_WC_EX_WITH_BYTE_LEN
            | f::IBV_WC_EX_WITH_IMM
            | f::IBV_WC_EX_WITH_QP_NUM
            | f::IBV_WC_EX_WITH_SRC_QP
            | f::IBV_WC_EX_WITH_SLID
            | f::IBV_WC_EX_WITH_SL
            | f::IBV_WC_EX_WITH_DLID_PATH_BITS;
        let flags = match self {
            CqPoll::Plain => f(0),
            CqPoll::Extended => standard,
            CqPoll::Timestamps => standard | f::IBV_WC_EX_WITH_COMPLETION_TIMESTAMP,
        };
        u64::from(flags.0)
    }
}

/// A QP created through [`VerbsDevice::create_qp_verbs`].
#[derive(Clone, Copy, Debug)]
pub struct VerbsQp {
    /// Handle.
    pub id: QpId,
    /// QP number.
    pub qpn: u32,
    /// Capabilities actually granted.
    pub cap: QpCap,
    /// The mlx5 ring layout; `None` on a device without the direct data path.
    pub layout: Option<QpLayout>,
}

/// An SRQ created through [`VerbsDevice::create_srq_verbs`].
#[derive(Clone, Copy, Debug)]
pub struct VerbsSrq {
    /// Handle.
    pub id: SrqId,
    /// The mlx5 ring layout; `None` on a device without the direct data path.
    pub layout: Option<SrqLayout>,
}

/// An address handle created through [`VerbsDevice::create_ah_verbs`].
#[derive(Clone, Copy, Debug)]
pub struct VerbsAh {
    /// Handle.
    pub id: AhId,
    /// The 48-byte mlx5 address vector; `None` on a device without the direct data path.
    pub av: Option<[u8; 48]>,
}

struct PdEntry {
    pd: *mut ibv::ibv_pd,
}

struct MrEntry {
    mr: *mut ibv::ibv_mr,
    pd: PdId,
}

struct CqEntry {
    cq: *mut ibv::ibv_cq,
    /// The completion channel the CQ reports to.
    channel: Option<ChannelId>,
    /// Events taken with `ibv_get_cq_event` and not yet acknowledged (`ibv_destroy_cq` waits
    /// for every one, libibverbs `ibv_cmd_destroy_cq`).
    unacked: u32,
    /// A [`super::baseline::BaselineCq`] polls it.
    claimed: bool,
    /// An `ibv_cq_ex` with `IBV_WC_STANDARD_FLAGS` (the extended poll's readers exist).
    extended: bool,
}

struct ChannelEntry {
    ch: *mut ibv::ibv_comp_channel,
}

struct QpEntry {
    qp: *mut ibv::ibv_qp,
    /// Parent domain the QP was created on (mlx5), deallocated after the QP.
    parent: *mut ibv::ibv_pd,
    /// Thread domain of the parent domain (mlx5), deallocated last.
    td: *mut ibv::ibv_td,
    qp_type: QpType,
    /// `None` for an XRC target QP (uverbs creates `IB_QPT_XRC_TGT` without a PD).
    pd: Option<PdId>,
    /// `None` for an XRC target QP (no queues, no CQs).
    send_cq: Option<CqId>,
    /// `None` for an XRC target (no CQs) and initiator (no receive side: libibverbs
    /// `ibv_cmd_create_qp_ex` sends no receive CQ for `IBV_QPT_XRC_SEND`).
    recv_cq: Option<CqId>,
    srq: Option<SrqId>,
    /// The XRC domain of an XRC target QP (created or opened with `ibv_open_qp`).
    xrcd: Option<XrcdId>,
    /// A [`super::baseline::BaselineQp`] posts on it.
    claimed: bool,
    /// A DC target's state, kept here: the kernel answers `ibv_query_qp` on a DCT only in RTR
    /// (`dc`). `None` for every other QP.
    dct_state: Option<QpState>,
}

struct SrqEntry {
    srq: *mut ibv::ibv_srq,
    pd: PdId,
    /// An XRC SRQ's domain and the CQ its receive completions go to.
    xrc: Option<(XrcdId, CqId)>,
    /// A [`super::baseline::BaselineSrq`] posts on it.
    claimed: bool,
}

struct XrcdEntry {
    xrcd: *mut ibv::ibv_xrcd,
}

struct AhEntry {
    ah: *mut ibv::ibv_ah,
    pd: PdId,
}

/// Every live object of a device.
struct Objects {
    pds: Table<PdEntry>,
    mrs: Table<MrEntry>,
    cqs: Table<CqEntry>,
    channels: Table<ChannelEntry>,
    qps: Table<QpEntry>,
    srqs: Table<SrqEntry>,
    ahs: Table<AhEntry>,
    xrcds: Table<XrcdEntry>,
}

/// An opened RDMA device (libibverbs context) and the objects created on it.
///
/// Dropping it destroys every object still alive in dependency order (AHs, QPs with their
/// parent and thread domains, SRQs, XRC domains, CQs after acknowledging their events,
/// completion channels, MRs, PDs) and closes the context.
pub struct VerbsDevice {
    name: String,
    /// rdma-core, loaded at the first open of the process.
    rdma: &'static RdmaCore,
    ctx: *mut ibv::ibv_context,
    mlx5: bool,
    /// `IBV_DEVICE_XRC` in the device's `device_cap_flags` (mlx5 with the `xrc` capability;
    /// never Soft-RoCE, whose `rxe_param.h` capability flags leave it out).
    xrc: bool,
    attr: DeviceAttr,
    objs: Mutex<Objects>,
}

// SAFETY: libibverbs objects are not tied to the thread that created them, and the control
// verbs used here are thread-safe (rdma-core `libibverbs/man/ibv_*`; providers lock their own
// state). Every object pointer lives in `objs` behind the mutex; `ctx` is only passed to
// thread-safe verbs. The data path goes through `baseline` handles that are not `Sync`.
unsafe impl Send for VerbsDevice {}
// SAFETY: see `Send`.
unsafe impl Sync for VerbsDevice {}

impl std::fmt::Debug for VerbsDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsDevice")
            .field("name", &self.name)
            .field("mlx5", &self.mlx5)
            .finish()
    }
}

/// Attribute bits `query_qp` asks for (everything the contract's [`QpAttr`] carries).
const QUERY_MASK: AttrMask = AttrMask::STATE
    .union(AttrMask::CUR_STATE)
    .union(AttrMask::EN_SQD_ASYNC_NOTIFY)
    .union(AttrMask::ACCESS_FLAGS)
    .union(AttrMask::PKEY_INDEX)
    .union(AttrMask::PORT)
    .union(AttrMask::QKEY)
    .union(AttrMask::AV)
    .union(AttrMask::PATH_MTU)
    .union(AttrMask::TIMEOUT)
    .union(AttrMask::RETRY_CNT)
    .union(AttrMask::RNR_RETRY)
    .union(AttrMask::RQ_PSN)
    .union(AttrMask::MAX_QP_RD_ATOMIC)
    .union(AttrMask::MIN_RNR_TIMER)
    .union(AttrMask::SQ_PSN)
    .union(AttrMask::MAX_DEST_RD_ATOMIC)
    .union(AttrMask::CAP)
    .union(AttrMask::DEST_QPN);

impl VerbsDevice {
    /// Opens the device called `name` (`mlx5_0`, `rxe0`). The first open of the process loads
    /// rdma-core's `libibverbs.so.1` and `libmlx5.so.1` ([`RdmaCore::get`]).
    ///
    /// Fails with [`Error::RdmaCore`] when rdma-core is not installed (or too old), naming
    /// what to install, and with [`Error::NoDevice`] (listing the devices that do exist, with
    /// a hint) when there is no such device or it cannot be opened.
    pub fn open(name: &str) -> Result<VerbsDevice> {
        let list = DeviceList::get().map_err(|e| match e {
            Error::RdmaCore { source, .. } => Error::RdmaCore {
                device: Some(name.to_string()),
                source,
            },
            e => e,
        })?;
        let rdma = list.rdma;
        let dev = list.find(name)?;
        let info = list.info(dev);
        // SAFETY: `dev` is an entry of the live list; the context keeps its own reference to
        // the device, so the list may be freed afterwards.
        let ctx = unsafe { rdma.ibv_open_device(dev) };
        if ctx.is_null() {
            let e = errno();
            return Err(Error::NoDevice {
                name: name.to_string(),
                why: format!(
                    "ibv_open_device failed: {e}. Check that /dev/infiniband/uverbs* is \
                     readable and writable by this user (udev rules or the `rdma` group) and \
                     that ib_uverbs is loaded"
                ),
            });
        }
        drop(list);
        // From here on `dev` owns `ctx`: an early return closes it through `Drop`.
        let mut dev = VerbsDevice {
            name: name.to_string(),
            rdma,
            ctx,
            mlx5: info.mlx5,
            xrc: false,
            attr: DeviceAttr::default(),
            objs: Mutex::new(Objects {
                pds: Table::new("PD"),
                mrs: Table::new("MR"),
                cqs: Table::new("CQ"),
                channels: Table::new("completion channel"),
                qps: Table::new("QP"),
                srqs: Table::new("SRQ"),
                ahs: Table::new("AH"),
                xrcds: Table::new("XRC domain"),
            }),
        };
        // SAFETY: `ctx` is an open context; `async_fd` is its event file descriptor.
        let async_fd = unsafe { (*ctx).async_fd };
        set_nonblocking(async_fd)?;
        dev.attr = dev.query_device_uncached()?;
        dev.xrc = dev.xrc_capable()?;
        tracing::debug!(
            device = name,
            mlx5 = dev.mlx5,
            libibverbs = rdma.libibverbs_path(),
            libmlx5 = rdma.libmlx5_path(),
            "opened RDMA device"
        );
        Ok(dev)
    }

    /// Whether the device is driven by mlx5 (so layouts and the direct data path exist).
    pub fn is_mlx5(&self) -> bool {
        self.mlx5
    }

    fn lock(&self) -> MutexGuard<'_, Objects> {
        // A panic while the lock was held cannot leave a table half-updated (each update is a
        // single insert/remove), so a poisoned lock is still usable.
        self.objs.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn direct_path_error(&self, what: &str) -> Error {
        Error::Unsupported(format!(
            "{what}: the direct data path (mlx5dv rings) needs an mlx5 device, and {} is \
             driven by another provider. Use VerbsDevice::create_*_verbs and \
             mlx5_hw::verbs::baseline for the plain libibverbs path",
            self.name
        ))
    }

    fn query_device_uncached(&self) -> Result<DeviceAttr> {
        // SAFETY: all-zero is a valid `ibv_device_attr` (integers and a char array).
        let mut a: ibv::ibv_device_attr = unsafe { std::mem::zeroed() };
        // SAFETY: `ctx` is open; `a` is a valid out-pointer.
        check("ibv_query_device", unsafe {
            self.rdma.ibv_query_device(self.ctx, &mut a)
        })?;
        // SAFETY: the kernel NUL-terminates `fw_ver` inside its 64 bytes; the array is ours.
        let fw_ver = unsafe { CStr::from_ptr(a.fw_ver.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        let u = |v: c_int| u32::try_from(v).unwrap_or(0);
        Ok(DeviceAttr {
            fw_ver,
            vendor_id: a.vendor_id,
            vendor_part_id: a.vendor_part_id,
            node_guid: u64::from_be(a.node_guid),
            phys_port_cnt: a.phys_port_cnt,
            max_qp: u(a.max_qp),
            max_qp_wr: u(a.max_qp_wr),
            max_sge: u(a.max_sge),
            max_cq: u(a.max_cq),
            max_cqe: u(a.max_cqe),
            max_mr: u(a.max_mr),
            max_qp_rd_atom: u(a.max_qp_rd_atom),
            max_qp_init_rd_atom: u(a.max_qp_init_rd_atom),
            max_srq: u(a.max_srq),
            max_srq_wr: u(a.max_srq_wr),
            direct_path: self.mlx5,
            blueflame: self.mlx5 && mlx5::blueflame_expected(self.rdma, self.ctx),
        })
    }

    fn pd_ptr(objs: &Objects, pd: PdId) -> Result<*mut ibv::ibv_pd> {
        Ok(objs.pds.get(pd.0)?.pd)
    }

    fn cq_ptr(objs: &Objects, cq: CqId) -> Result<*mut ibv::ibv_cq> {
        Ok(objs.cqs.get(cq.0)?.cq)
    }

    // ---------------------------------------------------------------- CQ

    /// Creates a CQ on any device: through `mlx5dv_create_cq` (CQE size, ignore-overrun) on
    /// mlx5, with `ibv_create_cq` (or `ibv_create_cq_ex` for ignore-overrun) elsewhere.
    /// `cqe_size` other than 64 is refused off mlx5, where it means nothing.
    pub fn create_cq_verbs(&self, attr: &CqInitAttr) -> Result<VerbsCq> {
        self.create_cq_verbs_as(attr, CqPoll::Plain)
    }

    /// [`VerbsDevice::create_cq_verbs`] through `ibv_create_cq_ex` with `IBV_WC_STANDARD_FLAGS`
    /// in `wc_flags` (byte count, immediate, QP number, source QP, SLID, SL, DLID path bits:
    /// verbs.h), so that [`super::baseline::BaselineCq::poll_timestamped`] can read it through
    /// the extended poll (timestamps 0: the CQ has none).
    pub fn create_cq_verbs_extended(&self, attr: &CqInitAttr) -> Result<VerbsCq> {
        self.create_cq_verbs_as(attr, CqPoll::Extended)
    }

    /// [`VerbsDevice::create_cq_verbs`] with completion timestamps: `ibv_create_cq_ex` (on
    /// mlx5 `mlx5dv_create_cq`) with `IBV_WC_STANDARD_FLAGS |
    /// IBV_WC_EX_WITH_COMPLETION_TIMESTAMP` in `wc_flags`, so that
    /// [`super::baseline::BaselineCq::poll_timestamped`] reads each completion's raw device
    /// clock (`ibv_wc_read_completion_ts`; convert with [`Device::query_clock`]). On any
    /// provider: one that has no completion timestamps refuses the flag (Soft-RoCE answers
    /// `EOPNOTSUPP`), reported as [`Error::Unsupported`] naming the call and the device.
    pub fn create_cq_verbs_with_timestamps(&self, attr: &CqInitAttr) -> Result<VerbsCq> {
        self.create_cq_verbs_as(attr, CqPoll::Timestamps)
    }

    /// [`VerbsDevice::create_cq_verbs`] for polling as `poll` says; with
    /// [`CqPoll::Timestamps`] the CQE carries the device clock (`mlx5_hw::timestamp`).
    pub(super) fn create_cq_verbs_as(&self, attr: &CqInitAttr, poll: CqPoll) -> Result<VerbsCq> {
        if attr.cqe == 0 || attr.cqe > i32::MAX as u32 {
            return Err(Error::InvalidArgument(format!(
                "CQ size {} must be between 1 and {}",
                attr.cqe, self.attr.max_cqe
            )));
        }
        if attr.cqe_size != 64 && attr.cqe_size != 128 {
            return Err(Error::InvalidArgument(format!(
                "CQE size {} must be 64 or 128 (mlx5dv_create_cq)",
                attr.cqe_size
            )));
        }
        if !self.mlx5 && attr.cqe_size != 64 {
            return Err(self.direct_path_error("128-byte CQEs"));
        }
        let mut objs = self.lock();
        let channel = match attr.channel {
            Some(c) => objs.channels.get(c.0)?.ch,
            None => std::ptr::null_mut(),
        };
        let created = if self.mlx5 {
            mlx5::create_cq(self.rdma, self.ctx, attr, channel, poll.wc_flags())
        } else {
            self.create_cq_plain(attr, channel, poll)
        };
        let cq = created?;
        let layout = if self.mlx5 {
            match mlx5::cq_layout(self.rdma, cq, attr.ignore_overrun) {
                Ok(l) => Some(l),
                Err(e) => {
                    // SAFETY: the CQ was created above, nothing else references it, and no
                    // event was taken from it.
                    unsafe { destroy_cq_logged(self.rdma, cq) };
                    return Err(e);
                }
            }
        } else {
            None
        };
        // SAFETY: `cq` is live; `cqe` is the size the provider allocated.
        let cqe = u32::try_from(unsafe { (*cq).cqe }).unwrap_or(0);
        let id = objs.cqs.insert(CqEntry {
            cq,
            channel: attr.channel,
            unacked: 0,
            claimed: false,
            extended: poll != CqPoll::Plain,
        })?;
        Ok(VerbsCq {
            id: CqId(id),
            cqe,
            layout,
            timestamps: poll == CqPoll::Timestamps,
            extended: poll != CqPoll::Plain,
        })
    }

    fn create_cq_plain(
        &self,
        attr: &CqInitAttr,
        channel: *mut ibv::ibv_comp_channel,
        poll: CqPoll,
    ) -> Result<*mut ibv::ibv_cq> {
        let cqe = attr.cqe as c_int;
        let timestamps = poll == CqPoll::Timestamps;
        if !attr.ignore_overrun && poll == CqPoll::Plain {
            // SAFETY: `ctx` is open; `channel` is NULL or a live channel of this context.
            let cq = unsafe {
                self.rdma
                    .ibv_create_cq(self.ctx, cqe, std::ptr::null_mut(), channel, 0)
            };
            return if cq.is_null() {
                Err(null_error("ibv_create_cq"))
            } else {
                Ok(cq)
            };
        }
        // SAFETY: all-zero is a valid `ibv_cq_init_attr_ex` (integers and NULL pointers).
        let mut a: ibv::ibv_cq_init_attr_ex = unsafe { std::mem::zeroed() };
        a.cqe = attr.cqe;
        a.channel = channel;
        if attr.ignore_overrun {
            a.comp_mask = ibv::ibv_cq_init_attr_mask::IBV_CQ_INIT_ATTR_MASK_FLAGS.0;
            a.flags = ibv::ibv_create_cq_attr_flags::IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN.0;
        }
        a.wc_flags = poll.wc_flags();
        // SAFETY: `ctx` is open; `a` is a valid attribute struct for the call's duration.
        match unsafe { ibv::ibv_create_cq_ex(self.ctx, &mut a) } {
            Some(cq) if !cq.is_null() => Ok(cq.cast::<ibv::ibv_cq>()),
            _ if timestamps => {
                let e = errno();
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS)
                ) {
                    return Err(Error::Unsupported(format!(
                        "ibv_create_cq_ex(IBV_WC_EX_WITH_COMPLETION_TIMESTAMP) on {}: {e}: \
                         completion timestamps are not supported by this device",
                        self.name
                    )));
                }
                Err(classify(
                    "ibv_create_cq_ex (IBV_WC_EX_WITH_COMPLETION_TIMESTAMP)",
                    e,
                ))
            }
            _ => Err(null_error("ibv_create_cq_ex")),
        }
    }

    // ---------------------------------------------------------------- SRQ

    /// Creates an SRQ on any device (`ibv_create_srq`); on mlx5 the layout comes from
    /// `mlx5dv_init_obj`. A non-zero `srq_limit` is armed with `ibv_modify_srq` afterwards
    /// (`ibv_create_srq` ignores it, man ibv_create_srq).
    pub fn create_srq_verbs(&self, pd: PdId, attr: &SrqInitAttr) -> Result<VerbsSrq> {
        let mut objs = self.lock();
        let pd_ptr = Self::pd_ptr(&objs, pd)?;
        // SAFETY: all-zero is a valid `ibv_srq_init_attr`.
        let mut a: ibv::ibv_srq_init_attr = unsafe { std::mem::zeroed() };
        a.attr.max_wr = attr.max_wr;
        a.attr.max_sge = attr.max_sge;
        // SAFETY: `pd_ptr` is a live PD of this context; `a` outlives the call.
        let srq = unsafe { self.rdma.ibv_create_srq(pd_ptr, &mut a) };
        if srq.is_null() {
            return Err(null_error("ibv_create_srq"));
        }
        let layout = if self.mlx5 {
            match mlx5::srq_layout(self.rdma, srq, attr.max_sge) {
                Ok(l) => Some(l),
                Err(e) => {
                    // SAFETY: created above, not referenced elsewhere.
                    unsafe { self.rdma.ibv_destroy_srq(srq) };
                    return Err(e);
                }
            }
        } else {
            None
        };
        if attr.srq_limit > 0 {
            if let Err(e) = modify_srq_limit(self.rdma, srq, attr.srq_limit) {
                // SAFETY: created above, not referenced elsewhere.
                unsafe { self.rdma.ibv_destroy_srq(srq) };
                return Err(e);
            }
        }
        let id = objs.srqs.insert(SrqEntry {
            srq,
            pd,
            xrc: None,
            claimed: false,
        })?;
        Ok(VerbsSrq {
            id: SrqId(id),
            layout,
        })
    }

    // ---------------------------------------------------------------- QP

    /// Creates a QP on any device. On mlx5: `mlx5dv_create_qp` with
    /// `MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE`, on a parent domain with its own thread domain
    /// so that the QP has a dedicated BlueFlame register (`docs/sources.md` §6); the layout
    /// comes from `mlx5dv_init_obj`. Elsewhere: `ibv_create_qp`.
    pub fn create_qp_verbs(&self, pd: PdId, attr: &QpInitAttr) -> Result<VerbsQp> {
        self.check_xrc_create(attr)?;
        // A DCI or DCT needs its DC attributes (`Device::create_qp_ex`, `dc`).
        crate::device::DcInit::check_create(attr, None, None)?;
        let mut objs = self.lock();
        let pd_ptr = Self::pd_ptr(&objs, pd)?;
        let send_cq = Self::cq_ptr(&objs, attr.send_cq)?;
        let recv_cq = Self::cq_ptr(&objs, attr.recv_cq)?;
        let srq = match attr.srq {
            Some(s) => objs.srqs.get(s.0)?.srq,
            None => std::ptr::null_mut(),
        };
        // SAFETY: all-zero is a valid `ibv_qp_init_attr_ex` (integers and NULL pointers).
        let mut a: ibv::ibv_qp_init_attr_ex = unsafe { std::mem::zeroed() };
        a.send_cq = send_cq;
        a.recv_cq = recv_cq;
        a.srq = srq;
        a.cap = cap_to_ibv(&attr.cap);
        a.qp_type = qp_type_to_ibv(attr.qp_type);
        a.sq_sig_all = c_int::from(attr.sq_sig_all);
        a.comp_mask = ibv::ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD.0;
        a.pd = pd_ptr;

        let (qp, parent, td) = if self.mlx5 {
            mlx5::create_qp(self.rdma, self.ctx, pd_ptr, &mut a)?
        } else {
            // SAFETY: `ibv_qp_init_attr` is the leading part of `ibv_qp_init_attr_ex` (verbs.h
            // declares the _ex struct as its extension), and `a` is valid for the call.
            let qp = unsafe {
                self.rdma
                    .ibv_create_qp(pd_ptr, (&mut a as *mut ibv::ibv_qp_init_attr_ex).cast())
            };
            if qp.is_null() {
                return Err(null_error("ibv_create_qp"));
            }
            (qp, std::ptr::null_mut(), std::ptr::null_mut())
        };
        let cap = cap_from_ibv(&a.cap);
        let layout = if self.mlx5 {
            match mlx5::qp_layout(self.rdma, qp, attr, &cap) {
                Ok(l) => Some(l),
                Err(e) => {
                    // SAFETY: created above, not referenced elsewhere.
                    unsafe { destroy_qp_and_domains(self.rdma, qp, parent, td) };
                    return Err(e);
                }
            }
        } else {
            None
        };
        // SAFETY: `qp` is live.
        let qpn = unsafe { (*qp).qp_num };
        let id = objs.qps.insert(QpEntry {
            qp,
            parent,
            td,
            qp_type: attr.qp_type,
            pd: Some(pd),
            send_cq: Some(attr.send_cq),
            recv_cq: (attr.qp_type != QpType::XrcSend).then_some(attr.recv_cq),
            srq: attr.srq,
            xrcd: None,
            claimed: false,
            dct_state: None,
        })?;
        tracing::debug!(device = %self.name, qpn, qp_type = %attr.qp_type, "created QP");
        Ok(VerbsQp {
            id: QpId(id),
            qpn,
            cap,
            layout,
        })
    }

    /// The state the QP is in now, as the device reports it (`ibv_query_qp`).
    fn current_state(&self, qp: *mut ibv::ibv_qp) -> Result<QpState> {
        let mut a = zeroed_qp_attr();
        // SAFETY: all-zero is a valid `ibv_qp_init_attr`.
        let mut init: ibv::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        // SAFETY: `qp` is live; `a` and `init` are valid out-pointers.
        let ret = unsafe {
            self.rdma
                .ibv_query_qp(qp, &mut a, AttrMask::STATE.bits() as c_int, &mut init)
        };
        check("ibv_query_qp", ret)?;
        u8::try_from(a.qp_state)
            .ok()
            .and_then(QpState::from_u8)
            .ok_or_else(|| Error::Verbs {
                call: "ibv_query_qp",
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("unknown QP state {}", a.qp_state),
                ),
            })
    }

    /// The device limits a modify of `attr`/`mask` is checked against (the port it names, or
    /// port 1).
    fn limits_for(&self, attr: &QpAttr, mask: AttrMask) -> Result<DeviceLimits> {
        let wanted = if mask.contains(AttrMask::PORT) {
            attr.port_num
        } else if mask.contains(AttrMask::AV) {
            attr.ah_attr.port_num
        } else {
            1
        };
        // An out-of-range port is reported by `check_limits`; query a port that exists.
        let port = if (1..=self.attr.phys_port_cnt).contains(&wanted) {
            wanted
        } else {
            1
        };
        let p = self.query_port(port)?;
        Ok(DeviceLimits::from_attrs(&self.attr, &p))
    }

    /// `ibv_modify_qp` as it is, with **no validation**: the kernel's answer (`Ok` or the errno
    /// it returned). For conformance tests that compare the kernel's verdict with
    /// [`crate::qp_state::check_modify`]; applications use [`Device::modify_qp`].
    pub fn modify_qp_raw(
        &self,
        qp: QpId,
        attr: &QpAttr,
        mask: AttrMask,
    ) -> Result<std::result::Result<(), std::io::Error>> {
        let objs = self.lock();
        let e = objs.qps.get(qp.0)?;
        let mut a = qp_attr_to_ibv(attr);
        // SAFETY: `e.qp` is live (the table lock is held); `a` outlives the call.
        let ret = unsafe { self.rdma.ibv_modify_qp(e.qp, &mut a, mask.bits() as c_int) };
        Ok(if ret == 0 {
            Ok(())
        } else {
            Err(status_io_error(ret))
        })
    }

    /// The QP's type.
    pub fn qp_type(&self, qp: QpId) -> Result<QpType> {
        Ok(self.lock().qps.get(qp.0)?.qp_type)
    }

    // ---------------------------------------------------------------- AH

    /// Creates an address handle on any device; on mlx5 also returns its 48-byte AV
    /// (`mlx5dv_init_obj(MLX5DV_OBJ_AH)`).
    pub fn create_ah_verbs(&self, pd: PdId, attr: &AhAttr) -> Result<VerbsAh> {
        let mut objs = self.lock();
        let pd_ptr = Self::pd_ptr(&objs, pd)?;
        let mut a = super::convert::ah_to_ibv(attr);
        // SAFETY: `pd_ptr` is a live PD; `a` outlives the call.
        let ah = unsafe { self.rdma.ibv_create_ah(pd_ptr, &mut a) };
        if ah.is_null() {
            return Err(null_error("ibv_create_ah"));
        }
        let av = if self.mlx5 {
            match mlx5::ah_av(self.rdma, ah) {
                Ok(av) => Some(av),
                Err(e) => {
                    // SAFETY: created above, not referenced elsewhere.
                    unsafe { self.rdma.ibv_destroy_ah(ah) };
                    return Err(e);
                }
            }
        } else {
            None
        };
        let id = objs.ahs.insert(AhEntry { ah, pd })?;
        Ok(VerbsAh { id: AhId(id), av })
    }

    // ---------------------------------------------------------------- baseline support

    /// Marks a QP as driven by a baseline handle; returns its pointer and type.
    pub(super) fn claim_qp(&self, qp: QpId) -> Result<(*mut ibv::ibv_qp, QpType)> {
        let mut objs = self.lock();
        let e = objs.qps.get_mut(qp.0)?;
        if e.claimed {
            return Err(Error::Busy(format!(
                "QP {} already has a baseline handle",
                qp.0
            )));
        }
        if e.qp_type == QpType::XrcRecv {
            // A target QP has no queue to post on: its receives go to the XRC SRQ a request
            // names ([`super::baseline::BaselineSrq`]).
            return Err(Error::Unsupported(format!(
                "QP {} is {}: an XRC target has no queue to post on (post receives to its XRC \
                 SRQ)",
                qp.0, e.qp_type
            )));
        }
        if e.qp_type.is_dc() {
            // `ibv_post_send` carries no DC destination: rdma-core posts to a DCI only through
            // the `ibv_wr_*` API with `mlx5dv_wr_set_dc_addr`, and a DCT has no send queue.
            return Err(Error::Unsupported(format!(
                "QP {} is {}: the baseline data path (ibv_post_send) has no DC",
                qp.0, e.qp_type
            )));
        }
        e.claimed = true;
        Ok((e.qp, e.qp_type))
    }

    /// Marks an SRQ as posted to by a baseline handle; returns its pointer.
    pub(super) fn claim_srq(&self, srq: SrqId) -> Result<*mut ibv::ibv_srq> {
        let mut objs = self.lock();
        let e = objs.srqs.get_mut(srq.0)?;
        if e.claimed {
            return Err(Error::Busy(format!(
                "SRQ {} already has a baseline handle",
                srq.0
            )));
        }
        e.claimed = true;
        Ok(e.srq)
    }

    /// Releases [`Self::claim_srq`].
    pub(super) fn release_srq(&self, srq: SrqId) {
        if let Ok(e) = self.lock().srqs.get_mut(srq.0) {
            e.claimed = false;
        }
    }

    /// Releases [`Self::claim_qp`].
    pub(super) fn release_qp(&self, qp: QpId) {
        if let Ok(e) = self.lock().qps.get_mut(qp.0) {
            e.claimed = false;
        }
    }

    /// Marks a CQ as polled by a baseline handle; returns its pointer and whether it can be
    /// polled through the extended interface (an `ibv_cq_ex` with `IBV_WC_STANDARD_FLAGS`).
    pub(super) fn claim_cq(&self, cq: CqId) -> Result<(*mut ibv::ibv_cq, bool)> {
        let mut objs = self.lock();
        let e = objs.cqs.get_mut(cq.0)?;
        if e.claimed {
            return Err(Error::Busy(format!(
                "CQ {} already has a baseline handle",
                cq.0
            )));
        }
        e.claimed = true;
        Ok((e.cq, e.extended))
    }

    /// Releases [`Self::claim_cq`].
    pub(super) fn release_cq(&self, cq: CqId) {
        if let Ok(e) = self.lock().cqs.get_mut(cq.0) {
            e.claimed = false;
        }
    }

    /// Runs `f` with the AH's pointer while the AH cannot be destroyed.
    pub(super) fn with_ah<R>(&self, ah: AhId, f: impl FnOnce(*mut ibv::ibv_ah) -> R) -> Result<R> {
        let objs = self.lock();
        let p = objs.ahs.get(ah.0)?.ah;
        Ok(f(p))
    }
}

/// Sets `O_NONBLOCK` on a libibverbs file descriptor (async events, completion channel), so
/// that `ibv_get_async_event` / `ibv_get_cq_event` return `EAGAIN` instead of blocking
/// (man ibv_get_async_event: "changing the blocking mode of the async fd").
fn set_nonblocking(fd: RawFd) -> Result<()> {
    // SAFETY: fcntl on a descriptor owned by libibverbs; only the status flags change.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(Error::Verbs {
            call: "fcntl(O_NONBLOCK)",
            source: errno(),
        });
    }
    Ok(())
}

fn modify_srq_limit(rdma: &RdmaCore, srq: *mut ibv::ibv_srq, limit: u32) -> Result<()> {
    let mut a = ibv::ibv_srq_attr {
        max_wr: 0,
        max_sge: 0,
        srq_limit: limit,
    };
    // SAFETY: `srq` is live; `a` outlives the call.
    let ret = unsafe {
        rdma.ibv_modify_srq(
            srq,
            &mut a,
            ibv::ibv_srq_attr_mask::IBV_SRQ_LIMIT.0 as c_int,
        )
    };
    check("ibv_modify_srq(IBV_SRQ_LIMIT)", ret)
}

/// Destroys a CQ, logging a failure.
///
/// # Safety
/// `cq` is live, no QP uses it and every event taken from it was acknowledged.
unsafe fn destroy_cq_logged(rdma: &RdmaCore, cq: *mut ibv::ibv_cq) {
    // SAFETY: guaranteed by the caller.
    let r = unsafe { rdma.ibv_destroy_cq(cq) };
    if r != 0 {
        tracing::warn!(err = %status_io_error(r), "ibv_destroy_cq failed");
    }
}

/// Destroys a QP, then its parent domain, then its thread domain.
///
/// # Safety
/// `qp` is live and unused; `parent`/`td` are NULL or the domains only this QP uses.
unsafe fn destroy_qp_and_domains(
    rdma: &RdmaCore,
    qp: *mut ibv::ibv_qp,
    parent: *mut ibv::ibv_pd,
    td: *mut ibv::ibv_td,
) -> c_int {
    // SAFETY: guaranteed by the caller.
    let r = unsafe { rdma.ibv_destroy_qp(qp) };
    if r != 0 {
        return r;
    }
    // SAFETY: guaranteed by the caller; the QP that used the domains is gone.
    unsafe { mlx5::dealloc_domains(rdma, parent, td) };
    0
}

impl Drop for VerbsDevice {
    fn drop(&mut self) {
        let objs = self.objs.get_mut().unwrap_or_else(|p| p.into_inner());
        // Dependency order: AHs and QPs reference PDs/CQs/SRQs; SRQs and MRs reference PDs.
        for (_, e) in objs.ahs.drain_newest_first() {
            // SAFETY: `e.ah` is live and nothing can use it any more (`&mut self`).
            unsafe { self.rdma.ibv_destroy_ah(e.ah) };
        }
        for (id, e) in objs.qps.drain_newest_first() {
            // SAFETY: as above; baseline handles borrow the device, so none is alive.
            let r = unsafe { destroy_qp_and_domains(self.rdma, e.qp, e.parent, e.td) };
            if r != 0 {
                tracing::warn!(qp = id, err = %status_io_error(r), "ibv_destroy_qp failed on drop");
            }
        }
        for (_, e) in objs.srqs.drain_newest_first() {
            // SAFETY: no QP is left to use it.
            unsafe { self.rdma.ibv_destroy_srq(e.srq) };
        }
        for (id, e) in objs.xrcds.drain_newest_first() {
            // SAFETY: every XRC SRQ and target QP of the domain is gone.
            let r = unsafe { ibv::ibv_close_xrcd(e.xrcd) };
            if r != 0 {
                tracing::warn!(xrcd = id, err = %status_io_error(r), "ibv_close_xrcd failed on drop");
            }
        }
        for (_, e) in objs.cqs.drain_newest_first() {
            if e.unacked > 0 {
                // SAFETY: `e.cq` is live; these events were taken and not acknowledged, and
                // `ibv_destroy_cq` would wait for them forever.
                unsafe { self.rdma.ibv_ack_cq_events(e.cq, e.unacked) };
            }
            // SAFETY: no QP is left to use it; every event taken is acknowledged.
            unsafe { destroy_cq_logged(self.rdma, e.cq) };
        }
        for (_, e) in objs.channels.drain_newest_first() {
            // SAFETY: every CQ is gone, so no CQ uses the channel.
            let r = unsafe { self.rdma.ibv_destroy_comp_channel(e.ch) };
            if r != 0 {
                tracing::warn!(err = %status_io_error(r), "ibv_destroy_comp_channel failed");
            }
        }
        for (_, e) in objs.mrs.drain_newest_first() {
            // SAFETY: `e.mr` is live.
            unsafe { self.rdma.ibv_dereg_mr(e.mr) };
        }
        for (_, e) in objs.pds.drain_newest_first() {
            // SAFETY: every object on the PD is gone.
            unsafe { self.rdma.ibv_dealloc_pd(e.pd) };
        }
        // SAFETY: every object of the context is gone; the context is closed exactly once.
        let r = unsafe { self.rdma.ibv_close_device(self.ctx) };
        if r != 0 {
            tracing::warn!(device = %self.name, err = %status_io_error(r), "ibv_close_device failed");
        }
    }
}

/// The layout of a QP without queues: no rings, no doorbell record, no BlueFlame register. An
/// XRC target receives into the XRC SRQ each request names; a DCT through its SRQ, and gets
/// its number only at RTR (`qpn` 0 until then).
fn queueless_layout(qp_type: QpType, qpn: u32) -> QpLayout {
    let none = crate::layout::WqLayout {
        buf: std::ptr::null_mut(),
        wqe_cnt: 0,
        stride: 0,
    };
    QpLayout {
        qpn,
        qp_type,
        dbrec: std::ptr::null_mut(),
        sq: none,
        rq: none,
        bf: crate::layout::BfLayout {
            reg: std::ptr::null_mut(),
            size: 0,
            shared: false,
        },
        max_inline_data: 0,
        max_send_sge: 0,
        max_recv_sge: 0,
        sq_sig_all: false,
        uses_srq: true,
    }
}
