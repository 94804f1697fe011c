package fault

import (
	"cmp"
	"math"
	"slices"
	"sort"
	"strings"
	"unicode"
)

// shadows is ShadowedBy of every rule, in one pass over the plan: Explain
// asked ShadowedBy for each rule, each call scanning the rules before it,
// quadratic in their number (a 64 MiB plan holds millions: hours).
//
// An earlier rule e covers rule r (covers) when e's discrete match fields
// (node, qpn, opcode, wqe, tlp, target) are each unset or equal to r's,
// and e's PSN and address ranges contain r's. So the "always" rules (no
// nth, every, prob or count) go into buckets keyed by their point and the
// discrete fields they set, with those fields' values; the rules that can
// cover r are in the buckets keyed by a subset of r's set fields with r's
// values (at most 2^6). In each bucket the question is a dominance one:
// the least index among its rules whose range [lo, hi] contains r's,
// answered for all of the bucket's questions by one sweep in lo order with
// a Fenwick tree of the least index by hi: O(log n) each. Rule i is
// shadowed when that least index is below i. The results are ShadowedBy's
// (TestShadowsMatchShadowedBy); the cost is O(n·2^f·log n), f the number
// of discrete fields the rules set (at most 6).
func (p *Plan) shadows() []int {
	out := make([]int, len(p.Rules))
	for i := range out {
		out[i] = -1
	}
	buckets := map[shadowKey]*shadowBucket{}
	for i := range p.Rules {
		e := &p.Rules[i]
		if e.Point.Timed() || !shadowing(e) {
			continue
		}
		k := shadowKeyOf(e, shadowFields(&e.Match))
		b := buckets[k]
		if b == nil {
			b = &shadowBucket{}
			buckets[k] = b
		}
		b.add(e, i, false)
	}
	if len(buckets) == 0 {
		return out
	}
	for i := range p.Rules {
		r := &p.Rules[i]
		if r.Point.Timed() {
			continue
		}
		set := shadowFields(&r.Match)
		// Every subset of set, set itself included (the empty one last).
		for s := set; ; s = (s - 1) & set {
			if b := buckets[shadowKeyOf(r, s)]; b != nil {
				b.add(r, i, true)
			}
			if s == 0 {
				break
			}
		}
	}
	best := make([]int, len(p.Rules))
	for i := range best {
		best[i] = math.MaxInt
	}
	for _, b := range buckets {
		b.solve(best)
	}
	for i, k := range best {
		if k < i {
			out[i] = k
		}
	}
	return out
}

// shadowing reports whether e, met first, fires on every event it
// matches (ShadowedBy's "sure" case). prob 1 is such a rule too: the
// draw, in [0, 1), is always below it.
func shadowing(e *Rule) bool {
	return e.Nth == 0 && e.Every <= 1 && (e.Prob == 0 || e.Prob >= 1) && e.Count == 0
}

// The discrete match fields, as bits of a set.
const (
	sfNode = 1 << iota
	sfQPN
	sfOpcode
	sfWQE
	sfTLP
	sfTarget
)

// shadowFields is the set of discrete fields m sets.
func shadowFields(m *Match) uint8 {
	var s uint8
	if m.Node != nil {
		s |= sfNode
	}
	if m.QPN != nil {
		s |= sfQPN
	}
	if m.Opcode != nil {
		s |= sfOpcode
	}
	if m.WQE != nil {
		s |= sfWQE
	}
	if m.TLP != "" {
		s |= sfTLP
	}
	if m.Target != "" {
		s |= sfTarget
	}
	return s
}

// shadowKey is a bucket: a point, a set of discrete fields and their
// values (the others zero). TLP and target are case-folded, as covers
// compares them (strings.EqualFold).
type shadowKey struct {
	point       Point
	set         uint8
	node        int
	qpn         uint32
	opcode      uint8
	wqe         uint16
	tlp, target string
}

func shadowKeyOf(r *Rule, set uint8) shadowKey {
	m := &r.Match
	k := shadowKey{point: r.Point, set: set}
	if set&sfNode != 0 {
		k.node = *m.Node
	}
	if set&sfQPN != 0 {
		k.qpn = *m.QPN
	}
	if set&sfOpcode != 0 {
		k.opcode = *m.Opcode
	}
	if set&sfWQE != 0 {
		k.wqe = *m.WQE
	}
	if set&sfTLP != 0 {
		k.tlp = foldKey(m.TLP)
	}
	if set&sfTarget != 0 {
		k.target = foldKey(m.Target)
	}
	return k
}

// foldKey maps s to one string per strings.EqualFold class: each rune
// (utf8.RuneError for a bad byte, as EqualFold decodes it) to the least
// rune of its simple-folding orbit.
func foldKey(s string) string {
	var sb strings.Builder
	for _, r := range s {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		sb.WriteRune(least)
	}
	return sb.String()
}

// shadowRanges are a match's PSN and address ranges such that e's match
// covers r's in both exactly when e's ranges contain r's. PSNs are
// shifted up by one so that a match without a PSN has [0, MaxUint64]: as a
// coverer it contains every range, as the covered it lies in none of a
// match that has one (covers: a PSN rule covers only PSN rules).
func shadowRanges(m *Match) (psn, addr [2]uint64) {
	psn = [2]uint64{0, math.MaxUint64}
	switch {
	case m.PSN != nil:
		psn = [2]uint64{uint64(*m.PSN) + 1, uint64(*m.PSN) + 1}
	case m.PSNFrom != nil || m.PSNTo != nil:
		lo, hi := psnBounds(m)
		psn = [2]uint64{uint64(lo) + 1, uint64(hi) + 1}
	}
	lo, hi := addrBounds(m)
	return psn, [2]uint64{lo, hi}
}

type shadowItem struct {
	psn, addr [2]uint64
	idx       int
	query     bool // a rule asking; else an always rule that may cover
}

type shadowBucket struct{ items []shadowItem }

func (b *shadowBucket) add(r *Rule, i int, query bool) {
	psn, addr := shadowRanges(&r.Match)
	b.items = append(b.items, shadowItem{psn: psn, addr: addr, idx: i, query: query})
}

// solve lowers best[q] of each question q of the bucket to the least
// index of the bucket's rules whose ranges contain q's.
func (b *shadowBucket) solve(best []int) {
	full := [2]uint64{0, math.MaxUint64}
	var psn, addr bool // some item has a range short of everything
	for _, it := range b.items {
		psn = psn || it.psn != full
		addr = addr || it.addr != full
	}
	switch {
	case psn && addr:
		// Both dimensions (a plan Parse refuses: PSNs belong to wire
		// points, addresses to DMA, PCIe and WC points): scan.
		for _, q := range b.items {
			if !q.query {
				continue
			}
			for _, e := range b.items {
				if !e.query && e.idx < best[q.idx] && contains(e.psn, q.psn) && contains(e.addr, q.addr) {
					best[q.idx] = e.idx
				}
			}
		}
	case psn:
		b.sweep(best, func(it *shadowItem) [2]uint64 { return it.psn })
	default:
		b.sweep(best, func(it *shadowItem) [2]uint64 { return it.addr })
	}
}

func contains(a, b [2]uint64) bool { return a[0] <= b[0] && b[1] <= a[1] }

// sweep answers the bucket's questions on one dimension: in order of lo
// (coverers before questions at the same lo), each coverer enters a
// Fenwick tree of the least index by hi, highest hi first, and each
// question takes the least index among those with hi >= its hi.
func (b *shadowBucket) sweep(best []int, rng func(*shadowItem) [2]uint64) {
	type ev struct {
		lo, hi uint64
		idx    int
		query  bool
	}
	evs := make([]ev, len(b.items))
	var his []uint64
	for i := range b.items {
		it := &b.items[i]
		r := rng(it)
		evs[i] = ev{r[0], r[1], it.idx, it.query}
		if !it.query {
			his = append(his, r[1])
		}
	}
	slices.SortFunc(his, func(x, y uint64) int { return cmp.Compare(y, x) })
	his = slices.Compact(his)
	slices.SortFunc(evs, func(x, y ev) int {
		if c := cmp.Compare(x.lo, y.lo); c != 0 {
			return c
		}
		if x.query != y.query {
			if !x.query {
				return -1
			}
			return 1
		}
		return cmp.Compare(x.idx, y.idx)
	})
	tree := make([]int, len(his)+1) // 1-based; prefix minimum
	for i := range tree {
		tree[i] = math.MaxInt
	}
	for _, e := range evs {
		// his[:n] are the his >= e.hi (his descends).
		n := sort.Search(len(his), func(k int) bool { return his[k] < e.hi })
		if !e.query {
			for j := n; j < len(tree); j += j & -j { // his[n-1] == e.hi: position n
				tree[j] = min(tree[j], e.idx)
			}
			continue
		}
		least := math.MaxInt
		for j := n; j > 0; j -= j & -j {
			least = min(least, tree[j])
		}
		best[e.idx] = min(best[e.idx], least)
	}
}
