//! One error for a user of the facade: whatever a call of the owning objects
//! ([`crate::ctx`]), of connection setup ([`crate::connect`]), of the data path
//! ([`crate::datapath`]) or of the device ([`crate::hw`]) returned, `?` turns into
//! [`Error`], and the crate's error is still there to match on ([`Error::ctx`],
//! [`Error::connect`]) or to walk with [`std::error::Error::source`].

use crate::{connect, ctx, datapath, hw};

/// Any error of the library, by the layer that reported it. The layers' own errors already
/// carry what lies below them (a device error inside a connect error, for instance):
/// [`Error::device`] and [`Error::data_path`] find it whichever layer wrapped it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Opening a device, creating or using an owning object, waiting for a completion
    /// (`mlx5_ctx`); also a device or data-path error raised directly.
    #[error(transparent)]
    Ctx(#[from] ctx::Error),
    /// Connection setup, the control connection, rebuild and recovery (`mlx5_connect`).
    #[error(transparent)]
    Connect(#[from] connect::ConnectError),
}

/// Result of the facade's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

impl From<hw::Error> for Error {
    fn from(e: hw::Error) -> Self {
        Error::Ctx(ctx::Error::Device(e))
    }
}

impl From<datapath::Error> for Error {
    fn from(e: datapath::Error) -> Self {
        Error::Ctx(ctx::Error::DataPath(e))
    }
}

impl Error {
    /// The owning objects' error, when that layer reported it.
    pub fn ctx(&self) -> Option<&ctx::Error> {
        match self {
            Error::Ctx(e) => Some(e),
            Error::Connect(_) => None,
        }
    }

    /// The connection layer's error, when that layer reported it.
    pub fn connect(&self) -> Option<&connect::ConnectError> {
        match self {
            Error::Connect(e) => Some(e),
            Error::Ctx(_) => None,
        }
    }

    /// The device's error (an errno of a verbs call, a refusal of the software ConnectX, an
    /// unsupported feature ...), whichever layer passed it on.
    pub fn device(&self) -> Option<&hw::Error> {
        match self {
            Error::Ctx(ctx::Error::Device(e))
            | Error::Connect(connect::ConnectError::Device(e)) => Some(e),
            _ => None,
        }
    }

    /// The data path's error (a full queue, a WR the QP cannot take, a CQE that names no
    /// outstanding WQE ...), whichever layer passed it on.
    pub fn data_path(&self) -> Option<&datapath::Error> {
        match self {
            Error::Ctx(ctx::Error::DataPath(e))
            | Error::Connect(connect::ConnectError::DataPath(e)) => Some(e),
            _ => None,
        }
    }
}
