//! How the device learns of send work: only from writes to the QP's UAR page.
//!
//! The driver (rdma-core `post_send_db`, UCX `uct_ib_mlx5_txwq_ring_doorbell`; `docs/sources.md` §5)
//! writes the WQEs, then the SQ doorbell record `dbrec[1]`, then either an 8-byte doorbell (the
//! first 8 bytes of the last WQE's ctrl segment) or a BlueFlame copy (whole 64-byte blocks of
//! the WQE) to `bf.reg + offset`, and toggles `offset` by `bf.size`.
//!
//! The software ConnectX sees RAM, not a register, so it fills each 256-byte BlueFlame half with
//! a poison word that no driver can write as a doorbell: ctrl bytes 0..7 of
//! `ff ff ff ff ff ff ff 00` name QPN 0xffffff with DS 0, and bytes 8..15 carry `fm_ce_se`
//! 0xff whose reserved bits rdma-core never sets.
//!
//! What the scanners remember of each QP, and where its BlueFlame halves are, is the QP's own
//! data ([`crate::qp::db`], re-exported here); this module and its two submodules are the
//! behaviour that reads and updates it.
//!
//! A QP on a register shared with other QPs is scanned per register instead ([`shared`]),
//! where interleaved BlueFlame copies are caught. For the others, two scanners, one per way of
//! running the fabric ([`crate::fabric`]):
//!
//! - **Deterministic** ([`scan`]): the driver never runs during a scan. A half whose first 8
//!   bytes changed received a write: if bytes 8..15 are still poison it was an 8-byte
//!   doorbell, otherwise a BlueFlame copy of the blocks that changed. After reading, the half
//!   is poisoned again. Every doorbell is checked against the ring (`docs/sources.md` §5): it must
//!   carry this QP's number and the index of a WQE among those newly posted, the doorbell
//!   record must have advanced, two BlueFlame copies in a row must use both halves, and a
//!   BlueFlame copy must equal the ring over the WQE's DS × 16 bytes (the rest of its last
//!   64-byte line is padding the device does not read). The NIC executes the BlueFlame copy, so the device
//!   does too; differences are reported as driver bugs. Work is then processed up to the
//!   doorbell record's value; a record without a doorbell does nothing. Several doorbells rung
//!   between two scans of the device overwrite each other in RAM; the newest of each half is
//!   checked and the ring is processed as a whole.
//! - **Threaded** ([`threaded::scan`]): the fabric's thread scans while the driver writes, so
//!   a half may be read in the middle of a copy. The doorbell record drives execution (the
//!   ring up to it runs, never a copy), and a half is judged only once the write in it has
//!   settled, reporting only what is certain; [`threaded`] lists the interleavings and which
//!   checks only deterministic mode makes.

use crate::bugs::{BugLog, DriverBugKind};
use crate::mem::DmaBuf;
pub(crate) use crate::qp::db::POISON;
pub use crate::qp::db::{DoorbellState, BF_HALF, BF_OFFSET};
use crate::qp::Qp;
use crate::wqe::{ring_bytes, Ctrl};

pub mod shared;
pub mod threaded;

/// One write seen in a BlueFlame half.
#[derive(Clone, Debug)]
struct Observed {
    half: usize,
    bytes: Vec<u8>,
    /// 64-byte blocks that differ from poison (0 for an 8-byte doorbell).
    blocks: usize,
}

/// What the doorbell scanners saw on a device, summed over its QPs (since each QP was created
/// or last reset).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DoorbellStats {
    /// Doorbell and BlueFlame writes seen.
    pub doorbells: u64,
    /// Threaded mode: BlueFlame copies verified equal to the ring.
    pub bf_verified: u64,
    /// Threaded mode: of those, copies first seen incomplete and verified at a later scan.
    pub bf_verified_late: u64,
    /// Threaded mode: writes judged, once settled, to be 8-byte doorbells.
    pub db8: u64,
    /// Threaded mode: writes that ended without a verdict.
    pub unjudged: u64,
}

impl DoorbellStats {
    /// Add one QP's counts.
    pub fn add(&mut self, db: &DoorbellState) {
        self.doorbells += db.count;
        self.bf_verified += db.bf_verified;
        self.bf_verified_late += db.bf_verified_late;
        self.db8 += db.db8;
        self.unjudged += db.unjudged;
    }
}

fn is_poison(b: &[u8]) -> bool {
    b.chunks(8).all(|c| c == POISON)
}

/// A half as whole 8-byte words (one 64-bit load each, [`DmaBuf::load_word`]: a driver's
/// 8-byte store is seen whole or not at all), as bytes in memory order.
fn read_words(uar: &DmaBuf, off: usize) -> Vec<u8> {
    (0..BF_HALF / 8)
        .flat_map(|i| uar.load_word(off + i * 8).to_ne_bytes())
        .collect()
}

/// Read a half until two reads agree (a BlueFlame copy in progress on another thread settles
/// within a few stores).
fn stable_read(uar: &DmaBuf, off: usize) -> Vec<u8> {
    let mut a = read_words(uar, off);
    for _ in 0..16 {
        std::hint::spin_loop();
        let b = read_words(uar, off);
        if a == b {
            break;
        }
        a = b;
    }
    a
}

/// Deterministic mode: look at the QP's BlueFlame halves; returns whether a doorbell was seen.
pub fn scan(qp: &mut Qp, dev: &str, bugs: &mut BugLog) -> bool {
    let mut seen = Vec::new();
    for half in 0..2 {
        let off = BF_OFFSET + half * BF_HALF;
        if qp.uar.load_word(off) == u64::from_ne_bytes(POISON) {
            continue;
        }
        let bytes = stable_read(&qp.uar, off);
        for i in 0..BF_HALF / 8 {
            qp.uar.store_word(off + i * 8, u64::from_ne_bytes(POISON));
        }
        let blocks = if is_poison(&bytes[8..16]) {
            0
        } else {
            (0..BF_HALF / 64)
                .filter(|k| !is_poison(&bytes[k * 64..k * 64 + 64]))
                .count()
        };
        seen.push(Observed {
            half,
            bytes,
            blocks,
        });
    }
    if seen.is_empty() {
        return false;
    }
    qp.db.count += seen.len() as u64;
    if seen.len() == 1 {
        if qp.db.last_half == Some(seen[0].half) && seen[0].blocks > 0 {
            bugs.report(
                dev,
                qp.qpn,
                DriverBugKind::BlueFlameHalfNotToggled,
                format!(
                    "BlueFlame copy to half {:#x} again; the previous doorbell used the same half",
                    BF_OFFSET + seen[0].half * BF_HALF
                ),
            );
        }
        qp.db.last_half = Some(seen[0].half);
    } else {
        qp.db.last_half = None;
    }
    check_and_latch(qp, &seen, dev, bugs);
    true
}

fn check_and_latch(qp: &mut Qp, seen: &[Observed], dev: &str, bugs: &mut BugLog) {
    let wqe_cnt = qp.geom.sq_wqe_cnt;
    let dbr = qp.sq_dbr();
    let pending = dbr.wrapping_sub(qp.db.sq_known) as u32;
    // The oldest WQE the device may still need: the first one not completed.
    let oldest = qp
        .req
        .outstanding
        .front()
        .map(|p| p.index)
        .unwrap_or(qp.sq_ci);
    let in_use = dbr.wrapping_sub(oldest) as u32;
    if pending > wqe_cnt || in_use > wqe_cnt {
        bugs.report(
            dev,
            qp.qpn,
            DriverBugKind::DbrOverflow,
            format!(
                "SQ doorbell record {dbr} is {in_use} basic blocks ahead of the oldest WQE not yet \
                 completed ({oldest}) but the SQ has {wqe_cnt}: WQEs were overwritten or the \
                 record is garbage; doorbell ignored"
            ),
        );
        return;
    }
    // The WQE starts in the newly posted range, following each ctrl's DS.
    let mut starts = Vec::new();
    let mut at = qp.db.sq_known;
    while at != dbr && starts.len() <= wqe_cnt as usize {
        let c = Ctrl::parse(&ring_bytes(&qp.buf, qp.sq_off(), wqe_cnt, at, 16));
        starts.push(at);
        let next = at.wrapping_add(c.bbs());
        if dbr.wrapping_sub(at) < c.bbs() {
            break;
        }
        at = next;
    }
    for obs in seen {
        let ctrl = Ctrl::parse(&obs.bytes[..16]);
        let what = if obs.blocks == 0 {
            "8-byte doorbell"
        } else {
            "BlueFlame copy"
        };
        if ctrl.qpn != qp.qpn {
            bugs.report(
                dev,
                qp.qpn,
                DriverBugKind::DoorbellQpnMismatch,
                format!(
                    "{what} carries QPN {:#x}, written to QP {:#x}'s register",
                    ctrl.qpn, qp.qpn
                ),
            );
        }
        if pending == 0 {
            let ring = Ctrl::parse(&ring_bytes(
                &qp.buf,
                qp.sq_off(),
                wqe_cnt,
                qp.db.sq_known,
                16,
            ));
            if wqe_cnt > 0 && ring.index == ctrl.index && ctrl.index == qp.db.sq_known {
                bugs.report(
                    dev,
                    qp.qpn,
                    DriverBugKind::DbrNotAdvanced,
                    format!(
                        "{what} for WQE {} but the SQ doorbell record is still {dbr}",
                        ctrl.index
                    ),
                );
            } else {
                bugs.report(
                    dev,
                    qp.qpn,
                    DriverBugKind::DoorbellNothingNew,
                    format!(
                        "{what} names WQE {} but nothing new was posted (doorbell record {dbr})",
                        ctrl.index
                    ),
                );
            }
            continue;
        }
        if !starts.contains(&ctrl.index) {
            bugs.report(
                dev,
                qp.qpn,
                DriverBugKind::DoorbellIndexMismatch,
                format!(
                    "{what} names WQE index {} but the new WQEs start at {:?}",
                    ctrl.index, starts
                ),
            );
            continue;
        }
        let ring = ring_bytes(&qp.buf, qp.sq_off(), wqe_cnt, ctrl.index, 64);
        if obs.blocks == 0 {
            if ring[..8] != obs.bytes[..8] {
                bugs.report(
                    dev,
                    qp.qpn,
                    DriverBugKind::DoorbellIndexMismatch,
                    format!(
                        "8-byte doorbell {:02x?} differs from the ctrl bytes {:02x?} of WQE {}",
                        &obs.bytes[..8],
                        &ring[..8],
                        ctrl.index
                    ),
                );
            }
            continue;
        }
        let blocks = (ctrl.ds as usize).div_ceil(4);
        if ctrl.ds == 0 || blocks * 64 > BF_HALF || obs.blocks < blocks {
            bugs.report(dev, qp.qpn, DriverBugKind::BlueFlameSize, format!(
                "BlueFlame copy of {} block(s) for a WQE of DS {} ({} block(s)); a half holds {}; executing the ring",
                obs.blocks, ctrl.ds, blocks, BF_HALF / 64));
            continue;
        }
        // The device reads the WQE's DS × 16 bytes of the copy; the rest of its last line is
        // padding (stale ring bytes in rdma-core's `mlx5_bf_copy`, anything at all here).
        let wqe_bytes = ctrl.ds as usize * 16;
        let ring = ring_bytes(&qp.buf, qp.sq_off(), wqe_cnt, ctrl.index, wqe_bytes);
        let copy = &obs.bytes[..blocks * 64];
        if let Some(pos) = ring.iter().zip(copy).position(|(a, b)| a != b) {
            bugs.report(dev, qp.qpn, DriverBugKind::BlueFlameMismatch, format!(
                "BlueFlame copy of WQE {} differs from the ring at byte {pos} (ring {:#04x}, copy {:#04x}); the copy executes",
                ctrl.index, ring[pos], copy[pos]));
        }
        qp.db.bf = Some((ctrl.index, copy.to_vec()));
    }
    qp.db.sq_known = dbr;
}
