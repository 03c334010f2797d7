//! The QPs destroyed while CQEs of theirs may still sit in a CQ: what rdma-core takes out of
//! the CQ when a QP is destroyed (`providers/mlx5/cq.c` `__mlx5_cq_clean`, called from
//! `mlx5_destroy_qp` under the CQ lock), which it no longer does once the CQ is the data
//! path's (`mlx5dv_init_obj`: `MLX5_CQ_FLAGS_DV_OWNED`, `docs/sources.md` §10).
//!
//! Cleaning at destroy needs the consumer's state, which is the polling thread's alone here
//! ([`Cq`] is `&mut` to poll, and the hot path takes no lock). So the destroyer only writes
//! the QP's number down ([`DestroyedQps::record`]), and a [`Cq`] that tracks the list
//! ([`Cq::track_destroyed`]) settles such a CQE when its poll meets one, on the full path
//! that a QP missing from the table already takes: a receive through an SRQ completes on
//! that SRQ (the receive WR was the SRQ's, and its owner still waits for it: rdma-core frees
//! such a WQE without a completion, `free_res_cqe`), anything else is consumed without a
//! completion (its WR belonged to the QP, which is gone). The list lives in the CQ's owner —
//! `mlx5-ctx` keeps one per CQ and records each QP it destroys on its CQs.
//!
//! A QP number can come back: the device hands them out (the software ConnectX counts up
//! through 24 bits, `sim/src/world.rs` `alloc_id`). The creator of a QP forgets its number on
//! the QP's CQs first ([`DestroyedQps::forget`]), so a live QP's CQEs are never settled as a
//! destroyed one's. The list keeps the last [`DestroyedQps::CAPACITY`] numbers; an older
//! one's CQEs, if any were still queued, are again [`Error::UnknownQpn`] for
//! [`Cq::discard_next`].

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};

#[cfg(doc)]
use super::Cq;
#[cfg(doc)]
use crate::error::Error;

/// A QP destroyed while its CQ lived on, as [`DestroyedQps`] remembers it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DestroyedQp {
    /// The QP number its CQEs carry.
    pub qpn: u32,
    /// The SRQ its receives went through, whose WR ids its receive CQEs give back; `None`
    /// for a QP with a receive queue of its own (destroyed with it).
    pub srqn: Option<u32>,
}

/// The QPs destroyed while a CQ they completed on lives on (the module's doc): shared by the
/// CQ's consumer ([`Cq::track_destroyed`]) and whoever destroys QPs. A lock guards it, taken
/// on destroy, on create and on the full path of a poll that meets a QP missing from its
/// table — never on the hot path.
#[derive(Debug, Default)]
pub struct DestroyedQps {
    qps: Mutex<VecDeque<DestroyedQp>>,
}

impl DestroyedQps {
    /// How many destroyed QPs are remembered, the oldest forgotten first: a bound on the
    /// memory a program that creates and destroys QPs without end can make this take.
    pub const CAPACITY: usize = 1024;

    /// An empty list.
    pub fn new() -> DestroyedQps {
        DestroyedQps::default()
    }

    /// QP `qpn` (receiving through SRQ `srqn`, if any) was destroyed: its CQEs still in the CQ
    /// are settled by the next poll that meets them.
    pub fn record(&self, qpn: u32, srqn: Option<u32>) {
        let mut qps = self.lock();
        qps.retain(|q| q.qpn != qpn);
        if qps.len() == Self::CAPACITY {
            qps.pop_front();
        }
        qps.push_back(DestroyedQp { qpn, srqn });
    }

    /// A QP numbered `qpn` was created on the CQ: the number is a live QP's again.
    pub fn forget(&self, qpn: u32) {
        self.lock().retain(|q| q.qpn != qpn);
    }

    /// The destroyed QP numbered `qpn`, if it is remembered.
    pub fn get(&self, qpn: u32) -> Option<DestroyedQp> {
        self.lock().iter().rev().find(|q| q.qpn == qpn).copied()
    }

    /// How many are remembered.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// The list, whatever a thread that panicked holding it left (every change is one
    /// `VecDeque` call: the list is whole).
    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<DestroyedQp>> {
        self.qps.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
