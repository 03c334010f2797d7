//! The DC targets whose receives a CQ completes: a DCT has no data path of its own (no queue,
//! nothing a [`Resolve`] table holds), its receives come from its SRQ, and its CQEs name it by
//! its number. With CQE version 0 their `srqn_uidx` carries the SRQ's number, which the table's
//! SRQ fallback finds ([`Resolve::xrc_srq`]); with version 1 — what libmlx5 negotiates with
//! `mlx5_ib`, and so what every program on a ConnectX gets — it carries the *DCT's* user index
//! (kernel `drivers/infiniband/hw/mlx5/qp.c` `create_dct` takes the command's `uidx`), which no
//! SRQ has: rdma-core finds the DCT by that index and takes its SRQ (`providers/mlx5/cq.c`
//! `get_resp_ctx_v1`: a QP resource, `is_srq` from its `srq`). Here the CQ keeps each DCT's
//! number with its SRQ's ([`DcTargets::add`]) and completes such a CQE on that SRQ of the table.
//!
//! Kept by the CQ's owner — `mlx5-ctx` adds each DC target on its CQ when it creates it and
//! removes it when it destroys it (and then writes it down as destroyed:
//! [`crate::DestroyedQps`]). A lock guards it, taken on the full path of a poll that meets a QP
//! missing from its table (where a DCT's receives go: no table holds a DCT), at create and at
//! destroy, never on the hot path.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

#[cfg(doc)]
use super::Resolve;

/// The DC targets that complete on a CQ, each with the SRQ it receives through (the module's
/// doc).
#[derive(Debug, Default)]
pub struct DcTargets {
    srqs: Mutex<BTreeMap<u32, u32>>,
}

impl DcTargets {
    /// None.
    pub fn new() -> DcTargets {
        DcTargets::default()
    }

    /// DC target `dctn` receives through SRQ `srqn`, completing on this CQ.
    pub fn add(&self, dctn: u32, srqn: u32) {
        self.lock().insert(dctn, srqn);
    }

    /// DC target `dctn` was destroyed.
    pub fn remove(&self, dctn: u32) {
        self.lock().remove(&dctn);
    }

    /// The SRQ DC target `dctn` receives through, if it is one of this CQ's.
    pub fn srq_of(&self, dctn: u32) -> Option<u32> {
        self.lock().get(&dctn).copied()
    }

    /// The map, whatever a thread that panicked holding it left (every change is one call).
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u32, u32>> {
        self.srqs.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
