//! A decoder for raw mlx5 work-queue entries and completion entries, for humans.
//!
//! [`decode`] takes the bytes of a send WQE, a receive WQE, an SRQ WQE or a CQE (as parsed from
//! text by [`parse_hex`]) and returns a [`Report`]: every field with its byte offset, its raw
//! bytes and what it means, using rdma-core's names for opcodes, flags and syndromes. The
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
pub use report::{Field, Report, Section};

/// What the bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A send WQE (ctrl segment first).
    Send,
    /// A receive WQE of a regular RQ (data segments only).
    Recv,
    /// An SRQ WQE (next segment, then data segments).
    Srq,
    /// A completion queue entry (64 or 128 bytes).
    Cqe,
}

/// Transport of the QP a send WQE belongs to: it decides which segment follows ctrl.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
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
}

impl Default for Options {
    fn default() -> Self {
        Options {
            qp_type: QpType::Rc,
            cqe_size: 64,
            sges: None,
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
        Kind::Cqe => cqe::decode(bytes, opts.cqe_size),
    }
}

#[cfg(test)]
mod tests;
