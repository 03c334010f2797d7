//! XRC on the software ConnectX through the data path: an initiator QP on one device sends
//! every RC operation to XRC SRQs on another through one target QP; receive completions are
//! found by the XRC SRQ; the kernel table's XRC_INI / XRC_TGT masks connect them; an SRQ of
//! another XRC domain is a NAK Invalid Request; a lost packet is retransmitted as on RC.

use std::time::Duration;

use crate::datapath_support;

use datapath_support::*;
use mlx5_hw::{
    AttrMask, CqInitAttr, Device, Mtu, QpAttr, QpCap, QpInitAttr, QpInitEx, QpState, QpType,
    SrqInitAttr, XrcSrqInitAttr, XrcdId,
};
use mlx5_qp::{Cq, Qp, SendWr, Srq, Wc, WcFlags, WcOpcode, WcStatus};
use mlx5_sim::SimDevice;

/// The receiving node: an XRC domain, a CQ, XRC SRQs on it, one target QP.
struct Target {
    dev: SimDevice,
    xrcd: XrcdId,
    cq: Cq,
    srqs: Vec<Srq>,
    tgt: mlx5_hw::QpInfo,
    buf: Buf,
}

fn target(dev: &SimDevice, nsrq: usize) -> Target {
    let pd = dev.alloc_pd().unwrap();
    let xrcd = dev.open_xrcd().unwrap();
    let cqi = dev
        .create_cq(&CqInitAttr {
            cqe: 256,
            ..CqInitAttr::default()
        })
        .unwrap();
    // SAFETY: the CQ lives as long as the device.
    let cq = unsafe { Cq::from_layout(&cqi.layout) }.unwrap();
    let srqs = (0..nsrq)
        .map(|_| {
            let s = dev
                .create_srq_xrc(
                    pd,
                    &XrcSrqInitAttr {
                        xrcd,
                        cq: cqi.id,
                        attr: SrqInitAttr {
                            max_wr: 16,
                            max_sge: 1,
                            srq_limit: 0,
                        },
                    },
                )
                .unwrap();
            // SAFETY: the SRQ lives as long as the device.
            unsafe { Srq::from_layout(&s.layout) }.unwrap()
        })
        .collect();
    let tgt = dev
        .create_qp_ex(
            pd,
            &QpInitAttr {
                qp_type: QpType::XrcRecv,
                send_cq: cqi.id,
                recv_cq: cqi.id,
                srq: None,
                cap: QpCap::default(),
                sq_sig_all: false,
            },
            &QpInitEx {
                xrcd: Some(xrcd),
                ..QpInitEx::default()
            },
        )
        .unwrap();
    let buf = Buf::new(dev, pd, 1 << 16, all_access());
    Target {
        dev: dev.clone(),
        xrcd,
        cq,
        srqs,
        tgt,
        buf,
    }
}

fn ini_opts() -> Opts {
    Opts {
        qp_type: QpType::XrcSend,
        cap: QpCap {
            max_send_wr: 64,
            max_recv_wr: 0,
            max_send_sge: 4,
            max_recv_sge: 0,
            max_inline_data: 128,
        },
        ..Opts::default()
    }
}

/// Reset → Init → RTR → RTS with exactly the masks the kernel table requires for `ty`.
fn bring_up(dev: &SimDevice, id: mlx5_hw::QpId, ty: QpType, peer: &SimDevice, peer_qpn: u32) {
    let mut a = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qp_access_flags: all_access(),
        ..QpAttr::default()
    };
    let m = AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS;
    dev.modify_qp(id, &a, m).unwrap();
    a.qp_state = QpState::Rtr;
    a.path_mtu = Mtu::Mtu1024;
    a.dest_qp_num = peer_qpn;
    a.rq_psn = 0x300;
    a.ah_attr = ah_to(peer);
    a.max_dest_rd_atomic = 4;
    a.min_rnr_timer = 1;
    let rtr =
        AttrMask::STATE | AttrMask::AV | AttrMask::PATH_MTU | AttrMask::DEST_QPN | AttrMask::RQ_PSN;
    let rtr = match ty {
        QpType::XrcRecv => rtr | AttrMask::MAX_DEST_RD_ATOMIC | AttrMask::MIN_RNR_TIMER,
        _ => rtr,
    };
    // The initiator's cell does not take the responder's attributes.
    if ty == QpType::XrcSend {
        assert!(dev
            .modify_qp(id, &a, rtr | AttrMask::MAX_DEST_RD_ATOMIC)
            .is_err());
    }
    dev.modify_qp(id, &a, rtr).unwrap();
    a.qp_state = QpState::Rts;
    a.sq_psn = 0x300;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 4;
    let rts = match ty {
        QpType::XrcSend => {
            AttrMask::STATE
                | AttrMask::SQ_PSN
                | AttrMask::TIMEOUT
                | AttrMask::RETRY_CNT
                | AttrMask::RNR_RETRY
                | AttrMask::MAX_QP_RD_ATOMIC
        }
        _ => AttrMask::STATE | AttrMask::SQ_PSN | AttrMask::TIMEOUT,
    };
    if ty == QpType::XrcRecv {
        // The target's RTS cell refuses the requester's retry counts.
        assert!(dev.modify_qp(id, &a, rts | AttrMask::RETRY_CNT).is_err());
    }
    dev.modify_qp(id, &a, rts).unwrap();
}

/// An initiator on `a` connected to a new target on `b` with `nsrq` XRC SRQs.
fn mesh(nsrq: usize) -> (mlx5_sim::Fabric, Side, Target) {
    let (f, da, db) = fabric2();
    let mut ini = side(&da, &ini_opts(), None);
    let t = target(&db, nsrq);
    bring_up(&da, ini.info.id, QpType::XrcSend, &db, t.tgt.qpn);
    bring_up(&db, t.tgt.id, QpType::XrcRecv, &da, ini.info.qpn);
    ini.qp.set_state(QpState::Rts);
    (f, ini, t)
}

fn recvs(f: &mlx5_sim::Fabric, t: &mut Target) -> Vec<Wc> {
    let mut none: [Qp; 0] = [];
    drain(f, &mut t.cq, &mut (&mut none[..], &mut t.srqs[..]))
}

#[test]
fn every_rc_operation_through_one_target_into_the_named_srq() {
    let (f, mut ini, mut t) = mesh(2);
    let cap = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("xrc_ops.pcap");
    f.capture_to(&cap).unwrap();
    let srqn = [t.srqs[0].srqn(), t.srqs[1].srqn()];
    for (k, s) in t.srqs.iter_mut().enumerate() {
        let off = 4096 * (k + 1);
        s.post_recv(10 + k as u64, &[t.buf.sge(off, 2048)]).unwrap();
        s.post_recv(20 + k as u64, &[t.buf.sge(off + 2048, 2048)])
            .unwrap();
    }
    // A two-packet SEND into SRQ 1, a SEND with immediate into SRQ 0.
    let big: Vec<u8> = (0..1500u32).map(|i| (i * 7) as u8).collect();
    ini.buf.bytes_mut()[..1500].copy_from_slice(&big);
    ini.qp
        .post(
            &SendWr::send(1)
                .sges(&[ini.buf.sge(0, 1500)])
                .xrc(srqn[1])
                .signaled(),
        )
        .unwrap();
    ini.qp
        .post(
            &SendWr::send_imm(2, 0xfeed)
                .inline(b"imm")
                .xrc(srqn[0])
                .signaled(),
        )
        .unwrap();
    // WRITE, WRITE with immediate (consumes an SRQ WQE), READ, CAS, FAA.
    ini.qp
        .post(
            &SendWr::write(3, t.buf.remote(100))
                .inline(b"written by XRC")
                .xrc(srqn[0])
                .signaled(),
        )
        .unwrap();
    ini.qp
        .post(
            &SendWr::write_imm(4, t.buf.remote(200), 0x77)
                .inline(b"wi")
                .xrc(srqn[0])
                .signaled(),
        )
        .unwrap();
    t.buf.bytes_mut()[300..308].copy_from_slice(b"readme!!");
    ini.qp
        .post(
            &SendWr::read(5, t.buf.remote(300))
                .sges(&[ini.buf.sge(2000, 8)])
                .xrc(srqn[1])
                .signaled(),
        )
        .unwrap();
    t.buf.bytes_mut()[512..520].copy_from_slice(&5u64.to_ne_bytes());
    ini.qp
        .post(
            &SendWr::comp_swap(6, t.buf.remote(512), ini.buf.sge(3000, 8), 5, 9)
                .xrc(srqn[0])
                .signaled(),
        )
        .unwrap();
    ini.qp
        .post(
            &SendWr::fetch_add(7, t.buf.remote(512), ini.buf.sge(3008, 8), 3)
                .xrc(srqn[1])
                .signaled(),
        )
        .unwrap();
    let sent = drain(&f, &mut ini.cq, &mut ini.qp);
    assert_eq!(
        sent.iter()
            .map(|w| (w.wr_id(), w.status()))
            .collect::<Vec<_>>(),
        (1..=7).map(|i| (i, WcStatus::Success)).collect::<Vec<_>>(),
        "{sent:?}"
    );
    let got = recvs(&f, &mut t);
    let by_id = |id: u64| got.iter().find(|w| w.wr_id() == id).copied();
    let w = by_id(11).expect("the SEND in SRQ 1's first WQE");
    assert_eq!(
        (w.opcode(), w.byte_len(), w.qp_num()),
        (WcOpcode::Recv, 1500, t.tgt.qpn)
    );
    assert_eq!(&t.buf.bytes()[8192..8192 + 1500], &big[..]);
    let w = by_id(10).expect("SEND_IMM in SRQ 0");
    assert!(w.flags().contains(WcFlags::WITH_IMM));
    assert_eq!((w.imm_data(), w.byte_len()), (0xfeed, 3));
    let w = by_id(20).expect("WRITE_IMM consumed SRQ 0's next WQE");
    assert_eq!(
        (w.opcode(), w.imm_data()),
        (WcOpcode::RecvRdmaWithImm, 0x77)
    );
    assert_eq!(got.len(), 3, "{got:?}");
    assert_eq!(&t.buf.bytes()[100..114], b"written by XRC");
    assert_eq!(&t.buf.bytes()[200..202], b"wi");
    assert_eq!(&ini.buf.bytes()[2000..2008], b"readme!!");
    assert_eq!(&ini.buf.bytes()[3000..3008], &5u64.to_ne_bytes());
    assert_eq!(&ini.buf.bytes()[3008..3016], &9u64.to_ne_bytes());
    assert_eq!(&t.buf.bytes()[512..520], &12u64.to_ne_bytes());
    // On the wire: XRC opcodes both ways, the XRCETH on every request naming its SRQ.
    f.stop_capture().unwrap();
    let mut requests = 0;
    for rec in mlx5_sim::pcap::PcapReader::open(&cap).unwrap() {
        let pkt = mlx5_sim::wire::Packet::parse(&rec.unwrap().data).unwrap();
        assert_eq!(pkt.bth.opcode.transport(), mlx5_sim::wire::Transport::Xrc);
        if pkt.bth.opcode.is_request() {
            requests += 1;
            assert!(srqn.contains(&pkt.xrceth.unwrap().srqn));
        } else {
            assert_eq!(pkt.xrceth, None);
        }
    }
    assert_eq!(requests, 8, "two SEND packets and one per other WR");
    no_driver_bugs(&f);
}

#[test]
fn an_srq_of_another_domain_is_an_invalid_request() {
    let (f, mut ini, t) = mesh(1);
    // An XRC SRQ of a second domain on the same device.
    let other = target(&t.dev, 1);
    assert_ne!(other.xrcd, t.xrcd);
    ini.qp
        .post(
            &SendWr::send(1)
                .inline(b"x")
                .xrc(other.srqs[0].srqn())
                .signaled(),
        )
        .unwrap();
    let w = drain(&f, &mut ini.cq, &mut ini.qp);
    assert_eq!(w[0].status(), WcStatus::RemInvReqErr, "{w:?}");
    assert_eq!(t.dev.query_qp(t.tgt.id).unwrap().qp_state, QpState::Error);
}

#[test]
fn a_lost_request_is_retransmitted_and_rnr_waits_for_a_receive() {
    let (f, mut ini, mut t) = mesh(1);
    let srqn = t.srqs[0].srqn();
    let db = t.dev.clone();
    f.faults().path(&ini.dev, &db).drop_psns(t.tgt.qpn, [0x301]);
    ini.qp
        .post(
            &SendWr::write(1, t.buf.remote(0))
                .inline(b"first")
                .xrc(srqn)
                .signaled(),
        )
        .unwrap();
    ini.qp
        .post(
            &SendWr::write(2, t.buf.remote(8))
                .inline(b"second")
                .xrc(srqn)
                .signaled(),
        )
        .unwrap();
    // No receive posted yet: the SEND is RNR-NAKed, then retried after the timer.
    ini.qp
        .post(&SendWr::send(3).inline(b"late").xrc(srqn).signaled())
        .unwrap();
    f.run_until_idle();
    t.srqs[0].post_recv(9, &[t.buf.sge(1024, 64)]).unwrap();
    let mut done = Vec::new();
    for _ in 0..50 {
        f.advance(Duration::from_millis(1));
        done.extend(drain(&f, &mut ini.cq, &mut ini.qp));
        if done.len() == 3 {
            break;
        }
    }
    assert_eq!(
        done.iter()
            .map(|w| (w.wr_id(), w.status()))
            .collect::<Vec<_>>(),
        vec![
            (1, WcStatus::Success),
            (2, WcStatus::Success),
            (3, WcStatus::Success)
        ]
    );
    assert_eq!(&t.buf.bytes()[..5], b"first");
    assert_eq!(&t.buf.bytes()[8..14], b"second");
    let got = recvs(&f, &mut t);
    assert_eq!((got.len(), got[0].wr_id(), got[0].byte_len()), (1, 9, 4));
    assert_eq!(f.faults().stats().dropped, 1);
    assert!(ini.dev.counter("rnr_nak_retry_err") >= 1);
    no_driver_bugs(&f);
}

#[test]
fn objects_refuse_what_verbs_refuses() {
    let (_f, ini, t) = mesh(1);
    // A WR without the remote SRQ, or with one on another QP type.
    let mut q = ini.qp;
    assert!(matches!(
        q.post(&SendWr::send(1).inline(b"x")),
        Err(mlx5_qp::Error::XrcSrqn(_))
    ));
    // The target is shared through the domain (ibv_open_qp) and lives until its last handle.
    let h = t.dev.open_qp(t.xrcd, t.tgt.qpn).unwrap();
    assert!(t.dev.close_xrcd(t.xrcd).is_err(), "busy: SRQ and target QP");
    t.dev.destroy_qp(t.tgt.id).unwrap();
    assert_eq!(t.dev.query_qp(h).unwrap().qp_state, QpState::Rts);
    t.dev.destroy_qp(h).unwrap();
    assert!(t.dev.query_qp(h).is_err());
    assert!(t.dev.open_qp(t.xrcd, t.tgt.qpn).is_err());
}
