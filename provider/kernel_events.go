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

// kernEvents is a kernel context's event bookkeeping: objects by the
// user_handle given to the kernel at creation, which is what its event
// records carry.
type kernEvents struct {
	nextUH uint64
	cqs    map[uint64]*CQ
	qps    map[uint64]*QP
	srqs   map[uint64]*SRQ
	chans  map[*CompChannel]struct{}
}

func (k *kernCtx) handle() uint64 {
	k.ev.nextUH++
	return k.ev.nextUH
}

func (c *Context) kernCreateCompChannel() (*CompChannel, error) {
	const op = "create_comp_channel"
	fd, err := c.kern.rxe.createCompChannel()
	if err != nil {
		return nil, opErr(op, 0, err)
	}
	ch := &CompChannel{ctx: c, id: uint32(fd), kfd: kverbs.NewEventFD(fd)}
	c.kern.ev.chans[ch] = struct{}{}
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
	delete(c.kern.ev.chans, ch)
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
	for {
		uh, err := ch.kfd.CompEvent(timeout)
		if err != nil {
			return nil, kernTimeout(op, err, timeout, "completion event")
		}
		cq := c.kern.ev.cqs[uh]
		if cq == nil || cq.dead || cq.channel != ch {
			continue // a CQ destroyed meanwhile
		}
		cq.armSN++
		cq.evReported++
		return cq, nil
	}
}

func (c *Context) kernGetAsyncEvent(timeout time.Duration) (AsyncEvent, error) {
	const op = "get_async_event"
	fd := c.kern.rxe.async
	if fd == nil {
		return AsyncEvent{}, opErr(op, 0, ErrClosed)
	}
	for {
		d, err := fd.AsyncEvent(timeout)
		if err != nil {
			return AsyncEvent{}, kernTimeout(op, err, timeout, "asynchronous event")
		}
		a := AsyncEvent{Type: mlx5.EventType(d.EventType)}
		switch eventObject(a.Type) {
		case "cq":
			if a.CQ = c.kern.ev.cqs[d.Element]; a.CQ == nil || a.CQ.dead {
				continue
			}
			a.Num = a.CQ.cqn
		case "qp":
			if a.QP = c.kern.ev.qps[d.Element]; a.QP == nil || a.QP.dead {
				continue
			}
			a.Num = a.QP.qpn
		case "srq":
			if a.SRQ = c.kern.ev.srqs[d.Element]; a.SRQ == nil || a.SRQ.dead {
				continue
			}
			a.Num = a.SRQ.srqn
		case "port":
			a.Port, a.Num = int(d.Element), uint32(d.Element)
		default:
			a.Num = uint32(d.Element)
		}
		return a, nil
	}
}

// ---------------------------------------------------------------- commands

// createCompChannel is CREATE_COMP_CHANNEL: the kernel returns an fd.
func (r *rxeControl) createCompChannel() (int, error) {
	const cmd = "CREATE_COMP_CHANNEL"
	b, err := r.write(uverbs.CmdCreateCompChannel, &uverbs.CreateCompChannel{Response: nominalResponse}, nil, uverbs.CreateCompChannelRespSize)
	if err != nil {
		return -1, err
	}
	var resp uverbs.CreateCompChannelResp
	if err := decodeResp(cmd, b, &resp, uverbs.CreateCompChannelRespSize); err != nil {
		return -1, err
	}
	if int32(resp.FD) < 0 {
		return -1, detail(ErrNotSupported, "uverbs %s: fd %d", cmd, int32(resp.FD))
	}
	return int(resp.FD), nil
}

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
