//! XRC through libibverbs: the XRC domain (`ibv_open_xrcd` / `ibv_close_xrcd`), the XRC SRQ
//! (`ibv_create_srq_ex` with `IBV_SRQT_XRC`, its number from `ibv_get_srq_num`), the initiator
//! (`IBV_QPT_XRC_SEND`, an ordinary [`VerbsDevice::create_qp_verbs`] QP with a send queue
//! only) and the target (`IBV_QPT_XRC_RECV` through `ibv_create_qp_ex` with the domain and
//! no PD or CQ; shared with `ibv_open_qp`).
//!
//! Their modifies go through the same [`crate::qp_state::validate_with_limits`] as every QP,
//! with the kernel table's XRC_INI / XRC_TGT columns (the QP's type is kept with it).
//!
//! A device without XRC (`IBV_DEVICE_XRC` missing from `device_cap_flags`: Soft-RoCE, whose
//! kernel driver has no `alloc_xrcd` and whose provider no `open_xrcd`, so libibverbs' dummy op
//! answers `EOPNOTSUPP`) gets [`Error::Unsupported`] naming the call from every method here,
//! before any object is looked up or created; `ibv_open_xrcd` itself is still called, so that
//! its refusal is the provider's own.

use super::*;
use crate::device::XrcSrqInitAttr;

impl VerbsDevice {
    /// Whether the device offers XRC (`IBV_DEVICE_XRC`, verbs.h `enum ibv_device_cap_flags`;
    /// the kernel sets `IB_DEVICE_XRC` for mlx5 when the HCA has the `xrc` capability, Linux
    /// `mlx5_ib_query_device`).
    pub(super) fn xrc_capable(&self) -> Result<bool> {
        // SAFETY: all-zero is a valid `ibv_device_attr` (integers and a char array).
        let mut a: ibv::ibv_device_attr = unsafe { std::mem::zeroed() };
        // SAFETY: `ctx` is open; `a` is a valid out-pointer.
        check("ibv_query_device", unsafe {
            self.rdma.ibv_query_device(self.ctx, &mut a)
        })?;
        Ok(a.device_cap_flags & ibv::ibv_device_cap_flags::IBV_DEVICE_XRC.0 != 0)
    }

    /// Whether this device offers XRC (`IBV_DEVICE_XRC` in its capability flags).
    pub fn has_xrc(&self) -> bool {
        self.xrc
    }

    /// The refusal of `call` on a device without XRC.
    fn no_xrc(&self, call: &str) -> Error {
        Error::Unsupported(format!(
            "{call} on {}: the device has no XRC (IBV_DEVICE_XRC is not in its \
             device_cap_flags; Soft-RoCE implements no XRC domains)",
            self.name
        ))
    }

    /// `Ok` if the device has XRC, else [`VerbsDevice::no_xrc`].
    fn require_xrc(&self, call: &str) -> Result<()> {
        if self.xrc {
            Ok(())
        } else {
            Err(self.no_xrc(call))
        }
    }

    /// The checks [`VerbsDevice::create_qp_verbs`] makes for the XRC types: a target is
    /// created with [`Device::create_qp_ex`] and an XRC domain; an initiator has no receive
    /// side (uverbs `create_qp` zeroes it for `IB_QPT_XRC_INI`; an SRQ or receive WRs asked
    /// for are a caller's mistake, refused rather than ignored) and needs a device with XRC.
    pub(super) fn check_xrc_create(&self, attr: &QpInitAttr) -> Result<()> {
        match attr.qp_type {
            QpType::XrcRecv => Err(Error::InvalidArgument(
                "an XRC_RECV QP is created with create_qp_ex and an XRC domain \
                 (QpInitEx::xrcd)"
                    .into(),
            )),
            QpType::XrcSend => {
                self.require_xrc("ibv_create_qp(IBV_QPT_XRC_SEND)")?;
                if attr.srq.is_some() || attr.cap.max_recv_wr > 0 || attr.cap.max_recv_sge > 0 {
                    return Err(Error::InvalidArgument(
                        "an XRC_SEND QP has no receive side: no SRQ, max_recv_wr and \
                         max_recv_sge 0"
                            .into(),
                    ));
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// `ibv_open_xrcd` with no file (`fd` -1, `O_CREAT`: a new domain of this process; man
    /// ibv_open_xrcd).
    pub(super) fn open_xrcd_verbs(&self) -> Result<XrcdId> {
        let mut objs = self.lock();
        let mut a = ibv::ibv_xrcd_init_attr {
            comp_mask: ibv::ibv_xrcd_init_attr_mask::IBV_XRCD_INIT_ATTR_FD.0
                | ibv::ibv_xrcd_init_attr_mask::IBV_XRCD_INIT_ATTR_OFLAGS.0,
            fd: -1,
            oflags: libc::O_CREAT,
        };
        // SAFETY: `ctx` is open; `a` is valid for the call.
        let x = unsafe { ibv::ibv_open_xrcd(self.ctx, &mut a) };
        let xrcd = match x {
            Some(p) if !p.is_null() => p,
            _ => {
                let e = errno();
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS)
                ) {
                    return Err(Error::Unsupported(format!(
                        "ibv_open_xrcd on {}: {e}: the device has no XRC (its provider or \
                         kernel driver offers no XRC domains; Soft-RoCE has none)",
                        self.name
                    )));
                }
                return Err(classify("ibv_open_xrcd", e));
            }
        };
        Ok(XrcdId(objs.xrcds.insert(XrcdEntry { xrcd })?))
    }

    /// `ibv_close_xrcd`, refused while an XRC SRQ or target QP of the domain lives (the
    /// kernel would answer `EBUSY`: `ib_dealloc_xrcd_user` checks the domain's users).
    pub(super) fn close_xrcd_verbs(&self, xrcd: XrcdId) -> Result<()> {
        self.require_xrc("ibv_close_xrcd")?;
        let mut objs = self.lock();
        let x = objs.xrcds.get(xrcd.0)?.xrcd;
        let users = objs
            .srqs
            .iter()
            .filter(|(_, s)| s.xrc.is_some_and(|(d, _)| d == xrcd))
            .count()
            + objs
                .qps
                .iter()
                .filter(|(_, q)| q.xrcd == Some(xrcd))
                .count();
        if users > 0 {
            return Err(Error::Busy(format!(
                "XRC domain {} is used by {users} XRC SRQ(s) and target QP handle(s); destroy \
                 them first",
                xrcd.0
            )));
        }
        // SAFETY: `x` is live and unused.
        check("ibv_close_xrcd", unsafe { ibv::ibv_close_xrcd(x) })?;
        objs.xrcds.remove(xrcd.0)?;
        Ok(())
    }

    /// `ibv_create_srq_ex` with `IBV_SRQT_XRC` (comp_mask `TYPE | PD | XRCD | CQ`, verbs.h
    /// `enum ibv_srq_init_attr_mask`); the number initiators name comes from
    /// `ibv_get_srq_num`, and on mlx5 the ring from `mlx5dv_init_obj(MLX5DV_OBJ_SRQ)`, whose
    /// `srqn` must be the same. mlx5 only: the contract returns the ring (elsewhere refused).
    pub(super) fn create_xrc_srq_verbs(
        &self,
        pd: PdId,
        attr: &XrcSrqInitAttr,
    ) -> Result<(SrqId, SrqLayout)> {
        self.require_xrc("ibv_create_srq_ex(IBV_SRQT_XRC)")?;
        if !self.mlx5 {
            return Err(self.direct_path_error("create_srq_xrc"));
        }
        let mut objs = self.lock();
        let pd_ptr = Self::pd_ptr(&objs, pd)?;
        let xrcd = objs.xrcds.get(attr.xrcd.0)?.xrcd;
        let cq = Self::cq_ptr(&objs, attr.cq)?;
        // SAFETY: all-zero is a valid `ibv_srq_init_attr_ex` (integers and NULL pointers).
        let mut a: ibv::ibv_srq_init_attr_ex = unsafe { std::mem::zeroed() };
        a.attr.max_wr = attr.attr.max_wr;
        a.attr.max_sge = attr.attr.max_sge;
        a.comp_mask = ibv::ibv_srq_init_attr_mask::IBV_SRQ_INIT_ATTR_TYPE.0
            | ibv::ibv_srq_init_attr_mask::IBV_SRQ_INIT_ATTR_PD.0
            | ibv::ibv_srq_init_attr_mask::IBV_SRQ_INIT_ATTR_XRCD.0
            | ibv::ibv_srq_init_attr_mask::IBV_SRQ_INIT_ATTR_CQ.0;
        a.srq_type = ibv::ibv_srq_type::IBV_SRQT_XRC;
        a.pd = pd_ptr;
        a.xrcd = xrcd;
        a.cq = cq;
        // SAFETY: `ctx` is open; the PD, domain and CQ are live objects of it; `a` outlives
        // the call.
        let srq = match unsafe { self.rdma.ibv_create_srq_ex(self.ctx, &mut a) } {
            Some(s) if !s.is_null() => s,
            _ => return Err(null_error("ibv_create_srq_ex(IBV_SRQT_XRC)")),
        };
        let destroy = |e: Error| {
            // SAFETY: created above, not referenced elsewhere.
            unsafe { self.rdma.ibv_destroy_srq(srq) };
            e
        };
        let mut num = 0u32;
        // SAFETY: `srq` is live; `num` is a valid out-pointer.
        check("ibv_get_srq_num", unsafe {
            ibv::ibv_get_srq_num(srq, &mut num)
        })
        .map_err(destroy)?;
        let mut layout = mlx5::srq_layout(self.rdma, srq, attr.attr.max_sge).map_err(destroy)?;
        // What its receive CQEs carry for it (with CQE version 1, its user index).
        layout.cqe_index =
            mlx5::xrc_srq_cqe_index(self.rdma, self.ctx, srq, layout.srqn).map_err(destroy)?;
        if layout.srqn != num {
            return Err(destroy(Error::Verbs {
                call: "mlx5dv_init_obj(SRQ)",
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!(
                        "XRC SRQ number {:#x} differs from ibv_get_srq_num's {num:#x}",
                        layout.srqn
                    ),
                ),
            }));
        }
        if attr.attr.srq_limit > 0 {
            modify_srq_limit(self.rdma, srq, attr.attr.srq_limit).map_err(destroy)?;
        }
        let id = objs.srqs.insert(SrqEntry {
            srq,
            pd,
            xrc: Some((attr.xrcd, attr.cq)),
            claimed: false,
        })?;
        Ok((SrqId(id), layout))
    }

    /// An XRC target QP of `xrcd`: `ibv_create_qp_ex` with `IBV_QPT_XRC_RECV` and
    /// `IBV_QP_INIT_ATTR_XRCD` only (no PD, no CQs, no SRQ: libibverbs
    /// `ibv_cmd_create_qp_ex` sends the domain's handle in place of the PD's). It has no rings
    /// (`mlx5dv_init_obj` is not asked): its layout has no queues, like the software
    /// ConnectX's.
    pub(super) fn create_xrc_target(&self, xrcd: XrcdId) -> Result<QpInfo> {
        self.require_xrc("ibv_create_qp_ex(IBV_QPT_XRC_RECV)")?;
        let mut objs = self.lock();
        let x = objs.xrcds.get(xrcd.0)?.xrcd;
        // SAFETY: all-zero is a valid `ibv_qp_init_attr_ex` (integers and NULL pointers).
        let mut a: ibv::ibv_qp_init_attr_ex = unsafe { std::mem::zeroed() };
        a.qp_type = qp_type_to_ibv(QpType::XrcRecv);
        a.comp_mask = ibv::ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_XRCD.0;
        a.xrcd = x;
        // SAFETY: `ctx` is open; `x` is a live domain of it; `a` outlives the call.
        let qp = match unsafe { self.rdma.ibv_create_qp_ex(self.ctx, &mut a) } {
            Some(q) if !q.is_null() => q,
            _ => return Err(null_error("ibv_create_qp_ex(IBV_QPT_XRC_RECV)")),
        };
        // SAFETY: `qp` is live.
        let qpn = unsafe { (*qp).qp_num };
        let id = objs.qps.insert(target_entry(qp, xrcd))?;
        tracing::debug!(device = %self.name, qpn, "created XRC target QP");
        Ok(QpInfo {
            id: QpId(id),
            qpn,
            qp_type: QpType::XrcRecv,
            cap: QpCap::default(),
            layout: super::queueless_layout(QpType::XrcRecv, qpn),
        })
    }

    /// `ibv_open_qp`: another handle on target QP `qpn` of `xrcd` (comp_mask `NUM | XRCD |
    /// TYPE`, verbs.h `enum ibv_qp_open_attr_mask`). The kernel keeps the QP until its last
    /// handle is destroyed (Linux `ib_open_qp` / `ib_close_qp`).
    pub(super) fn open_xrc_target(&self, xrcd: XrcdId, qpn: u32) -> Result<QpId> {
        self.require_xrc("ibv_open_qp")?;
        let mut objs = self.lock();
        let x = objs.xrcds.get(xrcd.0)?.xrcd;
        let mut a = ibv::ibv_qp_open_attr {
            comp_mask: ibv::ibv_qp_open_attr_mask::IBV_QP_OPEN_ATTR_NUM.0
                | ibv::ibv_qp_open_attr_mask::IBV_QP_OPEN_ATTR_XRCD.0
                | ibv::ibv_qp_open_attr_mask::IBV_QP_OPEN_ATTR_TYPE.0,
            qp_num: qpn,
            xrcd: x,
            qp_context: std::ptr::null_mut(),
            qp_type: qp_type_to_ibv(QpType::XrcRecv),
        };
        // SAFETY: `ctx` is open; `x` is a live domain of it; `a` outlives the call.
        let qp = match unsafe { ibv::ibv_open_qp(self.ctx, &mut a) } {
            Some(q) if !q.is_null() => q,
            _ => return Err(null_error("ibv_open_qp")),
        };
        let id = objs.qps.insert(target_entry(qp, xrcd))?;
        Ok(QpId(id))
    }
}

/// The table entry of an XRC target QP handle (created or opened).
fn target_entry(qp: *mut ibv::ibv_qp, xrcd: XrcdId) -> QpEntry {
    QpEntry {
        qp,
        parent: std::ptr::null_mut(),
        td: std::ptr::null_mut(),
        qp_type: QpType::XrcRecv,
        pd: None,
        send_cq: None,
        recv_cq: None,
        srq: None,
        xrcd: Some(xrcd),
        claimed: false,
        dct_state: None,
    }
}
