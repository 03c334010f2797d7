/*
 * The program benches/emulated-instructions.sh runs under valgrind --tool=callgrind to count
 * libmlx5's two ways of posting a send: the extended API (ibv_wr_start, ibv_wr_rdma_write,
 * ibv_wr_set_inline_data, ibv_wr_complete on a QP created with ibv_create_qp_ex and
 * IBV_QP_EX_WITH_RDMA_WRITE; man ibv_wr_post) and ibv_post_send, for the same WR: an inline
 * 8-byte RDMA WRITE, signaled, from one RC QP to another of the same device (RoCE, GID 0 of
 * port 1). Each post goes through one noinline function (measured_wr, measured_post_send) that
 * the script names to callgrind's --toggle-collect; the polls between posts are not counted.
 *
 * Usage: wr_post N wr|post_send        (the device: MLX5_DEVICE, default mlx5_0)
 * Exit 0 after N accepted posts whose N completions were successful and in order; else 1
 * with the reason on stderr.
 *
 * Build: cc -O2 -o wr_post benches/wr_post.c -libverbs
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <time.h>
#include <infiniband/verbs.h>

static const char PAYLOAD[8] = "8 bytes!";

static int fail(const char *what, int err)
{
	fprintf(stderr, "wr_post: %s failed: %s\n", what, strerror(err));
	return 1;
}

/* One post through the extended API: the whole WR in four calls into libmlx5. */
__attribute__((noinline)) int measured_wr(struct ibv_qp_ex *qpx, uint64_t wr_id,
					  uint32_t rkey, uint64_t addr)
{
	ibv_wr_start(qpx);
	qpx->wr_id = wr_id;
	qpx->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	ibv_wr_rdma_write(qpx, rkey, addr);
	ibv_wr_set_inline_data(qpx, (void *)PAYLOAD, sizeof(PAYLOAD));
	return ibv_wr_complete(qpx);
}

/* One post through ibv_post_send, the WR built by the caller as a user builds it. */
__attribute__((noinline)) int measured_post_send(struct ibv_qp *qp, uint64_t wr_id,
						 uint32_t rkey, uint64_t addr)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)PAYLOAD, .length = sizeof(PAYLOAD), .lkey = 0};
	struct ibv_send_wr wr = {
		.wr_id = wr_id,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_RDMA_WRITE,
		.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE,
		.wr.rdma = {.remote_addr = addr, .rkey = rkey},
	};
	struct ibv_send_wr *bad;
	return ibv_post_send(qp, &wr, &bad);
}

static int to_rts(struct ibv_qp *qp, uint32_t dest_qpn, const union ibv_gid *gid)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
				.qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
	int r = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					  IBV_QP_ACCESS_FLAGS);
	if (r)
		return fail("modify to INIT", r);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest_qpn;
	a.rq_psn = 0;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *gid;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	r = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
				  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
	if (r)
		return fail("modify to RTR", r);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = 0;
	a.max_rd_atomic = 1;
	r = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
	if (r)
		return fail("modify to RTS", r);
	return 0;
}

/* Poll until the completion of wr_id arrives (at most 60 s: valgrind runs one thread at a
 * time, the device's among them): it must be the next one. */
static int wait_completion(struct ibv_cq *cq, uint64_t wr_id)
{
	struct ibv_wc wc;
	struct timespec start, now;
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		int n = ibv_poll_cq(cq, 1, &wc);
		if (n < 0)
			return fail("ibv_poll_cq", EIO);
		if (n == 1) {
			if (wc.status != IBV_WC_SUCCESS || wc.wr_id != wr_id) {
				fprintf(stderr, "wr_post: WR %llu: got WR %llu, %s\n",
					(unsigned long long)wr_id, (unsigned long long)wc.wr_id,
					ibv_wc_status_str(wc.status));
				return 1;
			}
			return 0;
		}
		/* Let the device's threads run (under valgrind, one thread runs at a time). */
		sched_yield();
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec - start.tv_sec > 60) {
			fprintf(stderr, "wr_post: no completion of WR %llu in 60 s\n",
				(unsigned long long)wr_id);
			return 1;
		}
	}
}

int main(int argc, char **argv)
{
	if (argc != 3 || (strcmp(argv[2], "wr") && strcmp(argv[2], "post_send"))) {
		fprintf(stderr, "usage: wr_post N wr|post_send\n");
		return 2;
	}
	char *end;
	long n = strtol(argv[1], &end, 10);
	if (*end || n <= 0 || n > 100000000) {
		fprintf(stderr, "wr_post: N is a positive integer, got '%s'\n", argv[1]);
		return 2;
	}
	int use_wr = !strcmp(argv[2], "wr");
	const char *name = getenv("MLX5_DEVICE") ? getenv("MLX5_DEVICE") : "mlx5_0";

	int num;
	struct ibv_device **list = ibv_get_device_list(&num);
	struct ibv_device *dev = NULL;
	for (int i = 0; list && i < num; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			dev = list[i];
	if (!dev) {
		fprintf(stderr, "wr_post: no device %s\n", name);
		return 1;
	}
	struct ibv_context *ctx = ibv_open_device(dev);
	if (!ctx)
		return fail("ibv_open_device", errno);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	if (!pd)
		return fail("ibv_alloc_pd", errno);
	static char buf[4096];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf),
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!mr)
		return fail("ibv_reg_mr", errno);
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	if (!cq)
		return fail("ibv_create_cq", errno);
	union ibv_gid gid;
	int r = ibv_query_gid(ctx, 1, 0, &gid);
	if (r)
		return fail("ibv_query_gid", r);

	struct ibv_qp *qp[2];
	for (int i = 0; i < 2; i++) {
		struct ibv_qp_init_attr_ex a = {
			.send_cq = cq,
			.recv_cq = cq,
			.cap = {.max_send_wr = 64, .max_recv_wr = 1, .max_send_sge = 1,
				.max_recv_sge = 1, .max_inline_data = 64},
			.qp_type = IBV_QPT_RC,
			.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
			.pd = pd,
			.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE,
		};
		qp[i] = ibv_create_qp_ex(ctx, &a);
		if (!qp[i])
			return fail("ibv_create_qp_ex", errno);
	}
	if (to_rts(qp[0], qp[1]->qp_num, &gid) || to_rts(qp[1], qp[0]->qp_num, &gid))
		return 1;
	struct ibv_qp_ex *qpx = ibv_qp_to_qp_ex(qp[0]);
	if (!qpx)
		return fail("ibv_qp_to_qp_ex", EINVAL);

	for (long i = 0; i < n; i++) {
		r = use_wr ? measured_wr(qpx, i, mr->rkey, (uintptr_t)buf)
			   : measured_post_send(qp[0], i, mr->rkey, (uintptr_t)buf);
		if (r)
			return fail(use_wr ? "ibv_wr_complete" : "ibv_post_send", r);
		if (wait_completion(cq, i))
			return 1;
	}
	if (memcmp(buf, PAYLOAD, sizeof(PAYLOAD))) {
		fprintf(stderr, "wr_post: the WRITEs did not land\n");
		return 1;
	}
	printf("%ld posts (%s), every completion successful and in order\n", n,
	       use_wr ? "ibv_wr_*" : "ibv_post_send");
	ibv_destroy_qp(qp[0]);
	ibv_destroy_qp(qp[1]);
	ibv_destroy_cq(cq);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}
