/*
 * The C oracle of mlx5-direct's conformance tests.
 *
 * It calls rdma-core's own static-inline helpers from <infiniband/mlx5dv.h> on buffers the
 * Rust tests own, and reports sizeof/offsetof of every struct and the value of every constant
 * that the Rust crates mirror. It needs only the header: nothing here links against libmlx5.
 *
 * Our own code (MIT OR Apache-2.0); it only uses the header's public API.
 */
#include <endian.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <infiniband/mlx5dv.h>

/* ---- helpers on caller buffers -------------------------------------------------------- */

void oracle_set_ctrl_seg(uint8_t *buf, uint16_t pi, uint8_t opcode, uint8_t opmod,
                         uint32_t qp_num, uint8_t fm_ce_se, uint8_t ds, uint8_t signature,
                         uint32_t imm)
{
    mlx5dv_set_ctrl_seg((struct mlx5_wqe_ctrl_seg *)buf, pi, opcode, opmod, qp_num, fm_ce_se,
                        ds, signature, imm);
}

/* 1 when this oracle was built with the SSSE3 variant mlx5dv_x86_set_ctrl_seg. */
int oracle_has_x86_ctrl_seg(void)
{
#if defined(__SSE3__) && defined(__SSSE3__)
    return 1;
#else
    return 0;
#endif
}

void oracle_x86_set_ctrl_seg(uint8_t *buf, uint16_t pi, uint8_t opcode, uint8_t opmod,
                             uint32_t qp_num, uint8_t fm_ce_se, uint8_t ds, uint8_t signature,
                             uint32_t imm)
{
#if defined(__SSE3__) && defined(__SSSE3__)
    mlx5dv_x86_set_ctrl_seg((struct mlx5_wqe_ctrl_seg *)buf, pi, opcode, opmod, qp_num,
                            fm_ce_se, ds, signature, imm);
#else
    (void)buf; (void)pi; (void)opcode; (void)opmod; (void)qp_num;
    (void)fm_ce_se; (void)ds; (void)signature; (void)imm;
#endif
}

void oracle_set_data_seg(uint8_t *buf, uint32_t length, uint32_t lkey, uint64_t address)
{
    mlx5dv_set_data_seg((struct mlx5_wqe_data_seg *)buf, length, lkey, (uintptr_t)address);
}

void oracle_set_dgram_seg(uint8_t *buf, uint64_t key, uint32_t dqp_dct, uint8_t ext,
                          uint8_t stat_rate_sl, uint8_t fl_mlid, uint16_t rlid,
                          const uint8_t *rmac, uint8_t tclass, uint8_t hop_limit,
                          uint32_t grh_gid_fl, const uint8_t *rgid)
{
    uint8_t mac[6], gid[16];

    memcpy(mac, rmac, sizeof(mac));
    memcpy(gid, rgid, sizeof(gid));
    mlx5dv_set_dgram_seg((struct mlx5_wqe_datagram_seg *)buf, key, dqp_dct, ext, stat_rate_sl,
                         fl_mlid, rlid, mac, tclass, hop_limit, grh_gid_fl, gid);
}

uint8_t oracle_get_cqe_owner(uint8_t *cqe) { return mlx5dv_get_cqe_owner((struct mlx5_cqe64 *)cqe); }
uint8_t oracle_get_cqe_se(uint8_t *cqe) { return mlx5dv_get_cqe_se((struct mlx5_cqe64 *)cqe); }
uint8_t oracle_get_cqe_format(uint8_t *cqe) { return mlx5dv_get_cqe_format((struct mlx5_cqe64 *)cqe); }
uint8_t oracle_get_cqe_opcode(uint8_t *cqe) { return mlx5dv_get_cqe_opcode((struct mlx5_cqe64 *)cqe); }
void oracle_set_cqe_owner(uint8_t *cqe, uint8_t val) { mlx5dv_set_cqe_owner((struct mlx5_cqe64 *)cqe, val); }

/* ---- a DCI WQE as libmlx5's ibv_wr_* builders store it --------------------------------- */

/*
 * One work request of a DC initiator, as a program hands it to libmlx5's ibv_wr_* API:
 * the builder (ibv_wr_send / _send_imm / _rdma_write / _rdma_write_imm / _rdma_read /
 * _atomic_cmp_swp / _atomic_fetch_add), mlx5dv_wr_set_dc_addr or mlx5dv_wr_set_dc_addr_stream,
 * and ibv_wr_set_inline_data, ibv_wr_set_sge or ibv_wr_set_sge_list.
 */
struct oracle_dci_wr {
    uint32_t ib_opcode;        /* enum ibv_wr_opcode */
    uint32_t send_flags;       /* IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_FENCE */
    uint32_t imm_be;           /* the __be32 immediate, stored as given */
    const uint8_t *av;         /* the AH's struct mlx5_wqe_av, 48 bytes */
    uint32_t dctn;
    uint64_t dc_key;
    uint32_t with_stream;      /* mlx5dv_wr_set_dc_addr_stream instead of _set_dc_addr */
    uint16_t stream_id;
    uint64_t remote_addr;
    uint32_t rkey;
    uint64_t swap;             /* atomic_cmp_swp: swap; */
    uint64_t compare_add;      /* compare, or the addend of atomic_fetch_add */
    uint32_t inline_data;      /* ibv_wr_set_inline_data instead of the gather list */
    const uint8_t *data;
    uint32_t data_len;
    uint32_t nsge;
    const uint64_t *sge_addr;
    const uint32_t *sge_len;
    const uint32_t *sge_lkey;
};

/*
 * Store the WQE of `wr` at producer index `cur_post` of a send ring of `wqe_cnt` 64-byte
 * blocks, doing what rdma-core 44's providers/mlx5/qp.c does for a DCI (IBV_QPT_DRIVER),
 * store for store, written here from those facts:
 *   _common_wqe_init_op   bytes 8..11 of ctrl zeroed, fm_ce_se = signaled/solicited/fence
 *                         bits, opmod_idx_opcode = BE32(cur_post << 8 | opcode); the
 *                         immediate only for SEND_IMM / WRITE_IMM (bytes 12..15 otherwise
 *                         left as the ring held them);
 *   _mlx5_send_wr_send / _rdma / _atomic
 *                         the datagram segment after ctrl, then the raddr segment (raddr,
 *                         rkey, reserved 0) wrapped to the ring start if it would begin at its
 *                         end, then the atomic segment (CAS: swap and compare; FAA: the addend
 *                         in swap_add, compare left alone);
 *   mlx5_send_wr_set_dc_addr(_stream)
 *                         the AH's AV copied, dqp_dct |= BE32(dctn | MLX5_EXTENDED_UD_AV),
 *                         key = BE64(dc_key); the stream id, BE16, into ctrl bytes 9..10;
 *   _mlx5_send_wr_set_inline_data
 *                         the payload after a 4-byte header, split at the ring end
 *                         (memcpy_to_wqe), header BE32(len | MLX5_INLINE_SEG), the padding
 *                         left alone; nothing for 0 bytes;
 *   _mlx5_send_wr_set_sge(_list)
 *                         a data segment per entry of non-zero length, the list wrapping per
 *                         entry;
 *   _common_wqe_finalize  qpn_ds = BE32(size_in_16B | qp_num << 8).
 * Returns the DS count, 0 for an opcode a DCI does not build here.
 */
uint32_t oracle_dci_wqe(uint8_t *ring, uint32_t wqe_cnt, uint32_t cur_post, uint32_t qp_num,
                        const struct oracle_dci_wr *wr)
{
    uint8_t *qend = ring + (size_t)wqe_cnt * MLX5_SEND_WQE_BB;
    struct mlx5_wqe_ctrl_seg *ctrl =
        (void *)(ring + (size_t)(cur_post & (wqe_cnt - 1)) * MLX5_SEND_WQE_BB);
    struct mlx5_wqe_datagram_seg *dseg = (void *)((uint8_t *)ctrl + sizeof(*ctrl));
    uint8_t *seg = (uint8_t *)dseg + sizeof(*dseg);
    uint32_t size = (sizeof(*ctrl) + sizeof(*dseg)) / 16;
    uint8_t opcode;
    uint32_t word;

    switch (wr->ib_opcode) {
    case IBV_WR_SEND: opcode = MLX5_OPCODE_SEND; break;
    case IBV_WR_SEND_WITH_IMM: opcode = MLX5_OPCODE_SEND_IMM; break;
    case IBV_WR_RDMA_WRITE: opcode = MLX5_OPCODE_RDMA_WRITE; break;
    case IBV_WR_RDMA_WRITE_WITH_IMM: opcode = MLX5_OPCODE_RDMA_WRITE_IMM; break;
    case IBV_WR_RDMA_READ: opcode = MLX5_OPCODE_RDMA_READ; break;
    case IBV_WR_ATOMIC_CMP_AND_SWP: opcode = MLX5_OPCODE_ATOMIC_CS; break;
    case IBV_WR_ATOMIC_FETCH_AND_ADD: opcode = MLX5_OPCODE_ATOMIC_FA; break;
    default: return 0;
    }

    word = 0;
    memcpy((uint8_t *)ctrl + 8, &word, sizeof(word));
    ctrl->fm_ce_se = (wr->send_flags & IBV_SEND_FENCE ? MLX5_WQE_CTRL_FENCE : 0) |
                     (wr->send_flags & IBV_SEND_SIGNALED ? MLX5_WQE_CTRL_CQ_UPDATE : 0) |
                     (wr->send_flags & IBV_SEND_SOLICITED ? MLX5_WQE_CTRL_SOLICITED : 0);
    ctrl->opmod_idx_opcode = htobe32(((cur_post & 0xffff) << 8) | opcode);
    if (opcode == MLX5_OPCODE_SEND_IMM || opcode == MLX5_OPCODE_RDMA_WRITE_IMM)
        ctrl->imm = wr->imm_be;

    if (seg == qend)
        seg = ring;
    if (opcode != MLX5_OPCODE_SEND && opcode != MLX5_OPCODE_SEND_IMM) {
        struct mlx5_wqe_raddr_seg *r = (void *)seg;

        r->raddr = htobe64(wr->remote_addr);
        r->rkey = htobe32(wr->rkey);
        r->reserved = 0;
        seg += sizeof(*r);
        size += sizeof(*r) / 16;
    }
    if (opcode == MLX5_OPCODE_ATOMIC_CS || opcode == MLX5_OPCODE_ATOMIC_FA) {
        struct mlx5_wqe_atomic_seg *a = (void *)seg;

        if (opcode == MLX5_OPCODE_ATOMIC_CS) {
            a->swap_add = htobe64(wr->swap);
            a->compare = htobe64(wr->compare_add);
        } else {
            a->swap_add = htobe64(wr->compare_add);
        }
        seg += sizeof(*a);
        size += sizeof(*a) / 16;
        if (seg == qend)
            seg = ring;
    }

    memcpy(&dseg->av, wr->av, sizeof(dseg->av));
    dseg->av.dqp_dct |= htobe32(wr->dctn | MLX5_EXTENDED_UD_AV);
    dseg->av.key.dc_key = htobe64(wr->dc_key);
    if (wr->with_stream)
        ctrl->dci_stream_channel_id = htobe16(wr->stream_id);

    if (wr->inline_data) {
        struct mlx5_wqe_inl_data_seg *inl = (void *)seg;
        uint8_t *dst = seg + sizeof(*inl);
        const uint8_t *src = wr->data;
        size_t n = wr->data_len;

        if (n) {
            if (dst + n > qend) {
                size_t copy = (size_t)(qend - dst);

                memcpy(dst, src, copy);
                src += copy;
                n -= copy;
                dst = ring;
            }
            memcpy(dst, src, n);
            inl->byte_count = htobe32(wr->data_len | MLX5_INLINE_SEG);
            size += (wr->data_len + sizeof(*inl) + 15) / 16;
        }
    } else {
        struct mlx5_wqe_data_seg *d = (void *)seg;
        uint32_t i;

        for (i = 0; i < wr->nsge; i++) {
            if ((uint8_t *)d == qend)
                d = (void *)ring;
            if (!wr->sge_len[i])
                continue;
            d->byte_count = htobe32(wr->sge_len[i]);
            d->lkey = htobe32(wr->sge_lkey[i]);
            d->addr = htobe64(wr->sge_addr[i]);
            d++;
            size += sizeof(*d) / 16;
        }
    }

    ctrl->qpn_ds = htobe32(size | (qp_num << 8));
    return size;
}

/* ---- layouts and constants, as one table of named numbers ----------------------------- */

struct oracle_entry {
    const char *name;
    uint64_t value;
};

#define SZ(t)      { "sizeof " #t, sizeof(struct t) }
#define OFF(t, f)  { "offsetof " #t "." #f, offsetof(struct t, f) }
#define C(c)       { #c, (uint64_t)(c) }
#define SZU(t)     { "sizeof " #t, sizeof(union t) }
#define OFF_U(t, f) { "offsetof " #t "." #f, offsetof(union t, f) }
#define MSZ(t, f)  { "sizeof " #t "." #f, sizeof(((struct t *)0)->f) }

static const struct oracle_entry entries[] = {
    /* send WQE segments */
    SZ(mlx5_wqe_ctrl_seg),
    OFF(mlx5_wqe_ctrl_seg, opmod_idx_opcode), OFF(mlx5_wqe_ctrl_seg, qpn_ds),
    OFF(mlx5_wqe_ctrl_seg, signature), OFF(mlx5_wqe_ctrl_seg, dci_stream_channel_id),
    OFF(mlx5_wqe_ctrl_seg, fm_ce_se), OFF(mlx5_wqe_ctrl_seg, imm),
    SZ(mlx5_wqe_raddr_seg),
    OFF(mlx5_wqe_raddr_seg, raddr), OFF(mlx5_wqe_raddr_seg, rkey), OFF(mlx5_wqe_raddr_seg, reserved),
    SZ(mlx5_wqe_data_seg),
    OFF(mlx5_wqe_data_seg, byte_count), OFF(mlx5_wqe_data_seg, lkey), OFF(mlx5_wqe_data_seg, addr),
    SZ(mlx5_wqe_inl_data_seg),
    OFF(mlx5_wqe_inl_data_seg, byte_count),
    SZ(mlx5_wqe_atomic_seg),
    OFF(mlx5_wqe_atomic_seg, swap_add), OFF(mlx5_wqe_atomic_seg, compare),
    SZ(mlx5_wqe_av), SZ(mlx5_wqe_datagram_seg),
    OFF(mlx5_wqe_av, key), OFF(mlx5_wqe_av, key.qkey.qkey), OFF(mlx5_wqe_av, key.qkey.reserved),
    OFF(mlx5_wqe_av, dqp_dct), OFF(mlx5_wqe_av, stat_rate_sl), OFF(mlx5_wqe_av, fl_mlid),
    OFF(mlx5_wqe_av, rlid), OFF(mlx5_wqe_av, reserved0), OFF(mlx5_wqe_av, rmac),
    OFF(mlx5_wqe_av, tclass), OFF(mlx5_wqe_av, hop_limit), OFF(mlx5_wqe_av, grh_gid_fl),
    OFF(mlx5_wqe_av, rgid),
    SZ(mlx5_wqe_srq_next_seg),
    OFF(mlx5_wqe_srq_next_seg, rsvd0), OFF(mlx5_wqe_srq_next_seg, next_wqe_index),
    OFF(mlx5_wqe_srq_next_seg, signature), OFF(mlx5_wqe_srq_next_seg, rsvd1),
    SZ(mlx5_wqe_eth_seg),

    /* CQEs */
    SZ(mlx5_cqe64),
    OFF(mlx5_cqe64, wqe_id), OFF(mlx5_cqe64, ml_path), OFF(mlx5_cqe64, rsvd20), OFF(mlx5_cqe64, slid),
    OFF(mlx5_cqe64, flags_rqpn), OFF(mlx5_cqe64, hds_ip_ext), OFF(mlx5_cqe64, l4_hdr_type_etc),
    OFF(mlx5_cqe64, vlan_info), OFF(mlx5_cqe64, srqn_uidx), OFF(mlx5_cqe64, imm_inval_pkey),
    OFF(mlx5_cqe64, app), OFF(mlx5_cqe64, app_op), OFF(mlx5_cqe64, app_info),
    OFF(mlx5_cqe64, byte_cnt), OFF(mlx5_cqe64, timestamp), OFF(mlx5_cqe64, sop_drop_qpn),
    OFF(mlx5_cqe64, wqe_counter), OFF(mlx5_cqe64, signature), OFF(mlx5_cqe64, op_own),
    SZ(mlx5_err_cqe),
    OFF(mlx5_err_cqe, rsvd0), OFF(mlx5_err_cqe, srqn), OFF(mlx5_err_cqe, rsvd1),
    OFF(mlx5_err_cqe, vendor_err_synd), OFF(mlx5_err_cqe, syndrome),
    OFF(mlx5_err_cqe, s_wqe_opcode_qpn), OFF(mlx5_err_cqe, wqe_counter),
    OFF(mlx5_err_cqe, signature), OFF(mlx5_err_cqe, op_own),

    /* mlx5dv objects */
    SZ(mlx5dv_qp),
    OFF(mlx5dv_qp, dbrec), OFF(mlx5dv_qp, sq), OFF(mlx5dv_qp, sq.buf), OFF(mlx5dv_qp, sq.wqe_cnt),
    OFF(mlx5dv_qp, sq.stride), OFF(mlx5dv_qp, rq), OFF(mlx5dv_qp, rq.buf), OFF(mlx5dv_qp, rq.wqe_cnt),
    OFF(mlx5dv_qp, rq.stride), OFF(mlx5dv_qp, bf), OFF(mlx5dv_qp, bf.reg), OFF(mlx5dv_qp, bf.size),
    OFF(mlx5dv_qp, comp_mask), OFF(mlx5dv_qp, uar_mmap_offset), OFF(mlx5dv_qp, tirn),
    OFF(mlx5dv_qp, tisn), OFF(mlx5dv_qp, rqn), OFF(mlx5dv_qp, sqn), OFF(mlx5dv_qp, tir_icm_addr),
    SZ(mlx5dv_cq),
    OFF(mlx5dv_cq, buf), OFF(mlx5dv_cq, dbrec), OFF(mlx5dv_cq, cqe_cnt), OFF(mlx5dv_cq, cqe_size),
    OFF(mlx5dv_cq, cq_uar), OFF(mlx5dv_cq, cqn), OFF(mlx5dv_cq, comp_mask),
    SZ(mlx5dv_srq),
    OFF(mlx5dv_srq, buf), OFF(mlx5dv_srq, dbrec), OFF(mlx5dv_srq, stride), OFF(mlx5dv_srq, head),
    OFF(mlx5dv_srq, tail), OFF(mlx5dv_srq, comp_mask), OFF(mlx5dv_srq, srqn),
    SZ(mlx5dv_rwq),
    OFF(mlx5dv_rwq, buf), OFF(mlx5dv_rwq, dbrec), OFF(mlx5dv_rwq, wqe_cnt), OFF(mlx5dv_rwq, stride),
    OFF(mlx5dv_rwq, comp_mask),
    SZ(mlx5dv_dm),
    OFF(mlx5dv_dm, buf), OFF(mlx5dv_dm, length), OFF(mlx5dv_dm, comp_mask), OFF(mlx5dv_dm, remote_va),
    SZ(mlx5dv_ah), OFF(mlx5dv_ah, av), OFF(mlx5dv_ah, comp_mask),
    SZ(mlx5dv_pd), OFF(mlx5dv_pd, pdn), OFF(mlx5dv_pd, comp_mask),
    SZ(mlx5dv_obj),
    OFF(mlx5dv_obj, qp), OFF(mlx5dv_obj, qp.in), OFF(mlx5dv_obj, qp.out), OFF(mlx5dv_obj, cq),
    OFF(mlx5dv_obj, srq), OFF(mlx5dv_obj, rwq), OFF(mlx5dv_obj, dm), OFF(mlx5dv_obj, ah),
    OFF(mlx5dv_obj, pd),
    SZ(mlx5dv_qp_init_attr),
    OFF(mlx5dv_qp_init_attr, comp_mask), OFF(mlx5dv_qp_init_attr, create_flags),
    OFF(mlx5dv_qp_init_attr, dc_init_attr), OFF(mlx5dv_qp_init_attr, send_ops_flags),
    SZ(mlx5dv_dc_init_attr),
    OFF(mlx5dv_dc_init_attr, dc_type), OFF(mlx5dv_dc_init_attr, dct_access_key),
    OFF(mlx5dv_dc_init_attr, dci_streams),
    SZ(mlx5dv_dci_streams),
    OFF(mlx5dv_dci_streams, log_num_concurent), OFF(mlx5dv_dci_streams, log_num_errored),
    SZ(mlx5dv_cq_init_attr),
    OFF(mlx5dv_cq_init_attr, comp_mask), OFF(mlx5dv_cq_init_attr, cqe_comp_res_format),
    OFF(mlx5dv_cq_init_attr, flags), OFF(mlx5dv_cq_init_attr, cqe_size),
    SZ(mlx5dv_context),
    OFF(mlx5dv_context, version), OFF(mlx5dv_context, flags), OFF(mlx5dv_context, comp_mask),
    OFF(mlx5dv_context, cqe_comp_caps), OFF(mlx5dv_context, sw_parsing_caps),
    OFF(mlx5dv_context, striding_rq_caps), OFF(mlx5dv_context, tunnel_offloads_caps),
    OFF(mlx5dv_context, max_dynamic_bfregs), OFF(mlx5dv_context, max_clock_info_update_nsec),
    OFF(mlx5dv_context, flow_action_flags), OFF(mlx5dv_context, dc_odp_caps),
    OFF(mlx5dv_context, hca_core_clock), OFF(mlx5dv_context, num_lag_ports),
    OFF(mlx5dv_context, sig_caps), OFF(mlx5dv_context, dci_streams_caps),
    OFF(mlx5dv_context, max_wr_memcpy_length), OFF(mlx5dv_context, crypto_caps),
    SZ(mlx5dv_cqe_comp_caps), OFF(mlx5dv_cqe_comp_caps, max_num), OFF(mlx5dv_cqe_comp_caps, supported_format),
    SZ(mlx5dv_sw_parsing_caps), OFF(mlx5dv_sw_parsing_caps, sw_parsing_offloads),
    OFF(mlx5dv_sw_parsing_caps, supported_qpts),
    SZ(mlx5dv_striding_rq_caps),
    OFF(mlx5dv_striding_rq_caps, min_single_stride_log_num_of_bytes),
    OFF(mlx5dv_striding_rq_caps, max_single_stride_log_num_of_bytes),
    OFF(mlx5dv_striding_rq_caps, min_single_wqe_log_num_of_strides),
    OFF(mlx5dv_striding_rq_caps, max_single_wqe_log_num_of_strides),
    OFF(mlx5dv_striding_rq_caps, supported_qpts),
    SZ(mlx5dv_sig_caps), OFF(mlx5dv_sig_caps, block_size), OFF(mlx5dv_sig_caps, block_prot),
    OFF(mlx5dv_sig_caps, t10dif_bg), OFF(mlx5dv_sig_caps, crc_type),
    SZ(mlx5dv_dci_streams_caps), OFF(mlx5dv_dci_streams_caps, max_log_num_concurent),
    OFF(mlx5dv_dci_streams_caps, max_log_num_errored),
    SZ(mlx5dv_crypto_caps), OFF(mlx5dv_crypto_caps, failed_selftests),
    OFF(mlx5dv_crypto_caps, crypto_engines), OFF(mlx5dv_crypto_caps, wrapped_import_method),
    OFF(mlx5dv_crypto_caps, log_max_num_deks), OFF(mlx5dv_crypto_caps, flags),

    /* send opcodes */
    C(MLX5_OPCODE_NOP), C(MLX5_OPCODE_SEND_INVAL), C(MLX5_OPCODE_RDMA_WRITE),
    C(MLX5_OPCODE_RDMA_WRITE_IMM), C(MLX5_OPCODE_SEND), C(MLX5_OPCODE_SEND_IMM),
    C(MLX5_OPCODE_TSO), C(MLX5_OPCODE_RDMA_READ), C(MLX5_OPCODE_ATOMIC_CS),
    C(MLX5_OPCODE_ATOMIC_FA), C(MLX5_OPCODE_ATOMIC_MASKED_CS), C(MLX5_OPCODE_ATOMIC_MASKED_FA),
    C(MLX5_OPCODE_FMR), C(MLX5_OPCODE_LOCAL_INVAL), C(MLX5_OPCODE_CONFIG_CMD),
    C(MLX5_OPCODE_SET_PSV), C(MLX5_OPCODE_UMR), C(MLX5_OPCODE_TAG_MATCHING),
    C(MLX5_OPCODE_FLOW_TBL_ACCESS), C(MLX5_OPCODE_MMO),
    /* ctrl flags, WQE constants */
    C(MLX5_WQE_CTRL_CQ_UPDATE), C(MLX5_WQE_CTRL_SOLICITED), C(MLX5_WQE_CTRL_FENCE),
    C(MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE), C(MLX5_SEND_WQE_BB), C(MLX5_SEND_WQE_SHIFT),
    C(MLX5_INLINE_SEG), C(MLX5_INVALID_LKEY), C(MLX5_EXTENDED_UD_AV),
    C(MLX5_RCV_DBR), C(MLX5_SND_DBR),
    /* CQE */
    C(MLX5_CQE_OWNER_MASK), C(MLX5_CQE_REQ), C(MLX5_CQE_RESP_WR_IMM), C(MLX5_CQE_RESP_SEND),
    C(MLX5_CQE_RESP_SEND_IMM), C(MLX5_CQE_RESP_SEND_INV), C(MLX5_CQE_RESIZE_CQ),
    C(MLX5_CQE_NO_PACKET), C(MLX5_CQE_SIG_ERR), C(MLX5_CQE_REQ_ERR), C(MLX5_CQE_RESP_ERR),
    C(MLX5_CQE_INVALID), C(MLX5_INLINE_SCATTER_32), C(MLX5_INLINE_SCATTER_64),
    C(MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR), C(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR),
    C(MLX5_CQE_SYNDROME_LOCAL_PROT_ERR), C(MLX5_CQE_SYNDROME_WR_FLUSH_ERR),
    C(MLX5_CQE_SYNDROME_MW_BIND_ERR), C(MLX5_CQE_SYNDROME_BAD_RESP_ERR),
    C(MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR), C(MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR),
    C(MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR), C(MLX5_CQE_SYNDROME_REMOTE_OP_ERR),
    C(MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR), C(MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR),
    C(MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR), C(MLX5_CQE_VENDOR_SYNDROME_ODP_PFAULT),
    C(MLX5_CQ_DOORBELL), C(MLX5_CQ_DB_REQ_NOT_SOL), C(MLX5_CQ_DB_REQ_NOT),
    /* ibv_wc_status values (verbs.h) */
    C(IBV_WC_SUCCESS), C(IBV_WC_LOC_LEN_ERR), C(IBV_WC_LOC_QP_OP_ERR), C(IBV_WC_LOC_EEC_OP_ERR),
    C(IBV_WC_LOC_PROT_ERR), C(IBV_WC_WR_FLUSH_ERR), C(IBV_WC_MW_BIND_ERR), C(IBV_WC_BAD_RESP_ERR),
    C(IBV_WC_LOC_ACCESS_ERR), C(IBV_WC_REM_INV_REQ_ERR), C(IBV_WC_REM_ACCESS_ERR),
    C(IBV_WC_REM_OP_ERR), C(IBV_WC_RETRY_EXC_ERR), C(IBV_WC_RNR_RETRY_EXC_ERR),
    C(IBV_WC_LOC_RDD_VIOL_ERR), C(IBV_WC_REM_INV_RD_REQ_ERR), C(IBV_WC_REM_ABORT_ERR),
    C(IBV_WC_INV_EECN_ERR), C(IBV_WC_INV_EEC_STATE_ERR), C(IBV_WC_FATAL_ERR),
    C(IBV_WC_RESP_TIMEOUT_ERR), C(IBV_WC_GENERAL_ERR),
    /* mlx5dv flags */
    C(MLX5DV_OBJ_QP), C(MLX5DV_OBJ_CQ), C(MLX5DV_OBJ_SRQ), C(MLX5DV_OBJ_RWQ), C(MLX5DV_OBJ_DM),
    C(MLX5DV_OBJ_AH), C(MLX5DV_OBJ_PD),
    C(MLX5DV_QP_MASK_UAR_MMAP_OFFSET), C(MLX5DV_QP_MASK_RAW_QP_HANDLES),
    C(MLX5DV_QP_MASK_RAW_QP_TIR_ADDR), C(MLX5DV_SRQ_MASK_SRQN),
    C(MLX5DV_CONTEXT_FLAGS_CQE_V1), C(MLX5DV_CONTEXT_FLAGS_OBSOLETE),
    C(MLX5DV_CONTEXT_FLAGS_MPW_ALLOWED), C(MLX5DV_CONTEXT_FLAGS_ENHANCED_MPW),
    C(MLX5DV_CONTEXT_FLAGS_CQE_128B_COMP), C(MLX5DV_CONTEXT_FLAGS_CQE_128B_PAD),
    C(MLX5DV_CONTEXT_FLAGS_PACKET_BASED_CREDIT_MODE), C(MLX5DV_CONTEXT_FLAGS_REAL_TIME_TS),
    C(MLX5DV_CONTEXT_MASK_CQE_COMPRESION), C(MLX5DV_CONTEXT_MASK_SWP),
    C(MLX5DV_CONTEXT_MASK_STRIDING_RQ), C(MLX5DV_CONTEXT_MASK_TUNNEL_OFFLOADS),
    C(MLX5DV_CONTEXT_MASK_DYN_BFREGS), C(MLX5DV_CONTEXT_MASK_CLOCK_INFO_UPDATE),
    C(MLX5DV_CONTEXT_MASK_FLOW_ACTION_FLAGS), C(MLX5DV_CONTEXT_MASK_DC_ODP_CAPS),
    C(MLX5DV_CONTEXT_MASK_HCA_CORE_CLOCK), C(MLX5DV_CONTEXT_MASK_NUM_LAG_PORTS),
    C(MLX5DV_CONTEXT_MASK_SIGNATURE_OFFLOAD), C(MLX5DV_CONTEXT_MASK_DCI_STREAMS),
    C(MLX5DV_CONTEXT_MASK_WR_MEMCPY_LENGTH), C(MLX5DV_CONTEXT_MASK_CRYPTO_OFFLOAD),
    C(MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS), C(MLX5DV_QP_INIT_ATTR_MASK_DC),
    C(MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS), C(MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS),
    C(MLX5DV_QP_CREATE_TUNNEL_OFFLOADS), C(MLX5DV_QP_CREATE_TIR_ALLOW_SELF_LOOPBACK_UC),
    C(MLX5DV_QP_CREATE_TIR_ALLOW_SELF_LOOPBACK_MC), C(MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE),
    C(MLX5DV_QP_CREATE_ALLOW_SCATTER_TO_CQE), C(MLX5DV_QP_CREATE_PACKET_BASED_CREDIT_MODE),
    C(MLX5DV_QP_CREATE_SIG_PIPELINING),
    C(MLX5DV_DCTYPE_DCT), C(MLX5DV_DCTYPE_DCI),
    C(MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE), C(MLX5DV_CQ_INIT_ATTR_MASK_FLAGS),
    C(MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE), C(MLX5DV_CQ_INIT_ATTR_FLAGS_CQE_PAD),
    C(MLX5DV_CQ_INIT_ATTR_FLAGS_RESERVED),
    C(MLX5DV_CQE_RES_FORMAT_HASH), C(MLX5DV_CQE_RES_FORMAT_CSUM),
    C(MLX5DV_CQE_RES_FORMAT_CSUM_STRIDX),
    SZ(mlx5dv_clock_info), OFF(mlx5dv_clock_info, nsec), OFF(mlx5dv_clock_info, last_cycles),
    OFF(mlx5dv_clock_info, frac), OFF(mlx5dv_clock_info, mult), OFF(mlx5dv_clock_info, shift),
    OFF(mlx5dv_clock_info, mask),

#include "verbs_table.h"
};

size_t oracle_entry_count(void)
{
    return sizeof(entries) / sizeof(entries[0]);
}

/* Name and value of entry i (i < oracle_entry_count()). */
const char *oracle_entry(size_t i, uint64_t *value)
{
    *value = entries[i].value;
    return entries[i].name;
}
