package bar

import (
	"fmt"
	"math/bits"

	"github.com/softnic/softnic/env"
	"github.com/softnic/softnic/fault"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/trace"
)

// Fault injection at BAR0's two hook points (fault.WCBuffer: a line the
// CPU's write-combining buffer emits; fault.PCIeTLP: an MMIO TLP between
// CPU and device), the device-fatal state BAR0 shows (health buffer,
// frozen health counter, PCIe link lost), and the observer a checker
// uses to see BlueFlame writes as they arrive. docs/faults.md has the
// consequences and their sources.

// Counters of this file (a separate block of the catalogue).
var (
	CtrFaultWCLine   = trace.NewCounter("fault_wc_line")     // a WC line a fault rule dropped, tore, delayed, reordered, duplicated or corrupted
	CtrFaultMMIOTLP  = trace.NewCounter("fault_mmio_tlp")    // an MMIO TLP a fault rule dropped, delayed, duplicated, corrupted or failed (UR)
	CtrBfOutOfOrder  = trace.NewCounter("bf_out_of_order")   // BlueFlame lines that did not arrive ascending: doorbell fallback
	CtrLinkLostRead  = trace.NewCounter("pcie_link_lost_rd") // MMIO reads answered all ones: the link is lost
	CtrLinkLostWrite = trace.NewCounter("pcie_link_lost_wr") // MMIO writes lost with the link
)

// BFObserver sees every write to a BlueFlame buffer (the device's checked
// mode) as it leaves the CPU for the link: bfreg k of UAR uar, buffer half
// (0 or 1), at rel inside it; data is valid only during the call. PCIe
// delivers posted writes in this order, so it is the order a device sees.
// (It is taken at the CPU because the link model's calendar can let a
// short TLP overtake a longer one issued just before it; the order of
// arrival is then not the order PCIe guarantees.)
type BFObserver interface {
	BFWrite(t sim.Time, uar uint32, bfreg, half int, rel uint64, data []byte)
}

// faultState is BAR0's part of fault injection and device fatal.
type faultState struct {
	in       *fault.Injector
	obs      BFObserver
	pend     []*heldLine // lines held behind the next one (reorder)
	fatal    bool
	synd     uint8
	frozen   uint32 // health_counter when FW died
	linkLost bool
	obsBuf   [64]byte     // the write handed to obs
	bypass   bool         // emitFault is sending: no second decision
	extra    sim.Duration // added to the arrival of the write being sent
}

// emitFault applies fault.PCIeTLP (and a lost link) to an MMIO write. It
// reports true when it has handled the write (lost, or sent changed).
func (b *BAR0) emitFault(now sim.Time, off uint64, p []byte) bool {
	var buf [64]byte
	q := buf[:copy(buf[:], p)]
	extra, lost := b.tlpFault(now, off, q)
	if lost {
		return true
	}
	if extra == 0 && string(q) == string(p) {
		return false
	}
	b.fx.bypass = true
	if extra > 0 {
		b.fx.extra = extra
	}
	b.emit(now, off, q)
	if extra < 0 {
		b.emit(now, off, q)
	}
	b.fx.bypass, b.fx.extra = false, 0
	return true
}

// heldLine is a WC line's bytes held back by a delay or reorder rule.
type heldLine struct {
	b       *BAR0
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
	h.b.emitHeld(now, h)
}

// SetFaults makes BAR0 consult in at fault.WCBuffer and fault.PCIeTLP. An
// injector with no rule there is not kept: the hooks then cost nothing.
func (b *BAR0) SetFaults(in *fault.Injector) {
	b.fx.in = nil
	if in.Has(fault.WCBuffer, fault.PCIeTLP) {
		b.fx.in = in
	}
}

// observe hands an MMIO write in a bfreg area to the observer.
func (b *BAR0) observe(now sim.Time, off uint64, p []byte) {
	if b.cfg.BFRegSize == 0 || !b.isUAR(off) {
		return
	}
	r := off % mlx5.UARPageSize
	if r < mlx5.UARBFRegOffset || r >= mlx5.UARBFRegOffset+4*uint64(b.cfg.BFRegSize) {
		return
	}
	r -= mlx5.UARBFRegOffset
	k := int(r / uint64(b.cfg.BFRegSize))
	rel := r % uint64(b.cfg.BFRegSize)
	half := int(rel / uint64(b.bfBuf))
	n := copy(b.fx.obsBuf[:], p) // through a copy: p must not escape (Store64 stays allocation-free)
	b.fx.obs.BFWrite(now, uint32(off/mlx5.UARPageSize), k, half, rel%uint64(b.bfBuf), b.fx.obsBuf[:n])
}

// SetObserver installs a BlueFlame observer (nil removes it).
func (b *BAR0) SetObserver(o BFObserver) { b.fx.obs = o }

// SetFatal puts the health buffer in the fatal state at t: synd in the
// health buffer's synd byte with the RFR bit set, and health_counter
// frozen at its value at t (LNX-health: the driver polls both).
func (b *BAR0) SetFatal(t sim.Time, synd uint8) {
	if b.fx.fatal {
		return
	}
	b.fx.frozen = readHealthCounter(b, &Acc{T: t})
	b.fx.fatal, b.fx.synd = true, synd
}

// SetLinkLost loses the PCIe link: every MMIO read completes all ones and
// every MMIO write is lost (surprise removal, LNX-health PCI_COMM_ERR).
func (b *BAR0) SetLinkLost() { b.fx.linkLost = true }

// Fatal reports the health syndrome, if FW is dead.
func (b *BAR0) Fatal() (uint8, bool) { return b.fx.synd, b.fx.fatal }

// healthWord is the health buffer read at rel in the fatal state: rfr
// (0x38, bit 31) and synd (byte 0x3d of the dword at 0x3c), mlx5.md §1.2.
func (b *BAR0) healthWord(rel uint64, v uint32) uint32 {
	if !b.fx.fatal {
		return v
	}
	switch rel {
	case 0x38:
		return 1 << 31
	case 0x3c:
		return uint32(b.fx.synd) << 16 // irisc_index [31:24], synd [23:16], ext_synd [15:0]
	}
	return v
}

func (b *BAR0) faultWarn(t sim.Time, name trace.Counter, qpn uint32, flow uint64, d fault.Decision, format string, args ...any) {
	pt := fault.WCBuffer
	if name == CtrFaultMMIOTLP {
		pt = fault.PCIeTLP
	}
	b.ctr.Inc(name)
	b.ctr.Inc(env.FaultCounter(pt, d.Action))
	if b.rec.On() {
		b.rec.Record(trace.Event{Name: name.String(), Component: "fault", Node: b.node, Start: t, End: t, QPN: qpn, Flow: flow,
			PSN: trace.NoPSN, Level: trace.Warn, Detail: fmt.Sprintf(format, args...) + " [rule " + b.fx.in.RuleString(d.Rule) + "]"})
	}
}

// wcFault consults fault.WCBuffer for line l leaving the WC buffer. It
// reports true when the rule took the line over (dropped, held, torn or
// duplicated: emitted here); l is then freed.
func (b *BAR0) wcFault(now sim.Time, l *wcLine, reason string) bool {
	qpn, flow := b.flowAt(l.addr)
	ev := fault.NewEvent(b.node, qpn)
	if flow != 0 {
		ev.WQE = int32(flow & 0xffff)
	}
	ev.Addr, ev.Len = l.addr, 64
	d := b.fx.in.Decide(fault.WCBuffer, ev)
	switch d.Action {
	case fault.None:
		return false
	case fault.Corrupt:
		if n := bits.OnesCount64(l.mask); n > 0 {
			o := nthByte(l.mask, d.Offset(0, n))
			l.data[o] ^= d.Mask()
			b.faultWarn(now, CtrFaultWCLine, qpn, flow, d, "WC line at BAR0 %#x: byte %d corrupted (%s)", l.addr, o, reason)
		}
		return false
	case fault.Drop:
		b.faultWarn(now, CtrFaultWCLine, qpn, flow, d, "WC line at BAR0 %#x lost (%s)", l.addr, reason)
	case fault.Tear:
		// Only the first half of the line's bytes leaves; the rest is lost.
		keep := l.mask & 0x00000000ffffffff
		if keep == 0 || keep == l.mask {
			keep = l.mask & (l.mask - 1) // at least one byte goes missing
		}
		b.faultWarn(now, CtrFaultWCLine, qpn, flow, d, "WC line at BAR0 %#x torn: %d of %d bytes leave (%s)", l.addr, bits.OnesCount64(keep), bits.OnesCount64(l.mask), reason)
		l.mask = keep
		if l.mask != 0 {
			b.emitRuns(now, l.addr, l.mask, &l.data)
		}
	case fault.Duplicate:
		b.faultWarn(now, CtrFaultWCLine, qpn, flow, d, "WC line at BAR0 %#x emitted twice (%s)", l.addr, reason)
		b.emitRuns(now, l.addr, l.mask, &l.data)
		b.emitRuns(now, l.addr, l.mask, &l.data)
	case fault.Delay, fault.Reorder:
		h := &heldLine{b: b, addr: l.addr, mask: l.mask, data: l.data, reorder: d.Action == fault.Reorder}
		at := now.Add(d.Delay)
		if h.reorder {
			// Released after the next line leaves, or by the drain timer
			// if none does (nothing is held for ever).
			at = now.Add(max(b.cfg.WCDrain, sim.Nanosecond))
			b.faultWarn(now, CtrFaultWCLine, qpn, flow, d, "WC line at BAR0 %#x held behind the next line (%s)", l.addr, reason)
			b.fx.pend = append(b.fx.pend, h)
		} else {
			b.faultWarn(now, CtrFaultWCLine, qpn, flow, d, "WC line at BAR0 %#x held %v as if never flushed (%s)", l.addr, d.Delay, reason)
		}
		b.eng.At(at, h)
	default:
		return false
	}
	l.active = false
	return true
}

// emitHeld sends a held line's bytes.
func (b *BAR0) emitHeld(now sim.Time, h *heldLine) {
	b.emitRuns(now, h.addr, h.mask, &h.data)
}

// releaseReordered emits lines held behind this one (called after a line
// leaves normally).
func (b *BAR0) releaseReordered(now sim.Time) {
	for i := range b.fx.pend {
		if h := b.fx.pend[i]; !h.done {
			h.done = true
			b.emitHeld(now, h)
		}
	}
	b.fx.pend = b.fx.pend[:0]
}

// nthByte is the offset of the k-th (from 0) valid byte of a line's mask.
func nthByte(mask uint64, k int) int {
	for ; k > 0; k-- {
		mask &= mask - 1
	}
	return bits.TrailingZeros64(mask)
}

// emitRuns sends the valid bytes of a line, one MWr per contiguous run.
func (b *BAR0) emitRuns(now sim.Time, addr, mask uint64, data *[64]byte) {
	for m := mask; m != 0; {
		start := bits.TrailingZeros64(m)
		run := bits.TrailingZeros64(^(m >> uint(start)))
		if start+run >= 64 {
			run = 64 - start
		}
		b.emit(now, addr+uint64(start), data[start:start+run])
		m &^= byteMask(uint64(start), run)
	}
}

// tlpFault consults fault.PCIeTLP for an MMIO write of p at off leaving the
// CPU now. It returns the extra delay and whether the write is lost;
// Corrupt changes p in place and Duplicate sends it once more here.
func (b *BAR0) tlpFault(now sim.Time, off uint64, p []byte) (sim.Duration, bool) {
	if b.fx.linkLost {
		b.ctr.Inc(CtrLinkLostWrite)
		return 0, true
	}
	if b.fx.in == nil {
		return 0, false
	}
	qpn, flow := b.flowAt(off)
	ev := fault.NewEvent(b.node, qpn)
	ev.Addr, ev.Len, ev.Kind = off, uint32(len(p)), fault.KindMWr
	d := b.fx.in.Decide(fault.PCIeTLP, ev)
	switch d.Action {
	case fault.Drop:
		b.faultWarn(now, CtrFaultMMIOTLP, qpn, flow, d, "MWr of %d bytes at BAR0 %#x lost", len(p), off)
		return 0, true
	case fault.Corrupt:
		if o := d.Offset(0, len(p)); o >= 0 {
			p[o] ^= d.Mask()
			b.faultWarn(now, CtrFaultMMIOTLP, qpn, flow, d, "MWr at BAR0 %#x: byte %d corrupted", off, o)
		}
	case fault.Delay:
		b.faultWarn(now, CtrFaultMMIOTLP, qpn, flow, d, "MWr at BAR0 %#x delayed %v", off, d.Delay)
		return d.Delay, false
	case fault.Duplicate:
		b.faultWarn(now, CtrFaultMMIOTLP, qpn, flow, d, "MWr at BAR0 %#x sent twice", off)
		return -1, false // the caller sends it twice
	}
	return 0, false
}

// loadFault is an MMIO read's value after the link and fault.PCIeTLP
// (MRd) had their say: all ones when the link is lost or a rule answers
// UR (a master abort reads as all ones).
func (b *BAR0) loadFault(t sim.Time, off uint64, v uint32) uint32 {
	if b.fx.linkLost {
		b.ctr.Inc(CtrLinkLostRead)
		return unknownValue
	}
	if b.fx.in == nil {
		return v
	}
	ev := fault.NewEvent(b.node, 0)
	ev.Addr, ev.Len, ev.Kind = off, 4, fault.KindMRd
	d := b.fx.in.Decide(fault.PCIeTLP, ev)
	switch d.Action {
	case fault.UR, fault.Drop:
		b.faultWarn(t, CtrFaultMMIOTLP, 0, 0, d, "MRd at BAR0 %#x completed with UR: reads all ones", off)
		return unknownValue
	case fault.Corrupt:
		b.faultWarn(t, CtrFaultMMIOTLP, 0, 0, d, "MRd at BAR0 %#x: completion data corrupted", off)
		return v ^ uint32(d.Mask())<<(8*uint(d.Rand%4))
	}
	return v
}
