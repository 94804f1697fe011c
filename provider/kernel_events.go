package provider

import (
	"errors"
	"time"

	"github.com/softnic/softnic/internal/kverbs"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/uverbs"
)

// Events on a kernel device: a completion channel is the kernel's fd
// (CREATE_COMP_CHANNEL), named in CREATE_CQ; REQ_NOTIFY_CQ arms a CQ; the
// async fd is the one GET_CONTEXT returned. Both fds are real: Fd and
// AsyncFd return them for poll/epoll, and a wait is a poll(2) with the
// timeout in wall-clock time (uverbs.md §5.4 "Notification").

// kernEvents is a kernel context's event bookkeeping, for rxe and mlx5
// alike: objects by the user_handle given to the kernel at creation,
// which is what its event records carry; the channel maker
// (CREATE_COMP_CHANNEL) and the async fd of GET_CONTEXT.
type kernEvents struct {
	nextUH uint64
	cqs    map[uint64]*CQ
	qps    map[uint64]*QP
	srqs   map[uint64]*SRQ
	chans  map[*CompChannel]struct{}

	newChannel func() (int, error)
	async      *kverbs.EventFD
	// reported and acknowledged async events (ibv_ack_async_event)
	asyncReported, asyncAcked uint64
}

func newKernEvents(newChannel func() (int, error), async *kverbs.EventFD) *kernEvents {
	return &kernEvents{cqs: map[uint64]*CQ{}, qps: map[uint64]*QP{}, srqs: map[uint64]*SRQ{},
		chans: map[*CompChannel]struct{}{}, newChannel: newChannel, async: async}
}

func (k *kernEvents) handle() uint64 {
	k.nextUH++
	return k.nextUH
}

func (c *Context) kernCreateCompChannel() (*CompChannel, error) {
	const op = "create_comp_channel"
	fd, err := c.kev.newChannel()
	if err != nil {
		return nil, opErr(op, 0, err)
	}
	ch := &CompChannel{ctx: c, id: uint32(fd), kfd: kverbs.NewEventFD(fd)}
	c.kev.chans[ch] = struct{}{}
	return ch, nil
}

func (ch *CompChannel) kernDestroy() error {
	const op = "destroy_comp_channel"
	c := ch.ctx
	for _, cq := range c.cqs {
		if !cq.dead && cq.channel == ch {
			return opErr(op, 0, detail(ErrBusy, "channel is used by cq %#x", cq.cqn))
		}
	}
	ch.dead = true
	delete(c.kev.chans, ch)
	if err := ch.kfd.Close(); err != nil {
		return opErr(op, 0, detail(ErrInvalidArg, "%v", err))
	}
	return nil
}

// kernReqNotify is REQ_NOTIFY_CQ (rxe enables it: uverbs.md §3.1).
func (cq *CQ) kernReqNotify(solicitedOnly bool) error {
	if err := cq.ctx.kern.rxe.reqNotify(cq.cqn, solicitedOnly); err != nil {
		return opErr("req_notify_cq", 0, err)
	}
	return nil
}

// kernTimeout turns kverbs' timeout into the provider's.
func kernTimeout(op string, err error, timeout time.Duration, what string) error {
	if errors.Is(err, kverbs.ErrTimeout) {
		return opErr(op, 0, detail(ErrTimeout, "no %s within %v", what, timeout))
	}
	return opErr(op, 0, detail(ErrClosed, "%v", err))
}

func (ch *CompChannel) kernGetCQEvent(timeout time.Duration) (*CQ, error) {
	const op = "get_cq_event"
	c := ch.ctx
	deadline := time.Now().Add(timeout) // records of destroyed CQs do not extend it
	for {
		uh, err := ch.kfd.CompEvent(time.Until(deadline))
		if err != nil {
			return nil, kernTimeout(op, err, timeout, "completion event")
		}
		cq := c.kev.cqs[uh]
		if cq.gone() || cq.channel != ch {
			continue // a CQ destroyed meanwhile
		}
		cq.armSN++
		cq.evReported++
		return cq, nil
	}
}

func (c *Context) kernGetAsyncEvent(timeout time.Duration) (AsyncEvent, error) {
	const op = "get_async_event"
	fd := c.kev.async
	if fd == nil {
		return AsyncEvent{}, opErr(op, 0, ErrClosed)
	}
	deadline := time.Now().Add(timeout) // records of destroyed objects do not extend it
	for {
		d, err := fd.AsyncEvent(time.Until(deadline))
		if err != nil {
			return AsyncEvent{}, kernTimeout(op, err, timeout, "asynchronous event")
		}
		a := AsyncEvent{Type: mlx5.EventType(d.EventType)}
		switch eventObject(a.Type) {
		case "cq":
			if a.CQ = c.kev.cqs[d.Element]; a.CQ.gone() {
				continue
			}
			a.Num = a.CQ.cqn
		case "qp":
			if a.QP = c.kev.qps[d.Element]; a.QP.gone() {
				continue
			}
			a.Num = a.QP.qpn
		case "srq":
			if a.SRQ = c.kev.srqs[d.Element]; a.SRQ.gone() {
				continue
			}
			a.Num = a.SRQ.srqn
		case "port":
			a.Port, a.Num = int(d.Element), uint32(d.Element)
		default:
			a.Num = uint32(d.Element)
		}
		c.kev.asyncReported++
		a.reported()
		return a, nil
	}
}

// ---------------------------------------------------------------- commands

// reqNotify is REQ_NOTIFY_CQ of the CQ whose handle is cqn.
func (r *rxeControl) reqNotify(cqn uint32, solicitedOnly bool) error {
	h, err := r.handle("REQ_NOTIFY_CQ", r.cqs, "CQ", cqn)
	if err != nil {
		return err
	}
	req := uverbs.ReqNotifyCQ{CQHandle: h}
	if solicitedOnly {
		req.SolicitedOnly = 1
	}
	_, err = r.write(uverbs.CmdReqNotifyCQ, &req, nil, 0)
	return err
}

// ------------------------------------------- the mlx5 kernel backend's part

// kernelHandles is the control of a kernel mlx5 context (UverbsControl
// with event support): the user_handle of each object, and the completion
// channel the next CREATE_CQ names.
type kernelHandles interface {
	UserHandle(kind byte, num uint32) uint64
	setCQChannel(fd int32)
}

func (u *UverbsControl) setCQChannel(fd int32) { u.cqChannel = fd }

// kevHandle is the user_handle of an mlx5 object of a kernel context (0
// on any other context).
func (c *Context) kevHandle(kind byte, num uint32) uint64 {
	if c.kev == nil || c.kern != nil {
		return 0
	}
	if h, ok := c.ctl.(kernelHandles); ok {
		return h.UserHandle(kind, num)
	}
	return 0
}

// kevAdd files an mlx5 object of a kernel context under its user_handle,
// so that its events find it (rxe's own objects file themselves).
func (c *Context) kevAdd(kind byte, num uint32, obj any) {
	uh := c.kevHandle(kind, num)
	if uh == 0 {
		return
	}
	switch o := obj.(type) {
	case *CQ:
		c.kev.cqs[uh] = o
	case *QP:
		c.kev.qps[uh] = o
	case *SRQ:
		c.kev.srqs[uh] = o
	}
}

// kevDel forgets a destroyed object's user_handle (0: nothing).
func (c *Context) kevDel(uh uint64) {
	if uh == 0 {
		return
	}
	delete(c.kev.cqs, uh)
	delete(c.kev.qps, uh)
	delete(c.kev.srqs, uh)
}

// kevCreateCQ is CreateCQEx on a kernel mlx5 context: the channel is the
// kernel's fd, named in CREATE_CQ itself (the kernel has no later
// attach); ReqNotify arms the CQ in user space, through the UAR, as on the
// emulated NIC.
func (c *Context) kevCreateCQ(a CQInitAttr) (*CQ, error) {
	h, ok := c.ctl.(kernelHandles)
	if !ok {
		return nil, opErr("create_cq", 0, detail(ErrNotSupported, "the device's control names no completion channels"))
	}
	if a.Channel != nil {
		if a.Channel.kfd == nil {
			return nil, opErr("create_cq", 0, detail(ErrInvalidArg, "completion channel of another kind of device"))
		}
		h.setCQChannel(int32(a.Channel.kfd.Fd()))
	}
	cq, err := c.CreateCQ(a.Entries)
	h.setCQChannel(uverbs.NoCompChannel)
	if err != nil {
		return nil, err
	}
	cq.channel = a.Channel
	return cq, nil
}
