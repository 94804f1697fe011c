package env

import (
	"github.com/softnic/softnic/fault"
	"github.com/softnic/softnic/trace"
)

// faultCounters holds, for every point and the actions it takes, the
// counter fault.CounterName names (fault_<point>_<action>), registered at
// program start like every other counter.
var faultCounters = func() map[[2]string]trace.Counter {
	m := map[[2]string]trace.Counter{}
	for _, p := range fault.Points {
		for _, a := range fault.ActionsAt(p) {
			var act fault.Action
			if act.UnmarshalText([]byte(a)) == nil {
				m[[2]string{string(p), a}] = trace.NewCounter(fault.CounterName(p, act))
			}
		}
	}
	return m
}()

var faultUnknown = trace.NewCounter("fault_unknown")

// FaultCounter is the counter of action a firing at point p.
func FaultCounter(p fault.Point, a fault.Action) trace.Counter {
	if c, ok := faultCounters[[2]string{string(p), a.String()}]; ok {
		return c
	}
	return faultUnknown
}
