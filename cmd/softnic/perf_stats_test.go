package main

import (
	"math"
	"testing"
)

// us makes ps timestamps from µs deltas (the first post at 0).
func postsFromDeltasUS(deltas ...float64) []int64 {
	p := []int64{0}
	for _, d := range deltas {
		p = append(p, p[len(p)-1]+int64(math.Round(d*1e6)))
	}
	return p
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestPerfLatStats(t *testing.T) {
	cases := []struct {
		name    string
		deltas  []float64 // µs between consecutive posts
		rtt     int
		want    latStats
		wantBad bool
	}{
		{
			name:   "two largest dropped, odd count median",
			deltas: []float64{1, 2, 3, 100, 200},
			rtt:    1,
			// sorted 1 2 3 100 200; n = 3; median delta[1] = 2; avg 2;
			// t_max is delta[3] = 100 (the second largest); 99% index
			// ceil(2.97) = 3 -> 100; 99.9% ceil(2.997) = 3 -> 100.
			want: latStats{Bytes: 2, Iters: 6, Min: 1, Max: 100, Typical: 2, Avg: 2, Stdev: math.Sqrt(2.0 / 3), P99: 100, P999: 100, Samples: 3, RTTDivisor: 1},
		},
		{
			name:   "even count median is the mean of the middle two",
			deltas: []float64{4, 1, 3, 2, 50, 60},
			rtt:    1,
			// sorted 1 2 3 4 50 60; n = 4; median (2+3)/2 = 2.5; avg 2.5;
			// diffs truncated: 1.5->1, 0.5->0, -0.5->0, -1.5->-1: stdev sqrt(2/4).
			want: latStats{Bytes: 2, Iters: 7, Min: 1, Max: 50, Typical: 2.5, Avg: 2.5, Stdev: math.Sqrt(0.5), P99: 50, P999: 50, Samples: 4, RTTDivisor: 1},
		},
		{
			name:   "half round trip for send and write",
			deltas: []float64{2, 2, 2, 2, 2, 8, 9},
			rtt:    2,
			want:   latStats{Bytes: 2, Iters: 8, Min: 1, Max: 4, Typical: 1, Avg: 1, Stdev: 0, P99: 4, P999: 4, Samples: 5, RTTDivisor: 2},
		},
		{
			name:   "percentiles inside the count",
			deltas: seq(1, 202), // 1..202 µs: n = 200 after the two dropped
			rtt:    1,
			// median (100+101)/2; 99%: ceil(198) = 198 -> delta[198] = 199;
			// 99.9%: ceil(199.8) = 200 -> delta[200] = 201.
			want: latStats{Bytes: 2, Iters: 203, Min: 1, Max: 201, Typical: 100.5, Avg: 100.5, P99: 199, P999: 201, Samples: 200, RTTDivisor: 1},
		},
		{name: "too few", deltas: []float64{1, 2}, rtt: 1, wantBad: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := computeLat(postsFromDeltasUS(c.deltas...), 2, c.rtt)
			if c.wantBad {
				if ok {
					t.Fatalf("computeLat accepted %d deltas", len(c.deltas))
				}
				return
			}
			if !ok {
				t.Fatal("computeLat refused")
			}
			if c.name == "percentiles inside the count" {
				c.want.Stdev = got.Stdev // checked below
				var sq float64
				for i := 1; i <= 200; i++ {
					d := math.Trunc(100.5 - float64(i))
					sq += d * d
				}
				if !near(got.Stdev, math.Sqrt(sq/200)) {
					t.Errorf("stdev %v, want %v", got.Stdev, math.Sqrt(sq/200))
				}
			}
			if !near(got.Min, c.want.Min) || !near(got.Max, c.want.Max) || !near(got.Typical, c.want.Typical) ||
				!near(got.Avg, c.want.Avg) || !near(got.Stdev, c.want.Stdev) || !near(got.P99, c.want.P99) ||
				!near(got.P999, c.want.P999) || got.Samples != c.want.Samples || got.Iters != c.want.Iters ||
				got.RTTDivisor != c.want.RTTDivisor {
				t.Errorf("got  %+v\nwant %+v", got, c.want)
			}
		})
	}
}

func seq(from, to int) []float64 {
	var s []float64
	for i := from; i <= to; i++ {
		s = append(s, float64(i))
	}
	return s
}

func TestPerfBWStats(t *testing.T) {
	const us = 1e6 // ps
	cases := []struct {
		name              string
		posted, completed []int64
		bytes, pl, cqMod  int
		gbits, noPeak     bool
		peak, avg, rate   float64
	}{
		{
			name:   "every WR signalled: the peak is the best run",
			posted: []int64{0, 1 * us, 2 * us, 3 * us}, completed: []int64{10 * us, 11 * us, 11.5 * us, 12 * us},
			bytes: 1 << 20, pl: 1, cqMod: 1,
			// avg: 4 MiB over 12 µs; best per-message time: (12-2)/2 = 5 µs
			// ... and (11.5-2)/1 = 9.5, (12-1)/3 = 3.667, (12-0)/4 = 3: 3 µs.
			peak: 1e12 / (3 * us), avg: 4 * 1e12 / (12 * us), rate: 4 / 12.0,
		},
		{
			name:   "CQ moderation: only signalled completions count",
			posted: []int64{0, 1 * us, 2 * us, 3 * us}, completed: []int64{0, 8 * us, 0, 10 * us},
			bytes: 1 << 20, pl: 1, cqMod: 2,
			// j = 1, 3: from i=0: 8/2 = 4, 10/4 = 2.5; i=1: 7/1, 9/3 = 3;
			// i=2: 8/2 = 4; i=3: 7/1: best 2.5 µs.
			peak: 1e12 / (2.5 * us), avg: 4 * 1e12 / (10 * us), rate: 0.4,
		},
		{
			name:   "Gb/s divides by 125e6",
			posted: []int64{0, 1 * us}, completed: []int64{1 * us, 2 * us},
			bytes: 125, pl: 1, cqMod: 1, gbits: true,
			peak: 1, avg: 1, rate: 1,
		},
		{
			name:   "noPeak",
			posted: []int64{0, 1 * us}, completed: []int64{1 * us, 2 * us},
			bytes: 1 << 20, pl: 1, cqMod: 1, noPeak: true,
			peak: 0, avg: 1e6, rate: 1,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := computeBW(c.posted, c.completed, c.bytes, c.pl, c.cqMod, c.gbits, c.noPeak)
			div := float64(1 << 20)
			if c.gbits {
				div = 125e6
			}
			wantPeak := c.peak * float64(c.bytes) / div
			wantAvg := c.avg * float64(c.bytes) / div
			if c.name == "Gb/s divides by 125e6" || c.name == "noPeak" {
				wantPeak, wantAvg = c.peak, c.avg
			}
			if math.Abs(got.Peak-wantPeak) > 1e-6*max(1, wantPeak) || math.Abs(got.Avg-wantAvg) > 1e-6*max(1, wantAvg) ||
				math.Abs(got.MsgRate-c.rate) > 1e-9 {
				t.Errorf("got peak %v avg %v rate %v, want %v %v %v", got.Peak, got.Avg, got.MsgRate, wantPeak, wantAvg, c.rate)
			}
		})
	}
}

func TestPerfCHex(t *testing.T) {
	for _, c := range []struct {
		v     uint64
		width int
		want  string
	}{{0, 4, "0000"}, {0x100, 6, "0x0100"}, {1, 8, "0x000001"}, {0xabcdef, 6, "0xabcdef"}, {0x7f0000001000, 16, "0x007f0000001000"}} {
		if got := cHex(c.v, c.width); got != c.want {
			t.Errorf("cHex(%#x, %d) = %q, want %q", c.v, c.width, got, c.want)
		}
	}
}
