//! A dead device's outstanding work, retired in software ([`Cq::flush_dead`](crate::Cq::flush_dead)).
//!
//! A ConnectX in internal error writes no CQE any more, not even the flush CQEs of the work its
//! QPs hold: for its own QPs the kernel makes software completions instead of reading the ring
//! (`drivers/infiniband/hw/mlx5/cq.c` `mlx5_ib_poll_cq`, which calls `mlx5_ib_poll_sw_comp`
//! once `mdev->state == MLX5_DEVICE_STATE_INTERNAL_ERROR`: one `IB_WC_WR_FLUSH_ERR` for each
//! WQE between a queue's tail and head, sends on the send CQ, receives on the receive CQ),
//! while for a user QP nobody does: rdma-core v44's libmlx5 reads the ring only
//! (`providers/mlx5/cq.c` `mlx5_poll_cq`) and its only reaction to the error is a context flag
//! (`providers/mlx5/verbs.c` `mlx5_async_event`, `MLX5_CTX_FLAGS_FATAL_STATE`). The software
//! ConnectX does the same (`mlx5_sim::Faults::device_fatal`). So this layer does for its QPs
//! what the kernel does for its own: once the device reported `IBV_EVENT_DEVICE_FATAL`, a CQ
//! polled dry (it stays dry: the device writes nothing more) hands out one `WR_FLUSH_ERR`
//! completion for each WR still outstanding on the QPs of the table it is polled with, each on
//! the CQ its queue reports to, each exactly once.
//!
//! The rules that make it exactly once:
//! - a QP's WRs are retired only once every CQ it reports to was polled dry after the death
//!   (a CQE the device wrote before it died, still in the other CQ's ring, completes its WR
//!   there, not twice); until then the flush of that CQ says which CQ is still to be polled;
//! - the data path retires what it reports ([`mlx5_qp::Qp::flush_outstanding`]): a WR
//!   posted later (the data path accepts posts on a QP in Error, as verbs does) is outstanding
//!   until the next flush, which retires it in turn;
//! - the completions of a QP's other CQ wait in the context until that CQ's flush takes them.
//!
//! QPs made by this crate's [`Pd::create_qp`](crate::Pd::create_qp) are known with their CQs;
//! any other QP in the table (a DCI, an XRC initiator, a bare data path) reports every
//! flush to the CQ it is flushed from. The receives still posted to an SRQ of the table are
//! retired too ([`mlx5_qp::Srq::flush_outstanding`], one `WR_FLUSH_ERR` each, on the CQ
//! flushed), once every QP of the table is: the kernel retires none (`mlx5_ib_poll_sw_comp`
//! walks the QPs' own queues only), but a user of a dead device wants its receive buffers
//! back with their WR ids. While a QP of the table waits for another CQ, the flush says how
//! many each SRQ still holds ([`Unretired::srq_outstanding`]). A QP outside the table that
//! shares the SRQ must be retired before it (its CQs polled dry): a receive it consumed
//! before the death and that is still in an unpolled CQ would otherwise be flushed from the
//! SRQ, and its CQE then named a WQE no longer posted (an error, never a second completion).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Mutex, MutexGuard};

use mlx5_hw::CqId;
use mlx5_qp::{Resolve, Wc};

/// What a context knows of its QPs and CQs for the flush of a dead device.
#[derive(Default)]
pub(crate) struct Dead {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The CQs of each QP this crate made (send, receive), by QPN.
    qp_cqs: HashMap<u32, (CqId, CqId)>,
    /// CQs polled dry after the device died.
    dry: HashSet<CqId>,
    /// Flush completions retired for a CQ and not yet handed out.
    pending: HashMap<CqId, VecDeque<Wc>>,
}

/// What a flush of a dead device ([`Cq::flush_dead`](crate::Cq::flush_dead)) could not retire
/// (yet): empty when every WR of the table is accounted for.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Unretired {
    /// QPs of the table kept back because another CQ they report to has not been polled dry
    /// since the death: (QPN, that CQ's handle).
    pub waiting_for_cq: Vec<(u32, CqId)>,
    /// Receives still posted to each SRQ of the table (SRQN, count), kept while a QP of the
    /// table waits for another CQ ([`Unretired::waiting_for_cq`]); the flush after that
    /// retires them.
    pub srq_outstanding: Vec<(u32, u32)>,
}

impl Unretired {
    /// Whether everything the table held is accounted for.
    pub fn is_complete(&self) -> bool {
        self.waiting_for_cq.is_empty() && self.srq_outstanding.is_empty()
    }

    /// One sentence on what is left, for an error message ("" when nothing is).
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        for (qpn, cq) in &self.waiting_for_cq {
            parts.push(format!(
                "QP {qpn:#x} also reports to CQ {}, not polled since the death: \
                 Cq::flush_dead on it retires the QP's WRs",
                cq.0
            ));
        }
        for (srqn, n) in &self.srq_outstanding {
            parts.push(format!(
                "SRQ {srqn:#x} still holds {n} receive(s), retired once the QPs above are"
            ));
        }
        parts.join("; ")
    }
}

impl Dead {
    fn state(&self) -> MutexGuard<'_, State> {
        // Every update leaves the maps whole: a poisoned lock still holds valid state.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A QP made by this crate: its CQs.
    pub(crate) fn add_qp(&self, qpn: u32, send_cq: CqId, recv_cq: CqId) {
        self.state().qp_cqs.insert(qpn, (send_cq, recv_cq));
    }

    /// A destroyed QP: its number may name another later.
    pub(crate) fn forget_qp(&self, qpn: u32) {
        self.state().qp_cqs.remove(&qpn);
    }

    /// A destroyed CQ: what waited for it goes with it (its handle may name another later).
    pub(crate) fn forget_cq(&self, cq: CqId) {
        let mut s = self.state();
        s.dry.remove(&cq);
        s.pending.remove(&cq);
    }

    /// CQ `cq` was polled dry after the death; retire every QP of `table` whose CQs all were,
    /// into the queues of their CQs.
    pub(crate) fn retire<R: Resolve + ?Sized>(&self, cq: CqId, table: &mut R) -> Unretired {
        let mut qpns = Vec::new();
        table.for_each_qp(&mut |qp| qpns.push(qp.qpn()));
        let mut left = Unretired::default();
        let mut srqns = Vec::new();
        table.for_each_srq(&mut |srq| srqns.push(srq.srqn()));
        let mut s = self.state();
        s.dry.insert(cq);
        let mut buf = [Wc::default(); 64];
        for qpn in qpns {
            let (send_cq, recv_cq) = s.qp_cqs.get(&qpn).copied().unwrap_or((cq, cq));
            if send_cq != cq && recv_cq != cq {
                // Not this CQ's QP: its own CQs' flushes retire it.
                continue;
            }
            if let Some(other) = [send_cq, recv_cq].into_iter().find(|c| !s.dry.contains(c)) {
                left.waiting_for_cq.push((qpn, other));
                continue;
            }
            let Some(qp) = table.qp(qpn) else { continue };
            if qp.state() != mlx5_hw::QpState::Error {
                // The device moved every QP to Error when it died (and can no longer be
                // asked): the data path follows.
                qp.set_state(mlx5_hw::QpState::Error);
            }
            loop {
                let n = match qp.flush_outstanding(&mut buf) {
                    Ok(n) => n,
                    Err(e) => {
                        tracing::warn!(target: "mlx5_ctx", qpn, error = %e, "retiring a dead device's WRs");
                        break;
                    }
                };
                for wc in &buf[..n] {
                    let to = if wc.opcode().is_recv() {
                        recv_cq
                    } else {
                        send_cq
                    };
                    s.pending.entry(to).or_default().push_back(*wc);
                }
                if n < buf.len() {
                    break;
                }
            }
        }
        // The SRQs' receives, once every QP of the table is retired: a receive CQE the device
        // wrote before it died sits in one of those QPs' CQs, all polled dry by now, so what
        // is still posted was never consumed. They go to this CQ (an SRQ has none of its own).
        for srqn in srqns {
            let srq = if table.srq(srqn).is_some() {
                table.srq(srqn)
            } else {
                table.xrc_srq(srqn)
            };
            let Some(srq) = srq else { continue };
            if !left.waiting_for_cq.is_empty() {
                if srq.outstanding() > 0 {
                    left.srq_outstanding.push((srqn, srq.outstanding()));
                }
                continue;
            }
            loop {
                let n = srq.flush_outstanding(&mut buf);
                s.pending.entry(cq).or_default().extend(&buf[..n]);
                if n < buf.len() {
                    break;
                }
            }
        }
        left
    }

    /// Move up to `out.len()` retired completions of CQ `cq` to `out`; how many.
    pub(crate) fn take(&self, cq: CqId, out: &mut [Wc]) -> usize {
        let mut s = self.state();
        let Some(q) = s.pending.get_mut(&cq) else {
            return 0;
        };
        let n = q.len().min(out.len());
        for (o, wc) in out.iter_mut().zip(q.drain(..n)) {
            *o = wc;
        }
        n
    }
}
