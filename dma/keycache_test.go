package dma

import (
	"math/rand/v2"
	"testing"

	"github.com/softnic/softnic/mlx5"
)

// checkRef is Check on the map alone, without the cache.
func checkRef(k *Keys, key, pdn uint32, va, n uint64, need Access) (uint64, error) {
	plain := &Keys{m: k.m}
	plain.cache = [8]keyEnt{}
	h, err := plain.Check(key, pdn, va, n, need)
	return h, err
}

// TestKeyCacheMatchesMap: random registrations, deregistrations and
// checks (keys that collide in the cache, removed and re-added keys,
// wrong PDs, bounds and rights) give what the map alone gives.
func TestKeyCacheMatchesMap(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	k := NewKeys()
	keys := []uint32{0x100, 0x200, 0x108, 0x10100, 0x300, 0x800, 0x900, 0x1000, 0x1008, 0x42}
	for i := range 100000 {
		key := keys[r.IntN(len(keys))]
		switch r.IntN(10) {
		case 0:
			_ = k.Add(MR{Key: key, PDN: uint32(r.IntN(2)), Addr: uint64(r.IntN(4)) << 20, HCAVA: uint64(r.IntN(4)) << 24,
				Length: uint64(1 + r.IntN(1<<16)), Access: mlx5.AccessLocalWrite | mlx5.AccessRemoteWrite | mlx5.AccessRemoteRead})
		case 1:
			_ = k.Remove(key)
		default:
			pdn := uint32(r.IntN(2))
			va := uint64(r.IntN(4))<<20 + uint64(r.IntN(1<<16))
			if r.IntN(2) == 0 {
				va = uint64(r.IntN(4))<<24 + uint64(r.IntN(1<<16))
			}
			n := uint64(r.IntN(4096))
			need := Access(r.IntN(5))
			want, werr := checkRef(k, key, pdn, va, n, need)
			got, gerr := k.Check(key, pdn, va, n, need)
			if got != want || (werr == nil) != (gerr == nil) || werr != nil && werr.Error() != gerr.Error() {
				t.Fatalf("op %d: Check(%#x) = %#x, %v; the map gives %#x, %v", i, key, got, gerr, want, werr)
			}
		}
	}
}
