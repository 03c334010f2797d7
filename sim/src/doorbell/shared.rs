//! BlueFlame registers shared between QPs, and the interleaved copies they make possible.
//!
//! **How a context's registers are handed out.** rdma-core asks the kernel for
//! `MLX5_TOTAL_UUARS` registers per context (default `MLX5_DEF_TOT_UUARS` = 16) of which
//! `MLX5_NUM_LOW_LAT_UUARS` (default 4, `get_num_low_lat_uuars`) are low-latency (rdma-core
//! `providers/mlx5/mlx5.c`). At QP creation the kernel's `alloc_bfreg`
//! (`drivers/infiniband/hw/mlx5/qp.c`) first takes a free high-class (low-latency) register,
//! one QP each (`alloc_high_class_bfreg`); when none is free it takes the medium-class register
//! with the fewest QPs, the earliest of those (`alloc_med_class_bfreg`; there are `total − low
//! latency − 1` of them, `num_med_bfreg`), and only when there is none at all bfreg 0, which
//! has no BlueFlame (rdma-core gives uuar 0 `buf_size` 0). rdma-core copies into a medium
//! register under a per-register lock (`struct mlx5_bf` `need_lock`, `need_uuar_lock`). The
//! software ConnectX does the same with [`Bfregs`]: a device is one context, with
//! `DeviceConfig::dedicated_bfregs` dedicated and `DeviceConfig::shared_bfregs` shared
//! registers; a QP on a shared register gets `mlx5_hw::BfLayout::shared` set.
//!
//! **Where they are.** The user registers are bfregs 0 and 1 of each UAR page (the kernel's
//! `adjust_bfregn` maps them onto the two non-fast-path bfregs of every UAR), at UAR + 0x800 +
//! k × `bf_reg_size` (rdma-core `mlx5_init_context`: `MLX5_BF_OFFSET + k * bf_reg_size`), with
//! `bf_reg_size` 512: two halves of 256 bytes (`buf_size = bf_reg_size / 2`). A dedicated
//! register keeps a page of its own here, as a QP with a dedicated UAR does (`docs/sources.md`
//! §3.4).
//!
//! **What drives execution.** A register takes every write as one doorbell; RAM does not: two
//! QPs ringing the same half between two looks of the device leave only the later write. So a
//! QP on a shared register follows its doorbell record (`dbrec[1]`) as threaded mode does for
//! every QP ([`super::threaded`]): in deterministic mode when any write was seen on its
//! register since the last step (a record with no doorbell on the register at all still does
//! nothing), in threaded mode on every scan. Each write seen is checked for what one store
//! proves (the QPN is one of the register's QPs, the ctrl is the ring's, the record was
//! advanced); the device executes the ring, never a copy.
//!
//! **Interleaved copies** ([`DriverBugKind::BlueFlameInterleaved`]). Two threads copying into
//! one half without the lock mix their stores: the NIC executes a WQE made of both (Mellanox
//! libxlio issue #123). What the device can be sure of:
//!
//! - *Deterministic mode* (the driver does not run during a scan, and the halves are poisoned
//!   after each one, so every word in a half was stored since the last scan): the first word
//!   names WQE N. If, within N's DS × 16 bytes, some word is N's and no other in-flight WQE's,
//!   and another word is some other in-flight WQE C's and not N's (C on any QP of the
//!   register, N's own other WQEs included), the half holds lines of two copies: reported. A
//!   half with N's words and words of nobody is a bad copy (`BlueFlameMismatch`, or
//!   `BlueFlameSize` when they are missing). A half with N's first word and only other WQEs'
//!   words after it is an 8-byte doorbell written after another QP's whole copy, which a
//!   locked driver may do: not reported.
//! - *Threaded mode* (the device watches while drivers write, and never stores into a shared
//!   half, so nothing it sees is its own): a snapshot (words, then the first word again, both
//!   unchanged) whose first word is still N's, in which a word changed since the previous
//!   snapshot to a value that is another in-flight WQE C's and not N's, is a store of C's copy
//!   that became visible after N's first word had: C's copy began before N's write (otherwise
//!   the first word would be C's) and was not finished when N's began. That is the
//!   interleaving rdma-core's lock prevents, certain under x86 TSO (reported there only, as
//!   [`super::threaded`]'s copy verdicts). A copy merely seen incomplete proves nothing (it
//!   may finish before the next write begins), so threaded mode reports only what it saw
//!   land late; leftovers of earlier copies are never judged.
//!
//! The data path rings a shared register with 8-byte doorbells only (`mlx5_qp::DoorbellMode::Db`,
//! `docs/hardware.md`), one store each, which cannot interleave.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

use super::threaded::{check_first_word, follow_record, in_flight, oldest};
use super::{BF_HALF, BF_OFFSET, POISON};
use crate::bugs::{BugLog, DriverBugKind};
use crate::mem::DmaBuf;
pub use crate::qp::db::BfClass;
use crate::qp::Qp;
use crate::wqe::{ring_bytes, Ctrl};

/// Dedicated registers of a context by default: rdma-core's `MLX5_NUM_LOW_LAT_UUARS` default
/// (`get_num_low_lat_uuars`, 4).
pub const DEFAULT_DEDICATED_BFREGS: u32 = 4;
/// Shared registers of a context by default: the kernel's `num_med_bfreg` for rdma-core's
/// defaults, `MLX5_DEF_TOT_UUARS` (16) − 4 low-latency − bfreg 0.
pub const DEFAULT_SHARED_BFREGS: u32 = 11;
/// Bytes of one bfreg (`bf_reg_size`, two halves).
pub const BFREG_SIZE: usize = 2 * BF_HALF;
/// User bfregs per UAR page (the kernel's `MLX5_NON_FP_BFREGS_PER_UAR`).
const BFREGS_PER_PAGE: usize = 2;
/// Words in one half.
const WORDS: usize = BF_HALF / 8;
/// The poison word as loaded from memory.
const POISON_WORD: u64 = u64::from_ne_bytes(POISON);
/// Whether stores of another thread are seen in program order ([`super::threaded`]).
const TSO: bool = cfg!(any(target_arch = "x86_64", target_arch = "x86"));

/// What the device last saw in one half of a shared register (threaded mode).
#[derive(Clone, Debug, Default)]
struct HalfView {
    /// The last snapshot whose first word was unchanged after it.
    last: Option<[u64; WORDS]>,
    /// The write it shows was already reported interleaved.
    reported: bool,
}

/// One shared register.
#[derive(Debug)]
struct SharedReg {
    page: Arc<DmaBuf>,
    /// Offset of the register in its page.
    off: usize,
    /// `bf.size`: 256, or 0 for bfreg 0 (no BlueFlame).
    size: u32,
    /// QPs ringing it.
    users: BTreeSet<u32>,
    halves: [HalfView; 2],
}

/// A context's BlueFlame registers: how many dedicated ones are in use, and the shared ones.
#[derive(Debug)]
pub struct Bfregs {
    dedicated: u32,
    dedicated_used: u32,
    shared: u32,
    regs: Vec<SharedReg>,
}

impl Default for Bfregs {
    fn default() -> Bfregs {
        Bfregs::new(DEFAULT_DEDICATED_BFREGS, DEFAULT_SHARED_BFREGS)
    }
}

/// Where a QP's register is.
#[derive(Debug)]
pub struct Assigned {
    /// Its class.
    pub class: BfClass,
    /// The UAR page holding it (`None`: the QP keeps its own page).
    pub page: Option<(Arc<DmaBuf>, usize, u32)>,
}

impl Bfregs {
    /// `dedicated` dedicated registers, then `shared` shared ones (0: every further QP shares
    /// bfreg 0, which has no BlueFlame).
    pub fn new(dedicated: u32, shared: u32) -> Bfregs {
        Bfregs {
            dedicated,
            dedicated_used: 0,
            shared,
            regs: Vec::new(),
        }
    }

    /// Pick the register of a new QP (kernel `alloc_bfreg`); `None` if a page could not be
    /// allocated.
    pub fn assign(&mut self, qpn: u32) -> Option<Assigned> {
        if self.dedicated_used < self.dedicated {
            self.dedicated_used += 1;
            return Some(Assigned {
                class: BfClass::Dedicated,
                page: None,
            });
        }
        let cap = self.shared.max(1) as usize;
        // The earliest register with the fewest QPs; one not made yet has none.
        let min = self
            .regs
            .iter()
            .enumerate()
            .min_by_key(|(i, r)| (r.users.len(), *i))
            .map(|(i, r)| (i, r.users.len()));
        let n = match min {
            Some((i, 0)) => i,
            Some((i, _)) if self.regs.len() >= cap => i,
            _ => {
                let n = self.regs.len();
                let page = if n.is_multiple_of(BFREGS_PER_PAGE) || self.shared == 0 {
                    Arc::new(DmaBuf::new(4096)?)
                } else {
                    self.regs[n - 1].page.clone()
                };
                let reg = SharedReg {
                    page,
                    off: BF_OFFSET + (n % BFREGS_PER_PAGE) * BFREG_SIZE,
                    size: if self.shared == 0 { 0 } else { BF_HALF as u32 },
                    users: BTreeSet::new(),
                    halves: Default::default(),
                };
                poison(&reg.page, reg.off);
                self.regs.push(reg);
                n
            }
        };
        let r = &mut self.regs[n];
        r.users.insert(qpn);
        Some(Assigned {
            class: BfClass::Shared(n),
            page: Some((r.page.clone(), r.off, r.size)),
        })
    }

    /// Put QP `qpn` on the register at `off` of `page` (`bf.size` `size`), a page mapped by
    /// the caller: a UAR page of a user context whose registers the caller hands out as the
    /// kernel's `alloc_bfreg` does (`crate::kernel`). QPs adopted onto the same page and offset
    /// share the register. [`Bfregs::assign`] may also pick an adopted register for a QP of
    /// its own; a device serves one kind of context or the other.
    pub fn adopt(&mut self, qpn: u32, page: &Arc<DmaBuf>, off: usize, size: u32) -> Assigned {
        let n = match self
            .regs
            .iter()
            .position(|r| Arc::ptr_eq(&r.page, page) && r.off == off)
        {
            Some(n) => n,
            None => {
                poison(page, off);
                self.regs.push(SharedReg {
                    page: page.clone(),
                    off,
                    size,
                    users: BTreeSet::new(),
                    halves: Default::default(),
                });
                self.regs.len() - 1
            }
        };
        let r = &mut self.regs[n];
        r.users.insert(qpn);
        Assigned {
            class: BfClass::Shared(n),
            page: Some((r.page.clone(), r.off, r.size)),
        }
    }

    /// A QP is destroyed: its register is free again (kernel `free_bfreg`).
    pub fn release(&mut self, class: BfClass, qpn: u32) {
        match class {
            BfClass::Own => {}
            BfClass::Dedicated => self.dedicated_used = self.dedicated_used.saturating_sub(1),
            BfClass::Shared(n) => {
                let Some(r) = self.regs.get_mut(n) else {
                    return;
                };
                r.users.remove(&qpn);
                // A doorbell of the destroyed QP not yet looked at would name a QP the
                // register no longer has, which is no mistake of the driver (destroying a QP
                // with work posted is allowed): it goes with the QP. An unused register is
                // left clean for its next QP.
                for h in 0..2 {
                    let base = r.off + h * BF_HALF;
                    let w0 = r.page.load_word(base);
                    if r.users.is_empty()
                        || (w0 != POISON_WORD && Ctrl::parse(&w0.to_ne_bytes()).qpn == qpn)
                    {
                        for i in (0..WORDS).rev() {
                            r.page.store_word(base + i * 8, POISON_WORD);
                        }
                        r.halves[h] = HalfView::default();
                    }
                }
            }
        }
    }

    /// The QPs sharing each register, in register order (registers made so far).
    pub fn sharing(&self) -> Vec<Vec<u32>> {
        self.regs
            .iter()
            .map(|r| r.users.iter().copied().collect())
            .collect()
    }

    /// The last background thread stopped: a half whose first word is the last write threaded
    /// mode saw is poisoned whole, as deterministic mode expects it; a write not yet seen is
    /// left for deterministic mode to see.
    pub fn leave_threaded(&mut self) {
        for r in &mut self.regs {
            for (h, half) in r.halves.iter().enumerate() {
                let base = r.off + h * BF_HALF;
                if half.last.is_some_and(|s| r.page.load_word(base) == s[0]) {
                    for i in 0..WORDS {
                        r.page.store_word(base + i * 8, POISON_WORD);
                    }
                }
            }
            r.halves = Default::default();
        }
    }
}

fn poison(page: &DmaBuf, off: usize) {
    for i in 0..2 * WORDS {
        page.store_word(off + i * 8, POISON_WORD);
    }
}

fn snapshot(page: &DmaBuf, base: usize) -> [u64; WORDS] {
    let mut s = [0u64; WORDS];
    for (i, w) in s.iter_mut().enumerate() {
        *w = page.load_word(base + i * 8);
    }
    s
}

fn words_of(bytes: &[u8]) -> Vec<u64> {
    bytes
        .chunks(8)
        .map(|c| {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            u64::from_ne_bytes(w)
        })
        .collect()
}

/// A WQE in flight on one of the register's QPs: its DS × 16 bytes as words (a last partial
/// word is never compared).
struct Wqe {
    qpn: u32,
    index: u16,
    words: Vec<u64>,
}

/// Every WQE in flight (posted before the record, not completed) on the register's QPs.
fn in_flight_wqes(users: &BTreeSet<u32>, qps: &BTreeMap<u32, Qp>) -> Vec<Wqe> {
    let mut out = Vec::new();
    for qpn in users {
        let Some(qp) = qps.get(qpn) else { continue };
        let cnt = qp.geom.sq_wqe_cnt;
        if cnt == 0 {
            continue;
        }
        let dbr = qp.sq_dbr();
        let mut at = oldest(qp);
        let mut guard = 0;
        while at != dbr && guard < cnt {
            let c = Ctrl::parse(&ring_bytes(&qp.buf, qp.sq_off(), cnt, at, 16));
            let len = (c.ds as usize * 16).min(BF_HALF);
            let bytes = ring_bytes(&qp.buf, qp.sq_off(), cnt, at, len);
            out.push(Wqe {
                qpn: *qpn,
                index: at,
                words: words_of(&bytes[..len / 8 * 8]),
            });
            if dbr.wrapping_sub(at) < c.bbs() {
                break;
            }
            at = at.wrapping_add(c.bbs().max(1));
            guard += 1;
        }
    }
    out
}

/// The word `i` of `w`, when the WQE has one there.
fn word(w: &Wqe, i: usize) -> Option<u64> {
    w.words.get(i).copied()
}

/// One scan of every shared register of a device; returns whether a write was seen.
pub fn scan(
    regs: &mut Bfregs,
    qps: &mut BTreeMap<u32, Qp>,
    threaded: bool,
    dev: &str,
    bugs: &mut BugLog,
) -> bool {
    let mut work = false;
    for r in &mut regs.regs {
        if r.users.is_empty() {
            continue;
        }
        let mut seen = false;
        for h in 0..2 {
            let base = r.off + h * BF_HALF;
            seen |= if threaded {
                look_threaded(r, h, base, qps, dev, bugs)
            } else {
                look(r, base, qps, dev, bugs)
            };
        }
        if seen {
            work = true;
            for qpn in &r.users {
                if let Some(q) = qps.get_mut(qpn) {
                    q.db.rung = true;
                }
            }
        }
    }
    work
}

/// The QP a first word names, if it rings this register; reports a foreign QPN.
fn named<'a>(
    r: &SharedReg,
    w0: u64,
    qps: &'a mut BTreeMap<u32, Qp>,
    dev: &str,
    bugs: &mut BugLog,
) -> Option<(&'a mut Qp, Ctrl)> {
    let ctrl = Ctrl::parse(&w0.to_ne_bytes());
    if !r.users.contains(&ctrl.qpn) {
        let users: Vec<String> = r.users.iter().map(|q| format!("{q:#x}")).collect();
        bugs.report(
            dev,
            ctrl.qpn,
            DriverBugKind::DoorbellQpnMismatch,
            format!(
                "doorbell {:02x?} carries QPN {:#x}, written to a shared BlueFlame register \
                 rung by QPs [{}]",
                w0.to_ne_bytes(),
                ctrl.qpn,
                users.join(", ")
            ),
        );
        return None;
    }
    let qp = qps.get_mut(&ctrl.qpn)?;
    qp.db.count += 1;
    check_first_word(qp, w0, qp.sq_dbr(), dev, bugs);
    Some((qp, ctrl))
}

/// Deterministic mode: judge what one half holds, then poison it.
fn look(
    r: &SharedReg,
    base: usize,
    qps: &mut BTreeMap<u32, Qp>,
    dev: &str,
    bugs: &mut BugLog,
) -> bool {
    let snap = snapshot(&r.page, base);
    if snap.iter().all(|&w| w == POISON_WORD) {
        return false;
    }
    for i in 0..WORDS {
        r.page.store_word(base + i * 8, POISON_WORD);
    }
    if snap[0] == POISON_WORD {
        // Words without a first word: no doorbell (every write stores the first word first).
        return false;
    }
    let Some((qp, ctrl)) = named(r, snap[0], qps, dev, bugs) else {
        return true;
    };
    if snap[1..].iter().all(|&w| w == POISON_WORD) {
        return true; // An 8-byte doorbell.
    }
    let (qpn, index) = (qp.qpn, ctrl.index);
    if !in_flight(qp, index, qp.sq_dbr()) {
        return true;
    }
    let wqes = in_flight_wqes(&r.users, qps);
    let Some(n) = wqes.iter().find(|w| w.qpn == qpn && w.index == index) else {
        return true;
    };
    let others: Vec<&Wqe> = wqes
        .iter()
        .filter(|w| !(w.qpn == qpn && w.index == index))
        .collect();
    let len = n.words.len();
    let is_n = |i: usize| word(n, i) == Some(snap[i]) && snap[i] != POISON_WORD;
    let is_other = |i: usize, c: &Wqe| {
        word(c, i) == Some(snap[i]) && snap[i] != POISON_WORD && word(n, i) != Some(snap[i])
    };
    // N's own words: equal to N's and to no other WQE's at that place.
    let own = (1..len).any(|i| is_n(i) && others.iter().all(|c| word(c, i) != Some(snap[i])));
    if !own {
        return true; // An 8-byte doorbell over another copy's lines, or nothing to tell.
    }
    if let Some((c, i)) = others
        .iter()
        .find_map(|c| (1..len).find(|&i| is_other(i, c)).map(|i| (c, i)))
    {
        report_interleaved(qpn, index, c, i, "in one write", dev, bugs);
        return true;
    }
    if let Some(i) = (1..len).find(|&i| word(n, i) != Some(snap[i])) {
        let (kind, what) = if snap[i] == POISON_WORD {
            (DriverBugKind::BlueFlameSize, "is missing")
        } else {
            (DriverBugKind::BlueFlameMismatch, "differs from the ring")
        };
        bugs.report(
            dev,
            qpn,
            kind,
            format!(
                "BlueFlame copy of WQE {index} into a shared register: byte {} {what}; the \
                 ring executes",
                i * 8
            ),
        );
    }
    true
}

fn report_interleaved(
    qpn: u32,
    index: u16,
    c: &Wqe,
    i: usize,
    when: &str,
    dev: &str,
    bugs: &mut BugLog,
) {
    bugs.report(
        dev,
        qpn,
        DriverBugKind::BlueFlameInterleaved,
        format!(
            "BlueFlame copy of WQE {index} into a shared register holds, at byte {}, a line of \
             QP {:#x}'s WQE {} ({when}): two copies into one register at once, which the NIC \
             executes as one corrupt WQE (copy under the register's lock, or ring a shared \
             register with the 8-byte doorbell); the ring executes",
            i * 8,
            c.qpn,
            c.index
        ),
    );
}

/// Threaded mode: compare a half with the device's last look at it.
fn look_threaded(
    r: &mut SharedReg,
    h: usize,
    base: usize,
    qps: &mut BTreeMap<u32, Qp>,
    dev: &str,
    bugs: &mut BugLog,
) -> bool {
    let snap = snapshot(&r.page, base);
    // Every word after the first was read while the first word held snap[0].
    fence(Ordering::Acquire);
    if r.page.load_word(base) != snap[0] {
        return false; // A write began during the snapshot: the next scan sees it.
    }
    let prev = r.halves[h].last.replace(snap);
    let new = snap[0] != POISON_WORD && prev.is_none_or(|p| p[0] != snap[0]);
    if new {
        r.halves[h].reported = false;
        named(r, snap[0], qps, dev, bugs);
        return true;
    }
    let Some(p) = prev else { return false };
    if !TSO || r.halves[h].reported || snap[0] == POISON_WORD {
        return false;
    }
    let late: Vec<usize> = (1..WORDS)
        .filter(|&i| snap[i] != p[i] && snap[i] != POISON_WORD)
        .collect();
    if late.is_empty() {
        return false;
    }
    let ctrl = Ctrl::parse(&snap[0].to_ne_bytes());
    let wqes = in_flight_wqes(&r.users, qps);
    let n = wqes
        .iter()
        .find(|w| w.qpn == ctrl.qpn && w.index == ctrl.index);
    // N's own stores: its DS words, and the padding of its last 64-byte line.
    let n_line_end = (ctrl.ds as usize).div_ceil(4) * 8;
    for &i in &late {
        let own = match n {
            Some(n) => word(n, i) == Some(snap[i]) || (i >= n.words.len() && i < n_line_end),
            None => i < n_line_end,
        };
        if own {
            continue;
        }
        let Some(c) = wqes
            .iter()
            .find(|c| !(c.qpn == ctrl.qpn && c.index == ctrl.index) && word(c, i) == Some(snap[i]))
        else {
            continue;
        };
        r.halves[h].reported = true;
        report_interleaved(
            ctrl.qpn,
            ctrl.index,
            c,
            i,
            "stored after this write had begun",
            dev,
            bugs,
        );
        return true;
    }
    false
}

/// A QP on a shared register: follow the doorbell record (deterministic mode: only after a
/// write on its register was seen). Returns whether new work was taken.
pub fn follow(qp: &mut Qp, threaded: bool, dev: &str, bugs: &mut BugLog) -> bool {
    if !threaded && !std::mem::take(&mut qp.db.rung) {
        return false;
    }
    let dbr = qp.sq_dbr();
    let mut bad = qp.db.bad_dbr.take();
    let work = follow_record(qp, dbr, &mut bad, dev, bugs);
    qp.db.bad_dbr = bad;
    work
}

#[cfg(test)]
mod tests {
    //! Threaded mode's late-store rule, played one store at a time on one thread.

    use mlx5_hw::{QpCap, QpType};

    use super::*;
    use crate::sizing::qp_geometry;

    fn qp(qpn: u32, regs: &mut Bfregs) -> Qp {
        let cap = QpCap {
            max_send_wr: 16,
            max_recv_wr: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 64,
        };
        let g = qp_geometry(QpType::Rc, &cap, false).unwrap();
        let mut q = Qp::new(qpn, QpType::Rc, 1, 2, 3, None, false, g).unwrap();
        let a = regs.assign(qpn).unwrap();
        let (page, off, size) = a.page.unwrap();
        q.use_register(a.class, page, off, size);
        q
    }

    /// Write a one-block WQE `index` into `qp`'s ring (a ctrl, then bytes that differ per
    /// QP), advance the record past it; returns its words.
    fn wqe(qp: &Qp, index: u16) -> Vec<u64> {
        let mut b: Vec<u8> = (0..64)
            .map(|i| (i as u8).wrapping_mul(7) ^ qp.qpn as u8 ^ index as u8)
            .collect();
        b[..4].copy_from_slice(&((index as u32) << 8 | 0x08).to_be_bytes());
        b[4..8].copy_from_slice(&(qp.qpn << 8 | 4).to_be_bytes());
        let slot = index as usize % qp.geom.sq_wqe_cnt as usize;
        qp.buf.write(qp.sq_off() + slot * 64, &b);
        qp.dbrec.write_be32(4, index as u32 + 1);
        words_of(&b)
    }

    fn store(qp: &Qp, h: usize, words: &[u64], range: std::ops::Range<usize>) {
        for i in range {
            qp.uar.store_word(qp.bf_off + h * BF_HALF + i * 8, words[i]);
        }
    }

    struct T {
        regs: Bfregs,
        qps: BTreeMap<u32, Qp>,
        bugs: BugLog,
    }

    impl T {
        fn new() -> T {
            let mut regs = Bfregs::new(0, 1);
            let qps = [0x10, 0x20]
                .into_iter()
                .map(|n| (n, qp(n, &mut regs)))
                .collect();
            T {
                regs,
                qps,
                bugs: BugLog::default(),
            }
        }
        fn scan(&mut self) {
            scan(&mut self.regs, &mut self.qps, true, "t", &mut self.bugs);
        }
        fn kinds(&mut self) -> Vec<DriverBugKind> {
            self.bugs.take().into_iter().map(|b| b.kind).collect()
        }
    }

    #[test]
    fn a_store_of_one_copy_landing_after_the_next_write_began_is_reported() {
        let mut t = T::new();
        t.scan();
        let (wx, wy) = (wqe(&t.qps[&0x10], 0), wqe(&t.qps[&0x20], 0));
        store(&t.qps[&0x20], 0, &wy, 0..4);
        t.scan();
        store(&t.qps[&0x10], 0, &wx, 0..8);
        t.scan();
        assert!(t.kinds().is_empty(), "X's whole copy over Y's start");
        store(&t.qps[&0x20], 0, &wy, 4..8);
        t.scan();
        if TSO {
            assert_eq!(t.kinds(), [DriverBugKind::BlueFlameInterleaved]);
        }
        t.scan();
        assert!(t.kinds().is_empty(), "reported once");
    }

    #[test]
    fn leaving_threaded_mode_poisons_what_was_seen_and_keeps_what_was_not() {
        let mut t = T::new();
        t.scan();
        let (wx, wy) = (wqe(&t.qps[&0x10], 0), wqe(&t.qps[&0x20], 0));
        store(&t.qps[&0x10], 0, &wx, 0..1);
        t.scan();
        store(&t.qps[&0x20], 1, &wy, 0..1);
        t.regs.leave_threaded();
        let x = &t.qps[&0x10];
        assert_eq!(x.uar.load_word(x.bf_off), POISON_WORD, "seen: poisoned");
        assert_eq!(x.uar.load_word(x.bf_off + BF_HALF), wy[0], "not seen: kept");
        // Deterministic mode sees it and Y follows its record.
        scan(&mut t.regs, &mut t.qps, false, "t", &mut t.bugs);
        let y = t.qps.get_mut(&0x20).unwrap();
        assert!(follow(y, false, "t", &mut t.bugs));
        assert!(t.kinds().is_empty());
    }

    #[test]
    fn eight_byte_doorbells_and_serialised_copies_are_no_bug() {
        let mut t = T::new();
        t.scan();
        let (wx, wy) = (wqe(&t.qps[&0x10], 0), wqe(&t.qps[&0x20], 0));
        // Y copies whole, X rings the same half with its first word, Y copies its next WQE
        // into the other half, X copies whole into the first: what a locked driver does.
        store(&t.qps[&0x20], 0, &wy, 0..8);
        t.scan();
        store(&t.qps[&0x10], 0, &wx, 0..1);
        t.scan();
        let wy1 = wqe(&t.qps[&0x20], 1);
        store(&t.qps[&0x20], 1, &wy1, 0..4);
        t.scan();
        store(&t.qps[&0x20], 1, &wy1, 4..8);
        t.scan();
        let wx1 = wqe(&t.qps[&0x10], 1);
        store(&t.qps[&0x10], 0, &wx1, 0..8);
        t.scan();
        assert!(t.kinds().is_empty());
        for q in t.qps.values_mut() {
            assert!(follow(q, true, "t", &mut t.bugs));
            assert_eq!(q.db.sq_known, 2, "the record drives execution");
        }
    }
}
