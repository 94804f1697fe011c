package main

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// peakRun is a bandwidth run's times as bwClient records them: posts of
// postList WRs at non-decreasing times, a completion time for every
// signalled WR (every cqMod-th and the last), each no earlier than its post.
func peakRun(r *rand.Rand, n, postList, cqMod int, gap, lag int64) (posted, completed []int64) {
	posted, completed = make([]int64, n), make([]int64, n)
	t := r.Int64N(1000)
	for i := 0; i < n; i += postList {
		t += r.Int64N(gap + 1) // 0 too: equal times
		posted[i] = t
	}
	last := int64(0)
	for j := 0; j < n; j++ {
		if j%cqMod != cqMod-1 && j != n-1 {
			continue
		}
		c := max(posted[j/postList*postList]+r.Int64N(lag+1), last)
		completed[j], last = c, c
	}
	return posted, completed
}

// TestPeakDeltaMatchesPairs: the hull search gives exactly the number
// perftest's pair-by-pair search gives, on runs of every shape (equal
// times, long stalls, huge times, post lists, CQ moderation) and on
// arbitrary numbers, which the fast path hands to the pairs.
func TestPeakDeltaMatchesPairs(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	// hull: the input is a run's, which must take the hull search (else
	// both sides would be the pair search and the test would prove nothing).
	check := func(name string, posted, completed []int64, pl, cq int, hull bool) {
		t.Helper()
		if hull {
			if !peakMonotone(posted, completed, pl, cq) {
				t.Fatalf("%s: a run's times do not take the hull search", name)
			}
			// The hull itself, whatever peakDelta dispatches to.
			want, wok := peakDeltaPairs(posted, completed, pl, cq)
			if got, gok := peakDeltaHull(posted, completed, pl, cq); got != want || gok != wok {
				t.Fatalf("%s (n %d, post list %d, cq mod %d): hull %d %v, pairs %d %v", name, len(completed), pl, cq, got, gok, want, wok)
			}
		}
		want, wok := peakDeltaPairs(posted, completed, pl, cq)
		got, gok := peakDelta(posted, completed, pl, cq)
		if got != want || gok != wok {
			t.Fatalf("%s (n %d, post list %d, cq mod %d): hull %d %v, pairs %d %v", name, len(completed), pl, cq, got, gok, want, wok)
		}
	}
	for k := 0; k < 3000; k++ {
		pl := []int{1, 1, 2, 4, 16}[r.IntN(5)]
		cq := []int{1, 2, 3, 7, 100}[r.IntN(5)]
		if pl > 1 {
			cq = pl // perftest: with a post list the moderation is the list
		}
		n := (1 + r.IntN(400)) * pl
		gap := []int64{0, 3, 1000, 1 << 20, 1 << 40}[r.IntN(5)]
		lag := []int64{0, 5, 100000, 1 << 30, 1 << 44}[r.IntN(5)]
		posted, completed := peakRun(r, n, pl, cq, gap, lag)
		check(fmt.Sprintf("run %d", k), posted, completed, pl, cq, true)
		if k%3 == 0 { // a stall in the middle: the best run is on one side
			for i := n / 2; i < n; i++ {
				posted[i] += 1 << 36
				completed[i] += 1 << 36
			}
			check(fmt.Sprintf("stalled run %d", k), posted, completed, pl, cq, true)
		}
		if k%5 == 1 { // counts that skip multiples of cq_mod: unset times
			for j := cq - 1; j < n-1; j += cq {
				if r.IntN(3) == 0 {
					completed[j] = -1
				}
			}
			check(fmt.Sprintf("run %d with unset times", k), posted, completed, pl, cq, true)
		}
	}
	for k := 0; k < 500; k++ { // anything at all: most go to the pairs, and must not fail in the hull
		n := 1 + r.IntN(60)
		posted, completed := make([]int64, n), make([]int64, n)
		for i := range n {
			posted[i], completed[i] = r.Int64N(2000)-500, r.Int64N(2000)-500
		}
		check(fmt.Sprintf("arbitrary %d", k), posted, completed, 1+r.IntN(3), 1+r.IntN(4), false)
	}
	check("collinear", []int64{0, 10, 20, 30, 40}, []int64{50, 60, 70, 80, 90}, 1, 1, true)
	check("one WR", []int64{7}, []int64{19}, 1, 1, true)
	check("moderated, unsignalled first", []int64{0, 1e6, 2e6, 3e6}, []int64{0, 8e6, 0, 10e6}, 1, 2, true)
}

// TestPeakDeltaLargeRun: the 320,000 WRs of -q 64 -n 5000 (perftest's
// search: about 5·10^8 pairs) take the hull's O(n log n).
func TestPeakDeltaLargeRun(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	posted, completed := peakRun(r, 320000, 1, 100, 5000, 200000)
	if !peakMonotone(posted, completed, 1, 100) {
		t.Fatal("the run does not take the hull search")
	}
	if _, ok := peakDelta(posted, completed, 1, 100); !ok {
		t.Fatal("no peak")
	}
}
