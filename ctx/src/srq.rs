//! Shared receive queues.

use std::borrow::{Borrow, BorrowMut};
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use mlx5_hw::{SrqId, SrqInitAttr};

use crate::datapath;
use crate::error::Result;
use crate::pd::Pd;

/// The device SRQ, shared by the [`Srq`] and every QP that receives through it.
pub(crate) struct SrqObj {
    id: SrqId,
    pd: Pd,
}

impl SrqObj {
    /// The device handle.
    pub(crate) fn id(&self) -> SrqId {
        self.id
    }
}

impl Drop for SrqObj {
    fn drop(&mut self) {
        if let Err(e) = self.pd.context().device().destroy_srq(self.id) {
            tracing::warn!(target: "mlx5_ctx", srq = self.id.0, error = %e, "destroy_srq failed");
        }
    }
}

/// A shared receive queue. Dereferences to the data path ([`mlx5_qp::Srq`]: post receives);
/// the device SRQ is destroyed when this and every QP using it are gone.
pub struct Srq {
    // Declared first: the data path is dropped before the device object (see `datapath`).
    dp: mlx5_qp::Srq,
    obj: Arc<SrqObj>,
}

impl fmt::Debug for Srq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Srq")
            .field("srqn", &format_args!("{:#x}", self.dp.srqn()))
            .field("capacity", &self.dp.capacity())
            .finish()
    }
}

impl Deref for Srq {
    type Target = mlx5_qp::Srq;
    fn deref(&self) -> &mlx5_qp::Srq {
        &self.dp
    }
}

impl DerefMut for Srq {
    fn deref_mut(&mut self) -> &mut mlx5_qp::Srq {
        &mut self.dp
    }
}

impl Borrow<mlx5_qp::Srq> for Srq {
    fn borrow(&self) -> &mlx5_qp::Srq {
        &self.dp
    }
}

impl BorrowMut<mlx5_qp::Srq> for Srq {
    fn borrow_mut(&mut self) -> &mut mlx5_qp::Srq {
        &mut self.dp
    }
}

impl Srq {
    pub(crate) fn new(pd: &Pd, max_wr: u32, max_sge: u32) -> Result<Srq> {
        let attr = SrqInitAttr {
            max_wr,
            max_sge,
            srq_limit: 0,
        };
        let info = pd.context().device().create_srq(pd.id(), &attr)?;
        let obj = Arc::new(SrqObj {
            id: info.id,
            pd: pd.clone(),
        });
        // On failure `obj` is dropped here and destroys the SRQ.
        let dp = datapath::srq(&info.layout)?;
        Ok(Srq { dp, obj })
    }

    pub(crate) fn obj(&self) -> &Arc<SrqObj> {
        &self.obj
    }

    /// The device handle.
    pub fn id(&self) -> SrqId {
        self.obj.id
    }

    /// The PD the SRQ belongs to.
    pub fn pd(&self) -> &Pd {
        &self.obj.pd
    }

    /// Arm the limit event: `IBV_EVENT_SRQ_LIMIT_REACHED` once fewer than `limit` receives are
    /// posted (`ibv_modify_srq` with `IBV_SRQ_LIMIT`).
    pub fn arm_limit(&self, limit: u32) -> Result<()> {
        Ok(self
            .obj
            .pd
            .context()
            .device()
            .arm_srq_limit(self.obj.id, limit)?)
    }
}
