package trace

import (
	"fmt"
	"sort"

	"github.com/softnic/softnic/sim"
)

// Level says whether an event is a normal stage or a warning.
type Level uint8

// Event levels.
const (
	Info Level = iota
	Warn
)

// Event is one stage of work on the virtual clock, or a warning.
type Event struct {
	Name      string // stage, e.g. "wqe_fetch", or a counter name for warnings
	Component string // "provider", "bar", "pcie", "wqefetch", "dma", "roce", "wire", "device", ...
	Node      int    // which NIC (and its host) the event belongs to
	Start     sim.Time
	End       sim.Time
	Bytes     int
	TLPs      int
	QPN       uint32
	Flow      uint64 // links the stages of one WQE (0: none)
	Level     Level
	Detail    string
}

// Recorder collects events. A nil *Recorder records nothing, so components
// can call it unconditionally; check On() before building costly details.
type Recorder struct {
	events []Event
	// Sinks see every event as it is recorded (e.g. a streaming writer).
	Sinks []func(*Event)
}

// NewRecorder returns an empty recorder.
func NewRecorder() *Recorder { return &Recorder{} }

// On reports whether events are being recorded.
func (r *Recorder) On() bool { return r != nil }

// Record appends ev.
func (r *Recorder) Record(ev Event) {
	if r == nil {
		return
	}
	r.events = append(r.events, ev)
	for _, s := range r.Sinks {
		s(&r.events[len(r.events)-1])
	}
}

// Stage records an Info event.
func (r *Recorder) Stage(node int, component, name string, start, end sim.Time, bytes, tlps int, qpn uint32, flow uint64) {
	if r == nil {
		return
	}
	r.Record(Event{Name: name, Component: component, Node: node, Start: start, End: end, Bytes: bytes, TLPs: tlps, QPN: qpn, Flow: flow})
}

// Warnf records a warning at time t.
func (r *Recorder) Warnf(node int, t sim.Time, component, name string, format string, args ...any) {
	if r == nil {
		return
	}
	r.Record(Event{Name: name, Component: component, Node: node, Start: t, End: t, Level: Warn, Detail: fmt.Sprintf(format, args...)})
}

// Events returns the recorded events in recording order.
func (r *Recorder) Events() []Event {
	if r == nil {
		return nil
	}
	return r.events
}

// Reset drops all recorded events.
func (r *Recorder) Reset() {
	if r != nil {
		r.events = r.events[:0]
	}
}

// Warnings returns the warning events.
func (r *Recorder) Warnings() []Event {
	var w []Event
	for _, e := range r.Events() {
		if e.Level == Warn {
			w = append(w, e)
		}
	}
	return w
}

// Counters is a set of named event counters (drops, errors, TLPs, ...).
// The zero value is ready to use. Not safe for concurrent use.
type Counters struct {
	m map[string]uint64
}

// Inc adds one to name.
func (c *Counters) Inc(name string) { c.Add(name, 1) }

// Add adds n to name.
func (c *Counters) Add(name string, n uint64) {
	if c.m == nil {
		c.m = make(map[string]uint64)
	}
	c.m[name] += n
}

// Get returns the value of name (0 if never counted).
func (c *Counters) Get(name string) uint64 { return c.m[name] }

// Names returns the counter names in sorted order.
func (c *Counters) Names() []string {
	n := make([]string, 0, len(c.m))
	for k := range c.m {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// Snapshot copies the counters.
func (c *Counters) Snapshot() map[string]uint64 {
	s := make(map[string]uint64, len(c.m))
	for k, v := range c.m {
		s[k] = v
	}
	return s
}
