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
//! the device leave only the later arm. A program that arms two CQs of one context back to
//! back and then sleeps on the earlier one is the case this cannot serve; the fabric thread
//! looks at least every `MAX_IDLE_SLEEP` and at once while busy, so only arms closer together
//! than one step are affected.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use mlx5_cq::CQ_DOORBELL;

use crate::bugs::{BugLog, DriverBugKind};
use crate::cq::Cq;
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

impl CqArmPage {
    /// A page with no CQ yet; its doorbell word is poisoned.
    pub fn new(page: Arc<DmaBuf>) -> CqArmPage {
        page.store_word(CQ_DOORBELL, u64::from_ne_bytes(POISON));
        CqArmPage {
            page,
            cqs: BTreeSet::new(),
        }
    }
}

/// Take the arm doorbell written on each page and hand it to its CQ; returns whether any was
/// seen.
pub fn forward<'a>(
    pages: impl IntoIterator<Item = &'a CqArmPage>,
    cqs: &mut BTreeMap<u32, Cq>,
    dev: &str,
    bugs: &mut BugLog,
) -> bool {
    let mut seen = false;
    for p in pages {
        let Some(v) = p.page.swap8(CQ_DOORBELL, POISON) else {
            continue;
        };
        if v == POISON {
            continue;
        }
        seen = true;
        let cqn = u32::from_be_bytes([v[4], v[5], v[6], v[7]]);
        match cqs.get_mut(&cqn) {
            Some(cq) if p.cqs.contains(&cqn) => {
                cq.uar.store_word(CQ_DOORBELL, u64::from_ne_bytes(v));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_arm_reaches_the_cq_it_names_and_a_stranger_is_reported() {
        let mut page = CqArmPage::new(Arc::new(DmaBuf::new(4096).unwrap()));
        let mut cqs = BTreeMap::new();
        cqs.insert(0x42, Cq::new(0x42, 8, 64, false, None).unwrap());
        page.cqs.insert(0x42);
        let mut bugs = BugLog::default();
        let mut word = [0u8; 8];
        word[..4].copy_from_slice(&(1u32 << 28).to_be_bytes());
        word[4..].copy_from_slice(&0x42u32.to_be_bytes());
        cqs[&0x42].dbrec.write_be32(4, 1 << 28);
        page.page.store_word(CQ_DOORBELL, u64::from_ne_bytes(word));
        let pages = [page];
        assert!(forward(&pages, &mut cqs, "t", &mut bugs));
        assert_eq!(pages[0].page.read8(CQ_DOORBELL), POISON, "taken");
        assert_eq!(cqs[&0x42].uar.read8(CQ_DOORBELL), word, "handed over");
        assert!(!forward(&pages, &mut cqs, "t", &mut bugs), "nothing new");
        word[4..].copy_from_slice(&0x43u32.to_be_bytes());
        pages[0]
            .page
            .store_word(CQ_DOORBELL, u64::from_ne_bytes(word));
        forward(&pages, &mut cqs, "t", &mut bugs);
        assert_eq!(bugs.all().len(), 1);
        assert_eq!(bugs.all()[0].kind, DriverBugKind::CqArmMismatch);
    }
}
