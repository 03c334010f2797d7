/* DC objects through rdma-core's own calls, in one process: mlx5dv_query_device's DCI stream
 * caps; a DCT made with mlx5dv_create_qp (no number before RTR, none to query, its number
 * from the modify to RTR); a DCI refused with a receive queue and made without one; one SEND
 * from the DCI to the DCT through mlx5dv_wr_set_dc_addr, completed on both sides (the receive
 * through the DCT's SRQ, its CQE naming the DCT); the same SEND with a wrong access key; every
 * object destroyed. Each step prints one line the test checks; any failure exits 1. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>

#define KEY 0x1122334455667788ULL

static void die(const char *what)
{
	printf("FAILED: %s: %s\n", what, strerror(errno));
	exit(1);
}

static struct ibv_qp *dci(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_cq *cq,
			  int recv_wr)
{
	struct ibv_qp_init_attr_ex a = {
		.qp_type = IBV_QPT_DRIVER,
		.send_cq = cq,
		.recv_cq = cq,
		.pd = pd,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.send_ops_flags = IBV_QP_EX_WITH_SEND,
		.cap = { .max_send_wr = 16, .max_send_sge = 1, .max_recv_wr = recv_wr,
			 .max_recv_sge = recv_wr ? 1 : 0 },
	};
	struct mlx5dv_qp_init_attr dv = {
		.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_DC,
		.dc_init_attr = { .dc_type = MLX5DV_DCTYPE_DCI },
	};
	return mlx5dv_create_qp(ctx, &a, &dv);
}

/* Post one SEND of `len` bytes at `buf` to DCT `dctn` with `key`; the send CQE's status. */
static int send_one(struct ibv_qp *qp, struct ibv_cq *cq, struct ibv_ah *ah, uint32_t dctn,
		    uint64_t key, struct ibv_mr *mr, char *buf, int len)
{
	struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(qp);
	struct mlx5dv_qp_ex *mx = mlx5dv_qp_ex_from_ibv_qp_ex(qx);
	struct ibv_wc wc;
	int n, spins = 0;

	ibv_wr_start(qx);
	qx->wr_id = 7;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(qx);
	mlx5dv_wr_set_dc_addr(mx, ah, dctn, key);
	ibv_wr_set_sge(qx, mr->lkey, (uintptr_t)buf, len);
	if (ibv_wr_complete(qx))
		die("ibv_wr_complete");
	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0 && spins++ < 200000000)
		;
	if (n != 1)
		die("no send completion");
	return wc.status;
}

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx;
	struct mlx5dv_context dvc = { .comp_mask = MLX5DV_CONTEXT_MASK_DCI_STREAMS };
	struct ibv_pd *pd;
	struct ibv_cq *scq, *rcq;
	struct ibv_srq *srq;
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 16, .max_sge = 1 } };
	struct ibv_qp *dct, *qp;
	struct ibv_qp_attr attr, qa;
	struct ibv_qp_init_attr qia;
	struct ibv_port_attr pattr;
	union ibv_gid gid;
	struct ibv_ah *ah;
	struct ibv_mr *mr;
	struct ibv_wc wc;
	static char buf[8192];
	int n, spins = 0, st;

	if (!list || !list[0] || !(ctx = ibv_open_device(list[0])))
		die("ibv_open_device");
	if (mlx5dv_query_device(ctx, &dvc))
		die("mlx5dv_query_device");
	printf("dci streams caps %s concurent %u errored %u\n",
	       (dvc.comp_mask & MLX5DV_CONTEXT_MASK_DCI_STREAMS) ? "reported" : "missing",
	       dvc.dci_streams_caps.max_log_num_concurent,
	       dvc.dci_streams_caps.max_log_num_errored);
	if (!(pd = ibv_alloc_pd(ctx)) || !(scq = ibv_create_cq(ctx, 64, NULL, NULL, 0)) ||
	    !(rcq = ibv_create_cq(ctx, 64, NULL, NULL, 0)) || !(srq = ibv_create_srq(pd, &sa)))
		die("pd, cq, srq");
	mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		die("ibv_reg_mr");

	/* The DCT. */
	{
		struct ibv_qp_init_attr_ex a = {
			.qp_type = IBV_QPT_DRIVER, .send_cq = rcq, .recv_cq = rcq, .srq = srq,
			.pd = pd, .comp_mask = IBV_QP_INIT_ATTR_PD,
		};
		struct mlx5dv_qp_init_attr dv = {
			.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_DC,
			.dc_init_attr = { .dc_type = MLX5DV_DCTYPE_DCT, .dct_access_key = KEY },
		};
		dct = mlx5dv_create_qp(ctx, &a, &dv);
		if (!dct)
			die("mlx5dv_create_qp(DCT)");
	}
	printf("dct qp_num before rtr %u\n", dct->qp_num);
	errno = ibv_query_qp(dct, &qa, IBV_QP_STATE, &qia);
	printf("dct query in reset: %s\n", strerror(errno));
	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_INIT;
	attr.port_num = 1;
	attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
	if (ibv_modify_qp(dct, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					     IBV_QP_ACCESS_FLAGS))
		die("DCT to INIT");
	if (ibv_query_port(ctx, 1, &pattr) || ibv_query_gid(ctx, 1, 0, &gid))
		die("port, gid");
	attr.qp_state = IBV_QPS_RTR;
	attr.path_mtu = pattr.active_mtu;
	attr.min_rnr_timer = 12;
	attr.ah_attr.port_num = 1;
	attr.ah_attr.is_global = 1;
	attr.ah_attr.grh.hop_limit = 1;
	attr.ah_attr.grh.sgid_index = 0;
	if (ibv_modify_qp(dct, &attr, IBV_QP_STATE | IBV_QP_MIN_RNR_TIMER | IBV_QP_AV |
					     IBV_QP_PATH_MTU))
		die("DCT to RTR");
	printf("dct qp_num after rtr %s\n", dct->qp_num ? "set" : "zero");
	if (ibv_query_qp(dct, &qa, IBV_QP_STATE, &qia))
		die("query the DCT in RTR");
	printf("dct state %d\n", qa.qp_state);

	/* The DCI: none with a receive queue. */
	qp = dci(ctx, pd, scq, 1);
	printf("dci with a receive queue: %s\n", qp ? "made" : strerror(errno));
	if (qp)
		return 1;
	if (!(qp = dci(ctx, pd, scq, 0)))
		die("mlx5dv_create_qp(DCI)");
	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_INIT;
	attr.port_num = 1;
	if (ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT))
		die("DCI to INIT");
	attr.qp_state = IBV_QPS_RTR;
	attr.path_mtu = pattr.active_mtu;
	attr.ah_attr.port_num = 1;
	attr.ah_attr.is_global = 1;
	attr.ah_attr.grh.hop_limit = 1;
	attr.ah_attr.grh.dgid = gid;
	if (ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PATH_MTU | IBV_QP_AV))
		die("DCI to RTR");
	attr.qp_state = IBV_QPS_RTS;
	attr.timeout = 14;
	attr.retry_cnt = 7;
	attr.rnr_retry = 7;
	attr.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					    IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
					    IBV_QP_MAX_QP_RD_ATOMIC))
		die("DCI to RTS");

	/* One SEND, DCI -> DCT, received through the SRQ. */
	{
		struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1,
					  .grh = { .dgid = gid, .hop_limit = 1 } };
		struct ibv_sge sge = { .addr = (uintptr_t)(buf + 4096), .length = 4096,
				       .lkey = mr->lkey };
		struct ibv_recv_wr rw = { .wr_id = 9, .sg_list = &sge, .num_sge = 1 }, *bad;

		if (!(ah = ibv_create_ah(pd, &aa)))
			die("ibv_create_ah");
		if (ibv_post_srq_recv(srq, &rw, &bad))
			die("ibv_post_srq_recv");
	}
	strcpy(buf, "hello DCT");
	st = send_one(qp, scq, ah, dct->qp_num, KEY, mr, buf, 10);
	printf("send completion %s\n", ibv_wc_status_str(st));
	while ((n = ibv_poll_cq(rcq, 1, &wc)) == 0 && spins++ < 200000000)
		;
	if (n != 1)
		die("no receive completion");
	printf("receive completion %s wr_id %lu bytes %u on the dct %s: %s\n",
	       ibv_wc_status_str(wc.status), (unsigned long)wc.wr_id, wc.byte_len,
	       wc.qp_num == dct->qp_num ? "yes" : "no", buf + 4096);

	/* A wrong key: the initiator's SEND fails, the DCI falls into Error. */
	st = send_one(qp, scq, ah, dct->qp_num, KEY ^ 1, mr, buf, 10);
	printf("wrong key completion %s\n", ibv_wc_status_str(st));

	if (ibv_destroy_qp(qp) || ibv_destroy_ah(ah))
		die("destroy the DCI");
	errno = ibv_destroy_srq(srq);
	printf("srq destroyed before its dct: %s\n", strerror(errno));
	if (ibv_destroy_qp(dct) || ibv_destroy_srq(srq) || ibv_dereg_mr(mr) ||
	    ibv_destroy_cq(scq) || ibv_destroy_cq(rcq) || ibv_dealloc_pd(pd) ||
	    ibv_close_device(ctx))
		die("teardown");
	ibv_free_device_list(list);
	printf("done\n");
	return 0;
}
