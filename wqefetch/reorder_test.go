package wqefetch

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/softnic/softnic/dma"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/trace"
	"github.com/stretchr/testify/require"
)

// at adapts a function to sim.Handler.
type at func(now sim.Time)

func (f at) Fire(now sim.Time) { f(now) }

// sendFill returns a fill function for a SEND of ds octowords: ds-1 data
// segments, and the sequence number seq in the immediate so that the sink
// can tell every WQE apart.
func sendFill(ds int, seq uint32) func(b []byte) {
	return func(b []byte) {
		mlx5.CtrlSeg(b).Encode(&mlx5.CtrlFields{WQEIndex: mlx5.CtrlSeg(b).WQEIndex(), Opcode: mlx5.OpSend, QPN: qpn,
			DS: uint8(ds), FMCESE: mlx5.CECQUpdate, Imm: seq})
		for i := 1; i < ds; i++ {
			mlx5.DataSeg(b[16*i:]).Encode(&mlx5.DataFields{ByteCount: uint32(i), LKey: 7, Addr: uint64(0x1000 * i)})
		}
	}
}

// fetchEnds returns the completion times of the wqe_fetch stages in issue
// order.
func fetchEnds(rec *trace.Recorder) []sim.Time {
	var ends []sim.Time
	for _, ev := range rec.Events() {
		if ev.Name == StageFetch {
			ends = append(ends, ev.End)
		}
	}
	return ends
}

func reordered(ends []sim.Time) bool {
	for i := 1; i < len(ends); i++ {
		if ends[i] < ends[i-1] {
			return true
		}
	}
	return false
}

// TestOutOfOrderFetchCompletion is the reported bug: one WQE per post, and
// the DMA read of a later, smaller fetch completes before the read of an
// earlier, larger one (the PCIe model returns the short read's completions
// while the long read is still being produced by host memory). Every WQE
// must still reach the sink exactly once, in ring order, and nothing may be
// counted stale.
func TestOutOfOrderFetchCompletion(t *testing.T) {
	type post struct {
		at  sim.Time
		dss []int // WQEs built before this doorbell (the doorbell names the last)
	}
	ns := sim.Time(sim.Nanosecond)
	batch8 := []int{8, 8, 8, 8, 8, 8, 8, 8} // eight 2-WQEBB WQEs
	cases := []struct {
		name  string
		size  int
		start uint16
		posts []post
	}{
		{"16-WQEBB fetch then 1-WQEBB fetch at once", 64, 0, []post{{0, []int{63}}, {0, []int{2}}}},
		{"15-WQEBB fetch then 1-WQEBB fetch at once", 64, 0, []post{{0, []int{60}}, {0, []int{2}}}},
		{"16-WQEBB fetch then 1-WQEBB fetch 20ns later", 64, 0, []post{{0, []int{63}}, {20 * ns, []int{2}}}},
		{"three shrinking fetches", 64, 0, []post{{0, []int{63}}, {0, []int{32}}, {5 * ns, []int{2}}}},
		{"batch of 8 then single posts", 64, 0, []post{{0, batch8}, {10 * ns, []int{2}}, {20 * ns, []int{3}}, {30 * ns, []int{1}}}},
		{"big fetch wraps the ring, small one after it", 32, 24, []post{{0, []int{63}}, {0, []int{2}}, {1 * ns, []int{4}}}},
		{"across the 16-bit counter wrap", 64, 0xfff8, []post{{0, []int{63}}, {0, []int{2}}, {0, []int{2}}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := newEnv(t, c.size)
			v.q.Reset(c.start)
			idx := c.start
			var want []uint16
			seq := uint32(0)
			for _, p := range c.posts {
				var db [8]byte
				for _, ds := range p.dss {
					db = v.put(idx, mlx5.OpSend, ds, sendFill(ds, seq))
					want = append(want, idx)
					idx += uint16(mlx5.WQEBBs(ds))
					seq++
				}
				v.eng.At(p.at, at(func(now sim.Time) { require.NoError(t, v.e.Doorbell(now, v.q, db)) }))
			}
			v.eng.Run(0)
			require.True(t, reordered(fetchEnds(v.rec)), "the case must make a later fetch complete first: %v", fetchEnds(v.rec))
			require.Zero(t, v.ctr.Value(CtrFetchStale))
			require.NotZero(t, v.ctr.Value(CtrFetchOutOfOrder))
			require.Len(t, v.s.got, len(want), "every WQE reaches the sink")
			for i, g := range v.s.got {
				require.Equal(t, want[i], g.w.Index, "ring order")
				require.Equal(t, uint32(i), g.w.Ctrl.Imm, "each WQE once")
				require.Equal(t, StateValid, g.w.State, "%v", g.w.Err)
				if i > 0 {
					require.GreaterOrEqual(t, g.t, v.s.got[i-1].t)
				}
			}
			require.Equal(t, idx, v.q.Next())
			require.False(t, v.q.Pending())
			require.Zero(t, v.q.InFlight())
		})
	}
}

// orderSink checks that WQEs arrive exactly once and in ring order: want
// holds the posted WQEs, oldest first.
type orderSink struct {
	t     *testing.T
	want  []posted
	head  int
	freed uint16 // WQEBB counter up to which the provider may reuse the ring
	bf    int
}

type posted struct {
	idx uint16
	seq uint32
	bbs int
}

func (s *orderSink) WQEReady(_ sim.Time, _ *Queue, w *WQE) {
	if s.head >= len(s.want) {
		s.t.Fatalf("WQE %d (seq %d) delivered but nothing is outstanding", w.Index, w.Ctrl.Imm)
	}
	p := s.want[s.head]
	s.head++
	if w.Index != p.idx || w.Ctrl.Imm != p.seq || w.BBs != p.bbs || w.State != StateValid {
		s.t.Fatalf("delivered WQE %d seq %d BBs %d state %v (%v), want WQE %d seq %d BBs %d",
			w.Index, w.Ctrl.Imm, w.BBs, w.State, w.Err, p.idx, p.seq, p.bbs)
	}
	if w.Source == FromBlueFlame {
		s.bf++
	}
	s.freed = p.idx + uint16(p.bbs)
}

// TestRandomPostsStayInOrder posts random WQE sizes (1..16 WQEBBs) in
// random batches at random times, mostly one WQE per doorbell, with
// BlueFlame writes where a provider would use them and background DMA reads
// competing for tags and the link, and wraps the ring (and the 16-bit
// counter) many times. The sink must see every WQE once, in order.
func TestRandomPostsStayInOrder(t *testing.T) {
	outOfOrder := uint64(0)
	for seed := uint64(1); seed <= 12; seed++ {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 0x5eed))
			size := 16 << rng.IntN(3) // 16, 32 or 64 WQEBBs
			tags := []int{0, 4, 8}[rng.IntN(3)]
			v := newEnvCfg(t, size, dma.Config{MaxReadTags: tags})
			s := &orderSink{t: t}
			v.e.sink = s
			start := uint16(65536 - rng.IntN(4096)) // cross the 16-bit wrap
			v.q.Reset(start)
			s.freed = start
			bg, err := v.mem.Alloc(16384, 4096)
			require.NoError(t, err)
			bgBuf := make([]byte, 16384)
			pc := start // provider's cur_post
			seq := uint32(0)
			const total = 3000
			var step at
			steps := 0
			step = func(now sim.Time) {
				batch := 1
				if rng.IntN(5) == 0 {
					batch = 1 + rng.IntN(4)
				}
				var db [8]byte
				var last posted
				built := 0
				for range batch {
					bbs := 1 + rng.IntN(mlx5.WQEBBs(mlx5.MaxDS))
					if rng.IntN(3) != 0 {
						bbs = 1 + rng.IntN(2) // small WQEs are the common case
					}
					if int(pc-s.freed)+bbs > size || seq == total {
						break
					}
					lo := 4*(bbs-1) + 1
					ds := min(lo+rng.IntN(4), mlx5.MaxDS)
					db = v.put(pc, mlx5.OpSend, ds, sendFill(ds, seq))
					last = posted{idx: pc, seq: seq, bbs: bbs}
					s.want = append(s.want, last)
					pc += uint16(bbs)
					seq++
					built++
				}
				if built > 0 && rng.IntN(3) == 0 {
					// Another engine's read (payload gather, RQ WQE)
					// holding tags and completion bandwidth.
					n := 64 * (1 + rng.IntN(16))
					_, _, err := v.e.dma.Read(now, bg, bgBuf[:n])
					require.NoError(t, err)
				}
				switch {
				case built == 0:
				case built == 1 && last.bbs <= 4 && rng.IntN(2) == 0:
					bf := make([]byte, last.bbs*64)
					for i := range last.bbs {
						slot := (int(last.idx) + i) & (size - 1)
						copy(bf[i*64:], v.ring[slot*64:(slot+1)*64])
					}
					if !v.e.BlueFlame(now, v.q, bf) {
						require.NoError(t, v.e.Doorbell(now, v.q, db))
					}
				default:
					require.NoError(t, v.e.Doorbell(now, v.q, db))
				}
				steps++
				if steps > 100*total {
					t.Fatalf("stuck: posted %d, delivered %d, next %d, issued %d, in flight %d, pc %d, freed %d, ctr %v",
						seq, s.head, v.q.Next(), v.q.issued, v.q.InFlight(), pc, s.freed, v.ctr.Snapshot())
				}
				if seq < total || s.head < len(s.want) {
					gap := sim.Duration(rng.IntN(400)) * sim.Nanosecond
					if rng.IntN(3) == 0 {
						gap = 0
					}
					v.eng.At(now.Add(gap), step)
				}
			}
			v.eng.At(0, step)
			v.eng.Run(0)
			require.Equal(t, total, len(s.want))
			require.Equal(t, len(s.want), s.head, "every WQE reaches the sink")
			require.Zero(t, v.ctr.Value(CtrFetchStale))
			require.Zero(t, v.ctr.Value(CtrWQEInvalid))
			require.Equal(t, pc, v.q.Next())
			require.False(t, v.q.Pending())
			require.Zero(t, v.q.InFlight())
			require.Greater(t, int(v.q.Fetches+v.q.BFs), total/size, "the ring wrapped many times")
			outOfOrder += v.ctr.Value(CtrFetchOutOfOrder)
			t.Logf("ring %d, tags %d, start %d, end %d: %d fetches (%d out of order), %d BlueFlame, %d tag stalls",
				size, tags, start, pc, v.q.Fetches, v.q.OutOfOrder, v.q.BFs, v.ctr.Get("dma_tag_stall"))
		})
	}
	require.NotZero(t, outOfOrder, "the random schedule must exercise out-of-order completions")
}

// resetSink delivers to a recording sink and runs hook on each WQE.
type resetSink struct {
	sink
	hook func(q *Queue, w *WQE)
}

func (s *resetSink) WQEReady(t sim.Time, q *Queue, w *WQE) {
	s.sink.WQEReady(t, q, w)
	if s.hook != nil {
		s.hook(q, w)
	}
}

// TestResetAndCloseDropInFlightFetches checks generations: a fetch issued
// before Queue.Reset or Queue.Close never reaches the sink and is counted
// wqe_fetch_stale, whether it completes after the reset or had completed
// and was waiting for an earlier fetch.
func TestResetAndCloseDropInFlightFetches(t *testing.T) {
	ns := sim.Time(sim.Nanosecond)
	cases := []struct {
		name string
		// dss are WQEs each rung by its own doorbell at time 0.
		dss []int
		// act runs at time when (ends are the fetch completion times).
		when      func(ends []sim.Time) sim.Time
		act       func(v *rig)
		stale     uint64
		delivered int // WQEs of the old generation delivered before act
	}{
		{"reset before two fetches complete", []int{3, 3}, func([]sim.Time) sim.Time { return 1 * ns },
			func(v *rig) { v.q.Reset(0) }, 2, 0},
		{"reset while a later fetch waits for an earlier one", []int{63, 2},
			func(ends []sim.Time) sim.Time { return ends[1] + 1 }, func(v *rig) { v.q.Reset(0) }, 2, 0},
		{"reset after the first of three fetches", []int{2, 63, 2},
			func(ends []sim.Time) sim.Time { return max(ends[0], ends[2]) + 1 }, func(v *rig) { v.q.Reset(0) }, 2, 1},
		{"close before two fetches complete", []int{3, 3}, func([]sim.Time) sim.Time { return 1 * ns },
			func(v *rig) { v.q.Close() }, 2, 0},
		{"close while a later fetch waits for an earlier one", []int{63, 2},
			func(ends []sim.Time) sim.Time { return ends[1] + 1 }, func(v *rig) { v.q.Close() }, 2, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := newEnv(t, 64)
			idx := uint16(0)
			for i, ds := range c.dss {
				db := v.put(idx, mlx5.OpSend, ds, sendFill(ds, uint32(i)))
				require.NoError(t, v.e.Doorbell(0, v.q, db))
				idx += uint16(mlx5.WQEBBs(ds))
			}
			require.Equal(t, len(c.dss), v.q.InFlight())
			v.eng.RunUntil(c.when(fetchEnds(v.rec)))
			require.Len(t, v.s.got, c.delivered)
			c.act(v)
			require.Zero(t, v.q.InFlight())
			require.False(t, v.q.Pending())
			v.eng.Run(0)
			require.Len(t, v.s.got, c.delivered, "nothing of the old generation is delivered")
			require.Equal(t, c.stale, v.ctr.Value(CtrFetchStale))
			require.Equal(t, c.stale, v.q.Stale)

			// The queue after the reset (or close) sees only new WQEs.
			db := v.put(0, mlx5.OpSend, 2, sendFill(2, 100))
			if v.q.Closed() {
				require.ErrorIs(t, v.e.Doorbell(v.eng.Now(), v.q, db), ErrQueueClosed)
				require.False(t, v.e.BlueFlame(v.eng.Now(), v.q, v.ring[:64]))
				require.Equal(t, uint64(1), v.ctr.Value(CtrDBClosed))
				v.q.Reset(0)
				require.True(t, v.q.Closed(), "Reset does not reopen a closed queue")
				v.eng.Run(0)
				require.Len(t, v.s.got, c.delivered)
				return
			}
			require.NoError(t, v.e.Doorbell(v.eng.Now(), v.q, db))
			v.eng.Run(0)
			require.Len(t, v.s.got, c.delivered+1)
			require.Equal(t, uint32(100), v.s.got[c.delivered].w.Ctrl.Imm)
			require.Equal(t, c.stale, v.ctr.Value(CtrFetchStale))
		})
	}

	t.Run("BlueFlame right after a reset, stale fetch still in flight", func(t *testing.T) {
		v := newEnv(t, 64)
		db := v.put(0, mlx5.OpSend, 3, sendFill(3, 1))
		require.NoError(t, v.e.Doorbell(0, v.q, db))
		v.q.Reset(0)
		v.put(0, mlx5.OpSend, 3, sendFill(3, 2))
		require.True(t, v.e.BlueFlame(1, v.q, append([]byte(nil), v.ring[:64]...)))
		v.eng.Run(0)
		require.Len(t, v.s.got, 1)
		require.Equal(t, uint32(2), v.s.got[0].w.Ctrl.Imm)
		require.Equal(t, uint64(1), v.ctr.Value(CtrFetchStale))
		require.Equal(t, uint16(1), v.q.Next())
	})

	t.Run("the sink resets the queue in the middle of a fetch", func(t *testing.T) {
		v := newEnv(t, 64)
		rs := &resetSink{hook: func(q *Queue, w *WQE) {
			if w.Ctrl.Imm == 0 {
				q.Reset(0)
			}
		}}
		v.e.sink = rs
		var db [8]byte
		for i := range 3 {
			db = v.put(uint16(i), mlx5.OpSend, 2, sendFill(2, uint32(i)))
		}
		require.NoError(t, v.e.Doorbell(0, v.q, db))
		v.eng.Run(0)
		require.Len(t, rs.got, 1, "WQEs after the reset are not delivered")
		require.Equal(t, uint64(1), v.ctr.Value(CtrFetchStale))
		require.Equal(t, uint16(0), v.q.Next())
	})
}
