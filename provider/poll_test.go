package provider_test

import (
	"fmt"
	"testing"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/provider"
	"github.com/stretchr/testify/require"
)

func send(e *provider.Env, wrid uint64, flags provider.SendFlags) provider.SendWR {
	return provider.SendWR{WRID: wrid, Opcode: provider.WRSend, Flags: flags, SGL: []provider.SGE{e.MR.SGE(0, 8)}}
}

// reqCQE is the REQ CQE the device writes for the WQE at idx.
func reqCQE(e *provider.Env, idx uint16, op mlx5.Opcode) mlx5.CQEFields {
	return mlx5.CQEFields{Opcode: mlx5.CQEReq, WQEOpcode: uint8(op), QPN: e.QP.QPN(), WQECounter: idx}
}

func setCI(t *testing.T, e *provider.Env) uint32 {
	b, err := e.Mem.Slice(e.CQ.Info().DBRAddr, 8)
	require.NoError(t, err)
	return mlx5.DBRec(b).Word(mlx5.DBRSetCI)
}

func TestPollOwnerBitAcrossLaps(t *testing.T) {
	e := provider.NewEnv(t, provider.EnvOpts{CQEntries: 3})
	provider.ToRTS(t, e.QP)
	require.Equal(t, 4, e.CQ.Size(), "roundup_pow2(3+1)")
	require.Equal(t, 3, e.CQ.Entries())
	var wc [4]provider.WC
	n, err := e.CQ.Poll(wc[:])
	require.NoError(t, err)
	require.Zero(t, n, "fresh ring: every op_own is 0xF0")
	for i := 0; i < 2*4+2; i++ { // two and a half laps
		idx := e.QP.SQProducer()
		_, err := e.QP.PostSend([]provider.SendWR{send(e, uint64(100+i), provider.SendSignaled)})
		require.NoError(t, err)
		// Before the device writes, the slot holds last lap's CQE (or
		// INVALID): its owner bit must not pass.
		n, err := e.CQ.Poll(wc[:])
		require.NoError(t, err)
		require.Zero(t, n, "iteration %d: stale CQE taken as new", i)
		require.NoError(t, e.Dev.WriteCQE(e.CQ.CQN(), reqCQE(e, idx, mlx5.OpSend)))
		cqe := e.CQ.CQE(uint32(i))
		require.Equal(t, i/4%2 == 1, mlx5.CQE64(cqe).Owner(), "device owner bit for lap %d", i/4)
		n, err = e.CQ.Poll(wc[:])
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, uint64(100+i), wc[0].WRID)
		require.Equal(t, uint32(i+1), e.CQ.ConsumerIndex())
		require.Equal(t, uint32(i+1), setCI(t, e), "set_ci after the batch")
	}
}

func TestPollBatchAndPartial(t *testing.T) {
	e := provider.NewEnv(t, provider.EnvOpts{})
	provider.ToRTS(t, e.QP)
	for i := 0; i < 5; i++ {
		idx := e.QP.SQProducer()
		_, err := e.QP.PostSend([]provider.SendWR{send(e, uint64(i), provider.SendSignaled)})
		require.NoError(t, err)
		require.NoError(t, e.Dev.WriteCQE(e.CQ.CQN(), reqCQE(e, idx, mlx5.OpSend)))
	}
	var wc [3]provider.WC
	n, err := e.CQ.Poll(wc[:])
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.Equal(t, uint32(3), setCI(t, e))
	n, err = e.CQ.Poll(wc[:])
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Equal(t, []uint64{3, 4}, []uint64{wc[0].WRID, wc[1].WRID})
	n, err = e.CQ.Poll(nil)
	require.NoError(t, err)
	require.Zero(t, n)
}

func TestUnsignalledRetirement(t *testing.T) {
	// 1 SGE: 64 B WQEs, 4 WRs max outstanding.
	e := provider.NewEnv(t, provider.EnvOpts{Cap: provider.QPCap{MaxSendWR: 4, MaxRecvWR: 1, MaxSendSGE: 1}})
	provider.ToRTS(t, e.QP)
	require.Equal(t, 4, e.QP.Cap().MaxSendWR)
	_, err := e.QP.PostSend([]provider.SendWR{send(e, 1, 0), send(e, 2, 0), send(e, 3, 0)})
	require.NoError(t, err)
	sig := e.QP.SQProducer()
	_, err = e.QP.PostSend([]provider.SendWR{send(e, 4, provider.SendSignaled)})
	require.NoError(t, err)
	bad, err := e.QP.PostSend([]provider.SendWR{send(e, 5, 0)})
	require.ErrorIs(t, err, provider.ErrQueueFull)
	require.Zero(t, bad)

	require.NoError(t, e.Dev.WriteCQE(e.CQ.CQN(), reqCQE(e, sig, mlx5.OpSend)))
	var wc [4]provider.WC
	n, err := e.CQ.Poll(wc[:])
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, uint64(4), wc[0].WRID)
	// The one CQE retired all four WRs.
	bad, err = e.QP.PostSend([]provider.SendWR{send(e, 5, 0), send(e, 6, 0), send(e, 7, 0), send(e, 8, 0)})
	require.NoError(t, err)
	require.Equal(t, 4, bad)
	// A CQE for an already retired WQE is a device bug: ErrBadCQE.
	require.NoError(t, e.Dev.WriteCQE(e.CQ.CQN(), reqCQE(e, sig, mlx5.OpSend)))
	n, err = e.CQ.Poll(wc[:])
	require.ErrorIs(t, err, provider.ErrBadCQE)
	require.Zero(t, n)
}

func TestErrorCQEStatus(t *testing.T) {
	cases := []struct {
		synd mlx5.Syndrome
		want provider.WCStatus
	}{
		{mlx5.SyndLocalLength, provider.WCLocLenErr},
		{mlx5.SyndLocalQPOp, provider.WCLocQPOpErr},
		{mlx5.SyndLocalProt, provider.WCLocProtErr},
		{mlx5.SyndWRFlush, provider.WCWRFlushErr},
		{mlx5.SyndMWBind, provider.WCMWBindErr},
		{mlx5.SyndBadResp, provider.WCBadRespErr},
		{mlx5.SyndLocalAccess, provider.WCLocAccessErr},
		{mlx5.SyndRemoteInvalidReq, provider.WCRemInvReqErr},
		{mlx5.SyndRemoteAccess, provider.WCRemAccessErr},
		{mlx5.SyndRemoteOp, provider.WCRemOpErr},
		{mlx5.SyndTransportRetry, provider.WCRetryExcErr},
		{mlx5.SyndRNRRetry, provider.WCRNRRetryExcErr},
		{mlx5.SyndRemoteAbort, provider.WCRemAbortErr},
		{0x00, provider.WCGeneralErr},
		{0x03, provider.WCGeneralErr},
		{0x07, provider.WCGeneralErr},
		{0x99, provider.WCGeneralErr},
	}
	for _, c := range cases {
		for _, side := range []mlx5.CQEOpcode{mlx5.CQEReqErr, mlx5.CQERespErr} {
			t.Run(fmt.Sprintf("%v/%v", side, c.synd), func(t *testing.T) {
				e := provider.NewEnv(t, provider.EnvOpts{})
				provider.ToRTS(t, e.QP)
				idx := e.QP.SQProducer()
				_, err := e.QP.PostSend([]provider.SendWR{send(e, 0x5e, 0)})
				require.NoError(t, err)
				_, err = e.QP.PostRecv([]provider.RecvWR{{WRID: 0x4e}})
				require.NoError(t, err)
				require.NoError(t, e.Dev.WriteCQE(e.CQ.CQN(), mlx5.CQEFields{Opcode: side, Syndrome: c.synd,
					VendorErrSynd: 0x42, WQEOpcode: uint8(mlx5.OpSend), QPN: e.QP.QPN(), WQECounter: idx, ByteCnt: 77}))
				var wc [1]provider.WC
				n, err := e.CQ.Poll(wc[:])
				require.NoError(t, err)
				require.Equal(t, 1, n)
				require.Equal(t, c.want, wc[0].Status, "%v", wc[0].Status)
				require.Equal(t, uint32(0x42), wc[0].VendorErr)
				require.Equal(t, e.QP.QPN(), wc[0].QPNum)
				if side == mlx5.CQEReqErr {
					require.Equal(t, uint64(0x5e), wc[0].WRID)
					require.Equal(t, provider.WCSend, wc[0].Opcode)
				} else {
					require.Equal(t, uint64(0x4e), wc[0].WRID)
					require.Equal(t, provider.WCRecv, wc[0].Opcode)
				}
			})
		}
	}
}

func TestRequesterWC(t *testing.T) {
	cases := []struct {
		op      provider.WROpcode
		mop     mlx5.Opcode
		wantOp  provider.WCOpcode
		flags   provider.WCFlags
		byteLen uint32 // from the CQE's byte_cnt (123) only for READ; 8 for atomics whatever byte_cnt says
	}{
		{provider.WRRDMAWrite, mlx5.OpRDMAWrite, provider.WCRDMAWrite, 0, 0},
		{provider.WRRDMAWriteImm, mlx5.OpRDMAWriteImm, provider.WCRDMAWrite, provider.WCFlagWithImm, 0},
		{provider.WRSend, mlx5.OpSend, provider.WCSend, 0, 0},
		{provider.WRSendImm, mlx5.OpSendImm, provider.WCSend, provider.WCFlagWithImm, 0},
		{provider.WRRDMARead, mlx5.OpRDMARead, provider.WCRDMARead, 0, 123},
		{provider.WRAtomicCmpSwp, mlx5.OpAtomicCS, provider.WCCompSwap, 0, 8},
		{provider.WRAtomicFetchAdd, mlx5.OpAtomicFA, provider.WCFetchAdd, 0, 8},
	}
	for _, c := range cases {
		t.Run(c.op.String(), func(t *testing.T) {
			e := provider.NewEnv(t, provider.EnvOpts{})
			provider.ToRTS(t, e.QP)
			idx := e.QP.SQProducer()
			_, err := e.QP.PostSend([]provider.SendWR{{WRID: 0xfeed, Opcode: c.op, Flags: provider.SendSignaled,
				SGL: []provider.SGE{e.MR.SGE(0, 123)}, RKey: 1}})
			require.NoError(t, err)
			f := reqCQE(e, idx, c.mop)
			f.ByteCnt = 123
			require.NoError(t, e.Dev.WriteCQE(e.CQ.CQN(), f))
			var wc [1]provider.WC
			n, err := e.CQ.Poll(wc[:])
			require.NoError(t, err)
			require.Equal(t, 1, n)
			require.Equal(t, provider.WC{WRID: 0xfeed, Status: provider.WCSuccess, Opcode: c.wantOp, ByteLen: c.byteLen,
				QPNum: e.QP.QPN(), Flags: c.flags}, wc[0])
		})
	}
}

func TestResponderWC(t *testing.T) {
	cases := []struct {
		op     mlx5.CQEOpcode
		wantOp provider.WCOpcode
		flags  provider.WCFlags
		imm    bool
	}{
		{mlx5.CQERespWrImm, provider.WCRecvRDMAWithImm, provider.WCFlagWithImm, true},
		{mlx5.CQERespSend, provider.WCRecv, 0, false},
		{mlx5.CQERespSendImm, provider.WCRecv, provider.WCFlagWithImm, true},
		{mlx5.CQERespSendInv, provider.WCRecv, provider.WCFlagWithInv, true},
	}
	for _, c := range cases {
		t.Run(c.op.String(), func(t *testing.T) {
			e := provider.NewEnv(t, provider.EnvOpts{})
			provider.ToRTS(t, e.QP)
			_, err := e.QP.PostRecv([]provider.RecvWR{{WRID: 1, SGL: []provider.SGE{e.MR.SGE(0, 4096)}},
				{WRID: 2, SGL: []provider.SGE{e.MR.SGE(4096, 4096)}}})
			require.NoError(t, err)
			for i := 0; i < 2; i++ {
				require.NoError(t, e.Dev.Deliver(e.QP.QPN(), c.op, uint32(1000+i), 0x11223344, 0x2_000777))
			}
			raw := e.CQ.CQE(0)
			require.Equal(t, []byte{0x11, 0x22, 0x33, 0x44}, raw[mlx5.CQEOffImm:mlx5.CQEOffImm+4])
			var wc [2]provider.WC
			n, err := e.CQ.Poll(wc[:])
			require.NoError(t, err)
			require.Equal(t, 2, n)
			for i := 0; i < 2; i++ {
				want := provider.WC{WRID: uint64(i + 1), Status: provider.WCSuccess, Opcode: c.wantOp, ByteLen: uint32(1000 + i),
					QPNum: e.QP.QPN(), SrcQP: 0x000777, Flags: c.flags,
					// flags_rqpn[25:24] = 2: IPv4, which libmlx5 also reads as SL 2.
					SL: 2, NetworkHdr: provider.NetHdrIPv4}
				if c.imm {
					want.Imm = 0x11223344 // host order of the big-endian bytes
				}
				require.Equal(t, want, wc[i])
			}
		})
	}
}

func TestPollGRHFlag(t *testing.T) {
	e := provider.NewEnv(t, provider.EnvOpts{})
	provider.ToRTS(t, e.QP)
	_, err := e.QP.PostRecv([]provider.RecvWR{{WRID: 1}})
	require.NoError(t, err)
	require.NoError(t, e.Dev.WriteCQE(e.CQ.CQN(), mlx5.CQEFields{Opcode: mlx5.CQERespSend, QPN: e.QP.QPN(), FlagsRQPN: 2 << 28}))
	var wc [1]provider.WC
	n, err := e.CQ.Poll(wc[:])
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, provider.WCFlagGRH, wc[0].Flags)
}

func TestPollBadCQEs(t *testing.T) {
	cases := []struct {
		name string
		cqe  func(e *provider.Env) mlx5.CQEFields
	}{
		{"unknown_qpn", func(e *provider.Env) mlx5.CQEFields {
			return mlx5.CQEFields{Opcode: mlx5.CQEReq, QPN: 0xabcdef}
		}},
		{"req_never_posted", func(e *provider.Env) mlx5.CQEFields { return reqCQE(e, 5, mlx5.OpSend) }},
		{"resp_no_receive", func(e *provider.Env) mlx5.CQEFields {
			return mlx5.CQEFields{Opcode: mlx5.CQERespSend, QPN: e.QP.QPN()}
		}},
		{"resize_opcode", func(e *provider.Env) mlx5.CQEFields {
			return mlx5.CQEFields{Opcode: mlx5.CQEResizeCQ, QPN: e.QP.QPN()}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := provider.NewEnv(t, provider.EnvOpts{})
			provider.ToRTS(t, e.QP)
			idx := e.QP.SQProducer()
			_, err := e.QP.PostSend([]provider.SendWR{send(e, 1, provider.SendSignaled)})
			require.NoError(t, err)
			require.NoError(t, e.Dev.WriteCQE(e.CQ.CQN(), reqCQE(e, idx, mlx5.OpSend)))
			require.NoError(t, e.Dev.WriteCQE(e.CQ.CQN(), c.cqe(e)))
			var wc [4]provider.WC
			n, err := e.CQ.Poll(wc[:])
			require.ErrorIs(t, err, provider.ErrBadCQE)
			var oe *provider.OpError
			require.ErrorAs(t, err, &oe)
			require.Equal(t, "poll_cq", oe.Op)
			require.Equal(t, 1, n, "the good completion before it is returned")
			require.Equal(t, uint32(2), e.CQ.ConsumerIndex(), "the bad CQE is consumed")
			require.Equal(t, uint32(2), setCI(t, e))
			n, err = e.CQ.Poll(wc[:])
			require.NoError(t, err)
			require.Zero(t, n)
		})
	}
}

func TestPollDrivesProgressor(t *testing.T) {
	e := provider.NewEnv(t, provider.EnvOpts{Progress: true})
	provider.ToRTS(t, e.QP)
	var wc [4]provider.WC
	n, err := e.CQ.Poll(wc[:])
	require.NoError(t, err)
	require.Zero(t, n, "nothing scheduled: returns instead of spinning")

	// Unsignalled WQEs run but give nothing; the signalled one is found.
	_, err = e.QP.PostSend([]provider.SendWR{send(e, 1, 0), send(e, 2, 0), send(e, 3, provider.SendSignaled)})
	require.NoError(t, err)
	n, err = e.CQ.Poll(wc[:])
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, uint64(3), wc[0].WRID)
	require.Empty(t, e.Dev.QPs[e.QP.QPN()].Errors)
}

func TestHostWorkerCalls(t *testing.T) {
	e := provider.NewEnv(t, provider.EnvOpts{Progress: true})
	provider.ToRTS(t, e.QP)
	e.Dev.Host = nil
	_, err := e.QP.PostSend([]provider.SendWR{write64(e), {Opcode: provider.WRSend, Flags: provider.SendSignaled | provider.SendInline,
		SGL: []provider.SGE{e.MR.SGE(0, 40)}}})
	require.NoError(t, err)
	var wc [2]provider.WC
	n, err := e.CQ.Poll(wc[:])
	require.NoError(t, err)
	require.Equal(t, 1, n)
	q := fmt.Sprintf("%#x", e.QP.QPN())
	require.Equal(t, []string{"wqe_build " + q + " 48", "wqe_build " + q + " 64", "dbr_update " + q + " 4", "poll " + q + " 64"}, e.Dev.Host)
}

func TestCQDestroyAndClean(t *testing.T) {
	e := provider.NewEnv(t, provider.EnvOpts{})
	provider.ToRTS(t, e.QP)
	other, err := e.Ctx.CreateQP(e.PD, provider.QPInitAttr{Type: provider.QPTypeRC, SendCQ: e.CQ, RecvCQ: e.CQ,
		Cap: provider.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	provider.ToRTS(t, other)
	// CQEs interleaved from two QPs; destroying one removes only its own.
	for i := 0; i < 3; i++ {
		idx := e.QP.SQProducer()
		_, err := e.QP.PostSend([]provider.SendWR{send(e, uint64(10+i), provider.SendSignaled)})
		require.NoError(t, err)
		require.NoError(t, e.Dev.WriteCQE(e.CQ.CQN(), reqCQE(e, idx, mlx5.OpSend)))
		_, err = other.PostRecv([]provider.RecvWR{{WRID: uint64(20 + i)}})
		require.NoError(t, err)
		require.NoError(t, e.Dev.Deliver(other.QPN(), mlx5.CQERespSend, 1, 0, 0))
	}
	require.ErrorIs(t, e.CQ.Destroy(), provider.ErrBusy)
	require.NoError(t, other.Destroy())
	var wc [8]provider.WC
	n, err := e.CQ.Poll(wc[:])
	require.NoError(t, err)
	require.Equal(t, 3, n)
	for i := 0; i < 3; i++ {
		require.Equal(t, uint64(10+i), wc[i].WRID)
	}
	require.ErrorIs(t, e.CQ.Destroy(), provider.ErrBusy)
	require.NoError(t, e.QP.Destroy())
	require.NoError(t, e.CQ.Destroy())
	_, err = e.CQ.Poll(wc[:])
	require.ErrorIs(t, err, provider.ErrClosed)
}

func TestCQInit(t *testing.T) {
	e := provider.NewEnv(t, provider.EnvOpts{CQEntries: 100})
	info := e.CQ.Info()
	require.Equal(t, 128, info.Entries)
	ring, err := e.Mem.Slice(info.RingAddr, info.Entries*64)
	require.NoError(t, err)
	for i := 0; i < info.Entries; i++ {
		require.Equal(t, byte(0xF0), ring[i*64+63])
	}
	cmd := e.Dev.CQs[e.CQ.CQN()].Cmd
	require.Equal(t, mlx5.CreateCQCmd{Entries: 128, CQESize: 64, BufAddr: info.RingAddr, DBAddr: info.DBRAddr, UARIndex: 1}, cmd)
	require.Equal(t, append(make([]byte, 63), 0xF0), e.CQ.CQE(0))
}
