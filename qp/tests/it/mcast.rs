//! UD multicast on the software ConnectX: one datagram to a group reaches every attached QP
//! on every device exactly once, none that is detached or never attached, each subject to its
//! Q_Key; the sender's own copy follows `IBV_QP_CREATE_BLOCK_SELF_MCAST_LB`; attach and
//! detach refuse what the kernel refuses.

use crate::datapath_support;

use datapath_support::*;
use mlx5_hw::{AhAttr, Device, Error as HwError, Gid, GlobalRoute, QpCreateFlags, QpType};
use mlx5_qp::{SendWr, UdDest, Wc, WcStatus};

const GROUP: [u8; 4] = [239, 1, 2, 3];

fn ud() -> Opts {
    Opts {
        qp_type: QpType::Ud,
        ..Opts::default()
    }
}

fn group_av(s: &Side, gid: Gid) -> [u8; 48] {
    let ah = s
        .dev
        .create_ah(
            s.pd,
            &AhAttr {
                port_num: 1,
                grh: Some(GlobalRoute {
                    dgid: gid,
                    hop_limit: 1,
                    ..GlobalRoute::default()
                }),
                ..AhAttr::default()
            },
        )
        .unwrap();
    // The datagram segment carries the group MAC (rdma-core `mlx5_create_ah` resolves it).
    assert_eq!(&ah.av[20..26], &gid.multicast_mac().unwrap());
    ah.av
}

fn group_ah(s: &Side, gid: Gid) -> UdDest {
    UdDest::new(&group_av(s, gid), mlx5_hw::MULTICAST_QPN, 0x1111_1111)
}

/// A UD QP on `dev`, in RTS, with `n` receives of 40 + 64 bytes posted.
fn member(dev: &mlx5_sim::SimDevice, o: &Opts, n: u64) -> Side {
    member_qkey(dev, o, n, 0x1111_1111)
}

fn member_qkey(dev: &mlx5_sim::SimDevice, o: &Opts, n: u64, qkey: u32) -> Side {
    let mut s = side(dev, o, None);
    connect_with(&mut s, dev, 0, |a| a.qkey = qkey);
    for i in 0..n {
        let off = (i as usize) * 128;
        s.qp.post_recv(i, &[s.buf.sge(off, 104)]).unwrap();
    }
    s
}

/// The payloads (after the GRH) of the receives completed on `s`.
fn received(f: &mlx5_sim::Fabric, s: &mut Side) -> Vec<Vec<u8>> {
    let wcs: Vec<Wc> = drain(f, &mut s.cq, &mut s.qp);
    wcs.iter()
        .filter(|w| w.opcode().is_recv())
        .map(|w| {
            assert_eq!(w.status(), WcStatus::Success, "{w:?}");
            let off = w.wr_id() as usize * 128;
            s.buf.bytes()[off + 40..off + w.byte_len() as usize].to_vec()
        })
        .collect()
}

fn send(f: &mlx5_sim::Fabric, s: &mut Side, dest: &UdDest, id: u64, msg: &[u8]) {
    s.qp.post(&SendWr::send(id).inline(msg).ud(dest).signaled())
        .unwrap();
    f.run_until_idle();
}

#[test]
fn one_copy_per_attached_qp_on_every_device_and_none_after_detach() {
    let (f, da, db) = fabric2();
    let gid = Gid::from_ipv4(GROUP);
    let mut tx = member(&da, &ud(), 8);
    let mut r1 = member(&da, &ud(), 8);
    let mut r2 = member(&db, &ud(), 8);
    let mut r3 = member(&db, &ud(), 8);
    let mut outsider = member(&db, &ud(), 8);
    let mut wrong_key = member_qkey(&db, &ud(), 8, 0x3333);
    for s in [&tx, &r1, &r2, &r3, &wrong_key] {
        s.dev.attach_mcast(s.info.id, &gid, 0).unwrap();
    }
    // Attaching twice changes nothing (one copy still).
    r1.dev.attach_mcast(r1.info.id, &gid, 0).unwrap();
    let dest = group_ah(&tx, gid);
    let bad_key = UdDest::new(&group_av(&tx, gid), mlx5_hw::MULTICAST_QPN, 0x2222);
    send(&f, &mut tx, &dest, 1, b"first");
    send(&f, &mut tx, &bad_key, 2, b"wrong key");
    send(&f, &mut tx, &dest, 3, b"second");
    // The sender's own datagrams come back to it: it is attached and does not block loopback.
    let sent: Vec<Wc> = drain(&f, &mut tx.cq, &mut tx.qp);
    let own: Vec<_> = sent.iter().filter(|w| w.opcode().is_recv()).collect();
    assert_eq!(
        sent.iter().filter(|w| !w.opcode().is_recv()).count(),
        3,
        "{sent:?}"
    );
    assert_eq!(own.len(), 2, "{sent:?}");
    for r in [&mut r1, &mut r2, &mut r3] {
        assert_eq!(received(&f, r), vec![b"first".to_vec(), b"second".to_vec()]);
    }
    assert!(received(&f, &mut outsider).is_empty(), "never attached");
    assert!(received(&f, &mut wrong_key).is_empty(), "Q_Key differs");

    r2.dev.detach_mcast(r2.info.id, &gid, 0).unwrap();
    send(&f, &mut tx, &dest, 4, b"third");
    assert!(received(&f, &mut r2).is_empty(), "detached");
    assert_eq!(received(&f, &mut r1), vec![b"third".to_vec()]);
    assert_eq!(received(&f, &mut r3), vec![b"third".to_vec()]);
    no_driver_bugs(&f);
}

#[test]
fn block_self_mcast_loopback_spares_only_the_sender() {
    let (f, da, _db) = fabric2();
    let gid = Gid::from_ipv4(GROUP);
    let o = Opts {
        create_flags: QpCreateFlags::BLOCK_SELF_MCAST_LB,
        ..ud()
    };
    let mut tx = member(&da, &o, 4);
    let mut same_dev = member(&da, &ud(), 4);
    for s in [&tx, &same_dev] {
        s.dev.attach_mcast(s.info.id, &gid, 0).unwrap();
    }
    let dest = group_ah(&tx, gid);
    send(&f, &mut tx, &dest, 1, b"hello");
    let wcs = drain(&f, &mut tx.cq, &mut tx.qp);
    assert_eq!(wcs.len(), 1, "only the send completion: {wcs:?}");
    assert!(!wcs[0].opcode().is_recv());
    assert_eq!(received(&f, &mut same_dev), vec![b"hello".to_vec()]);
    no_driver_bugs(&f);
}

#[test]
fn attach_and_detach_refuse_what_the_kernel_refuses() {
    let (_f, da, _db) = fabric2();
    let gid = Gid::from_ipv4(GROUP);
    let s = member(&da, &ud(), 0);
    let unicast = Gid::from_ipv4([10, 0, 0, 9]);
    assert!(matches!(
        da.attach_mcast(s.info.id, &unicast, 0),
        Err(HwError::InvalidArgument(_))
    ));
    let mut v6 = [0u8; 16];
    v6[0] = 0xff;
    v6[1] = 0x0e;
    v6[15] = 1;
    assert!(matches!(
        da.attach_mcast(s.info.id, &Gid(v6), 0),
        Err(HwError::Unsupported(_))
    ));
    assert!(matches!(
        da.detach_mcast(s.info.id, &gid, 0),
        Err(HwError::InvalidArgument(_))
    ));
    let rc = side(&da, &Opts::default(), None);
    assert!(matches!(
        da.attach_mcast(rc.info.id, &gid, 0),
        Err(HwError::InvalidArgument(_))
    ));
    assert!(matches!(
        da.create_qp_ex(
            rc.pd,
            &mlx5_hw::QpInitAttr {
                qp_type: QpType::Rc,
                send_cq: rc.cq_id,
                recv_cq: rc.cq_id,
                srq: None,
                cap: Opts::default().cap,
                sq_sig_all: false,
            },
            &mlx5_hw::QpInitEx {
                create_flags: QpCreateFlags::BLOCK_SELF_MCAST_LB,
                ..Default::default()
            },
        ),
        Err(HwError::InvalidArgument(_))
    ));
    // Destroying a QP detaches it from its groups.
    da.attach_mcast(s.info.id, &gid, 0).unwrap();
    let id = s.info.id;
    drop(s);
    da.destroy_qp(id).unwrap();
    let t = member(&da, &ud(), 0);
    da.attach_mcast(t.info.id, &gid, 0).unwrap();
    assert!(matches!(
        da.detach_mcast(id, &gid, 0),
        Err(HwError::UnknownHandle { .. })
    ));
}

#[test]
fn a_group_spans_processes_over_udp() {
    // Two fabrics standing for two processes, their devices peers over UDP on the loopback.
    let (fa, fb) = (mlx5_sim::Fabric::new(), mlx5_sim::Fabric::new());
    let da = fa.add_device(mlx5_sim::DeviceConfig::new([10, 3, 0, 1]));
    let db = fb.add_device(mlx5_sim::DeviceConfig::new([10, 3, 0, 2]));
    let ua = da.bind_udp("127.0.0.1:0").unwrap();
    let ub = db.bind_udp("127.0.0.1:0").unwrap();
    da.add_udp_peer([10, 3, 0, 2], ub).unwrap();
    db.add_udp_peer([10, 3, 0, 1], ua).unwrap();
    let gid = Gid::from_ipv4(GROUP);
    let mut tx = member(&da, &ud(), 0);
    let mut rx = [member(&db, &ud(), 4), member(&db, &ud(), 4)];
    for r in &rx {
        db.attach_mcast(r.info.id, &gid, 0).unwrap();
    }
    let dest = group_ah(&tx, gid);
    tx.qp
        .post(&SendWr::send(1).inline(b"across").ud(&dest).signaled())
        .unwrap();
    let mut got = [Vec::new(), Vec::new()];
    // The datagram crosses a real socket: step both sides until it is in (bounded).
    for _ in 0..2000 {
        fa.run_until_idle();
        fb.run_until_idle();
        for (k, r) in rx.iter_mut().enumerate() {
            got[k].extend(received(&fb, r));
        }
        if got.iter().all(|g| !g.is_empty()) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(got, [vec![b"across".to_vec()], vec![b"across".to_vec()]]);
    assert_eq!(drain(&fa, &mut tx.cq, &mut tx.qp).len(), 1);
    no_driver_bugs(&fa);
    no_driver_bugs(&fb);
}
