package dma

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/sim"
)

// TestWriteVisibleKeepMatchesWriteVisible runs one random sequence of
// deferred writes (some from buffers given up with WriteVisibleKeep, some
// copied by WriteVisible, overlapping), device reads that settle them,
// Drain and host reads at random times on two rigs: one with every write
// copied, one keeping where it may. The completion times, stats, errors,
// device reads, host memory at every step and counters are the same; a
// buffer handed back is never one still in flight (each is scribbled over
// at once, which would show in the memory).
func TestWriteVisibleKeepMatchesWriteVisible(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	type op struct {
		kind int // 0 write, 1 device read, 2 drain, 3 advance
		at   sim.Duration
		addr uint64
		data []byte
	}
	var ops []op
	for range 3000 {
		o := op{kind: rnd.IntN(4), at: sim.Duration(rnd.IntN(2000)) * sim.Nanosecond, addr: memBase + uint64(rnd.IntN(64<<10))}
		if o.kind > 0 && rnd.IntN(3) > 0 {
			o.kind = 0
		}
		if rnd.IntN(50) == 0 {
			o.addr = memBase + 1<<20 - 10 // runs off the region
		}
		o.data = make([]byte, 1+rnd.IntN(4096))
		for i := range o.data {
			o.data[i] = byte(rnd.Uint32())
		}
		ops = append(ops, o)
	}
	type result struct {
		done sim.Time
		mrd  int
		err  bool
		got  []byte
		mem  []byte
	}
	run := func(keep bool) ([]result, map[string]uint64) {
		r := newRig(t, Config{})
		r.dma.rec = nil
		var pool [][]byte
		var out []result
		for i, o := range ops {
			at := r.eng.Now().Add(o.at)
			var res result
			switch o.kind {
			case 0:
				var b []byte
				if k := len(pool); k > 0 {
					b, pool = pool[k-1], pool[:k-1]
				}
				if cap(b) < len(o.data)+64 {
					b = make([]byte, len(o.data)+64)
				}
				b = b[:cap(b)]
				off := rnd.IntN(64)
				src := b[off : off+len(o.data)]
				copy(src, o.data)
				if keep && i%3 != 0 {
					own := b
					done, s, err := r.dma.WriteVisibleKeep(at, o.addr, src, &own)
					res.done, res.mrd, res.err = done, s.TLPs(), err != nil
					for j := range own {
						own[j] = 0xEE // the buffer is the caller's again
					}
					pool = append(pool, own)
				} else {
					done, s, err := r.dma.WriteVisible(at, o.addr, src)
					res.done, res.mrd, res.err = done, s.TLPs(), err != nil
					clear(b)
					pool = append(pool, b)
				}
			case 1:
				res.got = make([]byte, min(len(o.data), 256))
				done, s, err := r.dma.Read(at, o.addr, res.got)
				res.done, res.mrd, res.err = done, s.TLPs(), err != nil
			case 2:
				r.dma.Drain()
			case 3:
				r.eng.RunUntil(at)
			}
			res.mem = make([]byte, 4096)
			_ = r.mem.Read(memBase+uint64(i%16)*4096, res.mem)
			out = append(out, res)
		}
		r.eng.Run(0)
		last := make([]byte, 64<<10+4096)
		_ = r.mem.Read(memBase, last)
		out = append(out, result{mem: last})
		return out, r.ctr.Snapshot()
	}
	want, wantCtr := run(false)
	got, gotCtr := run(true)
	require.Equal(t, len(want), len(got))
	for i := range want {
		require.Equal(t, want[i], got[i], "step %d", i)
	}
	require.Equal(t, wantCtr, gotCtr)
}
