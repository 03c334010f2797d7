//! Errors of the perftest-compatible tools, with messages a user can act on.

use thiserror::Error as ThisError;

/// Why a `lat` or `bw` run could not be done.
#[derive(Debug, ThisError)]
pub enum Error {
    /// The command line asks for something this build or device cannot do.
    #[error("{0}")]
    Usage(String),
    /// The device refused a control-path call (open, create, register, modify).
    #[error("device: {0}")]
    Device(#[from] mlx5_hw::Error),
    /// The data path refused a post or a poll, or a layout.
    #[error("data path: {0}")]
    DataPath(#[from] mlx5_qp::Error),
    /// Connecting the QPs failed (TCP exchange, modify sequence).
    #[error("connect: {0}")]
    Connect(#[from] mlx5_connect::ConnectError),
    /// A work request completed with an error.
    #[error("work request {wr_id} ({what}) completed with {status}{hint}")]
    Completion {
        /// The WR's identifier.
        wr_id: u64,
        /// What the WR was.
        what: &'static str,
        /// The completion status name.
        status: String,
        /// Advice, starting with "; " when present.
        hint: String,
    },
    /// Nothing happened for too long.
    #[error("timed out after {secs} s waiting for {what}; is the peer running and connected?")]
    Timeout {
        /// What was awaited.
        what: &'static str,
        /// Seconds waited.
        secs: u64,
    },
    /// The peer on the control connection is not what this side expects.
    #[error("peer {peer}: {why}")]
    Peer {
        /// The peer's address.
        peer: String,
        /// What is wrong, and what to do about it.
        why: String,
    },
    /// A socket operation of the control connection failed.
    #[error("{during}: {source}")]
    Net {
        /// What was being done.
        during: String,
        /// The cause.
        source: std::io::Error,
    },
    /// Writing the report or the histogram picture failed.
    #[error("writing {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
}

/// Result of the tools' functions.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// The error for a completion that did not succeed, with its likely causes.
    pub fn completion(wc: &mlx5_qp::Wc) -> Error {
        Error::Completion {
            wr_id: wc.wr_id,
            what: wc.opcode.name(),
            status: wc.status.name().to_string(),
            hint: format!("; {}", wc.status.causes()),
        }
    }
}
