//! CQs whose CQEs carry completion timestamps, and the device clock that converts them
//! (`mlx5_hw::timestamp`). Poll such a CQ with `mlx5_qp::Cq::poll_timestamped` (through
//! `Deref`).

use mlx5_hw::ClockInfo;

use crate::context::Context;
use crate::cq::{Cq, CqInit};
use crate::error::Result;

impl Context {
    /// A CQ created with completion timestamps (`IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`: the
    /// raw device clock in every good CQE).
    pub fn create_cq_with_timestamps(&self, init: &CqInit) -> Result<Cq> {
        Cq::adopt(
            self,
            self.device().create_cq_with_timestamps(&init.attr)?,
            None,
        )
    }

    /// The device clock CQE timestamps count (`hca_core_clock` in kHz, mask, format):
    /// [`ClockInfo::to_ns`] converts a timestamp to nanoseconds.
    pub fn clock(&self) -> Result<ClockInfo> {
        Ok(self.device().query_clock()?)
    }
}
