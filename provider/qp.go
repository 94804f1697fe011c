package provider

import (
	"github.com/softnic/softnic/mlx5"
)

// rcSQOverhead is the fixed part of the largest RC send WQE libmlx5 sizes
// the SQ for: ctrl + raddr + atomic segments (sq_overhead). libmlx5 also
// reserves room for UMR / bind-MW WQEs on RC QPs; this provider does not
// build those, so it does not (a deviation that only makes rings smaller).
// UC QPs get the same overhead: libmlx5's default send_ops for UC are the
// RC ones, atomics included, even though UC cannot post them.
const rcSQOverhead = mlx5.CtrlSegSize + mlx5.RaddrSegSize + mlx5.AtomicSegSize

// udSQOverhead is sq_overhead for UD: ctrl + the 48-byte datagram segment
// (SEND, SEND_WITH_IMM; no underlay Ethernet segment, no TSO).
const udSQOverhead = mlx5.CtrlSegSize + mlx5.DatagramSegSize

// sqOverhead is the fixed part of a QP type's largest send WQE.
func sqOverhead(t QPType) int {
	if t == QPTypeUD {
		return udSQOverhead
	}
	return rcSQOverhead
}

// sendQueue is the SQ half of a QP (struct mlx5_wq for the SQ plus the
// per-slot bookkeeping libmlx5 keeps).
type sendQueue struct {
	buf     []byte // the ring, cnt WQEBBs, aliasing host memory
	addr    uint64
	cnt     uint32 // WQEBBs, a power of two (0: no SQ)
	curPost uint32 // WQEBB producer counter (free-running; ctrl wqe_index = low 16 bits)
	head    uint32 // WRs posted
	tail    uint32 // WRs retired by completions
	maxPost uint32 // WRs that may be outstanding
	maxGS   int
	maxInl  int
	// Per posted WR (not per WQEBB) until its completion, indexed by its
	// head value: len is a power of two >= maxPost.
	wrid []uint64
	ctr  []uint16 // the wqe_index written into its ctrl segment
}

// retire completes the WQE whose first WQEBB counter is ctr (requester
// CQE): its wr_id, and every earlier unsignalled WQE is retired with it.
func (sq *sendQueue) retire(ctr uint16, wc *WC) error {
	if sq.cnt == 0 {
		return detail(ErrBadCQE, "requester CQE for a QP without a send queue")
	}
	// Completions come in posting order: the WR named is the first
	// outstanding one posted at ctr (those before it were unsignalled).
	mask := uint32(len(sq.ctr) - 1)
	for h := sq.tail; h != sq.head; h++ {
		if sq.ctr[h&mask] == ctr {
			wc.WRID = sq.wrid[h&mask]
			sq.tail = h + 1
			return nil
		}
	}
	return detail(ErrBadCQE, "requester CQE wqe_counter %#04x names no outstanding WQE", ctr)
}

// recvQueue is the RQ half of a QP.
type recvQueue struct {
	buf    []byte
	addr   uint64
	cnt    uint32 // WQEs, a power of two (0: no RQ)
	stride int
	shift  int
	head   uint32 // WQEs posted
	tail   uint32 // WQEs consumed
	maxGS  int
	wrid   []uint64
}

// consume takes the oldest posted receive for a responder CQE (non-SRQ RQs
// complete in order; libmlx5 ignores the CQE's wqe_counter here).
func (rq *recvQueue) consume(wc *WC) error {
	if rq.head == rq.tail {
		return detail(ErrBadCQE, "responder CQE with no receive WQE outstanding")
	}
	wc.WRID = rq.wrid[rq.tail&(rq.cnt-1)]
	rq.tail++
	return nil
}

// QP is a queue pair (struct mlx5_qp).
type QP struct {
	bug qpBugs // tests only (bugs.go)

	ctx    *Context
	pd     *PD
	qpn    uint32
	typ    QPType
	sendCQ *CQ
	recvCQ *CQ
	srq    *SRQ // receives come from this SRQ (no RQ of its own)
	state  QPState
	sigAll bool
	cap    QPCap
	qkey   uint32 // UD: the Q_Key last set by Modify (AttrQKey)

	// asyncUnacked: asynchronous events GetAsyncEvent returned for the QP
	// and AckAsyncEvent has not acknowledged (Destroy refuses while any).
	asyncUnacked uint32

	bufAddr uint64
	dbr     mlx5.DBRec
	dbrAddr uint64
	sq      sendQueue
	rq      recvQueue

	bfReg     uint64 // BAR0 offset of the bfreg
	bfBufSize uint64 // one BlueFlame buffer; 0 = doorbell only
	// bfOff is the bfreg's current buffer, 0 or bfBufSize: the bfreg's
	// (Context.bfHalf), shared by the QPs on it, as libmlx5 keeps
	// bf->offset in struct mlx5_bf, so that consecutive BlueFlame writes
	// to a bfreg alternate whichever QPs they are for.
	bfOff *uint64
	bfOn  bool // BlueFlame allowed (off = MLX5_SHUT_UP_BF)
	dead  bool
	// fast: PostSend's one-WR path may run (refreshFast): a live RC or UC
	// QP of this process in a posting state, with no bugs to inject.
	// fastBF is the largest WQE it rings by BlueFlame (0: none, the
	// doorbell), fastMsg the device's largest message (0: no limit),
	// both set with it.
	fast    bool
	fastBF  uint64
	fastMsg uint64

	rx *rxeQP // a kernel rxe QP (rxe_datapath.go); nil for mlx5
}

// CreateQP creates a QP in RESET (ibv_create_qp): RC, UC or UD, with its
// own receive queue or attached to an SRQ (attr.SRQ).
//
// The send queue is sized as libmlx5's mlx5_calc_send_wqe: the largest WQE
// is the type's fixed segments (RC and UC: ctrl + raddr + atomic, 48 B;
// UD: ctrl + datagram, 64 B) plus max_send_sge data segments or one inline
// segment of max_inline_data bytes, rounded up to whole WQEBBs.
func (c *Context) CreateQP(pd *PD, attr QPInitAttr) (*QP, error) {
	const op = "create_qp"
	if c.gone() {
		return nil, opErr(op, 0, ErrClosed)
	}
	if c.kern != nil {
		return c.kernCreateQP(pd, attr)
	}
	switch {
	case pd.gone() || pd.ctx != c:
		return nil, opErr(op, 0, detail(ErrInvalidArg, "PD missing, destroyed or from another context"))
	case attr.Type != QPTypeRC && attr.Type != QPTypeUC && attr.Type != QPTypeUD:
		return nil, opErr(op, 0, detail(ErrNotSupported, "QP type %d (RC, UC and UD only)", attr.Type))
	case attr.SendCQ.gone() || attr.SendCQ.ctx != c:
		return nil, opErr(op, 0, detail(ErrInvalidArg, "send CQ missing, destroyed or from another context"))
	case attr.RecvCQ.gone() || attr.RecvCQ.ctx != c:
		return nil, opErr(op, 0, detail(ErrInvalidArg, "recv CQ missing, destroyed or from another context"))
	case attr.SRQ != nil && (attr.SRQ.dead || attr.SRQ.ctx != c):
		return nil, opErr(op, 0, detail(ErrInvalidArg, "SRQ destroyed or from another context"))
	}
	qp := &QP{ctx: c, pd: pd, typ: attr.Type, sendCQ: attr.SendCQ, recvCQ: attr.RecvCQ, srq: attr.SRQ,
		sigAll: attr.SigAll, bfOn: true}
	if err := qp.sizeSQ(attr.Cap, &c.attr); err != nil {
		return nil, opErr(op, 0, err)
	}
	if attr.SRQ == nil { // mlx5_calc_rcv_wqe: no RQ on an SRQ
		if err := qp.sizeRQ(attr.Cap, &c.attr); err != nil {
			return nil, opErr(op, 0, err)
		}
	}

	// One buffer: RQ at offset 0, SQ right after (both are powers of two of
	// at least 64 B, so the SQ stays WQEBB aligned), page aligned.
	rqBytes := int(qp.rq.cnt) * qp.rq.stride
	sqBytes := int(qp.sq.cnt) * mlx5.WQEBBSize
	total := (rqBytes + sqBytes + 4095) &^ 4095
	if total == 0 {
		total = 4096
	}
	bufAddr, buf, err := c.allocQueueMem("qp buffer", total, 4096)
	if err != nil {
		return nil, opErr(op, 0, err)
	}
	dbrAddr, dbr, err := c.allocQueueMem("qp doorbell record", mlx5.DBRecSize, 64)
	if err != nil {
		_ = c.mem.Free(bufAddr)
		return nil, opErr(op, 0, err)
	}
	qp.bufAddr, qp.dbr, qp.dbrAddr = bufAddr, mlx5.DBRec(dbr), dbrAddr
	qp.rq.buf, qp.rq.addr = buf[:rqBytes:rqBytes], bufAddr
	qp.sq.buf, qp.sq.addr = buf[rqBytes:rqBytes+sqBytes:rqBytes+sqBytes], bufAddr+uint64(rqBytes)

	var srqn uint32
	if attr.SRQ != nil {
		srqn = attr.SRQ.srqn
	}
	r, err := c.ctl.CreateQP(mlx5.CreateQPCmd{
		Type: attr.Type, PDN: pd.pdn, SendCQN: attr.SendCQ.cqn, RecvCQN: attr.RecvCQ.cqn,
		BufAddr: bufAddr, DBAddr: dbrAddr, SQWQECnt: int(qp.sq.cnt), RQWQECnt: int(qp.rq.cnt),
		RQWQEShift: qp.rq.shift, MaxInline: qp.sq.maxInl, SigAll: attr.SigAll, SRQN: srqn,
		BFRegIndex: -1, UARIndexHint: c.uctx.UARIndex,
	})
	if err != nil {
		_ = c.mem.Free(dbrAddr)
		_ = c.mem.Free(bufAddr)
		return nil, opErr(op, 0, err)
	}
	if r.BFBufSize < 0 || r.BFBufSize%64 != 0 || r.BFRegOffset%8 != 0 {
		// A bfreg we cannot write correctly: give the QP back.
		_ = c.ctl.DestroyQP(r.QPN)
		_ = c.mem.Free(dbrAddr)
		_ = c.mem.Free(bufAddr)
		return nil, opErr(op, r.QPN, detail(ErrNotSupported, "bfreg offset %#x / BlueFlame buffer size %d", r.BFRegOffset, r.BFBufSize))
	}
	if w, ok := c.mmio.(windowCoverer); ok {
		// A port that knows its window (the UAR mapped from a kernel
		// device) would drop stores outside it, counted but silent:
		// every doorbell of this QP would be lost. Refuse the QP now.
		n := max(8, 2*r.BFBufSize) // the doorbell, or both BlueFlame buffers
		if !w.Covers(r.BFRegOffset, n) {
			_ = c.ctl.DestroyQP(r.QPN)
			_ = c.mem.Free(dbrAddr)
			_ = c.mem.Free(bufAddr)
			return nil, opErr(op, r.QPN, detail(ErrNotSupported, "bfreg at BAR0 %#x (%d bytes) is outside the mapped UAR %v", r.BFRegOffset, n, c.mmio))
		}
	}
	if r.HasMaxInline && r.MaxInline < qp.sq.maxInl {
		// The device granted less inline room than the WQE has (over
		// uverbs, the only report of its inline limit): the QP takes
		// that much, as the device fails a longer inline segment.
		qp.sq.maxInl = max(r.MaxInline, 0)
		qp.cap.MaxInline = qp.sq.maxInl
	}

	qp.qpn, qp.bfReg, qp.bfBufSize = r.QPN, r.BFRegOffset, uint64(r.BFBufSize)
	qp.bfOff = c.bfHalf(r.BFRegOffset)
	qp.state = QPStateReset
	qp.refreshFast()
	pd.refs++
	qp.sendCQ.refs++
	qp.recvCQ.refs++
	if qp.srq != nil {
		qp.srq.refs++
	}
	c.qps[qp.qpn] = qp
	c.kevAdd('q', qp.qpn, qp)
	return qp, nil
}

// sizeSQ is mlx5_calc_send_wqe + mlx5_calc_sq_size.
func (qp *QP) sizeSQ(cp QPCap, a *mlx5.DeviceAttr) error {
	switch {
	case cp.MaxSendWR < 0 || cp.MaxSendSGE < 0 || cp.MaxInline < 0:
		return detail(ErrInvalidArg, "negative send capacity %+v", cp)
	case cp.MaxSendWR > a.MaxQPWR:
		return detail(ErrInvalidArg, "max_send_wr %d > device %d", cp.MaxSendWR, a.MaxQPWR)
	case cp.MaxSendSGE > a.MaxSGE:
		return detail(ErrInvalidArg, "max_send_sge %d > device %d", cp.MaxSendSGE, a.MaxSGE)
	case cp.MaxInline > a.MaxInline:
		return detail(ErrInvalidArg, "max_inline_data %d > device %d", cp.MaxInline, a.MaxInline)
	}
	qp.cap.MaxSendSGE = cp.MaxSendSGE
	qp.sq.maxGS = cp.MaxSendSGE
	if cp.MaxSendWR == 0 {
		return nil
	}
	overhead := sqOverhead(qp.typ)
	size := overhead + cp.MaxSendSGE*mlx5.DataSegSize
	if cp.MaxInline > 0 {
		size = max(size, overhead+mlx5.InlineSegSize(cp.MaxInline))
	}
	if size > a.MaxSQDescSz {
		return detail(ErrInvalidArg, "send WQE of %d B for the caps > device max %d", size, a.MaxSQDescSz)
	}
	wqeSize := (size + mlx5.WQEBBSize - 1) &^ (mlx5.WQEBBSize - 1)
	wqSize := roundupPow2(cp.MaxSendWR * wqeSize)
	cnt := wqSize / mlx5.WQEBBSize
	if cnt > a.MaxQPWR {
		return detail(ErrInvalidArg, "send queue of %d WQEBBs > device max %d", cnt, a.MaxQPWR)
	}
	qp.sq.cnt = uint32(cnt)
	qp.sq.maxPost = uint32(wqSize / wqeSize)
	// libmlx5 reports (and allows) all the room a WQE of this size has
	// (mlx5_calc_sq_size); it knows no device inline limit. softnic's
	// device has one (DeviceAttr.MaxInline) and fails a longer inline
	// segment with LOC_LEN_ERR, so the provider reports and allows the
	// smaller of the two: a deviation only when the room is larger.
	//
	// A UD WQE with no room past the datagram segment (no SGEs, no inline)
	// leaves -4 bytes: libmlx5 stores that (reporting 2^32-4 through the
	// unsigned cap and refusing every inline post); the provider reports 0.
	qp.sq.maxInl = max(0, min(wqeSize-overhead-mlx5.InlineHdrSize, a.MaxInline))
	qp.sq.wrid = make([]uint64, roundupPow2(int(qp.sq.maxPost)))
	qp.sq.ctr = make([]uint16, len(qp.sq.wrid))
	qp.cap.MaxSendWR = int(qp.sq.maxPost)
	qp.cap.MaxInline = qp.sq.maxInl
	return nil
}

// sizeRQ is mlx5_calc_rq_size.
func (qp *QP) sizeRQ(cp QPCap, a *mlx5.DeviceAttr) error {
	switch {
	case cp.MaxRecvWR < 0 || cp.MaxRecvSGE < 0:
		return detail(ErrInvalidArg, "negative receive capacity %+v", cp)
	case cp.MaxRecvWR > a.MaxQPWR:
		return detail(ErrInvalidArg, "max_recv_wr %d > device %d", cp.MaxRecvWR, a.MaxQPWR)
	case cp.MaxRecvSGE > a.MaxSGE:
		return detail(ErrInvalidArg, "max_recv_sge %d > device %d", cp.MaxRecvSGE, a.MaxSGE)
	}
	if cp.MaxRecvWR == 0 {
		return nil
	}
	stride := mlx5.RecvWQEStride(cp.MaxRecvSGE)
	wqSize := max(roundupPow2(cp.MaxRecvWR)*stride, mlx5.WQEBBSize)
	cnt := wqSize / stride
	shift := 0
	for 1<<shift < stride {
		shift++
	}
	qp.rq.cnt, qp.rq.stride, qp.rq.shift = uint32(cnt), stride, shift
	qp.rq.maxGS = stride / mlx5.DataSegSize
	qp.rq.wrid = make([]uint64, cnt)
	qp.cap.MaxRecvWR = cnt
	qp.cap.MaxRecvSGE = qp.rq.maxGS
	return nil
}

// QPN is the QP number.
func (qp *QP) QPN() uint32 {
	if qp == nil {
		return 0
	}
	return qp.qpn
}

// Type is the QP's service type.
func (qp *QP) Type() QPType {
	if qp == nil {
		return 0
	}
	return qp.typ
}

// SRQ is the shared receive queue the QP is attached to (nil: none).
func (qp *QP) SRQ() *SRQ {
	if qp == nil {
		return nil
	}
	return qp.srq
}

// Cap is the actual capacity (what libmlx5 writes back into ibv_qp_cap).
func (qp *QP) Cap() QPCap {
	if qp == nil {
		return QPCap{}
	}
	return qp.cap
}

// State is the state the provider last moved the QP to. (The device may
// have moved it to ERR since; QueryState asks the device.)
func (qp *QP) State() QPState {
	if qp == nil {
		return 0
	}
	return qp.state
}

// QueryState asks the device for the QP's current state (QUERY_QP) and
// records it.
func (qp *QP) QueryState() (QPState, error) {
	a, _, err := qp.Query()
	return a.QPState, err
}

// Query is ibv_query_qp: the QP's attributes as the device answers
// QUERY_QP (the state recorded as QueryState does). AccessFlags holds the
// remote bits only and AV is zero until RTR gave a path, as mlx5_ib
// answers; the RQ's size is the device's, in the returned QPCap, whose
// send side is the provider's own (libmlx5 puts back its max_send_wr,
// max_send_sge and max_inline_data the same way).
func (qp *QP) Query() (QPAttr, QPCap, error) {
	if qp == nil || qp.ctx == nil {
		return QPAttr{}, QPCap{}, opErr("query_qp", 0, ErrClosed)
	}
	if qp.dead {
		return QPAttr{}, QPCap{}, opErr("query_qp", qp.qpn, ErrClosed)
	}
	a, err := qp.ctx.ctl.QueryQP(qp.qpn)
	if err != nil {
		return QPAttr{}, QPCap{}, opErr("query_qp", qp.qpn, err)
	}
	qp.state = a.State
	qp.refreshFast()
	c := qp.Cap()
	c.MaxRecvWR, c.MaxRecvSGE = int(a.MaxRecvWR), int(a.MaxRecvSGE)
	// ibv_ah_attr (and ib_uverbs_qp_dest) carries neither the MAC the
	// device resolved nor a UDP source port: the path as the verbs see it.
	a.AV.DMAC, a.AV.UDPSPort = [6]byte{}, 0
	return QPAttr{QPState: a.State, CurQPState: a.State, PathMTU: a.PathMTU, DestQPN: a.DestQPN, RQPSN: a.RQPSN, SQPSN: a.SQPSN,
		AccessFlags: Access(a.AccessFlags), PKeyIndex: a.PKeyIndex, Port: a.Port, QKey: a.QKey, AV: a.AV,
		MaxRdAtomic: a.MaxRdAtomic, MaxDestRdAtomic: a.MaxDestRdAtomic, MinRNRTimer: a.MinRNRTimer,
		Timeout: a.Timeout, RetryCnt: a.RetryCnt, RNRRetry: a.RNRRetry}, c, nil
}

// markDead retires the QP: every post is refused from here on, the
// fast path's included.
func (qp *QP) markDead() {
	qp.dead = true
	qp.refreshFast()
}

// refreshFast recomputes fast after anything it depends on changed
// (state, death, injected bugs, BlueFlame on or off), and with it the
// fast path's BlueFlame and message size limits.
func (qp *QP) refreshFast() {
	qp.fastBF, qp.fastMsg = 0, qp.ctx.maxMsg
	if qp.bfOn {
		qp.fastBF = qp.bfBufSize
	}
	qp.fast = !qp.dead && qp.ctx.link == nil && qp.rx == nil && qp.bug.set == 0 &&
		(qp.typ == QPTypeRC || qp.typ == QPTypeUC) &&
		qp.state != QPStateReset && qp.state != QPStateInit && qp.state != QPStateRTR
}

// SetBlueFlame allows (true, the default) or forbids BlueFlame copies for
// this QP; forbidden, every post rings the 8-byte doorbell, as with
// MLX5_SHUT_UP_BF.
func (qp *QP) SetBlueFlame(on bool) {
	if qp == nil || qp.ctx == nil {
		return
	}
	qp.bfOn = on
	qp.refreshFast()
}

// Destroy destroys the QP (ibv_destroy_qp): DESTROY_QP, then, as libmlx5
// does, removes its not yet polled CQEs from both CQs. It fails with
// ErrBusy, the QP untouched and still usable, while asynchronous events
// GetAsyncEvent returned for the QP are not acknowledged
// (AckAsyncEvent): ibv_destroy_qp waits for those acknowledgements, for
// ever if the application never gives them; here the wait is the
// caller's.
func (qp *QP) Destroy() error {
	if qp.gone() {
		return opErr("destroy_qp", 0, ErrClosed)
	}
	if n := qp.asyncUnacked; n > 0 {
		return opErr("destroy_qp", qp.qpn, detail(ErrBusy, "qp %#x has %d asynchronous events not acknowledged (AckAsyncEvent)", qp.qpn, n))
	}
	if qp.rx != nil {
		return qp.kernDestroy()
	}
	c := qp.ctx
	uh := c.kevHandle('q', qp.qpn)
	async := c.asyncPending()
	if err := c.ctl.DestroyQP(qp.qpn); err != nil {
		return opErr("destroy_qp", qp.qpn, err)
	}
	c.asyncGone(async, "qp", qp.qpn)
	c.kevDel(uh)
	qp.recvCQ.clean(qp.qpn, qp.srq)
	if qp.sendCQ != qp.recvCQ {
		qp.sendCQ.clean(qp.qpn, qp.srq)
	}
	qp.markDead()
	delete(c.qps, qp.qpn)
	qp.pd.refs--
	qp.sendCQ.refs--
	qp.recvCQ.refs--
	if qp.srq != nil {
		qp.srq.refs--
	}
	for _, cq := range [2]*CQ{qp.sendCQ, qp.recvCQ} {
		if cq.last == qp {
			cq.last = nil
		}
	}
	_ = c.mem.Free(qp.dbrAddr)
	_ = c.mem.Free(qp.bufAddr)
	qp.sq.buf, qp.rq.buf, qp.dbr = nil, nil, nil
	return nil
}

// clean removes the CQEs of qpn that software has not polled yet, sliding
// older entries up over them (libmlx5 __mlx5_cq_clean), and advances the
// consumer index by the number removed. If the QP takes its receives from
// srq, the SRQ WQEs its removed responder CQEs name go back to the SRQ's
// free list (free_res_cqe).
func (cq *CQ) clean(qpn uint32, srq *SRQ) {
	if cq.dead {
		return
	}
	prod := cq.ci
	for cq.readyAt(prod) && prod != cq.ci+cq.nent-1 {
		prod++
	}
	var freed uint32
	for int32(prod-1-cq.ci) >= 0 {
		prod--
		src := cq.entry(prod)
		if src.QPN() == qpn {
			if srq != nil && isResponder(src.Opcode()) {
				srq.free(src.WQECounter())
			}
			freed++
			continue
		}
		if freed > 0 {
			dst := cq.entry(prod + freed)
			owner := dst[mlx5.CQEOffOpOwn] & 1
			copy(dst, src)
			dst[mlx5.CQEOffOpOwn] = dst[mlx5.CQEOffOpOwn]&^1 | owner
		}
	}
	if freed > 0 {
		cq.ci += freed
		cq.dbr.SetWord(mlx5.DBRSetCI, cq.ci&0xffffff)
	}
}

// isResponder reports a responder CQE opcode (libmlx5 is_responder).
func isResponder(op mlx5.CQEOpcode) bool {
	switch op {
	case mlx5.CQERespWrImm, mlx5.CQERespSend, mlx5.CQERespSendImm, mlx5.CQERespSendInv, mlx5.CQERespErr:
		return true
	}
	return false
}

// readyAt reports whether software owns the CQE at index ci.
func (cq *CQ) readyAt(ci uint32) bool { return mlx5.CQEOwnedBySW(cq.entry(ci), ci, cq.nent) }

// SQProducer is the SQ producer counter (cur_post, in WQEBBs) as the
// doorbell record carries it.
func (qp *QP) SQProducer() uint16 {
	if qp == nil {
		return 0
	}
	return uint16(qp.sq.curPost)
}

// SQInfo locates the QP's queues and doorbells (for traces and tests).
type SQInfo struct {
	Addr        uint64 // first WQEBB of the SQ
	WQEBBs      int    // SQ size in WQEBBs
	RQAddr      uint64 // first RQ WQE (= the QP buffer)
	RQWQEs      int    // RQ size in WQEs
	RQStride    int    // bytes per RQ WQE
	DBRAddr     uint64 // doorbell record: [0] RQ head, [1] SQ cur_post
	BFRegOffset uint64 // BAR0 offset of the bfreg
	BFBufSize   int    // one BlueFlame buffer (0: doorbell only)
	BFOffset    int    // the buffer the next post uses (0 or BFBufSize)
}

// bfHalf returns the cell that holds bfreg reg's current BlueFlame
// buffer (0 or its size), shared by every QP of the context on that
// bfreg. libmlx5 toggles bf->offset per bfreg, under the bfreg's lock
// when QPs share it; a Context is not for concurrent use, so no lock.
// A QP that kept its own toggle wrote the half another QP had just
// written when the two shared a bfreg (QPs 17 on at 8 UARs).
func (c *Context) bfHalf(reg uint64) *uint64 {
	if h := c.bfHalves[reg]; h != nil {
		return h
	}
	if c.bfHalves == nil {
		c.bfHalves = map[uint64]*uint64{}
	}
	h := new(uint64)
	c.bfHalves[reg] = h
	return h
}

// bfOffset is the buffer the QP's next BlueFlame write goes to.
func (qp *QP) bfOffset() uint64 {
	if qp.bfOff == nil {
		return 0
	}
	return *qp.bfOff
}

// SQInfo returns where the QP's queues live.
func (qp *QP) SQInfo() SQInfo {
	if qp == nil {
		return SQInfo{}
	}
	return SQInfo{Addr: qp.sq.addr, WQEBBs: int(qp.sq.cnt), RQAddr: qp.rq.addr, RQWQEs: int(qp.rq.cnt),
		RQStride: qp.rq.stride, DBRAddr: qp.dbrAddr, BFRegOffset: qp.bfReg, BFBufSize: int(qp.bfBufSize),
		BFOffset: int(qp.bfOffset())}
}

// WQE returns a copy of the posted send WQE whose first WQEBB counter is
// index (ctrl wqe_index), ds*16 bytes read modulo the ring end. It fails if
// that WQE is not among the last SQ-size WQEBBs posted.
func (qp *QP) WQE(index uint16) ([]byte, error) {
	const op = "wqe"
	if qp == nil || qp.ctx == nil {
		return nil, opErr(op, 0, ErrClosed)
	}
	if qp.dead {
		return nil, opErr(op, qp.qpn, ErrClosed)
	}
	sq := &qp.sq
	if sq.cnt == 0 {
		return nil, opErr(op, qp.qpn, detail(ErrInvalidArg, "QP has no send queue"))
	}
	if back := uint32(uint16(sq.curPost) - index); back == 0 || back > sq.cnt {
		return nil, opErr(op, qp.qpn, detail(ErrInvalidArg, "WQE %#04x not in the ring (producer %#04x)", index, uint16(sq.curPost)))
	}
	off := int(uint32(index)&(sq.cnt-1)) * mlx5.WQEBBSize
	ctrl := mlx5.CtrlSeg(sq.buf[off : off+mlx5.CtrlSegSize])
	if ctrl.WQEIndex() != index || ctrl.DS() == 0 {
		return nil, opErr(op, qp.qpn, detail(ErrInvalidArg, "no WQE starts at %#04x (slot holds index %#04x ds %d)",
			index, ctrl.WQEIndex(), ctrl.DS()))
	}
	out := make([]byte, int(ctrl.DS())*mlx5.DSSize)
	ringRead(sq.buf, off, out)
	return out, nil
}

// ringRead copies len(dst) bytes of ring from off, wrapping at its end.
func ringRead(ring []byte, off int, dst []byte) {
	n := copy(dst, ring[off:])
	for n < len(dst) {
		n += copy(dst[n:], ring)
	}
}

// windowCoverer is an MMIO port that knows which BAR0 offsets it can
// store to (kverbs.UAR); CreateQP checks the QP's bfreg against it.
type windowCoverer interface {
	Covers(off uint64, n int) bool
}
