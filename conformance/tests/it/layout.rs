//! Every size and field offset of the Rust mirrors of rdma-core structs, against `sizeof` /
//! `offsetof` from the installed `<infiniband/mlx5dv.h>` (through the C oracle).
//!
//! Not in the installed header (they live in rdma-core's internal `providers/mlx5/wqe.h`): the
//! masked-atomic segments and the XRC segment. Their layouts are pinned by the golden vectors
//! in `wqe/tests/golden.rs`, after `docs/wqe-layout.md` §5 (rdma-core `wqe.h`, UCX `ib_mlx5.h`).

use core::mem::{offset_of, size_of};

use mlx5_conformance::oracle;
use mlx5_cq::{Cqe64, ErrCqe};
use mlx5_wqe::{AtomicSeg, AvSeg, CtrlSeg, DataSeg, InlineHdr, RaddrSeg, SrqNextSeg};
use mlx5dv_sys::*;

/// Compare a list of `(oracle name, Rust value)`; report every mismatch at once.
fn check(items: &[(&str, usize)]) {
    let table = oracle::entries();
    let mut bad = Vec::new();
    for (name, rust) in items {
        match table.iter().find(|(n, _)| n == name) {
            Some((_, c)) if *c == *rust as u64 => {}
            Some((_, c)) => bad.push(format!("{name}: C {c}, Rust {rust}")),
            None => bad.push(format!("{name}: unknown to the C oracle")),
        }
    }
    assert!(
        bad.is_empty(),
        "layout mismatches against mlx5dv.h:\n  {}",
        bad.join("\n  ")
    );
}

macro_rules! size {
    ($c:literal, $t:ty) => {
        (concat!("sizeof ", $c), size_of::<$t>())
    };
}
macro_rules! off {
    ($c:literal, $t:ty, $f:ident) => {
        (
            concat!("offsetof ", $c, ".", stringify!($f)),
            offset_of!($t, $f),
        )
    };
    ($c:literal . $cf:literal, $t:ty, $f:ident) => {
        (concat!("offsetof ", $c, ".", $cf), offset_of!($t, $f))
    };
}

#[test]
fn send_segments() {
    check(&[
        size!("mlx5_wqe_ctrl_seg", CtrlSeg),
        off!("mlx5_wqe_ctrl_seg", CtrlSeg, opmod_idx_opcode),
        off!("mlx5_wqe_ctrl_seg", CtrlSeg, qpn_ds),
        off!("mlx5_wqe_ctrl_seg", CtrlSeg, signature),
        off!("mlx5_wqe_ctrl_seg", CtrlSeg, dci_stream_channel_id),
        off!("mlx5_wqe_ctrl_seg", CtrlSeg, fm_ce_se),
        off!("mlx5_wqe_ctrl_seg", CtrlSeg, imm),
        size!("mlx5_wqe_raddr_seg", RaddrSeg),
        off!("mlx5_wqe_raddr_seg", RaddrSeg, raddr),
        off!("mlx5_wqe_raddr_seg", RaddrSeg, rkey),
        off!("mlx5_wqe_raddr_seg", RaddrSeg, reserved),
        size!("mlx5_wqe_data_seg", DataSeg),
        off!("mlx5_wqe_data_seg", DataSeg, byte_count),
        off!("mlx5_wqe_data_seg", DataSeg, lkey),
        off!("mlx5_wqe_data_seg", DataSeg, addr),
        size!("mlx5_wqe_inl_data_seg", InlineHdr),
        off!("mlx5_wqe_inl_data_seg", InlineHdr, byte_count),
        size!("mlx5_wqe_atomic_seg", AtomicSeg),
        off!("mlx5_wqe_atomic_seg", AtomicSeg, swap_add),
        off!("mlx5_wqe_atomic_seg", AtomicSeg, compare),
        size!("mlx5_wqe_srq_next_seg", SrqNextSeg),
        off!("mlx5_wqe_srq_next_seg", SrqNextSeg, rsvd0),
        off!("mlx5_wqe_srq_next_seg", SrqNextSeg, next_wqe_index),
        off!("mlx5_wqe_srq_next_seg", SrqNextSeg, signature),
        off!("mlx5_wqe_srq_next_seg", SrqNextSeg, rsvd1),
    ]);
}

#[test]
fn address_vector() {
    check(&[
        size!("mlx5_wqe_av", AvSeg),
        size!("mlx5_wqe_datagram_seg", AvSeg),
        off!("mlx5_wqe_av", AvSeg, key),
        // The UD Q_Key is the high half of the BE64 key: byte 0 (`key.qkey.qkey`).
        ("offsetof mlx5_wqe_av.key.qkey.qkey", offset_of!(AvSeg, key)),
        (
            "offsetof mlx5_wqe_av.key.qkey.reserved",
            offset_of!(AvSeg, key) + 4,
        ),
        off!("mlx5_wqe_av", AvSeg, dqp_dct),
        off!("mlx5_wqe_av", AvSeg, stat_rate_sl),
        off!("mlx5_wqe_av", AvSeg, fl_mlid),
        off!("mlx5_wqe_av", AvSeg, rlid),
        off!("mlx5_wqe_av", AvSeg, reserved0),
        off!("mlx5_wqe_av", AvSeg, rmac),
        off!("mlx5_wqe_av", AvSeg, tclass),
        off!("mlx5_wqe_av", AvSeg, hop_limit),
        off!("mlx5_wqe_av", AvSeg, grh_gid_fl),
        off!("mlx5_wqe_av", AvSeg, rgid),
    ]);
}

#[test]
fn cqe64() {
    check(&[
        size!("mlx5_cqe64", Cqe64),
        // Rust folds the Ethernet / striding-RQ bytes 0..17 into `rsvd0`; C starts with
        // rsvd0[2] at 0 and ends that run with rsvd4[13] just before ml_path.
        ("offsetof mlx5_cqe64.ml_path", offset_of!(Cqe64, rsvd0) + 17),
        off!("mlx5_cqe64", Cqe64, ml_path),
        off!("mlx5_cqe64", Cqe64, rsvd20),
        off!("mlx5_cqe64", Cqe64, slid),
        off!("mlx5_cqe64", Cqe64, flags_rqpn),
        off!("mlx5_cqe64", Cqe64, hds_ip_ext),
        off!("mlx5_cqe64", Cqe64, l4_hdr_type_etc),
        off!("mlx5_cqe64", Cqe64, vlan_info),
        off!("mlx5_cqe64", Cqe64, srqn_uidx),
        off!("mlx5_cqe64", Cqe64, imm_inval_pkey),
        off!("mlx5_cqe64", Cqe64, app),
        off!("mlx5_cqe64", Cqe64, app_op),
        off!("mlx5_cqe64", Cqe64, app_info),
        off!("mlx5_cqe64", Cqe64, byte_cnt),
        off!("mlx5_cqe64", Cqe64, timestamp),
        off!("mlx5_cqe64", Cqe64, sop_drop_qpn),
        off!("mlx5_cqe64", Cqe64, wqe_counter),
        off!("mlx5_cqe64", Cqe64, signature),
        off!("mlx5_cqe64", Cqe64, op_own),
    ]);
    assert_eq!(offset_of!(Cqe64, rsvd0), 0);
}

#[test]
fn err_cqe() {
    check(&[
        size!("mlx5_err_cqe", ErrCqe),
        off!("mlx5_err_cqe", ErrCqe, rsvd0),
        off!("mlx5_err_cqe", ErrCqe, srqn),
        off!("mlx5_err_cqe", ErrCqe, rsvd1),
        // The header's rsvd1[18] holds UCX's hw_err_synd and hw_synd_type in its last 2 bytes.
        (
            "offsetof mlx5_err_cqe.vendor_err_synd",
            offset_of!(ErrCqe, hw_err_synd) + 2,
        ),
        (
            "offsetof mlx5_err_cqe.vendor_err_synd",
            offset_of!(ErrCqe, hw_synd_type) + 1,
        ),
        off!("mlx5_err_cqe", ErrCqe, vendor_err_synd),
        off!("mlx5_err_cqe", ErrCqe, syndrome),
        off!("mlx5_err_cqe", ErrCqe, s_wqe_opcode_qpn),
        off!("mlx5_err_cqe", ErrCqe, wqe_counter),
        off!("mlx5_err_cqe", ErrCqe, signature),
        off!("mlx5_err_cqe", ErrCqe, op_own),
    ]);
}

#[test]
fn mlx5dv_objects() {
    let sq = offset_of!(mlx5dv_qp, sq);
    let rq = offset_of!(mlx5dv_qp, rq);
    let bf = offset_of!(mlx5dv_qp, bf);
    check(&[
        size!("mlx5dv_qp", mlx5dv_qp),
        off!("mlx5dv_qp", mlx5dv_qp, dbrec),
        off!("mlx5dv_qp", mlx5dv_qp, sq),
        (
            "offsetof mlx5dv_qp.sq.buf",
            sq + offset_of!(mlx5dv_qp_wq, buf),
        ),
        (
            "offsetof mlx5dv_qp.sq.wqe_cnt",
            sq + offset_of!(mlx5dv_qp_wq, wqe_cnt),
        ),
        (
            "offsetof mlx5dv_qp.sq.stride",
            sq + offset_of!(mlx5dv_qp_wq, stride),
        ),
        off!("mlx5dv_qp", mlx5dv_qp, rq),
        (
            "offsetof mlx5dv_qp.rq.buf",
            rq + offset_of!(mlx5dv_qp_wq, buf),
        ),
        (
            "offsetof mlx5dv_qp.rq.wqe_cnt",
            rq + offset_of!(mlx5dv_qp_wq, wqe_cnt),
        ),
        (
            "offsetof mlx5dv_qp.rq.stride",
            rq + offset_of!(mlx5dv_qp_wq, stride),
        ),
        off!("mlx5dv_qp", mlx5dv_qp, bf),
        (
            "offsetof mlx5dv_qp.bf.reg",
            bf + offset_of!(mlx5dv_qp_bf, reg),
        ),
        (
            "offsetof mlx5dv_qp.bf.size",
            bf + offset_of!(mlx5dv_qp_bf, size),
        ),
        off!("mlx5dv_qp", mlx5dv_qp, comp_mask),
        off!("mlx5dv_qp", mlx5dv_qp, uar_mmap_offset),
        off!("mlx5dv_qp", mlx5dv_qp, tirn),
        off!("mlx5dv_qp", mlx5dv_qp, tisn),
        off!("mlx5dv_qp", mlx5dv_qp, rqn),
        off!("mlx5dv_qp", mlx5dv_qp, sqn),
        off!("mlx5dv_qp", mlx5dv_qp, tir_icm_addr),
        size!("mlx5dv_cq", mlx5dv_cq),
        off!("mlx5dv_cq", mlx5dv_cq, buf),
        off!("mlx5dv_cq", mlx5dv_cq, dbrec),
        off!("mlx5dv_cq", mlx5dv_cq, cqe_cnt),
        off!("mlx5dv_cq", mlx5dv_cq, cqe_size),
        off!("mlx5dv_cq", mlx5dv_cq, cq_uar),
        off!("mlx5dv_cq", mlx5dv_cq, cqn),
        off!("mlx5dv_cq", mlx5dv_cq, comp_mask),
        size!("mlx5dv_srq", mlx5dv_srq),
        off!("mlx5dv_srq", mlx5dv_srq, buf),
        off!("mlx5dv_srq", mlx5dv_srq, dbrec),
        off!("mlx5dv_srq", mlx5dv_srq, stride),
        off!("mlx5dv_srq", mlx5dv_srq, head),
        off!("mlx5dv_srq", mlx5dv_srq, tail),
        off!("mlx5dv_srq", mlx5dv_srq, comp_mask),
        off!("mlx5dv_srq", mlx5dv_srq, srqn),
        size!("mlx5dv_rwq", mlx5dv_rwq),
        off!("mlx5dv_rwq", mlx5dv_rwq, buf),
        off!("mlx5dv_rwq", mlx5dv_rwq, dbrec),
        off!("mlx5dv_rwq", mlx5dv_rwq, wqe_cnt),
        off!("mlx5dv_rwq", mlx5dv_rwq, stride),
        off!("mlx5dv_rwq", mlx5dv_rwq, comp_mask),
        size!("mlx5dv_dm", mlx5dv_dm),
        off!("mlx5dv_dm", mlx5dv_dm, buf),
        off!("mlx5dv_dm", mlx5dv_dm, length),
        off!("mlx5dv_dm", mlx5dv_dm, comp_mask),
        off!("mlx5dv_dm", mlx5dv_dm, remote_va),
        size!("mlx5dv_ah", mlx5dv_ah),
        off!("mlx5dv_ah", mlx5dv_ah, av),
        off!("mlx5dv_ah", mlx5dv_ah, comp_mask),
        size!("mlx5dv_pd", mlx5dv_pd),
        off!("mlx5dv_pd", mlx5dv_pd, pdn),
        off!("mlx5dv_pd", mlx5dv_pd, comp_mask),
    ]);
}

#[test]
fn mlx5dv_obj_is_the_v44_struct_plus_devx() {
    type QpPair = mlx5dv_obj_pair<ibv_qp, mlx5dv_qp>;
    check(&[
        ("sizeof mlx5dv_obj", MLX5DV_OBJ_SIZE_V44),
        off!("mlx5dv_obj", mlx5dv_obj, qp),
        (
            "offsetof mlx5dv_obj.qp.in",
            offset_of!(mlx5dv_obj, qp) + offset_of!(QpPair, in_),
        ),
        (
            "offsetof mlx5dv_obj.qp.out",
            offset_of!(mlx5dv_obj, qp) + offset_of!(QpPair, out),
        ),
        off!("mlx5dv_obj", mlx5dv_obj, cq),
        off!("mlx5dv_obj", mlx5dv_obj, srq),
        off!("mlx5dv_obj", mlx5dv_obj, rwq),
        off!("mlx5dv_obj", mlx5dv_obj, dm),
        off!("mlx5dv_obj", mlx5dv_obj, ah),
        off!("mlx5dv_obj", mlx5dv_obj, pd),
        // devx sits right after the header's last pair.
        ("sizeof mlx5dv_obj", offset_of!(mlx5dv_obj, devx)),
    ]);
    assert_eq!(size_of::<mlx5dv_obj>(), offset_of!(mlx5dv_obj, devx) + 16);
}

#[test]
fn create_attrs() {
    let dc = offset_of!(mlx5dv_dc_init_attr, u);
    check(&[
        size!("mlx5dv_qp_init_attr", mlx5dv_qp_init_attr),
        off!("mlx5dv_qp_init_attr", mlx5dv_qp_init_attr, comp_mask),
        off!("mlx5dv_qp_init_attr", mlx5dv_qp_init_attr, create_flags),
        off!("mlx5dv_qp_init_attr", mlx5dv_qp_init_attr, dc_init_attr),
        off!("mlx5dv_qp_init_attr", mlx5dv_qp_init_attr, send_ops_flags),
        size!("mlx5dv_dc_init_attr", mlx5dv_dc_init_attr),
        off!("mlx5dv_dc_init_attr", mlx5dv_dc_init_attr, dc_type),
        (
            "offsetof mlx5dv_dc_init_attr.dct_access_key",
            dc + offset_of!(mlx5dv_dc_init_attr_u, dct_access_key),
        ),
        (
            "offsetof mlx5dv_dc_init_attr.dci_streams",
            dc + offset_of!(mlx5dv_dc_init_attr_u, dci_streams),
        ),
        size!("mlx5dv_dci_streams", mlx5dv_dci_streams),
        off!("mlx5dv_dci_streams", mlx5dv_dci_streams, log_num_concurent),
        off!("mlx5dv_dci_streams", mlx5dv_dci_streams, log_num_errored),
        size!("mlx5dv_cq_init_attr", mlx5dv_cq_init_attr),
        off!("mlx5dv_cq_init_attr", mlx5dv_cq_init_attr, comp_mask),
        off!(
            "mlx5dv_cq_init_attr",
            mlx5dv_cq_init_attr,
            cqe_comp_res_format
        ),
        off!("mlx5dv_cq_init_attr", mlx5dv_cq_init_attr, flags),
        off!("mlx5dv_cq_init_attr", mlx5dv_cq_init_attr, cqe_size),
    ]);
}

#[test]
fn query_context() {
    check(&[
        size!("mlx5dv_context", mlx5dv_context),
        off!("mlx5dv_context", mlx5dv_context, version),
        off!("mlx5dv_context", mlx5dv_context, flags),
        off!("mlx5dv_context", mlx5dv_context, comp_mask),
        off!("mlx5dv_context", mlx5dv_context, cqe_comp_caps),
        off!("mlx5dv_context", mlx5dv_context, sw_parsing_caps),
        off!("mlx5dv_context", mlx5dv_context, striding_rq_caps),
        off!("mlx5dv_context", mlx5dv_context, tunnel_offloads_caps),
        off!("mlx5dv_context", mlx5dv_context, max_dynamic_bfregs),
        off!("mlx5dv_context", mlx5dv_context, max_clock_info_update_nsec),
        off!("mlx5dv_context", mlx5dv_context, flow_action_flags),
        off!("mlx5dv_context", mlx5dv_context, dc_odp_caps),
        off!("mlx5dv_context", mlx5dv_context, hca_core_clock),
        off!("mlx5dv_context", mlx5dv_context, num_lag_ports),
        off!("mlx5dv_context", mlx5dv_context, sig_caps),
        off!("mlx5dv_context", mlx5dv_context, dci_streams_caps),
        off!("mlx5dv_context", mlx5dv_context, max_wr_memcpy_length),
        off!("mlx5dv_context", mlx5dv_context, crypto_caps),
        size!("mlx5dv_cqe_comp_caps", mlx5dv_cqe_comp_caps),
        off!("mlx5dv_cqe_comp_caps", mlx5dv_cqe_comp_caps, max_num),
        off!(
            "mlx5dv_cqe_comp_caps",
            mlx5dv_cqe_comp_caps,
            supported_format
        ),
        size!("mlx5dv_sw_parsing_caps", mlx5dv_sw_parsing_caps),
        off!(
            "mlx5dv_sw_parsing_caps",
            mlx5dv_sw_parsing_caps,
            sw_parsing_offloads
        ),
        off!(
            "mlx5dv_sw_parsing_caps",
            mlx5dv_sw_parsing_caps,
            supported_qpts
        ),
        size!("mlx5dv_striding_rq_caps", mlx5dv_striding_rq_caps),
        off!(
            "mlx5dv_striding_rq_caps",
            mlx5dv_striding_rq_caps,
            min_single_stride_log_num_of_bytes
        ),
        off!(
            "mlx5dv_striding_rq_caps",
            mlx5dv_striding_rq_caps,
            max_single_stride_log_num_of_bytes
        ),
        off!(
            "mlx5dv_striding_rq_caps",
            mlx5dv_striding_rq_caps,
            min_single_wqe_log_num_of_strides
        ),
        off!(
            "mlx5dv_striding_rq_caps",
            mlx5dv_striding_rq_caps,
            max_single_wqe_log_num_of_strides
        ),
        off!(
            "mlx5dv_striding_rq_caps",
            mlx5dv_striding_rq_caps,
            supported_qpts
        ),
        size!("mlx5dv_sig_caps", mlx5dv_sig_caps),
        off!("mlx5dv_sig_caps", mlx5dv_sig_caps, block_size),
        off!("mlx5dv_sig_caps", mlx5dv_sig_caps, block_prot),
        off!("mlx5dv_sig_caps", mlx5dv_sig_caps, t10dif_bg),
        off!("mlx5dv_sig_caps", mlx5dv_sig_caps, crc_type),
        size!("mlx5dv_dci_streams_caps", mlx5dv_dci_streams_caps),
        off!(
            "mlx5dv_dci_streams_caps",
            mlx5dv_dci_streams_caps,
            max_log_num_concurent
        ),
        off!(
            "mlx5dv_dci_streams_caps",
            mlx5dv_dci_streams_caps,
            max_log_num_errored
        ),
        size!("mlx5dv_crypto_caps", mlx5dv_crypto_caps),
        off!("mlx5dv_crypto_caps", mlx5dv_crypto_caps, failed_selftests),
        off!("mlx5dv_crypto_caps", mlx5dv_crypto_caps, crypto_engines),
        off!(
            "mlx5dv_crypto_caps",
            mlx5dv_crypto_caps,
            wrapped_import_method
        ),
        off!("mlx5dv_crypto_caps", mlx5dv_crypto_caps, log_max_num_deks),
        off!("mlx5dv_crypto_caps", mlx5dv_crypto_caps, flags),
    ]);
}
