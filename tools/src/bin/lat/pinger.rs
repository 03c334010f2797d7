//! One end's ping-pong: posting the next message, waiting for the peer's, the completion
//! channel and the NIC's timestamps.

use super::plan::{Plan, MAX_OUTSTANDING_SENDS};
use mlx5_connect::{AbortCode, Connection, ControlEvent, RemoteBuffer};
use mlx5_ctx::Mr;
use mlx5_qp::{RemoteAddr, Sge};
use mlx5_tools::args::{AtomicArg, Test};
use mlx5_tools::path::{DataPath, Done, Op, Post};
use mlx5_tools::patience::{self, Pace, Patience};
use mlx5_tools::run;
use mlx5_tools::timestamps::{self, NicRecorder};
use mlx5_tools::{Error, Result};
use std::time::{Duration, Instant};

/// `--timestamps` on the measuring end: the device clock and the markers' stamps.
pub(super) struct Nic {
    pub(super) clock: mlx5_hw::ClockInfo,
    pub(super) rec: NicRecorder,
}

impl Nic {
    /// The NIC's line for the size just measured (its stamps are taken).
    pub(super) fn line(&mut self, size: u64, halves: u32) -> Result<String> {
        let stamps = self.rec.take();
        let ns = timestamps::samples(&self.clock, &stamps, halves)?;
        Ok(timestamps::nic_line(&self.clock, size, ns))
    }
}

/// One end's data path during a ping-pong.
pub(super) struct Pinger<'a, P> {
    pub(super) path: P,
    pub(super) mr: &'a Mr,
    pub(super) remote: RemoteBuffer,
    pub(super) half: usize,
    pub(super) inline: u32,
    pub(super) payload: Vec<u8>,
    pub(super) next_wr: u64,
    pub(super) sends_posted: u64,
    pub(super) sends_done: u64,
    pub(super) recvs: u64,
    /// The receive of the last message (its byte count is checked).
    pub(super) last_recv_len: u32,
    /// Atomics completed.
    pub(super) atomics: u64,
    /// What the atomics' target holds, as far as this side knows: 0 in a buffer of these
    /// tools (zeroed, and only this side changes it), unknown (`None`) in a perftest peer's,
    /// until the first atomic returns it.
    pub(super) target: Option<u64>,
    pub(super) done: [Done; 16],
    /// Give the core away while waiting instead of spinning: on a software device, whose work
    /// needs a core (the software ConnectX's thread; Soft-RoCE's kernel tasks).
    pub(super) yield_idle: bool,
    /// A server watches the control connection while it answers: the client's goodbye ends
    /// a `-D` run.
    pub(super) watch: Option<Connection>,
    /// `--timestamps` on the measuring end: every completion drained is noted.
    pub(super) nic: Option<Nic>,
    /// Where in the peer's buffer messages and atomics go: the peer's receive half (these
    /// tools announce their whole buffer), or 0 when the peer announced the target itself
    /// (perftest).
    pub(super) remote_off: usize,
    /// A `-D` run against perftest: every wait ends, without an error, at the end of this
    /// side's duration (each side times itself, as perftest's do).
    pub(super) deadline: Option<Instant>,
    /// How long one wait may last ([`Pinger::wait`]).
    pub(super) patience: Patience,
}

/// What a wait ended with.
#[derive(PartialEq, Eq)]
pub(super) enum Waited {
    /// What was waited for happened.
    Done,
    /// The client said goodbye (a `-D` server).
    Stopped,
}

impl<'a, P: DataPath> Pinger<'a, P> {
    /// The end of `path` over `conn` (to the buffer its peer announced), sending messages of up
    /// to `inline` bytes inline; `clock`, the NIC's clock of the measuring end of a
    /// `--timestamps` run ([`Plan::nic`]).
    pub(super) fn new(
        path: P,
        mr: &'a Mr,
        conn: &Connection,
        inline: u32,
        p: &Plan,
        clock: Option<mlx5_hw::ClockInfo>,
    ) -> Result<Self> {
        Pinger::to(path, mr, run::remote_buffer_of(conn)?, inline, p, clock)
    }

    /// [`Pinger::new`] towards the peer's buffer `remote` (an XRC initiator's, which no
    /// `Connection` describes).
    pub(super) fn to(
        path: P,
        mr: &'a Mr,
        remote: RemoteBuffer,
        inline: u32,
        p: &Plan,
        clock: Option<mlx5_hw::ClockInfo>,
    ) -> Result<Self> {
        Ok(Pinger {
            path,
            mr,
            remote,
            half: p.run.half,
            inline,
            payload: vec![0; inline as usize + 1],
            next_wr: 0,
            sends_posted: 0,
            sends_done: 0,
            recvs: 0,
            last_recv_len: 0,
            atomics: 0,
            target: Some(0),
            done: [Done::default(); 16],
            yield_idle: false,
            watch: None,
            nic: p.nic(clock)?,
            remote_off: p.run.half,
            deadline: None,
            patience: Patience {
                limit: mlx5_tools::patience::MIN_PATIENCE,
                why: String::new(),
            },
        })
    }

    /// Give every wait the time a ping-pong of the run's largest message takes at `pace`
    /// (and the peer's report between two sizes: sorting its samples), with the transport's
    /// retries (`mlx5_tools::patience`).
    pub(super) fn pace(&mut self, pace: Pace, p: &Plan, params: &mlx5_connect::ConnectParams) {
        let max = p.run.sizes.iter().copied().max().unwrap_or(8);
        let n = p.run.length.iters().unwrap_or(0);
        // Sorting n samples: about 200 ns each, n log n at most.
        let report = Duration::from_nanos(n.saturating_mul(200));
        self.patience = Patience::for_work(
            pace,
            max.saturating_mul(2),
            2,
            report,
            patience::retry_budget(p.run.conn, params.timeout, params.retry_cnt),
            &patience::describe_budget(p.run.conn, params.timeout, params.retry_cnt),
        );
    }

    pub(super) fn remote(&self, off: usize) -> RemoteAddr {
        RemoteAddr::new(self.remote.addr + off as u64, self.remote.rkey)
    }

    pub(super) fn sge(&self, off: usize, len: usize) -> Result<Sge> {
        Ok(self.mr.sge(off, len as u32)?)
    }

    /// Post one message of `size` bytes ending in `stamp`: an RDMA WRITE into the peer's
    /// receive half, or a SEND.
    pub(super) fn post_msg(&mut self, test: Test, size: usize, stamp: u8) -> Result<()> {
        // Every send is signaled, and the WRITE wait drains only every 64 spins: when the
        // peer answers sooner, nothing drains, and the completions would overrun the CQ.
        // Retire before posting past the bound.
        if self.sends_posted - self.sends_done >= MAX_OUTSTANDING_SENDS {
            self.wait("send completions", 1, |p| {
                p.sends_posted - p.sends_done < MAX_OUTSTANDING_SENDS
            })?;
        }
        let wr_id = self.next_wr;
        self.next_wr += 1;
        let op = match test {
            Test::Write => Op::Write(self.remote(self.remote_off)),
            _ => Op::Send,
        };
        let sge = self.sge(0, size)?;
        if size as u32 <= self.inline {
            self.payload[size - 1] = stamp;
            let post = Post {
                wr_id,
                op,
                sge,
                inline: Some(&self.payload[..size]),
                signaled: true,
            };
            self.path.post(0, &post)?;
        } else {
            self.mr.write_u8(size - 1, stamp)?;
            let post = Post {
                wr_id,
                op,
                sge,
                inline: None,
                signaled: true,
            };
            self.path.post(0, &post)?;
        }
        self.sends_posted += 1;
        Ok(())
    }

    /// Poll what is ready: count send completions and receives (reposting each receive);
    /// an error completion ends the run.
    pub(super) fn drain(&mut self) -> Result<()> {
        let n = self.path.poll(&mut self.done)?;
        for i in 0..n {
            let d = self.done[i];
            if let Some(nic) = self.nic.as_mut() {
                nic.rec.note(&d);
            }
            if d.recv {
                self.recvs += 1;
                self.last_recv_len = d.byte_len;
                let sge = self.sge(self.half, self.half)?;
                self.path.post_recv(0, d.wr_id, sge)?;
            } else {
                self.sends_done += 1;
            }
        }
        Ok(())
    }

    /// Spin until `done`, draining the CQ every `every` spins (1 when `done` waits for a
    /// completion; more when it watches memory and the drain only retires sends).
    pub(super) fn wait(
        &mut self,
        what: &'static str,
        every: u32,
        mut done: impl FnMut(&Self) -> bool,
    ) -> Result<Waited> {
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            if done(self) {
                return Ok(Waited::Done);
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(every) {
                self.drain()?;
            }
            if spins.is_multiple_of(4096) {
                if let Some(conn) = self.watch.as_mut() {
                    match conn.poll_control()? {
                        Some(ControlEvent::PeerAborted(AbortCode::Shutdown)) => {
                            return Ok(Waited::Stopped)
                        }
                        Some(ControlEvent::PeerAborted(code)) => {
                            return Err(Error::Peer {
                                peer: "the client".into(),
                                why: format!("it aborted: {}", code.describe()),
                            })
                        }
                        // Nothing else ends a server's wait (a later mlx5-connect may add
                        // events).
                        Some(_) | None => {}
                    }
                }
                if self.deadline.is_some_and(|d| Instant::now() >= d) {
                    return Ok(Waited::Stopped);
                }
                if start.elapsed() > self.patience.limit {
                    let doing = format!(
                        "{} of this side's {} send(s) were outstanding and {} receive(s) had \
                         completed",
                        self.sends_posted - self.sends_done,
                        self.sends_posted,
                        self.recvs
                    );
                    return Err(Error::stuck(
                        what,
                        self.patience.limit,
                        &doing,
                        &self.patience.why,
                    ));
                }
            }
            if self.yield_idle {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }

    /// Wait for the peer's message `stamp` of `size` bytes.
    pub(super) fn wait_msg(&mut self, test: Test, size: usize, stamp: u8) -> Result<Waited> {
        match test {
            Test::Write => {
                let off = self.half + size - 1;
                self.wait("the peer's RDMA WRITE", 64, |p| {
                    p.mr.read_u8(off).is_ok_and(|b| b == stamp)
                })
            }
            _ => {
                let want = self.recvs + 1;
                let w = self.wait("the peer's SEND", 1, |p| p.recvs >= want)?;
                if w == Waited::Done && self.last_recv_len as usize != size {
                    return Err(Error::Check(format!(
                        "a receive of {} bytes, the peer sent {size}",
                        self.last_recv_len
                    )));
                }
                Ok(w)
            }
        }
    }

    /// One RDMA READ of `size` bytes from the peer's send half, or one atomic on the 8 bytes
    /// at the start of its receive half, waited for. Each atomic's original value is checked
    /// against what the target must hold ([`Pinger::target`]: only this side changes it).
    pub(super) fn one_op(&mut self, test: Test, atomic: AtomicArg, size: usize) -> Result<()> {
        let wr_id = self.next_wr;
        self.next_wr += 1;
        let k = self.atomics;
        let compare = self.target.unwrap_or(0);
        let (op, sge) = match test {
            Test::Atomic => {
                let remote = self.remote(self.remote_off);
                let op = match atomic {
                    // The target holds `compare`: swap it for the next value.
                    AtomicArg::CmpAndSwap => Op::CompSwap {
                        remote,
                        compare,
                        swap: compare.wrapping_add(1),
                    },
                    AtomicArg::FetchAndAdd => Op::FetchAdd { remote, add: 1 },
                };
                (op, self.sge(0, 8)?)
            }
            _ => (Op::Read(self.remote(0)), self.sge(self.half, size)?),
        };
        let post = Post {
            wr_id,
            op,
            sge,
            inline: None,
            signaled: true,
        };
        self.path.post(0, &post)?;
        self.sends_posted += 1;
        let want = self.sends_posted;
        self.wait("the operation's completion", 1, |p| p.sends_done >= want)?;
        if test == Test::Atomic {
            // The original value in host order: Soft-RoCE runs atomics on host-order memory
            // (`rxe_resp.c`), as a ConnectX does in the host-endianness mode `mlx5_core` selects
            // whenever the device offers it (`handle_hca_cap_atomic`), and as the software
            // ConnectX does by default (`docs/software-connectx.md`).
            let b: [u8; 8] = self.mr.read(0, 8)?.try_into().unwrap_or_default();
            let got = u64::from_ne_bytes(b);
            if let Some(held) = self.target {
                if got != held {
                    return Err(Error::Check(format!(
                        "atomic {} #{k} returned {got}, the target should have held {held}",
                        atomic.name()
                    )));
                }
            }
            // A first operation on a target of unknown content (perftest fills its buffers)
            // learns it; a compare-and-swap that found another value swapped nothing.
            self.target = Some(match atomic {
                AtomicArg::FetchAndAdd => got.wrapping_add(1),
                AtomicArg::CmpAndSwap if got == compare => compare.wrapping_add(1),
                AtomicArg::CmpAndSwap => got,
            });
            self.atomics += 1;
        }
        Ok(())
    }

    /// Wait for every send to complete (between sizes, outside the timed loops). A server
    /// watching its control connection may see the client's goodbye meanwhile
    /// ([`Waited::Stopped`]): the client had this side's last message, whose acknowledgment
    /// was still on its way.
    pub(super) fn settle(&mut self) -> Result<Waited> {
        let want = self.sends_posted;
        self.wait("send completions", 1, |p| p.sends_done >= want)
    }

    /// After the client's goodbye came during [`Pinger::settle`]: the client had every
    /// message, so the run is complete, but the acknowledgments of this side's last answers
    /// may still be on their way (the peer's responder writes the data before it sends the
    /// ACK). Wait for them, as perftest's server waits for all its send completions before it
    /// closes, so the run ends with nothing outstanding and the wire counters whole. The wait
    /// is bounded by the transport itself: an ACK that never comes ends in a retry-exceeded
    /// completion after the retry budget, and the patience limit backs that up. Neither is an
    /// error of the run, which the client already confirmed.
    pub(super) fn linger(&mut self) {
        let start = Instant::now();
        while self.sends_done < self.sends_posted && start.elapsed() <= self.patience.limit {
            if let Err(e) = self.drain() {
                tracing::debug!("an answer the client had already seen ended without its ACK: {e}");
                return;
            }
            std::thread::yield_now();
        }
    }
}

/// Stamps cycle through 1..=255 so that consecutive messages always differ from each other
/// and from the zeroed buffer.
pub(super) fn next_stamp(s: u8) -> u8 {
    if s == 255 {
        1
    } else {
        s + 1
    }
}
