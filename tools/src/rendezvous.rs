//! The control connection between a server and its client, and how much the UDP link between
//! two processes' software ConnectX holds. Every control connection starts with the greeting
//! ([`greet`]): perftest's 16-byte version field (`exchange_versions`, perftest
//! `src/perftest_communication.c`), which these tools mark as theirs after its NUL. So a server
//! learns from its client's first bytes, and a client from the reply, whether the peer is stock
//! perftest ([`Rendezvous::first`]: the run goes on with perftest's exchange,
//! `crate::perftest`) or another of these tools: then both swap a hello (`super::hello`): the
//! run each was started for, and a software ConnectX's UDP address and receive buffer, from
//! which both ends compute how much the link holds at once ([`UdpBudget`]), before the endpoint
//! exchange of `mlx5_connect` takes the control socket over.
//!
//! [`accept`] and [`connect`] open the control socket the way the tools want it: the server
//! waits for its client as long as it takes (perftest's servers do), the client retries a
//! refused connection until the server listens or the deadline passes; [`Rendezvous`] does
//! both, greets and swaps the hello.

use super::error::{Error, Result};
use crate::devices::Devices;
use crate::hello::{self, Hello, RunShape, SimHello};
use crate::perftest::wire;
use mlx5_connect::{Control, Endpoint};
use mlx5_sim::SimDevice;
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

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

/// How the control connection is made: perftest's `--ipv6-addr` and `--bind_source_ip`
/// (perftest `src/perftest_communication.c`, `ethernet_server_connect` and
/// `ethernet_client_connect`: the address family of `getaddrinfo`'s hints, and the source
/// address the client binds before it connects and the server listens on).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ControlNet {
    /// IPv6 (`--ipv6-addr`); else IPv4, as perftest.
    pub ipv6: bool,
    /// The address on this host (`--bind_source_ip`): the client's source, the server's only
    /// listening address.
    pub source: Option<IpAddr>,
}

impl ControlNet {
    /// Whether `a` is of the family this connection uses.
    fn family_of(&self, a: &SocketAddr) -> bool {
        a.is_ipv6() == self.ipv6
    }

    fn family(&self) -> &'static str {
        if self.ipv6 {
            "IPv6"
        } else {
            "IPv4"
        }
    }
}

/// Bind the server's control listener on every IPv4 address, TCP `port`.
pub fn listen(port: u16) -> Result<TcpListener> {
    listen_on(port, ControlNet::default())
}

/// Bind the server's control listener on TCP `port`: on `net.source` when given, else on every
/// address of the family (`::` for IPv6, which Linux also lets IPv4 clients reach unless
/// `net.ipv6.bindv6only` is set).
pub fn listen_on(port: u16, net: ControlNet) -> Result<TcpListener> {
    let ip = net.source.unwrap_or(if net.ipv6 {
        IpAddr::V6(Ipv6Addr::UNSPECIFIED)
    } else {
        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
    });
    TcpListener::bind((ip, port)).map_err(|e| match net.source {
        // A command line this machine cannot do (exit status 2), found before any traffic.
        Some(s) if e.kind() == ErrorKind::AddrNotAvailable => Error::Usage(format!(
            "--bind_source_ip {s}: no interface of this host has that address ({e})"
        )),
        _ => Error::Net {
            during: format!(
                "listen on {} TCP port {port} (is another server running? choose another with \
                 -p)",
                SocketAddr::new(ip, port)
            ),
            source: e,
        },
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
    connect_with(host, port, timeout, ControlNet::default())
}

/// [`connect`] over the family `net` names (the server's addresses of the other family are
/// not tried, as perftest's `getaddrinfo` hints), from `net.source` when given.
pub fn connect_with(
    host: &str,
    port: u16,
    timeout: Duration,
    net: ControlNet,
) -> Result<(TcpStream, SocketAddr)> {
    let all: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| Error::Net {
            during: format!("resolve {host}"),
            source: e,
        })?
        .collect();
    let addrs: Vec<SocketAddr> = all.iter().copied().filter(|a| net.family_of(a)).collect();
    if addrs.is_empty() {
        let other = if net.ipv6 {
            "leave out --ipv6-addr"
        } else {
            "add --ipv6-addr"
        };
        return Err(Error::Usage(format!(
            "{host} has no {} address (it resolves to {}): the control connection is {}; {other}",
            net.family(),
            all.iter()
                .map(|a| a.ip().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            net.family()
        )));
    }
    let deadline = Instant::now() + timeout;
    loop {
        let mut last = None;
        for a in &addrs {
            let left = deadline.saturating_duration_since(Instant::now());
            match connect_one(a, left.max(Duration::from_millis(10)), net.source) {
                Ok(s) => return Ok((s, *a)),
                Err(ConnectFailure::Bind(e)) => {
                    return Err(Error::Usage(format!(
                        "--bind_source_ip {}: the control connection cannot start from that \
                         address ({e}; is it an address of this host?)",
                        net.source.map(|s| s.to_string()).unwrap_or_default()
                    )))
                }
                Err(ConnectFailure::Connect(e)) => last = Some(e),
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

/// Why [`connect_one`] failed: the source address could not be bound (no retry helps), or
/// the connect.
enum ConnectFailure {
    Bind(std::io::Error),
    Connect(std::io::Error),
}

/// One TCP connect to `a` within `timeout`, from `source` (port chosen by the kernel) when
/// given: a socket bound before it connects (`socket2`; the standard library binds only as
/// it connects).
fn connect_one(
    a: &SocketAddr,
    timeout: Duration,
    source: Option<IpAddr>,
) -> std::result::Result<TcpStream, ConnectFailure> {
    let Some(src) = source else {
        return TcpStream::connect_timeout(a, timeout).map_err(ConnectFailure::Connect);
    };
    use socket2::{Domain, Protocol, Socket, Type};
    let sock = Socket::new(Domain::for_address(*a), Type::STREAM, Some(Protocol::TCP))
        .map_err(ConnectFailure::Connect)?;
    sock.bind(&SocketAddr::new(src, 0).into())
        .map_err(ConnectFailure::Bind)?;
    sock.connect_timeout(&(*a).into(), timeout)
        .map_err(ConnectFailure::Connect)?;
    Ok(sock.into())
}

/// How this process reaches its peer: the TCP control connection (the server listens, the
/// client connects), which starts with the greeting ([`greet`]) and, between two of these
/// tools, the [`Hello`]: the run each was started for, and for a software ConnectX in another
/// process, where each device's frames go.
pub struct Rendezvous {
    side: Side,
    /// A control connection already opened and greeted ([`Rendezvous::first`]), which the next
    /// [`Rendezvous::control_for`] takes instead of opening one.
    pending: std::sync::Mutex<Option<(TcpStream, SocketAddr)>>,
}

/// Which end of the control connection this process is.
pub enum Side {
    /// The server: waits for its client on this listener.
    Server(TcpListener),
    /// The client: connects to the server.
    Client {
        /// The server's host name or address.
        host: String,
        /// Its TCP port.
        port: u16,
        /// The family and source address of the connection.
        net: ControlNet,
    },
}

/// Who the peer turned out to be on the first control connection ([`Rendezvous::first`]).
pub enum FirstContact {
    /// Another of these tools: the connection waits in the rendezvous for
    /// [`Rendezvous::control_for`].
    Ours,
    /// Stock perftest (or these tools with `--perftest`): its version has been read; the run
    /// goes on with perftest's exchange on this session.
    Perftest(crate::perftest::Session),
}

/// Bytes of the greeting: perftest's version field (`exchange_versions`, 16 bytes).
pub const GREETING_LEN: usize = wire::VERSION_LEN;

/// The greeting this side sends: perftest's version field holding [`wire::OUR_VERSION`], and
/// unless `plain` (`--perftest`) these tools' mark after its NUL: `MX5S` and the hello's
/// version. perftest reads the field as a string (`atof`) and never sees the mark.
pub fn greeting(plain: bool) -> [u8; GREETING_LEN] {
    let mut b = wire::encode_version(wire::OUR_VERSION);
    if !plain {
        let at = wire::OUR_VERSION.len() + 1;
        b[at..at + 4].copy_from_slice(&hello::MAGIC);
        b[at + 4] = hello::VERSION;
    }
    b
}

/// Who sent greeting `b`: these tools (the mark after the version's NUL), perftest (a
/// version alone), or neither (why, in the error).
pub fn read_greeting(b: &[u8; GREETING_LEN]) -> std::result::Result<Greeted, String> {
    if b[..4] == hello::MAGIC {
        return Err(format!(
            "it is an older build of lat/bw (its first bytes are the version {} hello, without \
             the perftest version field every control connection now starts with): run the \
             same build on both ends",
            b[4]
        ));
    }
    let v = wire::decode_version(b)?;
    let nul = v.text.len();
    Ok(if b.get(nul + 1..nul + 5) == Some(&hello::MAGIC[..]) {
        Greeted::Ours
    } else {
        Greeted::Perftest(v)
    })
}

/// What a greeting said.
#[derive(Clone, Debug, PartialEq)]
pub enum Greeted {
    /// Another of these tools.
    Ours,
    /// perftest, of this version.
    Perftest(wire::PeerVersion),
}

/// The greeting on a new control connection, in the order of perftest's version exchange
/// (the client writes first, the server reads first): so a server learns who connected
/// before it says anything, and a client learns who serves from the reply. `plain`
/// (`--perftest`): send no mark, and take the peer for perftest whatever it sends.
pub fn greet(
    stream: &mut TcpStream,
    client: bool,
    plain: bool,
    timeout: Duration,
) -> Result<Greeted> {
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
    let mine = greeting(plain);
    let mut theirs = [0u8; GREETING_LEN];
    let read = |s: &mut TcpStream, b: &mut [u8; GREETING_LEN]| {
        s.read_exact(b).map_err(|e| match e.kind() {
            ErrorKind::WouldBlock | ErrorKind::TimedOut => Error::Timeout {
                what: "the peer's greeting (its first 16 bytes)",
                secs: timeout.as_secs(),
                hint: "is the peer lat/bw or perftest, started for this run, with the same -p?"
                    .into(),
            },
            ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset => Error::Peer {
                peer: from.clone(),
                why: "it closed the connection before its greeting: see its error message".into(),
            },
            _ => net("read the peer's greeting", e),
        })
    };
    if client {
        stream
            .write_all(&mine)
            .map_err(|e| net("send the greeting", e))?;
        read(stream, &mut theirs)?;
    } else {
        read(stream, &mut theirs)?;
        stream
            .write_all(&mine)
            .map_err(|e| net("send the greeting", e))?;
    }
    let g = read_greeting(&theirs).map_err(|why| Error::Peer {
        peer: from.clone(),
        why,
    })?;
    Ok(match g {
        Greeted::Ours if plain => {
            Greeted::Perftest(wire::decode_version(&theirs).map_err(|why| Error::Peer {
                peer: from.clone(),
                why,
            })?)
        }
        g => g,
    })
}

/// The UDP path between the software ConnectX of two processes, as agreed on the control
/// socket.
#[derive(Clone, Copy, Debug)]
pub struct UdpLink {
    /// This process's device.
    pub local: SimHello,
    /// The peer's.
    pub peer: SimHello,
}

impl UdpLink {
    /// What the link holds at once with path MTU `mtu`: the frames that fit in the smaller of
    /// the two ends' UDP receive buffers.
    pub fn budget(&self, mtu: u32) -> UdpBudget {
        UdpBudget::new(self.local.recv_buffer, self.peer.recv_buffer, mtu)
    }
}

impl std::fmt::Display for UdpLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ⇄ peer {}", self.local, self.peer)
    }
}

/// One control connection to the peer, opened by [`Rendezvous::control_for`]: the control
/// channel `mlx5_connect` connects a QP over, and a second handle on the same socket for the
/// results a bidirectional run swaps at its end ([`crate::results`]), which travel only when
/// the connection's own protocol is idle.
pub struct Opened {
    /// The control channel.
    pub control: Control,
    /// The UDP link, when this opened it (software ConnectX across processes).
    pub udp: Option<UdpLink>,
    /// The same socket, for [`crate::results`].
    pub stream: TcpStream,
}

impl Rendezvous {
    /// The server (`server` is `None`) binds TCP `port` on every address; the client will
    /// connect to `server`:`port`.
    pub fn new(server: Option<&str>, port: u16) -> Result<Rendezvous> {
        Rendezvous::with_net(server, port, ControlNet::default())
    }

    /// [`Rendezvous::new`] over the family and from the source address `net` names
    /// (`--ipv6-addr`, `--bind_source_ip`).
    pub fn with_net(server: Option<&str>, port: u16, net: ControlNet) -> Result<Rendezvous> {
        Ok(match server {
            None => Rendezvous::server(listen_on(port, net)?),
            Some(h) => {
                let mut rv = Rendezvous::client(h, port);
                if let Side::Client { net: n, .. } = &mut rv.side {
                    *n = net;
                }
                rv
            }
        })
    }

    /// The server on `listener`.
    pub fn server(listener: TcpListener) -> Rendezvous {
        Rendezvous {
            side: Side::Server(listener),
            pending: std::sync::Mutex::new(None),
        }
    }

    /// The client of the server at `host`:`port`.
    pub fn client(host: &str, port: u16) -> Rendezvous {
        Rendezvous {
            side: Side::Client {
                host: host.to_string(),
                port,
                net: ControlNet::default(),
            },
            pending: std::sync::Mutex::new(None),
        }
    }

    /// Whether this side is the client.
    pub fn is_client(&self) -> bool {
        matches!(self.side, Side::Client { .. })
    }

    /// The TCP port the server listens on (the one it picked for `-p 0`).
    pub fn port(&self) -> Option<u16> {
        match &self.side {
            Side::Server(l) => l.local_addr().ok().map(|a| a.port()),
            Side::Client { port, .. } => Some(*port),
        }
    }

    /// Open a control connection (the server waits for its client as long as it takes; the
    /// client retries for `timeout` while the server does not listen yet) and greet the peer.
    fn open(&self, timeout: Duration, plain: bool) -> Result<(TcpStream, SocketAddr, Greeted)> {
        let (mut stream, peer) = match &self.side {
            Side::Server(l) => accept(l)?,
            Side::Client { host, port, net } => connect_with(host, *port, timeout, *net)?,
        };
        let g = greet(&mut stream, self.is_client(), plain, timeout)?;
        Ok((stream, peer, g))
    }

    /// Open a connection with nothing said on it (the server waits for its client as long as
    /// it takes; the client retries for `timeout` while the server does not listen yet): for
    /// another program's exchange (`ibv_rc_pingpong`'s, `crate::ibv_exchange`).
    pub fn open_raw(&self, timeout: Duration) -> Result<(TcpStream, SocketAddr)> {
        match &self.side {
            Side::Server(l) => accept(l),
            Side::Client { host, port, net } => connect_with(host, *port, timeout, *net),
        }
    }

    /// Open the first control connection without a greeting, for perftest's exchange
    /// without versions (`--dont_xchg_versions`).
    pub fn first_raw(&self, timeout: Duration) -> Result<FirstContact> {
        let (stream, _) = self.open_raw(timeout)?;
        Ok(FirstContact::Perftest(crate::perftest::Session::new(
            stream,
            self.is_client(),
        )))
    }

    /// Open the first control connection and greet the peer: another of these tools (the
    /// connection is kept for the next [`Rendezvous::control_for`]) or perftest (`plain`,
    /// `--perftest`: perftest's exchange whoever the peer is).
    pub fn first(&self, timeout: Duration, plain: bool) -> Result<FirstContact> {
        let (stream, peer, g) = self.open(timeout, plain)?;
        match g {
            Greeted::Ours => {
                *self.pending.lock().unwrap_or_else(|e| e.into_inner()) = Some((stream, peer));
                Ok(FirstContact::Ours)
            }
            Greeted::Perftest(v) => {
                let mut s = crate::perftest::Session::new(stream, self.is_client());
                s.peer_version = Some(v);
                Ok(FirstContact::Perftest(s))
            }
        }
    }

    /// Open one control connection (the server waits for its client as long as it takes; the
    /// client retries for `timeout` while the server does not listen yet). On a software
    /// ConnectX that talks to another process, bind its UDP socket on the address the control
    /// connection uses (the first time) and swap UDP addresses with the peer first.
    pub fn control(&self, devs: &Devices, timeout: Duration) -> Result<(Control, Option<UdpLink>)> {
        let o = self.control_for(devs, timeout, None)?;
        Ok((o.control, o.udp))
    }

    /// [`Rendezvous::control`] for a run of this `shape` (`lat`, `bw`): the peer must have
    /// been started for the same run, else both ends stop here, each naming both values
    /// ([`Hello::check_peer`]). With a shape the hello is swapped on every device, not only
    /// on a software ConnectX.
    pub fn control_for(
        &self,
        devs: &Devices,
        timeout: Duration,
        shape: Option<&RunShape>,
    ) -> Result<Opened> {
        let pending = self
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let (mut stream, peer) = match pending {
            Some(p) => p,
            None => match self.open(timeout, false)? {
                (s, a, Greeted::Ours) => (s, a),
                (_, a, Greeted::Perftest(v)) => {
                    return Err(Error::Peer {
                        peer: a.to_string(),
                        why: format!(
                            "it is stock perftest (version {v}), and this program speaks only \
                             its own exchange to it"
                        ),
                    })
                }
            },
        };
        let sim = match (devs.sim(), devs.peer.is_none() && !devs.on_tap()) {
            (Some(sim), true) => Some((sim, bind_udp(devs, sim, &stream)?)),
            _ => None,
        };
        let me = Hello {
            sim: sim.map(|(_, s)| s),
            shape: shape.copied(),
        };
        let mut link = None;
        if me.sim.is_some() || me.shape.is_some() {
            let theirs = hello::exchange(&mut stream, &me, timeout)?;
            me.check_peer(&theirs, self.is_client(), &peer.to_string())?;
            if let (Some((dev, local)), Some(remote)) = (sim, theirs.sim) {
                dev.add_udp_peer(remote.ipv4.octets(), remote.udp)
                    .map_err(|e| Error::Net {
                        during: "add the peer's UDP address".into(),
                        source: e,
                    })?;
                tracing::info!(
                    %local,
                    peer = %remote,
                    "software ConnectX linked to the peer process over UDP"
                );
                link = Some(UdpLink {
                    local,
                    peer: remote,
                });
            }
        }
        let second = stream.try_clone().map_err(|e| Error::Net {
            during: "a second handle on the control connection".into(),
            source: e,
        })?;
        Ok(Opened {
            control: Control::from_stream(stream, peer, timeout)?,
            udp: link,
            stream: second,
        })
    }
}

/// Bind the device's UDP socket (once) on the control connection's local address; what this
/// side's hello says about it.
fn bind_udp(devs: &Devices, sim: &SimDevice, stream: &TcpStream) -> Result<SimHello> {
    let net = |during: &str, source| Error::Net {
        during: during.to_string(),
        source,
    };
    let udp = match devs.udp.get() {
        Some(a) => *a,
        None => {
            let ip = stream
                .local_addr()
                .map_err(|e| net("the control connection's local address", e))?
                .ip();
            let a = sim
                .bind_udp(SocketAddr::new(ip, 0))
                .map_err(|e| net("bind the software ConnectX to UDP", e))?;
            *devs.udp.get_or_init(|| a)
        }
    };
    Ok(SimHello {
        ipv4: sim.ipv4(),
        udp,
        recv_buffer: sim.udp_recv_buffer().map(|b| b as u64),
    })
}

/// How a banner names one end of a connection: `QPN 0x000011 PSN 0xa21b53`, and the GID the
/// path uses when it has one (RoCE), e.g. `GID ::ffff:192.0.2.1`.
pub fn describe_endpoint(e: &Endpoint) -> String {
    let mut s = format!("QPN {:#08x} PSN {:#08x}", e.qpn, e.psn);
    if e.gid != mlx5_hw::Gid::default() {
        s.push_str(&format!(" GID {}", std::net::Ipv6Addr::from(e.gid.0)));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn greetings_tell_these_tools_from_perftest() {
        let ours = greeting(false);
        assert_eq!(&ours[..5], b"6.29\0", "perftest reads a version");
        assert_eq!(read_greeting(&ours), Ok(Greeted::Ours));
        let plain = greeting(true);
        assert!(matches!(read_greeting(&plain), Ok(Greeted::Perftest(v)) if v.text == "6.29"));
        let stock = wire::encode_version("6.06");
        assert!(matches!(read_greeting(&stock), Ok(Greeted::Perftest(v)) if v.value == 6.06));
        // An older build of these tools starts with its hello.
        let mut old = [0u8; GREETING_LEN];
        old[..5].copy_from_slice(b"MX5S\x03");
        assert!(read_greeting(&old).unwrap_err().contains("older build"));
        let http = *b"GET / HTTP/1.1\r\n";
        assert!(read_greeting(&http)
            .unwrap_err()
            .contains("no perftest version"));
        // Over a socket: both ends greet; --perftest takes any peer for perftest.
        for (plain_client, want) in [(false, true), (true, false)] {
            let l = listen(0).unwrap();
            let port = l.local_addr().unwrap().port();
            let server = std::thread::spawn(move || {
                let (mut s, _) = accept(&l).unwrap();
                greet(&mut s, false, false, Duration::from_secs(5)).unwrap()
            });
            let (mut c, _) = connect("127.0.0.1", port, Duration::from_secs(5)).unwrap();
            let g = greet(&mut c, true, plain_client, Duration::from_secs(5)).unwrap();
            assert_eq!(g == Greeted::Ours, want);
            assert_eq!(server.join().unwrap() == Greeted::Ours, want);
        }
    }

    #[test]
    fn the_client_finds_the_server() {
        let l = listen(0).unwrap();
        let port = l.local_addr().unwrap().port();
        let server = std::thread::spawn(move || accept(&l).unwrap().1);
        let (c, at) = connect("127.0.0.1", port, Duration::from_secs(5)).unwrap();
        assert_eq!(at.port(), port);
        assert_eq!(server.join().unwrap(), c.local_addr().unwrap());
    }
}
