//! Faults on demand: what the fabric does to frames between the sender's port and the
//! receiver's, so retransmission, RNR and recovery can be tested.
//!
//! A rule has a *scope* (a link between two devices in both directions, one direction, the
//! frames addressed to one QP, or every frame), an optional *class* of packets it is limited to
//! (requests, ACKs, READ responses, ...) and an *action*: drop (a rate, every N-th frame, or
//! exact PSNs, each once), duplicate, corrupt (one byte flipped after the UDP header, so the
//! receiver's ICRC check fails), delay, reorder (a random extra delay below a window, so frames
//! sent within the window arrive in any order), or take the link down.
//!
//! Every random choice comes from one ChaCha8 generator seeded by [`crate::Fabric::set_seed`]
//! and drawn in a fixed order (frames in transmit order, rules in the order they were added),
//! so a run is reproducible for a given seed.
//!
//! ```no_run
//! # use mlx5_sim::{Fabric, DeviceConfig, faults::{Rate, Class}};
//! # use std::time::Duration;
//! let fabric = Fabric::new();
//! let a = fabric.add_device(DeviceConfig::new([10, 0, 0, 1]));
//! let b = fabric.add_device(DeviceConfig::new([10, 0, 0, 2]));
//! fabric.set_seed(7);
//! let f = fabric.faults();
//! f.link(&a, &b).loss(Rate(0.1)).reorder(Duration::from_micros(5));
//! f.path(&b, &a).only(Class::Acks).drop_every(3);
//! f.link(&a, &b).corrupt_every(50);
//! ```

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::device::SimDevice;
use crate::fabric::Inner;
use crate::wire::{Opcode, Operation, Packet};

/// A probability in `0.0..=1.0` (values outside are clamped).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rate(pub f64);

impl From<f64> for Rate {
    fn from(p: f64) -> Rate {
        Rate(p)
    }
}

/// The packets a rule applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Class {
    /// Every packet.
    #[default]
    Any,
    /// Requests: SEND, WRITE, READ request, atomic request (every transport).
    Requests,
    /// SEND and WRITE packets (requests that carry data).
    Data,
    /// READ requests.
    ReadRequests,
    /// Atomic requests (CmpSwap, FetchAdd).
    AtomicRequests,
    /// Responses of any kind: ACK/NAK, READ responses, atomic ACKs.
    Responses,
    /// ACK and NAK packets (opcode Acknowledge).
    Acks,
    /// READ response packets.
    ReadResponses,
    /// Atomic ACKs.
    AtomicAcks,
}

impl Class {
    fn matches(self, op: Opcode) -> bool {
        let o = op.operation();
        match self {
            Class::Any => true,
            Class::Requests => op.is_request(),
            Class::Data => op.is_send() || op.is_rdma_write(),
            Class::ReadRequests => o == Operation::RdmaReadRequest,
            Class::AtomicRequests => op.is_atomic() && op.is_request(),
            Class::Responses => op.is_response(),
            Class::Acks => o == Operation::Acknowledge,
            Class::ReadResponses => op.is_read_response(),
            Class::AtomicAcks => o == Operation::AtomicAcknowledge,
        }
    }
}

/// What the fabric did to frames so far (not visible to the devices, like loss inside a real
/// network).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// Frames dropped by a loss rule.
    pub dropped: u64,
    /// Frames dropped because their link was down.
    pub link_down_dropped: u64,
    /// Extra copies put on the wire.
    pub duplicated: u64,
    /// Frames with a byte flipped.
    pub corrupted: u64,
    /// Frames delayed (by a delay or reorder rule).
    pub delayed: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scope {
    Link(Ipv4Addr, Ipv4Addr),
    Path(Ipv4Addr, Ipv4Addr),
    Qp(Ipv4Addr, u32),
    All,
}

impl Scope {
    fn matches(self, m: &Meta) -> bool {
        match self {
            Scope::Link(a, b) => (m.src, m.dst) == (a, b) || (m.src, m.dst) == (b, a),
            Scope::Path(a, b) => (m.src, m.dst) == (a, b),
            Scope::Qp(ip, qpn) => m.dst == ip && m.qpn == qpn,
            Scope::All => true,
        }
    }
}

#[derive(Clone, Debug)]
enum Pattern {
    Rate(f64),
    Every {
        n: u64,
        seen: u64,
    },
    /// (destination QPN, PSNs still to drop): each listed PSN once.
    Psns(u32, BTreeSet<u32>),
    Next(u64),
}

impl Pattern {
    fn fires(&mut self, m: &Meta, rng: &mut ChaCha8Rng) -> bool {
        match self {
            Pattern::Rate(p) => *p > 0.0 && rng.gen::<f64>() < *p,
            Pattern::Every { n, seen } => {
                *seen += 1;
                *n > 0 && *seen % *n == 0
            }
            Pattern::Psns(qpn, set) => *qpn == m.qpn && set.remove(&m.psn),
            Pattern::Next(left) => {
                if *left > 0 {
                    *left -= 1;
                    true
                } else {
                    false
                }
            }
        }
    }
}

#[derive(Clone, Debug)]
enum Action {
    Drop(Pattern),
    Duplicate(Pattern),
    Corrupt(Pattern),
    Delay(u64),
    Reorder(u64),
    Down,
}

#[derive(Clone, Debug)]
struct Rule {
    scope: Scope,
    class: Class,
    action: Action,
}

/// What the fault rules see of a frame.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Meta {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub qpn: u32,
    pub psn: u32,
    pub opcode: Opcode,
}

impl Meta {
    pub(crate) fn of(p: &Packet) -> Meta {
        Meta {
            src: p.addr.src_ip,
            dst: p.addr.dst_ip,
            qpn: p.bth.dest_qp,
            psn: p.bth.psn.get(),
            opcode: p.bth.opcode,
        }
    }
}

/// One copy of a frame to put on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Delivery {
    /// Extra delay in virtual nanoseconds.
    pub delay: u64,
    /// Flip a byte (the random offset is drawn by the caller from [`FaultState::rng`]).
    pub corrupt: bool,
}

/// The fault rules of a fabric and their random generator.
#[derive(Debug)]
pub struct FaultState {
    rules: Vec<Rule>,
    pub(crate) rng: ChaCha8Rng,
    stats: FaultStats,
}

impl Default for FaultState {
    fn default() -> Self {
        FaultState {
            rules: Vec::new(),
            rng: ChaCha8Rng::seed_from_u64(0),
            stats: FaultStats::default(),
        }
    }
}

impl FaultState {
    /// Reseed the generator.
    pub fn set_seed(&mut self, seed: u64) {
        self.rng = ChaCha8Rng::seed_from_u64(seed);
    }

    /// Whether any rule is installed (the fast path skips the judgement).
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The statistics so far.
    pub fn stats(&self) -> FaultStats {
        self.stats
    }

    /// Decide what happens to a frame: no copies (dropped), one, or two (duplicated).
    pub(crate) fn judge(&mut self, m: &Meta) -> Vec<Delivery> {
        if self.rules.is_empty() {
            return vec![Delivery {
                delay: 0,
                corrupt: false,
            }];
        }
        let (mut drop, mut down, mut dup, mut corrupt) = (false, false, false, false);
        let (mut delay, mut jitter) = (0u64, 0u64);
        for r in self.rules.iter_mut() {
            if !r.scope.matches(m) || !r.class.matches(m.opcode) {
                continue;
            }
            match &mut r.action {
                Action::Down => down = true,
                Action::Drop(p) => drop |= p.fires(m, &mut self.rng),
                Action::Duplicate(p) => dup |= p.fires(m, &mut self.rng),
                Action::Corrupt(p) => corrupt |= p.fires(m, &mut self.rng),
                Action::Delay(d) => delay += *d,
                Action::Reorder(w) => {
                    if *w > 0 {
                        jitter += self.rng.gen_range(0..*w);
                    }
                }
            }
        }
        if down {
            self.stats.link_down_dropped += 1;
            return Vec::new();
        }
        if drop {
            self.stats.dropped += 1;
            return Vec::new();
        }
        if corrupt {
            self.stats.corrupted += 1;
        }
        if delay + jitter > 0 {
            self.stats.delayed += 1;
        }
        let first = Delivery {
            delay: delay + jitter,
            corrupt,
        };
        if dup {
            self.stats.duplicated += 1;
            // The copy arrives right after the original (the wire keeps order for equal times).
            vec![
                first,
                Delivery {
                    delay: delay + jitter,
                    corrupt: false,
                },
            ]
        } else {
            vec![first]
        }
    }

    fn push(&mut self, scope: Scope, class: Class, action: Action) {
        self.rules.push(Rule {
            scope,
            class,
            action,
        });
    }
}

/// The fault controls of a fabric ([`crate::Fabric::faults`]).
#[derive(Clone)]
pub struct Faults {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Faults")
            .field("stats", &self.stats())
            .finish()
    }
}

impl Faults {
    fn target(&self, scope: Scope) -> FaultTarget {
        FaultTarget {
            inner: self.inner.clone(),
            scope,
            class: Class::Any,
        }
    }

    /// The link between two devices, both directions (`link(a, b)` and `link(b, a)` are the
    /// same link).
    pub fn link(&self, a: &SimDevice, b: &SimDevice) -> FaultTarget {
        self.link_ipv4(a.ipv4().octets(), b.ipv4().octets())
    }

    /// The link between two IPv4 addresses, both directions (for a peer in another process).
    pub fn link_ipv4(&self, a: [u8; 4], b: [u8; 4]) -> FaultTarget {
        let (a, b) = (Ipv4Addr::from(a), Ipv4Addr::from(b));
        self.target(Scope::Link(a.min(b), a.max(b)))
    }

    /// One direction: frames from `from` to `to`.
    pub fn path(&self, from: &SimDevice, to: &SimDevice) -> FaultTarget {
        self.target(Scope::Path(from.ipv4(), to.ipv4()))
    }

    /// Frames addressed to QP `qpn` of device `dev` (requests to its responder and responses
    /// to its requester).
    pub fn qp(&self, dev: &SimDevice, qpn: u32) -> FaultTarget {
        self.target(Scope::Qp(dev.ipv4(), qpn))
    }

    /// Every frame on the fabric.
    pub fn all(&self) -> FaultTarget {
        self.target(Scope::All)
    }

    /// Remove every rule (links come back up).
    pub fn clear(&self) {
        self.inner.lock().faults.rules.clear();
    }

    /// What the fabric did so far.
    pub fn stats(&self) -> FaultStats {
        self.inner.lock().faults.stats
    }
}

/// A place in the fabric to inject faults at; each method adds a rule and returns the target,
/// so calls chain.
#[derive(Clone)]
pub struct FaultTarget {
    inner: Arc<Inner>,
    scope: Scope,
    class: Class,
}

impl std::fmt::Debug for FaultTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultTarget")
            .field("scope", &self.scope)
            .field("class", &self.class)
            .finish()
    }
}

impl FaultTarget {
    fn add(&self, action: Action) -> &Self {
        self.inner
            .lock()
            .faults
            .push(self.scope, self.class, action);
        self
    }

    /// Limit the rules added through the returned target to one class of packets.
    pub fn only(&self, class: Class) -> FaultTarget {
        FaultTarget {
            class,
            ..self.clone()
        }
    }

    /// Drop each frame with probability `rate`.
    pub fn loss(&self, rate: impl Into<Rate>) -> &Self {
        let Rate(p) = rate.into();
        self.add(Action::Drop(Pattern::Rate(p.clamp(0.0, 1.0))))
    }

    /// Drop every `n`-th frame (the `n`-th, `2n`-th, ...); 0 drops nothing.
    pub fn drop_every(&self, n: u64) -> &Self {
        self.add(Action::Drop(Pattern::Every { n, seen: 0 }))
    }

    /// Drop the next `n` frames.
    pub fn drop_next(&self, n: u64) -> &Self {
        self.add(Action::Drop(Pattern::Next(n)))
    }

    /// Drop the first frame addressed to QP `qpn` with each of these PSNs (once per PSN, so the
    /// retransmission gets through). Both requests (to the responder's QPN) and responses (to
    /// the requester's QPN) can be named; responses carry the PSNs of their requests. QPNs are
    /// per device and two devices may use the same numbers, so scope the rule with
    /// [`Faults::path`] (or [`Faults::qp`]) rather than [`Faults::all`].
    pub fn drop_psns(&self, qpn: u32, psns: impl IntoIterator<Item = u32>) -> &Self {
        let set = psns.into_iter().map(|p| p & 0x00ff_ffff).collect();
        self.add(Action::Drop(Pattern::Psns(qpn, set)))
    }

    /// Deliver a second copy of each frame with probability `rate`.
    pub fn duplicate(&self, rate: impl Into<Rate>) -> &Self {
        let Rate(p) = rate.into();
        self.add(Action::Duplicate(Pattern::Rate(p.clamp(0.0, 1.0))))
    }

    /// Flip one byte of every `n`-th frame (after the UDP header, so the ICRC check fails).
    pub fn corrupt_every(&self, n: u64) -> &Self {
        self.add(Action::Corrupt(Pattern::Every { n, seen: 0 }))
    }

    /// Flip one byte of each frame with probability `rate`.
    pub fn corrupt(&self, rate: impl Into<Rate>) -> &Self {
        let Rate(p) = rate.into();
        self.add(Action::Corrupt(Pattern::Rate(p.clamp(0.0, 1.0))))
    }

    /// Delay every frame by `d` of virtual time (delivered when the clock gets there:
    /// [`crate::Fabric::advance`], or the wall clock in threaded mode).
    pub fn delay(&self, d: Duration) -> &Self {
        self.add(Action::Delay(d.as_nanos() as u64))
    }

    /// Delay every frame by a random `0..window` of virtual time, so frames sent within the
    /// window arrive in any order.
    pub fn reorder(&self, window: Duration) -> &Self {
        self.add(Action::Reorder(window.as_nanos() as u64))
    }

    /// Take the link (or path, or QP) down: every frame is dropped until [`up`](Self::up).
    pub fn down(&self) -> &Self {
        self.add(Action::Down)
    }

    /// Bring it back up (removes the `down` rules of this scope and class).
    pub fn up(&self) -> &Self {
        let mut w = self.inner.lock();
        w.faults.rules.retain(|r| {
            !(r.scope == self.scope && r.class == self.class && matches!(r.action, Action::Down))
        });
        drop(w);
        self
    }

    /// Remove every rule of this scope and class.
    pub fn clear(&self) -> &Self {
        let mut w = self.inner.lock();
        w.faults
            .rules
            .retain(|r| !(r.scope == self.scope && r.class == self.class));
        drop(w);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(op: Opcode, psn: u32) -> Meta {
        Meta {
            src: Ipv4Addr::new(10, 0, 0, 1),
            dst: Ipv4Addr::new(10, 0, 0, 2),
            qpn: 0x101,
            psn,
            opcode: op,
        }
    }

    fn drops(f: &mut FaultState, n: u32) -> Vec<bool> {
        (0..n)
            .map(|i| f.judge(&meta(Opcode::RC_SEND_ONLY, i)).is_empty())
            .collect()
    }

    #[test]
    fn a_seed_fixes_the_losses_and_rates_hold_roughly() {
        let mut runs = Vec::new();
        for seed in [1, 1, 2] {
            let mut f = FaultState::default();
            f.set_seed(seed);
            f.push(Scope::All, Class::Any, Action::Drop(Pattern::Rate(0.25)));
            runs.push(drops(&mut f, 4000));
        }
        assert_eq!(runs[0], runs[1]);
        assert_ne!(runs[0], runs[2]);
        let lost = runs[0].iter().filter(|&&d| d).count();
        assert!((800..1200).contains(&lost), "{lost} of 4000 at 25%");
    }

    #[test]
    fn scope_class_every_and_psns() {
        let mut f = FaultState::default();
        let (a, b) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        f.push(
            Scope::Path(b, a),
            Class::Any,
            Action::Drop(Pattern::Every { n: 1, seen: 0 }),
        );
        f.push(
            Scope::All,
            Class::Acks,
            Action::Drop(Pattern::Every { n: 2, seen: 0 }),
        );
        f.push(
            Scope::Qp(b, 0x101),
            Class::Any,
            Action::Drop(Pattern::Psns(0x101, [7].into())),
        );
        // a → b: only ACKs (every second) and PSN 7 (once) are lost.
        assert_eq!(drops(&mut f, 10), {
            let mut v = vec![false; 10];
            v[7] = true;
            v
        });
        let acks: Vec<bool> = (0..4)
            .map(|i| f.judge(&meta(Opcode::RC_ACKNOWLEDGE, i)).is_empty())
            .collect();
        assert_eq!(acks, [false, true, false, true]);
        assert!(!f.judge(&meta(Opcode::RC_SEND_ONLY, 7)).is_empty(), "once");
        let mut back = meta(Opcode::RC_SEND_ONLY, 0);
        (back.src, back.dst) = (b, a);
        assert!(f.judge(&back).is_empty(), "b → a is down");
        assert_eq!(f.stats().dropped, 4);
    }
}
