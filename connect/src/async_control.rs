//! tokio (feature `tokio`): a connection whose peer's control messages are awaited, so one task
//! sleeps on its completions (`mlx5_ctx::AsyncChannel`), the device's events
//! (`mlx5_ctx::AsyncEventStream`) and its peers' rebuild requests at once.

use std::ops::{Deref, DerefMut};

use mlx5_ctx::AsyncReadable;

use crate::error::{ConnectError, Result};
use crate::session::{Connection, ControlEvent};

/// A [`Connection`] whose control socket is registered with the current tokio runtime
/// ([`Connection::into_async`]): [`AsyncConnection::next_control`] awaits the peer's next
/// rebuild request or abort. Dereferences to the connection (rebuild it, read its endpoints).
pub struct AsyncConnection {
    // Declared first: deregistered before the connection (and its socket) goes.
    fd: AsyncReadable,
    conn: Connection,
}

impl std::fmt::Debug for AsyncConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncConnection")
            .field("conn", &self.conn)
            .finish_non_exhaustive()
    }
}

impl Connection {
    /// Await this connection's control messages on the current tokio runtime (which must have
    /// I/O enabled). Refused for a connection without a control connection (an in-process
    /// pair) and outside a runtime.
    pub fn into_async(self) -> Result<AsyncConnection> {
        let Some(control) = self.control() else {
            return Err(ConnectError::NoControlChannel);
        };
        let fd = control.try_clone_fd()?;
        let fd = AsyncReadable::new(fd).map_err(|e| {
            ConnectError::io(
                "register the control socket with the tokio runtime",
                std::io::Error::other(e),
            )
        })?;
        Ok(AsyncConnection { fd, conn: self })
    }
}

impl AsyncConnection {
    /// The peer's next rebuild request or abort ([`Connection::poll_control`]), sleeping
    /// until the peer sends one. Cancellation-safe: a message is taken only in the synchronous
    /// step that returns it.
    pub async fn next_control(&mut self) -> Result<ControlEvent> {
        let conn = &mut self.conn;
        match self.fd.next(|| conn.poll_control()).await {
            Ok(r) => r,
            Err(e) => Err(ConnectError::io(
                "await the control connection",
                std::io::Error::other(e),
            )),
        }
    }

    /// The connection back, its control socket deregistered.
    pub fn into_inner(self) -> Connection {
        self.conn
    }
}

impl Deref for AsyncConnection {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        &self.conn
    }
}

impl DerefMut for AsyncConnection {
    fn deref_mut(&mut self) -> &mut Connection {
        &mut self.conn
    }
}
