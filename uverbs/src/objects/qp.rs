//! Queue pairs: create (legacy and extended), open, query, modify (legacy and extended),
//! destroy.

use mlx5_hw::{
    AccessFlags, AhAttr, AttrMask, CqId, Device, Gid, GlobalRoute, MigState, Mtu, PdId, QpAttr,
    QpCap, QpId, QpInitAttr, QpState, QpType, SrqId,
};
use mlx5_sim::kernel::UserQp;
use mlx5_sim::mem::DmaBuf;
use mlx5_sim::sizing::{self, QpGeometry};
use zerocopy::IntoBytes;

use crate::abi::{
    mlx5, take, CreateQp, CreateQpResp, DestroyObj, EventsReported, ExCreateQp, ExCreateQpResp,
    ExModifyQp, ExModifyQpResp, Mlx5CreateQp, Mlx5CreateQpResp, ModifyQp, OpenQp, QpDest, QueryQp,
    QueryQpResp,
};
use crate::cmd::{Req, Resp};
use crate::context::{self, Object, Qp};
use crate::emu::Emu;
use crate::node::Node;
use crate::objects::{dc, uctx};
use crate::uar::Uars;

/// `enum ib_uverbs_qp_type` values.
fn qp_type(t: u8) -> Result<QpType, i32> {
    Ok(match t {
        2 => QpType::Rc,
        3 => QpType::Uc,
        4 => QpType::Ud,
        9 => QpType::XrcSend,
        10 => QpType::XrcRecv,
        // RAW_PACKET (8) needs a raw Ethernet port, which the software ConnectX has not;
        // DRIVER (0xff) with mlx5's DC flags is taken before (`dc.rs`).
        _ => return Err(libc::EOPNOTSUPP),
    })
}

/// Flags of `struct mlx5_ib_create_qp` the device accepts: scatter-to-CQE (a permission the
/// device may leave unused, libmlx5 handles CQEs either way, `cq.c`).
const QP_FLAGS_OK: u32 = mlx5::QP_FLAG_SCATTER_CQE | mlx5::QP_FLAG_ALLOW_SCATTER_CQE;

/// `CREATE_QP` (legacy, or extended without RSS or create flags) with mlx5's
/// `struct mlx5_ib_create_qp`: the queues live in the buffer libmlx5 allocated (RQ at offset 0,
/// SQ after it, rdma-core `providers/mlx5/verbs.c` `mlx5_calc_wq_size`) and the doorbell record
/// it names; the QP rings the register `alloc_bfreg` picks ([`Uars::alloc`]), or the dynamic
/// register it names with `MLX5_QP_FLAG_BFREG_INDEX` ([`Uars::dyn_register`]); with CQE version
/// 1 its CQEs carry `uidx`. The checks are the kernel's (`drivers/infiniband/hw/mlx5/qp.c`
/// `set_rq_size`, `set_user_buf_size`, `create_user_qp`; `mlx5_ib.h` `get_qp_user_index`): a
/// count that is not a power of two or above the device's queue size, an RQ stride below one
/// scatter entry or above `max_rq_desc_sz`, a user index out of range or missing for the CQE
/// version, a dynamic register not mapped and a UAR page index (an ioctl-allocated UAR) are
/// EINVAL; a buffer or record the process has not
/// mapped is EFAULT; WQE signatures, tunnel offloads, raw packet QPs, RSS and create
/// flags are EOPNOTSUPP (the device has none of them).
pub fn create(emu: &mut Emu, node: &Node, fd: i32, req: &Req) -> Result<Resp, i32> {
    let c = if req.ex {
        let (x, _) = take::<ExCreateQp>(req.core);
        if x.comp_mask != 0 || x.create_flags != 0 || x.source_qpn != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        x.base
    } else {
        take::<CreateQp>(req.core).0
    };
    let (d, _) = take::<Mlx5CreateQp>(req.udata);
    // DC (IB_QPT_DRIVER with mlx5's DC flags): a DCT has no memory of the program's, a DCI
    // is made below like any QP and then made an initiator (`dc.rs`).
    let dc = dc::kind(&c, &d, req.udata.len())?;
    if let Some(mlx5_hw::DcInit::Target { access_key }) = dc {
        return dc::create_dct(emu, node, fd, req, &c, &d, access_key);
    }
    let (t, dc_flags) = match dc {
        Some(_) => (QpType::Dci, dc::DCI_FLAGS),
        None => (qp_type(c.qp_type)?, 0),
    };
    let flags = d.flags & !mlx5::QP_FLAG_BFREG_INDEX;
    if flags & !(QP_FLAGS_OK | dc_flags) != 0 {
        if flags & mlx5::QP_FLAG_UAR_PAGE_INDEX != 0 {
            return Err(libc::EINVAL);
        }
        return Err(libc::EOPNOTSUPP);
    }
    // A register of a dynamic page (a thread domain's, `crate::uar`), else one `alloc_bfreg`
    // picks at the register step below.
    let dyn_bfreg = (d.flags & mlx5::QP_FLAG_BFREG_INDEX != 0).then_some(d.bfreg_index);
    let u = uctx(emu, fd)?;
    let cqe_v1 = u.cqe_version == 1;
    // The user index (kernel `get_qp_user_index`, `verify_assign_uidx`).
    let uidx = if cqe_v1 {
        if d.uidx == mlx5::DEFAULT_UIDX || d.uidx & !0x00ff_ffff != 0 {
            return Err(libc::EINVAL);
        }
        Some(d.uidx)
    } else {
        if d.uidx != mlx5::DEFAULT_UIDX {
            return Err(libc::EINVAL);
        }
        None
    };
    if t == QpType::XrcRecv {
        // The `pd_handle` field names the XRC domain (kernel `create_qp`, IB_QPT_XRC_TGT).
        let x = u.get(c.pd_handle, context::xrcd)?.id;
        let qpn = node
            .dev
            .create_xrc_target(x)
            .map_err(crate::objects::errno)?;
        let h = u.insert(Object::Qp(Qp {
            qpn,
            user_handle: c.user_handle,
            qp_type: t,
            pd: None,
            send_cq: None,
            recv_cq: None,
            srq: None,
            xrcd: Some(c.pd_handle),
            bfreg: None,
            cap: QpCap::default(),
            sq_sig_all: false,
            events_reported: 0,
        }));
        emu.qp_owner.insert(qpn, (fd, h));
        return Ok(created(req, h, qpn, QpCap::default(), 0));
    }
    let pd: PdId = u.get(c.pd_handle, context::pd)?.id;
    let send_cq = u.get(c.send_cq_handle, context::cq)?.cqn;
    let has_rq = c.is_srq == 0 && t != QpType::XrcSend;
    let recv_cq = if t == QpType::XrcSend {
        send_cq
    } else {
        u.get(c.recv_cq_handle, context::cq)?.cqn
    };
    let srq = if c.is_srq != 0 && t != QpType::XrcSend {
        Some(u.get(c.srq_handle, context::srq)?.srqn)
    } else {
        None
    };
    // A DCI holds the SRQ it names without the device's using it (`dc.rs`).
    let dev_srq = srq.filter(|_| t != QpType::Dci);
    let geom = geometry(&c, &d, has_rq)?;
    let mut cap = QpCap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    };
    if !has_rq {
        cap.max_recv_wr = 0;
        cap.max_recv_sge = 0;
    }
    if (geom.buf_size > 0 && !crate::sys::user_readable(d.buf_addr, geom.buf_size as u64))
        || !crate::sys::user_readable(d.db_addr, 8)
    {
        return Err(libc::EFAULT);
    }
    // SAFETY: both ranges are mapped (checked above); libmlx5 frees them only after the
    // destroy command returns (`mlx5_destroy_qp`), and the device stops using them when the QP
    // is destroyed, here or at context close, as with the kernel's pinned umem.
    let (buf, dbrec) = unsafe {
        (
            if geom.buf_size > 0 {
                Some(DmaBuf::user(d.buf_addr, geom.buf_size as usize).ok_or(libc::EINVAL)?)
            } else {
                None
            },
            DmaBuf::user(d.db_addr, 8).ok_or(libc::EINVAL)?,
        )
    };
    let (bfreg, register) = match dyn_bfreg {
        Some(i) => (None, u.uars.dyn_register(i)?),
        None => {
            let n = u.uars.alloc();
            let Some(r) = u.uars.register(n) else {
                u.uars.free(n);
                return Err(libc::ENOMEM);
            };
            (Some(n), r)
        }
    };
    let attr = QpInitAttr {
        qp_type: t,
        send_cq: CqId(send_cq),
        recv_cq: CqId(recv_cq),
        srq: dev_srq.map(SrqId),
        cap,
        sq_sig_all: c.sq_sig_all != 0,
    };
    let qpn = match node.dev.create_qp_user(
        pd,
        &attr,
        UserQp {
            buf,
            dbrec,
            geom,
            register,
            uidx,
        },
    ) {
        Ok(q) => q,
        Err(e) => {
            if let Some(n) = bfreg {
                u.uars.free(n);
            }
            return Err(crate::objects::errno(e));
        }
    };
    if let Some(dc) = dc {
        if let Err(e) = dc::adopt_dci(node, qpn, dc) {
            if let Some(n) = bfreg {
                u.uars.free(n);
            }
            return Err(e);
        }
    }
    let h = u.insert(Object::Qp(Qp {
        qpn,
        user_handle: c.user_handle,
        qp_type: t,
        pd: Some(c.pd_handle),
        send_cq: Some(c.send_cq_handle),
        recv_cq: (t != QpType::XrcSend).then_some(c.recv_cq_handle),
        srq: (srq.is_some()).then_some(c.srq_handle),
        xrcd: None,
        bfreg,
        cap,
        sq_sig_all: c.sq_sig_all != 0,
        events_reported: 0,
    }));
    emu.qp_owner.insert(qpn, (fd, h));
    // A dynamic register's QP gets no index back (kernel `create_user_qp`: `bfregn` is
    // `MLX5_IB_INVALID_BFREG`, which `adjust_bfregn` passes through; libmlx5 uses its own
    // register, `verbs.c` `map_uuar`).
    let index = bfreg.map_or(mlx5::INVALID_BFREG, Uars::libmlx5_index);
    Ok(created(req, h, qpn, cap, index))
}

/// The queue geometry the create command's driver data gives (kernel `set_rq_size`,
/// `set_user_buf_size`).
fn geometry(c: &CreateQp, d: &Mlx5CreateQp, has_rq: bool) -> Result<QpGeometry, i32> {
    if c.max_recv_wr > sizing::MAX_QP_WR {
        return Err(libc::EINVAL);
    }
    let (rq_cnt, rq_stride) = if has_rq && d.rq_wqe_count > 0 {
        if !d.rq_wqe_count.is_power_of_two()
            || d.rq_wqe_count > sizing::MAX_QP_WR
            || d.rq_wqe_shift < 4
            || (1u32 << d.rq_wqe_shift.min(31)) > sizing::MAX_RQ_DESC_SZ
        {
            return Err(libc::EINVAL);
        }
        (d.rq_wqe_count, 1u32 << d.rq_wqe_shift)
    } else {
        (0, 0)
    };
    if d.sq_wqe_count > 0
        && (!d.sq_wqe_count.is_power_of_two() || d.sq_wqe_count > sizing::MAX_SEND_WQEBB)
    {
        return Err(libc::EINVAL);
    }
    let rq_bytes = rq_cnt * rq_stride;
    Ok(QpGeometry {
        sq_wqe_cnt: d.sq_wqe_count,
        sq_wqe_size: sizing::SEND_WQE_BB,
        rq_wqe_cnt: rq_cnt,
        rq_stride,
        sq_offset: rq_bytes,
        buf_size: rq_bytes + d.sq_wqe_count * sizing::SEND_WQE_BB,
        // What a WQE may hold is bounded by its DS count, not by the create request (a
        // ConnectX reads what the WQE says): the largest WQE of the device.
        cap: QpCap {
            max_send_wr: d.sq_wqe_count,
            max_recv_wr: rq_cnt,
            max_send_sge: (sizing::MAX_SQ_DESC_SZ - 16) / 16,
            max_recv_sge: rq_stride / 16,
            max_inline_data: sizing::MAX_SQ_DESC_SZ - 16 - 4,
        },
    })
}

/// The create response: the capabilities as asked (libmlx5 replaces the send and receive work
/// request counts and receive scatter entries by its own, `create_qp`), the register index.
pub(super) fn created(req: &Req, h: u32, qpn: u32, cap: QpCap, bfreg_index: u32) -> Resp {
    let base = CreateQpResp {
        qp_handle: h,
        qpn,
        max_send_wr: cap.max_send_wr,
        max_recv_wr: cap.max_recv_wr,
        max_send_sge: cap.max_send_sge,
        max_recv_sge: cap.max_recv_sge,
        max_inline_data: cap.max_inline_data,
        reserved: 0,
    };
    let drv = Mlx5CreateQpResp {
        bfreg_index,
        ..Default::default()
    };
    if req.ex {
        let r = ExCreateQpResp {
            base,
            comp_mask: 0,
            response_length: std::mem::size_of::<ExCreateQpResp>().min(req.core_out) as u32,
        };
        return Resp::of(r.as_bytes(), drv.as_bytes());
    }
    Resp::of(base.as_bytes(), drv.as_bytes())
}

/// `OPEN_QP`: another handle on an XRC target QP of a domain (kernel `ib_uverbs_open_qp`; the
/// `pd_handle` field names the domain); the last handle destroys it.
pub fn open(emu: &mut Emu, node: &Node, fd: i32, req: &Req) -> Result<Resp, i32> {
    let (o, _) = take::<OpenQp>(req.core);
    if o.qp_type != 10 {
        return Err(libc::EINVAL);
    }
    let u = uctx(emu, fd)?;
    let x = u.get(o.pd_handle, context::xrcd)?.id;
    let id = node.dev.open_qp(x, o.qpn).map_err(crate::objects::errno)?;
    let h = u.insert(Object::Qp(Qp {
        qpn: id.0,
        user_handle: o.user_handle,
        qp_type: QpType::XrcRecv,
        pd: None,
        send_cq: None,
        recv_cq: None,
        srq: None,
        xrcd: Some(o.pd_handle),
        bfreg: None,
        cap: QpCap::default(),
        sq_sig_all: false,
        events_reported: 0,
    }));
    let base = CreateQpResp {
        qp_handle: h,
        qpn: o.qpn,
        ..Default::default()
    };
    Ok(Resp::of(base.as_bytes(), &[]))
}

/// The flow label as the device keeps it: `mlx5_ib` writes the 20-bit `flow_label` field of
/// the QP's address path (`drivers/infiniband/hw/mlx5/qp.c` `mlx5_set_path`, `MLX5_SET` keeps
/// the field's low bits) and uverbs checks nothing before it; UCX passes 0xffffffff for its
/// automatic label (`UCX_IB_FLOW_LABEL=auto`).
pub fn flow_label(v: u32) -> u32 {
    v & 0x000f_ffff
}

fn dest_to_ah(d: &QpDest) -> AhAttr {
    AhAttr {
        dlid: d.dlid,
        sl: d.sl,
        src_path_bits: d.src_path_bits,
        static_rate: d.static_rate,
        port_num: d.port_num,
        grh: (d.is_global != 0).then_some(GlobalRoute {
            dgid: Gid(d.dgid),
            flow_label: flow_label(d.flow_label),
            sgid_index: d.sgid_index,
            hop_limit: d.hop_limit,
            traffic_class: d.traffic_class,
        }),
    }
}

fn ah_to_dest(a: &AhAttr) -> QpDest {
    let mut d = QpDest {
        dlid: a.dlid,
        sl: a.sl,
        src_path_bits: a.src_path_bits,
        static_rate: a.static_rate,
        port_num: a.port_num,
        ..Default::default()
    };
    if let Some(g) = &a.grh {
        d.is_global = 1;
        d.dgid = g.dgid.0;
        d.flow_label = g.flow_label;
        d.sgid_index = g.sgid_index;
        d.hop_limit = g.hop_limit;
        d.traffic_class = g.traffic_class;
    }
    d
}

/// The legacy modify's attribute bits (`IB_USER_LEGACY_LAST_QP_ATTR_MASK` = `IB_QP_DEST_QPN`).
const LEGACY_MASK: u32 = (1 << 21) - 1;

/// `MODIFY_QP` (legacy or extended): through the device's one state table
/// (`mlx5_hw::qp_state`, the kernel's `qp_state_table`), whose refusals carry the kernel's
/// errno. Attribute bits beyond the command's are EOPNOTSUPP.
pub fn modify(emu: &mut Emu, node: &Node, fd: i32, req: &Req) -> Result<Resp, i32> {
    let (m, rate_limit) = if req.ex {
        let (x, _) = take::<ExModifyQp>(req.core);
        (x.base, Some(x.rate_limit))
    } else {
        (take::<ModifyQp>(req.core).0, None)
    };
    let allowed = if req.ex {
        LEGACY_MASK | AttrMask::RATE_LIMIT.bits()
    } else {
        LEGACY_MASK
    };
    if m.attr_mask & !allowed != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    let u = uctx(emu, fd)?;
    let o = u.get(m.qp_handle, context::qp)?;
    let (qpn, qp_type) = (o.qpn, o.qp_type);
    let mask = ignored_for(qp_type, AttrMask::from_bits_truncate(m.attr_mask));
    let dct = dc::is_dct(node, qpn);
    let to_rtr = mask.contains(AttrMask::STATE) && m.qp_state == QpState::Rtr as u8;
    if dct {
        dc::check_dct_modify(to_rtr, req)?;
    }
    let mut a = QpAttr::default();
    if mask.contains(AttrMask::STATE) {
        a.qp_state = QpState::from_u8(m.qp_state).ok_or(libc::EINVAL)?;
    }
    if mask.contains(AttrMask::CUR_STATE) {
        a.cur_qp_state = QpState::from_u8(m.cur_qp_state).ok_or(libc::EINVAL)?;
    }
    if mask.contains(AttrMask::PATH_MTU) {
        a.path_mtu = Mtu::from_u8(m.path_mtu).ok_or(libc::EINVAL)?;
    }
    if mask.contains(AttrMask::PATH_MIG_STATE) {
        a.path_mig_state = MigState::from_u8(m.path_mig_state).ok_or(libc::EINVAL)?;
    }
    a.qkey = m.qkey;
    a.rq_psn = m.rq_psn;
    a.sq_psn = m.sq_psn;
    a.dest_qp_num = m.dest_qp_num;
    a.qp_access_flags = AccessFlags::from_bits_truncate(m.qp_access_flags);
    a.pkey_index = m.pkey_index;
    a.alt_pkey_index = m.alt_pkey_index;
    a.en_sqd_async_notify = m.en_sqd_async_notify != 0;
    a.max_rd_atomic = m.max_rd_atomic;
    a.max_dest_rd_atomic = m.max_dest_rd_atomic;
    a.min_rnr_timer = m.min_rnr_timer;
    a.port_num = m.port_num;
    a.timeout = m.timeout;
    a.retry_cnt = m.retry_cnt;
    a.rnr_retry = m.rnr_retry;
    a.alt_port_num = m.alt_port_num;
    a.alt_timeout = m.alt_timeout;
    a.ah_attr = dest_to_ah(&m.dest);
    a.alt_ah_attr = dest_to_ah(&m.alt_dest);
    a.rate_limit = rate_limit.unwrap_or(0);
    node.dev
        .modify_qp(QpId(qpn), &a, mask)
        .map_err(crate::objects::errno)?;
    if req.ex {
        let r = ExModifyQpResp {
            comp_mask: 0,
            response_length: std::mem::size_of::<ExModifyQpResp>().min(req.core_out) as u32,
        };
        if dct {
            return dc::dct_modified(node, qpn, to_rtr, req, r);
        }
        return Ok(Resp::of(r.as_bytes(), &[]));
    }
    Ok(Resp::default())
}

/// `mask` without the bits the kernel ignores for a QP of `qp_type` before its state table
/// sees them: an XRC initiator's responder attributes (`MAX_DEST_RD_ATOMIC`, `MIN_RNR_TIMER`),
/// an XRC target's requester ones (`MAX_QP_RD_ATOMIC`, `RETRY_CNT`, `RNR_RETRY`), which
/// programs written for RC pass (perftest's XRC connect does; kernel
/// `drivers/infiniband/core/uverbs_cmd.c` `modify_qp_mask`).
fn ignored_for(qp_type: QpType, mask: AttrMask) -> AttrMask {
    match qp_type {
        QpType::XrcSend => mask - (AttrMask::MAX_DEST_RD_ATOMIC | AttrMask::MIN_RNR_TIMER),
        QpType::XrcRecv => {
            mask - (AttrMask::MAX_QP_RD_ATOMIC | AttrMask::RETRY_CNT | AttrMask::RNR_RETRY)
        }
        _ => mask,
    }
}

/// `QUERY_QP`: the device's attributes, the capabilities granted at creation.
pub fn query(emu: &mut Emu, node: &Node, fd: i32, req: &Req) -> Result<Resp, i32> {
    let (q, _) = take::<QueryQp>(req.core);
    let u = uctx(emu, fd)?;
    let o = u.get(q.qp_handle, context::qp)?;
    let a = node
        .dev
        .query_qp(QpId(o.qpn))
        .map_err(crate::objects::errno)?;
    let r = QueryQpResp {
        dest: ah_to_dest(&a.ah_attr),
        alt_dest: ah_to_dest(&a.alt_ah_attr),
        max_send_wr: o.cap.max_send_wr,
        max_recv_wr: o.cap.max_recv_wr,
        max_send_sge: o.cap.max_send_sge,
        max_recv_sge: o.cap.max_recv_sge,
        max_inline_data: o.cap.max_inline_data,
        qkey: a.qkey,
        rq_psn: a.rq_psn,
        sq_psn: a.sq_psn,
        dest_qp_num: a.dest_qp_num,
        qp_access_flags: a.qp_access_flags.bits(),
        pkey_index: a.pkey_index,
        alt_pkey_index: a.alt_pkey_index,
        qp_state: a.qp_state as u8,
        cur_qp_state: a.cur_qp_state as u8,
        path_mtu: a.path_mtu as u8,
        path_mig_state: a.path_mig_state as u8,
        sq_draining: a.sq_draining as u8,
        max_rd_atomic: a.max_rd_atomic,
        max_dest_rd_atomic: a.max_dest_rd_atomic,
        min_rnr_timer: a.min_rnr_timer,
        port_num: a.port_num,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        rnr_retry: a.rnr_retry,
        alt_port_num: a.alt_port_num,
        alt_timeout: a.alt_timeout,
        sq_sig_all: o.sq_sig_all as u8,
        reserved: [0; 5],
    };
    Ok(Resp::of(r.as_bytes(), &[]))
}

/// `DESTROY_QP`: the device stops touching its queues; the response counts the asynchronous
/// events the program read (`ibv_destroy_qp` waits for them to be acknowledged).
pub fn destroy(emu: &mut Emu, node: &Node, fd: i32, req: &Req) -> Result<Resp, i32> {
    let (d, _) = take::<DestroyObj>(req.core);
    let u = uctx(emu, fd)?;
    let qpn = u.get(d.handle, context::qp)?.qpn;
    node.dev
        .destroy_qp_user(QpId(qpn))
        .map_err(crate::objects::errno)?;
    let Some(Object::Qp(q)) = u.objects.remove(&d.handle) else {
        return Err(libc::EINVAL);
    };
    if let Some(n) = q.bfreg {
        u.uars.free(n);
    }
    if emu.qp_owner.get(&qpn) == Some(&(fd, d.handle)) {
        emu.qp_owner.remove(&qpn);
    }
    crate::events::forget_async(emu, fd, d.handle);
    Ok(Resp::of(
        EventsReported {
            events_reported: q.events_reported,
        }
        .as_bytes(),
        &[],
    ))
}
