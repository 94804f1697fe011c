package provider

import (
	"github.com/softnic/softnic/mlx5"
)

// progressBudget bounds how many device steps one Poll of an empty CQ may
// drive on an emulated device before giving up and returning 0.
const progressBudget = 1 << 20

// CQ is a completion queue (struct mlx5_cq): a ring of 64-byte CQEs and an
// 8-byte doorbell record in host memory.
type CQ struct {
	bugs     Bugs // tests only (bugs.go)
	ctx      *Context
	cqn      uint32
	nent     uint32 // ring entries, a power of two
	ring     []byte
	ringAddr uint64
	dbr      mlx5.DBRec
	dbrAddr  uint64
	ci       uint32 // consumer index (free-running)
	refs     int    // QPs using the CQ
	last     *QP    // last QP looked up (libmlx5 cur_rsc)
	dead     bool
	rx       *rxeCQ // a kernel rxe CQ (rxe_datapath.go); nil for mlx5

	// asyncUnacked: asynchronous events (CQ_ERR) GetAsyncEvent returned
	// for the CQ and AckAsyncEvent has not acknowledged (Destroy refuses
	// while any).
	asyncUnacked uint32

	// Notification (channel.go).
	channel    *CompChannel // completion events go here (nil: none)
	armSN      uint32       // libmlx5 arm_sn: completion events read
	evReported uint32       // completion events GetCQEvent returned
	evAcked    uint32       // of those, acknowledged (ibv_ack_cq_events)
}

// CreateCQ creates a CQ able to hold at least entries completions. As in
// libmlx5 the ring has roundup_pow2(entries+1) entries (one spare entry),
// every op_own initialised to 0xF0 (INVALID, owner 0).
func (c *Context) CreateCQ(entries int) (*CQ, error) {
	if c.gone() {
		return nil, opErr("create_cq", 0, ErrClosed)
	}
	if c.kern != nil {
		return c.kernCreateCQ(entries, nil)
	}
	if entries <= 0 || entries > c.attr.MaxCQE {
		return nil, opErr("create_cq", 0, detail(ErrInvalidArg, "%d entries (device max %d)", entries, c.attr.MaxCQE))
	}
	nent := roundupPow2(entries + 1)
	ringAddr, ring, err := c.allocQueueMem("cq ring", nent*mlx5.CQE64Size, 4096)
	if err != nil {
		return nil, opErr("create_cq", 0, err)
	}
	dbrAddr, dbr, err := c.allocQueueMem("cq doorbell record", mlx5.DBRecSize, 64)
	if err != nil {
		_ = c.mem.Free(ringAddr)
		return nil, opErr("create_cq", 0, err)
	}
	for i := 0; i < nent; i++ {
		ring[i*mlx5.CQE64Size+mlx5.CQEOffOpOwn] = mlx5.CQInitOpOwn
	}
	r, err := c.ctl.CreateCQ(mlx5.CreateCQCmd{Entries: nent, CQESize: mlx5.CQE64Size, BufAddr: ringAddr,
		DBAddr: dbrAddr, UARIndex: c.uctx.UARIndex})
	if err != nil {
		_ = c.mem.Free(dbrAddr)
		_ = c.mem.Free(ringAddr)
		return nil, opErr("create_cq", 0, err)
	}
	cq := &CQ{ctx: c, cqn: r.CQN, nent: uint32(nent), ring: ring, ringAddr: ringAddr, dbr: mlx5.DBRec(dbr), dbrAddr: dbrAddr}
	c.cqs[r.CQN] = cq
	c.kevAdd('c', r.CQN, cq)
	return cq, nil
}

// CQN is the CQ number.
func (cq *CQ) CQN() uint32 {
	if cq == nil {
		return 0
	}
	return cq.cqn
}

// Entries is the number of completions the CQ holds (ibv_cq.cqe = ring - 1).
func (cq *CQ) Entries() int {
	if cq == nil || cq.nent == 0 {
		return 0
	}
	return int(cq.nent) - 1
}

// Size is the number of CQEs in the ring.
func (cq *CQ) Size() int {
	if cq == nil {
		return 0
	}
	return int(cq.nent)
}

// ConsumerIndex is the free-running consumer index.
func (cq *CQ) ConsumerIndex() uint32 {
	if cq == nil {
		return 0
	}
	return cq.ci
}

// CQInfo locates the CQ's host memory (for traces and tests).
type CQInfo struct {
	RingAddr uint64 // first CQE
	Entries  int    // CQEs in the ring
	CQESize  int    // bytes per CQE (64)
	DBRAddr  uint64 // doorbell record: [0] set_ci, [1] arm
}

// Info returns where the CQ lives.
func (cq *CQ) Info() CQInfo {
	if cq == nil || cq.ctx == nil {
		return CQInfo{}
	}
	return CQInfo{RingAddr: cq.ringAddr, Entries: int(cq.nent), CQESize: mlx5.CQE64Size, DBRAddr: cq.dbrAddr}
}

// CQE returns a copy of the 64-byte entry consumer index ci maps to (nil
// for a CQ without mlx5 CQEs: a kernel rxe CQ, or a destroyed one).
func (cq *CQ) CQE(ci uint32) []byte {
	if cq == nil || cq.ring == nil {
		return nil
	}
	out := make([]byte, mlx5.CQE64Size)
	copy(out, cq.entry(ci))
	return out
}

// entry is the CQE slot for consumer index ci, aliasing the ring.
func (cq *CQ) entry(ci uint32) mlx5.CQE64 {
	off := (ci & (cq.nent - 1)) * mlx5.CQE64Size
	return mlx5.CQE64(cq.ring[off : off+mlx5.CQE64Size : off+mlx5.CQE64Size])
}

// ready reports whether software owns the CQE at the consumer index.
func (cq *CQ) ready() bool { return cq.readyAt(cq.ci) }

// Destroy destroys the CQ; it fails with ErrBusy while a QP uses it, and
// while completion events GetCQEvent returned for it are not acknowledged
// (AckEvents), or asynchronous events (CQ_ERR) GetAsyncEvent returned for
// it (AckAsyncEvent): ibv_destroy_cq waits for those acknowledgements,
// for ever if the application never gives them; here the wait is the
// caller's.
func (cq *CQ) Destroy() error {
	if cq.gone() {
		return opErr("destroy_cq", 0, ErrClosed)
	}
	if n := cq.UnackedEvents(); n > 0 {
		return opErr("destroy_cq", 0, detail(ErrBusy, "cq %#x has %d completion events not acknowledged (AckEvents)", cq.cqn, n))
	}
	if n := cq.asyncUnacked; n > 0 {
		return opErr("destroy_cq", 0, detail(ErrBusy, "cq %#x has %d asynchronous events not acknowledged (AckAsyncEvent)", cq.cqn, n))
	}
	if cq.rx != nil {
		return cq.kernDestroy()
	}
	if cq.refs > 0 {
		return opErr("destroy_cq", 0, detail(ErrBusy, "cq %#x is used by %d QPs", cq.cqn, cq.refs))
	}
	uh := cq.ctx.kevHandle('c', cq.cqn)
	ch := cq.channel
	if ch != nil && (ch.kfd != nil || ch.dead || cq.ctx.ev == nil) {
		ch = nil
	}
	pending := 0
	if ch != nil {
		pending = cq.ctx.ev.ec.PendingEvents(ch.id)
	}
	async := cq.ctx.asyncPending()
	if err := cq.ctx.ctl.DestroyCQ(cq.cqn); err != nil {
		return opErr("destroy_cq", 0, err)
	}
	cq.ctx.asyncGone(async, "cq", cq.cqn)
	if ch != nil {
		// The destroy removed the CQ's unread events from the channel
		// (ib_uverbs_release_ucq): take their bytes back from the fd.
		left := func() int { return cq.ctx.ev.ec.PendingEvents(ch.id) }
		ch.pipe.dropGone(pending-left(), left)
	}
	cq.ctx.kevDel(uh)
	cq.dead = true
	delete(cq.ctx.cqs, cq.cqn)
	_ = cq.ctx.mem.Free(cq.dbrAddr)
	_ = cq.ctx.mem.Free(cq.ringAddr)
	cq.ring, cq.dbr = nil, nil
	return nil
}

// Poll reaps up to len(wcs) completions (ibv_poll_cq) and returns how many
// it filled. If the CQ is empty and the device is emulated (its Control
// implements mlx5.Progressor), Poll runs the device until a CQE appears,
// the device has nothing left to do, or progressBudget steps have passed;
// it never blocks. A CQE the provider cannot attribute (unknown QPN,
// unexpected opcode, no outstanding WQE) is consumed and reported as an
// ErrBadCQE error after the n good completions before it.
func (cq *CQ) Poll(wcs []WC) (int, error) {
	if cq == nil || cq.ctx == nil {
		return 0, opErr("poll_cq", 0, ErrClosed)
	}
	if cq.rx != nil {
		return cq.rxePoll(wcs)
	}
	if cq.dead {
		return 0, opErr("poll_cq", 0, ErrClosed)
	}
	if len(wcs) == 0 {
		return 0, nil
	}
	if l := cq.ctx.link; l != nil {
		if err := l.Sync(); err != nil {
			return 0, opErr("poll_cq", 0, err)
		}
	}
	n, err := cq.poll(wcs)
	if n != 0 || err != nil || cq.ctx.prog == nil {
		return n, err
	}
	if cq.ctx.cqprog != nil {
		// A dialled device runs the same loop at the daemon, in one call.
		cq.ctx.cqprog.ProgressCQ(cq.ringAddr+uint64((cq.ci&(cq.nent-1))*mlx5.CQE64Size), cq.ci, cq.nent)
	} else {
		for i := 0; i < progressBudget && !cq.ready(); i++ {
			if !cq.ctx.prog.Progress() {
				break
			}
		}
	}
	n, err = cq.poll(wcs)
	if n == 0 && err == nil && cq.ctx.link != nil {
		if err := cq.ctx.link.Err(); err != nil {
			return 0, opErr("poll_cq", 0, err) // the progress call found the device gone
		}
	}
	return n, err
}

// poll is mlx5_poll_cq without the device drive.
func (cq *CQ) poll(wcs []WC) (n int, err error) {
	start := cq.ci
	var qpn uint32
	for n < len(wcs) {
		cqe := cq.entry(cq.ci)
		if !mlx5.CQEOwnedBySW(cqe, cq.ci, cq.nent) {
			break
		}
		// udma_from_device_barrier(): nothing else in the CQE may be read
		// before the ownership check. In process the device writes the ring
		// from this goroutine (Progress), so program order suffices; Encode
		// writes op_own last. A cross-process backend relies on x86 TSO
		// (loads are not reordered with loads), as libmlx5 does with its
		// compiler-only barrier there.
		cq.ci++
		qpn = cqe.QPN()
		if cq.ctx.host != nil {
			cq.ctx.host.Work("poll", qpn, mlx5.CQE64Size)
		}
		if err = cq.parse(cqe, &wcs[n]); err != nil {
			break
		}
		n++
	}
	if cq.ci != start {
		// update_cons_index: set_ci after the batch.
		cq.dbr.SetWord(mlx5.DBRSetCI, cq.bugCI(cq.ci)&0xffffff)
	}
	if err != nil {
		return n, &OpError{Op: "poll_cq", QPN: qpn, Index: -1, Err: err}
	}
	return n, nil
}

// lookup finds the QP a CQE names (CQE v0: by QPN).
func (cq *CQ) lookup(qpn uint32) *QP {
	if cq.last != nil && cq.last.qpn == qpn && !cq.last.dead {
		return cq.last
	}
	qp := cq.ctx.qps[qpn]
	if qp != nil {
		cq.last = qp
	}
	return qp
}

// parse turns one CQE into a work completion (mlx5_parse_cqe).
func (cq *CQ) parse(cqe mlx5.CQE64, wc *WC) error {
	qpn := cqe.QPN()
	qp := cq.lookup(qpn)
	if qp == nil {
		return detail(ErrBadCQE, "cq %#x: CQE for unknown QPN %#x", cq.cqn, qpn)
	}
	*wc = WC{QPNum: qpn}
	switch op := cqe.Opcode(); op {
	case mlx5.CQEReq:
		if err := qp.sq.retire(cqe.WQECounter(), wc); err != nil {
			return err
		}
		goodReq(cqe, wc)
	case mlx5.CQEReqErr:
		if err := qp.sq.retire(cqe.WQECounter(), wc); err != nil {
			return err
		}
		goodReq(cqe, wc) // best-effort opcode from s_wqe_opcode
		wc.ByteLen = 0
		wc.Flags = 0
		wc.Status = wcStatusFromSyndrome(cqe.Syndrome())
		wc.VendorErr = uint32(cqe.VendorErrSynd())
	case mlx5.CQERespWrImm, mlx5.CQERespSend, mlx5.CQERespSendImm, mlx5.CQERespSendInv:
		if err := qp.consumeRecv(cqe, wc); err != nil {
			return err
		}
		wc.ByteLen = cqe.ByteCnt()
		switch op {
		case mlx5.CQERespWrImm:
			wc.Opcode, wc.Flags, wc.Imm = WCRecvRDMAWithImm, WCFlagWithImm, cqe.Imm()
		case mlx5.CQERespSend:
			wc.Opcode = WCRecv
		case mlx5.CQERespSendImm:
			wc.Opcode, wc.Flags, wc.Imm = WCRecv, WCFlagWithImm, cqe.Imm()
		case mlx5.CQERespSendInv:
			wc.Opcode, wc.Flags, wc.Imm = WCRecv, WCFlagWithInv, cqe.Imm()
		}
		// handle_responder: src_qp, sl and the GRH flag from flags_rqpn;
		// the network header type as mlx5_ib reads it on a RoCE port.
		wc.SrcQP = cqe.SrcQPN()
		wc.SL = cqe.SL()
		if cqe.GRHBits() != 0 {
			wc.Flags |= WCFlagGRH
		}
		wc.NetworkHdr = networkHdrFromCQE(cqe.RoCEL3Type())
	case mlx5.CQERespErr:
		if err := qp.consumeRecv(cqe, wc); err != nil {
			return err
		}
		wc.Opcode = WCRecv
		wc.Status = wcStatusFromSyndrome(cqe.Syndrome())
		wc.VendorErr = uint32(cqe.VendorErrSynd())
	default:
		return detail(ErrBadCQE, "cq %#x: unexpected CQE opcode %v (op_own %#02x)", cq.cqn, op, cqe.OpOwn())
	}
	return nil
}

// consumeRecv retires the receive a responder CQE completes: for a QP on
// an SRQ the SRQ WQE its wqe_counter names, which goes back to the SRQ's
// free list (mlx5_free_srq_wqe); otherwise the QP's oldest receive.
func (qp *QP) consumeRecv(cqe mlx5.CQE64, wc *WC) error {
	if qp.srq != nil {
		return qp.srq.complete(cqe.WQECounter(), wc)
	}
	return qp.rq.consume(wc)
}

// goodReq fills opcode, flags and byte_len of a requester completion from
// the completed WQE's opcode (libmlx5 handle_good_req).
func goodReq(cqe mlx5.CQE64, wc *WC) {
	switch mlx5.Opcode(cqe.WQEOpcode()) {
	case mlx5.OpRDMAWriteImm:
		wc.Opcode, wc.Flags = WCRDMAWrite, WCFlagWithImm
	case mlx5.OpRDMAWrite:
		wc.Opcode = WCRDMAWrite
	case mlx5.OpSendImm:
		wc.Opcode, wc.Flags = WCSend, WCFlagWithImm
	case mlx5.OpSend, mlx5.OpSendInval:
		wc.Opcode = WCSend
	case mlx5.OpRDMARead:
		wc.Opcode, wc.ByteLen = WCRDMARead, cqe.ByteCnt()
	case mlx5.OpAtomicCS:
		wc.Opcode, wc.ByteLen = WCCompSwap, 8
	case mlx5.OpAtomicFA:
		wc.Opcode, wc.ByteLen = WCFetchAdd, 8
	case mlx5.OpTSO:
		wc.Opcode = WCTSO
	}
}

// roundupPow2 is the smallest power of two >= n (n >= 1).
func roundupPow2(n int) int {
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}
