//! Polling with completion timestamps, off the lean paths.
//!
//! A CQ created with completion timestamps (`mlx5_hw::Device::create_cq_with_timestamps`)
//! carries the device clock in bytes 48–55 of every good CQE (`struct mlx5_cqe64.timestamp`,
//! big-endian; rdma-core `mlx5_cq_read_wc_completion_ts`). [`Cq::poll`] does not read them:
//! [`Wc`] stays as small as the lean paths need. [`Cq::poll_timestamped`] reads each CQE's
//! timestamp before handing it to the common completion code, and reports it next to every
//! completion the CQE produced. Convert with `mlx5_hw::ClockInfo::to_ns`.

use super::{Cq, Resolve};
use crate::error::Result;
use crate::wc::Wc;

impl Cq {
    /// [`Cq::poll`], also writing the CQE timestamp of each completion to `ts` (same
    /// index as in `wcs`; raw device clock, `mlx5_hw::timestamp`). Polls at most
    /// `min(wcs.len(), ts.len())` completions. Completions the CQE did not report itself (a
    /// flush synthesised for a WR retired without a CQE of its own, an unsignaled WR retired
    /// by a later error) get the timestamp of the CQE that retired them; error CQEs carry no
    /// timestamp and report 0. The accounting and errors are those of [`Cq::poll`]: every CQE
    /// goes through its full path (`Cq::poll_uncommon`), which reads the stamps.
    pub fn poll_timestamped<R: Resolve + ?Sized>(
        &mut self,
        table: &mut R,
        wcs: &mut [Wc],
        ts: &mut [u64],
    ) -> Result<usize> {
        let max = wcs.len().min(ts.len());
        let n = self.poll_uncommon(table, &mut wcs[..max], 0, self.ci, Some(&mut ts[..max]));
        self.result(n)
    }
}
