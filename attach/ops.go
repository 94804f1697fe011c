package attach

import (
	"encoding/binary"
	"fmt"
)

// Ring call operations (mmioring.Producer.Call's op word). Each runs the
// daemon's engine up to the call's host time first (after every record
// before the call), then:
//
//	OpSync    nothing more; the reply's Time is the engine's clock.
//	OpStep    one more event (mlx5.Progressor's Progress), but not past
//	          arg when arg is not 0 (the client's own next timer): Value
//	          bit 0 is set when something ran, bit 1 when completion or
//	          async events were queued for the client since its last
//	          SimNotified.
//	OpRead32  a 4-byte MRd of BAR0 offset arg: Value is the loaded
//	          memory image, Time the completion's return to the CPU.
//	OpStepCQ  steps, as OpStep, until the CQE at host address arg (the
//	          record's Off) is owned by software for consumer index QPN
//	          (the record's QPN word) in a CQ of 2^(op>>32) entries, or the
//	          engine idles, or 2^20 events ran, or the client's timer at
//	          the record's Flow word (0: none) is due: the provider's
//	          poll loop of one process, in one round trip.
//
// A reply's Status is 0 or an errno (EINVAL for an unknown op).
const (
	OpSync   = 1
	OpStep   = 2
	OpRead32 = 3
	OpStepCQ = 4
)

// StepBudget bounds the events one OpStepCQ runs (the provider's
// progress budget of one poll).
const StepBudget = 1 << 20

// Step reply bits.
const (
	StepRan    = 1
	StepEvents = 2
)

// SimOp is the first word of a Sim message: the parts of the control plane
// the kernel serves beside the uverbs write commands (mlx5.EventControl,
// mlx5.CQControl, the hw_counters of sysfs).
type SimOp uint32

// Sim operations, their arguments after the op word and their results
// (little-endian u32s unless said):
//
//	SimCreateCompChannel   -                        ch
//	SimDestroyCompChannel  ch                       -
//	SimAttachCQ            cqn, ch                  -
//	SimReadCompEvents      ch, max                  n, cqn × n
//	SimReadAsyncEvents     max                      n, (type, num) × n
//	SimPendingEvents       ch                       n
//	SimModifyCQ            cqn, count, period       -
//	SimResizeCQ            cqn, entries, cqe size, buf addr (u64)   -
//	SimCounters            -                        text: "name value\n" lines
//	SimNotified            -                        n, ch × n (channels notified since the last call; 0 is the async queue)
const (
	SimCreateCompChannel SimOp = iota + 1
	SimDestroyCompChannel
	SimAttachCQ
	SimReadCompEvents
	SimReadAsyncEvents
	SimPendingEvents
	SimModifyCQ
	SimResizeCQ
	SimCounters
	SimNotified
	simOps
)

var simArgs = [simOps]int{SimDestroyCompChannel: 1, SimAttachCQ: 2, SimReadCompEvents: 2, SimReadAsyncEvents: 1,
	SimPendingEvents: 1, SimModifyCQ: 3, SimResizeCQ: 5}

func (o SimOp) String() string {
	names := [...]string{"", "CREATE_COMP_CHANNEL", "DESTROY_COMP_CHANNEL", "ATTACH_CQ", "READ_COMP_EVENTS",
		"READ_ASYNC_EVENTS", "PENDING_EVENTS", "MODIFY_CQ", "RESIZE_CQ", "COUNTERS", "NOTIFIED"}
	if o > 0 && o < simOps {
		return names[o]
	}
	return fmt.Sprintf("SimOp(%d)", uint32(o))
}

// MaxEvents bounds the events one read returns.
const MaxEvents = 256

// EncodeSim appends a Sim request: op and its u32 arguments.
func EncodeSim(b []byte, op SimOp, args ...uint32) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(op))
	for _, a := range args {
		b = binary.LittleEndian.AppendUint32(b, a)
	}
	return b
}

// DecodeSim parses a Sim request into its op and exactly the number of
// arguments that op takes.
func DecodeSim(p []byte) (SimOp, []uint32, error) {
	if len(p) < 4 || len(p)%4 != 0 {
		return 0, nil, fmt.Errorf("%w: SIM of %d bytes", ErrProtocol, len(p))
	}
	le := binary.LittleEndian
	op := SimOp(le.Uint32(p))
	if op == 0 || op >= simOps {
		return op, nil, fmt.Errorf("%w: unknown SIM op %d", ErrProtocol, uint32(op))
	}
	if n := (len(p) - 4) / 4; n != simArgs[op] {
		return op, nil, fmt.Errorf("%w: SIM %v with %d arguments, want %d", ErrProtocol, op, n, simArgs[op])
	}
	args := make([]uint32, simArgs[op])
	for i := range args {
		args[i] = le.Uint32(p[4+4*i:])
	}
	return op, args, nil
}

// U32s parses a result of u32s: a count n and then n groups of per words
// (per 0: exactly one word, no count).
func U32s(p []byte, per int) ([]uint32, error) {
	if len(p)%4 != 0 {
		return nil, fmt.Errorf("%w: result of %d bytes", ErrProtocol, len(p))
	}
	le := binary.LittleEndian
	w := make([]uint32, len(p)/4)
	for i := range w {
		w[i] = le.Uint32(p[4*i:])
	}
	if per == 0 {
		if len(w) != 1 {
			return nil, fmt.Errorf("%w: result of %d words, want 1", ErrProtocol, len(w))
		}
		return w, nil
	}
	if len(w) == 0 || w[0] > MaxEvents || len(w) != 1+int(w[0])*per {
		return nil, fmt.Errorf("%w: counted result of %d words", ErrProtocol, len(w))
	}
	return w[1:], nil
}
