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

type event struct {
	at  Time
	seq uint64
	h   Handler
	tm  *Timer // non-nil: the event is tm's; its heap index is kept in tm.idx
}

// eventHeap is a 4-ary min-heap on (at, seq). Keys are unique (seq only
// grows), so the order events leave it is the same whatever its shape.
// Sifting moves a hole instead of swapping pairs, and writes a timer's
// index only where its event lands.
type eventHeap []event

func (a *event) before(b *event) bool {
	return a.at < b.at || a.at == b.at && a.seq < b.seq
}

// set puts ev at i, keeping its timer's index.
func (q eventHeap) set(i int, ev event) {
	q[i] = ev
	if ev.tm != nil {
		ev.tm.idx = i
	}
}

// up moves ev, to be stored at hole i, towards the root.
func (q eventHeap) up(i int, ev event) {
	for i > 0 {
		p := (i - 1) / 4
		if !ev.before(&q[p]) {
			break
		}
		q.set(i, q[p])
		i = p
	}
	q.set(i, ev)
}

// down moves ev, to be stored at hole i, towards the leaves.
func (q eventHeap) down(i int, ev event) {
	n := len(q)
	for {
		c := 4*i + 1
		if c >= n {
			break
		}
		m := c
		for k := c + 1; k < c+4 && k < n; k++ {
			if q[k].before(&q[m]) {
				m = k
			}
		}
		if !q[m].before(&ev) {
			break
		}
		q.set(i, q[m])
		i = m
	}
	q.set(i, ev)
}

func (q *eventHeap) push(ev event) {
	*q = append(*q, event{})
	q.up(len(*q)-1, ev)
}

// fix restores the heap after the key at i changed to ev's.
func (q eventHeap) fix(i int, ev event) {
	if i > 0 && ev.before(&q[(i-1)/4]) {
		q.up(i, ev)
	} else {
		q.down(i, ev)
	}
}

// remove takes out the event at index i and returns it.
func (q *eventHeap) remove(i int) event {
	h := *q
	n := len(h) - 1
	ev := h[i]
	last := h[n]
	h[n] = event{}
	h = h[:n]
	if i < n {
		h.fix(i, last)
	}
	*q = h
	if ev.tm != nil {
		ev.tm.idx = -1
	}
	return ev
}

func (q eventHeap) peek() Time { return q[0].at }

// Engine is a deterministic discrete-event scheduler. It is not safe for
// concurrent use: one goroutine (the application's) drives it.
type Engine struct {
	now   Time
	seq   uint64
	q     eventHeap
	fired uint64
}

// NewEngine returns an engine at time 0.
func NewEngine() *Engine { return &Engine{q: make(eventHeap, 0, 256)} }

// Now is the current virtual time.
func (e *Engine) Now() Time { return e.now }

// Fired counts the events executed so far.
func (e *Engine) Fired() uint64 { return e.fired }

// Pending is the number of scheduled events (armed timers included).
func (e *Engine) Pending() int { return len(e.q) }

// At schedules h at time t; a time in the past runs at Now (never earlier).
// Events with equal times run in the order they were scheduled.
func (e *Engine) At(t Time, h Handler) {
	if t < e.now {
		t = e.now
	}
	e.seq++
	e.q.push(event{at: t, seq: e.seq, h: h})
}

// After schedules h d after now.
func (e *Engine) After(d Duration, h Handler) { e.At(e.now.Add(d), h) }

// Next is the time of the earliest pending event, or Never.
func (e *Engine) Next() Time {
	if len(e.q) == 0 {
		return Never
	}
	return e.q.peek()
}

// Step runs the earliest event (and advances the clock to it). It reports
// false when nothing is scheduled.
func (e *Engine) Step() bool {
	if len(e.q) == 0 {
		return false
	}
	ev := e.q.remove(0)
	e.now = ev.at
	e.fired++
	ev.h.Fire(ev.at)
	return true
}

// RunUntil runs every event scheduled at or before t, then sets the clock to
// t (if t is later than now).
func (e *Engine) RunUntil(t Time) {
	for len(e.q) > 0 && e.q.peek() <= t {
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
	e   *Engine
	h   Handler
	idx int // heap index while armed, -1 otherwise
	at  Time
}

// NewTimer returns a stopped timer that calls h when it expires.
func (e *Engine) NewTimer(h Handler) *Timer { return &Timer{e: e, h: h, idx: -1} }

// Reset (re)arms the timer to fire at t (at Now if t is in the past),
// replacing any earlier deadline. Among events at the same time it runs
// after those already scheduled, as if newly scheduled.
func (t *Timer) Reset(at Time) {
	e := t.e
	if at < e.now {
		at = e.now
	}
	t.at = at
	e.seq++
	if t.idx >= 0 {
		e.q.fix(t.idx, event{at: at, seq: e.seq, h: t.h, tm: t})
		return
	}
	e.q.push(event{at: at, seq: e.seq, h: t.h, tm: t})
}

// ResetAfter arms the timer d after now.
func (t *Timer) ResetAfter(d Duration) { t.Reset(t.e.now.Add(d)) }

// Stop disarms the timer. It reports whether the timer was armed.
func (t *Timer) Stop() bool {
	if t == nil || t.idx < 0 {
		return false
	}
	t.e.q.remove(t.idx)
	return true
}

// Armed reports whether the timer will fire.
func (t *Timer) Armed() bool { return t != nil && t.idx >= 0 }

// When is the deadline of an armed timer (Never when stopped).
func (t *Timer) When() Time {
	if !t.Armed() {
		return Never
	}
	return t.at
}
