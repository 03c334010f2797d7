//! A UAR page that several CQs ring their arm doorbell on.
//!
//! The software ConnectX gives each CQ a UAR page of its own ([`crate::cq`]), because it sees
//! RAM and not a register. rdma-core does not: every CQ of a context rings the arm doorbell at
//! `cq_uar_reg + MLX5_CQ_DOORBELL` (0x20), `cq_uar_reg` being the context's first UAR page
//! unless a dynamic non-cached UAR exists (rdma-core `providers/mlx5/mlx5.c`
//! `mlx5_set_context`; `cq.c` `mlx5_arm_cq` writes the 64-bit word `sn << 28 | cmd | ci` and
//! the CQN there). A [`CqArmPage`] is such a page, mapped by the device: at every look
//! ([`forward`]) the doorbell word is taken whole and poisoned again, and handed to the CQ its
//! second half names, as if written to that CQ's own page, where [`crate::cq::Cq::scan_arm`]
//! checks and executes it. A word naming no CQ of the page is a driver bug
//! ([`DriverBugKind::CqArmMismatch`]).
//!
//! RAM keeps one word where a register takes every write: two CQs armed between two looks of
//! the device leave only the later arm in the word (a program that arms every CQ of a shared
//! completion channel and then sleeps does exactly that). The arm is not lost, though: the
//! driver writes the same word into the CQ's doorbell record (`dbrec[1]`, `MLX5_CQ_ARM_DB`)
//! before it rings (rdma-core `providers/mlx5/cq.c` `mlx5_arm_cq`; UCX `uct_ib_mlx5` and our
//! data path, `mlx5_qp::Cq::arm`, the same), and no driver reads that record back. So the
//! device marks each record it has taken with [`RECORD_TAKEN`] (bit 31, a bit no arm sets:
//! [`crate::cq::Cq::scan_arm`] reports one that does), with an atomic compare-and-exchange
//! that loses to a concurrent store of the driver: at every look, a CQ of the page whose
//! record is unmarked was armed since the last look, whatever became of its ring, and the arm
//! is executed from the record. The ring itself is then the arm already taken (the record
//! marked and equal to it) and is not executed twice; a ring that the record does not show
//! (a driver that rings without writing the record, or writes another value) is executed
//! and reported ([`DriverBugKind::CqArmMismatch`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use mlx5_cq::CQ_DOORBELL;

use crate::bugs::{BugLog, DriverBugKind};
use crate::cq::{Cq, RECORD_TAKEN};
use crate::mem::DmaBuf;

/// The value the doorbell word is reset to after each look (CQN 0xffffffff, which no CQ has).
const POISON: [u8; 8] = [0xff; 8];

/// A UAR page shared by the arm doorbells of several CQs.
#[derive(Debug)]
pub struct CqArmPage {
    /// The page, as the device maps it.
    pub page: Arc<DmaBuf>,
    /// The CQs that ring on it.
    pub cqs: BTreeSet<u32>,
}

/// Mark `cq`'s arm record taken, unless the driver stores a new arm meanwhile; returns the
/// arm the record held (unmarked), if it was not marked already.
fn take_record(cq: &Cq) -> Option<u32> {
    let mut r = cq.dbrec.read_be32(4);
    while r & RECORD_TAKEN == 0 {
        match cq.dbrec.cas_be32(4, r, r | RECORD_TAKEN) {
            Ok(()) => return Some(r),
            Err(now) => r = now,
        }
    }
    None
}

impl CqArmPage {
    /// A page with no CQ yet; its doorbell word is poisoned.
    pub fn new(page: Arc<DmaBuf>) -> CqArmPage {
        page.store_word(CQ_DOORBELL, u64::from_ne_bytes(POISON));
        CqArmPage {
            page,
            cqs: BTreeSet::new(),
        }
    }

    /// `cq`, just created (its arm record as the driver initialised it, no arm yet: the
    /// driver learns the CQN from the create command), rings on this page from now on.
    pub fn add_cq(&mut self, cq: &Cq) {
        take_record(cq);
        self.cqs.insert(cq.cqn);
    }
}

/// Take the arm doorbell written on each page and every arm record of its CQs written since
/// the last look, and hand each arm to its CQ (module docs); returns whether any was seen.
pub fn forward<'a>(
    pages: impl IntoIterator<Item = &'a CqArmPage>,
    cqs: &mut BTreeMap<u32, Cq>,
    dev: &str,
    bugs: &mut BugLog,
) -> bool {
    let mut seen = false;
    for p in pages {
        let rung = p.page.swap8(CQ_DOORBELL, POISON).filter(|v| *v != POISON);
        for &cqn in &p.cqs {
            let Some(cq) = cqs.get_mut(&cqn) else {
                continue;
            };
            if let Some(arm) = take_record(cq) {
                cq.uar
                    .store_word(CQ_DOORBELL, u64::from_ne_bytes(word(arm, cqn)));
                seen = true;
            }
        }
        let Some(v) = rung else {
            continue;
        };
        seen = true;
        let arm = u32::from_be_bytes([v[0], v[1], v[2], v[3]]);
        let cqn = u32::from_be_bytes([v[4], v[5], v[6], v[7]]);
        match cqs.get_mut(&cqn) {
            Some(cq) if p.cqs.contains(&cqn) => {
                let rec = cq.dbrec.read_be32(4);
                if rec != arm | RECORD_TAKEN {
                    // Not the arm the record showed: executed as rung (scan_arm reports the
                    // difference from the record).
                    cq.uar.store_word(CQ_DOORBELL, u64::from_ne_bytes(v));
                }
            }
            _ => bugs.report(
                dev,
                cqn,
                DriverBugKind::CqArmMismatch,
                format!(
                    "arm doorbell at UAR+0x20 names CQN {cqn:#x}, which is no CQ ringing on this \
                     page (its CQs: {:x?}); ignored",
                    p.cqs
                ),
            ),
        }
    }
    seen
}

/// The 64-bit arm doorbell `BE32(arm) ‖ BE32(cqn)`, as it sits in memory.
fn word(arm: u32, cqn: u32) -> [u8; 8] {
    let mut v = [0u8; 8];
    v[..4].copy_from_slice(&arm.to_be_bytes());
    v[4..].copy_from_slice(&cqn.to_be_bytes());
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A page with CQs `cqns`, fresh (arm records 0, as the driver initialises them).
    fn page_with(cqns: &[u32]) -> (CqArmPage, BTreeMap<u32, Cq>) {
        let mut page = CqArmPage::new(Arc::new(DmaBuf::new(4096).unwrap()));
        let mut cqs = BTreeMap::new();
        for &cqn in cqns {
            let cq = Cq::new(cqn, 8, 64, false, None).unwrap();
            page.add_cq(&cq);
            cqs.insert(cqn, cq);
        }
        (page, cqs)
    }

    /// The driver's arm of `cqn` (`mlx5_arm_cq`): the record, then the ring.
    fn arm(page: &CqArmPage, cqs: &BTreeMap<u32, Cq>, sn: u32, ci: u32, cqn: u32) {
        cqs[&cqn].dbrec.write_be32(4, sn << 28 | ci);
        page.page
            .store_word(CQ_DOORBELL, u64::from_ne_bytes(word(sn << 28 | ci, cqn)));
    }

    /// What CQ `cqn` was handed (its own page's doorbell), taken.
    fn handed(cqs: &BTreeMap<u32, Cq>, cqn: u32) -> [u8; 8] {
        cqs[&cqn].uar.swap8(CQ_DOORBELL, POISON).unwrap()
    }

    #[test]
    fn an_arm_reaches_the_cq_it_names_and_a_stranger_is_reported() {
        let (page, mut cqs) = page_with(&[0x42]);
        let mut bugs = BugLog::default();
        arm(&page, &cqs, 1, 0, 0x42);
        let pages = [page];
        assert!(forward(&pages, &mut cqs, "t", &mut bugs));
        assert_eq!(pages[0].page.read8(CQ_DOORBELL), POISON, "taken");
        assert_eq!(handed(&cqs, 0x42), word(1 << 28, 0x42), "handed over");
        assert!(!forward(&pages, &mut cqs, "t", &mut bugs), "nothing new");
        assert_eq!(handed(&cqs, 0x42), POISON, "once");
        pages[0]
            .page
            .store_word(CQ_DOORBELL, u64::from_ne_bytes(word(1 << 28, 0x43)));
        forward(&pages, &mut cqs, "t", &mut bugs);
        assert_eq!(bugs.all().len(), 1);
        assert_eq!(bugs.all()[0].kind, DriverBugKind::CqArmMismatch);
    }

    #[test]
    fn arms_overwritten_between_two_looks_are_taken_from_the_records_once() {
        let (page, mut cqs) = page_with(&[0x42, 0x43, 0x44]);
        let mut bugs = BugLog::default();
        // Three fresh CQs armed back to back: the first arm's word is 0 (sequence number 0,
        // consumer index 0), as the record was; the ring holds only the last.
        for cqn in [0x42, 0x43, 0x44] {
            arm(&page, &cqs, 0, 0, cqn);
        }
        let pages = [page];
        assert!(forward(&pages, &mut cqs, "t", &mut bugs));
        for cqn in [0x42, 0x43, 0x44] {
            assert_eq!(handed(&cqs, cqn), word(0, cqn), "CQ {cqn:#x}");
        }
        assert!(!forward(&pages, &mut cqs, "t", &mut bugs), "nothing new");
        // The same arm again (nothing completed, no event taken): an arm all the same.
        arm(&pages[0], &cqs, 0, 0, 0x43);
        forward(&pages, &mut cqs, "t", &mut bugs);
        assert_eq!(handed(&cqs, 0x43), word(0, 0x43));
        // The device looks between the record and the ring: the ring is not a second arm.
        cqs[&0x42].dbrec.write_be32(4, 2 << 28 | 9);
        assert!(forward(&pages, &mut cqs, "t", &mut bugs));
        assert_eq!(handed(&cqs, 0x42), word(2 << 28 | 9, 0x42));
        pages[0]
            .page
            .store_word(CQ_DOORBELL, u64::from_ne_bytes(word(2 << 28 | 9, 0x42)));
        forward(&pages, &mut cqs, "t", &mut bugs);
        assert_eq!(handed(&cqs, 0x42), POISON, "executed once");
        assert!(bugs.all().is_empty(), "{:?}", bugs.all());
        // A ring the record does not show is executed as rung.
        pages[0]
            .page
            .store_word(CQ_DOORBELL, u64::from_ne_bytes(word(3 << 28, 0x44)));
        forward(&pages, &mut cqs, "t", &mut bugs);
        assert_eq!(handed(&cqs, 0x44), word(3 << 28, 0x44));
    }
}
