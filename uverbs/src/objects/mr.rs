//! Protection domains and memory regions.

use mlx5_hw::{AccessFlags, Device, MrId, PdId};
use zerocopy::IntoBytes;

use crate::abi::{take, Handle, Mlx5AllocPdResp, RegMr, RegMrResp};
use crate::cmd::{Req, Resp};
use crate::context::{self, Mr, Object, Pd};
use crate::emu::Emu;
use crate::node::Node;
use crate::objects::{busy, uctx};

/// `ALLOC_PD`: the PD's handle, and its number in mlx5's driver data (`pdn`).
pub fn alloc_pd(emu: &mut Emu, node: &Node, fd: i32, _req: &Req) -> Result<Resp, i32> {
    let u = uctx(emu, fd)?;
    let id = node.dev.alloc_pd().map_err(crate::objects::errno)?;
    let h = u.insert(Object::Pd(Pd { id }));
    Ok(Resp::of(
        Handle { handle: h }.as_bytes(),
        Mlx5AllocPdResp { pdn: id.0 }.as_bytes(),
    ))
}

/// `DEALLOC_PD`: EBUSY while an MR, QP, SRQ or AH of the context uses it (the kernel's PD use
/// count, `ib_dealloc_pd_user`).
pub fn dealloc_pd(emu: &mut Emu, node: &Node, fd: i32, req: &Req) -> Result<Resp, i32> {
    let (h, _) = take::<Handle>(req.core);
    let u = uctx(emu, fd)?;
    let id = u.get(h.handle, context::pd)?.id;
    busy(u, h.handle)?;
    node.dev.dealloc_pd(id).map_err(crate::objects::errno)?;
    u.objects.remove(&h.handle);
    Ok(Resp::default())
}

/// Access bits the kernel accepts and may ignore (`IB_UVERBS_ACCESS_OPTIONAL_RANGE`: relaxed
/// ordering and what may follow it, bits 20..29; `<rdma/ib_user_verbs.h>`).
const ACCESS_OPTIONAL: u32 = 0x3ff << 20;

/// `REG_MR`: the region's handle and keys. The checks are the kernel's: remote write or atomic
/// access without local write is EINVAL (`ib_check_mr_access`); on-demand paging is
/// EOPNOTSUPP (the software ConnectX has none); an address range the process has not mapped is
/// EFAULT (`ib_umem_get`). The software ConnectX addresses a region by its virtual address, so
/// an I/O virtual address other than the start (`ibv_reg_mr_iova`) is EOPNOTSUPP.
pub fn reg_mr(emu: &mut Emu, node: &Node, fd: i32, req: &Req) -> Result<Resp, i32> {
    let (r, _) = take::<RegMr>(req.core);
    let bits = r.access_flags & !ACCESS_OPTIONAL;
    let access = AccessFlags::from_bits(bits).ok_or(libc::EINVAL)?;
    if access.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC)
        && !access.contains(AccessFlags::LOCAL_WRITE)
    {
        return Err(libc::EINVAL);
    }
    if access.intersects(AccessFlags::ON_DEMAND | AccessFlags::MW_BIND | AccessFlags::ZERO_BASED) {
        return Err(libc::EOPNOTSUPP);
    }
    if r.hca_va != r.start {
        return Err(libc::EOPNOTSUPP);
    }
    if r.start.checked_add(r.length).is_none() {
        return Err(libc::EINVAL);
    }
    if !crate::sys::user_readable(r.start, r.length) {
        return Err(libc::EFAULT);
    }
    let u = uctx(emu, fd)?;
    let pd: PdId = u.get(r.pd_handle, context::pd)?.id;
    // SAFETY: the range is mapped (checked above), and stays so until the region is
    // deregistered (dereg_mr) or its context closed, both of which remove it from the device
    // first: pages the program unmaps before are moved for the device and unmapped only then
    // (`crate::pinned`, the kernel's pinned pages).
    let mr = unsafe {
        node.dev
            .reg_mr(pd, r.start as usize as *mut u8, r.length as usize, access)
    }
    .map_err(crate::objects::errno)?;
    crate::pinned::registered(mr.id.0, r.start, r.length);
    let h = u.insert(Object::Mr(Mr {
        id: mr.id,
        pd: r.pd_handle,
    }));
    Ok(Resp::of(
        RegMrResp {
            mr_handle: h,
            lkey: mr.lkey,
            rkey: mr.rkey,
        }
        .as_bytes(),
        &[],
    ))
}

/// `DEREG_MR`.
pub fn dereg_mr(emu: &mut Emu, node: &Node, fd: i32, req: &Req) -> Result<Resp, i32> {
    let (h, _) = take::<Handle>(req.core);
    let u = uctx(emu, fd)?;
    let id: MrId = u.get(h.handle, context::mr)?.id;
    node.dev.dereg_mr(id).map_err(crate::objects::errno)?;
    crate::pinned::deregistered(id.0);
    u.objects.remove(&h.handle);
    Ok(Resp::default())
}
