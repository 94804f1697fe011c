package sim

// Handler is something the engine calls back at a scheduled time. Using a
// method value on a long-lived object instead of a fresh closure keeps hot
// paths free of allocations.
type Handler interface {
	Fire(now Time)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(now Time)

// Fire calls f(now).
func (f HandlerFunc) Fire(now Time) { f(now) }

// entry is one scheduled event in the heap: its key and the slot that
// holds its handler. It has no pointers, so sifting moves plain words.
type entry struct {
	at   Time
	seq  uint64
	slot int32
}

func (a *entry) before(b *entry) bool {
	return a.at < b.at || a.at == b.at && a.seq < b.seq
}

// slotRec is what a slot holds: the handler, and the timer whose event it
// is (nil for At/After events).
type slotRec struct {
	h  Handler
	tm *Timer
}

// eventHeap is a 4-ary min-heap on (at, seq) of pointer-free entries,
// with the handlers in slots beside it. Keys are unique (seq only grows),
// so the order events leave it is the same whatever its shape. Sifting
// moves a hole instead of swapping pairs; pos tracks each slot's heap
// index so that a timer can be re-keyed or removed in place.
type eventHeap struct {
	h     []entry
	pos   []int32 // slot -> index in h
	slots []slotRec
	free  []int32
}

func (q *eventHeap) len() int { return len(q.h) }

// set puts en at i.
func (q *eventHeap) set(i int, en entry) {
	q.h[i] = en
	q.pos[en.slot] = int32(i)
}

// up moves en, to be stored at hole i, towards the root.
func (q *eventHeap) up(i int, en entry) {
	h := q.h
	for i > 0 {
		p := (i - 1) / 4
		if !en.before(&h[p]) {
			break
		}
		q.set(i, h[p])
		i = p
	}
	q.set(i, en)
}

// down moves en, to be stored at hole i, towards the leaves.
func (q *eventHeap) down(i int, en entry) {
	h := q.h
	n := len(h)
	for {
		c := 4*i + 1
		if c >= n {
			break
		}
		m := c
		for k := c + 1; k < c+4 && k < n; k++ {
			if h[k].before(&h[m]) {
				m = k
			}
		}
		if !h[m].before(&en) {
			break
		}
		q.set(i, h[m])
		i = m
	}
	q.set(i, en)
}

// fix restores the heap after the key at i changed to en's.
func (q *eventHeap) fix(i int, en entry) {
	if i > 0 && en.before(&q.h[(i-1)/4]) {
		q.up(i, en)
	} else {
		q.down(i, en)
	}
}

// push schedules h (of timer tm, or nil) at (at, seq) and returns its slot.
func (q *eventHeap) push(at Time, seq uint64, h Handler, tm *Timer) int32 {
	var s int32
	if k := len(q.free); k > 0 {
		s = q.free[k-1]
		q.free = q.free[:k-1]
	} else {
		s = int32(len(q.slots))
		q.slots = append(q.slots, slotRec{})
		q.pos = append(q.pos, 0)
	}
	q.slots[s] = slotRec{h: h, tm: tm}
	q.h = append(q.h, entry{})
	q.up(len(q.h)-1, entry{at: at, seq: seq, slot: s})
	return s
}

// remove takes out the event at index i, frees its slot and returns its
// time and what the slot held.
func (q *eventHeap) remove(i int) (Time, slotRec) {
	en := q.h[i]
	n := len(q.h) - 1
	last := q.h[n]
	q.h = q.h[:n]
	if i < n {
		q.fix(i, last)
	}
	r := q.slots[en.slot]
	q.slots[en.slot] = slotRec{}
	q.free = append(q.free, en.slot)
	if r.tm != nil {
		r.tm.slot = -1
	}
	return en.at, r
}

func (q *eventHeap) peek() Time { return q.h[0].at }

// Engine is a deterministic discrete-event scheduler. It is not safe for
// concurrent use: one goroutine (the application's) drives it.
type Engine struct {
	now    Time
	seq    uint64
	q      eventHeap
	fired  uint64
	queued int // events held in Queues behind their heads (in the heap)
}

// NewEngine returns an engine at time 0.
func NewEngine() *Engine { return &Engine{q: eventHeap{h: make([]entry, 0, 256)}} }

// Now is the current virtual time.
func (e *Engine) Now() Time { return e.now }

// Fired counts the events executed so far.
func (e *Engine) Fired() uint64 { return e.fired }

// Pending is the number of scheduled events (armed timers included).
func (e *Engine) Pending() int { return e.q.len() + e.queued }

// At schedules h at time t; a time in the past runs at Now (never earlier).
// Events with equal times run in the order they were scheduled.
func (e *Engine) At(t Time, h Handler) {
	if t < e.now {
		t = e.now
	}
	e.seq++
	e.q.push(t, e.seq, h, nil)
}

// After schedules h d after now.
func (e *Engine) After(d Duration, h Handler) { e.At(e.now.Add(d), h) }

// Next is the time of the earliest pending event, or Never.
func (e *Engine) Next() Time {
	if e.q.len() == 0 {
		return Never
	}
	return e.q.peek()
}

// Step runs the earliest event (and advances the clock to it). It reports
// false when nothing is scheduled.
func (e *Engine) Step() bool {
	if e.q.len() == 0 {
		return false
	}
	top := e.q.h[0]
	if qu, ok := e.q.slots[top.slot].h.(*Queue); ok && qu.n > 1 {
		// A Queue with more events behind its head stays in the heap
		// under its slot, keyed by its next event: one sift down
		// instead of Queue.Fire's remove and push. The heap holds
		// the same (time, sequence) keys either way, and it pops
		// them in that order whatever its shape.
		e.now = top.at
		e.fired++
		h := qu.pop()
		nx := &qu.ring[qu.head]
		e.q.down(0, entry{at: nx.at, seq: nx.seq, slot: top.slot})
		e.queued--
		h.Fire(top.at)
		return true
	}
	at, r := e.q.remove(0)
	e.now = at
	e.fired++
	r.h.Fire(at)
	return true
}

// RunUntil runs every event scheduled at or before t, then sets the clock to
// t (if t is later than now).
func (e *Engine) RunUntil(t Time) {
	for e.q.len() > 0 && e.q.peek() <= t {
		e.Step()
	}
	if t > e.now {
		e.now = t
	}
}

// Advance runs the engine d past now.
func (e *Engine) Advance(d Duration) { e.RunUntil(e.now.Add(d)) }

// Run runs until no events remain or limit events have fired (limit <= 0:
// no limit). It returns the number fired.
func (e *Engine) Run(limit int) int {
	n := 0
	for (limit <= 0 || n < limit) && e.Step() {
		n++
	}
	return n
}

// Timer is a one-shot event that can be stopped and re-armed (the local
// ACK timer and the RNR timer of a QP, for instance). A stopped timer
// leaves nothing in the engine, so an idle simulation stays idle. The zero
// Timer is not usable: make one with Engine.NewTimer. Not safe for
// concurrent use.
type Timer struct {
	e    *Engine
	h    Handler
	slot int32 // the engine slot of its event while armed, -1 otherwise
}

// NewTimer returns a stopped timer that calls h when it expires.
func (e *Engine) NewTimer(h Handler) *Timer { return &Timer{e: e, h: h, slot: -1} }

// Reset (re)arms the timer to fire at t (at Now if t is in the past),
// replacing any earlier deadline. Among events at the same time it runs
// after those already scheduled, as if newly scheduled.
func (t *Timer) Reset(at Time) {
	e := t.e
	if at < e.now {
		at = e.now
	}
	e.seq++
	if t.slot >= 0 {
		e.q.fix(int(e.q.pos[t.slot]), entry{at: at, seq: e.seq, slot: t.slot})
		return
	}
	t.slot = e.q.push(at, e.seq, t.h, t)
}

// ResetAfter arms the timer d after now.
func (t *Timer) ResetAfter(d Duration) { t.Reset(t.e.now.Add(d)) }

// Stop disarms the timer. It reports whether the timer was armed.
func (t *Timer) Stop() bool {
	if t == nil || t.slot < 0 {
		return false
	}
	t.e.q.remove(int(t.e.q.pos[t.slot]))
	return true
}

// Armed reports whether the timer will fire.
func (t *Timer) Armed() bool { return t != nil && t.slot >= 0 }

// When is the deadline of an armed timer (Never when stopped).
func (t *Timer) When() Time {
	if !t.Armed() {
		return Never
	}
	return t.e.q.h[t.e.q.pos[t.slot]].at
}

// Queue schedules events, like Engine.At, for a source whose events come
// in (mostly) non-decreasing time: the frames of one port, the posted
// writes of one DMA engine. It keeps them in a FIFO sorted by (time,
// sequence) with only the first in the engine's heap, so the heap stays
// small however many are pending. An event gets its sequence number when
// scheduled, as with At; one earlier than the last queued is inserted in
// its place (a new first one re-keys the queue's heap entry), or, when
// that would move more than queueSlide others, goes to the heap directly.
// Either way the events run in exactly the order (time, then scheduling
// order) they would with At, and Fired and Pending count them the same.
// Not safe for concurrent use.
type Queue struct {
	e    *Engine
	ring []qent // a power of two
	head int
	n    int
	slot int32 // the heap slot of the first event, while n > 0
}

type qent struct {
	at  Time
	seq uint64
	h   Handler
}

// queueSlide bounds the events an out-of-order Queue.At moves aside to
// insert in place; past it the event goes to the heap.
const queueSlide = 16

// NewQueue returns an empty queue on e.
func (e *Engine) NewQueue() *Queue { return &Queue{e: e} }

// At schedules h at time t, as Engine.At does.
func (q *Queue) At(t Time, h Handler) {
	e := q.e
	if t < e.now {
		t = e.now
	}
	e.seq++
	if q.n == 0 {
		if len(q.ring) == 0 {
			q.ring = make([]qent, 16)
		}
		q.ring[q.head] = qent{at: t, seq: e.seq, h: h}
		q.n = 1
		q.slot = e.q.push(t, e.seq, q, nil)
		return
	}
	m := len(q.ring) - 1
	if t < q.ring[(q.head+q.n-1)&m].at {
		q.insert(t, h)
		return
	}
	if q.n == len(q.ring) {
		q.grow()
		m = len(q.ring) - 1
	}
	q.ring[(q.head+q.n)&m] = qent{at: t, seq: e.seq, h: h}
	q.n++
	e.queued++
}

// grow doubles the ring.
func (q *Queue) grow() {
	m := len(q.ring) - 1
	r := make([]qent, 2*len(q.ring))
	for i := range q.n {
		r[i] = q.ring[(q.head+i)&m]
	}
	q.ring, q.head = r, 0
}

// insert places an event earlier than the last queued one (its sequence
// number, e.seq, is the newest) after every queued event at or before t.
// A new first event takes over the queue's heap entry, re-keyed in place.
func (q *Queue) insert(t Time, h Handler) {
	e := q.e
	m := len(q.ring) - 1
	j := q.n // the index (from head) it goes to
	for j > 0 && q.ring[(q.head+j-1)&m].at > t {
		j--
		if q.n-j > queueSlide {
			e.q.push(t, e.seq, h, nil) // far out of order: the heap sorts it
			return
		}
	}
	if q.n == len(q.ring) {
		q.grow()
		m = len(q.ring) - 1
	}
	for k := q.n; k > j; k-- {
		q.ring[(q.head+k)&m] = q.ring[(q.head+k-1)&m]
	}
	q.ring[(q.head+j)&m] = qent{at: t, seq: e.seq, h: h}
	q.n++
	e.queued++
	if j == 0 {
		e.q.fix(int(e.q.pos[q.slot]), entry{at: t, seq: e.seq, slot: q.slot})
	}
}

// Fire runs the first queued event (the engine calls it at that event's
// time) after putting the next one, with its own time and sequence
// number, in the heap.
func (q *Queue) Fire(now Time) {
	h := q.pop()
	if q.n > 0 {
		nx := &q.ring[q.head]
		q.slot = q.e.q.push(nx.at, nx.seq, q, nil)
		q.e.queued--
	}
	h.Fire(now)
}

// pop takes the first queued event's handler off the ring.
func (q *Queue) pop() Handler {
	m := len(q.ring) - 1
	h := q.ring[q.head].h
	q.ring[q.head].h = nil
	q.head = (q.head + 1) & m
	q.n--
	return h
}
