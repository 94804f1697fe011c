package main

import (
	"math"
	"math/bits"
)

// The BW peak of perftest's print_report_bw: the least per-message time
// (completed[j] - posted[i]) / (j - i + 1), in integer division, over
// every post i (a multiple of the post list) and every signalled
// completion j >= i (a multiple of the CQ moderation less one, and the
// last). perftest tries every pair, which takes quadratic time: 30 s and
// more for the 320,000 WRs of `-q 64 -n 5000`. peakDelta gives the same
// number in O(n log n); peakDeltaPairs is perftest's search, kept for
// inputs the fast one cannot take and as the reference it is tested
// against (TestPeakDeltaMatchesPairs).
//
// Why the fast one is exact: for one completion j, the per-message time of
// post i is the slope from the point (i, posted[i]) to Q = (j+1,
// completed[j]). Integer division rounds down and rounding down keeps
// order, so the least of the rounded times is the rounded least slope. The
// least slope from Q to points all to its left is on their upper convex
// hull, where it falls and then rises from vertex to vertex, so a binary
// search finds it. Posts arrive in order of i, so the hull grows at its
// right end (Andrew's monotone chain). Every comparison is a comparison of
// two products of non-negative integers, done in 128 bits: no rounding.
// The fast path needs what a run gives: posted[i] non-decreasing and no
// completion before a post it follows; anything else takes the pairs.
//
// A negative completed[j] is unset: no CQE took the count to exactly j+1
// (the last CQE of a QP stands for fewer than cq_mod WRs when --iters is
// not a multiple of it, so later counts fall between the multiples).
// Both searches skip it, as perftest's unsigned subtraction does: an unset
// time is 0 there and 0 - posted[i] wraps to the largest value.

// peakDelta returns the least per-message time and whether there was a
// candidate pair.
func peakDelta(posted, completed []int64, postList, cqMod int) (int64, bool) {
	n := len(completed)
	postList, cqMod = max(postList, 1), max(cqMod, 1)
	if n == 0 || len(posted) < n || !peakMonotone(posted, completed, postList, cqMod) {
		return peakDeltaPairs(posted, completed, postList, cqMod)
	}
	return peakDeltaHull(posted, completed, postList, cqMod)
}

// peakDeltaHull is the hull search, for times peakMonotone accepts
// (postList and cqMod at least 1).
func peakDeltaHull(posted, completed []int64, postList, cqMod int) (int64, bool) {
	n := len(completed)
	var hull []peakPoint
	best, found := int64(math.MaxInt64), false
	next := 0 // the next post to add to the hull
	query := func(j int) {
		for ; next <= j; next += postList {
			p := peakPoint{uint64(next), uint64(posted[next])}
			for k := len(hull); k >= 2 && !rightTurn(hull[k-2], hull[k-1], p); k-- {
				hull = hull[:k-1]
			}
			hull = append(hull, p)
		}
		if completed[j] < 0 {
			return
		}
		q := peakPoint{uint64(j + 1), uint64(completed[j])}
		lo, hi := 0, len(hull)-1
		for lo < hi {
			if mid := (lo + hi) / 2; slopeLess(hull[mid+1], hull[mid], q) {
				lo = mid + 1
			} else {
				hi = mid
			}
		}
		h := hull[lo]
		if t := int64((q.y - h.y) / (q.x - h.x)); t < best {
			best, found = t, true
		}
	}
	for j := cqMod - 1; j < n; j += cqMod {
		query(j)
	}
	if n%cqMod != 0 {
		query(n - 1)
	}
	return best, found
}

// peakDeltaPairs is perftest's search itself: every pair.
func peakDeltaPairs(posted, completed []int64, postList, cqMod int) (int64, bool) {
	n := len(completed)
	postList, cqMod = max(postList, 1), max(cqMod, 1)
	best, found := int64(math.MaxInt64), false
	try := func(i, j int) {
		if completed[j] < 0 {
			return
		}
		if t := (completed[j] - posted[i]) / int64(j-i+1); t < best {
			best, found = t, true
		}
	}
	for i := 0; i < n && i < len(posted); i += postList {
		for j := roundUp(i+1, cqMod) - 1; j < n; j += cqMod {
			try(i, j)
		}
		if n%cqMod != 0 {
			try(i, n-1)
		}
	}
	return best, found
}

// peakMonotone reports whether the posts that count are non-negative and
// non-decreasing and every completion that counts is no earlier than the
// last post before it: then every slope peakDelta compares is of
// non-negative integers.
func peakMonotone(posted, completed []int64, postList, cqMod int) bool {
	n := len(completed)
	last := int64(0)
	for i := 0; i < n; i += postList {
		if posted[i] < last {
			return false
		}
		last = posted[i]
	}
	ok := func(j int) bool { return completed[j] < 0 || completed[j] >= posted[j/postList*postList] }
	for j := cqMod - 1; j < n; j += cqMod {
		if !ok(j) {
			return false
		}
	}
	return n%cqMod == 0 || ok(n-1)
}

type peakPoint struct{ x, y uint64 }

// rightTurn reports whether o → a → b turns clockwise (b is below the
// line through o and a): a stays on the upper hull. x grows and y does not
// fall along o, a, b, so (a-o)×(b-o) compares two products of
// non-negative numbers.
func rightTurn(o, a, b peakPoint) bool {
	// clockwise: (a.x-o.x)(b.y-o.y) < (a.y-o.y)(b.x-o.x)
	return mulLess(a.x-o.x, b.y-o.y, a.y-o.y, b.x-o.x)
}

// slopeLess reports whether the slope from a to q is less than the slope
// from b to q (a and b left of q, below or level with it).
func slopeLess(a, b, q peakPoint) bool {
	// (q.y-a.y)/(q.x-a.x) < (q.y-b.y)/(q.x-b.x)
	return mulLess(q.y-a.y, q.x-b.x, q.y-b.y, q.x-a.x)
}

// mulLess reports whether a·b < c·d, exactly.
func mulLess(a, b, c, d uint64) bool {
	h1, l1 := bits.Mul64(a, b)
	h2, l2 := bits.Mul64(c, d)
	return h1 < h2 || h1 == h2 && l1 < l2
}
