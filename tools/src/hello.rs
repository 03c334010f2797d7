//! The hello a server and its client swap on the control socket before the endpoint exchange of
//! `mlx5_connect` takes it over: the run each was started for ([`RunShape`]: tool, test, QP
//! count, message size, iterations), so that two ends started with different flags stop at once
//! with a message naming both values instead of timing out mid-run (perftest swaps its version
//! and some parameters at connect too: `src/perftest_communication.c` `exchange_versions`,
//! `check_sys_data`, `check_mtu`), and for a software ConnectX talking to another process, its
//! address ([`SimHello`]): the IPv4 address of the device and the UDP address its RoCEv2 frames
//! arrive at. Each process then adds the peer to its device's UDP peer table
//! (`SimDevice::add_udp_peer`), and the QPs connect as on a NIC.
//!
//! Both sides write first and then read, so neither waits for the other; the message is
//! [`HELLO_LEN`] bytes, far below any socket buffer. It also carries the receive buffer the
//! kernel gave the sender's UDP socket, from which both ends compute how much the link holds at
//! once (`rendezvous::UdpBudget`).
//!
//! Every control connection starts with the greeting (`crate::rendezvous::greet`: perftest's
//! 16-byte version field, marked as these tools'), then this hello.
//!
//! Wire format, version 4 (big-endian):
//!
//! ```text
//!  0..4   magic "MX5S"
//!  4      version (4)
//!  5      UDP receive buffer in 64 KiB units (0: not announced)
//!  6..8   UDP port                  \
//!  8..12  device IPv4 address        > the software ConnectX; zero without one
//! 12..28  UDP IP (IPv6, IPv4-mapped) /
//! 28      flags: 1 software ConnectX present, 2 run shape present, 4 bidirectional (-b),
//!         8 a duration (-D) in place of iterations, 16 --report_gbits
//! 29      tool (1 lat, 2 bw)
//! 30      test (1 write, 2 send, 3 read, 4 atomic)
//! 31      connection type (-c: 0 or 1 RC, 2 UC, 3 UD, 6 DC)
//! 32..36  QPs (-q)
//! 36..44  message size (-s; 0: every size, -a)
//! 44..52  iterations (-n), or seconds (-D) with flag 8
//! 52      atomic operation (-A: 0 none, the test is not atomic; 1 CMP_AND_SWAP;
//!         2 FETCH_AND_ADD)
//! 53..56  zero
//! 56..64  margin of a -D run in seconds (-f, or its default), 0 without -D
//! ```
//!
//! Version 4 added the atomic operation, the margin and flag 16 (what else perftest marks
//! SYMMETRIC: `-A`, `-f`, and its negotiation's report format); version 3 the atomic test, the
//! connection type and the flags 4 and 8 (version 2 had byte 31 reserved).
//!
//! Version 1 was the first 28 bytes alone, sent only by a software ConnectX. A version 1 peer
//! reads 28 bytes of this message, finds version 4 and stops with "version 4, this build speaks
//! version 1: run the same build on both ends"; this build reads the first 28 bytes before the
//! rest, so it stops on a version 1 peer at once too, and on a peer that went straight to the
//! endpoint exchange (an older build on a verbs device, whose first bytes are `mlx5_qp`'s
//! `"M5QP"`) after 4 bytes.

use super::error::{Error, Result};
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::time::Duration;

/// perftest's name of a connection type (`-c`): `DC` for a DCI sending to a DCT.
fn conn_name(t: mlx5_hw::QpType) -> &'static str {
    if t.is_dc() {
        "DC"
    } else if t.is_xrc() {
        "XRC"
    } else {
        t.name()
    }
}

/// The first bytes of a [`Hello`].
pub const MAGIC: [u8; 4] = *b"MX5S";
/// The format version this build speaks. Version 2 added the run's shape and the flags.
pub const VERSION: u8 = 4;
/// Bytes of a version 1 message, the prefix every version starts with.
pub const V1_LEN: usize = 28;
/// Bytes of an encoded [`Hello`].
pub const HELLO_LEN: usize = V1_LEN + 36;
/// The first bytes of `mlx5_connect`'s messages (`mlx5_connect::wire::MAGIC`).
const ENDPOINT_MAGIC: [u8; 4] = *b"M5QP";
/// Unit of the receive buffer in a [`SimHello`].
const RECV_BUFFER_UNIT: u64 = 64 << 10;
/// Flag: the software ConnectX fields are present.
const FLAG_SIM: u8 = 1 << 0;
/// Flag: the run's shape is present.
const FLAG_SHAPE: u8 = 1 << 1;
/// Flag: a bidirectional run.
const FLAG_BIDIR: u8 = 1 << 2;
/// Flag: the iterations field holds a duration in seconds.
const FLAG_DURATION: u8 = 1 << 3;
/// Flag: `--report_gbits`.
const FLAG_GBITS: u8 = 1 << 4;

/// What one software ConnectX tells the other: where its frames go.
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

impl std::fmt::Display for SimHello {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "software ConnectX {} at UDP {}", self.ipv4, self.udp)?;
        match self.recv_buffer {
            Some(b) => write!(f, " (receive buffer {} KiB)", b >> 10),
            None => Ok(()),
        }
    }
}

/// Which tool a run is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tool {
    /// `lat`.
    Lat,
    /// `bw`.
    Bw,
}

/// Which test a run is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TestKind {
    /// RDMA WRITE.
    Write,
    /// SEND/RECV.
    Send,
    /// RDMA READ.
    Read,
    /// Atomic compare-and-swap or fetch-and-add.
    Atomic,
}

/// The atomic operation of an atomic test (`-A`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicOp {
    /// Compare and swap.
    CmpAndSwap,
    /// Fetch and add.
    FetchAndAdd,
}

impl AtomicOp {
    /// perftest's name.
    pub fn name(self) -> &'static str {
        match self {
            AtomicOp::CmpAndSwap => "CMP_AND_SWAP",
            AtomicOp::FetchAndAdd => "FETCH_AND_ADD",
        }
    }
}

/// The message sizes of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sizes {
    /// One size (`-s`, or the tool's default).
    One(u64),
    /// Every size (`-a`).
    All,
}

/// What a run is: what both ends must agree on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunShape {
    /// The tool.
    pub tool: Tool,
    /// The test.
    pub test: TestKind,
    /// QPs (`-q`; 1 for `lat`).
    pub qps: u32,
    /// Message sizes (`-s` or `-a`).
    pub sizes: Sizes,
    /// Iterations per size (`-n`), or seconds with `duration`.
    pub iters: u64,
    /// The connection type (`-c`).
    pub conn: mlx5_hw::QpType,
    /// Both directions at once (`-b`).
    pub bidirectional: bool,
    /// `iters` is a duration in seconds (`-D`).
    pub duration: bool,
    /// The atomic test's operation (`-A`); `None` in the other tests.
    pub atomic: Option<AtomicOp>,
    /// A `-D` run's margin in seconds (`-f`); 0 without `-D`.
    pub margin: u64,
    /// `--report_gbits` (`bw`).
    pub gbits: bool,
}

impl RunShape {
    /// A run of `tool` `test` over one RC QP, `sizes`, `iters` iterations, one direction.
    pub fn new(tool: Tool, test: TestKind, sizes: Sizes, iters: u64) -> RunShape {
        RunShape {
            tool,
            test,
            qps: 1,
            sizes,
            iters,
            conn: mlx5_hw::QpType::Rc,
            bidirectional: false,
            duration: false,
            atomic: None,
            margin: 0,
            gbits: false,
        }
    }

    /// How a user names the length of the run: `-n 1000` or `-D 5`.
    fn length_flag(&self) -> String {
        if self.duration {
            format!("-D {}", self.iters)
        } else {
            format!("-n {}", self.iters)
        }
    }

    /// How a user names the tool and test: `bw write`.
    fn command(&self) -> String {
        let tool = match self.tool {
            Tool::Lat => "lat",
            Tool::Bw => "bw",
        };
        let test = match self.test {
            TestKind::Write => "write",
            TestKind::Send => "send",
            TestKind::Read => "read",
            TestKind::Atomic => "atomic",
        };
        format!("{tool} {test}")
    }

    /// How a user names the sizes: `-s 64` or `-a`.
    fn sizes_flag(&self) -> String {
        match self.sizes {
            Sizes::One(s) => format!("-s {s}"),
            Sizes::All => "-a".into(),
        }
    }

    /// Every difference between this side's run and the `peer`'s, one message each with the
    /// client's value first (`client -q 4, server -q 2: start both with the same -q`); empty
    /// when the runs agree. `client`: this side is the client.
    pub fn differences(&self, peer: &RunShape, client: bool) -> Vec<String> {
        let (c, s) = if client { (self, peer) } else { (peer, self) };
        let mut why = Vec::new();
        if c.tool != s.tool || c.test != s.test {
            why.push(format!(
                "client runs `{}`, server `{}`: start both with the same tool and test",
                c.command(),
                s.command()
            ));
        }
        if c.qps != s.qps {
            why.push(format!(
                "client -q {}, server -q {}: start both with the same -q",
                c.qps, s.qps
            ));
        }
        if c.sizes != s.sizes {
            let fix = if matches!(c.sizes, Sizes::All) || matches!(s.sizes, Sizes::All) {
                "start both with -a, or both with the same -s"
            } else {
                "start both with the same -s"
            };
            why.push(format!(
                "client {}, server {}: {fix}",
                c.sizes_flag(),
                s.sizes_flag()
            ));
        }
        if c.iters != s.iters || c.duration != s.duration {
            let fix = if c.duration || s.duration {
                "start both with the same -n, or both with the same -D"
            } else {
                "start both with the same -n"
            };
            why.push(format!(
                "client {}, server {}: {fix}",
                c.length_flag(),
                s.length_flag()
            ));
        }
        if c.conn != s.conn {
            why.push(format!(
                "client -c {}, server -c {}: start both with the same -c",
                conn_name(c.conn),
                conn_name(s.conn)
            ));
        }
        if c.atomic != s.atomic && c.test == s.test {
            let a = |o: Option<AtomicOp>| o.map_or("none", AtomicOp::name);
            why.push(format!(
                "client -A {}, server -A {}: start both with the same -A",
                a(c.atomic),
                a(s.atomic)
            ));
        }
        if c.margin != s.margin && c.duration && s.duration {
            why.push(format!(
                "client -f {}, server -f {}: start both with the same -f (perftest: the \
                 margins of a -D run)",
                c.margin, s.margin
            ));
        }
        if c.gbits != s.gbits {
            let on = |b: bool| if b { "with --report_gbits" } else { "without" };
            why.push(format!(
                "client {}, server {}: start both with --report_gbits, or both without",
                on(c.gbits),
                on(s.gbits)
            ));
        }
        if c.bidirectional != s.bidirectional {
            let on = |b: bool| if b { "with -b" } else { "without -b" };
            why.push(format!(
                "client {}, server {}: start both with -b, or both without",
                on(c.bidirectional),
                on(s.bidirectional)
            ));
        }
        why
    }
}

/// What one end tells the other before the endpoint exchange.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hello {
    /// The software ConnectX of a run across processes; `None` on a verbs device.
    pub sim: Option<SimHello>,
    /// The run (`None`: a program that is not `lat` or `bw`, such as the examples).
    pub shape: Option<RunShape>,
}

/// The error for a peer `from` that is wrong in the way `why` says.
fn peer_error(from: &str, why: impl Into<String>) -> Error {
    Error::Peer {
        peer: from.to_string(),
        why: why.into(),
    }
}

impl Hello {
    /// The wire form.
    pub fn encode(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[..4].copy_from_slice(&MAGIC);
        b[4] = VERSION;
        let mut flags = 0;
        if let Some(sim) = &self.sim {
            flags |= FLAG_SIM;
            b[5] = sim
                .recv_buffer
                .map_or(0, |v| (v / RECV_BUFFER_UNIT).min(255) as u8);
            b[6..8].copy_from_slice(&sim.udp.port().to_be_bytes());
            b[8..12].copy_from_slice(&sim.ipv4.octets());
            let ip = match sim.udp.ip() {
                IpAddr::V4(v4) => v4.to_ipv6_mapped(),
                IpAddr::V6(v6) => v6,
            };
            b[12..28].copy_from_slice(&ip.octets());
        }
        if let Some(s) = &self.shape {
            flags |= FLAG_SHAPE;
            b[29] = match s.tool {
                Tool::Lat => 1,
                Tool::Bw => 2,
            };
            b[30] = match s.test {
                TestKind::Write => 1,
                TestKind::Send => 2,
                TestKind::Read => 3,
                TestKind::Atomic => 4,
            };
            b[31] = match s.conn {
                mlx5_hw::QpType::Rc => 1,
                mlx5_hw::QpType::Uc => 2,
                mlx5_hw::QpType::Ud => 3,
                // `-c XRC` runs XRC initiators against XRC targets.
                mlx5_hw::QpType::XrcSend => 4,
                mlx5_hw::QpType::XrcRecv => 5,
                // `-c DC` runs a DCI against a DCT.
                mlx5_hw::QpType::Dci | mlx5_hw::QpType::Dct => 6,
                _ => 0xff,
            };
            if s.bidirectional {
                flags |= FLAG_BIDIR;
            }
            if s.duration {
                flags |= FLAG_DURATION;
            }
            if s.gbits {
                flags |= FLAG_GBITS;
            }
            b[52] = match s.atomic {
                None => 0,
                Some(AtomicOp::CmpAndSwap) => 1,
                Some(AtomicOp::FetchAndAdd) => 2,
            };
            b[56..64].copy_from_slice(&s.margin.to_be_bytes());
            b[32..36].copy_from_slice(&s.qps.to_be_bytes());
            let size = match s.sizes {
                Sizes::One(n) => n,
                Sizes::All => 0,
            };
            b[36..44].copy_from_slice(&size.to_be_bytes());
            b[44..52].copy_from_slice(&s.iters.to_be_bytes());
        }
        b[28] = flags;
        b
    }

    /// Check the start of a message as soon as it is there: the magic (4 bytes), then the
    /// version (5 bytes); `from` names the peer in the error.
    pub fn check_prefix(b: &[u8], from: &str) -> Result<()> {
        if b.len() >= 4 && b[..4] != MAGIC {
            let why = if b[..4] == ENDPOINT_MAGIC {
                "it went straight to the endpoint exchange without a hello: it is an older \
                 build of lat/bw or another program; run the same build of lat/bw on both ends"
            } else {
                "it is not lat or bw (no hello on the control connection): check the address \
                 and -p"
            };
            return Err(peer_error(from, why));
        }
        if b.len() >= 5 && b[4] != VERSION {
            let which = if b[4] < VERSION {
                "an older"
            } else {
                "a newer"
            };
            return Err(peer_error(
                from,
                format!(
                    "version mismatch: its hello is version {}, this build speaks version \
                     {VERSION} ({which} build of lat/bw on the other end): run the same build \
                     on both ends",
                    b[4]
                ),
            ));
        }
        Ok(())
    }

    /// Parse the wire form; `from` names the peer in the error.
    pub fn decode(b: &[u8; HELLO_LEN], from: &str) -> Result<Hello> {
        Hello::check_prefix(b, from)?;
        let flags = b[28];
        if flags & !(FLAG_SIM | FLAG_SHAPE | FLAG_BIDIR | FLAG_DURATION | FLAG_GBITS) != 0 {
            return Err(peer_error(
                from,
                format!(
                    "its hello has unknown flags {flags:#04x}: run the same build on both ends"
                ),
            ));
        }
        let sim = if flags & FLAG_SIM != 0 {
            Some(decode_sim(b, from)?)
        } else {
            None
        };
        let shape = if flags & FLAG_SHAPE != 0 {
            Some(decode_shape(b, from)?)
        } else {
            None
        };
        Ok(Hello { sim, shape })
    }

    /// Whether this side (`self`, the client when `client`) and the `peer` can run together:
    /// the same run ([`RunShape::differences`]) when this side announced one, both or neither
    /// on a software ConnectX, two different software ConnectX. `from` names the peer.
    pub fn check_peer(&self, peer: &Hello, client: bool, from: &str) -> Result<()> {
        if let Some(me) = &self.shape {
            let Some(theirs) = &peer.shape else {
                return Err(peer_error(
                    from,
                    "it did not say which run it was started for: it is not lat or bw, or an \
                     older build; run the same build of lat/bw on both ends",
                ));
            };
            let why = me.differences(theirs, client);
            if !why.is_empty() {
                return Err(peer_error(from, why.join("; ")));
            }
        }
        match (&self.sim, &peer.sim) {
            (Some(me), Some(theirs)) if me.ipv4 == theirs.ipv4 => Err(peer_error(
                from,
                format!(
                    "its software ConnectX has this side's address {}: start one end as the \
                     server (no address) and the other as the client (with the server's \
                     address)",
                    me.ipv4
                ),
            )),
            (Some(_), None) => Err(peer_error(
                from,
                "it runs on a verbs device and this side on the software ConnectX (-d sim): \
                 run both ends with -d sim, or both on verbs devices",
            )),
            (None, Some(_)) => Err(peer_error(
                from,
                "it runs on the software ConnectX (-d sim) and this side on a verbs device: run \
                 both ends with -d sim, or both on verbs devices",
            )),
            _ => Ok(()),
        }
    }
}

fn decode_sim(b: &[u8; HELLO_LEN], from: &str) -> Result<SimHello> {
    let port = u16::from_be_bytes([b[6], b[7]]);
    let ipv4 = Ipv4Addr::new(b[8], b[9], b[10], b[11]);
    let mut ip6 = [0u8; 16];
    ip6.copy_from_slice(&b[12..28]);
    let ip6 = Ipv6Addr::from(ip6);
    let ip = match ip6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(ip6),
    };
    if port == 0 || ip.is_unspecified() {
        return Err(peer_error(
            from,
            format!("it announced an unusable UDP address {ip} port {port}"),
        ));
    }
    Ok(SimHello {
        ipv4,
        udp: SocketAddr::new(ip, port),
        recv_buffer: (b[5] > 0).then(|| u64::from(b[5]) * RECV_BUFFER_UNIT),
    })
}

fn decode_shape(b: &[u8; HELLO_LEN], from: &str) -> Result<RunShape> {
    let be64 = |at: usize| {
        let mut v = [0u8; 8];
        v.copy_from_slice(&b[at..at + 8]);
        u64::from_be_bytes(v)
    };
    let tool = match b[29] {
        1 => Tool::Lat,
        2 => Tool::Bw,
        t => {
            return Err(peer_error(
                from,
                format!("its hello names an unknown tool {t}"),
            ))
        }
    };
    let test = match b[30] {
        1 => TestKind::Write,
        2 => TestKind::Send,
        3 => TestKind::Read,
        4 => TestKind::Atomic,
        t => {
            return Err(peer_error(
                from,
                format!("its hello names an unknown test {t}"),
            ))
        }
    };
    Ok(RunShape {
        tool,
        test,
        qps: u32::from_be_bytes([b[32], b[33], b[34], b[35]]),
        sizes: match be64(36) {
            0 => Sizes::All,
            n => Sizes::One(n),
        },
        iters: be64(44),
        conn: match b[31] {
            0 | 1 => mlx5_hw::QpType::Rc,
            2 => mlx5_hw::QpType::Uc,
            3 => mlx5_hw::QpType::Ud,
            4 => mlx5_hw::QpType::XrcSend,
            6 => mlx5_hw::QpType::Dci,
            c => {
                return Err(peer_error(
                    from,
                    format!("its hello names an unknown connection type {c}"),
                ))
            }
        },
        bidirectional: b[28] & FLAG_BIDIR != 0,
        duration: b[28] & FLAG_DURATION != 0,
        atomic: match b[52] {
            0 => None,
            1 => Some(AtomicOp::CmpAndSwap),
            2 => Some(AtomicOp::FetchAndAdd),
            a => {
                return Err(peer_error(
                    from,
                    format!("its hello names an unknown atomic operation {a}"),
                ))
            }
        },
        margin: be64(56),
        gbits: b[28] & FLAG_GBITS != 0,
    })
}

/// Send `me` on `stream` and read the peer's [`Hello`], waiting at most `timeout`; the
/// version is checked as soon as its byte is there, so that an older peer, which sends less,
/// is a version mismatch and not a timeout. Leaves the stream blocking with no read timeout, as
/// `mlx5_connect::Control::from_stream` expects it.
pub fn exchange(stream: &mut TcpStream, me: &Hello, timeout: Duration) -> Result<Hello> {
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
        .map_err(|e| net("send the hello", e))?;
    let mut b = [0u8; HELLO_LEN];
    // The magic, then the rest of version 1's message (all an older peer sends), then ours.
    for range in [0..4, 4..V1_LEN, V1_LEN..HELLO_LEN] {
        stream
            .read_exact(&mut b[range.clone()])
            .map_err(|e| match e.kind() {
                ErrorKind::WouldBlock | ErrorKind::TimedOut => Error::Timeout {
                    what: "the peer's hello",
                    secs: timeout.as_secs(),
                    hint: "is the peer this tool, started for the same run?".into(),
                },
                ErrorKind::UnexpectedEof => peer_error(
                    &from,
                    "it closed the control connection before its hello: see its error message",
                ),
                _ => net("read the peer's hello", e),
            })?;
        Hello::check_prefix(&b[..range.end], &from)?;
    }
    stream
        .set_read_timeout(None)
        .map_err(|e| net("configure the control socket", e))?;
    Hello::decode(&b, &from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn sim(udp: &str) -> SimHello {
        SimHello {
            ipv4: Ipv4Addr::new(10, 0, 0, 2),
            udp: udp.parse().unwrap(),
            recv_buffer: Some(8 << 20),
        }
    }

    fn shape() -> RunShape {
        RunShape {
            tool: Tool::Bw,
            test: TestKind::Write,
            qps: 2,
            sizes: Sizes::One(4096),
            iters: 300,
            conn: mlx5_hw::QpType::Rc,
            bidirectional: false,
            duration: false,
            atomic: None,
            margin: 0,
            gbits: false,
        }
    }

    fn hello(udp: &str) -> Hello {
        Hello {
            sim: Some(sim(udp)),
            shape: Some(shape()),
        }
    }

    #[test]
    fn round_trips() {
        for udp in ["127.0.0.1:40001", "[::1]:5", "192.0.2.7:65535"] {
            let h = hello(udp);
            assert_eq!(Hello::decode(&h.encode(), "t").unwrap(), h);
        }
        let verbs = Hello {
            sim: None,
            shape: Some(RunShape {
                tool: Tool::Lat,
                test: TestKind::Read,
                qps: 1,
                sizes: Sizes::All,
                iters: u64::MAX,
                conn: mlx5_hw::QpType::Rc,
                bidirectional: false,
                duration: true,
                atomic: Some(AtomicOp::CmpAndSwap),
                margin: 7,
                gbits: true,
            }),
        };
        assert_eq!(Hello::decode(&verbs.encode(), "t").unwrap(), verbs);
        let example = Hello {
            sim: Some(sim("127.0.0.1:9")),
            shape: None,
        };
        assert_eq!(Hello::decode(&example.encode(), "t").unwrap(), example);
    }

    #[test]
    fn layout_is_fixed() {
        let b = hello("127.0.0.1:4791").encode();
        // Version 1's prefix, with the version byte moved on.
        assert_eq!(&b[..4], b"MX5S");
        assert_eq!(b[4], 4);
        assert_eq!(b[5], 128, "8 MiB in 64 KiB units");
        assert_eq!(&b[6..8], &4791u16.to_be_bytes());
        assert_eq!(&b[8..12], &[10, 0, 0, 2]);
        assert_eq!(&b[12..28], &Ipv4Addr::LOCALHOST.to_ipv6_mapped().octets());
        assert_eq!(&b[28..32], &[3, 2, 1, 1]);
        assert_eq!(&b[32..36], &2u32.to_be_bytes());
        assert_eq!(&b[36..44], &4096u64.to_be_bytes());
        assert_eq!(&b[44..52], &300u64.to_be_bytes());
        assert_eq!(&b[52..64], &[0; 12], "no atomic, no margin");
        let none = Hello {
            sim: None,
            shape: None,
        }
        .encode();
        assert!(none[5..].iter().all(|&x| x == 0), "{none:?}");
    }

    #[test]
    fn foreign_old_or_broken_messages_are_named() {
        let good = hello("127.0.0.1:9").encode();
        let mut endpoint = good;
        endpoint[..4].copy_from_slice(b"M5QP");
        let e = Hello::decode(&endpoint, "peer:1").unwrap_err().to_string();
        assert!(e.contains("peer:1") && e.contains("older build"), "{e}");
        let mut http = good;
        http[..4].copy_from_slice(b"GET ");
        let e = Hello::decode(&http, "p").unwrap_err().to_string();
        assert!(e.contains("not lat or bw"), "{e}");
        for (v, which) in [(1, "an older"), (3, "an older"), (5, "a newer")] {
            let mut other = good;
            other[4] = v;
            let e = Hello::decode(&other, "p").unwrap_err().to_string();
            assert!(
                e.contains("version mismatch") && e.contains(which) && e.contains("same build"),
                "{e}"
            );
        }
        let mut no_port = good;
        no_port[6..8].copy_from_slice(&[0, 0]);
        assert!(Hello::decode(&no_port, "p").is_err());
        let mut flags = good;
        flags[28] |= 0x80;
        assert!(Hello::decode(&flags, "p").is_err());
        let mut tool = good;
        tool[29] = 9;
        assert!(Hello::decode(&tool, "p").is_err());
        // A buffer not announced is not known, not zero; buffers round down to 64 KiB units
        // and saturate at 255 of them.
        let mut quiet = good;
        quiet[5] = 0;
        assert_eq!(
            Hello::decode(&quiet, "p").unwrap().sim.unwrap().recv_buffer,
            None
        );
        for (have, got) in [((3 << 16) + 5, 3 << 16), (1 << 40, 255 << 16)] {
            let h = Hello {
                sim: Some(SimHello {
                    recv_buffer: Some(have),
                    ..sim("127.0.0.1:9")
                }),
                shape: None,
            };
            let back = Hello::decode(&h.encode(), "p").unwrap();
            assert_eq!(back.sim.unwrap().recv_buffer, Some(got));
        }
    }

    #[test]
    fn differences_name_both_values_client_first() {
        let server = shape();
        let client = RunShape { qps: 4, ..server };
        let want = "client -q 4, server -q 2: start both with the same -q";
        assert_eq!(client.differences(&server, true), vec![want]);
        assert_eq!(server.differences(&client, false), vec![want]);
        assert!(server.differences(&server, true).is_empty());
        let all = RunShape {
            tool: Tool::Lat,
            test: TestKind::Send,
            qps: 2,
            sizes: Sizes::All,
            iters: 5,
            conn: mlx5_hw::QpType::Rc,
            bidirectional: false,
            duration: false,
            atomic: None,
            margin: 0,
            gbits: false,
        };
        let why = all.differences(&server, true);
        assert_eq!(why.len(), 3, "{why:?}");
        assert!(
            why[0].contains("client runs `lat send`, server `bw write`"),
            "{why:?}"
        );
        assert!(why[1].contains("client -a, server -s 4096"), "{why:?}");
        assert!(why[2].contains("client -n 5, server -n 300"), "{why:?}");
        // What else perftest marks SYMMETRIC: -A, -f, its report format.
        let atomic = RunShape {
            test: TestKind::Atomic,
            atomic: Some(AtomicOp::FetchAndAdd),
            ..server
        };
        let cas = RunShape {
            atomic: Some(AtomicOp::CmpAndSwap),
            ..atomic
        };
        assert_eq!(
            cas.differences(&atomic, true),
            ["client -A CMP_AND_SWAP, server -A FETCH_AND_ADD: start both with the same -A"]
        );
        let timed = RunShape {
            duration: true,
            iters: 8,
            margin: 2,
            ..server
        };
        let why = RunShape { margin: 1, ..timed }.differences(&timed, true);
        assert_eq!(why.len(), 1, "{why:?}");
        assert!(why[0].contains("client -f 1, server -f 2"), "{why:?}");
        let why = RunShape {
            gbits: true,
            ..server
        }
        .differences(&server, true);
        assert!(
            why[0].contains("client with --report_gbits, server without"),
            "{why:?}"
        );
    }

    #[test]
    fn peers_are_checked() {
        let me = hello("127.0.0.1:1");
        let other = Hello {
            sim: Some(SimHello {
                ipv4: Ipv4Addr::new(10, 0, 0, 1),
                ..sim("127.0.0.1:2")
            }),
            ..me
        };
        me.check_peer(&other, true, "p").unwrap();
        let e = me.check_peer(&me, true, "p").unwrap_err().to_string();
        assert!(e.contains("this side's address 10.0.0.2"), "{e}");
        let verbs = Hello { sim: None, ..other };
        let e = me.check_peer(&verbs, true, "p").unwrap_err().to_string();
        assert!(e.contains("verbs device") && e.contains("-d sim"), "{e}");
        let e = verbs.check_peer(&other, true, "p").unwrap_err().to_string();
        assert!(e.contains("this side on a verbs device"), "{e}");
        let quiet = Hello {
            shape: None,
            ..other
        };
        let e = me.check_peer(&quiet, true, "p").unwrap_err().to_string();
        assert!(e.contains("did not say which run"), "{e}");
        // A side without a run of its own (an example) does not judge the peer's.
        quiet.check_peer(&me, false, "p").unwrap();
        let four = Hello {
            shape: Some(RunShape { qps: 4, ..shape() }),
            ..other
        };
        let e = me.check_peer(&four, false, "p").unwrap_err().to_string();
        assert!(
            e.contains("client -q 4, server -q 2: start both with the same -q"),
            "{e}"
        );
    }

    /// Run `me` against a peer that writes `theirs` and then reads what it is sent.
    fn against(theirs: Vec<u8>) -> (Result<Hello>, Vec<u8>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let peer = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            s.write_all(&theirs).unwrap();
            // An older peer reads only version 1's message; then it stops (closes).
            let mut got = vec![0u8; V1_LEN];
            s.read_exact(&mut got).unwrap();
            got
        });
        let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let r = exchange(&mut c, &hello("127.0.0.1:1"), Duration::from_secs(20));
        (r, peer.join().unwrap())
    }

    #[test]
    fn an_older_peer_is_a_version_mismatch_on_both_ends_at_once() {
        let t0 = std::time::Instant::now();
        // Version 1: 28 bytes, then it waits for 28.
        let mut v1 = hello("127.0.0.1:2").encode()[..V1_LEN].to_vec();
        v1[4] = 1;
        let (r, seen) = against(v1);
        let e = r.unwrap_err().to_string();
        assert!(
            e.contains("version mismatch") && e.contains("version 1"),
            "{e}"
        );
        // What the version 1 peer reads: its magic and a version it does not speak, so it
        // says so (its decoder compares the version byte).
        assert_eq!((&seen[..4], seen[4]), (&b"MX5S"[..], VERSION));
        // An older build on a verbs device sends the endpoint exchange's HELLO at once.
        let mut endpoint = b"M5QP".to_vec();
        endpoint.resize(84, 0);
        let (r, _) = against(endpoint);
        let e = r.unwrap_err().to_string();
        assert!(e.contains("older build"), "{e}");
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "not at once: {:?}",
            t0.elapsed()
        );
    }

    #[test]
    fn both_sides_exchange_over_a_real_socket() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            exchange(&mut s, &hello("127.0.0.1:1111"), Duration::from_secs(5)).unwrap()
        });
        let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let got = exchange(&mut c, &hello("127.0.0.1:2222"), Duration::from_secs(5)).unwrap();
        assert_eq!(got.sim.unwrap().udp.port(), 1111);
        assert_eq!(server.join().unwrap().sim.unwrap().udp.port(), 2222);
    }

    #[test]
    fn a_silent_peer_times_out() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let _held = l.accept().unwrap();
        let e = exchange(&mut c, &hello("127.0.0.1:1"), Duration::from_millis(50)).unwrap_err();
        assert!(matches!(e, Error::Timeout { .. }), "{e}");
    }
}
