//! The fabric's state behind one lock: every device with its objects, the virtual clock, the
//! frames in flight, and the fault rules.
//!
//! One step: every QP's doorbells and BlueFlame register are examined, timers fire, send
//! queues execute (each device in turn, QPs in QPN order), UDP sockets are polled, then every
//! frame on the wire whose arrival time has come is delivered to the device that owns its
//! destination IPv4 address and MAC (an Ethernet + IP fabric like RoCEv2's) and to the QP its
//! BTH names, or sent to the process that owns it ([`crate::udp_port`]); last, every CQ's arm
//! doorbell is examined. Everything is in a fixed order, so a run is reproducible.
//!
//! Frames travel as bytes: each is encoded into a RoCEv2 frame (Ethernet, IPv4, UDP 4791,
//! transport headers, payload, ICRC; [`crate::wire`]) when sent and parsed (ICRC checked) when
//! delivered. On the way the fault rules ([`crate::faults`]; the world holds their state and
//! decisions, `fault_rules`) may drop, duplicate, corrupt or delay it; a delayed frame arrives
//! when the virtual clock reaches its time. A frame to a multicast group goes to every device
//! whose QPs joined it and, once parsed, to each of those QPs ([`crate::mcast`]'s tables).
//!
//! Capture: a frame is written to the pcap file when its device transmits it, before the
//! fabric's faults apply (a tap at the sender's port): retransmissions appear as often as they
//! are sent, frames the fabric then drops are in the capture, injected duplicates and
//! corruption are not. Frames received from another process are captured by that process.
//! The second capture ([`crate::faults::Faults::capture_to`]) takes each frame as it arrives,
//! after the faults, and [`crate::faults::Faults::record`] names the frames of the first one
//! that a fault dropped, duplicated or corrupted.
//!
//! Counters kept here (mlx5 names): `port_xmit_packets`, `port_xmit_data` and
//! `port_rcv_packets`, `port_rcv_data` (IBTA PortCounters: data in units of 4 octets, here of
//! the whole frame without FCS), `port_xmit_discards` (a frame sent while the port is down),
//! `port_rcv_errors` (a frame that fails to parse) and `rx_icrc_encapsulated` (the ICRC check
//! failed; the kernel's `drivers/infiniband/hw/mlx5/counters.c` `ext_ppcnt_cnts`).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::Ipv4Addr;
use std::sync::Arc;

use mlx5_hw::{Gid, PortState, MULTICAST_QPN};

use crate::bugs::BugLog;
use crate::counters::CounterId;
use crate::cq::Cq;
use crate::engine::{process_qp, Counters, Ctx, Port};
use crate::fault_rules::{FaultState, Meta, RecvGate};
use crate::mr::MrTable;
use crate::notify::{AsyncEvents, CompChannel};
use crate::pcap::PcapWriter;
use crate::qp::Qp;
use crate::srq::Srq;
use crate::tap_port::TapPort;
use crate::transport::{ext_atomic, requester, responder, Frame};
use crate::udp_port::UdpPort;
use crate::wire::{ipv4_to_gid, MacAddr, Packet, ParseError, BTH_OFFSET, IPV4_OFFSET};

/// A frame on the wire: the encoded RoCEv2 bytes, its arrival time and its sender.
#[derive(Clone, Debug)]
pub struct WireFrame {
    /// Ethernet frame bytes (with the masked-atomic trailer when there is one).
    pub bytes: Vec<u8>,
    /// Virtual time (ns) at which it arrives.
    pub at: u64,
    /// Index of the sending device; `None` for a frame received from another process.
    pub from: Option<usize>,
}

/// One device.
#[derive(Debug)]
pub struct Dev {
    /// Name (`sim0`, ...).
    pub name: String,
    /// Port 1.
    pub port: Port,
    /// Node GUID.
    pub guid: u64,
    /// Protection domains.
    pub pds: BTreeSet<u32>,
    /// Memory regions.
    pub mrs: MrTable,
    /// CQs by CQN.
    pub cqs: BTreeMap<u32, Cq>,
    /// QPs by QPN.
    pub qps: BTreeMap<u32, Qp>,
    /// SRQs by SRQN.
    pub srqs: BTreeMap<u32, Srq>,
    /// Address handles: (PD, AV bytes).
    pub ahs: BTreeMap<u32, (u32, [u8; 48])>,
    /// Async events (with their eventfd).
    pub events: AsyncEvents,
    /// Completion channels by handle.
    pub channels: BTreeMap<u32, Arc<CompChannel>>,
    /// Driver bugs.
    pub bugs: BugLog,
    /// Counters.
    pub counters: Counters,
    /// Next object number.
    pub next_id: u32,
    /// The UDP socket to devices in other processes, when bound.
    pub udp: Option<UdpPort>,
    /// The TAP interface carrying native RoCEv2 frames, when bound ([`crate::tap_port`]).
    pub tap: Option<TapPort>,
    /// Scan doorbells in threaded mode ([`World::enter_threaded`]).
    pub threaded: bool,
    /// Multicast groups its QPs joined ([`crate::mcast`]).
    pub mcast: crate::mcast::Groups,
    /// XRC domains and shared target QPs ([`crate::transport::xrc`]).
    pub xrc: crate::transport::xrc::XrcState,
    /// BlueFlame registers: dedicated ones in use, shared ones ([`crate::doorbell::shared`]).
    pub bfregs: crate::doorbell::shared::Bfregs,
    /// The device is in its fatal state ([`crate::faults::Faults::device_fatal`]): it does
    /// nothing any more.
    pub fatal: bool,
    /// UAR pages several CQs ring their arm doorbell on, by number ([`crate::cq_uar`]; user
    /// contexts only, `crate::kernel`).
    pub cq_arm_pages: BTreeMap<u32, crate::cq_uar::CqArmPage>,
    /// What the doorbell scanners saw on QPs destroyed through `crate::kernel` (whose counts
    /// would otherwise go with them).
    pub retired_doorbells: crate::doorbell::DoorbellStats,
    /// The least local ACK timeout (ns) of its QPs whose peer is in another process, while a
    /// fabric thread runs ([`crate::Fabric::set_remote_ack_timeout_floor`]).
    pub remote_ack_floor: u64,
}

impl Dev {
    /// A device with no objects.
    pub fn new(name: String, port: Port, guid: u64) -> Dev {
        Dev {
            name,
            port,
            guid,
            pds: BTreeSet::new(),
            mrs: MrTable::default(),
            cqs: BTreeMap::new(),
            qps: BTreeMap::new(),
            srqs: BTreeMap::new(),
            ahs: BTreeMap::new(),
            events: AsyncEvents::default(),
            channels: BTreeMap::new(),
            bugs: BugLog::default(),
            counters: Counters::default(),
            next_id: 0x100,
            udp: None,
            tap: None,
            threaded: false,
            mcast: crate::mcast::Groups::default(),
            xrc: crate::transport::xrc::XrcState::default(),
            bfregs: crate::doorbell::shared::Bfregs::default(),
            fatal: false,
            cq_arm_pages: BTreeMap::new(),
            retired_doorbells: Default::default(),
            remote_ack_floor: REMOTE_ACK_TIMEOUT_FLOOR.as_nanos() as u64,
        }
    }

    /// Make the UDP port a member of the IPv4 groups the QPs joined, no more
    /// ([`crate::udp_port::UdpPort::set_groups`]); after every attach, detach, QP destruction
    /// and rebinding.
    pub fn sync_udp_groups(&mut self) {
        if let Some(u) = &mut self.udp {
            u.set_groups(&self.mcast.ipv4_groups());
        }
    }

    /// A fresh object number (QPNs, CQNs, ... share one space, like mlx5 resource numbers).
    pub fn alloc_id(&mut self) -> u32 {
        self.next_id += 1;
        self.next_id & 0x00ff_ffff
    }

    /// Run `f` on QP `qpn` with the device context.
    pub fn with_qp<R>(
        &mut self,
        qpn: u32,
        now: u64,
        out: &mut Vec<Frame>,
        f: impl FnOnce(&mut Qp, &mut Ctx) -> R,
    ) -> Option<R> {
        self.with_qp_gated(qpn, now, out, None, f)
    }

    /// [`with_qp`](Self::with_qp) for a request being delivered, with the RNR rules' gate.
    pub(crate) fn with_qp_gated<R>(
        &mut self,
        qpn: u32,
        now: u64,
        out: &mut Vec<Frame>,
        recv_gate: Option<crate::fault_rules::RecvGate<'_>>,
        f: impl FnOnce(&mut Qp, &mut Ctx) -> R,
    ) -> Option<R> {
        let Dev {
            name,
            port,
            mrs,
            cqs,
            qps,
            srqs,
            events,
            bugs,
            counters,
            threaded,
            udp,
            remote_ack_floor,
            ..
        } = self;
        let qp = qps.get_mut(&qpn)?;
        // Only a device whose clock is the wall clock and that reaches other processes has
        // peers that can be descheduled.
        let remote_ack_floor = if *threaded && udp.is_some() {
            *remote_ack_floor
        } else {
            0
        };
        let mut ctx = Ctx {
            now,
            dev: name,
            port,
            mrs,
            cqs,
            srqs,
            events,
            bugs,
            out,
            counters,
            threaded: *threaded,
            remote_ack_floor,
            recv_gate,
        };
        Some(f(qp, &mut ctx))
    }
}

/// The default least local ACK timeout of a QP whose peer is in another process
/// ([`crate::Fabric::set_remote_ack_timeout_floor`]). A ConnectX answers within microseconds whatever
/// its host does; the software ConnectX of another process answers when the scheduler runs
/// its fabric thread, which on a loaded machine is hundreds of milliseconds later (measured:
/// `docs/software-connectx.md`, "Timers between processes"). Eight expiries in a row
/// (`retry_cnt` 7) then take 2 s, not the 0.5 s of perftest's default `timeout` 14.
pub const REMOTE_ACK_TIMEOUT_FLOOR: std::time::Duration = std::time::Duration::from_millis(250);

/// Everything on the fabric.
#[derive(Default)]
pub struct World {
    /// Virtual time in nanoseconds.
    pub now: u64,
    /// Devices, by index.
    pub devs: Vec<Dev>,
    /// Frames in flight, in arrival order.
    pub wire: VecDeque<WireFrame>,
    /// Capture of every frame put on the wire.
    pub capture: Option<PcapWriter<std::io::BufWriter<std::fs::File>>>,
    /// Frames that could not be encoded (a software ConnectX bug) or parsed (other than an
    /// ICRC mismatch, which is corruption and counted by the receiving device).
    pub malformed: u64,
    /// Fault rules.
    pub faults: FaultState,
    /// Background threads running the fabric ([`crate::Fabric::start_thread`]); while there is
    /// one, doorbells are scanned in threaded mode.
    pub threads: u32,
    /// The floor set by [`crate::Fabric::set_remote_ack_timeout_floor`] for devices added
    /// later; `None`: [`REMOTE_ACK_TIMEOUT_FLOOR`].
    pub remote_ack_floor: Option<u64>,
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("World")
            .field("now", &self.now)
            .field("devs", &self.devs.len())
            .field("in_flight", &self.wire.len())
            .finish()
    }
}

/// `IBV_EVENT_COMM_EST` for the first request packet a connected QP receives in RTR (IBA Vol 1
/// §11.6.3, affiliated asynchronous events; suppressed for UD, o11-5.1.1), once per stay in
/// RTR: mlx5 raises it from the hardware's communication-established event
/// (`MLX5_EVENT_TYPE_COMM_EST`, kernel `drivers/infiniband/hw/mlx5/qp.c` `mlx5_ib_qp_event`).
fn comm_established(qp: &mut Qp, ctx: &mut Ctx) {
    if qp.state() == mlx5_hw::QpState::Rtr && qp.qp_type != mlx5_hw::QpType::Ud && !qp.comm_est {
        qp.comm_est = true;
        ctx.events
            .push_back(mlx5_hw::AsyncEvent::CommEstablished(mlx5_hw::QpId(qp.qpn)));
    }
}

/// Frame length in the 4-octet units of the IBTA data counters.
fn words(len: usize) -> u64 {
    len.div_ceil(4) as u64
}

impl World {
    /// A background thread starts running the fabric: every device scans doorbells in threaded
    /// mode ([`crate::doorbell::threaded`]) until the last such thread leaves.
    pub fn enter_threaded(&mut self) {
        self.threads += 1;
        for d in &mut self.devs {
            d.threaded = true;
        }
    }

    /// A background thread stops: when it was the last, every device returns to deterministic
    /// doorbell scanning, with the BlueFlame halves poisoned as that mode expects.
    pub fn leave_threaded(&mut self) {
        self.threads = self.threads.saturating_sub(1);
        if self.threads > 0 {
            return;
        }
        for d in &mut self.devs {
            d.threaded = false;
            d.bfregs.leave_threaded();
            for qp in d.qps.values_mut() {
                crate::doorbell::threaded::leave(qp);
            }
        }
    }

    /// One step; returns whether anything happened.
    pub fn step(&mut self) -> bool {
        let mut work = false;
        let now = self.now;
        let mut outs = Vec::with_capacity(self.devs.len());
        for d in self.devs.iter_mut() {
            let mut out = Vec::new();
            if d.fatal {
                // A device in its fatal state reads no doorbell and fires no timer.
                outs.push(out);
                continue;
            }
            work |= crate::doorbell::shared::scan(
                &mut d.bfregs,
                &mut d.qps,
                d.threaded,
                &d.name,
                &mut d.bugs,
            );
            let qpns: Vec<u32> = d.qps.keys().copied().collect();
            for qpn in qpns {
                work |= d.with_qp(qpn, now, &mut out, process_qp).unwrap_or(false);
            }
            outs.push(out);
        }
        for (i, out) in outs.into_iter().enumerate() {
            self.transmit(i, out);
        }
        work |= self.poll_inbound();
        work |= self.deliver_due();
        // Arm doorbells last: a CQE written in this step before the device saw an arm fires it
        // at once, the race the arm's consumer index exists for (a doorbell still in flight
        // while the device writes a CQE), so deterministic runs exercise it too.
        for d in &mut self.devs {
            work |=
                crate::cq_uar::forward(d.cq_arm_pages.values(), &mut d.cqs, &d.name, &mut d.bugs);
            for cq in d.cqs.values_mut() {
                work |= cq.scan_arm(&d.name, &mut d.bugs);
            }
        }
        work
    }

    /// One step of a fabric thread at wall-clock time `t` (virtual ns): the clock moves to `t`
    /// first, then what arrived is received (the sockets read, every frame due delivered and
    /// acknowledged), and only then does the step fire timers and send. A response that came
    /// while the thread was not running is so taken before the ACK timer it answers can
    /// expire: the timer measures how long the peer took to answer, not how long this thread
    /// was descheduled (`docs/software-connectx.md`, "Timers between processes"). Timers that
    /// expired in between fire at `t`, late rather than in order with the frames.
    pub fn step_at(&mut self, t: u64) -> bool {
        self.now = self.now.max(t);
        let got = self.poll_inbound();
        let got = self.deliver_due() | got;
        self.step() | got
    }

    /// Read every device's UDP socket, group sockets and TAP interface (a bounded number of
    /// datagrams each): unicast frames go on the wire arriving now, group datagrams are
    /// delivered at once. Returns whether a group datagram was read.
    fn poll_inbound(&mut self) -> bool {
        let now = self.now;
        let mut inbound = Vec::new();
        let mut group_inbound = Vec::new();
        for (i, d) in self.devs.iter_mut().enumerate() {
            if d.fatal {
                // A device in its fatal state reads nothing.
                continue;
            }
            if let Some(u) = &d.udp {
                u.poll(&mut inbound);
                let mut got = Vec::new();
                u.poll_groups(&mut got);
                group_inbound.extend(got.into_iter().map(|(from, b)| (i, from, b)));
            }
            if let Some(t) = &mut d.tap {
                t.poll(d.port.ip, d.port.mac, &mut inbound);
            }
        }
        for bytes in inbound {
            self.enqueue(WireFrame {
                bytes,
                at: now,
                from: None,
            });
        }
        if group_inbound.is_empty() {
            return false;
        }
        // A device of this fabric sent it: delivered here already (`route_mcast`).
        let ours: Vec<std::net::SocketAddr> = self
            .devs
            .iter()
            .filter_map(|d| d.udp.as_ref()?.local_addr().ok())
            .collect();
        for (i, from, bytes) in group_inbound {
            if !ours.contains(&from) {
                self.faults.arrived(now, &bytes);
                self.deliver_group_datagram(i, bytes);
            }
        }
        true
    }

    /// Deliver every frame on the wire whose arrival time has come, then send the ACKs the
    /// requests among them are due. Returns whether a frame was delivered or an ACK sent.
    fn deliver_due(&mut self) -> bool {
        let mut work = false;
        let now = self.now;
        let due = self.wire.iter().take_while(|f| f.at <= now).count();
        for _ in 0..due {
            let Some(f) = self.wire.pop_front() else {
                break;
            };
            work = true;
            self.faults.arrived(now, &f.bytes);
            self.route(f);
        }
        // A request delivered in this step is acknowledged in this step: its coalesced ACK
        // leaves before the fabric lets go of its lock, as a NIC sends it while it processes
        // the request. Held to the QP's next step, an ACK could be lost to an application that
        // saw the data (or its CQE), destroyed its QP in between and left the requester to
        // retry into RETRY_EXC_ERR.
        for i in 0..self.devs.len() {
            let d = &mut self.devs[i];
            if !d.qps.values().any(|q| q.resp.ack_due.is_some()) {
                continue;
            }
            let due: Vec<u32> = d
                .qps
                .iter()
                .filter(|(_, q)| q.resp.ack_due.is_some())
                .map(|(&n, _)| n)
                .collect();
            let mut out = Vec::new();
            for qpn in due {
                work |= d
                    .with_qp(qpn, now, &mut out, crate::transport::responder::flush_ack)
                    .unwrap_or(false);
            }
            self.transmit(i, out);
        }
        work
    }

    /// A frame from outside the fabric (`from: None`, like one received from another
    /// process) arrives now: routed by its destination MAC and IPv4 like any other.
    pub fn inject(&mut self, bytes: Vec<u8>) {
        let at = self.now;
        self.enqueue(WireFrame {
            bytes,
            at,
            from: None,
        });
    }

    /// Put a frame in flight, keeping arrival order (stable for equal times).
    fn enqueue(&mut self, f: WireFrame) {
        let pos = self
            .wire
            .iter()
            .rposition(|x| x.at <= f.at)
            .map_or(0, |i| i + 1);
        self.wire.insert(pos, f);
    }

    /// Encode frames sent by device `from` onto the wire (and into the capture), through the
    /// fault rules.
    pub fn transmit(&mut self, from: usize, frames: Vec<Frame>) {
        for f in frames {
            let mut bytes = match f.pkt.emit() {
                Ok(b) => b,
                Err(e) => {
                    self.malformed += 1;
                    tracing::error!(error = %e, packet = ?f.pkt, "software ConnectX built a packet it cannot encode");
                    continue;
                }
            };
            if let Some(t) = f.ext.as_ref().and_then(ext_atomic::encode) {
                bytes.extend_from_slice(&t);
            }
            let Some(d) = self.devs.get_mut(from) else {
                continue;
            };
            if d.port.state != PortState::Active {
                // Nothing leaves a port that is down.
                d.counters.inc(CounterId::PortXmitDiscards);
                continue;
            }
            d.counters.inc(CounterId::PortXmitPackets);
            d.counters.add(CounterId::PortXmitData, words(bytes.len()));
            if let Some(cap) = &mut self.capture {
                let ts = std::time::Duration::from_nanos(self.now);
                if let Err(e) = cap.write_frame(ts, &bytes) {
                    tracing::error!(error = %e, "pcap capture failed; capture stopped");
                    self.capture = None;
                }
            }
            let copies = self.faults.judge(&Meta::of(&f.pkt), self.now);
            let n = copies.len();
            for (k, c) in copies.into_iter().enumerate() {
                let mut b = if k + 1 == n {
                    std::mem::take(&mut bytes)
                } else {
                    bytes.clone()
                };
                if c.corrupt {
                    // One bit between the BTH and the end of the ICRC: the ICRC (a CRC-32)
                    // detects every single-bit error.
                    let end = IPV4_OFFSET + u16::from_be_bytes([b[16], b[17]]) as usize;
                    let off = self.faults.rng.in_range(BTH_OFFSET..end.min(b.len()));
                    let bit = self.faults.rng.below(8);
                    if let Some(byte) = b.get_mut(off) {
                        *byte ^= 1 << bit;
                    }
                }
                self.enqueue(WireFrame {
                    bytes: b,
                    at: self.now + c.delay,
                    from: Some(from),
                });
            }
        }
    }

    /// Hand an arrived frame to its device, or to the process that owns its address.
    fn route(&mut self, f: WireFrame) {
        let b = &f.bytes;
        if b.len() < IPV4_OFFSET + 20 {
            self.malformed += 1;
            return;
        }
        let mut mac = [0u8; 6];
        mac.copy_from_slice(&b[..6]);
        let mac = MacAddr(mac);
        let ip = Ipv4Addr::new(b[30], b[31], b[32], b[33]);
        if ip.is_multicast() {
            self.route_mcast(f, ip, mac);
            return;
        }
        if let Some(i) = self
            .devs
            .iter()
            .position(|d| d.port.ip == ip && d.port.mac == mac)
        {
            if self.devs[i].port.state != PortState::Active {
                tracing::debug!(dst = %ip, "destination port down; frame lost");
                return;
            }
            self.deliver_bytes_from(i, f.bytes, f.from);
            return;
        }
        let sent = f
            .from
            .and_then(|s| self.devs.get(s))
            .and_then(|d| d.udp.as_ref())
            .is_some_and(|u| u.send(ip, &f.bytes));
        // Anything else a device sends leaves through its TAP interface, when it has one.
        let sent = sent
            || f.from
                .and_then(|s| self.devs.get_mut(s))
                .and_then(|d| d.tap.as_mut())
                .is_some_and(|t| t.send(&f.bytes));
        if !sent {
            tracing::debug!(dst = %ip, %mac, "no device for frame; dropped");
        }
    }

    /// Receive a frame on device `i`: count it, check it, hand it to its QP.
    fn deliver_bytes_from(&mut self, i: usize, bytes: Vec<u8>, from: Option<usize>) {
        let d = &mut self.devs[i];
        d.counters.inc(CounterId::PortRcvPackets);
        d.counters.add(CounterId::PortRcvData, words(bytes.len()));
        match Packet::parse(&bytes) {
            Ok(pkt) => {
                let ext = ext_atomic::decode(ext_atomic::after_datagram(&bytes));
                self.deliver(i, Frame { pkt, ext }, from);
            }
            Err(ParseError::IcrcMismatch { found, expected }) => {
                d.counters.inc(CounterId::PortRcvErrors);
                d.counters.inc(CounterId::RxIcrcEncapsulated);
                tracing::debug!(
                    device = d.name,
                    found,
                    expected,
                    "ICRC mismatch; frame dropped"
                );
            }
            Err(e) => {
                d.counters.inc(CounterId::PortRcvErrors);
                self.malformed += 1;
                tracing::warn!(error = %e, "frame failed to parse; dropped");
            }
        }
    }

    /// Deliver one packet to a QP of device `i`.
    fn deliver(&mut self, i: usize, f: Frame, from: Option<usize>) {
        if f.pkt.bth.dest_qp == MULTICAST_QPN {
            self.deliver_mcast(i, f, from);
            return;
        }
        let d = &mut self.devs[i];
        let qpn = f.pkt.bth.dest_qp;
        let mut out = Vec::new();
        let now = self.now;
        let gate = if f.pkt.bth.opcode.is_response() {
            None
        } else {
            RecvGate::new(&mut self.faults, Meta::of(&f.pkt), now)
        };
        let handled = d.with_qp_gated(qpn, now, &mut out, gate, |qp, ctx| {
            if !qp.can_receive() {
                ctx.counters.inc(CounterId::RxDropped);
                return;
            }
            if f.pkt.bth.opcode.is_response() {
                requester::on_response(qp, ctx, &f);
            } else {
                comm_established(qp, ctx);
                responder::on_request(qp, ctx, &f);
            }
        });
        if handled.is_none() {
            d.counters.inc(CounterId::RxDropped);
        }
        self.transmit(i, out);
    }

    /// Route a frame whose destination IPv4 address is a multicast group ([`crate::mcast`]): to
    /// every UDP peer of the device that sent it, and to every local device with an active
    /// port that joined the group.
    fn route_mcast(&mut self, f: WireFrame, ip: Ipv4Addr, mac: MacAddr) {
        let gid = Gid(ipv4_to_gid(ip));
        if gid.multicast_mac() != Some(mac.0) {
            tracing::debug!(dst = %ip, %mac, "multicast frame to a MAC that is not its group's; no port accepts it");
            return;
        }
        if let Some(u) = f
            .from
            .and_then(|s| self.devs.get(s))
            .and_then(|d| d.udp.as_ref())
        {
            u.send_multicast(ip, &f.bytes);
        }
        for i in 0..self.devs.len() {
            let d = &self.devs[i];
            if d.port.state != PortState::Active || !d.mcast.joined(&gid) {
                continue;
            }
            self.deliver_bytes_from(i, f.bytes.clone(), f.from);
        }
    }

    /// A frame that came through device `i`'s socket for an IP multicast group
    /// ([`crate::udp_port::UdpPort::set_groups`]): to that device only (each device of the
    /// fabric that joined the group has a socket of its own, and its own copy), if its port
    /// accepts it as in [`route_mcast`](Self::route_mcast).
    fn deliver_group_datagram(&mut self, i: usize, bytes: Vec<u8>) {
        if bytes.len() < IPV4_OFFSET + 20 {
            self.malformed += 1;
            return;
        }
        let ip = Ipv4Addr::new(bytes[30], bytes[31], bytes[32], bytes[33]);
        let gid = Gid(ipv4_to_gid(ip));
        let d = &self.devs[i];
        if !ip.is_multicast()
            || gid.multicast_mac() != Some(bytes[..6].try_into().unwrap_or_default())
            || d.port.state != PortState::Active
            || !d.mcast.joined(&gid)
        {
            tracing::debug!(dst = %ip, "multicast datagram the port does not accept; dropped");
            return;
        }
        self.deliver_bytes_from(i, bytes, None);
    }

    /// Hand a parsed datagram to QPN 0xFFFFFF on device `i` to every QP attached to its
    /// group. `from` is the device that sent it (for the self-loopback block).
    fn deliver_mcast(&mut self, i: usize, f: Frame, from: Option<usize>) {
        let now = self.now;
        let gid = Gid(ipv4_to_gid(f.pkt.addr.dst_ip));
        let d = &mut self.devs[i];
        let members = d.mcast.members(&gid);
        if members.is_empty() || f.pkt.bth.dest_qp != MULTICAST_QPN {
            d.counters.inc(CounterId::RxDropped);
            return;
        }
        let src = f.pkt.deth.map(|x| x.src_qp);
        let mut out = Vec::new();
        for qpn in members {
            if from == Some(i) && src == Some(qpn) && d.mcast.blocks_self_loopback(qpn) {
                continue;
            }
            // Each attached QP is a receiver of its own, asked on its own.
            let gate = RecvGate::new(&mut self.faults, Meta::of(&f.pkt), now);
            d.with_qp_gated(qpn, now, &mut out, gate, |qp, ctx| {
                if !qp.can_receive() {
                    ctx.counters.inc(CounterId::RxDropped);
                    return;
                }
                responder::on_request(qp, ctx, &f);
            });
        }
        self.transmit(i, out);
    }

    /// Steps until nothing happens (bounded); returns the number of steps that did work.
    pub fn run_until_idle(&mut self) -> usize {
        let mut n = 0;
        while n < 100_000 && self.step() {
            n += 1;
        }
        n
    }

    /// The earliest timer or frame arrival still in the future, if any.
    pub fn next_deadline(&self) -> Option<u64> {
        let timers = self
            .devs
            .iter()
            .flat_map(|d| d.qps.values())
            .filter_map(|qp| match qp.req.rnr_until {
                Some((t, _)) => Some(t),
                None => qp.req.timer,
            });
        let frames = self.wire.iter().map(|f| f.at);
        timers.chain(frames).filter(|&t| t > self.now).min()
    }

    /// Advance virtual time to `target`, firing every timer and delivering every delayed frame
    /// on the way, in order; returns the number of steps that did work.
    pub fn advance_to(&mut self, target: u64) -> usize {
        let mut busy = self.run_until_idle();
        let mut guard = 0;
        while let Some(t) = self.next_deadline() {
            if t > target || guard > 1_000_000 {
                break;
            }
            self.now = t;
            busy += self.run_until_idle();
            guard += 1;
        }
        self.now = self.now.max(target);
        busy + self.run_until_idle()
    }

    /// The IPv4 and MAC address of the device with GID `gid`: on this fabric, or a UDP peer of
    /// device `via`.
    pub fn resolve_gid(&self, via: usize, gid: &mlx5_hw::Gid) -> Option<(Ipv4Addr, MacAddr)> {
        if let (Some(mac), Some(ip)) = (gid.multicast_mac(), gid.ipv4()) {
            return Some((Ipv4Addr::from(ip), MacAddr(mac)));
        }
        if let Some(d) = self.devs.iter().find(|d| d.port.gid == *gid) {
            return Some((d.port.ip, d.port.mac));
        }
        let ip = crate::wire::gid_to_ipv4(&gid.0)?;
        let d = self.devs.get(via)?;
        if let Some(p) = d.udp.as_ref().and_then(|u| u.peer(ip)) {
            return Some((ip, p.mac));
        }
        // Through the TAP link every address is behind the kernel's netdev.
        d.tap.as_ref().map(|t| (ip, t.peer_mac()))
    }

    /// Whether device `via` reaches GID `gid` through its TAP interface, i.e. the peer is some
    /// other RoCEv2 implementation, not a software ConnectX.
    pub fn through_tap(&self, via: usize, gid: &mlx5_hw::Gid) -> bool {
        if self.devs.iter().any(|d| d.port.gid == *gid) {
            return false;
        }
        let Some(d) = self.devs.get(via) else {
            return false;
        };
        let udp_peer = crate::wire::gid_to_ipv4(&gid.0)
            .is_some_and(|ip| d.udp.as_ref().is_some_and(|u| u.peer(ip).is_some()));
        !udp_peer && d.tap.is_some()
    }
}
