//! Issue 28: RNR waits under loss. A burst of SENDs meets an empty receive queue; the
//! responder answers the first with an RNR NAK and the next with a NAK sequence error (it
//! waits for the RNR-NAK'd PSN again). When RNR NAKs are lost, the sequence-error NAK that
//! follows is all the requester hears: each one must resend at once (it is the responder's
//! answer to a new round), spend one transport retry, and the next RNR NAK that gets through
//! gives the retries back: it answers the request the retries were for (the rules and their
//! sources: `sim/src/transport/requester/retry.rs`).
//!
//! Every test names the frames it drops: the first SEND's PSN is 200 (A's `sq_psn`), so each
//! round's RNR NAK and sequence-error NAK both carry PSN 200, addressed to A's QPN, RNR NAK
//! first; `skip(n)` on a PSN rule lets the first `n` of those frames through and drops the next.

use crate::common;

use std::time::Duration;

use common::ops::*;
use common::*;
use mlx5_cq::*;
use mlx5_hw::{
    AccessFlags, AhAttr, AttrMask, Device, GlobalRoute, Mtu, QpAttr, QpCap, QpInitAttr, QpInitEx,
    QpState, QpType, SrqInitAttr, XrcSrqInitAttr,
};
use mlx5_sim::faults::{Class, FaultKind};
use mlx5_sim::wire::Opcode;
use mlx5_sim::{DeviceConfig, Fabric, SimDevice};

/// `min_rnr_timer` 1 of the common options: 10 µs.
const RNR: Duration = Duration::from_micros(10);

/// The PSN of the first SEND (A's `sq_psn` in [`Pair::connect`]).
const P0: u32 = 200;

/// A pair with `retry_cnt` transport retries, `rnr_retry` 7 (forever), `timeout` 14 (67 ms).
fn pair(retry_cnt: u8) -> Pair {
    let mut o = Opts::new(QpType::Rc);
    o.retry_cnt = retry_cnt;
    Pair::new(o)
}

/// Drop the RNR NAK of each of these retransmission rounds (round 0 is the first
/// transmission): each round puts two frames with PSN `P0` on the B → A path, the RNR NAK
/// first, so round `r`'s RNR NAK is the `2r + 1`-th.
fn drop_rnr_naks_of_rounds(p: &Pair, rounds: &[u64]) {
    for &r in rounds {
        p.fabric
            .faults()
            .path(&p.b.dev, &p.a.dev)
            .only(Class::Acks)
            .skip(2 * r)
            .drop_psns(p.a.qp.qpn(), [P0]);
    }
}

/// Post `n` 8-byte SENDs; their WQE indices.
fn sends(p: &mut Pair, src: &Mem, n: usize) -> Vec<u16> {
    (0..n)
        .map(|i| {
            src.write(i * 8, &[i as u8 + 1; 8]);
            send(&mut p.a.qp, src, i * 8, 8)
        })
        .collect()
}

/// The frames the fault rules dropped: (opcode, destination QPN, PSN) each.
fn dropped(p: &Pair) -> Vec<(Opcode, u32, u32)> {
    p.fabric
        .faults()
        .record()
        .iter()
        .filter(|r| r.kind == FaultKind::Dropped)
        .map(|r| (r.opcode, r.qpn, r.psn))
        .collect()
}

#[test]
fn lost_rnr_naks_of_two_rounds_are_recovered_by_the_sequence_naks_without_the_ack_timer() {
    let mut p = pair(7);
    let (src, dst) = (p.mem(false, 64), p.mem(true, 64));
    drop_rnr_naks_of_rounds(&p, &[1, 2]);
    let idx = sends(&mut p, &src, 4);
    // Round 0 (t = 0): RNR NAK 200 arrives, A waits 10 µs; the NAK of 201 is ignored.
    p.run();
    assert_eq!(p.a.dev.counter("rnr_nak_retry_err"), 1);
    // Round 1 (t = 10 µs, the RNR timer): its RNR NAK is lost, its NAK resends (round 2),
    // whose RNR NAK is lost too; round 2's NAK resends again (round 3), whose RNR NAK arrives:
    // A waits for the RNR timer again. No ACK timeout (67 ms) is involved.
    p.fabric.advance(RNR);
    let a = &p.a.dev;
    let ack = Opcode::RC_ACKNOWLEDGE;
    let qa = p.a.qp.qpn();
    assert_eq!(dropped(&p), [(ack, qa, P0), (ack, qa, P0)]);
    assert_eq!(
        p.b.dev.counter("out_of_buffer") - a.counter("rnr_nak_retry_err"),
        2,
        "the two dropped frames are RNR NAKs: B sent 4, A received 2"
    );
    assert_eq!(a.counter("packet_seq_err"), 4, "one per round 0..=3");
    assert_eq!(a.counter("port_xmit_packets"), 4 * 4, "rounds 0..=3");
    assert_eq!(a.counter("local_ack_timeout_err"), 0);
    // The receives are posted: the next RNR round (10 µs later) delivers all four.
    for i in 0..4 {
        p.b.qp.post_recv(&[dst.sge(i * 16, 16)]);
    }
    p.fabric.advance(RNR);
    let c: Vec<_> = p.a.scq.drain().iter().map(outcome).collect();
    let want: Vec<_> = idx.iter().map(|&i| (CQE_REQ, 0, i)).collect();
    assert_eq!(c, want, "complete 10 µs after the receives, not 67 ms");
    for i in 0..4 {
        let r = p.b.rcq.poll().expect("delivered once");
        assert_eq!((r.opcode(), r.byte_cnt()), (CQE_RESP_SEND, 8));
        assert_eq!(dst.read(i * 16, 8), [i as u8 + 1; 8]);
    }
    assert!(p.b.rcq.poll().is_none());
    assert_eq!(a.counter("local_ack_timeout_err"), 0);
    assert_eq!(a.counter("rnr_nak_retry_err"), 2);
    assert_eq!(a.counter("port_xmit_packets"), 5 * 4, "rounds 0..=4");
    assert_eq!(state(&p.a), QpState::Rts);
    p.assert_no_bugs();
}

#[test]
fn each_lost_rnr_nak_spends_one_retry_and_the_next_rnr_nak_gives_it_back() {
    // retry_cnt 1: one retry without an answer is allowed. The RNR NAKs of rounds 1, 3 and 5
    // are lost: each time the sequence NAK resends (the one retry), and the RNR NAK of the
    // resent round answers it, so the retry is there again for the next loss.
    let mut p = pair(1);
    let (src, dst) = (p.mem(false, 64), p.mem(true, 64));
    drop_rnr_naks_of_rounds(&p, &[1, 3, 5]);
    let idx = sends(&mut p, &src, 2);
    p.run();
    // Rounds 1+2 at 10 µs, 3+4 at 20 µs, 5+6 at 30 µs; each second round's RNR NAK arrives.
    p.fabric.advance(RNR * 3);
    assert_eq!(dropped(&p).len(), 3);
    assert_eq!(p.a.dev.counter("rnr_nak_retry_err"), 4, "rounds 0, 2, 4, 6");
    assert_eq!(p.a.dev.counter("packet_seq_err"), 7, "rounds 0..=6");
    assert_eq!(p.a.dev.counter("local_ack_timeout_err"), 0);
    assert_eq!(
        state(&p.a),
        QpState::Rts,
        "no retry was left unanswered twice"
    );
    for i in 0..2 {
        p.b.qp.post_recv(&[dst.sge(i * 16, 16)]);
    }
    p.fabric.advance(RNR);
    let c: Vec<_> = p.a.scq.drain().iter().map(outcome).collect();
    assert_eq!(c, [(CQE_REQ, 0, idx[0]), (CQE_REQ, 0, idx[1])]);
    assert_eq!(p.b.rcq.drain().len(), 2);
    p.assert_no_bugs();
}

#[test]
fn two_unanswered_retries_exceed_a_retry_cnt_of_one_at_the_second_nak() {
    // The RNR NAKs of rounds 1 and 2 are lost: round 1's NAK resends (the one retry), round
    // 2's NAK would be the second retry without an answer: RETRY_EXC_ERR at once, at 10 µs,
    // not after an ACK timeout.
    let mut p = pair(1);
    let src = p.mem(false, 64);
    drop_rnr_naks_of_rounds(&p, &[1, 2]);
    let idx = sends(&mut p, &src, 2);
    p.run();
    p.fabric.advance(RNR);
    let c: Vec<_> = p.a.scq.drain().iter().map(outcome).collect();
    assert_eq!(
        c,
        [
            (CQE_REQ_ERR, SYNDROME_TRANSPORT_RETRY_EXC_ERR, idx[0]),
            (CQE_REQ_ERR, SYNDROME_WR_FLUSH_ERR, idx[1]),
        ]
    );
    assert_eq!(p.a.dev.counter("packet_seq_err"), 3, "rounds 0, 1, 2");
    assert_eq!(p.a.dev.counter("req_transport_retries_exceeded"), 1);
    assert_eq!(p.a.dev.counter("local_ack_timeout_err"), 0);
    assert_eq!(p.a.dev.counter("port_xmit_packets"), 3 * 2, "rounds 0..=2");
    assert_eq!(state(&p.a), QpState::Error);
    // With retry_cnt 2 the same losses are survived.
    let mut p = pair(2);
    let (src, dst) = (p.mem(false, 64), p.mem(true, 64));
    drop_rnr_naks_of_rounds(&p, &[1, 2]);
    let idx = sends(&mut p, &src, 2);
    p.run();
    p.fabric.advance(RNR);
    assert_eq!(state(&p.a), QpState::Rts);
    p.b.qp.post_recv(&[dst.sge(0, 16)]);
    p.b.qp.post_recv(&[dst.sge(16, 16)]);
    p.fabric.advance(RNR);
    let c: Vec<_> = p.a.scq.drain().iter().map(outcome).collect();
    assert_eq!(c, [(CQE_REQ, 0, idx[0]), (CQE_REQ, 0, idx[1])]);
    assert_eq!(p.a.dev.counter("local_ack_timeout_err"), 0);
    assert_eq!(p.a.dev.counter("req_transport_retries_exceeded"), 0);
    p.assert_no_bugs();
}

/// One XRC initiator on a device of its own, connected to a target QP of the shared domain.
struct Initiator {
    qp: Qp,
    scq: Cq,
    src: Mem,
    ip: std::net::Ipv4Addr,
}

/// Initiator `ini` (in Reset) and target `tgt` (in Reset), connected as the kernel's XRC masks
/// ask (the sequence of `mlx5_ctx::xrc::connect_xrc`): `min_rnr_timer` 1 (10 µs), `timeout` 8
/// (1 ms), `retry_cnt` 7, `rnr_retry` 7.
fn connect_xrc(ini: &Qp, tgt_dev: &SimDevice, tgt: mlx5_hw::QpId, tgt_qpn: u32) {
    let route = |to: &SimDevice| AhAttr {
        port_num: 1,
        grh: Some(GlobalRoute {
            dgid: to.gid(),
            hop_limit: 64,
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut a = QpAttr {
        port_num: 1,
        qp_access_flags: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        path_mtu: Mtu::Mtu1024,
        rq_psn: P0,
        sq_psn: P0,
        max_dest_rd_atomic: 4,
        max_rd_atomic: 4,
        min_rnr_timer: 1,
        timeout: 8,
        retry_cnt: 7,
        rnr_retry: 7,
        ..Default::default()
    };
    let init = AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS;
    let path =
        AttrMask::STATE | AttrMask::AV | AttrMask::PATH_MTU | AttrMask::DEST_QPN | AttrMask::RQ_PSN;
    let ini_rts = AttrMask::STATE
        | AttrMask::TIMEOUT
        | AttrMask::RETRY_CNT
        | AttrMask::RNR_RETRY
        | AttrMask::SQ_PSN
        | AttrMask::MAX_QP_RD_ATOMIC;
    let tgt_rtr = path | AttrMask::MAX_DEST_RD_ATOMIC | AttrMask::MIN_RNR_TIMER;
    let tgt_rts = AttrMask::STATE | AttrMask::TIMEOUT | AttrMask::SQ_PSN;
    for (state, mi, mt) in [
        (QpState::Init, init, init),
        (QpState::Rtr, path, tgt_rtr),
        (QpState::Rts, ini_rts, tgt_rts),
    ] {
        a.qp_state = state;
        a.dest_qp_num = tgt_qpn;
        a.ah_attr = route(tgt_dev);
        ini.dev.modify_qp(ini.info.id, &a, mi).unwrap();
        a.dest_qp_num = ini.qpn();
        a.ah_attr = route(&ini.dev);
        tgt_dev.modify_qp(tgt, &a, mt).unwrap();
    }
}

#[test]
fn xrc_initiators_on_a_small_srq_wait_out_rnr_under_one_percent_loss() {
    // Issue 28's run, made deterministic: four XRC initiators (each on its own device) SEND
    // into one XRC SRQ of two WQEs, whose consumer posts one receive every 3 ms, so each
    // initiator waits about 12 ms in RNR (a thousand 10 µs rounds) between its messages,
    // and 1 % of all frames are lost (seeded). Every loss is a retry; with the retries given
    // back by the RNR NAKs that follow, no initiator runs out of its 7 (it ended in
    // RETRY_EXC_ERR before).
    const INITIATORS: usize = 4;
    const SENDS: usize = 4;
    let fabric = Fabric::new();
    fabric.set_seed(28);
    let tgt_dev = fabric.add_device(DeviceConfig::new([10, 0, 0, 10]).mtu(Mtu::Mtu4096));
    let xrcd = tgt_dev.open_xrcd().unwrap();
    let tpd = tgt_dev.alloc_pd().unwrap();
    let mut srq_cq = Cq::new(&tgt_dev, 255, 64, false);
    let info = tgt_dev
        .create_srq_xrc(
            tpd,
            &XrcSrqInitAttr {
                xrcd,
                cq: srq_cq.info.id,
                attr: SrqInitAttr {
                    max_wr: 2,
                    max_sge: 1,
                    srq_limit: 0,
                },
            },
        )
        .unwrap();
    let srqn = info.layout.srqn;
    let mut srq = Srq {
        head: info.layout.head,
        tail: info.layout.tail,
        info,
        counter: 0,
    };
    let dst = Mem::new(&tgt_dev, tpd, 4096, AccessFlags::LOCAL_WRITE);
    let mut inis: Vec<Initiator> = (0..INITIATORS)
        .map(|i| {
            let dev =
                fabric.add_device(DeviceConfig::new([10, 0, 0, 1 + i as u8]).mtu(Mtu::Mtu4096));
            let pd = dev.alloc_pd().unwrap();
            let scq = Cq::new(&dev, 255, 64, false);
            let cap = QpCap {
                max_send_wr: 16,
                max_recv_wr: 0,
                max_send_sge: 1,
                max_recv_sge: 0,
                max_inline_data: 0,
            };
            let info = dev
                .create_qp(
                    pd,
                    &QpInitAttr {
                        qp_type: QpType::XrcSend,
                        send_cq: scq.info.id,
                        recv_cq: scq.info.id,
                        srq: None,
                        cap,
                        sq_sig_all: false,
                    },
                )
                .unwrap();
            let tgt = tgt_dev
                .create_qp_ex(
                    tpd,
                    &QpInitAttr {
                        qp_type: QpType::XrcRecv,
                        send_cq: srq_cq.info.id,
                        recv_cq: srq_cq.info.id,
                        srq: None,
                        cap: QpCap::default(),
                        sq_sig_all: false,
                    },
                    &QpInitEx {
                        xrcd: Some(xrcd),
                        ..Default::default()
                    },
                )
                .unwrap();
            let qp = Qp {
                dev: dev.clone(),
                info,
                pd,
                sq_pi: 0,
                rq_head: 0,
                bf_off: 0,
                mode: Ring::Db,
            };
            connect_xrc(&qp, &tgt_dev, tgt.id, tgt.qpn);
            let ip = dev.ipv4();
            let src = Mem::new(&dev, pd, 64, AccessFlags::LOCAL_WRITE);
            Initiator { qp, scq, src, ip }
        })
        .collect();
    fabric.faults().all().loss(mlx5_sim::Rate(0.01));
    for (i, ini) in inis.iter_mut().enumerate() {
        for k in 0..SENDS {
            let off = k * 8;
            ini.src.write(off, &[i as u8, k as u8, 0xa5, 0, 0, 0, 0, 0]);
            let (lkey, addr) = (ini.src.lkey(), ini.src.addr() + off as u64);
            ini.qp
                .post(mlx5_wqe::OPCODE_SEND, 0, mlx5_wqe::CTRL_CQ_UPDATE, 0, |w| {
                    w.push(&mlx5_wqe::XrcSeg::new(srqn)).unwrap();
                    w.push(&mlx5_wqe::DataSeg::new(8, lkey, addr)).unwrap();
                });
        }
    }
    // The consumer: one receive every 3 ms (at most 2 posted), each completion checked.
    let mut got = Vec::new();
    let mut posted = 0;
    for _ in 0..200 {
        if posted - got.len() < 2 && posted < INITIATORS * SENDS {
            let slot = srq.head;
            srq.post(&[dst.sge(slot as usize * 16, 16)]);
            posted += 1;
        }
        fabric.advance(Duration::from_millis(3));
        while let Some(c) = srq_cq.poll() {
            assert_eq!((c.opcode(), c.byte_cnt()), (CQE_RESP_SEND, 8));
            let slot = c.wqe_counter() as u32;
            got.push(dst.read(slot as usize * 16, 3));
            srq.free(slot);
        }
        if got.len() == INITIATORS * SENDS {
            break;
        }
    }
    fabric.advance(Duration::from_millis(10));
    let record = fabric.faults().record();
    for (i, ini) in inis.iter_mut().enumerate() {
        let c: Vec<_> = ini.scq.drain().iter().map(outcome).collect();
        let want: Vec<_> = (0..SENDS as u16).map(|k| (CQE_REQ, 0, k)).collect();
        assert_eq!(c, want, "initiator {i}: no RETRY_EXC_ERR");
        let d = &ini.qp.dev;
        let lost = record
            .iter()
            .filter(|r| r.kind == FaultKind::Dropped && (r.src == ini.ip || r.dst == ini.ip))
            .count() as u64;
        let rnr = d.counter("rnr_nak_retry_err");
        assert!(rnr > 100, "initiator {i}: a long RNR wait ({rnr} RNR NAKs)");
        assert!(
            lost > 7,
            "initiator {i}: more frames lost ({lost}) than retry_cnt (7) allows unanswered"
        );
        assert_eq!(d.query_qp(ini.qp.info.id).unwrap().qp_state, QpState::Rts);
    }
    // Every message once, each initiator's in order.
    let mut want: Vec<Vec<u8>> = (0..INITIATORS)
        .flat_map(|i| (0..SENDS).map(move |k| vec![i as u8, k as u8, 0xa5]))
        .collect();
    for i in 0..INITIATORS {
        let order: Vec<u8> = got
            .iter()
            .filter(|m| m[0] == i as u8)
            .map(|m| m[1])
            .collect();
        assert_eq!(
            order,
            [0, 1, 2, 3],
            "initiator {i}: each message once, in order"
        );
    }
    got.sort();
    want.sort();
    assert_eq!(got, want);
    let bugs = fabric.driver_bugs();
    assert!(bugs.is_empty(), "{bugs:#?}");
}
