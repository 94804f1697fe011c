package provider

import (
	"github.com/softnic/softnic/mlx5"
)

// SRQInitAttr describes a shared receive queue to create
// (struct ibv_srq_init_attr's attr).
type SRQInitAttr struct {
	MaxWR  int // receives that may be outstanding, at least 1
	MaxSGE int // scatter entries per receive
	// SRQLimit arms the limit event at creation (ibv_create_srq ignores
	// srq_limit; here a non-zero value is passed to CREATE_SRQ, the same
	// as a Modify with SRQAttrLimit right after). 0: not armed.
	SRQLimit uint32
}

// SRQAttr are an SRQ's attributes (struct ibv_srq_attr).
type SRQAttr struct {
	MaxWR    int
	MaxSGE   int
	SRQLimit uint32
}

// SRQ attribute mask bits for SRQ.Modify (enum ibv_srq_attr_mask).
const (
	SRQAttrMaxWR = mlx5.SRQAttrMaxWR
	SRQAttrLimit = mlx5.SRQAttrLimit
)

// SRQ is a shared receive queue (struct mlx5_srq).
//
// Its ring holds cnt WQEs of stride bytes: a 16-byte next segment
// (mlx5.SRQNextSeg) and maxGS data segments. Free WQEs form a list linked
// by next_wqe_index, kept as libmlx5 kept it before its 2023 rework
// (srq.c up to rdma-core v47, without the ODP wait queue): at creation WQE
// i links to i+1, head = 0 and tail = cnt-1; a post fills the WQE at head
// and moves head to its next; a completed WQE is linked after tail and
// becomes the tail (mlx5_free_srq_wqe). head == tail means full, so one
// WQE is always spare and cnt = roundup_pow2(MaxWR+1). The doorbell
// record's word 0 is BE32 of the 16-bit count of WQEs posted.
type SRQ struct {
	ctx     *Context
	pd      *PD
	ctl     mlx5.SRQControl
	srqn    uint32
	buf     []byte
	addr    uint64
	dbr     mlx5.DBRec
	dbrAddr uint64
	cnt     uint32 // WQEs, a power of two
	stride  int
	shift   int
	maxGS   int
	head    uint16 // next WQE to post
	tail    uint16 // last free WQE (never posted while it is the tail)
	counter uint16 // WQEs posted (doorbell record)
	wrid    []uint64
	posted  []bool // per WQE: posted and not yet completed
	busy    int    // WQEs posted and not yet completed
	refs    int    // QPs attached
	dead    bool

	rx *rxeQueue // a kernel rxe SRQ's ring (kernel_srq.go); nil for mlx5
	uh uint64    // its user_handle for the kernel's events

	// asyncUnacked: asynchronous events GetAsyncEvent returned for the
	// SRQ and AckAsyncEvent has not acknowledged (Destroy refuses while
	// any).
	asyncUnacked uint32
}

// CreateSRQ creates a shared receive queue (ibv_create_srq). The device's
// control object must implement mlx5.SRQControl (ErrNotSupported
// otherwise). The sizes are libmlx5's (mlx5_alloc_srq_buf without a wait
// queue): stride = roundup_pow2(max(32, 16 + 16*MaxSGE)), every data
// segment that fits is usable (the actual MaxSGE may be larger), and
// roundup_pow2(MaxWR+1) WQEs of which MaxWR = count-1 may be posted.
func (pd *PD) CreateSRQ(attr SRQInitAttr) (*SRQ, error) {
	const op = "create_srq"
	if pd.gone() || pd.ctx.closed {
		return nil, opErr(op, 0, ErrClosed)
	}
	c := pd.ctx
	if c.kern != nil {
		return pd.kernCreateSRQ(attr)
	}
	ctl, ok := c.ctl.(mlx5.SRQControl)
	if !ok {
		return nil, opErr(op, 0, detail(ErrNotSupported, "device %q has no shared receive queues", c.name))
	}
	a := &c.attr
	switch {
	case attr.MaxWR < 1 || attr.MaxWR >= a.MaxQPWR:
		return nil, opErr(op, 0, detail(ErrInvalidArg, "max_wr %d (1..%d)", attr.MaxWR, a.MaxQPWR-1))
	case attr.MaxSGE < 0 || attr.MaxSGE > srqMaxSGE(a):
		return nil, opErr(op, 0, detail(ErrInvalidArg, "max_sge %d (0..%d)", attr.MaxSGE, srqMaxSGE(a)))
	}
	stride := mlx5.SRQStride(attr.MaxSGE)
	cnt := roundupPow2(attr.MaxWR + 1)
	switch {
	case cnt > a.MaxQPWR:
		return nil, opErr(op, 0, detail(ErrInvalidArg, "max_wr %d needs %d WQEs > device max %d", attr.MaxWR, cnt, a.MaxQPWR))
	case int(attr.SRQLimit) > cnt-1:
		return nil, opErr(op, 0, detail(ErrInvalidArg, "srq_limit %d > max_wr %d", attr.SRQLimit, cnt-1))
	}
	shift := 0
	for 1<<shift < stride {
		shift++
	}
	size := (cnt*stride + 4095) &^ 4095
	bufAddr, buf, err := c.allocQueueMem("srq buffer", size, 4096)
	if err != nil {
		return nil, opErr(op, 0, err)
	}
	dbrAddr, dbr, err := c.allocQueueMem("srq doorbell record", mlx5.DBRecSize, 64)
	if err != nil {
		_ = c.mem.Free(bufAddr)
		return nil, opErr(op, 0, err)
	}
	s := &SRQ{ctx: c, pd: pd, ctl: ctl, buf: buf[: cnt*stride : cnt*stride], addr: bufAddr, dbr: mlx5.DBRec(dbr),
		dbrAddr: dbrAddr, cnt: uint32(cnt), stride: stride, shift: shift,
		maxGS: mlx5.SRQStrideSGEs(stride), tail: uint16(cnt - 1),
		wrid: make([]uint64, cnt), posted: make([]bool, cnt)}
	// set_srq_buf_ll: every WQE links to the next; where the last one
	// points does not matter (it is the tail).
	clear(s.buf)
	for i := 0; i < cnt-1; i++ {
		s.next(uint16(i)).SetNextWQEIndex(uint16(i + 1))
	}
	s.dbr.SetWord(mlx5.DBRRecv, 0)
	r, err := ctl.CreateSRQ(mlx5.CreateSRQCmd{PDN: pd.pdn, BufAddr: bufAddr, DBAddr: dbrAddr, WQECnt: cnt,
		WQEShift: shift, Limit: attr.SRQLimit})
	if err != nil {
		_ = c.mem.Free(dbrAddr)
		_ = c.mem.Free(bufAddr)
		return nil, opErr(op, 0, err)
	}
	s.srqn = r.SRQN
	pd.refs++
	c.srqs[s.srqn] = s
	c.kevAdd('s', s.srqn, s)
	return s, nil
}

// next is the next segment of WQE i.
func (s *SRQ) next(i uint16) mlx5.SRQNextSeg {
	off := int(i) * s.stride
	return mlx5.SRQNextSeg(s.buf[off : off+mlx5.SRQNextSegSize])
}

// SRQN is the SRQ number.
func (s *SRQ) SRQN() uint32 {
	if s == nil {
		return 0
	}
	return s.srqn
}

// MaxWR is the number of receives that may be outstanding (what libmlx5
// writes back into ibv_srq_init_attr: the WQE count minus the spare).
func (s *SRQ) MaxWR() int {
	if s == nil || s.cnt == 0 {
		return 0
	}
	return int(s.cnt) - 1
}

// MaxSGE is the number of scatter entries a receive may have.
func (s *SRQ) MaxSGE() int {
	if s == nil {
		return 0
	}
	return s.maxGS
}

// Outstanding is the number of receives posted and not yet completed (on
// a kernel rxe SRQ: not yet taken by the kernel from the ring).
func (s *SRQ) Outstanding() int {
	if s == nil {
		return 0
	}
	if s.rx != nil {
		return int(s.rx.count())
	}
	return s.busy
}

// SRQInfo locates an SRQ's ring and doorbell record and shows its free
// list ends (for traces and tests).
type SRQInfo struct {
	Addr    uint64 // WQE 0
	WQEs    int    // ring size in WQEs (one of them always spare)
	Stride  int    // bytes per WQE
	DBRAddr uint64 // word 0: BE32 WQEs posted (16-bit counter)
	Head    uint16 // the WQE the next post fills
	Tail    uint16 // the last free WQE
	Counter uint16 // WQEs posted
}

// Info returns where the SRQ lives and the state of its free list.
func (s *SRQ) Info() SRQInfo {
	if s == nil {
		return SRQInfo{}
	}
	return SRQInfo{Addr: s.addr, WQEs: int(s.cnt), Stride: s.stride, DBRAddr: s.dbrAddr, Head: s.head, Tail: s.tail,
		Counter: s.counter}
}

// WQE returns a copy of WQE slot (next segment and data segments).
func (s *SRQ) WQE(slot int) ([]byte, error) {
	if s.gone() {
		return nil, opErr("srq_wqe", 0, ErrClosed)
	}
	if slot < 0 || slot >= int(s.cnt) {
		return nil, opErr("srq_wqe", 0, detail(ErrInvalidArg, "slot %d of %d", slot, s.cnt))
	}
	out := make([]byte, s.stride)
	copy(out, s.buf[slot*s.stride:])
	return out, nil
}

// PostRecv posts receive work requests to the SRQ (ibv_post_srq_recv) and
// returns the index of the first WR not posted (len(wrs) on success), as
// mlx5_post_srq_recv: each WR fills the WQE at the head of the free list
// (every SGE as given, zero-length ones included, then an InvalidKey
// terminator if not all data segments are used), head moves to its
// next_wqe_index, and after the batch the doorbell record's word 0 gets
// the new count. A WR with too many SGEs (ErrTooManySGE), an SGE of 2^31
// bytes or more (ErrInvalidArg with ErrLocalLength) or a full SRQ
// (ErrQueueFull) stops the batch there.
func (s *SRQ) PostRecv(wrs []RecvWR) (int, error) {
	const op = "post_srq_recv"
	if s.gone() {
		return 0, &OpError{Op: op, Index: 0, Err: ErrClosed}
	}
	if s.rx != nil {
		return rxePostRecvQueue(op, 0, s.rx, s.maxGS, wrs)
	}
	var (
		nreq int
		err  error
	)
	for nreq = 0; nreq < len(wrs); nreq++ {
		wr := &wrs[nreq]
		if len(wr.SGL) > s.maxGS {
			err = &OpError{Op: op, Index: nreq, Err: detail(ErrTooManySGE, "srq %#x: %d SGEs, max %d", s.srqn, len(wr.SGL), s.maxGS)}
			break
		}
		if e := checkLengths(wr.SGL, 0); e != nil {
			err = &OpError{Op: op, Index: nreq, Err: e}
			break
		}
		if s.head == s.tail {
			err = &OpError{Op: op, Index: nreq, Err: detail(ErrQueueFull, "srq %#x: %d receives outstanding, max %d",
				s.srqn, s.busy, s.cnt-1)}
			break
		}
		idx := s.head
		off := int(idx) * s.stride
		slot := s.buf[off : off+s.stride]
		for i := range wr.SGL {
			sge := &wr.SGL[i]
			mlx5.DataSeg(slot[mlx5.SRQNextSegSize+i*mlx5.DataSegSize:]).Encode(
				&mlx5.DataFields{ByteCount: sge.Length, LKey: sge.LKey, Addr: sge.Addr})
		}
		if n := len(wr.SGL); n < s.maxGS {
			mlx5.DataSeg(slot[mlx5.SRQNextSegSize+n*mlx5.DataSegSize:]).Encode(&mlx5.DataFields{LKey: mlx5.InvalidKey})
		}
		s.wrid[idx] = wr.WRID
		s.posted[idx] = true
		s.busy++
		s.head = s.next(idx).NextWQEIndex()
	}
	if nreq > 0 {
		s.counter += uint16(nreq)
		// udma_to_device_barrier(), then the counter.
		s.dbr.SetWord(mlx5.DBRRecv, uint32(s.counter))
	}
	return nreq, err
}

// complete retires the WQE a responder CQE names (wqe_counter = SRQ slot):
// its wr_id, and the WQE goes back to the free list (mlx5_free_srq_wqe).
func (s *SRQ) complete(ctr uint16, wc *WC) error {
	if uint32(ctr) >= s.cnt || !s.posted[ctr] {
		return detail(ErrBadCQE, "responder CQE names SRQ %#x WQE %d, which is not posted", s.srqn, ctr)
	}
	wc.WRID = s.wrid[ctr]
	s.free(ctr)
	return nil
}

// free links WQE ind after the tail and makes it the tail.
func (s *SRQ) free(ind uint16) {
	if uint32(ind) >= s.cnt || !s.posted[ind] {
		return
	}
	s.posted[ind] = false
	s.busy--
	s.next(s.tail).SetNextWQEIndex(ind)
	s.tail = ind
}

// Modify changes SRQ attributes (ibv_modify_srq); mask is a set of
// SRQAttr* bits. Only the limit can change: SRQAttrMaxWR is refused with
// ErrInvalidArg, as mlx5_ib_modify_srq refuses IB_SRQ_MAX_WR (mlx5 cannot
// resize an SRQ), and so is a limit above MaxWR.
func (s *SRQ) Modify(attr SRQAttr, mask uint32) error {
	const op = "modify_srq"
	if s.gone() {
		return opErr(op, 0, ErrClosed)
	}
	switch {
	case mask&SRQAttrMaxWR != 0:
		return opErr(op, 0, detail(ErrInvalidArg, "srq %#x: resizing (max_wr) is not supported by mlx5", s.srqn))
	case mask&^uint32(SRQAttrLimit) != 0:
		return opErr(op, 0, detail(ErrInvalidArg, "srq %#x: unknown attribute mask %#x", s.srqn, mask))
	case mask&SRQAttrLimit != 0 && int(attr.SRQLimit) > s.MaxWR():
		return opErr(op, 0, detail(ErrInvalidArg, "srq %#x: srq_limit %d > max_wr %d", s.srqn, attr.SRQLimit, s.MaxWR()))
	}
	if err := s.ctl.ModifySRQ(mlx5.ModifySRQCmd{SRQN: s.srqn, Mask: mask, MaxWR: attr.MaxWR, Limit: attr.SRQLimit}); err != nil {
		return opErr(op, 0, err)
	}
	return nil
}

// Query asks the device for the SRQ's attributes (ibv_query_srq; the
// device's answer is returned as it is, as libmlx5 returns the kernel's).
func (s *SRQ) Query() (SRQAttr, error) {
	const op = "query_srq"
	if s.gone() {
		return SRQAttr{}, opErr(op, 0, ErrClosed)
	}
	a, err := s.ctl.QuerySRQ(s.srqn)
	if err != nil {
		return SRQAttr{}, opErr(op, 0, err)
	}
	return SRQAttr{MaxWR: a.MaxWR, MaxSGE: a.MaxSGE, SRQLimit: a.Limit}, nil
}

// Destroy destroys the SRQ (ibv_destroy_srq); it fails with ErrBusy while
// QPs are attached to it, and while asynchronous events GetAsyncEvent
// returned for the SRQ are not acknowledged (AckAsyncEvent), as
// ibv_destroy_srq waits for them; the SRQ is then untouched and usable.
func (s *SRQ) Destroy() error {
	const op = "destroy_srq"
	if s.gone() {
		return opErr(op, 0, ErrClosed)
	}
	if n := s.asyncUnacked; n > 0 {
		return opErr(op, 0, detail(ErrBusy, "srq %#x has %d asynchronous events not acknowledged (AckAsyncEvent)", s.srqn, n))
	}
	if s.refs > 0 {
		return opErr(op, 0, detail(ErrBusy, "srq %#x is used by %d QPs", s.srqn, s.refs))
	}
	if s.rx != nil {
		return s.kernDestroy()
	}
	uh := s.ctx.kevHandle('s', s.srqn)
	async := s.ctx.asyncPending()
	if err := s.ctl.DestroySRQ(s.srqn); err != nil {
		return opErr(op, 0, err)
	}
	s.ctx.asyncGone(async, "srq", s.srqn)
	c := s.ctx
	c.kevDel(uh)
	s.dead = true
	delete(c.srqs, s.srqn)
	s.pd.refs--
	_ = c.mem.Free(s.dbrAddr)
	_ = c.mem.Free(s.addr)
	s.buf, s.dbr = nil, nil
	return nil
}

// srqMaxSGE is the device's max_srq_sge, or its max_sge when it reports
// none: an SRQ's receive WQE has no send segments, so mlx5 allows one
// more scatter entry there (31 against 30) and rxe fewer (27 against 32).
func srqMaxSGE(a *mlx5.DeviceAttr) int {
	if a.MaxSRQSGE > 0 {
		return a.MaxSRQSGE
	}
	return a.MaxSGE
}
