//! UC and UD on a lossy fabric: a UC message with a missing packet is dropped and completes
//! nothing at the receiver, which recovers at the next first/only packet; a lost UD datagram
//! is simply gone. Both complete at the sender when sent (IBTA Vol 1 §9.8).

mod common;

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
