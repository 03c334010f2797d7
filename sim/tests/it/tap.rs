//! The TAP port against the real Linux network stack, in a private network namespace (needs
//! root and `/dev/net/tun`; skipped with a note otherwise): frames the device sends are
//! accepted by the kernel's IPv4 and UDP layers (Ethernet destination, IPv4 checksum, UDP
//! length and checksum all right), the device answers the kernel's ARP, takes RoCEv2 frames
//! for it and drops the rest, its port MTU follows the netdev's, and masked atomics toward a
//! peer behind the tap are refused.

use std::net::UdpSocket;
use std::process::Command;
use std::time::Duration;

use crate::common;

use common::*;
use mlx5_cq::*;
use mlx5_hw::{Device, Gid, Mtu, QpType};
use mlx5_sim::{DeviceConfig, Fabric};
use mlx5_wqe::*;

const TAP: &str = "tapsim0";
const KERNEL_IP: [u8; 4] = [192, 168, 77, 1];
const SIM_IP: [u8; 4] = [192, 168, 77, 2];

fn sh(args: &[&str]) -> bool {
    Command::new(args[0])
        .args(&args[1..])
        .status()
        .is_ok_and(|s| s.success())
}

/// Move this thread into a new network namespace with `TAP` up at `KERNEL_IP`/24.
fn private_netns_with_tap() -> Result<(), String> {
    // SAFETY: plain system calls with no pointers.
    if unsafe { libc::geteuid() } != 0 {
        return Err("not root".into());
    }
    if !std::path::Path::new("/dev/net/tun").exists() {
        return Err("no /dev/net/tun".into());
    }
    // SAFETY: unshare(2) of the network namespace affects this thread only.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        return Err(format!("unshare: {}", std::io::Error::last_os_error()));
    }
    let ok = sh(&["ip", "link", "set", "lo", "up"])
        && sh(&["ip", "tuntap", "add", TAP, "mode", "tap"])
        && sh(&["ip", "link", "set", TAP, "up"])
        && sh(&["ip", "addr", "add", "192.168.77.1/24", "dev", TAP]);
    if ok {
        Ok(())
    } else {
        Err("ip tuntap / ip addr failed".into())
    }
}

fn wait(fabric: &Fabric, mut done: impl FnMut() -> bool) -> bool {
    for _ in 0..2000 {
        fabric.step();
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    false
}

#[test]
fn a_device_on_a_tap_talks_to_the_kernel_network_stack() {
    let r = std::thread::spawn(|| {
        if let Err(why) = private_netns_with_tap() {
            eprintln!("skipped: {why}");
            return;
        }
        run();
    })
    .join();
    if let Err(e) = r {
        std::panic::resume_unwind(e);
    }
}

fn run() {
    let fabric = Fabric::new();
    let dev = fabric.add_device(DeviceConfig::new(SIM_IP).mtu(Mtu::Mtu4096));
    dev.bind_tap(TAP).expect("bind_tap");
    assert_eq!(
        dev.query_port(1).unwrap().active_mtu,
        Mtu::Mtu1024,
        "a 1500-byte netdev gives 1024 as on rxe"
    );
    let kernel = UdpSocket::bind(("192.168.77.1", 4791)).expect("bind 4791");
    kernel.set_nonblocking(true).unwrap();

    // Sim -> kernel: an RC SEND to a QP behind the tap.
    let o = Opts::new(QpType::Rc);
    let mut s = side(&dev, &o, None);
    modify(&s, init_attr(&o));
    modify(&s, rtr_attr(&o, 0x99, Gid::from_ipv4(KERNEL_IP), 7));
    modify(&s, rts_attr(&o, 1000));
    let m = Mem::new(&dev, s.pd, 64, o.access);
    m.write(0, b"over a real link");
    let sge = m.sge(0, 16);
    s.qp.post(OPCODE_SEND, 0, CTRL_CQ_UPDATE, 0, |w| {
        w.push(&DataSeg::new(sge.length, sge.lkey, sge.addr))
            .unwrap();
    });
    let mut buf = [0u8; 2048];
    let mut got = None;
    assert!(
        wait(&fabric, || {
            if let Ok((n, from)) = kernel.recv_from(&mut buf) {
                got = Some((n, from));
            }
            got.is_some()
        }),
        "the kernel received the frame as a UDP datagram to 4791"
    );
    let (n, from) = got.unwrap();
    assert_eq!(from.ip().to_string(), "192.168.77.2");
    let d = &buf[..n];
    assert_eq!(n, 12 + 16 + 4, "BTH, payload, ICRC");
    assert_eq!(d[0], 0x04, "RC SEND only");
    assert_eq!(u32::from_be_bytes([0, d[5], d[6], d[7]]), 0x99);
    assert_eq!(u32::from_be_bytes([0, d[9], d[10], d[11]]), 1000, "PSN");
    assert_eq!(&d[12..28], b"over a real link");

    // A masked atomic toward a peer behind the tap is refused, not sent.
    let res = Mem::new(&dev, s.pd, 64, o.access);
    s.scq.drain();
    let (rl, ra) = (res.lkey(), res.addr());
    s.qp.post(
        OPCODE_ATOMIC_MASKED_CS,
        OPMOD_EXT_ATOMIC_64,
        CTRL_CQ_UPDATE,
        0,
        |w| {
            w.push(&RaddrSeg::new(0x1000, 0x1234)).unwrap();
            w.push(&MaskedCs64Seg::new(1, 1, 2, 2)).unwrap();
            w.push(&DataSeg::new(8, rl, ra)).unwrap();
        },
    );
    let mut err = None;
    assert!(wait(&fabric, || {
        for c in s.scq.drain() {
            // The unanswered SEND before it is flushed first.
            if c.opcode() == CQE_REQ_ERR && c.as_err().syndrome != SYNDROME_WR_FLUSH_ERR {
                err = Some(c.as_err().syndrome);
            }
        }
        err.is_some()
    }));
    assert_eq!(err, Some(SYNDROME_LOCAL_QP_OP_ERR));

    // Kernel -> sim: the kernel ARPs for the device, which answers; the datagram arrives as a
    // RoCEv2 frame (its ICRC cannot match: the kernel's IP header is not the one the payload's
    // ICRC was computed over), and a datagram to another port is dropped.
    let before = dev.counter("port_rcv_packets");
    kernel
        .send_to(&d[..n], ("192.168.77.2", 4791))
        .expect("send to the device");
    kernel
        .send_to(b"not roce", ("192.168.77.2", 5000))
        .expect("send to another port");
    assert!(
        wait(&fabric, || dev.tap_stats().unwrap().roce_rx >= 1
            && dev.tap_stats().unwrap().dropped >= 1),
        "stats {:?}",
        dev.tap_stats()
    );
    let st = dev.tap_stats().unwrap();
    assert!(st.arp_replies >= 1, "{st:?}");
    assert!(dev.counter("port_rcv_packets") > before);
    assert!(dev.counter("rx_icrc_encapsulated") >= 1);
}
