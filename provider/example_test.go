package provider_test

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/softnic/softnic/fault"

	"github.com/softnic/softnic/device"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/testbed"
)

func ExampleOpen() {
	w, err := testbed.New(testbed.DefaultConfig())
	if err != nil {
		panic(err)
	}
	defer w.Close()
	h := w.Hosts[0]
	// Open a provider context on an emulated device: control commands,
	// the BAR0 MMIO port (here the host CPU in front of the device's BAR0,
	// testbed.NewCPU) and host memory are all it needs.
	ctx, err := provider.Open(provider.Device{Name: "mlx5_0", Control: h.Dev, MMIO: h.CPU, Mem: h.Mem})
	if err != nil {
		panic(err)
	}
	a := ctx.Attr()
	fmt.Println(a.BFBufSize, a.ActiveMTU.Bytes())
	// Output: 256 4096
}

func ExampleContext_AllocPD() {
	w := newWorld()
	defer w.Close()
	pd, err := w.Hosts[0].Ctx.AllocPD()
	fmt.Println(err)
	// A live PD is freed once; a second Dealloc is refused.
	fmt.Println(pd.Dealloc(), pd.Dealloc() != nil)
	// Output:
	// <nil>
	// <nil> true
}

func ExamplePD_RegMR() {
	w := newWorld()
	defer w.Close()
	ctx := w.Hosts[0].Ctx
	pd, _ := ctx.AllocPD()
	buf, _ := ctx.AllocBuffer(4096, 4096)
	mr, err := pd.RegMR(buf.Addr, 4096, provider.AccessLocalWrite|provider.AccessRemoteWrite)
	fmt.Println(mr.LKey == mr.RKey, mr.Length, err)
	// Output: true 4096 <nil>
}

func ExampleContext_CreateCQ() {
	w := newWorld()
	defer w.Close()
	cq, err := w.Hosts[0].Ctx.CreateCQ(100)
	fmt.Println(cq.Info().Entries >= 100, err)
	// Output: true <nil>
}

func ExampleContext_CreateQP() {
	w := newWorld()
	defer w.Close()
	ctx := w.Hosts[0].Ctx
	pd, _ := ctx.AllocPD()
	cq, _ := ctx.CreateCQ(64)
	qp, err := ctx.CreateQP(pd, provider.QPInitAttr{Type: provider.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: provider.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: 64}})
	fmt.Println(qp.State(), err)
	// Output: RESET <nil>
}

func ExampleQP_Modify() {
	w, eps := world()
	defer w.Close()
	// ConnectRC walked RESET → INIT → RTR → RTS with ibv_modify_qp masks;
	// moving to ERR needs only the state.
	qp := eps[0].QP
	fmt.Println(qp.State())
	err := qp.Modify(&provider.QPAttr{QPState: provider.QPStateErr}, provider.AttrState)
	fmt.Println(qp.State(), err)
	// Output:
	// RTS
	// ERR <nil>
}

func ExampleQP_PostSend() {
	w, eps := world()
	defer w.Close()
	req, rsp := eps[0], eps[1]
	copy(req.Buf.Bytes, "hello, rdma")
	_, err := req.QP.PostSend([]provider.SendWR{{WRID: 1, Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
		SGL: []provider.SGE{req.MR.SGE(0, 11)}, RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey}})
	if err != nil {
		panic(err)
	}
	wcs, err := waitWC(req.SendCQ, 1)
	if err != nil {
		panic(err)
	}
	fmt.Println(wcs[0].Status, wcs[0].Opcode, string(rsp.Buf.Bytes[:11]))
	// Output: SUCCESS RDMA_WRITE hello, rdma
}

func ExampleQP_PostRecv() {
	w, eps := world()
	defer w.Close()
	req, rsp := eps[0], eps[1]
	_, err := rsp.QP.PostRecv([]provider.RecvWR{{WRID: 7, SGL: []provider.SGE{rsp.MR.SGE(0, 64)}}})
	if err != nil {
		panic(err)
	}
	copy(req.Buf.Bytes, "ping")
	req.QP.PostSend([]provider.SendWR{{WRID: 1, Opcode: provider.WRSend, Flags: provider.SendSignaled,
		SGL: []provider.SGE{req.MR.SGE(0, 4)}}})
	wcs, err := waitWC(rsp.RecvCQ, 1)
	if err != nil {
		panic(err)
	}
	fmt.Println(wcs[0].WRID, wcs[0].Opcode, wcs[0].ByteLen, string(rsp.Buf.Bytes[:4]))
	// Output: 7 RECV 4 ping
}

func ExampleCQ_Poll() {
	w, eps := world()
	defer w.Close()
	req, rsp := eps[0], eps[1]
	req.QP.PostSend([]provider.SendWR{{WRID: 3, Opcode: provider.WRRDMARead, Flags: provider.SendSignaled,
		SGL: []provider.SGE{req.MR.SGE(0, 128)}, RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey}})
	// Poll drives the emulated device when the CQ is empty (a kernel
	// device runs by itself: poll until the completion is there).
	wcs := make([]provider.WC, 4)
	n := 0
	for deadline := time.Now().Add(10 * time.Second); n == 0 && time.Now().Before(deadline); {
		n, _ = req.SendCQ.Poll(wcs)
	}
	fmt.Println(n, wcs[0].WRID, wcs[0].Opcode, wcs[0].ByteLen, wcs[0].Status)
	// Output: 1 3 RDMA_READ 128 SUCCESS
}

var _ = device.DefaultSpec

func ExampleQP_PostSend_atomic() {
	w, err := testbed.New(testbed.DefaultConfig())
	if err != nil {
		panic(err)
	}
	defer w.Close()
	// The responder's MR must allow remote atomics.
	eps, err := w.ConnectRC(testbed.ConnOpts{MTU: 1024, Access: provider.AccessLocalWrite | provider.AccessRemoteWrite |
		provider.AccessRemoteRead | provider.AccessRemoteAtomic})
	if err != nil {
		panic(err)
	}
	req, rsp := eps[0], eps[1]
	// If the peer's first (8-byte aligned) word is 0, make it 42; add 5 to
	// the next one. The values found there land in the local buffer's first
	// and second words (the SGEs), and each completion is COMP_SWAP or
	// FETCH_ADD with ByteLen 8.
	idx := req.QP.SQProducer()
	_, err = req.QP.PostSend([]provider.SendWR{
		{WRID: 1, Opcode: provider.WRAtomicCmpSwp, Flags: provider.SendSignaled, SGL: []provider.SGE{req.MR.SGE(0, 8)},
			RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey, CompareAdd: 0, Swap: 42},
		{WRID: 2, Opcode: provider.WRAtomicFetchAdd, Flags: provider.SendSignaled, SGL: []provider.SGE{req.MR.SGE(8, 8)},
			RemoteAddr: rsp.MR.Addr + 8, RKey: rsp.MR.RKey, CompareAdd: 5},
	})
	if err != nil {
		panic(err)
	}
	// What the provider built, as libmlx5 does: ctrl, raddr, atomic
	// segment (swap_add, compare) and one data segment of 8 bytes.
	for i := uint16(0); i < 2; i++ {
		wqe, _ := req.QP.WQE(idx + i)
		ctrl, a, d := mlx5.CtrlSeg(wqe), mlx5.AtomicSeg(wqe[32:48]), mlx5.DataSeg(wqe[48:])
		fmt.Println(ctrl.Opcode(), ctrl.DS(), a.SwapAdd(), a.Compare(), d.ByteCount())
	}
	binary.LittleEndian.PutUint64(rsp.Buf.Bytes[8:], 100) // the word FETCH_ADD adds to
	wcs, err := testbed.Wait(req.SendCQ, 2)
	if err != nil {
		panic(err)
	}
	for _, wc := range wcs {
		fmt.Println(wc.WRID, wc.Status, wc.Opcode, wc.ByteLen)
	}
	// The original values, host-order words in the local buffer; the
	// peer's words after the operations.
	fmt.Println(binary.LittleEndian.Uint64(req.Buf.Bytes[0:]), binary.LittleEndian.Uint64(req.Buf.Bytes[8:]))
	fmt.Println(binary.LittleEndian.Uint64(rsp.Buf.Bytes[0:]), binary.LittleEndian.Uint64(rsp.Buf.Bytes[8:]))
	// Output:
	// ATOMIC_CS 4 42 0 8
	// ATOMIC_FA 4 5 0 8
	// 1 SUCCESS COMP_SWAP 8
	// 2 SUCCESS FETCH_ADD 8
	// 0 100
	// 42 105
}

func ExampleContext_Counters() {
	// The emulated device's hw_counters carry the Linux mlx5/rxe names.
	// Here the responder's first packet is lost on the wire: the requester's
	// ACK timer expires once and it sends the WRITE again.
	cfg := testbed.DefaultConfig()
	node0 := 0
	cfg.Faults = &fault.Plan{Rules: []fault.Rule{{Point: fault.WireTx, Action: fault.Drop, Nth: 1, Match: fault.Match{Node: &node0}}}}
	w, err := testbed.New(cfg)
	if err != nil {
		panic(err)
	}
	defer w.Close()
	eps, err := w.ConnectRC(testbed.ConnOpts{Timeout: 8})
	if err != nil {
		panic(err)
	}
	req, rsp := eps[0], eps[1]
	_, err = req.QP.PostSend([]provider.SendWR{{WRID: 1, Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
		SGL: []provider.SGE{req.MR.SGE(0, 64)}, RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey}})
	if err != nil {
		panic(err)
	}
	if _, err := testbed.Wait(req.SendCQ, 1); err != nil {
		panic(err)
	}
	c, err := req.Host.Ctx.Counters()
	fmt.Println(c["local_ack_timeout_err"], c["retransmitted_pkts"], err)
	// Output: 1 1 <nil>
}
