//! UD multicast: one sender, three receivers on two software ConnectX devices, one group.
//! Every receiver attached to the group gets every datagram exactly once; the third receiver
//! detaches halfway and gets none after that. Every datagram is checked byte for byte, with
//! its source QPN, and the program exits 0 only if everything arrived as expected.
//!
//! ```text
//! cargo run --example ud_multicast
//! cargo run --example ud_multicast -- -d mlx5_0     (two contexts of an mlx5 device, rdma-core)
//! ```
//!
//! A multicast send is a UD send to the group's address (an address handle for the group GID,
//! here the IPv4-mapped 239.1.2.3, whose Ethernet destination is the group MAC 01:00:5e:01:02:03)
//! and the destination QPN 0xFFFFFF (`mlx5_hw::MULTICAST_QPN`); receivers join with
//! `ibv_attach_mcast` (`Qp::attach_mcast`). UD receives start with the 40-byte GRH.

use mlx5_direct::datapath::{SendWr, WcFlags};
use mlx5_direct::hw::transition::{Step, ToInit, ToRtr, ToRts};
use mlx5_direct::hw::{AhAttr, Gid, GlobalRoute, MULTICAST_QPN};
use mlx5_direct::{Context, Cq, Mr, Qp, QpInit};
use std::time::Duration;

const QKEY: u32 = 0x1234_5678;
const GRH: usize = 40;
const MSGS: u64 = 10;
const DETACH_AFTER: u64 = 5;
const SLOT: usize = 128;
const WAIT: Duration = Duration::from_secs(10);

type Res<T> = Result<T, Box<dyn std::error::Error>>;

struct Receiver {
    name: &'static str,
    cq: Cq,
    qp: Qp,
    mr: Mr,
    got: Vec<u64>,
}

fn to_rts(qp: &mut Qp) -> Res<()> {
    qp.modify_all(&[
        Step::Init(ToInit::Datagram {
            port: 1,
            pkey_index: 0,
            qkey: QKEY,
        }),
        Step::Rtr(ToRtr::Ud),
        Step::Rts(ToRts::Unreliable { sq_psn: 0 }),
    ])?;
    Ok(())
}

fn message(i: u64) -> Vec<u8> {
    format!("multicast datagram {i:02}").into_bytes()
}

fn receiver(ctx: &Context, name: &'static str, group: &Gid) -> Res<Receiver> {
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(64)?;
    let mut qp = pd.create_qp(&QpInit::ud(&cq).max_recv_wr(MSGS as u32))?;
    let mr = pd.alloc_mr(SLOT * MSGS as usize)?;
    to_rts(&mut qp)?;
    for i in 0..MSGS {
        qp.post_recv(i, &[mr.sge(i as usize * SLOT, SLOT as u32)?])?;
    }
    qp.attach_mcast(group, 0)?;
    Ok(Receiver {
        name,
        cq,
        qp,
        mr,
        got: Vec::new(),
    })
}

/// Take datagram `i` from `r` and check it: the next receive, the bytes, the sender.
fn expect(r: &mut Receiver, i: u64, src_qpn: u32) -> Res<()> {
    let slot = r.got.len() as u64;
    let wc = r.cq.wait_for(&mut r.qp, slot, WAIT)?;
    let want = message(i);
    if !wc.flags().contains(WcFlags::GRH) || wc.byte_len() as usize != GRH + want.len() {
        return Err(format!("{}: datagram {i}: {wc:?}", r.name).into());
    }
    let data = r.mr.read(slot as usize * SLOT + GRH, want.len())?;
    if data != want || wc.src_qp() != src_qpn {
        return Err(format!(
            "{}: datagram {i} reads {:?} from QPN {:#x}",
            r.name,
            String::from_utf8_lossy(&data),
            wc.src_qp()
        )
        .into());
    }
    r.got.push(i);
    Ok(())
}

fn main() -> Res<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    // `-d DEVICE`: the two "devices" are two contexts of that RDMA device (through rdma-core;
    // the group's datagrams loop back through it); without it, two software ConnectX devices.
    let args: Vec<String> = std::env::args().skip(1).collect();
    let device = match args.as_slice() {
        [] => None,
        [d, name] if d == "-d" || d == "--ib-dev" => Some(name.clone()),
        [extra, ..] => {
            eprintln!("ud_multicast: unexpected argument {extra:?}: it takes only -d DEVICE");
            std::process::exit(2);
        }
    };
    let (a, b) = match &device {
        Some(d) => (Context::open(d)?, Context::open(d)?),
        None => Context::sim_pair()?,
    };
    let group = Gid::from_ipv4([239, 1, 2, 3]);

    let pd = a.alloc_pd()?;
    let mut send_cq = a.create_cq(64)?;
    let mut tx = pd.create_qp(&QpInit::ud(&send_cq).max_inline_data(64))?;
    to_rts(&mut tx)?;
    let ah = pd.create_ah(&AhAttr {
        port_num: 1,
        grh: Some(GlobalRoute {
            dgid: group,
            hop_limit: 1,
            ..GlobalRoute::default()
        }),
        ..AhAttr::default()
    })?;
    let dest = ah.dest(MULTICAST_QPN, QKEY);

    let mut rs = [
        receiver(&a, "receiver 1 (device A)", &group)?,
        receiver(&b, "receiver 2 (device B)", &group)?,
        receiver(&b, "receiver 3 (device B)", &group)?,
    ];
    println!(
        "group {} (MAC {:02x?}): sender QPN {:#x} on {}, receivers {:#x} on {}, {:#x} and {:#x} on {}",
        std::net::Ipv4Addr::from([239, 1, 2, 3]),
        group.multicast_mac().unwrap_or_default(),
        tx.qpn(),
        a.name(),
        rs[0].qp.qpn(),
        a.name(),
        rs[1].qp.qpn(),
        rs[2].qp.qpn(),
        b.name()
    );

    for i in 0..MSGS {
        if i == DETACH_AFTER {
            let r = &rs[2];
            r.qp.detach_mcast(&group, 0)?;
            println!("{} detached after {} datagrams", r.name, r.got.len());
        }
        tx.post(&SendWr::send(i).inline(&message(i)).ud(&dest).signaled())?;
        send_cq.wait_for(&mut tx, i, WAIT)?;
        for (k, r) in rs.iter_mut().enumerate() {
            if k == 2 && i >= DETACH_AFTER {
                continue;
            }
            expect(r, i, tx.qpn())?;
        }
    }
    // Receivers 2 and 3 are on one device, which fans each datagram out in one step: once
    // receiver 2 has datagram 9, receiver 3 would have had it too. Nothing may be left.
    for r in rs.iter_mut() {
        let mut wcs = [mlx5_direct::datapath::Wc::default(); 4];
        let n = r.cq.poll(&mut r.qp, &mut wcs)?;
        if n != 0 {
            return Err(format!("{}: {n} datagram(s) too many: {:?}", r.name, &wcs[..n]).into());
        }
    }
    let all: Vec<u64> = (0..MSGS).collect();
    let before: Vec<u64> = (0..DETACH_AFTER).collect();
    for (k, r) in rs.iter().enumerate() {
        let want = if k == 2 { &before } else { &all };
        if &r.got != want {
            return Err(format!("{} got {:?}, want {want:?}", r.name, r.got).into());
        }
        println!("{}: {} datagrams, each once, checked", r.name, r.got.len());
    }
    println!("ud_multicast: OK");
    Ok(())
}
