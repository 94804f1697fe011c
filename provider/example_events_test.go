package provider_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/testbed"
)

// eventWorld is a connected RC pair whose CQs report to a completion
// channel on each side, on emulated NICs (the Examples that pull the
// cable, resize or moderate a CQ).
func eventWorld() (*testbed.World, [2]*testbed.Endpoint) {
	w, err := testbed.New(testbed.DefaultConfig())
	if err != nil {
		panic(err)
	}
	eps, err := w.ConnectRC(testbed.ConnOpts{Channel: true})
	if err != nil {
		panic(err)
	}
	return w, eps
}

func ExampleCQ_ReqNotify() {
	w := newWorld()
	defer w.Close()
	eps := w.connect(testbed.ConnOpts{Channel: true})
	req, rsp := eps[0], eps[1]
	_, _ = rsp.QP.PostRecv([]provider.RecvWR{{WRID: 1, SGL: []provider.SGE{rsp.MR.SGE(0, 64)}}})
	// Ask for one event, on the next solicited completion (or error).
	_ = rsp.RecvCQ.ReqNotify(true)
	copy(req.Buf.Bytes, "wake up")
	_, _ = req.QP.PostSend([]provider.SendWR{{Opcode: provider.WRSend, Flags: provider.SendSolicited,
		SGL: []provider.SGE{req.MR.SGE(0, 7)}}})
	// Block until it comes (on emulated NICs in virtual time: the wait
	// drives them).
	cq, err := rsp.Channel.GetCQEvent(5 * time.Second)
	if err != nil {
		panic(err)
	}
	cq.AckEvents(1)
	// The usual loop: re-arm, then poll what the event announced.
	_ = cq.ReqNotify(false)
	wcs := make([]provider.WC, 4)
	n, _ := cq.Poll(wcs)
	fmt.Println(cq == rsp.RecvCQ, n, wcs[0].WRID, wcs[0].Opcode, string(rsp.Buf.Bytes[:wcs[0].ByteLen]))
	// Output: true 1 1 RECV wake up
}

func ExampleCompChannel_GetCQEvent() {
	w := newWorld()
	defer w.Close()
	ctx := w.Hosts[0].Ctx
	ch, _ := ctx.CreateCompChannel()
	cq, _ := ctx.CreateCQEx(provider.CQInitAttr{Entries: 16, Channel: ch})
	_ = cq.ReqNotify(false)
	// Nothing will complete on this CQ: the wait ends with ErrTimeout (on
	// emulated NICs at once, since the device has nothing left to do; on
	// a kernel device after the timeout).
	_, err := ch.GetCQEvent(200 * time.Millisecond)
	fmt.Println(errors.Is(err, provider.ErrTimeout))
	// Output: true
}

func ExampleContext_GetAsyncEvent() {
	w, eps := eventWorld()
	defer w.Close()
	ctx := eps[0].Host.Ctx
	w.SetLink(false) // pull the cable
	ev, err := ctx.GetAsyncEvent(time.Millisecond)
	fmt.Println(ev, err)
	ctx.AckAsyncEvent(ev)
	w.SetLink(true)
	ev, err = ctx.GetAsyncEvent(time.Millisecond)
	fmt.Println(ev, err)
	ctx.AckAsyncEvent(ev)
	// Output:
	// PORT_ERR port 1 <nil>
	// PORT_ACTIVE port 1 <nil>
}

func ExampleCQ_Resize() {
	w, eps := eventWorld()
	defer w.Close()
	req, rsp := eps[0], eps[1]
	_, _ = rsp.QP.PostRecv([]provider.RecvWR{{WRID: 7, SGL: []provider.SGE{rsp.MR.SGE(0, 64)}}})
	_, _ = req.QP.PostSend([]provider.SendWR{{Opcode: provider.WRSend, SGL: []provider.SGE{req.MR.SGE(0, 8)}}})
	w.Settle(0)
	// The CQE not polled yet moves to the new ring.
	err := rsp.RecvCQ.Resize(1000)
	wcs := make([]provider.WC, 1)
	n, _ := rsp.RecvCQ.Poll(wcs)
	fmt.Println(err, rsp.RecvCQ.Entries(), n, wcs[0].WRID)
	// Output: <nil> 1023 1 7
}

func ExampleCQ_Modify() {
	w, eps := eventWorld()
	defer w.Close()
	req, rsp := eps[0], eps[1]
	cq := rsp.RecvCQ
	// One event per 16 completions, or 100 µs after the first of them.
	fmt.Println(cq.Modify(provider.CQModeration{Count: 16, Period: 100}))
	// One receive completes: the event waits for the period (virtual
	// time; without moderation it comes about a microsecond after the CQE).
	_, _ = rsp.QP.PostRecv([]provider.RecvWR{{WRID: 1, SGL: []provider.SGE{rsp.MR.SGE(0, 64)}}})
	_ = cq.ReqNotify(false)
	start := w.Eng.Now()
	_, _ = req.QP.PostSend([]provider.SendWR{{Opcode: provider.WRSend, SGL: []provider.SGE{req.MR.SGE(0, 8)}}})
	got, err := rsp.Channel.GetCQEvent(time.Second)
	fmt.Println(got == cq, err, w.Eng.Now().Sub(start) >= 100*sim.Microsecond)
	// Output:
	// <nil>
	// true <nil> true
}
