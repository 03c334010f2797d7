//! Receives posted on the QP's own receive queue.

use super::*;

impl Qp {
    /// The QP's own receive queue, `None` when it has none (an SRQ).
    #[inline(always)]
    pub(super) fn rq_ref(&self) -> Option<&RecvQueue> {
        self.rq.present().then_some(&self.rq)
    }

    /// [`Qp::rq_ref`], mutable.
    #[inline(always)]
    pub(super) fn rq_mut(&mut self) -> Option<&mut RecvQueue> {
        self.rq.present().then_some(&mut self.rq)
    }

    /// Post one receive WR. Its buffers must stay valid and registered until its completion
    /// is polled. Not available when the QP receives through an SRQ (post there).
    ///
    /// Accepted from Init on, Error included: a receive posted to a QP in Error is flushed by
    /// the device (one `IBV_WC_WR_FLUSH_ERR` completion; [`crate::Qp::post`] has the rule and
    /// its sources). Refused in Reset ([`Error::WrongState`]), where the IB spec requires an
    /// immediate error.
    #[inline]
    pub fn post_recv(&mut self, wr_id: u64, sges: &[Sge]) -> Result<()> {
        self.post_recv_list(&[RecvWr { wr_id, sges }])
    }

    /// Post several receive WRs with one doorbell-record update; all are checked before any is
    /// written (all or nothing). The states as for [`Qp::post_recv`].
    #[inline]
    pub fn post_recv_list(&mut self, wrs: &[RecvWr<'_>]) -> Result<()> {
        if self.state == QpState::Reset {
            return Err(Error::WrongState {
                op: "post a receive",
                state: self.state,
                hint: "receives may be posted from Init on (IBTA Vol. 1 §10.3.1, Reset: work \
                       requests are refused with an immediate error); in Error they are \
                       accepted and flushed",
            });
        }
        let srq = self.srqn.is_some();
        match self.rq_mut() {
            Some(rq) => rq.post(wrs),
            None if srq => Err(Error::WrongState {
                op: "post a receive on a QP that uses an SRQ",
                state: self.state,
                hint: "post to the Srq instead",
            }),
            None => Err(Error::RqFull { capacity: 0 }),
        }
    }
}
