package pcie

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/sim"
)

// reserveSearch is lane.reserve without its fast path: the bisection and
// the scan for the earliest gap, for TestReserveFastPathMatchesSearch.
func (l *lane) reserveSearch(ready sim.Time, d sim.Duration) sim.Time {
	t := ready
	i, hi := 0, l.n
	for i < hi {
		m := int(uint(i+hi) >> 1)
		if l.iv[m].e <= t {
			i = m + 1
		} else {
			hi = m
		}
	}
	for ; i < l.n; i++ {
		if l.iv[i].e <= t {
			continue
		}
		if l.iv[i].s >= t.Add(d) {
			break
		}
		t = l.iv[i].e
	}
	end := t.Add(d)
	switch {
	case i > 0 && l.iv[i-1].e == t && i < l.n && l.iv[i].s == end:
		l.iv[i-1].e = l.iv[i].e
		copy(l.iv[i:], l.iv[i+1:l.n])
		l.n--
	case i > 0 && l.iv[i-1].e == t:
		l.iv[i-1].e = end
	case i < l.n && l.iv[i].s == end:
		l.iv[i].s = t
	default:
		copy(l.iv[i+1:l.n+1], l.iv[i:l.n])
		l.iv[i] = span{t, end}
		l.n++
		if l.n > maxSpans {
			l.mergeClosest()
		}
	}
	return t
}

// The fast path of reserve (trains booked after the last interval) books
// exactly what the general search books, in any order of bookings.
func TestReserveFastPathMatchesSearch(t *testing.T) {
	for _, spread := range []uint64{50, 2_000, 1_000_000} {
		var a, b lane
		seed := spread
		next := func() uint64 { seed = seed*6364136223846793005 + 1442695040888963407; return seed >> 33 }
		base := sim.Time(0)
		for i := 0; i < 20000; i++ {
			base += sim.Time(next() % 40)
			ready := base + sim.Time(next()%spread)
			if next()%5 == 0 && ready > 1000 {
				ready -= 1000
			}
			if k := next() % 8; k < 2 && a.n > 0 { // right at an interval's end or start
				ready = a.iv[a.n-1].e
				if k == 1 {
					ready = a.iv[a.n-1].s
				}
			}
			d := sim.Duration(next() % 300) // 0 too: the fast path leaves it to the search
			if i%9 == 0 {
				a.prune(base)
				b.prune(base)
			}
			require.Equal(t, b.reserveSearch(ready, d), a.reserve(ready, d), "booking %d", i)
			require.Equal(t, b, a, "booking %d", i)
		}
	}
}
