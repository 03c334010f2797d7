//! The QP's doorbell register and what the doorbell scanners remember of it, data only: where
//! the BlueFlame halves are and the poison word that fills them, which register a QP rings,
//! and the per-QP detection state. The scanning and the checks are [`crate::doorbell`]
//! (deterministic), [`crate::doorbell::threaded`] and [`crate::doorbell::shared`].

use std::time::Instant;

use crate::mem::DmaBuf;

/// Offset of the QP's bfreg in its UAR page (`MLX5_BF_OFFSET`, bfreg 0).
pub const BF_OFFSET: usize = 0x800;
/// Size of one BlueFlame half (`bf.size`; UCX `UCT_IB_MLX5_BF_REG_SIZE`).
pub const BF_HALF: usize = 256;
/// The poison word.
pub(crate) const POISON: [u8; 8] = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00];

/// Which register a QP rings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BfClass {
    /// A UAR page of its own that no context count covers (QPs the device makes itself).
    Own,
    /// One of the context's dedicated (low-latency) registers, on a page of its own.
    Dedicated,
    /// Shared register number `n` of the context.
    Shared(usize),
}

/// Per-QP doorbell detection state.
#[derive(Debug, Default)]
pub struct DoorbellState {
    /// The SQ producer index the device has been told about by a doorbell.
    pub sq_known: u16,
    /// Half of the last doorbell seen, when known.
    pub last_half: Option<usize>,
    /// A BlueFlame copy to execute instead of the ring: (WQE index, bytes); deterministic mode
    /// only (threaded mode executes the ring).
    pub bf: Option<(u16, Vec<u8>)>,
    /// Doorbells seen.
    pub count: u64,
    /// Threaded mode: BlueFlame copies verified equal to the ring.
    pub bf_verified: u64,
    /// Threaded mode: of those, copies the device first saw incomplete (the driver was in the
    /// middle of the copy) and verified at a later scan.
    pub bf_verified_late: u64,
    /// Threaded mode: writes judged, once settled, to be 8-byte doorbells.
    pub db8: u64,
    /// Threaded mode: writes that ended without a verdict (overwritten before they settled,
    /// naming a WQE already completed, or written when the half was not known clean).
    pub unjudged: u64,
    /// Threaded mode: what is known of each half (`None` in deterministic mode).
    pub threaded: Option<Watcher>,
    /// A QP on a shared register: a write was seen on the register since the QP last
    /// followed its doorbell record ([`crate::doorbell::shared`]).
    pub rung: bool,
    /// A QP on a shared register: the last record value reported as garbage (reported once).
    pub bad_dbr: Option<u16>,
}

impl DoorbellState {
    /// Fill both BlueFlame halves with poison.
    pub fn poison(&self, uar: &DmaBuf) {
        for i in 0..(2 * BF_HALF / 8) {
            uar.store_word(BF_OFFSET + i * 8, u64::from_ne_bytes(POISON));
        }
    }
}

/// A write being watched until it settles.
#[derive(Clone, Debug)]
pub(crate) struct Watch {
    /// The WQE its first word names.
    pub(crate) index: u16,
    /// DS of its first word.
    pub(crate) ds: u8,
    /// Scan at which it was first seen.
    pub(crate) started: u64,
    /// Wall time it was first seen.
    pub(crate) since: Instant,
    /// Scans that looked at it.
    pub(crate) looks: u32,
    /// Its half's other words were not known to be poison when it began (no verdict).
    pub(crate) tainted: bool,
    /// The WQE's blocks as read from the ring while it was in flight (the bytes that
    /// execute), once read.
    pub(crate) ring: Option<Vec<u8>>,
}

/// One BlueFlame half as the device last left it.
#[derive(Clone, Debug)]
pub(crate) struct Half {
    /// The first word of the latest write seen (poison before any).
    pub(crate) w0: u64,
    /// The other words are known to hold poison (apart from the watched write's stores).
    pub(crate) clean: bool,
    /// Scan at which `w0` last changed.
    pub(crate) changed_at: u64,
    /// The latest write, until judged.
    pub(crate) watch: Option<Watch>,
}

/// Threaded-mode doorbell state of one QP.
#[derive(Clone, Debug)]
pub struct Watcher {
    pub(crate) scan: u64,
    pub(crate) halves: [Half; 2],
    /// The last record value reported as garbage (reported once).
    pub(crate) bad_dbr: Option<u16>,
}
