//! The mlx5-only part of the backend: creating CQs and QPs through mlx5dv, and reading the
//! rings, doorbell records and UAR registers back with `mlx5dv_init_obj` (rdma-core
//! `providers/mlx5/mlx5.c` `mlx5dv_get_qp` / `_cq` / `_srq` / `_av`).

use std::ffi::c_int;

use super::ffi::{check, dv, ibv, null_error, RdmaCore};
use crate::attr::QpCap;
use crate::device::{CqInitAttr, QpInitAttr};
use crate::error::{Error, Result};
use crate::layout::{BfLayout, CqLayout, QpLayout, SrqLayout, WqLayout};

/// Whether QPs of this context can be expected to get a BlueFlame register (`bf.size > 0`).
///
/// rdma-core after v44 reports it (`MLX5DV_CONTEXT_FLAGS_BLUEFLAME`); v44 has no such flag, and
/// then the answer is "yes unless `MLX5_SHUT_UP_BF` is set to something other than `0`", the
/// variable with which libmlx5 maps the doorbell page uncached (DPDK doc/guides/nics/mlx5.rst,
/// `tx_db_nc`). The per-QP truth is always `QpLayout::bf.size`.
pub(super) fn blueflame_expected(rdma: &RdmaCore, ctx: *mut ibv::ibv_context) -> bool {
    let mut c = dv::mlx5dv_context::default();
    // SAFETY: `ctx` is an open mlx5 context; `c` is a v44-sized struct and comp_mask 0 asks
    // for no optional field.
    let ret = unsafe { rdma.mlx5dv_query_device(ctx.cast::<dv::ibv_context>(), &mut c) };
    if ret == 0 && c.flags & dv::MLX5DV_CONTEXT_FLAGS_BLUEFLAME != 0 {
        return true;
    }
    !matches!(std::env::var("MLX5_SHUT_UP_BF"), Ok(v) if v != "0")
}

/// `mlx5dv_create_cq` with the CQE size and, if asked, `IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN`
/// (`docs/sources.md` §11).
pub(super) fn create_cq(
    rdma: &RdmaCore,
    ctx: *mut ibv::ibv_context,
    attr: &CqInitAttr,
    channel: *mut ibv::ibv_comp_channel,
    wc_flags: u64,
) -> Result<*mut ibv::ibv_cq> {
    // SAFETY: all-zero is a valid `ibv_cq_init_attr_ex` (integers and NULL pointers).
    let mut a: ibv::ibv_cq_init_attr_ex = unsafe { std::mem::zeroed() };
    a.cqe = attr.cqe;
    a.channel = channel;
    // With `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP` the raw device clock is in every CQE
    // (rdma-core cq.c `mlx5_cq_read_wc_completion_ts` reads `cqe64->timestamp`).
    a.wc_flags = wc_flags;
    if attr.ignore_overrun {
        a.comp_mask |= ibv::ibv_cq_init_attr_mask::IBV_CQ_INIT_ATTR_MASK_FLAGS.0;
        a.flags |= ibv::ibv_create_cq_attr_flags::IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN.0;
    }
    let mut d = dv::mlx5dv_cq_init_attr {
        comp_mask: dv::MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE,
        // Checked to be 64 or 128 by the caller.
        cqe_size: attr.cqe_size as u16,
        ..Default::default()
    };
    // SAFETY: `ctx` is an open mlx5 context; both attribute structs are valid for the call;
    // the verbs pointers are cast to mlx5dv-sys's opaque types of the same C structs.
    let cq = unsafe {
        rdma.mlx5dv_create_cq(
            ctx.cast::<dv::ibv_context>(),
            (&mut a as *mut ibv::ibv_cq_init_attr_ex).cast::<dv::ibv_cq_init_attr_ex>(),
            &mut d,
        )
    };
    if cq.is_null() {
        return Err(null_error("mlx5dv_create_cq"));
    }
    // `ibv_cq_ex_to_cq` is a plain cast: `struct ibv_cq_ex` begins with the fields of
    // `struct ibv_cq` (verbs.h).
    Ok(cq.cast::<ibv::ibv_cq>())
}

/// The CQ's ring, doorbell record and UAR from `mlx5dv_init_obj(MLX5DV_OBJ_CQ)`.
pub(super) fn cq_layout(
    rdma: &RdmaCore,
    cq: *mut ibv::ibv_cq,
    ignore_overrun: bool,
) -> Result<CqLayout> {
    // SAFETY: all-zero is a valid `mlx5dv_cq` (pointers and integers).
    let mut out: dv::mlx5dv_cq = unsafe { std::mem::zeroed() };
    let mut obj = dv::mlx5dv_obj::default();
    obj.cq.in_ = cq.cast::<dv::ibv_cq>();
    obj.cq.out = &mut out;
    // SAFETY: `cq` is a live mlx5 CQ; `obj` points at `out`, which outlives the call.
    check("mlx5dv_init_obj(CQ)", unsafe {
        rdma.mlx5dv_init_obj(&mut obj, dv::MLX5DV_OBJ_CQ)
    })?;
    Ok(CqLayout {
        buf: out.buf.cast::<u8>(),
        dbrec: out.dbrec,
        cqe_cnt: out.cqe_cnt,
        cqe_size: out.cqe_size,
        cq_uar: out.cq_uar.cast::<u8>(),
        cqn: out.cqn,
        ignore_overrun,
    })
}

/// The SRQ's ring and doorbell record from `mlx5dv_init_obj(MLX5DV_OBJ_SRQ)`.
pub(super) fn srq_layout(
    rdma: &RdmaCore,
    srq: *mut ibv::ibv_srq,
    max_sge: u32,
) -> Result<SrqLayout> {
    // SAFETY: all-zero is a valid `mlx5dv_srq`.
    let mut out: dv::mlx5dv_srq = unsafe { std::mem::zeroed() };
    out.comp_mask = dv::MLX5DV_SRQ_MASK_SRQN;
    let mut obj = dv::mlx5dv_obj::default();
    obj.srq.in_ = srq.cast::<dv::ibv_srq>();
    obj.srq.out = &mut out;
    // SAFETY: `srq` is a live mlx5 SRQ; `out` outlives the call.
    check("mlx5dv_init_obj(SRQ)", unsafe {
        rdma.mlx5dv_init_obj(&mut obj, dv::MLX5DV_OBJ_SRQ)
    })?;
    if out.comp_mask & dv::MLX5DV_SRQ_MASK_SRQN == 0 {
        return Err(Error::Unsupported(
            "mlx5dv_init_obj did not report the SRQ number (libmlx5 too old)".into(),
        ));
    }
    Ok(SrqLayout {
        buf: out.buf.cast::<u8>(),
        dbrec: out.dbrec,
        stride: out.stride,
        wqe_cnt: out.tail + 1,
        head: out.head,
        tail: out.tail,
        srqn: out.srqn,
        // Not XRC: its CQEs name the QP (the XRC SRQ's is set by its creator).
        cqe_index: out.srqn,
        max_sge,
    })
}

/// Creates an mlx5 QP on its own thread domain and parent domain, so that it gets a dedicated
/// BlueFlame register (rdma-core `mlx5_alloc_td` attaches a dedicated bfreg to the TD; a QP
/// created on a parent domain with that TD uses it: `docs/sources.md` §6). Scatter-to-CQE is
/// disabled so received data always lands in the posted buffers (`docs/sources.md` §8).
///
/// Returns the QP, its parent domain and its thread domain; `a.cap` is updated with the
/// capabilities granted.
pub(super) fn create_qp(
    rdma: &RdmaCore,
    ctx: *mut ibv::ibv_context,
    pd: *mut ibv::ibv_pd,
    a: &mut ibv::ibv_qp_init_attr_ex,
) -> Result<(*mut ibv::ibv_qp, *mut ibv::ibv_pd, *mut ibv::ibv_td)> {
    let mut d = dv::mlx5dv_qp_init_attr {
        comp_mask: dv::MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS,
        create_flags: dv::MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE,
        ..Default::default()
    };
    create_qp_dv(rdma, ctx, pd, a, &mut d)
}

/// [`create_qp`] with the mlx5 attributes `d` (a DC initiator's, `verbs::device::dc`).
pub(super) fn create_qp_dv(
    rdma: &RdmaCore,
    ctx: *mut ibv::ibv_context,
    pd: *mut ibv::ibv_pd,
    a: &mut ibv::ibv_qp_init_attr_ex,
    d: &mut dv::mlx5dv_qp_init_attr,
) -> Result<(*mut ibv::ibv_qp, *mut ibv::ibv_pd, *mut ibv::ibv_td)> {
    let mut td_attr = ibv::ibv_td_init_attr { comp_mask: 0 };
    // SAFETY: `ctx` is open; `td_attr` is valid for the call.
    let td = match unsafe { ibv::ibv_alloc_td(ctx, &mut td_attr) } {
        Some(td) if !td.is_null() => td,
        _ => return Err(null_error("ibv_alloc_td (dedicated BlueFlame register)")),
    };
    // SAFETY: all-zero is a valid `ibv_parent_domain_init_attr` (NULL pointers, no callbacks).
    let mut pa: ibv::ibv_parent_domain_init_attr = unsafe { std::mem::zeroed() };
    pa.pd = pd;
    pa.td = td;
    // SAFETY: `ctx` is open; `pd` and `td` are live objects of it.
    let parent = match unsafe { ibv::ibv_alloc_parent_domain(ctx, &mut pa) } {
        Some(p) if !p.is_null() => p,
        _ => {
            let e = null_error("ibv_alloc_parent_domain");
            // SAFETY: `td` was allocated above and nothing uses it.
            unsafe { ibv::ibv_dealloc_td(td) };
            return Err(e);
        }
    };
    a.pd = parent;
    a.comp_mask |= ibv::ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD.0;
    // SAFETY: `ctx` is open; `a` and `d` are valid for the call; the verbs pointer types are
    // cast to mlx5dv-sys's opaque types of the same C structs.
    let qp = unsafe {
        rdma.mlx5dv_create_qp(
            ctx.cast::<dv::ibv_context>(),
            (a as *mut ibv::ibv_qp_init_attr_ex).cast::<dv::ibv_qp_init_attr_ex>(),
            d,
        )
    };
    if qp.is_null() {
        let e = null_error("mlx5dv_create_qp");
        // SAFETY: both domains were allocated above and no QP uses them.
        unsafe { dealloc_domains(rdma, parent, td) };
        return Err(e);
    }
    Ok((qp.cast::<ibv::ibv_qp>(), parent, td))
}

/// Deallocates a QP's parent domain, then its thread domain (parent domains hold a reference
/// on the TD, rdma-core `mlx5_dealloc_pd`/`mlx5_dealloc_td`).
///
/// # Safety
/// Each pointer is NULL or a live domain that no object uses any more.
pub(super) unsafe fn dealloc_domains(
    rdma: &RdmaCore,
    parent: *mut ibv::ibv_pd,
    td: *mut ibv::ibv_td,
) {
    if !parent.is_null() {
        // SAFETY: guaranteed by the caller.
        let r: c_int = unsafe { rdma.ibv_dealloc_pd(parent) };
        if r != 0 {
            tracing::warn!(ret = r, "ibv_dealloc_pd(parent domain) failed");
        }
    }
    if !td.is_null() {
        // SAFETY: guaranteed by the caller; the parent domain that held it is gone.
        let r = unsafe { ibv::ibv_dealloc_td(td) };
        if r != 0 {
            tracing::warn!(ret = r, "ibv_dealloc_td failed");
        }
    }
}

/// The QP's rings, doorbell record and BlueFlame register from
/// `mlx5dv_init_obj(MLX5DV_OBJ_QP)`.
pub(super) fn qp_layout(
    rdma: &RdmaCore,
    qp: *mut ibv::ibv_qp,
    attr: &QpInitAttr,
    cap: &QpCap,
) -> Result<QpLayout> {
    // SAFETY: all-zero is a valid `mlx5dv_qp`; comp_mask 0 asks for no optional field.
    let mut out: dv::mlx5dv_qp = unsafe { std::mem::zeroed() };
    let mut obj = dv::mlx5dv_obj::default();
    obj.qp.in_ = qp.cast::<dv::ibv_qp>();
    obj.qp.out = &mut out;
    // SAFETY: `qp` is a live mlx5 QP; `out` outlives the call.
    check("mlx5dv_init_obj(QP)", unsafe {
        rdma.mlx5dv_init_obj(&mut obj, dv::MLX5DV_OBJ_QP)
    })?;
    // SAFETY: `qp` is live.
    let qpn = unsafe { (*qp).qp_num };
    Ok(QpLayout {
        qpn,
        qp_type: attr.qp_type,
        dbrec: out.dbrec,
        sq: WqLayout {
            buf: out.sq.buf.cast::<u8>(),
            wqe_cnt: out.sq.wqe_cnt,
            stride: out.sq.stride,
        },
        rq: WqLayout {
            buf: out.rq.buf.cast::<u8>(),
            wqe_cnt: out.rq.wqe_cnt,
            stride: out.rq.stride,
        },
        bf: BfLayout {
            reg: out.bf.reg.cast::<u8>(),
            size: out.bf.size,
            // Every QP of this backend is created on a thread domain of its own (`create_qp`
            // above), and rdma-core gives a TD a dedicated bfreg (`mlx5_alloc_td` →
            // `mlx5_attach_dedicated_uar`; the TD's allocation fails rather than falling back
            // to a shared one when none is left, `docs/hardware.md`): no other QP copies into
            // this register, so BlueFlame is safe without a lock.
            shared: false,
        },
        max_inline_data: cap.max_inline_data,
        max_send_sge: cap.max_send_sge,
        max_recv_sge: cap.max_recv_sge,
        sq_sig_all: attr.sq_sig_all,
        uses_srq: attr.srq.is_some(),
    })
}

/// The AH's 48-byte address vector from `mlx5dv_init_obj(MLX5DV_OBJ_AH)` (`mlx5dv_ah.av`).
pub(super) fn ah_av(rdma: &RdmaCore, ah: *mut ibv::ibv_ah) -> Result<[u8; 48]> {
    // SAFETY: all-zero is a valid `mlx5dv_ah`.
    let mut out: dv::mlx5dv_ah = unsafe { std::mem::zeroed() };
    let mut obj = dv::mlx5dv_obj::default();
    obj.ah.in_ = ah.cast::<dv::ibv_ah>();
    obj.ah.out = &mut out;
    // SAFETY: `ah` is a live mlx5 AH; `out` outlives the call.
    check("mlx5dv_init_obj(AH)", unsafe {
        rdma.mlx5dv_init_obj(&mut obj, dv::MLX5DV_OBJ_AH)
    })?;
    if out.av.is_null() {
        return Err(Error::Unsupported(
            "mlx5dv_init_obj returned no address vector".into(),
        ));
    }
    // SAFETY: `av` points at the AH's `struct mlx5_wqe_av`, 48 bytes (`docs/sources.md` §3), live
    // as long as the AH; it is copied out at once.
    Ok(unsafe { std::ptr::read_unaligned(out.av.cast::<[u8; 48]>()) })
}

/// What a receive CQE of an XRC target carries for the XRC SRQ `srq` in `srqn_uidx`
/// ([`SrqLayout::cqe_index`]): its number `srqn` with CQE version 0; with version 1
/// (`MLX5DV_CONTEXT_FLAGS_CQE_V1`, what libmlx5 negotiates with mlx5_ib), the user index
/// libmlx5 gave it at creation. rdma-core has no verb that returns that index, so it is read
/// from the header libmlx5 keeps in front of every SRQ: `struct mlx5_srq` starts with
/// `struct mlx5_resource rsc` (`enum mlx5_rsc_type type; uint32_t rsn`, "This struct must be
/// first": the CQE version 1 poll finds SRQs and QPs through it, `cq.c` `mlx5_find_uidx`),
/// followed by the `struct verbs_srq` whose `ibv_srq` the verbs return; for an XRC SRQ
/// `mlx5_create_srq_ex` sets `rsc.type = MLX5_RSC_TYPE_XSRQ` and `rsc.rsn` to the user index
/// (rdma-core `providers/mlx5/verbs.c` `mlx5_create_xrc_srq`, `mlx5.h`). The type is checked:
/// any other value means another layout, refused with an error rather than guessed.
pub(super) fn xrc_srq_cqe_index(
    rdma: &RdmaCore,
    ctx: *mut ibv::ibv_context,
    srq: *mut ibv::ibv_srq,
    srqn: u32,
) -> Result<u32> {
    let mut c = dv::mlx5dv_context::default();
    // SAFETY: `ctx` is an open mlx5 context; `c` is a v44-sized struct and comp_mask 0 asks
    // for no optional field.
    let ret = unsafe { rdma.mlx5dv_query_device(ctx.cast::<dv::ibv_context>(), &mut c) };
    if ret != 0 {
        return Err(Error::Verbs {
            call: "mlx5dv_query_device",
            source: std::io::Error::from_raw_os_error(ret.abs()),
        });
    }
    if c.flags & dv::MLX5DV_CONTEXT_FLAGS_CQE_V1 == 0 {
        return Ok(srqn);
    }
    /// `MLX5_RSC_TYPE_XSRQ` (rdma-core `providers/mlx5/mlx5.h` `enum mlx5_rsc_type`).
    const MLX5_RSC_TYPE_XSRQ: u32 = 1;
    // SAFETY: `srq` is a live XRC SRQ libmlx5 created: the `ibv_srq` is the first member of
    // the `verbs_srq` at offset 8 of its `struct mlx5_srq` (an 8-byte `mlx5_resource` before
    // it, the `verbs_srq` 8-byte aligned), so the 8 bytes before it are that header, inside
    // the same allocation; read unaligned-safe, once, before anything else uses the SRQ.
    let (kind, rsn) = unsafe {
        let hdr = srq.cast::<u8>().sub(8).cast::<[u32; 2]>();
        let [kind, rsn] = std::ptr::read_unaligned(hdr);
        (kind, rsn)
    };
    if kind != MLX5_RSC_TYPE_XSRQ {
        return Err(Error::Unsupported(format!(
            "XRC SRQ {srqn:#x}: libmlx5's resource header reads type {kind}, not \
             MLX5_RSC_TYPE_XSRQ: its user index (what CQE version 1 carries for the SRQ) \
             cannot be learnt from this rdma-core"
        )));
    }
    Ok(rsn)
}
