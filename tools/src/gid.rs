//! Which source GID a run uses on a RoCE port when `-x/--gid-index` is not given.
//!
//! A RoCE port's GID table holds one entry per IP address of its net device and per RoCE
//! version (Linux `drivers/infiniband/core/roce_gid_mgmt.c`): on a ConnectX typically
//! `fe80::…` v1, `fe80::…` v2, `::ffff:a.b.c.d` v1, `::ffff:a.b.c.d` v2; on Soft-RoCE, which
//! speaks only RoCE v2, `fe80::…` and `::ffff:a.b.c.d`. Index 0 is the IPv6 link-local
//! address, which the kernel cannot route between two ports of one host. Like perftest
//! without `-x` (perftest `src/perftest_resources.c`, `get_best_gid_index`: RoCE v2 beats v1,
//! an IPv4 address beats an IPv6 one), [`pick`] prefers a RoCE v2 GID of an IPv4 address;
//! with perftest's `--ipv6` (the same function: `user_param->ipv6` turns the address family's
//! preference around), [`pick_for`] prefers one of an IPv6 address.

use mlx5_hw::Gid;

/// One entry of a port's GID table, as read from the device and sysfs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GidEntry {
    /// Its index in the table.
    pub index: u32,
    /// The GID (all zero: an empty slot).
    pub gid: Gid,
    /// The kernel's name of its type (`RoCE v2`, `IB/RoCE v1`), if known
    /// (`/sys/class/infiniband/DEV/ports/N/gid_attrs/types/INDEX`).
    pub kind: Option<String>,
}

impl GidEntry {
    /// Whether no entry can be better: a RoCE v2 GID of an IPv4 address (a caller reading a
    /// large table may stop at the first one, which [`pick`] would choose).
    pub fn is_best(&self) -> bool {
        self.is_best_for(false)
    }

    /// [`GidEntry::is_best`] for a run that prefers IPv6 addresses when `ipv6` (`--ipv6`).
    pub fn is_best_for(&self, ipv6: bool) -> bool {
        self.rank(ipv6) == Some(0)
    }

    fn is_roce_v2(&self) -> bool {
        self.kind.as_deref().is_some_and(|k| k.trim() == "RoCE v2")
    }

    fn rank(&self, ipv6: bool) -> Option<u8> {
        if self.gid == Gid::default() {
            return None;
        }
        let preferred = self.gid.ipv4().is_some() != ipv6;
        Some(match (self.is_roce_v2(), preferred) {
            (true, true) => 0,
            (true, false) => 1,
            (false, true) => 2,
            (false, false) => 3,
        })
    }
}

/// The index to use among `entries`: the first RoCE v2 GID of an IPv4 address, else the first
/// RoCE v2 GID, else the first IPv4 one, else the first non-empty one; 0 when the table is
/// empty.
pub fn pick(entries: &[GidEntry]) -> u32 {
    pick_for(entries, false)
}

/// [`pick`], preferring GIDs of IPv6 addresses when `ipv6` (`--ipv6`): the first RoCE v2 GID
/// of an IPv6 address, else the first RoCE v2 GID, else the first IPv6 one, else the first
/// non-empty one.
pub fn pick_for(entries: &[GidEntry], ipv6: bool) -> u32 {
    entries
        .iter()
        .filter_map(|e| e.rank(ipv6).map(|r| (r, e.index)))
        .min()
        .map_or(0, |(_, i)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(index: u32, gid: Gid, kind: &str) -> GidEntry {
        GidEntry {
            index,
            gid,
            kind: (!kind.is_empty()).then(|| format!("{kind}\n")),
        }
    }

    fn link_local() -> Gid {
        let mut g = [0u8; 16];
        g[0] = 0xfe;
        g[1] = 0x80;
        g[15] = 1;
        Gid(g)
    }

    #[test]
    fn soft_roce_table_picks_the_ipv4_gid() {
        let t = [
            e(0, link_local(), "RoCE v2"),
            e(1, Gid::from_ipv4([192, 0, 2, 1]), "RoCE v2"),
        ];
        assert_eq!(pick(&t), 1);
        assert!(t[1].is_best() && !t[0].is_best());
    }

    #[test]
    fn connectx_table_picks_ipv4_roce_v2_over_v1() {
        let v4 = Gid::from_ipv4([10, 0, 0, 7]);
        let t = [
            e(0, link_local(), "IB/RoCE v1"),
            e(1, link_local(), "RoCE v2"),
            e(2, v4, "IB/RoCE v1"),
            e(3, v4, "RoCE v2"),
        ];
        assert_eq!(pick(&t), 3);
        // Without an IPv4 address, the RoCE v2 link-local entry.
        assert_eq!(pick(&t[..2]), 1);
    }

    #[test]
    fn ipv6_turns_the_family_preference_around() {
        let v4 = Gid::from_ipv4([10, 0, 0, 7]);
        let t = [
            e(0, link_local(), "IB/RoCE v1"),
            e(1, link_local(), "RoCE v2"),
            e(2, v4, "IB/RoCE v1"),
            e(3, v4, "RoCE v2"),
        ];
        assert_eq!(pick_for(&t, true), 1);
        assert!(t[1].is_best_for(true) && !t[3].is_best_for(true));
        // No IPv6 GID: the IPv4 one, RoCE v2 first (as without --ipv6).
        assert_eq!(pick_for(&t[2..], true), 3);
    }

    #[test]
    fn unknown_types_and_empty_slots() {
        let t = [
            e(0, Gid::default(), ""),
            e(1, link_local(), ""),
            e(2, Gid::from_ipv4([10, 0, 0, 7]), ""),
        ];
        assert_eq!(pick(&t), 2);
        assert_eq!(pick(&t[..2]), 1);
        assert_eq!(pick(&[]), 0);
        assert_eq!(pick(&t[..1]), 0);
    }
}
