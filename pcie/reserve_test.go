package pcie

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/sim"
)

// The fast path of reserve (trains booked after the last interval) books
// exactly what the general search (lane.search) books, in any order of
// bookings, and both (the search with its hint, bisection and scan) book
// where a scan of every gap from scratch finds the earliest fit, under
// bookings in and out of time order, staircases of one size and prunes.
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
			if next()%3 == 0 && b.hd > 0 {  // a staircase: b's last size again, no earlier
				d, ready = b.hd, b.hr+sim.Time(next()%100)
			}
			if i%9 == 0 {
				a.prune(base)
				b.prune(base)
			}
			want := earliestFit(&b, ready, d)
			require.Equal(t, want, b.search(ready, d), "booking %d: search", i)
			require.Equal(t, want, a.reserve(ready, d), "booking %d: reserve", i)
			// The same calendar (the hints may differ: the fast path
			// leaves its own alone).
			require.Equal(t, b.n, a.n, "booking %d", i)
			require.Equal(t, b.iv, a.iv, "booking %d", i)
		}
	}
}

// deviceWriteLoop is DeviceWrite TLP by TLP, as it was before the train
// arithmetic, for TestDeviceWriteTrainMatchesLoop: each TLP booked on the
// lane after the one before it. The message is one step of the posted
// order, recorded once at its end, as DeviceWrite records it: booked TLP
// by TLP (sendPosted), a full staircase merged two steps when the first
// TLP came and never again for the rest, where DeviceWrite, adding the
// whole message, may first cover steps and merge none.
func (l *Link) deviceWriteLoop(at sim.Time, addr uint64, n int) (done sim.Time, s Stats) {
	l.up.prune(at)
	done = at
	total, k := max(n, 0), 0
	last := l.upMWr.floor(at)
	for n > 0 {
		c := chunk(addr, n, l.spec.MPS)
		d := l.ser(c + l.spec.HdrMWr)
		start := l.up.reserve(max(at, last), d)
		last = start.Add(d)
		done = max(done, last.Add(l.spec.FlightLatency))
		k++
		addr += uint64(c)
		n -= c
	}
	if k > 0 {
		l.upMWr.add(at, last)
	}
	count(&l.devMWr, &s, k, 0, 0, total, total+k*l.spec.HdrMWr)
	return done, s
}

// DeviceWrite's arithmetic for the TLPs after the one that ends the lane's
// calendar gives the times, counts and calendar of the TLP-by-TLP loop,
// mixed with reads and MMIO writes, for several MPS.
func TestDeviceWriteTrainMatchesLoop(t *testing.T) {
	for _, spec := range []Spec{Gen3x8(), Gen3x8().WithMPS(128), Gen3x8().WithMPS(512).WithMRRS(4096)} {
		a, b := NewLink(spec), NewLink(spec)
		seed := uint64(spec.MPS)
		next := func() uint64 { seed = seed*6364136223846793005 + 1442695040888963407; return seed >> 33 }
		now := sim.Time(0)
		for i := 0; i < 5000; i++ {
			now += sim.Time(next() % 3000)
			at := now + sim.Time(next()%2000)
			addr := next() % (1 << 20)
			n := int(next() % 9000)
			if next()%4 == 0 {
				n = int(next() % 300)
			}
			switch next() % 4 { // aligned reads of whole requests: the trains of whole requests
			case 0:
				addr &^= 4095
				n = 4096 * int(1+next()%3)
			case 1:
				addr &^= uint64(spec.MRRS - 1)
				n = spec.MRRS*int(1+next()%9) + int(next()%3)*64
			}
			switch next() % 4 {
			case 0:
				d1, s1 := a.DeviceRead(at, addr, n)
				d2, s2 := b.DeviceRead(at, addr, n)
				require.Equal(t, d2, d1)
				require.Equal(t, s2, s1)
			case 1:
				d1, s1 := a.HostWrite(at, addr&^63, 64)
				d2, s2 := b.HostWrite(at, addr&^63, 64)
				require.Equal(t, d2, d1)
				require.Equal(t, s2, s1)
			default:
				d1, s1 := a.DeviceWrite(at, addr, n)
				d2, s2 := b.deviceWriteLoop(at, addr, n)
				require.Equal(t, d2, d1, "write %d: %d B at %#x", i, n, addr)
				require.Equal(t, s2, s1)
			}
			require.Equal(t, withoutHints(*b), withoutHints(*a), "op %d", i)
		}
	}
}

// deviceReadLoop is DeviceRead TLP by TLP through send, as it was before
// the request train, for TestDeviceReadTrainMatchesLoop.
func (l *Link) deviceReadLoop(at sim.Time, addr uint64, n int) (done sim.Time, s Stats) {
	l.up.prune(at)
	l.down.prune(at)
	sp := &l.spec
	done = at
	total, nreq, ncpl := max(n, 0), 0, 0
	var cursor sim.Time
	lastLine := uint64(0)
	charged := false
	for n > 0 {
		req := chunk(addr, n, sp.MRRS)
		arrive := l.send(&l.up, at, 0, sp.HdrMRd)
		nreq++
		ready := max(cursor, arrive.Add(sp.HostReadLatency))
		for a, r := addr, req; r > 0; {
			var c int
			if sp.RCBChunks {
				c = chunk(a, r, sp.RCB)
			} else {
				c = min(r, sp.MPS-int(a&uint64(sp.RCB-1)))
			}
			first, last := a/cacheLine, (a+uint64(c)-1)/cacheLine
			if charged && first <= lastLine {
				first = lastLine + 1
			}
			if last >= first {
				ready = ready.Add(sim.Duration(last-first+1) * sp.HostReadPerLine)
				lastLine, charged = last, true
			}
			done = max(done, l.send(&l.down, ready, c, sp.HdrCplD))
			ncpl++
			a += uint64(c)
			r -= c
		}
		cursor = ready
		addr += uint64(req)
		n -= req
	}
	count(&l.mrdUp, &s, 0, nreq, 0, 0, nreq*sp.HdrMRd)
	count(&l.cplDown, &s, 0, 0, ncpl, total, total+ncpl*sp.HdrCplD)
	return done, s
}

// DeviceRead's request train and cached completion times give what the
// TLP-by-TLP loop gives, mixed with writes and MMIO writes.
func TestDeviceReadTrainMatchesLoop(t *testing.T) {
	slow := Gen3x8()
	slow.HostReadPerLine = 20 * sim.Nanosecond // the host, not the link, paces completions
	edge := Gen3x8().WithMRRS(4096)
	edge.HostReadPerLine = edge.TLPRate().Serialize(edge.MPS+edge.HdrCplD) / sim.Duration(edge.MPS/cacheLine) // just as fast
	specs := []Spec{Gen3x8(), Gen3x8().WithMPS(128), Gen3x8().WithMRRS(128), Gen3x8().WithRCB(64, true),
		Gen3x8().WithMRRS(4096), Gen3x8().WithMPS(512).WithRCB(128, false), slow, edge}
	dF := NewLink(edge).serCplFull // around the host just as fast as the link, to the picosecond
	for k := -2; k <= 2; k++ {
		s := edge
		s.HostReadPerLine = dF/sim.Duration(edge.MPS/cacheLine) + sim.Duration(k)
		specs = append(specs, s)
	}
	// Dense operations keep the lanes busy (the link paces completions);
	// sparse ones leave them idle (the host does, where it is slower).
	for _, gap := range []uint64{3000, 3000000} {
		for _, spec := range specs {
			testDeviceReadTrain(t, spec, gap)
		}
	}
}

func testDeviceReadTrain(t *testing.T, spec Spec, gap uint64) {
	{
		a, b := NewLink(spec), NewLink(spec)
		seed := uint64(spec.MPS + spec.MRRS + int(spec.HostReadPerLine))
		next := func() uint64 { seed = seed*6364136223846793005 + 1442695040888963407; return seed >> 33 }
		now := sim.Time(0)
		for i := 0; i < 5000; i++ {
			now += sim.Time(next() % gap)
			at := now + sim.Time(next()%2000)
			addr := next() % (1 << 20)
			n := int(next() % 9000)
			if next()%4 == 0 {
				n = int(next() % 300)
			}
			switch next() % 4 { // aligned reads of whole requests: the trains of whole requests
			case 0:
				addr &^= 4095
				n = 4096 * int(1+next()%3)
			case 1:
				addr &^= uint64(spec.MRRS - 1)
				n = spec.MRRS*int(1+next()%9) + int(next()%3)*64
			}
			switch next() % 4 {
			case 0:
				d1, s1 := a.DeviceWrite(at, addr, n)
				d2, s2 := b.DeviceWrite(at, addr, n)
				require.Equal(t, d2, d1)
				require.Equal(t, s2, s1)
			case 1:
				d1, s1 := a.HostWrite(at, addr&^63, 64)
				d2, s2 := b.HostWrite(at, addr&^63, 64)
				require.Equal(t, d2, d1)
				require.Equal(t, s2, s1)
			default:
				d1, s1 := a.DeviceRead(at, addr, n)
				d2, s2 := b.deviceReadLoop(at, addr, n)
				require.Equal(t, d2, d1, "read %d: %d B at %#x", i, n, addr)
				require.Equal(t, s2, s1)
			}
			require.Equal(t, withoutHints(*b), withoutHints(*a), "op %d", i)
		}
	}
}

// count is the generic form of countMWr, countMRd and countCplD, for the
// reference loops above.
func count(bucket *Stats, s *Stats, mwr, mrd, cpld, payload, wire int) {
	d := Stats{MWr: mwr, MRd: mrd, CplD: cpld, PayloadBytes: payload, WireBytes: wire}
	bucket.Add(d)
	s.Add(d)
}

// The hint lets a search start where the last one's booking ended only
// where the search from ready finds nothing earlier: reads whose
// completions interleave (each ready after the one before, as DeviceRead
// books them), bookings of other sizes and earlier ready times in between,
// and prunes, book exactly what they book with the hint cleared before
// every booking (the search as it was before the hint).
func TestSearchHintMatchesScan(t *testing.T) {
	for _, spread := range []uint64{30, 500, 5_000, 100_000} {
		var a, b lane
		seed := spread
		next := func() uint64 { seed = seed*6364136223846793005 + 1442695040888963407; return seed >> 33 }
		base := sim.Time(0)
		hinted := 0
		for i := 0; i < 20000; i++ {
			base += sim.Time(next() % 60)
			ready := base + sim.Time(next()%spread)
			if next()%3 == 0 && ready > sim.Time(spread) {
				ready -= sim.Time(spread) // before traffic already booked
			}
			d := sim.Duration(1 + next()%200)
			if next()%5 == 0 {
				d = sim.Duration(next() % 400) // 0 too
			}
			step := sim.Duration(next() % 300)
			for k := 0; k < int(next()%12); k++ { // one read's completions
				if a.n > 0 && ready < a.iv[a.n-1].s && a.hd > 0 && d >= a.hd && ready >= a.hr && a.he > ready {
					hinted++ // a search that starts later than ready
				}
				b.hd = 0
				want := b.reserve(ready, d)
				got := a.reserve(ready, d)
				require.Equal(t, want, got, "spread %d booking %d.%d", spread, i, k)
				require.Equal(t, b.n, a.n, "spread %d booking %d.%d", spread, i, k)
				require.Equal(t, b.iv, a.iv, "spread %d booking %d.%d", spread, i, k)
				ready = ready.Add(step)
			}
			if i%7 == 0 {
				a.prune(base)
				b.prune(base)
			}
		}
		require.Positive(t, hinted, "spread %d: some searches start from the hint", spread)
	}
}

// BenchmarkSearchInterleavedReads books the completions of 64 host-paced
// reads of 16 completions each, one read issued every five of the host's
// completion periods so that three or four overlap, as DeviceRead
// does (prune at the read's issue, then its completions one by one), with
// the hint (hint) and with it cleared before every booking (scan): the
// staircase E2EWrite1M's reads leave on the down lane. ns/op is per
// booking.
//
//	go test -run '^$' -bench SearchInterleavedReads ./pcie
func BenchmarkSearchInterleavedReads(b *testing.B) {
	const reads, cpls = 64, 16
	const dF, dr = sim.Duration(19420), sim.Duration(72320) // Gen3 x16: a 256 B completion; host memory's pace
	for _, c := range []struct {
		name string
		hint bool
	}{{"hint", true}, {"scan", false}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i += reads * cpls {
				var l lane
				for r := 0; r < reads; r++ {
					at := sim.Time(r) * sim.Time(5*dr)
					l.prune(at)
					for j := 0; j < cpls; j++ {
						if !c.hint {
							l.hd = 0
						}
						l.reserve(at.Add(sim.Duration(j+1)*dr), dF)
					}
				}
			}
		})
	}
}

// withoutHints is l with its lanes' search hints cleared: two ways of
// booking the same traffic leave the same calendars, not always the same
// hints, and a hint never changes what a search books
// (TestSearchHintMatchesScan).
func withoutHints(l Link) Link {
	for _, ln := range []*lane{&l.up, &l.down} {
		ln.hr, ln.he, ln.hd = 0, 0, 0
	}
	return l
}

// earliestFit is the earliest start >= ready of d idle time on the
// calendar, found from scratch: every gap, from the first interval on.
func earliestFit(ln *lane, ready sim.Time, d sim.Duration) sim.Time {
	t := ready
	for _, iv := range ln.iv[:ln.n] {
		if iv.e <= t {
			continue
		}
		if iv.s >= t.Add(d) {
			break
		}
		t = iv.e
	}
	return t
}
