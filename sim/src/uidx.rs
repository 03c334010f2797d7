//! User indexes in CQEs: CQE version 1, as rdma-core's `libmlx5` asks for it.
//!
//! A context created with `max_cqe_version` 1 whose kernel answers `cqe_version` 1 (rdma-core
//! `providers/mlx5/mlx5.c` `mlx5_alloc_context` / `mlx5_set_context`) finds the QP or SRQ of a
//! CQE by a *user index* instead of its QPN or SRQN: `create_qp` passes the index libmlx5 chose
//! (`mlx5_store_uidx`, field `uidx` of `struct mlx5_ib_create_qp`, none for an XRC target QP),
//! `create_srq` likewise for an XRC SRQ (`mlx5_create_srq_ex`), and the device writes that index
//! into the CQE's `srqn_uidx` field (bytes 32..36, low 24 bits): the kernel's `mlx5_ib` takes
//! the command's index as the object's `user_index` (`drivers/infiniband/hw/mlx5/mlx5_ib.h`
//! `get_qp_user_index` / `verify_assign_uidx`: 24 bits, and not `MLX5_IB_DEFAULT_UIDX`
//! 0xffffff, else EINVAL).
//!
//! Which index a CQE carries, from what libmlx5 does with it (`providers/mlx5/cq.c`,
//! rdma-core v44): a requester CQE and an error CQE of the send queue are looked up as a QP
//! (`get_req_context` with the `srqn_uidx` field); a responder CQE is looked up with
//! `get_resp_ctx_v1`, which takes a QP (its SRQ, if it has one, then gives the receive WQE) or an
//! XRC SRQ (`MLX5_RSC_TYPE_XSRQ`). So a receive completion from an XRC SRQ carries the SRQ's
//! index, every other CQE its QP's index; a plain SRQ's index is never used.

use std::collections::BTreeMap;

/// The user indexes of the QPs and XRC SRQs whose CQEs go to one CQ.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UserIndex {
    qps: BTreeMap<u32, u32>,
    xrc_srqs: BTreeMap<u32, u32>,
}

impl UserIndex {
    /// QP `qpn` writes its CQEs here with user index `uidx` (24 bits).
    pub fn set_qp(&mut self, qpn: u32, uidx: u32) {
        self.qps.insert(qpn, uidx & 0x00ff_ffff);
    }

    /// XRC SRQ `srqn` completes its receives here with user index `uidx` (24 bits).
    pub fn set_xrc_srq(&mut self, srqn: u32, uidx: u32) {
        self.xrc_srqs.insert(srqn, uidx & 0x00ff_ffff);
    }

    /// Forget a destroyed QP.
    pub fn remove_qp(&mut self, qpn: u32) {
        self.qps.remove(&qpn);
    }

    /// Forget a destroyed XRC SRQ.
    pub fn remove_xrc_srq(&mut self, srqn: u32) {
        self.xrc_srqs.remove(&srqn);
    }

    /// The `srqn_uidx` field of a CQE of QP `qpn` whose SRQ field would be `srqn` (0 for none):
    /// the XRC SRQ's index when the receive came from one, else the QP's; `srqn` unchanged for a
    /// QP and SRQ this table does not know.
    pub fn field(&self, qpn: u32, srqn: u32) -> u32 {
        if srqn != 0 {
            if let Some(&u) = self.xrc_srqs.get(&srqn) {
                return u;
            }
        }
        self.qps.get(&(qpn & 0x00ff_ffff)).copied().unwrap_or(srqn)
    }

    /// Whether nothing is registered.
    pub fn is_empty(&self) -> bool {
        self.qps.is_empty() && self.xrc_srqs.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xrc_srq_receives_carry_the_srq_index_everything_else_the_qp_index() {
        let mut u = UserIndex::default();
        u.set_qp(0x101, 7);
        u.set_xrc_srq(0x200, 9);
        assert_eq!(u.field(0x101, 0), 7, "requester or RQ completion");
        assert_eq!(u.field(0x101, 0x300), 7, "plain SRQ: the QP's index");
        assert_eq!(u.field(0x155, 0x200), 9, "XRC target QP on an XRC SRQ");
        assert_eq!(u.field(0x999, 0x42), 0x42, "unknown: unchanged");
        u.remove_qp(0x101);
        assert_eq!(u.field(0x101, 0), 0);
    }
}
