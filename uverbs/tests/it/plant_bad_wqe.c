/*
 * A verbs program that plants a corrupted WQE: it connects an RC QP through libibverbs, builds
 * one RDMA WRITE (8 bytes inline) in the send queue with mlx5dv as libmlx5 would, advances the
 * doorbell record, and then writes a BlueFlame copy of the WQE whose payload differs from the
 * ring by one byte ("corrupt"; "clean" copies it faithfully). A ConnectX would execute the copy
 * without a word; the software ConnectX reports the mismatch (BlueFlameMismatch). The QP is
 * connected to a QP number nobody has, so the WRITE stays in flight (retried until
 * RETRY_EXC_ERR, half a second) while the device looks at the copy. Built and run by the mlx5-sim-uverbs
 * tests (tests/it/driver_bugs.rs). Exit 0 once the WRITE completed with that error (and the
 * QP's asynchronous event came).
 */
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>
#include <endian.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static int fail(const char *what) {
	perror(what);
	return 1;
}

int main(int argc, char **argv) {
	int corrupt = argc > 1 && strcmp(argv[1], "corrupt") == 0;
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n < 1)
		return fail("no device");
	struct ibv_context *ctx = ibv_open_device(list[0]);
	if (!ctx)
		return fail("ibv_open_device");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	static uint8_t buf[4096] __attribute__((aligned(4096)));
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!pd || !mr || !cq)
		return fail("pd/mr/cq");
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 16, .max_recv_wr = 1, .max_send_sge = 1,
			 .max_recv_sge = 1, .max_inline_data = 64 },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	if (!qp)
		return fail("ibv_create_qp");
	union ibv_gid gid;
	if (ibv_query_gid(ctx, 1, 0, &gid))
		return fail("ibv_query_gid");
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_REMOTE_WRITE };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			  IBV_QP_ACCESS_FLAGS))
		return fail("INIT");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = qp->qp_num + 0x1000; /* nobody: the WRITE stays in flight */
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = gid;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
			  IBV_QP_MIN_RNR_TIMER))
		return fail("RTR");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14; /* 8 tries of 67 ms: in flight longer than the device's settle deadline */
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		return fail("RTS");

	struct mlx5dv_qp dq;
	struct mlx5dv_obj obj = { .qp = { .in = qp, .out = &dq } };
	if (mlx5dv_init_obj(&obj, MLX5DV_OBJ_QP))
		return fail("mlx5dv_init_obj");
	if (dq.bf.size == 0) {
		fprintf(stderr, "no BlueFlame register\n");
		return 1;
	}
	/* Give the device a look at the QP's clean BlueFlame halves first: a threaded device judges
	 * only copies into halves it saw poisoned (mlx5-sim doorbell/threaded.rs). */
	struct timespec pause = { 0, 50 * 1000 * 1000 };
	nanosleep(&pause, NULL);
	/* WQE 0: ctrl, remote address, 8 bytes inline: DS 3. */
	uint8_t *w = dq.sq.buf;
	memset(w, 0, 64);
	struct mlx5_wqe_ctrl_seg *c = (void *)w;
	c->opmod_idx_opcode = htobe32(MLX5_OPCODE_RDMA_WRITE);
	c->qpn_ds = htobe32(qp->qp_num << 8 | 3);
	c->fm_ce_se = MLX5_WQE_CTRL_CQ_UPDATE;
	struct mlx5_wqe_raddr_seg *r = (void *)(w + 16);
	r->raddr = htobe64((uintptr_t)(buf + 64));
	r->rkey = htobe32(mr->rkey);
	uint32_t *inl = (void *)(w + 32);
	*inl = htobe32(MLX5_INLINE_SEG | 8);
	memcpy(w + 36, "ringdata", 8);
	uint8_t copy[64];
	memcpy(copy, w, 64);
	if (corrupt)
		copy[36] ^= 0xff; /* the corruption: the copy's first payload byte */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	dq.dbrec[MLX5_SND_DBR] = htobe32(1);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	uint64_t *dst = dq.bf.reg;
	const uint64_t *src = (const uint64_t *)copy;
	for (int i = 0; i < 8; i++)
		dst[i] = src[i];
	__atomic_thread_fence(__ATOMIC_SEQ_CST);

	struct ibv_wc wc;
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		int k = ibv_poll_cq(cq, 1, &wc);
		if (k < 0)
			return fail("ibv_poll_cq");
		if (k == 1)
			break;
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec > 20) {
			fprintf(stderr, "no completion\n");
			return 1;
		}
	}
	printf("completion status %d (%s)\n", wc.status, ibv_wc_status_str(wc.status));
	/* The QP went to Error on its own: the asynchronous event says so, for this QP. */
	struct pollfd pfd = { .fd = ctx->async_fd, .events = POLLIN };
	if (poll(&pfd, 1, 10000) != 1)
		return fail("no asynchronous event");
	struct ibv_async_event ev;
	if (ibv_get_async_event(ctx, &ev))
		return fail("ibv_get_async_event");
	printf("async event %s%s\n", ibv_event_type_str(ev.event_type),
	       ev.element.qp == qp ? " on the QP" : "");
	ibv_ack_async_event(&ev);
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return wc.status == IBV_WC_RETRY_EXC_ERR ? 0 : 1;
}
