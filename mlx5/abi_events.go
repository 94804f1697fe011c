package mlx5

import "time"

// Completion channels, asynchronous events and CQ modification: the parts
// of the control plane the kernel's uverbs layer serves next to the mlx5
// commands (uverbs.md: CREATE_COMP_CHANNEL 17, CREATE_CQ's comp_channel,
// RESIZE_CQ 19, MODIFY_CQ ex 57, the async-event fd of GET_CONTEXT). An
// emulated device implements EventControl and CQControl next to Control;
// the provider type-asserts for them, as it does for Progressor.

// CompEvent is one completion event read from a completion channel (the
// kernel's struct ib_uverbs_comp_event_desc carries the CQ's user handle;
// here it is the CQ number).
type CompEvent struct{ CQN uint32 }

// EventControl is the event side of the control plane: the completion
// channels and the async-event queue of the (single) user context. The
// device queues every event it dispatches, up to a bound per queue; beyond
// it an event is dropped and counted, never queued without limit.
type EventControl interface {
	// CreateCompChannel is CREATE_COMP_CHANNEL: it returns the channel's
	// number (the kernel returns an fd). Numbers start at 1.
	CreateCompChannel() (uint32, error)
	// DestroyCompChannel closes a channel; it fails while a CQ uses it.
	DestroyCompChannel(ch uint32) error
	// AttachCQ routes the completion events of CQ cqn to channel ch (0:
	// none). It is CREATE_CQ's comp_channel field, sent as its own command
	// right after CREATE_CQ (the channel is kernel bookkeeping: firmware
	// only knows the CQ's EQ).
	AttachCQ(cqn, ch uint32) error
	// ReadCompEvents moves up to len(out) queued events of channel ch into
	// out, oldest first (read() of the channel fd).
	ReadCompEvents(ch uint32, out []CompEvent) (int, error)
	// ReadAsyncEvents moves up to len(out) queued asynchronous events into
	// out, oldest first (read() of the async fd).
	ReadAsyncEvents(out []AsyncEvent) int
	// PendingEvents is the number of events queued on channel ch, or on
	// the async queue for ch 0.
	PendingEvents(ch uint32) int
	// SetEventNotify installs f (nil: none), called once for every event
	// queued on channel ch (0: the async queue) at the moment it is
	// queued, so that a provider can make a file descriptor readable.
	SetEventNotify(f func(ch uint32))
}

// ModifyCQCmd is MODIFY_CQ with IB_CQ_MODERATE (ibv_modify_cq): an event
// is generated once Count completions are pending or Period µs have passed
// since the first of them, whichever comes first (0, 0: no moderation).
type ModifyCQCmd struct {
	CQN    uint32
	Count  uint16 // cq_max_count
	Period uint16 // cq_period in µs (mlx5: 12 bits, at most 4095)
}

// ResizeCQCmd is RESIZE_CQ with struct mlx5_resize_cq's driver data: the
// new ring (op_own of every entry pre-set to 0xF0 by the provider).
type ResizeCQCmd struct {
	CQN     uint32
	Entries int // power of two
	CQESize int
	BufAddr uint64
}

// MaxCQPeriod is the largest cq_period (MLX5_MAX_CQ_PERIOD, 12 bits).
const MaxCQPeriod = 0xfff

// CQControl is the CQ-modification part of the control plane.
type CQControl interface {
	ModifyCQ(ModifyCQCmd) error
	// ResizeCQ moves the CQ to a new ring. When it returns, the device has
	// written a RESIZE_CQ CQE into the old ring at its producer index and
	// writes later CQEs into the new ring from the next index on; the
	// provider copies the CQEs it has not polled yet (libmlx5
	// mlx5_cq_resize_copy_cqes).
	ResizeCQ(ResizeCQCmd) error
}

// VirtualClock is implemented by emulated devices: the simulation's clock,
// which in one process is the application's clock too, so that a wait
// with a timeout (GetCQEvent, GetAsyncEvent) measures virtual time.
type VirtualClock interface {
	VirtualNow() time.Duration
}
