//! Errors of frame parsing and emission.

/// The protocol layer a [`ParseError::Truncated`] refers to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layer {
    /// The 14-byte Ethernet II header.
    Ethernet,
    /// The IPv4 header.
    Ipv4,
    /// The 8-byte UDP header.
    Udp,
    /// The IB transport headers (BTH and extension headers).
    Transport,
    /// Payload, pad and ICRC.
    Payload,
}

impl core::fmt::Display for Layer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Self::Ethernet => "Ethernet header",
            Self::Ipv4 => "IPv4 header",
            Self::Udp => "UDP header",
            Self::Transport => "IB transport headers",
            Self::Payload => "payload, pad and ICRC",
        })
    }
}

/// Why a received frame is not a RoCEv2 packet the software ConnectX accepts.
///
/// Every variant is a drop on a real NIC; [`ParseError::IcrcMismatch`] is kept distinct because
/// the device counts it separately.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseError {
    /// The frame ends inside a header or before the ICRC.
    #[error("frame truncated: the {layer} needs {needed} bytes but only {available} remain")]
    Truncated {
        /// The layer being parsed.
        layer: Layer,
        /// Bytes that layer needs.
        needed: usize,
        /// Bytes left in the frame.
        available: usize,
    },
    /// The Ethernet type is not IPv4 (0x0800); RoCEv2 over IPv6 and RoCEv1 are not modelled.
    #[error("ethertype {0:#06x} is not IPv4 (0x0800)")]
    EtherType(u16),
    /// The IPv4 header is malformed (bad version, header length, total length or fragment).
    #[error("malformed IPv4 header: {0}")]
    Ipv4(&'static str),
    /// The IPv4 header checksum does not verify.
    #[error("IPv4 header checksum {found:#06x} does not verify (expected {expected:#06x})")]
    Ipv4Checksum {
        /// The checksum the header carries.
        found: u16,
        /// The checksum computed over the header.
        expected: u16,
    },
    /// The IP protocol is not UDP (17).
    #[error("IP protocol {0} is not UDP (17)")]
    IpProtocol(u8),
    /// The UDP destination port is not the RoCEv2 port 4791.
    #[error("UDP destination port {0} is not RoCEv2 (4791)")]
    UdpPort(u16),
    /// The UDP length disagrees with the IPv4 total length.
    #[error("UDP length {udp} disagrees with the IPv4 payload length {ip}")]
    UdpLength {
        /// Length in the UDP header.
        udp: u16,
        /// IPv4 total length minus the IPv4 header.
        ip: usize,
    },
    /// The BTH opcode is reserved or of a transport not modelled (RD, XRC, CNP).
    #[error("BTH opcode {0:#04x} is not a supported RC/UC/UD opcode")]
    Opcode(u8),
    /// The BTH transport header version is not 0 (IBTA Vol 1 §9.2: receivers drop others).
    #[error("BTH transport version {0} is not 0")]
    TransportVersion(u8),
    /// The AETH syndrome is reserved (IBTA Vol 1 §9.3.5).
    #[error("AETH syndrome {0:#04x} is reserved")]
    Syndrome(u8),
    /// The pad count exceeds the payload, or payload plus pad is not a multiple of 4 bytes.
    #[error("pad count {pad} is inconsistent with {len} bytes of payload and pad")]
    Pad {
        /// BTH pad count.
        pad: u8,
        /// Payload plus pad length found in the frame.
        len: usize,
    },
    /// The opcode carries no payload but the frame has bytes between the headers and the ICRC.
    #[error("opcode {0:#04x} carries no payload but the frame has {1} payload bytes")]
    UnexpectedPayload(u8, usize),
    /// The invariant CRC does not match the frame (IBTA Vol 1 Annex A17.3.3).
    #[error("ICRC {found:#010x} does not match the computed {expected:#010x}")]
    IcrcMismatch {
        /// The ICRC the frame carries (as a little-endian u32 of its 4 bytes).
        found: u32,
        /// The ICRC computed over the frame.
        expected: u32,
    },
}

/// Why a [`Packet`](super::Packet) cannot be put on the wire.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EmitError {
    /// A field does not fit its wire width (QPN, PSN, MSN, pad count, TVer, DSCP...).
    #[error("{field} = {value:#x} does not fit in {bits} bits")]
    FieldRange {
        /// The field's name.
        field: &'static str,
        /// The value given.
        value: u64,
        /// The field's width on the wire.
        bits: u32,
    },
    /// The opcode requires an extension header that the packet lacks.
    #[error("opcode {opcode} requires a {header} header")]
    MissingHeader {
        /// The opcode.
        opcode: super::Opcode,
        /// The missing header.
        header: &'static str,
    },
    /// The packet has an extension header its opcode does not carry.
    #[error("opcode {opcode} does not carry a {header} header")]
    UnexpectedHeader {
        /// The opcode.
        opcode: super::Opcode,
        /// The extra header.
        header: &'static str,
    },
    /// The opcode carries no payload but the packet has one.
    #[error("opcode {0} carries no payload")]
    UnexpectedPayload(super::Opcode),
    /// The frame would not fit an IPv4 datagram.
    #[error("a {0}-byte payload does not fit an IPv4 datagram")]
    TooLong(usize),
    /// The output buffer is smaller than the frame.
    #[error("buffer of {available} bytes is too small for a {needed}-byte frame")]
    BufferTooSmall {
        /// Frame length.
        needed: usize,
        /// Buffer length.
        available: usize,
    },
}
