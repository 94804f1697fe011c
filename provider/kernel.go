package provider

import (
	"errors"
	"fmt"
	"strings"

	"github.com/softnic/softnic/internal/kverbs"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/shm"
	"github.com/softnic/softnic/uverbs"
)

// ErrNoDevice: no RDMA device of the name asked for (no
// /sys/class/infiniband_verbs, no /dev/infiniband/uverbsN, or no device of
// that name among them).
var ErrNoDevice = kverbs.ErrNoDevice

// KernelOptions shape a context on a kernel device.
type KernelOptions struct {
	// MemSize is the host memory (an anonymous shared mapping, never the
	// Go heap) the context's buffers come from (default 32 MiB).
	MemSize int
	// Root is where devices are looked for (default /sys and
	// /dev/infiniband).
	Root kverbs.Root
}

// OpenDevice opens a device by name: softnic<n> is the emulated NIC
// served by softnic serve (Dial, with o), any other name (rxe0, mlx5_0)
// a kernel device (OpenKernel).
func OpenDevice(name string, o DialOptions) (*Context, error) {
	if strings.HasPrefix(name, "softnic") {
		return Dial(name, o)
	}
	return OpenKernel(name, KernelOptions{MemSize: o.MemSize})
}

// kernCtx is what a context on a kernel device adds: the uverbs fd and
// the driver's control.
type kernCtx struct {
	dev *kverbs.Dev
	rxe *rxeControl
}

// OpenKernel opens the kernel RDMA device name through
// /dev/infiniband/uverbsN. rxe (Soft-RoCE) is driven: GET_CONTEXT (with
// its async-event fd), QUERY_DEVICE, QUERY_PORT and the GID table, PDs,
// MRs on the context's mmap'd memory, CQs and RC QPs whose rings the
// kernel maps. An mlx5 device is found but not yet driven
// (ErrNotSupported). No such device is ErrNoDevice.
func OpenKernel(name string, o KernelOptions) (*Context, error) {
	const op = "open"
	d, err := o.Root.Find(name)
	if err != nil {
		if errors.Is(err, kverbs.ErrABI) {
			return nil, opErr(op, 0, fmt.Errorf("%w: %w", ErrNotSupported, err))
		}
		return nil, opErr(op, 0, err)
	}
	switch d.Driver {
	case kverbs.DriverMLX5:
		return openMLX5(d, o)
	case kverbs.DriverRXE:
	default:
		return nil, opErr(op, 0, detail(ErrNotSupported, "%s: no kernel backend for driver %v", name, d.Driver))
	}
	dev, err := kverbs.Open(d)
	if err != nil {
		return nil, opErr(op, 0, err)
	}
	if o.MemSize <= 0 {
		o.MemSize = 32 << 20
	}
	mem, err := shm.New("softnic-"+name, o.MemSize, 0)
	if err != nil {
		_ = dev.Close()
		return nil, opErr(op, 0, detail(ErrNoMemory, "%v", err))
	}
	ctl := newRXEControl(dev, mem)
	fail := func(step string, err error) (*Context, error) {
		_ = ctl.Close()
		return nil, opErr(step, 0, err)
	}
	uctx, err := ctl.GetContext()
	if err != nil {
		return fail("get_context", err)
	}
	attr, err := ctl.QueryDevice()
	if err != nil {
		return fail("query_device", err)
	}
	attr.MaxInline = rxeMaxInline
	// librxe prints fw_ver as %d.%d.%d (libmlx5: %d.%d.%04d, what
	// UverbsControl formats).
	var fw [3]int
	if _, err := fmt.Sscanf(attr.FWVersion, "%d.%d.%d", &fw[0], &fw[1], &fw[2]); err == nil {
		attr.FWVersion = fmt.Sprintf("%d.%d.%d", fw[0], fw[1], fw[2])
	}
	c := &Context{
		name: name, ctl: ctl, mem: mem, attr: attr, uctx: uctx,
		qps: map[uint32]*QP{}, cqs: map[uint32]*CQ{}, pds: map[uint32]*PD{}, mrs: map[uint32]*MR{},
		srqs: map[uint32]*SRQ{}, ahs: map[*AH]struct{}{},
		kern: &kernCtx{dev: dev, rxe: ctl},
		kev:  newKernEvents(ctl.createCompChannel, ctl.async),
	}
	c.maxMsg = maxMsgSize(&attr)
	return c, nil
}

// Kernel reports whether the context is on a kernel device, and its
// driver ("rxe", "mlx5").
func (c *Context) Kernel() (driver string, ok bool) {
	switch {
	case c == nil:
		return "", false
	case c.kern != nil:
		return c.kern.dev.Info.Driver.String(), true
	case c.ctl != nil:
		if m, isMLX5 := c.ctl.(*mlx5Kernel); isMLX5 {
			return m.dev.Info.Driver.String(), true
		}
	}
	return "", false
}

// kernCreateCQ is CREATE_CQ on a kernel device: the kernel sizes and
// owns the ring, which is mapped from the uverbs fd.
func (c *Context) kernCreateCQ(entries int, ch *CompChannel) (*CQ, error) {
	const op = "create_cq"
	if entries <= 0 || (c.attr.MaxCQE > 0 && entries > c.attr.MaxCQE) {
		return nil, opErr(op, 0, detail(ErrInvalidArg, "%d entries (device max %d)", entries, c.attr.MaxCQE))
	}
	chFD := int32(uverbs.NoCompChannel)
	if ch != nil {
		if ch.dead || ch.ctx != c || ch.kfd == nil {
			return nil, opErr(op, 0, detail(ErrInvalidArg, "completion channel closed or of another context"))
		}
		chFD = int32(ch.kfd.Fd())
	}
	r := c.kern.rxe
	uh := c.kev.handle()
	resp, mi, err := r.createCQ(entries, uh, chFD)
	if err != nil {
		return nil, opErr(op, 0, err)
	}
	q, err := c.kernMap(mi, rxeWCSize)
	if err != nil {
		_ = r.DestroyCQ(resp.CQHandle)
		return nil, opErr(op, 0, err)
	}
	cq := &CQ{ctx: c, cqn: resp.CQHandle, nent: q.mask + 1, rx: &rxeCQ{q: q, uh: uh}, channel: ch}
	c.cqs[cq.cqn] = cq
	c.kev.cqs[uh] = cq
	return cq, nil
}

// kernMap maps one rxe queue and checks its header.
func (c *Context) kernMap(mi uverbs.RXEMmapInfo, minElem int) (*rxeQueue, error) {
	if mi.Length == 0 || mi.Length > 1<<30 {
		return nil, detail(ErrNotSupported, "rxe mmap info: %d bytes at %#x", mi.Length, mi.Offset)
	}
	mem, err := c.kern.dev.Mmap(mi.Offset, int(mi.Length), kverbs.ProtRead|kverbs.ProtWrite)
	if err != nil {
		return nil, detail(ErrNoMemory, "%v", err)
	}
	q, err := parseRXEQueue(mem, minElem)
	if err != nil {
		_ = kverbs.Munmap(mem)
		return nil, err
	}
	return q, nil
}

func (cq *CQ) kernDestroy() error {
	if cq.refs > 0 {
		return opErr("destroy_cq", 0, detail(ErrBusy, "cq %#x is used by %d QPs", cq.cqn, cq.refs))
	}
	if err := cq.ctx.kern.rxe.DestroyCQ(cq.cqn); err != nil {
		return opErr("destroy_cq", 0, err)
	}
	cq.dead = true
	delete(cq.ctx.cqs, cq.cqn)
	delete(cq.ctx.kev.cqs, cq.rx.uh)
	_ = kverbs.Munmap(cq.rx.q.mem)
	return nil
}

// kernCreateQP is CREATE_QP on a kernel device (RC and UC; rxe sizes the
// rings from the caps and returns what it made).
func (c *Context) kernCreateQP(pd *PD, attr QPInitAttr) (*QP, error) {
	const op = "create_qp"
	switch {
	case pd.gone() || pd.ctx != c:
		return nil, opErr(op, 0, detail(ErrInvalidArg, "PD missing, destroyed or from another context"))
	case attr.Type != QPTypeRC && attr.Type != QPTypeUC && attr.Type != QPTypeUD:
		return nil, opErr(op, 0, detail(ErrNotSupported, "QP type %d on rxe (RC, UC and UD)", attr.Type))
	case attr.SendCQ.gone() || attr.SendCQ.ctx != c:
		return nil, opErr(op, 0, detail(ErrInvalidArg, "send CQ missing, destroyed or from another context"))
	case attr.RecvCQ.gone() || attr.RecvCQ.ctx != c:
		return nil, opErr(op, 0, detail(ErrInvalidArg, "receive CQ missing, destroyed or from another context"))
	case attr.SRQ != nil && (attr.SRQ.dead || attr.SRQ.ctx != c || attr.SRQ.rx == nil):
		return nil, opErr(op, 0, detail(ErrInvalidArg, "SRQ destroyed or from another context"))
	}
	cp := attr.Cap
	// The same classes as the mlx5 sizing (sizeSQ, sizeRQ): ErrInvalidArg.
	maxSGE := min(c.attr.MaxSGE, rxeMaxSGE)
	switch {
	case cp.MaxSendWR < 0 || cp.MaxRecvWR < 0 || cp.MaxSendWR > c.attr.MaxQPWR || cp.MaxRecvWR > c.attr.MaxQPWR:
		return nil, opErr(op, 0, detail(ErrInvalidArg, "%d send / %d receive WRs (device max %d)", cp.MaxSendWR, cp.MaxRecvWR, c.attr.MaxQPWR))
	case cp.MaxSendSGE < 0 || cp.MaxRecvSGE < 0 || cp.MaxSendSGE > maxSGE || cp.MaxRecvSGE > maxSGE:
		return nil, opErr(op, 0, detail(ErrInvalidArg, "%d send / %d receive SGEs (device max %d)", cp.MaxSendSGE, cp.MaxRecvSGE, maxSGE))
	case cp.MaxInline < 0 || cp.MaxInline > rxeMaxInline:
		return nil, opErr(op, 0, detail(ErrInvalidArg, "max_inline_data %d (rxe max %d)", cp.MaxInline, rxeMaxInline))
	}
	typ, _ := uverbs.QPTypeFromMLX5(attr.Type)
	core := uverbs.CreateQP{PDHandle: pd.pdn, SendCQHandle: attr.SendCQ.cqn, RecvCQHandle: attr.RecvCQ.cqn,
		MaxSendWR: uint32(cp.MaxSendWR), MaxRecvWR: uint32(cp.MaxRecvWR), MaxSendSGE: uint32(cp.MaxSendSGE),
		MaxRecvSGE: uint32(cp.MaxRecvSGE), MaxInlineData: uint32(cp.MaxInline), QPType: typ}
	if attr.SigAll {
		core.SQSigAll = 1
	}
	if attr.SRQ != nil {
		core.SRQHandle, core.IsSRQ = attr.SRQ.srqn, 1
		core.MaxRecvWR, core.MaxRecvSGE = 0, 0
	}
	r := c.kern.rxe
	uh := c.kev.handle()
	core.UserHandle = uh
	resp, mi, err := r.createQP(core)
	if err != nil {
		return nil, opErr(op, 0, err)
	}
	undo := func(err error, maps ...*rxeQueue) (*QP, error) {
		for _, q := range maps {
			if q != nil {
				_ = kverbs.Munmap(q.mem)
			}
		}
		_ = r.DestroyQP(resp.QPN)
		return nil, opErr(op, resp.QPN, err)
	}
	got := QPCap{MaxSendWR: int(resp.MaxSendWR), MaxRecvWR: int(resp.MaxRecvWR), MaxSendSGE: int(resp.MaxSendSGE),
		MaxRecvSGE: int(resp.MaxRecvSGE), MaxInline: int(resp.MaxInlineData)}
	sq, err := c.kernMap(mi.SQMI, rxeSendWQEBase+max(got.MaxSendSGE*rxeSGESize, got.MaxInline))
	if err != nil {
		return undo(err)
	}
	var rq *rxeQueue
	if attr.SRQ == nil {
		if rq, err = c.kernMap(mi.RQMI, rxeRecvWQEBase+got.MaxRecvSGE*rxeSGESize); err != nil {
			return undo(err, sq)
		}
	} else {
		got.MaxRecvWR, got.MaxRecvSGE = 0, 0
	}
	db, err := c.kern.dev.NewDoorbell(resp.QPHandle)
	if err != nil {
		return undo(detail(ErrInvalidArg, "%v", err), sq, rq)
	}
	qp := &QP{ctx: c, pd: pd, qpn: resp.QPN, typ: attr.Type, sendCQ: attr.SendCQ, recvCQ: attr.RecvCQ, srq: attr.SRQ,
		state: QPStateReset, sigAll: attr.SigAll, cap: got, bfOn: false, rx: &rxeQP{sq: sq, rq: rq, db: db, uh: uh}}
	c.qps[qp.qpn] = qp
	c.kev.qps[uh] = qp
	pd.refs++
	attr.SendCQ.refs++
	attr.RecvCQ.refs++
	if attr.SRQ != nil {
		attr.SRQ.refs++
	}
	return qp, nil
}

func (qp *QP) kernDestroy() error {
	c := qp.ctx
	if err := c.kern.rxe.DestroyQP(qp.qpn); err != nil {
		return opErr("destroy_qp", qp.qpn, err)
	}
	qp.dead = true
	delete(c.qps, qp.qpn)
	delete(c.kev.qps, qp.rx.uh)
	qp.pd.refs--
	qp.sendCQ.refs--
	qp.recvCQ.refs--
	if qp.srq != nil {
		qp.srq.refs--
	}
	_ = kverbs.Munmap(qp.rx.sq.mem)
	if qp.rx.rq != nil {
		_ = kverbs.Munmap(qp.rx.rq.mem)
	}
	return nil
}

// rxeControl is the Context's control: the commands without driver data
// are UverbsControl's, the rest its own.
var _ mlx5.Control = (*rxeControl)(nil)
