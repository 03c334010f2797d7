//! The RoCEv2 invariant CRC (ICRC).
//!
//! IBTA Vol 1 Annex A17.3.3 (RoCEv2 over IPv4): a CRC-32 (the Ethernet polynomial, reflected,
//! initial value and final XOR all-ones) over a pseudo-packet in which the fields that routers
//! may change are replaced by ones:
//!
//! 1. 8 bytes of 0xff standing for the masked LRH of native IB;
//! 2. the IPv4 header with TOS (DSCP and ECN), TTL and header checksum set to all-ones;
//! 3. the UDP header with the checksum set to 0xffff;
//! 4. the BTH with byte 4 (FECN, BECN, reserved; IB's resv8a) set to 0xff;
//! 5. the rest of the transport headers, the payload and the pad, unchanged.
//!
//! The 4 ICRC bytes follow the pad, least significant byte first. Checked against frames sent by
//! the Linux kernel's Soft-RoCE (`drivers/infiniband/sw/rxe/rxe_icrc.c` computes the same
//! pseudo-packet), see `sim/tests/wire_golden_rxe.rs`.

use super::ipv4::Ipv4Header;
use super::packet::Bth;
use super::udp::UdpHeader;

/// Length of the ICRC trailer.
pub const ICRC_LEN: usize = 4;

/// Bytes of IPv4 + UDP + BTH that the pseudo-header copies and masks.
const MASKED_LEN: usize = Ipv4Header::LEN + UdpHeader::LEN + Bth::LEN;

/// Byte positions, within IPv4 + UDP + BTH, that the pseudo-header sets to 0xff: the IPv4 TOS
/// (1), TTL (8) and header checksum (10, 11), the UDP checksum (26, 27) and BTH byte 4 (32).
const MASKED_POSITIONS: [usize; 7] = [1, 8, 10, 11, 26, 27, 32];

/// The ICRC of a RoCEv2-over-IPv4 datagram: `datagram` runs from the first byte of the IPv4
/// header (which must have no options) to the last pad byte, the ICRC itself excluded.
///
/// The result goes on the wire as `icrc(..).to_le_bytes()`. A datagram shorter than its IPv4,
/// UDP and base transport headers has no meaningful ICRC; it is hashed with whatever masked
/// positions it has, without panicking.
pub fn icrc(datagram: &[u8]) -> u32 {
    let split = datagram.len().min(MASKED_LEN);
    let (head, rest) = datagram.split_at(split);
    let mut masked = [0u8; MASKED_LEN];
    masked[..split].copy_from_slice(head);
    for pos in MASKED_POSITIONS {
        if pos < split {
            masked[pos] = 0xff;
        }
    }
    let mut crc = crc32fast::Hasher::new();
    crc.update(&[0xff; 8]);
    crc.update(&masked[..split]);
    crc.update(rest);
    crc.finalize()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masked_positions_are_the_variant_fields() {
        let udp = Ipv4Header::LEN;
        let bth = udp + UdpHeader::LEN;
        assert_eq!(MASKED_POSITIONS, [1, 8, 10, 11, udp + 6, udp + 7, bth + 4]);
    }

    #[test]
    fn variant_fields_do_not_change_the_icrc_but_others_do() {
        let base: Vec<u8> = (0u8..64).collect();
        let reference = icrc(&base);
        for pos in MASKED_POSITIONS {
            let mut v = base.clone();
            v[pos] ^= 0x5a;
            assert_eq!(icrc(&v), reference, "byte {pos} is masked");
        }
        for pos in (0..64).filter(|p| !MASKED_POSITIONS.contains(p)) {
            let mut v = base.clone();
            v[pos] ^= 0x01;
            assert_ne!(icrc(&v), reference, "byte {pos} is covered");
        }
    }

    #[test]
    fn short_input_does_not_panic() {
        assert_ne!(icrc(&[]), icrc(&[0]));
        let _ = icrc(&[0u8; 5]);
    }
}
