package env

import (
	"github.com/softnic/softnic/fault"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/trace"
)

// Env is what every engine of a device model is given, the same way:
// the event engine it schedules on, the recorder its stages and warnings
// go to, the counters it increments, the node it belongs to, and the fault
// injector it consults at its hook points. The device builds one and hands
// it to each of its engines (BAR0, DMA, WQE fetch) and roles.
//
// Rec and Faults may be nil (nothing recorded, nothing injected); a nil Ctr
// is replaced by a private set by WithDefaults.
type Env struct {
	Eng    *sim.Engine
	Rec    *trace.Recorder
	Ctr    *trace.Counters
	Node   int
	Faults *fault.Injector
}

// WithDefaults returns e with a private counter set if it had none.
func (e Env) WithDefaults() Env {
	if e.Ctr == nil {
		e.Ctr = &trace.Counters{}
	}
	return e
}

// Warnf counts name and records a warning of component at t.
func (e *Env) Warnf(t sim.Time, component string, name trace.Counter, format string, args ...any) {
	e.Ctr.Inc(name)
	e.Rec.Warnf(e.Node, t, component, name.String(), format, args...)
}

// Stage records one stage of the walk on the env's node.
func (e *Env) Stage(component, name string, start, end sim.Time, bytes, tlps int, qpn uint32, flow uint64) {
	e.Rec.Stage(e.Node, component, name, start, end, bytes, tlps, qpn, flow)
}

// Decide consults the fault injector at hook point pt for an event of QP
// qpn on the env's node.
func (e *Env) Decide(pt fault.Point, qpn uint32) fault.Decision {
	return e.Faults.Decide(pt, fault.NewEvent(e.Node, qpn))
}
