//! Completion channels and completion queues.

use mlx5_hw::CqId;
use mlx5_sim::kernel::UserCq;
use mlx5_sim::mem::DmaBuf;
use zerocopy::IntoBytes;

use crate::abi::{
    mlx5, take, CompChannelResp, CreateCq, CreateCqResp, DestroyCqResp, DestroyObj, ExCreateCq,
    ExCreateCqResp, Mlx5CreateCq, Mlx5CreateCqResp,
};
use crate::cmd::{Req, Resp};
use crate::context::{self, Cq, Object};
use crate::emu::Emu;
use crate::events::EventFile;
use crate::node::Node;
use crate::objects::{busy, uctx};

/// `CREATE_COMP_CHANNEL`: a new completion channel descriptor.
pub fn create_channel(emu: &mut Emu, node: &Node) -> Result<Resp, i32> {
    let fd = crate::events::new_channel(emu, node)?;
    Ok(Resp::of(CompChannelResp { fd: fd as u32 }.as_bytes(), &[]))
}

/// `ib_uverbs_ex_create_cq_flags`: timestamps, ignore overrun.
const CQ_FLAGS_TIMESTAMP: u32 = 1 << 0;
const CQ_FLAGS_IGNORE_OVERRUN: u32 = 1 << 1;

/// `CREATE_CQ` (legacy or extended) with mlx5's `struct mlx5_ib_create_cq`: the CQ lives in the
/// buffer and doorbell record libmlx5 allocated (`providers/mlx5/verbs.c` `create_cq`). The
/// checks are the kernel's (`drivers/infiniband/core/uverbs_cmd.c` `create_cq`,
/// `drivers/infiniband/hw/mlx5/cq.c` `mlx5_ib_create_cq`, `create_cq_user`): a completion
/// vector at or above `num_comp_vectors`, a channel that is not a completion channel, an
/// extended `comp_mask`, a CQE size other than 64 or 128, reserved bits, an unknown flag or more
/// than 2^22 entries are EINVAL; CQE compression, 128-byte padding, real-time timestamps and
/// unknown extended flags are EOPNOTSUPP (the device offers none); a buffer or record the
/// process has not mapped is EFAULT. `cqe` entries are rounded up to a power of two above it.
pub fn create(emu: &mut Emu, node: &Node, fd: i32, req: &Req) -> Result<Resp, i32> {
    let (user_handle, cqe, vector, channel, flags) = if req.ex {
        let (c, _) = take::<ExCreateCq>(req.core);
        if c.comp_mask != 0 {
            return Err(libc::EINVAL);
        }
        (c.user_handle, c.cqe, c.comp_vector, c.comp_channel, c.flags)
    } else {
        let (c, _) = take::<CreateCq>(req.core);
        (c.user_handle, c.cqe, c.comp_vector, c.comp_channel, 0)
    };
    if vector >= crate::objects::device::NUM_COMP_VECTORS {
        return Err(libc::EINVAL);
    }
    if flags & !(CQ_FLAGS_TIMESTAMP | CQ_FLAGS_IGNORE_OVERRUN) != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    let chan = if channel >= 0 {
        match emu.events.get(&channel) {
            Some(EventFile::Channel(c)) if !c.closed => Some(c.id),
            _ => return Err(libc::EINVAL),
        }
    } else {
        None
    };
    if cqe == 0 || cqe > (1 << 22) - 1 {
        return Err(libc::EINVAL);
    }
    let entries = (cqe + 1).next_power_of_two();
    if req.udata.len() < std::mem::offset_of!(Mlx5CreateCq, flags) {
        return Err(libc::EINVAL);
    }
    let (d, _) = take::<Mlx5CreateCq>(req.udata);
    if d.cqe_size != 64 && d.cqe_size != 128 {
        return Err(libc::EINVAL);
    }
    if d.reserved0 != 0 || d.reserved1 != 0 {
        return Err(libc::EINVAL);
    }
    let known = mlx5::CREATE_CQ_FLAGS_CQE_128B_PAD
        | mlx5::CREATE_CQ_FLAGS_UAR_PAGE_INDEX
        | mlx5::CREATE_CQ_FLAGS_REAL_TIME_TS;
    if d.flags & !known != 0 || d.flags & mlx5::CREATE_CQ_FLAGS_UAR_PAGE_INDEX != 0 {
        // No dynamic UAR page exists in this context to name.
        return Err(libc::EINVAL);
    }
    if d.cqe_comp_en != 0 || d.flags != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    let len = entries as u64 * d.cqe_size as u64;
    if !crate::sys::user_readable(d.buf_addr, len) || !crate::sys::user_readable(d.db_addr, 8) {
        return Err(libc::EFAULT);
    }
    let u = uctx(emu, fd)?;
    // SAFETY: both ranges are mapped (checked above); libmlx5 frees them only after the
    // destroy command returns (`mlx5_destroy_cq`), and the device stops using them when the CQ
    // is destroyed, here or at context close, as the kernel's pinned umem.
    let (buf, dbrec) = unsafe {
        (
            DmaBuf::user(d.buf_addr, len as usize),
            DmaBuf::user(d.db_addr, 8),
        )
    };
    let (Some(buf), Some(dbrec)) = (buf, dbrec) else {
        return Err(libc::EINVAL);
    };
    let cqn = node
        .dev
        .create_cq_user(UserCq {
            buf,
            dbrec,
            cqe_cnt: entries,
            cqe_size: d.cqe_size,
            channel: chan,
            arm_page: u.arm_page,
            user_index: u.cqe_version == 1,
            ignore_overrun: flags & CQ_FLAGS_IGNORE_OVERRUN != 0,
            timestamps: flags & CQ_FLAGS_TIMESTAMP != 0,
        })
        .map_err(crate::objects::errno)?;
    let h = u.insert(Object::Cq(Cq {
        cqn,
        user_handle,
        channel_fd: (channel >= 0).then_some(channel),
        comp_reported: 0,
        async_reported: 0,
    }));
    emu.cq_owner.insert(cqn, (fd, h));
    let base = CreateCqResp {
        cq_handle: h,
        cqe: entries - 1,
    };
    let drv = Mlx5CreateCqResp { cqn, reserved: 0 };
    if req.ex {
        let r = ExCreateCqResp {
            base,
            comp_mask: 0,
            response_length: std::mem::size_of::<ExCreateCqResp>().min(req.core_out) as u32,
        };
        return Ok(Resp::of(r.as_bytes(), drv.as_bytes()));
    }
    Ok(Resp::of(base.as_bytes(), drv.as_bytes()))
}

/// `DESTROY_CQ`: EBUSY while a QP or an XRC SRQ uses it; the response counts the completion
/// and asynchronous events the program read, which `ibv_destroy_cq` waits to see acknowledged
/// (rdma-core `cmd_cq.c` `ibv_cmd_destroy_cq`). Its queued events are dropped.
pub fn destroy(emu: &mut Emu, node: &Node, fd: i32, req: &Req) -> Result<Resp, i32> {
    let (d, _) = take::<DestroyObj>(req.core);
    let u = uctx(emu, fd)?;
    let cq = u.get(d.handle, context::cq)?;
    let (cqn, chan) = (cq.cqn, cq.channel_fd);
    busy(u, d.handle)?;
    node.dev
        .destroy_cq_user(CqId(cqn))
        .map_err(crate::objects::errno)?;
    let Some(Object::Cq(cq)) = u.objects.remove(&d.handle) else {
        return Err(libc::EINVAL);
    };
    emu.cq_owner.remove(&cqn);
    crate::events::forget_async(emu, fd, d.handle);
    if let Some(ch) = chan {
        crate::events::release_channel(emu, node, ch);
    }
    Ok(Resp::of(
        DestroyCqResp {
            comp_events_reported: cq.comp_reported,
            async_events_reported: cq.async_reported,
        }
        .as_bytes(),
        &[],
    ))
}
