/*
 * bench_postsend.c - the C reference for provider.BenchmarkPostSend/bf.
 *
 * One 64-byte RDMA WRITE posted by BlueFlame, the way libmlx5's post_send
 * does it, with rdma-core's mlx5dv.h helpers: the ctrl, remote-address and
 * data segments built in an SQ ring in memory, the doorbell record's send
 * counter stored, then the 64-byte WQE copied by 8-byte stores into one of
 * two buffers standing in for the UAR's BlueFlame page (alternating, as
 * the BF offset does), and the write-combining flush (sfence on x86).
 * (mlx5dv.h's helpers: mlx5dv_set_ctrl_seg, mlx5dv_set_data_seg; the
 * remote-address segment has none there and is stored field by field.)
 * There is no device: like the Go benchmark, only the post is measured.
 *
 * Build: gcc -O2 -o bench_postsend bench_postsend.c   (needs libibverbs-dev
 * for <infiniband/mlx5dv.h>; nothing is linked from it.)
 * Run:   ./bench_postsend [iterations]
 * Prints one line in Go benchmark format: BenchmarkCPostSend/bf N x ns/op.
 */
#include <infiniband/mlx5dv.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define SQ_WQEBBS 64 /* a power of two */

static uint8_t sq[SQ_WQEBBS * MLX5_SEND_WQE_BB] __attribute__((aligned(64)));
static uint64_t bf_page[2][8] __attribute__((aligned(64)));
static uint32_t dbrec[2];

/* x86: mmio_flush_writes() is sfence; elsewhere a full barrier. */
static inline void wc_flush(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__asm__ volatile("sfence" ::: "memory");
#else
	__sync_synchronize();
#endif
}

static inline void compiler_barrier(void) { __asm__ volatile("" ::: "memory"); }

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 100000000L;
	const uint32_t qpn = 0x100, lkey = 0x136, rkey = 7;
	const uint64_t laddr = 0x7f0000011000ULL, raddr = 0x1000;
	uint16_t pi = 0;
	unsigned bf = 0;
	struct timespec t0, t1;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (long i = 0; i < n; i++) {
		uint8_t *wqe = sq + (pi & (SQ_WQEBBS - 1)) * MLX5_SEND_WQE_BB;
		struct mlx5_wqe_ctrl_seg *ctrl = (void *)wqe;
		struct mlx5_wqe_raddr_seg *rseg = (void *)(ctrl + 1);
		struct mlx5_wqe_data_seg *dseg = (void *)(rseg + 1);

		mlx5dv_set_ctrl_seg(ctrl, pi, MLX5_OPCODE_RDMA_WRITE, 0, qpn,
				    MLX5_WQE_CTRL_CQ_UPDATE, 3, 0, 0);
		/* mlx5dv.h has no helper for the remote-address segment
		 * (libmlx5 fills it inline, set_raddr_seg): the same stores. */
		rseg->raddr = htobe64(raddr);
		rseg->rkey = htobe32(rkey);
		rseg->reserved = 0;
		mlx5dv_set_data_seg(dseg, 64, lkey, laddr);
		pi++;

		compiler_barrier(); /* udma_to_device_barrier() on x86 */
		dbrec[MLX5_SND_DBR] = htobe32(pi);

		compiler_barrier(); /* mmio_wc_start() on x86 */
		volatile uint64_t *dst = bf_page[bf];
		const uint64_t *src = (const uint64_t *)wqe;
		for (int k = 0; k < 8; k++)
			dst[k] = src[k];
		wc_flush();
		bf ^= 1;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double ns = (t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec);
	printf("BenchmarkCPostSend/bf\t%ld\t%.2f ns/op\n", n, ns / n);
	/* keep the stores observable */
	return (int)(dbrec[MLX5_SND_DBR] & bf_page[0][0] & 0);
}
