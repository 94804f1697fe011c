package provider_test

import (
	"testing"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/provider"
	"github.com/stretchr/testify/require"
)

func TestWQEAtomic(t *testing.T) {
	const raddr, rkey = 0x0000_7f00_0000_1008, 0xabcd_0011
	const cmp, swp = 0x0102_0304_0506_0708, 0x1112_1314_1516_1718
	cases := []struct {
		name              string
		op                provider.WROpcode
		mop               mlx5.Opcode
		swapAdd, wantCmp  uint64
		flags             provider.SendFlags
		wantFMCESE        uint8
		sgl               func(e *provider.Env) []provider.SGE
		wantData          int // data segments, each of byte_count 8
		wantDS, wantWQEBB int
	}{
		{name: "cmp_swap", op: provider.WRAtomicCmpSwp, mop: mlx5.OpAtomicCS, swapAdd: swp, wantCmp: cmp,
			flags: provider.SendSignaled, wantFMCESE: mlx5.CECQUpdate,
			sgl:      func(e *provider.Env) []provider.SGE { return []provider.SGE{e.MR.SGE(64, 8)} },
			wantData: 1, wantDS: 4, wantWQEBB: 1},
		// FA: the add value goes in swap_add, compare is zeroed even over a
		// dirty ring; Swap is ignored.
		{name: "fetch_add_fenced", op: provider.WRAtomicFetchAdd, mop: mlx5.OpAtomicFA, swapAdd: cmp, wantCmp: 0,
			flags: provider.SendSignaled | provider.SendFence, wantFMCESE: mlx5.CECQUpdate | mlx5.FenceSmallAndFen,
			sgl:      func(e *provider.Env) []provider.SGE { return []provider.SGE{e.MR.SGE(64, 8)} },
			wantData: 1, wantDS: 4, wantWQEBB: 1},
		// set_data_ptr_seg_atomic: byte_count is 8 whatever the SGE says;
		// zero-length SGEs are skipped as for every opcode.
		{name: "fetch_add_sge16_and_empty", op: provider.WRAtomicFetchAdd, mop: mlx5.OpAtomicFA, swapAdd: cmp, wantCmp: 0,
			sgl: func(e *provider.Env) []provider.SGE {
				return []provider.SGE{e.MR.SGE(0, 0), e.MR.SGE(64, 16), e.MR.SGE(0, 0)}
			},
			wantData: 1, wantDS: 4, wantWQEBB: 1},
		// No result buffer, or two: built as libmlx5 builds them; the device
		// takes such a WQE for malformed and completes it LOC_QP_OP_ERR.
		{name: "no_sge", op: provider.WRAtomicCmpSwp, mop: mlx5.OpAtomicCS, swapAdd: swp, wantCmp: cmp,
			sgl:      func(e *provider.Env) []provider.SGE { return nil },
			wantData: 0, wantDS: 3, wantWQEBB: 1},
		{name: "two_sges", op: provider.WRAtomicCmpSwp, mop: mlx5.OpAtomicCS, swapAdd: swp, wantCmp: cmp,
			sgl:      func(e *provider.Env) []provider.SGE { return []provider.SGE{e.MR.SGE(64, 8), e.MR.SGE(128, 4)} },
			wantData: 2, wantDS: 5, wantWQEBB: 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := provider.NewEnv(t, provider.EnvOpts{})
			provider.ToRTS(t, e.QP)
			ring := e.SQRing(t)
			for i := range ring {
				ring[i] = 0xee
			}
			postOne(t, e, provider.SendWR{Opcode: provider.WRSend}) // wqe_index 1 for the atomic
			sgl := c.sgl(e)
			w, bbs := postOne(t, e, provider.SendWR{WRID: 9, Opcode: c.op, Flags: c.flags, SGL: sgl,
				RemoteAddr: raddr, RKey: rkey, CompareAdd: cmp, Swap: swp, Imm: 0xdeadbeef})
			require.Len(t, w, c.wantDS*16)
			require.Equal(t, c.wantWQEBB, bbs)
			require.Equal(t, mlx5.CtrlFields{WQEIndex: 1, Opcode: c.mop, QPN: e.QP.QPN(), DS: uint8(c.wantDS),
				FMCESE: c.wantFMCESE}, mlx5.CtrlSeg(w).Fields(), "no immediate on atomics")
			require.Equal(t, mlx5.RaddrFields{RAddr: raddr, RKey: rkey}, mlx5.RaddrSeg(w[16:]).Fields())
			require.Equal(t, []byte{0, 0, 0, 0}, w[28:32], "raddr reserved dword")
			a := mlx5.AtomicSeg(w[32:48])
			require.Equal(t, c.swapAdd, a.SwapAdd(), "swap_add")
			require.Equal(t, c.wantCmp, a.Compare(), "compare")
			j := 0
			for _, sge := range sgl {
				if sge.Length == 0 {
					continue
				}
				require.Equal(t, mlx5.DataFields{ByteCount: 8, LKey: sge.LKey, Addr: sge.Addr},
					mlx5.DataSeg(w[48+16*j:]).Fields(), "data seg %d", j)
				j++
			}
			require.Equal(t, c.wantData, j)
		})
	}
}

// TestAtomicCompletions runs atomics through the fake device's engine: the
// requester CQEs become COMP_SWAP / FETCH_ADD completions of 8 bytes, and
// an error CQE keeps the opcode (best effort) with byte_len 0.
func TestAtomicCompletions(t *testing.T) {
	e := provider.NewEnv(t, provider.EnvOpts{Progress: true})
	provider.ToRTS(t, e.QP)
	_, err := e.QP.PostSend([]provider.SendWR{
		{WRID: 1, Opcode: provider.WRAtomicCmpSwp, Flags: provider.SendSignaled, SGL: []provider.SGE{e.MR.SGE(0, 8)},
			RemoteAddr: e.Buf.Addr + 64, RKey: e.MR.RKey, CompareAdd: 0, Swap: 7},
		{WRID: 2, Opcode: provider.WRAtomicFetchAdd, Flags: provider.SendSignaled, SGL: []provider.SGE{e.MR.SGE(8, 8)},
			RemoteAddr: e.Buf.Addr + 72, RKey: e.MR.RKey, CompareAdd: 1},
	})
	require.NoError(t, err)
	wcs := make([]provider.WC, 4)
	got := 0
	for got < 2 {
		n, err := e.CQ.Poll(wcs[got:])
		require.NoError(t, err)
		require.NotZero(t, n)
		got += n
	}
	require.Equal(t, provider.WC{WRID: 1, Opcode: provider.WCCompSwap, ByteLen: 8, QPNum: e.QP.QPN()}, wcs[0])
	require.Equal(t, provider.WC{WRID: 2, Opcode: provider.WCFetchAdd, ByteLen: 8, QPNum: e.QP.QPN()}, wcs[1])
	require.Empty(t, e.Dev.QPs[e.QP.QPN()].Errors)

	// A misaligned remote address is the device's to refuse: posted as is.
	e2 := provider.NewEnv(t, provider.EnvOpts{})
	provider.ToRTS(t, e2.QP)
	idx := e2.QP.SQProducer()
	_, err = e2.QP.PostSend([]provider.SendWR{{WRID: 3, Opcode: provider.WRAtomicFetchAdd, Flags: provider.SendSignaled,
		SGL: []provider.SGE{e2.MR.SGE(0, 8)}, RemoteAddr: e2.Buf.Addr + 3, RKey: e2.MR.RKey, CompareAdd: 1}})
	require.NoError(t, err)
	require.NoError(t, e2.Dev.WriteCQE(e2.CQ.CQN(), mlx5.CQEFields{Opcode: mlx5.CQEReqErr, Syndrome: mlx5.SyndRemoteInvalidReq,
		WQEOpcode: uint8(mlx5.OpAtomicFA), QPN: e2.QP.QPN(), WQECounter: idx, ByteCnt: 8}))
	n, err := e2.CQ.Poll(wcs[:1])
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, provider.WC{WRID: 3, Status: provider.WCRemInvReqErr, Opcode: provider.WCFetchAdd, QPNum: e2.QP.QPN()}, wcs[0])
}

// TestMaxInlineDeviceCap: with a device max_inline_data of 512 the WQE
// room (524 B for a 576-B WQE) is not what the QP reports or allows.
func TestMaxInlineDeviceCap(t *testing.T) {
	dev512 := func(d *provider.FakeDev) { d.Attr.MaxInline = 512 }
	for _, want := range []int{512, 500} {
		e := provider.NewEnv(t, provider.EnvOpts{Setup: dev512,
			Cap: provider.QPCap{MaxSendWR: 8, MaxRecvWR: 1, MaxSendSGE: 2, MaxRecvSGE: 1, MaxInline: want}})
		require.Equal(t, 512, e.QP.Cap().MaxInline, "min(room 524, device 512) for max_inline_data %d", want)
		require.Equal(t, 512, e.Dev.QPs[e.QP.QPN()].Cmd.MaxInline, "CREATE_QP carries the same limit")
		provider.ToRTS(t, e.QP)

		// 512 bytes in two SGEs: accepted, one inline segment of 516 -> 528 B.
		w, _ := postOne(t, e, provider.SendWR{Opcode: provider.WRSend, Flags: provider.SendInline,
			SGL: []provider.SGE{e.MR.SGE(0, 500), e.MR.SGE(1000, 12)}})
		require.Equal(t, uint32(512), mlx5.InlineSeg(w[16:]).Len())
		require.Len(t, w, 16+mlx5.InlineSegSize(512))

		before := e.QP.SQProducer()
		for _, sgl := range [][]provider.SGE{{e.MR.SGE(0, 513)}, {e.MR.SGE(0, 500), e.MR.SGE(1000, 13)}, {e.MR.SGE(0, 524)}} {
			bad, err := e.QP.PostSend([]provider.SendWR{{Opcode: provider.WRSend, Flags: provider.SendInline, SGL: sgl}})
			require.ErrorIs(t, err, provider.ErrInlineTooBig)
			require.Zero(t, bad)
			require.Equal(t, before, e.QP.SQProducer(), "nothing posted")
		}
	}

	// Asking for more than the device's max_inline_data fails at create.
	e := provider.NewEnv(t, provider.EnvOpts{Setup: dev512})
	_, err := e.Ctx.CreateQP(e.PD, provider.QPInitAttr{Type: provider.QPTypeRC, SendCQ: e.CQ, RecvCQ: e.CQ,
		Cap: provider.QPCap{MaxSendWR: 1, MaxSendSGE: 1, MaxInline: 513}})
	require.ErrorIs(t, err, provider.ErrInvalidArg)

	// Where the room is the smaller one, it is still what is reported.
	e = provider.NewEnv(t, provider.EnvOpts{Setup: dev512,
		Cap: provider.QPCap{MaxSendWR: 8, MaxSendSGE: 1, MaxInline: 100}})
	require.Equal(t, 140, e.QP.Cap().MaxInline, "48 + 4+100 -> 192 B WQE: 192-48-4")
}

func TestSGELengthLimits(t *testing.T) {
	e := provider.NewEnv(t, provider.EnvOpts{})
	provider.ToRTS(t, e.QP)
	// 2^31-1 is a valid byte_count (the largest golden one, too).
	w, _ := postOne(t, e, provider.SendWR{Opcode: provider.WRRDMAWrite,
		SGL: []provider.SGE{{Addr: e.Buf.Addr, Length: 1<<31 - 1, LKey: e.MR.LKey}}})
	require.Equal(t, uint32(1<<31-1), mlx5.DataSeg(w[32:]).ByteCount())
	require.False(t, mlx5.IsInline(mlx5.DataSeg(w[32:]).ByteCount()))
	// Exactly the 2^31 max message in two SGEs: accepted.
	postOne(t, e, provider.SendWR{Opcode: provider.WRSend,
		SGL: []provider.SGE{{Addr: e.Buf.Addr, Length: 1 << 30, LKey: e.MR.LKey}, {Addr: e.Buf.Addr, Length: 1 << 30, LKey: e.MR.LKey}}})
	// One more byte: refused.
	_, err := e.QP.PostSend([]provider.SendWR{{Opcode: provider.WRSend,
		SGL: []provider.SGE{{Addr: e.Buf.Addr, Length: 1 << 30, LKey: e.MR.LKey}, {Addr: e.Buf.Addr, Length: 1<<30 + 1, LKey: e.MR.LKey}}}})
	require.ErrorIs(t, err, provider.ErrLocalLength)
	require.ErrorIs(t, err, provider.ErrInvalidArg)

	// A device with a smaller max message size (reported as max_mr_size).
	small := provider.NewEnv(t, provider.EnvOpts{Setup: func(d *provider.FakeDev) { d.Attr.MaxMRSize = 1 << 20 }})
	provider.ToRTS(t, small.QP)
	postOne(t, small, provider.SendWR{Opcode: provider.WRSend, SGL: []provider.SGE{{Addr: small.Buf.Addr, Length: 1 << 20, LKey: 1}}})
	_, err = small.QP.PostSend([]provider.SendWR{{Opcode: provider.WRRDMARead,
		SGL: []provider.SGE{{Addr: small.Buf.Addr, Length: 1<<20 + 1, LKey: 1}}}})
	require.ErrorIs(t, err, provider.ErrLocalLength)

	// Receives: the 2^31 rule only, on every SGE.
	bad, err := e.QP.PostRecv([]provider.RecvWR{
		{WRID: 1, SGL: []provider.SGE{{Addr: e.Buf.Addr, Length: 1<<31 - 1, LKey: e.MR.LKey}, {Addr: e.Buf.Addr, Length: 1<<31 - 1, LKey: e.MR.LKey}}},
		{WRID: 2, SGL: []provider.SGE{e.MR.SGE(0, 8), {Addr: e.Buf.Addr, Length: 1 << 31, LKey: e.MR.LKey}}},
	})
	require.ErrorIs(t, err, provider.ErrLocalLength)
	require.ErrorIs(t, err, provider.ErrInvalidArg)
	var oe *provider.OpError
	require.ErrorAs(t, err, &oe)
	require.Equal(t, "post_recv", oe.Op)
	require.Equal(t, 1, oe.Index)
	require.Equal(t, 1, bad)
	require.Equal(t, uint32(1), e.DBR(t).Word(mlx5.DBRRecv), "only the first receive posted")
	bad, err = e.QP.PostRecv([]provider.RecvWR{{SGL: []provider.SGE{{Length: 0xffffffff}}}})
	require.ErrorIs(t, err, provider.ErrLocalLength)
	require.Zero(t, bad)
}

// TestPostInErr: in ERR both queues take posts (the device flushes them);
// the provider moved the QP there itself, from RTS and from INIT.
func TestPostInErr(t *testing.T) {
	toErr := func(t *testing.T, e *provider.Env) {
		require.NoError(t, e.QP.Modify(&provider.QPAttr{QPState: provider.QPStateErr}, mlx5.AttrState))
		require.Equal(t, provider.QPStateErr, e.QP.State())
	}
	for _, from := range []string{"RTS", "INIT"} {
		t.Run(from, func(t *testing.T) {
			e := provider.NewEnv(t, provider.EnvOpts{})
			init, _, _ := provider.RTSAttrs()
			if from == "RTS" {
				provider.ToRTS(t, e.QP)
			} else {
				require.NoError(t, e.QP.Modify(init, provider.InitMask))
			}
			toErr(t, e)
			bad, err := e.QP.PostSend([]provider.SendWR{send(e, 1, provider.SendSignaled),
				{WRID: 2, Opcode: provider.WRAtomicFetchAdd, SGL: []provider.SGE{e.MR.SGE(0, 8)}, CompareAdd: 1}})
			require.NoError(t, err)
			require.Equal(t, 2, bad)
			require.Equal(t, uint32(2), e.DBR(t).Word(mlx5.DBRSend))
			bad, err = e.QP.PostRecv([]provider.RecvWR{{WRID: 3, SGL: []provider.SGE{e.MR.SGE(0, 64)}}, {WRID: 4}})
			require.NoError(t, err)
			require.Equal(t, 2, bad)
			require.Equal(t, uint32(2), e.DBR(t).Word(mlx5.DBRRecv))
		})
	}
}

func TestCounters(t *testing.T) {
	e := provider.NewEnv(t, provider.EnvOpts{Progress: true})
	e.Dev.HW = map[string]uint64{"out_of_sequence": 3, "packet_seq_err": 1, "local_ack_timeout_err": 0}
	c, err := e.Ctx.Counters()
	require.NoError(t, err)
	require.Equal(t, e.Dev.HW, c)
	c["out_of_sequence"] = 99
	delete(c, "packet_seq_err")
	require.Equal(t, uint64(3), e.Dev.HW["out_of_sequence"], "a copy: the device's map is untouched")
	require.Contains(t, e.Dev.HW, "packet_seq_err")
	e.Dev.HW["duplicate_request"] = 5
	c2, err := e.Ctx.Counters()
	require.NoError(t, err)
	require.Equal(t, uint64(5), c2["duplicate_request"], "each call is a fresh snapshot")

	e.Dev.HW = nil
	c3, err := e.Ctx.Counters()
	require.NoError(t, err)
	require.NotNil(t, c3)
	require.Empty(t, c3)

	// A control object that is no CounterSource.
	plain := provider.NewEnv(t, provider.EnvOpts{})
	_, err = plain.Ctx.Counters()
	require.ErrorIs(t, err, provider.ErrNotSupported)
	var oe *provider.OpError
	require.ErrorAs(t, err, &oe)
	require.Equal(t, "counters", oe.Op)

	require.NoError(t, e.Ctx.Close())
	_, err = e.Ctx.Counters()
	require.ErrorIs(t, err, provider.ErrClosed)
}
