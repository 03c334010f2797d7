//! Address handles for UD sends.

use std::fmt;

use mlx5_hw::{AhAttr, AhId};
use mlx5_qp::UdDest;

use crate::error::Result;
use crate::pd::Pd;

/// An address handle: where UD datagrams go. [`Ah::dest`] gives the destination a UD post
/// carries; the WQE holds a copy of the address vector, so the handle may be dropped while sends
/// to it are outstanding.
pub struct Ah {
    id: AhId,
    av: [u8; 48],
    pd: Pd,
}

impl fmt::Debug for Ah {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ah").field("id", &self.id.0).finish()
    }
}

impl Drop for Ah {
    fn drop(&mut self) {
        if let Err(e) = self.pd.context().device().destroy_ah(self.id) {
            tracing::warn!(target: "mlx5_ctx", ah = self.id.0, error = %e, "destroy_ah failed");
        }
    }
}

impl Ah {
    pub(crate) fn new(pd: &Pd, attr: &AhAttr) -> Result<Ah> {
        let info = pd.context().device().create_ah(pd.id(), attr)?;
        Ok(Ah {
            id: info.id,
            av: info.av,
            pd: pd.clone(),
        })
    }

    /// The device handle.
    pub fn id(&self) -> AhId {
        self.id
    }

    /// The 48-byte mlx5 address vector (`struct mlx5_wqe_av`).
    pub fn av(&self) -> &[u8; 48] {
        &self.av
    }

    /// The destination of a UD send to QP `dest_qpn` with Q_Key `qkey` through this handle.
    pub fn dest(&self, dest_qpn: u32, qkey: u32) -> UdDest {
        UdDest::new(&self.av, dest_qpn, qkey)
    }
}
