//! A decoder for raw mlx5 work-queue entries and completion entries, for humans.
//!
//! [`decode`] takes the bytes of a send WQE, a receive WQE, an SRQ WQE, a CQE or a run of CQ
//! slots (as parsed from text by [`parse_hex`]) and returns a [`Report`]: every field with its
//! byte offset, its raw bytes and what it means, using rdma-core's names for opcodes, flags and
//! syndromes. Compressed CQEs are expanded into the completions they stand for. The
//! `wqe-dump` binary prints that report. Layouts: `docs/wqe-layout.md`.
//!
//! Malformed input is an [`Error`] with a one-line message, never a panic.

mod bytes;
mod cqe;
mod error;
mod hex;
mod names;
mod recv;
mod report;
mod send;

pub use error::Error;
pub use hex::parse_hex;
pub use names::{opcode, send_opcode_name};
pub use report::{Field, Report, Section};

/// What the bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Kind {
    /// A send WQE (ctrl segment first).
    Send,
    /// A receive WQE of a regular RQ (data segments only).
    Recv,
    /// An SRQ WQE (next segment, then data segments).
    Srq,
    /// A completion queue entry (64 or 128 bytes).
    Cqe,
    /// Consecutive CQ slots: each CQE decoded, compressed sessions or blocks expanded, and
    /// the completions they all stand for listed.
    Cq,
}

/// Layout of compressed CQEs (format 3) on the CQ the bytes come from (`docs/wqe-layout.md`
/// §9, "Compressed CQEs").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Zip {
    /// Basic layout: a format-3 title CQE whose `byte_cnt` counts the session's completions,
    /// then arrays of 8 mini-CQEs (Linux en_rx.c). CQs created with `mlx5dv_create_cq`.
    #[default]
    Basic,
    /// Enhanced layout: format-3 blocks of up to 7 mini-CQEs after an ordinary title CQE, the
    /// count in `op_own` bits 7:4, validity in byte 62 (UCX, DPDK; DEVX `cqe_comp_layout` 1).
    Enhanced,
}

/// Transport of the QP a send WQE belongs to: it decides which segment follows ctrl.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum QpType {
    /// Reliable connected (no transport segment).
    #[default]
    Rc,
    /// Unreliable connected (no transport segment).
    Uc,
    /// Unreliable datagram: an address vector follows ctrl.
    Ud,
    /// XRC initiator: an XRC segment follows ctrl.
    Xrc,
}

/// Decoding options (the command-line flags of `wqe-dump`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// QP type of a send WQE.
    pub qp_type: QpType,
    /// CQE size, 64 or 128.
    pub cqe_size: usize,
    /// Scatter entries per receive / SRQ WQE (`None`: as many as the bytes hold).
    pub sges: Option<usize>,
    /// Layout of compressed CQEs.
    pub zip: Zip,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            qp_type: QpType::Rc,
            cqe_size: 64,
            sges: None,
            zip: Zip::Basic,
        }
    }
}

/// Decode `bytes` as `kind`.
pub fn decode(kind: Kind, bytes: &[u8], opts: &Options) -> Result<Report, Error> {
    if bytes.is_empty() {
        return Err(Error::Empty);
    }
    match kind {
        Kind::Send => send::decode(bytes, opts.qp_type),
        Kind::Recv => recv::decode_rq(bytes, opts.sges),
        Kind::Srq => recv::decode_srq(bytes, opts.sges),
        Kind::Cqe => cqe::decode(bytes, opts.cqe_size, opts.zip),
        Kind::Cq => cqe::decode_ring(bytes, opts.cqe_size, opts.zip),
    }
}

#[cfg(test)]
mod tests;
