package device

import (
	"math/rand/v2"
	"testing"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/shm"
	"github.com/softnic/softnic/sim"
)

// TestQPCacheMatchesMap: through random creations and destructions of
// QPs (QPNs colliding in the cache, destroyed ones looked up again), d.qp
// gives what d.qps gives.
func TestQPCacheMatchesMap(t *testing.T) {
	d, _, cmd := bareDevice(t, "qpcache", 16<<20)
	r := rand.New(rand.NewPCG(1, 2))
	var live, seen []uint32
	for i := range 3000 {
		switch {
		case len(live) < 2 || r.IntN(3) > 0 && len(live) < 40:
			resp, err := d.CreateQP(cmd)
			if err != nil {
				t.Fatal(err)
			}
			live, seen = append(live, resp.QPN), append(seen, resp.QPN)
		default:
			k := r.IntN(len(live))
			if err := d.DestroyQP(live[k]); err != nil {
				t.Fatal(err)
			}
			live = append(live[:k], live[k+1:]...)
		}
		for range 8 {
			qpn := seen[r.IntN(len(seen))]
			if r.IntN(8) == 0 {
				qpn = r.Uint32() & 0xffffff
			}
			if got, want := d.qp(qpn), d.qps[qpn]; got != want {
				t.Fatalf("op %d: qp(%#x) = %p, the map has %p", i, qpn, got, want)
			}
		}
	}
}

// bareDevice is a device on its own engine and memory, without a wire,
// with a PD and a 64-entry CQ, and the CREATE_QP command of an RC QP of
// 64 send and 64 receive WQEs on them (its rings allocated). The memory
// is closed when t ends.
func bareDevice(t *testing.T, name string, size int) (*Device, *shm.Region, mlx5.CreateQPCmd) {
	t.Helper()
	mem, err := shm.New(name, size, 0x10000000)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	d := New(sim.NewEngine(), DefaultSpec(), Identity{MAC: [6]byte{2, 0, 0, 0, 0, 1}}, mem, nil)
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	buf, _ := mem.Alloc(64*64, 4096)
	dbr, _ := mem.Alloc(8, 8)
	cq, err := d.CreateCQ(mlx5.CreateCQCmd{Entries: 64, CQESize: 64, BufAddr: buf, DBAddr: dbr})
	if err != nil {
		t.Fatal(err)
	}
	qbuf, _ := mem.Alloc(8192, 4096)
	qdbr, _ := mem.Alloc(8, 8)
	return d, mem, mlx5.CreateQPCmd{Type: mlx5.QPTypeRC, PDN: pd.PDN, SendCQN: cq.CQN, RecvCQN: cq.CQN, BufAddr: qbuf, DBAddr: qdbr,
		SQWQECnt: 64, RQWQECnt: 64, RQWQEShift: 4}
}
