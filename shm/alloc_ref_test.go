package shm

import (
	"math/rand"
	"slices"
	"sort"
	"testing"
)

// refFirstFit is the plain first-fit allocator Alloc must agree with: it
// walks every free span from the lowest address.
type refFirstFit struct {
	base uint64
	free []span
	used map[uint64]int
}

func (r *refFirstFit) alloc(size, align int) (uint64, bool) {
	size = (size + 7) &^ 7
	for i, s := range r.free {
		a := int((r.base+uint64(s.off)+uint64(align-1))&^uint64(align-1) - r.base)
		if a+size > s.off+s.size {
			continue
		}
		var rest []span
		if a > s.off {
			rest = append(rest, span{s.off, a - s.off})
		}
		if end := s.off + s.size; a+size < end {
			rest = append(rest, span{a + size, end - a - size})
		}
		r.free = append(r.free[:i], append(rest, r.free[i+1:]...)...)
		r.used[r.base+uint64(a)] = size
		return r.base + uint64(a), true
	}
	return 0, false
}

// allocTop is last fit: the highest span that holds the request, at the
// highest aligned place in it.
func (r *refFirstFit) allocTop(size, align int) (uint64, bool) {
	size = (size + 7) &^ 7
	for i := len(r.free) - 1; i >= 0; i-- {
		s := r.free[i]
		end := s.off + s.size
		a := int((r.base+uint64(end-size))&^uint64(align-1) - r.base)
		if a < s.off {
			continue
		}
		var rest []span
		if a > s.off {
			rest = append(rest, span{s.off, a - s.off})
		}
		if a+size < end {
			rest = append(rest, span{a + size, end - a - size})
		}
		r.free = append(r.free[:i], append(rest, r.free[i+1:]...)...)
		r.used[r.base+uint64(a)] = size
		return r.base + uint64(a), true
	}
	return 0, false
}

func (r *refFirstFit) release(addr uint64) {
	r.free = append(r.free, span{int(addr - r.base), r.used[addr]})
	delete(r.used, addr)
	sort.Slice(r.free, func(i, j int) bool { return r.free[i].off < r.free[j].off })
	merged := r.free[:1]
	for _, s := range r.free[1:] {
		last := &merged[len(merged)-1]
		if last.off+last.size == s.off {
			last.size += s.size
		} else {
			merged = append(merged, s)
		}
	}
	r.free = merged
}

// TestAllocIsFirstFit: the span tree gives exactly the addresses of plain
// first fit (and of last fit for AllocTop), so every trace that prints an
// address is unchanged, and holds the same free spans after every step.
func TestAllocIsFirstFit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		seed  int64
		freeP int // one step in freeP frees
	}{{"grow", 11, 4}, {"churn", 12, 2}, {"steady", 13, 3}} {
		t.Run(tc.name, func(t *testing.T) {
			const size = 8 << 20
			r, err := New("firstfit", size, 0x10000)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			ref := &refFirstFit{base: 0x10000, free: []span{{0, size}}, used: map[uint64]int{}}
			rng := rand.New(rand.NewSource(tc.seed))
			var live []uint64
			for step := 0; step < 20000; step++ {
				if len(live) > 0 && rng.Intn(tc.freeP) == 0 {
					k := rng.Intn(len(live))
					addr := live[k]
					live = append(live[:k], live[k+1:]...)
					if err := r.Free(addr); err != nil {
						t.Fatal(err)
					}
					ref.release(addr)
				} else {
					sz, al := 8+rng.Intn(120), 64
					switch rng.Intn(3) {
					case 0:
						sz, al = 4096*(1+rng.Intn(9)), 4096
					case 1:
						sz, al = 4096+rng.Intn(9000), 8<<rng.Intn(10)
					}
					top := rng.Intn(8) == 0
					var got, want uint64
					var ok bool
					if top {
						got, err = r.AllocTop(sz, al)
						want, ok = ref.allocTop(sz, al)
					} else {
						got, err = r.Alloc(sz, al)
						want, ok = ref.alloc(sz, al)
					}
					if ok != (err == nil) || got != want {
						t.Fatalf("step %d: Alloc(%d, %d) top %v = %#x, %v; the reference gives %#x, %v", step, sz, al, top, got, err, want, ok)
					}
					if ok {
						live = append(live, got)
					}
				}
				if step%97 == 0 || step == 19999 {
					var spans []span
					r.free.each(func(s span) { spans = append(spans, s) })
					if !slices.Equal(spans, ref.free) || r.free.len() != len(ref.free) {
						t.Fatalf("step %d: %d free spans %v, want %d %v", step, r.free.len(), spans, len(ref.free), ref.free)
					}
					checkHold(t, r.free, r.free.root)
				}
			}
		})
	}
}

// checkHold verifies every node's hold is the best its subtree's spans
// hold at each alignment.
func checkHold(t *testing.T, tr *spanTree, i int32) {
	if i == 0 {
		return
	}
	nd := tr.nodes[i]
	checkHold(t, tr, nd.left)
	checkHold(t, tr, nd.right)
	for k := range nd.hold {
		m := -1
		tr.eachIn(i, func(s span) { m = max(m, tr.holds(s, aligns[k])) })
		if nd.hold[k] != m {
			t.Fatalf("node at %d: holds %d at alignment %d, its subtree's best %d", nd.off, nd.hold[k], aligns[k], m)
		}
	}
}

// FuzzAllocFirstFit drives Alloc, AllocTop and Free with the ops a byte
// string spells (3 bytes an op) and checks every answer and the free
// spans against plain first fit after each op.
func FuzzAllocFirstFit(f *testing.F) {
	f.Add([]byte{0, 1, 2, 0, 9, 3, 2, 0, 0, 1, 200, 7})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 2, 0, 0, 2, 1, 0})
	f.Add([]byte{1, 255, 12, 0, 3, 6, 1, 5, 9, 2, 0, 0, 2, 0, 0})
	f.Fuzz(func(t *testing.T, ops []byte) {
		const size = 1 << 20
		r, err := New("fuzzfirstfit", size, 0x10000)
		if err != nil {
			t.Skip(err)
		}
		defer r.Close()
		ref := &refFirstFit{base: 0x10000, free: []span{{0, size}}, used: map[uint64]int{}}
		var live []uint64
		for i := 0; i+3 <= len(ops) && i < 3*500; i += 3 {
			kind, a, b := ops[i]%3, int(ops[i+1]), int(ops[i+2])
			if kind == 2 {
				if len(live) == 0 {
					continue
				}
				k := a % len(live)
				addr := live[k]
				live = append(live[:k], live[k+1:]...)
				if err := r.Free(addr); err != nil {
					t.Fatal(err)
				}
				ref.release(addr)
			} else {
				sz := 1 + a*(1+b%64)
				al := 8 << (b % 10)
				var got, want uint64
				var ok bool
				if kind == 1 {
					got, err = r.AllocTop(sz, al)
					want, ok = ref.allocTop(sz, al)
				} else {
					got, err = r.Alloc(sz, al)
					want, ok = ref.alloc(sz, al)
				}
				if ok != (err == nil) || got != want {
					t.Fatalf("op %d: alloc(%d, %d) top %v = %#x, %v; the reference gives %#x, %v", i/3, sz, al, kind == 1, got, err, want, ok)
				}
				if ok {
					live = append(live, got)
				}
			}
			var spans []span
			r.free.each(func(s span) { spans = append(spans, s) })
			if !slices.Equal(spans, ref.free) {
				t.Fatalf("op %d: free spans %v, want %v", i/3, spans, ref.free)
			}
		}
		checkHold(t, r.free, r.free.root)
	})
}
