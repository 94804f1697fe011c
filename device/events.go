package device

import (
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/sim"
)

// asyncEvent raises an asynchronous event of type typ for object num (a
// QPN, CQN, SRQN or port). Placeholder: counted only, until event queues
// deliver them (issue: completion and asynchronous events).
func (d *Device) asyncEvent(t sim.Time, typ mlx5.EventType, num uint32) {
	d.inc("async_event_" + typ.String())
	_ = t
	_ = num
}
