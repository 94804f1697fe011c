package dma

import (
	"math/rand"
	"slices"
	"testing"

	"github.com/softnic/softnic/sim"
)

// TestTagRingMatchesSortedSlice checks acquire/release on the tag ring
// against the plain sorted slice they replaced, on random reads.
func TestTagRingMatchesSortedSlice(t *testing.T) {
	for _, n := range []int{1, 2, 5, 32} {
		e := &Engine{tagFree: make([]sim.Time, n)}
		ref := make([]sim.Time, n)
		rng := rand.New(rand.NewSource(int64(n)))
		now := sim.Time(0)
		for step := 0; step < 20000; step++ {
			now += sim.Time(rng.Intn(50))
			k := 1 + rng.Intn(n+2)
			at := now
			if rng.Intn(4) == 0 {
				at -= sim.Time(rng.Intn(40))
			}
			start := e.acquire(at, k)
			kk := min(k, n)
			want := max(at, ref[kk-1])
			if start != want {
				t.Fatalf("n=%d step %d: acquire %d, want %d", n, step, start, want)
			}
			done := start + sim.Time(rng.Intn(300))
			e.release(done)
			ref = append(ref[kk:], slices.Repeat([]sim.Time{done}, kk)...)
			slices.Sort(ref)
			for i := range ref {
				if got := e.tagFree[e.tagIdx(i)]; got != ref[i] {
					t.Fatalf("n=%d step %d: tag %d free at %d, want %d", n, step, i, got, ref[i])
				}
			}
		}
	}
}
