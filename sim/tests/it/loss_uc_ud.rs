//! UC and UD on a lossy fabric: a UC message with a missing packet is dropped and completes
//! nothing at the receiver, which recovers at the next first/only packet; a lost UD datagram
//! is simply gone. Both complete at the sender when sent (IBTA Vol 1 §9.8).

use crate::common;

use common::ops::*;
use common::*;
use mlx5_cq::*;
use mlx5_hw::QpType;
use mlx5_wqe::*;

#[test]
fn uc_send_with_a_lost_packet_completes_nothing_and_the_next_send_takes_its_receive() {
    let mut p = Pair::new(Opts::new(QpType::Uc)); // path MTU 1024
    let (src, dst) = (p.mem(false, 8192), p.mem(true, 8192));
    src.write(0, &[0xaa; 3000]);
    src.write(4000, b"small one");
    p.b.qp.post_recv(&[dst.sge(0, 4096)]);
    p.b.qp.post_recv(&[dst.sge(4096, 4096)]);
    // The 3-packet SEND takes PSNs 200..=202; its middle is lost.
    p.fabric
        .faults()
        .path(&p.a.dev, &p.b.dev)
        .drop_psns(p.b.qp.qpn(), [201]);
    let s1 = send(&mut p.a.qp, &src, 0, 3000);
    let s2 = send(&mut p.a.qp, &src, 4000, 9);
    p.run();
    // UC completes at the sender when the packets are sent.
    assert_eq!(p.a.scq.poll().map(|c| outcome(&c)), Some((CQE_REQ, 0, s1)));
    assert_eq!(p.a.scq.poll().map(|c| outcome(&c)), Some((CQE_REQ, 0, s2)));
    let r = p.b.rcq.drain();
    assert_eq!(r.len(), 1, "the broken message completes nothing");
    assert_eq!((r[0].byte_cnt(), r[0].wqe_counter()), (9, 0));
    assert_eq!(
        dst.read(0, 9),
        b"small one",
        "it landed in the first receive"
    );
    assert_eq!(p.b.dev.counter("out_of_sequence"), 1);
    // A WRITE whose first packet is lost changes nothing; the one after it lands.
    let remote = p.mem(true, 8192);
    p.fabric
        .faults()
        .path(&p.a.dev, &p.b.dev)
        .drop_psns(p.b.qp.qpn(), [204]);
    write(&mut p.a.qp, &src, 0, &remote, 0, 3000); // PSNs 204..=206
    write(&mut p.a.qp, &src, 4000, &remote, 4096, 9); // 207
    p.run();
    assert_eq!(p.a.scq.drain().len(), 2);
    assert_eq!(remote.read(0, 3000), vec![0; 3000]);
    assert_eq!(remote.read(4096, 9), b"small one");
    // The second receive is still posted.
    let s3 = send(&mut p.a.qp, &src, 4000, 5);
    p.run();
    assert_eq!(p.a.scq.poll().map(|c| outcome(&c)), Some((CQE_REQ, 0, s3)));
    let r = p.b.rcq.poll().expect("third SEND received");
    assert_eq!((r.byte_cnt(), r.wqe_counter()), (5, 1));
    p.assert_no_bugs();
}

#[test]
fn ud_datagram_lost_on_the_way_is_gone_and_the_receive_stays_for_the_next() {
    let mut p = Pair::new(Opts::new(QpType::Ud));
    let (src, dst) = (p.mem(false, 256), p.mem(true, 512));
    src.write(0, b"one");
    src.write(8, b"two");
    p.b.qp.post_recv(&[dst.sge(0, 256)]);
    p.b.qp.post_recv(&[dst.sge(256, 256)]);
    p.fabric.faults().path(&p.a.dev, &p.b.dev).drop_next(1);
    let av = ud_av(&p.a, &p.b, 0x1111_2222);
    for off in [0u64, 8] {
        let (l, a) = (src.lkey(), src.addr() + off);
        p.a.qp.post(OPCODE_SEND, 0, CTRL_CQ_UPDATE, 0, |w| {
            w.push(&av).unwrap();
            w.push(&DataSeg::new(3, l, a)).unwrap();
        });
    }
    p.run();
    assert_eq!(p.a.scq.drain().len(), 2, "both complete at the sender");
    let r = p.b.rcq.drain();
    assert_eq!(r.len(), 1);
    assert_eq!((r[0].byte_cnt(), r[0].wqe_counter()), (40 + 3, 0));
    assert_eq!(dst.read(40, 3), b"two");
    assert_eq!(p.fabric.faults().stats().dropped, 1);
    p.assert_no_bugs();
}

/// Issue 18: the UC responder consumes receive WQEs in order and detects duplicates.
mod uc_order_and_duplicates {
    use super::*;
    use std::time::Duration;

    /// (opcode, wqe_counter, byte_cnt, imm) of the receive completions.
    fn recvs(p: &mut Pair) -> Vec<(u8, u16, u32, u32)> {
        p.b.rcq
            .drain()
            .iter()
            .map(|c| {
                (
                    c.opcode(),
                    c.wqe_counter(),
                    c.byte_cnt(),
                    u32::from_be_bytes(c.imm_bytes()),
                )
            })
            .collect()
    }

    #[test]
    fn a_write_with_imm_after_a_broken_send_takes_the_receive_the_send_had_taken() {
        // A UC message with a missing packet completes nothing (IBTA Vol 1 §9.8.3), and the
        // receive WQE it had taken serves the next message that consumes one, whatever its
        // opcode (a WRITE with immediate consumes one too, `ibv_post_send(3)`), because
        // receives complete in order (rdma-core's `handle_responder` takes the WR id at the
        // RQ's tail).
        let mut p = Pair::new(Opts::new(QpType::Uc)); // path MTU 1024
        let (src, dst) = (p.mem(false, 8192), p.mem(true, 16384));
        src.write(0, &[0xaa; 3000]);
        src.write(4000, b"imm data");
        src.write(5000, b"last send");
        for k in 0..3 {
            p.b.qp.post_recv(&[dst.sge(k * 4096, 4096)]);
        }
        // The 3-packet SEND takes PSNs 200..=202; its middle one is lost.
        p.fabric
            .faults()
            .path(&p.a.dev, &p.b.dev)
            .drop_psns(p.b.qp.qpn(), [201]);
        send(&mut p.a.qp, &src, 0, 3000);
        write_imm(
            &mut p.a.qp,
            &src,
            4000,
            &dst,
            12288,
            8,
            0x1234_5678u32.to_be(),
        ); // 203
        send(&mut p.a.qp, &src, 5000, 9); // 204
        p.run();
        assert_eq!(p.a.scq.drain().len(), 3);
        assert_eq!(
            recvs(&mut p),
            [
                (CQE_RESP_WR_IMM, 0, 8, 0x1234_5678),
                (CQE_RESP_SEND, 1, 9, 0)
            ],
            "receive WQEs consumed in order"
        );
        assert_eq!(dst.read(12288, 8), b"imm data");
        assert_eq!(dst.read(4096, 9), b"last send");
        assert_eq!(p.b.dev.counter("out_of_sequence"), 1);
        assert_eq!(p.b.dev.counter("uc_dropped_packets"), 1, "PSN 202");
        p.assert_no_bugs();
    }

    #[test]
    fn a_duplicated_single_packet_send_is_delivered_once() {
        let mut p = Pair::new(Opts::new(QpType::Uc));
        let (src, dst) = (p.mem(false, 4096), p.mem(true, 8192));
        src.write(0, b"once");
        src.write(8, b"then this");
        p.b.qp.post_recv(&[dst.sge(0, 4096)]);
        p.b.qp.post_recv(&[dst.sge(4096, 4096)]);
        p.fabric
            .faults()
            .path(&p.a.dev, &p.b.dev)
            .duplicate_psns(p.b.qp.qpn(), [200]);
        send(&mut p.a.qp, &src, 0, 4);
        p.run();
        assert_eq!(recvs(&mut p), [(CQE_RESP_SEND, 0, 4, 0)]);
        assert_eq!(p.b.dev.counter("duplicate_request"), 1);
        send(&mut p.a.qp, &src, 8, 9);
        p.run();
        assert_eq!(
            recvs(&mut p),
            [(CQE_RESP_SEND, 1, 9, 0)],
            "the second receive is still there for the next message"
        );
        assert_eq!(p.fabric.faults().stats().duplicated, 1);
        p.assert_no_bugs();
    }

    #[test]
    fn a_multi_packet_send_with_duplicated_packets_is_delivered_whole() {
        let mut p = Pair::new(Opts::new(QpType::Uc));
        let (src, dst) = (p.mem(false, 4096), p.mem(true, 4096));
        let data: Vec<u8> = (0..3000).map(|i| (i * 7) as u8).collect();
        src.write(0, &data);
        p.b.qp.post_recv(&[dst.sge(0, 4096)]);
        // Every packet of the 3-packet SEND arrives twice.
        p.fabric
            .faults()
            .path(&p.a.dev, &p.b.dev)
            .duplicate_psns(p.b.qp.qpn(), [200, 201, 202]);
        send(&mut p.a.qp, &src, 0, 3000);
        p.run();
        assert_eq!(recvs(&mut p), [(CQE_RESP_SEND, 0, 3000, 0)]);
        assert_eq!(dst.read(0, 3000), data);
        assert_eq!(p.b.dev.counter("duplicate_request"), 3);
        assert_eq!(p.b.dev.counter("out_of_sequence"), 0);
        p.assert_no_bugs();
    }

    #[test]
    fn a_late_packet_of_a_message_given_up_is_a_duplicate() {
        // PSN 201 (the middle of a 3-packet SEND) overtaken by 202: the SEND is given up; 201
        // then arrives behind the expected PSN and is dropped, and the next SEND is delivered
        // into the receive the broken one had taken.
        let mut p = Pair::new(Opts::new(QpType::Uc));
        let (src, dst) = (p.mem(false, 8192), p.mem(true, 8192));
        src.write(0, &[0x55; 3000]);
        src.write(4000, b"next");
        p.b.qp.post_recv(&[dst.sge(0, 4096)]);
        p.fabric.faults().path(&p.a.dev, &p.b.dev).delay_psns(
            p.b.qp.qpn(),
            [201],
            Duration::from_micros(5),
        );
        send(&mut p.a.qp, &src, 0, 3000);
        p.fabric.advance(Duration::from_micros(10));
        send(&mut p.a.qp, &src, 4000, 4);
        p.run();
        assert_eq!(recvs(&mut p), [(CQE_RESP_SEND, 0, 4, 0)]);
        assert_eq!(dst.read(0, 4), b"next");
        assert_eq!(p.b.dev.counter("out_of_sequence"), 1, "202");
        assert_eq!(p.b.dev.counter("duplicate_request"), 1, "the late 201");
        p.assert_no_bugs();
    }

    #[test]
    fn the_receive_a_broken_send_holds_is_flushed_when_the_qp_fails() {
        let mut p = Pair::new(Opts::new(QpType::Uc));
        let (src, dst) = (p.mem(false, 4096), p.mem(true, 8192));
        p.b.qp.post_recv(&[dst.sge(0, 4096)]);
        p.b.qp.post_recv(&[dst.sge(4096, 4096)]);
        p.fabric
            .faults()
            .path(&p.a.dev, &p.b.dev)
            .drop_psns(p.b.qp.qpn(), [202]);
        send(&mut p.a.qp, &src, 0, 3000); // its last packet lost: WQE 0 stays taken
        p.run();
        assert!(recvs(&mut p).is_empty());
        // Error flushes every receive, the one the broken SEND took first.
        let (mut a, m) = (mlx5_hw::QpAttr::default(), mlx5_hw::AttrMask::STATE);
        a.qp_state = mlx5_hw::QpState::Error;
        use mlx5_hw::Device;
        p.b.dev.modify_qp(p.b.qp.info.id, &a, m).unwrap();
        p.run();
        let r: Vec<_> = p.b.rcq.drain().iter().map(outcome).collect();
        assert_eq!(
            r,
            [
                (CQE_RESP_ERR, SYNDROME_WR_FLUSH_ERR, 0),
                (CQE_RESP_ERR, SYNDROME_WR_FLUSH_ERR, 1)
            ]
        );
    }
}
