package sim

import (
	"math/rand/v2"
	"testing"
)

// qworld is a random workload on one engine: handlers that, when they
// fire, log themselves and schedule more events (through Queues or At,
// times mostly rising per queue, sometimes earlier, sometimes equal) and
// re-arm or stop timers, all drawn from one random stream consumed in
// firing order. With useQueues false every Queue.At is an Engine.At.
type qworld struct {
	e         *Engine
	rnd       *rand.Rand
	qs        []*Queue
	last      []Time // per queue, the latest time asked for
	timers    []*Timer
	useQueues bool
	log       []uint64
	pend      []int
}

type qev struct {
	w  *qworld
	id uint64
}

func (h *qev) Fire(now Time) {
	w := h.w
	w.log = append(w.log, h.id<<40|uint64(now)&(1<<40-1))
	w.pend = append(w.pend, w.e.Pending())
	if len(w.log) < 20000 {
		for range w.rnd.IntN(4) {
			w.schedule()
		}
	}
}

func (w *qworld) schedule() {
	id := w.rnd.Uint64() & 0xffff
	h := &qev{w: w, id: id}
	switch k := w.rnd.IntN(10); {
	case k < 6:
		qi := w.rnd.IntN(len(w.qs))
		t := w.last[qi]
		switch w.rnd.IntN(8) {
		case 0: // earlier than the last (out of order, or in the past)
			t -= Time(w.rnd.IntN(500))
		case 1: // the same time
		default:
			t += Time(w.rnd.IntN(300))
		}
		if t > w.last[qi] {
			w.last[qi] = t
		}
		if w.useQueues {
			w.qs[qi].At(t, h)
		} else {
			w.e.At(t, h)
		}
	case k < 8:
		w.e.At(w.e.Now().Add(Duration(w.rnd.IntN(400))), h)
	default:
		tm := w.timers[w.rnd.IntN(len(w.timers))]
		if w.rnd.IntN(3) == 0 {
			tm.Stop()
		} else {
			tm.Reset(w.e.Now().Add(Duration(w.rnd.IntN(600))))
		}
	}
}

func runQWorld(seed uint64, useQueues bool) *qworld {
	w := &qworld{e: NewEngine(), rnd: rand.New(rand.NewPCG(seed, 1)), useQueues: useQueues}
	for range 4 {
		w.qs = append(w.qs, w.e.NewQueue())
		w.last = append(w.last, 0)
	}
	for i := range 3 {
		w.timers = append(w.timers, w.e.NewTimer(&qev{w: w, id: 1<<20 + uint64(i)}))
	}
	for range 50 {
		w.schedule()
	}
	for w.e.Step() {
	}
	return w
}

// TestQueueMatchesAt: events scheduled through Queues run in exactly the
// order, at exactly the times, that Engine.At gives them, and Pending and
// Fired count the same at every step.
func TestQueueMatchesAt(t *testing.T) {
	for seed := range uint64(20) {
		a, b := runQWorld(seed, false), runQWorld(seed, true)
		if len(a.log) < 1000 {
			t.Fatalf("seed %d: only %d events", seed, len(a.log))
		}
		if len(a.log) != len(b.log) || a.e.Fired() != b.e.Fired() || a.e.Now() != b.e.Now() {
			t.Fatalf("seed %d: %d vs %d events, fired %d vs %d", seed, len(a.log), len(b.log), a.e.Fired(), b.e.Fired())
		}
		for i := range a.log {
			if a.log[i] != b.log[i] || a.pend[i] != b.pend[i] {
				t.Fatalf("seed %d: event %d: %#x pending %d, with queues %#x pending %d", seed, i, a.log[i], a.pend[i], b.log[i], b.pend[i])
			}
		}
		if b.e.Pending() != 0 || b.e.queued != 0 {
			t.Fatalf("seed %d: %d left pending, %d queued", seed, b.e.Pending(), b.e.queued)
		}
	}
}
