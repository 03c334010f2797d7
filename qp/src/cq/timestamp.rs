//! Polling with completion timestamps, off the lean paths.
//!
//! A CQ created with completion timestamps (`mlx5_hw::Device::create_cq_with_timestamps`)
//! carries the device clock in bytes 48–55 of every good CQE (`struct mlx5_cqe64.timestamp`,
//! big-endian; rdma-core `mlx5_cq_read_wc_completion_ts`). [`Cq::poll`] does not read them:
//! [`Wc`] stays as small as the lean paths need. [`Cq::poll_timestamped`] reads each CQE's
//! timestamp before handing it to the common completion code, and reports it next to every
//! completion the CQE produced. Convert with `mlx5_hw::ClockInfo::to_ns`.

use super::{Consumed, Cq, Resolve};
use crate::error::{Error, Result};
use crate::wc::Wc;
use mlx5_cq::sw_owned;

impl Cq {
    /// [`Cq::poll`], also writing the CQE timestamp of each completion to `ts` (same
    /// index as in `wcs`; raw device clock, `mlx5_hw::timestamp`). Polls at most
    /// `min(wcs.len(), ts.len())` completions. Completions the CQE did not report itself (a
    /// flush synthesised for a WR retired without a CQE of its own, an unsignaled WR retired
    /// by a later error) get the timestamp of the CQE that retired them; error CQEs carry no
    /// timestamp and report 0. The accounting and errors are those of [`Cq::poll`].
    pub fn poll_timestamped<R: Resolve + ?Sized>(
        &mut self,
        table: &mut R,
        wcs: &mut [Wc],
        ts: &mut [u64],
    ) -> Result<usize> {
        let max = wcs.len().min(ts.len());
        let start = self.ci;
        let (cqe0, cqe_cnt, size_shift) = (self.cqe0, self.cqe_cnt, self.size_shift);
        let mut n = 0;
        let mut err = None;
        while n < max {
            let ci = self.ci;
            let idx = (ci & (cqe_cnt - 1)) as usize;
            // SAFETY: idx < cqe_cnt, so the 64-byte CQE is inside the buffer.
            let cqe_ptr = unsafe { cqe0.add(idx << size_shift) };
            // SAFETY: op_own is the last byte of the CQE; volatile, the device writes it.
            let op_own = unsafe { core::ptr::read_volatile(cqe_ptr.add(63)) };
            if !sw_owned(op_own, ci, cqe_cnt) {
                break;
            }
            mlx5_hw::mmio::from_device_barrier();
            // SAFETY: the CQE is software-owned; bytes 48..56 read after the barrier (8-byte
            // aligned in a 64-byte aligned CQE).
            let stamp =
                u64::from_be(unsafe { core::ptr::read_volatile(cqe_ptr.add(48) as *const u64) });
            let error = op_own >> 4 == mlx5_cq::CQE_REQ_ERR || op_own >> 4 == mlx5_cq::CQE_RESP_ERR;
            let stamp = if error { 0 } else { stamp };
            let got = self.poll_uncommon_one(cqe_ptr, table, &mut wcs[n..max], n == 0);
            let k = match got {
                Ok(Consumed::Yes(k)) => {
                    self.ci = self.ci.wrapping_add(1);
                    k
                }
                Ok(Consumed::NotYet(k)) => {
                    ts[n..n + k].fill(stamp);
                    n += k;
                    break;
                }
                Err(e) => {
                    if n == 0 {
                        if !matches!(e, Error::RecvOutOfOrder { .. }) {
                            self.ci = self.ci.wrapping_add(1);
                        }
                        err = Some(e);
                    }
                    break;
                }
            };
            ts[n..n + k].fill(stamp);
            n += k;
        }
        if self.ci != start {
            self.update_ci();
        }
        if let Some(e) = err {
            return Err(self.report(e));
        }
        Ok(n)
    }
}
