/*
 * Raw uverbs commands on /dev/infiniband/uverbs0, each answer printed as "name errno": what the
 * framing and the refusals of the emulated kernel side answer (tests/it/errno.rs checks them
 * against the kernel's). No libibverbs: the write() ABI of <rdma/ib_user_verbs.h> by hand.
 */
#include <errno.h>
#include <fcntl.h>
#include <rdma/ib_user_verbs.h>
#include <rdma/mlx5-abi.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

static void say(const char *name, long r) {
	printf("%s %d\n", name, r < 0 ? errno : 0);
}

struct get_context {
	struct ib_uverbs_cmd_hdr hdr;
	struct ib_uverbs_get_context core;
	struct mlx5_ib_alloc_ucontext_req_v2 drv;
};

int main(void) {
	int fd = open("/dev/infiniband/uverbs0", O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		perror("open");
		return 1;
	}
	char b[64];
	say("ioctl", ioctl(fd, 0x1b01, b));
	say("read", read(fd, b, sizeof b));
	say("mmap_before_context",
	    (long)(mmap(NULL, 4096, PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED ? -1 : 0));

	struct { struct ib_uverbs_cmd_hdr hdr; struct ib_uverbs_alloc_pd core; } pd = { 0 };
	struct ib_uverbs_alloc_pd_resp pd_resp;
	pd.hdr.command = IB_USER_VERBS_CMD_ALLOC_PD;
	pd.hdr.in_words = sizeof pd / 4;
	pd.hdr.out_words = sizeof pd_resp / 4;
	pd.core.response = (uintptr_t)&pd_resp;
	say("alloc_pd_before_context", write(fd, &pd, sizeof pd));

	struct get_context gc = { 0 };
	struct ib_uverbs_get_context_resp gc_resp[64];
	gc.hdr.command = IB_USER_VERBS_CMD_GET_CONTEXT;
	gc.hdr.in_words = sizeof gc / 4;
	gc.hdr.out_words = sizeof gc_resp / 4;
	gc.core.response = (uintptr_t)gc_resp;
	gc.drv.total_num_bfregs = 16;
	gc.drv.num_low_latency_bfregs = 4;
	gc.drv.max_cqe_version = 1;
	gc.hdr.in_words = sizeof gc / 4 + 1;
	say("get_context_bad_length", write(fd, &gc, sizeof gc));
	gc.hdr.in_words = sizeof gc / 4;
	gc.hdr.command |= 0x100;
	say("get_context_reserved_bits", write(fd, &gc, sizeof gc));
	gc.hdr.command = IB_USER_VERBS_CMD_GET_CONTEXT;
	gc.drv.flags = MLX5_IB_ALLOC_UCTX_DEVX;
	say("get_context_devx", write(fd, &gc, sizeof gc));
	gc.drv.flags = 0;
	gc.drv.comp_mask = 1;
	say("get_context_comp_mask", write(fd, &gc, sizeof gc));
	gc.drv.comp_mask = 0;
	gc.drv.num_low_latency_bfregs = 16;
	say("get_context_too_many_low_latency", write(fd, &gc, sizeof gc));
	gc.drv.num_low_latency_bfregs = 4;
	gc.core.response = 8; /* an address nobody mapped */
	say("get_context_bad_response", write(fd, &gc, sizeof gc));
	gc.core.response = (uintptr_t)gc_resp;
	say("get_context", write(fd, &gc, sizeof gc));
	say("get_context_again", write(fd, &gc, sizeof gc));
	say("mmap_page_0", (long)(mmap(NULL, 4096, PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED ? -1 : 0));
	say("mmap_page_8", (long)(mmap(NULL, 4096, PROT_WRITE, MAP_SHARED, fd, 8 * 4096) == MAP_FAILED ? -1 : 0));
	say("mmap_two_pages", (long)(mmap(NULL, 8192, PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED ? -1 : 0));
	say("mmap_contiguous", (long)(mmap(NULL, 4096, PROT_WRITE, MAP_SHARED, fd, (1 << 8) * 4096) == MAP_FAILED ? -1 : 0));

	pd.hdr.in_words = sizeof pd / 4;
	say("alloc_pd", write(fd, &pd, sizeof pd));
	pd.hdr.out_words = 0;
	say("alloc_pd_no_room", write(fd, &pd, sizeof pd));
	struct { struct ib_uverbs_cmd_hdr hdr; uint32_t handle; } dp = { 0 };
	dp.hdr.command = IB_USER_VERBS_CMD_DEALLOC_PD;
	dp.hdr.in_words = sizeof dp / 4;
	dp.handle = 1234;
	say("dealloc_pd_unknown", write(fd, &dp, sizeof dp));
	dp.handle = pd_resp.pd_handle;
	say("dealloc_pd", write(fd, &dp, sizeof dp));
	dp.hdr.command = IB_USER_VERBS_CMD_POST_SEND;
	say("post_send", write(fd, &dp, sizeof dp));
	dp.hdr.command = 99;
	say("command_99", write(fd, &dp, sizeof dp));
	close(fd);
	return 0;
}
