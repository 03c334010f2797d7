//! The out-of-band control connection: a TCP stream carrying [`Message`]s, blocking with a
//! deadline on every step, with a non-blocking check for the peer's rebuild requests.

use super::error::{ConnectError, Result};
use super::wire::{Message, HEADER_LEN, MAX_MESSAGE_LEN};
use mlx5_hw::device::wait_readable;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::time::{Duration, Instant};

/// How often a deadline-bounded connect retries a refused connection (the peer may not listen
/// yet: nothing signals when it starts to).
const RETRY_EVERY: Duration = Duration::from_millis(2);

/// A control connection to the peer.
#[derive(Debug)]
pub struct Control {
    stream: TcpStream,
    peer: SocketAddr,
    buf: Vec<u8>,
    timeout: Duration,
}

impl Control {
    /// Accepts one peer on `listener`, waiting at most `timeout`.
    pub fn accept(listener: &TcpListener, timeout: Duration) -> Result<Control> {
        let during = || {
            format!(
                "accept on {}",
                listener
                    .local_addr()
                    .map_or_else(|_| "?".to_string(), |a| a.to_string())
            )
        };
        listener
            .set_nonblocking(true)
            .map_err(|e| ConnectError::io(during(), e))?;
        let deadline = Instant::now() + timeout;
        let accepted = loop {
            match listener.accept() {
                Ok(s) => break Ok(s),
                Err(e)
                    if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted =>
                {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break Err(ConnectError::Timeout {
                            waiting_for: "a peer to connect",
                            after: timeout,
                        });
                    }
                    // Asleep until a peer connects (the listener becomes readable) or the
                    // deadline: no polling.
                    if let Err(e) = wait_readable(listener.as_raw_fd(), left) {
                        break Err(e.into());
                    }
                }
                Err(e) => break Err(ConnectError::io(during(), e)),
            }
        };
        // Leave the listener as the caller gave it (blocking), whatever happened.
        let _ = listener.set_nonblocking(false);
        let (stream, peer) = accepted?;
        tracing::info!(target: "mlx5_connect", %peer, "control connection accepted");
        Control::from_stream(stream, peer, timeout)
    }

    /// Connects to `addr`, retrying refused connections (the peer may not listen yet) until
    /// `timeout` has passed.
    pub fn connect<A: ToSocketAddrs>(addr: A, timeout: Duration) -> Result<Control> {
        let addrs: Vec<SocketAddr> = addr
            .to_socket_addrs()
            .map_err(|e| ConnectError::io("resolve the peer's address", e))?
            .collect();
        let first = *addrs.first().ok_or_else(|| {
            ConnectError::io(
                "resolve the peer's address",
                std::io::Error::new(ErrorKind::NotFound, "no address"),
            )
        })?;
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let mut last = None;
            for a in &addrs {
                match TcpStream::connect_timeout(a, left.max(Duration::from_millis(1))) {
                    Ok(s) => {
                        tracing::info!(target: "mlx5_connect", peer = %a, "control connection established");
                        return Control::from_stream(s, *a, timeout);
                    }
                    Err(e) => last = Some(e),
                }
            }
            let e = last.unwrap_or_else(|| std::io::Error::from(ErrorKind::NotFound));
            let retry = matches!(
                e.kind(),
                ErrorKind::ConnectionRefused | ErrorKind::Interrupted
            );
            if !retry {
                return Err(ConnectError::io(format!("connect to {first}"), e));
            }
            if Instant::now() >= deadline {
                return Err(ConnectError::Timeout {
                    waiting_for: "the peer to accept the control connection",
                    after: timeout,
                });
            }
            std::thread::sleep(RETRY_EVERY);
        }
    }

    /// Wraps an established stream (for callers with their own listener logic).
    pub fn from_stream(stream: TcpStream, peer: SocketAddr, timeout: Duration) -> Result<Control> {
        stream
            .set_nodelay(true)
            .and_then(|_| stream.set_nonblocking(false))
            .and_then(|_| stream.set_write_timeout(Some(timeout.max(Duration::from_millis(1)))))
            .map_err(|e| ConnectError::io("configure the control socket", e))?;
        Ok(Control {
            stream,
            peer,
            buf: Vec::with_capacity(MAX_MESSAGE_LEN),
            timeout,
        })
    }

    /// A descriptor of its own for the control socket (`dup`), for a reactor to register
    /// (the `tokio` feature's `AsyncConnection`).
    pub fn try_clone_fd(&self) -> Result<std::os::fd::OwnedFd> {
        self.stream
            .try_clone()
            .map(Into::into)
            .map_err(|e| ConnectError::io("duplicate the control socket", e))
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    /// The per-step timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Sends one message.
    pub fn send(&mut self, m: &Message) -> Result<()> {
        let bytes = m.encode()?;
        tracing::debug!(target: "mlx5_connect", kind = m.kind_name(), generation = m.generation(), peer = %self.peer, "send");
        self.stream.write_all(&bytes).map_err(|e| {
            if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::TimedOut {
                ConnectError::Timeout {
                    waiting_for: "the peer to read the control connection",
                    after: self.timeout,
                }
            } else {
                ConnectError::io(format!("send {} to {}", m.kind_name(), self.peer), e)
            }
        })
    }

    /// Receives one message, waiting at most the per-step timeout.
    pub fn recv(&mut self, waiting_for: &'static str) -> Result<Message> {
        let deadline = Instant::now() + self.timeout;
        loop {
            if let Some(m) = self.take_message()? {
                return Ok(m);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ConnectError::Timeout {
                    waiting_for,
                    after: self.timeout,
                });
            }
            self.stream
                .set_read_timeout(Some(left))
                .map_err(|e| ConnectError::io("set the read timeout", e))?;
            self.fill(waiting_for)?;
        }
    }

    /// Returns a message if one has fully arrived, without waiting. `None` means the socket
    /// has nothing more now (it was read until it would block): the descriptor
    /// ([`AsFd`]) becomes readable again only when the peer sends more, so an event loop
    /// calls this on readiness until `None`, level- or edge-triggered alike.
    pub fn try_recv(&mut self) -> Result<Option<Message>> {
        if let Some(m) = self.take_message()? {
            return Ok(Some(m));
        }
        self.stream
            .set_nonblocking(true)
            .map_err(|e| ConnectError::io("poll the control connection", e))?;
        // Read until a whole message is in or the socket would block (a message may arrive
        // in pieces; reading stops at its end, so what the kernel still holds keeps the
        // descriptor readable).
        let r = loop {
            match self.fill("a control message") {
                Ok(true) => match self.take_message() {
                    Ok(None) => continue,
                    other => break other,
                },
                Ok(false) => break Ok(None),
                Err(e) => break Err(e),
            }
        };
        let restore = self.stream.set_nonblocking(false);
        let m = r?;
        restore.map_err(|e| ConnectError::io("poll the control connection", e))?;
        Ok(m)
    }

    /// Reads what is available (one read call) into the buffer, never past one message;
    /// `false` when nothing was there (the read would block or timed out).
    fn fill(&mut self, waiting_for: &'static str) -> Result<bool> {
        let need = if self.buf.len() < HEADER_LEN {
            HEADER_LEN
        } else {
            Message::frame_len(&self.buf)?
        };
        let have = self.buf.len();
        let mut chunk = [0u8; MAX_MESSAGE_LEN];
        let want = need.saturating_sub(have).min(MAX_MESSAGE_LEN);
        match self.stream.read(&mut chunk[..want]) {
            Ok(0) => Err(ConnectError::PeerClosed { waiting_for }),
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                Ok(true)
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::TimedOut => {
                Ok(false)
            }
            // Interrupted by a signal: read again.
            Err(e) if e.kind() == ErrorKind::Interrupted => Ok(true),
            Err(e) => Err(ConnectError::io(format!("read from {}", self.peer), e)),
        }
    }

    /// A complete message from the buffer, if there is one; garbage is an error as soon as
    /// the header is in.
    fn take_message(&mut self) -> Result<Option<Message>> {
        if self.buf.len() < HEADER_LEN {
            return Ok(None);
        }
        let len = Message::frame_len(&self.buf)?;
        if self.buf.len() < len {
            return Ok(None);
        }
        let m = Message::decode(&self.buf[..len])?;
        self.buf.drain(..len);
        tracing::debug!(target: "mlx5_connect", kind = m.kind_name(), generation = m.generation(), peer = %self.peer, "received");
        Ok(Some(m))
    }
}

/// The control socket: readable when the peer sent something (a rebuild request, an abort,
/// its goodbye) or closed the connection. Sleep on it with `poll(2)`, epoll or a reactor
/// together with the completion channel's and the device's event fds (one wait for
/// everything), then call [`Control::try_recv`] (or `Connection::poll_control`) until it
/// returns `None`. Only this `Control` reads it.
impl AsFd for Control {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.stream.as_fd()
    }
}

impl AsRawFd for Control {
    fn as_raw_fd(&self) -> RawFd {
        self.stream.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::AbortCode;

    fn pair() -> (Control, Control) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let t = std::thread::spawn(move || Control::connect(addr, Duration::from_secs(5)).unwrap());
        let s = Control::accept(&l, Duration::from_secs(5)).unwrap();
        (s, t.join().unwrap())
    }

    #[test]
    fn messages_cross_in_both_directions() {
        let (mut a, mut b) = pair();
        let m = Message::Abort {
            generation: 5,
            code: AbortCode::Shutdown,
        };
        a.send(&m).unwrap();
        assert_eq!(b.recv("test").unwrap(), m);
        assert_eq!(b.try_recv().unwrap(), None);
        b.send(&m).unwrap();
        b.send(&m).unwrap();
        assert_eq!(a.recv("test").unwrap(), m);
        assert_eq!(a.recv("test").unwrap(), m);
    }

    #[test]
    fn try_recv_takes_a_whole_message_in_one_call_and_none_means_nothing_is_left() {
        let (mut a, mut b) = pair();
        let m = Message::Abort {
            generation: 3,
            code: AbortCode::Shutdown,
        };
        let bytes = m.encode().unwrap();
        // In two pieces, the second a moment later: the first call sees half a message and
        // nothing more to read.
        b.stream.write_all(&bytes[..5]).unwrap();
        let fd = [a.as_raw_fd()];
        assert_eq!(wait_any(&fd), [0]);
        assert_eq!(a.try_recv().unwrap(), None);
        assert!(
            mlx5_hw::device::wait_any_readable(&fd, Duration::ZERO)
                .unwrap()
                .is_empty(),
            "None: the socket was read to the end"
        );
        b.stream.write_all(&bytes[5..]).unwrap();
        assert_eq!(wait_any(&fd), [0]);
        assert_eq!(a.try_recv().unwrap(), Some(m));
        // Two whole messages: one call each, the descriptor readable until both are taken.
        b.send(&m).unwrap();
        b.send(&m).unwrap();
        assert_eq!(wait_any(&fd), [0]);
        assert_eq!(a.try_recv().unwrap(), Some(m));
        assert_eq!(a.try_recv().unwrap(), Some(m));
        assert_eq!(a.try_recv().unwrap(), None);
    }

    fn wait_any(fds: &[RawFd]) -> Vec<usize> {
        mlx5_hw::device::wait_any_readable(fds, Duration::from_secs(10)).unwrap()
    }

    #[test]
    fn recv_times_out_and_reports_closure() {
        let (mut a, b) = pair();
        a.timeout = Duration::from_millis(30);
        assert!(matches!(
            a.recv("nothing"),
            Err(ConnectError::Timeout {
                waiting_for: "nothing",
                ..
            })
        ));
        drop(b);
        assert!(matches!(
            a.recv("more"),
            Err(ConnectError::PeerClosed {
                waiting_for: "more"
            })
        ));
    }

    #[test]
    fn garbage_is_refused_at_the_header() {
        let (mut a, mut b) = pair();
        b.stream.write_all(b"GET / HTTP/1.1\r\n").unwrap();
        assert!(matches!(
            a.recv("x"),
            Err(ConnectError::Wire(crate::wire::WireError::BadMagic { .. }))
        ));
    }

    #[test]
    fn accept_times_out() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        assert!(matches!(
            Control::accept(&l, Duration::from_millis(20)),
            Err(ConnectError::Timeout { .. })
        ));
    }
}
