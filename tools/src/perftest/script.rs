//! The order of a perftest run's exchanges after the prelude (versions, system data, MTU,
//! negotiation), per program and role, as each program's `main` makes them
//! (`src/write_lat.c`, `send_lat.c`, `read_lat.c`, `atomic_lat.c`, `write_bw.c`, `send_bw.c`,
//! `read_bw.c`, `atomic_bw.c`; the same in 4.5 and 26.04 for what these tools run): endpoint
//! handshakes, the local connect, synchronising handshakes, the measured runs (local), the
//! bandwidth reports and the closing handshake. [`script`] lists them; the tools walk the list.

use crate::args::Test;

/// Which perftest program a run speaks to (or is, to a perftest peer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Program {
    /// `ib_write_lat`.
    WriteLat,
    /// `ib_send_lat`.
    SendLat,
    /// `ib_read_lat`.
    ReadLat,
    /// `ib_atomic_lat`.
    AtomicLat,
    /// `ib_write_bw`.
    WriteBw,
    /// `ib_send_bw`.
    SendBw,
    /// `ib_read_bw`.
    ReadBw,
    /// `ib_atomic_bw`.
    AtomicBw,
}

impl Program {
    /// The program of `test` in the latency tool (`bw`: false) or the bandwidth tool.
    pub fn of(test: Test, bw: bool) -> Program {
        match (test, bw) {
            (Test::Write, false) => Program::WriteLat,
            (Test::Send, false) => Program::SendLat,
            (Test::Read, false) => Program::ReadLat,
            (Test::Atomic, false) => Program::AtomicLat,
            (Test::Write, true) => Program::WriteBw,
            (Test::Send, true) => Program::SendBw,
            (Test::Read, true) => Program::ReadBw,
            (Test::Atomic, true) => Program::AtomicBw,
        }
    }

    /// perftest's name of the program.
    pub fn name(self) -> &'static str {
        match self {
            Program::WriteLat => "ib_write_lat",
            Program::SendLat => "ib_send_lat",
            Program::ReadLat => "ib_read_lat",
            Program::AtomicLat => "ib_atomic_lat",
            Program::WriteBw => "ib_write_bw",
            Program::SendBw => "ib_send_bw",
            Program::ReadBw => "ib_read_bw",
            Program::AtomicBw => "ib_atomic_bw",
        }
    }

    fn is_lat(self) -> bool {
        matches!(
            self,
            Program::WriteLat | Program::SendLat | Program::ReadLat | Program::AtomicLat
        )
    }
}

/// One step of a run after the prelude.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// A handshake carrying QP `qp`'s endpoint; the peer's is QP `qp`'s peer.
    Keys {
        /// The QP.
        qp: usize,
    },
    /// Connect every QP (Init → RTR → RTS) with the peers' endpoints: local, no exchange.
    Connect,
    /// A handshake that only synchronises (it carries QP `qp`'s endpoint again; what comes
    /// back is checked for form and not used).
    Sync {
        /// The QP whose endpoint it carries.
        qp: usize,
    },
    /// Measure the `size`-th message size (local traffic, no exchange).
    Run {
        /// Index into the run's sizes.
        size: usize,
    },
    /// `xchg_bw_reports`: this side's figures of the last size for the peer's.
    Reports,
    /// `ctx_close_connection`: the closing handshake.
    Close,
}

/// The shape of a run that decides its steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// The program.
    pub program: Program,
    /// This side connects (the other listens).
    pub client: bool,
    /// QPs.
    pub qps: usize,
    /// Message sizes run (1 unless `-a`).
    pub sizes: usize,
    /// `-a` (perftest's `RUN_ALL`: some programs synchronise around every size).
    pub all: bool,
    /// `-b`.
    pub duplex: bool,
    /// `-D`.
    pub duration: bool,
}

/// Every step of a run of `s` after the prelude, in order.
pub fn script(s: &Shape) -> Vec<Step> {
    use Program::*;
    let keys = |v: &mut Vec<Step>| v.extend((0..s.qps).map(|qp| Step::Keys { qp }));
    let syncs = |v: &mut Vec<Step>| v.extend((0..s.qps).map(|qp| Step::Sync { qp }));
    let mut v = Vec::new();
    // Before the connect: the latency programs but send first swap QP 0's endpoint alone.
    if matches!(s.program, WriteLat | ReadLat | AtomicLat) {
        v.push(Step::Keys { qp: 0 });
    }
    keys(&mut v);
    v.push(Step::Connect);
    // After it: every QP's endpoint again ("print remote") and one handshake more ("after
    // moving the QP to RTR"); the send programs put that one first.
    if matches!(s.program, SendLat | SendBw) {
        v.push(Step::Sync { qp: 0 });
        syncs(&mut v);
    } else {
        syncs(&mut v);
        v.push(Step::Sync { qp: 0 });
    }
    let runs = |v: &mut Vec<Step>| v.extend((0..s.sizes).map(|size| Step::Run { size }));
    match s.program {
        // Each side pings until it is done; nothing is swapped at the end.
        WriteLat => runs(&mut v),
        // Before every size a handshake: the receives are posted.
        SendLat => {
            for size in 0..s.sizes {
                v.push(Step::Sync { qp: 0 });
                v.push(Step::Run { size });
            }
            v.push(Step::Close);
        }
        // The server only serves: it closes at once, and waits there for the client's close.
        ReadLat | AtomicLat => {
            if s.client {
                runs(&mut v);
            }
            v.push(Step::Close);
        }
        WriteBw | ReadBw | AtomicBw if !s.duplex => {
            // The client runs and then tells the server its (last) figures.
            if s.client {
                runs(&mut v);
            }
            v.push(Step::Sync { qp: 0 });
            v.push(Step::Reports);
            v.push(Step::Close);
        }
        WriteBw | ReadBw | AtomicBw => {
            // Both run; around every size a handshake (after it only with -a; atomics never
            // run every size), then both reports.
            for size in 0..s.sizes {
                v.push(Step::Sync { qp: 0 });
                v.push(Step::Run { size });
                if s.all && s.program != AtomicBw {
                    v.push(Step::Sync { qp: 0 });
                }
                v.push(Step::Reports);
            }
            v.push(Step::Close);
        }
        SendBw => {
            for size in 0..s.sizes {
                v.push(Step::Sync { qp: 0 });
                v.push(Step::Run { size });
                if s.duplex && !s.duration {
                    v.push(Step::Reports);
                }
                if s.all {
                    v.push(Step::Sync { qp: 0 });
                }
            }
            v.push(Step::Close);
        }
    }
    debug_assert!(s.program.is_lat() || !v.is_empty());
    v
}
