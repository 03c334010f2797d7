//! UD ping-pong, like rdma-core's `ibv_ud_pingpong`: datagrams between two UD QPs, each
//! addressed with the peer's address handle, QPN and Q_Key.
//!
//! ```text
//! cargo run --example ud_pingpong -- [-s SIZE] [-n ITERS]
//! ```
//!
//! Both QPs live in this process on two software ConnectX devices, in deterministic mode.
//! A UD message is at most one path MTU, and on RoCE every receive starts with the 40-byte
//! GRH the device writes in front of the payload (IBTA §11.4.1.2; `IBV_WC_GRH`), so receive
//! buffers are 40 bytes longer than the message. Every datagram is checked byte for byte.

#[path = "../src/bin/support/side.rs"]
mod side;

use mlx5_direct::hw::QpType;
use mlx5_direct::qp::connect::{connect_pair, ConnectParams, PairSide, QpLink};
use mlx5_direct::qp::{Qp, SendWr, UdDest, Wc, WcFlags};
use mlx5_direct::sim::Fabric;
use side::{Devices, Side, SideCfg};
use std::process::ExitCode;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Bytes of the GRH in front of every UD receive on RoCE.
const GRH: usize = 40;
const RECVS: u32 = 8;

fn main() -> ExitCode {
    let mut size = 512usize;
    let mut iters = 100u64;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let v = args.next().and_then(|v| v.parse::<u64>().ok());
        match (a.as_str(), v) {
            ("-s", Some(v)) => size = v as usize,
            ("-n", Some(v)) => iters = v,
            _ => {
                eprintln!("usage: ud_pingpong [-s SIZE] [-n ITERS]");
                return ExitCode::from(2);
            }
        }
    }
    match run(size, iters) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ud_pingpong: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

fn pattern(i: u64, from: u8, size: usize) -> Vec<u8> {
    (0..size)
        .map(|k| from ^ (i as u8).wrapping_mul(31).wrapping_add(k as u8))
        .collect()
}

/// Step the fabric, then wait for one datagram on `s` and check it; repost the receive.
fn receive(fabric: &Fabric, s: &mut Side, want: &[u8], size: usize) -> Result<Wc> {
    fabric.run_until_idle();
    let mut wcs = [Wc::default(); 8];
    let n = s.cq.poll(&mut s.qps[..], &mut wcs)?;
    let mut got = None;
    for wc in &wcs[..n] {
        if !wc.is_ok() {
            return Err(format!("{} completed with {}", wc.opcode.name(), wc.status.name()).into());
        }
        if wc.opcode.is_recv() {
            got = Some(*wc);
        }
    }
    let wc = got.ok_or("no datagram arrived")?;
    let off = if wc.flags.contains(WcFlags::GRH) {
        GRH
    } else {
        0
    };
    if wc.byte_len as usize != size + off {
        return Err(format!("datagram of {} bytes, want {}", wc.byte_len, size + off).into());
    }
    if s.buf.read(size + off, size) != want {
        return Err("the datagram arrived damaged".into());
    }
    let sge = s.buf.sge(size, (size + GRH) as u32);
    s.qps[0].post_recv(wc.wr_id, std::slice::from_ref(&sge))?;
    Ok(wc)
}

fn send(s: &mut Side, dest: &UdDest, i: u64, bytes: &[u8]) -> Result<()> {
    s.buf.write(0, bytes);
    let sge = [s.buf.sge(0, bytes.len() as u32)];
    s.qps[0].post(&SendWr::send(i).sges(&sge).ud(dest).signaled())?;
    Ok(())
}

fn run(size: usize, iters: u64) -> Result<()> {
    let devs = Devices::sim_pair(false);
    let fabric = devs.fabric.clone().ok_or("no fabric")?;
    let cfg = SideCfg {
        qp_type: QpType::Ud,
        qps: 1,
        sq_depth: 16,
        rq_depth: RECVS,
        inline: 0,
        buf_len: 2 * size + GRH,
        srq: None,
    };
    let mut a = Side::new(devs.local.clone(), &cfg)?;
    let mut b = Side::new(devs.peer.clone().ok_or("no peer device")?, &cfg)?;
    let params = ConnectParams::default();
    let (ra, rb) = (a.qp_ref(0), b.qp_ref(0));
    let (da, db) = (a.dev.clone(), b.dev.clone());
    let (sa, sb) = (
        a.buf.sge(size, (size + GRH) as u32),
        b.buf.sge(size, (size + GRH) as u32),
    );
    let post = |sge| {
        move |qp: &mut Qp| {
            for i in 0..RECVS as u64 {
                qp.post_recv(i, std::slice::from_ref(&sge))?;
            }
            Ok(())
        }
    };
    let (ca, cb) = {
        let mut la = QpLink::new(&mut a.qps[0], &mut a.cq, post(sa));
        let mut lb = QpLink::new(&mut b.qps[0], &mut b.cq, post(sb));
        connect_pair(
            PairSide {
                dev: &*da,
                qp: ra,
                link: &mut la,
                params: &params,
            },
            PairSide {
                dev: &*db,
                qp: rb,
                link: &mut lb,
                params: &params,
            },
        )?
    };
    let to_b = ca.ud_peer().ok_or("no UD peer for A")?.dest();
    let to_a = cb.ud_peer().ok_or("no UD peer for B")?.dest();
    let mtu = ca.path_mtu().bytes() as usize;
    if size > mtu {
        return Err(format!("a UD message is at most one MTU ({mtu} bytes), not {size}").into());
    }
    println!(
        "ud_pingpong: A QPN {:#08x} ⇄ B QPN {:#08x}, Q_Key {:#x}, {size}-byte datagrams, MTU {mtu}",
        ca.local().qpn,
        cb.local().qpn,
        ca.local().qkey
    );
    let mut grh = false;
    for i in 0..iters {
        send(&mut a, &to_b, i, &pattern(i, 0xa, size))?;
        let wc = receive(&fabric, &mut b, &pattern(i, 0xa, size), size)?;
        if wc.src_qp != ca.local().qpn {
            return Err(format!("source QPN {:#x}, want {:#x}", wc.src_qp, ca.local().qpn).into());
        }
        grh |= wc.flags.contains(WcFlags::GRH);
        send(&mut b, &to_a, i, &pattern(i, 0xb, size))?;
        receive(&fabric, &mut a, &pattern(i, 0xb, size), size)?;
    }
    let bugs = fabric.driver_bugs();
    if !bugs.is_empty() {
        return Err(format!("driver bugs: {bugs:?}").into());
    }
    println!(
        "{iters} round trips, {} datagrams checked byte for byte (GRH in front: {})",
        2 * iters,
        if grh { "yes" } else { "no" }
    );
    drop((ca, cb));
    Ok(())
}
