//! Connection setup on the software ConnectX through `mlx5_connect`: the in-process pair
//! and the TCP handshake between two threads bring real QPs to RTS with crossed PSNs, and data
//! then flows; UD gets its Q_Key and address handle; the illegal transitions and bad values
//! `docs/sources.md` §19 lists are refused with the state table's messages.

use crate::connect_support;

use connect_support::*;
use mlx5_connect::{self as connect, diag, ConnectError, Connection};
use mlx5_hw::transition::{self, PeerPath, Step, ToInit, ToRtr, ToRts};
use mlx5_hw::{AccessFlags, AhAttr, AttrMask, Device, GlobalRoute, Mtu, QpAttr, QpState, QpType};
use mlx5_qp::{SendWr, WcOpcode, WcStatus};
use mlx5_sim::{DeviceConfig, Fabric};
use std::net::TcpListener;

/// A SEND from `a` lands in `b`'s first receive, and a WRITE into the buffer `b` announced.
fn send_and_write(
    f: &Fabric,
    a: &mut Side,
    b: &mut Side,
    peer_buf: connect::RemoteBuffer,
    tag: u8,
) {
    let msg = [tag; 100];
    a.qp.post(&SendWr::send(1).inline(&msg).signaled()).unwrap();
    let wa = a.pump(f);
    assert_eq!(wa.len(), 1, "{wa:?}");
    assert_eq!(
        (wa[0].status(), wa[0].opcode()),
        (WcStatus::Success, WcOpcode::Send)
    );
    let wb = b.pump(f);
    assert_eq!(wb.len(), 1, "{wb:?}");
    assert_eq!(
        (wb[0].status(), wb[0].opcode(), wb[0].byte_len()),
        (WcStatus::Success, WcOpcode::Recv, 100)
    );
    let slot = (wb[0].wr_id() - 1000) as usize;
    assert_eq!(b.slot(slot, 100), &msg[..]);

    let data: Vec<u8> = (0..200u32).map(|i| (i as u8) ^ tag).collect();
    a.qp.post(
        &SendWr::write(2, remote(&peer_buf, 64))
            .inline(&data[..100])
            .signaled(),
    )
    .unwrap();
    let wa = a.pump(f);
    assert_eq!((wa.len(), wa[0].status()), (1, WcStatus::Success), "{wa:?}");
    assert_eq!(&b.buf.bytes()[64..164], &data[..100]);
}

#[test]
fn in_process_rc_pair_reaches_rts_and_carries_data() {
    let (f, da, db) = fabric2();
    let mut a = Side::new(&da, QpType::Rc);
    let mut b = Side::new(&db, QpType::Rc);
    let (ca, cb) = connect_pair(&mut a, &mut b, &params());
    for (dev, c) in [(&da, &ca), (&db, &cb)] {
        let attr = dev.query_qp(c.qp().id).unwrap();
        assert_eq!(attr.qp_state, QpState::Rts);
        assert_eq!(attr.dest_qp_num, c.peer().qpn);
        assert_eq!(attr.rq_psn, c.peer().psn);
        assert_eq!(attr.sq_psn, c.local().psn);
        assert_eq!(attr.path_mtu, Mtu::Mtu1024);
        assert_eq!(
            attr.min_rnr_timer, 12,
            "the full RTR mask carries min_rnr_timer"
        );
    }
    assert_eq!(
        a.qp.state(),
        QpState::Rts,
        "the data path learned the state"
    );
    assert_eq!(
        a.qp.rq_outstanding(),
        8,
        "receives were posted during connect"
    );
    assert_eq!(
        ca.remote_buffer(),
        Some(b.buf.remote_buffer()),
        "each side announces its own"
    );
    assert_eq!(cb.remote_buffer(), Some(a.buf.remote_buffer()));
    let (b_buf, a_buf) = (ca.remote_buffer().unwrap(), cb.remote_buffer().unwrap());
    send_and_write(&f, &mut a, &mut b, b_buf, 0x5a);
    send_and_write(&f, &mut b, &mut a, a_buf, 0xa5);
    no_driver_bugs(&f);
}

#[test]
fn tcp_handshake_between_two_threads_then_traffic() {
    let f = Fabric::new();
    let da = f.add_device(DeviceConfig::new([10, 0, 0, 1]).mtu(Mtu::Mtu4096));
    let db = f.add_device(DeviceConfig::new([10, 0, 0, 2]));
    let mut a = Side::new(&da, QpType::Rc);
    let mut b = Side::new(&db, QpType::Rc);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let pb = b.params(&params());
    let server = std::thread::spawn(move || {
        let qb = b.qp_ref();
        let dev = b.dev.clone();
        let c = Connection::accept(&listener, &dev, qb, &mut b.link(), &pb).unwrap();
        (b, c)
    });
    let (qa, pa) = (a.qp_ref(), a.params(&params()));
    let ca = Connection::connect(addr, &da, qa, &mut a.link(), &pa).unwrap();
    let (mut b, cb) = server.join().unwrap();
    assert_eq!(ca.path_mtu(), Mtu::Mtu1024, "min of 4096 and 1024");
    assert_eq!(ca.peer().qpn, b.info.qpn);
    assert_eq!(cb.peer().psn, ca.local().psn);
    assert_eq!(ca.remote_buffer(), Some(b.buf.remote_buffer()));
    assert_eq!(cb.remote_buffer(), Some(a.buf.remote_buffer()));
    let rb = ca.remote_buffer().unwrap();
    let ra = cb.remote_buffer().unwrap();
    send_and_write(&f, &mut a, &mut b, rb, 1);
    send_and_write(&f, &mut b, &mut a, ra, 2);
    // The dumps read what the device and the data path hold.
    let rep = diag::qp_report(&da, &ca.qp(), Some(&a.qp)).unwrap();
    let s = rep.to_string();
    assert!(s.contains("state RTS [data path: RTS]"), "{s}");
    assert!(rep.warnings().is_empty(), "{:?}", rep.warnings());
    assert!(diag::counter_report(&da, 1)
        .unwrap()
        .to_string()
        .contains("port_xmit_packets"));
    ca.close().unwrap();
    no_driver_bugs(&f);
}

#[test]
fn ud_pair_gets_qkey_and_address_handle() {
    let (f, da, db) = fabric2();
    let mut a = Side::new(&da, QpType::Ud);
    let mut b = Side::new(&db, QpType::Ud);
    let p = {
        let mut p = params();
        p.qkey = 0x0bad_cafe;
        p
    };
    let (qa, qb) = (a.qp_ref(), b.qp_ref());
    let (ca, _cb) = try_connect_pair_with(&mut a, &p, &mut b, &p).unwrap();
    assert_eq!(db.query_qp(qb.id).unwrap().qkey, 0x0bad_cafe);
    let peer = ca.ud_peer().expect("UD connect creates the peer's AH");
    assert_eq!((peer.qpn, peer.qkey), (qb.qpn, 0x0bad_cafe));
    let dest = peer.dest();
    a.qp.post(&SendWr::send(7).inline(b"datagram").ud(&dest).signaled())
        .unwrap();
    let wa = a.pump(&f);
    assert_eq!((wa.len(), wa[0].status()), (1, WcStatus::Success), "{wa:?}");
    let wb = b.pump(&f);
    assert_eq!(wb.len(), 1, "{wb:?}");
    assert_eq!(wb[0].src_qp(), qa.qpn);
    // A UD receive starts with the 40-byte GRH area.
    let slot = (wb[0].wr_id() - 1000) as usize;
    assert_eq!(&b.slot(slot, 48)[40..48], b"datagram");
    no_driver_bugs(&f);
}

fn apply(dev: &dyn Device, s: &Side, from: QpState, step: &Step) -> String {
    transition::apply(
        dev,
        s.info.id,
        s.info.layout.qp_type,
        s.info.qpn,
        from,
        step,
    )
    .unwrap_err()
    .to_string()
}

fn rc_rtr(dest_qpn: u32, rq_psn: u32, mtu: Mtu, dev: &mlx5_sim::SimDevice) -> Step {
    Step::Rtr(ToRtr::Rc {
        path: PeerPath {
            path_mtu: mtu,
            dest_qpn,
            rq_psn,
            ah: AhAttr {
                port_num: 1,
                grh: Some(GlobalRoute {
                    dgid: dev.gid(),
                    hop_limit: 64,
                    ..GlobalRoute::default()
                }),
                ..AhAttr::default()
            },
        },
        max_dest_rd_atomic: 4,
        min_rnr_timer: 12,
    })
}

#[test]
fn illegal_transitions_are_refused_with_the_table_messages() {
    let (_f, da, db) = fabric2();
    let a = Side::new(&da, QpType::Rc);
    let b = Side::new(&db, QpType::Rc);
    let rts = Step::Rts(ToRts::Rc {
        sq_psn: 1,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 1,
    });
    // Skipping states.
    assert_eq!(
        apply(&da, &a, QpState::Reset, &rts),
        "illegal QP transition RESET -> RTS for a RC QP"
    );
    assert_eq!(
        apply(
            &da,
            &a,
            QpState::Reset,
            &rc_rtr(b.info.qpn, 1, Mtu::Mtu1024, &db)
        ),
        "illegal QP transition RESET -> RTR for a RC QP"
    );
    assert_eq!(
        apply(&da, &a, QpState::Reset, &Step::Error),
        "illegal QP transition RESET -> ERR for a RC QP"
    );
    let init = Step::Init(ToInit::Connected {
        port: 1,
        pkey_index: 0,
        access: AccessFlags::REMOTE_WRITE,
    });
    transition::apply(
        &da,
        a.info.id,
        QpType::Rc,
        a.info.qpn,
        QpState::Reset,
        &init,
    )
    .unwrap();
    assert_eq!(
        apply(&da, &a, QpState::Init, &rts),
        "illegal QP transition INIT -> RTS for a RC QP"
    );
    // A PSN wider than 24 bits.
    let e = apply(
        &da,
        &a,
        QpState::Init,
        &rc_rtr(b.info.qpn, 1 << 24, Mtu::Mtu1024, &db),
    );
    assert!(
        e.starts_with("invalid attribute IBV_QP_RQ_PSN: rq_psn = 16777216 (0x1000000) exceeds"),
        "{e}"
    );
    // A path MTU above the port's (the sim's ports run 1024).
    let e = apply(
        &da,
        &a,
        QpState::Init,
        &rc_rtr(b.info.qpn, 1, Mtu::Mtu4096, &db),
    );
    assert_eq!(e, "invalid attribute IBV_QP_PATH_MTU: path_mtu = 4096 bytes is above the port's MTU of 1024 bytes");
    // A missing attribute (a hand-made mask without MIN_RNR_TIMER).
    let (attr, mask) = rc_rtr(b.info.qpn, 1, Mtu::Mtu1024, &db)
        .build(QpState::Init, QpType::Rc)
        .unwrap();
    let e = da
        .modify_qp(a.info.id, &attr, mask - AttrMask::MIN_RNR_TIMER)
        .unwrap_err()
        .to_string();
    assert_eq!(e, "INIT -> RTR on a RC QP requires IBV_QP_MIN_RNR_TIMER");
    // The QP is still in Init after every refusal.
    assert_eq!(da.query_qp(a.info.id).unwrap().qp_state, QpState::Init);
    // Error -> RTS is never legal.
    transition::apply(
        &da,
        a.info.id,
        QpType::Rc,
        a.info.qpn,
        QpState::Init,
        &Step::Error,
    )
    .unwrap();
    assert_eq!(
        apply(&da, &a, QpState::Error, &rts),
        "illegal QP transition ERR -> RTS for a RC QP"
    );
    let _: QpAttr = da.query_qp(a.info.id).unwrap();
}

#[test]
fn connect_refuses_a_qp_that_is_not_fresh() {
    let (_f, da, db) = fabric2();
    let mut a = Side::new(&da, QpType::Rc);
    let mut b = Side::new(&db, QpType::Rc);
    let p = params();
    for round in 0..2 {
        let r = try_connect_pair_with(&mut a, &p, &mut b, &p);
        if round == 0 {
            r.unwrap();
            continue;
        }
        let e = r.unwrap_err();
        assert!(
            matches!(
                e,
                ConnectError::WrongState {
                    state: QpState::Rts,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("use rebuild"), "{e}");
    }
}

#[test]
fn uc_pair_carries_writes_and_refuses_reads_at_post() {
    let (f, da, db) = fabric2();
    let mut a = Side::new(&da, QpType::Uc);
    let mut b = Side::new(&db, QpType::Uc);
    let qa = a.qp_ref();
    let (ca, _cb) = connect_pair(&mut a, &mut b, &params());
    let attr = da.query_qp(qa.id).unwrap();
    assert_eq!(
        attr.qp_access_flags,
        AccessFlags::REMOTE_WRITE,
        "UC default access"
    );
    assert_eq!(
        (attr.max_rd_atomic, attr.timeout),
        (0, 0),
        "UC has no RC attributes"
    );
    let rb = ca.remote_buffer().unwrap();
    send_and_write(&f, &mut a, &mut b, rb, 0x77);
    let e =
        a.qp.post(&SendWr::read(3, remote(&rb, 0)).sges(&[a.buf.sge(0, 8)]));
    assert!(e.is_err(), "READ is not a UC operation");
    no_driver_bugs(&f);
}

#[test]
fn infiniband_ports_connect_by_lid_without_a_grh() {
    let f = Fabric::new();
    let ib = |ip: [u8; 4], lid: u16| DeviceConfig {
        lid,
        link_layer: mlx5_hw::LinkLayer::InfiniBand,
        ..DeviceConfig::new(ip)
    };
    let da = f.add_device(ib([10, 0, 0, 1], 0x11));
    let db = f.add_device(ib([10, 0, 0, 2], 0x22));
    let mut a = Side::new(&da, QpType::Rc);
    let mut b = Side::new(&db, QpType::Rc);
    let qa = a.qp_ref();
    let (ca, _cb) = connect_pair(&mut a, &mut b, &params());
    let attr = da.query_qp(qa.id).unwrap();
    assert_eq!(attr.ah_attr.dlid, 0x22);
    assert!(
        attr.ah_attr.grh.is_none(),
        "no GRH on an InfiniBand path unless forced"
    );
    let rb = ca.remote_buffer().unwrap();
    send_and_write(&f, &mut a, &mut b, rb, 0x0b);
    no_driver_bugs(&f);
}
