//! The application's side of a QP during connect and rebuild: the control path tells the data
//! path each state it reaches, asks it to post receives, and drains its completions.
//!
//! [`QpLink`] wires this to the data path of this crate ([`Qp`], [`Cq`]); [`ControlOnly`] is
//! for a QP whose data path lives elsewhere (tests of the control path, the verbs backend).
//! Anything else can implement [`Link`].

use mlx5_hw::QpState;
use mlx5_qp::{Cq, Qp, Resolve, Srq, Wc};

/// What connect and rebuild need from the data path.
pub trait Link {
    /// The control path moved the QP to `state` (the device confirmed it with `query_qp`).
    fn set_state(&mut self, state: QpState);
    /// Post the receives the peer may consume. Called once the QP is in Init — before the QP
    /// can receive and before this side tells the peer it is ready — on connect and after
    /// every rebuild (the Reset before it forgot every posted receive).
    fn post_receives(&mut self) -> mlx5_qp::Result<()>;
    /// Poll this QP's completions into `out` — its sends and its receives, SRQ receives
    /// included (with their WR ids) — and nothing else: on a CQ shared with other QPs their
    /// CQEs stay in the CQ for their owner ([`mlx5_qp::Cq::poll_own`]). 0 when none is ready.
    /// A rebuild drains every CQE of the QP through this before the Reset, so an error that
    /// leaves a CQE of this QP in the CQ ([`mlx5_qp::Error::leaves_cqe`]) stops the rebuild.
    fn poll(&mut self, out: &mut [Wc]) -> mlx5_qp::Result<usize>;
    /// Report as flushed every WR still outstanding once the device has nothing more to say
    /// (the QP is in Error and its CQ is empty).
    fn flush_outstanding(&mut self, out: &mut [Wc]) -> mlx5_qp::Result<usize>;
    /// The data-path QP, if there is one (for diagnosis dumps).
    fn data_path(&self) -> Option<&Qp> {
        None
    }
}

/// A [`Link`] to this crate's data path: one [`Qp`], the CQ its sends complete on, optionally
/// a separate receive CQ and the SRQ it receives through, and a closure that posts the
/// receives.
///
/// The CQs may be shared with other QPs and the SRQ with other QPs: polling takes only this
/// QP's CQEs ([`mlx5_qp::Cq::poll_own`]) and leaves the others' in the CQ, in their order, for
/// their owner; this QP's SRQ receives come back as completions with their WR ids, to be
/// posted to the SRQ again.
pub struct QpLink<'a, F> {
    /// The data-path QP.
    pub qp: &'a mut Qp,
    /// The send CQ (also the receive CQ unless `recv_cq` is given).
    pub cq: &'a mut Cq,
    /// A separate receive CQ.
    pub recv_cq: Option<&'a mut Cq>,
    /// The SRQ the QP receives through (required when it has one: its receive CQEs name it).
    pub srq: Option<&'a mut Srq>,
    /// Posts the receives; called with the QP in Init.
    pub post_receives: F,
}

impl<'a, F> QpLink<'a, F>
where
    F: FnMut(&mut Qp) -> mlx5_qp::Result<()>,
{
    /// A link with one CQ for sends and receives.
    pub fn new(qp: &'a mut Qp, cq: &'a mut Cq, post_receives: F) -> Self {
        QpLink {
            qp,
            cq,
            recv_cq: None,
            srq: None,
            post_receives,
        }
    }

    /// Receives complete on `cq`, not on the send CQ.
    pub fn recv_cq(mut self, cq: &'a mut Cq) -> Self {
        self.recv_cq = Some(cq);
        self
    }

    /// The QP receives through `srq`.
    pub fn srq(mut self, srq: &'a mut Srq) -> Self {
        self.srq = Some(srq);
        self
    }
}

/// What a [`QpLink`] polls with: its QP and its SRQ, and no other QP's receives through that
/// SRQ ([`Resolve::xrc_srq`]).
struct OwnTable<'l, 'a> {
    qp: &'l mut Qp,
    srq: Option<&'l mut &'a mut Srq>,
}

impl Resolve for OwnTable<'_, '_> {
    fn qp(&mut self, qpn: u32) -> Option<&mut Qp> {
        self.qp.qp(qpn)
    }
    fn srq(&mut self, srqn: u32) -> Option<&mut Srq> {
        match self.srq.as_deref_mut() {
            Some(s) if s.srqn() == srqn => Some(&mut **s),
            _ => None,
        }
    }
    fn xrc_srq(&mut self, _srqn: u32) -> Option<&mut Srq> {
        None
    }
}

impl<F> core::fmt::Debug for QpLink<'_, F> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("QpLink")
            .field("qpn", &self.qp.qpn())
            .field("cqn", &self.cq.cqn())
            .field("srqn", &self.srq.as_ref().map(|s| s.srqn()))
            .finish_non_exhaustive()
    }
}

impl<F> Link for QpLink<'_, F>
where
    F: FnMut(&mut Qp) -> mlx5_qp::Result<()>,
{
    fn set_state(&mut self, state: QpState) {
        self.qp.set_state(state);
    }
    fn post_receives(&mut self) -> mlx5_qp::Result<()> {
        (self.post_receives)(self.qp)
    }
    fn poll(&mut self, out: &mut [Wc]) -> mlx5_qp::Result<usize> {
        if let (Some(srqn), None) = (self.qp.srqn(), self.srq.as_ref()) {
            // Its receive CQEs could not be placed (nor their WR ids returned): say so before
            // anything is polled.
            return Err(mlx5_qp::Error::UnknownSrqn {
                cqn: self.recv_cq.as_ref().map_or(self.cq.cqn(), |c| c.cqn()),
                srqn,
            });
        }
        let mut table = OwnTable {
            qp: &mut *self.qp,
            srq: self.srq.as_mut(),
        };
        let n = self.cq.poll_own(&mut table, out)?;
        match self.recv_cq.as_mut() {
            Some(rcq) => Ok(n + rcq.poll_own(&mut table, &mut out[n..])?),
            None => Ok(n),
        }
    }
    fn flush_outstanding(&mut self, out: &mut [Wc]) -> mlx5_qp::Result<usize> {
        self.qp.flush_outstanding(out)
    }
    fn data_path(&self) -> Option<&Qp> {
        Some(self.qp)
    }
}

/// A [`Link`] with no data path: state changes are only logged, nothing is posted or polled.
#[derive(Clone, Copy, Debug, Default)]
pub struct ControlOnly;

impl Link for ControlOnly {
    fn set_state(&mut self, _state: QpState) {}
    fn post_receives(&mut self) -> mlx5_qp::Result<()> {
        Ok(())
    }
    fn poll(&mut self, _out: &mut [Wc]) -> mlx5_qp::Result<usize> {
        Ok(0)
    }
    fn flush_outstanding(&mut self, _out: &mut [Wc]) -> mlx5_qp::Result<usize> {
        Ok(0)
    }
}
