//! Random post/poll sequences against a model device: no WR is lost, none is reported twice.
//!
//! The model executes posted WQEs in order, writes a CQE for each signaled one (reading its
//! `wqe_index` back from the ring), never overruns the CQ, and can fail a WQE: then it writes
//! the error CQE and flushes the rest (a CQE for every remaining WQE, or only for the
//! signaled ones), and the QP is in Error. WQEs posted to the QP in Error are accepted and
//! flushed the same way (IBTA Vol. 1 §10.3.1; libmlx5 checks no state).

use crate::common;
use mlx5_wqe::opcode as op;

use common::{req, req_err, FakeCq, FakeQp, QpCfg};
use mlx5_cq::{SYNDROME_REMOTE_ACCESS_ERR, SYNDROME_WR_FLUSH_ERR};
use mlx5_hw::QpState;
use mlx5_qp::{Cq, Error, Qp, SendWr, Sge, SqLimit, Wc, WcStatus};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};
use std::collections::HashMap;

const QPN: u32 = 0x1234;

#[derive(Clone, Debug)]
enum Step {
    Post {
        inline: usize,
        sges: usize,
        signaled: bool,
    },
    Execute(usize),
    Poll(usize),
    Fail {
        flush_every: bool,
    },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0usize..150, 0usize..3, any::<bool>())
            .prop_map(|(inline, sges, signaled)| Step::Post { inline, sges, signaled }),
        3 => (1usize..6).prop_map(Step::Execute),
        3 => (1usize..6).prop_map(Step::Poll),
        1 => any::<bool>().prop_map(|flush_every| Step::Fail { flush_every }),
    ]
}

struct Posted {
    wr_id: u64,
    pi: u16,
    signaled: bool,
}

struct Model {
    // `qp` and `cq` before the fakes they were made from: fields drop in declaration order,
    // so the fakes' memory outlives them (`Qp::from_layout`, `Cq::from_layout`).
    qp: Qp,
    cq: Cq,
    fake: FakeQp,
    fcq: FakeCq,
    posted: Vec<Posted>,
    /// Next WQE the device executes.
    exec: usize,
    /// Index of the WQE that failed.
    failed: Option<usize>,
    /// After the failure: the device writes a flush CQE for every WQE, not only the signaled.
    flush_every: bool,
    reported: HashMap<u64, (WcStatus, u32)>,
    next_id: u64,
}

impl Model {
    fn new() -> Model {
        let fake = FakeQp::new(&QpCfg {
            // 64 blocks of 384-byte WQEs: max_send_wr 10, so both the WR limit and the
            // ring's wrap are reached.
            sq_bbs: 64,
            max_inline: 160,
            ..QpCfg::default()
        });
        let fcq = FakeCq::new(32, 64, false);
        // SAFETY: the fakes move into the same `Model` as the objects made from them, declared
        // after them so that they drop after them: their memory stays valid for as long as
        // `qp` and `cq` live. Only `qp` posts to the fake QP.
        let mut qp = unsafe { Qp::from_layout(&fake.layout, None) }.unwrap();
        qp.set_state(QpState::Rts);
        // SAFETY: as above, for `fcq`: it lives in the `Model` after `cq`, the CQ's only
        // consumer.
        let cq = unsafe { Cq::from_layout(&fcq.layout) }.unwrap();
        Model {
            fake,
            fcq,
            qp,
            cq,
            posted: Vec::new(),
            exec: 0,
            failed: None,
            flush_every: false,
            reported: HashMap::new(),
            next_id: 0,
        }
    }

    fn cq_room(&self) -> bool {
        self.fcq.hw_pi - self.cq.ci() < self.fcq.layout.cqe_cnt
    }

    /// The wqe_index the device reads from the ring for a posted WQE.
    fn wqe_index(&self, p: &Posted) -> u16 {
        let b = self.fake.bb(p.pi as usize % 64);
        u16::from_be_bytes([b[1], b[2]])
    }

    fn post(&mut self, inline: usize, sges: usize, signaled: bool) {
        let id = self.next_id;
        let payload = vec![0xa5u8; inline];
        let sg = vec![
            Sge {
                addr: 0x1000,
                length: 8,
                lkey: 1
            };
            sges
        ];
        let wr = if sges > 0 {
            SendWr::send(id).sges(&sg)
        } else {
            SendWr::send(id).inline(&payload)
        };
        // The last free WR is signaled, as a sender must do (its completion retires the
        // unsignaled ones before it; otherwise nothing would ever free the queue).
        let signaled = signaled || self.qp.sq_free_wrs() == 1;
        let wr = if signaled { wr.signaled() } else { wr };
        let pi = self.qp.sq_pi();
        let free = self.qp.sq_free_bbs();
        let free_wrs = self.qp.sq_free_wrs();
        match self.qp.post(&wr) {
            Ok(()) => {
                self.next_id += 1;
                self.posted.push(Posted {
                    wr_id: id,
                    pi,
                    signaled,
                });
            }
            Err(Error::SqFull {
                limit: SqLimit::Blocks,
                needed,
                free: f,
            }) => {
                assert!(free_wrs > 0, "the WR limit is checked first");
                assert_eq!(f, free);
                assert!(needed > free);
            }
            Err(Error::SqFull {
                limit: SqLimit::WorkRequests,
                needed: 1,
                free: 0,
            }) => {
                assert_eq!(free_wrs, 0);
                assert_eq!(self.qp.sq_outstanding_wrs(), self.qp.max_send_wr());
            }
            Err(e) => panic!("unexpected {e}"),
        }
    }

    fn execute(&mut self, n: usize) {
        if self.failed.is_some() {
            // In Error: WQEs posted since are flushed, as the failure flushed the rest.
            for _ in 0..n {
                if self.exec == self.posted.len() || !self.cq_room() {
                    return;
                }
                let p = &self.posted[self.exec];
                if self.flush_every || p.signaled {
                    self.fcq.push(req_err(
                        QPN,
                        p.pi,
                        op::OPCODE_SEND,
                        SYNDROME_WR_FLUSH_ERR,
                        0,
                    ));
                }
                self.exec += 1;
            }
            return;
        }
        for _ in 0..n {
            if self.exec == self.posted.len() || !self.cq_room() {
                return;
            }
            let p = &self.posted[self.exec];
            assert_eq!(
                self.wqe_index(p),
                p.pi,
                "ctrl wqe_index is the producer index"
            );
            if p.signaled {
                self.fcq.push(req(QPN, p.pi, 0x0a));
            }
            self.exec += 1;
        }
    }

    fn fail(&mut self, flush_every: bool) {
        if self.failed.is_some() || self.exec == self.posted.len() {
            return;
        }
        // The failing WQE and every later one need a CQE slot; skip if the CQ lacks room.
        let need = 1 + self.posted[self.exec + 1..]
            .iter()
            .filter(|p| flush_every || p.signaled)
            .count() as u32;
        if self.fcq.hw_pi - self.cq.ci() + need > self.fcq.layout.cqe_cnt {
            return;
        }
        let p = &self.posted[self.exec];
        self.fcq.push(req_err(
            QPN,
            p.pi,
            op::OPCODE_SEND,
            SYNDROME_REMOTE_ACCESS_ERR,
            0,
        ));
        for p in &self.posted[self.exec + 1..] {
            if flush_every || p.signaled {
                self.fcq.push(req_err(
                    QPN,
                    p.pi,
                    op::OPCODE_SEND,
                    SYNDROME_WR_FLUSH_ERR,
                    0,
                ));
            }
        }
        self.failed = Some(self.exec);
        self.flush_every = flush_every;
        self.exec = self.posted.len();
        self.qp.set_state(QpState::Error);
    }

    fn record(&mut self, wcs: &[Wc]) {
        for w in wcs {
            let prev = self
                .reported
                .insert(w.wr_id(), (w.status(), w.syndrome() as u32));
            assert!(prev.is_none(), "wr_id {} reported twice", w.wr_id());
        }
    }

    fn poll(&mut self, cap: usize) {
        let mut wcs = vec![Wc::default(); cap];
        let n = self.cq.poll(&mut self.qp, &mut wcs).unwrap();
        self.record(&wcs[..n]);
    }

    fn drain(&mut self) {
        if self.failed.is_none() {
            // A final signaled WR retires any trailing unsignaled ones.
            while self.qp.sq_free_bbs() == 0 || self.qp.sq_free_wrs() == 0 {
                self.execute(16);
                self.poll(16);
            }
            self.post(0, 0, true);
        }
        loop {
            self.execute(64);
            let before = self.reported.len();
            self.poll(3);
            if self.reported.len() == before && self.exec == self.posted.len() {
                break;
            }
        }
        if self.failed.is_some() {
            let mut wcs = vec![Wc::default(); 2];
            loop {
                let n = self.qp.flush_outstanding(&mut wcs).unwrap();
                if n == 0 {
                    break;
                }
                let got = wcs[..n].to_vec();
                self.record(&got);
            }
        }
    }

    fn check(&self) {
        assert_eq!(self.qp.sq_outstanding_bbs(), 0, "every WQE retired");
        for (i, p) in self.posted.iter().enumerate() {
            let r = self.reported.get(&p.wr_id);
            match self.failed {
                Some(f) if i == f => {
                    assert_eq!(
                        r.map(|r| r.0),
                        Some(WcStatus::RemAccessErr),
                        "failing WR {i}"
                    )
                }
                Some(f) if i > f => {
                    assert_eq!(r.map(|r| r.0), Some(WcStatus::WrFlushErr), "flushed WR {i}")
                }
                _ if p.signaled => {
                    assert_eq!(r.map(|r| r.0), Some(WcStatus::Success), "signaled WR {i}")
                }
                _ => assert!(r.is_none(), "unsignaled successful WR {i} reported"),
            }
        }
        assert!(self.reported.len() <= self.posted.len());
    }
}

proptest! {
    #![proptest_config(Config {
        cases: 64,
        rng_seed: RngSeed::Fixed(0x6d6c_7835),
        failure_persistence: None,
        ..Config::default()
    })]

    #[test]
    fn no_wr_is_lost_or_reported_twice(steps in proptest::collection::vec(step(), 1..200)) {
        let mut m = Model::new();
        for s in steps {
            match s {
                Step::Post { inline, sges, signaled } => m.post(inline, sges, signaled),
                Step::Execute(n) => m.execute(n),
                Step::Poll(n) => m.poll(n),
                Step::Fail { flush_every } => m.fail(flush_every),
            }
        }
        m.drain();
        m.check();
    }
}
