//! UD multicast on owning QPs: joining and leaving groups ([`Qp::attach_mcast`]) and QPs
//! created with creation flags ([`Pd::create_qp_ex`], e.g.
//! `IBV_QP_CREATE_BLOCK_SELF_MCAST_LB`). See `mlx5_hw::mcast` for the addresses and the
//! destination QPN of a multicast send.

use mlx5_hw::{Gid, QpInitEx};

use crate::error::Result;
use crate::pd::Pd;
use crate::qp::{Qp, QpInit};

impl Pd {
    /// A QP with the extended creation attributes of `ibv_create_qp_ex` (creation flags).
    pub fn create_qp_ex(&self, init: &QpInit<'_>, ex: &QpInitEx) -> Result<Qp> {
        Qp::new_ex(self, init, ex)
    }
}

impl Qp {
    /// Join the multicast group `gid` (`ibv_attach_mcast`; UD QPs only, `lid` ignored on
    /// RoCE). Leaving is [`Qp::detach_mcast`]; dropping the QP leaves every group.
    pub fn attach_mcast(&self, gid: &Gid, lid: u16) -> Result<()> {
        Ok(self.context().device().attach_mcast(self.id(), gid, lid)?)
    }

    /// Leave the multicast group `gid` (`ibv_detach_mcast`).
    pub fn detach_mcast(&self, gid: &Gid, lid: u16) -> Result<()> {
        Ok(self.context().device().detach_mcast(self.id(), gid, lid)?)
    }
}
