//! The fault rules of a fabric as data and pure decisions: what a rule selects and does to a
//! frame ([`FaultState::judge`]), the seeded generator every random choice draws from
//! ([`FaultRng`]), the record and statistics of what the rules did. The world holds a
//! [`FaultState`] and runs each frame through it; the handle users add rules with,
//! [`crate::faults::Faults`], sits above the world and describes the rules.
//!
//! One kind of rule acts at the receiver instead of on the wire: an RNR rule
//! ([`FaultState::refuse_receive`], through a [`RecvGate`]) makes the responder a request is
//! delivered to find no receive WQE for it, as if its receive queue (or SRQ) were empty.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::BufWriter;
use std::net::Ipv4Addr;
use std::time::Duration;

use crate::pcap::PcapWriter;
use crate::wire::{Opcode, Operation};

/// The packets a rule applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
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
    /// Frames dropped by a drop rule.
    pub dropped: u64,
    /// Frames dropped because their link was down.
    pub link_down_dropped: u64,
    /// Extra copies put on the wire.
    pub duplicated: u64,
    /// Frames with a byte flipped.
    pub corrupted: u64,
    /// Frames delayed (by a delay or reorder rule).
    pub delayed: u64,
    /// Requests an RNR rule refused a receive WQE (the responder answered RNR NAK on RC, dropped
    /// the message on UC and UD, as with an empty receive queue).
    pub rnr: u64,
    /// Faults not in [`crate::faults::Faults::record`] because it was full ([`RECORD_CAP`]).
    pub unrecorded: u64,
}

/// Where a rule acts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scope {
    /// Both directions between two addresses (the lower first).
    Link(Ipv4Addr, Ipv4Addr),
    /// From the first address to the second.
    Path(Ipv4Addr, Ipv4Addr),
    /// Addressed to this QPN at this address.
    Qp(Ipv4Addr, u32),
    /// Addressed to this address.
    ToDevice(Ipv4Addr),
    /// Sent by this address.
    FromDevice(Ipv4Addr),
    /// Every frame.
    All,
}

impl Scope {
    fn matches(self, m: &Meta) -> bool {
        match self {
            Scope::Link(a, b) => (m.src, m.dst) == (a, b) || (m.src, m.dst) == (b, a),
            Scope::Path(a, b) => (m.src, m.dst) == (a, b),
            Scope::Qp(ip, qpn) => m.dst == ip && m.qpn == qpn,
            Scope::ToDevice(ip) => m.dst == ip,
            Scope::FromDevice(ip) => m.src == ip,
            Scope::All => true,
        }
    }
}

/// When a rule fires on the frames its scope, class and QPN select.
#[derive(Clone, Debug)]
pub(crate) enum Pattern {
    /// Every frame.
    Always,
    /// Each frame with this probability.
    Rate(f64),
    /// The `n`-th, `2n`-th, ... frame.
    Every { n: u64, seen: u64 },
    /// Frames addressed to this QPN with one of these PSNs, each PSN the given number of times.
    Psns(u32, BTreeMap<u32, u64>),
    /// The next frames, this many.
    Next(u64),
    /// Every frame for this long (nanoseconds of virtual time) from the first one the rule
    /// selects (`until`, set then), none after.
    For {
        /// How long.
        len: u64,
        /// The end, once the first frame started the time.
        until: Option<u64>,
    },
}

impl Pattern {
    /// Whether the pattern selects this frame. Random patterns draw here, for every frame their
    /// rule's scope selects, so the draws do not depend on what other rules decide; nothing is
    /// used up ([`Pattern::consume`] does that once the rule has acted).
    fn selects(&mut self, m: &Meta, rng: &mut FaultRng, now: u64) -> bool {
        match self {
            Pattern::Always => true,
            Pattern::Rate(p) => {
                let x = rng.unit_f64();
                *p > 0.0 && x < *p
            }
            Pattern::Every { n, seen } => {
                *seen += 1;
                *n > 0 && *seen % *n == 0
            }
            Pattern::Psns(qpn, left) => *qpn == m.qpn && left.get(&m.psn).is_some_and(|&k| k > 0),
            Pattern::Next(left) => *left > 0,
            Pattern::For { len, until } => now < *until.get_or_insert(now.saturating_add(*len)),
        }
    }

    fn consume(&mut self, m: &Meta) {
        match self {
            Pattern::Psns(_, left) => {
                if let Some(k) = left.get_mut(&m.psn) {
                    *k -= 1;
                    if *k == 0 {
                        left.remove(&m.psn);
                    }
                }
            }
            Pattern::Next(left) => *left = left.saturating_sub(1),
            _ => {}
        }
    }
}

/// What a rule does to the frames it fires on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Drop the frame.
    Drop,
    /// Add a copy.
    Duplicate,
    /// Flip one bit.
    Corrupt,
    /// Delay by this many virtual nanoseconds.
    Delay(u64),
    /// Delay by a random `0..` this many virtual nanoseconds.
    Reorder(u64),
    /// Drop it: the link is down.
    Down,
    /// Not a wire fault: the responder the request is delivered to finds no receive WQE for it
    /// ([`FaultState::refuse_receive`]).
    Rnr,
}

/// The frames a rule added through one [`crate::faults::FaultTarget`] selects, and its limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Selector {
    pub(crate) scope: Scope,
    pub(crate) class: Class,
    /// Only frames whose BTH names this destination QP.
    pub(crate) qpn: Option<u32>,
    /// Firings each rule gets (`None`: no limit).
    pub(crate) times: Option<u64>,
    /// Frames each rule lets pass before it acts.
    pub(crate) skip: u64,
}

impl Selector {
    /// Every frame, no limit.
    pub(crate) fn new(scope: Scope) -> Selector {
        Selector {
            scope,
            class: Class::Any,
            qpn: None,
            times: None,
            skip: 0,
        }
    }

    /// Whether `r` was added with this scope, class and QPN.
    fn same(&self, r: &Rule) -> bool {
        r.scope == self.scope && r.class == self.class && r.qpn == self.qpn
    }

    /// The pattern of a PSN-list rule: each PSN hit `times` times (once by default).
    pub(crate) fn psns(&self, qpn: u32, psns: impl IntoIterator<Item = u32>) -> Pattern {
        let each = self.times.unwrap_or(1);
        let set = psns.into_iter().map(|p| (p & 0x00ff_ffff, each)).collect();
        Pattern::Psns(qpn & 0x00ff_ffff, set)
    }
}

#[derive(Clone, Debug)]
struct Rule {
    scope: Scope,
    class: Class,
    /// Only frames whose BTH names this destination QP.
    qpn: Option<u32>,
    kind: Kind,
    pattern: Pattern,
    /// Firings left (`None`: no limit); a spent rule stays installed and does nothing.
    left: Option<u64>,
    /// Frames it selects that it lets pass before it starts acting.
    skip: u64,
    /// Judging scratch: the rule selects the frame being judged.
    hit: bool,
    /// Judging scratch: the reorder delay drawn for it.
    jitter: u64,
}

impl Rule {
    fn applies(&self, m: &Meta) -> bool {
        self.scope.matches(m) && self.class.matches(m.opcode) && self.qpn.is_none_or(|q| q == m.qpn)
    }

    /// The rule acted on the frame: use up one firing.
    fn consume(&mut self, m: &Meta) {
        self.pattern.consume(m);
        if let Some(k) = &mut self.left {
            *k = k.saturating_sub(1);
        }
    }
}

/// What a fault did to one frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FaultKind {
    /// Dropped by a drop rule (loss, every N-th, next N, exact PSNs).
    Dropped,
    /// Dropped because its link, path or QP was down.
    LinkDown,
    /// Delivered with this many extra copies.
    Duplicated {
        /// Extra copies (one per duplicate rule that fired).
        copies: u32,
    },
    /// One bit flipped (the receiver's ICRC check drops it).
    Corrupted,
    /// Delivered, and refused a receive WQE by an RNR rule: the responder answered RNR NAK
    /// (RC) or dropped the message (UC, UD).
    Rnr,
}

/// One frame a fault dropped, duplicated or corrupted ([`crate::faults::Faults::record`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FaultRecord {
    /// The frame's number among all frames transmitted on the fabric, from 1: the frame number
    /// Wireshark shows in [`crate::Fabric::capture_to`]'s capture, when that capture was started
    /// before the first frame.
    pub frame: u64,
    /// Virtual time at which it was transmitted.
    pub at: Duration,
    /// Sender.
    pub src: Ipv4Addr,
    /// Receiver.
    pub dst: Ipv4Addr,
    /// BTH destination QP.
    pub qpn: u32,
    /// BTH PSN.
    pub psn: u32,
    /// BTH opcode.
    pub opcode: Opcode,
    /// What was done to it.
    pub kind: FaultKind,
}

/// The most entries [`crate::faults::Faults::record`] keeps; later faults are still counted in
/// [`FaultStats`] and in [`FaultStats::unrecorded`].
pub const RECORD_CAP: usize = 1 << 16;

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
    pub(crate) fn of(p: &crate::wire::Packet) -> Meta {
        Meta {
            src: p.addr.src_ip,
            dst: p.addr.dst_ip,
            qpn: p.bth.dest_qp,
            psn: p.bth.psn.get(),
            opcode: p.bth.opcode,
        }
    }
}

/// The seeded generator behind every random fault: xoshiro256** (Blackman and Vigna,
/// "Scrambled linear pseudorandom number generators", ACM TOMS 47(4), 2021; reference code at
/// prng.di.unimi.it), its 256-bit state filled from the 64-bit seed by SplitMix64 as the authors
/// recommend. Fault schedules need a fast generator that is the same on every platform and
/// release for a given seed, not a cryptographic one, so the simulator carries these few lines
/// instead of making its users compile `rand`.
#[derive(Clone, Debug)]
pub(crate) struct FaultRng {
    s: [u64; 4],
}

impl FaultRng {
    /// The generator for `seed`: four SplitMix64 outputs from it (never all zero, so the
    /// xoshiro state is valid for every seed).
    pub(crate) fn new(seed: u64) -> Self {
        let mut x = seed;
        let mut splitmix = || {
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        FaultRng {
            s: [splitmix(), splitmix(), splitmix(), splitmix()],
        }
    }

    /// The next 64 random bits.
    pub(crate) fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let out = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        out
    }

    /// A uniform value in `0.0..1.0`: the top 53 bits as the fraction of a double.
    pub(crate) fn unit_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A uniform value in `0..n`, or 0 when `n` is 0 (Lemire's multiply-and-reject, "Fast Random
    /// Integer Generation in an Interval", ACM TOMACS 29(1), 2019: no modulo bias).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        let threshold = n.wrapping_neg() % n;
        loop {
            let m = u128::from(self.next_u64()) * u128::from(n);
            if (m as u64) >= threshold {
                return (m >> 64) as u64;
            }
        }
    }

    /// A uniform value in `range`, or `range.start` when the range is empty.
    pub(crate) fn in_range(&mut self, range: std::ops::Range<usize>) -> usize {
        let span = range.end.saturating_sub(range.start) as u64;
        range.start + self.below(span) as usize
    }
}

/// The RNR rules' answer for one request delivered to one QP: asked when the responder wants a
/// receive WQE for it, decided at the first question and the same at every later one (a
/// WRITE with immediate asks whether a receive is ready and later takes it), so a request uses
/// up at most one firing.
#[derive(Debug)]
pub(crate) struct RecvGate<'a> {
    faults: &'a mut FaultState,
    meta: Meta,
    now: u64,
    decided: Option<bool>,
}

impl<'a> RecvGate<'a> {
    /// The gate for request `m` delivered at `now`; `None` when no RNR rule is installed.
    pub(crate) fn new(faults: &'a mut FaultState, m: Meta, now: u64) -> Option<RecvGate<'a>> {
        faults.has_rnr_rules().then_some(RecvGate {
            faults,
            meta: m,
            now,
            decided: None,
        })
    }

    /// Whether the request is refused its receive WQE.
    pub(crate) fn refuses(&mut self) -> bool {
        match self.decided {
            Some(d) => d,
            None => {
                let d = self.faults.refuse_receive(&self.meta, self.now);
                self.decided = Some(d);
                d
            }
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

/// The fault rules of a fabric, their random generator, the record of what they did and the
/// capture after faults.
#[derive(Debug)]
pub struct FaultState {
    rules: Vec<Rule>,
    pub(crate) rng: FaultRng,
    stats: FaultStats,
    /// Frames judged so far (every frame transmitted on the fabric).
    frames: u64,
    record: Vec<FaultRecord>,
    capture: Option<PcapWriter<BufWriter<File>>>,
}

impl Default for FaultState {
    fn default() -> Self {
        FaultState {
            rules: Vec::new(),
            rng: FaultRng::new(0),
            stats: FaultStats::default(),
            frames: 0,
            record: Vec::new(),
            capture: None,
        }
    }
}

impl FaultState {
    /// Reseed the generator.
    pub fn set_seed(&mut self, seed: u64) {
        self.rng = FaultRng::new(seed);
    }

    /// Whether any rule is installed.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The statistics so far.
    pub fn stats(&self) -> FaultStats {
        self.stats
    }

    fn note(&mut self, m: &Meta, now: u64, kind: FaultKind) {
        if self.record.len() >= RECORD_CAP {
            self.stats.unrecorded += 1;
            return;
        }
        self.record.push(FaultRecord {
            frame: self.frames,
            at: Duration::from_nanos(now),
            src: m.src,
            dst: m.dst,
            qpn: m.qpn,
            psn: m.psn,
            opcode: m.opcode,
            kind,
        });
    }

    /// Decide what happens to a frame transmitted at virtual time `now`: no copies (dropped),
    /// one, or more (duplicated).
    ///
    /// Every rule whose scope, class and QPN select the frame is examined in the order the rules
    /// were added (random ones draw then). A frame is dropped once: the first drop rule that
    /// selects it acts and is used up, later ones keep their firings for later frames, so two
    /// rules that each drop PSN 5 once drop it twice (the original and its retransmission).
    /// Nothing else happens to a dropped frame. Otherwise every duplicate rule that selects it
    /// adds a copy, the first corrupt rule flips a bit of the first copy, and delays add up.
    pub(crate) fn judge(&mut self, m: &Meta, now: u64) -> Vec<Delivery> {
        self.frames += 1;
        if self.rules.is_empty() {
            return vec![Delivery {
                delay: 0,
                corrupt: false,
            }];
        }
        for r in self.rules.iter_mut() {
            r.hit = false;
            // RNR rules act where a request meets its receive queue, not on the wire.
            if r.kind == Kind::Rnr || !r.applies(m) {
                continue;
            }
            let selected = r.pattern.selects(m, &mut self.rng, now);
            r.jitter = match r.kind {
                Kind::Reorder(w) if w > 0 => self.rng.below(w),
                _ => 0,
            };
            r.hit = selected && r.left != Some(0);
            if r.hit && r.skip > 0 {
                r.skip -= 1;
                r.hit = false;
            }
        }
        if self.rules.iter().any(|r| r.hit && r.kind == Kind::Down) {
            self.stats.link_down_dropped += 1;
            self.note(m, now, FaultKind::LinkDown);
            return Vec::new();
        }
        if let Some(r) = self
            .rules
            .iter_mut()
            .find(|r| r.hit && r.kind == Kind::Drop)
        {
            r.consume(m);
            self.stats.dropped += 1;
            self.note(m, now, FaultKind::Dropped);
            return Vec::new();
        }
        let (mut copies, mut corrupt, mut delay) = (0u32, false, 0u64);
        for r in self.rules.iter_mut().filter(|r| r.hit) {
            match r.kind {
                Kind::Duplicate => {
                    r.consume(m);
                    copies += 1;
                }
                Kind::Corrupt if !corrupt => {
                    r.consume(m);
                    corrupt = true;
                }
                Kind::Delay(d) => {
                    r.consume(m);
                    delay += d;
                }
                Kind::Reorder(_) => {
                    r.consume(m);
                    delay += r.jitter;
                }
                _ => {}
            }
        }
        if corrupt {
            self.stats.corrupted += 1;
            self.note(m, now, FaultKind::Corrupted);
        }
        if delay > 0 {
            self.stats.delayed += 1;
        }
        if copies > 0 {
            self.stats.duplicated += u64::from(copies);
            self.note(m, now, FaultKind::Duplicated { copies });
        }
        // The copies arrive right after the original (the wire keeps order for equal times).
        let mut out = vec![Delivery { delay, corrupt }];
        out.extend((0..copies).map(|_| Delivery {
            delay,
            corrupt: false,
        }));
        out
    }

    /// Whether any RNR rule is installed (a delivered request needs a [`RecvGate`] only then).
    pub(crate) fn has_rnr_rules(&self) -> bool {
        self.rules.iter().any(|r| r.kind == Kind::Rnr)
    }

    /// A request delivered at virtual time `now` needs a receive WQE: whether an RNR rule
    /// refuses it one. The RNR rules whose scope, class and QPN select the request are examined
    /// in the order they were added (random ones draw then); the first that fires acts and uses
    /// up one firing, and is counted ([`FaultStats::rnr`]) and recorded ([`FaultKind::Rnr`]).
    pub(crate) fn refuse_receive(&mut self, m: &Meta, now: u64) -> bool {
        let mut fired = None;
        for (i, r) in self.rules.iter_mut().enumerate() {
            if r.kind != Kind::Rnr || !r.applies(m) {
                continue;
            }
            // As in `judge`: every selecting rule draws and counts its skips, the first acts.
            let hit = r.pattern.selects(m, &mut self.rng, now) && r.left != Some(0);
            if hit && r.skip > 0 {
                r.skip -= 1;
            } else if hit && fired.is_none() {
                fired = Some(i);
            }
        }
        let Some(i) = fired else { return false };
        self.rules[i].consume(m);
        self.stats.rnr += 1;
        self.note(m, now, FaultKind::Rnr);
        true
    }

    /// A frame arrives at a port at virtual time `now`: the capture after faults takes it.
    pub(crate) fn arrived(&mut self, now: u64, bytes: &[u8]) {
        if let Some(cap) = &mut self.capture {
            if let Err(e) = cap.write_frame(Duration::from_nanos(now), bytes) {
                tracing::error!(error = %e, "capture after faults failed; capture stopped");
                self.capture = None;
            }
        }
    }

    /// Add a rule for the frames `sel` selects.
    pub(crate) fn push(&mut self, sel: &Selector, kind: Kind, pattern: Pattern) {
        self.rules.push(Rule {
            scope: sel.scope,
            class: sel.class,
            qpn: sel.qpn,
            kind,
            pattern,
            left: sel.times,
            skip: sel.skip,
            hit: false,
            jitter: 0,
        });
    }

    /// Remove every rule.
    pub(crate) fn clear_rules(&mut self) {
        self.rules.clear();
    }

    /// Remove the rules added with `sel`'s scope, class and QPN (only the `down` ones if
    /// `down_only`).
    pub(crate) fn remove(&mut self, sel: &Selector, down_only: bool) {
        self.rules
            .retain(|r| !(sel.same(r) && (!down_only || r.kind == Kind::Down)));
    }

    /// The record of what the rules did.
    pub(crate) fn record(&self) -> &[FaultRecord] {
        &self.record
    }

    /// The record, emptying it.
    pub(crate) fn take_record(&mut self) -> Vec<FaultRecord> {
        std::mem::take(&mut self.record)
    }

    /// Start (or replace) the capture after faults.
    pub(crate) fn set_capture(&mut self, w: PcapWriter<BufWriter<File>>) {
        self.capture = Some(w);
    }

    /// Stop the capture after faults, handing it back.
    pub(crate) fn take_capture(&mut self) -> Option<PcapWriter<BufWriter<File>>> {
        self.capture.take()
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

    fn target(scope: Scope) -> Selector {
        Selector::new(scope)
    }

    fn add(f: &mut FaultState, t: &Selector, kind: Kind, pattern: Pattern) {
        f.push(t, kind, pattern);
    }

    fn drops(f: &mut FaultState, n: u32) -> Vec<bool> {
        (0..n)
            .map(|i| f.judge(&meta(Opcode::RC_SEND_ONLY, i), 0).is_empty())
            .collect()
    }

    #[test]
    fn a_seed_fixes_the_losses_and_rates_hold_roughly() {
        let mut runs = Vec::new();
        for seed in [1, 1, 2] {
            let mut f = FaultState::default();
            f.set_seed(seed);
            add(&mut f, &target(Scope::All), Kind::Drop, Pattern::Rate(0.25));
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
        add(
            &mut f,
            &target(Scope::Path(b, a)),
            Kind::Drop,
            Pattern::Every { n: 1, seen: 0 },
        );
        let acks = Selector {
            class: Class::Acks,
            ..target(Scope::All)
        };
        add(&mut f, &acks, Kind::Drop, Pattern::Every { n: 2, seen: 0 });
        let t = target(Scope::Qp(b, 0x101));
        add(&mut f, &t, Kind::Drop, t.psns(0x101, [7]));
        // a → b: only ACKs (every second) and PSN 7 (once) are lost.
        assert_eq!(drops(&mut f, 10), {
            let mut v = vec![false; 10];
            v[7] = true;
            v
        });
        let acks: Vec<bool> = (0..4)
            .map(|i| f.judge(&meta(Opcode::RC_ACKNOWLEDGE, i), 0).is_empty())
            .collect();
        assert_eq!(acks, [false, true, false, true]);
        assert!(
            !f.judge(&meta(Opcode::RC_SEND_ONLY, 7), 0).is_empty(),
            "once"
        );
        let mut back = meta(Opcode::RC_SEND_ONLY, 0);
        (back.src, back.dst) = (b, a);
        assert!(f.judge(&back, 0).is_empty(), "b → a is down");
        assert_eq!(f.stats().dropped, 4);
    }

    #[test]
    fn two_rules_for_the_same_psn_drop_it_twice_and_times_counts_per_psn() {
        let mut f = FaultState::default();
        let t = target(Scope::All);
        add(&mut f, &t, Kind::Drop, t.psns(0x101, [5]));
        add(&mut f, &t, Kind::Drop, t.psns(0x101, [5]));
        let t3 = Selector {
            times: Some(3),
            ..t
        };
        add(&mut f, &t3, Kind::Drop, t3.psns(0x101, [9]));
        let five: Vec<bool> = (0..3)
            .map(|_| f.judge(&meta(Opcode::RC_SEND_ONLY, 5), 0).is_empty())
            .collect();
        assert_eq!(
            five,
            [true, true, false],
            "the original and one retransmission"
        );
        let nine: Vec<bool> = (0..4)
            .map(|_| f.judge(&meta(Opcode::RC_SEND_ONLY, 9), 0).is_empty())
            .collect();
        assert_eq!(nine, [true, true, true, false]);
        assert_eq!(f.stats().dropped, 5);
        let rec: Vec<(u64, u32, FaultKind)> =
            f.record.iter().map(|r| (r.frame, r.psn, r.kind)).collect();
        assert_eq!(
            rec,
            [
                (1, 5, FaultKind::Dropped),
                (2, 5, FaultKind::Dropped),
                (4, 9, FaultKind::Dropped),
                (5, 9, FaultKind::Dropped),
                (6, 9, FaultKind::Dropped),
            ]
        );
    }

    #[test]
    fn a_limited_rule_fires_n_times_and_a_dropped_frame_uses_up_nothing_else() {
        let mut f = FaultState::default();
        let t = target(Scope::All);
        let t2 = Selector {
            times: Some(2),
            ..t
        };
        add(&mut f, &t2, Kind::Drop, Pattern::Always);
        add(&mut f, &t, Kind::Duplicate, Pattern::Next(1));
        add(&mut f, &t, Kind::Duplicate, Pattern::Next(1));
        add(&mut f, &t, Kind::Corrupt, Pattern::Next(1));
        let n: Vec<usize> = (0..4)
            .map(|i| f.judge(&meta(Opcode::RC_SEND_ONLY, i), 0).len())
            .collect();
        // Two drops; then the two duplicate rules each add a copy to the same frame.
        assert_eq!(n, [0, 0, 3, 1]);
        let s = f.stats();
        assert_eq!((s.dropped, s.duplicated, s.corrupted), (2, 2, 1));
        assert_eq!(
            f.record.iter().map(|r| r.kind).collect::<Vec<_>>(),
            [
                FaultKind::Dropped,
                FaultKind::Dropped,
                FaultKind::Corrupted,
                FaultKind::Duplicated { copies: 2 },
            ]
        );
    }

    #[test]
    fn a_qpn_narrowed_rule_spares_the_same_qpn_on_the_other_path() {
        let mut f = FaultState::default();
        let (a, b) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        let t = Selector {
            qpn: Some(0x101),
            ..target(Scope::Path(a, b))
        };
        add(&mut f, &t, Kind::Drop, Pattern::Always);
        let dev = Selector {
            qpn: Some(0x102),
            ..target(Scope::ToDevice(a))
        };
        add(&mut f, &dev, Kind::Drop, Pattern::Always);
        assert!(f.judge(&meta(Opcode::RC_SEND_ONLY, 0), 0).is_empty());
        let mut other_qp = meta(Opcode::RC_SEND_ONLY, 0);
        other_qp.qpn = 0x102;
        assert_eq!(f.judge(&other_qp, 0).len(), 1, "another QP of b");
        let mut back = meta(Opcode::RC_ACKNOWLEDGE, 0);
        (back.src, back.dst) = (b, a);
        assert_eq!(f.judge(&back, 0).len(), 1, "QP 0x101 of a");
        back.qpn = 0x102;
        assert!(f.judge(&back, 0).is_empty(), "QP 0x102 of a");
    }

    #[test]
    fn fault_rng_matches_the_reference_vectors() {
        // xoshiro256** from the state 1, 2, 3, 4 (the reference xoshiro256starstar.c).
        let mut r = FaultRng { s: [1, 2, 3, 4] };
        let got: Vec<u64> = (0..6).map(|_| r.next_u64()).collect();
        assert_eq!(
            got,
            [
                11520,
                0,
                1_509_978_240,
                1_215_971_899_390_074_240,
                1_216_172_134_540_287_360,
                607_988_272_756_665_600
            ]
        );
        // SplitMix64 from 0 (the reference splitmix64.c) fills the state of seed 0.
        assert_eq!(
            FaultRng::new(0).s[..3],
            [
                0xe220_a839_7b1d_cdaf,
                0x6e78_9e6a_a1b9_65f4,
                0x06c4_5d18_8009_454f
            ]
        );
    }

    #[test]
    fn fault_rng_draws_stay_in_their_ranges_and_cover_them() {
        let mut r = FaultRng::new(7);
        let mut seen = [0u32; 5];
        for _ in 0..1000 {
            let x = r.unit_f64();
            assert!((0.0..1.0).contains(&x));
            let k = r.below(5);
            seen[k as usize] += 1;
            let i = r.in_range(12..17);
            assert!((12..17).contains(&i));
        }
        assert!(seen.iter().all(|&n| n > 150), "{seen:?}");
        assert_eq!(r.below(0), 0);
        assert_eq!(r.in_range(9..9), 9);
        let (start, end) = (9, 3);
        assert_eq!(r.in_range(start..end), 9);
        // The same seed gives the same draws.
        let (mut a, mut b) = (FaultRng::new(42), FaultRng::new(42));
        assert!((0..64).all(|_| a.next_u64() == b.next_u64()));
    }
}
