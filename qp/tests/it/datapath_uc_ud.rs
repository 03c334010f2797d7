//! The data path on the software ConnectX, UC and UD: every opcode the QP type allows, with
//! data checked byte for byte, and the RC-only ones refused before they reach the ring.

use crate::datapath_support;

use datapath_support::*;
use mlx5_hw::{Device, QpType};
use mlx5_qp::{Error, SendWr, UdDest, WcFlags, WcOpcode, WcStatus};

#[test]
fn uc_send_write_and_immediates() {
    let (f, mut a, mut b) = pair(&Opts {
        qp_type: QpType::Uc,
        ..Opts::default()
    });
    b.qp.post_recv(1, &[b.buf.sge(0, 128)]).unwrap();
    b.qp.post_recv(2, &[b.buf.sge(128, 128)]).unwrap();
    b.qp.post_recv(3, &[]).unwrap();
    a.buf.bytes_mut()[..64].copy_from_slice(&[0x5a; 64]);
    {
        let mut bt = a.qp.batch();
        bt.post(&SendWr::send(10).sges(&[a.buf.sge(0, 64)]).signaled())
            .unwrap();
        bt.post(&SendWr::send_imm(11, 77).inline(b"uc imm").signaled())
            .unwrap();
        bt.post(
            &SendWr::write(12, b.buf.remote(1000))
                .inline(b"uc write")
                .signaled(),
        )
        .unwrap();
        bt.post(
            &SendWr::write_imm(13, b.buf.remote(2000), 88)
                .sges(&[a.buf.sge(0, 10)])
                .signaled(),
        )
        .unwrap();
    }
    let wa = pump(&f, &mut a.cq, &mut a.qp, 8);
    assert_eq!(
        wa.iter().map(|w| w.wr_id()).collect::<Vec<_>>(),
        vec![10, 11, 12, 13]
    );
    assert!(wa.iter().all(|w| w.status() == WcStatus::Success));
    let wb = pump(&f, &mut b.cq, &mut b.qp, 8);
    assert_eq!(
        wb.iter()
            .map(|w| (w.wr_id(), w.opcode(), w.byte_len(), w.imm_data()))
            .collect::<Vec<_>>(),
        vec![
            (1, WcOpcode::Recv, 64, 0),
            (2, WcOpcode::Recv, 6, 77),
            (3, WcOpcode::RecvRdmaWithImm, 10, 88)
        ]
    );
    assert_eq!(&b.buf.bytes()[..64], &[0x5a; 64]);
    assert_eq!(&b.buf.bytes()[128..134], b"uc imm");
    assert_eq!(&b.buf.bytes()[1000..1008], b"uc write");
    assert_eq!(&b.buf.bytes()[2000..2010], &[0x5a; 10]);
    let l = a.buf.sge(0, 8);
    assert!(matches!(
        a.qp.post(&SendWr::read(0, b.buf.remote(0)).sges(&[l])),
        Err(Error::OpNotSupported {
            qp_type: QpType::Uc,
            ..
        })
    ));
    assert!(matches!(
        a.qp.post(&SendWr::fetch_add(0, b.buf.remote(0), l, 1)),
        Err(Error::OpNotSupported { .. })
    ));
    no_driver_bugs(&f);
}

/// Issue 18: a UC SEND that loses a packet leaves its receive for the next message that
/// consumes one, a WRITE with immediate included, so the data path sees receives complete in
/// order: no invented flush, no poll error, no delivered message lost.
#[test]
fn uc_receives_stay_in_order_after_a_broken_send() {
    let (f, mut a, mut b) = pair(&Opts {
        qp_type: QpType::Uc,
        ..Opts::default()
    });
    for k in 0..3u64 {
        b.qp.post_recv(k, &[b.buf.sge(k as usize * 4096, 4096)])
            .unwrap();
    }
    // The 3000-byte SEND is three packets at MTU 1024; its middle one is lost.
    f.faults()
        .path(&a.dev, &b.dev)
        .qpn(b.info.qpn)
        .skip(1)
        .times(1)
        .drop_every(1);
    a.buf.bytes_mut()[..3000].fill(0x11);
    {
        let mut bt = a.qp.batch();
        bt.post(&SendWr::send(10).sges(&[a.buf.sge(0, 3000)]).signaled())
            .unwrap();
        bt.post(
            &SendWr::write_imm(11, b.buf.remote(20000), 99)
                .inline(b"imm")
                .signaled(),
        )
        .unwrap();
        bt.post(&SendWr::send(12).inline(b"after").signaled())
            .unwrap();
    }
    assert_eq!(drain(&f, &mut a.cq, &mut a.qp).len(), 3);
    let wb = drain(&f, &mut b.cq, &mut b.qp);
    assert_eq!(
        wb.iter()
            .map(|w| (w.wr_id(), w.status(), w.opcode(), w.byte_len()))
            .collect::<Vec<_>>(),
        vec![
            (0, WcStatus::Success, WcOpcode::RecvRdmaWithImm, 3),
            (1, WcStatus::Success, WcOpcode::Recv, 5),
        ]
    );
    assert_eq!(&b.buf.bytes()[4096..4101], b"after");
    assert_eq!(b.qp.rq_outstanding(), 1);
    no_driver_bugs(&f);
}

#[test]
fn ud_send_with_an_address_handle() {
    let (f, mut a, mut b) = pair(&Opts {
        qp_type: QpType::Ud,
        ..Opts::default()
    });
    // UD receives get the 40-byte GRH first.
    b.qp.post_recv(1, &[b.buf.sge(0, 40 + 256)]).unwrap();
    b.qp.post_recv(2, &[b.buf.sge(512, 40), b.buf.sge(1024, 100)])
        .unwrap();
    let ah = a.dev.create_ah(a.pd, &ah_to(&b.dev)).unwrap();
    let dest = UdDest::new(&ah.av, b.info.qpn, 0x1111_1111);
    a.buf.bytes_mut()[..200].copy_from_slice(&[0xc3; 200]);
    a.qp.post(
        &SendWr::send(5)
            .sges(&[a.buf.sge(0, 200)])
            .ud(&dest)
            .signaled(),
    )
    .unwrap();
    a.qp.post(
        &SendWr::send_imm(6, 0xabcd)
            .inline(b"datagram")
            .ud(&dest)
            .signaled(),
    )
    .unwrap();
    let wa = pump(&f, &mut a.cq, &mut a.qp, 4);
    assert_eq!(
        wa.iter()
            .map(|w| (w.wr_id(), w.status()))
            .collect::<Vec<_>>(),
        vec![(5, WcStatus::Success), (6, WcStatus::Success)]
    );
    let wb = pump(&f, &mut b.cq, &mut b.qp, 4);
    assert_eq!(wb.len(), 2, "{wb:?}");
    assert_eq!(
        (wb[0].wr_id(), wb[0].byte_len(), wb[0].src_qp()),
        (1, 240, a.info.qpn)
    );
    assert!(wb[0].flags().contains(WcFlags::GRH));
    assert_eq!(&b.buf.bytes()[40..240], &[0xc3; 200]);
    assert_eq!(
        (wb[1].wr_id(), wb[1].byte_len(), wb[1].imm_data()),
        (2, 48, 0xabcd)
    );
    assert!(wb[1].flags().contains(WcFlags::WITH_IMM));
    assert_eq!(&b.buf.bytes()[1024..1032], b"datagram");
    // A wrong Q_Key is dropped by the receiver; the sender still completes (UD is unreliable).
    b.qp.post_recv(3, &[b.buf.sge(0, 296)]).unwrap();
    let bad = UdDest::new(&ah.av, b.info.qpn, 0x2222);
    a.qp.post(&SendWr::send(7).inline(b"x").ud(&bad).signaled())
        .unwrap();
    assert_eq!(pump(&f, &mut a.cq, &mut a.qp, 4).len(), 1);
    assert!(pump(&f, &mut b.cq, &mut b.qp, 4).is_empty());
    // Refused before the ring: no AH, or an RC-only operation.
    assert!(matches!(
        a.qp.post(&SendWr::send(8).inline(b"x")),
        Err(Error::MissingAddress)
    ));
    assert!(matches!(
        a.qp.post(&SendWr::write(8, b.buf.remote(0)).inline(b"x").ud(&dest)),
        Err(Error::OpNotSupported {
            qp_type: QpType::Ud,
            ..
        })
    ));
    no_driver_bugs(&f);
}

/// A UC send that fails (a gather entry with a bad lkey: a local protection error) moves the
/// QP to SQE and flushes what follows on its send queue; once the control path moves it back
/// to RTS, WRs posted then complete as before the error: the unsignaled one without a
/// completion (no flush invented for it), the signaled one successfully, both written at the
/// peer, the QP in RTS and open to lean posts.
#[test]
fn uc_qp_recovers_from_sqe_with_selective_signaling() {
    use mlx5_hw::{AttrMask, QpAttr, QpState};
    for room in [1, 16] {
        let (f, mut a, b) = pair(&Opts {
            qp_type: QpType::Uc,
            ..Opts::default()
        });
        let mut bad = a.buf.sge(0, 8);
        bad.lkey ^= 0x5a5a;
        a.qp.post(&SendWr::write(1, b.buf.remote(0)).sges(&[bad]).signaled())
            .unwrap();
        a.qp.post(&SendWr::write(2, b.buf.remote(64)).inline(b"flushed"))
            .unwrap();
        a.qp.post(
            &SendWr::write(3, b.buf.remote(128))
                .inline(b"flushed")
                .signaled(),
        )
        .unwrap();
        let got = drain_room(&f, &mut a.cq, &mut a.qp, room);
        let first: Vec<(u64, WcStatus)> = got.iter().map(|w| (w.wr_id(), w.status())).collect();
        assert_eq!(first[0], (1, WcStatus::LocProtErr), "room {room}: {got:?}");
        assert!(
            first[1..].iter().all(|&(_, s)| s == WcStatus::WrFlushErr),
            "room {room}: {got:?}"
        );
        assert_eq!(first.last().map(|w| w.0), Some(3), "room {room}: {got:?}");
        assert_eq!(
            a.qp.state(),
            QpState::Sqe,
            "the data path followed the device"
        );
        assert_eq!(a.dev.query_qp(a.info.id).unwrap().qp_state, QpState::Sqe);
        assert_eq!(a.qp.sq_outstanding_bbs(), 0);
        let rts = QpAttr {
            qp_state: QpState::Rts,
            ..Default::default()
        };
        a.dev.modify_qp(a.info.id, &rts, AttrMask::STATE).unwrap();
        a.qp.set_state(QpState::Rts);
        a.qp.post(&SendWr::write(4, b.buf.remote(256)).inline(b"after 4"))
            .unwrap();
        a.qp.post(
            &SendWr::write(5, b.buf.remote(320))
                .inline(b"after 5")
                .signaled(),
        )
        .unwrap();
        let after = drain_room(&f, &mut a.cq, &mut a.qp, room);
        let after: Vec<(u64, WcStatus)> = after.iter().map(|w| (w.wr_id(), w.status())).collect();
        assert_eq!(after, [(5, WcStatus::Success)], "room {room}");
        assert_eq!(&b.buf.bytes()[256..263], b"after 4");
        assert_eq!(&b.buf.bytes()[320..327], b"after 5");
        assert_eq!((a.qp.state(), a.qp.sq_outstanding_bbs()), (QpState::Rts, 0));
        no_driver_bugs(&f);
    }
}
