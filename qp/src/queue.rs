//! What a completion asks of the work queue it completes on: the whole interface the poll's
//! common paths have to a send queue ([`crate::sq::SendQueue`]) and a QP's own receive queue
//! ([`crate::rq::RecvQueue`]).
//!
//! A CQE names its WQE by a 16-bit counter (`wqe_counter`: the send queue's `wqe_index` of its
//! first block, the receive queue's WQE index; `docs/sources.md` §4). The CQ asks the queue two
//! things of it, one CQE at a time — does this counter name your oldest outstanding WR, which
//! retires alone ([`WorkQueue::names_oldest`])? then retire it and give me its WR id
//! ([`WorkQueue::take_oldest`]) — or, for a run of CQEs of one queue in consecutive slots, once
//! per run: where do your outstanding WRs start ([`WorkQueue::window`]), and, after it, how many
//! the run retired ([`WorkQueue::retired`]). The queue keeps its indices, keys and gates to
//! itself; the CQ reads CQEs and writes completions.
//!
//! A run of flush errors (`WR_FLUSH_ERR`, each naming the next WR) goes through the same
//! calls. Everything else a CQE can do — another error, a WQE of more than one block or an
//! atomic, a receive with inline scatter or out of order, a receive of an SRQ — is the full
//! path's, which hands the whole CQE to the QP (`Qp::complete_send`, `Qp::complete_recv`: the
//! queue's `complete`, and the QP following the device into Error).
//!
//! The send queue answers a few questions of its own beside these, each for one path:
//! whether every outstanding WQE is of the common shape (`SendQueue::all_common`: the lean
//! send poll and a flush run), whether it is in an error period and since when
//! (`SendQueue::flushing`, `SendQueue::before_recovery`: a flush run), whether a run may
//! follow the CQE just taken (`SendQueue::seems_idle`), and its window with the meta bytes
//! (`SendQueue::view`: the lean send poll).

/// Where a queue's outstanding WRs start, for a run of CQEs ([`WorkQueue::window`]): read once
/// per run, its WR ids then taken slot by slot.
#[derive(Clone, Copy)]
pub(crate) struct Window {
    /// The counter of the oldest outstanding WR (the send queue's `ci`, the receive queue's
    /// tail), low 16 bits: what the run's first CQE must name.
    pub oldest: u16,
    /// The WRs (for the send queue, blocks) a run may retire at most: those outstanding.
    pub outstanding: u16,
    /// The ring's entries less one: a counter's slot is `counter & mask`.
    pub mask: u16,
    /// The WR ids, one per slot.
    pub wr_ids: *const u64,
    /// The send queue's meta bytes, one per slot (0: a WQE of one block, not an atomic);
    /// null for a receive queue.
    pub meta: *const u8,
}

/// What a CQE asks of the queue it completes on, on the poll's common paths (module docs).
///
/// Implemented by the send queue and by a QP's own receive queue; the CQ reaches them through
/// `Qp::send_queue` and `Qp::recv_queue`.
pub(crate) trait WorkQueue {
    /// Whether a success CQE naming `counter` names the oldest outstanding WR and that WR
    /// retires alone: for the send queue a WQE of one block, not an atomic, with every other
    /// outstanding WQE so too; for a receive queue nothing completed out of order and no
    /// completion pending. False on an idle queue and on an absent receive queue.
    fn names_oldest(&self, counter: u16) -> bool;

    /// Retire the WR [`WorkQueue::names_oldest`] accepted for `counter`; its WR id.
    fn take_oldest(&mut self, counter: u16) -> u64;

    /// Where the outstanding WRs start, when a run may take them slot by slot; `None` when it
    /// may not (a receive queue with a WR completed out of order or a completion pending, an
    /// absent one). The send queue always gives it: a run of its CQEs checks the meta bytes,
    /// or knows them 0 (`SendQueue::all_common`).
    fn window(&self) -> Option<Window>;

    /// A run retired `k` WRs from the window's oldest (each of the common shape).
    fn retired(&mut self, k: u16);
}
