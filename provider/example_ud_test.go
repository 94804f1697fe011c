package provider_test

import (
	"fmt"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/testbed"
)

// udEnd is one UD endpoint of the examples: a QP in RTS (on srq, when
// given), its CQ and a registered buffer.
type udEnd struct {
	pd  *provider.PD
	cq  *provider.CQ
	qp  *provider.QP
	buf provider.Buffer
	mr  *provider.MR
}

const exampleQKey = 0x11111111

func newUDEnd(ctx *provider.Context, pd *provider.PD, srq *provider.SRQ) udEnd {
	cq, err := ctx.CreateCQ(16)
	if err != nil {
		panic(err)
	}
	qp, err := ctx.CreateQP(pd, provider.QPInitAttr{Type: provider.QPTypeUD, SendCQ: cq, RecvCQ: cq, SRQ: srq,
		Cap: provider.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		panic(err)
	}
	// UD: RESET→INIT takes the P_Key index, port and Q_Key; INIT→RTR
	// nothing; RTR→RTS the SQ PSN.
	steps := []struct {
		a    provider.QPAttr
		mask uint32
	}{
		{provider.QPAttr{QPState: provider.QPStateInit, Port: 1, QKey: exampleQKey},
			provider.AttrState | provider.AttrPKeyIndex | provider.AttrPort | provider.AttrQKey},
		{provider.QPAttr{QPState: provider.QPStateRTR}, provider.AttrState},
		{provider.QPAttr{QPState: provider.QPStateRTS, SQPSN: 0}, provider.AttrState | provider.AttrSQPSN},
	}
	for _, s := range steps {
		if err := qp.Modify(&s.a, s.mask); err != nil {
			panic(err)
		}
	}
	buf, err := ctx.AllocBuffer(4096, 4096)
	if err != nil {
		panic(err)
	}
	mr, err := pd.RegMR(buf.Addr, 4096, provider.AccessLocalWrite)
	if err != nil {
		panic(err)
	}
	return udEnd{pd: pd, cq: cq, qp: qp, buf: buf, mr: mr}
}

func ExamplePD_CreateAH() {
	w, err := testbed.New(testbed.DefaultConfig())
	if err != nil {
		panic(err)
	}
	defer w.Close()
	ctx := w.Hosts[0].Ctx
	pd, _ := ctx.AllocPD()
	// The destination is the other host: its RoCEv2 GID (::ffff:IPv4) and
	// its MAC, which the caller resolves. libmlx5's address vector is
	// built here: the UDP source port comes from the flow label.
	ah, err := pd.CreateAH(provider.AHAttr{DGID: testbed.IPs[1].As16(), DMAC: testbed.MACs[1], Port: 1, SGIDIndex: 1,
		HopLimit: 64, FlowLabel: 0x12345})
	if err != nil {
		panic(err)
	}
	av := mlx5.DatagramSeg(ah.AV())
	fmt.Printf("sport %#x rmac %x hop_limit %d sgid %d\n", ah.UDPSPort(), av.RMAC(), av.HopLimit(), av.SGIDIndex())

	// A UD send through it: ctrl, the datagram segment (this AV plus the
	// destination QPN and Q_Key), then the data.
	src := newUDEnd(ctx, pd, nil)
	idx := src.qp.SQProducer()
	_, err = src.qp.PostSend([]provider.SendWR{{WRID: 1, Opcode: provider.WRSend, Flags: provider.SendSignaled,
		SGL: []provider.SGE{src.mr.SGE(0, 64)}, AH: ah, RemoteQPN: 0x123, RemoteQKey: exampleQKey}})
	if err != nil {
		panic(err)
	}
	wqe, _ := src.qp.WQE(idx)
	d := mlx5.DatagramSeg(wqe[16:64])
	fmt.Printf("ds %d dqpn %#x qkey %#x extended %v\n", mlx5.CtrlSeg(wqe).DS(), d.DestQPN(), d.QKey(), d.ExtendedAV())
	// Output:
	// sport 0xe341 rmac 02534e000002 hop_limit 64 sgid 1
	// ds 5 dqpn 0x123 qkey 0x11111111 extended true
}

func ExamplePD_CreateSRQ() {
	w, err := testbed.New(testbed.DefaultConfig())
	if err != nil {
		panic(err)
	}
	defer w.Close()
	pd, _ := w.Hosts[0].Ctx.AllocPD()
	// 100 receives of up to 2 scatter entries: libmlx5 sizes the ring to
	// roundup_pow2(100+1) WQEs of roundup_pow2(16 + 2*16) bytes, one of
	// them always spare, and every data segment that fits is usable.
	srq, err := pd.CreateSRQ(provider.SRQInitAttr{MaxWR: 100, MaxSGE: 2})
	if err != nil {
		panic(err)
	}
	info := srq.Info()
	fmt.Println(info.WQEs, info.Stride, srq.MaxWR(), srq.MaxSGE())
	// Only the limit can change; mlx5 cannot resize an SRQ.
	fmt.Println(srq.Modify(provider.SRQAttr{SRQLimit: 10}, provider.SRQAttrLimit))
	fmt.Println(srq.Modify(provider.SRQAttr{MaxWR: 200}, provider.SRQAttrMaxWR) != nil)
	// Output:
	// 128 64 127 3
	// <nil>
	// true
}

func ExampleSRQ_PostRecv() {
	w := newWorld()
	defer w.Close()
	// Host 1: a UD QP that takes its receive buffers from an SRQ.
	ctx1 := w.Hosts[1].Ctx
	pd1, _ := ctx1.AllocPD()
	srq, err := pd1.CreateSRQ(provider.SRQInitAttr{MaxWR: 4, MaxSGE: 1})
	if err != nil {
		panic(err)
	}
	dst := newUDEnd(ctx1, pd1, srq)
	// UD receives need 40 bytes more than the message: the GRH area.
	for i := 0; i < 2; i++ {
		_, err := srq.PostRecv([]provider.RecvWR{{WRID: uint64(10 + i), SGL: []provider.SGE{dst.mr.SGE(uint64(i)*1024, 1024)}}})
		if err != nil {
			panic(err)
		}
	}
	// Host 0: a UD QP sending to it.
	ctx0 := w.Hosts[0].Ctx
	pd0, _ := ctx0.AllocPD()
	src := newUDEnd(ctx0, pd0, nil)
	// The destination's GID; its MAC (zero for a kernel device, which
	// resolves it itself).
	ah, err := pd0.CreateAH(provider.AHAttr{DGID: w.Hosts[1].ID.IP.As16(), DMAC: w.Hosts[1].ID.MAC, Port: 1, SGIDIndex: 1, HopLimit: 64})
	if err != nil {
		panic(err)
	}
	copy(src.buf.Bytes, "ping")
	_, err = src.qp.PostSend([]provider.SendWR{{WRID: 1, Opcode: provider.WRSend, Flags: provider.SendSignaled,
		SGL: []provider.SGE{src.mr.SGE(0, 4)}, AH: ah, RemoteQPN: dst.qp.QPN(), RemoteQKey: exampleQKey}})
	if err != nil {
		panic(err)
	}
	wcs, err := waitWC(dst.cq, 1)
	if err != nil {
		panic(err)
	}
	wc := wcs[0]
	fmt.Println(wc.WRID, wc.Status, wc.Opcode, wc.ByteLen, wc.SrcQP == src.qp.QPN(), wc.Flags)
	fmt.Printf("%q\n", dst.buf.Bytes[40:44])
	fmt.Println(srq.Outstanding())
	// Output:
	// 10 SUCCESS RECV 44 true GRH
	// "ping"
	// 1
}
