package shm

// spanTree holds a region's free spans, disjoint and never adjacent, as a
// treap ordered by offset whose every node also knows, for each alignment
// from 8 B to 4 KiB, the most bytes a span of its subtree holds at that
// alignment. First fit is then a descent that skips every subtree that
// cannot hold the request, and freeing a span finds its neighbours and
// merges with them, each in O(log n) expected for n spans. Pruning by
// alignment matters: the 56 B left before each 64 B-aligned doorbell
// record fit an 8 B request by size and never by alignment, and a descent
// that looked only at sizes walked all of them for every QP. A sorted
// slice of spans made every free (and every carve that splits a span in
// two) move the spans after it, which made destroying many QPs quadratic
// (64K QPs: 17 s in memmove).
// a sorted slice made every free (and every carve that splits a span in
// two) move the spans after it, which made destroying many QPs quadratic
// (64K QPs: 17 s in memmove).
//
// Nodes live in one slice, addressed by index (0 is nil), and are reused
// through a free list, so the tree costs no allocation once it has grown.
type spanTree struct {
	base  uint64     // the region's IOVA base: alignment is of IOVAs
	nodes []spanNode // nodes[0] is the nil node
	root  int32
	spare int32   // head of the list of unused nodes, linked through left
	seed  uint64  // priorities: xorshift, fixed seed (shape never shows)
	path  []int32 // replace's scratch
	n     int
}

type spanNode struct {
	span
	hold        [len(aligns)]int // hold[k]: most bytes a span of this subtree holds at alignment aligns[k]
	prio        uint64
	left, right int32
}

// aligns are the alignments tracked exactly: those of a doorbell record
// (64 B), a ring (4 KiB) and none (8 B). A request at another alignment is
// pruned by the largest tracked one below it, which never holds less, and
// checked span by span. Each tracked alignment costs every tree edit.
var aligns = [...]int{8, 64, 4096}

// alignIndex is the hold index that bounds a request at alignment align.
func alignIndex(align int) int {
	k := 0
	for k+1 < len(aligns) && aligns[k+1] <= align {
		k++
	}
	return k
}

// holds is how many bytes s holds from its first address aligned to align,
// or -1 for none.
func (t *spanTree) holds(s span, align int) int {
	a := int((t.base+uint64(s.off)+uint64(align-1))&^uint64(align-1) - t.base)
	return max(s.off+s.size-a, -1)
}

func newSpanTree(base uint64, s span) *spanTree {
	t := &spanTree{base: base, nodes: make([]spanNode, 1, 64), seed: 0x9e3779b97f4a7c15}
	t.insert(s)
	return t
}

// len is the number of free spans.
func (t *spanTree) len() int { return t.n }

func (t *spanTree) newNode(s span) int32 {
	t.seed ^= t.seed << 13
	t.seed ^= t.seed >> 7
	t.seed ^= t.seed << 17
	nd := spanNode{span: s, prio: t.seed}
	for k := range nd.hold {
		nd.hold[k] = t.holds(s, aligns[k])
	}
	if i := t.spare; i != 0 {
		t.spare = t.nodes[i].left
		t.nodes[i] = nd
		return i
	}
	t.nodes = append(t.nodes, nd)
	return int32(len(t.nodes) - 1)
}

func (t *spanTree) release(i int32) {
	t.nodes[i] = spanNode{left: t.spare}
	t.spare = i
}

// fix recomputes node i's hold from its span and its children.
func (t *spanTree) fix(i int32) {
	nd := &t.nodes[i]
	for k := range nd.hold {
		nd.hold[k] = t.holds(nd.span, aligns[k])
	}
	for _, c := range [2]int32{nd.left, nd.right} {
		if c != 0 {
			ch := &t.nodes[c].hold
			for k := range nd.hold {
				nd.hold[k] = max(nd.hold[k], ch[k])
			}
		}
	}
}

// split cuts subtree i into the spans before off and those at or after it.
func (t *spanTree) split(i int32, off int) (int32, int32) {
	if i == 0 {
		return 0, 0
	}
	if t.nodes[i].off < off {
		l, r := t.split(t.nodes[i].right, off)
		t.nodes[i].right = l
		t.fix(i)
		return i, r
	}
	l, r := t.split(t.nodes[i].left, off)
	t.nodes[i].left = r
	t.fix(i)
	return l, i
}

// merge joins two subtrees, every span of a before every span of b.
func (t *spanTree) merge(a, b int32) int32 {
	if a == 0 {
		return b
	}
	if b == 0 {
		return a
	}
	if t.nodes[a].prio > t.nodes[b].prio {
		t.nodes[a].right = t.merge(t.nodes[a].right, b)
		t.fix(a)
		return a
	}
	t.nodes[b].left = t.merge(a, t.nodes[b].left)
	t.fix(b)
	return b
}

// insert adds s, which overlaps no span of the tree.
func (t *spanTree) insert(s span) {
	l, r := t.split(t.root, s.off)
	t.root = t.merge(t.merge(l, t.newNode(s)), r)
	t.n++
}

// remove deletes the span that starts at off, which the tree holds.
func (t *spanTree) remove(off int) {
	l, r := t.split(t.root, off)
	m, r := t.split(r, off+1)
	if m != 0 {
		t.release(m)
		t.n--
	}
	t.root = t.merge(l, r)
}

// replace puts s in the place of the span that starts at off, which the
// tree holds; s must keep the order (overlap no other span). It edits the
// node in place and recomputes the holds on its path, one descent where a
// remove and an insert are five.
func (t *spanTree) replace(off int, s span) {
	path := t.path[:0]
	i := t.root
	for i != 0 && t.nodes[i].off != off {
		path = append(path, i)
		if off < t.nodes[i].off {
			i = t.nodes[i].left
		} else {
			i = t.nodes[i].right
		}
	}
	if i == 0 {
		return
	}
	t.nodes[i].span = s
	t.fix(i)
	for k := len(path) - 1; k >= 0; k-- {
		t.fix(path[k])
	}
	t.path = path
}

// before is the span that starts last before off, and after the one that
// starts first after it.
func (t *spanTree) before(off int) (span, bool) {
	var best span
	ok := false
	for i := t.root; i != 0; {
		if nd := &t.nodes[i]; nd.off < off {
			best, ok = nd.span, true
			i = nd.right
		} else {
			i = nd.left
		}
	}
	return best, ok
}

func (t *spanTree) after(off int) (span, bool) {
	var best span
	ok := false
	for i := t.root; i != 0; {
		if nd := &t.nodes[i]; nd.off > off {
			best, ok = nd.span, true
			i = nd.left
		} else {
			i = nd.right
		}
	}
	return best, ok
}

// first is the lowest span that holds size bytes at IOVA alignment align,
// and where they start: first fit.
func (t *spanTree) first(size, align int) (span, int, bool) {
	return t.firstIn(t.root, size, align, alignIndex(align))
}

func (t *spanTree) firstIn(i int32, size, align, k int) (span, int, bool) {
	for i != 0 && t.nodes[i].hold[k] >= size {
		nd := &t.nodes[i]
		if s, a, ok := t.firstIn(nd.left, size, align, k); ok {
			return s, a, true
		}
		if t.holds(nd.span, align) >= size {
			a := nd.off + nd.size - t.holds(nd.span, align)
			return nd.span, a, true
		}
		i = nd.right
	}
	return span{}, 0, false
}

// last is the highest span that holds size bytes at alignment align, and
// the highest aligned place in it where they start.
func (t *spanTree) last(size, align int) (span, int, bool) {
	return t.lastIn(t.root, size, align, alignIndex(align))
}

func (t *spanTree) lastIn(i int32, size, align, k int) (span, int, bool) {
	for i != 0 && t.nodes[i].hold[k] >= size {
		nd := &t.nodes[i]
		if s, a, ok := t.lastIn(nd.right, size, align, k); ok {
			return s, a, true
		}
		if t.holds(nd.span, align) >= size {
			// A span that holds size bytes at alignment align has
			// end-size >= its first aligned address, so aligning
			// end-size down stays in it.
			a := int((t.base+uint64(nd.off+nd.size-size))&^uint64(align-1) - t.base)
			return nd.span, a, true
		}
		i = nd.left
	}
	return span{}, 0, false
}

// each calls f on every span, lowest first.
func (t *spanTree) each(f func(span)) { t.eachIn(t.root, f) }

func (t *spanTree) eachIn(i int32, f func(span)) {
	for i != 0 {
		t.eachIn(t.nodes[i].left, f)
		f(t.nodes[i].span)
		i = t.nodes[i].right
	}
}
