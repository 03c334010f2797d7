//! UD multicast through libibverbs: `ibv_attach_mcast` / `ibv_detach_mcast` on a QP of this
//! device. The kernel checks what `mlx5_hw::Device::attach_mcast` documents (a multicast GID and
//! a UD QP, else EINVAL: Linux verbs.c `ib_attach_mcast`); Soft-RoCE implements the groups in
//! `rxe_mcast.c`.

use super::*;

impl VerbsDevice {
    /// `ibv_attach_mcast` (`attach`) or `ibv_detach_mcast` on QP `qp`.
    pub(super) fn mcast(&self, qp: QpId, gid: &Gid, lid: u16, attach: bool) -> Result<()> {
        let objs = self.lock();
        let e = objs.qps.get(qp.0)?;
        let g = ibv::ibv_gid { raw: gid.0 };
        let (call, r) = if attach {
            // SAFETY: `e.qp` is a live QP of this context (the table holds it until destroy,
            // under the lock held here); `g` is valid for the call.
            ("ibv_attach_mcast", unsafe {
                self.rdma.ibv_attach_mcast(e.qp, &g, lid)
            })
        } else {
            // SAFETY: as above.
            ("ibv_detach_mcast", unsafe {
                self.rdma.ibv_detach_mcast(e.qp, &g, lid)
            })
        };
        check(call, r)
    }
}
