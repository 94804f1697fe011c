package device

import (
	"testing"

	"github.com/softnic/softnic/sim"
)

// psPort is a paced port whose frames take one picosecond a byte.
type psPort struct{}

func (psPort) Send(t sim.Time, frame []byte) sim.Time { return t.Add(sim.Duration(len(frame))) }
func (psPort) WireTime(n int) sim.Duration            { return sim.Duration(n) }

// TestTxBufferUnsent: a frame the port drops takes its wire time back, but
// never makes the buffer's mirror earlier than now or later than it was,
// and moves the wake-up of the waiting QPs earlier, never later.
func TestTxBufferUnsent(t *testing.T) {
	d, _, _ := bareDevice(t, "txbuf-unsent", 1<<20)
	d.spec.Core.TxBufferBytes = 1000
	d.Connect(psPort{})
	b := &d.tx
	if b.limit != 1000 {
		t.Fatalf("limit %v, want 1000 ps", b.limit)
	}
	// Idle: nothing to take back.
	b.unsent(d, 500, 100)
	if b.busy != 0 {
		t.Fatalf("idle buffer: busy %v after a drop, want 0", b.busy)
	}
	// Three frames back to back from 0: busy 3000.
	for range 3 {
		b.built(d, 0, 1000)
	}
	q := &qp{d: d}
	if !b.full(q, 0) {
		t.Fatal("3000 ps ahead of a 1000 ps buffer is full")
	}
	b.wait(d, q, 0, txWaitReq)
	if w := b.timer.When(); w != 2500 {
		t.Fatalf("wake-up at %v, want 2500 (half drained)", w)
	}
	if q2 := (&qp{d: d}); !b.full(q2, 2900) {
		t.Fatal("with a QP waiting, another queues behind it")
	}
	// The second frame is dropped at its start (1000): 1000 ps back.
	b.unsent(d, 1000, 1000)
	if b.busy != 2000 {
		t.Fatalf("busy %v after the drop, want 2000", b.busy)
	}
	if w := b.timer.When(); w != 1500 {
		t.Fatalf("wake-up at %v, want 1500: moved earlier", w)
	}
	// A drop larger than what is left stops at now.
	b.unsent(d, 1800, 5000)
	if b.busy != 1800 {
		t.Fatalf("busy %v, want 1800 (now)", b.busy)
	}
	if w := b.timer.When(); w != 1500 {
		t.Fatalf("wake-up at %v, want 1500: never moved later", w)
	}
	// Fatal: nobody is woken.
	d.fx.fatal = true
	d.eng.RunUntil(1800)
	if q.txWaiting != 0 || len(b.waiting) != 0 || b.timer.Armed() {
		t.Fatalf("after the wake-up of a dead device: waiting %d (flags %#x), armed %v", len(b.waiting), q.txWaiting, b.timer.Armed())
	}
}
