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
}

type eventHeap []event

func (q eventHeap) less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}

func (q *eventHeap) push(ev event) {
	*q = append(*q, ev)
	h := *q
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if !h.less(i, p) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (q *eventHeap) pop() event {
	h := *q
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h[n] = event{}
	h = h[:n]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && h.less(l, m) {
			m = l
		}
		if r < n && h.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	*q = h
	return top
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

// Pending is the number of scheduled events.
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
	ev := e.q.pop()
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
