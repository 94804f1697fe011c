package provider_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/testbed"
)

// The Examples of this file are the verbs that end an object's life
// (ibv_dealloc_pd, ibv_destroy_*, ibv_close_device), the event
// acknowledgements, and the three steps of a connection done by hand. Each
// shows the refusal a driver meets when it gets the order wrong: the
// objects hold references on each other, as the kernel's uverbs does.

func ExamplePD_Dealloc() {
	w := newWorld()
	defer w.Close()
	ctx := w.Hosts[0].Ctx
	pd, _ := ctx.AllocPD()
	buf, _ := ctx.AllocBuffer(4096, 4096)
	mr, _ := pd.RegMR(buf.Addr, 4096, provider.AccessLocalWrite)
	// ibv_dealloc_pd fails with EBUSY while an MR (a QP, an SRQ, an AH)
	// still uses the PD.
	err := pd.Dealloc()
	fmt.Println(errors.Is(err, provider.ErrBusy))
	fmt.Println(mr.Dereg(), pd.Dealloc())
	// Output:
	// true
	// <nil> <nil>
}

func ExampleCQ_Destroy() {
	w := newWorld()
	defer w.Close()
	ctx := w.Hosts[0].Ctx
	pd, _ := ctx.AllocPD()
	cq, _ := ctx.CreateCQ(16)
	qp, _ := ctx.CreateQP(pd, provider.QPInitAttr{Type: provider.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: provider.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
	// A CQ outlives the QPs that complete on it.
	fmt.Println(errors.Is(cq.Destroy(), provider.ErrBusy))
	fmt.Println(qp.Destroy(), cq.Destroy())
	// A destroyed CQ is gone: polling it is refused, not a crash.
	_, err := cq.Poll(make([]provider.WC, 1))
	fmt.Println(errors.Is(err, provider.ErrClosed))
	// Output:
	// true
	// <nil> <nil>
	// true
}

func ExampleSRQ_Destroy() {
	w, err := testbed.New(testbed.DefaultConfig())
	if err != nil {
		panic(err)
	}
	defer w.Close()
	ctx := w.Hosts[0].Ctx
	pd, _ := ctx.AllocPD()
	srq, _ := pd.CreateSRQ(provider.SRQInitAttr{MaxWR: 16, MaxSGE: 1})
	cq, _ := ctx.CreateCQ(16)
	qp, _ := ctx.CreateQP(pd, provider.QPInitAttr{Type: provider.QPTypeRC, SendCQ: cq, RecvCQ: cq, SRQ: srq,
		Cap: provider.QPCap{MaxSendWR: 8, MaxSendSGE: 1}})
	// The SRQ stays while a QP takes its receives from it.
	fmt.Println(errors.Is(srq.Destroy(), provider.ErrBusy))
	fmt.Println(qp.Destroy(), srq.Destroy())
	// Output:
	// true
	// <nil> <nil>
}

func ExampleSRQ_Modify() {
	w, err := testbed.New(testbed.DefaultConfig())
	if err != nil {
		panic(err)
	}
	defer w.Close()
	pd, _ := w.Hosts[0].Ctx.AllocPD()
	srq, _ := pd.CreateSRQ(provider.SRQInitAttr{MaxWR: 16, MaxSGE: 1})
	// ibv_modify_srq with IBV_SRQ_LIMIT arms the limit event: it fires
	// once, when fewer receives than the limit remain posted. A limit
	// above the SRQ's size is refused.
	fmt.Println(srq.Modify(provider.SRQAttr{SRQLimit: 4}, provider.SRQAttrLimit))
	err = srq.Modify(provider.SRQAttr{SRQLimit: 1 << 20}, provider.SRQAttrLimit)
	fmt.Println(errors.Is(err, provider.ErrInvalidArg))
	a, _ := srq.Query()
	fmt.Println(a.SRQLimit)
	// Output:
	// <nil>
	// true
	// 4
}

func ExampleAH_Destroy() {
	w, err := testbed.New(testbed.DefaultConfig())
	if err != nil {
		panic(err)
	}
	defer w.Close()
	pd, _ := w.Hosts[0].Ctx.AllocPD()
	ah, _ := pd.CreateAH(provider.AHAttr{DGID: testbed.IPs[1].As16(), DMAC: testbed.MACs[1], Port: 1, SGIDIndex: 1, HopLimit: 64})
	// The AH holds the PD; sends already posted with it carry their own
	// copy of the address vector.
	fmt.Println(errors.Is(pd.Dealloc(), provider.ErrBusy))
	fmt.Println(ah.Destroy(), pd.Dealloc())
	fmt.Println(errors.Is(ah.Destroy(), provider.ErrClosed))
	// Output:
	// true
	// <nil> <nil>
	// true
}

func ExampleContext_CreateCompChannel() {
	w := newWorld()
	defer w.Close()
	ctx := w.Hosts[0].Ctx
	ch, err := ctx.CreateCompChannel()
	if err != nil {
		panic(err)
	}
	// The channel's fd is what a program hands to poll(2) or epoll; it
	// becomes readable when an event is queued on it.
	fmt.Println(ch.Fd() >= 0)
	cq, _ := ctx.CreateCQEx(provider.CQInitAttr{Entries: 16, Channel: ch})
	fmt.Println(cq.Channel() == ch)
	// Output:
	// true
	// true
}

func ExampleCompChannel_Destroy() {
	w := newWorld()
	defer w.Close()
	ctx := w.Hosts[0].Ctx
	ch, _ := ctx.CreateCompChannel()
	cq, _ := ctx.CreateCQEx(provider.CQInitAttr{Entries: 16, Channel: ch})
	// A channel outlives the CQs that report to it.
	fmt.Println(errors.Is(ch.Destroy(), provider.ErrBusy))
	fmt.Println(cq.Destroy(), ch.Destroy(), ch.Fd())
	// Output:
	// true
	// <nil> <nil> -1
}

func ExampleContext_CreateCQEx() {
	w := newWorld()
	defer w.Close()
	ctx := w.Hosts[0].Ctx
	ch, _ := ctx.CreateCompChannel()
	cq, err := ctx.CreateCQEx(provider.CQInitAttr{Entries: 100, Channel: ch})
	// libmlx5 rounds the ring up to a power of two, one entry spare.
	fmt.Println(cq.Entries(), err)
	// The device has one completion vector.
	_, err = ctx.CreateCQEx(provider.CQInitAttr{Entries: 16, CompVector: 3})
	fmt.Println(errors.Is(err, provider.ErrInvalidArg))
	// Output:
	// 127 <nil>
	// true
}

func ExampleCQ_AckEvents() {
	w := newWorld()
	defer w.Close()
	eps := w.connect(testbed.ConnOpts{Channel: true})
	req, rsp := eps[0], eps[1]
	cq := rsp.RecvCQ
	for i := 0; i < 2; i++ {
		_, _ = rsp.QP.PostRecv([]provider.RecvWR{{WRID: uint64(i), SGL: []provider.SGE{rsp.MR.SGE(0, 64)}}})
		_ = cq.ReqNotify(false)
		_, _ = req.QP.PostSend([]provider.SendWR{{Opcode: provider.WRSend, SGL: []provider.SGE{req.MR.SGE(0, 8)}}})
		if _, err := rsp.Channel.GetCQEvent(5 * time.Second); err != nil {
			panic(err)
		}
		_, _ = waitWC(cq, 1)
	}
	// Every event GetCQEvent returned must be acknowledged before the
	// CQ is destroyed (ibv_destroy_cq waits for that); acknowledging in
	// batches, as perftest does, is cheaper.
	fmt.Println(cq.UnackedEvents())
	cq.AckEvents(2)
	fmt.Println(cq.UnackedEvents())
	// Output:
	// 2
	// 0
}

func ExampleContext_AckAsyncEvent() {
	w, eps := eventWorld()
	defer w.Close()
	ctx := eps[0].Host.Ctx
	w.SetLink(false)
	ev, err := ctx.GetAsyncEvent(time.Millisecond)
	fmt.Println(ev, err, ctx.UnackedAsyncEvents())
	ctx.AckAsyncEvent(ev)
	fmt.Println(ctx.UnackedAsyncEvents())
	// Output:
	// PORT_ERR port 1 <nil> 1
	// 0
}

// ExampleQP_Destroy_unackedEvent: a QP with an asynchronous event not yet
// acknowledged is not destroyed (ibv_destroy_qp waits for the
// acknowledgement); it stays usable, and goes once AckAsyncEvent is done.
func ExampleQP_Destroy_unackedEvent() {
	w, eps := eventWorld()
	defer w.Close()
	req, rsp := eps[0], eps[1]
	// A WRITE with a bad rkey: the responder's QP goes to ERR with
	// QP_ACCESS_ERR (the requester's error is in its CQE).
	_, _ = req.QP.PostSend([]provider.SendWR{{Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
		SGL: []provider.SGE{req.MR.SGE(0, 64)}, RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey + 1}})
	ctx := rsp.Host.Ctx
	ev, err := ctx.GetAsyncEvent(time.Second)
	fmt.Println(ev, err, ev.QP == rsp.QP)
	fmt.Println(errors.Is(rsp.QP.Destroy(), provider.ErrBusy))
	a, _, err := rsp.QP.Query()
	fmt.Println(a.QPState, err)
	ctx.AckAsyncEvent(ev)
	fmt.Println(rsp.QP.Destroy())
	// Output:
	// QP_ACCESS_ERR qp 0x100 <nil> true
	// true
	// ERR <nil>
	// <nil>
}

func ExampleContext_Close() {
	w, err := testbed.New(testbed.DefaultConfig())
	if err != nil {
		panic(err)
	}
	defer w.Close()
	ctx := w.Hosts[0].Ctx
	pd, _ := ctx.AllocPD()
	cq, _ := ctx.CreateCQ(16)
	qp, _ := ctx.CreateQP(pd, provider.QPInitAttr{Type: provider.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: provider.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
	// Close destroys what is still open, QPs first, as a process exit
	// does; every object is unusable afterwards.
	fmt.Println(ctx.Close())
	fmt.Println(errors.Is(qp.Destroy(), provider.ErrClosed), errors.Is(ctx.Close(), provider.ErrClosed))
	// Output:
	// <nil>
	// true true
}

// ExampleQP_ToInit shows the connection ibv_rc_pingpong makes, one step at
// a time: INIT first, so that receives can be posted before the peer's
// QPN and PSN are known; then RTR with them, then RTS.
func ExampleQP_ToInit() {
	w := newWorld()
	defer w.Close()
	qps := rcQPs(w)
	a := provider.DefaultConnectAttr()
	a.Access = provider.AccessRemoteWrite
	fmt.Println(qps[0].ToInit(a), qps[0].State())
	// RTR before INIT is refused by the transition table.
	fmt.Println(errors.Is(qps[1].ToRTR(a), provider.ErrBadTransition))
	// Output:
	// <nil> INIT
	// true
}

func ExampleQP_ToRTR() {
	w := newWorld()
	defer w.Close()
	qps := rcQPs(w)
	for i, qp := range qps {
		a := peerAttr(w, qps, i)
		// RTR: the peer's QPN, its first PSN, the path (GID, MAC, MTU).
		// An RTR QP receives but cannot send yet.
		if err := qp.ToInit(a); err != nil {
			panic(err)
		}
		fmt.Println(qp.ToRTR(a), qp.State())
	}
	// Output:
	// <nil> RTR
	// <nil> RTR
}

func ExampleQP_ToRTS() {
	w := newWorld()
	defer w.Close()
	qps := rcQPs(w)
	for i, qp := range qps {
		a := peerAttr(w, qps, i)
		_ = qp.ToInit(a)
		_ = qp.ToRTR(a)
		// RTS: the QP's own first PSN and its retry policy (timeout,
		// retry count, RNR retry).
		fmt.Println(qp.ToRTS(a), qp.State())
	}
	// Output:
	// <nil> RTS
	// <nil> RTS
}

// rcQPs creates an RC QP in RESET on each host, with a PD and a CQ of its
// own.
func rcQPs(w *exWorld) [2]*provider.QP {
	var qps [2]*provider.QP
	for i, h := range w.Hosts {
		pd, _ := h.Ctx.AllocPD()
		cq, _ := h.Ctx.CreateCQ(16)
		qps[i], _ = h.Ctx.CreateQP(pd, provider.QPInitAttr{Type: provider.QPTypeRC, SendCQ: cq, RecvCQ: cq,
			Cap: provider.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
	}
	return qps
}

// peerAttr is host i's connection to the other host's QP: what the
// out-of-band exchange carries (the peer's QPN, PSN and GID, the MAC of
// the GID's next hop), both sides starting at PSN 0x100.
func peerAttr(w *exWorld, qps [2]*provider.QP, i int) provider.ConnectAttr {
	id := w.Hosts[1-i].ID
	a := provider.DefaultConnectAttr()
	a.Peer = provider.Peer{QPN: qps[1-i].QPN(), PSN: 0x100, GID: id.IP.As16(), MAC: id.MAC}
	a.PSN = 0x100
	return a
}

func ExampleQP_Query() {
	w, err := testbed.New(testbed.DefaultConfig())
	if err != nil {
		panic(err)
	}
	defer w.Close()
	eps, err := w.ConnectRC(testbed.ConnOpts{MTU: 1024})
	if err != nil {
		panic(err)
	}
	// ibv_query_qp: the attributes the device holds for the QP, as
	// QUERY_QP answers them (the path as the verbs see it: no MAC).
	a, c, err := eps[0].QP.Query()
	fmt.Println(a.QPState, a.PathMTU.Bytes(), a.DestQPN == eps[1].QP.QPN(), a.RetryCnt, a.RNRRetry, err)
	fmt.Println(c.MaxSendWR >= 1, c.MaxRecvWR >= 1)
	// Output:
	// RTS 1024 true 7 7 <nil>
	// true true
}
