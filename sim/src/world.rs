//! The fabric's state behind one lock: every device with its objects, the virtual clock, and
//! the packets in flight on a lossless, in-order link.
//!
//! One step: every CQ's arm doorbell and every QP's BlueFlame register is examined, timers
//! fire, send queues execute (each device in turn, QPs in QPN order), then every packet on the
//! wire is delivered to the device that owns its destination IPv4 address and MAC (an
//! Ethernet + IP fabric like RoCEv2's) and to the QP its BTH names. Everything is in a fixed
//! order, so a run is reproducible.
//!
//! Packets travel as bytes: each is encoded into a RoCEv2 frame (Ethernet, IPv4, UDP 4791,
//! transport headers, payload, ICRC; [`crate::wire`]) when sent and parsed (ICRC checked) when
//! delivered, and can be captured to a pcap file with the virtual time as timestamp.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use mlx5_hw::{AsyncEvent, PortState};

use crate::bugs::BugLog;
use crate::cq::Cq;
use crate::engine::{process_qp, Counters, Ctx, Port};
use crate::mr::MrTable;
use crate::pcap::PcapWriter;
use crate::qp::Qp;
use crate::srq::Srq;
use crate::transport::{requester, responder, Frame};
use crate::wire::Packet;
use crate::wqe::AtomicOp;

/// A frame on the wire: the encoded RoCEv2 bytes, and the masked-atomic operands that travel
/// beside an extended atomic request (see [`crate::transport`]).
#[derive(Clone, Debug)]
pub struct WireFrame {
    /// Ethernet frame bytes.
    pub bytes: Vec<u8>,
    /// Masked-atomic operands.
    pub ext: Option<AtomicOp>,
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
    /// Async events.
    pub events: VecDeque<AsyncEvent>,
    /// Driver bugs.
    pub bugs: BugLog,
    /// Counters.
    pub counters: Counters,
    /// Next object number.
    pub next_id: u32,
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
            events: VecDeque::new(),
            bugs: BugLog::default(),
            counters: Counters::default(),
            next_id: 0x100,
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
            ..
        } = self;
        let qp = qps.get_mut(&qpn)?;
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
        };
        Some(f(qp, &mut ctx))
    }
}

/// Everything on the fabric.
#[derive(Default)]
pub struct World {
    /// Virtual time in nanoseconds.
    pub now: u64,
    /// Devices, by index.
    pub devs: Vec<Dev>,
    /// Frames in flight.
    pub wire: VecDeque<WireFrame>,
    /// Capture of every frame put on the wire.
    pub capture: Option<PcapWriter<std::io::BufWriter<std::fs::File>>>,
    /// Frames that could not be encoded (a software ConnectX bug) or parsed.
    pub malformed: u64,
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("World")
            .field("now", &self.now)
            .field("devs", &self.devs.len())
            .finish()
    }
}

impl World {
    /// One step; returns whether anything happened.
    pub fn step(&mut self) -> bool {
        let mut work = false;
        let mut out = Vec::new();
        let now = self.now;
        for d in &mut self.devs {
            for cq in d.cqs.values_mut() {
                work |= cq.scan_arm(&d.name, &mut d.bugs);
            }
            let qpns: Vec<u32> = d.qps.keys().copied().collect();
            for qpn in qpns {
                work |= d.with_qp(qpn, now, &mut out, process_qp).unwrap_or(false);
            }
        }
        self.transmit(out);
        let n = self.wire.len();
        for _ in 0..n {
            let Some(f) = self.wire.pop_front() else {
                break;
            };
            work = true;
            match Packet::parse(&f.bytes) {
                Ok(pkt) => self.deliver(Frame { pkt, ext: f.ext }),
                Err(e) => {
                    self.malformed += 1;
                    tracing::warn!(error = %e, "frame failed to parse; dropped");
                }
            }
        }
        work
    }

    /// Encode frames onto the wire (and into the capture).
    pub fn transmit(&mut self, frames: Vec<Frame>) {
        for f in frames {
            match f.pkt.emit() {
                Ok(bytes) => {
                    if let Some(cap) = &mut self.capture {
                        let ts = std::time::Duration::from_nanos(self.now);
                        if let Err(e) = cap.write_frame(ts, &bytes) {
                            tracing::error!(error = %e, "pcap capture failed; capture stopped");
                            self.capture = None;
                        }
                    }
                    self.wire.push_back(WireFrame { bytes, ext: f.ext });
                }
                Err(e) => {
                    self.malformed += 1;
                    tracing::error!(error = %e, packet = ?f.pkt, "software ConnectX built a packet it cannot encode");
                }
            }
        }
    }

    /// Deliver one packet.
    fn deliver(&mut self, f: Frame) {
        let a = f.pkt.addr;
        let src_down = self.devs.iter().any(|d| {
            d.port.ip == a.src_ip && d.port.mac == a.src_mac && d.port.state != PortState::Active
        });
        let Some(d) = self.devs.iter_mut().find(|d| {
            d.port.ip == a.dst_ip && d.port.mac == a.dst_mac && d.port.state == PortState::Active
        }) else {
            tracing::debug!(dst = %a.dst_ip, mac = %a.dst_mac, "no device for packet; dropped");
            return;
        };
        d.counters.inc("port_rcv_packets");
        // Nothing leaves a port that is down.
        if src_down {
            d.counters.inc("rx_dropped");
            return;
        }
        let qpn = f.pkt.bth.dest_qp;
        let mut out = Vec::new();
        let now = self.now;
        let handled = d.with_qp(qpn, now, &mut out, |qp, ctx| {
            if !qp.can_receive() {
                ctx.counters.inc("rx_dropped");
                return;
            }
            if f.pkt.bth.opcode.is_response() {
                requester::on_response(qp, ctx, &f);
            } else {
                responder::on_request(qp, ctx, &f);
            }
        });
        if handled.is_none() {
            d.counters.inc("rx_dropped");
        }
        self.transmit(out);
    }

    /// Steps until nothing happens (bounded); returns the number of steps that did work.
    pub fn run_until_idle(&mut self) -> usize {
        let mut n = 0;
        while n < 100_000 && self.step() {
            n += 1;
        }
        n
    }

    /// The earliest timer still in the future, if any.
    pub fn next_deadline(&self) -> Option<u64> {
        self.devs
            .iter()
            .flat_map(|d| d.qps.values())
            .filter_map(|qp| match qp.req.rnr_until {
                Some((t, _)) => Some(t),
                None => qp.req.timer,
            })
            .filter(|&t| t > self.now)
            .min()
    }

    /// Advance virtual time to `target`, firing every timer on the way in order.
    pub fn advance_to(&mut self, target: u64) {
        self.run_until_idle();
        let mut guard = 0;
        while let Some(t) = self.next_deadline() {
            if t > target || guard > 1_000_000 {
                break;
            }
            self.now = t;
            self.run_until_idle();
            guard += 1;
        }
        self.now = self.now.max(target);
        self.run_until_idle();
    }
}
