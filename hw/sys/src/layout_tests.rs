//! Sizes, alignments and offsets from the rdma-core 44 header on LP64 (x86_64 / aarch64 Linux),
//! measured with gcc `sizeof` / `offsetof` (the conformance crate re-checks them against the
//! header installed on the build machine).

use core::mem::{align_of, offset_of, size_of};

use crate::*;

#[test]
fn mlx5dv_qp_layout() {
    assert_eq!(size_of::<mlx5dv_qp>(), 96);
    assert_eq!(align_of::<mlx5dv_qp>(), 8);
    assert_eq!(offset_of!(mlx5dv_qp, dbrec), 0);
    assert_eq!(offset_of!(mlx5dv_qp, sq), 8);
    assert_eq!(offset_of!(mlx5dv_qp, rq), 24);
    assert_eq!(offset_of!(mlx5dv_qp, bf), 40);
    assert_eq!(offset_of!(mlx5dv_qp, comp_mask), 56);
    assert_eq!(offset_of!(mlx5dv_qp, uar_mmap_offset), 64);
    assert_eq!(offset_of!(mlx5dv_qp, tirn), 72);
    assert_eq!(offset_of!(mlx5dv_qp, tisn), 76);
    assert_eq!(offset_of!(mlx5dv_qp, rqn), 80);
    assert_eq!(offset_of!(mlx5dv_qp, sqn), 84);
    assert_eq!(offset_of!(mlx5dv_qp, tir_icm_addr), 88);
    assert_eq!(size_of::<mlx5dv_qp_wq>(), 16);
    assert_eq!(offset_of!(mlx5dv_qp_wq, wqe_cnt), 8);
    assert_eq!(offset_of!(mlx5dv_qp_wq, stride), 12);
    assert_eq!(size_of::<mlx5dv_qp_bf>(), 16);
    assert_eq!(offset_of!(mlx5dv_qp_bf, size), 8);
}

#[test]
fn mlx5dv_cq_srq_rwq_dm_ah_pd_layout() {
    assert_eq!(size_of::<mlx5dv_cq>(), 48);
    assert_eq!(offset_of!(mlx5dv_cq, dbrec), 8);
    assert_eq!(offset_of!(mlx5dv_cq, cqe_cnt), 16);
    assert_eq!(offset_of!(mlx5dv_cq, cqe_size), 20);
    assert_eq!(offset_of!(mlx5dv_cq, cq_uar), 24);
    assert_eq!(offset_of!(mlx5dv_cq, cqn), 32);
    assert_eq!(offset_of!(mlx5dv_cq, comp_mask), 40);

    assert_eq!(size_of::<mlx5dv_srq>(), 48);
    assert_eq!(offset_of!(mlx5dv_srq, dbrec), 8);
    assert_eq!(offset_of!(mlx5dv_srq, stride), 16);
    assert_eq!(offset_of!(mlx5dv_srq, head), 20);
    assert_eq!(offset_of!(mlx5dv_srq, tail), 24);
    assert_eq!(offset_of!(mlx5dv_srq, comp_mask), 32);
    assert_eq!(offset_of!(mlx5dv_srq, srqn), 40);

    assert_eq!(size_of::<mlx5dv_rwq>(), 32);
    assert_eq!(offset_of!(mlx5dv_rwq, wqe_cnt), 16);
    assert_eq!(offset_of!(mlx5dv_rwq, stride), 20);
    assert_eq!(offset_of!(mlx5dv_rwq, comp_mask), 24);

    assert_eq!(size_of::<mlx5dv_dm>(), 32);
    assert_eq!(offset_of!(mlx5dv_dm, remote_va), 24);
    assert_eq!(size_of::<mlx5dv_ah>(), 16);
    assert_eq!(offset_of!(mlx5dv_ah, comp_mask), 8);
    assert_eq!(size_of::<mlx5dv_pd>(), 16);
    assert_eq!(offset_of!(mlx5dv_pd, comp_mask), 8);
}

#[test]
fn mlx5dv_obj_layout() {
    // 128 with the devx pair; the v44 header's 112 bytes are a prefix of it.
    assert_eq!(size_of::<mlx5dv_obj>(), 128);
    assert_eq!(size_of::<mlx5dv_obj>(), MLX5DV_OBJ_SIZE_V44 + 16);
    let pairs = [
        offset_of!(mlx5dv_obj, qp),
        offset_of!(mlx5dv_obj, cq),
        offset_of!(mlx5dv_obj, srq),
        offset_of!(mlx5dv_obj, rwq),
        offset_of!(mlx5dv_obj, dm),
        offset_of!(mlx5dv_obj, ah),
        offset_of!(mlx5dv_obj, pd),
        offset_of!(mlx5dv_obj, devx),
    ];
    assert_eq!(pairs, [0, 16, 32, 48, 64, 80, 96, 112]);
    assert_eq!(offset_of!(mlx5dv_obj_pair<ibv_qp, mlx5dv_qp>, out), 8);
}

#[test]
fn mlx5dv_context_layout() {
    assert_eq!(size_of::<mlx5dv_context>(), 152);
    assert_eq!(align_of::<mlx5dv_context>(), 8);
    let offsets = [
        offset_of!(mlx5dv_context, version),
        offset_of!(mlx5dv_context, flags),
        offset_of!(mlx5dv_context, comp_mask),
        offset_of!(mlx5dv_context, cqe_comp_caps),
        offset_of!(mlx5dv_context, sw_parsing_caps),
        offset_of!(mlx5dv_context, striding_rq_caps),
        offset_of!(mlx5dv_context, tunnel_offloads_caps),
        offset_of!(mlx5dv_context, max_dynamic_bfregs),
        offset_of!(mlx5dv_context, max_clock_info_update_nsec),
        offset_of!(mlx5dv_context, flow_action_flags),
        offset_of!(mlx5dv_context, dc_odp_caps),
        offset_of!(mlx5dv_context, hca_core_clock),
        offset_of!(mlx5dv_context, num_lag_ports),
        offset_of!(mlx5dv_context, sig_caps),
        offset_of!(mlx5dv_context, dci_streams_caps),
        offset_of!(mlx5dv_context, max_wr_memcpy_length),
        offset_of!(mlx5dv_context, crypto_caps),
    ];
    assert_eq!(
        offsets,
        [0, 8, 16, 24, 32, 40, 60, 64, 72, 80, 84, 88, 96, 104, 120, 128, 136]
    );
    assert_eq!(size_of::<mlx5dv_striding_rq_caps>(), 20);
    assert_eq!(size_of::<mlx5dv_sig_caps>(), 16);
    assert_eq!(offset_of!(mlx5dv_sig_caps, crc_type), 14);
    assert_eq!(size_of::<mlx5dv_dci_streams_caps>(), 2);
    assert_eq!(size_of::<mlx5dv_crypto_caps>(), 12);
    assert_eq!(offset_of!(mlx5dv_crypto_caps, flags), 8);
}

#[test]
fn init_attr_layouts() {
    assert_eq!(size_of::<mlx5dv_qp_init_attr>(), 40);
    assert_eq!(offset_of!(mlx5dv_qp_init_attr, create_flags), 8);
    assert_eq!(offset_of!(mlx5dv_qp_init_attr, dc_init_attr), 16);
    assert_eq!(offset_of!(mlx5dv_qp_init_attr, send_ops_flags), 32);
    assert_eq!(size_of::<mlx5dv_dc_init_attr>(), 16);
    assert_eq!(offset_of!(mlx5dv_dc_init_attr, u), 8);

    assert_eq!(size_of::<mlx5dv_cq_init_attr>(), 24);
    assert_eq!(offset_of!(mlx5dv_cq_init_attr, cqe_comp_res_format), 8);
    assert_eq!(offset_of!(mlx5dv_cq_init_attr, flags), 12);
    assert_eq!(offset_of!(mlx5dv_cq_init_attr, cqe_size), 16);
}

#[test]
fn flag_values() {
    assert_eq!(MLX5DV_OBJ_PD, 0x40);
    assert_eq!(MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE, 8);
    assert_eq!(MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE, 4);
    assert_eq!(MLX5DV_CONTEXT_MASK_V44_ALL, 0x3fff);
    assert_eq!(MLX5_SND_DBR, 1);
}
