//! Side by side with rdma-core: work posted to a QP in Error is flushed by the device (IBTA
//! Vol. 1 §10.3.1; libmlx5's `mlx5_post_send` / `mlx5_post_recv` check no state). The CQEs the
//! software ConnectX writes for it are read with rdma-core's own accessors and offsets
//! (`mlx5dv.h` through the C oracle) — error CQEs of this lap, syndrome WR_FLUSH_ERR, naming
//! the QP and the WQE that was posted — and the data path's poll accepts the same bytes: one
//! flush completion per WR, nothing left outstanding.

use mlx5_conformance::oracle;
use mlx5_hw::{AttrMask, CqInitAttr, Device, QpAttr, QpCap, QpInitAttr, QpState, QpType};
use mlx5_qp::{Cq, Qp, SendWr, Wc, WcOpcode, WcStatus};
use mlx5_sim::{DeviceConfig, Fabric};
use mlx5_testkit::buf::{all_access, Buf};

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// `offsetof(struct mlx5_err_cqe, field)` as rdma-core's header has it.
fn err_off(field: &str) -> usize {
    oracle::value(&format!("offsetof mlx5_err_cqe.{field}")) as usize
}

#[test]
fn flush_cqes_of_work_posted_in_error_read_as_rdma_core_reads_them_and_are_polled() {
    let f = Fabric::new();
    let dev = f.add_device(DeviceConfig::new([10, 0, 0, 1]));
    let pd = dev.alloc_pd().unwrap();
    let cq_info = dev
        .create_cq(&CqInitAttr {
            cqe: 8,
            cqe_size: 64,
            ignore_overrun: false,
            channel: None,
        })
        .unwrap();
    let info = dev
        .create_qp(
            pd,
            &QpInitAttr {
                qp_type: QpType::Rc,
                send_cq: cq_info.id,
                recv_cq: cq_info.id,
                srq: None,
                cap: QpCap {
                    max_send_wr: 8,
                    max_recv_wr: 8,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 64,
                },
                sq_sig_all: false,
            },
        )
        .unwrap();
    // SAFETY: the CQ and the QP live as long as the device, which outlives the test's objects
    // (nothing is destroyed while they exist).
    let mut cq = unsafe { Cq::from_layout(&cq_info.layout) }.unwrap();
    // SAFETY: as above.
    let mut qp = unsafe { Qp::from_layout(&info.layout, None) }.unwrap();
    let buf = Buf::new(&dev, pd, 4096, all_access());
    let init = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qp_access_flags: all_access(),
        ..QpAttr::default()
    };
    let mask = AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS;
    dev.modify_qp(info.id, &init, mask).unwrap();
    let error = QpAttr {
        qp_state: QpState::Error,
        ..QpAttr::default()
    };
    dev.modify_qp(info.id, &error, AttrMask::STATE).unwrap();
    qp.set_state(QpState::Error);

    // Posted in Error: accepted, as libmlx5 accepts them.
    qp.post_recv(7, &[buf.sge(0, 64)]).unwrap();
    qp.post(&SendWr::send(8).inline(b"late")).unwrap();
    f.run_until_idle();

    let (req_err, resp_err) = (
        oracle::value("MLX5_CQE_REQ_ERR") as u8,
        oracle::value("MLX5_CQE_RESP_ERR") as u8,
    );
    let flush = oracle::value("MLX5_CQE_SYNDROME_WR_FLUSH_ERR") as u8;
    let mut kinds = Vec::new();
    for i in 0..2 {
        let mut cqe = [0u8; 64];
        // SAFETY: CQE `i` of the live 8-entry, 64-byte CQ buffer; the device wrote it during
        // `run_until_idle` and writes nothing more (the QP has nothing left to flush).
        unsafe {
            core::ptr::copy_nonoverlapping(cq_info.layout.buf.add(i * 64), cqe.as_mut_ptr(), 64)
        };
        let (owner, _se, format, opcode) = oracle::cqe_fields(&cqe);
        assert_eq!(
            (owner, format),
            (0, 0),
            "CQE {i}: first lap, no inline data"
        );
        assert!(
            opcode == req_err || opcode == resp_err,
            "CQE {i}: opcode {opcode}"
        );
        assert_eq!(cqe[err_off("syndrome")], flush, "CQE {i}: WR_FLUSH_ERR");
        let qpn_word = be32(&cqe, err_off("s_wqe_opcode_qpn"));
        assert_eq!(qpn_word & 0x00ff_ffff, info.qpn, "CQE {i}: the QP");
        assert_eq!(
            be16(&cqe, err_off("wqe_counter")),
            0,
            "CQE {i}: the first WQE posted"
        );
        if opcode == req_err {
            // The flushed WQE's opcode, where UCX reads it (`uct_ib_mlx5_cqe_err_opcode`).
            assert_eq!(qpn_word >> 24, oracle::value("MLX5_OPCODE_SEND") as u32);
        }
        kinds.push(opcode);
    }
    kinds.sort_unstable();
    assert_eq!(kinds, [req_err, resp_err]);

    // The data path's poll of the same bytes: both WRs, flushed, nothing left.
    let mut wcs = [Wc::default(); 4];
    let n = cq.poll(&mut qp, &mut wcs).unwrap();
    let mut got: Vec<(u64, WcStatus, WcOpcode)> = wcs[..n]
        .iter()
        .map(|w| (w.wr_id(), w.status(), w.opcode()))
        .collect();
    got.sort_by_key(|g| g.0);
    assert_eq!(
        got,
        [
            (7, WcStatus::WrFlushErr, WcOpcode::Recv),
            (8, WcStatus::WrFlushErr, WcOpcode::Send)
        ]
    );
    assert_eq!((qp.sq_outstanding_wrs(), qp.rq_outstanding()), (0, 0));
    assert_eq!(cq.poll(&mut qp, &mut wcs).unwrap(), 0);
    assert!(f.driver_bugs().is_empty(), "{:?}", f.driver_bugs());
}
