//! What a completion does to its QP, asked of the QP by the CQ (`crate::cq`). The CQ reads
//! CQEs and writes [`Wc`]s; what a CQE does to a queue is asked of that queue, never done on
//! its fields:
//! - what names this QP in a CQE: [`Qp::cqe_qpn_key`], [`Qp::cqe_sop_key`];
//! - the common paths (one CQE, a run of CQEs): [`Qp::send_queue`] and [`Qp::recv_queue`],
//!   each a [`WorkQueue`](crate::queue::WorkQueue) (`crate::queue`: does this counter name
//!   your oldest WR, retire it and give me its id; where do your outstanding WRs start, how
//!   many a run retired);
//! - the full path (errors, uncommon WQEs, receives with scatter or out of order):
//!   [`Qp::complete_send`], [`Qp::complete_recv`], which hand the whole CQE to the queue and
//!   follow the device into Error ([`Qp::follow_error_completion`]); a run of flushes begins
//!   the send queue's error period with [`Qp::sq_begin_flush`].

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

    /// The send queue, for what a CQE asks of it ([`WorkQueue`](crate::queue::WorkQueue); the
    /// full path's and the flush runs' questions are its own methods).
    #[inline(always)]
    pub(crate) fn send_queue(&mut self) -> &mut SendQueue {
        &mut self.sq
    }

    /// The QP's own receive queue, for what a CQE asks of it
    /// ([`WorkQueue`](crate::queue::WorkQueue)). A QP without one (an SRQ's) has an absent
    /// queue whose key is shut: it names no CQE's WR and gives no window, so the common paths
    /// need no test of their own.
    #[inline(always)]
    pub(crate) fn recv_queue(&mut self) -> &mut RecvQueue {
        &mut self.rq
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

    /// The send queue's first error completion is a flush naming its oldest WQE: from now on
    /// every CQE retires with a completion of its own, and the QP follows the device out of
    /// RTS ([`Qp::follow_error_completion`]) — what `SendQueue::complete` and the full poll
    /// path do for that CQE before they complete it. `old`: that WQE was posted before the
    /// last recovery from SQE (`SendQueue::before_recovery`, asked before the flush retired
    /// it): the period ends at the recovery, and the QP stays where the control path put it.
    #[cold]
    #[inline(never)]
    pub(crate) fn sq_begin_flush(&mut self, old: bool) {
        self.sq.begin_error(old);
        if !old {
            self.follow_error_completion(true);
        }
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
}
