//! The `QpTable` finds a QP by its own QPN only.

use super::*;

/// A `QpTable` finds a QP by the QP's own QPN, never by where it used to be: an empty
/// table finds nothing (its sentinel's QPN is no 24-bit QPN), and after the two QPs swap
/// places through `qps_mut` neither is found, neither for its QPN nor for the other's, so
/// a CQE of one never retires a WQE of the other; the CQE is reported as unknown.
#[test]
fn a_qp_table_finds_a_qp_only_by_its_own_qpn() {
    use crate::cq::Resolve;
    let mut empty = QpTable::new();
    for qpn in [0, 1, QPN, 0xff_ffff, 0x100_0000, u32::MAX] {
        assert!(empty.qp(qpn).is_none(), "{qpn:#x} in an empty table");
    }
    let (mut dev, mut t, mut cq) = Dev::new(64);
    assert_eq!(t.qp(QPN).map(|q| q.qpn()), Some(QPN));
    assert_eq!(t.qp(QPN_B).map(|q| q.qpn()), Some(QPN_B));
    assert!(t.qp(QPN + 1).is_none() && t.qp(0x77).is_none() && t.qp(u32::MAX).is_none());
    t.qps_mut().swap(0, 1);
    assert!(t.qp(QPN).is_none() && t.qp(QPN_B).is_none());
    let qp = t.qp_at(0).unwrap();
    qp.post(&SendWr::write(9, R).inline(b"ab").signaled())
        .unwrap();
    dev.push(req_cqe(QPN_B, 0, op::OPCODE_RDMA_WRITE, 0));
    let calls = drain(&mut cq, &mut t, 1);
    assert!(
        matches!(calls.as_slice(), [Err(e)] if e.contains("QPN")),
        "{calls:?}"
    );
    assert_eq!(t.qp_at(0).unwrap().sq_outstanding_bbs(), 1);
    drop((t, cq));
    drop(dev);
}

/// The CQ reports the number its layout gave it (what its errors and logs name), and starts
/// at consumer index 0 with arm sequence 0; a bad CQE's error names that CQ.
#[test]
fn the_cq_keeps_its_number() {
    let (mut dev, mut table, mut cq) = Dev::typed(64, QpType::Rc);
    assert_eq!((cq.cqn(), cq.ci(), cq.arm_sn()), (7, 0, 0));
    dev.push(req_cqe(QPN, 5, mlx5_wqe::OPCODE_RDMA_WRITE, 0));
    let mut wcs = [Wc::default(); 4];
    match cq.poll(&mut table, &mut wcs) {
        Err(crate::error::Error::BadCqe { cqn, qpn, .. }) => assert_eq!((cqn, qpn), (7, QPN)),
        other => panic!("a CQE naming no outstanding WQE: {other:?}"),
    }
    assert_eq!(cq.ci(), 1, "the bad CQE is consumed");
}
