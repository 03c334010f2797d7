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
    /// The owning layer refused (creating an object, a memory region, a wait).
    #[error("{0}")]
    Ctx(#[from] mlx5_ctx::Error),
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
    #[error("timed out after {secs} s waiting for {what}; {hint}")]
    Timeout {
        /// What was awaited.
        what: &'static str,
        /// Seconds waited.
        secs: u64,
        /// What may be wrong.
        hint: String,
    },
    /// What arrived is not what was sent (a message's bytes, an atomic's result).
    #[error("check failed: {0}")]
    Check(String),
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

impl Error {
    /// The exit status for this error: 2 for a usage error (the command line asks for
    /// something this build, device or machine cannot do, found before any traffic), 1 for
    /// everything that went wrong while running.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Usage(_) => 2,
            _ => 1,
        }
    }

    /// A wait of a run that ran out of patience: nothing happened for `waited` while waiting
    /// for `what`, though `doing` (what was outstanding) should have taken at most that:
    /// `why` says what the limit is made of (`crate::patience`).
    pub fn stuck(what: &'static str, waited: std::time::Duration, doing: &str, why: &str) -> Error {
        Error::Timeout {
            what,
            secs: waited.as_secs(),
            hint: format!(
                "nothing happened in that time while {doing}; the limit allows for {why}. The \
                 peer stopped answering, or the device is stuck"
            ),
        }
    }
}

/// Result of the tools' functions.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// The error for a completion that did not succeed, with its likely causes.
    pub fn completion(wc: &mlx5_qp::Wc) -> Error {
        Error::Completion {
            wr_id: wc.wr_id(),
            what: wc.opcode().name(),
            status: wc.status().name().to_string(),
            hint: format!("; {}", wc.status().causes()),
        }
    }
}
