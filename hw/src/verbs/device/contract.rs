//! [`Device`] for [`VerbsDevice`]: the contract's calls mapped onto libibverbs.

use std::ffi::c_int;
use std::os::fd::RawFd;

use super::*;

impl Device for VerbsDevice {
    fn name(&self) -> &str {
        &self.name
    }

    fn query_device(&self) -> Result<DeviceAttr> {
        Ok(self.attr.clone())
    }

    fn query_port(&self, port: u8) -> Result<PortAttr> {
        // SAFETY: all-zero is a valid `ibv_port_attr`.
        let mut p: ibv::ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: `ctx` is open; `p` is a valid out-pointer of the size passed along.
        let ret = unsafe { self.rdma.___ibv_query_port(self.ctx, port, &mut p) };
        if ret != 0 {
            let e = status_io_error(ret);
            return Err(if e.raw_os_error() == Some(libc::EINVAL) {
                Error::InvalidArgument(format!(
                    "{} has no port {port} (it has {})",
                    self.name, self.attr.phys_port_cnt
                ))
            } else {
                classify("ibv_query_port", e)
            });
        }
        Ok(port_from_ibv(&p))
    }

    fn query_gid(&self, port: u8, index: u32) -> Result<Gid> {
        let idx = c_int::try_from(index)
            .map_err(|_| Error::InvalidArgument(format!("GID index {index} is too large")))?;
        let mut g = ibv::ibv_gid { raw: [0; 16] };
        // SAFETY: `ctx` is open; `g` is a valid out-pointer.
        let ret = unsafe { self.rdma.ibv_query_gid(self.ctx, port, idx, &mut g) };
        if ret != 0 {
            return Err(Error::InvalidArgument(format!(
                "ibv_query_gid({}, port {port}, index {index}) failed: {}",
                self.name,
                status_io_error(ret)
            )));
        }
        // SAFETY: `raw` spans the whole union; any bytes are a valid array.
        Ok(Gid(unsafe { g.raw }))
    }

    fn alloc_pd(&self) -> Result<PdId> {
        let mut objs = self.lock();
        // SAFETY: `ctx` is open.
        let pd = unsafe { self.rdma.ibv_alloc_pd(self.ctx) };
        if pd.is_null() {
            return Err(null_error("ibv_alloc_pd"));
        }
        Ok(PdId(objs.pds.insert(PdEntry { pd })?))
    }

    fn dealloc_pd(&self, pd: PdId) -> Result<()> {
        let mut objs = self.lock();
        let p = objs.pds.get(pd.0)?.pd;
        let users = objs.mrs.iter().filter(|(_, e)| e.pd == pd).count()
            + objs.qps.iter().filter(|(_, e)| e.pd == Some(pd)).count()
            + objs.srqs.iter().filter(|(_, e)| e.pd == pd).count()
            + objs.ahs.iter().filter(|(_, e)| e.pd == pd).count();
        if users > 0 {
            return Err(Error::Busy(format!(
                "PD {} still has {users} MR/QP/SRQ/AH object(s); destroy them first",
                pd.0
            )));
        }
        // SAFETY: `p` is live and unused.
        check("ibv_dealloc_pd", unsafe { self.rdma.ibv_dealloc_pd(p) })?;
        objs.pds.remove(pd.0)?;
        Ok(())
    }

    unsafe fn reg_mr(
        &self,
        pd: PdId,
        addr: *mut u8,
        len: usize,
        access: AccessFlags,
    ) -> Result<MrInfo> {
        let mut objs = self.lock();
        let p = Self::pd_ptr(&objs, pd)?;
        // SAFETY: `p` is a live PD; the caller guarantees the memory stays valid until
        // `dereg_mr` (this function's contract).
        let mr = unsafe {
            self.rdma
                .ibv_reg_mr(p, addr.cast(), len, access.bits() as c_int)
        };
        if mr.is_null() {
            return Err(null_error("ibv_reg_mr"));
        }
        // SAFETY: `mr` is live.
        let (lkey, rkey) = unsafe { ((*mr).lkey, (*mr).rkey) };
        let id = objs.mrs.insert(MrEntry { mr, pd })?;
        Ok(MrInfo {
            id: MrId(id),
            addr: addr as u64,
            length: len as u64,
            lkey,
            rkey,
            access,
        })
    }

    fn dereg_mr(&self, mr: MrId) -> Result<()> {
        let mut objs = self.lock();
        let m = objs.mrs.get(mr.0)?.mr;
        // SAFETY: `m` is live.
        check("ibv_dereg_mr", unsafe { self.rdma.ibv_dereg_mr(m) })?;
        objs.mrs.remove(mr.0)?;
        Ok(())
    }

    fn create_cq(&self, attr: &CqInitAttr) -> Result<CqInfo> {
        if !self.mlx5 {
            return Err(self.direct_path_error("create_cq"));
        }
        let c = self.create_cq_verbs(attr)?;
        match c.layout {
            Some(layout) => Ok(CqInfo { id: c.id, layout }),
            None => Err(self.direct_path_error("create_cq")),
        }
    }

    fn query_clock(&self) -> Result<crate::timestamp::ClockInfo> {
        // SAFETY: all-zero is a valid `ibv_device_attr_ex` (integers only).
        let mut a: ibv::ibv_device_attr_ex = unsafe { std::mem::zeroed() };
        // SAFETY: `ctx` is open; a NULL input is what verbs.h documents for "no input"; `a` is
        // a valid out-pointer of the size the call is told.
        let r = unsafe {
            self.rdma
                .ibv_query_device_ex(self.ctx, std::ptr::null(), &mut a)
        };
        check("ibv_query_device_ex", r)?;
        if a.hca_core_clock == 0 {
            return Err(Error::Unsupported(format!(
                "{} reports no HCA core clock (hca_core_clock 0)",
                self.name
            )));
        }
        // The free-running format: what a CQ created with IBV_WC_EX_WITH_COMPLETION_TIMESTAMP
        // reads raw (rdma-core `mlx5_cq_read_wc_completion_ts`); which format firmware writes
        // on a real-time capable NIC is UNCONFIRMED here (hw/src/timestamp.rs).
        Ok(crate::timestamp::ClockInfo {
            hca_core_clock_khz: a.hca_core_clock,
            mask: if a.completion_timestamp_mask == 0 {
                u64::MAX
            } else {
                a.completion_timestamp_mask
            },
            format: crate::timestamp::TimestampFormat::FreeRunning,
        })
    }

    fn create_cq_with_timestamps(&self, attr: &CqInitAttr) -> Result<CqInfo> {
        if !self.mlx5 {
            return Err(self.direct_path_error("create_cq_with_timestamps"));
        }
        let c = self.create_cq_verbs_with_timestamps(attr)?;
        match c.layout {
            Some(layout) => Ok(CqInfo { id: c.id, layout }),
            None => Err(self.direct_path_error("create_cq_with_timestamps")),
        }
    }

    fn destroy_cq(&self, cq: CqId) -> Result<()> {
        let mut objs = self.lock();
        let e = objs.cqs.get(cq.0)?;
        if objs
            .qps
            .iter()
            .any(|(_, q)| q.send_cq == Some(cq) || q.recv_cq == Some(cq))
        {
            return Err(Error::Busy(format!(
                "CQ {} is used by a QP; destroy the QP first",
                cq.0
            )));
        }
        if objs
            .srqs
            .iter()
            .any(|(_, s)| s.xrc.is_some_and(|(_, c)| c == cq))
        {
            return Err(Error::Busy(format!(
                "CQ {} takes the completions of an XRC SRQ; destroy the SRQ first",
                cq.0
            )));
        }
        if e.claimed {
            return Err(Error::Busy(format!(
                "CQ {} is polled by a baseline handle; drop it first",
                cq.0
            )));
        }
        if e.unacked > 0 {
            return Err(Error::Busy(format!(
                "CQ {} has {} completion event(s) taken with get_cq_event and not acknowledged; \
                 call ack_cq_events(cq, {}) first (ibv_destroy_cq would wait for them forever)",
                cq.0, e.unacked, e.unacked
            )));
        }
        // SAFETY: `e.cq` is live, unused, and has no unacknowledged event.
        check("ibv_destroy_cq", unsafe { self.rdma.ibv_destroy_cq(e.cq) })?;
        objs.cqs.remove(cq.0)?;
        Ok(())
    }

    fn create_srq(&self, pd: PdId, attr: &SrqInitAttr) -> Result<SrqInfo> {
        if !self.mlx5 {
            return Err(self.direct_path_error("create_srq"));
        }
        let s = self.create_srq_verbs(pd, attr)?;
        match s.layout {
            Some(layout) => Ok(SrqInfo { id: s.id, layout }),
            None => Err(self.direct_path_error("create_srq")),
        }
    }

    fn arm_srq_limit(&self, srq: SrqId, limit: u32) -> Result<()> {
        let objs = self.lock();
        let s = objs.srqs.get(srq.0)?.srq;
        modify_srq_limit(self.rdma, s, limit)
    }

    fn destroy_srq(&self, srq: SrqId) -> Result<()> {
        let mut objs = self.lock();
        let e = objs.srqs.get(srq.0)?;
        let (s, claimed) = (e.srq, e.claimed);
        if claimed {
            return Err(Error::Busy(format!(
                "SRQ {} has a baseline handle; drop it first",
                srq.0
            )));
        }
        if objs.qps.iter().any(|(_, q)| q.srq == Some(srq)) {
            return Err(Error::Busy(format!(
                "SRQ {} is used by a QP; destroy it first",
                srq.0
            )));
        }
        // SAFETY: `s` is live and unused.
        check("ibv_destroy_srq", unsafe { self.rdma.ibv_destroy_srq(s) })?;
        objs.srqs.remove(srq.0)?;
        Ok(())
    }

    fn create_qp(&self, pd: PdId, attr: &QpInitAttr) -> Result<QpInfo> {
        if !self.mlx5 {
            return Err(self.direct_path_error("create_qp"));
        }
        let q = self.create_qp_verbs(pd, attr)?;
        match q.layout {
            Some(layout) => Ok(QpInfo {
                id: q.id,
                qpn: q.qpn,
                qp_type: attr.qp_type,
                cap: q.cap,
                layout,
            }),
            None => Err(self.direct_path_error("create_qp")),
        }
    }

    fn modify_qp(&self, qp: QpId, attr: &QpAttr, mask: AttrMask) -> Result<()> {
        let limits = self.limits_for(attr, mask)?;
        let mut objs = self.lock();
        let e = objs.qps.get(qp.0)?;
        let cur = match e.dct_state {
            Some(s) => s,
            None => self.current_state(e.qp)?,
        };
        let next = qp_state::validate_with_limits(cur, attr, mask, e.qp_type, &limits)?;
        let mut a = qp_attr_to_ibv(attr);
        // SAFETY: `e.qp` is live (the lock is held); `a` outlives the call.
        let ret = unsafe { self.rdma.ibv_modify_qp(e.qp, &mut a, mask.bits() as c_int) };
        check("ibv_modify_qp", ret)?;
        // SAFETY: `e.qp` is live.
        let qpn = unsafe { (*e.qp).qp_num };
        if e.dct_state.is_some() {
            objs.qps.get_mut(qp.0)?.dct_state = Some(next);
        }
        let path = if mask.contains(AttrMask::AV) {
            attr.ah_attr
                .grh
                .map(|g| g.dgid.to_string())
                .unwrap_or_else(|| format!("lid {}", attr.ah_attr.dlid))
        } else {
            String::new()
        };
        // DEBUG, not INFO: `mlx5_hw::transition::apply` emits the one INFO event per state
        // change (docs/sources.md §20); this one records what reached the device.
        tracing::debug!(
            device = %self.name,
            qpn,
            old = %cur,
            new = %next,
            dest_qpn = mask.contains(AttrMask::DEST_QPN).then_some(attr.dest_qp_num),
            sq_psn = mask.contains(AttrMask::SQ_PSN).then_some(attr.sq_psn),
            rq_psn = mask.contains(AttrMask::RQ_PSN).then_some(attr.rq_psn),
            path = %path,
            "QP state change"
        );
        Ok(())
    }

    fn query_qp(&self, qp: QpId) -> Result<QpAttr> {
        let objs = self.lock();
        let e = objs.qps.get(qp.0)?;
        let mask = match e.dct_state {
            None => QUERY_MASK,
            Some(QpState::Rtr) => dc::DCT_QUERY_MASK,
            Some(s) => {
                return Err(Error::InvalidArgument(format!(
                    "query_qp: DCT {} is in {s}; a DCT can be queried in RTR only (mlx5 \
                     mlx5_ib_dct_query_qp)",
                    qp.0
                )))
            }
        };
        let mut a = zeroed_qp_attr();
        // SAFETY: all-zero is a valid `ibv_qp_init_attr`.
        let mut init: ibv::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        // SAFETY: `e.qp` is live; out-pointers are valid.
        let ret = unsafe {
            self.rdma
                .ibv_query_qp(e.qp, &mut a, mask.bits() as c_int, &mut init)
        };
        check("ibv_query_qp", ret)?;
        Ok(qp_attr_from_ibv(&a))
    }

    fn attach_mcast(&self, qp: QpId, gid: &Gid, lid: u16) -> Result<()> {
        self.mcast(qp, gid, lid, true)
    }

    fn detach_mcast(&self, qp: QpId, gid: &Gid, lid: u16) -> Result<()> {
        self.mcast(qp, gid, lid, false)
    }

    fn destroy_qp(&self, qp: QpId) -> Result<()> {
        let mut objs = self.lock();
        let e = objs.qps.get(qp.0)?;
        if e.claimed {
            return Err(Error::Busy(format!(
                "QP {} has a baseline handle; drop it first",
                qp.0
            )));
        }
        // SAFETY: `e.qp` is live and unclaimed; its domains are its own.
        let r = unsafe { destroy_qp_and_domains(self.rdma, e.qp, e.parent, e.td) };
        check("ibv_destroy_qp", r)?;
        objs.qps.remove(qp.0)?;
        Ok(())
    }

    fn create_ah(&self, pd: PdId, attr: &AhAttr) -> Result<AhInfo> {
        // Connection setup creates the peer's AH on every provider; its mlx5 address vector
        // exists only on mlx5. Elsewhere (Soft-RoCE) `av` is all zero: the handle serves the
        // libibverbs path (`baseline`), and the direct path is refused on such a device anyway.
        let a = self.create_ah_verbs(pd, attr)?;
        Ok(AhInfo {
            id: a.id,
            av: a.av.unwrap_or([0; 48]),
        })
    }

    fn destroy_ah(&self, ah: AhId) -> Result<()> {
        let mut objs = self.lock();
        let a = objs.ahs.get(ah.0)?.ah;
        // SAFETY: `a` is live; posts that use it hold the lock (`with_ah`).
        check("ibv_destroy_ah", unsafe { self.rdma.ibv_destroy_ah(a) })?;
        objs.ahs.remove(ah.0)?;
        Ok(())
    }

    fn poll_async_event(&self) -> Option<AsyncEvent> {
        self.next_async_event()
    }

    fn async_event_fd(&self) -> Result<RawFd> {
        Ok(self.async_fd())
    }

    fn create_comp_channel(&self) -> Result<ChannelId> {
        self.create_channel()
    }

    fn destroy_comp_channel(&self, channel: ChannelId) -> Result<()> {
        self.destroy_channel(channel)
    }

    fn comp_channel_fd(&self, channel: ChannelId) -> Result<RawFd> {
        self.channel_fd(channel)
    }

    fn get_cq_event(&self, channel: ChannelId) -> Result<Option<CqId>> {
        self.take_cq_event(channel)
    }

    fn ack_cq_events(&self, cq: CqId, n: u32) -> Result<()> {
        self.ack_events(cq, n)
    }

    fn create_qp_ex(
        &self,
        pd: PdId,
        attr: &QpInitAttr,
        ex: &crate::device::QpInitEx,
    ) -> Result<QpInfo> {
        match ex.xrcd {
            Some(x) if attr.qp_type == QpType::XrcRecv && ex.create_flags.is_empty() => {
                self.create_xrc_target(x)
            }
            Some(_) => Err(Error::InvalidArgument(format!(
                "create_qp_ex: an XRC domain is for XRC_RECV QPs without create flags, not {} \
                 with {:?}",
                attr.qp_type, ex.create_flags
            ))),
            None if *ex == crate::device::QpInitEx::default() => self.create_qp(pd, attr),
            None if ex.create_flags.is_empty() && ex.dc.is_some() => match ex.dc {
                Some(dc) => self.create_dc(pd, attr, dc),
                None => self.create_qp(pd, attr),
            },
            None => Err(Error::Unsupported(format!(
                "{} (verbs backend) does not support {:?}",
                self.name, ex
            ))),
        }
    }

    fn dct_number(&self, qp: QpId) -> Result<u32> {
        self.dct_number_verbs(qp)
    }

    fn open_xrcd(&self) -> Result<XrcdId> {
        self.open_xrcd_verbs()
    }

    fn close_xrcd(&self, xrcd: XrcdId) -> Result<()> {
        self.close_xrcd_verbs(xrcd)
    }

    fn create_srq_xrc(&self, pd: PdId, attr: &crate::device::XrcSrqInitAttr) -> Result<SrqInfo> {
        let (id, layout) = self.create_xrc_srq_verbs(pd, attr)?;
        Ok(SrqInfo { id, layout })
    }

    fn open_qp(&self, xrcd: XrcdId, qpn: u32) -> Result<QpId> {
        self.open_xrc_target(xrcd, qpn)
    }

    fn counters(&self, port: u8) -> Result<Vec<Counter>> {
        read_counters(std::path::Path::new(SYSFS_INFINIBAND), &self.name, port)
    }
}
