//! Random device scripts on memory standing in for the device, polled with the fast paths on
//! and off (`paths::FAST_OFF`): every call must return the same completions, or the same
//! error, either way. Two QPs share the CQ (A an RC QP, B an RC, UC or UD QP); the device completes, fails and flushes their
//! WQEs in order, and writes CQEs no device would (another QPN, a counter off the outstanding
//! range, an opcode the WQE did not have), which every path must treat alike.

use super::tests::{
    both_typed, drain, req_cqe, req_err, resp_cqe, resp_err, Calls, Dev, FLUSH, QPN, QPN_B, R, SGE,
};
use super::{Cq, QpTable};
use crate::wr::SendWr;
use mlx5_cq::{
    CQE_REQ, CQE_REQ_ERR, CQE_RESP_ERR, CQE_RESP_SEND, CQE_RESP_SEND_IMM, CQE_RESP_SEND_INV,
    CQE_RESP_WR_IMM,
};
use mlx5_hw::{QpState, QpType};
use mlx5_wqe::opcode as op;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};
use std::collections::VecDeque;

/// One step of a script; `b` picks QP B (else A).
#[derive(Clone, Debug)]
enum Step {
    /// Post a send WR: 0 an inline WRITE, 1 a WRITE of one entry, 2 a READ, 3 a SEND.
    Post { b: bool, kind: u8, signaled: bool },
    /// Post a receive.
    Recv { b: bool },
    /// The device completes the `n` oldest send WQEs (a CQE for each signaled one).
    Complete { b: bool, n: usize },
    /// The device delivers a SEND into each of the `n` oldest receives.
    Deliver { b: bool, n: usize },
    /// The oldest send WQE fails; the QP's other WQEs are flushed (with `every`, each send
    /// WQE gets a CQE; else only the signaled ones), and its receives.
    Fail { b: bool, every: bool },
    /// The control path takes the QP through Error and Reset back to RTS: its WQEs are gone,
    /// their CQEs not yet polled stay in the CQ.
    Reset { b: bool },
    /// A CQE no device would write for this state (`se`: with the solicited-event bit).
    Garbage {
        opcode: u8,
        se: bool,
        qpn: u8,
        off: u16,
        send_opcode: u8,
        syndrome: u8,
    },
    /// Drain the CQ in calls with room for this many.
    Poll(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (any::<bool>(), 0u8..4, any::<bool>())
            .prop_map(|(b, kind, signaled)| Step::Post { b, kind, signaled }),
        3 => any::<bool>().prop_map(|b| Step::Recv { b }),
        4 => (any::<bool>(), 1usize..6).prop_map(|(b, n)| Step::Complete { b, n }),
        2 => (any::<bool>(), 1usize..4).prop_map(|(b, n)| Step::Deliver { b, n }),
        1 => (any::<bool>(), any::<bool>()).prop_map(|(b, every)| Step::Fail { b, every }),
        1 => any::<bool>().prop_map(|b| Step::Reset { b }),
        2 => (
            prop::sample::select(vec![
                CQE_REQ,
                CQE_REQ_ERR,
                CQE_RESP_SEND,
                CQE_RESP_SEND_IMM,
                CQE_RESP_SEND_INV,
                CQE_RESP_WR_IMM,
                CQE_RESP_ERR,
            ]),
            prop::bool::weighted(0.2),
            0u8..3,
            prop_oneof![3 => Just(0u16), 1 => 1u16..6],
            prop::sample::select(vec![
                0,
                op::OPCODE_RDMA_WRITE,
                op::OPCODE_SEND,
                op::OPCODE_RDMA_READ,
                0xff,
            ]),
            prop::sample::select(vec![FLUSH, 0x04, 0x13, 0x22]),
        )
            .prop_map(|(opcode, se, qpn, off, send_opcode, syndrome)| Step::Garbage {
                opcode,
                se,
                qpn,
                off,
                send_opcode,
                syndrome,
            }),
        3 => (1usize..17).prop_map(Step::Poll),
    ]
}

/// What the device knows of one QP: its outstanding send WQEs (first block, opcode,
/// signaled) and receives (counter), in order.
#[derive(Default)]
struct Queues {
    sends: VecDeque<(u16, u8, bool)>,
    recvs: VecDeque<u16>,
    next_recv: u16,
}

/// CQEs the device may have written and the CQ not yet consumed: fewer than its 64.
fn room(dev: &Dev, cq: &Cq) -> bool {
    dev.hw_pi.wrapping_sub(cq.ci()) < 60
}

/// Run `steps` on a fresh device, the CQ's CQEs `size` bytes apart; every poll's result.
fn run(steps: &[Step], dev: &mut Dev, table: &mut QpTable, cq: &mut Cq) -> Calls {
    let mut q = [Queues::default(), Queues::default()];
    let qpn = |b: bool| if b { QPN_B } else { QPN };
    let mut calls = Calls::new();
    for s in steps {
        match *s {
            Step::Post { b, kind, signaled } => {
                let qp = table.qp_at(b as usize).unwrap();
                let id = calls.len() as u64 * 100 + qp.sq_pi() as u64;
                let (wr, opcode) = match kind {
                    0 => (SendWr::write(id, R).inline(b"abc"), op::OPCODE_RDMA_WRITE),
                    1 => (SendWr::write(id, R).sges(&SGE), op::OPCODE_RDMA_WRITE),
                    2 => (SendWr::read(id, R).sges(&SGE), op::OPCODE_RDMA_READ),
                    _ => (SendWr::send(id).sges(&SGE), op::OPCODE_SEND),
                };
                let wr = if signaled { wr.signaled() } else { wr };
                let pi = qp.sq_pi();
                if qp.post(&wr).is_ok() {
                    q[b as usize].sends.push_back((pi, opcode, signaled));
                }
            }
            Step::Recv { b } => {
                let qp = table.qp_at(b as usize).unwrap();
                let id = 1000 + q[b as usize].next_recv as u64;
                if qp.post_recv(id, &SGE).is_ok() {
                    let k = &mut q[b as usize];
                    k.recvs.push_back(k.next_recv);
                    k.next_recv = k.next_recv.wrapping_add(1);
                }
            }
            Step::Complete { b, n } => {
                for _ in 0..n {
                    let Some(&(pi, opcode, signaled)) = q[b as usize].sends.front() else {
                        break;
                    };
                    if signaled {
                        if !room(dev, cq) {
                            break;
                        }
                        let len = if opcode == op::OPCODE_RDMA_READ {
                            16
                        } else {
                            0
                        };
                        dev.push(req_cqe(qpn(b), pi, opcode, len));
                    }
                    q[b as usize].sends.pop_front();
                }
            }
            Step::Deliver { b, n } => {
                for _ in 0..n {
                    let Some(&c) = q[b as usize].recvs.front() else {
                        break;
                    };
                    if !room(dev, cq) {
                        break;
                    }
                    dev.push(resp_cqe(CQE_RESP_SEND, qpn(b), c, 9, 0));
                    q[b as usize].recvs.pop_front();
                }
            }
            Step::Fail { b, every } => {
                let k = &mut q[b as usize];
                for (i, (pi, opcode, signaled)) in k.sends.drain(..).enumerate() {
                    if (i == 0 || every || signaled) && room(dev, cq) {
                        let synd = if i == 0 { 0x13 } else { FLUSH };
                        dev.push(req_err(qpn(b), pi, opcode, synd));
                    }
                }
                for c in k.recvs.drain(..) {
                    if room(dev, cq) {
                        dev.push(resp_err(qpn(b), c, FLUSH));
                    }
                }
            }
            Step::Reset { b } => {
                let qp = table.qp_at(b as usize).unwrap();
                for state in [QpState::Error, QpState::Reset, QpState::Init, QpState::Rtr] {
                    qp.set_state(state);
                }
                qp.set_state(QpState::Rts);
                // Reset starts both queues over (rdma-core `mlx5_init_qp_indices`).
                q[b as usize] = Queues::default();
            }
            Step::Garbage {
                opcode,
                se,
                qpn: which,
                off,
                send_opcode,
                syndrome,
            } => {
                if !room(dev, cq) {
                    continue;
                }
                let (n, k) = match which {
                    0 => (QPN, &q[0]),
                    1 => (QPN_B, &q[1]),
                    _ => (0x77, &q[0]),
                };
                let mut cqe = match opcode {
                    CQE_REQ | CQE_REQ_ERR => {
                        let base = k.sends.front().map_or(0, |w| w.0);
                        let c = base.wrapping_add(off);
                        if opcode == CQE_REQ {
                            req_cqe(n, c, send_opcode, 16)
                        } else {
                            req_err(n, c, send_opcode, syndrome)
                        }
                    }
                    CQE_RESP_ERR => {
                        let c = k.recvs.front().copied().unwrap_or(k.next_recv);
                        resp_err(n, c.wrapping_add(off), syndrome)
                    }
                    kind => {
                        let c = k.recvs.front().copied().unwrap_or(k.next_recv);
                        resp_cqe(kind, n, c.wrapping_add(off), 5, 7)
                    }
                };
                if se {
                    cqe.op_own |= 2;
                }
                dev.push(cqe);
            }
            Step::Poll(r) => calls.extend(drain(cq, table, r)),
        }
    }
    calls.extend(drain(cq, table, 16));
    calls
}

proptest! {
    #![proptest_config(Config {
        cases: 256,
        rng_seed: RngSeed::Fixed(0x6469_6666),
        failure_persistence: None,
        ..Config::default()
    })]

    #[test]
    fn random_device_scripts_complete_the_same_on_every_path(
        size in prop_oneof![Just(64u32), Just(128)],
        b in prop::sample::select(vec![QpType::Rc, QpType::Uc, QpType::Ud]),
        steps in proptest::collection::vec(step(), 1..80),
    ) {
        let (slow, fast, _) = both_typed(size, b, &|dev, table, cq| run(&steps, dev, table, cq));
        prop_assert_eq!(fast, slow);
    }
}
