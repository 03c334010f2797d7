/*
 * A verbs program that unmaps memory it registered before deregistering it, as a program may:
 * the kernel pins a region's pages (ib_umem_get), so the adapter still reads and writes them
 * after munmap, and a new mapping at the same addresses is not what the region holds. The
 * program registers four pages ("A", "B", "C", "D"), unmaps the middle two, maps other memory
 * ("Z") over them with MAP_FIXED, RDMA WRITEs into the unmapped part and RDMA READs across it
 * (through an RC QP connected to itself), unmaps the rest, RDMA WRITEs the whole region out as
 * a source, and deregisters it. Built and run by the mlx5-sim-uverbs tests
 * (tests/it/unmapped_memory.rs). Exit 0 when every completion succeeded and every byte is the
 * region's.
 */
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define PAGES 4

static struct ibv_qp *qp;
static struct ibv_cq *cq;

static int fail(const char *what) {
	perror(what);
	return 1;
}

/* Post one RDMA WRITE or READ and wait for its completion. */
static int rdma(enum ibv_wr_opcode op, void *laddr, uint32_t len, uint32_t lkey,
		uint64_t raddr, uint32_t rkey, const char *what) {
	struct ibv_sge sge = { .addr = (uintptr_t)laddr, .length = len, .lkey = lkey };
	struct ibv_send_wr wr = {
		.sg_list = &sge, .num_sge = 1, .opcode = op, .send_flags = IBV_SEND_SIGNALED,
		.wr.rdma = { .remote_addr = raddr, .rkey = rkey },
	}, *bad;
	if (ibv_post_send(qp, &wr, &bad))
		return fail(what);
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
			fprintf(stderr, "%s: no completion\n", what);
			return 1;
		}
	}
	if (wc.status != IBV_WC_SUCCESS) {
		fprintf(stderr, "%s: %s\n", what, ibv_wc_status_str(wc.status));
		return 1;
	}
	printf("%s: ok\n", what);
	return 0;
}

/* The region's byte at offset i: page k holds 'A' + k, with "W" written at page 1 + 10..110. */
static uint8_t expected(size_t i, size_t page) {
	if (i >= page + 10 && i < page + 110)
		return 'W';
	return 'A' + i / page;
}

static int check(const uint8_t *got, size_t from, size_t len, size_t page, const char *what) {
	for (size_t i = 0; i < len; i++)
		if (got[i] != expected(from + i, page)) {
			fprintf(stderr, "%s: byte %zu is '%c', not '%c'\n", what, from + i, got[i],
				expected(from + i, page));
			return 1;
		}
	printf("%s: every byte the region's\n", what);
	return 0;
}

int main(void) {
	size_t page = (size_t)sysconf(_SC_PAGESIZE), size = PAGES * page;
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n < 1)
		return fail("no device");
	struct ibv_context *ctx = ibv_open_device(list[0]);
	if (!ctx)
		return fail("ibv_open_device");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	uint8_t *region = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint8_t *buf = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (!pd || region == MAP_FAILED || buf == MAP_FAILED)
		return fail("pd/mmap");
	for (int k = 0; k < PAGES; k++)
		memset(region + k * page, 'A' + k, page);
	int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	struct ibv_mr *rmr = ibv_reg_mr(pd, region, size, access);
	struct ibv_mr *bmr = ibv_reg_mr(pd, buf, size, access);
	cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!rmr || !bmr || !cq)
		return fail("mr/cq");
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 16, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	qp = ibv_create_qp(pd, &ia);
	if (!qp)
		return fail("ibv_create_qp");
	union ibv_gid gid;
	if (ibv_query_gid(ctx, 1, 0, &gid))
		return fail("ibv_query_gid");
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			  IBV_QP_ACCESS_FLAGS))
		return fail("INIT");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = qp->qp_num; /* itself */
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
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		return fail("RTS");

	/* The middle pages unmapped, other memory mapped at their addresses. */
	if (munmap(region + page, 2 * page))
		return fail("munmap of the middle pages");
	uint8_t *z = mmap(region + page, 2 * page, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	if (z != region + page)
		return fail("mmap MAP_FIXED over them");
	memset(z, 'Z', 2 * page);

	/* The device writes into the region's page, not into the new mapping. */
	memset(buf, 'W', 100);
	if (rdma(IBV_WR_RDMA_WRITE, buf, 100, bmr->lkey, (uintptr_t)(region + page + 10),
		 rmr->rkey, "RDMA WRITE into an unmapped page"))
		return 1;
	/* And reads across kept and moved pages. */
	memset(buf, 0, size);
	if (rdma(IBV_WR_RDMA_READ, buf, 3 * page, bmr->lkey, (uintptr_t)(region + page / 2),
		 rmr->rkey, "RDMA READ across the unmapped pages"))
		return 1;
	if (check(buf, page / 2, 3 * page, page, "the READ"))
		return 1;
	for (size_t i = 0; i < 2 * page; i++)
		if (z[i] != 'Z') {
			fprintf(stderr, "the new mapping was written at %zu\n", i);
			return 1;
		}
	printf("the new mapping is untouched\n");

	/* Everything unmapped: the region as the source of an RDMA WRITE. */
	if (munmap(region, size))
		return fail("munmap of the region");
	memset(buf, 0, size);
	if (rdma(IBV_WR_RDMA_WRITE, region, size, rmr->lkey, (uintptr_t)buf, bmr->rkey,
		 "RDMA WRITE from the unmapped region"))
		return 1;
	if (check(buf, 0, size, page, "the WRITE"))
		return 1;

	if (ibv_destroy_qp(qp) || ibv_dereg_mr(rmr) || ibv_dereg_mr(bmr) ||
	    ibv_destroy_cq(cq) || ibv_dealloc_pd(pd) || ibv_close_device(ctx))
		return fail("teardown");
	ibv_free_device_list(list);
	printf("deregistered\n");
	return 0;
}
