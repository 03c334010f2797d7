//! `GET_CONTEXT`, `QUERY_DEVICE` (legacy and extended) and `QUERY_PORT`: what a ConnectX-5
//! under the kernel's `mlx5_ib` answers, with the software ConnectX's own limits
//! (`mlx5_sim::sizing`).

use std::os::fd::BorrowedFd;

use mlx5_hw::{Device, LinkLayer, PortState};
use mlx5_sim::sizing;
use zerocopy::IntoBytes;

use crate::abi::{
    mlx5, take, ExQueryDeviceResp, GetContextResp, Mlx5AllocUcontextReq, Mlx5AllocUcontextResp,
    Mlx5QueryDeviceResp, QueryDeviceResp, QueryPort, QueryPortResp,
};
use crate::cmd::{Req, Resp};
use crate::context::Ucontext;
use crate::emu::Emu;
use crate::node::{Node, FW_VER};
use crate::uar::{Uars, BF_REG_SIZE};

/// Completion vectors of the device (`num_comp_vectors`; `CREATE_CQ` refuses a vector at or
/// above it with EINVAL, kernel `ib_uverbs_create_cq`).
pub const NUM_COMP_VECTORS: u32 = 4;

/// `offsetof(struct mlx5_ib_alloc_ucontext_req_v2, max_cqe_version)`: the shortest v2 request
/// (kernel `mlx5_ib_alloc_ucontext`, `min_req_v2`); 8 bytes is the v0 request.
const MIN_REQ_V2: usize = 16;

/// `GET_CONTEXT` with mlx5's `struct mlx5_ib_alloc_ucontext_req_v2` (kernel
/// `drivers/infiniband/hw/mlx5/main.c` `mlx5_ib_alloc_ucontext`, `set_ucontext_resp`):
///
/// - a request of 8 bytes is v0, of 16 or more v2; anything else is EINVAL; flags other than
///   DEVX, a `comp_mask` or reserved bits are EOPNOTSUPP;
/// - DEVX (`MLX5_IB_ALLOC_UCTX_DEVX`) is refused with EOPNOTSUPP: the software ConnectX has no
///   DEVX object interface. libmlx5 then asks again without it (`mlx5_alloc_context`);
/// - `cqe_version` is the smaller of the device's (1) and the request's;
/// - `tot_bfregs` is the count asked for: this context has no dynamic UARs (it answers as a
///   kernel that ignores `lib_caps`'s `MLX5_LIB_CAP_DYN_UAR`, whose UAR allocation is an
///   ioctl method), so libmlx5 maps the static pages with `mmap` (`mlx5_set_context`);
///   `num_dyn_bfregs` is the kernel's [`DYN_BFREGS`](crate::uar::DYN_BFREGS), the registers
///   thread domains take a page at a time with `mmap` ([`crate::uar`]);
/// - `cmds_supp_uhw` announces the driver data of `QUERY_DEVICE` and `CREATE_AH` (the latter
///   returns the destination MAC, so libmlx5 needs no netlink neighbour lookup).
pub fn get_context(emu: &mut Emu, node: &Node, fd: i32, req: &Req) -> Result<Resp, i32> {
    if emu.contexts.get(&fd).ok_or(libc::EBADF)?.u.is_some() {
        return Err(libc::EINVAL);
    }
    let inlen = req.udata.len();
    let v2 = match inlen {
        8 => false,
        n if n >= MIN_REQ_V2 => true,
        _ => return Err(libc::EINVAL),
    };
    let size = std::mem::size_of::<Mlx5AllocUcontextReq>();
    if inlen > size && req.udata[size..].iter().any(|&b| b != 0) {
        return Err(libc::EOPNOTSUPP);
    }
    let (r, _) = take::<Mlx5AllocUcontextReq>(req.udata);
    if r.flags & !mlx5::ALLOC_UCTX_DEVX != 0
        || r.comp_mask != 0
        || r.reserved0 != 0
        || r.reserved1 != 0
        || r.reserved2 != 0
    {
        return Err(libc::EOPNOTSUPP);
    }
    if r.flags & mlx5::ALLOC_UCTX_DEVX != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    let cqe_version = if v2 { r.max_cqe_version.min(1) } else { 0 };
    // SAFETY: `fd` is the open command descriptor (the memfd) of this context, kept open by the
    // program for the duration of this call.
    let memfd = unsafe { BorrowedFd::borrow_raw(fd) };
    let uars = Uars::new(memfd, r.total_num_bfregs, r.num_low_latency_bfregs)?;
    let page0 = uars.page(0).ok_or(libc::ENOMEM)?.clone();
    let arm_page = node
        .dev
        .add_cq_arm_page(page0)
        .map_err(crate::objects::errno)?;
    let async_fd = match crate::events::new_async_file(emu, fd) {
        Ok(a) => a,
        Err(e) => {
            let _ = node.dev.remove_cq_arm_page(arm_page);
            return Err(e);
        }
    };
    let tot = uars.total();
    if let Some(c) = emu.contexts.get_mut(&fd) {
        c.u = Some(Ucontext::new(uars, arm_page, cqe_version, async_fd));
    }
    let core = GetContextResp {
        async_fd: async_fd as u32,
        num_comp_vectors: NUM_COMP_VECTORS,
    };
    let mut drv = Mlx5AllocUcontextResp {
        qp_tab_size: 1 << 17,
        bf_reg_size: BF_REG_SIZE,
        tot_bfregs: tot,
        cache_line_size: 64,
        max_sq_desc_sz: sizing::MAX_SQ_DESC_SZ as u16,
        max_rq_desc_sz: sizing::MAX_RQ_DESC_SZ as u16,
        max_send_wqebb: sizing::MAX_SEND_WQEBB,
        max_recv_wr: sizing::MAX_QP_WR,
        max_srq_recv_wr: sizing::MAX_QP_WR,
        num_ports: 1,
        cqe_version,
        cmds_supp_uhw: mlx5::CMDS_SUPP_UHW_QUERY_DEVICE | mlx5::CMDS_SUPP_UHW_CREATE_AH,
        log_uar_size: 12,
        num_uars_per_page: 1,
        num_dyn_bfregs: crate::uar::DYN_BFREGS,
        ..Default::default()
    };
    drv.response_length = std::mem::size_of::<Mlx5AllocUcontextResp>().min(req.udata_out) as u32;
    Ok(Resp::of(core.as_bytes(), drv.as_bytes()))
}

/// Take back a context whose response could not be written: its async descriptor closed, its
/// arm page forgotten (it holds no object yet).
pub fn undo_context(emu: &mut Emu, node: &Node, fd: i32) {
    let Some(u) = emu.contexts.get_mut(&fd).and_then(|c| c.u.take()) else {
        return;
    };
    let _ = node.dev.remove_cq_arm_page(u.arm_page);
    if let Some(a) = u.async_fd {
        let _ = crate::events::close(emu, a);
    }
}

fn base_attrs(node: &Node) -> Result<QueryDeviceResp, i32> {
    let a = node.dev.query_device().map_err(crate::objects::errno)?;
    let (major, minor, sub) = fw_parts(FW_VER);
    let guid = a.node_guid.to_be();
    let max_qp = a.max_qp;
    Ok(QueryDeviceResp {
        fw_ver: (major << 32) | (minor << 16) | sub,
        node_guid: guid,
        sys_image_guid: guid,
        max_mr_size: u64::MAX,
        page_size_cap: !0xfffu64,
        vendor_id: a.vendor_id,
        vendor_part_id: a.vendor_part_id,
        hw_ver: 0,
        max_qp,
        max_qp_wr: a.max_qp_wr,
        device_cap_flags: DEVICE_CAP_FLAGS,
        max_sge: a.max_sge,
        max_sge_rd: a.max_sge,
        max_cq: a.max_cq,
        max_cqe: a.max_cqe,
        max_mr: a.max_mr,
        max_pd: 1 << 24,
        max_qp_rd_atom: a.max_qp_rd_atom,
        max_ee_rd_atom: 0,
        max_res_rd_atom: a.max_qp_rd_atom.saturating_mul(max_qp),
        max_qp_init_rd_atom: a.max_qp_init_rd_atom,
        max_ee_init_rd_atom: 0,
        // IBV_ATOMIC_HCA: atomics in host byte order, what `mlx5_ib` reports when `mlx5_core`
        // selected host endianness (the software ConnectX's default).
        atomic_cap: 1,
        max_ee: 0,
        max_rdd: 0,
        max_mw: 0,
        max_raw_ipv6_qp: 0,
        max_raw_ethy_qp: 0,
        max_mcast_grp: 1 << 20,
        max_mcast_qp_attach: 240,
        max_total_mcast_qp_attach: 240 << 20,
        max_ah: i32::MAX as u32,
        max_fmr: 0,
        max_map_per_fmr: 0,
        max_srq: a.max_srq,
        max_srq_wr: a.max_srq_wr,
        max_srq_sge: sizing::MAX_RQ_DESC_SZ / 16 - 1,
        max_pkeys: 1,
        local_ca_ack_delay: 16,
        phys_port_cnt: a.phys_port_cnt,
        reserved: [0; 4],
    })
}

/// `device_cap_flags` (`enum ib_uverbs_device_cap_flags`): what the software ConnectX does —
/// bad P_Key / Q_Key counters, port-active events, a system image GUID, RNR NAKs, XRC.
const DEVICE_CAP_FLAGS: u32 = (1 << 1) | (1 << 2) | (1 << 10) | (1 << 11) | (1 << 12) | (1 << 20);

/// "16.35.0000" → (16, 35, 0).
fn fw_parts(v: &str) -> (u64, u64, u64) {
    let mut it = v.split('.').map(|p| p.parse::<u64>().unwrap_or(0) & 0xffff);
    (
        it.next().unwrap_or(0),
        it.next().unwrap_or(0),
        it.next().unwrap_or(0),
    )
}

/// `QUERY_DEVICE`: the legacy command answers the base attributes; the extended one the base
/// and the extended fields with `response_length` (rdma-core `cmd_device.c`
/// `ibv_cmd_query_device_any` copies a field only when the length covers it), and mlx5's driver
/// data (zeros: none of its offloads) when libmlx5 asks for it.
pub fn query_device(node: &Node, req: &Req) -> Result<Resp, i32> {
    let base = base_attrs(node)?;
    if !req.ex {
        return Ok(Resp::of(base.as_bytes(), &[]));
    }
    let (input, _) = take::<crate::abi::ExQueryDevice>(req.core);
    if input.comp_mask != 0 || input.reserved != 0 {
        return Err(libc::EINVAL);
    }
    let mut r = ExQueryDeviceResp {
        base,
        timestamp_mask: u64::MAX >> 1,
        hca_core_clock: mlx5_sim::cq::CORE_CLOCK_KHZ,
        ..Default::default()
    };
    r.response_length = std::mem::size_of::<ExQueryDeviceResp>().min(req.core_out) as u32;
    let mut drv = Mlx5QueryDeviceResp {
        response_length: std::mem::size_of::<Mlx5QueryDeviceResp>().min(req.udata_out) as u32,
        ..Default::default()
    };
    crate::objects::dc::query_device_caps(&mut drv.caps);
    Ok(Resp::of(r.as_bytes(), drv.as_bytes()))
}

/// `QUERY_PORT` of port 1 (any other is EINVAL): a RoCE port (link layer Ethernet) with one
/// GID, no LID, the port state and MTU of the device.
pub fn query_port(node: &Node, req: &Req) -> Result<Resp, i32> {
    let (q, _) = take::<QueryPort>(req.core);
    if q.port_num != 1 {
        return Err(libc::EINVAL);
    }
    let p = node.dev.query_port(1).map_err(crate::objects::errno)?;
    // `enum ib_port_state` and the physical state (3 Disabled, 4 PortConfigurationTraining,
    // 5 LinkUp; IBTA Vol 1 §14.2.5.6 PortInfo).
    let (state, phys) = match p.state {
        PortState::Down => (1, 3),
        PortState::Init => (2, 4),
        PortState::Armed => (3, 4),
        PortState::Active => (4, 5),
        // A state a later mlx5-hw adds: reported as down until this learns it.
        _ => (1, 3),
    };
    let r = QueryPortResp {
        // IB_PORT_CM_SUP | IB_PORT_IP_BASED_GIDS, what mlx5_ib reports for RoCE.
        port_cap_flags: (1 << 16) | (1 << 26),
        max_msg_sz: 1 << 30,
        gid_tbl_len: p.gid_tbl_len,
        pkey_tbl_len: 1,
        lid: p.lid,
        state,
        max_mtu: p.max_mtu as u8,
        active_mtu: p.active_mtu as u8,
        max_vl_num: 1,
        active_width: 2,
        active_speed: 32,
        phys_state: phys,
        link_layer: match p.link_layer {
            LinkLayer::InfiniBand => 1,
            _ => 2,
        },
        ..Default::default()
    };
    Ok(Resp::of(r.as_bytes(), &[]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn firmware_version_packs_as_the_kernel_does() {
        assert_eq!(fw_parts("16.35.0000"), (16, 35, 0));
        assert_eq!(fw_parts("bad"), (0, 0, 0));
    }
}
