//! The interleaving property test of completion events, on the deterministic fabric (so
//! every interleaving is reproducible from its seed).
//!
//! A program on B waits for receive completions the race-free way, one phase per operation
//! so that anything can happen between two phases: poll until empty → arm (next, or
//! solicited-only) → poll again → sleep until the channel fd is readable → take the event →
//! start over. A phase that finds work (a CQE, an event) starts over. Between phases the
//! fabric steps or runs until idle, A sends (solicited or not), and the program takes events,
//! acknowledges them in batches (sometimes too many, which must be refused) and arms at
//! random moments.
//!
//! Checked after every operation:
//! - no lost wake-up: while the program sleeps, a CQE its arm asks for (any CQE, or a
//!   solicited or error one) never waits past the consumer index without the fd being
//!   readable;
//! - exactness: the fd is readable exactly when a model of the ConnectX arm says an event is
//!   queued, and every take returns what the model says. The model: an arm is seen at the
//!   end of the device's next step (after the CQEs that step writes: the doorbell was still
//!   in flight) or when an event is taken; a later arm written before that replaces an
//!   earlier one, as a second write to the same doorbell word does; it merges with a pending
//!   one (next beats solicited-only); it fires at once for CQEs already past its consumer
//!   index (for solicited-only, a solicited or error one), else on the next CQE it asks for;
//!   one event per arm, then disarmed.
//!
//! At the end: every completion was polled exactly once, no more events fired than arms were
//! written, every event was acknowledged and the CQ can be destroyed, and the device reported
//! no driver bug (so the arm sequence number was kept right throughout).

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

use super::{readable, send};
use crate::common::*;
use mlx5_cq::{ArmCmd, CQE_RESP_SEND};
use mlx5_hw::{Device, Error, QpType};

#[derive(Clone, Copy, Debug)]
enum Op {
    /// A posts a signaled SEND (B has a receive for it), solicited or not.
    Send { se: bool },
    /// One fabric step.
    Step,
    /// Run the fabric until idle.
    RunIdle,
    /// Poll one CQE.
    Poll,
    /// Arm at a random moment (only outside the protocol).
    Arm { sol: bool },
    /// Take an event without waiting.
    Take,
    /// Acknowledge this many events.
    Ack(u32),
    /// Advance the waiting protocol by one phase.
    Proto { sol: bool },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => any::<bool>().prop_map(|se| Op::Send { se }),
        3 => Just(Op::Step),
        1 => Just(Op::RunIdle),
        2 => Just(Op::Poll),
        1 => any::<bool>().prop_map(|sol| Op::Arm { sol }),
        2 => Just(Op::Take),
        1 => (0u32..4).prop_map(Op::Ack),
        5 => any::<bool>().prop_map(|sol| Op::Proto { sol }),
    ]
}

/// Where the program is in "poll, arm, poll, sleep".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Running,
    Polled,
    Armed(bool),
    Sleeping(bool),
}

#[derive(Clone, Copy, Debug)]
struct ModelArm {
    solicited: bool,
    ci: u32,
}

/// The model of the ConnectX side: the CQEs written (solicited or not, by index), the arm
/// written and not yet seen, the arm in force, and the events queued.
#[derive(Debug, Default)]
struct Model {
    kinds: Vec<bool>,
    written: Option<ModelArm>,
    armed: Option<ModelArm>,
    queued: u32,
    fired: u32,
}

impl Model {
    fn fire(&mut self) {
        self.armed = None;
        self.queued += 1;
        self.fired += 1;
    }

    /// The device looks at the arm doorbell.
    fn see_arm(&mut self) {
        let Some(new) = self.written.take() else {
            return;
        };
        let arm = match self.armed {
            Some(old) => ModelArm {
                solicited: old.solicited && new.solicited,
                ..new
            },
            None => new,
        };
        self.armed = Some(arm);
        let past = &self.kinds[arm.ci as usize..];
        let at_once = if arm.solicited {
            past.iter().any(|&s| s)
        } else {
            !past.is_empty()
        };
        if at_once {
            self.fire();
        }
    }

    /// The device wrote a CQE.
    fn cqe(&mut self, solicited: bool) {
        self.kinds.push(solicited);
        if let Some(a) = self.armed {
            if !a.solicited || solicited {
                self.fire();
            }
        }
    }
}

struct World {
    p: Pair,
    m: Mem,
    dst: Mem,
    model: Model,
    phase: Phase,
    posted: u32,
    polled: u32,
    unacked: u32,
    arms: u32,
}

impl World {
    fn fd(&self) -> std::os::fd::RawFd {
        self.p
            .b
            .dev
            .comp_channel_fd(self.p.b.rcq.ch.unwrap())
            .unwrap()
    }

    /// One fabric step, told to the model as a step does it: write CQEs (with the arm in
    /// force), then look at the arm doorbell. Returns whether the step did anything.
    fn step(&mut self) -> bool {
        let busy = self.p.fabric.step();
        let mut idx = self.model.kinds.len() as u32;
        while let Some(s) = self.p.b.rcq.peek(idx) {
            self.model.cqe(s);
            idx += 1;
        }
        self.model.see_arm();
        self.p.a.scq.drain();
        busy
    }

    /// Steps until idle.
    fn run(&mut self) {
        let mut n = 0;
        while self.step() && n < 100_000 {
            n += 1;
        }
    }

    fn poll_one(&mut self) -> bool {
        match self.p.b.rcq.poll() {
            Some(c) => {
                assert_eq!(c.opcode(), CQE_RESP_SEND);
                self.polled += 1;
                true
            }
            None => false,
        }
    }

    fn drain(&mut self) -> bool {
        let mut any = false;
        while self.poll_one() {
            any = true;
        }
        any
    }

    fn arm(&mut self, solicited: bool) {
        let cmd = if solicited {
            ArmCmd::Solicited
        } else {
            ArmCmd::Next
        };
        self.p.b.rcq.arm(cmd);
        self.model.written = Some(ModelArm {
            solicited,
            ci: self.p.b.rcq.ci,
        });
        self.arms += 1;
    }

    /// Take an event; the result must be the model's.
    fn take(&mut self) -> bool {
        let dev = self.p.b.dev.clone();
        let got = dev.get_cq_event(self.p.b.rcq.ch.unwrap()).unwrap();
        self.model.see_arm();
        let expect = self.model.queued > 0;
        assert_eq!(got.is_some(), expect, "take: model {:?}", self.model);
        if let Some(cq) = got {
            assert_eq!(cq, self.p.b.rcq.info.id);
            self.model.queued -= 1;
            // What a driver does for each event taken (mlx5_qp::Cq::ack_event).
            self.p.b.rcq.sn += 1;
            self.unacked += 1;
            self.phase = Phase::Running;
        }
        got.is_some()
    }

    /// A sleeping program wakes only when the fd is readable.
    fn sleeper(&mut self) {
        if readable(self.fd()) {
            assert!(self.take(), "readable fd but no event");
        }
    }

    fn apply(&mut self, op: Op) {
        let sleeping = matches!(self.phase, Phase::Sleeping(_));
        match op {
            Op::Send { se } => {
                if self.posted - self.polled < 32 {
                    self.p.b.qp.post_recv(&[self.dst.sge(0, 64)]);
                    send(&mut self.p, &self.m, se);
                    self.posted += 1;
                }
            }
            Op::Step => {
                self.step();
            }
            Op::RunIdle => self.run(),
            Op::Poll | Op::Take | Op::Arm { .. } if sleeping => self.sleeper(),
            Op::Poll => {
                if self.poll_one() {
                    self.phase = Phase::Running;
                }
            }
            Op::Take => {
                self.take();
            }
            Op::Arm { sol } => {
                if self.phase == Phase::Running {
                    self.arm(sol);
                }
            }
            Op::Ack(n) => {
                let dev = self.p.b.dev.clone();
                let r = dev.ack_cq_events(self.p.b.rcq.info.id, n);
                if n > self.unacked {
                    assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
                } else {
                    r.unwrap();
                    self.unacked -= n;
                }
            }
            Op::Proto { sol } => match self.phase {
                Phase::Running => {
                    self.drain();
                    self.phase = Phase::Polled;
                }
                Phase::Polled => {
                    self.arm(sol);
                    self.phase = Phase::Armed(sol);
                }
                Phase::Armed(s) => {
                    self.phase = if self.drain() {
                        Phase::Running
                    } else {
                        Phase::Sleeping(s)
                    };
                }
                Phase::Sleeping(_) => self.sleeper(),
            },
        }
    }

    fn check(&self, op: Op) {
        let ready = readable(self.fd());
        assert_eq!(
            ready,
            self.model.queued > 0,
            "after {op:?}: fd readable {ready} but the model has {} event(s) queued ({:?})",
            self.model.queued,
            self.model
        );
        if let Phase::Sleeping(sol) = self.phase {
            let waiting = &self.model.kinds[self.p.b.rcq.ci as usize..];
            let wanted = waiting.iter().any(|&s| s || !sol);
            assert!(
                !wanted || ready,
                "lost wake-up after {op:?}: the program sleeps on a {} arm, a CQE it asked \
                 for waits, and the fd is not readable",
                if sol { "solicited-only" } else { "next" }
            );
        }
    }
}

fn run_case(ops: &[Op]) {
    let p = Pair::new(Opts::new(QpType::Rc));
    let (m, dst) = (p.mem(false, 64), p.mem(true, 64));
    let mut w = World {
        p,
        m,
        dst,
        model: Model::default(),
        phase: Phase::Running,
        posted: 0,
        polled: 0,
        unacked: 0,
        arms: 0,
    };
    for &op in ops {
        w.apply(op);
        w.check(op);
    }
    // Everything completes and is polled exactly once.
    w.run();
    w.drain();
    assert_eq!(w.polled, w.posted, "every completion is polled");
    assert_eq!(w.p.b.rcq.poll().map(|c| c.opcode()), None);
    while w.take() {}
    assert!(
        w.model.fired <= w.arms,
        "{} events for {} arms",
        w.model.fired,
        w.arms
    );
    let dev = w.p.b.dev.clone();
    dev.ack_cq_events(w.p.b.rcq.info.id, w.unacked).unwrap();
    dev.destroy_qp(w.p.b.qp.info.id).unwrap();
    dev.destroy_cq(w.p.b.rcq.info.id).unwrap();
    w.p.assert_no_bugs();
}

fn runner(cases: u32, seed: u8) -> TestRunner {
    TestRunner::new_with_rng(
        Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        },
        TestRng::from_seed(RngAlgorithm::ChaCha, &[seed; 32]),
    )
}

#[test]
fn no_completion_missed_and_no_wake_up_lost() {
    let strategy = prop::collection::vec(op(), 1..120);
    runner(96, 13)
        .run(&strategy, |ops| {
            run_case(&ops);
            Ok(())
        })
        .unwrap();
}
