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
//!
//! Multicast between processes ([`crate::mcast`]): a multicast frame goes to every peer of the
//! table, and, with the peer convention on, to the IPv4 group itself on the agreed port — real
//! IP multicast, looped back to the other processes of the host and sent on the LAN from the
//! device's address. A device whose QPs joined a group joins it too ([`UdpPort::set_groups`]:
//! one socket per group, bound to the group's address on the agreed port with `SO_REUSEADDR`
//! so every process of the host can, `IP_ADD_MEMBERSHIP` on the device's address), so
//! processes that only exchanged a group GID reach each other with no peer named. A datagram
//! that arrives on a group socket is delivered to that device only; one from a socket of the
//! same fabric (which delivered it already) or from a peer of the table (which got it
//! directly) is dropped as the copy it is.

use std::collections::{BTreeMap, BTreeSet};
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
    /// The IPv4 multicast groups joined (with the peer convention on), a socket each.
    groups: BTreeMap<Ipv4Addr, UdpSocket>,
}

/// A non-blocking socket bound to `group` on `port` with `SO_REUSEADDR` (so every process of
/// the host can bind it, and each gets a copy of every datagram, man 7 ip), joined to the group
/// on the interface of address `iface` (any when unspecified).
fn group_socket(group: Ipv4Addr, port: u16, iface: Ipv4Addr) -> io::Result<UdpSocket> {
    use std::os::fd::FromRawFd;
    // SAFETY: socket(2) with constant arguments; the result is checked.
    let fd = unsafe {
        libc::socket(
            libc::AF_INET,
            libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new socket nothing else owns; the UdpSocket closes it.
    let socket = unsafe { UdpSocket::from_raw_fd(fd) };
    let one: libc::c_int = 1;
    // SAFETY: `fd` is open (owned by `socket`); `one` is a live c_int of the length passed.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_REUSEADDR,
            &one as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let sa = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(group).to_be(),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: `fd` is open; `sa` is a live sockaddr_in of the length passed.
    let rc = unsafe {
        libc::bind(
            fd,
            &sa as *const libc::sockaddr_in as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    socket.join_multicast_v4(&group, &iface)?;
    Ok(socket)
}

/// Send multicast datagrams of `socket` from the interface of address `iface`
/// (`IP_MULTICAST_IF`, man 7 ip), looped back to the host's other sockets.
fn multicast_from(socket: &UdpSocket, iface: Ipv4Addr) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let addr = libc::in_addr {
        s_addr: u32::from(iface).to_be(),
    };
    // SAFETY: the socket is open for the call; `addr` is a live in_addr of the length passed.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_MULTICAST_IF,
            &addr as *const libc::in_addr as *const libc::c_void,
            std::mem::size_of::<libc::in_addr>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    socket.set_multicast_loop_v4(true)
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
            groups: BTreeMap::new(),
        })
    }

    /// The address of this socket's interface (unspecified when bound to any).
    fn iface(&self) -> Ipv4Addr {
        match self.socket.local_addr() {
            Ok(SocketAddr::V4(a)) => *a.ip(),
            _ => Ipv4Addr::UNSPECIFIED,
        }
    }

    /// Be a member of exactly these IPv4 multicast groups (the groups the device's QPs
    /// joined), when the peer convention is on: join the new ones, leave the others. A group
    /// that cannot be joined is logged; the device's own QPs still get its frames.
    pub fn set_groups(&mut self, want: &BTreeSet<Ipv4Addr>) {
        let Some(port) = self.peer_port else {
            self.groups.clear();
            return;
        };
        self.groups.retain(|g, _| want.contains(g));
        let iface = self.iface();
        for g in want {
            if self.groups.contains_key(g) {
                continue;
            }
            match group_socket(*g, port, iface) {
                Ok(s) => {
                    self.groups.insert(*g, s);
                }
                Err(e) => tracing::warn!(group = %g, error = %e,
                    "cannot join the IP multicast group; the group's datagrams from other processes will not arrive"),
            }
        }
    }

    /// The groups joined ([`set_groups`](Self::set_groups)).
    pub fn groups(&self) -> impl Iterator<Item = Ipv4Addr> + '_ {
        self.groups.keys().copied()
    }

    /// The sockets the fabric thread sleeps on: the device's, then each group's.
    pub fn raw_fds(&self) -> impl Iterator<Item = std::os::fd::RawFd> + '_ {
        use std::os::fd::AsRawFd;
        std::iter::once(self.socket.as_raw_fd()).chain(self.groups.values().map(|s| s.as_raw_fd()))
    }

    /// Take every IPv4 address missing from the peer table to be a device whose socket is bound
    /// to that address on `port` (with the default MAC derived from the address); `None` turns
    /// the convention off.
    pub fn set_peer_port(&mut self, port: Option<u16>) {
        self.peer_port = port;
        if port.is_some() {
            let iface = self.iface();
            if !iface.is_unspecified() {
                if let Err(e) = multicast_from(&self.socket, iface) {
                    tracing::warn!(error = %e, %iface, "cannot send IP multicast from the device's address");
                }
            }
        } else {
            self.groups.clear();
        }
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
        other.set_peer_port(self.peer_port);
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

    /// Send a multicast frame for IPv4 group `group` ([`crate::mcast`]): to every peer of the
    /// table ([`send_all`](Self::send_all)) and, with the peer convention on, to the group on
    /// the agreed port (every process that joined it, [`set_groups`](Self::set_groups)).
    pub fn send_multicast(&self, group: Ipv4Addr, frame: &[u8]) {
        self.send_all(frame);
        if let Some(port) = self.peer_port {
            if let Err(e) = self
                .socket
                .send_to(frame, SocketAddr::new(group.into(), port))
            {
                tracing::debug!(error = %e, %group, "UDP multicast send failed; frame lost");
            }
        }
    }

    /// Send a frame to every peer of the table; returns how many sends succeeded. A peer
    /// socket named by several addresses gets one copy.
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

    /// Read the datagrams waiting on the group sockets (at most a bounded number each), with
    /// the address of the socket that sent each; a datagram from a peer of the table is
    /// dropped (that peer sent this device its own copy, [`send_all`](Self::send_all)).
    pub fn poll_groups(&self, out: &mut Vec<(SocketAddr, Vec<u8>)>) {
        if self.groups.is_empty() {
            return;
        }
        let mut buf = vec![0u8; MAX_DATAGRAM];
        for s in self.groups.values() {
            for _ in 0..MAX_PER_POLL {
                match s.recv_from(&mut buf) {
                    Ok((n, from)) => {
                        if !self.peers.values().any(|p| p.addr == from) {
                            out.push((from, buf[..n].to_vec()));
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => {
                        tracing::debug!(error = %e, "UDP multicast receive error");
                        break;
                    }
                }
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Read the group sockets until something comes (the loopback is immediate, but not
    /// synchronous with the send).
    fn wait_groups(p: &UdpPort) -> Vec<(SocketAddr, Vec<u8>)> {
        let mut got = Vec::new();
        for _ in 0..200 {
            p.poll_groups(&mut got);
            if !got.is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        got
    }

    #[test]
    fn a_group_reaches_every_member_on_the_host_and_no_one_else() {
        // Addresses and a group of this run, so parallel runs do not meet.
        let pid = std::process::id();
        let (hi, lo) = ((pid >> 8) as u8, pid as u8);
        let group = Ipv4Addr::new(239, 78, hi, lo);
        let mut a = UdpPort::bind(SocketAddr::new(Ipv4Addr::new(127, 78, hi, lo).into(), 0))
            .expect("bind a");
        let port = a.local_addr().unwrap().port();
        let ip_b = Ipv4Addr::new(127, 79, hi, lo);
        let Ok(mut b) = UdpPort::bind(SocketAddr::new(ip_b.into(), port)) else {
            return; // The port is taken on that address: nothing to learn here.
        };
        a.set_peer_port(Some(port));
        b.set_peer_port(Some(port));
        let want = BTreeSet::from([group]);
        b.set_groups(&want);
        assert_eq!(b.groups().collect::<Vec<_>>(), [group]);
        a.send_multicast(group, b"frame one");
        let got = wait_groups(&b);
        assert_eq!(got, [(a.local_addr().unwrap(), b"frame one".to_vec())]);
        // A member's own datagrams loop back to its group socket (the world drops them).
        b.send_multicast(group, b"frame two");
        assert_eq!(wait_groups(&b)[0].0, b.local_addr().unwrap());
        // Peers of each other's table: the copy sent directly arrives, the group copy is
        // dropped.
        a.add_peer(
            ip_b,
            UdpPeer {
                addr: b.local_addr().unwrap(),
                mac: MacAddr([2, 0, 127, 79, hi, lo]),
            },
        );
        b.add_peer(
            Ipv4Addr::new(127, 78, hi, lo),
            UdpPeer {
                addr: a.local_addr().unwrap(),
                mac: MacAddr([2, 0, 127, 78, hi, lo]),
            },
        );
        a.send_multicast(group, b"frame three");
        std::thread::sleep(std::time::Duration::from_millis(50));
        let mut got = Vec::new();
        b.poll_groups(&mut got);
        assert!(got.is_empty(), "{got:?}");
        let mut direct = Vec::new();
        b.poll(&mut direct);
        assert_eq!(
            direct,
            [b"frame three".to_vec()],
            "sent to the peer directly"
        );
        // Leaving: no socket, nothing arrives.
        b.set_groups(&BTreeSet::new());
        assert_eq!(b.groups().count(), 0);
        assert_eq!(b.raw_fds().count(), 1);
        // Without the convention no group is joined.
        b.set_peer_port(None);
        b.set_groups(&want);
        assert_eq!(b.groups().count(), 0);
    }
}
