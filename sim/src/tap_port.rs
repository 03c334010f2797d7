//! A device bound to a Linux TAP interface: native RoCEv2 on a real (virtual) Ethernet link.
//!
//! The software ConnectX reads and writes whole Ethernet frames on the TAP device, the frames
//! its wire code already emits and parses (Ethernet, IPv4, UDP 4791, BTH..., ICRC), so any
//! RoCEv2 implementation on the other side of the link can talk to it, e.g. the kernel's
//! Soft-RoCE bound to the TAP netdev (`rdma link add rxe_tap type rxe netdev tap0`). On a TAP
//! link the only other host is the kernel's netdev: every frame the device sends goes to the
//! netdev's MAC (the kernel routes from there), and the device answers ARP requests for its own
//! IPv4 address (RFC 826) so the kernel can reach it. Every other frame (IPv6 neighbour
//! discovery, multicast, UDP to other ports, frames for other addresses) is dropped and counted
//! ([`TapStats`]). The masked-atomic trailer of [`crate::transport::ext_atomic`] never leaves
//! through a TAP device: masked atomics toward a peer reached through it are refused, since no
//! other RoCE implementation knows that encoding.
//!
//! Opening: `open("/dev/net/tun")` and `ioctl(TUNSETIFF)` with `IFF_TAP | IFF_NO_PI` (the
//! kernel's `Documentation/networking/tuntap.rst`); the link has carrier while the file is
//! open. The file descriptor is non-blocking and polled by every [`crate::Fabric::step`].

use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use mlx5_hw::Mtu;

use crate::wire::MacAddr;

/// `TUNSETIFF`: `_IOW('T', 202, int)` (the kernel's `include/uapi/linux/if_tun.h`).
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
/// `IFF_TAP` (`if_tun.h`): Ethernet frames.
const IFF_TAP: libc::c_short = 0x0002;
/// `IFF_NO_PI` (`if_tun.h`): no packet-information header before each frame.
const IFF_NO_PI: libc::c_short = 0x1000;
/// `SIOCGIFHWADDR` (`include/uapi/linux/sockios.h`).
const SIOCGIFHWADDR: libc::c_ulong = 0x8927;
/// `SIOCGIFMTU` (`sockios.h`).
const SIOCGIFMTU: libc::c_ulong = 0x8921;
/// `IFNAMSIZ` (`include/uapi/linux/if.h`).
const IFNAMSIZ: usize = 16;
/// Size of `struct ifreq` on 64-bit Linux (name plus a 24-byte union).
const IFREQ_LEN: usize = 40;

/// EtherType IPv4 (IEEE 802 numbers).
const ETH_P_IP: u16 = 0x0800;
/// EtherType ARP.
const ETH_P_ARP: u16 = 0x0806;
/// The RoCEv2 UDP destination port (IBTA Vol 1 Annex A17.2.1).
const ROCE_V2_PORT: u16 = 4791;
/// Largest frame read (a 9000-byte jumbo frame fits).
const MAX_FRAME: usize = 9216 + 64;
/// Frames read per poll, so a busy link cannot starve the step.
const MAX_PER_POLL: usize = 256;

/// What the TAP port did with what it received.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TapStats {
    /// RoCEv2 frames for the device, handed to the fabric.
    pub roce_rx: u64,
    /// Frames written to the TAP device.
    pub tx: u64,
    /// Frames that could not be written (the kernel's queue full or the link gone).
    pub tx_errors: u64,
    /// ARP requests for the device's address answered.
    pub arp_replies: u64,
    /// Frames that were not RoCEv2 for the device, dropped.
    pub dropped: u64,
}

/// A device's TAP interface.
#[derive(Debug)]
pub struct TapPort {
    fd: OwnedFd,
    name: String,
    /// The kernel netdev's MAC address: the destination of every frame sent.
    peer_mac: MacAddr,
    /// The netdev's MTU (bytes of IP datagram).
    mtu: u32,
    stats: TapStats,
}

impl AsRawFd for TapPort {
    /// The TAP file, for the fabric thread to sleep on.
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

fn ifreq(name: &str) -> io::Result<[u8; IFREQ_LEN]> {
    let b = name.as_bytes();
    if b.is_empty() || b.len() >= IFNAMSIZ || b.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("TAP name {name:?} must be 1 to 15 bytes without NUL (IFNAMSIZ)"),
        ));
    }
    let mut r = [0u8; IFREQ_LEN];
    r[..b.len()].copy_from_slice(b);
    Ok(r)
}

/// `ioctl(fd, req, &ifreq)`.
fn ioctl_ifreq(fd: RawFd, req: libc::c_ulong, r: &mut [u8; IFREQ_LEN]) -> io::Result<()> {
    // SAFETY: `r` is a live buffer of the size of `struct ifreq`, which these requests read
    // and write; `fd` is open for the duration of the call.
    let rc = unsafe { libc::ioctl(fd, req as _, r.as_mut_ptr()) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Query a netdev by name through a throw-away socket (`netdevice(7)`).
fn query_netdev(name: &str, req: libc::c_ulong) -> io::Result<[u8; IFREQ_LEN]> {
    let mut r = ifreq(name)?;
    // SAFETY: plain socket(2) call; the result is checked and owned below.
    let s = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if s < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `s` is a freshly opened descriptor nobody else owns.
    let s = unsafe { OwnedFd::from_raw_fd(s) };
    ioctl_ifreq(s.as_raw_fd(), req, &mut r)?;
    Ok(r)
}

/// The RoCE path MTU a netdev MTU allows, as rxe computes its port's active MTU: the netdev
/// MTU less `RXE_MAX_HDR_LENGTH` (80 bytes of headers), rounded down to an IB MTU, at least 256
/// (`eth_mtu_int_to_enum` in the kernel's `drivers/infiniband/sw/rxe/rxe_param.h`,
/// `rxe_set_mtu` in `rxe.c`); 1500 gives 1024.
pub fn roce_mtu(netdev_mtu: u32) -> Mtu {
    match netdev_mtu.saturating_sub(80) {
        r if r >= 4096 => Mtu::Mtu4096,
        r if r >= 2048 => Mtu::Mtu2048,
        r if r >= 1024 => Mtu::Mtu1024,
        r if r >= 512 => Mtu::Mtu512,
        _ => Mtu::Mtu256,
    }
}

/// What a received frame is.
#[derive(Debug, PartialEq, Eq)]
pub enum Inbound {
    /// A RoCEv2 frame for the device.
    Roce,
    /// An ARP request for the device's address: the reply to send.
    ArpRequest(Vec<u8>),
    /// Anything else.
    Other,
}

/// Classify a frame received on the link by a device at `ip` / `mac`.
pub fn classify(frame: &[u8], ip: Ipv4Addr, mac: MacAddr) -> Inbound {
    if frame.len() < 14 {
        return Inbound::Other;
    }
    let ethertype = u16::from_be_bytes([frame[12], frame[13]]);
    match ethertype {
        ETH_P_ARP => arp_reply(frame, ip, mac).map_or(Inbound::Other, Inbound::ArpRequest),
        ETH_P_IP => {
            let ipv4 = &frame[14..];
            if frame[..6] != mac.0 || ipv4.len() < 20 || ipv4[0] >> 4 != 4 || ipv4[9] != 17 {
                return Inbound::Other;
            }
            let ihl = (ipv4[0] & 0xf) as usize * 4;
            if ipv4[16..20] != ip.octets() || ipv4.len() < ihl + 8 {
                return Inbound::Other;
            }
            let dport = u16::from_be_bytes([ipv4[ihl + 2], ipv4[ihl + 3]]);
            if dport == ROCE_V2_PORT {
                Inbound::Roce
            } else {
                Inbound::Other
            }
        }
        _ => Inbound::Other,
    }
}

/// The reply to an ARP request (RFC 826; Ethernet/IPv4 only) asking for `ip`.
fn arp_reply(frame: &[u8], ip: Ipv4Addr, mac: MacAddr) -> Option<Vec<u8>> {
    let a = frame.get(14..42)?;
    // htype 1 (Ethernet), ptype IPv4, hlen 6, plen 4, oper 1 (request).
    if a[..8] != [0, 1, 0x08, 0x00, 6, 4, 0, 1] || a[24..28] != ip.octets() {
        return None;
    }
    let (sha, spa) = (&a[8..14], &a[14..18]);
    let mut r = Vec::with_capacity(60);
    r.extend_from_slice(sha);
    r.extend_from_slice(&mac.0);
    r.extend_from_slice(&ETH_P_ARP.to_be_bytes());
    r.extend_from_slice(&[0, 1, 0x08, 0x00, 6, 4, 0, 2]);
    r.extend_from_slice(&mac.0);
    r.extend_from_slice(&ip.octets());
    r.extend_from_slice(sha);
    r.extend_from_slice(spa);
    r.resize(60, 0); // The minimum Ethernet frame without FCS (IEEE 802.3).
    Some(r)
}

/// The Ethernet frame without anything after its IPv4 datagram (the masked-atomic trailer,
/// which only software ConnectX devices understand).
fn without_trailer(frame: &[u8]) -> &[u8] {
    if frame.len() >= 18 && u16::from_be_bytes([frame[12], frame[13]]) == ETH_P_IP {
        let total = u16::from_be_bytes([frame[16], frame[17]]) as usize;
        return &frame[..(14 + total).min(frame.len())];
    }
    frame
}

impl TapPort {
    /// Open (or create, with CAP_NET_ADMIN) the TAP interface `name`.
    pub fn open(name: &str) -> io::Result<TapPort> {
        let mut r = ifreq(name)?;
        r[16..18].copy_from_slice(&(IFF_TAP | IFF_NO_PI).to_ne_bytes());
        // SAFETY: the path is a NUL-terminated literal; the result is checked and owned below.
        let fd = unsafe {
            libc::open(
                c"/dev/net/tun".as_ptr(),
                libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!("open /dev/net/tun: {e} (is the tun module loaded?)"),
            ));
        }
        // SAFETY: `fd` was just opened and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        ioctl_ifreq(fd.as_raw_fd(), TUNSETIFF, &mut r).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("TUNSETIFF {name}: {e} (create it with `ip tuntap add {name} mode tap`, or run with CAP_NET_ADMIN)"),
            )
        })?;
        let hw = query_netdev(name, SIOCGIFHWADDR)?;
        // struct ifreq: ifr_hwaddr is a sockaddr at offset 16 (sa_family, then sa_data).
        let mut mac = [0u8; 6];
        mac.copy_from_slice(&hw[18..24]);
        let m = query_netdev(name, SIOCGIFMTU)?;
        let mtu = i32::from_ne_bytes([m[16], m[17], m[18], m[19]]).max(0) as u32;
        Ok(TapPort {
            fd,
            name: name.to_owned(),
            peer_mac: MacAddr(mac),
            mtu,
            stats: TapStats::default(),
        })
    }

    /// The interface name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The kernel netdev's MAC address, where every frame goes.
    pub fn peer_mac(&self) -> MacAddr {
        self.peer_mac
    }

    /// The netdev's MTU.
    pub fn mtu(&self) -> u32 {
        self.mtu
    }

    /// What the port did so far.
    pub fn stats(&self) -> TapStats {
        self.stats
    }

    /// Write a frame to the link (without a masked-atomic trailer); false if it failed (a full
    /// queue is a loss, as on a congested link).
    pub fn send(&mut self, frame: &[u8]) -> bool {
        let f = without_trailer(frame);
        // SAFETY: `f` is a live buffer of `f.len()` bytes; the fd is open.
        let n = unsafe { libc::write(self.fd.as_raw_fd(), f.as_ptr().cast(), f.len()) };
        if n < 0 || n as usize != f.len() {
            self.stats.tx_errors += 1;
            tracing::debug!(tap = self.name, error = %io::Error::last_os_error(), "TAP write failed; frame lost");
            return false;
        }
        self.stats.tx += 1;
        true
    }

    /// Read the frames waiting (at most a bounded number): RoCEv2 frames for the device at
    /// `ip` / `mac` go to `out`, ARP requests for `ip` are answered, the rest is dropped.
    pub fn poll(&mut self, ip: Ipv4Addr, mac: MacAddr, out: &mut Vec<Vec<u8>>) {
        let mut buf = vec![0u8; MAX_FRAME];
        for _ in 0..MAX_PER_POLL {
            // SAFETY: `buf` is a live buffer of `buf.len()` bytes; the fd is open.
            let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::WouldBlock {
                    tracing::debug!(tap = self.name, error = %e, "TAP read failed");
                }
                break;
            }
            let frame = &buf[..n as usize];
            match classify(frame, ip, mac) {
                Inbound::Roce => {
                    self.stats.roce_rx += 1;
                    out.push(frame.to_vec());
                }
                Inbound::ArpRequest(reply) => {
                    if self.send(&reply) {
                        self.stats.arp_replies += 1;
                    }
                }
                Inbound::Other => self.stats.dropped += 1,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IP: Ipv4Addr = Ipv4Addr::new(192, 168, 77, 2);
    const MAC: MacAddr = MacAddr([2, 0, 192, 168, 77, 2]);

    fn arp_request(target: Ipv4Addr) -> Vec<u8> {
        let sha = [0x5a, 1, 2, 3, 4, 5];
        let mut f = vec![0xff; 6];
        f.extend_from_slice(&sha);
        f.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1]);
        f.extend_from_slice(&sha);
        f.extend_from_slice(&[192, 168, 77, 1]);
        f.extend_from_slice(&[0; 6]);
        f.extend_from_slice(&target.octets());
        f
    }

    #[test]
    fn arp_requests_for_the_address_are_answered_others_dropped() {
        let Inbound::ArpRequest(r) = classify(&arp_request(IP), IP, MAC) else {
            panic!("no reply");
        };
        assert_eq!(r.len(), 60);
        assert_eq!(r[..6], [0x5a, 1, 2, 3, 4, 5], "to the asker");
        assert_eq!(r[6..12], MAC.0);
        assert_eq!(r[20..22], [0, 2], "a reply");
        assert_eq!(r[22..28], MAC.0, "sender hardware address");
        assert_eq!(r[28..32], IP.octets());
        assert_eq!(r[38..42], [192, 168, 77, 1], "target: the asker");
        assert_eq!(
            classify(&arp_request(Ipv4Addr::new(192, 168, 77, 9)), IP, MAC),
            Inbound::Other
        );
        assert_eq!(classify(&[1, 2, 3], IP, MAC), Inbound::Other);
    }

    #[test]
    fn only_rocev2_for_the_device_is_taken() {
        let pkt = crate::wire::Packet::new(
            crate::wire::Addressing::new(
                MacAddr([0x5a, 1, 2, 3, 4, 5]),
                MAC,
                Ipv4Addr::new(192, 168, 77, 1),
                IP,
                0xc000,
            ),
            crate::wire::Bth::new(
                crate::wire::Opcode::RC_SEND_ONLY,
                0x11,
                crate::wire::Psn::new(5),
            ),
        );
        let f = pkt.emit().unwrap();
        assert_eq!(classify(&f, IP, MAC), Inbound::Roce);
        assert_eq!(
            classify(&f, Ipv4Addr::new(192, 168, 77, 3), MAC),
            Inbound::Other,
            "another address"
        );
        assert_eq!(
            classify(&f, IP, MacAddr([2; 6])),
            Inbound::Other,
            "another MAC"
        );
        let mut other_port = f.clone();
        other_port[14 + 20 + 2..14 + 20 + 4].copy_from_slice(&53u16.to_be_bytes());
        assert_eq!(classify(&other_port, IP, MAC), Inbound::Other);
        let mut trailer = f.clone();
        trailer.extend_from_slice(&[9; 20]);
        assert_eq!(without_trailer(&trailer), &f[..]);
    }

    #[test]
    fn path_mtu_follows_the_netdev_as_rxe() {
        assert_eq!(roce_mtu(1500), Mtu::Mtu1024);
        assert_eq!(roce_mtu(9000), Mtu::Mtu4096);
        assert_eq!(roce_mtu(4176), Mtu::Mtu4096);
        assert_eq!(roce_mtu(4175), Mtu::Mtu2048);
        assert_eq!(roce_mtu(100), Mtu::Mtu256);
    }
}
