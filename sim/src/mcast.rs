//! UD multicast on the software ConnectX: each device's group table (this module, data only)
//! and the fan-out of a multicast datagram to every attached QP on every device of the fabric
//! (and, through the UDP ports, of the other processes), which the world does with these
//! tables ([`crate::world::World`]'s routing and delivery).
//!
//! What the device does, and the sources:
//! - A group is named by its GID; on RoCE v2 over IPv4 that is the IPv4-mapped group address
//!   (224.0.0.0/4) and the frame goes to the group MAC `01:00:5e` + low 23 bits
//!   (`mlx5_hw::Gid::multicast_mac`). A port accepts a multicast frame only when it has a QP
//!   attached to the group and the destination MAC is the group's (a NIC filters multicast
//!   by MAC, and the group is its steering rule); anything else is not received.
//! - The BTH names QPN 0xFFFFFF ([`mlx5_hw::MULTICAST_QPN`]); the receiving port hands one
//!   copy to every QP attached to the group that can receive, each checked against its own
//!   Q_Key and receive queue like any UD datagram (Soft-RoCE `rxe_recv.c`
//!   `rxe_rcv_mcast_pkt`: per-QP type/state and key checks, one clone per QP, a failure of
//!   one QP not affecting the others). A datagram to QPN 0xFFFFFF that is not for a group
//!   the port joined is dropped.
//! - The sending QP gets its own datagram back when it is attached to the group, unless it
//!   was created with `IBV_QP_CREATE_BLOCK_SELF_MCAST_LB` (verbs.h; mlx5 implements it in
//!   the kernel's `create_qp` as a block of multicast loopback to the QP itself). Other QPs
//!   of the sending device do receive it (multicast loopback is on for them).
//! - Frames to other processes: a multicast frame a device sends goes to every UDP peer of
//!   that device as well, and, with the peer convention on, to the IPv4 group itself
//!   (real IP multicast, which the devices whose QPs joined the group receive:
//!   [`crate::udp_port`]); a frame that arrived from another process is delivered locally
//!   only, so nothing circulates.
//! - The software ConnectX models RoCE v2 over IPv4 only: IPv6 groups (ff00::/8) are
//!   refused at attach with a clear error.

use std::collections::{BTreeMap, BTreeSet};

use mlx5_hw::Gid;

/// One device's multicast state: the groups its QPs joined, and which QPs block the
/// loopback of their own datagrams.
#[derive(Debug, Default)]
pub struct Groups {
    groups: BTreeMap<[u8; 16], BTreeSet<u32>>,
    block_self_lb: BTreeSet<u32>,
}

impl Groups {
    /// The IPv4 groups with a QP attached (what the device's UDP port joins,
    /// [`crate::udp_port::UdpPort::set_groups`]).
    pub fn ipv4_groups(&self) -> BTreeSet<std::net::Ipv4Addr> {
        self.groups
            .keys()
            .filter_map(|g| Gid(*g).ipv4())
            .map(std::net::Ipv4Addr::from)
            .collect()
    }

    /// Attach `qpn` to `gid`; false if it was attached already (nothing changes).
    pub fn attach(&mut self, gid: &Gid, qpn: u32) -> bool {
        self.groups.entry(gid.0).or_default().insert(qpn)
    }

    /// Detach `qpn` from `gid`; false if it was not attached.
    pub fn detach(&mut self, gid: &Gid, qpn: u32) -> bool {
        let Some(m) = self.groups.get_mut(&gid.0) else {
            return false;
        };
        let was = m.remove(&qpn);
        if m.is_empty() {
            self.groups.remove(&gid.0);
        }
        was
    }

    /// Forget a destroyed QP: detach it from every group (uverbs detaches a QP's groups when
    /// it is destroyed, `ib_uverbs_detach_umcast`).
    pub fn forget_qp(&mut self, qpn: u32) {
        self.groups.retain(|_, m| {
            m.remove(&qpn);
            !m.is_empty()
        });
        self.block_self_lb.remove(&qpn);
    }

    /// Mark `qpn` as created with `IBV_QP_CREATE_BLOCK_SELF_MCAST_LB`.
    pub fn block_self_loopback(&mut self, qpn: u32) {
        self.block_self_lb.insert(qpn);
    }

    /// The QPs attached to `gid`, in QPN order.
    pub fn members(&self, gid: &Gid) -> Vec<u32> {
        self.groups
            .get(&gid.0)
            .map(|m| m.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Whether any QP of the device is attached to `gid`.
    pub fn joined(&self, gid: &Gid) -> bool {
        self.groups.contains_key(&gid.0)
    }

    /// Whether `qpn` blocks the loopback of its own datagrams.
    pub fn blocks_self_loopback(&self, qpn: u32) -> bool {
        self.block_self_lb.contains(&qpn)
    }

    /// The groups `qpn` is attached to.
    pub fn groups_of(&self, qpn: u32) -> Vec<Gid> {
        self.groups
            .iter()
            .filter(|(_, m)| m.contains(&qpn))
            .map(|(g, _)| Gid(*g))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attach_detach_and_forget() {
        let g = Gid::from_ipv4([239, 0, 0, 1]);
        let h = Gid::from_ipv4([239, 0, 0, 2]);
        let mut t = Groups::default();
        assert!(t.attach(&g, 5));
        assert!(!t.attach(&g, 5), "twice: no change");
        assert!(t.attach(&g, 3));
        assert!(t.attach(&h, 5));
        assert_eq!(t.members(&g), vec![3, 5]);
        assert!(t.detach(&g, 3));
        assert!(!t.detach(&g, 3));
        assert_eq!(t.groups_of(5), vec![g, h]);
        t.forget_qp(5);
        assert!(!t.joined(&g) && !t.joined(&h));
    }
}
