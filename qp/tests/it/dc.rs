//! DC on the software ConnectX through the data path: one DC initiator reaches targets on two
//! devices with every RC operation, each WQE naming its target; the targets receive through
//! their SRQs (found by the SRQ, with the DCT number as QPN and the DCI as source); the DCI
//! connects to one target at a time, in band, and disconnects when it moves on or goes idle;
//! a wrong access key is dropped and counted at the target and ends in RETRY_EXC_ERR at the
//! initiator; a lost connect is retransmitted; a responder error fails the DCI while the
//! target keeps serving others. What mlx5 refuses: `dc_refusals`.

use std::time::Duration;

use crate::datapath_support;

use datapath_support::*;
use mlx5_hw::{
    AttrMask, CqInitAttr, DcInit, DciStreams, Device, Mtu, PdId, QpAttr, QpCap, QpInfo, QpInitAttr,
    QpInitEx, QpState, QpType, SrqInitAttr,
};
use mlx5_qp::{Cq, DcDest, Qp, SendWr, Srq, Wc, WcFlags, WcOpcode, WcStatus};
use mlx5_sim::{DeviceConfig, Fabric, SimDevice};

pub(crate) const KEY: u64 = 0x1ee7_a330;

/// A DC target: its SRQ and CQ, its buffer, its number.
pub(crate) struct Target {
    pub(crate) dev: SimDevice,
    pub(crate) cq: Cq,
    pub(crate) srq: Srq,
    pub(crate) dct: QpInfo,
    pub(crate) dctn: u32,
    pub(crate) buf: Buf,
}

pub(crate) fn target(dev: &SimDevice, key: u64) -> Target {
    let pd = dev.alloc_pd().unwrap();
    let cqi = dev
        .create_cq(&CqInitAttr {
            cqe: 256,
            ..CqInitAttr::default()
        })
        .unwrap();
    // SAFETY: the CQ lives as long as the device.
    let cq = unsafe { Cq::from_layout(&cqi.layout) }.unwrap();
    let s = dev
        .create_srq(
            pd,
            &SrqInitAttr {
                max_wr: 32,
                max_sge: 1,
                srq_limit: 0,
            },
        )
        .unwrap();
    // SAFETY: the SRQ lives as long as the device.
    let srq = unsafe { Srq::from_layout(&s.layout) }.unwrap();
    let dct = dev
        .create_qp_ex(
            pd,
            &QpInitAttr {
                qp_type: QpType::Dct,
                send_cq: cqi.id,
                recv_cq: cqi.id,
                srq: Some(s.id),
                cap: QpCap::default(),
                sq_sig_all: false,
            },
            &QpInitEx {
                dc: Some(DcInit::Target { access_key: key }),
                ..QpInitEx::default()
            },
        )
        .unwrap();
    assert_eq!(dct.qpn, 0, "a DCT has no number before RTR");
    let mut a = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qp_access_flags: all_access(),
        ..QpAttr::default()
    };
    dev.modify_qp(
        dct.id,
        &a,
        AttrMask::STATE | AttrMask::ACCESS_FLAGS | AttrMask::PKEY_INDEX | AttrMask::PORT,
    )
    .unwrap();
    assert!(dev.dct_number(dct.id).is_err(), "in Init");
    // The kernel answers a DCT's query in RTR only (mlx5_ib_dct_query_qp).
    let e = dev.query_qp(dct.id).unwrap_err().to_string();
    assert!(e.contains("RTR only"), "{e}");
    a.qp_state = QpState::Rtr;
    a.path_mtu = Mtu::Mtu1024;
    a.min_rnr_timer = 1;
    a.ah_attr = ah_to(dev);
    dev.modify_qp(
        dct.id,
        &a,
        AttrMask::STATE | AttrMask::MIN_RNR_TIMER | AttrMask::AV | AttrMask::PATH_MTU,
    )
    .unwrap();
    let dctn = dev.dct_number(dct.id).unwrap();
    assert_eq!(dev.query_qp(dct.id).unwrap().qp_state, QpState::Rtr);
    let buf = Buf::new(dev, pd, 1 << 16, all_access());
    Target {
        dev: dev.clone(),
        cq,
        srq,
        dct,
        dctn,
        buf,
    }
}

/// A DC initiator on `dev` in RTS: a send queue, no receive side; no destination at RTR.
pub(crate) struct Initiator {
    pub(crate) dev: SimDevice,
    pub(crate) pd: PdId,
    pub(crate) cq: Cq,
    pub(crate) info: QpInfo,
    pub(crate) qp: Qp,
    pub(crate) buf: Buf,
}

pub(crate) fn initiator(
    dev: &SimDevice,
    streams: Option<DciStreams>,
    timeout: u8,
    retry: u8,
) -> Initiator {
    let pd = dev.alloc_pd().unwrap();
    let cqi = dev
        .create_cq(&CqInitAttr {
            cqe: 256,
            ..CqInitAttr::default()
        })
        .unwrap();
    // SAFETY: the CQ lives as long as the device.
    let cq = unsafe { Cq::from_layout(&cqi.layout) }.unwrap();
    let info = dev
        .create_qp_ex(
            pd,
            &QpInitAttr {
                qp_type: QpType::Dci,
                send_cq: cqi.id,
                recv_cq: cqi.id,
                srq: None,
                cap: QpCap {
                    max_send_wr: 64,
                    max_recv_wr: 0,
                    max_send_sge: 2,
                    max_recv_sge: 0,
                    max_inline_data: 64,
                },
                sq_sig_all: false,
            },
            &QpInitEx {
                dc: Some(DcInit::Initiator { streams }),
                ..QpInitEx::default()
            },
        )
        .unwrap();
    // SAFETY: the QP is never destroyed while its `Qp` exists.
    let mut qp = unsafe { Qp::from_layout(&info.layout, None) }.unwrap();
    let mut a = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        ..QpAttr::default()
    };
    dev.modify_qp(
        info.id,
        &a,
        AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT,
    )
    .unwrap();
    a.qp_state = QpState::Rtr;
    a.path_mtu = Mtu::Mtu1024;
    // A destination at RTR is refused: every WQE names its own.
    a.dest_qp_num = 5;
    assert!(dev
        .modify_qp(
            info.id,
            &a,
            AttrMask::STATE | AttrMask::PATH_MTU | AttrMask::DEST_QPN
        )
        .is_err());
    dev.modify_qp(info.id, &a, AttrMask::STATE | AttrMask::PATH_MTU)
        .unwrap();
    qp.set_state(QpState::Rtr);
    a.qp_state = QpState::Rts;
    a.sq_psn = 0x40;
    a.timeout = timeout;
    a.retry_cnt = retry;
    a.rnr_retry = 7;
    a.max_rd_atomic = 4;
    dev.modify_qp(
        info.id,
        &a,
        AttrMask::STATE
            | AttrMask::TIMEOUT
            | AttrMask::RETRY_CNT
            | AttrMask::RNR_RETRY
            | AttrMask::MAX_QP_RD_ATOMIC
            | AttrMask::SQ_PSN,
    )
    .unwrap();
    qp.set_state(QpState::Rts);
    let buf = Buf::new(dev, pd, 1 << 16, all_access());
    Initiator {
        dev: dev.clone(),
        pd,
        cq,
        info,
        qp,
        buf,
    }
}

pub(crate) fn fabric3() -> (Fabric, SimDevice, SimDevice, SimDevice) {
    let f = Fabric::new();
    let a = f.add_device(DeviceConfig::new([10, 0, 0, 1]));
    let b = f.add_device(DeviceConfig::new([10, 0, 0, 2]));
    let c = f.add_device(DeviceConfig::new([10, 0, 0, 3]));
    (f, a, b, c)
}

/// The DC destination of target `t` as seen from `ini`'s device.
pub(crate) fn dest(ini: &Initiator, t: &Target, key: u64) -> DcDest {
    let ah = ini.dev.create_ah(ini.pd, &ah_to(&t.dev)).unwrap();
    DcDest::new(&ah.av, t.dctn, key)
}

fn recvs(f: &Fabric, t: &mut Target) -> Vec<Wc> {
    let mut none: [Qp; 0] = [];
    drain(
        f,
        &mut t.cq,
        &mut (&mut none[..], std::slice::from_mut(&mut t.srq)),
    )
}

#[test]
fn one_dci_reaches_two_targets_with_every_rc_operation() {
    let (f, da, db, dc) = fabric3();
    let cap = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dc_ops.pcap");
    f.capture_to(&cap).unwrap();
    let mut ini = initiator(&da, None, 14, 7);
    let mut t1 = target(&db, KEY);
    let mut t2 = target(&dc, KEY);
    let (d1, d2) = (dest(&ini, &t1, KEY), dest(&ini, &t2, KEY));
    for t in [&mut t1, &mut t2] {
        t.srq.post_recv(10, &[t.buf.sge(4096, 2048)]).unwrap();
        t.srq.post_recv(11, &[t.buf.sge(8192, 2048)]).unwrap();
        t.srq.post_recv(12, &[t.buf.sge(12288, 2048)]).unwrap();
    }
    let big: Vec<u8> = (0..1500u32).map(|i| (i * 13) as u8).collect();
    ini.buf.bytes_mut()[..1500].copy_from_slice(&big);
    t1.buf.bytes_mut()[300..308].copy_from_slice(b"readme!!");
    t2.buf.bytes_mut()[512..520].copy_from_slice(&5u64.to_ne_bytes());
    let (s0, s1) = (ini.buf.sge(0, 1500), ini.buf.sge(2000, 8));
    let wrs = [
        SendWr::send(1).sges(std::slice::from_ref(&s0)).dc(&d1),
        SendWr::send_imm(2, 0xfeed).inline(b"imm").dc(&d2),
        SendWr::write(3, t1.buf.remote(100))
            .inline(b"written over DC")
            .dc(&d1),
        SendWr::write_imm(4, t2.buf.remote(200), 0x77)
            .inline(b"wi")
            .dc(&d2),
        SendWr::read(5, t1.buf.remote(300))
            .sges(std::slice::from_ref(&s1))
            .dc(&d1),
        SendWr::comp_swap(6, t2.buf.remote(512), ini.buf.sge(3000, 8), 5, 9).dc(&d2),
        SendWr::fetch_add(7, t2.buf.remote(512), ini.buf.sge(3008, 8), 3).dc(&d2),
        SendWr::masked_fetch_add32(8, t1.buf.remote(600), ini.buf.sge(3016, 4), 1, 0).dc(&d1),
    ];
    for w in &wrs {
        ini.qp.post(&w.signaled()).unwrap();
    }
    let sent = drain(&f, &mut ini.cq, &mut ini.qp);
    assert_eq!(
        sent.iter()
            .map(|w| (w.wr_id(), w.status()))
            .collect::<Vec<_>>(),
        (1..=8).map(|i| (i, WcStatus::Success)).collect::<Vec<_>>(),
        "{sent:?}"
    );
    assert_eq!(&t1.buf.bytes()[4096..4096 + 1500], &big[..]);
    assert_eq!(&t1.buf.bytes()[100..115], b"written over DC");
    assert_eq!(&ini.buf.bytes()[2000..2008], b"readme!!");
    assert_eq!(&t2.buf.bytes()[200..202], b"wi");
    assert_eq!(&ini.buf.bytes()[3000..3008], &5u64.to_ne_bytes());
    assert_eq!(&ini.buf.bytes()[3008..3016], &9u64.to_ne_bytes());
    assert_eq!(&t2.buf.bytes()[512..520], &12u64.to_ne_bytes());
    assert_eq!(&t1.buf.bytes()[600..604], &1u32.to_ne_bytes());
    let got1 = recvs(&f, &mut t1);
    assert_eq!(got1.len(), 1, "{got1:?}");
    let w = got1[0];
    assert_eq!(
        (w.wr_id(), w.opcode(), w.byte_len(), w.qp_num(), w.src_qp()),
        (10, WcOpcode::Recv, 1500, t1.dctn, ini.info.qpn)
    );
    let got2 = recvs(&f, &mut t2);
    assert_eq!(got2.len(), 2, "{got2:?}");
    assert!(got2[0].flags().contains(WcFlags::WITH_IMM));
    assert_eq!(
        (got2[0].wr_id(), got2[0].imm_data(), got2[0].qp_num()),
        (10, 0xfeed, t2.dctn)
    );
    assert_eq!(
        (got2[1].wr_id(), got2[1].opcode(), got2[1].imm_data()),
        (11, WcOpcode::RecvRdmaWithImm, 0x77)
    );
    // A connection per change of target (the CAS and the FAA share one), the DCI waiting for
    // each to be acknowledged before the next opens, and every connection closed again (the
    // DCI is idle at the end).
    let s = ini.dev.dc_stats(ini.info.id).unwrap();
    assert_eq!((s.connects, s.disconnects, s.open), (7, 7, 0), "{s:?}");
    assert!(s.waits > 0, "{s:?}");
    for (t, n) in [(&t1, 4), (&t2, 3)] {
        let s = t.dev.dc_stats(t.dct.id).unwrap();
        assert_eq!((s.connects, s.disconnects, s.open), (n, n, 0), "{s:?}");
    }
    // On the wire: DC opcodes both ways; every request carries the DCETH with the key and
    // the DCI, the connect flag on the first PSN of each connection.
    f.stop_capture().unwrap();
    let (mut requests, mut connects, mut disconnects) = (0, 0, 0);
    for rec in mlx5_sim::pcap::PcapReader::open(&cap).unwrap() {
        let pkt = mlx5_sim::wire::Packet::parse(&rec.unwrap().data).unwrap();
        assert_eq!(pkt.bth.opcode.transport(), mlx5_sim::wire::Transport::Dc);
        if pkt.bth.opcode.is_request() {
            let d = pkt.dceth.expect("a DC request carries the DCETH");
            assert_eq!((d.key, d.dci), (KEY, ini.info.qpn));
            if pkt.bth.opcode.operation() == mlx5_sim::wire::Operation::DcDisconnect {
                disconnects += 1;
            } else {
                requests += 1;
                connects += usize::from(d.connect);
            }
        } else {
            assert_eq!(pkt.dceth, None);
        }
    }
    assert_eq!((requests, connects, disconnects), (9, 7, 7));
    no_driver_bugs(&f);
}

#[test]
fn wrs_to_one_target_share_its_connection() {
    let (f, da, db, _) = fabric3();
    let mut ini = initiator(&da, None, 14, 7);
    let t = target(&db, KEY);
    let d = dest(&ini, &t, KEY);
    for i in 0..20u64 {
        let off = (i * 8) as usize;
        ini.qp
            .post(
                &SendWr::write(i, t.buf.remote(off))
                    .inline(&i.to_ne_bytes())
                    .dc(&d),
            )
            .unwrap();
    }
    ini.qp
        .post(
            &SendWr::write(20, t.buf.remote(160))
                .inline(b"end")
                .dc(&d)
                .signaled(),
        )
        .unwrap();
    let done = drain(&f, &mut ini.cq, &mut ini.qp);
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].wr_id(), 20);
    for i in 0..20u64 {
        let off = (i * 8) as usize;
        assert_eq!(&t.buf.bytes()[off..off + 8], &i.to_ne_bytes());
    }
    let s = ini.dev.dc_stats(ini.info.id).unwrap();
    assert_eq!((s.connects, s.disconnects, s.waits), (1, 1, 0), "{s:?}");
    no_driver_bugs(&f);
}

#[test]
fn a_wrong_key_is_dropped_at_the_target_and_ends_in_retry_exc_err() {
    let (f, da, db, dc) = fabric3();
    // timeout 1 (8 µs), 2 retries: three sends of the request, then the error.
    let mut bad = initiator(&da, None, 1, 2);
    let mut good = initiator(&dc, None, 14, 7);
    let t = target(&db, KEY);
    let wrong = dest(&bad, &t, KEY ^ 1);
    bad.qp
        .post(
            &SendWr::write(1, t.buf.remote(0))
                .inline(b"nope")
                .dc(&wrong)
                .signaled(),
        )
        .unwrap();
    let mut done = Vec::new();
    for _ in 0..100 {
        f.advance(Duration::from_micros(20));
        done.extend(drain(&f, &mut bad.cq, &mut bad.qp));
        if !done.is_empty() {
            break;
        }
    }
    assert_eq!(done.len(), 1, "{done:?}");
    assert_eq!(done[0].status(), WcStatus::RetryExcErr);
    assert_eq!((done[0].syndrome(), done[0].vendor_err()), (0x15, 0x81));
    assert_eq!(bad.qp.state(), QpState::Error);
    assert_eq!(&t.buf.bytes()[..4], &[0; 4], "nothing written");
    let s = t.dev.dc_stats(t.dct.id).unwrap();
    assert_eq!((s.key_violations, s.connects), (3, 0), "{s:?}");
    assert_eq!(t.dev.counter("dct_key_violations"), 3);
    // The target is untouched: in RTR, serving an initiator with the right key.
    assert_eq!(t.dev.query_qp(t.dct.id).unwrap().qp_state, QpState::Rtr);
    let right = dest(&good, &t, KEY);
    good.qp
        .post(
            &SendWr::write(2, t.buf.remote(0))
                .inline(b"yes!")
                .dc(&right)
                .signaled(),
        )
        .unwrap();
    let w = drain(&f, &mut good.cq, &mut good.qp);
    assert_eq!((w[0].wr_id(), w[0].status()), (2, WcStatus::Success));
    assert_eq!(&t.buf.bytes()[..4], b"yes!");
    no_driver_bugs(&f);
}

#[test]
fn a_lost_connect_is_sent_again_and_rnr_waits_for_a_receive() {
    let (f, da, db, _) = fabric3();
    let mut ini = initiator(&da, None, 4, 7);
    let mut t = target(&db, KEY);
    let d = dest(&ini, &t, KEY);
    // The connect (the connection's first PSN, 0x40) is lost: its WRITE's successor arrives
    // first, for a connection the target does not know, and is dropped.
    f.faults().path(&ini.dev, &db).drop_psns(t.dctn, [0x40]);
    ini.qp
        .post(&SendWr::write(1, t.buf.remote(0)).inline(b"first").dc(&d))
        .unwrap();
    ini.qp
        .post(&SendWr::write(2, t.buf.remote(8)).inline(b"second").dc(&d))
        .unwrap();
    // No receive posted yet: the SEND is RNR-NAKed, then retried after the timer.
    ini.qp
        .post(&SendWr::send(3).inline(b"late").dc(&d).signaled())
        .unwrap();
    f.run_until_idle();
    let mut done = Vec::new();
    for i in 0..200 {
        if i == 20 {
            t.srq.post_recv(9, &[t.buf.sge(1024, 64)]).unwrap();
        }
        f.advance(Duration::from_micros(100));
        done.extend(drain(&f, &mut ini.cq, &mut ini.qp));
        if !done.is_empty() {
            break;
        }
    }
    assert_eq!(
        done.iter()
            .map(|w| (w.wr_id(), w.status()))
            .collect::<Vec<_>>(),
        vec![(3, WcStatus::Success)]
    );
    assert_eq!(&t.buf.bytes()[..5], b"first");
    assert_eq!(&t.buf.bytes()[8..14], b"second");
    let got = recvs(&f, &mut t);
    assert_eq!((got.len(), got[0].wr_id(), got[0].byte_len()), (1, 9, 4));
    assert_eq!(f.faults().stats().dropped, 1);
    assert!(t.dev.counter("dct_no_connection") >= 1);
    assert!(ini.dev.counter("rnr_nak_retry_err") >= 1);
    let s = t.dev.dc_stats(t.dct.id).unwrap();
    assert_eq!((s.connects, s.open), (1, 0), "{s:?}");
    no_driver_bugs(&f);
}

#[test]
fn a_responder_error_fails_the_dci_and_the_target_serves_the_others() {
    let (f, da, db, dc) = fabric3();
    let mut a = initiator(&da, None, 14, 7);
    let mut b = initiator(&dc, None, 14, 7);
    let t = target(&db, KEY);
    let (da_, db_) = (dest(&a, &t, KEY), dest(&b, &t, KEY));
    let mut bad = t.buf.remote(0);
    bad.rkey ^= 0x55;
    a.qp.post(&SendWr::write(1, bad).inline(b"x").dc(&da_).signaled())
        .unwrap();
    a.qp.post(
        &SendWr::write(2, t.buf.remote(0))
            .inline(b"y")
            .dc(&da_)
            .signaled(),
    )
    .unwrap();
    let w = drain(&f, &mut a.cq, &mut a.qp);
    assert_eq!(
        w.iter()
            .map(|w| (w.wr_id(), w.status()))
            .collect::<Vec<_>>(),
        vec![(1, WcStatus::RemAccessErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(a.qp.state(), QpState::Error);
    assert_eq!(a.dev.query_qp(a.info.id).unwrap().qp_state, QpState::Error);
    assert_eq!(t.dev.query_qp(t.dct.id).unwrap().qp_state, QpState::Rtr);
    b.qp.post(
        &SendWr::write(3, t.buf.remote(16))
            .inline(b"from b")
            .dc(&db_)
            .signaled(),
    )
    .unwrap();
    let w = drain(&f, &mut b.cq, &mut b.qp);
    assert_eq!((w[0].wr_id(), w[0].status()), (3, WcStatus::Success));
    assert_eq!(&t.buf.bytes()[16..22], b"from b");
    // The failed DCI comes back through Reset (allowed from any state) and reconnects.
    let id = a.info.id;
    a.qp.set_state(QpState::Reset);
    a.dev
        .modify_qp(
            id,
            &QpAttr {
                qp_state: QpState::Reset,
                ..QpAttr::default()
            },
            AttrMask::STATE,
        )
        .unwrap();
    no_driver_bugs(&f);
}
