//! The control-channel messages: a versioned, fixed-size binary format with every field
//! big-endian and every byte validated on decode.
//!
//! ```text
//! header (12 bytes, every message)
//!   0..4   magic       "M5QP"
//!   4      version     1
//!   5      kind        1 HELLO, 2 READY, 3 REBUILD, 4 ABORT
//!   6..8   length      total message length in bytes, header included (fixed per kind)
//!   8..12  generation  0 for the first connection, +1 per rebuild
//!
//! endpoint (56 bytes: the body of HELLO, the first 56 bytes of REBUILD's)
//!   0      qp_type     ibv_qp_type: 2 RC, 3 UC, 4 UD
//!   1      link_layer  1 InfiniBand, 2 Ethernet (RoCE)
//!   2      mtu         ibv_mtu of the port (1 = 256 .. 5 = 4096)
//!   3      flags       bit 0: the buffer fields are valid; other bits 0
//!   4..8   qpn         24 bits
//!   8..12  psn         24 bits: the first PSN this side sends (the peer's rq_psn)
//!   12..14 lid         0 on RoCE
//!   14     max_rd_atomic       READ/atomic requests this side keeps in flight (initiator depth)
//!   15     max_dest_rd_atomic  READ/atomic requests this side serves at once (responder resources)
//!   16..32 gid
//!   32..36 qkey        UD: the Q_Key datagrams to this QP must carry; 0 for RC/UC
//!   36..44 buf_addr    optional buffer for RDMA (flags bit 0)
//!   44..48 buf_rkey
//!   48..56 buf_len
//!
//! HELLO   = header + endpoint                                   68 bytes
//! READY   = header + qpn(4) + state(1) + reserved(3)            20 bytes
//! REBUILD = header + endpoint + reason(1) + reserved(3)         72 bytes
//! ABORT   = header + code(1) + reserved(3)                      16 bytes
//! ```
//!
//! Reserved bytes must be zero; a decoder of this version refuses anything else, so a later
//! version can give them meaning. The QPN and PSN are 24-bit fields of the BTH (IBTA vol. 1
//! §9.2); a wider value on the wire is refused with [`WireError::Wider24`] rather than masked.

use mlx5_cq::WcStatus;
use mlx5_hw::{Gid, LinkLayer, Mtu, QpState, QpType};

/// `"M5QP"`: the first four bytes of every message.
pub const MAGIC: [u8; 4] = *b"M5QP";
/// The protocol version this code speaks.
pub const VERSION: u8 = 1;
/// Bytes of the header.
pub const HEADER_LEN: usize = 12;
/// Bytes of an encoded [`Endpoint`].
pub const ENDPOINT_LEN: usize = 56;
/// The longest message of this version (REBUILD); a framer never needs more.
pub const MAX_MESSAGE_LEN: usize = HEADER_LEN + ENDPOINT_LEN + 4;

const FLAG_BUFFER: u8 = 1 << 0;
const MAX_24BIT: u32 = mlx5_hw::qp_state::MAX_24BIT;

/// Why bytes are not a valid message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// Fewer bytes than the header or the length field announces.
    #[error("truncated message: {got} bytes, {need} needed")]
    Truncated {
        /// Bytes available.
        got: usize,
        /// Bytes needed.
        need: usize,
    },
    /// The magic is not `"M5QP"`: the peer is not speaking this protocol.
    #[error(
        "bad magic {got:02x?} (expected \"M5QP\"): the peer is not an mlx5-direct control \
         channel, or the stream lost sync"
    )]
    BadMagic {
        /// The four bytes received.
        got: [u8; 4],
    },
    /// A version this code does not speak.
    #[error("protocol version {got} is not supported (this side speaks version {VERSION})")]
    UnsupportedVersion {
        /// The version received.
        got: u8,
    },
    /// An unknown message kind.
    #[error("unknown message kind {0}")]
    UnknownKind(u8),
    /// The length field does not match the kind, or the buffer length does not match it.
    #[error("bad length for a {kind} message: {got} bytes, expected {expected}")]
    BadLength {
        /// Message kind name.
        kind: &'static str,
        /// Length given (field or buffer).
        got: usize,
        /// Length this kind has.
        expected: usize,
    },
    /// A QPN or PSN wider than 24 bits.
    #[error("{field} = {value:#x} is wider than 24 bits (QPNs and PSNs are 24-bit BTH fields)")]
    Wider24 {
        /// Field name (`qpn`, `psn`).
        field: &'static str,
        /// Value received.
        value: u32,
    },
    /// A field with a value outside its domain.
    #[error("invalid {field} = {value:#x}: {why}")]
    BadField {
        /// Field name.
        field: &'static str,
        /// Value received (widened).
        value: u64,
        /// What the legal values are.
        why: &'static str,
    },
}

/// A memory region the peer may access with RDMA (READ, WRITE, atomics).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RemoteBuffer {
    /// Start address in the owner's address space.
    pub addr: u64,
    /// The region's rkey.
    pub rkey: u32,
    /// Length in bytes.
    pub len: u64,
}

/// What one side tells the other about its QP and port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// QP type; both sides must agree.
    pub qp_type: QpType,
    /// Link layer of the port (decides LID or GRH addressing).
    pub link_layer: LinkLayer,
    /// The port's active MTU (the path MTU is the smaller of both sides').
    pub mtu: Mtu,
    /// QP number, 24 bits.
    pub qpn: u32,
    /// First PSN this side sends, 24 bits; the peer's `rq_psn`.
    pub psn: u32,
    /// Port LID (InfiniBand; 0 on RoCE).
    pub lid: u16,
    /// RDMA READ/atomic requests this side keeps in flight (its `max_rd_atomic`).
    pub max_rd_atomic: u8,
    /// RDMA READ/atomic requests this side serves at once (its `max_dest_rd_atomic`).
    pub max_dest_rd_atomic: u8,
    /// GID of the port (the GRH destination on RoCE).
    pub gid: Gid,
    /// UD: the Q_Key datagrams to this QP must carry; 0 on RC/UC.
    pub qkey: u32,
    /// A buffer the peer may access, if any.
    pub buffer: Option<RemoteBuffer>,
}

/// Why a side gives up (the body of an ABORT).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
#[non_exhaustive]
pub enum AbortCode {
    /// A modify or a device call failed on the sender's side.
    ConnectFailed = 1,
    /// The peer's endpoint does not fit this side (QP type, link layer, ...).
    Incompatible = 2,
    /// The sender is shutting the connection down.
    Shutdown = 3,
}

impl AbortCode {
    fn from_u8(v: u8) -> Option<AbortCode> {
        Some(match v {
            1 => AbortCode::ConnectFailed,
            2 => AbortCode::Incompatible,
            3 => AbortCode::Shutdown,
            _ => return None,
        })
    }
    /// A short description for logs and errors.
    pub fn describe(self) -> &'static str {
        match self {
            AbortCode::ConnectFailed => "the peer failed to bring its QP up",
            AbortCode::Incompatible => "the peer found our endpoint incompatible",
            AbortCode::Shutdown => "the peer is shutting down",
        }
    }
}

/// One control message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Message {
    /// First handshake: "this is my QP".
    Hello {
        /// Connection generation (0, then +1 per rebuild).
        generation: u32,
        /// The sender's endpoint.
        endpoint: Endpoint,
    },
    /// Second handshake: "my QP is in `state` (RTS) with receives posted".
    Ready {
        /// Connection generation.
        generation: u32,
        /// The sender's QPN (the receiver checks it is its peer).
        qpn: u32,
        /// The state the sender's QP reached.
        state: QpState,
    },
    /// "My QP failed (or I was asked to rebuild): here is my fresh endpoint; rebuild yours."
    Rebuild {
        /// The generation being built (the old one + 1).
        generation: u32,
        /// The sender's endpoint with a fresh PSN.
        endpoint: Endpoint,
        /// The completion status that triggered the rebuild (`IBV_WC_SUCCESS` if none).
        reason: WcStatus,
    },
    /// "I give up."
    Abort {
        /// Connection generation.
        generation: u32,
        /// Why.
        code: AbortCode,
    },
}

const KIND_HELLO: u8 = 1;
const KIND_READY: u8 = 2;
const KIND_REBUILD: u8 = 3;
const KIND_ABORT: u8 = 4;

fn kind_info(kind: u8) -> Option<(&'static str, usize)> {
    Some(match kind {
        KIND_HELLO => ("HELLO", HEADER_LEN + ENDPOINT_LEN),
        KIND_READY => ("READY", HEADER_LEN + 8),
        KIND_REBUILD => ("REBUILD", HEADER_LEN + ENDPOINT_LEN + 4),
        KIND_ABORT => ("ABORT", HEADER_LEN + 4),
        _ => return None,
    })
}

impl Message {
    /// The generation the message belongs to.
    pub fn generation(&self) -> u32 {
        match *self {
            Message::Hello { generation, .. }
            | Message::Ready { generation, .. }
            | Message::Rebuild { generation, .. }
            | Message::Abort { generation, .. } => generation,
        }
    }

    /// The kind's name (`HELLO`, `READY`, `REBUILD`, `ABORT`).
    pub fn kind_name(&self) -> &'static str {
        match self {
            Message::Hello { .. } => "HELLO",
            Message::Ready { .. } => "READY",
            Message::Rebuild { .. } => "REBUILD",
            Message::Abort { .. } => "ABORT",
        }
    }

    fn kind(&self) -> u8 {
        match self {
            Message::Hello { .. } => KIND_HELLO,
            Message::Ready { .. } => KIND_READY,
            Message::Rebuild { .. } => KIND_REBUILD,
            Message::Abort { .. } => KIND_ABORT,
        }
    }

    /// Encodes the message. Fails only if a field cannot be represented: a QPN or PSN wider
    /// than 24 bits (never silently masked).
    pub fn encode(&self) -> Result<Vec<u8>, WireError> {
        let kind = self.kind();
        let len = kind_info(kind).map_or(HEADER_LEN, |(_, l)| l);
        let mut b = vec![0u8; len];
        b[0..4].copy_from_slice(&MAGIC);
        b[4] = VERSION;
        b[5] = kind;
        // `len` ≤ MAX_MESSAGE_LEN (72): it fits the 16-bit field.
        b[6..8].copy_from_slice(&(len as u16).to_be_bytes());
        b[8..12].copy_from_slice(&self.generation().to_be_bytes());
        let body = &mut b[HEADER_LEN..];
        match self {
            Message::Hello { endpoint, .. } => endpoint.encode_into(body)?,
            Message::Ready { qpn, state, .. } => {
                check24("qpn", *qpn)?;
                body[0..4].copy_from_slice(&qpn.to_be_bytes());
                body[4] = *state as u8;
            }
            Message::Rebuild {
                endpoint, reason, ..
            } => {
                endpoint.encode_into(&mut body[..ENDPOINT_LEN])?;
                body[ENDPOINT_LEN] = *reason as u8;
            }
            Message::Abort { code, .. } => body[0] = *code as u8,
        }
        Ok(b)
    }

    /// Validates a header and returns the total length of the message it starts, so a
    /// stream reader knows how many more bytes to read (at most [`MAX_MESSAGE_LEN`]).
    pub fn frame_len(header: &[u8]) -> Result<usize, WireError> {
        if header.len() < HEADER_LEN {
            return Err(WireError::Truncated {
                got: header.len(),
                need: HEADER_LEN,
            });
        }
        let mut magic = [0u8; 4];
        magic.copy_from_slice(&header[0..4]);
        if magic != MAGIC {
            return Err(WireError::BadMagic { got: magic });
        }
        if header[4] != VERSION {
            return Err(WireError::UnsupportedVersion { got: header[4] });
        }
        let (name, expected) = kind_info(header[5]).ok_or(WireError::UnknownKind(header[5]))?;
        let got = usize::from(u16::from_be_bytes([header[6], header[7]]));
        if got != expected {
            return Err(WireError::BadLength {
                kind: name,
                got,
                expected,
            });
        }
        Ok(expected)
    }

    /// Decodes exactly one message: `bytes` must be the whole message and nothing more.
    pub fn decode(bytes: &[u8]) -> Result<Message, WireError> {
        let len = Message::frame_len(bytes)?;
        let kind = bytes[5];
        let name = kind_info(kind).map_or("?", |(n, _)| n);
        if bytes.len() < len {
            return Err(WireError::Truncated {
                got: bytes.len(),
                need: len,
            });
        }
        if bytes.len() > len {
            return Err(WireError::BadLength {
                kind: name,
                got: bytes.len(),
                expected: len,
            });
        }
        let generation = be32(&bytes[8..12]);
        let body = &bytes[HEADER_LEN..];
        Ok(match kind {
            KIND_HELLO => Message::Hello {
                generation,
                endpoint: Endpoint::decode_from(body)?,
            },
            KIND_READY => {
                let qpn = be32(&body[0..4]);
                check24("qpn", qpn)?;
                let state = QpState::from_u8(body[4]).ok_or(WireError::BadField {
                    field: "state",
                    value: body[4].into(),
                    why: "ibv_qp_state is 0..=6",
                })?;
                reserved_zero("READY reserved bytes", &body[5..8])?;
                Message::Ready {
                    generation,
                    qpn,
                    state,
                }
            }
            KIND_REBUILD => {
                let endpoint = Endpoint::decode_from(&body[..ENDPOINT_LEN])?;
                let r = body[ENDPOINT_LEN];
                let reason = WcStatus::from_u8(r).ok_or(WireError::BadField {
                    field: "reason",
                    value: r.into(),
                    why: "ibv_wc_status is 0..=21",
                })?;
                reserved_zero("REBUILD reserved bytes", &body[ENDPOINT_LEN + 1..])?;
                Message::Rebuild {
                    generation,
                    endpoint,
                    reason,
                }
            }
            _ => {
                let code = AbortCode::from_u8(body[0]).ok_or(WireError::BadField {
                    field: "abort code",
                    value: body[0].into(),
                    why: "1 connect failed, 2 incompatible, 3 shutdown",
                })?;
                reserved_zero("ABORT reserved bytes", &body[1..4])?;
                Message::Abort { generation, code }
            }
        })
    }
}

impl Endpoint {
    fn encode_into(&self, b: &mut [u8]) -> Result<(), WireError> {
        check24("qpn", self.qpn)?;
        check24("psn", self.psn)?;
        b[0] = self.qp_type as u8;
        b[1] = match self.link_layer {
            LinkLayer::InfiniBand => 1,
            LinkLayer::Ethernet => 2,
        };
        b[2] = self.mtu as u8;
        b[3] = if self.buffer.is_some() {
            FLAG_BUFFER
        } else {
            0
        };
        b[4..8].copy_from_slice(&self.qpn.to_be_bytes());
        b[8..12].copy_from_slice(&self.psn.to_be_bytes());
        b[12..14].copy_from_slice(&self.lid.to_be_bytes());
        b[14] = self.max_rd_atomic;
        b[15] = self.max_dest_rd_atomic;
        b[16..32].copy_from_slice(&self.gid.0);
        b[32..36].copy_from_slice(&self.qkey.to_be_bytes());
        if let Some(buf) = self.buffer {
            b[36..44].copy_from_slice(&buf.addr.to_be_bytes());
            b[44..48].copy_from_slice(&buf.rkey.to_be_bytes());
            b[48..56].copy_from_slice(&buf.len.to_be_bytes());
        }
        Ok(())
    }

    fn decode_from(b: &[u8]) -> Result<Endpoint, WireError> {
        let qp_type = match b[0] {
            2 => QpType::Rc,
            3 => QpType::Uc,
            4 => QpType::Ud,
            v => {
                return Err(WireError::BadField {
                    field: "qp_type",
                    value: v.into(),
                    why: "2 RC, 3 UC or 4 UD",
                })
            }
        };
        let link_layer = match b[1] {
            1 => LinkLayer::InfiniBand,
            2 => LinkLayer::Ethernet,
            v => {
                return Err(WireError::BadField {
                    field: "link_layer",
                    value: v.into(),
                    why: "1 InfiniBand or 2 Ethernet",
                })
            }
        };
        let mtu = Mtu::from_u8(b[2]).ok_or(WireError::BadField {
            field: "mtu",
            value: b[2].into(),
            why: "ibv_mtu is 1 (256) ..= 5 (4096)",
        })?;
        let flags = b[3];
        if flags & !FLAG_BUFFER != 0 {
            return Err(WireError::BadField {
                field: "flags",
                value: flags.into(),
                why: "only bit 0 (buffer valid) is defined",
            });
        }
        let qpn = be32(&b[4..8]);
        check24("qpn", qpn)?;
        let psn = be32(&b[8..12]);
        check24("psn", psn)?;
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&b[16..32]);
        let qkey = be32(&b[32..36]);
        if qp_type != QpType::Ud && qkey != 0 {
            return Err(WireError::BadField {
                field: "qkey",
                value: qkey.into(),
                why: "a Q_Key is only meaningful on UD; RC/UC endpoints carry 0",
            });
        }
        let buffer = if flags & FLAG_BUFFER != 0 {
            Some(RemoteBuffer {
                addr: be64(&b[36..44]),
                rkey: be32(&b[44..48]),
                len: be64(&b[48..56]),
            })
        } else {
            reserved_zero("buffer fields without the buffer flag", &b[36..56])?;
            None
        };
        Ok(Endpoint {
            qp_type,
            link_layer,
            mtu,
            qpn,
            psn,
            lid: u16::from_be_bytes([b[12], b[13]]),
            max_rd_atomic: b[14],
            max_dest_rd_atomic: b[15],
            gid: Gid(gid),
            qkey,
            buffer,
        })
    }
}

fn check24(field: &'static str, value: u32) -> Result<(), WireError> {
    if value > MAX_24BIT {
        Err(WireError::Wider24 { field, value })
    } else {
        Ok(())
    }
}

fn reserved_zero(field: &'static str, b: &[u8]) -> Result<(), WireError> {
    match b.iter().position(|&x| x != 0) {
        None => Ok(()),
        Some(i) => Err(WireError::BadField {
            field,
            value: b[i].into(),
            why: "reserved bytes must be zero in protocol version 1",
        }),
    }
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn be64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ep() -> Endpoint {
        Endpoint {
            qp_type: QpType::Rc,
            link_layer: LinkLayer::Ethernet,
            mtu: Mtu::Mtu4096,
            qpn: 0x00ab_cdef,
            psn: 0x0012_3456,
            lid: 0,
            max_rd_atomic: 16,
            max_dest_rd_atomic: 8,
            gid: Gid::from_ipv4([10, 0, 0, 1]),
            qkey: 0,
            buffer: Some(RemoteBuffer {
                addr: 0x1122_3344_5566_7788,
                rkey: 0xdead_beef,
                len: 4096,
            }),
        }
    }

    #[test]
    fn hello_golden_bytes() {
        let b = Message::Hello {
            generation: 7,
            endpoint: ep(),
        }
        .encode()
        .unwrap();
        assert_eq!(b.len(), 68);
        assert_eq!(&b[0..12], b"M5QP\x01\x01\x00\x44\x00\x00\x00\x07");
        assert_eq!(&b[12..16], &[2, 2, 5, 1]);
        assert_eq!(&b[16..20], &[0x00, 0xab, 0xcd, 0xef]);
        assert_eq!(&b[20..24], &[0x00, 0x12, 0x34, 0x56]);
        assert_eq!(&b[24..28], &[0, 0, 16, 8]);
        assert_eq!(&b[38..44], &[0xff, 0xff, 10, 0, 0, 1]);
        assert_eq!(&b[48..56], &0x1122_3344_5566_7788u64.to_be_bytes());
        assert_eq!(&b[56..60], &[0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(&b[60..68], &4096u64.to_be_bytes());
    }

    #[test]
    fn every_kind_round_trips() {
        let msgs = [
            Message::Hello {
                generation: 0,
                endpoint: ep(),
            },
            Message::Ready {
                generation: 3,
                qpn: 0x12,
                state: QpState::Rts,
            },
            Message::Rebuild {
                generation: 4,
                endpoint: Endpoint {
                    buffer: None,
                    ..ep()
                },
                reason: WcStatus::RetryExcErr,
            },
            Message::Abort {
                generation: 9,
                code: AbortCode::Incompatible,
            },
        ];
        for m in msgs {
            let b = m.encode().unwrap();
            assert_eq!(Message::frame_len(&b[..HEADER_LEN]).unwrap(), b.len());
            assert_eq!(Message::decode(&b).unwrap(), m);
        }
    }

    #[test]
    fn rejects_bad_header() {
        let good = Message::Abort {
            generation: 1,
            code: AbortCode::Shutdown,
        }
        .encode()
        .unwrap();
        let mut b = good.clone();
        b[0] = b'X';
        assert!(matches!(
            Message::decode(&b),
            Err(WireError::BadMagic { .. })
        ));
        let mut b = good.clone();
        b[4] = 2;
        let e = Message::decode(&b).unwrap_err();
        assert_eq!(e, WireError::UnsupportedVersion { got: 2 });
        assert!(e.to_string().contains("version 2 is not supported"));
        let mut b = good.clone();
        b[5] = 9;
        assert_eq!(Message::decode(&b), Err(WireError::UnknownKind(9)));
        let mut b = good.clone();
        b[7] = 17;
        assert!(matches!(
            Message::decode(&b),
            Err(WireError::BadLength {
                got: 17,
                expected: 16,
                ..
            })
        ));
        assert!(matches!(
            Message::decode(&good[..15]),
            Err(WireError::Truncated { got: 15, need: 16 })
        ));
        let mut b = good.clone();
        b.push(0);
        assert!(matches!(
            Message::decode(&b),
            Err(WireError::BadLength { got: 17, .. })
        ));
        let mut b = good;
        b[15] = 1;
        assert!(matches!(
            Message::decode(&b),
            Err(WireError::BadField { .. })
        ));
    }

    #[test]
    fn rejects_wide_qpn_and_psn() {
        let mut b = Message::Hello {
            generation: 0,
            endpoint: ep(),
        }
        .encode()
        .unwrap();
        b[16] = 0x01; // qpn high byte
        let e = Message::decode(&b).unwrap_err();
        assert_eq!(
            e,
            WireError::Wider24 {
                field: "qpn",
                value: 0x01ab_cdef
            }
        );
        assert!(e.to_string().contains("wider than 24 bits"));
        let bad = Message::Hello {
            generation: 0,
            endpoint: Endpoint {
                psn: 1 << 24,
                ..ep()
            },
        };
        assert!(matches!(
            bad.encode(),
            Err(WireError::Wider24 { field: "psn", .. })
        ));
    }

    #[test]
    fn rejects_bad_fields() {
        let base = Message::Hello {
            generation: 0,
            endpoint: Endpoint {
                buffer: None,
                ..ep()
            },
        }
        .encode()
        .unwrap();
        for (off, val, field) in [
            (12, 1u8, "qp_type"),
            (13, 3, "link_layer"),
            (14, 6, "mtu"),
            (15, 2, "flags"),
            (50, 1, "buffer fields without the buffer flag"),
            (47, 1, "qkey"),
        ] {
            let mut b = base.clone();
            b[off] = val;
            match Message::decode(&b) {
                Err(WireError::BadField { field: f, .. }) => assert_eq!(f, field),
                other => panic!("offset {off}: {other:?}"),
            }
        }
    }

    fn arb_endpoint() -> impl Strategy<Value = Endpoint> {
        (
            prop_oneof![Just(QpType::Rc), Just(QpType::Uc), Just(QpType::Ud)],
            any::<bool>(),
            1u8..=5,
            0..=MAX_24BIT,
            0..=MAX_24BIT,
            any::<(u16, u8, u8, [u8; 16], u32)>(),
            proptest::option::of(any::<(u64, u32, u64)>()),
        )
            .prop_map(
                |(t, ib, mtu, qpn, psn, (lid, rd, drd, gid, qkey), buf)| Endpoint {
                    qp_type: t,
                    link_layer: if ib {
                        LinkLayer::InfiniBand
                    } else {
                        LinkLayer::Ethernet
                    },
                    mtu: Mtu::from_u8(mtu).unwrap_or_default(),
                    qpn,
                    psn,
                    lid,
                    max_rd_atomic: rd,
                    max_dest_rd_atomic: drd,
                    gid: Gid(gid),
                    qkey: if t == QpType::Ud { qkey } else { 0 },
                    buffer: buf.map(|(addr, rkey, len)| RemoteBuffer { addr, rkey, len }),
                },
            )
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 64,
            failure_persistence: None,
            rng_seed: proptest::test_runner::RngSeed::Fixed(0x4d35_5150),
            ..ProptestConfig::default()
        })]

        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..96)) {
            let _ = Message::decode(&bytes);
            let _ = Message::frame_len(&bytes);
        }

        #[test]
        fn random_bodies_behind_a_valid_header_never_panic(
            kind in 1u8..=4,
            body in proptest::collection::vec(any::<u8>(), 60),
        ) {
            let (_, len) = kind_info(kind).unwrap();
            let mut b = vec![0u8; len];
            b[0..4].copy_from_slice(&MAGIC);
            b[4] = VERSION;
            b[5] = kind;
            b[6..8].copy_from_slice(&(len as u16).to_be_bytes());
            let n = len - HEADER_LEN;
            b[HEADER_LEN..].copy_from_slice(&body[..n]);
            if let Ok(m) = Message::decode(&b) {
                // Whatever decodes re-encodes to the same bytes (no field is lost or masked).
                prop_assert_eq!(m.encode().unwrap(), b);
            }
        }

        #[test]
        fn encode_decode_round_trips(
            endpoint in arb_endpoint(),
            generation in any::<u32>(),
            reason in 0u8..=21,
        ) {
            let reason = WcStatus::from_u8(reason).unwrap();
            for m in [
                Message::Hello { generation, endpoint },
                Message::Rebuild { generation, endpoint, reason },
                Message::Ready { generation, qpn: endpoint.qpn, state: QpState::Rts },
            ] {
                let b = m.encode().unwrap();
                prop_assert_eq!(Message::decode(&b).unwrap(), m);
            }
        }
    }
}
