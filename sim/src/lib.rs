//! # mlx5-sim: the software ConnectX
//!
//! A device model that plays the hardware side of the mlx5 contract (`docs/software-connectx.md`), so that the
//! same driver code that posts on a ConnectX can be tested without one, and a driver bug fails
//! a test here.
//!
//! - [`Fabric`] holds any number of [`SimDevice`]s; each implements [`mlx5_hw::Device`] and
//!   hands out rings, doorbell records and UAR pages laid out as `mlx5dv_init_obj` describes.
//! - The device learns of send work only from doorbell / BlueFlame writes to its UAR pages
//!   ([`doorbell`]), of receive work from the doorbell records, and fetches and checks WQEs
//!   from the rings ([`wqe`]) the way hardware does.
//! - Messages travel between QPs as RoCEv2 frames ([`wire`], [`transport`]): Ethernet, IPv4,
//!   UDP 4791, BTH and extension headers, ICRC, segmented by the path MTU; RC with 24-bit
//!   PSNs, coalesced ACKs, NAKs, RNR, duplicate detection, responder resources for READ and
//!   atomic replay, and retransmission on a virtual clock.
//! - The network between ports is as lossy as a test asks ([`faults`]): loss, duplication,
//!   reordering, delay, corruption (caught by the ICRC) and links going down, per link,
//!   direction, device or QP, N times or always, reproducible for a seed, with a record of
//!   every frame a fault changed and a capture after the faults. Counters carry the mlx5 names
//!   ([`counters`], [`device::SimDevice`]'s `counters`); every packet the transport drops
//!   without an answer is counted.
//! - Devices in different processes talk over UDP on the loopback ([`udp_port`]), the frame
//!   bytes as the datagram, so a client and a server can run as two programs.
//! - A device bound to a Linux TAP interface speaks native RoCEv2 on that link, answering ARP
//!   ([`tap_port`]), so another RoCE implementation (the kernel's Soft-RoCE) can be its peer.
//! - Completions, arming and events follow the CQ contract ([`cq`]); completion channels and
//!   asynchronous events are eventfds ([`notify`]); flushing follows IB verbs ([`engine`]).
//! - Everything the driver can get wrong without hardware noticing is reported as a
//!   [`DriverBug`] ([`bugs`]).
//!
//! ## Layers
//!
//! Each module imports only modules below it, with no cycle anywhere (checked on the sources
//! by a unit test, `layers.rs`, which lists every module in one such order), bottom to top:
//!
//! 1. **wire and leaves**: [`wire`] (frames, headers, PSNs, timers), [`bugs`], [`counters`],
//!    [`mem`], [`notify`], [`pcap`], [`sizing`], [`uidx`] (CQE version 1 user indexes), the
//!    fault rules as data and pure decisions (`fault_rules`: what a rule does to a frame or to
//!    a request that needs a receive WQE, the seeded generator, the record), the ports
//!    [`tap_port`] and [`udp_port`];
//! 2. **device memory objects and tables**: [`mr`], [`srq`], [`cq`], [`cq_uar`] (a UAR page
//!    several CQs arm on), the multicast groups ([`mcast`], data only), and [`wqe`] (decoding
//!    send WQEs);
//! 3. **the QP**: [`qp`] with its transport state ([`qp::path`], [`qp::requester`],
//!    [`qp::responder`]) and its doorbell register and detection state ([`qp::db`]), all data
//!    only; above it the doorbell detection ([`doorbell`]: the deterministic, threaded and
//!    shared-register scanners, which read and update a `Qp`);
//! 4. **the processing context** [`ctx`]: what a QP's processing may touch, CQE writers, the
//!    move to Error and flushing;
//! 5. **the transport** [`transport`]: requester, responder, XRC and masked-atomic packets;
//! 6. **the engine** [`engine`]: one step of one QP;
//! 7. **the fabric's state**, bottom to top: the [`world`] (all devices and the fault rules;
//!    frame delivery through the fault rules, multicast fan-out through the groups of
//!    [`mcast`]), the lock every handle shares
//!    (`shared`), and the fault controls [`faults`] ([`Faults`], [`faults::FaultTarget`]),
//!    which lock the world to add rules and read what they did;
//! 8. **the control path**: [`modify`] (the QP state machine), [`xrc`] (XRC objects), [`dc`]
//!    (DC initiators and targets), then [`device`] ([`SimDevice`], the `mlx5_hw::Device`
//!    implementation), [`kernel`] (objects on memory the driver allocated and UAR pages the
//!    program maps: what an emulation of the kernel side under rdma-core's `libmlx5` needs) and,
//!    on top, [`fabric`] ([`Fabric`], [`DeviceConfig`], the threads, and the fault controls that
//!    name devices).
#![deny(missing_docs)]

pub mod bugs;
pub mod counters;
pub mod cq;
pub mod cq_uar;
pub mod ctx;
pub mod dc;
pub mod device;
pub mod doorbell;
pub mod engine;
pub mod fabric;
mod fault_rules;
pub mod faults;
pub mod kernel;
pub mod mcast;
pub mod mem;
pub mod modify;
pub mod mr;
pub mod notify;
pub mod pcap;
pub mod qp;
mod shared;
pub mod sizing;
pub mod srq;
pub mod tap_port;
pub mod transport;
pub mod udp_port;
pub mod uidx;
pub mod wire;
pub mod world;
pub mod wqe;
pub mod xrc;

#[cfg(test)]
mod layers;

pub use bugs::{DriverBug, DriverBugKind};
pub use counters::CounterId;
pub use device::{LiveObjects, QueueMemory, SimDevice};
pub use doorbell::DoorbellStats;
pub use fabric::{DeviceConfig, Fabric, FabricThread};
pub use faults::{Class, FaultStats, Faults, Rate};
pub use wqe::AtomicEndianness;
