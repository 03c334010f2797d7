//! Finding the QP or SRQ a CQE names: the [`Resolve`] trait and its tables (a single [`Qp`],
//! a slice, [`QpTable`]).

use core::borrow::BorrowMut;

use crate::qp::Qp;
use crate::srq::Srq;

/// Finds the QP or SRQ a CQE belongs to.
pub trait Resolve {
    /// The QP with this number, if this table holds it.
    fn qp(&mut self, qpn: u32) -> Option<&mut Qp>;
    /// The QP a CQE names, from bytes 56..60 of the CQE (`sop_drop_qpn`: the send opcode,
    /// then the QPN big-endian) as one native `u32` load: [`Resolve::qp`] of the QPN, unless
    /// the table can compare those bytes as they are (a single [`Qp`] does).
    #[inline(always)]
    fn qp_of_cqe(&mut self, sop_drop_qpn: u32) -> Option<&mut Qp> {
        let b = sop_drop_qpn.to_ne_bytes();
        self.qp(u32::from_be_bytes([0, b[1], b[2], b[3]]))
    }
    /// The SRQ with this number, if this table holds it.
    fn srq(&mut self, srqn: u32) -> Option<&mut Srq> {
        let _ = srqn;
        None
    }
    /// Call `f` on every QP the table holds, for diagnosis (what a wait that timed out was
    /// waiting on); never on the hot path. A table that cannot list its QPs lists none.
    fn for_each_qp(&self, f: &mut dyn FnMut(&Qp)) {
        let _ = f;
    }
    /// Call `f` on every SRQ the table holds ([`Resolve::for_each_qp`]).
    fn for_each_srq(&self, f: &mut dyn FnMut(&Srq)) {
        let _ = f;
    }
    /// The SRQ that takes a receive CQE naming a QP this table does not hold: an XRC target
    /// QP has no data path, its receives are completed by the XRC SRQ the CQE names in
    /// `srqn_uidx` (rdma-core `get_resp_ctx_v1`), `index` being [`Srq::cqe_index`] (the SRQN,
    /// or with CQE version 1 the SRQ's user index). [`Resolve::srq`] by default; a table that must take
    /// only its own QPs' completions — one QP's drain on a CQ whose SRQ other QPs receive
    /// through too — returns `None`, and such a CQE stays in the CQ for its owner.
    fn xrc_srq(&mut self, srqn: u32) -> Option<&mut Srq> {
        self.srq(srqn)
    }
}

impl Resolve for Qp {
    #[inline(always)]
    fn qp(&mut self, qpn: u32) -> Option<&mut Qp> {
        (self.qpn() == qpn).then_some(self)
    }
    fn for_each_qp(&self, f: &mut dyn FnMut(&Qp)) {
        f(self)
    }
    #[inline(always)]
    fn qp_of_cqe(&mut self, sop_drop_qpn: u32) -> Option<&mut Qp> {
        // The three QPN bytes as the CQE holds them, the opcode byte masked off.
        let qpn_bytes = u32::from_ne_bytes([0, 0xff, 0xff, 0xff]);
        (sop_drop_qpn & qpn_bytes == self.cqe_sop_key()).then_some(self)
    }
}

/// A slice of QPs: `[Qp]`, `[&mut Qp]`, or of anything that lends one (an owning QP of
/// `mlx5-ctx`).
impl<Q: BorrowMut<Qp>> Resolve for [Q] {
    #[inline(always)]
    fn qp(&mut self, qpn: u32) -> Option<&mut Qp> {
        self.iter_mut()
            .map(BorrowMut::borrow_mut)
            .find(|q| q.qpn() == qpn)
    }
    fn for_each_qp(&self, f: &mut dyn FnMut(&Qp)) {
        self.iter().for_each(|q| f(q.borrow()))
    }
}

/// QPs and the SRQs some of them receive through.
impl<A: Resolve + ?Sized, S: BorrowMut<Srq>> Resolve for (&mut A, &mut [S]) {
    #[inline(always)]
    fn qp(&mut self, qpn: u32) -> Option<&mut Qp> {
        self.0.qp(qpn)
    }
    #[inline(always)]
    fn qp_of_cqe(&mut self, sop_drop_qpn: u32) -> Option<&mut Qp> {
        self.0.qp_of_cqe(sop_drop_qpn)
    }
    #[inline(always)]
    fn srq(&mut self, srqn: u32) -> Option<&mut Srq> {
        self.1
            .iter_mut()
            .map(BorrowMut::borrow_mut)
            .find(|s| s.srqn() == srqn)
    }
    fn xrc_srq(&mut self, index: u32) -> Option<&mut Srq> {
        self.1
            .iter_mut()
            .map(BorrowMut::borrow_mut)
            .find(|s| s.cqe_index() == index)
    }
    fn for_each_qp(&self, f: &mut dyn FnMut(&Qp)) {
        self.0.for_each_qp(f)
    }
    fn for_each_srq(&self, f: &mut dyn FnMut(&Srq)) {
        self.1.iter().for_each(|s| f(s.borrow()))
    }
}

/// An owning table of QPs and SRQs for a CQ that serves many of them.
///
/// Lookup by QPN takes constant time whatever the number of QPs: a direct-indexed table by
/// the QPN's low bits (no scan, no hashing), the smallest power of two at least twice the QPs
/// in which their QPNs' low bits all differ, rebuilt when a QP is added; the entry's QP is
/// checked against the CQE's QPN. libmlx5 does the same with a two-level table indexed by the
/// QPN (rdma-core `providers/mlx5` `mlx5_find_qp`), or by the user index a CQE of version 1
/// carries in `srqn_uidx` (`find_rsc`, `mlx5_find_uidx`), which needs the QP created with
/// that index; the QPN needs nothing from the control path and works on every device. A
/// device hands out QPNs from a range (the software ConnectX counts up), so the low bits of
/// a CQ's QPs rarely collide and the table stays a few entries per QP; at worst it grows to
/// 2^24 entries (4 bytes each), where no two 24-bit QPNs collide.
///
/// An entry holds where its QP sits in the table's array (in 8-byte units, so that the
/// lookup is a load, a compare and an address: no multiply, no bounds check), and an entry
/// that holds no QP names the first element — the first QP, or in an empty table a sentinel
/// whose QPN field no 24-bit QPN equals: the compare of the element's own QPN with the
/// CQE's rejects it, so an empty entry needs no test of its own, and a QP replaced through
/// [`QpTable::qp_at`] by one of another QPN is never taken for the old one.
#[derive(Debug)]
pub struct QpTable {
    /// The QPs, never fewer than one element of capacity: in an empty table that element is
    /// the sentinel (only its QPN field written, [`QpTable::default`]).
    qps: Vec<Qp>,
    srqs: Vec<Srq>,
    /// `qpn & mask` → the byte offset of its QP in `qps` divided by 8 (the QP's index ×
    /// [`QP_UNITS`]); 0, the first element, when none.
    slots: Vec<u32>,
    /// `slots.len() - 1`.
    mask: u32,
    /// Distinct QPNs in the table.
    live: usize,
}

/// The size of a [`Qp`] in the 8-byte units of [`QpTable`]'s entries.
const QP_UNITS: usize = {
    assert!(core::mem::size_of::<Qp>().is_multiple_of(8));
    core::mem::size_of::<Qp>() / 8
};

impl Default for QpTable {
    fn default() -> QpTable {
        let mut qps = Vec::with_capacity(1);
        let spare: &mut [core::mem::MaybeUninit<Qp>] = qps.spare_capacity_mut();
        // SAFETY: the first spare element is allocated (capacity 1) and its QPN field, a
        // `u32` at `Qp::QPN_OFFSET`, aligned inside it; writing it initialises those 4 bytes,
        // the only ones the lookup reads of an element that holds no QP.
        unsafe {
            spare[0]
                .as_mut_ptr()
                .cast::<u8>()
                .add(Qp::QPN_OFFSET)
                .cast::<u32>()
                .write(u32::MAX)
        };
        QpTable {
            qps,
            srqs: Vec::new(),
            slots: vec![0],
            mask: 0,
            live: 0,
        }
    }
}

/// The largest table: every 24-bit QPN has its own entry.
const MAX_SLOTS: usize = 1 << 24;

impl QpTable {
    /// An empty table.
    pub fn new() -> QpTable {
        QpTable::default()
    }
    /// Add a QP; returns its position for [`QpTable::qp_at`]. A QP with the same QPN replaces
    /// the previous one in lookups by QPN.
    ///
    /// # Panics
    /// When the table would hold more QPs than its 32-bit entries can place (2^32 / 8 bytes
    /// of QPs, some 76 million — far more than memory or any device's QPNs allow).
    pub fn insert_qp(&mut self, qp: Qp) -> usize {
        let pos = self.qps.len();
        let at = u32::try_from((pos + 1) * QP_UNITS)
            .expect("QpTable holds at most 2^32 / 8 bytes of QPs");
        let at = at - QP_UNITS as u32;
        let qpn = qp.qpn();
        let slot = (qpn & self.mask) as usize;
        // The entry's QP, when it holds one: the element it names hashes to it.
        let held = self
            .qps
            .get(self.slots[slot] as usize / QP_UNITS)
            .filter(|q| (q.qpn() & self.mask) as usize == slot)
            .map(Qp::qpn);
        self.qps.push(qp);
        match held {
            None if self.slots.len() >= 2 * (self.live + 1) => {
                self.slots[slot] = at;
                self.live += 1;
            }
            Some(q) if q == qpn => self.slots[slot] = at,
            _ => self.rebuild(),
        }
        pos
    }
    /// Size the table for the QPs it holds: the smallest power of two of at least twice their
    /// number in which their QPNs' low bits differ.
    fn rebuild(&mut self) {
        // (qpn, position), the last inserted of each QPN.
        let mut live: Vec<(u32, u32)> = self
            .qps
            .iter()
            .enumerate()
            .map(|(pos, q)| (q.qpn(), pos as u32))
            .collect();
        live.sort_unstable_by_key(|&(qpn, i)| (qpn, core::cmp::Reverse(i)));
        live.dedup_by_key(|e| e.0);
        self.live = live.len();
        let mut len = (2 * live.len()).next_power_of_two().min(MAX_SLOTS);
        loop {
            // `None`: no QP yet (the entry stays 0, the first element).
            let mut slots: Vec<Option<u32>> = vec![None; len];
            let mask = len as u32 - 1;
            let mut ok = true;
            for &(qpn, i) in &live {
                let s = &mut slots[(qpn & mask) as usize];
                if s.is_some() {
                    ok = false;
                    break;
                }
                // At most the `insert_qp` bound.
                *s = Some(i * QP_UNITS as u32);
            }
            if ok || len == MAX_SLOTS {
                self.slots = slots.into_iter().map(|s| s.unwrap_or(0)).collect();
                self.mask = mask;
                return;
            }
            len *= 2;
        }
    }
    /// Add an SRQ; returns its position for [`QpTable::srq_at`].
    pub fn insert_srq(&mut self, srq: Srq) -> usize {
        self.srqs.push(srq);
        self.srqs.len() - 1
    }
    /// The QP at `pos`.
    pub fn qp_at(&mut self, pos: usize) -> Option<&mut Qp> {
        self.qps.get_mut(pos)
    }
    /// The SRQ at `pos`.
    pub fn srq_at(&mut self, pos: usize) -> Option<&mut Srq> {
        self.srqs.get_mut(pos)
    }
    /// All QPs.
    pub fn qps_mut(&mut self) -> &mut [Qp] {
        &mut self.qps
    }
}

impl Resolve for QpTable {
    #[inline(always)]
    fn qp(&mut self, qpn: u32) -> Option<&mut Qp> {
        // No QP has a number above 24 bits, and the sentinel's is `u32::MAX` (free where the
        // QPN comes from a CQE's three bytes: the compiler knows its top byte is 0).
        if qpn > 0x00ff_ffff {
            return None;
        }
        debug_assert_eq!(self.slots.len(), self.mask as usize + 1);
        // SAFETY: `slots` has `mask + 1` entries (`QpTable::default`, `QpTable::rebuild` set
        // both together), so `qpn & mask` indexes one.
        let at = unsafe { *self.slots.get_unchecked((qpn & self.mask) as usize) } as usize;
        // SAFETY: every entry is `i × QP_UNITS` for an element `i` of `qps`' allocation that
        // is a QP, or is 0 (`insert_qp`, `rebuild`): element 0, a QP or, in an empty table,
        // the sentinel, whose QPN field `default` initialised (capacity is never below 1).
        // So `p` is an element and its QPN field 4 initialised, aligned bytes; the element is
        // a QP whenever that field equals `qpn`, a 24-bit QPN (the sentinel's is `u32::MAX`).
        unsafe {
            let p = self.qps.as_mut_ptr().cast::<u64>().add(at).cast::<Qp>();
            let field = p.cast::<u8>().add(Qp::QPN_OFFSET).cast::<u32>().read();
            if field != qpn {
                return None;
            }
            Some(&mut *p)
        }
    }
    #[inline]
    fn srq(&mut self, srqn: u32) -> Option<&mut Srq> {
        self.srqs.iter_mut().find(|s| s.srqn() == srqn)
    }
    fn xrc_srq(&mut self, index: u32) -> Option<&mut Srq> {
        self.srqs.iter_mut().find(|s| s.cqe_index() == index)
    }
    fn for_each_qp(&self, f: &mut dyn FnMut(&Qp)) {
        self.qps.iter().for_each(f)
    }
    fn for_each_srq(&self, f: &mut dyn FnMut(&Srq)) {
        self.srqs.iter().for_each(f)
    }
}
