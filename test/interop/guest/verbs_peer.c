/*
 * verbs_peer: a scriptable RC, UC or UD peer for the softnic interop test,
 * written against libibverbs so that it runs on any verbs device (here:
 * Linux Soft-RoCE, rxe0, inside a qemu guest).
 *
 * It speaks the same line protocol on stdin/stdout as `softnic rdma`
 * (docs/howto-interop.md):
 *
 *   start:   prints  LOCAL <qpn> <psn> <gid>        (hex; gid = 32 hex digits)
 *                    LOCAL <qpn> <psn> <gid> <qkey> (UD: its Q_Key, %08x)
 *            reads   REMOTE <qpn> <psn> [<gid> [<qkey>]]  (unless --remote-qpn given)
 *            then brings the QP to RTS (UD: and creates the AH to the peer).
 *   commands, one per line:
 *     write RADDR RKEY LEN SEED  fill MR[0,LEN) from SEED, RDMA WRITE it (RC, UC)
 *     read RADDR RKEY LEN        RDMA READ into MR[0,LEN) (RC)
 *     send LEN SEED [QKEY]       fill MR[0,LEN) from SEED, SEND it (UD: through the
 *                                AH to the REMOTE QPN with the REMOTE Q_Key, or QKEY)
 *     recv N                     wait for N receive completions
 *     fadd RADDR RKEY ADD        8-byte FETCH_ADD, result in MR[0,8) -> WC, ORIG (RC)
 *     cas RADDR RKEY CMP SWAP    8-byte CMP_SWAP, result in MR[0,8)  -> WC, ORIG (RC)
 *     sum OFF LEN                -> SUM OFF LEN CRC (zlib crc32 of MR[OFF,OFF+LEN))
 *     dump OFF LEN               -> DUMP OFF LEN HEX (the bytes of MR[OFF,OFF+LEN), LEN <= 4096)
 *     mr                         -> MR <addr> <rkey> <len>
 *     events                     -> EVENTS <cq_events> <acked> <sleeps> (see --events)
 *     quit
 *   a command the QP type cannot run prints  ERR <cmd> is not supported on a <type> QP
 *   every work completion prints  WC <wr_id> <status> <opcode> <byte_len> <imm>
 *   and, on a UD QP, a receive completion
 *                                 WC <wr_id> <status> RECV <byte_len> <imm> src_qp=<qpn> grh=<0|1>
 *   (byte_len counts the 40-byte GRH area a UD receive buffer starts with)
 *   a completion of an earlier command's WR (one that timed out) prints
 *                                 LATE WC <wr_id> <status> <opcode> <byte_len> <imm>
 *   an atomic that succeeded then prints  ORIG 0x<16 hex digits>
 *   a command that cannot run prints  ERR <reason>
 *
 * Every posted WR gets its own wr_id from one counter (1, 2, 3, ...), so a
 * command waits for its own completion and never mistakes an earlier one's.
 *
 * Numbers follow softnic rdma (docs/howto-interop.md, docs/cli.md): the
 * identifiers (RADDR, RKEY, QKEY, QPN, PSN, GID, wr_id, imm, addresses) are
 * hex; LEN, SEED, N, OFF, ADD, COMPARE, SWAP and byte counts are decimal, as
 * in rdma-core and perftest, in the commands, the replies (SUM, DUMP, MR,
 * EVENTS) and the options alike. A 0x prefix makes a number hex in any
 * field; a leading 0 is not octal (see parse_num).
 *
 * Receives: --recv-depth receive WQEs are posted at start, each covering
 * MR[recv_off, mr_size) (recv_off defaults to mr_size/2), and each one is
 * re-posted as soon as its completion has been reported. So after the peer
 * SENDs LEN bytes, `sum RECV_OFF LEN` here equals the sender's `sum 0 LEN`
 * (UD: the payload lands after the 40-byte GRH area, at RECV_OFF + 40).
 *
 * Waiting for completions: by default a command polls its CQ and, when it is
 * empty, arms it and sleeps on the completion channel. With --events it
 * never polls before sleeping: every wait arms the CQ first
 * (ibv_req_notify_cq), polls once for what landed before the arm, then
 * sleeps in the channel (poll(2) on its fd, then ibv_get_cq_event) and acks
 * each event (ibv_ack_cq_events); `events` reports the counts, so a harness
 * can tell that a completion woke a sleeping peer.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <zlib.h>

/* The two kinds of number field (parse_num): identifiers are hex, sizes,
 * counts, offsets, seeds and atomic operands decimal. */
#define NUM_HEX 1
#define NUM_DEC 0

/* A UD receive buffer starts with a 40-byte GRH area (IPv4 on rxe: 20 zero
 * bytes, then the IPv4 header of the packet). */
#define GRH_BYTES 40

/* Default Q_Key of a UD QP (ibv_ud_pingpong's). */
#define DEFAULT_QKEY 0x11111111u

static struct {
	const char *dev;
	int port;
	int gid_index;
	int mtu;
	size_t mr_size;
	size_t recv_off;
	int recv_depth;
	uint32_t psn;
	int have_psn;
	const char *remote_ip;
	long remote_qpn;
	long remote_psn;
	int timeout;   /* local ACK timeout exponent */
	int retry_cnt;
	int rnr_retry;
	int wait_ms;   /* how long a command waits for its completion */
	enum ibv_qp_type qp_type;
	uint32_t qkey;         /* own Q_Key (UD) */
	long long remote_qkey; /* the peer's (UD; -1: from REMOTE, else own) */
	int events;            /* --events: always sleep on the completion channel */
} opt = {
	.dev = "rxe0",
	.port = 1,
	.gid_index = 1,
	.mtu = 1024,
	.mr_size = 1 << 20,
	.recv_off = (size_t)-1,
	.recv_depth = 16,
	.remote_qpn = -1,
	.remote_psn = -1,
	.timeout = 16,
	.retry_cnt = 6,
	.rnr_retry = 6,
	.wait_ms = 20000,
	.qp_type = IBV_QPT_RC,
	.qkey = DEFAULT_QKEY,
	.remote_qkey = -1,
};

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_mr *mr;
static struct ibv_comp_channel *chan;
static struct ibv_cq *cq;
static struct ibv_qp *qp;
static uint8_t *buf;
static struct ibv_ah *ah;     /* UD: the address handle of the peer */
static uint32_t peer_qpn;     /* UD: the REMOTE QPN */
static uint32_t peer_qkey;    /* UD: the REMOTE Q_Key */

/* --events accounting: CQ events received and acked, and how often a wait
 * went to sleep on the channel. */
static uint64_t n_events, n_acked, n_sleeps;
static int cq_armed;

/* Receive completions that arrived while a command was waiting for its own
 * send-side completion; `recv N` reports them first. */
#define RQ_BACKLOG 1024
static struct ibv_wc backlog[RQ_BACKLOG];
static int backlog_n;

static const char *qp_type_name(enum ibv_qp_type t)
{
	switch (t) {
	case IBV_QPT_RC: return "RC";
	case IBV_QPT_UC: return "UC";
	case IBV_QPT_UD: return "UD";
	default: return "?";
	}
}

static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "verbs_peer: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	printf("ERR fatal\n");
	fflush(stdout);
	exit(1);
}

/* Seed generator (docs/howto-interop.md, "Seed generator"): xorshift32. */
static void fill_seed(uint8_t *p, size_t len, uint32_t seed)
{
	uint32_t s = seed ? seed : 0x9E3779B9u;
	for (size_t i = 0; i < len; i++) {
		s ^= s << 13;
		s ^= s >> 17;
		s ^= s << 5;
		p[i] = (uint8_t)s;
	}
}

static const char *status_name(enum ibv_wc_status s)
{
	switch (s) {
	case IBV_WC_SUCCESS: return "SUCCESS";
	case IBV_WC_LOC_LEN_ERR: return "LOC_LEN_ERR";
	case IBV_WC_LOC_QP_OP_ERR: return "LOC_QP_OP_ERR";
	case IBV_WC_LOC_EEC_OP_ERR: return "LOC_EEC_OP_ERR";
	case IBV_WC_LOC_PROT_ERR: return "LOC_PROT_ERR";
	case IBV_WC_WR_FLUSH_ERR: return "WR_FLUSH_ERR";
	case IBV_WC_MW_BIND_ERR: return "MW_BIND_ERR";
	case IBV_WC_BAD_RESP_ERR: return "BAD_RESP_ERR";
	case IBV_WC_LOC_ACCESS_ERR: return "LOC_ACCESS_ERR";
	case IBV_WC_REM_INV_REQ_ERR: return "REM_INV_REQ_ERR";
	case IBV_WC_REM_ACCESS_ERR: return "REM_ACCESS_ERR";
	case IBV_WC_REM_OP_ERR: return "REM_OP_ERR";
	case IBV_WC_RETRY_EXC_ERR: return "RETRY_EXC_ERR";
	case IBV_WC_RNR_RETRY_EXC_ERR: return "RNR_RETRY_EXC_ERR";
	case IBV_WC_LOC_RDD_VIOL_ERR: return "LOC_RDD_VIOL_ERR";
	case IBV_WC_REM_INV_RD_REQ_ERR: return "REM_INV_RD_REQ_ERR";
	case IBV_WC_REM_ABORT_ERR: return "REM_ABORT_ERR";
	case IBV_WC_INV_EECN_ERR: return "INV_EECN_ERR";
	case IBV_WC_INV_EEC_STATE_ERR: return "INV_EEC_STATE_ERR";
	case IBV_WC_FATAL_ERR: return "FATAL_ERR";
	case IBV_WC_RESP_TIMEOUT_ERR: return "RESP_TIMEOUT_ERR";
	case IBV_WC_GENERAL_ERR: return "GENERAL_ERR";
	default: return "UNKNOWN_STATUS";
	}
}

/* Work requests in flight: wr_id -> the ibv_wc_opcode it completes with.
 * An error completion's opcode is not valid in libibverbs, so the opcode
 * printed is the one recorded when the WR was posted. At most the SQ depth
 * plus the receive depth are outstanding. */
#define MAX_PENDING (64 + 4096 + 64)
static struct { uint64_t id; int op; } pending[MAX_PENDING];
static int pending_n;
static uint64_t next_wrid;

/* A fresh wr_id for a WR that completes with opcode op. */
static uint64_t new_wrid(enum ibv_wc_opcode op)
{
	uint64_t id = ++next_wrid;
	if (pending_n < MAX_PENDING) {
		pending[pending_n].id = id;
		pending[pending_n].op = (int)op;
		pending_n++;
	}
	return id;
}

/* The opcode a WR was posted with (-1: unknown); forget it if done. */
static int wrid_op(uint64_t id, int done)
{
	for (int i = 0; i < pending_n; i++) {
		if (pending[i].id != id)
			continue;
		int op = pending[i].op;
		if (done)
			pending[i] = pending[--pending_n];
		return op;
	}
	return -1;
}

static const char *wc_opcode_name(int op)
{
	switch (op) {
	case IBV_WC_SEND: return "SEND";
	case IBV_WC_RDMA_WRITE: return "RDMA_WRITE";
	case IBV_WC_RDMA_READ: return "RDMA_READ";
	case IBV_WC_COMP_SWAP: return "COMP_SWAP";
	case IBV_WC_FETCH_ADD: return "FETCH_ADD";
	case IBV_WC_BIND_MW: return "BIND_MW";
	case IBV_WC_LOCAL_INV: return "LOCAL_INV";
	case IBV_WC_RECV: return "RECV";
	case IBV_WC_RECV_RDMA_WITH_IMM: return "RECV_RDMA_WITH_IMM";
	default: return "UNKNOWN_OPCODE";
	}
}

/* Whether a completion is a receive's (by the opcode its WR was posted with). */
static int is_recv(const struct ibv_wc *wc)
{
	int op = wrid_op(wc->wr_id, 0);
	return op == IBV_WC_RECV || (op < 0 && wc->status == IBV_WC_SUCCESS && (wc->opcode & IBV_WC_RECV));
}

/* Print a completion; prefix is "" or "LATE ". It forgets the WR. */
static void print_wc(const char *prefix, const struct ibv_wc *wc)
{
	uint32_t imm = (wc->wc_flags & IBV_WC_WITH_IMM) ? ntohl(wc->imm_data) : 0;
	int posted = wrid_op(wc->wr_id, 1);
	int op = wc->status == IBV_WC_SUCCESS ? (int)wc->opcode : posted;
	printf("%sWC %" PRIx64 " %s %s %u %x", prefix, wc->wr_id, status_name(wc->status),
	       wc_opcode_name(op), wc->byte_len, imm);
	/* UD receives also name the sender's QPN and whether a GRH is there. */
	if (opt.qp_type == IBV_QPT_UD && posted == IBV_WC_RECV)
		printf(" src_qp=%06x grh=%d", wc->src_qp & 0xffffff, (wc->wc_flags & IBV_WC_GRH) ? 1 : 0);
	printf("\n");
	if (wc->status != IBV_WC_SUCCESS)
		fprintf(stderr, "verbs_peer: completion wr_id 0x%" PRIx64 " %s vendor_err 0x%x qp 0x%x\n",
			wc->wr_id, status_name(wc->status), wc->vendor_err, wc->qp_num);
}

static int post_recv_one(void)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)(buf + opt.recv_off),
		.length = (uint32_t)(opt.mr_size - opt.recv_off),
		.lkey = mr->lkey,
	};
	struct ibv_recv_wr wr = {
		.wr_id = new_wrid(IBV_WC_RECV),
		.sg_list = &sge,
		.num_sge = 1,
	}, *bad;
	int err = ibv_post_recv(qp, &wr, &bad);
	if (err)
		wrid_op(wr.wr_id, 1);
	return err;
}

/* Sleep on the completion channel for at most timeout_ms; returns 1 after
 * an event (received and acked), 0 on timeout. */
static int sleep_event(int timeout_ms)
{
	for (;;) {
		struct pollfd pfd = { .fd = chan->fd, .events = POLLIN };
		n_sleeps++;
		int r = poll(&pfd, 1, timeout_ms);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			die("poll: %s", strerror(errno));
		if (r == 0)
			return 0;
		struct ibv_cq *ev_cq;
		void *ev_ctx;
		if (ibv_get_cq_event(chan, &ev_cq, &ev_ctx))
			die("ibv_get_cq_event failed");
		n_events++;
		ibv_ack_cq_events(ev_cq, 1);
		n_acked++;
		cq_armed = 0;
		return 1;
	}
}

/* --events: arm first, poll once for what landed before the arm, then
 * sleep until the channel delivers an event. */
static int next_wc_events(struct ibv_wc *wc, int timeout_ms)
{
	for (;;) {
		if (!cq_armed) {
			if (ibv_req_notify_cq(cq, 0))
				die("ibv_req_notify_cq failed");
			cq_armed = 1;
		}
		int n = ibv_poll_cq(cq, 1, wc);
		if (n < 0)
			die("ibv_poll_cq failed");
		if (n == 1)
			return 1;
		if (!sleep_event(timeout_ms))
			return 0;
	}
}

/* Poll one completion, sleeping on the completion channel between polls.
 * Returns 1 with *wc filled, 0 on timeout. */
static int next_wc(struct ibv_wc *wc, int timeout_ms)
{
	if (opt.events)
		return next_wc_events(wc, timeout_ms);
	for (;;) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n < 0)
			die("ibv_poll_cq failed");
		if (n == 1)
			return 1;
		if (ibv_req_notify_cq(cq, 0))
			die("ibv_req_notify_cq failed");
		/* A completion may have landed between the poll and the arm. */
		n = ibv_poll_cq(cq, 1, wc);
		if (n < 0)
			die("ibv_poll_cq failed");
		if (n == 1)
			return 1;
		if (!sleep_event(timeout_ms))
			return 0;
	}
}

/* Whether the QP type can run cmd; if not, says so with an ERR line. */
static int supported(const char *cmd, int rc_only, int not_ud)
{
	if ((rc_only && opt.qp_type != IBV_QPT_RC) || (not_ud && opt.qp_type == IBV_QPT_UD)) {
		printf("ERR %s is not supported on a %s QP\n", cmd, qp_type_name(opt.qp_type));
		return 0;
	}
	return 1;
}

/* Report a receive completion and give the RQ its WQE back. */
static void finish_recv(const struct ibv_wc *wc)
{
	print_wc("", wc);
	if (wc->status == IBV_WC_SUCCESS && post_recv_one())
		fprintf(stderr, "verbs_peer: re-posting a receive failed\n");
}

/* Post one send-queue work request and wait for its own completion,
 * parking receive completions that arrive meanwhile and reporting those of
 * earlier WRs (whose command timed out) as LATE. Returns 1 if the WR
 * completed successfully. */
static int run_sq(struct ibv_send_wr *wr, const char *what)
{
	struct ibv_send_wr *bad;
	int err = ibv_post_send(qp, wr, &bad);
	if (err) {
		wrid_op(wr->wr_id, 1);
		printf("ERR post_send %s\n", strerror(err));
		return 0;
	}
	struct ibv_wc wc;
	for (;;) {
		if (!next_wc(&wc, opt.wait_ms)) {
			printf("ERR timed out after %dms waiting for the %s completion of wr_id %" PRIx64 "\n",
			       opt.wait_ms, what, wr->wr_id);
			return 0;
		}
		if (is_recv(&wc)) {
			if (backlog_n < RQ_BACKLOG)
				backlog[backlog_n++] = wc;
			continue;
		}
		if (wc.wr_id != wr->wr_id) {
			print_wc("LATE ", &wc);
			continue;
		}
		print_wc("", &wc);
		return wc.status == IBV_WC_SUCCESS;
	}
}

/* Parse a whole number field: hex if hex is set or s starts with 0x (or
 * 0X), else decimal. No sign, no blanks, no octal, nothing after the
 * digits; an overflow of 64 bits is an error. Returns 0 on success. */
static int parse_num(const char *s, int hex, uint64_t *v)
{
	unsigned base = hex ? 16 : 10;
	if (!s)
		return -1;
	if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
		s += 2;
		base = 16;
	}
	if (!*s)
		return -1;
	uint64_t n = 0;
	for (; *s; s++) {
		unsigned d;
		if (*s >= '0' && *s <= '9')
			d = (unsigned)(*s - '0');
		else if (*s >= 'a' && *s <= 'f')
			d = (unsigned)(*s - 'a') + 10;
		else if (*s >= 'A' && *s <= 'F')
			d = (unsigned)(*s - 'A') + 10;
		else
			return -1;
		if (d >= base || n > (UINT64_MAX - d) / base)
			return -1;
		n = n * base + d;
	}
	*v = n;
	return 0;
}

/* An option's number (parse_num) that must not exceed max; a bad one is a
 * usage error. */
static uint64_t opt_num(const char *name, const char *arg, int hex, uint64_t max)
{
	uint64_t v;
	if (parse_num(arg, hex, &v) || v > max) {
		if (hex)
			fprintf(stderr, "verbs_peer: --%s %s: want a hex number of at most %" PRIx64 "\n", name, arg, max);
		else
			fprintf(stderr, "verbs_peer: --%s %s: want a decimal number (or 0x hex) of at most %" PRIu64 "\n",
				name, arg, max);
		exit(2);
	}
	return v;
}

static void cmd_rdma(int write, char **a, int n)
{
	uint64_t raddr, rkey, len, seed = 0;
	if (!supported(a[0], !write, 1))
		return;
	if (n != (write ? 5 : 4) || parse_num(a[1], NUM_HEX, &raddr) || parse_num(a[2], NUM_HEX, &rkey) ||
	    parse_num(a[3], NUM_DEC, &len) || (write && parse_num(a[4], NUM_DEC, &seed))) {
		printf("ERR usage: %s\n", write ? "write RADDR RKEY LEN SEED" : "read RADDR RKEY LEN");
		return;
	}
	if (len > opt.recv_off || rkey > UINT32_MAX) {
		printf("ERR length %" PRIu64 " beyond the send area %zu\n", len, opt.recv_off);
		return;
	}
	if (write)
		fill_seed(buf, len, (uint32_t)seed);
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = (uint32_t)len, .lkey = mr->lkey };
	struct ibv_send_wr wr = {
		.wr_id = new_wrid(write ? IBV_WC_RDMA_WRITE : IBV_WC_RDMA_READ),
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = write ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.rdma = { .remote_addr = raddr, .rkey = (uint32_t)rkey },
	};
	run_sq(&wr, write ? "RDMA_WRITE" : "RDMA_READ");
}

static void cmd_send(char **a, int n)
{
	uint64_t len, seed, qkey = peer_qkey;
	int ud = opt.qp_type == IBV_QPT_UD;
	if ((n != 3 && !(ud && n == 4)) || parse_num(a[1], NUM_DEC, &len) || parse_num(a[2], NUM_DEC, &seed) ||
	    (n == 4 && (parse_num(a[3], NUM_HEX, &qkey) || qkey > UINT32_MAX))) {
		printf("ERR usage: %s\n", ud ? "send LEN SEED [QKEY]" : "send LEN SEED");
		return;
	}
	if (len > opt.recv_off) {
		printf("ERR length %" PRIu64 " beyond the send area %zu\n", len, opt.recv_off);
		return;
	}
	fill_seed(buf, len, (uint32_t)seed);
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = (uint32_t)len, .lkey = mr->lkey };
	struct ibv_send_wr wr = {
		.wr_id = new_wrid(IBV_WC_SEND),
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED,
	};
	if (ud) {
		wr.wr.ud.ah = ah;
		wr.wr.ud.remote_qpn = peer_qpn;
		wr.wr.ud.remote_qkey = (uint32_t)qkey;
	}
	run_sq(&wr, "SEND");
}

/* fadd RADDR RKEY ADD / cas RADDR RKEY COMPARE SWAP: one 8-byte atomic on
 * the peer's memory whose result (the original remote value) lands in
 * MR[0,8). The responder sends the original value big-endian in the
 * AtomicAckETH; the requesting HCA stores it into the local buffer as a
 * uint64 in host order (rxe: atmack_orig() is be64_to_cpu, then the u64 is
 * copied into the SGE), so MR[0,8) is read as a native uint64. */
static void cmd_atomic(int cas, char **a, int n)
{
	uint64_t raddr, rkey, cmp_add, swap = 0;
	if (!supported(a[0], 1, 1))
		return;
	if (n != (cas ? 5 : 4) || parse_num(a[1], NUM_HEX, &raddr) || parse_num(a[2], NUM_HEX, &rkey) ||
	    parse_num(a[3], NUM_DEC, &cmp_add) || (cas && parse_num(a[4], NUM_DEC, &swap))) {
		printf("ERR usage: %s\n", cas ? "cas RADDR RKEY COMPARE SWAP" : "fadd RADDR RKEY ADD");
		return;
	}
	if (rkey > UINT32_MAX) {
		printf("ERR RKEY is 32-bit\n");
		return;
	}
	if (opt.recv_off < 8) {
		printf("ERR the result buffer MR[0,8) overlaps the receive area at %zu\n", opt.recv_off);
		return;
	}
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey };
	struct ibv_send_wr wr = {
		.wr_id = new_wrid(cas ? IBV_WC_COMP_SWAP : IBV_WC_FETCH_ADD),
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = cas ? IBV_WR_ATOMIC_CMP_AND_SWP : IBV_WR_ATOMIC_FETCH_AND_ADD,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.atomic = { .remote_addr = raddr, .compare_add = cmp_add, .swap = swap, .rkey = (uint32_t)rkey },
	};
	if (run_sq(&wr, cas ? "COMP_SWAP" : "FETCH_ADD")) {
		uint64_t orig;
		memcpy(&orig, buf, sizeof orig);
		printf("ORIG 0x%016" PRIx64 "\n", orig);
	}
}

static void cmd_recv(char **a, int n)
{
	uint64_t want;
	if (n != 2 || parse_num(a[1], NUM_DEC, &want)) {
		printf("ERR usage: recv N\n");
		return;
	}
	uint64_t total = want;
	while (want > 0 && backlog_n > 0) {
		finish_recv(&backlog[0]);
		memmove(backlog, backlog + 1, (size_t)(--backlog_n) * sizeof backlog[0]);
		want--;
	}
	struct ibv_wc wc;
	while (want > 0) {
		if (!next_wc(&wc, opt.wait_ms)) {
			printf("ERR timed out after %dms waiting for receive completion %" PRIu64 " of %" PRIu64 "\n",
			       opt.wait_ms, total - want + 1, total);
			return;
		}
		if (!is_recv(&wc)) {
			/* A send-side completion of an earlier command. */
			print_wc("LATE ", &wc);
			continue;
		}
		finish_recv(&wc);
		want--;
	}
}

static void cmd_sum(char **a, int n)
{
	uint64_t off, len;
	if (n != 3 || parse_num(a[1], NUM_DEC, &off) || parse_num(a[2], NUM_DEC, &len)) {
		printf("ERR usage: sum OFF LEN\n");
		return;
	}
	if (off > opt.mr_size || len > opt.mr_size - off) {
		printf("ERR range beyond the MR (%zu bytes)\n", opt.mr_size);
		return;
	}
	uLong c = crc32(0L, Z_NULL, 0);
	/* zlib's length argument is a uInt: feed large ranges in pieces. */
	for (uint64_t done = 0; done < len;) {
		uInt chunk = (len - done) > (1u << 30) ? (1u << 30) : (uInt)(len - done);
		c = crc32(c, buf + off + done, chunk);
		done += chunk;
	}
	printf("SUM %" PRIu64 " %" PRIu64 " %08lx\n", off, len, c);
}

/* dump OFF LEN: the bytes of MR[OFF,OFF+LEN) in hex (a UD receive's GRH area). */
static void cmd_dump(char **a, int n)
{
	uint64_t off, len;
	if (n != 3 || parse_num(a[1], NUM_DEC, &off) || parse_num(a[2], NUM_DEC, &len)) {
		printf("ERR usage: dump OFF LEN\n");
		return;
	}
	if (len > 4096) {
		printf("ERR dump of %" PRIu64 " bytes: at most 4096\n", len);
		return;
	}
	if (off > opt.mr_size || len > opt.mr_size - off) {
		printf("ERR range beyond the MR (%zu bytes)\n", opt.mr_size);
		return;
	}
	printf("DUMP %" PRIu64 " %" PRIu64 " ", off, len);
	for (uint64_t i = 0; i < len; i++)
		printf("%02x", buf[off + i]);
	printf("%s\n", len ? "" : "-");
}

static void gid_hex(const union ibv_gid *g, char *out)
{
	for (int i = 0; i < 16; i++)
		sprintf(out + 2 * i, "%02x", g->raw[i]);
}

static int parse_gid(const char *s, union ibv_gid *g)
{
	if (strlen(s) != 32)
		return -1;
	for (int i = 0; i < 16; i++) {
		unsigned v;
		if (sscanf(s + 2 * i, "%2x", &v) != 1)
			return -1;
		g->raw[i] = (uint8_t)v;
	}
	return 0;
}

static enum ibv_mtu mtu_enum(int mtu)
{
	switch (mtu) {
	case 256: return IBV_MTU_256;
	case 512: return IBV_MTU_512;
	case 1024: return IBV_MTU_1024;
	case 2048: return IBV_MTU_2048;
	case 4096: return IBV_MTU_4096;
	default: die("bad --mtu %d (256, 512, 1024, 2048 or 4096)", mtu);
	}
	return IBV_MTU_1024;
}

static void setup(void)
{
	int num;
	struct ibv_device **list = ibv_get_device_list(&num);
	if (!list)
		die("ibv_get_device_list: %s", strerror(errno));
	for (int i = 0; i < num && !ctx; i++)
		if (!strcmp(ibv_get_device_name(list[i]), opt.dev))
			ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	if (!ctx)
		die("device %s not found or cannot be opened", opt.dev);
	if (!(pd = ibv_alloc_pd(ctx)))
		die("ibv_alloc_pd failed");
	if (posix_memalign((void **)&buf, 4096, opt.mr_size))
		die("out of memory");
	memset(buf, 0, opt.mr_size);
	mr = ibv_reg_mr(pd, buf, opt.mr_size,
			IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	if (!mr)
		die("ibv_reg_mr: %s", strerror(errno));
	if (!(chan = ibv_create_comp_channel(ctx)))
		die("ibv_create_comp_channel failed");
	if (!(cq = ibv_create_cq(ctx, 2 * opt.recv_depth + 64, NULL, chan, 0)))
		die("ibv_create_cq failed");
	struct ibv_qp_init_attr ia = {
		.send_cq = cq,
		.recv_cq = cq,
		.cap = { .max_send_wr = 64, .max_recv_wr = (uint32_t)opt.recv_depth,
			 .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = opt.qp_type,
		.sq_sig_all = 0,
	};
	if (!(qp = ibv_create_qp(pd, &ia)))
		die("ibv_create_qp: %s", strerror(errno));
	/* The attributes each QP type takes to INIT (IBTA; the kernel's
	 * ib_modify_qp_is_ok refuses any other): RC access flags for remote
	 * write, read and atomics; UC remote write only; UD a Q_Key. */
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.pkey_index = 0,
		.port_num = (uint8_t)opt.port,
		.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC,
		.qkey = opt.qkey,
	};
	int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
	switch (opt.qp_type) {
	case IBV_QPT_UD:
		mask |= IBV_QP_QKEY;
		break;
	case IBV_QPT_UC:
		a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
		mask |= IBV_QP_ACCESS_FLAGS;
		break;
	default:
		mask |= IBV_QP_ACCESS_FLAGS;
	}
	if (ibv_modify_qp(qp, &a, mask))
		die("modify_qp INIT: %s", strerror(errno));
	for (int i = 0; i < opt.recv_depth; i++)
		if (post_recv_one())
			die("ibv_post_recv failed");
}

/* UD: the QP needs no peer to reach RTS; the peer is an address handle
 * (rxe resolves its MAC in ibv_create_ah, as in modify_qp(RTR) for RC). */
static void connect_ud(uint32_t rqpn, uint32_t rqkey, const union ibv_gid *dgid)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTR };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		die("modify_qp RTR: %s", strerror(errno));
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = opt.psn;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
		die("modify_qp RTS: %s", strerror(errno));
	struct ibv_ah_attr aa = {
		.is_global = 1,
		.grh = { .dgid = *dgid, .sgid_index = (uint8_t)opt.gid_index, .hop_limit = 64 },
		.sl = 0,
		.port_num = (uint8_t)opt.port,
	};
	if (!(ah = ibv_create_ah(pd, &aa)))
		die("ibv_create_ah: %s (ARP for the peer answered?)", strerror(errno));
	peer_qpn = rqpn;
	peer_qkey = rqkey;
}

static void connect_qp(uint32_t rqpn, uint32_t rpsn, const union ibv_gid *dgid)
{
	int uc = opt.qp_type == IBV_QPT_UC;
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR,
		.path_mtu = mtu_enum(opt.mtu),
		.dest_qp_num = rqpn,
		.rq_psn = rpsn,
		.max_dest_rd_atomic = 16,
		.min_rnr_timer = 12,
		.ah_attr = {
			.is_global = 1,
			.grh = { .dgid = *dgid, .sgid_index = (uint8_t)opt.gid_index, .hop_limit = 64 },
			.sl = 0,
			.src_path_bits = 0,
			.port_num = (uint8_t)opt.port,
		},
	};
	/* UC has no responder resources and no RNR: those attributes are RC's. */
	int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
	if (!uc)
		mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	if (ibv_modify_qp(qp, &a, mask))
		die("modify_qp RTR: %s (ARP for the peer answered?)", strerror(errno));
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.timeout = (uint8_t)opt.timeout;
	a.retry_cnt = (uint8_t)opt.retry_cnt;
	a.rnr_retry = (uint8_t)opt.rnr_retry;
	a.sq_psn = opt.psn;
	a.max_rd_atomic = 16;
	/* UC: no ACKs, so no timeout, retries or outstanding READs/atomics. */
	mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
	if (!uc)
		mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
	if (ibv_modify_qp(qp, &a, mask))
		die("modify_qp RTS: %s", strerror(errno));
}

static void usage(void)
{
	fprintf(stderr,
		"usage: verbs_peer [options]\n"
		"  --dev NAME          verbs device (rxe0)\n"
		"  --port N            port (1)\n"
		"  --gid-index N       local GID index (1: the RoCEv2 IPv4 GID)\n"
		"  --mtu N             path MTU (1024)\n"
		"  numbers: N decimal (or 0x hex), HEX hex (0x optional)\n"
		"  --mr-size N         MR bytes (1048576)\n"
		"  --recv-off N        offset of the receive area (mr-size/2)\n"
		"  --recv-depth N      receives kept posted (16, at most 4096)\n"
		"  --psn HEX           own initial PSN (random)\n"
		"  --remote-ip A.B.C.D peer IPv4 (its GID ::ffff:A.B.C.D)\n"
		"  --remote-qpn HEX, --remote-psn HEX  skip the REMOTE line\n"
		"  --timeout N, --retry-cnt N, --rnr-retry N  QP retry attributes (16, 6, 6; RC)\n"
		"  --wait-ms N         how long a command waits for completions (20000)\n"
		"  -t, --qp-type T     rc, uc or ud (rc)\n"
		"  --qkey HEX          own Q_Key (UD; 11111111)\n"
		"  --remote-qkey HEX   the peer's Q_Key (UD; with --remote-qpn, default: own)\n"
		"  --events            always sleep on the completion channel (arm, poll, sleep)\n");
	exit(2);
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "dev", required_argument, 0, 'd' },
		{ "port", required_argument, 0, 'i' },
		{ "gid-index", required_argument, 0, 'g' },
		{ "mtu", required_argument, 0, 'm' },
		{ "mr-size", required_argument, 0, 's' },
		{ "recv-off", required_argument, 0, 'o' },
		{ "recv-depth", required_argument, 0, 'n' },
		{ "psn", required_argument, 0, 'p' },
		{ "remote-ip", required_argument, 0, 'r' },
		{ "remote-qpn", required_argument, 0, 'Q' },
		{ "remote-psn", required_argument, 0, 'P' },
		{ "timeout", required_argument, 0, 'T' },
		{ "qp-type", required_argument, 0, 't' },
		{ "qkey", required_argument, 0, 'k' },
		{ "remote-qkey", required_argument, 0, 'K' },
		{ "events", no_argument, 0, 'e' },
		{ "retry-cnt", required_argument, 0, 'c' },
		{ "rnr-retry", required_argument, 0, 'R' },
		{ "wait-ms", required_argument, 0, 'w' },
		{ "help", no_argument, 0, 'h' },
		{ 0, 0, 0, 0 },
	};
	int c;
	while ((c = getopt_long(argc, argv, "d:i:g:m:s:o:n:p:r:Q:P:t:c:R:w:eh", lo, NULL)) != -1) {
		switch (c) {
		case 'd': opt.dev = optarg; break;
		case 'i': opt.port = (int)opt_num("port", optarg, NUM_DEC, 255); break;
		case 'g': opt.gid_index = (int)opt_num("gid-index", optarg, NUM_DEC, 255); break;
		case 'm': opt.mtu = (int)opt_num("mtu", optarg, NUM_DEC, 4096); break;
		case 's': opt.mr_size = (size_t)opt_num("mr-size", optarg, NUM_DEC, 1u << 30); break;
		case 'o': opt.recv_off = (size_t)opt_num("recv-off", optarg, NUM_DEC, 1u << 30); break;
		case 'n': opt.recv_depth = (int)opt_num("recv-depth", optarg, NUM_DEC, 4096); break;
		case 'p':
			opt.psn = (uint32_t)opt_num("psn", optarg, NUM_HEX, UINT32_MAX) & 0xffffff;
			opt.have_psn = 1;
			break;
		case 'r': opt.remote_ip = optarg; break;
		case 'Q': opt.remote_qpn = (long)opt_num("remote-qpn", optarg, NUM_HEX, 0xffffff); break;
		case 'P': opt.remote_psn = (long)opt_num("remote-psn", optarg, NUM_HEX, 0xffffff); break;
		case 'T': opt.timeout = (int)opt_num("timeout", optarg, NUM_DEC, 31); break;
		case 't':
			if (!strcasecmp(optarg, "rc"))
				opt.qp_type = IBV_QPT_RC;
			else if (!strcasecmp(optarg, "uc"))
				opt.qp_type = IBV_QPT_UC;
			else if (!strcasecmp(optarg, "ud"))
				opt.qp_type = IBV_QPT_UD;
			else
				usage();
			break;
		case 'k': opt.qkey = (uint32_t)opt_num("qkey", optarg, NUM_HEX, UINT32_MAX); break;
		case 'K': opt.remote_qkey = (long long)opt_num("remote-qkey", optarg, NUM_HEX, UINT32_MAX); break;
		case 'e': opt.events = 1; break;
		case 'c': opt.retry_cnt = (int)opt_num("retry-cnt", optarg, NUM_DEC, 7); break;
		case 'R': opt.rnr_retry = (int)opt_num("rnr-retry", optarg, NUM_DEC, 7); break;
		case 'w': opt.wait_ms = (int)opt_num("wait-ms", optarg, NUM_DEC, INT32_MAX); break;
		default: usage();
		}
	}
	if (optind != argc || opt.mr_size < 8192 || opt.recv_depth < 1 || opt.recv_depth > 4096)
		usage();
	if (opt.recv_off == (size_t)-1)
		opt.recv_off = opt.mr_size / 2;
	if (opt.recv_off >= opt.mr_size)
		die("--recv-off %zu must lie inside the MR (%zu bytes)", opt.recv_off, opt.mr_size);
	if (!opt.have_psn) {
		FILE *r = fopen("/dev/urandom", "r");
		if (!r || fread(&opt.psn, sizeof opt.psn, 1, r) != 1)
			die("cannot read /dev/urandom");
		fclose(r);
		opt.psn &= 0xffffff;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);

	setup();
	union ibv_gid lgid;
	if (ibv_query_gid(ctx, (uint8_t)opt.port, opt.gid_index, &lgid))
		die("ibv_query_gid %d failed", opt.gid_index);
	char hex[33];
	gid_hex(&lgid, hex);
	if (opt.qp_type == IBV_QPT_UD)
		printf("LOCAL %06x %06x %s %08x\n", qp->qp_num, opt.psn, hex, opt.qkey);
	else
		printf("LOCAL %06x %06x %s\n", qp->qp_num, opt.psn, hex);

	union ibv_gid dgid;
	memset(&dgid, 0, sizeof dgid);
	int have_dgid = 0;
	if (opt.remote_ip) {
		struct in_addr in;
		if (inet_pton(AF_INET, opt.remote_ip, &in) != 1)
			die("bad --remote-ip %s", opt.remote_ip);
		dgid.raw[10] = dgid.raw[11] = 0xff;
		memcpy(&dgid.raw[12], &in, 4);
		have_dgid = 1;
	}
	char line[1024];
	uint32_t rqpn, rpsn, rqkey = opt.remote_qkey >= 0 ? (uint32_t)opt.remote_qkey : opt.qkey;
	if (opt.remote_qpn >= 0) {
		rqpn = (uint32_t)opt.remote_qpn;
		rpsn = (uint32_t)(opt.remote_psn >= 0 ? opt.remote_psn : 0);
	} else {
		if (!fgets(line, sizeof line, stdin))
			die("no REMOTE line on stdin");
		char gid[64] = "", extra[16] = "";
		unsigned qk;
		int n = sscanf(line, "REMOTE %x %x %63s %x %15s", &rqpn, &rpsn, gid, &qk, extra);
		if (n < 2 || n > 4 || (n == 4 && opt.qp_type != IBV_QPT_UD))
			die("expected REMOTE <qpn> <psn> [<gid>%s], got: %s",
			    opt.qp_type == IBV_QPT_UD ? " [<qkey>]" : "", line);
		if (n >= 3) {
			if (parse_gid(gid, &dgid))
				die("bad gid in REMOTE line: %s", gid);
			have_dgid = 1;
		}
		if (n == 4)
			rqkey = qk;
	}
	if (!have_dgid)
		die("the peer's address is unknown: give --remote-ip or a gid in the REMOTE line");
	if (opt.qp_type == IBV_QPT_UD)
		connect_ud(rqpn & 0xffffff, rqkey, &dgid);
	else
		connect_qp(rqpn & 0xffffff, rpsn & 0xffffff, &dgid);

	while (fgets(line, sizeof line, stdin)) {
		char *a[8];
		int n = 0;
		for (char *t = strtok(line, " \t\r\n"); t && n < 8; t = strtok(NULL, " \t\r\n"))
			a[n++] = t;
		if (n == 0)
			continue;
		if (!strcmp(a[0], "write"))
			cmd_rdma(1, a, n);
		else if (!strcmp(a[0], "read"))
			cmd_rdma(0, a, n);
		else if (!strcmp(a[0], "send"))
			cmd_send(a, n);
		else if (!strcmp(a[0], "fadd"))
			cmd_atomic(0, a, n);
		else if (!strcmp(a[0], "cas"))
			cmd_atomic(1, a, n);
		else if (!strcmp(a[0], "recv"))
			cmd_recv(a, n);
		else if (!strcmp(a[0], "sum"))
			cmd_sum(a, n);
		else if (!strcmp(a[0], "dump"))
			cmd_dump(a, n);
		else if (!strcmp(a[0], "events"))
			printf("EVENTS %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", n_events, n_acked, n_sleeps);
		else if (!strcmp(a[0], "mr"))
			printf("MR %" PRIxPTR " %x %zu\n", (uintptr_t)buf, mr->rkey, opt.mr_size);
		else if (!strcmp(a[0], "quit"))
			break;
		else
			printf("ERR unknown command %s\n", a[0]);
	}
	ibv_destroy_qp(qp);
	if (ah)
		ibv_destroy_ah(ah);
	ibv_destroy_cq(cq);
	ibv_destroy_comp_channel(chan);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	return 0;
}
