//! What a completion does to its QP, asked of the QP by the CQ (`crate::cq`): the queue
//! interface of the poll. The CQ reads CQEs and writes [`Wc`]s; everything a CQE does to a
//! queue — retire up to this counter, give me the WR id, follow the device into Error — is a
//! call here, and each forwards to the queue that owns the bookkeeping (`crate::sq`,
//! `crate::rq`). The CQ never touches a QP's fields.
//!
//! The calls, by the paths that use them:
//! - every path: [`Qp::cqe_qpn_key`], [`Qp::cqe_sop_key`] (what names this QP in a CQE);
//! - the runs of common CQEs: [`Qp::sq_lean_view`] / [`Qp::sq_lean_retired`] and
//!   [`Qp::rq_lean_view`] / [`Qp::rq_lean_retired`] (the ring window a run reads, then how
//!   many it retired);
//! - one CQE at a time: [`Qp::sq_names_oldest`] / [`Qp::sq_take_oldest`] and
//!   [`Qp::rq_names_oldest`] / [`Qp::rq_take_oldest`] (does this counter name the oldest
//!   WR? retire it, give me its id);
//! - the full path (errors, uncommon WQEs, receives with scatter): [`Qp::complete_send`],
//!   [`Qp::complete_recv`] (each follows the device into Error itself),
//!   [`Qp::follow_error_completion`] (a receive through an SRQ, a flush run) and the flush
//!   runs' error-period questions.

use super::*;

impl Qp {
    /// An error or flush completion of this QP was polled: the device has moved the QP out of
    /// RTS, so the data path follows it without the caller's help. A failed send of a UC or UD
    /// QP leaves it in SQE (its receive queue keeps working), of an RC QP or a DCI in Error
    /// (a DCI has no SQE: `modify_dci_qp_is_ok`), anything else in Error (IBTA
    /// Vol. 1 §10.3, QP states: the Send Queue Error state is for UC/UD requester errors;
    /// the software ConnectX's `engine::enter_sqe` / `fail_qp`). Never moves a QP back out of
    /// Error, nor out of Reset.
    #[cold]
    pub(crate) fn follow_error_completion(&mut self, send: bool) {
        let next = if send && !matches!(self.qp_type, QpType::Rc | QpType::Dci) {
            QpState::Sqe
        } else {
            QpState::Error
        };
        match (self.state, next) {
            (QpState::Error | QpState::Reset, _) | (QpState::Sqe, QpState::Sqe) => {}
            _ => self.set_state(next),
        }
    }

    /// Report every WR still outstanding on this QP (send and receive) as flushed
    /// (`IBV_WC_WR_FLUSH_ERR`) and retire it. For a QP in Error whose device will report
    /// nothing more (before [`Qp::set_state`] to Reset): with it every posted WR is accounted
    /// for exactly once. Returns the completions written; call again while it fills `out`.
    pub fn flush_outstanding(&mut self, out: &mut [Wc]) -> Result<usize> {
        if self.state != QpState::Error {
            return Err(Error::WrongState {
                op: "flush outstanding WRs",
                state: self.state,
                hint: "only a QP in Error has its WRs flushed",
            });
        }
        let n = match self.sq.flush_all(self.qpn, out) {
            Progress::Done(n) => n,
            Progress::Partial(n) => return Ok(n),
            Progress::Bad(_) => 0,
        };
        let qpn = self.qpn;
        let m = match self.rq_mut() {
            Some(rq) => match rq.flush_all(qpn, &mut out[n..]) {
                Progress::Done(m) | Progress::Partial(m) => m,
                Progress::Bad(_) => 0,
            },
            None => 0,
        };
        Ok(n + m)
    }

    /// A requester CQE (REQ or REQ_ERR, read whole by the full path) naming block
    /// `wqe_counter`: an error moves the QP out of RTS ([`Qp::follow_error_completion`]) — but
    /// a late error of a period it was recovered from (`SendQueue::error_of_recovered_period`)
    /// does not move it back — then the send queue retires what the CQE names
    /// (`SendQueue::complete`).
    pub(crate) fn complete_send(
        &mut self,
        wqe_counter: u16,
        info: &CqeInfo,
        out: &mut [Wc],
    ) -> Progress {
        if info.status != crate::wc::WcStatus::Success
            && !self.sq.error_of_recovered_period(wqe_counter)
        {
            self.follow_error_completion(true);
        }
        self.sq.complete(wqe_counter, info, out)
    }

    #[inline(always)]
    pub(crate) fn complete_send_success(
        &mut self,
        wqe_counter: u16,
        send_opcode: u8,
        qpn: u32,
        byte_cnt: u32,
        out: &mut Wc,
    ) -> bool {
        self.sq
            .complete_success(wqe_counter, send_opcode, qpn, byte_cnt, out)
    }

    /// What the lean poll reads of the send queue once per batch.
    #[inline(always)]
    pub(crate) fn sq_lean_view(&self) -> crate::sq::LeanView {
        self.sq.lean_view()
    }

    /// The QPN's part of what the lean poll expects in this QP's CQEs.
    #[inline(always)]
    pub(crate) fn cqe_qpn_key(&self) -> u64 {
        self.cqe_qpn_key
    }

    /// [`Qp::cqe_qpn_key`]'s QPN bytes as a native `u32` of `sop_drop_qpn`.
    #[inline(always)]
    pub(crate) fn cqe_sop_key(&self) -> u32 {
        self.cqe_sop_key
    }

    /// Whether the send CQE naming block `wqe_counter` names the oldest outstanding WQE and
    /// every outstanding WQE is of the common shape (one block, not an atomic)
    /// ([`crate::sq::SendQueue::names_oldest`]).
    #[inline(always)]
    pub(crate) fn sq_names_oldest(&self, wqe_counter: u16) -> bool {
        self.sq.names_oldest(wqe_counter)
    }

    /// Retire the WQE [`Qp::sq_names_oldest`] accepted; its WR id.
    #[inline(always)]
    pub(crate) fn sq_take_oldest(&mut self, wqe_counter: u16) -> u64 {
        self.sq.take_oldest(wqe_counter)
    }

    /// Whether every outstanding send WQE has meta byte 0 (the lean poll need not read them).
    #[inline(always)]
    pub(crate) fn sq_all_common(&self) -> bool {
        self.sq.all_common()
    }

    /// Whether the oldest outstanding send WQE was posted before the last recovery from SQE
    /// (`SendQueue::before_recovery`).
    #[inline(always)]
    pub(crate) fn sq_before_recovery(&self) -> bool {
        self.sq.before_recovery()
    }

    /// Whether the send queue is in an error period: it met an error completion and has not
    /// been recovered past it (the full path's `SendQueue::complete`: every CQE retires with
    /// a completion of its own; `SendQueue::flushing`).
    #[inline(always)]
    pub(crate) fn sq_flushing(&self) -> bool {
        self.sq.flushing()
    }

    /// The send queue's first error completion is a flush naming its oldest WQE: from now on
    /// every CQE retires with a completion of its own, and the QP follows the device out of
    /// RTS ([`Qp::follow_error_completion`]) — what `SendQueue::complete` and the full poll
    /// path do for that CQE before they complete it. `old`: that WQE was posted before the
    /// last recovery from SQE ([`Qp::sq_before_recovery`], asked before the flush retired
    /// it): the period ends at the recovery, and the QP stays where the control path put it.
    #[cold]
    #[inline(never)]
    pub(crate) fn sq_begin_flush(&mut self, old: bool) {
        self.sq.begin_error(old);
        if !old {
            self.follow_error_completion(true);
        }
    }

    /// Whether no send WQE is outstanding, from the one-entry key's copy of `ci`'s low bits
    /// (a register after a retire): exact but when 65536 blocks are outstanding; for deciding
    /// whether a run may follow, which either answer leaves correct.
    #[inline(always)]
    pub(crate) fn sq_seems_idle(&self) -> bool {
        self.sq.seems_idle()
    }

    /// The lean poll retired `k` one-block WQEs.
    #[inline(always)]
    pub(crate) fn sq_lean_retired(&mut self, k: u16) {
        self.sq.lean_retired(k)
    }

    /// A receive CQE for this QP's RQ; `Err(expected)` when it breaks the receive order
    /// (`rq` module docs). An error completion moves the QP to Error first
    /// ([`Qp::follow_error_completion`]).
    pub(crate) fn complete_recv(
        &mut self,
        wqe_counter: u16,
        wc: Wc,
        inline: Option<&[u8]>,
        out: &mut [Wc],
        first: bool,
    ) -> core::result::Result<Progress, u16> {
        if !wc.is_ok() {
            self.follow_error_completion(false);
        }
        match self.rq_mut() {
            Some(rq) => rq.complete(wqe_counter, wc, inline, out, first),
            None => Ok(Progress::Bad(
                "receive completion on a QP without a receive queue",
            )),
        }
    }

    /// What the lean receive poll reads of this QP's own receive queue, when it may run
    /// ([`crate::rq::RecvQueue::lean_view`]); `None` without one (an SRQ).
    #[inline(always)]
    pub(crate) fn rq_lean_view(&self) -> Option<crate::rq::RecvLeanView> {
        // (An absent queue's key is shut: `None`.)
        self.rq.lean_view()
    }

    /// Whether the receive CQE naming WQE `wqe_counter` names the oldest outstanding receive
    /// of this QP's own receive queue and the lean paths may retire it
    /// ([`crate::rq::RecvQueue::names_oldest`]); false on an SRQ.
    #[inline(always)]
    pub(crate) fn rq_names_oldest(&self, wqe_counter: u16) -> bool {
        // (An absent queue's key is shut: no test of its own.)
        self.rq.names_oldest(wqe_counter)
    }

    /// Retire the receive [`Qp::rq_names_oldest`] accepted; its WR id.
    #[inline(always)]
    pub(crate) fn rq_take_oldest(&mut self, wqe_counter: u16) -> u64 {
        self.rq.take_oldest(wqe_counter)
    }

    /// The lean receive poll retired `k` receives.
    #[inline(always)]
    pub(crate) fn rq_lean_retired(&mut self, k: u16) {
        // (Only after a lean view, which an absent queue never gives.)
        self.rq.lean_retired(k);
    }

    /// The QP's own receive queue, `None` when it has none (an SRQ).
    #[inline(always)]
    pub(super) fn rq_ref(&self) -> Option<&RecvQueue> {
        self.rq.present().then_some(&self.rq)
    }

    /// [`Qp::rq_ref`], mutable.
    #[inline(always)]
    pub(crate) fn rq_mut(&mut self) -> Option<&mut RecvQueue> {
        self.rq.present().then_some(&mut self.rq)
    }

    pub(crate) fn reply_sges(&self, wqe_counter: u16, out: &mut [DataSeg; 16]) -> usize {
        self.sq.reply_sges(wqe_counter, out)
    }
}
