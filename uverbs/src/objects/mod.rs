//! The uverbs objects, one module per family, and what they share: the context of a command
//! descriptor, the kernel's "still in use" refusal, and the teardown of a closed descriptor.

pub mod ah;
pub mod cq;
pub mod dc;
pub mod device;
pub mod mr;
pub mod qp;
pub mod srq;

use mlx5_hw::{AhId, CqId, Device, MrId, PdId, QpId, SrqId};

use crate::context::{self, Context, Object, Ucontext};
use crate::emu::Emu;

/// The user context of command descriptor `fd` (EINVAL before `GET_CONTEXT`).
pub fn uctx(emu: &mut Emu, fd: i32) -> Result<&mut Ucontext, i32> {
    emu.contexts
        .get_mut(&fd)
        .and_then(|c| c.u.as_mut())
        .ok_or(libc::EINVAL)
}

/// EBUSY while another object of the context holds a reference to object `h` (the kernel's use
/// counts on PDs, CQs, SRQs and XRC domains).
pub fn busy(u: &Ucontext, h: u32) -> Result<(), i32> {
    if u.objects.values().any(|o| context::uses(o, h)) {
        return Err(libc::EBUSY);
    }
    Ok(())
}

/// A command descriptor was closed: destroy everything made on it, users before what they
/// use, as the kernel's `ib_uverbs_cleanup_ucontext` does; the device then touches none of the
/// program's memory from this context.
pub fn teardown(emu: &mut Emu, c: Context) {
    let Some(mut u) = c.u else { return };
    release(emu, c.fd, &mut u);
    for f in emu.events.values_mut() {
        if let crate::events::EventFile::Async(a) = f {
            if a.ctx_fd == c.fd {
                a.queue.clear();
                a.ctx_fd = -1;
            }
        }
    }
}

/// The device died (`IBV_EVENT_DEVICE_FATAL`, queued on every context already): the kernel
/// removes it and disassociates every open context, destroying their hardware objects at
/// once (kernel `drivers/infiniband/core/uverbs_main.c` `ib_uverbs_remove_one` →
/// `uverbs_destroy_ufile_hw(.., RDMA_REMOVE_DRIVER_REMOVE)`), so that nothing touches the
/// program's memory any more, whatever the program frees next; the descriptors stay open, the
/// asynchronous events stay readable, and every later command fails with EIO (`crate::cmd`).
pub fn disassociate(emu: &mut Emu) {
    let fds: Vec<i32> = emu.contexts.keys().copied().collect();
    for fd in fds {
        let Some(mut u) = emu.contexts.get_mut(&fd).and_then(|c| c.u.take()) else {
            continue;
        };
        release(emu, fd, &mut u);
        if let Some(c) = emu.contexts.get_mut(&fd) {
            c.u = Some(u);
        }
    }
}

/// Destroy every object of context `fd` (users before what they use) and its CQ arm page.
fn release(emu: &mut Emu, fd: i32, u: &mut crate::context::Ucontext) {
    let Some(node) = emu.node.clone() else { return };
    let order = |o: &Object| match o {
        Object::Qp(_) => 0,
        Object::Srq(_) => 1,
        Object::Cq(_) => 2,
        Object::Ah(_) => 3,
        Object::Mr(_) => 4,
        Object::Xrcd(_) => 5,
        Object::Pd(_) => 6,
    };
    let mut all: Vec<(u32, Object)> = std::mem::take(&mut u.objects).into_iter().collect();
    all.sort_by_key(|(h, o)| (order(o), *h));
    for (h, o) in all {
        let r = match o {
            Object::Qp(q) => {
                if emu.qp_owner.get(&q.qpn) == Some(&(fd, h)) {
                    emu.qp_owner.remove(&q.qpn);
                }
                node.dev.destroy_qp_user(QpId(q.qpn))
            }
            Object::Srq(s) => {
                emu.srq_owner.remove(&s.srqn);
                node.dev.destroy_srq_user(SrqId(s.srqn))
            }
            Object::Cq(q) => {
                emu.cq_owner.remove(&q.cqn);
                let r = node.dev.destroy_cq_user(CqId(q.cqn));
                if let Some(ch) = q.channel_fd {
                    crate::events::release_channel(emu, &node, ch);
                }
                r
            }
            Object::Ah(a) => node.dev.destroy_ah(AhId(a.id.0)),
            Object::Mr(m) => {
                let r = node.dev.dereg_mr(MrId(m.id.0));
                crate::pinned::deregistered(m.id.0);
                r
            }
            Object::Xrcd(x) => srq::release_xrcd(emu, &node, x.id, x.inode)
                .map_err(|e| mlx5_hw::Error::InvalidArgument(format!("errno {e}"))),
            Object::Pd(p) => node.dev.dealloc_pd(PdId(p.id.0)),
        };
        if let Err(e) = r {
            tracing::warn!(error = %e, handle = h, "closing a context: an object could not be destroyed");
        }
    }
    // Removed already when the device died and the context was disassociated.
    if let Err(e) = node.dev.remove_cq_arm_page(u.arm_page) {
        if !node.dev.is_fatal() {
            tracing::warn!(error = %e, "closing a context: its CQ arm page is still in use");
        }
    }
}

/// The errno of a device refusal, the refusal's reason logged (`MLX5SIM_LOG=debug`).
pub fn errno(e: mlx5_hw::Error) -> i32 {
    tracing::debug!(error = %e, errno = e.errno(), "the device refused");
    e.errno()
}
