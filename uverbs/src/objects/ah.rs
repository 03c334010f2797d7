//! Address handles and multicast groups.

use mlx5_hw::{AhId, Device, Gid, PdId, QpId};
use zerocopy::IntoBytes;

use crate::abi::{take, CreateAh, Handle, Mcast, Mlx5CreateAhResp};
use crate::cmd::{Req, Resp};
use crate::context::{self, Ah, Object};
use crate::emu::Emu;
use crate::node::Node;
use crate::objects::uctx;

/// `offsetofend(struct mlx5_ib_create_ah_resp, dmac)`: what the kernel's `mlx5_ib_create_ah`
/// copies out.
const AH_RESP_LEN: usize = 10;

/// `CREATE_AH` on the RoCE port: the destination MAC in mlx5's driver data, which libmlx5 puts
/// in the address vector it builds itself (rdma-core `providers/mlx5/verbs.c` `mlx5_create_ah`
/// sends this command only on RoCE, when `cmds_supp_uhw` has `CREATE_AH`). An address without
/// a GRH is EINVAL on RoCE (kernel `rdma_check_ah_attr`), as is a port other than 1 or a GID
/// the device cannot reach.
pub fn create(emu: &mut Emu, node: &Node, fd: i32, req: &Req) -> Result<Resp, i32> {
    let (c, _) = take::<CreateAh>(req.core);
    if c.attr.port_num != 1 || c.attr.is_global == 0 {
        return Err(libc::EINVAL);
    }
    let u = uctx(emu, fd)?;
    let pd: PdId = u.get(c.pd_handle, context::pd)?.id;
    let attr = mlx5_hw::AhAttr {
        dlid: c.attr.dlid,
        sl: c.attr.sl,
        src_path_bits: c.attr.src_path_bits,
        static_rate: c.attr.static_rate,
        port_num: 1,
        grh: Some(mlx5_hw::GlobalRoute {
            dgid: Gid(c.attr.dgid),
            flow_label: crate::objects::qp::flow_label(c.attr.flow_label),
            sgid_index: c.attr.sgid_index,
            hop_limit: c.attr.hop_limit,
            traffic_class: c.attr.traffic_class,
        }),
    };
    let ah = node
        .dev
        .create_ah(pd, &attr)
        .map_err(crate::objects::errno)?;
    let h = u.insert(Object::Ah(Ah {
        id: ah.id,
        pd: c.pd_handle,
    }));
    let mut dmac = [0u8; 6];
    dmac.copy_from_slice(&ah.av[20..26]);
    let drv = Mlx5CreateAhResp {
        response_length: AH_RESP_LEN as u32,
        dmac,
        reserved: [0; 6],
    };
    Ok(Resp::of(
        Handle { handle: h }.as_bytes(),
        &drv.as_bytes()[..AH_RESP_LEN],
    ))
}

/// `DESTROY_AH`.
pub fn destroy(emu: &mut Emu, node: &Node, fd: i32, req: &Req) -> Result<Resp, i32> {
    let (h, _) = take::<Handle>(req.core);
    let u = uctx(emu, fd)?;
    let id: AhId = u.get(h.handle, context::ah)?.id;
    node.dev.destroy_ah(id).map_err(crate::objects::errno)?;
    u.objects.remove(&h.handle);
    Ok(Resp::default())
}

/// `ATTACH_MCAST` / `DETACH_MCAST` of a UD QP (the device's checks: a multicast GID, a UD QP,
/// EINVAL otherwise; IPv4-mapped groups only, EOPNOTSUPP for others).
pub fn attach(emu: &mut Emu, node: &Node, fd: i32, req: &Req, on: bool) -> Result<Resp, i32> {
    let (m, _) = take::<Mcast>(req.core);
    let u = uctx(emu, fd)?;
    let qpn = u.get(m.qp_handle, context::qp)?.qpn;
    let gid = Gid(m.gid);
    let r = if on {
        node.dev.attach_mcast(QpId(qpn), &gid, m.mlid)
    } else {
        node.dev.detach_mcast(QpId(qpn), &gid, m.mlid)
    };
    r.map_err(crate::objects::errno)?;
    Ok(Resp::default())
}
