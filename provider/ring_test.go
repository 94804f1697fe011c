package provider_test

import (
	"encoding/binary"
	"testing"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/provider"
	"github.com/stretchr/testify/require"
)

// fillTo posts signalled 1-WQEBB SENDs (polling each) until cur_post is at
// the given slot of the ring.
func fillTo(t *testing.T, e *provider.Env, slot int) {
	t.Helper()
	n := e.QP.SQInfo().WQEBBs
	var wc [4]provider.WC
	for int(e.QP.SQProducer())%n != slot {
		_, err := e.QP.PostSend([]provider.SendWR{{Opcode: provider.WRSend, Flags: provider.SendSignaled,
			SGL: []provider.SGE{e.MR.SGE(0, 8)}}})
		require.NoError(t, err)
		got, err := e.CQ.Poll(wc[:])
		require.NoError(t, err)
		require.Equal(t, 1, got)
	}
}

func TestRingWrapDataSegments(t *testing.T) {
	// 4 SGEs: 48+64 = 112 -> 128 B WQEs; 4 WRs -> 8 WQEBBs.
	e := provider.NewEnv(t, provider.EnvOpts{Progress: true, Cap: provider.QPCap{MaxSendWR: 4, MaxRecvWR: 1, MaxSendSGE: 4, MaxRecvSGE: 1}})
	provider.ToRTS(t, e.QP)
	require.Equal(t, 8, e.QP.SQInfo().WQEBBs)
	fillTo(t, e, 7)

	sgl := []provider.SGE{e.MR.SGE(0, 1), e.MR.SGE(100, 2), e.MR.SGE(200, 3), e.MR.SGE(300, 4)}
	idx := e.QP.SQProducer()
	_, err := e.QP.PostSend([]provider.SendWR{{WRID: 99, Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
		SGL: sgl, RemoteAddr: 0xabc, RKey: 9}})
	require.NoError(t, err)
	require.Equal(t, idx+2, e.QP.SQProducer(), "6 DS = 2 WQEBBs")

	ring := e.SQRing(t)
	last := ring[7*64:]
	require.Equal(t, idx, mlx5.CtrlSeg(last).WQEIndex())
	require.Equal(t, uint8(6), mlx5.CtrlSeg(last).DS())
	require.Equal(t, uint64(0xabc), mlx5.RaddrSeg(last[16:]).RAddr())
	// Two data segments fit before the ring end, two continue at slot 0.
	require.Equal(t, sgl[0].Addr, mlx5.DataSeg(last[32:]).Addr())
	require.Equal(t, sgl[1].Addr, mlx5.DataSeg(last[48:]).Addr())
	require.Equal(t, sgl[2].Addr, mlx5.DataSeg(ring[0:]).Addr())
	require.Equal(t, sgl[3].Addr, mlx5.DataSeg(ring[16:]).Addr())
	require.Equal(t, uint32(4), mlx5.DataSeg(ring[16:]).ByteCount())

	w, err := e.QP.WQE(idx)
	require.NoError(t, err)
	require.Equal(t, append(append([]byte{}, last[:64]...), ring[:32]...), w, "WQE() reads modulo the ring")

	var wc [2]provider.WC
	n, err := e.CQ.Poll(wc[:])
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, uint64(99), wc[0].WRID)
	require.Empty(t, e.Dev.QPs[e.QP.QPN()].Errors)
}

func TestRingWrapInline(t *testing.T) {
	// Inline 128: 48+144 = 192 B WQEs; 4 WRs -> 768 -> 1024 B = 16 WQEBBs.
	e := provider.NewEnv(t, provider.EnvOpts{Progress: true, Cap: provider.QPCap{MaxSendWR: 4, MaxRecvWR: 1, MaxSendSGE: 2, MaxInline: 128}})
	provider.ToRTS(t, e.QP)
	require.Equal(t, 16, e.QP.SQInfo().WQEBBs)
	fillTo(t, e, 15)

	// SEND, 100 inline bytes in two SGEs: header at +16, data at +20; 44
	// bytes before the end, 56 after; 4+100 -> 112 B segment, 8 B of pad.
	sgl := []provider.SGE{e.MR.SGE(5000, 30), e.MR.SGE(9000, 70)}
	want := append(append([]byte{}, e.Buf.Bytes[5000:5030]...), e.Buf.Bytes[9000:9070]...)
	ring := e.SQRing(t)
	for i := 0; i < 64; i++ { // dirty slot 0 so that the zero padding is visible
		ring[i] = 0xee
	}
	idx := e.QP.SQProducer()
	_, err := e.QP.PostSend([]provider.SendWR{{WRID: 5, Opcode: provider.WRSend, Flags: provider.SendInline | provider.SendSignaled, SGL: sgl}})
	require.NoError(t, err)
	require.Equal(t, idx+2, e.QP.SQProducer())

	last := ring[15*64:]
	require.Equal(t, uint8(8), mlx5.CtrlSeg(last).DS(), "1 + 112/16")
	require.Equal(t, uint32(100)|mlx5.InlineFlag, binary.BigEndian.Uint32(last[16:]))
	require.Equal(t, want[:44], last[20:64])
	require.Equal(t, want[44:], ring[:56])
	require.Equal(t, make([]byte, 8), ring[56:64], "padding zeroed after the wrap")

	w, err := e.QP.WQE(idx)
	require.NoError(t, err)
	require.Len(t, w, 128)
	require.Equal(t, want, w[20:120])

	var wc [2]provider.WC
	n, err := e.CQ.Poll(wc[:])
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, uint64(5), wc[0].WRID)
}

// TestWQEIndex16BitWrap posts more than 65536 WQEBBs, mixing 1- and
// 2-WQEBB WQEs, and checks that wqe_index continues across the 16-bit wrap
// (the fake device checks every ctrl segment against its own counter).
func TestWQEIndex16BitWrap(t *testing.T) {
	e := provider.NewEnv(t, provider.EnvOpts{Progress: true,
		Cap: provider.QPCap{MaxSendWR: 8, MaxRecvWR: 1, MaxSendSGE: 1, MaxInline: 60}})
	provider.ToRTS(t, e.QP)
	e.Dev.RecordOps = false
	var (
		bbs  int
		next uint16
		wc   [4]provider.WC
		ring = e.SQRing(t)
		nbb  = e.QP.SQInfo().WQEBBs
	)
	for i := 0; bbs <= 70000; i++ {
		wr := provider.SendWR{WRID: uint64(i), Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
			SGL: []provider.SGE{e.MR.SGE(0, 64)}, RemoteAddr: 0x10, RKey: 1}
		want := 1
		if i%2 == 1 { // 16 + 16 + 64 B inline = 96 B: two WQEBBs
			wr.Flags |= provider.SendInline
			wr.SGL[0].Length = 60
			want = 2
		}
		_, err := e.QP.PostSend([]provider.SendWR{wr})
		require.NoError(t, err)
		ctrl := mlx5.CtrlSeg(ring[int(next)%nbb*64:])
		if ctrl.WQEIndex() != next {
			require.Equal(t, next, ctrl.WQEIndex(), "post %d", i)
		}
		next += uint16(want)
		bbs += want
		if e.QP.SQProducer() != next {
			require.Equal(t, next, e.QP.SQProducer(), "post %d", i)
		}
		n, err := e.CQ.Poll(wc[:])
		if err != nil || n != 1 || wc[0].WRID != uint64(i) || wc[0].Status != provider.WCSuccess {
			require.FailNow(t, "poll", "post %d: n=%d err=%v wc=%+v", i, n, err, wc[0])
		}
	}
	require.Greater(t, bbs, 65536)
	require.Empty(t, e.Dev.QPs[e.QP.QPN()].Errors)
	require.Equal(t, uint32(next), e.DBR(t).Word(mlx5.DBRSend))
}
