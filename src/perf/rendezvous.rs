//! How the software ConnectX of two processes find each other: before the endpoint exchange of
//! `mlx5_qp::connect` takes the control socket over, each side sends one fixed-size
//! [`SimHello`] on it — the IPv4 address of its software ConnectX and the UDP address its
//! RoCEv2 frames arrive at — and reads the peer's. Each process then adds the peer to its
//! device's UDP peer table (`SimDevice::add_udp_peer`), and the QPs connect as on a NIC.
//!
//! Both sides write first and then read, so neither waits for the other; the message is
//! 28 bytes, far below any socket buffer. It also carries the receive buffer the kernel gave
//! the sender's UDP socket, from which both ends compute how much the link holds at once
//! ([`UdpBudget`]). A peer that is not a software ConnectX (a verbs
//! device on the other end) sends the endpoint exchange's HELLO instead, whose first bytes are
//! not [`MAGIC`]: that is reported as such, not as a garbled message.
//!
//! [`accept`] and [`connect`] open the control socket the way the tools want it: the server
//! waits for its client as long as it takes (perftest's servers do), the client retries a
//! refused connection until the server listens or the deadline passes.

use super::error::{Error, Result};
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// The first bytes of a [`SimHello`].
pub const MAGIC: [u8; 4] = *b"MX5S";
/// The format version this build speaks.
pub const VERSION: u8 = 1;
/// Bytes of an encoded [`SimHello`]: magic, version, the UDP receive buffer in 64 KiB units
/// (0: not announced), UDP port (big-endian), device IPv4 address, UDP IP address (IPv6,
/// IPv4-mapped for IPv4).
pub const SIM_HELLO_LEN: usize = 4 + 1 + 1 + 2 + 4 + 16;
/// Unit of the receive buffer in a [`SimHello`].
const RECV_BUFFER_UNIT: u64 = 64 << 10;
/// The receive buffer assumed for a peer that does not announce its own (an older build):
/// Linux's default, `net.core.rmem_default` = 212992 bytes as `getsockopt(SO_RCVBUF)` reports
/// it (`include/net/sock.h` `SK_RMEM_MAX`).
pub const DEFAULT_RECV_BUFFER: u64 = 212_992;
/// The share of a receive buffer the link fills at most: the rest is room for ACKs and the
/// peer's own traffic, and for the charge of a datagram being higher than [`frame_charge`]
/// estimates.
const FILL_PERCENT: u64 = 75;

/// What one RoCEv2 frame carrying `mtu` payload bytes costs in the receiving socket's buffer.
/// Linux charges a datagram its buffer's true size (`skb->truesize`): the payload plus about
/// 320 bytes of `skb_shared_info`, rounded up to a power-of-two allocation, plus about 256
/// bytes of `struct sk_buff`. Measured on loopback (Linux 6.18): 1100–1200-byte datagrams
/// cost 2304 bytes, 2200-byte ones 4352, 4200-byte ones 8456. Headers (Ethernet through ICRC,
/// about 80 bytes) are added to `mtu`, and the estimate rounds up more than the kernel does.
pub fn frame_charge(mtu: u32) -> u64 {
    let frame = u64::from(mtu.max(256)) + 128;
    (frame + 512).next_power_of_two() + 512
}

/// How much the UDP link between two processes' software ConnectX holds at once: the frames
/// that fit in the smaller of the two sockets' receive buffers. A frame a full buffer drops
/// is retransmitted only after the ACK timeout (67 ms), or never gets through, when a single
/// message alone is a larger burst than the buffer holds; so a run stays within this.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpBudget {
    /// The smaller receive buffer of the two ends, in bytes (as `SO_RCVBUF` reports it).
    pub recv_buffer: u64,
    /// The path MTU.
    pub mtu: u32,
}

impl UdpBudget {
    /// The budget of a link whose ends have these receive buffers (`None`: not known, taken
    /// as [`DEFAULT_RECV_BUFFER`]) and path MTU.
    pub fn new(local: Option<u64>, peer: Option<u64>, mtu: u32) -> UdpBudget {
        let b = |v: Option<u64>| v.filter(|&v| v > 0).unwrap_or(DEFAULT_RECV_BUFFER);
        UdpBudget {
            recv_buffer: b(local).min(b(peer)),
            mtu,
        }
    }

    /// Frames in flight at most (at least 1).
    pub fn frames(&self) -> u64 {
        (self.recv_buffer * FILL_PERCENT / 100 / frame_charge(self.mtu)).max(1)
    }

    /// The largest message the link carries reliably: all its frames in flight at once.
    pub fn max_message(&self) -> u64 {
        self.frames() * u64::from(self.mtu.max(256))
    }
}

impl std::fmt::Display for UdpBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} frames of {} bytes in flight ({} KiB UDP receive buffer)",
            self.frames(),
            self.mtu,
            self.recv_buffer >> 10
        )
    }
}

/// The message `sizes` a run can do: all of them when there is no UDP link (`budget` is
/// `None`), else those the link holds at once, with a note for the user when some are left
/// out; an error naming the buffer and how to grow it when none is left.
pub fn sizes_for_udp_link(
    sizes: &[u64],
    budget: Option<&UdpBudget>,
) -> Result<(Vec<u64>, Option<String>)> {
    let Some(b) = budget else {
        return Ok((sizes.to_vec(), None));
    };
    let max = b.max_message();
    let ok: Vec<u64> = sizes.iter().copied().filter(|&s| s <= max).collect();
    if ok.is_empty() {
        return Err(Error::Usage(format!(
            "-s {}: between two processes the software ConnectX carries messages of at most \
             {max} bytes: the link holds {b}. The kernel grants a larger buffer up to \
             net.core.rmem_max (or to root: the software ConnectX asks for 4 MiB); raise it \
             with `sysctl -w net.core.rmem_max=4194304`, use a smaller -s, or --loopback",
            sizes.iter().max().copied().unwrap_or(0)
        )));
    }
    let note = (ok.len() < sizes.len()).then(|| {
        format!(
            " note: sizes above {max} bytes skipped: the UDP link between the processes holds {b}"
        )
    });
    Ok((ok, note))
}

/// How often [`connect`] retries a refused connection.
const RETRY_EVERY: Duration = Duration::from_millis(5);

/// What one software ConnectX tells the other over the control socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimHello {
    /// The IPv4 address of the device (its GID is the IPv4-mapped one).
    pub ipv4: Ipv4Addr,
    /// The UDP address the device's frames arrive at.
    pub udp: SocketAddr,
    /// The receive buffer of that UDP socket, in bytes, if known. On the wire in 64 KiB units,
    /// rounded down, at most 255 units (about 16 MiB).
    pub recv_buffer: Option<u64>,
}

impl SimHello {
    /// The wire form.
    pub fn encode(&self) -> [u8; SIM_HELLO_LEN] {
        let mut b = [0u8; SIM_HELLO_LEN];
        b[..4].copy_from_slice(&MAGIC);
        b[4] = VERSION;
        b[5] = self
            .recv_buffer
            .map_or(0, |v| (v / RECV_BUFFER_UNIT).min(255) as u8);
        b[6..8].copy_from_slice(&self.udp.port().to_be_bytes());
        b[8..12].copy_from_slice(&self.ipv4.octets());
        let ip = match self.udp.ip() {
            IpAddr::V4(v4) => v4.to_ipv6_mapped(),
            IpAddr::V6(v6) => v6,
        };
        b[12..].copy_from_slice(&ip.octets());
        b
    }

    /// Parse the wire form; `from` names the peer in the error.
    pub fn decode(b: &[u8; SIM_HELLO_LEN], from: &str) -> Result<SimHello> {
        if b[..4] != MAGIC {
            return Err(Error::Peer {
                peer: from.to_string(),
                why: "it did not announce a software ConnectX (no UDP address message): run \
                      both ends with -d sim, or both on a verbs device"
                    .into(),
            });
        }
        if b[4] != VERSION {
            return Err(Error::Peer {
                peer: from.to_string(),
                why: format!(
                    "its software ConnectX address message is version {}, this build speaks \
                     version {VERSION}: run the same build on both ends",
                    b[4]
                ),
            });
        }
        let port = u16::from_be_bytes([b[6], b[7]]);
        let ipv4 = Ipv4Addr::new(b[8], b[9], b[10], b[11]);
        let mut ip6 = [0u8; 16];
        ip6.copy_from_slice(&b[12..]);
        let ip6 = Ipv6Addr::from(ip6);
        let ip = match ip6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(ip6),
        };
        if port == 0 || ip.is_unspecified() {
            return Err(Error::Peer {
                peer: from.to_string(),
                why: format!("it announced an unusable UDP address {ip} port {port}"),
            });
        }
        Ok(SimHello {
            ipv4,
            udp: SocketAddr::new(ip, port),
            recv_buffer: (b[5] > 0).then(|| u64::from(b[5]) * RECV_BUFFER_UNIT),
        })
    }
}

impl std::fmt::Display for SimHello {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "software ConnectX {} at UDP {}", self.ipv4, self.udp)?;
        match self.recv_buffer {
            Some(b) => write!(f, " (receive buffer {} KiB)", b >> 10),
            None => Ok(()),
        }
    }
}

/// Send `me` on `stream` and read the peer's [`SimHello`], waiting at most `timeout`. Leaves
/// the stream blocking with no read timeout, as `mlx5_qp::connect::Control::from_stream`
/// expects it.
pub fn exchange(stream: &mut TcpStream, me: &SimHello, timeout: Duration) -> Result<SimHello> {
    let from = stream
        .peer_addr()
        .map_or_else(|_| "the peer".to_string(), |a| a.to_string());
    let net = |during: &str, e: std::io::Error| Error::Net {
        during: format!("{during} with {from}"),
        source: e,
    };
    let t = Some(timeout.max(Duration::from_millis(1)));
    stream
        .set_read_timeout(t)
        .and_then(|_| stream.set_write_timeout(t))
        .map_err(|e| net("configure the control socket", e))?;
    stream
        .write_all(&me.encode())
        .map_err(|e| net("send the software ConnectX address", e))?;
    let mut b = [0u8; SIM_HELLO_LEN];
    stream.read_exact(&mut b).map_err(|e| match e.kind() {
        ErrorKind::WouldBlock | ErrorKind::TimedOut => Error::Timeout {
            what: "the peer's software ConnectX address",
            secs: timeout.as_secs(),
        },
        ErrorKind::UnexpectedEof => Error::Peer {
            peer: from.clone(),
            why: "it closed the control connection before announcing its software ConnectX".into(),
        },
        _ => net("read the peer's software ConnectX address", e),
    })?;
    stream
        .set_read_timeout(None)
        .map_err(|e| net("configure the control socket", e))?;
    SimHello::decode(&b, &from)
}

/// Bind the server's control listener on every address, TCP `port`.
pub fn listen(port: u16) -> Result<TcpListener> {
    TcpListener::bind(("0.0.0.0", port)).map_err(|e| Error::Net {
        during: format!(
            "listen on TCP port {port} (is another server running? choose another with -p)"
        ),
        source: e,
    })
}

/// Wait for one client on `listener`, as long as it takes.
pub fn accept(listener: &TcpListener) -> Result<(TcpStream, SocketAddr)> {
    listener.set_nonblocking(false).map_err(|e| Error::Net {
        during: "configure the listener".into(),
        source: e,
    })?;
    loop {
        match listener.accept() {
            Ok(s) => return Ok(s),
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => {
                return Err(Error::Net {
                    during: "accept a client".into(),
                    source: e,
                })
            }
        }
    }
}

/// Connect to the server at `host`:`port`, retrying while it refuses (it may not listen
/// yet) for at most `timeout`.
pub fn connect(host: &str, port: u16, timeout: Duration) -> Result<(TcpStream, SocketAddr)> {
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| Error::Net {
            during: format!("resolve {host}"),
            source: e,
        })?
        .collect();
    let deadline = Instant::now() + timeout;
    loop {
        let mut last = None;
        for a in &addrs {
            let left = deadline.saturating_duration_since(Instant::now());
            match TcpStream::connect_timeout(a, left.max(Duration::from_millis(10))) {
                Ok(s) => return Ok((s, *a)),
                Err(e) => last = Some(e),
            }
        }
        let e = last.unwrap_or_else(|| std::io::Error::from(ErrorKind::NotFound));
        let retry = matches!(
            e.kind(),
            ErrorKind::ConnectionRefused | ErrorKind::Interrupted
        );
        if !retry || Instant::now() >= deadline {
            return Err(Error::Net {
                during: format!(
                    "connect to the server at {host}:{port} (is it running, with the same -p?)"
                ),
                source: e,
            });
        }
        std::thread::sleep(RETRY_EVERY);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello(udp: &str) -> SimHello {
        SimHello {
            ipv4: Ipv4Addr::new(10, 0, 0, 2),
            udp: udp.parse().unwrap(),
            recv_buffer: Some(8 << 20),
        }
    }

    #[test]
    fn frame_charge_covers_what_linux_charges() {
        // Measured charges (loopback, Linux 6.18) of frames of these MTUs plus headers.
        assert!(frame_charge(1024) >= 2304);
        assert!(frame_charge(2048) >= 4352);
        assert!(frame_charge(4096) >= 8456);
        // ... without wasting more than a third.
        assert!(frame_charge(1024) < 2304 * 4 / 3);
    }

    #[test]
    fn budget_from_the_buffers() {
        // The kernel's default buffer: about the 64 frames of 1 KiB the link was limited to.
        let small = UdpBudget::new(None, None, 1024);
        assert_eq!(small.recv_buffer, DEFAULT_RECV_BUFFER);
        assert!((56..=64).contains(&small.frames()), "{small}");
        // What the software ConnectX asks for (4 MiB, reported doubled): far more than 64.
        let big = UdpBudget::new(Some(8 << 20), Some(8 << 20), 1024);
        assert!(big.frames() > 2000, "{big}");
        assert!(big.max_message() >= 2 << 20, "{big}");
        // The smaller end decides; an end that did not say counts as the default.
        assert_eq!(
            UdpBudget::new(Some(8 << 20), Some(1 << 20), 1024).recv_buffer,
            1 << 20
        );
        assert_eq!(UdpBudget::new(Some(8 << 20), None, 1024), small);
        assert_eq!(UdpBudget::new(Some(0), Some(8 << 20), 1024), small);
        // A larger MTU: fewer, larger frames.
        let jumbo = UdpBudget::new(Some(8 << 20), Some(8 << 20), 4096);
        assert!(
            jumbo.frames() < big.frames() && jumbo.frames() > 500,
            "{jumbo}"
        );
        assert_eq!(UdpBudget::new(Some(1), Some(1), 1024).frames(), 1);
    }

    #[test]
    fn udp_link_sizes() {
        let all = [2, 1024, 65536, 1 << 20, 1 << 22];
        let (s, note) = sizes_for_udp_link(&all, None).unwrap();
        assert_eq!((s, note), (all.to_vec(), None));
        let big = UdpBudget::new(Some(8 << 20), Some(8 << 20), 1024);
        let (s, note) = sizes_for_udp_link(&all, Some(&big)).unwrap();
        assert_eq!(s, vec![2, 1024, 65536, 1 << 20]);
        let note = note.unwrap();
        assert!(
            note.contains("sizes above") && note.contains("8192 KiB"),
            "{note}"
        );
        // A clamped buffer (a non-root user under the default net.core.rmem_max).
        let small = UdpBudget::new(Some(DEFAULT_RECV_BUFFER), Some(8 << 20), 1024);
        let (s, _) = sizes_for_udp_link(&all, Some(&small)).unwrap();
        assert_eq!(s, vec![2, 1024]);
        let e = sizes_for_udp_link(&[1 << 20], Some(&small))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("208 KiB") && e.contains("net.core.rmem_max") && e.contains("--loopback"),
            "{e}"
        );
    }

    #[test]
    fn round_trips_ipv4_and_ipv6() {
        for udp in ["127.0.0.1:40001", "[::1]:5", "192.0.2.7:65535"] {
            let h = hello(udp);
            assert_eq!(SimHello::decode(&h.encode(), "t").unwrap(), h);
        }
    }

    #[test]
    fn layout_is_fixed() {
        let b = hello("127.0.0.1:4791").encode();
        assert_eq!(&b[..4], b"MX5S");
        assert_eq!(b[4], VERSION);
        assert_eq!(b[5], 128, "8 MiB in 64 KiB units");
        assert_eq!(&b[6..8], &4791u16.to_be_bytes());
        assert_eq!(&b[8..12], &[10, 0, 0, 2]);
        assert_eq!(&b[12..], &Ipv4Addr::LOCALHOST.to_ipv6_mapped().octets());
    }

    #[test]
    fn foreign_or_broken_messages_are_named() {
        let good = hello("127.0.0.1:9").encode();
        let mut not_sim = good;
        not_sim[..4].copy_from_slice(b"HELO");
        let e = SimHello::decode(&not_sim, "peer:1")
            .unwrap_err()
            .to_string();
        assert!(e.contains("peer:1") && e.contains("-d sim"), "{e}");
        let mut newer = good;
        newer[4] = VERSION + 1;
        let e = SimHello::decode(&newer, "p").unwrap_err().to_string();
        assert!(e.contains("same build"), "{e}");
        let mut no_port = good;
        no_port[6..8].copy_from_slice(&[0, 0]);
        assert!(SimHello::decode(&no_port, "p").is_err());
        // An older build leaves the buffer byte zero: not known, not zero.
        let mut older = good;
        older[5] = 0;
        assert_eq!(SimHello::decode(&older, "p").unwrap().recv_buffer, None);
        // Buffers round down to 64 KiB and saturate at 255 units.
        let odd = SimHello {
            recv_buffer: Some((3 << 16) + 5),
            ..hello("127.0.0.1:9")
        };
        assert_eq!(
            SimHello::decode(&odd.encode(), "p").unwrap().recv_buffer,
            Some(3 << 16)
        );
        let huge = SimHello {
            recv_buffer: Some(1 << 40),
            ..hello("127.0.0.1:9")
        };
        assert_eq!(
            SimHello::decode(&huge.encode(), "p").unwrap().recv_buffer,
            Some(255 << 16)
        );
    }

    #[test]
    fn both_sides_exchange_over_a_real_socket() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let (mut s, _) = accept(&l).unwrap();
            exchange(&mut s, &hello("127.0.0.1:1111"), Duration::from_secs(5)).unwrap()
        });
        let (mut c, _) = connect("127.0.0.1", port, Duration::from_secs(5)).unwrap();
        let got = exchange(&mut c, &hello("127.0.0.1:2222"), Duration::from_secs(5)).unwrap();
        assert_eq!(got.udp.port(), 1111);
        assert_eq!(server.join().unwrap().udp.port(), 2222);
    }

    #[test]
    fn a_silent_peer_times_out() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let (mut c, _) = connect("127.0.0.1", port, Duration::from_secs(5)).unwrap();
        let _held = l.accept().unwrap();
        let e = exchange(&mut c, &hello("127.0.0.1:1"), Duration::from_millis(50)).unwrap_err();
        assert!(matches!(e, Error::Timeout { .. }), "{e}");
    }
}
