//! What a kernel driver needs from the device to serve rdma-core's `libmlx5`: objects built on
//! memory the driver allocated, and UAR pages the program maps.
//!
//! The [`mlx5_hw::Device`] implementation of [`SimDevice`] hands out memory the device owns,
//! laid out as `mlx5dv_init_obj` describes it. Under rdma-core it is the other way round
//! (rdma-core `providers/mlx5/verbs.c` `create_qp`, `create_cq`, `mlx5_create_srq`): libmlx5
//! allocates every ring and doorbell record itself and names them in the create command's
//! driver data (`struct mlx5_ib_create_qp` / `_cq` / `_srq`, `<rdma/mlx5-abi.h>`), the kernel
//! pins them (`ib_umem_get`, `mlx5_ib_db_map_user` in `drivers/infiniband/hw/mlx5/qp.c`
//! `create_user_qp`, `cq.c` `create_cq_user`, `srq.c` `create_srq_user`) and the device reads
//! them in place. Doorbells and BlueFlame copies go to UAR pages the program maps from its
//! command file descriptor, CQ arms to one page shared by every CQ of the context.
//!
//! These entry points take that memory as [`DmaBuf`]s made by the caller (the emulation of the
//! kernel side, crate `mlx5-sim-uverbs`): [`DmaBuf::user`] windows on the driver's buffers and
//! [`DmaBuf::map_shared`] views of the UAR pages. They reuse the device's own objects (the
//! same QP, CQ and SRQ state machines, doorbell scanners and CQE writers), differing only in
//! where the memory is, which BlueFlame register a QP rings (chosen by the caller as the
//! kernel's `alloc_bfreg` does) and the CQE version ([`crate::uidx`]).

use std::sync::Arc;

use mlx5_hw::{
    ChannelId, CqId, Error, PdId, QpId, QpInitAttr, QpType, Result, SrqId, XrcSrqInitAttr, XrcdId,
};

use crate::cq::Cq;
use crate::cq_uar::CqArmPage;
use crate::device::SimDevice;
use crate::doorbell::{BF_HALF, BF_OFFSET};
use crate::mem::DmaBuf;
use crate::qp::db::BfClass;
use crate::qp::Qp;
use crate::sizing::{QpGeometry, SrqGeometry};
use crate::srq::Srq;
use crate::uidx::UserIndex;
use crate::world::Dev;

/// The BlueFlame register a user QP rings: `offset` into a UAR page the caller maps.
#[derive(Clone, Debug)]
pub struct UserRegister {
    /// The UAR page (the device's own mapping of the page the program maps).
    pub page: Arc<DmaBuf>,
    /// Offset of the register in the page (0x800 or 0xA00 for the two user registers of a
    /// page, rdma-core `mlx5_set_context`: `MLX5_BF_OFFSET + k * bf_reg_size`).
    pub offset: usize,
    /// `bf.size`: 256 for a register with BlueFlame, 0 for bfreg 0 (doorbells only).
    pub size: u32,
    /// Other QPs may ring it too (a medium-class register, rdma-core `need_lock`), so the
    /// device scans it per register ([`crate::doorbell::shared`]).
    pub shared: bool,
}

/// A QP on memory the driver allocated (`struct mlx5_ib_create_qp`).
#[derive(Debug)]
pub struct UserQp {
    /// The RQ + SQ buffer (`buf_addr`), `None` when both queues are empty.
    pub buf: Option<DmaBuf>,
    /// The doorbell record (`db_addr`): `dbrec[0]` RQ, `dbrec[1]` SQ.
    pub dbrec: DmaBuf,
    /// Queue geometry from `sq_wqe_count`, `rq_wqe_count` and `rq_wqe_shift`.
    pub geom: QpGeometry,
    /// The register it rings.
    pub register: UserRegister,
    /// The user index its CQEs carry (CQE version 1), `None` for version 0.
    pub uidx: Option<u32>,
}

/// A CQ on memory the driver allocated (`struct mlx5_ib_create_cq`).
#[derive(Debug)]
pub struct UserCq {
    /// The CQE buffer (`buf_addr`), `cqe_cnt × cqe_size` bytes.
    pub buf: DmaBuf,
    /// The doorbell record (`db_addr`): consumer index, arm word.
    pub dbrec: DmaBuf,
    /// Entries (a power of two).
    pub cqe_cnt: u32,
    /// 64 or 128.
    pub cqe_size: u32,
    /// The completion channel its events go to.
    pub channel: Option<ChannelId>,
    /// The page its arm doorbell is written to ([`SimDevice::add_cq_arm_page`]).
    pub arm_page: u32,
    /// CQE version 1: its CQEs carry user indexes ([`crate::uidx`]).
    pub user_index: bool,
    /// `IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN`.
    pub ignore_overrun: bool,
    /// Completion timestamps in every good CQE.
    pub timestamps: bool,
}

/// An SRQ on memory the driver allocated (`struct mlx5_ib_create_srq`).
#[derive(Debug)]
pub struct UserSrq {
    /// The WQE buffer (`buf_addr`), linked by the driver.
    pub buf: DmaBuf,
    /// The doorbell record (`db_addr`): WQEs posted.
    pub dbrec: DmaBuf,
    /// Geometry (the kernel's `max` and `wqe_shift`).
    pub geom: SrqGeometry,
    /// Armed limit (0: none).
    pub limit: u32,
    /// XRC SRQ: its domain and CQ, and the user index its receive CQEs carry.
    pub xrc: Option<(XrcSrqInitAttr, Option<u32>)>,
}

fn unknown(kind: &'static str, id: u32) -> Error {
    Error::UnknownHandle { kind, id }
}

fn no_mem(what: &str) -> Error {
    Error::Resources(format!("could not allocate {what}"))
}

/// What [`SimDevice::move_registered_pages`] moved: `len` bytes from `va` now at `host`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MovedPages {
    /// The program's address the pages were at.
    pub va: u64,
    /// How many bytes (whole pages).
    pub len: u64,
    /// Where they are now.
    pub host: u64,
}

impl SimDevice {
    /// The program is about to unmap `[va, va + len)` (whole pages of `page` bytes): the pages
    /// in it that registered regions still use at their own addresses must survive, as the
    /// kernel's pinned pages do (`ib_umem_get` takes a reference on every page of a region,
    /// kernel `drivers/infiniband/core/umem.c`; `munmap` then only removes the program's
    /// mapping). With the device stopped (the fabric's lock held), `mv(va, len)` is called for
    /// each such run of pages, whole pages, in address order; it moves them out of the way
    /// (`mremap`) and returns where they went, or `None` if it could not. Every region then
    /// reads and writes those addresses at their new place ([`crate::mem::Region::relocate`]).
    /// Returns what was moved; the caller owns those mappings and unmaps each once
    /// [`moved_pages_in_use`](Self::moved_pages_in_use) says no region uses it any more.
    ///
    /// # Safety
    /// Each address `mv` returns must hold the pages it was given, valid for reads and writes
    /// until no region uses them.
    pub unsafe fn move_registered_pages(
        &self,
        va: u64,
        len: u64,
        page: u64,
        mv: &mut dyn FnMut(u64, u64) -> Option<u64>,
    ) -> Vec<MovedPages> {
        let page = page.max(1);
        let hi = va.saturating_add(len);
        self.with(|d| {
            let mut runs: Vec<(u64, u64)> = Vec::new();
            for r in d.mrs.regions() {
                for (a, b) in r.unmoved(va, hi) {
                    let a = (a - a % page).max(va);
                    let b = b.div_ceil(page).saturating_mul(page).min(hi);
                    runs.push((a, b));
                }
            }
            runs.sort_unstable();
            let mut merged: Vec<(u64, u64)> = Vec::new();
            for (a, b) in runs {
                match merged.last_mut() {
                    Some(l) if a <= l.1 => l.1 = l.1.max(b),
                    _ => merged.push((a, b)),
                }
            }
            let mut out = Vec::new();
            for (a, b) in merged {
                let Some(host) = mv(a, b - a) else { continue };
                for r in d.mrs.regions_mut() {
                    // SAFETY: the caller's contract: `host` holds the pages of [a, b) until no
                    // region uses them.
                    unsafe { r.relocate(a, b, host) };
                }
                out.push(MovedPages {
                    va: a,
                    len: b - a,
                    host,
                });
            }
            Ok(out)
        })
        .unwrap_or_default()
    }

    /// Whether a registered region still uses pages that
    /// [`move_registered_pages`](Self::move_registered_pages) moved to `[host, host + len)`.
    pub fn moved_pages_in_use(&self, host: u64, len: u64) -> bool {
        self.with(|d| Ok(d.mrs.regions().any(|r| r.uses_moved(host, len))))
            .unwrap_or(false)
    }

    /// Take every IPv4 address that is neither a device of this fabric nor in the UDP peer
    /// table to be a software ConnectX whose socket is bound to that address on `port`
    /// ([`crate::udp_port::UdpPort::set_peer_port`]). Requires [`SimDevice::bind_udp`].
    pub fn set_udp_peer_port(&self, port: Option<u16>) -> Result<()> {
        self.with(|d| {
            let u = d.udp.as_mut().ok_or_else(|| {
                Error::InvalidArgument("set_udp_peer_port: bind the device to UDP first".into())
            })?;
            u.set_peer_port(port);
            d.sync_udp_groups();
            Ok(())
        })
    }

    /// Set the node GUID (`query_device`, sysfs `node_guid`).
    pub fn set_node_guid(&self, guid: u64) {
        let _ = self.with(|d| {
            d.guid = guid;
            Ok(())
        });
    }

    /// Register a page on which CQs will ring their arm doorbell at +0x20 (a context's
    /// `cq_uar_reg`); returns its number for [`UserCq::arm_page`].
    pub fn add_cq_arm_page(&self, page: Arc<DmaBuf>) -> Result<u32> {
        self.with(|d| {
            let id = d.alloc_id();
            d.cq_arm_pages.insert(id, CqArmPage::new(page));
            Ok(id)
        })
    }

    /// Forget an arm page (its context is gone; its CQs must be destroyed first).
    pub fn remove_cq_arm_page(&self, id: u32) -> Result<()> {
        self.with(|d| match d.cq_arm_pages.get(&id) {
            Some(p) if !p.cqs.is_empty() => Err(Error::Busy(format!(
                "arm page {id} still has CQs {:x?}",
                p.cqs
            ))),
            Some(_) => {
                d.cq_arm_pages.remove(&id);
                Ok(())
            }
            None => Err(unknown("arm page", id)),
        })
    }

    /// Create a CQ on the driver's memory; returns its CQN (also its [`CqId`]).
    pub fn create_cq_user(&self, user: UserCq) -> Result<u32> {
        if user.cqe_size != 64 && user.cqe_size != 128 {
            return Err(Error::InvalidArgument(format!(
                "cqe_size {} (must be 64 or 128)",
                user.cqe_size
            )));
        }
        if !user.cqe_cnt.is_power_of_two() || user.cqe_cnt > 1 << 22 {
            return Err(Error::InvalidArgument(format!(
                "{} CQEs (a power of two up to 2^22)",
                user.cqe_cnt
            )));
        }
        let need = user.cqe_cnt as usize * user.cqe_size as usize;
        if user.buf.len() < need || user.dbrec.len() < 8 {
            return Err(Error::InvalidArgument(format!(
                "CQ buffer of {} bytes for {need}, doorbell record of {}",
                user.buf.len(),
                user.dbrec.len()
            )));
        }
        self.with(|d| {
            if !d.cq_arm_pages.contains_key(&user.arm_page) {
                return Err(unknown("arm page", user.arm_page));
            }
            let channel = match user.channel {
                Some(c) => Some((
                    c.0,
                    d.channels
                        .get(&c.0)
                        .ok_or(unknown("completion channel", c.0))?
                        .clone(),
                )),
                None => None,
            };
            let cqn = d.alloc_id();
            let mut cq = Cq::new(
                cqn,
                user.cqe_cnt,
                user.cqe_size,
                user.ignore_overrun,
                channel,
            )
            .ok_or_else(|| no_mem("CQ"))?;
            cq.buf = user.buf;
            cq.dbrec = user.dbrec;
            cq.timestamps = user.timestamps;
            if user.user_index {
                cq.user_index = Some(UserIndex::default());
            }
            if let Some(p) = d.cq_arm_pages.get_mut(&user.arm_page) {
                p.add_cq(&cq);
            }
            d.cqs.insert(cqn, cq);
            Ok(cqn)
        })
    }

    /// Destroy a CQ made by [`create_cq_user`](Self::create_cq_user) (refused while QPs or an
    /// XRC SRQ use it, or events taken from it are unacknowledged, as `Device::destroy_cq`).
    pub fn destroy_cq_user(&self, cq: CqId) -> Result<()> {
        // An arm the driver wrote before the destroy command is the CQ's: the device takes it
        // now (a ConnectX has long seen it), so it cannot later name a CQ that is gone.
        self.with(|d| {
            let Dev {
                name,
                cqs,
                bugs,
                cq_arm_pages,
                ..
            } = d;
            crate::cq_uar::forward(cq_arm_pages.values(), cqs, name, bugs);
            Ok(())
        })?;
        mlx5_hw::Device::destroy_cq(self, cq)?;
        self.with(|d| {
            for p in d.cq_arm_pages.values_mut() {
                p.cqs.remove(&cq.0);
            }
            Ok(())
        })
    }

    /// Create a QP on the driver's memory ringing `user.register`; returns its QPN (also its
    /// [`QpId`]). XRC target QPs have no memory: [`create_xrc_target`](Self::create_xrc_target).
    pub fn create_qp_user(&self, pd: PdId, attr: &QpInitAttr, user: UserQp) -> Result<u32> {
        crate::transport::xrc::check_plain_create(attr)?;
        let g = user.geom;
        if let Some(b) = &user.buf {
            if (b.len() as u64) < g.buf_size as u64 {
                return Err(Error::InvalidArgument(format!(
                    "QP buffer of {} bytes for {}",
                    b.len(),
                    g.buf_size
                )));
            }
        } else if g.buf_size > 0 {
            return Err(Error::InvalidArgument(
                "QP without a buffer for its queues".into(),
            ));
        }
        if user.dbrec.len() < 8 {
            return Err(Error::InvalidArgument(
                "QP doorbell record under 8 bytes".into(),
            ));
        }
        let reg = user.register;
        if reg.offset < BF_OFFSET || reg.offset + 2 * BF_HALF > reg.page.len() {
            return Err(Error::InvalidArgument(format!(
                "BlueFlame register at {:#x} of a {}-byte page",
                reg.offset,
                reg.page.len()
            )));
        }
        self.with(|d| {
            check_parents(d, pd, attr)?;
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
            if let Some(b) = user.buf {
                qp.buf = b;
            }
            qp.dbrec = user.dbrec;
            if reg.shared {
                let a = d.bfregs.adopt(qpn, &reg.page, reg.offset, reg.size);
                if let Some((page, off, size)) = a.page {
                    qp.use_register(a.class, page, off, size);
                }
            } else {
                // A register of its own: the scanners look at `BF_OFFSET` of the QP's page, so
                // the QP gets a window of the page that starts `offset - BF_OFFSET` into it.
                let start = reg.offset - BF_OFFSET;
                let window = DmaBuf::window(&reg.page, start, reg.page.len() - start)
                    .ok_or_else(|| Error::InvalidArgument("register outside its page".into()))?;
                let window = Arc::new(window);
                qp.db.poison(&window);
                qp.use_register(BfClass::Own, window, BF_OFFSET, reg.size);
            }
            for cq in [attr.send_cq.0, attr.recv_cq.0] {
                if let Some(c) = d.cqs.get_mut(&cq) {
                    c.users += 1;
                    if let (Some(t), Some(u)) = (c.user_index.as_mut(), user.uidx) {
                        t.set_qp(qpn, u);
                    }
                }
            }
            if let Some(s) = attr.srq.and_then(|s| d.srqs.get_mut(&s.0)) {
                s.users += 1;
            }
            d.qps.insert(qpn, qp);
            Ok(qpn)
        })
    }

    /// Give QP `qp`, made without memory of the driver's (a DC target, which has no queues:
    /// [`mlx5_hw::Device::create_qp_ex`]), the user index its CQEs carry under CQE version 1
    /// (kernel `drivers/infiniband/hw/mlx5/qp.c` `create_dct` writes the command's `uidx`
    /// into the DCT context's `user_index`); [`destroy_qp_user`](Self::destroy_qp_user)
    /// forgets it.
    pub fn set_qp_user_index(&self, qp: QpId, uidx: u32) -> Result<()> {
        self.with(|d| {
            let q = d.qps.get(&qp.0).ok_or_else(|| unknown("QP", qp.0))?;
            for cq in [q.send_cq, q.recv_cq] {
                if let Some(t) = d.cqs.get_mut(&cq).and_then(|c| c.user_index.as_mut()) {
                    t.set_qp(qp.0, uidx);
                }
            }
            Ok(())
        })
    }

    /// Create an XRC target QP in domain `xrcd` (it has no queues: the requests it receives
    /// go to the XRC SRQ each names); returns its QPN.
    pub fn create_xrc_target(&self, xrcd: XrcdId) -> Result<u32> {
        self.with(|d| crate::xrc::create_target(d, xrcd.0).map(|i| i.qpn))
    }

    /// Destroy a QP made by [`create_qp_user`](Self::create_qp_user) or
    /// [`create_xrc_target`](Self::create_xrc_target): after this the device touches none of
    /// its memory.
    pub fn destroy_qp_user(&self, qp: QpId) -> Result<()> {
        let (cqs, db) = self.with(|d| {
            let mut s = crate::doorbell::DoorbellStats::default();
            let cqs = match d.qps.get(&qp.0) {
                Some(q) => {
                    s.add(&q.db);
                    [q.send_cq, q.recv_cq]
                }
                None => [0, 0],
            };
            Ok((cqs, s))
        })?;
        mlx5_hw::Device::destroy_qp(self, qp)?;
        self.with(|d| {
            for c in cqs {
                if let Some(t) = d.cqs.get_mut(&c).and_then(|c| c.user_index.as_mut()) {
                    t.remove_qp(qp.0);
                }
            }
            let r = &mut d.retired_doorbells;
            r.doorbells += db.doorbells;
            r.bf_verified += db.bf_verified;
            r.bf_verified_late += db.bf_verified_late;
            r.db8 += db.db8;
            r.unjudged += db.unjudged;
            Ok(())
        })
    }

    /// What the doorbell scanners saw since the device was made: its QPs' counts
    /// ([`SimDevice::doorbell_stats`]) and those of the QPs destroyed through
    /// [`destroy_qp_user`](Self::destroy_qp_user).
    pub fn doorbell_stats_total(&self) -> crate::doorbell::DoorbellStats {
        let mut s = self.doorbell_stats();
        let r = self.with(|d| Ok(d.retired_doorbells)).unwrap_or_default();
        s.doorbells += r.doorbells;
        s.bf_verified += r.bf_verified;
        s.bf_verified_late += r.bf_verified_late;
        s.db8 += r.db8;
        s.unjudged += r.unjudged;
        s
    }

    /// Create an SRQ (or an XRC SRQ) on the driver's memory; returns its SRQN (also its
    /// [`SrqId`]).
    pub fn create_srq_user(&self, pd: PdId, user: UserSrq) -> Result<u32> {
        let g = user.geom;
        if !g.wqe_cnt.is_power_of_two() || g.stride < 32 || !g.stride.is_power_of_two() {
            return Err(Error::InvalidArgument(format!(
                "SRQ of {} WQEs of {} bytes",
                g.wqe_cnt, g.stride
            )));
        }
        if (user.buf.len() as u64) < g.wqe_cnt as u64 * g.stride as u64 || user.dbrec.len() < 4 {
            return Err(Error::InvalidArgument(format!(
                "SRQ buffer of {} bytes for {} WQEs of {}",
                user.buf.len(),
                g.wqe_cnt,
                g.stride
            )));
        }
        self.with(|d| {
            if !d.pds.contains(&pd.0) {
                return Err(unknown("PD", pd.0));
            }
            if let Some((x, _)) = &user.xrc {
                crate::xrc::check_srq(d, x)?;
            }
            let srqn = d.alloc_id();
            let mut srq = Srq::new(srqn, pd.0, g, user.limit).ok_or_else(|| no_mem("SRQ"))?;
            srq.buf = user.buf;
            srq.dbrec = user.dbrec;
            d.srqs.insert(srqn, srq);
            if let Some((x, uidx)) = &user.xrc {
                crate::xrc::adopt_srq(d, srqn, x);
                if let (Some(u), Some(t)) = (
                    uidx,
                    d.cqs.get_mut(&x.cq.0).and_then(|c| c.user_index.as_mut()),
                ) {
                    t.set_xrc_srq(srqn, *u);
                }
            }
            Ok(srqn)
        })
    }

    /// Destroy an SRQ made by [`create_srq_user`](Self::create_srq_user).
    pub fn destroy_srq_user(&self, srq: SrqId) -> Result<()> {
        let cq = self.with(|d| Ok(d.srqs.get(&srq.0).and_then(|s| s.xrc).map(|x| x.1)))?;
        mlx5_hw::Device::destroy_srq(self, srq)?;
        self.with(|d| {
            if let Some(t) = cq
                .and_then(|c| d.cqs.get_mut(&c))
                .and_then(|c| c.user_index.as_mut())
            {
                t.remove_xrc_srq(srq.0);
            }
            Ok(())
        })
    }

    /// The QP type of QP `qpn`, if it exists.
    pub fn qp_type(&self, qpn: u32) -> Option<QpType> {
        self.with(|d| Ok(d.qps.get(&qpn).map(|q| q.qp_type)))
            .ok()
            .flatten()
    }
}

/// The checks of `Device::create_qp` on the objects a QP refers to.
fn check_parents(d: &Dev, pd: PdId, attr: &QpInitAttr) -> Result<()> {
    if !d.pds.contains(&pd.0) {
        return Err(unknown("PD", pd.0));
    }
    for cq in [attr.send_cq, attr.recv_cq] {
        if !d.cqs.contains_key(&cq.0) {
            return Err(unknown("CQ", cq.0));
        }
    }
    if let Some(s) = attr.srq {
        if !d.srqs.contains_key(&s.0) {
            return Err(unknown("SRQ", s.0));
        }
    }
    Ok(())
}
