package host

import (
	"fmt"
	"math/bits"

	"github.com/softnic/softnic/env"
	"github.com/softnic/softnic/fault"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/trace"
)

// Fault injection at the CPU's hook point, fault.WCBuffer: a line the
// write-combining buffer emits may be dropped, torn, delayed, held behind
// the next line (reorder), duplicated or corrupted before its bytes leave
// as posted writes. Everything this needs is CPU-side (the line, the posts
// that label it, the held lines); fault.PCIeTLP and the device-fatal
// states stay with the device (bar/faults.go). docs/faults.md has the
// consequences and their sources.

// faultState is the CPU's part of fault injection.
type faultState struct {
	in   *fault.Injector
	pend []*heldLine // lines held behind the next one (reorder)
}

// heldLine is a WC line's bytes held back by a delay or reorder rule.
type heldLine struct {
	c       *CPU
	addr    uint64
	mask    uint64
	data    [64]byte
	reorder bool
	done    bool
}

// Fire emits a held line (its delay is over, or nothing came after it).
func (h *heldLine) Fire(now sim.Time) {
	if h.done {
		return
	}
	h.done = true
	h.c.emitRuns(now, h.addr, h.mask, &h.data)
}

func (c *CPU) faultWarn(t sim.Time, qpn uint32, flow uint64, d fault.Decision, format string, args ...any) {
	c.ctr.Inc(CtrFaultWCLine)
	c.ctr.Inc(env.FaultCounter(fault.WCBuffer, d.Action))
	if c.rec.On() {
		c.rec.Record(trace.Event{Name: CtrFaultWCLine.String(), Component: "fault", Node: c.node, Start: t, End: t, QPN: qpn, Flow: flow,
			PSN: trace.NoPSN, Level: trace.Warn, Detail: fmt.Sprintf(format, args...) + " [rule " + c.fx.in.RuleString(d.Rule) + "]"})
	}
}

// wcFault consults fault.WCBuffer for line l leaving the WC buffer. It
// reports true when the rule took the line over (dropped, held, torn or
// duplicated: emitted here); l is then freed.
func (c *CPU) wcFault(now sim.Time, l *wcLine, reason string) bool {
	qpn, flow := c.flowAt(l.addr)
	ev := fault.NewEvent(c.node, qpn)
	if flow != 0 {
		ev.WQE = int32(flow & 0xffff)
	}
	ev.Addr, ev.Len = l.addr, 64
	d := c.fx.in.Decide(fault.WCBuffer, ev)
	switch d.Action {
	case fault.None:
		return false
	case fault.Corrupt:
		if n := bits.OnesCount64(l.mask); n > 0 {
			o := nthByte(l.mask, d.Offset(0, n))
			l.data[o] ^= d.Mask()
			c.faultWarn(now, qpn, flow, d, "WC line at BAR0 %#x: byte %d corrupted (%s)", l.addr, o, reason)
		}
		return false
	case fault.Drop:
		c.faultWarn(now, qpn, flow, d, "WC line at BAR0 %#x lost (%s)", l.addr, reason)
	case fault.Tear:
		// Only the first half of the line's bytes leaves; the rest is lost.
		keep := l.mask & 0x00000000ffffffff
		if keep == 0 || keep == l.mask {
			keep = l.mask & (l.mask - 1) // at least one byte goes missing
		}
		c.faultWarn(now, qpn, flow, d, "WC line at BAR0 %#x torn: %d of %d bytes leave (%s)", l.addr, bits.OnesCount64(keep), bits.OnesCount64(l.mask), reason)
		l.mask = keep
		if l.mask != 0 {
			c.emitRuns(now, l.addr, l.mask, &l.data)
		}
	case fault.Duplicate:
		c.faultWarn(now, qpn, flow, d, "WC line at BAR0 %#x emitted twice (%s)", l.addr, reason)
		c.emitRuns(now, l.addr, l.mask, &l.data)
		c.emitRuns(now, l.addr, l.mask, &l.data)
	case fault.Delay, fault.Reorder:
		h := &heldLine{c: c, addr: l.addr, mask: l.mask, data: l.data, reorder: d.Action == fault.Reorder}
		at := now.AddSat(d.Delay)
		if h.reorder {
			// Released after the next line leaves, or by the drain timer
			// if none does (nothing is held for ever).
			at = now.Add(max(c.cfg.WCDrain, sim.Nanosecond))
			c.faultWarn(now, qpn, flow, d, "WC line at BAR0 %#x held behind the next line (%s)", l.addr, reason)
			c.fx.pend = append(c.fx.pend, h)
		} else {
			c.faultWarn(now, qpn, flow, d, "WC line at BAR0 %#x held %v as if never flushed (%s)", l.addr, d.Delay, reason)
		}
		c.clk.At(at, h)
	default:
		return false
	}
	l.active = false
	c.nwc--
	return true
}

// releaseReordered emits lines held behind this one (called after a line
// leaves normally).
func (c *CPU) releaseReordered(now sim.Time) {
	for i := range c.fx.pend {
		if h := c.fx.pend[i]; !h.done {
			h.done = true
			c.emitRuns(now, h.addr, h.mask, &h.data)
		}
	}
	c.fx.pend = c.fx.pend[:0]
}

// nthByte is the offset of the k-th (from 0) valid byte of a line's mask.
func nthByte(mask uint64, k int) int {
	for ; k > 0; k-- {
		mask &= mask - 1
	}
	return bits.TrailingZeros64(mask)
}
