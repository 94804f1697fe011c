package provider_test

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/provider"
	"github.com/stretchr/testify/require"
)

// postOne posts wr on a fresh RTS QP and returns the WQE bytes and how
// many WQEBBs cur_post advanced.
func postOne(t *testing.T, e *provider.Env, wr provider.SendWR) ([]byte, int) {
	t.Helper()
	before := e.QP.SQProducer()
	bad, err := e.QP.PostSend([]provider.SendWR{wr})
	require.NoError(t, err)
	require.Equal(t, 1, bad)
	w, err := e.QP.WQE(before)
	require.NoError(t, err)
	return w, int(e.QP.SQProducer() - before)
}

func TestWQELayoutPerOpcode(t *testing.T) {
	const raddr, rkey, imm = 0x0000_1234_5678_9abc, 0xabcd_0011, 0x11223344
	cases := []struct {
		op        provider.WROpcode
		mop       mlx5.Opcode
		raddr     bool
		immInCtrl bool
	}{
		{provider.WRRDMAWrite, mlx5.OpRDMAWrite, true, false},
		{provider.WRRDMAWriteImm, mlx5.OpRDMAWriteImm, true, true},
		{provider.WRSend, mlx5.OpSend, false, false},
		{provider.WRSendImm, mlx5.OpSendImm, false, true},
		{provider.WRRDMARead, mlx5.OpRDMARead, true, false},
	}
	for _, c := range cases {
		for _, nsge := range []int{1, 3} {
			t.Run(fmt.Sprintf("%v/%dsge", c.op, nsge), func(t *testing.T) {
				e := provider.NewEnv(t, provider.EnvOpts{})
				provider.ToRTS(t, e.QP)
				// Advance cur_post so wqe_index is not trivially 0.
				for i := 0; i < 3; i++ {
					postOne(t, e, provider.SendWR{Opcode: provider.WRSend, SGL: []provider.SGE{e.MR.SGE(0, 8)}})
				}
				sgl := make([]provider.SGE, nsge)
				for i := range sgl {
					sgl[i] = e.MR.SGE(uint64(i)*4096+16, uint32(100+i))
				}
				idx := e.QP.SQProducer()
				w, bbs := postOne(t, e, provider.SendWR{WRID: 7, Opcode: c.op, Flags: provider.SendSignaled, SGL: sgl,
					Imm: imm, RemoteAddr: raddr, RKey: rkey})

				wantDS := 1 + nsge
				if c.raddr {
					wantDS++
				}
				require.Len(t, w, wantDS*16)
				require.Equal(t, mlx5.WQEBBs(wantDS), bbs)

				ctrl := mlx5.CtrlSeg(w).Fields()
				wantImm := uint32(0)
				if c.immInCtrl {
					wantImm = imm
				}
				require.Equal(t, mlx5.CtrlFields{Opmod: 0, WQEIndex: idx, Opcode: c.mop, QPN: e.QP.QPN(), DS: uint8(wantDS),
					Signature: 0, FMCESE: mlx5.CECQUpdate, Imm: wantImm}, ctrl)
				if c.immInCtrl {
					require.Equal(t, []byte{0x11, 0x22, 0x33, 0x44}, w[12:16], "immediate is big-endian on the wire")
				}
				require.Equal(t, []byte{0, 0}, w[9:11], "dci_stream / reserved bytes")
				seg := w[16:]
				if c.raddr {
					require.Equal(t, mlx5.RaddrFields{RAddr: raddr, RKey: rkey}, mlx5.RaddrSeg(seg).Fields())
					require.Equal(t, []byte{0, 0, 0, 0}, seg[12:16])
					seg = seg[16:]
				}
				for i := 0; i < nsge; i++ {
					require.Equal(t, mlx5.DataFields{ByteCount: sgl[i].Length, LKey: e.MR.LKey, Addr: sgl[i].Addr},
						mlx5.DataSeg(seg[16*i:]).Fields(), "data seg %d", i)
				}
			})
		}
	}
}

func TestWQEInline(t *testing.T) {
	for _, op := range []provider.WROpcode{provider.WRSend, provider.WRRDMAWrite, provider.WRSendImm} {
		for _, n := range []int{0, 1, 12, 13, 60, 200} {
			t.Run(fmt.Sprintf("%v/%dB", op, n), func(t *testing.T) {
				e := provider.NewEnv(t, provider.EnvOpts{})
				provider.ToRTS(t, e.QP)
				// Two SGEs from different places: the inline segment is their
				// concatenation. A zero-length SGE in the middle is ignored.
				a, b := n/3, n-n/3
				sgl := []provider.SGE{e.MR.SGE(1000, uint32(a)), e.MR.SGE(0, 0), e.MR.SGE(20000, uint32(b))}
				want := append(append([]byte{}, e.Buf.Bytes[1000:1000+a]...), e.Buf.Bytes[20000:20000+b]...)
				w, bbs := postOne(t, e, provider.SendWR{Opcode: op, Flags: provider.SendInline, SGL: sgl, RemoteAddr: 0x1000, RKey: 5})

				hdr := 1
				if op == provider.WRRDMAWrite {
					hdr = 2
				}
				wantDS := hdr
				if n > 0 { // libmlx5 writes no inline segment for zero bytes
					wantDS += mlx5.InlineSegSize(n) / 16
				}
				require.Len(t, w, wantDS*16)
				require.Equal(t, uint8(wantDS), mlx5.CtrlSeg(w).DS())
				require.Equal(t, mlx5.WQEBBs(wantDS), bbs)
				require.Equal(t, uint8(0), mlx5.CtrlSeg(w).FMCESE(), "unsignalled")
				if n == 0 {
					return
				}
				seg := mlx5.InlineSeg(w[hdr*16:])
				require.Equal(t, uint32(n)|mlx5.InlineFlag, binary.BigEndian.Uint32(seg))
				require.Equal(t, uint32(n), seg.Len())
				require.Equal(t, want, []byte(seg[4:4+n]))
				require.Equal(t, make([]byte, len(seg)-4-n), []byte(seg[4+n:]), "padding")
			})
		}
	}
}

func TestWQEFlags(t *testing.T) {
	cases := []struct {
		name   string
		flags  provider.SendFlags
		sigAll bool
		want   uint8
	}{
		{"none", 0, false, 0},
		{"signaled", provider.SendSignaled, false, mlx5.CECQUpdate},
		{"solicited", provider.SendSolicited, false, mlx5.SolicitedEvent},
		{"fence", provider.SendFence, false, mlx5.FenceSmallAndFen},
		{"all", provider.SendFence | provider.SendSignaled | provider.SendSolicited, false, 0x8a},
		{"sig_all", 0, true, mlx5.CECQUpdate},
		{"sig_all+signaled", provider.SendSignaled, true, mlx5.CECQUpdate},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := provider.NewEnv(t, provider.EnvOpts{SigAll: c.sigAll})
			provider.ToRTS(t, e.QP)
			w, _ := postOne(t, e, provider.SendWR{Opcode: provider.WRSend, Flags: c.flags, SGL: []provider.SGE{e.MR.SGE(0, 4)}})
			require.Equal(t, c.want, mlx5.CtrlSeg(w).FMCESE())
		})
	}
}

func TestWQEZeroLengthSGEsSkipped(t *testing.T) {
	e := provider.NewEnv(t, provider.EnvOpts{})
	provider.ToRTS(t, e.QP)
	w, bbs := postOne(t, e, provider.SendWR{Opcode: provider.WRSend,
		SGL: []provider.SGE{e.MR.SGE(0, 0), e.MR.SGE(64, 8), e.MR.SGE(128, 0)}})
	require.Equal(t, uint8(2), mlx5.CtrlSeg(w).DS())
	require.Equal(t, 1, bbs)
	require.Equal(t, mlx5.DataFields{ByteCount: 8, LKey: e.MR.LKey, Addr: e.Buf.Addr + 64}, mlx5.DataSeg(w[16:]).Fields())

	// No SGEs at all: a ctrl-only WQE (DS 1).
	w, _ = postOne(t, e, provider.SendWR{Opcode: provider.WRSend})
	require.Equal(t, uint8(1), mlx5.CtrlSeg(w).DS())
}

func TestQueueSizing(t *testing.T) {
	cases := []struct {
		name              string
		cap               provider.QPCap
		wantSQBBs, wantRQ int
		wantStride        int
		wantCap           provider.QPCap
	}{
		// 48 + 16 = 64 B WQE: one WQEBB per WR.
		{"1sge", provider.QPCap{MaxSendWR: 10, MaxRecvWR: 10, MaxSendSGE: 1, MaxRecvSGE: 1}, 16, 16, 16,
			provider.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: 12}},
		// 48 + 4*16 = 112 -> 128 B: two WQEBBs per WR.
		{"4sge", provider.QPCap{MaxSendWR: 64, MaxRecvWR: 3, MaxSendSGE: 4, MaxRecvSGE: 3}, 128, 4, 64,
			provider.QPCap{MaxSendWR: 64, MaxRecvWR: 4, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInline: 76}},
		// Inline 256: 48 + 272 = 320 -> 320 B (5 BBs); 3 WRs -> 960 -> 1024 B ring.
		{"inline256", provider.QPCap{MaxSendWR: 3, MaxRecvWR: 1, MaxSendSGE: 1, MaxInline: 256}, 16, 4, 16,
			provider.QPCap{MaxSendWR: 3, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: 268}},
		{"no_rq", provider.QPCap{MaxSendWR: 1, MaxSendSGE: 1}, 1, 0, 0,
			provider.QPCap{MaxSendWR: 1, MaxSendSGE: 1, MaxInline: 12}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := provider.NewEnv(t, provider.EnvOpts{})
			qp, err := e.Ctx.CreateQP(e.PD, provider.QPInitAttr{Type: provider.QPTypeRC, SendCQ: e.CQ, RecvCQ: e.CQ, Cap: c.cap})
			require.NoError(t, err)
			info := qp.SQInfo()
			require.Equal(t, c.wantSQBBs, info.WQEBBs)
			require.Equal(t, c.wantRQ, info.RQWQEs)
			require.Equal(t, c.wantStride, info.RQStride)
			require.Equal(t, c.wantCap, qp.Cap())
			require.Equal(t, info.RQAddr+uint64(info.RQWQEs*info.RQStride), info.Addr, "SQ right after RQ")
			require.Zero(t, info.RQAddr%4096, "QP buffer page aligned")
			cmd := e.Dev.QPs[qp.QPN()].Cmd
			require.Equal(t, c.wantSQBBs, cmd.SQWQECnt)
			require.Equal(t, c.wantRQ, cmd.RQWQECnt)
			require.Equal(t, info.RQAddr, cmd.BufAddr)
			require.Equal(t, info.DBRAddr, cmd.DBAddr)
		})
	}
}
