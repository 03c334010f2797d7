//! How masked (extended) atomic operands travel: the software ConnectX's own representation.
//!
//! ConnectX executes `MLX5_OPCODE_ATOMIC_MASKED_CS` / `_FA` (rdma-core `mlx5dv.h`), but the
//! wire encoding of the extended atomic request is not in any public source we found (IBTA
//! defines only the 28-byte AtomicETH of CmpSwap / FetchAdd, Vol 1 §9.3.4). So the software
//! ConnectX sends a valid RoCEv2 CmpSwap or FetchAdd packet (the AtomicETH carries the swap or
//! add value and the compare value or field boundary, and the ICRC covers it) and appends the
//! full masked operands *after* the IPv4 datagram, where Ethernet padding would go. Receivers
//! that parse the frame by its IPv4 total length (the software ConnectX, tshark) ignore those
//! bytes as a trailer; the frame bytes are still the UDP payload between processes, so the
//! operands cross a process boundary too.
//!
//! Trailer layout (40 bytes, big-endian): magic `"MX5A"`, kind (1 masked CS, 2 masked FA),
//! operand size (4 or 8), 2 reserved bytes, then four u64: compare, compare mask, swap, swap
//! mask (masked CS) or add, boundary, 0, 0 (masked FA).

use crate::wqe::AtomicOp;

/// Length of the trailer.
pub const TRAILER_LEN: usize = 40;
const MAGIC: &[u8; 4] = b"MX5A";

/// The trailer for a masked atomic, `None` for any other operation.
pub fn encode(op: &AtomicOp) -> Option<[u8; TRAILER_LEN]> {
    let (kind, size, words) = match *op {
        AtomicOp::MaskedCs {
            size,
            compare,
            compare_mask,
            swap,
            swap_mask,
        } => (1u8, size, [compare, compare_mask, swap, swap_mask]),
        AtomicOp::MaskedFa {
            size,
            add,
            boundary,
        } => (2u8, size, [add, boundary, 0, 0]),
        _ => return None,
    };
    let mut t = [0u8; TRAILER_LEN];
    t[..4].copy_from_slice(MAGIC);
    t[4] = kind;
    t[5] = size;
    for (i, w) in words.iter().enumerate() {
        t[8 + i * 8..16 + i * 8].copy_from_slice(&w.to_be_bytes());
    }
    Some(t)
}

/// The masked atomic of a trailer, if `bytes` (what follows the IPv4 datagram) is one.
pub fn decode(bytes: &[u8]) -> Option<AtomicOp> {
    let t: &[u8; TRAILER_LEN] = bytes.get(..TRAILER_LEN)?.try_into().ok()?;
    if &t[..4] != MAGIC || !matches!(t[5], 4 | 8) {
        return None;
    }
    let w = |i: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&t[8 + i * 8..16 + i * 8]);
        u64::from_be_bytes(b)
    };
    match t[4] {
        1 => Some(AtomicOp::MaskedCs {
            size: t[5],
            compare: w(0),
            compare_mask: w(1),
            swap: w(2),
            swap_mask: w(3),
        }),
        2 => Some(AtomicOp::MaskedFa {
            size: t[5],
            add: w(0),
            boundary: w(1),
        }),
        _ => None,
    }
}

/// The bytes after the IPv4 datagram of an Ethernet frame (empty if the frame is too short to
/// tell).
pub fn after_datagram(frame: &[u8]) -> &[u8] {
    const IP: usize = crate::wire::IPV4_OFFSET;
    let Some(len) = frame.get(IP + 2..IP + 4) else {
        return &[];
    };
    let end = IP + u16::from_be_bytes([len[0], len[1]]) as usize;
    frame.get(end..).unwrap_or(&[])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masked_operands_round_trip_and_others_have_none() {
        let ops = [
            AtomicOp::MaskedCs {
                size: 4,
                compare: 1,
                compare_mask: 0xff,
                swap: 2,
                swap_mask: 0xf0,
            },
            AtomicOp::MaskedFa {
                size: 8,
                add: 5,
                boundary: 1 << 31,
            },
        ];
        for op in ops {
            let t = encode(&op).unwrap();
            assert_eq!(decode(&t), Some(op));
        }
        assert_eq!(encode(&AtomicOp::Faa { add: 1 }), None);
        assert_eq!(decode(&[0u8; 40]), None);
        assert_eq!(decode(b"MX5A"), None);
    }
}
