//! Faults on demand: what the fabric does to frames between the sender's port and the
//! receiver's, so retransmission, RNR and recovery can be tested.
//!
//! A rule has a *scope* (a link between two devices in both directions, one direction, the
//! frames to or from one device, the frames addressed to one QP, or every frame), an optional
//! *class* of packets it is limited to (requests, ACKs, READ responses, ...), an optional
//! destination *QPN* ([`FaultTarget::qpn`], so a QPN rule can be scoped to a path or device:
//! QPNs repeat across devices), an optional *limit* ([`FaultTarget::times`]: fire N times, then
//! stay installed doing nothing) and an *action*: drop (a rate, every N-th frame, the next N, or
//! exact PSNs), duplicate (a rate, every N-th, exact PSNs), corrupt (one bit flipped after the
//! UDP header, so the receiver's ICRC check fails; a rate, every N-th, exact PSNs), delay (every
//! frame, or exact PSNs so later frames overtake them), reorder (a random extra delay below a
//! window, so frames sent within the window arrive in any order), or take the link down.
//!
//! One action is not done to the frame on the wire but by the device it reaches: an RNR rule
//! ([`FaultTarget::rnr_next`], [`FaultTarget::rnr`], [`FaultTarget::rnr_for`]) makes the
//! responder find no receive WQE for the requests it selects that need one (the first packet
//! of a SEND, the last of a WRITE with immediate, a UD datagram), as if its receive queue or
//! SRQ were empty at that moment: on RC it answers RNR NAK with its `min_rnr_timer` and the
//! requester waits and retries (`rnr_retry`), on UC and UD the message is dropped; the
//! responder counts `out_of_buffer`, the requester `rnr_nak_retry_err`, as for a real empty
//! queue. The receive WQEs posted stay where they are for the requests that follow.
//!
//! Rules act independently: a frame is dropped by the first drop rule that selects it, and the
//! other drop rules keep their firings for later frames, so "drop PSN 5" added twice drops the
//! original and the first retransmission.
//!
//! What the rules did is on record: [`FaultStats`] counts, [`Faults::record`] names every
//! frame dropped, duplicated or corrupted (its number in the sender-side capture of
//! [`crate::Fabric::capture_to`], time, addresses, QPN, PSN, opcode), and
//! [`Faults::capture_to`] writes a second capture of the frames as they arrive, after faults.
//!
//! This module is the handle ([`Faults`], [`FaultTarget`]): it locks the fabric's world to add
//! rules and read what they did. The rules themselves (what each selects and does to a frame,
//! the generator, the record) are data the world holds, one layer below it (`fault_rules`).
//!
//! Every random choice comes from one xoshiro256** generator seeded by
//! [`crate::Fabric::set_seed`] and drawn in a fixed order (frames in transmit order, rules in the order they were added,
//! drawn whether or not another rule already decided the frame's fate), so a run is
//! reproducible for a given seed.
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
//! f.path(&a, &b).qpn(0x101).times(3).loss(Rate(0.5)); // at most 3 frames to QP 0x101 of b
//! f.path(&a, &b).times(2).drop_psns(0x101, [7]);      // PSN 7 and its first retransmission
//! ```

use std::io;
use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

pub use crate::fault_rules::{Class, FaultKind, FaultRecord, FaultState, FaultStats, RECORD_CAP};
use crate::fault_rules::{Kind, Pattern, Scope, Selector};
use crate::pcap::{PcapWriter, Resolution};
use crate::shared::Inner;

/// A probability in `0.0..=1.0` (values outside are clamped).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rate(pub f64);

impl From<f64> for Rate {
    fn from(p: f64) -> Rate {
        Rate(p)
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
    /// A target for rules of `scope` (the device-taking constructors are in [`crate::fabric`]).
    pub(crate) fn target(&self, scope: Scope) -> FaultTarget {
        FaultTarget {
            inner: self.inner.clone(),
            sel: Selector::new(scope),
        }
    }

    /// The link between two IPv4 addresses, both directions (for a peer in another process).
    pub fn link_ipv4(&self, a: [u8; 4], b: [u8; 4]) -> FaultTarget {
        let (a, b) = (Ipv4Addr::from(a), Ipv4Addr::from(b));
        self.target(Scope::Link(a.min(b), a.max(b)))
    }

    /// Every frame on the fabric.
    pub fn all(&self) -> FaultTarget {
        self.target(Scope::All)
    }

    /// Remove every rule (links come back up).
    pub fn clear(&self) {
        self.inner.lock().faults.clear_rules();
    }

    /// What the fabric did so far.
    pub fn stats(&self) -> FaultStats {
        self.inner.lock().faults.stats()
    }

    /// Every frame a fault dropped, duplicated or corrupted so far, in transmit order (at most
    /// [`RECORD_CAP`] entries).
    pub fn record(&self) -> Vec<FaultRecord> {
        self.inner.lock().faults.record().to_vec()
    }

    /// [`record`](Self::record), emptying it.
    pub fn take_record(&self) -> Vec<FaultRecord> {
        self.inner.lock().faults.take_record()
    }

    /// Capture every frame as it *arrives* at a port, after the faults (nanosecond timestamps
    /// of virtual time, arrival order), replacing any such capture in progress: dropped frames
    /// are missing, injected copies appear twice, corrupted frames with their flipped bit,
    /// delayed ones at their arrival time. Frames addressed to another process over UDP are in
    /// it too (they arrive at this fabric's edge). The tap at the sender's port is
    /// [`crate::Fabric::capture_to`]; [`record`](Self::record) names the frames of that
    /// capture that a fault changed.
    pub fn capture_to(&self, path: impl AsRef<Path>) -> io::Result<()> {
        let w = PcapWriter::create(path, Resolution::Nanos)?;
        self.inner.lock().faults.set_capture(w);
        Ok(())
    }

    /// Stop the capture after faults and flush it; returns the frames it holds.
    pub fn stop_capture(&self) -> io::Result<u64> {
        // The lock is released before the flush.
        let cap = self.inner.lock().faults.take_capture();
        match cap {
            Some(mut w) => {
                w.flush()?;
                Ok(w.frames())
            }
            None => Ok(0),
        }
    }
}

/// A place in the fabric to inject faults at; each method adds a rule and returns the target,
/// so calls chain.
#[derive(Clone)]
pub struct FaultTarget {
    inner: Arc<Inner>,
    sel: Selector,
}

impl std::fmt::Debug for FaultTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultTarget")
            .field("scope", &self.sel.scope)
            .field("class", &self.sel.class)
            .field("qpn", &self.sel.qpn)
            .field("times", &self.sel.times)
            .field("skip", &self.sel.skip)
            .finish()
    }
}

impl FaultTarget {
    fn add(&self, kind: Kind, pattern: Pattern) -> &Self {
        self.inner.lock().faults.push(&self.sel, kind, pattern);
        self
    }

    /// This target with another selector.
    fn with(&self, sel: Selector) -> FaultTarget {
        FaultTarget {
            inner: self.inner.clone(),
            sel,
        }
    }

    /// Limit the rules added through the returned target to one class of packets.
    pub fn only(&self, class: Class) -> FaultTarget {
        self.with(Selector { class, ..self.sel })
    }

    /// Limit the rules added through the returned target to frames whose BTH destination QP
    /// is `qpn`. QPNs are per device and two devices may use the same numbers, so narrow a
    /// [`Faults::path`] or [`Faults::to_device`] target, whose receiver owns the QPN.
    pub fn qpn(&self, qpn: u32) -> FaultTarget {
        self.with(Selector {
            qpn: Some(qpn & 0x00ff_ffff),
            ..self.sel
        })
    }

    /// The rules added through the returned target fire at most `n` times each, then stay
    /// installed doing nothing; for [`drop_psns`](Self::drop_psns) and the other PSN lists,
    /// each listed PSN is hit `n` times (`times(2).drop_psns(q, [5])` drops PSN 5 and its first
    /// retransmission).
    pub fn times(&self, n: u64) -> FaultTarget {
        self.with(Selector {
            times: Some(n),
            ..self.sel
        })
    }

    /// The rules added through the returned target let the first `n` frames they select pass
    /// untouched, then act (with [`times`](Self::times), a window: `skip(1).times(2)` hits the
    /// second and third frame). `only(Class::ReadRequests).skip(1).drop_every(1)` drops every
    /// retransmission of a READ request and not the original.
    pub fn skip(&self, n: u64) -> FaultTarget {
        self.with(Selector {
            skip: n,
            ..self.sel
        })
    }

    fn psn_rule(&self, kind: Kind, qpn: u32, psns: impl IntoIterator<Item = u32>) -> &Self {
        let pattern = self.sel.psns(qpn, psns);
        // The per-PSN counts carry the limit.
        let sel = Selector {
            times: None,
            ..self.sel
        };
        self.inner.lock().faults.push(&sel, kind, pattern);
        self
    }

    /// Drop each frame with probability `rate`.
    pub fn loss(&self, rate: impl Into<Rate>) -> &Self {
        let Rate(p) = rate.into();
        self.add(Kind::Drop, Pattern::Rate(p.clamp(0.0, 1.0)))
    }

    /// Drop every `n`-th frame (the `n`-th, `2n`-th, ...); 0 drops nothing.
    pub fn drop_every(&self, n: u64) -> &Self {
        self.add(Kind::Drop, Pattern::Every { n, seen: 0 })
    }

    /// Drop the next `n` frames.
    pub fn drop_next(&self, n: u64) -> &Self {
        self.add(Kind::Drop, Pattern::Next(n))
    }

    /// Drop the first frame addressed to QP `qpn` with each of these PSNs (once per PSN, or
    /// [`times`](Self::times) times, so the retransmission gets through). Both requests (to
    /// the responder's QPN) and responses (to the requester's QPN) can be named; responses
    /// carry the PSNs of their requests. QPNs are per device and two devices may use the same
    /// numbers, so scope the rule with [`Faults::path`] (or [`Faults::qp`],
    /// [`Faults::to_device`]) rather than [`Faults::all`].
    pub fn drop_psns(&self, qpn: u32, psns: impl IntoIterator<Item = u32>) -> &Self {
        self.psn_rule(Kind::Drop, qpn, psns)
    }

    /// Deliver a second copy of each frame with probability `rate`.
    pub fn duplicate(&self, rate: impl Into<Rate>) -> &Self {
        let Rate(p) = rate.into();
        self.add(Kind::Duplicate, Pattern::Rate(p.clamp(0.0, 1.0)))
    }

    /// Deliver a second copy of every `n`-th frame.
    pub fn duplicate_every(&self, n: u64) -> &Self {
        self.add(Kind::Duplicate, Pattern::Every { n, seen: 0 })
    }

    /// Deliver a second copy of the first frame addressed to QP `qpn` with each of these PSNs
    /// (as [`drop_psns`](Self::drop_psns) selects them).
    pub fn duplicate_psns(&self, qpn: u32, psns: impl IntoIterator<Item = u32>) -> &Self {
        self.psn_rule(Kind::Duplicate, qpn, psns)
    }

    /// Flip one byte of every `n`-th frame (after the UDP header, so the ICRC check fails).
    pub fn corrupt_every(&self, n: u64) -> &Self {
        self.add(Kind::Corrupt, Pattern::Every { n, seen: 0 })
    }

    /// Flip one byte of each frame with probability `rate`.
    pub fn corrupt(&self, rate: impl Into<Rate>) -> &Self {
        let Rate(p) = rate.into();
        self.add(Kind::Corrupt, Pattern::Rate(p.clamp(0.0, 1.0)))
    }

    /// Flip one byte of the first frame addressed to QP `qpn` with each of these PSNs.
    pub fn corrupt_psns(&self, qpn: u32, psns: impl IntoIterator<Item = u32>) -> &Self {
        self.psn_rule(Kind::Corrupt, qpn, psns)
    }

    /// Delay every frame by `d` of virtual time (delivered when the clock gets there:
    /// [`crate::Fabric::advance`], or the wall clock in threaded mode).
    pub fn delay(&self, d: Duration) -> &Self {
        self.add(Kind::Delay(d.as_nanos() as u64), Pattern::Always)
    }

    /// Delay the first frame addressed to QP `qpn` with each of these PSNs by `d`, so the
    /// frames sent after it overtake it (a reordering at a known place).
    pub fn delay_psns(&self, qpn: u32, psns: impl IntoIterator<Item = u32>, d: Duration) -> &Self {
        self.psn_rule(Kind::Delay(d.as_nanos() as u64), qpn, psns)
    }

    /// Delay every frame by a random `0..window` of virtual time, so frames sent within the
    /// window arrive in any order.
    pub fn reorder(&self, window: Duration) -> &Self {
        self.add(Kind::Reorder(window.as_nanos() as u64), Pattern::Always)
    }

    /// Take the link (or path, or QP) down: every frame is dropped until [`up`](Self::up).
    pub fn down(&self) -> &Self {
        self.add(Kind::Down, Pattern::Always)
    }

    /// The responders this target selects (by the requests' destination: [`Faults::to_device`],
    /// [`Faults::qp`], [`Faults::path`], ...) find no receive WQE for the next `n` requests that
    /// need one, as if their receive queue were empty: RNR NAK on RC (the requester waits its
    /// RNR timer and retries), the message dropped on UC and UD. Requests that need no receive
    /// WQE (WRITE without immediate, READ, atomics, later packets of a SEND) pass untouched.
    pub fn rnr_next(&self, n: u64) -> &Self {
        self.add(Kind::Rnr, Pattern::Next(n))
    }

    /// As [`rnr_next`](Self::rnr_next), each request that needs a receive WQE refused with
    /// probability `rate`.
    pub fn rnr(&self, rate: impl Into<Rate>) -> &Self {
        let Rate(p) = rate.into();
        self.add(Kind::Rnr, Pattern::Rate(p.clamp(0.0, 1.0)))
    }

    /// As [`rnr_next`](Self::rnr_next), every request that needs a receive WQE refused for `d`
    /// of virtual time (the wall clock in threaded mode) from the first one the rule selects: a
    /// receiver that falls behind for a while when the traffic comes. The rule stays installed,
    /// doing nothing, once the time is over.
    pub fn rnr_for(&self, d: Duration) -> &Self {
        let len = d.as_nanos().min(u64::MAX as u128) as u64;
        self.add(Kind::Rnr, Pattern::For { len, until: None })
    }

    /// Bring it back up (removes the `down` rules of this scope, class and QPN).
    pub fn up(&self) -> &Self {
        self.inner.lock().faults.remove(&self.sel, true);
        self
    }

    /// Remove every rule of this scope, class and QPN.
    pub fn clear(&self) -> &Self {
        self.inner.lock().faults.remove(&self.sel, false);
        self
    }
}
