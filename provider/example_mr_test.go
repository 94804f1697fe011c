package provider_test

import (
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
