package pcie

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/sim"
)

func TestSplitting(t *testing.T) {
	chunked := Gen3x8().WithRCB(64, true)
	tests := []struct {
		name string
		spec Spec
		op   string // "w" device write, "r" device read, "h" host write
		addr uint64
		n    int
		want Stats
	}{
		{"write 64 aligned", Gen3x8(), "w", 0x1000, 64, Stats{MWr: 1, WireBytes: 88, PayloadBytes: 64}},
		{"write 256 aligned", Gen3x8(), "w", 0x1000, 256, Stats{MWr: 1, WireBytes: 280, PayloadBytes: 256}},
		{"write 257 aligned", Gen3x8(), "w", 0x1000, 257, Stats{MWr: 2, WireBytes: 305, PayloadBytes: 257}},
		{"write 256 straddling an MPS boundary", Gen3x8(), "w", 0x1080, 256, Stats{MWr: 2, WireBytes: 304, PayloadBytes: 256}},
		{"write 4096 across 4 KiB", Gen3x8(), "w", 0xF80, 4096, Stats{MWr: 17, WireBytes: 4096 + 17*24, PayloadBytes: 4096}},
		{"write 0", Gen3x8(), "w", 0x1000, 0, Stats{}},
		{"write near the top of the address space", Gen3x8(), "w", ^uint64(0) - 63, 64, Stats{MWr: 1, WireBytes: 88, PayloadBytes: 64}},
		{"read 64", Gen3x8(), "r", 0x1000, 64, Stats{MRd: 1, CplD: 1, WireBytes: 24 + 84, PayloadBytes: 64}},
		{"read 2048", Gen3x8(), "r", 0x1000, 2048, Stats{MRd: 4, CplD: 8, WireBytes: 4*24 + 2048 + 8*20, PayloadBytes: 2048}},
		{"read 512 unaligned", Gen3x8(), "r", 0x1020, 512, Stats{MRd: 2, CplD: 3, WireBytes: 2*24 + 512 + 3*20, PayloadBytes: 512}},
		{"read 512 across 4 KiB", Gen3x8(), "r", 0xF00, 512, Stats{MRd: 2, CplD: 2, WireBytes: 2*24 + 512 + 2*20, PayloadBytes: 512}},
		{"read 256 RCB chunks", chunked, "r", 0x1000, 256, Stats{MRd: 1, CplD: 4, WireBytes: 24 + 256 + 4*20, PayloadBytes: 256}},
		{"read 100 unaligned RCB chunks", chunked, "r", 0x1030, 100, Stats{MRd: 1, CplD: 3, WireBytes: 24 + 100 + 3*20, PayloadBytes: 100}},
		{"read 0", Gen3x8(), "r", 0x1000, 0, Stats{}},
		{"host write 8", Gen3x8(), "h", 0x1800, 8, Stats{MWr: 1, WireBytes: 32, PayloadBytes: 8}},
		{"host write 64", Gen3x8(), "h", 0x1840, 64, Stats{MWr: 1, WireBytes: 88, PayloadBytes: 64}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := NewLink(tc.spec)
			var s Stats
			var done sim.Time
			switch tc.op {
			case "w":
				done, s = l.DeviceWrite(1000, tc.addr, tc.n)
			case "r":
				done, s = l.DeviceRead(1000, tc.addr, tc.n)
			case "h":
				done, s = l.HostWrite(1000, tc.addr, tc.n)
			}
			require.Equal(t, tc.want, s)
			require.GreaterOrEqual(t, done, sim.Time(1000))
			tot := l.Totals()
			require.Equal(t, s.TLPs(), tot.Down.TLPs()+tot.Up.TLPs())
			require.Equal(t, s.WireBytes, tot.Down.WireBytes+tot.Up.WireBytes)
			require.Equal(t, s.TLPs(), tot.HostMWr.TLPs()+tot.DeviceMWr.TLPs()+tot.MRd.TLPs()+tot.CplD.TLPs())
		})
	}
}

// TestReadLatencyCalibration is timing.md §7 check 3 against the §2.1
// medians: 64 B and 2048 B within 1 %, every other size within the fit's 5 %.
func TestReadLatencyCalibration(t *testing.T) {
	tests := []struct {
		size int
		ns   float64
		tol  float64
	}{
		{8, 533, 0.05}, {64, 546, 0.01}, {256, 626, 0.05}, {512, 706, 0.05},
		{1024, 853, 0.05}, {1520, 986, 0.05}, {2048, 1133, 0.01},
	}
	for _, tc := range tests {
		l := NewLink(Gen3x8())
		done, _ := l.DeviceRead(0, 0x40000, tc.size)
		t.Logf("read %4d B: model %.1f ns, measured median %.0f ns", tc.size, done.NS(), tc.ns)
		require.InEpsilon(t, tc.ns, done.NS(), tc.tol, "size %d", tc.size)
	}
}

func TestCacheLineSawTooth(t *testing.T) {
	lat := func(n int) sim.Time { d, _ := NewLink(Gen3x8()).DeviceRead(0, 0x40000, n); return d }
	require.Less(t, lat(63), lat(64))
	require.GreaterOrEqual(t, lat(65)-lat(64), sim.Time(calHostPerLine))
	require.GreaterOrEqual(t, lat(129)-lat(128), sim.Time(calHostPerLine))
	// Misalignment touches one more line.
	d1, _ := NewLink(Gen3x8()).DeviceRead(0, 0x40020, 64)
	require.Greater(t, d1, lat(64))
}

func TestBackToBackQueues(t *testing.T) {
	l := NewLink(Gen3x8())
	a1, _ := l.HostWrite(0, 0x1800, 64)
	a2, _ := l.HostWrite(0, 0x1840, 64)
	ser := l.ser(88)
	require.Equal(t, sim.Time(0).Add(ser+calFlight), a1)
	require.Equal(t, a1.Add(ser), a2)
	// Upstream is independent of downstream.
	d, _ := l.DeviceWrite(0, 0x1000, 64)
	require.Equal(t, a1, d)
}

// A doorbell written while a DMA read's completions are booked for later
// uses the idle link now instead of queueing behind them.
func TestGapFilling(t *testing.T) {
	l := NewLink(Gen3x8())
	rd, _ := l.DeviceRead(0, 0x40000, 2048)
	a, _ := l.HostWrite(sim.Time(10_000), 0x1800, 8)
	require.Equal(t, sim.Time(10_000).Add(l.ser(32)+calFlight), a)
	require.Less(t, a, rd)
	// But a write that is ready while a completion is on the wire waits.
	l = NewLink(Gen3x8())
	rd, _ = l.DeviceRead(0, 0x40000, 64)
	cplStart := rd.Add(-calFlight - l.ser(84))
	a, _ = l.HostWrite(cplStart+1, 0x1800, 8)
	require.Equal(t, rd.Add(-calFlight).Add(l.ser(32)+calFlight), a)
}

// Many reads in flight reach the link bound of §1.3 although one read alone
// is far slower (§2.1).
func TestThroughputReachesModel(t *testing.T) {
	const n = 2000
	tests := []struct {
		name string
		size int
		read bool
		want float64
	}{
		{"64B reads", 64, true, 44.1},
		{"256B reads", 256, true, 53.7},
		{"64B writes", 64, false, 42.1},
		{"256B writes", 256, false, 52.9},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := NewLink(Gen3x8())
			var first, last sim.Time
			for i := 0; i < n; i++ {
				addr := uint64(0x100000 + i*tc.size)
				var d sim.Time
				if tc.read {
					d, _ = l.DeviceRead(0, addr, tc.size)
				} else {
					d, _ = l.DeviceWrite(0, addr, tc.size)
				}
				if i == 0 {
					first = d
				}
				last = max(last, d)
			}
			gbps := float64((n-1)*tc.size*8) / float64(last-first) * 1e3
			t.Logf("%s: %.2f Gb/s (model %.1f)", tc.name, gbps, tc.want)
			require.InEpsilon(t, tc.want, gbps, 0.01)
		})
	}
}

func TestHostRead(t *testing.T) {
	l := NewLink(Gen3x8())
	arrive, done, s := l.HostRead(0, 0x1fc, 4)
	require.Equal(t, sim.Time(0).Add(l.ser(24)+calFlight), arrive)
	require.Equal(t, arrive.Add(l.ser(24)+calFlight), done)
	require.Equal(t, Stats{MRd: 1, CplD: 1, WireBytes: 48, PayloadBytes: 4}, s)
	require.Equal(t, 1, l.Totals().Down.MRd)
	require.Equal(t, 1, l.Totals().Up.CplD)
}

// The calendar stays bounded, sorted and disjoint under any booking order.
func TestLaneCalendarInvariants(t *testing.T) {
	var ln lane
	seed := uint64(1)
	next := func() uint64 { seed = seed*6364136223846793005 + 1442695040888963407; return seed >> 33 }
	for i := 0; i < 5000; i++ {
		ready := sim.Time(next() % 1_000_000)
		d := sim.Duration(1 + next()%500)
		if i%7 == 0 {
			ln.prune(ready)
		}
		start := ln.reserve(ready, d)
		require.GreaterOrEqual(t, start, ready)
		require.LessOrEqual(t, ln.n, maxSpans)
		for k := 0; k < ln.n; k++ {
			require.Less(t, ln.iv[k].s, ln.iv[k].e)
			if k > 0 {
				require.Less(t, ln.iv[k-1].e, ln.iv[k].s)
			}
		}
	}
}

func TestStatsAdd(t *testing.T) {
	var s Stats
	s.Add(Stats{MWr: 1, MRd: 2, CplD: 3, WireBytes: 10, PayloadBytes: 4})
	s.Add(Stats{MWr: 1, WireBytes: 5, PayloadBytes: 1})
	require.Equal(t, Stats{MWr: 2, MRd: 2, CplD: 3, WireBytes: 15, PayloadBytes: 5}, s)
	require.Equal(t, 7, s.TLPs())
}

func TestZeroAllocs(t *testing.T) {
	l := NewLink(Gen3x8())
	var now sim.Time
	allocs := testing.AllocsPerRun(200, func() {
		now += 100_000
		l.HostWrite(now, 0x1800, 64)
		l.DeviceRead(now, 0x40000, 2048)
		l.DeviceWrite(now, 0x80000, 1500)
		l.HostRead(now, 0x1fc, 4)
	})
	require.Zero(t, allocs)
}

func BenchmarkDeviceRead64(b *testing.B) {
	l := NewLink(Gen3x8())
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		l.DeviceRead(sim.Time(i)*20_000, 0x40000, 64)
	}
}

func BenchmarkDeviceRead2048(b *testing.B) {
	l := NewLink(Gen3x8())
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		l.DeviceRead(sim.Time(i)*400_000, 0x40000, 2048)
	}
}

func BenchmarkDeviceWrite256(b *testing.B) {
	l := NewLink(Gen3x8())
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		l.DeviceWrite(sim.Time(i)*40_000, 0x40000, 256)
	}
}

func BenchmarkHostWrite64(b *testing.B) {
	l := NewLink(Gen3x8())
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		l.HostWrite(sim.Time(i)*20_000, 0x1800, 64)
	}
}

// Posted writes complete in issue order even when a later operation,
// stamped further ahead in time, has made the lane forget the first
// write's booking (prune): a long DMA write, a DMA read stamped after its
// end, then a short write issued between the two stamps used to start on
// top of the long write's last TLP and finish first, so that two WRITE
// packets to overlapping bytes landed in the wrong order. The same holds
// for host MMIO writes downstream.
func TestPostedWritesStayOrderedAfterPrune(t *testing.T) {
	cases := []struct {
		name  string
		write func(l *Link, at sim.Time, n int) sim.Time
		other func(l *Link, at sim.Time)
	}{
		{"device writes", func(l *Link, at sim.Time, n int) sim.Time { done, _ := l.DeviceWrite(at, 0x1000, n); return done },
			func(l *Link, at sim.Time) { l.DeviceRead(at, 0x9000, 64) }},
		{"host writes", func(l *Link, at sim.Time, n int) sim.Time { done, _ := l.HostWrite(at, 0x40, n); return done },
			func(l *Link, at sim.Time) { l.HostRead(at, 0x80, 4) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := NewLink(Gen3x8())
			first := tc.write(l, 1000, 4096)
			if tc.name == "host writes" {
				first = max(first, tc.write(l, 1000, 64)) // a train of lines
				for i := 0; i < 30; i++ {
					first = max(first, tc.write(l, 1000, 64))
				}
			}
			tc.other(l, first) // stamped after the writes' end: prunes them
			second := tc.write(l, 1001, 26)
			require.Greater(t, second, first, "the later posted write completes after the earlier one")
		})
	}
}

// A posted write waits for the posted writes issued before it in virtual
// time, not for those booked by earlier calls at later times: a device
// that works out one QP's writes microseconds ahead must not hold back
// another QP's write issued now. Calls in time order keep the previous
// write's end as their floor.
func TestPostedWritesOrderedByIssueTime(t *testing.T) {
	cases := []struct {
		name   string
		prior  []sim.Time // issue times (ns) of 4 KiB writes, in call order
		at     sim.Time   // a 64 B write issued last (ns)
		before bool       // it must complete before the prior ones
	}{
		{"in time order", []sim.Time{1000, 1100}, 1200, false},
		{"same time", []sim.Time{1000}, 1000, false},
		{"booked ahead", []sim.Time{50_000, 60_000}, 1000, true},
		{"between", []sim.Time{1000, 50_000}, 1100, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns := sim.Time(sim.Nanosecond)
			l := NewLink(Gen3x8())
			var first, last sim.Time
			for i, at := range tc.prior {
				done, _ := l.DeviceWrite(at*ns, 0x10000*uint64(i+1), 4096)
				if i == 0 || done < first {
					first = done
				}
				last = max(last, done)
			}
			done, _ := l.DeviceWrite(tc.at*ns, 0x100, 64)
			switch {
			case tc.before:
				require.Less(t, done, first, "issued before every prior write: done before them")
				require.Less(t, done, (tc.at * ns).Add(sim.Microsecond), "and not held back by them")
			case tc.name == "between":
				// After the write issued at 1000, before the one at 50 µs.
				d0, _ := NewLink(Gen3x8()).DeviceWrite(1000*ns, 0x10000, 4096)
				require.GreaterOrEqual(t, done, d0, "after the earlier-issued write")
				require.Less(t, done, last)
			default:
				require.Greater(t, done, last, "after every prior write")
			}
		})
	}
}

// postedOrder stays a staircase (issue times and ends increasing) and
// bounded under any call order, and forgets no write: every floor is at
// least what it was before a step was added (merging two steps only
// raises floors), and a write issued at t makes floor(t) at least its
// end. (Before, a full staircase forgot the earliest-issued step, or the
// new one when that was the earliest, and floors fell.)
func TestPostedOrderStaircase(t *testing.T) {
	var o postedOrder
	seed := uint64(1)
	probes := make([]sim.Time, 64)
	for i := range probes {
		probes[i] = sim.Time(i) * 100_000 / sim.Time(len(probes))
	}
	for i := 0; i < 5000; i++ {
		seed = seed*6364136223846793005 + 1442695040888963407
		at := sim.Time(seed>>40) % 100_000
		end := max(o.floor(at), at).Add(sim.Duration(seed>>50) % 5000)
		var before [64]sim.Time
		for k, p := range probes {
			before[k] = o.floor(p)
		}
		o.add(at, end)
		require.LessOrEqual(t, o.n, orderDepth, "bounded")
		for k := 1; k < o.n; k++ {
			if o.at[k-1] >= o.at[k] || o.end[k-1] > o.end[k] {
				t.Fatalf("after %d adds, steps %d and %d of %d: (%v, %v), (%v, %v)", i+1, k-1, k, o.n, o.at[k-1], o.end[k-1], o.at[k], o.end[k])
			}
		}
		if f := o.floor(at); f < end {
			t.Fatalf("after %d adds: floor(%v) = %v, before the end %v of the write issued then", i+1, at, f, end)
		}
		for k, p := range probes {
			if f := o.floor(p); f < before[k] && p != before[k] {
				t.Fatalf("after %d adds: floor(%v) fell from %v to %v", i+1, p, before[k], f)
			}
		}
	}
}

// Two posted writes issued one after the other, in time order, complete
// in that order even when the link has orderDepth writes or more booked
// further ahead in virtual time (another QP's WRITE packets worked out
// ahead of the wire) and the first one's TLPs leave gaps on the lane
// (between read requests) that the second would fit in. Before, the
// first of the two, stamped earlier than every remembered step of a full
// staircase, was not remembered; the second started in a gap at once and
// finished first: a SEND's 2 KiB MIDDLE landed after its 164-byte LAST
// and after the receive CQE written behind it (the 1M-message soak, seed
// 7, with the stricter implied-NAK rule).
func TestPostedWritesOrderedBehindFullStaircase(t *testing.T) {
	cases := []struct {
		name   string
		ahead  int // 256 B writes booked first, 40 ns apart from 50 µs on
		n1, n2 int // then a write issued at 1 µs and one at 1.05 µs
	}{
		{"a few ahead", 4, 2048, 164},
		{"one short of full", orderDepth - 1, 2048, 164},
		{"full", orderDepth, 2048, 164},
		{"more than full", 3 * orderDepth, 2048, 164},
		{"full, then a CQE-sized write", 2 * orderDepth, 4096, 64},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns := sim.Time(sim.Nanosecond)
			l := NewLink(Gen3x8())
			for i := 0; i < tc.ahead; i++ {
				l.DeviceWrite(50_000*ns+sim.Time(i)*40*ns, 0x100000+uint64(i)*256, 256)
			}
			// Read requests every 80 ns on the up lane: each gap holds one
			// 256 B TLP of the first write, and a short TLP beside it.
			for i := 0; i < 32; i++ {
				l.DeviceRead(1000*ns+sim.Time(i)*80*ns, 0x200000+uint64(i)*64, 64)
			}
			first, _ := l.DeviceWrite(1000*ns, 0x1000, tc.n1)
			second, _ := l.DeviceWrite(1050*ns, 0x2000, tc.n2)
			require.Greater(t, second, first, "the later-issued write completes after the earlier one")
			require.Less(t, second, 50_000*ns, "neither waits for the writes booked ahead")
		})
	}
}

// TestSerTableMatchesFormula: the table ser reads from gives the formula's
// picoseconds for every size it holds, and past its end ser falls back to
// the formula, for every generation and MPS a profile may give.
func TestSerTableMatchesFormula(t *testing.T) {
	links := 0
	for _, base := range []Spec{Gen3x8(), Gen3x16(), Gen4x16(), Gen5x16()} {
		for _, mps := range []int{128, 256, 512, 1024, 2048, 4096} {
			sp := base
			sp.MPS = mps
			if sp.Validate() != nil {
				continue
			}
			links++
			l := NewLink(sp)
			if len(l.serTab) <= mps {
				t.Fatalf("%s mps %d: table of %d", sp.Name, mps, len(l.serTab))
			}
			for w := 0; w < len(l.serTab)+100; w++ {
				if got, want := l.ser(w), l.serCalc(w); got != want {
					t.Fatalf("%s mps %d: ser(%d) = %d, formula %d", sp.Name, mps, w, got, want)
				}
			}
		}
	}
	if links < 8 {
		t.Fatalf("only %d valid specs checked", links)
	}
}
