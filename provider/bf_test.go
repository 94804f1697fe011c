package provider_test

import (
	"encoding/binary"
	"testing"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/provider"
	"github.com/stretchr/testify/require"
)

// stores returns the recorded ops of one post and checks the frame every
// post must have: Flush (mmio_wc_start), stores, Flush (mmio_flush_writes),
// with DBR[1] already equal to the producer at the first store.
func stores(t *testing.T, e *provider.Env) []provider.MMIOOp {
	t.Helper()
	ops := e.Dev.Ops
	e.Dev.Ops = nil
	require.GreaterOrEqual(t, len(ops), 3)
	require.True(t, ops[0].Flush, "mmio_wc_start before the first store")
	require.True(t, ops[len(ops)-1].Flush, "flush after the last store")
	st := ops[1 : len(ops)-1]
	for _, op := range st {
		require.False(t, op.Flush)
	}
	require.Equal(t, uint32(e.QP.SQProducer()), st[0].DBRSend, "doorbell record written before MMIO")
	return st
}

// requireBF checks a BlueFlame copy of the WQE at idx into buffer base.
func requireBF(t *testing.T, e *provider.Env, st []provider.MMIOOp, idx uint16, base uint64) {
	t.Helper()
	w, err := e.QP.WQE(idx)
	require.NoError(t, err)
	lines := (len(w) + 63) / 64
	require.Len(t, st, lines*8, "ceil(size/64)*8 stores")
	// Source: the WQE's WQEBBs, read modulo the ring (bytes past DS are
	// whatever the ring holds, as with mlx5_bf_copy).
	ring := e.SQRing(t)
	off := int(idx) % e.QP.SQInfo().WQEBBs * 64
	for i, op := range st {
		require.Equal(t, base+uint64(8*i), op.Off, "strictly ascending")
		src := (off + 8*i) % len(ring)
		require.Equal(t, binary.LittleEndian.Uint64(ring[src:]), op.V, "store %d", i)
	}
	require.Equal(t, w, le(st)[:len(w)])
}

// requireDoorbell checks a single 8-byte doorbell carrying the ctrl
// segment of the WQE at idx.
func requireDoorbell(t *testing.T, e *provider.Env, st []provider.MMIOOp, idx uint16, base uint64) {
	t.Helper()
	require.Len(t, st, 1)
	require.Equal(t, base, st[0].Off)
	w, err := e.QP.WQE(idx)
	require.NoError(t, err)
	require.Equal(t, w[:8], le(st))
	c := mlx5.CtrlSeg(le(st))
	require.Equal(t, idx, c.WQEIndex())
	require.Equal(t, e.QP.QPN(), c.QPN())
}

// le turns recorded 64-bit store values back into the bytes stored.
func le(st []provider.MMIOOp) []byte {
	b := make([]byte, 8*len(st))
	for i, op := range st {
		binary.LittleEndian.PutUint64(b[8*i:], op.V)
	}
	return b
}

func write64(e *provider.Env) provider.SendWR {
	return provider.SendWR{Opcode: provider.WRRDMAWrite, SGL: []provider.SGE{e.MR.SGE(0, 64)}, RemoteAddr: 0x1000, RKey: 3}
}

func TestBlueFlameAlternatesBuffers(t *testing.T) {
	e := provider.NewEnv(t, provider.EnvOpts{})
	provider.ToRTS(t, e.QP)
	e.Dev.Ops = nil
	info := e.QP.SQInfo()
	require.Equal(t, 256, info.BFBufSize)
	for i := 0; i < 4; i++ {
		idx := e.QP.SQProducer()
		base := info.BFRegOffset + uint64(256*(i%2))
		require.Equal(t, int(base-info.BFRegOffset), e.QP.SQInfo().BFOffset)
		_, err := e.QP.PostSend([]provider.SendWR{write64(e)})
		require.NoError(t, err)
		requireBF(t, e, stores(t, e), idx, base)
	}
}

func TestBlueFlameSizes(t *testing.T) {
	cases := []struct {
		name   string
		inline int // SEND with this many inline bytes
		bf     bool
	}{
		{"ds1_ctrl_only", 0, false}, // libmlx5 requires 1 < ds
		{"one_line", 12, true},      // 32 B -> 1 line
		{"two_lines", 60, true},     // 80 B -> 2 lines
		{"four_lines", 200, true},   // 224 B -> 4 lines, 32 stores
		{"exactly_256", 236, true},  // 16 + 240 = 256 B
		{"over_256", 300, false},    // 16 + 304 = 320 B > bf_buf_size
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := provider.NewEnv(t, provider.EnvOpts{Cap: provider.QPCap{MaxSendWR: 8, MaxRecvWR: 1, MaxSendSGE: 2, MaxInline: 320}})
			provider.ToRTS(t, e.QP)
			e.Dev.Ops = nil
			base := e.QP.SQInfo().BFRegOffset
			idx := e.QP.SQProducer()
			wr := provider.SendWR{Opcode: provider.WRSend, Flags: provider.SendInline}
			if c.inline > 0 {
				wr.SGL = []provider.SGE{e.MR.SGE(0, uint32(c.inline))}
			}
			_, err := e.QP.PostSend([]provider.SendWR{wr})
			require.NoError(t, err)
			st := stores(t, e)
			if c.bf {
				requireBF(t, e, st, idx, base)
			} else {
				requireDoorbell(t, e, st, idx, base)
			}
			require.Equal(t, 256, e.QP.SQInfo().BFOffset, "the buffer toggles either way")
		})
	}
}

func TestDoorbellForLists(t *testing.T) {
	e := provider.NewEnv(t, provider.EnvOpts{})
	provider.ToRTS(t, e.QP)
	e.Dev.Ops = nil
	base := e.QP.SQInfo().BFRegOffset
	first := e.QP.SQProducer()
	_, err := e.QP.PostSend([]provider.SendWR{write64(e), write64(e)})
	require.NoError(t, err)
	st := stores(t, e)
	requireDoorbell(t, e, st, first+1, base) // the LAST WQE's ctrl
	// The next single post goes to the other buffer.
	idx := e.QP.SQProducer()
	_, err = e.QP.PostSend([]provider.SendWR{write64(e)})
	require.NoError(t, err)
	requireBF(t, e, stores(t, e), idx, base+256)
}

func TestSetBlueFlameOff(t *testing.T) {
	e := provider.NewEnv(t, provider.EnvOpts{})
	provider.ToRTS(t, e.QP)
	e.QP.SetBlueFlame(false)
	e.Dev.Ops = nil
	base := e.QP.SQInfo().BFRegOffset
	for i := 0; i < 3; i++ {
		idx := e.QP.SQProducer()
		_, err := e.QP.PostSend([]provider.SendWR{write64(e)})
		require.NoError(t, err)
		requireDoorbell(t, e, stores(t, e), idx, base+uint64(256*(i%2)))
	}
	e.QP.SetBlueFlame(true)
	idx := e.QP.SQProducer()
	_, err := e.QP.PostSend([]provider.SendWR{write64(e)})
	require.NoError(t, err)
	requireBF(t, e, stores(t, e), idx, base+256)
}

func TestNoBlueFlameBuffer(t *testing.T) {
	// bfreg 0-like: buf_size 0, doorbells only, the offset never toggles.
	e := provider.NewEnv(t, provider.EnvOpts{BFBufSize: -1})
	provider.ToRTS(t, e.QP)
	e.Dev.Ops = nil
	base := e.QP.SQInfo().BFRegOffset
	for i := 0; i < 3; i++ {
		idx := e.QP.SQProducer()
		_, err := e.QP.PostSend([]provider.SendWR{write64(e)})
		require.NoError(t, err)
		requireDoorbell(t, e, stores(t, e), idx, base)
	}
}

func TestBlueFlameSourceWraps(t *testing.T) {
	e := provider.NewEnv(t, provider.EnvOpts{Progress: true, Cap: provider.QPCap{MaxSendWR: 4, MaxRecvWR: 1, MaxSendSGE: 4}})
	provider.ToRTS(t, e.QP)
	fillTo(t, e, 7)
	e.Dev.Ops = nil
	idx := e.QP.SQProducer()
	bfOff := uint64(e.QP.SQInfo().BFOffset)
	_, err := e.QP.PostSend([]provider.SendWR{{Opcode: provider.WRSend, SGL: []provider.SGE{
		e.MR.SGE(0, 1), e.MR.SGE(8, 1), e.MR.SGE(16, 1), e.MR.SGE(24, 1)}}}) // 5 DS = 80 B, straddles
	require.NoError(t, err)
	st := stores(t, e)
	requireBF(t, e, st, idx, e.QP.SQInfo().BFRegOffset+bfOff)
	require.Len(t, st, 16)
}

func TestPostRecvLayout(t *testing.T) {
	e := provider.NewEnv(t, provider.EnvOpts{Cap: provider.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 3}})
	provider.ToRTS(t, e.QP)
	e.Dev.Ops = nil
	info := e.QP.SQInfo()
	require.Equal(t, 64, info.RQStride, "3 SGEs -> 48 -> 64 B stride (4 slots)")
	rq, err := e.Mem.Slice(info.RQAddr, info.RQWQEs*info.RQStride)
	require.NoError(t, err)
	for i := range rq {
		rq[i] = 0xee
	}
	wrs := []provider.RecvWR{
		{WRID: 1, SGL: []provider.SGE{e.MR.SGE(0, 100), e.MR.SGE(0, 0), e.MR.SGE(200, 50)}}, // 2 segs + terminator
		{WRID: 2, SGL: []provider.SGE{e.MR.SGE(0, 1), e.MR.SGE(8, 1), e.MR.SGE(16, 1), e.MR.SGE(24, 1)}},
		{WRID: 3},
	}
	bad, err := e.QP.PostRecv(wrs)
	require.NoError(t, err)
	require.Equal(t, 3, bad)
	require.Equal(t, uint32(3), e.DBR(t).Word(mlx5.DBRRecv))
	require.Empty(t, e.Dev.Ops, "receives ring no MMIO")

	term := mlx5.DataFields{ByteCount: 0, LKey: mlx5.InvalidKey, Addr: 0}
	s0 := rq[0:64]
	require.Equal(t, mlx5.DataFields{ByteCount: 100, LKey: e.MR.LKey, Addr: e.Buf.Addr}, mlx5.DataSeg(s0).Fields())
	require.Equal(t, mlx5.DataFields{ByteCount: 50, LKey: e.MR.LKey, Addr: e.Buf.Addr + 200}, mlx5.DataSeg(s0[16:]).Fields())
	require.Equal(t, term, mlx5.DataSeg(s0[32:]).Fields())
	require.Equal(t, []byte{0xee, 0xee}, s0[48:50], "nothing written after the terminator")
	s1 := rq[64:128]
	for i := 0; i < 4; i++ {
		require.Equal(t, e.Buf.Addr+uint64(8*i), mlx5.DataSeg(s1[16*i:]).Addr(), "max SGEs: no terminator")
	}
	require.Equal(t, term, mlx5.DataSeg(rq[128:]).Fields(), "empty receive: terminator only")

	// One slot left; the 2nd WR of the next list overflows.
	bad, err = e.QP.PostRecv([]provider.RecvWR{{WRID: 4}, {WRID: 5}})
	require.ErrorIs(t, err, provider.ErrQueueFull)
	require.Equal(t, 1, bad)
	require.Equal(t, uint32(4), e.DBR(t).Word(mlx5.DBRRecv))
}
