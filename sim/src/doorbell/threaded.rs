//! Doorbell detection in threaded mode: the device scans while the driver writes.
//!
//! In deterministic mode ([`super::scan`]) the driver never runs during a scan, so what sits in
//! a BlueFlame half is exactly what the driver wrote since the last scan. With the fabric on
//! its own thread ([`crate::Fabric::start_thread`]) a scan can land anywhere in the driver's
//! doorbell sequence (WQEs → `dbrec[1]` → 8-byte doorbell or BlueFlame copy,
//! `docs/sources.md` §5), and a copy of 64, 128, ... bytes is a run of 8- or 16-byte stores, ascending, that
//! the driver's thread can be preempted in the middle of. So threaded mode changes what drives
//! execution and when a half is judged:
//!
//! 1. **The doorbell record drives execution.** The driver writes the WQEs before the record
//!    and the record before the doorbell, so a record that advanced means the WQEs up to it are
//!    complete in the ring. Every scan reads `dbrec[1]` (one 32-bit load, never torn) and
//!    executes the ring up to it; the BlueFlame copy is never executed. A doorbell a scan
//!    missed, misread or saw half-written therefore costs nothing: no QP can stall on it and
//!    no WQE runs from a partial copy.
//! 2. **A half is judged only once it has settled.** A write is first seen when the half's
//!    first word (ctrl bytes 0..7, stored first by every doorbell and copy) changes. From then
//!    on the half is *watched*: each scan takes a snapshot (all 32 words, then the first word
//!    again; a snapshot whose first word moved is dropped) and compares the WQE's blocks with
//!    the ring. Equal: the copy is verified. Otherwise nothing is concluded until the write has
//!    *settled*: the driver's next doorbell has appeared in the other half (the driver
//!    finishes one doorbell before it starts the next, so every store of this write is
//!    visible), or [`SETTLE_DEADLINE`] has passed with the device watching (at least
//!    [`SETTLE_LOOKS`] scans, so a descheduled device thread does not judge a copy it never
//!    watched). A settled half whose words after the first are all poison was an 8-byte
//!    doorbell; one with some words written that differs from the ring is reported.
//! 3. **No junk is left behind, and none is blamed on the driver.** After a verdict the words
//!    the write left are poisoned again. The first word is left as it is: the next write
//!    changes it, and a doorbell that was already seen must not be seen twice. A half whose
//!    first word has not changed but whose other words are not poison holds junk (a copy that
//!    went on after it was judged, or bytes from before threaded mode began); it is poisoned
//!    without a report.
//! 4. **A verdict is reported only when the half's other words held poison when the write
//!    began** (the write is not *tainted*). Before the first word changed, the half must have
//!    been known clean, and the other half must have been quiet from the scan before to the
//!    scan after: two writes to one half are always separated by one to the other half (the
//!    driver toggles halves), so a quiet other half proves the device missed no earlier write
//!    here whose leftovers would look like a bad copy under an 8-byte doorbell.
//!
//! All of this is about QPs on registers of their own. A register shared between QPs is
//! scanned per register by [`super::shared`], which also catches two copies into it at once.
//!
//! # The interleavings
//!
//! The argument assumes a driver whose stores become visible in program order (x86 TSO; the
//! software ConnectX only issues copy verdicts on x86 and x86_64, elsewhere it executes the
//! ring and checks only what a single store proves), whose first store of every doorbell is
//! the first word, and that toggles halves. Device side, every load is a whole aligned word
//! and every "then" below is a fence.
//!
//! - *Scan during a copy.* The snapshot holds a prefix of the copy and poison after it: not
//!   equal, not settled, so the half stays watched. Later scans see it complete (verified) or
//!   the driver's next doorbell settles it.
//! - *Scan between the first word and the second* (an 8-byte doorbell, or a copy preempted
//!   right after its first store): identical until settled; then the words tell them apart.
//!   Nothing is poisoned in between, so the copy's later stores never land on re-poisoned
//!   memory.
//! - *Re-poisoning while the driver starts the next write to this half.* The device poisons
//!   only the words its verified snapshot showed written, then reloads the first word. If the
//!   next write had stored anything the device could have overwritten, its first word was
//!   stored before and the reload sees it: the half is marked not clean and the next write is
//!   tainted (checked for equality only, never reported). If the reload shows the old first
//!   word, no store of the next write had happened, so nothing was clobbered.
//! - *Junk cleaning while a write starts.* Same: the snapshot is only trusted when the first
//!   word is unchanged after it, and a reload after poisoning catches a write that began.
//! - *Two writes to one half between two scans* (X, then the other half's Y, then Z here; an
//!   8-byte Z over the copy X looks like a broken copy). Y becomes visible between the scan
//!   before Z was seen and the scan after, so the other half changes in one of those scans and
//!   Z is tainted.
//! - *A copy whose WQE completed and was reused.* The ring is only compared while the WQE is
//!   between the oldest uncompleted WQE and the record: the driver may not reuse those
//!   slots. Outside that window the write ends without a verdict.
//! - *A copy preempted past the deadline.* It is judged (and, with words missing, reported) and
//!   its half marked not clean, so its late stores taint the next write instead of being
//!   blamed on it. A deadline far longer than a scheduler slice keeps this rare.
//!
//! # Checked here, and only in deterministic mode
//!
//! Threaded mode reports: a doorbell carrying another QP's number; a doorbell naming a WQE
//! whose ctrl in the ring differs from it, or a WQE past the doorbell record
//! ([`DriverBugKind::DbrNotAdvanced`]); a record more WQEs ahead than the SQ holds or moving
//! backwards; and, for untainted writes of WQEs still in flight, a settled BlueFlame copy that
//! differs from the ring or is shorter than the WQE (on x86 only).
//!
//! Only deterministic mode reports: a doorbell that is missing (threaded mode runs on the
//! record alone), rung with nothing new, or naming an old WQE; two BlueFlame copies in a row
//! to the same half; copies the device could not judge (tainted, superseded, or of a WQE
//! already completed). And only deterministic mode executes the BlueFlame copy itself, as a
//! ConnectX does; threaded mode executes the ring, which is the same WQE whenever the driver
//! is right.

use std::sync::atomic::{fence, Ordering};
use std::time::{Duration, Instant};

use super::{BF_HALF, BF_OFFSET, POISON};
use crate::bugs::{BugLog, DriverBugKind};
use crate::mem::DmaBuf;
pub use crate::qp::db::Watcher;
use crate::qp::db::{Half, Watch};
use crate::qp::Qp;
use crate::wqe::{ring_bytes, Ctrl};

/// How long an unsettled write is watched before it is judged anyway.
pub const SETTLE_DEADLINE: Duration = Duration::from_millis(250);
/// The scans a write must have been watched for before the deadline may judge it.
pub const SETTLE_LOOKS: u32 = 64;
/// Words in one half.
const WORDS: usize = BF_HALF / 8;
/// The poison word as loaded from memory.
const POISON_WORD: u64 = u64::from_ne_bytes(POISON);
/// Whether stores of another thread are seen in program order (see the module docs).
const TSO: bool = cfg!(any(target_arch = "x86_64", target_arch = "x86"));

/// One snapshot of a half: its 32 words as loaded.
type Snapshot = [u64; WORDS];

fn half_off(h: usize) -> usize {
    BF_OFFSET + h * BF_HALF
}

fn snapshot(uar: &DmaBuf, h: usize) -> Snapshot {
    let mut s = [0u64; WORDS];
    for (i, w) in s.iter_mut().enumerate() {
        *w = uar.load_word(half_off(h) + i * 8);
    }
    s
}

fn bytes_of(words: &[u64]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_ne_bytes()).collect()
}

/// Execute up to the doorbell record `dbr` when it advanced sanely; a record ahead of what the
/// SQ can hold (or behind what was already taken) is a driver bug, reported once per value
/// (`bad_dbr` remembers the last one reported). Shared by the threaded watcher and the QPs of
/// shared registers ([`super::shared::follow`]).
pub(super) fn follow_record(
    qp: &mut Qp,
    dbr: u16,
    bad_dbr: &mut Option<u16>,
    dev: &str,
    bugs: &mut BugLog,
) -> bool {
    if dbr == qp.db.sq_known {
        return false;
    }
    let wqe_cnt = qp.geom.sq_wqe_cnt;
    let o = oldest(qp);
    let in_use = dbr.wrapping_sub(o) as u32;
    let known = qp.db.sq_known.wrapping_sub(o) as u32;
    if in_use > wqe_cnt || in_use < known {
        if *bad_dbr != Some(dbr) {
            *bad_dbr = Some(dbr);
            bugs.report(
                dev,
                qp.qpn,
                DriverBugKind::DbrOverflow,
                format!(
                    "SQ doorbell record {dbr} is {in_use} basic blocks ahead of the oldest WQE \
                     not yet completed ({o}) but the SQ has {wqe_cnt} and the record was \
                     already {}: WQEs were overwritten or the record is garbage; ignored",
                    qp.db.sq_known
                ),
            );
        }
        return false;
    }
    qp.db.sq_known = dbr;
    qp.db.bf = None;
    true
}

/// The first WQE the driver may not reuse yet: the oldest one not completed.
pub(super) fn oldest(qp: &Qp) -> u16 {
    qp.req
        .outstanding
        .front()
        .map(|p| p.index)
        .unwrap_or(qp.sq_ci)
}

/// Whether WQE `index` is posted (before the record) and not completed, so its ring slot
/// holds it until the device says otherwise.
pub(super) fn in_flight(qp: &Qp, index: u16, dbr: u16) -> bool {
    let o = oldest(qp);
    index.wrapping_sub(o) < dbr.wrapping_sub(o)
}

impl Watcher {
    /// Start watching a QP's halves as they are now: a half whose words are all poison is
    /// clean; anything else in it is treated as a write not yet seen, and tainted.
    fn observe(uar: &DmaBuf) -> Watcher {
        let half = |h: usize| {
            let s = snapshot(uar, h);
            Half {
                w0: POISON_WORD,
                clean: s[1..].iter().all(|&w| w == POISON_WORD),
                changed_at: 0,
                watch: None,
            }
        };
        Watcher {
            scan: 0,
            halves: [half(0), half(1)],
            bad_dbr: None,
        }
    }

    /// One scan of the QP; returns whether anything new was seen.
    fn scan(&mut self, qp: &mut Qp, dev: &str, bugs: &mut BugLog) -> bool {
        self.scan += 1;
        let s = self.scan;
        let uar = &qp.uar;
        let w0 = [uar.load_word(half_off(0)), uar.load_word(half_off(1))];
        // The record is read after the doorbells: a doorbell seen implies its record is seen.
        fence(Ordering::Acquire);
        let dbr = qp.sq_dbr();
        let mut work = follow_record(qp, dbr, &mut self.bad_dbr, dev, bugs);
        let changed = [w0[0] != self.halves[0].w0, w0[1] != self.halves[1].w0];
        for h in 0..2 {
            if !changed[h] {
                continue;
            }
            let o = 1 - h;
            let near = changed[o] || self.halves[o].changed_at + 1 >= s;
            let half = &mut self.halves[h];
            if half.watch.take().is_some() {
                qp.db.unjudged += 1;
            }
            let ctrl = Ctrl::parse(&w0[h].to_ne_bytes());
            half.watch = Some(Watch {
                index: ctrl.index,
                ds: ctrl.ds,
                started: s,
                since: Instant::now(),
                looks: 0,
                tainted: !half.clean || near,
                ring: None,
            });
            half.clean = false;
            half.w0 = w0[h];
            qp.db.count += 1;
            work = true;
            check_first_word(qp, w0[h], dbr, dev, bugs);
        }
        for (half, &c) in self.halves.iter_mut().zip(&changed) {
            if c {
                half.changed_at = s;
            }
        }
        for h in 0..2 {
            self.look(qp, h, changed[1 - h], dbr, dev, bugs);
        }
        work
    }

    /// Look at half `h`: clean junk, or judge its watched write if it can be.
    fn look(
        &mut self,
        qp: &mut Qp,
        h: usize,
        other_changed: bool,
        dbr: u16,
        dev: &str,
        bugs: &mut BugLog,
    ) {
        let s = self.scan;
        let expect = self.halves[h].w0;
        let snap = snapshot(&qp.uar, h);
        fence(Ordering::Acquire);
        if qp.uar.load_word(half_off(h)) != expect {
            // A write began during the snapshot; the next scan starts watching it.
            return;
        }
        let Some(mut w) = self.halves[h].watch.take() else {
            if snap[1..].iter().any(|&x| x != POISON_WORD) {
                // Junk: words written without a new first word. Poison them, no report.
                let clean = self.halves[h].clean;
                self.halves[h].clean = repoison(&qp.uar, h, &snap, expect) && clean;
            }
            return;
        };
        w.looks += 1;
        if s == w.started + 1 && other_changed {
            w.tainted = true;
        }
        let settled = other_changed && s >= w.started + 2;
        let blocks = (w.ds as usize).div_ceil(4);
        let fits = blocks > 0 && blocks * 64 <= BF_HALF;
        if w.ring.is_none() && fits && in_flight(qp, w.index, dbr) {
            // The slot cannot be reused while the WQE is in flight: these are its bytes (the
            // DS × 16 the device reads; the rest of the last line is padding).
            w.ring = Some(ring_bytes(
                &qp.buf,
                qp.sq_off(),
                qp.geom.sq_wqe_cnt,
                w.index,
                w.ds as usize * 16,
            ));
        }
        let copy = bytes_of(&snap);
        if let Some(r) = &w.ring {
            if r[..] == copy[..r.len()] {
                qp.db.bf_verified += 1;
                if w.looks > 1 {
                    qp.db.bf_verified_late += 1;
                }
                self.finish(qp, h, &snap, true);
                return;
            }
        }
        let timed_out = w.looks >= SETTLE_LOOKS && w.since.elapsed() >= SETTLE_DEADLINE;
        if !settled && !timed_out {
            self.halves[h].watch = Some(w);
            return;
        }
        if snap[1..].iter().all(|&x| x == POISON_WORD) {
            qp.db.db8 += 1;
        } else if w.tainted || (fits && w.ring.is_none()) || !TSO {
            qp.db.unjudged += 1;
        } else {
            let after = if settled {
                "once the next doorbell had been written".to_string()
            } else {
                format!("{} ms after it was written", w.since.elapsed().as_millis())
            };
            report_copy(qp, &w, &snap, w.ring.as_deref(), &after, dev, bugs);
        }
        // Only a settled write is known to store nothing more.
        self.finish(qp, h, &snap, settled);
    }

    /// End the watch of half `h`: poison the words `snap` shows written, and record whether
    /// the half is clean for the next write.
    fn finish(&mut self, qp: &Qp, h: usize, snap: &Snapshot, complete: bool) {
        let half = &mut self.halves[h];
        half.watch = None;
        half.clean = repoison(&qp.uar, h, snap, half.w0) && complete;
    }
}

/// Poison the words after the first that `snap` shows written, then reload the first word:
/// `true` if it is still `w0`, i.e. no new write began that the poisoning could have hit.
fn repoison(uar: &DmaBuf, h: usize, snap: &Snapshot, w0: u64) -> bool {
    for (i, &w) in snap.iter().enumerate().skip(1) {
        if w != POISON_WORD {
            uar.store_word(half_off(h) + i * 8, POISON_WORD);
        }
    }
    fence(Ordering::SeqCst);
    uar.load_word(half_off(h)) == w0
}

/// What a single 8-byte store proves: the QPN, and that the WQE it names is the one in the
/// ring (or, past the record, that the record was not advanced).
pub(super) fn check_first_word(qp: &Qp, w0: u64, dbr: u16, dev: &str, bugs: &mut BugLog) {
    let bytes = w0.to_ne_bytes();
    let ctrl = Ctrl::parse(&bytes);
    if ctrl.qpn != qp.qpn {
        bugs.report(
            dev,
            qp.qpn,
            DriverBugKind::DoorbellQpnMismatch,
            format!(
                "doorbell {bytes:02x?} carries QPN {:#x}, written to QP {:#x}'s register",
                ctrl.qpn, qp.qpn
            ),
        );
        return;
    }
    let wqe_cnt = qp.geom.sq_wqe_cnt;
    if wqe_cnt == 0 {
        return;
    }
    let ring = ring_bytes(&qp.buf, qp.sq_off(), wqe_cnt, ctrl.index, 8);
    // Past the record (nearer ahead of it than behind the oldest WQE in flight), or behind.
    let ahead = ctrl.index.wrapping_sub(dbr);
    let ahead = (ahead as u32) < wqe_cnt && ahead <= oldest(qp).wrapping_sub(ctrl.index);
    if in_flight(qp, ctrl.index, dbr) {
        if ring[..] != bytes[..] {
            bugs.report(
                dev,
                qp.qpn,
                DriverBugKind::DoorbellIndexMismatch,
                format!(
                    "doorbell {bytes:02x?} names WQE {} but its ctrl bytes in the ring are \
                     {ring:02x?}",
                    ctrl.index
                ),
            );
        }
    } else if ahead {
        let (kind, what) = if ring[..] == bytes[..] {
            (
                DriverBugKind::DbrNotAdvanced,
                "the SQ doorbell record is still",
            )
        } else {
            (
                DriverBugKind::DoorbellIndexMismatch,
                "nothing is posted there; the SQ doorbell record is",
            )
        };
        bugs.report(
            dev,
            qp.qpn,
            kind,
            format!("doorbell for WQE {} but {what} {dbr}", ctrl.index),
        );
    }
    // Behind the oldest WQE in flight: already completed, nothing left to compare with.
}

/// Report a settled, untainted write that is neither an 8-byte doorbell nor equal to the ring.
fn report_copy(
    qp: &Qp,
    w: &Watch,
    snap: &Snapshot,
    ring: Option<&[u8]>,
    after: &str,
    dev: &str,
    bugs: &mut BugLog,
) {
    let blocks = (w.ds as usize).div_ceil(4);
    let written = snap
        .chunks(8)
        .filter(|b| b.iter().any(|&x| x != POISON_WORD))
        .count();
    let Some(ring) = ring else {
        bugs.report(
            dev,
            qp.qpn,
            DriverBugKind::BlueFlameSize,
            format!(
                "BlueFlame copy of {written} block(s) for WQE {} of DS {} ({blocks} block(s)); a \
                 half holds {}; the ring executes",
                w.index,
                w.ds,
                BF_HALF / 64
            ),
        );
        return;
    };
    let copy = bytes_of(snap);
    // A first word that differs from the ring was reported when it was first seen.
    let Some(pos) = ring.iter().zip(&copy).position(|(a, b)| a != b) else {
        return;
    };
    if pos < 8 {
        return;
    }
    let word = pos / 8;
    if written < blocks && snap[word] == POISON_WORD {
        bugs.report(
            dev,
            qp.qpn,
            DriverBugKind::BlueFlameSize,
            format!(
                "BlueFlame copy of {written} block(s) for WQE {} of DS {} ({blocks} block(s)), \
                 {after}; the ring executes",
                w.index, w.ds
            ),
        );
    } else {
        bugs.report(
            dev,
            qp.qpn,
            DriverBugKind::BlueFlameMismatch,
            format!(
                "BlueFlame copy of WQE {} differs from the ring at byte {pos} (ring {:#04x}, \
                 copy {:#04x}) {after}; the ring executes",
                w.index, ring[pos], copy[pos]
            ),
        );
    }
}

/// One threaded-mode scan of a QP's doorbell record and BlueFlame halves; returns whether
/// anything new was seen (the record advanced or a doorbell was written).
pub fn scan(qp: &mut Qp, dev: &str, bugs: &mut BugLog) -> bool {
    let mut w = qp
        .db
        .threaded
        .take()
        .unwrap_or_else(|| Watcher::observe(&qp.uar));
    let work = w.scan(qp, dev, bugs);
    qp.db.threaded = Some(w);
    work
}

/// Leave threaded mode: a half whose first word is the last write seen is poisoned whole, as
/// deterministic mode expects it; a write not yet seen is left for deterministic mode.
pub fn leave(qp: &mut Qp) {
    let Some(w) = qp.db.threaded.take() else {
        return;
    };
    for (h, half) in w.halves.iter().enumerate() {
        if qp.uar.load_word(half_off(h)) == half.w0 {
            for i in 0..WORDS {
                qp.uar.store_word(half_off(h) + i * 8, POISON_WORD);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! The interleavings of the module docs, played one store at a time on one thread.

    use mlx5_hw::{QpCap, QpType};

    use super::*;
    use crate::sizing::qp_geometry;

    const QPN: u32 = 0x123;

    fn qp() -> Qp {
        let cap = QpCap {
            max_send_wr: 16,
            max_recv_wr: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 64,
        };
        let g = qp_geometry(QpType::Rc, &cap, false).unwrap();
        Qp::new(QPN, QpType::Rc, 1, 2, 3, None, false, g).unwrap()
    }

    /// Write WQE `index` of `blocks` blocks into the ring (a ctrl, then a pattern); returns
    /// its words.
    fn wqe(qp: &Qp, index: u16, blocks: usize) -> Vec<u64> {
        let mut b: Vec<u8> = (0..blocks * 64)
            .map(|i| (i as u8).wrapping_mul(7) ^ index as u8)
            .collect();
        b[..4].copy_from_slice(&((index as u32) << 8 | 0x08).to_be_bytes());
        b[4..8].copy_from_slice(&(QPN << 8 | (blocks * 4) as u32).to_be_bytes());
        let cnt = qp.geom.sq_wqe_cnt as usize;
        for k in 0..blocks {
            let slot = (index as usize + k) % cnt;
            qp.buf
                .write(qp.sq_off() + slot * 64, &b[k * 64..k * 64 + 64]);
        }
        b.chunks(8)
            .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
            .collect()
    }

    fn store(qp: &Qp, h: usize, words: &[u64], range: std::ops::Range<usize>) {
        for i in range {
            qp.uar.store_word(half_off(h) + i * 8, words[i]);
        }
    }

    fn record(qp: &Qp, v: u16) {
        qp.dbrec.write_be32(4, v as u32);
    }

    fn scans(qp: &mut Qp, bugs: &mut BugLog, n: usize) {
        for _ in 0..n {
            scan(qp, "t", bugs);
        }
    }

    fn rest_is_poison(qp: &Qp, h: usize) -> bool {
        snapshot(&qp.uar, h)[1..].iter().all(|&w| w == POISON_WORD)
    }

    #[test]
    fn a_copy_seen_half_written_is_verified_once_complete() {
        let (mut qp, mut bugs) = (qp(), BugLog::default());
        scans(&mut qp, &mut bugs, 2);
        let w = wqe(&qp, 0, 2);
        record(&qp, 2);
        store(&qp, 0, &w, 0..5);
        scans(&mut qp, &mut bugs, 3);
        assert_eq!(qp.db.sq_known, 2, "the record drives execution");
        assert_eq!(qp.db.bf_verified, 0);
        assert!(
            !rest_is_poison(&qp, 0),
            "nothing poisoned under a copy in progress"
        );
        store(&qp, 0, &w, 5..16);
        scans(&mut qp, &mut bugs, 1);
        assert_eq!((qp.db.bf_verified, qp.db.bf_verified_late), (1, 1));
        assert!(rest_is_poison(&qp, 0));
        assert_eq!(qp.uar.load_word(half_off(0)), w[0], "the first word stays");
        assert!(bugs.all().is_empty(), "{:?}", bugs.all());
    }

    #[test]
    fn an_eight_byte_doorbell_over_a_copy_never_seen_is_not_blamed() {
        let (mut qp, mut bugs) = (qp(), BugLog::default());
        scans(&mut qp, &mut bugs, 2);
        // X: a copy of WQE 0 to half 0, Y: an 8-byte doorbell of WQE 1 to half 1, Z: an
        // 8-byte doorbell of WQE 2 to half 0, all between two scans.
        let x = wqe(&qp, 0, 1);
        let y = wqe(&qp, 1, 1);
        let z = wqe(&qp, 2, 1);
        record(&qp, 3);
        store(&qp, 0, &x, 0..8);
        store(&qp, 1, &y, 0..1);
        store(&qp, 0, &z, 0..1);
        scans(&mut qp, &mut bugs, 3);
        // The next doorbell settles Z: its half holds X's bytes behind Z's first word.
        let n = wqe(&qp, 3, 1);
        record(&qp, 4);
        store(&qp, 1, &n, 0..1);
        scans(&mut qp, &mut bugs, 3);
        assert!(bugs.all().is_empty(), "{:?}", bugs.all());
        assert!(rest_is_poison(&qp, 0), "X's leftovers cleaned");
        // Z (tainted) and Y (seen in the same scan, then overwritten) get no verdict.
        assert_eq!(qp.db.unjudged, 2);
    }

    #[test]
    fn a_wrong_copy_is_reported_once_the_next_doorbell_settles_it() {
        let (mut qp, mut bugs) = (qp(), BugLog::default());
        scans(&mut qp, &mut bugs, 2);
        let mut w = wqe(&qp, 0, 1);
        record(&qp, 1);
        w[2] ^= 0xff << 32;
        store(&qp, 0, &w, 0..8);
        scans(&mut qp, &mut bugs, 3);
        assert!(bugs.all().is_empty(), "not before it settles");
        let n = wqe(&qp, 1, 1);
        record(&qp, 2);
        store(&qp, 1, &n, 0..1);
        scans(&mut qp, &mut bugs, 1);
        let b = bugs.take();
        assert_eq!(b.len(), 1, "{b:?}");
        assert_eq!(b[0].kind, DriverBugKind::BlueFlameMismatch);
        assert!(b[0].detail.contains("byte 20"), "{}", b[0].detail);
        assert!(rest_is_poison(&qp, 0));
    }

    #[test]
    fn a_short_copy_is_a_size_bug_and_an_eight_byte_doorbell_is_not() {
        let (mut qp, mut bugs) = (qp(), BugLog::default());
        scans(&mut qp, &mut bugs, 2);
        let w = wqe(&qp, 0, 2);
        record(&qp, 2);
        store(&qp, 0, &w, 0..8);
        scans(&mut qp, &mut bugs, 3);
        let d = wqe(&qp, 2, 2);
        record(&qp, 4);
        store(&qp, 1, &d, 0..1);
        scans(&mut qp, &mut bugs, 3);
        let e = wqe(&qp, 4, 1);
        record(&qp, 5);
        store(&qp, 0, &e, 0..1);
        scans(&mut qp, &mut bugs, 3);
        let b = bugs.take();
        assert_eq!(
            b.iter().map(|b| b.kind).collect::<Vec<_>>(),
            vec![DriverBugKind::BlueFlameSize],
            "{b:?}"
        );
        assert_eq!(
            qp.db.db8, 1,
            "WQE 2's 8-byte doorbell judged once WQE 4's settled it"
        );
    }

    #[test]
    fn what_one_store_proves_is_reported_at_once() {
        let (mut qp, mut bugs) = (qp(), BugLog::default());
        scans(&mut qp, &mut bugs, 2);
        let w = wqe(&qp, 0, 1);
        // The record not advanced.
        store(&qp, 0, &w, 0..1);
        scans(&mut qp, &mut bugs, 1);
        let kinds = |b: &mut BugLog| b.take().into_iter().map(|b| b.kind).collect::<Vec<_>>();
        assert_eq!(kinds(&mut bugs), vec![DriverBugKind::DbrNotAdvanced]);
        // Another QP's number.
        let v = wqe(&qp, 1, 1);
        record(&qp, 2);
        store(&qp, 1, &[v[0] ^ (1 << 40)], 0..1);
        scans(&mut qp, &mut bugs, 1);
        assert_eq!(kinds(&mut bugs), vec![DriverBugKind::DoorbellQpnMismatch]);
        // A garbage record, reported once however often it is seen.
        record(&qp, 5000);
        scans(&mut qp, &mut bugs, 10);
        assert_eq!(kinds(&mut bugs), vec![DriverBugKind::DbrOverflow]);
        assert_eq!(qp.db.sq_known, 2);
    }

    #[test]
    fn leaving_restores_the_poison_deterministic_mode_expects() {
        let (mut qp, mut bugs) = (qp(), BugLog::default());
        scans(&mut qp, &mut bugs, 2);
        let w = wqe(&qp, 0, 1);
        record(&qp, 1);
        store(&qp, 0, &w, 0..8);
        scans(&mut qp, &mut bugs, 2);
        leave(&mut qp);
        assert!(qp.db.threaded.is_none());
        assert_eq!(qp.uar.load_word(half_off(0)), POISON_WORD);
        assert!(rest_is_poison(&qp, 0));
    }
}
