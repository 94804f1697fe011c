package shm

import (
	"math/rand"
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

// TestAllocIsFirstFit: the skip over small spans and the in-place span
// edits give exactly the addresses of plain first fit, so every trace that
// prints an address is unchanged.
func TestAllocIsFirstFit(t *testing.T) {
	const size = 8 << 20
	r, err := New("firstfit", size, 0x10000)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ref := &refFirstFit{base: 0x10000, free: []span{{0, size}}, used: map[uint64]int{}}
	rng := rand.New(rand.NewSource(11))
	var live []uint64
	for step := 0; step < 20000; step++ {
		if len(live) > 0 && rng.Intn(4) == 0 {
			k := rng.Intn(len(live))
			addr := live[k]
			live = append(live[:k], live[k+1:]...)
			if err := r.Free(addr); err != nil {
				t.Fatal(err)
			}
			ref.release(addr)
			continue
		}
		sz, al := 8+rng.Intn(120), 64
		switch rng.Intn(3) {
		case 0:
			sz, al = 4096*(1+rng.Intn(9)), 4096
		case 1:
			sz, al = 4096+rng.Intn(9000), 8<<rng.Intn(10)
		}
		got, err := r.Alloc(sz, al)
		want, ok := ref.alloc(sz, al)
		if ok != (err == nil) || got != want {
			t.Fatalf("step %d: Alloc(%d, %d) = %#x, %v; first fit gives %#x, %v", step, sz, al, got, err, want, ok)
		}
		if ok {
			live = append(live, got)
		}
	}
}
