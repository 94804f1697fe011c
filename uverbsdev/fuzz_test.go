package uverbsdev

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/uverbs"
)

// fuzzSeeds are valid and nearly valid commands against the objects
// rig.build makes (whose handles are the same in every fresh rig).
func fuzzSeeds(t testing.TB) [][]byte {
	r := newRig(t, 1<<20)
	o := r.build(r.s)
	var seeds [][]byte
	w := func(cmd uverbs.Command, core, drv uverbs.Struct, out int) {
		b := make([]byte, 512)
		n, err := uverbs.EncodeWrite(b, cmd, core, drv, out)
		require.NoError(t, err)
		seeds = append(seeds, b[:n])
	}
	buf := uint64(rigBase + 0x80000)
	w(uverbs.CmdGetContext, &uverbs.GetContext{Response: 1}, &uverbs.MLX5AllocUcontextReqV2{MaxCQEVersion: 1, LibCaps: 2}, 80)
	w(uverbs.CmdQueryDevice, &uverbs.QueryDevice{Response: 1}, nil, uverbs.QueryDeviceRespSize)
	w(uverbs.CmdQueryPort, &uverbs.QueryPort{Response: 1, PortNum: 1}, nil, uverbs.QueryPortRespSize)
	w(uverbs.CmdAllocPD, &uverbs.AllocPD{Response: 1}, nil, 8)
	w(uverbs.CmdDeallocPD, &uverbs.DeallocPD{PDHandle: o.pd}, nil, 0)
	w(uverbs.CmdRegMR, &uverbs.RegMR{Response: 1, Start: buf, Length: 4096, HCAVA: buf, PDHandle: o.pd, AccessFlags: 7}, nil, 12)
	w(uverbs.CmdDeregMR, &uverbs.DeregMR{MRHandle: o.mr}, nil, 0)
	w(uverbs.CmdCreateCompChannel, &uverbs.CreateCompChannel{Response: 1}, nil, 4)
	w(uverbs.CmdCreateCQ, &uverbs.CreateCQ{Response: 1, CQE: 15, CompChannel: -1},
		&uverbs.MLX5CreateCQ{BufAddr: buf, DBAddr: buf + 0x2000, CQESize: 64, Flags: 2, UARPageIndex: uint16(o.uar)}, 16)
	w(uverbs.CmdDestroyCQ, &uverbs.DestroyCQ{Response: 1, CQHandle: o.cq}, nil, 8)
	c, d := r.qpReq(o.pd, o.cq, 0)
	w(uverbs.CmdCreateQP, &c, &d, 72)
	c, d = r.qpReq(o.pd, o.cq, o.srq)
	w(uverbs.CmdCreateQP, &c, &d, 72)
	w(uverbs.CmdModifyQP, &uverbs.ModifyQP{QPHandle: o.qp, AttrMask: uverbs.QPAttrState | uverbs.QPAttrPKeyIndex | uverbs.QPAttrPort | uverbs.QPAttrAccessFlags,
		QPState: uverbs.QPStateInit, PortNum: 1}, nil, 0)
	w(uverbs.CmdModifyQP, &uverbs.ModifyQP{QPHandle: o.qp, AttrMask: uverbs.QPAttrState, QPState: uverbs.QPStateErr}, nil, 0)
	w(uverbs.CmdQueryQP, &uverbs.QueryQP{Response: 1, QPHandle: o.qp}, nil, uverbs.QueryQPRespSize)
	w(uverbs.CmdDestroyQP, &uverbs.DestroyQP{Response: 1, QPHandle: o.qp}, nil, 4)
	w(uverbs.CmdCreateSRQ, &uverbs.CreateSRQ{Response: 1, PDHandle: o.pd, MaxWR: 15, MaxSGE: 2}, &uverbs.MLX5CreateSRQ{BufAddr: buf, DBAddr: buf + 0x2000}, 24)
	w(uverbs.CmdModifySRQ, &uverbs.ModifySRQ{SRQHandle: o.srq, AttrMask: 2, SRQLimit: 3}, nil, 0)
	w(uverbs.CmdQuerySRQ, &uverbs.QuerySRQ{Response: 1, SRQHandle: o.srq}, nil, 16)
	w(uverbs.CmdDestroySRQ, &uverbs.DestroySRQ{Response: 1, SRQHandle: o.srq}, nil, 4)
	w(uverbs.CmdCreateAH, &uverbs.CreateAH{Response: 1, PDHandle: o.pd, Attr: uverbs.AHAttr{Grh: uverbs.GlobalRoute{DGID: peerIP.As16()}, IsGlobal: 1, PortNum: 1}}, nil, 20)
	w(uverbs.CmdDestroyAH, &uverbs.DestroyAH{AHHandle: 1}, nil, 0)
	// Extended MODIFY_QP and CREATE_CQ.
	b := make([]byte, 512)
	n, err := uverbs.PutExWriteHdr(b, uverbs.ExCmdModifyQP, uverbs.ExModifyQPSize, 0, 8, 0, 1)
	require.NoError(t, err)
	x := uverbs.ExModifyQP{Base: uverbs.ModifyQP{QPHandle: o.qp, AttrMask: 1, QPState: uverbs.QPStateErr}}
	_, _ = x.Encode(b[24:])
	seeds = append(seeds, b[:n])
	b = make([]byte, 512)
	n, err = uverbs.PutExWriteHdr(b, uverbs.ExCmdCreateCQ, uverbs.ExCreateCQSize, uverbs.MLX5CreateCQSize, 16, 8, 1)
	require.NoError(t, err)
	xc := uverbs.ExCreateCQ{CQE: 7, CompChannel: -1}
	_, _ = xc.Encode(b[24:])
	xd := uverbs.MLX5CreateCQ{BufAddr: buf, DBAddr: buf + 0x2000, CQESize: 64}
	_, _ = xd.Encode(b[24+uverbs.ExCreateCQSize:])
	seeds = append(seeds, b[:n])
	b = make([]byte, 512)
	n, err = uverbs.PutExWriteHdr(b, uverbs.ExCmdQueryDevice, uverbs.ExQueryDeviceSize, 0, uverbs.ExQueryDeviceRespSize, 0, 1)
	require.NoError(t, err)
	seeds = append(seeds, b[:n])
	b = make([]byte, 512)
	n, err = uverbs.PutExWriteHdr(b, uverbs.ExCmdCreateQP, uverbs.ExCreateQPSize, uverbs.MLX5CreateQPSize, 40, 40, 1)
	require.NoError(t, err)
	c, d = r.qpReq(o.pd, o.cq, 0)
	xq := uverbs.ExCreateQP{PDHandle: c.PDHandle, SendCQHandle: c.SendCQHandle, RecvCQHandle: c.RecvCQHandle, MaxSendWR: 64, QPType: uverbs.QPTypeUD}
	_, _ = xq.Encode(b[24:])
	_, _ = d.Encode(b[24+uverbs.ExCreateQPSize:])
	seeds = append(seeds, b[:n])
	// ioctls.
	a := uverbs.MLX5UARAlloc{Type: uverbs.MLX5UARTypeNC, MmapOffset: uarHdr, MmapLength: uarHdr + 8, PageID: uarHdr + 12}
	io, err := a.Encode(make([]byte, 512))
	require.NoError(t, err)
	seeds = append(seeds, io.Bytes())
	for _, obj := range []uverbs.ObjectID{uverbs.ObjectPD, uverbs.ObjectCQ, uverbs.ObjectQP, uverbs.ObjectSRQ, uverbs.ObjectAH, uverbs.ObjectMR, uverbs.MLX5ObjectUAR} {
		io, err := uverbs.Destroy(make([]byte, 512), obj, 1, 56, uverbs.DriverMLX5)
		require.NoError(t, err)
		seeds = append(seeds, io.Bytes())
	}
	q, err := uverbs.NewIoctl(make([]byte, 512), uverbs.ObjectDevice, uverbs.MethodQueryGIDEntry, uverbs.DriverMLX5)
	require.NoError(t, err)
	for _, at := range []uverbs.AttrFields{uverbs.AttrConstIn(0, 1), uverbs.AttrConstIn(1, 0), uverbs.AttrPtrOut(3, 72, uverbs.GIDEntrySize)} {
		require.NoError(t, q.Add(at))
	}
	seeds = append(seeds, q.Bytes(), []byte{}, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	return seeds
}

// FuzzHandle: no input panics the server, a refusal is a *uverbs.Error
// with an errno and no response bytes, and the server keeps serving (the
// input twice, then a valid command, then Close).
func FuzzHandle(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		r := newRig(t, 1<<20)
		o := r.build(r.s)
		resp := make([]byte, 256)
		for i := 0; i < 2; i++ {
			n, err := r.s.Handle(in, resp)
			if err != nil {
				var ue *uverbs.Error
				require.True(t, errors.As(err, &ue), "%T %v", err, err)
				require.NotZero(t, ue.Errno)
				require.Zero(t, n)
			} else {
				require.LessOrEqual(t, n, len(resp))
			}
		}
		_, err := r.do(r.s, uverbs.CmdQueryQP, &uverbs.QueryQP{Response: 1, QPHandle: o.qp}, nil, uverbs.QueryQPRespSize)
		if err != nil {
			var ue *uverbs.Error
			require.True(t, errors.As(err, &ue))
		}
		require.NoError(t, r.s.Close())
		require.Empty(t, r.s.Objects())
	})
}

// TestWriteFuzzCorpus writes fuzzSeeds to testdata/fuzz/FuzzHandle when
// UVERBSDEV_WRITE_CORPUS is set (the committed corpus).
func TestWriteFuzzCorpus(t *testing.T) {
	if os.Getenv("UVERBSDEV_WRITE_CORPUS") == "" {
		t.Skip("set UVERBSDEV_WRITE_CORPUS=1 to rewrite testdata/fuzz/FuzzHandle")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzHandle")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	for i, s := range fuzzSeeds(t) {
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s)
		require.NoError(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%02d", i)), []byte(body), 0o644))
	}
}
