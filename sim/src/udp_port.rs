//! Carrying frames between processes: a device bound to a local UDP socket, and a peer table
//! from the IPv4 address of a device in another process to the UDP address of its socket.
//!
//! Each process runs its own [`crate::Fabric`]; a frame whose destination IPv4 address belongs
//! to no device of the local fabric leaves through the sending device's socket to the peer that
//! owns the address, and the UDP payload is exactly the RoCEv2 frame bytes (Ethernet header
//! through ICRC, plus the masked-atomic trailer of [`crate::transport::ext_atomic`] when there
//! is one). Received datagrams are put on the local wire as if they came off the link. The
//! socket is non-blocking and polled by every [`crate::Fabric::step`], so this works in
//! deterministic mode (the caller steps) and threaded mode (the background thread steps).
//!
//! A peer's MAC address is the default of [`crate::DeviceConfig`] (`02:00:a:b:c:d` from its
//! IPv4 address) unless given, and its GID is the IPv4-mapped one, so `modify_qp(RTR)` and
//! `create_ah` resolve a remote GID as they resolve a local one.
//!
//! Peers by convention ([`UdpPort::set_peer_port`]): when every software ConnectX binds its
//! socket to its own IPv4 address on one agreed port, an address alone names the socket, so
//! any address missing from the table is taken to be such a device. Two programs that only
//! exchange GIDs (as `ibv_rc_pingpong` and perftest do) then reach each other with no peer
//! configured.

use std::collections::BTreeMap;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};

use crate::wire::MacAddr;

/// The largest datagram read (a 4096-byte MTU frame plus headers and trailer fits easily).
const MAX_DATAGRAM: usize = 9216;
/// Datagrams read per poll, so one busy peer cannot starve the step.
const MAX_PER_POLL: usize = 256;
/// Receive buffer asked for: the kernel default (about 208 KiB) overflows after about 64
/// full-MTU frames, which turns a deep queue or a single large message into retransmissions.
const RECV_BUFFER: libc::c_int = 4 << 20;

/// Ask for a [`RECV_BUFFER`]-byte receive buffer: `SO_RCVBUFFORCE` (honoured for
/// CAP_NET_ADMIN, e.g. root in CI) and then `SO_RCVBUF` (capped by `net.core.rmem_max`). A
/// refusal only means more loss under bursts, which the transport recovers from, so errors are
/// logged and ignored.
fn grow_receive_buffer(socket: &UdpSocket) {
    use std::os::fd::AsRawFd;
    let fd = socket.as_raw_fd();
    for opt in [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF] {
        let val = RECV_BUFFER;
        // SAFETY: `fd` is the open socket `socket` owns for the duration of this call; `val` is
        // a live c_int and the length passed is its size.
        let rc = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                &val as *const libc::c_int as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc == 0 {
            return;
        }
    }
    tracing::debug!(
        error = %io::Error::last_os_error(),
        "could not enlarge the UDP receive buffer; bursts beyond about 64 frames may be lost"
    );
}

/// A device in another process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpPeer {
    /// UDP address of its socket.
    pub addr: SocketAddr,
    /// Its port's MAC address.
    pub mac: MacAddr,
}

/// A device's UDP socket and its peers.
#[derive(Debug)]
pub struct UdpPort {
    socket: UdpSocket,
    peers: BTreeMap<Ipv4Addr, UdpPeer>,
    /// Peers by convention: an address not in `peers` is a device bound on this port.
    peer_port: Option<u16>,
}

impl std::os::fd::AsRawFd for UdpPort {
    /// The socket, for the fabric thread to sleep on.
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.socket)
    }
}

impl UdpPort {
    /// Bind a non-blocking socket.
    pub fn bind(addr: SocketAddr) -> io::Result<UdpPort> {
        let socket = UdpSocket::bind(addr)?;
        socket.set_nonblocking(true)?;
        grow_receive_buffer(&socket);
        Ok(UdpPort {
            socket,
            peers: BTreeMap::new(),
            peer_port: None,
        })
    }

    /// Take every IPv4 address missing from the peer table to be a device whose socket is bound
    /// to that address on `port` (with the default MAC derived from the address); `None` turns
    /// the convention off.
    pub fn set_peer_port(&mut self, port: Option<u16>) {
        self.peer_port = port;
    }

    /// The address the socket is bound to.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// The receive buffer the kernel granted, in bytes, as `getsockopt(SO_RCVBUF)` reports it:
    /// the limit datagrams are charged against (each at more than its size; Linux doubles the
    /// requested value for that bookkeeping, man 7 socket), after any clamp to
    /// `net.core.rmem_max`.
    pub fn recv_buffer(&self) -> io::Result<usize> {
        use std::os::fd::AsRawFd;
        let mut val: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: the socket is open for the duration of the call; `val` and `len` are live
        // and `len` is `val`'s size.
        let rc = unsafe {
            libc::getsockopt(
                self.socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                &mut val as *mut libc::c_int as *mut libc::c_void,
                &mut len,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(usize::try_from(val).unwrap_or(0))
    }

    /// Add or replace the peer owning `ip`.
    pub fn add_peer(&mut self, ip: Ipv4Addr, peer: UdpPeer) {
        self.peers.insert(ip, peer);
    }

    /// Copy the peer table (and the peer convention) into another port (rebinding keeps the
    /// peers).
    pub fn copy_peers_to(&self, other: &mut UdpPort) {
        for (ip, p) in &self.peers {
            other.peers.insert(*ip, *p);
        }
        other.peer_port = self.peer_port;
    }

    /// The peer owning `ip`: from the table, else by the convention of
    /// [`set_peer_port`](Self::set_peer_port) (never this socket's own address, nor a multicast
    /// or unspecified one).
    pub fn peer(&self, ip: Ipv4Addr) -> Option<UdpPeer> {
        if let Some(p) = self.peers.get(&ip) {
            return Some(*p);
        }
        let port = self.peer_port?;
        let own = self.socket.local_addr().ok().map(|a| a.ip());
        if ip.is_multicast() || ip.is_unspecified() || ip.is_broadcast() || own == Some(ip.into()) {
            return None;
        }
        let o = ip.octets();
        Some(UdpPeer {
            addr: SocketAddr::new(ip.into(), port),
            mac: MacAddr([0x02, 0x00, o[0], o[1], o[2], o[3]]),
        })
    }

    /// Send a frame to the peer owning `ip`; false if there is none or the send failed (a
    /// full socket buffer is a loss, as on a congested link).
    pub fn send(&self, ip: Ipv4Addr, frame: &[u8]) -> bool {
        let Some(p) = self.peer(ip) else {
            return false;
        };
        match self.socket.send_to(frame, p.addr) {
            Ok(_) => true,
            Err(e) => {
                tracing::debug!(error = %e, peer = %p.addr, "UDP send failed; frame lost");
                false
            }
        }
    }

    /// Send a frame to every peer (a multicast frame, [`crate::mcast`]); returns how many
    /// sends succeeded. A peer socket named by several addresses gets one copy.
    pub fn send_all(&self, frame: &[u8]) -> usize {
        let mut sent = std::collections::BTreeSet::new();
        for p in self.peers.values() {
            if sent.contains(&p.addr) {
                continue;
            }
            match self.socket.send_to(frame, p.addr) {
                Ok(_) => {
                    sent.insert(p.addr);
                }
                Err(e) => {
                    tracing::debug!(error = %e, peer = %p.addr, "UDP send failed; frame lost")
                }
            }
        }
        sent.len()
    }

    /// Read the datagrams waiting on the socket (at most a bounded number).
    pub fn poll(&self, out: &mut Vec<Vec<u8>>) {
        let mut buf = vec![0u8; MAX_DATAGRAM];
        for _ in 0..MAX_PER_POLL {
            match self.socket.recv_from(&mut buf) {
                Ok((n, _)) => out.push(buf[..n].to_vec()),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    // E.g. ECONNREFUSED from an ICMP port-unreachable of an earlier send.
                    tracing::debug!(error = %e, "UDP receive error");
                    if e.kind() != io::ErrorKind::ConnectionRefused
                        && e.kind() != io::ErrorKind::ConnectionReset
                    {
                        break;
                    }
                }
            }
        }
    }
}
