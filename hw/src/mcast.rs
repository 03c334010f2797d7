//! UD multicast: group addresses, the Ethernet address of a group, and the destination QPN
//! of a multicast datagram.
//!
//! A UD QP joins a group with [`crate::Device::attach_mcast`] and leaves with
//! [`crate::Device::detach_mcast`]. A multicast send is a UD send whose address vector names
//! the group GID (and on RoCE the group's MAC) with destination QPN [`MULTICAST_QPN`]
//! (Linux `include/rdma/ib_verbs.h` `IB_MULTICAST_QPN`, which Soft-RoCE's `rxe_recv.c` steers
//! by; rdma-core `mlx5dv_set_dgram_seg` / qp.c `_set_datagram_seg` carry it into the datagram
//! segment's `dqp_dct` unchanged). Every QP attached to the group on every port that receives
//! the packet gets one copy, subject to its Q_Key.

use crate::attr::Gid;

/// Destination QPN of a multicast datagram (Linux `ib_verbs.h` `IB_MULTICAST_QPN`; the BTH
/// carries it, rxe `rxe_rcv_mcast_pkt` fans such packets out by destination GID).
pub const MULTICAST_QPN: u32 = 0x00ff_ffff;

impl Gid {
    /// Whether the GID is a multicast address: ff00::/8, or IPv4-mapped 224.0.0.0/4 (Linux
    /// `include/rdma/ib_addr.h` `rdma_is_multicast_addr`).
    pub fn is_multicast(&self) -> bool {
        self.0[0] == 0xff || self.ipv4().is_some_and(|ip| ip[0] & 0xf0 == 0xe0)
    }

    /// The Ethernet destination of a multicast GID on RoCE: for IPv4-mapped groups
    /// `01:00:5e` and the low 23 bits of the IPv4 address (RFC 1112 §6.4; Linux
    /// `ip_eth_mc_map`), for IPv6 groups `33:33` and the last four bytes (RFC 2464 §7; Linux
    /// `rdma_get_mcast_mac`). `None` for a unicast GID.
    pub fn multicast_mac(&self) -> Option<[u8; 6]> {
        if !self.is_multicast() {
            return None;
        }
        let g = &self.0;
        Some(match self.ipv4() {
            Some(ip) => [0x01, 0x00, 0x5e, ip[1] & 0x7f, ip[2], ip[3]],
            None => [0x33, 0x33, g[12], g[13], g[14], g[15]],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multicast_addresses_and_their_macs() {
        let v4 = Gid::from_ipv4([239, 129, 2, 3]);
        assert!(v4.is_multicast());
        assert_eq!(v4.multicast_mac(), Some([0x01, 0x00, 0x5e, 0x01, 2, 3]));
        assert!(Gid::from_ipv4([224, 0, 0, 1]).is_multicast());
        assert!(!Gid::from_ipv4([10, 0, 0, 1]).is_multicast());
        assert!(
            !Gid::from_ipv4([240, 0, 0, 1]).is_multicast(),
            "240/4 is not 224/4"
        );
        assert_eq!(Gid::from_ipv4([10, 0, 0, 1]).multicast_mac(), None);
        let mut v6 = [0u8; 16];
        v6[0] = 0xff;
        v6[1] = 0x0e;
        v6[12..].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        let v6 = Gid(v6);
        assert!(v6.is_multicast());
        assert_eq!(
            v6.multicast_mac(),
            Some([0x33, 0x33, 0xde, 0xad, 0xbe, 0xef])
        );
    }
}
