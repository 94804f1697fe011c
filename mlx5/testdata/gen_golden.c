/*
 * gen_golden.c: golden mlx5 host-format vectors from rdma-core's mlx5dv.h.
 *
 * Independent generator for softnic's mlx5 package tests (DESIGN.md §6). It
 * uses only the header-only parts of <infiniband/mlx5dv.h> (Debian
 * libibverbs-dev): the struct layouts, the enums, and the inline helpers
 * mlx5dv_set_ctrl_seg, mlx5dv_set_data_seg, mlx5dv_set_dgram_seg and the
 * CQE accessors mlx5dv_get_cqe_{owner,se,format,opcode}. Nothing is linked.
 * Segments mlx5dv.h has no helper for (raddr, atomic, inline) are filled
 * the way libmlx5's qp.c fills them (set_raddr_seg, set_atomic_seg,
 * set_data_ptr_seg_atomic, set_data_inl_seg): big-endian fields.
 *
 * Output (stdout), one record per line, '#' lines are comments:
 *   wqe   <name> <hex>                      a whole WQE (or a lone ctrl seg)
 *   srq   <name> <hex>                      one SRQ receive WQE (next seg + data)
 *   cqe   <name> <hex> owner=N opcode=N se=N format=N   a 64-byte CQE and
 *                                           what rdma-core's accessors read
 *   db    <name> <hex>                      doorbell record / CQ arm bytes
 *   off   <struct>.<field> <offset> <size>  offsetof / sizeof(field)
 *   size  <struct> <size>                   sizeof(struct)
 *   const <NAME> <value>                    an enum value (decimal)
 *
 * The UD WQEs named ud_send_ah* carry an address vector built field by field
 * as libmlx5's mlx5_create_ah builds one for a RoCEv2 GID (UDP source port
 * from ibv_flow_label_to_udp_sport, a header-only helper of <infiniband/verbs.h>),
 * copied into the datagram segment as set_datagram_seg does. The SRQ WQEs
 * are filled as mlx5_post_srq_recv fills the WQE at the head of the free
 * list that mlx5_alloc_srq_buf linked.
 *
 * The inputs of every vector are repeated in mlx5/golden_test.go, and those
 * of the send WQEs and SRQ WQEs the provider builds (through PostSend and
 * SRQ.PostRecv) in provider/golden_test.go; keep them in step. Regenerate
 * with gen_golden.sh.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <endian.h>
#include <infiniband/mlx5dv.h>

static void hexline(const char *kind, const char *name, const void *p, size_t n)
{
	const uint8_t *b = p;
	printf("%s %s ", kind, name);
	for (size_t i = 0; i < n; i++)
		printf("%02x", b[i]);
}

/* ---- WQE building blocks (each fills one 16-byte unit or more) ---- */

/* The helper leaves dci_stream_channel_id alone; libmlx5 zeroes dword 2. */
static void *ctrl(uint8_t *w, uint16_t pi, uint8_t opcode, uint8_t opmod, uint32_t qpn,
		  uint8_t fm_ce_se, uint8_t ds, uint8_t sig, uint32_t imm_host)
{
	struct mlx5_wqe_ctrl_seg *c = (void *)w;
	memset(c, 0, sizeof(*c));
	/* imm is passed pre-swapped, as libmlx5 does with ibv_send_wr.imm_data. */
	mlx5dv_set_ctrl_seg(c, pi, opcode, opmod, qpn, fm_ce_se, ds, sig, htobe32(imm_host));
	return w + sizeof(*c);
}

static void *raddr(uint8_t *w, uint64_t va, uint32_t rkey)
{
	struct mlx5_wqe_raddr_seg *r = (void *)w;
	r->raddr = htobe64(va);
	r->rkey = htobe32(rkey);
	r->reserved = 0;
	return w + sizeof(*r);
}

static void *data(uint8_t *w, uint32_t len, uint32_t lkey, uint64_t addr)
{
	mlx5dv_set_data_seg((struct mlx5_wqe_data_seg *)w, len, lkey, (uintptr_t)addr);
	return w + sizeof(struct mlx5_wqe_data_seg);
}

/*
 * Atomic segment as libmlx5's set_atomic_seg fills it from ibv_send_wr's
 * wr.atomic.swap and wr.atomic.compare_add: compare-and-swap stores both,
 * fetch-and-add only the add value (in swap_add) and leaves compare as the
 * ring had it: 0 here, as every WQE below is built in a zeroed buffer.
 */
static void *atomic(uint8_t *w, uint8_t opcode, uint64_t swap, uint64_t compare_add)
{
	struct mlx5_wqe_atomic_seg *a = (void *)w;
	if (opcode == MLX5_OPCODE_ATOMIC_CS) {
		a->swap_add = htobe64(swap);
		a->compare = htobe64(compare_add);
	} else {
		a->swap_add = htobe64(compare_add);
	}
	return w + sizeof(*a);
}

/*
 * libmlx5's MLX5_ATOMIC_SIZE (providers/mlx5/qp.c, not in mlx5dv.h): the
 * result buffer's data segment always says 8 bytes, whatever the SGE's
 * length is (set_data_ptr_seg_atomic).
 */
#define ATOMIC_SIZE 8

static void *data_atomic(uint8_t *w, uint32_t sge_len, uint32_t lkey, uint64_t addr)
{
	(void)sge_len;
	return data(w, ATOMIC_SIZE, lkey, addr);
}

/* Inline segment: header, payload, zero padding to a 16-byte multiple. */
static void *inl(uint8_t *w, const uint8_t *p, uint32_t n)
{
	struct mlx5_wqe_inl_data_seg *s = (void *)w;
	size_t total = (sizeof(*s) + n + 15) & ~(size_t)15;
	memset(w, 0, total);
	s->byte_count = htobe32(n | MLX5_INLINE_SEG);
	memcpy(w + sizeof(*s), p, n);
	return w + total;
}

/*
 * Address vector as mlx5_create_ah fills it for a RoCE port and a RoCEv2
 * GID (is_global set, as RoCE requires): rlid = UDP source port (from the
 * flow label; libmlx5 picks a random port when the flow label is 0, which
 * no vector here uses), stat_rate_sl = static rate 0 | (sl & 7) << 1, GRH
 * bit 30 clear, tclass, hop_limit, sgid index and flow label, rgid, and the
 * destination MAC the kernel resolved. Everything else stays 0 (calloc).
 */
static void roce_v2_av(struct mlx5_wqe_av *av, const uint8_t dgid[16], const uint8_t dmac[6], uint8_t sgid_index,
		       uint8_t tclass, uint8_t hop_limit, uint32_t flow_label, uint8_t sl)
{
	memset(av, 0, sizeof(*av));
	av->rlid = htobe16(ibv_flow_label_to_udp_sport(flow_label & IB_GRH_FLOWLABEL_MASK));
	av->stat_rate_sl = (uint8_t)((sl & 0x7) << 1);
	av->tclass = tclass;
	av->hop_limit = hop_limit;
	av->grh_gid_fl = htobe32((0u << 30) | ((uint32_t)sgid_index << 20) | (flow_label & IB_GRH_FLOWLABEL_MASK));
	memcpy(av->rgid, dgid, 16);
	memcpy(av->rmac, dmac, 6);
}

/* set_datagram_seg: copy the AH's AV, then destination QPN and Q_Key. */
static void *dgram(uint8_t *w, const struct mlx5_wqe_av *av, uint32_t remote_qpn, uint32_t remote_qkey)
{
	struct mlx5_wqe_datagram_seg *d = (void *)w;
	memcpy(&d->av, av, sizeof(d->av));
	d->av.dqp_dct = htobe32(remote_qpn | MLX5_EXTENDED_UD_AV);
	d->av.key.qkey.qkey = htobe32(remote_qkey);
	return w + sizeof(*d);
}

#define WQE_BUF 1024

/*
 * Print a WQE, then zero the buffer: every WQE is built in a fresh (zeroed)
 * ring, so bytes a helper does not write (FA's compare, the datagram
 * segment's reserved dword) are 0, as in a newly created QP.
 */
static void wqe(const char *name, uint8_t *start, const uint8_t *end)
{
	hexline("wqe", name, start, (size_t)(end - start));
	printf("\n");
	memset(start, 0, WQE_BUF);
}

static void wqes(void)
{
	uint8_t b[WQE_BUF] = {0};
	uint8_t *p;

	/* RDMA WRITE, one SGE, signalled. */
	p = ctrl(b, 0x0001, MLX5_OPCODE_RDMA_WRITE, 0, 0x000123, MLX5_WQE_CTRL_CQ_UPDATE, 3, 0, 0);
	p = raddr(p, 0x00007f0012345678ull, 0xabcdef01);
	p = data(p, 4096, 0x00001234, 0x00007f00deadbeefull);
	wqe("write_1sge", b, p);

	/* RDMA WRITE with immediate, solicited. */
	p = ctrl(b, 0x0002, MLX5_OPCODE_RDMA_WRITE_IMM, 0, 0x000123,
		 MLX5_WQE_CTRL_CQ_UPDATE | MLX5_WQE_CTRL_SOLICITED, 3, 0, 0xdeadbeef);
	p = raddr(p, 0x1000, 0x00000200);
	p = data(p, 64, 0x00000300, 0x2000);
	wqe("write_imm", b, p);

	/* SEND, one SGE. */
	p = ctrl(b, 0x0010, MLX5_OPCODE_SEND, 0, 0x000042, MLX5_WQE_CTRL_CQ_UPDATE, 2, 0, 0);
	p = data(p, 256, 0x00001100, 0x10000);
	wqe("send", b, p);

	/* SEND with invalidate, one SGE: imm carries the rkey to invalidate
	 * (libmlx5 send_ieth: htobe32(wr->invalidate_rkey)). */
	p = ctrl(b, 0x0014, MLX5_OPCODE_SEND_INVAL, 0, 0x000042, MLX5_WQE_CTRL_CQ_UPDATE, 2, 0, 0x00c0ffee);
	p = data(p, 512, 0x00001100, 0x10400);
	wqe("send_inval", b, p);

	/* SEND with immediate, 15 bytes inline (4+15 -> 32 B, 2 DS). */
	static const uint8_t msg[] = "softnic inline!";
	p = ctrl(b, 0x0011, MLX5_OPCODE_SEND_IMM, 0, 0x000042, MLX5_WQE_CTRL_CQ_UPDATE, 3, 0, 0x01020304);
	p = inl(p, msg, 15);
	wqe("send_imm_inline", b, p);

	/* SEND, 12 bytes inline: header + payload fill one DS exactly. */
	static const uint8_t twelve[12] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
	p = ctrl(b, 0x0012, MLX5_OPCODE_SEND, 0, 0x000042, MLX5_WQE_CTRL_CQ_UPDATE, 2, 0, 0);
	p = inl(p, twelve, 12);
	wqe("send_inline_12", b, p);

	/* SEND, 200 bytes inline: a multi-WQEBB WQE (DS 14, 4 WQEBBs). */
	uint8_t big[200];
	for (int i = 0; i < 200; i++)
		big[i] = (uint8_t)(i * 7 + 3);
	p = ctrl(b, 0x0013, MLX5_OPCODE_SEND, 0, 0x000042, 0, 14, 0, 0);
	p = inl(p, big, 200);
	wqe("send_inline_200", b, p);

	/* RDMA READ. */
	p = ctrl(b, 0x0100, MLX5_OPCODE_RDMA_READ, 0, 0x000777, MLX5_WQE_CTRL_CQ_UPDATE, 3, 0, 0);
	p = raddr(p, 0xffffffffffff0000ull, 0x12345678);
	p = data(p, 8192, 0x00abcd00, 0x0000100000000000ull);
	wqe("read", b, p);

	/* SEND, three SGEs, unsignalled. */
	p = ctrl(b, 0x0200, MLX5_OPCODE_SEND, 0, 0x000042, 0, 4, 0, 0);
	p = data(p, 100, 0x10, 0x1000);
	p = data(p, 200, 0x20, 0x2000);
	p = data(p, 300, 0x30, 0x3000);
	wqe("send_3sge", b, p);

	/* wqe_index at the top of the 16-bit counter. */
	p = ctrl(b, 0xfffe, MLX5_OPCODE_RDMA_WRITE, 0, 0x000123, MLX5_WQE_CTRL_CQ_UPDATE, 3, 0, 0);
	p = raddr(p, 0x4000, 0x44);
	p = data(p, 1, 0x45, 0x5000);
	wqe("write_pi_fffe", b, p);
	p = ctrl(b, 0xffff, MLX5_OPCODE_SEND, 0, 0x000123, MLX5_WQE_CTRL_CQ_UPDATE, 2, 0, 0);
	p = data(p, 2, 0x46, 0x5001);
	wqe("send_pi_ffff", b, p);

	/* Largest QPN. */
	p = ctrl(b, 0x0003, MLX5_OPCODE_RDMA_WRITE, 0, 0xffffff, MLX5_WQE_CTRL_CQ_UPDATE, 3, 0, 0);
	p = raddr(p, 0x00000000ffffffffull, 0xffffffff);
	p = data(p, 0x7fffffff, 0xfffffeff, 0xfffffffffffffff0ull);
	wqe("write_qpn_ffffff", b, p);

	/*
	 * Atomics (RC): ctrl, raddr (wr.atomic.remote_addr / rkey), atomic
	 * segment, one data segment per non-empty SGE. Compare-and-swap with
	 * swap 0x1111222233334444 and compare_add 0x5555666677778888, fenced
	 * (FENCE = small-and-fence, 0x80).
	 */
	p = ctrl(b, 0x0005, MLX5_OPCODE_ATOMIC_CS, 0, 0x000123,
		 MLX5_WQE_CTRL_FENCE | MLX5_WQE_CTRL_CQ_UPDATE, 4, 0, 0);
	p = raddr(p, 0x8000, 0x55);
	p = atomic(p, MLX5_OPCODE_ATOMIC_CS, 0x1111222233334444ull, 0x5555666677778888ull);
	p = data_atomic(p, 8, 0x66, 0x9000);
	wqe("atomic_cs", b, p);

	/* Fetch-and-add of compare_add 1 (swap unused). */
	p = ctrl(b, 0x0006, MLX5_OPCODE_ATOMIC_FA, 0, 0x000123, MLX5_WQE_CTRL_CQ_UPDATE, 4, 0, 0);
	p = raddr(p, 0x8008, 0x55);
	p = atomic(p, MLX5_OPCODE_ATOMIC_FA, 0, 1);
	p = data_atomic(p, 8, 0x66, 0x9008);
	wqe("atomic_fa", b, p);

	/*
	 * Fetch-and-add of 2^64-1 (i.e. minus one), solicited, whose result
	 * SGE says 16 bytes: the data segment still says 8.
	 */
	p = ctrl(b, 0x0008, MLX5_OPCODE_ATOMIC_FA, 0, 0x000123,
		 MLX5_WQE_CTRL_CQ_UPDATE | MLX5_WQE_CTRL_SOLICITED, 4, 0, 0);
	p = raddr(p, 0x00007f0000001ff8ull, 0xabcdef01);
	p = atomic(p, MLX5_OPCODE_ATOMIC_FA, 0x0123456789abcdefull, 0xffffffffffffffffull);
	p = data_atomic(p, 16, 0x00001234, 0x00007f00deadbee0ull);
	wqe("atomic_fa_sge16", b, p);

	/* UD SEND: ctrl, datagram segment (extended AV, RoCEv2), one SGE. */
	static uint8_t rmac[6] = {0x02, 0, 0, 0, 0, 0x02};
	static uint8_t rgid[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2};
	p = ctrl(b, 0x0007, MLX5_OPCODE_SEND, 0, 0x000099, MLX5_WQE_CTRL_CQ_UPDATE, 5, 0, 0);
	/* Q_Key in the first dword, reserved dword 0 (libmlx5 UD layout). */
	mlx5dv_set_dgram_seg((struct mlx5_wqe_datagram_seg *)p, (uint64_t)0x11111111 << 32, 0x000abc,
			     1, 0x06, 0, 0xc123, rmac, 0x10, 64, (1u << 20) | 0x12345, rgid);
	p += sizeof(struct mlx5_wqe_datagram_seg);
	p = data(p, 512, 0x77, 0xa000);
	wqe("ud_send", b, p);

	/*
	 * UD SENDs through an address handle (AV as mlx5_create_ah builds it
	 * for RoCEv2 over IPv4, ::ffff:10.0.0.2 behind 02:00:00:00:00:02).
	 * One SGE, signalled; sgid index 1, tclass 0x10, hop limit 64, flow
	 * label 0x12345.
	 */
	static const uint8_t dgid[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2};
	static const uint8_t dmac[6] = {0x02, 0, 0, 0, 0, 0x02};
	struct mlx5_wqe_av av;
	roce_v2_av(&av, dgid, dmac, 1, 0x10, 64, 0x12345, 0);
	p = ctrl(b, 0x0009, MLX5_OPCODE_SEND, 0, 0x000099, MLX5_WQE_CTRL_CQ_UPDATE, 5, 0, 0);
	p = dgram(p, &av, 0x000abc, 0x11111111);
	p = data(p, 512, 0x77, 0xa000);
	wqe("ud_send_ah", b, p);

	/*
	 * UD SEND with immediate, 15 bytes inline, to the largest QPN with the
	 * largest Q_Key whose bit 31 is clear; sgid index 0, tclass 0, hop
	 * limit 1, the largest flow label.
	 */
	roce_v2_av(&av, dgid, dmac, 0, 0, 1, 0xfffff, 0);
	p = ctrl(b, 0x000a, MLX5_OPCODE_SEND_IMM, 0, 0x000099, MLX5_WQE_CTRL_CQ_UPDATE, 6, 0, 0xcafef00d);
	p = dgram(p, &av, 0xffffff, 0x7fffffff);
	p = inl(p, msg, 15);
	wqe("ud_send_ah_imm_inline", b, p);

	/* UD SEND, fenced and solicited, unsignalled, two SGEs; flow label 1. */
	roce_v2_av(&av, dgid, dmac, 1, 0xb8, 255, 1, 0);
	p = ctrl(b, 0x000b, MLX5_OPCODE_SEND, 0, 0x000099, MLX5_WQE_CTRL_FENCE | MLX5_WQE_CTRL_SOLICITED, 6, 0, 0);
	p = dgram(p, &av, 0x000001, 0x00000001);
	p = data(p, 100, 0x77, 0xb000);
	p = data(p, 1000, 0x78, 0xc000);
	wqe("ud_send_ah_2sge_fence_se", b, p);

	/* Lone control segments: field extremes and fm_ce_se combinations. */
	p = ctrl(b, 0x1234, MLX5_OPCODE_SEND, 0, 0x000001, 0x0c, 63, 0, 0);
	wqe("ctrl_ds63", b, p);
	p = ctrl(b, 0x0020, MLX5_OPCODE_SEND, 0, 0x000001,
		 MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE | MLX5_WQE_CTRL_CQ_UPDATE, 2, 0, 0);
	wqe("ctrl_small_fence", b, p);
	p = ctrl(b, 0x0021, MLX5_OPCODE_SEND, 0, 0x000001,
		 MLX5_WQE_CTRL_FENCE | MLX5_WQE_CTRL_CQ_UPDATE | MLX5_WQE_CTRL_SOLICITED, 2, 0, 0);
	wqe("ctrl_fence_ce_se", b, p);
	p = ctrl(b, 0x0022, MLX5_OPCODE_SEND, 0, 0x000001, 0x60 | 0x0c, 2, 0, 0);
	wqe("ctrl_strong_order_cqe_eqe", b, p);
	p = ctrl(b, 0x0023, MLX5_OPCODE_SEND, 0, 0x000001, 0x40 | 0x04, 2, 0, 0);
	wqe("ctrl_fence_first_err", b, p);
	p = ctrl(b, 0x0024, MLX5_OPCODE_ATOMIC_MASKED_CS, 0x09, 0x000001, MLX5_WQE_CTRL_CQ_UPDATE, 6, 0xa5, 0);
	wqe("ctrl_opmod_signature", b, p);
	/* SEND with invalidate: imm carries the rkey, big-endian. */
	p = ctrl(b, 0x0025, MLX5_OPCODE_SEND_INVAL, 0, 0x000001, MLX5_WQE_CTRL_CQ_UPDATE, 2, 0, 0x00c0ffee);
	wqe("ctrl_send_inval", b, p);
}

/* ---- SRQ receive WQEs ---- */

/*
 * mlx5_post_srq_recv fills the WQE at the free list's head: every SGE as
 * given (zero-length ones too), then, if not all max_gs data segments are
 * used, a terminator (byte_count 0, MLX5_INVALID_LKEY, addr 0). The next
 * segment keeps the next_wqe_index mlx5_alloc_srq_buf (set_srq_buf_ll)
 * linked; signature 0.
 */
static void srq_wqe(const char *name, uint16_t next, int max_gs, const struct ibv_sge *sg, int n)
{
	uint8_t b[16 + 16 * 8];
	struct mlx5_wqe_srq_next_seg *nseg = (void *)b;
	struct mlx5_wqe_data_seg *scat = (void *)(nseg + 1);
	int i;

	memset(b, 0, sizeof(b));
	nseg->next_wqe_index = htobe16(next);
	for (i = 0; i < n; i++)
		mlx5dv_set_data_seg(scat + i, sg[i].length, sg[i].lkey, (uintptr_t)sg[i].addr);
	if (i < max_gs) {
		scat[i].byte_count = 0;
		scat[i].lkey = htobe32(MLX5_INVALID_LKEY);
		scat[i].addr = 0;
	}
	hexline("srq", name, b, sizeof(*nseg) + (size_t)max_gs * sizeof(*scat));
	printf("\n");
}

static void srqs(void)
{
	/* max_sge 3: stride roundup_pow2(16 + 3*16) = 64, max_gs 3. WQE 0 -> 1. */
	static const struct ibv_sge two[2] = {{0x7f0000001000ull, 4096, 0x1111}, {0x7f0000003000ull, 100, 0x1111}};
	srq_wqe("srq_wqe_2sge", 1, 3, two, 2);
	/* max_sge 1: stride max(32, 32) = 32, max_gs 1: no room for a terminator. WQE 6 -> 7. */
	static const struct ibv_sge one[1] = {{0x7f0000002000ull, 64, 0x2222}};
	srq_wqe("srq_wqe_full", 7, 1, one, 1);
	/* max_sge 2 (stride 64, max_gs 3), no SGE at all: the terminator first. WQE 2 -> 3. */
	srq_wqe("srq_wqe_empty", 3, 3, NULL, 0);
}

/* ---- CQEs ---- */

static void cqe(const char *name, struct mlx5_cqe64 *c)
{
	hexline("cqe", name, c, sizeof(*c));
	printf(" owner=%u opcode=%u se=%u format=%u\n", mlx5dv_get_cqe_owner(c), mlx5dv_get_cqe_opcode(c),
	       mlx5dv_get_cqe_se(c), mlx5dv_get_cqe_format(c));
}

static void ok_cqe(const char *name, uint8_t opcode, int owner, int se, uint32_t flags_rqpn, uint32_t srqn,
		   uint32_t imm_host, uint32_t byte_cnt, uint64_t ts, uint8_t wqe_op, uint32_t qpn, uint16_t wqe_counter)
{
	struct mlx5_cqe64 c;
	memset(&c, 0, sizeof(c));
	c.flags_rqpn = htobe32(flags_rqpn);
	c.srqn_uidx = htobe32(srqn);
	c.imm_inval_pkey = htobe32(imm_host);
	c.byte_cnt = htobe32(byte_cnt);
	c.timestamp = htobe64(ts);
	c.sop_drop_qpn = htobe32((uint32_t)wqe_op << 24 | qpn);
	c.wqe_counter = htobe16(wqe_counter);
	c.op_own = (uint8_t)(opcode << 4 | (se ? 2 : 0));
	mlx5dv_set_cqe_owner(&c, (uint8_t)owner);
	cqe(name, &c);
}

/*
 * Error CQE. hw_err_synd (byte 0x34) is not named by rdma-core (it is inside
 * mlx5_err_cqe.rsvd1); NVSHMEM's IBGDA headers place it there (mlx5.md §6.4).
 */
static void err_cqe(const char *name, uint8_t opcode, int owner, uint8_t synd, uint8_t vendor, uint8_t hw_synd,
		    uint32_t srqn, uint8_t wqe_op, uint32_t qpn, uint16_t wqe_counter)
{
	struct mlx5_err_cqe e;
	memset(&e, 0, sizeof(e));
	e.srqn = htobe32(srqn);
	e.rsvd1[0x34 - 0x24] = hw_synd;
	e.vendor_err_synd = vendor;
	e.syndrome = synd;
	e.s_wqe_opcode_qpn = htobe32((uint32_t)wqe_op << 24 | qpn);
	e.wqe_counter = htobe16(wqe_counter);
	e.op_own = (uint8_t)(opcode << 4 | (owner & MLX5_CQE_OWNER_MASK));
	cqe(name, (struct mlx5_cqe64 *)&e);
}

static void cqes(void)
{
	ok_cqe("req_write_owner0", MLX5_CQE_REQ, 0, 0, 0, 0, 0, 0, 0x0000123456789abcull,
	       MLX5_OPCODE_RDMA_WRITE, 0x000123, 0x0001);
	ok_cqe("req_read_owner1", MLX5_CQE_REQ, 1, 0, 0, 0, 0, 8192, 0xfedcba9876543210ull,
	       MLX5_OPCODE_RDMA_READ, 0xffffff, 0xffff);
	ok_cqe("req_fetch_add", MLX5_CQE_REQ, 1, 0, 0, 0, 0, 8, 0, MLX5_OPCODE_ATOMIC_FA, 0x000123, 0x8000);
	ok_cqe("resp_send_imm_se", MLX5_CQE_RESP_SEND_IMM, 0, 1, 0x02000042, 0x000007, 0xdeadbeef, 15,
	       0x1122334455667788ull, 0, 0x000042, 0x0003);
	ok_cqe("resp_wr_imm_owner1", MLX5_CQE_RESP_WR_IMM, 1, 0, 0x02000042, 0, 0x01020304, 4096, 1, 0,
	       0x000042, 0x0004);
	ok_cqe("resp_send_zero_len", MLX5_CQE_RESP_SEND, 0, 0, 0x02000042, 0, 0, 0, 2, 0, 0x000042, 0xffff);
	ok_cqe("resp_send_inv", MLX5_CQE_RESP_SEND_INV, 1, 1, 0x02000042, 0, 0x00c0ffee, 64, 3, 0,
	       0x000042, 0x0005);
	/*
	 * UD receive on a RoCEv2/IPv4 port through an SRQ: flags_rqpn = GRH
	 * (bit 28) | RoCE L3 type IPv4 (2 << 24) | source QPN; byte_cnt counts
	 * the 40-byte GRH area; wqe_counter is the SRQ slot, srqn the SRQ.
	 */
	ok_cqe("resp_send_ud_grh_ipv4", MLX5_CQE_RESP_SEND, 1, 0, 1u << 28 | 2u << 24 | 0x000abc, 0x000021, 0, 140, 4,
	       0, 0x000099, 0x0005);
	/* UD SEND with immediate, RoCEv2 over IPv6 (1 << 24), GRH bits 3. */
	ok_cqe("resp_send_imm_ud_ipv6", MLX5_CQE_RESP_SEND_IMM, 0, 0, 3u << 28 | 1u << 24 | 0xffffff, 0, 0x01020304,
	       1064, 5, 0, 0x000099, 0xfffe);
	err_cqe("req_err_retry_exceeded", MLX5_CQE_REQ_ERR, 1, MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR, 0x81,
		0x0a, 0, MLX5_OPCODE_SEND, 0x000123, 0x0042);
	err_cqe("req_err_remote_access", MLX5_CQE_REQ_ERR, 0, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR, 0x88, 0, 0,
		MLX5_OPCODE_RDMA_WRITE, 0xfffffe, 0xfffe);
	err_cqe("resp_err_flush", MLX5_CQE_RESP_ERR, 0, MLX5_CQE_SYNDROME_WR_FLUSH_ERR, 0xf9, 0, 0x000007, 0,
		0x000042, 0x0010);
	err_cqe("resp_err_local_length", MLX5_CQE_RESP_ERR, 1, MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR, 0x51, 0, 0, 0,
		0x000042, 0x0011);

	/* The value libmlx5 initialises every CQE to: opcode INVALID, owner 0. */
	struct mlx5_cqe64 c;
	memset(&c, 0, sizeof(c));
	c.op_own = MLX5_CQE_INVALID << 4;
	cqe("invalid_init", &c);
}

/* ---- doorbell records and the CQ arm doorbell ---- */

static void dbs(void)
{
	uint32_t d[2];

	/* QP DBR: [0] RQ head & 0xffff, [1] SQ cur_post & 0xffff. */
	d[0] = htobe32(0x12345 & 0xffff);
	d[1] = htobe32(0x1fffe & 0xffff);
	hexline("db", "qp_dbr", d, sizeof(d));
	printf("\n");

	/* CQ arm, solicited only: sn<<28 | cmd | ci, then cqn. */
	d[0] = htobe32(3u << 28 | MLX5_CQ_DB_REQ_NOT_SOL | (0x1234567 & 0xffffff));
	d[1] = htobe32(0x000abc);
	hexline("db", "cq_arm_solicited", d, sizeof(d));
	printf("\n");

	/* CQ arm, next completion. */
	d[0] = htobe32(1u << 28 | MLX5_CQ_DB_REQ_NOT | 0x000010);
	d[1] = htobe32(0xffffff);
	hexline("db", "cq_arm_next", d, sizeof(d));
	printf("\n");
}

/* ---- layout and constants ---- */

#define OFF(s, f) printf("off %s.%s %zu %zu\n", #s, #f, offsetof(struct s, f), sizeof(((struct s *)0)->f))
#define SIZE(s) printf("size %s %zu\n", #s, sizeof(struct s))
#define CONST(c) printf("const %s %lld\n", #c, (long long)(c))

static void layout(void)
{
	SIZE(mlx5_wqe_ctrl_seg);
	OFF(mlx5_wqe_ctrl_seg, opmod_idx_opcode);
	OFF(mlx5_wqe_ctrl_seg, qpn_ds);
	OFF(mlx5_wqe_ctrl_seg, signature);
	OFF(mlx5_wqe_ctrl_seg, dci_stream_channel_id);
	OFF(mlx5_wqe_ctrl_seg, fm_ce_se);
	OFF(mlx5_wqe_ctrl_seg, imm);

	SIZE(mlx5_wqe_raddr_seg);
	OFF(mlx5_wqe_raddr_seg, raddr);
	OFF(mlx5_wqe_raddr_seg, rkey);
	OFF(mlx5_wqe_raddr_seg, reserved);

	SIZE(mlx5_wqe_data_seg);
	OFF(mlx5_wqe_data_seg, byte_count);
	OFF(mlx5_wqe_data_seg, lkey);
	OFF(mlx5_wqe_data_seg, addr);

	SIZE(mlx5_wqe_atomic_seg);
	OFF(mlx5_wqe_atomic_seg, swap_add);
	OFF(mlx5_wqe_atomic_seg, compare);

	SIZE(mlx5_wqe_inl_data_seg);
	OFF(mlx5_wqe_inl_data_seg, byte_count);

	SIZE(mlx5_wqe_datagram_seg);
	SIZE(mlx5_wqe_av);
	OFF(mlx5_wqe_av, key);
	OFF(mlx5_wqe_av, dqp_dct);
	OFF(mlx5_wqe_av, stat_rate_sl);
	OFF(mlx5_wqe_av, fl_mlid);
	OFF(mlx5_wqe_av, rlid);
	OFF(mlx5_wqe_av, rmac);
	OFF(mlx5_wqe_av, tclass);
	OFF(mlx5_wqe_av, hop_limit);
	OFF(mlx5_wqe_av, grh_gid_fl);
	OFF(mlx5_wqe_av, rgid);

	SIZE(mlx5_wqe_srq_next_seg);
	OFF(mlx5_wqe_srq_next_seg, next_wqe_index);
	OFF(mlx5_wqe_srq_next_seg, signature);

	SIZE(mlx5_cqe64);
	OFF(mlx5_cqe64, flags_rqpn);
	OFF(mlx5_cqe64, l4_hdr_type_etc);
	OFF(mlx5_cqe64, srqn_uidx);
	OFF(mlx5_cqe64, imm_inval_pkey);
	OFF(mlx5_cqe64, byte_cnt);
	OFF(mlx5_cqe64, timestamp);
	OFF(mlx5_cqe64, sop_drop_qpn);
	OFF(mlx5_cqe64, wqe_counter);
	OFF(mlx5_cqe64, signature);
	OFF(mlx5_cqe64, op_own);

	SIZE(mlx5_err_cqe);
	OFF(mlx5_err_cqe, srqn);
	OFF(mlx5_err_cqe, vendor_err_synd);
	OFF(mlx5_err_cqe, syndrome);
	OFF(mlx5_err_cqe, s_wqe_opcode_qpn);
	OFF(mlx5_err_cqe, wqe_counter);
	OFF(mlx5_err_cqe, signature);
	OFF(mlx5_err_cqe, op_own);

	CONST(MLX5_SEND_WQE_BB);
	CONST(MLX5_SEND_WQE_SHIFT);
	CONST(MLX5_INLINE_SEG);
	CONST(MLX5_INVALID_LKEY);
	CONST(MLX5_EXTENDED_UD_AV);
	CONST(MLX5_WQE_CTRL_CQ_UPDATE);
	CONST(MLX5_WQE_CTRL_SOLICITED);
	CONST(MLX5_WQE_CTRL_FENCE);
	CONST(MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE);
	CONST(MLX5_CQ_DOORBELL);
	CONST(MLX5_CQ_DB_REQ_NOT_SOL);
	CONST(MLX5_CQE_OWNER_MASK);
	CONST(MLX5_CQE_L3_HDR_TYPE_NONE);
	CONST(MLX5_CQE_L3_HDR_TYPE_IPV6);
	CONST(MLX5_CQE_L3_HDR_TYPE_IPV4);
	CONST(IB_ROCE_UDP_ENCAP_VALID_PORT_MIN);
	CONST(IB_GRH_FLOWLABEL_MASK);

	CONST(MLX5_OPCODE_NOP);
	CONST(MLX5_OPCODE_SEND_INVAL);
	CONST(MLX5_OPCODE_RDMA_WRITE);
	CONST(MLX5_OPCODE_RDMA_WRITE_IMM);
	CONST(MLX5_OPCODE_SEND);
	CONST(MLX5_OPCODE_SEND_IMM);
	CONST(MLX5_OPCODE_TSO);
	CONST(MLX5_OPCODE_RDMA_READ);
	CONST(MLX5_OPCODE_ATOMIC_CS);
	CONST(MLX5_OPCODE_ATOMIC_FA);
	CONST(MLX5_OPCODE_ATOMIC_MASKED_CS);
	CONST(MLX5_OPCODE_ATOMIC_MASKED_FA);
	CONST(MLX5_OPCODE_LOCAL_INVAL);
	CONST(MLX5_OPCODE_UMR);

	CONST(MLX5_CQE_REQ);
	CONST(MLX5_CQE_RESP_WR_IMM);
	CONST(MLX5_CQE_RESP_SEND);
	CONST(MLX5_CQE_RESP_SEND_IMM);
	CONST(MLX5_CQE_RESP_SEND_INV);
	CONST(MLX5_CQE_RESIZE_CQ);
	CONST(MLX5_CQE_NO_PACKET);
	CONST(MLX5_CQE_SIG_ERR);
	CONST(MLX5_CQE_REQ_ERR);
	CONST(MLX5_CQE_RESP_ERR);
	CONST(MLX5_CQE_INVALID);

	CONST(MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR);
	CONST(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);
	CONST(MLX5_CQE_SYNDROME_LOCAL_PROT_ERR);
	CONST(MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
	CONST(MLX5_CQE_SYNDROME_MW_BIND_ERR);
	CONST(MLX5_CQE_SYNDROME_BAD_RESP_ERR);
	CONST(MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR);
	CONST(MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR);
	CONST(MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
	CONST(MLX5_CQE_SYNDROME_REMOTE_OP_ERR);
	CONST(MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR);
	CONST(MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR);
	CONST(MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR);
}

int main(void)
{
	printf("# rdma-core mlx5dv.h golden vectors for softnic's mlx5 package.\n");
	printf("# Generated by mlx5/testdata/gen_golden.sh; do not edit.\n");
	wqes();
	srqs();
	cqes();
	dbs();
	layout();
	return 0;
}
