package main

// The statistics of `softnic perf`, computed the way perftest computes them
// (shared/reference/perftest.md), so that a softnic table and a perftest
// table of the same run can be read side by side. Times are integer
// picoseconds here where perftest has integer CPU cycles: each integer step
// of perftest (a median of two cycle counts, the per-message time of the
// peak search) is the same integer step in ps.

import (
	"math"
	"slices"
)

// psPerUS converts picoseconds to microseconds.
const psPerUS = 1e6

// latStats is one row of a latency table.
type latStats struct {
	Bytes      int     `json:"bytes"`
	Iters      int     `json:"iterations"`
	Min        float64 `json:"t_min_us"`
	Max        float64 `json:"t_max_us"`
	Typical    float64 `json:"t_typical_us"`
	Avg        float64 `json:"t_avg_us"`
	Stdev      float64 `json:"t_stdev_us"`
	P99        float64 `json:"p99_us"`
	P999       float64 `json:"p99_9_us"`
	Samples    int     `json:"samples"`     // deltas that entered the statistics
	RTTDivisor int     `json:"rtt_divisor"` // 2: half round trip (send, write); 1: full (read, atomic)
}

// latTail is how many of the largest deltas perftest leaves out.
const latTail = 2

// computeLat turns the post timestamps of a ping-pong (one per iteration,
// ps) into perftest's latency row:
//   - a sample is the time between consecutive posts, divided by rtt
//     (2 for send and write, whose ping-pong is a round trip per iteration;
//     1 for read and atomic);
//   - the samples are sorted and the two largest left out of the count;
//   - typical is the median of the rest (the mean of the middle two, in
//     integer ps, when their number is even);
//   - t_avg is their mean; t_stdev the root of the mean squared difference
//     from t_avg, each difference truncated to whole µs first, as perftest's
//     integer temporaries do;
//   - t_min is the smallest sample; t_max is the sample just past the count
//     (the second largest: perftest prints delta[n] after n -= 2);
//   - 99% and 99.9% are the samples at ceil(n·0.99) and ceil(n·0.999).
//
// It needs at least latTail+2 timestamps (perftest's minimum is 5
// iterations).
func computeLat(posted []int64, bytes, rtt int) (latStats, bool) {
	n := len(posted) - 1
	if n < latTail+1 || rtt < 1 {
		return latStats{}, false
	}
	delta := make([]int64, n)
	for i := range delta {
		delta[i] = posted[i+1] - posted[i]
	}
	return latFromDeltas(delta, len(posted), bytes, rtt), true
}

// latFromDeltas is computeLat on the deltas themselves (sorted in place).
func latFromDeltas(delta []int64, iters, bytes, rtt int) latStats {
	slices.Sort(delta)
	n := len(delta) - latTail
	var median int64
	if (n-1)%2 != 0 {
		median = (delta[n/2] + delta[n/2-1]) / 2
	} else {
		median = delta[n/2]
	}
	q := psPerUS * float64(rtt)
	us := func(ps int64) float64 { return float64(ps) / q }
	var sum float64
	for _, d := range delta[:n] {
		sum += us(d)
	}
	avg := sum / float64(n)
	var sq float64
	for _, d := range delta[:n] {
		diff := math.Trunc(avg - us(d))
		sq += diff * diff
	}
	i99 := int(math.Ceil(float64(n) * 0.99))
	i999 := int(math.Ceil(float64(n) * 0.999))
	return latStats{
		Bytes: bytes, Iters: iters,
		Min: us(delta[0]), Max: us(delta[n]), Typical: us(median), Avg: avg,
		Stdev: math.Sqrt(sq / float64(n)),
		P99:   us(delta[min(i99, len(delta)-1)]), P999: us(delta[min(i999, len(delta)-1)]),
		Samples: n, RTTDivisor: rtt,
	}
}

// latDuration is one row of a latency table of a timed run (-D): the mean
// over the whole run and the transactions per second.
type latDuration struct {
	Bytes      int     `json:"bytes"`
	Iters      int     `json:"iterations"`
	Avg        float64 `json:"t_avg_us"`
	TPS        float64 `json:"tps"`
	RTTDivisor int     `json:"rtt_divisor"`
}

func computeLatDuration(iters int, elapsed int64, bytes, rtt int) latDuration {
	if iters == 0 || elapsed <= 0 {
		return latDuration{Bytes: bytes, RTTDivisor: rtt}
	}
	return latDuration{Bytes: bytes, Iters: iters, RTTDivisor: rtt,
		Avg: float64(elapsed) / psPerUS / float64(rtt) / float64(iters),
		TPS: float64(iters) / (float64(elapsed) / 1e12)}
}

// bwStats is one row of a bandwidth table.
type bwStats struct {
	Bytes   int     `json:"bytes"`
	Iters   int     `json:"iterations"`
	Peak    float64 `json:"bw_peak"`
	Avg     float64 `json:"bw_average"`
	MsgRate float64 `json:"msg_rate_mpps"`
	Unit    string  `json:"unit"` // MiB/s (perftest's "MB/sec": 2^20 bytes) or Gb/s
	// -b: each direction's own row, this side's sends (Local; in one
	// process the client's) and the peer's (Remote, its report); the row
	// itself is their sum.
	Local  *bwStats `json:"local,omitempty"`
	Remote *bwStats `json:"remote,omitempty"`
}

// bwUnit is the divisor of a bandwidth in bytes per second.
func bwUnit(gbits bool) (float64, string) {
	if gbits {
		return 125e6, "Gb/s"
	}
	return 1 << 20, "MiB/s"
}

// computeBW is perftest's bandwidth row from the time of every post
// (posted[i], for i a multiple of postList) and of every completion
// (completed[j] for each signalled WR j; others unused), in ps.
//   - BW average: all bytes over completed[n-1] - posted[0];
//   - MsgRate: messages over the same time, in millions per second;
//   - BW peak: the best per-message time, in integer ps, over every run of
//     messages from a post i to a signalled completion j (and to the last
//     one), the way perftest searches it; noPeak leaves it 0 (perftest's
//     -N, and its send_bw server).
func computeBW(posted, completed []int64, bytes, postList, cqMod int, gbits, noPeak bool) bwStats {
	n := len(completed)
	div, unit := bwUnit(gbits)
	st := bwStats{Bytes: bytes, Iters: n, Unit: unit}
	if n == 0 {
		return st
	}
	postList, cqMod = max(postList, 1), max(cqMod, 1)
	sum := float64(completed[n-1] - posted[0])
	if sum <= 0 {
		return st
	}
	st.Avg = float64(bytes) * float64(n) * 1e12 / (sum * div)
	st.MsgRate = float64(n) * 1e12 / (sum * 1e6)
	if noPeak {
		return st
	}
	// perftest starts from completed[0]-posted[0] in unsigned cycles; with
	// CQ moderation completed[0] is unset (0) and the start wraps to the
	// largest value: no candidate. peakDelta searches as perftest does,
	// faster (perf_peak.go).
	if best, ok := peakDelta(posted, completed, postList, cqMod); ok && best > 0 {
		st.Peak = float64(bytes) * 1e12 / (float64(best) * div)
	}
	return st
}

// bwFromSpan is a bandwidth row without a peak from the time between the
// first and the last event of a run (a receiving side, a timed run).
func bwFromSpan(n int, span int64, bytes int, gbits bool) bwStats {
	div, unit := bwUnit(gbits)
	st := bwStats{Bytes: bytes, Iters: n, Unit: unit}
	if n == 0 || span <= 0 {
		return st
	}
	st.Avg = float64(bytes) * float64(n) * 1e12 / (float64(span) * div)
	st.MsgRate = float64(n) * 1e12 / (float64(span) * 1e6)
	return st
}

func roundUp(v, m int) int { return (v + m - 1) / m * m }
