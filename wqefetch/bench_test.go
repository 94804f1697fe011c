package wqefetch

import (
	"github.com/softnic/softnic/env"
	"testing"

	"github.com/softnic/softnic/dma"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/pcie"
	"github.com/softnic/softnic/shm"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/trace"
	"github.com/stretchr/testify/require"
)

type countSink struct{ n int }

func (s *countSink) WQEReady(sim.Time, *Queue, *WQE) { s.n++ }

// hotEnv is a fetch engine as the device runs it on its hot path: no
// recorder, counters already created.
type hotEnv struct {
	eng  *sim.Engine
	e    *Engine
	q    *Queue
	ring []byte
	s    *countSink
	pc   uint16
	buf  [MaxWQEBBs * mlx5.WQEBBSize]byte
}

func newHotEnv(tb testing.TB, size int) *hotEnv {
	tb.Helper()
	mem, err := shm.New("wqefetch-bench", 1<<20, 0x40000000)
	require.NoError(tb, err)
	tb.Cleanup(func() { mem.Close() })
	base, err := mem.Alloc(size*mlx5.WQEBBSize, 4096)
	require.NoError(tb, err)
	ring, err := mem.Slice(base, size*mlx5.WQEBBSize)
	require.NoError(tb, err)
	h := &hotEnv{eng: sim.NewEngine(), ring: ring, s: &countSink{}}
	ctr := &trace.Counters{}
	d := dma.New(env.Env{Eng: h.eng, Ctr: ctr}, pcie.NewLink(pcie.Gen3x8()), mem, dma.Config{})
	h.e = New(env.Env{Eng: h.eng, Ctr: ctr}, d, h.s)
	h.q = NewQueue(qpn, base, size, 0)
	return h
}

// post builds a SEND of ds octowords at the producer counter (ring wrap
// included), without allocating, and returns its doorbell.
func (h *hotEnv) post(ds int) [8]byte {
	bbs := mlx5.WQEBBs(ds)
	b := h.buf[:bbs*mlx5.WQEBBSize]
	mlx5.CtrlSeg(b).Encode(&mlx5.CtrlFields{WQEIndex: h.pc, Opcode: mlx5.OpSend, QPN: qpn, DS: uint8(ds), FMCESE: mlx5.CECQUpdate})
	for i := 1; i < ds; i++ {
		mlx5.DataSeg(b[16*i:]).Encode(&mlx5.DataFields{ByteCount: 64, LKey: 7, Addr: 0x1000})
	}
	mask := h.q.Size - 1
	for i := range bbs {
		slot := (int(h.pc) + i) & mask
		copy(h.ring[slot*mlx5.WQEBBSize:(slot+1)*mlx5.WQEBBSize], b[i*mlx5.WQEBBSize:])
	}
	h.pc += uint16(bbs)
	var db [8]byte
	copy(db[:], b)
	return db
}

// inOrder is one doorbell for one 1-WQEBB WQE, run to delivery.
func (h *hotEnv) inOrder() {
	db := h.post(2)
	_ = h.e.Doorbell(h.eng.Now(), h.q, db)
	h.eng.Run(0)
}

// outOfOrder is a 16-WQEBB WQE and a 1-WQEBB WQE rung back to back: the
// small fetch completes first and waits for the big one.
func (h *hotEnv) outOfOrder() {
	now := h.eng.Now()
	db := h.post(63)
	_ = h.e.Doorbell(now, h.q, db)
	db = h.post(2)
	_ = h.e.Doorbell(now, h.q, db)
	h.eng.Run(0)
}

func TestDoorbellFetchDoesNotAllocate(t *testing.T) {
	for _, c := range []struct {
		name string
		op   func(*hotEnv)
	}{{"in order", (*hotEnv).inOrder}, {"out of order", (*hotEnv).outOfOrder}} {
		t.Run(c.name, func(t *testing.T) {
			h := newHotEnv(t, 64)
			for range 100 { // warm up: pooled events, counters, event heap
				c.op(h)
			}
			require.Zero(t, testing.AllocsPerRun(1000, func() { c.op(h) }))
			require.Zero(t, h.e.ctr.Value(CtrFetchStale))
			require.Equal(t, h.pc, h.q.Next())
		})
	}
}

func BenchmarkDoorbellFetch(b *testing.B) {
	h := newHotEnv(b, 64)
	for range 100 {
		h.inOrder()
	}
	b.ReportAllocs()
	for b.Loop() {
		h.inOrder()
	}
}

func BenchmarkDoorbellFetchOutOfOrder(b *testing.B) {
	h := newHotEnv(b, 64)
	for range 100 {
		h.outOfOrder()
	}
	require.NotZero(b, h.e.ctr.Value(CtrFetchOutOfOrder))
	b.ReportAllocs()
	for b.Loop() {
		h.outOfOrder()
	}
}
