//! Fuzz harness `roce_frames`: arbitrary RoCEv2 frames delivered to a software ConnectX whose
//! RC, UC and UD QPs are live (connected, receives posted, requests outstanding), so both the
//! responder and the requester paths see them. Input: records of one selector byte, one
//! length byte and that many bytes. Selector bits 0–2 pick the QP (side A or B × RC, UC, UD)
//! the frame is addressed to; bit 3 sends the bytes as the whole Ethernet frame, unchanged;
//! otherwise they are the transport headers and payload (BTH first, its destination QP set
//! to the chosen one) behind correct Ethernet, IPv4 and UDP headers from the peer device,
//! with a correct ICRC (IBTA Vol. 1 Annex A17.3.3) — so they pass the link checks and reach
//! the transport. Nothing may panic, no WR may complete twice. Shared by
//! `fuzz/fuzz_targets/roce_frames.rs` and the stable replay in `tests/it/fuzz_replay.rs`.

use super::sim_world::World;
use mlx5_direct::sim::wire::icrc;

/// The Ethernet + IPv4 + UDP headers of a RoCEv2 datagram of `len` transport bytes (ICRC
/// included) from `src` to `dst` (RFC 791, RFC 768; UDP port 4791, RoCEv2 Annex A17.2).
fn headers(src: ([u8; 6], [u8; 4]), dst: ([u8; 6], [u8; 4]), len: usize) -> Vec<u8> {
    let mut f = Vec::with_capacity(42 + len);
    f.extend_from_slice(&dst.0);
    f.extend_from_slice(&src.0);
    f.extend_from_slice(&[0x08, 0x00]);
    let total = (20 + 8 + len) as u16;
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[6] = 0x40; // don't fragment
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&src.1);
    ip[16..20].copy_from_slice(&dst.1);
    let sum = mlx5_direct::sim::wire::ipv4::internet_checksum(&ip);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&0xc000u16.to_be_bytes());
    f.extend_from_slice(&4791u16.to_be_bytes());
    f.extend_from_slice(&((8 + len) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f
}

/// Run one input.
pub fn run(data: &[u8]) {
    run_world(data);
}

/// [`run`], returning the world afterwards (its counters).
pub fn run_world(data: &[u8]) -> World {
    let mut w = World::new();
    w.traffic(1);
    w.settle();
    // Requests outstanding while the frames arrive: the requester path has PSNs to match.
    w.traffic(100);
    let addr = |s: usize| {
        let d = w.sides[s].ctx.sim_device().expect("sim");
        (d.mac(), d.ipv4().octets())
    };
    let (a, b) = (addr(0), addr(1));
    let mut rest = data;
    let mut frames = 0;
    while let [sel, len, tail @ ..] = rest {
        let n = (*len as usize).min(tail.len());
        let (body, next) = tail.split_at(n);
        rest = next;
        frames += 1;
        if frames > 16 {
            break;
        }
        let fabric = w.fabric.fabric();
        if sel & 8 != 0 {
            fabric.inject_frame(body.to_vec());
            continue;
        }
        let (side, q) = (((sel & 7) / 3) as usize % 2, ((sel & 7) % 3) as usize);
        let (src, dst) = if side == 0 { (b, a) } else { (a, b) };
        let mut transport = body.to_vec();
        if transport.len() >= 8 {
            let qpn = w.sides[side].qps[q].qpn().to_be_bytes();
            transport[5..8].copy_from_slice(&qpn[1..]);
        }
        let mut frame = headers(src, dst, transport.len() + 4);
        frame.extend_from_slice(&transport);
        let crc = icrc(&frame[14..]);
        frame.extend_from_slice(&crc.to_le_bytes());
        fabric.inject_frame(frame);
    }
    w.settle();
    w.traffic(200);
    w.settle();
    w
}
