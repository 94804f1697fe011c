package dma

import (
	"errors"
	"fmt"

	"github.com/softnic/softnic/env"
	"github.com/softnic/softnic/fault"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/trace"
)

// Fault injection at the DMA engine's hook points (fault.DMARead,
// fault.DMAWrite): PCIe and IOMMU errors on the device's accesses to host
// memory, latency spikes and silent corruption. What an error means for
// the access (an error CQE, a NAK, a CQ error, a device fatal) is the
// caller's business: the engine returns a *PCIeError, which wraps ErrPCIe
// and maps to LOCAL_PROT_ERR through Syndrome.

// Counters of this file (a separate block of the catalogue).
var (
	CtrDmaFaultRead  = trace.NewCounter("dma_fault_read")  // DMA reads a fault rule failed, delayed or corrupted
	CtrDmaFaultWrite = trace.NewCounter("dma_fault_write") // DMA writes a fault rule failed, delayed or corrupted
)

// ErrPCIe is wrapped by every injected PCIe / IOMMU error.
var ErrPCIe = errors.New("dma: PCIe error")

// PCIeError is one failed DMA access.
type PCIeError struct {
	Op     string       // "read" or "write"
	Kind   fault.Action // Timeout, Abort, UR, Poison, IOMMU
	Target fault.Kind   // what the access was for
	Addr   uint64
	Len    int
}

var pcieErrWords = map[fault.Action]string{
	fault.Timeout: "completion timeout",
	fault.Abort:   "completer abort",
	fault.UR:      "unsupported request",
	fault.Poison:  "poisoned TLP",
	fault.IOMMU:   "IOMMU translation fault",
}

func (e *PCIeError) Error() string {
	return fmt.Sprintf("dma %s of %d bytes at %#x (%s): %s", e.Op, e.Len, e.Addr, e.Target, pcieErrWords[e.Kind])
}

// Unwrap makes errors.Is(err, ErrPCIe) true.
func (e *PCIeError) Unwrap() error { return ErrPCIe }

// CompletionTimeout is how long a read waits before a completion timeout
// is reported (PCIe allows 50 µs to 50 ms; the default range A starts at
// 50 µs — an assumption for a ConnectX).
const CompletionTimeout = 50 * sim.Microsecond

// SetFaults makes the engine consult in at fault.DMARead / fault.DMAWrite.
// An injector with no rule there is not kept: the hooks then cost nothing.
func (e *Engine) SetFaults(in *fault.Injector) {
	e.faults = nil
	if in.Has(fault.DMARead, fault.DMAWrite) {
		e.faults = in
	}
}

// SetTarget says what the next DMA operation is for (a WQE, a doorbell
// record, a CQE, an EQE); after that operation it is KindData again. Only
// fault matching uses it.
func (e *Engine) SetTarget(k fault.Kind) { e.target = k }

// clearTarget ends a SetTarget / SetTargetFor at the operation it was
// for. It resets to KindNone (read as KindData by inject), not KindData:
// a non-zero target is what sends an access without faults through the
// fault hooks, so that only a labelled access pays for them.
func (e *Engine) clearTarget() { e.target, e.tqpn, e.twqe = fault.KindNone, 0, 0 }

// SetTargetFor is SetTarget for an access the current flow label does not
// describe (a WQE fetch): qpn and the wqe_index are what fault rules match.
func (e *Engine) SetTargetFor(k fault.Kind, qpn uint32, wqe uint16) {
	e.target, e.tqpn, e.twqe = k, qpn, int32(wqe)+1
}

// SetFaultQP says the accesses from now on are for QP qpn (the payload
// of its message, its receive WQEs, its CQEs): a fault rule's match.qpn
// is matched against it, and the fault's trace warning carries it. It
// returns the QP it replaces, for RestoreFaultQP when the work for qpn
// is done; accesses outside any QP's work have none (QPN 0 to rules).
// Trace stages keep their own labels (SetFlow).
func (e *Engine) SetFaultQP(qpn uint32) (prev uint32) {
	prev, e.fqpn = e.fqpn, qpn&0xffffff+1
	return prev
}

// RestoreFaultQP puts back what SetFaultQP returned.
func (e *Engine) RestoreFaultQP(prev uint32) { e.fqpn = prev }

// Dead stops the engine: from now on every access fails (the device is
// dead or its link is gone). Reads return a completion-timeout error,
// writes are lost.
func (e *Engine) Dead() { e.dead = true }

// inject consults the injector for one access. It returns extra latency,
// or an error; Corrupt flips a byte of buf (reads: after the sample;
// writes: before the bytes land — buf is the caller's copy to land).
func (e *Engine) inject(pt fault.Point, at sim.Time, addr uint64, buf []byte) (sim.Duration, error) {
	target, tqpn, twqe := e.target, e.tqpn, e.twqe
	e.clearTarget()
	if target == fault.KindNone {
		target = fault.KindData
	}
	op, ctr := "read", CtrDmaFaultRead
	if pt == fault.DMAWrite {
		op, ctr = "write", CtrDmaFaultWrite
	}
	if e.dead {
		return 0, &PCIeError{Op: op, Kind: fault.Timeout, Target: target, Addr: addr, Len: len(buf)}
	}
	if e.faults == nil {
		return 0, nil
	}
	ev := fault.NewEvent(e.node, e.qpn)
	if e.fqpn != 0 {
		ev.QPN = e.fqpn - 1
	}
	if e.flow != 0 {
		ev.WQE = int32(e.flow & 0xffff)
	}
	if twqe != 0 {
		ev.QPN, ev.WQE = tqpn, twqe-1
	}
	ev.Addr, ev.Len, ev.Kind = addr, uint32(len(buf)), target
	d := e.faults.Decide(pt, ev)
	if d.Action == fault.None {
		return 0, nil
	}
	e.ctr.Inc(ctr)
	e.ctr.Inc(env.FaultCounter(pt, d.Action))
	warn := func(format string, args ...any) {
		if e.rec.On() {
			e.rec.Record(trace.Event{Name: ctr.String(), Component: "fault", Node: e.node, Start: at, End: at, QPN: ev.QPN, Flow: e.flow,
				PSN: trace.NoPSN, Level: trace.Warn, Detail: fmt.Sprintf(format, args...) + " [rule " + e.faults.RuleString(d.Rule) + "]"})
		}
	}
	switch d.Action {
	case fault.Delay:
		warn("dma %s of %d bytes at %#x (%s) delayed %v", op, len(buf), addr, target, d.Delay)
		return d.Delay, nil
	case fault.Corrupt:
		if o := d.Offset(0, len(buf)); o >= 0 {
			buf[o] ^= d.Mask()
			warn("dma %s of %d bytes at %#x (%s): byte %d corrupted", op, len(buf), addr, target, o)
		}
		return 0, nil
	}
	err := &PCIeError{Op: op, Kind: d.Action, Target: target, Addr: addr, Len: len(buf)}
	warn("%v", err)
	return 0, err
}

// writeFault is inject for Write: a corrupted write is landed here (from a
// copy, so the caller's buffer is untouched) and reported with extra -1.
func (e *Engine) writeFault(at sim.Time, addr uint64, src []byte) (sim.Duration, error) {
	if e.faults == nil && !e.dead {
		e.clearTarget()
		return 0, nil
	}
	buf := append([]byte(nil), src...)
	extra, err := e.inject(fault.DMAWrite, at, addr, buf)
	if err != nil {
		return 0, err
	}
	if string(buf) != string(src) {
		if werr := e.mem.Write(addr, buf); werr != nil {
			e.rangeError(at, "write", werr)
			return 0, werr
		}
		return -1, nil
	}
	return extra, nil
}

// failTime is when a failed read's requester learns of it: a completion
// timeout takes CompletionTimeout, an error completion comes at once.
func failTime(at sim.Time, err error) sim.Time {
	var pe *PCIeError
	if errors.As(err, &pe) && pe.Kind == fault.Timeout {
		return at.Add(CompletionTimeout)
	}
	return at
}
