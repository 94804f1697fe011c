package env

import (
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/trace"
)

// Env is what every engine of a device model is given, the same way:
// the event engine it schedules on, the recorder its stages and warnings
// go to, the counters it increments and the node it belongs to. The device
// builds one and hands it to each of its engines (BAR0, DMA, WQE fetch).
// Fault injectors are handed to each engine by its SetFaults, which keeps
// one only if it has rules at that engine's hook points.
//
// Rec may be nil (nothing recorded); a nil Ctr is replaced by a private
// set by WithDefaults.
type Env struct {
	Eng  *sim.Engine
	Rec  *trace.Recorder
	Ctr  *trace.Counters
	Node int
}

// WithDefaults returns e with a private counter set if it had none.
func (e Env) WithDefaults() Env {
	if e.Ctr == nil {
		e.Ctr = &trace.Counters{}
	}
	return e
}
