package main

// --events: the walk's CQs on a completion channel, armed before the post.

import (
	"fmt"
	"time"

	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/testbed"
)

type compChannel = provider.CompChannel

func createCompChannel(ctx *provider.Context) (*compChannel, error) { return ctx.CreateCompChannel() }

// createTraceCQ creates a CQ of n entries, on channel ch if not nil.
func createTraceCQ(ctx *provider.Context, n int, ch *compChannel) (*provider.CQ, error) {
	return ctx.CreateCQEx(provider.CQInitAttr{Entries: n, Channel: ch})
}

// armCQs arms (ReqNotify, any completion) the requester's send CQ and, when
// the operation completes a receive, the responder's receive CQ.
func armCQs(req, rsp *traceEP, recv bool) ([]armedCQ, error) {
	armed := []armedCQ{{node: 0, cq: req.SendCQ, ch: req.Chan}}
	if recv {
		armed = append(armed, armedCQ{node: 1, cq: rsp.RecvCQ, ch: rsp.Chan})
	}
	for _, a := range armed {
		if err := a.cq.ReqNotify(false); err != nil {
			return nil, fmt.Errorf("arming CQ %#x: %w", a.cq.CQN(), err)
		}
	}
	return armed, nil
}

// takeEvents takes each armed CQ's completion event from its channel
// (GetCQEvent drives the simulation while it waits) and acknowledges it.
func takeEvents(w *testbed.World, armed []armedCQ) error {
	for _, a := range armed {
		cq, err := a.ch.GetCQEvent(time.Second)
		if err != nil {
			return fmt.Errorf("waiting for the completion event of CQ %#x: %w", a.cq.CQN(), err)
		}
		if cq != a.cq {
			return fmt.Errorf("completion event of CQ %#x, want CQ %#x", cq.CQN(), a.cq.CQN())
		}
		cq.AckEvents(1)
	}
	return nil
}
