package bar

import (
	"fmt"

	"github.com/softnic/softnic/env"
	"github.com/softnic/softnic/fault"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/trace"
)

// Fault injection at BAR0's hook point fault.PCIeTLP (an MMIO TLP between
// CPU and device; fault.WCBuffer, a line the CPU's write-combining buffer
// emits, is the host CPU's: host/faults.go), the device-fatal state BAR0
// shows (health buffer, frozen health counter, PCIe link lost), and the
// observer a checker uses to see BlueFlame writes as they arrive.
// docs/faults.md has the consequences and their sources.

// Counters of this file (a separate block of the catalogue).
var (
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
func (b *BAR0) emitFault(now sim.Time, off uint64, p []byte, qpn uint32, flow uint64) bool {
	var buf [64]byte
	q := buf[:copy(buf[:], p)]
	extra, lost := b.tlpFault(now, off, q, qpn, flow)
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
	b.emit(now, off, q, qpn, flow)
	if extra < 0 {
		b.emit(now, off, q, qpn, flow)
	}
	b.fx.bypass, b.fx.extra = false, 0
	return true
}

// SetFaults makes BAR0 consult in at fault.PCIeTLP. An injector with no
// rule at fault.PCIeTLP or fault.WCBuffer is not kept: the hooks then cost
// nothing. (The condition names both points, as when BAR0 also held the
// WC buffer, so that a plan's per-point event counts stay the same; the
// host CPU keeps the same injector for fault.WCBuffer.)
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
	b.ctr.Inc(name)
	b.ctr.Inc(env.FaultCounter(fault.PCIeTLP, d.Action))
	if b.rec.On() {
		b.rec.Record(trace.Event{Name: name.String(), Component: "fault", Node: b.node, Start: t, End: t, QPN: qpn, Flow: flow,
			PSN: trace.NoPSN, Level: trace.Warn, Detail: fmt.Sprintf(format, args...) + " [rule " + b.fx.in.RuleString(d.Rule) + "]"})
	}
}

// tlpFault consults fault.PCIeTLP for an MMIO write of p at off leaving the
// CPU now, labelled qpn / flow by the host. It returns the extra delay and
// whether the write is lost; Corrupt changes p in place and Duplicate asks
// the caller to send it twice.
func (b *BAR0) tlpFault(now sim.Time, off uint64, p []byte, qpn uint32, flow uint64) (sim.Duration, bool) {
	if b.fx.linkLost {
		b.ctr.Inc(CtrLinkLostWrite)
		return 0, true
	}
	if b.fx.in == nil {
		return 0, false
	}
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
	case fault.UR:
		// A posted request the completer answers with Unsupported
		// Request is discarded: a posted write has no completion to
		// carry the error back (PCIe base spec, UR handling of posted
		// requests), so to the driver it is a lost write.
		b.faultWarn(now, CtrFaultMMIOTLP, qpn, flow, d, "MWr of %d bytes at BAR0 %#x answered UR: discarded", len(p), off)
		return 0, true
	}
	return 0, false
}

// loadFault is an MMIO read's value after the link and fault.PCIeTLP
// (MRd) had their say: all ones when the link is lost or a rule answers
// UR (a master abort reads as all ones).
// Delay makes the completion come back that much later (the extra
// duration is returned). Duplicate reads the register once more: the
// second completion is an unexpected one the CPU discards, and no BAR0
// register has a read side effect, so only the count and the trace show it
// [unconfirmed: what a root complex does with a duplicated MRd].
func (b *BAR0) loadFault(t sim.Time, off uint64, v uint32) (uint32, sim.Duration) {
	if b.fx.linkLost {
		b.ctr.Inc(CtrLinkLostRead)
		return unknownValue, 0
	}
	if b.fx.in == nil {
		return v, 0
	}
	ev := fault.NewEvent(b.node, 0)
	ev.Addr, ev.Len, ev.Kind = off, 4, fault.KindMRd
	d := b.fx.in.Decide(fault.PCIeTLP, ev)
	switch d.Action {
	case fault.UR, fault.Drop:
		b.faultWarn(t, CtrFaultMMIOTLP, 0, 0, d, "MRd at BAR0 %#x completed with UR: reads all ones", off)
		return unknownValue, 0
	case fault.Corrupt:
		b.faultWarn(t, CtrFaultMMIOTLP, 0, 0, d, "MRd at BAR0 %#x: completion data corrupted", off)
		return v ^ uint32(d.Mask())<<(8*uint(d.Rand%4)), 0
	case fault.Delay:
		b.faultWarn(t, CtrFaultMMIOTLP, 0, 0, d, "MRd at BAR0 %#x: completion delayed %v", off, d.Delay)
		return v, d.Delay
	case fault.Duplicate:
		b.faultWarn(t, CtrFaultMMIOTLP, 0, 0, d, "MRd at BAR0 %#x sent twice: the second completion is discarded", off)
	}
	return v, 0
}
