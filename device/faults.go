package device

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/softnic/softnic/dma"
	"github.com/softnic/softnic/env"
	"github.com/softnic/softnic/fault"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/trace"
	"github.com/softnic/softnic/wqefetch"
)

// Fault injection in the device: the doorbell, cq and eq hook points, the
// timed port and device rules, and what a fault elsewhere (a DMA error
// from dma, a torn line from bar) does to a QP or CQ. The consequences
// follow ../shared/reference/faults.md; docs/faults.md is the table. Where
// the reference marks a consequence unconfirmed, FaultSpec holds the
// switch and the default is the documented inference.

// FaultSpec holds the switches for fault consequences the sources leave
// open (faults.md §5) and the timing of the device-fatal path.
type FaultSpec struct {
	// DoorbellReadsRecord makes the device take the smaller of the
	// doorbell's counter and the doorbell record's at each SQ doorbell, so
	// a doorbell that overtakes its record (fault action "early") starts
	// nothing until a later doorbell, like a lost one. Default false: the
	// doorbell is authoritative (wqefetch.Engine.Doorbell; faults.md §2.3
	// says the hardware's behaviour with a stale record is unconfirmed).
	DoorbellReadsRecord bool `json:"doorbell_reads_record"`
	// WQEFetchErrorFatal makes a failed WQE fetch a device fatal error
	// (health syndrome 0xa, ICM/PCI fetch error) instead of an error CQE
	// on the QP (LOCAL_PROT_ERR, vendor 0x51). faults.md §2.5: "whether a
	// WQE/CQ fetch failure is per-QP or device-fatal is unconfirmed";
	// default per-QP.
	WQEFetchErrorFatal bool `json:"wqe_fetch_error_fatal"`
	// DMAErrorFatal makes every PCIe/IOMMU error on a DMA access a device
	// fatal error (as AER handling ends it, mlx5_pci_err_detected), rather
	// than the per-QP error CQE / NAK the field reports show (default).
	DMAErrorFatal bool `json:"dma_error_fatal"`
	// HealthPoll is how long after firmware dies the driver notices
	// (LNX-health polls every 2 s + up to 1 s; default 2 s).
	HealthPoll sim.Duration `json:"health_poll_ps"`
	// FatalNoUserFlush leaves user CQs quiet after a device fatal error, as
	// libmlx5 does: it has no software flush (on DEVICE_FATAL its
	// mlx5_async_event, rdma-core providers/mlx5/verbs.c, only sets
	// MLX5_CTX_FLAGS_FATAL_STATE; faults.md §2.9). Default false:
	// outstanding work of a QP's own queues completes WR_FLUSH_ERR with
	// vendor_err 5, as the kernel's mlx5_ib_poll_sw_comp does for kernel
	// CQs; an SRQ's WQEs are never completed either way (swFlush).
	FatalNoUserFlush bool `json:"fatal_no_user_flush"`
}

// DefaultHealthPoll is FaultSpec.HealthPoll's default.
const DefaultHealthPoll = 2 * sim.Second

// Vendor syndromes (vendor_err_synd) seen in the field (faults.md §1.2).
const (
	VendorRetryExceeded = 0x81 // transport retry exceeded (NCCL "vendor err 129")
	VendorFlush         = 0xf9 // flushed after the first error
	VendorPCIe          = 0x51 // LOC_PROT_ERR on a PCIe / peer-memory path problem
	VendorRemoteAccess  = 0x88 // REM_ACCESS_ERR on the requester
	VendorRemoteOp      = 0x89 // REM_OP_ERR (RDMA READ)
	VendorRecvLKey      = 0x32 // LOC_PROT_ERR on a receive whose SGE's lkey fails (ucx#9167: an SRQ receive)
	VendorSWFlush       = 5    // the kernel's software flush after a device fatal error
)

// Counters of the fault machinery (a separate block of the catalogue).
var (
	CtrFaultDoorbell     = trace.NewCounter("fault_doorbell")       // doorbells a fault rule changed
	CtrFaultCQE          = trace.NewCounter("fault_cqe")            // CQEs a fault rule lost, delayed, corrupted or overran
	CtrFaultEQE          = trace.NewCounter("fault_eqe")            // EQEs a fault rule lost, delayed or overran
	CtrCompEQOverrun     = trace.NewCounter("comp_eq_overrun")      // completion EQ overruns (Linux vNIC name): EQ frozen
	CtrAsyncEQOverrun    = trace.NewCounter("async_eq_overrun")     // async EQ overruns (Linux vNIC name): device fatal
	CtrCQErrorAccess     = trace.NewCounter("cq_error_access")      // CQs put in error by a failed CQE or record access
	CtrCQOverrunIgnored  = trace.NewCounter("cq_overrun_ignored")   // CQEs written over unconsumed ones (cqc.oi)
	CtrDeviceFatal       = trace.NewCounter("device_fatal")         // firmware fatal errors
	CtrDeviceFatalSeen   = trace.NewCounter("device_fatal_handled") // the driver saw it (health poll) and flushed
	CtrFatalSRQWQELeft   = trace.NewCounter("fatal_srq_wqe_left")   // SRQ receive WQEs the fatal flush leaves uncompleted (it flushes no SRQ)
	CtrPCILinkLost       = trace.NewCounter("pci_link_lost")        // PCIe link losses
	CtrDeadUARStore      = trace.NewCounter("uar_store_dead")       // UAR stores after a device fatal error: lost
	CtrDeadRxDrop        = trace.NewCounter("rx_drop_device_dead")  // frames received by a dead device
	CtrCmdFailedFatal    = trace.NewCounter("cmd_failed_fatal")     // commands failed in the error state
	CtrWQEFetchPCIeError = trace.NewCounter("wqe_fetch_pcie_error") // send WQEs whose fetch failed on PCIe
	CtrBFShort           = trace.NewCounter("bf_short")             // a BlueFlame WQE shorter than a control segment: dropped
	ctrFaultTimed        = trace.NewCounter("fault_timed")          // timed rules (port, device) that fired
)

// faultState is the device's part of fault injection.
type faultState struct {
	in     *fault.Injector
	lastDB map[uint32][8]byte // per QP, the last doorbell delivered (stale)
	held   []*heldDB          // doorbells held behind the next (reorder)
	replay bool               // delivering a held or duplicated doorbell
	// chkSkip: the next doorbell is the device's rewrite of an early one
	// (faults.doorbell_reads_record), already reported to checked mode:
	// not the driver's doorbell, so not judged again.
	chkSkip    bool
	cqCorrupt  fault.Decision // a corrupt decision for the CQE being written
	timed      []*timedFault  // the timed rules' events armed (ArmTimedFaults), fired or not
	firedTimed map[int]bool   // the timed rules (plan index) that fired on this device

	fatal        bool
	detected     bool
	linkLost     bool
	synd         uint8
	fatalAt      sim.Time
	cqErr        map[uint32]uint8 // CQ error syndrome per CQ (default overrun)
	compEQFrozen bool             // the completion EQ overran (an async EQ overrun is fatal instead)
}

// heldDB is a doorbell or BlueFlame write delivered later.
type heldDB struct {
	d     *Device
	uar   uint32
	bfreg int
	bf    []byte // nil: a doorbell
	ctrl  [8]byte
	done  bool
}

func (h *heldDB) Fire(now sim.Time) {
	if h.done {
		return
	}
	h.done = true
	d := h.d
	if h.bf == nil {
		d.replayDoorbell(now, h.uar, h.bfreg, h.ctrl)
		return
	}
	d.fx.replay = true
	d.BlueFlame(now, h.uar, h.bfreg, h.bf)
	d.fx.replay = false
}

// replayDoorbell delivers a doorbell the fault machinery made (held,
// duplicated, or a BlueFlame write turned into a doorbell): the doorbell
// hook does not consult the rules again for it.
func (d *Device) replayDoorbell(t sim.Time, uar uint32, bfreg int, ctrl [8]byte) {
	d.fx.replay = true
	d.Doorbell(t, uar, bfreg, ctrl)
	d.fx.replay = false
}

// announceNothing sets the counter of doorbell ctrl to QP q's next
// WQEBB less the doorbell's own WQE: a doorbell that starts nothing new.
func announceNothing(ctrl *[8]byte, q *qp) {
	bbs := max(mlx5.WQEBBs(int(ctrl[7]&0x3f)), 1)
	binary.BigEndian.PutUint16(ctrl[1:3], q.req.sq.Next()-uint16(bbs))
}

// SetFaults makes the device and its engines consult in at every hook
// point, and arms the timed rules (port, device) of this node at their
// at_ps from the start of the simulation (ArmTimedFaults(0)). Call it
// once, before traffic starts (a second call arms the timed rules again).
func (d *Device) SetFaults(in *fault.Injector) {
	d.AttachFaults(in)
	d.ArmTimedFaults(0)
}

// AttachFaults is SetFaults without arming the timed rules: the owner
// arms them with ArmTimedFaults when its workload starts, so that at_ps
// counts from there (testbed.Config.DeferTimedFaults).
func (d *Device) AttachFaults(in *fault.Injector) {
	d.DisarmTimedFaults()
	d.fx.firedTimed = nil // a new plan (or the same one again): its timed rules have not fired
	d.fx.in = nil
	if in.Has(fault.Doorbell, fault.CQ, fault.EQ, fault.Port, fault.Dev) {
		d.fx.in = in // the device's own points; none: its hooks cost nothing
	}
	d.bar.SetFaults(in)
	d.dma.SetFaults(in)
}

// ArmTimedFaults schedules each timed rule (port, device) of this node at
// origin + at_ps (saturating: sim.Time.AddSat). Rules armed before and not
// fired yet are re-armed from the new origin; rules that fired stay fired
// (and the end of a port-down window stays where it was). A rule whose
// time has passed fires at once.
func (d *Device) ArmTimedFaults(origin sim.Time) {
	kept := d.fx.timed[:0]
	for _, f := range d.fx.timed {
		if f.up && f.tm.Armed() {
			kept = append(kept, f) // a port already down comes back as planned
			continue
		}
		f.tm.Stop()
	}
	clear(d.fx.timed[len(kept):])
	d.fx.timed = kept
	if d.fx.in == nil {
		return
	}
	for _, s := range d.fx.in.Scheduled() {
		if s.Node >= 0 && s.Node != d.node {
			continue
		}
		if d.fx.firedTimed[s.Rule] {
			continue
		}
		d.armTimed(origin.AddSat(sim.Duration(s.At)), &timedFault{d: d, s: s})
	}
}

// armTimed schedules a timed rule's event (its firing, or the end of a
// port-down window) on a timer that DisarmTimedFaults can stop.
func (d *Device) armTimed(at sim.Time, f *timedFault) {
	f.tm = d.eng.NewTimer(f)
	f.tm.Reset(at)
	d.fx.timed = append(d.fx.timed, f)
}

// DisarmTimedFaults stops the timed rules of this node that have not fired
// yet, and the pending ends of port-down windows (the link stays as it
// is), and reports how many events it stopped. An owner calls it when its
// workload is over: a timed rule due after the run's natural end does not
// fire.
func (d *Device) DisarmTimedFaults() int {
	n := 0
	for _, f := range d.fx.timed {
		if f.tm.Stop() {
			n++
		}
	}
	d.fx.timed = d.fx.timed[:0]
	return n
}

// TimedFaultsPending is how many events of timed rules (a rule that has
// not fired, the end of a port-down window) are scheduled on the engine.
func (d *Device) TimedFaultsPending() int {
	n := 0
	for _, f := range d.fx.timed {
		if f.tm.Armed() {
			n++
		}
	}
	return n
}

// timedFault is a port or device rule firing at its time.
type timedFault struct {
	d  *Device
	s  fault.Scheduled
	up bool       // the end of a port-down window
	tm *sim.Timer // its event (armTimed)
}

func (f *timedFault) Fire(now sim.Time) {
	d, s := f.d, f.s
	if f.up {
		d.SetLinkState(true)
		return
	}
	if d.fx.firedTimed == nil {
		d.fx.firedTimed = map[int]bool{}
	}
	d.fx.firedTimed[s.Rule] = true
	d.fx.in.MarkFired(s.Rule)
	d.inc(env.FaultCounter(s.Point, s.Action))
	// No absolute time in the text: the event carries it, and a trace
	// prints it from the workload's start, where at_ps counts from.
	d.faultEvent(now, ctrFaultTimed, 0, 0, "%s %s [rule %s]", s.Point, s.Action, d.fx.in.RuleString(s.Rule))
	switch s.Action {
	case fault.Down:
		d.SetLinkState(false)
		if s.For > 0 {
			d.armTimed(now.AddSat(s.For), &timedFault{d: d, s: s, up: true})
		}
	case fault.Fatal:
		d.EnterFatal(now, fault.HealthSyndrome(s.Value), "injected firmware fatal error")
	case fault.LinkLoss:
		d.LosePCIeLink(now)
	}
}

// faultEvent records a fired fault in the trace (component "fault") and
// counts name.
func (d *Device) faultEvent(t sim.Time, name trace.Counter, qpn uint32, flow uint64, format string, args ...any) {
	d.inc(name)
	if d.rec.On() {
		d.rec.Record(trace.Event{Name: name.String(), Component: "fault", Node: d.node, Start: t, End: t, QPN: qpn, Flow: flow,
			PSN: trace.NoPSN, Level: trace.Warn, Detail: fmt.Sprintf(format, args...)})
	}
}

// doorbellFault consults fault.Doorbell for a doorbell (bf nil) or a
// BlueFlame write. It may change ctrl (corrupt, stale, jump) and reports
// true when the event is taken over (lost, held, or turned into a plain
// doorbell: delivered here).
func (d *Device) doorbellFault(t sim.Time, uar uint32, bfreg int, ctrl *[8]byte, bf []byte) bool {
	if d.fx.fatal {
		d.inc(CtrDeadUARStore) // UAR pages map to a dummy page: the store vanishes
		return true
	}
	if d.fx.in == nil || d.fx.replay {
		return false
	}
	c := mlx5.CtrlSeg(ctrl[:])
	qpn, idx := c.QPN(), c.WQEIndex()
	ev := fault.NewEvent(d.node, qpn)
	ev.WQE = int32(idx)
	dec := d.fx.in.Decide(fault.Doorbell, ev)
	if d.fx.lastDB == nil {
		d.fx.lastDB = map[uint32][8]byte{}
	}
	prev, hadPrev := d.fx.lastDB[qpn]
	kind := "doorbell"
	if bf != nil {
		kind = "BlueFlame write"
	}
	flow := wqefetch.FlowID(qpn, idx)
	note := func(format string, args ...any) {
		d.inc(env.FaultCounter(fault.Doorbell, dec.Action))
		d.faultEvent(t, CtrFaultDoorbell, qpn, flow, "%s of QP %#x wqe_index %d: %s [rule %s]", kind, qpn, idx,
			fmt.Sprintf(format, args...), d.fx.in.RuleString(dec.Rule))
	}
	switch dec.Action {
	case fault.None:
		d.fx.lastDB[qpn] = *ctrl
		return false
	case fault.Drop:
		note("lost")
		return true
	case fault.Corrupt:
		o := dec.Offset(0, 8)
		ctrl[o] ^= dec.Mask()
		if bf != nil {
			bf[o] = ctrl[o]
		}
		note("byte %d corrupted", o)
		return false
	case fault.Delay, fault.Reorder, fault.Duplicate:
		h := &heldDB{d: d, uar: uar, bfreg: bfreg, ctrl: *ctrl}
		if bf != nil {
			h.bf = append([]byte(nil), bf...)
		}
		switch dec.Action {
		case fault.Delay:
			note("delayed %v", dec.Delay)
			d.eng.At(t.AddSat(dec.Delay), h)
		case fault.Reorder:
			note("held behind the next doorbell")
			d.fx.held = append(d.fx.held, h)
			d.eng.At(t.Add(d.spec.BAR.WCDrain+sim.Microsecond), h) // nothing is held for ever
		default:
			note("delivered twice")
			d.eng.At(t, h)
			d.fx.lastDB[qpn] = *ctrl
			return false
		}
		return true
	case fault.Stale:
		q := d.qps[qpn]
		switch {
		case hadPrev:
			*ctrl = prev
		case q != nil:
			announceNothing(ctrl, q) // no earlier doorbell
		}
		note("stale counter: wqe_index %d arrives instead", mlx5.CtrlSeg(ctrl[:]).WQEIndex())
	case fault.Jump:
		n := uint16(max(dec.Value, 1))
		binary.BigEndian.PutUint16(ctrl[1:3], idx+n)
		note("counter jumped %d WQEBBs to wqe_index %d", n, idx+n)
	case fault.Early:
		note("arrived before the doorbell record was visible")
		if d.chk != nil {
			// Checked mode peeks the record in host memory, where the
			// provider has already written it; the fault is that the
			// device saw the doorbell first, which is R1 as the device
			// observes it (docs/faults.md: with a plan the checker
			// reports what the device observes).
			d.chk.earlyDoorbell(t, qpn, idx)
			d.fx.chkSkip = d.spec.Faults.DoorbellReadsRecord
		}
		if d.spec.Faults.DoorbellReadsRecord {
			// The device takes the record's (older) counter: nothing new.
			if q := d.qps[qpn]; q != nil {
				announceNothing(ctrl, q)
			}
		}
		if bf != nil {
			d.replayDoorbell(t, uar, bfreg, *ctrl)
			return true
		}
		return false
	}
	if bf != nil {
		// A changed counter: the device treats it as a doorbell.
		d.replayDoorbell(t, uar, bfreg, *ctrl)
		return true
	}
	d.fx.lastDB[qpn] = *ctrl
	return false
}

// releaseHeldDoorbells delivers doorbells a reorder rule held behind this
// one (called after a doorbell is delivered).
func (d *Device) releaseHeldDoorbells(t sim.Time) {
	if len(d.fx.held) == 0 || d.fx.replay {
		return
	}
	held := d.fx.held
	d.fx.held = nil
	for _, h := range held {
		h.Fire(t)
	}
}

// cqFault consults fault.CQ for the CQE f about to be written to c. It
// returns the CQE's extra landing delay, and true when the CQE is not
// written (lost, or the CQ overran).
func (d *Device) cqFault(t sim.Time, c *cq, f *mlx5.CQEFields, flow uint64) (delay sim.Duration, drop bool) {
	d.fx.cqCorrupt = fault.Decision{}
	if d.fx.in == nil {
		return 0, false
	}
	ev := fault.NewEvent(d.node, f.QPN)
	ev.WQE = int32(f.WQECounter)
	dec := d.fx.in.Decide(fault.CQ, ev)
	if dec.Action == fault.None {
		return 0, false
	}
	d.inc(env.FaultCounter(fault.CQ, dec.Action))
	note := func(what string) {
		d.faultEvent(t, CtrFaultCQE, f.QPN, flow, "CQ %d CQE for QP %#x wqe_counter %d: %s [rule %s]", c.cqn, f.QPN, f.WQECounter, what, d.fx.in.RuleString(dec.Rule))
	}
	switch dec.Action {
	case fault.Drop:
		note("lost")
		return 0, true
	case fault.Delay:
		note(fmt.Sprintf("lands %v late", dec.Delay))
		return dec.Delay, false
	case fault.Overrun:
		note("CQ overrun")
		if c.oi {
			d.inc(CtrCQOverrunIgnored)
			return 0, false
		}
		d.cqOverrun(t, c, f.QPN)
		return 0, true
	case fault.Corrupt:
		// Applied to the encoded CQE by corruptCQE (never to op_own: the
		// poller must see the entry to meet the damage).
		d.fx.cqCorrupt = dec
		note("corrupted")
	}
	return 0, false
}

// corruptCQE applies a pending corrupt decision to an encoded CQE.
func (d *Device) corruptCQE(b []byte) {
	dec := d.fx.cqCorrupt
	if dec.Action != fault.Corrupt {
		return
	}
	d.fx.cqCorrupt = fault.Decision{}
	o := dec.Offset(0, mlx5.CQE64Size-1)
	b[o] ^= dec.Mask()
}

// eqFault consults fault.EQ for an EQE about to be written to q. It
// returns the EQE's extra landing delay, and true when the EQE is not
// written.
func (d *Device) eqFault(t sim.Time, q *eq, f *mlx5.EQEFields, qpn uint32) (delay sim.Duration, drop bool) {
	if (d.fx.compEQFrozen && q == &d.ev.comp) || d.fx.fatal {
		d.inc(CtrEQOverrun)
		return 0, true
	}
	if d.fx.in == nil {
		return 0, false
	}
	ev := fault.NewEvent(d.node, qpn)
	dec := d.fx.in.Decide(fault.EQ, ev)
	if dec.Action == fault.None {
		return 0, false
	}
	d.inc(env.FaultCounter(fault.EQ, dec.Action))
	note := func(what string) {
		d.faultEvent(t, CtrFaultEQE, qpn, 0, "EQ %d %v EQE: %s [rule %s]", q.eqn, f.Type, what, d.fx.in.RuleString(dec.Rule))
	}
	switch dec.Action {
	case fault.Drop:
		note("lost")
		return 0, true
	case fault.Delay:
		note(fmt.Sprintf("lands %v late", dec.Delay))
		return dec.Delay, false
	case fault.Overrun:
		note("EQ overrun")
		d.eqOverrun(t, q)
		return 0, true
	}
	return 0, false
}

// eqOverrun is an EQ whose consumer fell a ring behind. The async EQ's is
// a fatal health syndrome (0xc, LNX-health); a completion EQ's effect is
// unconfirmed (faults.md §2.7): the model freezes it — no more EQEs, no
// more interrupts — and counts it.
func (d *Device) eqOverrun(t sim.Time, q *eq) {
	if q == &d.ev.async {
		d.warn(t, CtrAsyncEQOverrun, "async EQ %d overrun: device fatal (health syndrome 0xc)", q.eqn)
		d.EnterFatal(t, 0xc, "async EQ overrun")
		return
	}
	d.fx.compEQFrozen = true
	d.warn(t, CtrCompEQOverrun, "completion EQ %d overrun: frozen, no more completion events", q.eqn)
}

// cqErrSyndrome is the syndrome of CQ cqn's CQ_ERROR EQE.
func (d *Device) cqErrSyndrome(cqn uint32) uint8 {
	if s, ok := d.fx.cqErr[cqn]; ok {
		return s
	}
	return mlx5.CQErrOverrun
}

// cqAccessError puts c in error because a CQE (or its record) could not
// be written or read: EQE 0x04 with syndrome 0x2 (access violation, PRM
// value [unconfirmed]) and, as for an overrun, its QPs to ERR.
func (d *Device) cqAccessError(t sim.Time, c *cq, qpn uint32, err error) {
	if c.err {
		return
	}
	if d.fx.cqErr == nil {
		d.fx.cqErr = map[uint32]uint8{}
	}
	d.fx.cqErr[c.cqn] = mlx5.CQErrAccessViolation
	c.err = true
	c.armed = false
	c.modTimer.Stop()
	d.warn(t, CtrCQErrorAccess, "CQ %d: CQE for QP %#x could not be written (%v): CQ in error", c.cqn, qpn, err)
	if d.spec.Faults.DMAErrorFatal && errors.Is(err, dma.ErrPCIe) {
		d.EnterFatal(t, 0x8, "PCIe error on a CQE write")
		return
	}
	d.asyncEvent(t, mlx5.EventCQErr, c.cqn)
	d.eng.At(t, cqErrorEvent{d: d, c: c})
}

// vendorFor is the vendor syndrome of an error CQE with syndrome s.
func vendorFor(s mlx5.Syndrome) uint8 {
	switch s {
	case mlx5.SyndTransportRetry:
		return VendorRetryExceeded
	case mlx5.SyndWRFlush:
		return VendorFlush
	case mlx5.SyndRemoteAccess:
		return VendorRemoteAccess
	case mlx5.SyndRemoteOp:
		return VendorRemoteOp
	}
	return 0
}

// flushVendor is the vendor syndrome of a WR_FLUSH_ERR CQE now: 5 for the
// software flush after a device fatal error, else 0xf9.
func (d *Device) flushVendor() uint8 {
	if d.fx.fatal {
		return VendorSWFlush
	}
	return VendorFlush
}

// wqeVendor is the vendor syndrome of w's error (or flush) CQE.
func (d *Device) wqeVendor(w *swqe, s mlx5.Syndrome) uint8 {
	switch {
	case s == mlx5.SyndWRFlush:
		return d.flushVendor()
	case w.errVendor != 0:
		return w.errVendor
	}
	return vendorFor(s)
}

// failDMA fails w after a DMA error err: LOCAL_PROT_ERR with vendor 0x51
// for a PCIe/IOMMU error (faults.md §2.5), or a device fatal error with
// FaultSpec.DMAErrorFatal; otherwise the error's own syndrome.
func (r *requester) failDMA(t sim.Time, w *swqe, err error) {
	if r.q.d.dmaFatal(t, err) {
		return
	}
	w.errVendor = pcieVendor(err)
	r.fail(t, w, dma.Syndrome(err))
}

// dmaFatal enters the device fatal state (health syndrome 0x8, as AER
// ends it) for a PCIe/IOMMU error on a DMA access when
// FaultSpec.DMAErrorFatal is set, and reports whether it did.
func (d *Device) dmaFatal(t sim.Time, err error) bool {
	if d.spec.Faults.DMAErrorFatal && errors.Is(err, dma.ErrPCIe) {
		d.EnterFatal(t, 0x8, "PCIe error on a DMA access")
		return true
	}
	return false
}

// pcieVendor is the vendor syndrome of an error CQE caused by DMA error
// err: 0x51 for a PCIe/IOMMU error, else 0 (by syndrome).
func pcieVendor(err error) uint8 {
	if errors.Is(err, dma.ErrPCIe) {
		return VendorPCIe
	}
	return 0
}

// recvVendor is the vendor syndrome of a receive completing LOC_PROT_ERR
// because its buffer could not be written: 0x51 for a PCIe error, else
// (its lkey, the MR's bounds or access) 0x32, as a ConnectX reported a
// bad lkey on an SRQ receive (faults.md §1.2, ucx#9167; the QP's own RQ
// is taken to check the key the same way).
func recvVendor(err error) uint8 {
	if errors.Is(err, dma.ErrPCIe) {
		return VendorPCIe
	}
	return VendorRecvLKey
}

// ModifyCQOverrunIgnore sets or clears a CQ's overrun-ignore bit
// (MODIFY_CQ with MLX5_CQ_MODIFY_OVERRUN; cqc.oi): a full CQ is then
// written over rather than put in error.
func (d *Device) ModifyCQOverrunIgnore(cqn uint32, on bool) error {
	if err := d.fatalCmd("MODIFY_CQ"); err != nil {
		return err
	}
	c := d.cqs[cqn]
	if c == nil {
		return cmdErr("MODIFY_CQ", mlx5.StatusBadResource, "CQ %d does not exist", cqn)
	}
	c.oi = on
	return nil
}

// dbrTarget labels the next DMA access as a doorbell-record read, for
// fault rules matching target "dbr".
func (d *Device) dbrTarget() { d.dma.SetTarget(fault.KindDBR) }
