package device

import (
	"encoding/binary"
	"testing"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/shm"
	"github.com/softnic/softnic/sim"
)

// cqeBench is one CQ whose consumer keeps up: each step writes a CQE,
// runs the simulation until it is idle (the CQE lands; with an arm, the
// EQE lands, the interrupt handler queues the event) and consumes it.
type cqeBench struct {
	d   *Device
	c   *cq
	dbr []byte
	ch  uint32
	f   mlx5.CQEFields
	out [4]mlx5.CompEvent
}

func newCQEBench(tb testing.TB) *cqeBench {
	mem, err := shm.New("cqebench", 1<<20, 0x20000000)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { mem.Close() })
	d := New(sim.NewEngine(), DefaultSpec(), Identity{MAC: [6]byte{2, 0, 0, 0, 0, 9}}, mem, nil)
	buf, _ := mem.Alloc(64*mlx5.CQE64Size, 4096)
	dbrAddr, _ := mem.Alloc(mlx5.DBRecSize, 8)
	r, err := d.CreateCQ(mlx5.CreateCQCmd{Entries: 64, CQESize: mlx5.CQE64Size, BufAddr: buf, DBAddr: dbrAddr})
	if err != nil {
		tb.Fatal(err)
	}
	dbr, _ := mem.Slice(dbrAddr, mlx5.DBRecSize)
	b := &cqeBench{d: d, c: d.cqs[r.CQN], dbr: dbr, f: mlx5.CQEFields{Opcode: mlx5.CQERespSend, QPN: 0x100, ByteCnt: 64}}
	if b.ch, err = d.CreateCompChannel(); err != nil {
		tb.Fatal(err)
	}
	if err := d.AttachCQ(r.CQN, b.ch); err != nil {
		tb.Fatal(err)
	}
	return b
}

// arm stores an arm doorbell for the next CQE as libmlx5 would.
func (b *cqeBench) arm() {
	a := mlx5.CQArm{SN: uint8(b.c.events & 3), CI: b.c.pi & 0xffffff, CQN: b.c.cqn}
	binary.BigEndian.PutUint32(b.dbr[4:], a.ArmWord())
	var db [8]byte
	binary.BigEndian.PutUint32(db[0:], a.ArmWord())
	binary.BigEndian.PutUint32(db[4:], a.CQN)
	b.d.CQArm(b.d.eng.Now(), b.d.spec.BAR.FirstUAR, db)
}

func (b *cqeBench) step(armed bool) {
	if armed {
		b.arm()
	}
	b.d.writeCQE(b.d.eng.Now(), b.c, &b.f, 0, noPSN)
	b.d.eng.Run(0)
	binary.BigEndian.PutUint32(b.dbr[0:], b.c.pi&0xffffff) // set_ci: polled
	if armed {
		if n, _ := b.d.ReadCompEvents(b.ch, b.out[:]); n != 1 {
			panic("no completion event")
		}
	}
}

// BenchmarkWriteCQE: the CQE write path, with no arm pending (the common
// case: 0 allocations) and with an arm each time (arm, CQE, EQE,
// interrupt, handler, channel; pooled, also 0 in steady state).
func BenchmarkWriteCQE(b *testing.B) {
	for _, c := range []struct {
		name  string
		armed bool
	}{{"no arm", false}, {"armed", true}} {
		b.Run(c.name, func(b *testing.B) {
			cb := newCQEBench(b)
			for i := 0; i < 512; i++ {
				cb.step(c.armed)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				cb.step(c.armed)
			}
		})
	}
}

func TestWriteCQEAllocs(t *testing.T) {
	for _, armed := range []bool{false, true} {
		cb := newCQEBench(t)
		for i := 0; i < 512; i++ {
			cb.step(armed)
		}
		if n := testing.AllocsPerRun(1000, func() { cb.step(armed) }); n != 0 {
			t.Errorf("armed %v: %v allocations per CQE", armed, n)
		}
		if cb.d.ctr.Value(CtrCQEs) < 1512 || armed && cb.d.ctr.Value(CtrCompEvents) < 1512 {
			t.Errorf("armed %v: %d CQEs, %d events", armed, cb.d.ctr.Value(CtrCQEs), cb.d.ctr.Value(CtrCompEvents))
		}
	}
}
