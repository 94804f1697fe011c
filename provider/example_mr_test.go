package provider_test

import (
	"errors"
	"fmt"

	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/testbed"
)

// writeTo posts one signalled 64-byte RDMA WRITE from req to addr with
// rkey and returns its completion.
func writeTo(req *testbed.Endpoint, id, addr uint64, rkey uint32) provider.WC {
	_, err := req.QP.PostSend([]provider.SendWR{{WRID: id, Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
		SGL: []provider.SGE{req.MR.SGE(0, 64)}, RemoteAddr: addr, RKey: rkey}})
	if err != nil {
		panic(err)
	}
	wcs, err := waitWC(req.SendCQ, 1)
	if err != nil {
		panic(err)
	}
	return wcs[0]
}

func ExampleMR_Dereg() {
	w, eps := world()
	defer w.Close()
	req, rsp := eps[0], eps[1]
	fmt.Println(writeTo(req, 1, rsp.MR.Addr, rsp.MR.RKey).Status)
	// Once deregistered (ibv_dereg_mr) the MR's rkey names nothing: the
	// responder NAKs the next WRITE to it with a remote access error. A
	// second Dereg is refused.
	fmt.Println(rsp.MR.Dereg())
	fmt.Println(writeTo(req, 2, rsp.MR.Addr, rsp.MR.RKey).Status)
	fmt.Println(rsp.MR.Dereg() != nil)
	// Output:
	// SUCCESS
	// <nil>
	// REM_ACCESS_ERR
	// true
}

func ExampleQP_QueryState() {
	w, eps := world()
	defer w.Close()
	req, rsp := eps[0], eps[1]
	// A WRITE past the end of the responder's MR fails and the device
	// moves the requester's QP to ERR. State is what the provider last
	// set; QueryState (ibv_query_qp) asks the device.
	wc := writeTo(req, 1, rsp.MR.Addr+rsp.MR.Length, rsp.MR.RKey)
	fmt.Println(wc.Status, req.QP.State())
	st, err := req.QP.QueryState()
	fmt.Println(st, err, req.QP.State())
	// Output:
	// REM_ACCESS_ERR RTS
	// ERR <nil> ERR
}

func ExampleQP_Destroy() {
	w, err := testbed.New(testbed.DefaultConfig())
	if err != nil {
		panic(err)
	}
	defer w.Close()
	eps, err := w.ConnectRC(testbed.ConnOpts{MTU: 1024})
	if err != nil {
		panic(err)
	}
	req, rsp := eps[0], eps[1]
	_, _ = req.QP.PostSend([]provider.SendWR{{WRID: 1, Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
		SGL: []provider.SGE{req.MR.SGE(0, 64)}, RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey}})
	w.Settle(0)
	fmt.Println(req.SendCQ.Ready())
	// A CQ is not destroyed while a QP uses it (ibv_destroy_cq: EBUSY).
	fmt.Println(errors.Is(req.SendCQ.Destroy(), provider.ErrBusy))
	// Destroying the QP (ibv_destroy_qp) takes its CQEs not yet polled
	// out of its CQs, as libmlx5 does; the QP takes no more work.
	fmt.Println(req.QP.Destroy())
	wcs := make([]provider.WC, 1)
	n, _ := req.SendCQ.Poll(wcs)
	_, err = req.QP.PostSend([]provider.SendWR{{WRID: 2, Opcode: provider.WRSend}})
	fmt.Println(n, errors.Is(err, provider.ErrClosed))
	// Output:
	// true
	// true
	// <nil>
	// 0 true
}

func ExampleSRQ_Query() {
	w, err := testbed.New(testbed.DefaultConfig())
	if err != nil {
		panic(err)
	}
	defer w.Close()
	pd, _ := w.Hosts[0].Ctx.AllocPD()
	srq, err := pd.CreateSRQ(provider.SRQInitAttr{MaxWR: 100, MaxSGE: 2})
	if err != nil {
		panic(err)
	}
	// ibv_query_srq asks the device: the sizes libmlx5 rounded up to,
	// and the limit ibv_modify_srq armed (SRQ_LIMIT_REACHED fires when
	// fewer receives than that are posted).
	_ = srq.Modify(provider.SRQAttr{SRQLimit: 10}, provider.SRQAttrLimit)
	a, err := srq.Query()
	fmt.Println(a.MaxWR, a.MaxSGE, a.SRQLimit, err)
	// Output: 127 3 10 <nil>
}
