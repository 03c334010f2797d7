//! A DC QP's own state (the data; what the transport does with it is
//! [`crate::transport::dc`]): an initiator's current connection and streams, a target's access
//! key and its connections, each with the responder state RC keeps per QP.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use mlx5_hw::DciStreams;

use super::responder::Responder;
use crate::wire::{Addressing, Psn};

/// What a DC QP keeps beyond an RC QP's state.
#[derive(Debug)]
pub enum DcState {
    /// A DC initiator.
    Initiator(Dci),
    /// A DC target.
    Target(Dct),
}

/// Where a DCI is connected: the target's address, number and the key its WQEs named.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DcTarget {
    /// Addressing of the requests (the initiator's port to the target's).
    pub addr: Addressing,
    /// The DCT number.
    pub dctn: u32,
    /// The DC access key the WQE named.
    pub key: u64,
}

/// The connection a DCI has open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DciConn {
    /// Its target.
    pub target: DcTarget,
    /// The PSN of its first packet: that packet, and every retransmission of it, carries the
    /// connect flag.
    pub start_psn: Psn,
}

/// A DC initiator's state.
#[derive(Debug, Default)]
pub struct Dci {
    /// Its streams (`None`: one stream).
    pub streams: Option<DciStreams>,
    /// The connection open now, if any.
    pub conn: Option<DciConn>,
    /// Connections opened.
    pub connects: u64,
    /// Connections closed (a disconnect request sent).
    pub disconnects: u64,
    /// WQEs that waited for the previous connection's requests to be acknowledged before
    /// their own connection could open (a DCI talks to one target at a time).
    pub waits: u64,
}

/// One initiator's connection to a DC target: the responder state an RC QP keeps, for this
/// initiator alone.
#[derive(Debug)]
pub struct DctConn {
    /// PSNs, MSN, the message in progress, the READ/atomic replay resources, the responses.
    pub resp: Responder,
    /// The PSN the connection opened with.
    pub start_psn: Psn,
}

/// A DC target's state.
#[derive(Debug, Default)]
pub struct Dct {
    /// Its DC access key (`dct_access_key`).
    pub key: u64,
    /// Open connections, by (initiator address, initiator QPN).
    pub conns: BTreeMap<(Ipv4Addr, u32), DctConn>,
    /// Requests refused for a wrong DC access key (`dc_access_key_violation_count` of the
    /// PRM's DCT context).
    pub key_violations: u64,
    /// Connections opened.
    pub connects: u64,
    /// Connections closed (by a disconnect request, a newer connect of the same initiator, or
    /// an error).
    pub disconnects: u64,
}

impl DcState {
    /// The initiator's state, if this is a DCI.
    pub fn dci(&mut self) -> Option<&mut Dci> {
        match self {
            DcState::Initiator(d) => Some(d),
            DcState::Target(_) => None,
        }
    }

    /// The target's state, if this is a DCT.
    pub fn dct(&mut self) -> Option<&mut Dct> {
        match self {
            DcState::Target(d) => Some(d),
            DcState::Initiator(_) => None,
        }
    }
}
