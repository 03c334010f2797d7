//! Shared receive queues (basic and XRC) and XRC domains.

use mlx5_hw::{CqId, Device, PdId, SrqId, SrqInitAttr, XrcSrqInitAttr};
use mlx5_sim::kernel::UserSrq;
use mlx5_sim::mem::DmaBuf;
use mlx5_sim::sizing::{self, SrqGeometry};
use zerocopy::IntoBytes;

use crate::abi::{
    mlx5, take, CreateSrq, CreateSrqResp, CreateXsrq, DestroyObj, EventsReported, Handle,
    Mlx5CreateSrq, Mlx5CreateSrqResp, ModifySrq, OpenXrcd, QuerySrqResp,
};
use crate::cmd::{Req, Resp};
use crate::context::{self, Object, Srq, Xrcd};
use crate::emu::Emu;
use crate::node::Node;
use crate::objects::{busy, uctx};

/// `enum ib_srq_type`.
const SRQT_BASIC: u32 = 0;
const SRQT_XRC: u32 = 1;

/// `CREATE_SRQ` and `CREATE_XSRQ` with mlx5's `struct mlx5_ib_create_srq`: the WQEs live in the
/// buffer libmlx5 allocated and linked (`providers/mlx5/srq.c` `mlx5_alloc_srq_buf`). Sizes are
/// the kernel's (`drivers/infiniband/hw/mlx5/srq.c` `mlx5_ib_create_srq`): `max_wr + 1` WQEs
/// rounded up to a power of two, each the next segment plus `max_sge` scatter entries rounded up
/// to a power of two of at least 32 bytes. `max_wr` at or above the device's limit, a WQE above
/// `max_rq_desc_sz`, reserved bits and an XRC SRQ's user index out of range are EINVAL; WQE
/// signatures and tag matching are EOPNOTSUPP; an unmapped buffer or record is EFAULT.
pub fn create(emu: &mut Emu, node: &Node, fd: i32, req: &Req, n: u32) -> Result<Resp, i32> {
    let (user_handle, ty, pd_h, max_wr, max_sge, xrc) = if n == crate::abi::cmd::CREATE_XSRQ {
        let (x, _) = take::<CreateXsrq>(req.core);
        (
            x.user_handle,
            x.srq_type,
            x.pd_handle,
            x.max_wr,
            x.max_sge,
            Some((x.xrcd_handle, x.cq_handle)),
        )
    } else {
        let (c, _) = take::<CreateSrq>(req.core);
        (
            c.user_handle,
            SRQT_BASIC,
            c.pd_handle,
            c.max_wr,
            c.max_sge,
            None,
        )
    };
    let xrc = match ty {
        SRQT_BASIC => None,
        SRQT_XRC => xrc,
        _ => return Err(libc::EOPNOTSUPP),
    };
    let (d, _) = take::<Mlx5CreateSrq>(req.udata);
    if d.reserved0 != 0 || d.reserved1 != 0 {
        return Err(libc::EINVAL);
    }
    if d.flags & mlx5::SRQ_FLAG_SIGNATURE != 0 || d.flags != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    if max_wr >= sizing::MAX_QP_WR {
        return Err(libc::EINVAL);
    }
    let max = (max_wr + 1).next_power_of_two();
    let desc = (16 + max_sge.checked_mul(16).ok_or(libc::EINVAL)?)
        .next_power_of_two()
        .max(32);
    if desc > sizing::MAX_RQ_DESC_SZ {
        return Err(libc::EINVAL);
    }
    let geom = SrqGeometry {
        wqe_cnt: max,
        stride: desc,
        max_sge: (desc - 16) / 16,
    };
    let len = max as u64 * desc as u64;
    if !crate::sys::user_readable(d.buf_addr, len) || !crate::sys::user_readable(d.db_addr, 4) {
        return Err(libc::EFAULT);
    }
    let u = uctx(emu, fd)?;
    let pd: PdId = u.get(pd_h, context::pd)?.id;
    let xrc_attr = match xrc {
        Some((xh, ch)) => {
            let uidx = if u.cqe_version == 1 {
                if d.uidx == mlx5::DEFAULT_UIDX || d.uidx & !0x00ff_ffff != 0 {
                    return Err(libc::EINVAL);
                }
                Some(d.uidx)
            } else {
                None
            };
            let attr = XrcSrqInitAttr {
                xrcd: u.get(xh, context::xrcd)?.id,
                cq: CqId(u.get(ch, context::cq)?.cqn),
                attr: SrqInitAttr {
                    max_wr,
                    max_sge,
                    srq_limit: 0,
                },
            };
            Some((attr, uidx))
        }
        None => None,
    };
    // SAFETY: both ranges are mapped (checked above); libmlx5 frees them only after the
    // destroy command returns, and the device stops using them when the SRQ is destroyed.
    let (buf, dbrec) = unsafe {
        (
            DmaBuf::user(d.buf_addr, len as usize),
            DmaBuf::user(d.db_addr, 4),
        )
    };
    let (Some(buf), Some(dbrec)) = (buf, dbrec) else {
        return Err(libc::EINVAL);
    };
    let srqn = node
        .dev
        .create_srq_user(
            pd,
            UserSrq {
                buf,
                dbrec,
                geom,
                limit: 0,
                xrc: xrc_attr,
            },
        )
        .map_err(crate::objects::errno)?;
    let h = u.insert(Object::Srq(Srq {
        srqn,
        user_handle,
        pd: pd_h,
        xrc,
        max_wr: max - 1,
        max_sge,
        limit: 0,
        events_reported: 0,
    }));
    emu.srq_owner.insert(srqn, (fd, h));
    let r = CreateSrqResp {
        srq_handle: h,
        max_wr: max - 1,
        max_sge,
        srqn,
    };
    Ok(Resp::of(
        r.as_bytes(),
        Mlx5CreateSrqResp { srqn, reserved: 0 }.as_bytes(),
    ))
}

/// `IB_SRQ_MAX_WR` and `IB_SRQ_LIMIT` (`enum ib_srq_attr_mask`).
const SRQ_MAX_WR: u32 = 1 << 0;
const SRQ_LIMIT: u32 = 1 << 1;

/// `MODIFY_SRQ`: arming the limit (below the SRQ's size, else EINVAL); resizing is EINVAL, as
/// mlx5 refuses it (`mlx5_ib_modify_srq`).
pub fn modify(emu: &mut Emu, node: &Node, fd: i32, req: &Req) -> Result<Resp, i32> {
    let (m, _) = take::<ModifySrq>(req.core);
    if m.attr_mask & SRQ_MAX_WR != 0 || m.attr_mask & !(SRQ_MAX_WR | SRQ_LIMIT) != 0 {
        return Err(libc::EINVAL);
    }
    let u = uctx(emu, fd)?;
    let s = u.get_mut(m.srq_handle, context::srq_mut)?;
    if m.attr_mask & SRQ_LIMIT != 0 {
        node.dev
            .arm_srq_limit(SrqId(s.srqn), m.srq_limit)
            .map_err(crate::objects::errno)?;
        s.limit = m.srq_limit;
    }
    Ok(Resp::default())
}

/// `QUERY_SRQ`.
pub fn query(emu: &mut Emu, fd: i32, req: &Req) -> Result<Resp, i32> {
    let (q, _) = take::<DestroyObj>(req.core);
    let u = uctx(emu, fd)?;
    let s = u.get(q.handle, context::srq)?;
    let r = QuerySrqResp {
        max_wr: s.max_wr,
        max_sge: s.max_sge,
        srq_limit: s.limit,
        reserved: 0,
    };
    Ok(Resp::of(r.as_bytes(), &[]))
}

/// `DESTROY_SRQ`: EBUSY while QPs use it; the response counts the asynchronous events read.
pub fn destroy(emu: &mut Emu, node: &Node, fd: i32, req: &Req) -> Result<Resp, i32> {
    let (d, _) = take::<DestroyObj>(req.core);
    let u = uctx(emu, fd)?;
    let srqn = u.get(d.handle, context::srq)?.srqn;
    busy(u, d.handle)?;
    node.dev
        .destroy_srq_user(SrqId(srqn))
        .map_err(crate::objects::errno)?;
    let Some(Object::Srq(s)) = u.objects.remove(&d.handle) else {
        return Err(libc::EINVAL);
    };
    emu.srq_owner.remove(&srqn);
    crate::events::forget_async(emu, fd, d.handle);
    Ok(Resp::of(
        EventsReported {
            events_reported: s.events_reported,
        }
        .as_bytes(),
        &[],
    ))
}

/// `OPEN_XRCD`: with `fd` -1 a new domain; with a file, the domain of its inode, shared by every
/// context that opens it (created with `O_CREAT`, refused with `O_EXCL` when it exists, EINVAL
/// otherwise; a descriptor that is not open is EBADF; kernel `ib_uverbs_open_xrcd`).
pub fn open_xrcd(emu: &mut Emu, node: &Node, fd: i32, req: &Req) -> Result<Resp, i32> {
    let (o, _) = take::<OpenXrcd>(req.core);
    let inode = if o.fd as i32 == -1 {
        None
    } else {
        // SAFETY: `struct stat` is plain data, written by fstat.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if crate::sys::fstat(o.fd as i32, &mut st) != 0 {
            return Err(libc::EBADF);
        }
        Some((st.st_dev, st.st_ino))
    };
    let oflags = o.oflags as i32;
    let id = match inode.and_then(|k| emu.xrcd_inodes.get_mut(&k)) {
        Some((id, users)) => {
            if oflags & libc::O_EXCL != 0 {
                return Err(libc::EINVAL);
            }
            *users += 1;
            *id
        }
        None => {
            if inode.is_some() && oflags & libc::O_CREAT == 0 {
                return Err(libc::EINVAL);
            }
            let id = node.dev.open_xrcd().map_err(crate::objects::errno)?;
            if let Some(k) = inode {
                emu.xrcd_inodes.insert(k, (id, 1));
            }
            id
        }
    };
    let u = uctx(emu, fd)?;
    let h = u.insert(Object::Xrcd(Xrcd { id, inode }));
    Ok(Resp::of(Handle { handle: h }.as_bytes(), &[]))
}

/// `CLOSE_XRCD`: EBUSY while a QP or SRQ of the context uses it; a domain shared by inode is
/// closed on the device with its last handle.
pub fn close_xrcd(emu: &mut Emu, node: &Node, fd: i32, req: &Req) -> Result<Resp, i32> {
    let (h, _) = take::<Handle>(req.core);
    let u = uctx(emu, fd)?;
    let x = u.get(h.handle, context::xrcd)?;
    let (id, inode) = (x.id, x.inode);
    busy(u, h.handle)?;
    u.objects.remove(&h.handle);
    release_xrcd(emu, node, id, inode)?;
    Ok(Resp::default())
}

/// Give back one handle of a domain.
pub fn release_xrcd(
    emu: &mut Emu,
    node: &Node,
    id: mlx5_hw::XrcdId,
    inode: Option<(u64, u64)>,
) -> Result<(), i32> {
    if let Some(k) = inode {
        if let Some((_, users)) = emu.xrcd_inodes.get_mut(&k) {
            *users -= 1;
            if *users > 0 {
                return Ok(());
            }
            emu.xrcd_inodes.remove(&k);
        }
    }
    node.dev.close_xrcd(id).map_err(crate::objects::errno)
}
