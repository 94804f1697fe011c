package device

import (
	"github.com/softnic/softnic/fault"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/sim"
)

// Event queues (mlx5.md §6.6-6.8). The device writes 64-byte EQEs into
// rings in host memory with its DMA engine, owner bit last, and raises an
// MSI-X interrupt when the EQ is armed; the EQ is then disarmed until its
// consumer writes the EQ doorbell (UAR+0x40: update CI and arm).
//
// The consumer of the EQs is the kernel's interrupt handler (mlx5_core's
// mlx5_eq_int, then mlx5_ib and uverbs): host software, which in this
// emulator is the device's control side. It reads the EQEs from host
// memory, hands completion events to the CQ's completion channel and
// asynchronous events to the user context's async queue, then updates the
// consumer index and re-arms the EQ with one uncached store. So a trace
// shows cq_arm → cqe_write → eqe_write → msix → event.
//
// Two EQs, as mlx5_core builds them at driver load: the async EQ (event
// types of MLX5_ASYNC_EVENT_MASK) and one completion EQ (num_comp_vectors
// = 1). Their rings are reserved at the top of host memory when the device
// is created, before any application allocates, so that application
// addresses do not move.

// EQ numbers: mlx5_core creates the command EQ first, then the async EQ,
// the page-request EQ and the completion EQs (the numbers are an
// assumption; firmware assigns them).
const (
	asyncEQN = 1
	compEQN  = 3
)

// msiAddr is the MSI-X message address the interrupt MWr goes to (the
// x86 LAPIC window; the payload is the vector's data, 4 bytes).
const msiAddr = 0xfee00000

// DefaultEventSpec is the default event timing and queue sizing.
func DefaultEventSpec() EventSpec {
	return EventSpec{IRQLatency: sim.Microsecond, HandlerPerEQE: 100 * sim.Nanosecond, EQEntries: 256, QueueDepth: 1024}
}

// EventSpec shapes the event path. No public source gives the numbers: the
// defaults are assumptions (an interrupt handler running about 1 µs after
// its MSI-X write, ~100 ns of handler work per EQE) and sizes smaller
// than mlx5_core's (1024-entry completion EQs, 4096-entry async EQ) to keep
// host memory small.
type EventSpec struct {
	// IRQLatency is the time from the MSI-X write reaching the host to the
	// interrupt handler running (interrupt delivery and entry).
	IRQLatency sim.Duration `json:"irq_latency_ps"`
	// HandlerPerEQE is the handler's work for one EQE: read it, dispatch
	// it, queue the event and wake its reader.
	HandlerPerEQE sim.Duration `json:"handler_per_eqe_ps"`
	// EQEntries is the size of each EQ (a power of two, at least 8).
	EQEntries int `json:"eq_entries"`
	// QueueDepth bounds the events queued on one completion channel and on
	// the async queue; beyond it an event is dropped and counted.
	QueueDepth int `json:"event_queue_depth"`
}

func (s EventSpec) withDefaults() EventSpec {
	def := DefaultEventSpec()
	if s.EQEntries < 8 || s.EQEntries&(s.EQEntries-1) != 0 {
		s.EQEntries = def.EQEntries
	}
	if s.QueueDepth <= 0 {
		s.QueueDepth = def.QueueDepth
	}
	return s
}

// eq is one event queue: the device's producer side and the kernel
// handler's consumer side.
type eq struct {
	d    *Device
	eqn  uint8
	uar  uint32 // UAR page of its doorbell (the kernel's own)
	buf  uint64 // 0: no host memory could be reserved; events are dispatched directly
	nent uint32

	// device side
	pi     uint32   // EQEs written
	lpi    uint32   // EQEs landed in host memory
	landBy sim.Time // when the last EQE written lands
	ci     uint32   // consumer index from the last EQ doorbell
	armed  bool
	irq    bool // an interrupt is on its way to the handler

	// kernel side
	kci     uint32 // the handler's consumer index
	handler eqHandler
	rearm   eqRearm
}

// initEQs reserves the EQ rings at the top of host memory (the region is
// normally fresh: everything below the rings is handed back at once) and
// initialises every EQE's owner bit to 1, as mlx5_core's init_eq_buf does.
func (d *Device) initEQs() {
	sp := d.spec.Events.withDefaults()
	d.ev.spec = sp
	d.ev.kernelUAR = d.spec.BAR.FirstUAR + uint32(max(d.spec.BAR.NumUARs, 1))
	ringBytes := sp.EQEntries * mlx5.EQESize
	for i, q := range []*eq{&d.ev.async, &d.ev.comp} {
		q.d, q.uar, q.nent = d, d.ev.kernelUAR, uint32(sp.EQEntries)
		q.eqn = [...]uint8{asyncEQN, compEQN}[i]
		q.handler.q, q.rearm.q = q, q
		q.armed = true // mlx5_core arms every EQ once it is created
	}
	mem := d.mem
	for _, q := range []*eq{&d.ev.async, &d.ev.comp} {
		addr, err := mem.AllocTop(ringBytes, 4096) // out of the application's way
		if err != nil {
			d.inc(CtrEQNoMemory)
			continue
		}
		ring, err := mem.Slice(addr, ringBytes)
		if err != nil {
			d.inc(CtrEQNoMemory)
			continue
		}
		for k := 0; k < sp.EQEntries; k++ {
			ring[k*mlx5.EQESize+mlx5.EQEOffOwner] = mlx5.EQEOwnerInit
		}
		q.buf = addr
	}
}

// eqeLanding is an EQE on its way to host memory (see cqeLanding).
type eqeLanding struct {
	q    *eq
	addr uint64
	flow uint64
	buf  [mlx5.EQESize]byte
}

func (l *eqeLanding) Fire(now sim.Time) {
	q := l.q
	d := q.d
	if err := d.mem.Write(l.addr, l.buf[:]); err != nil {
		d.warn(now, CtrEQEWriteError, "EQ %d EQE landing at %#x: %v", q.eqn, l.addr, err)
	}
	q.lpi++
	flow := l.flow
	l.q = nil
	d.ev.eqeFree = append(d.ev.eqeFree, l)
	if q.armed && !q.irq {
		d.interrupt(now, q, flow)
	}
}

// writeEQE DMA-writes one EQE at the EQ's producer index. An EQ whose
// consumer has fallen a whole ring behind overruns: the EQE is dropped
// and counted, and the EQ overruns (eqOverrun: the async EQ's is a fatal
// health syndrome, 0xc; a completion EQ freezes). The EQE lands no
// earlier than notBefore: a completion EQE is written behind its CQ's
// CQEs and a posted write does not pass the posted writes before it, so a
// CQE that lands late (fault point cq, delay) holds its event back too.
func (d *Device) writeEQE(t sim.Time, q *eq, f *mlx5.EQEFields, qpn uint32, flow uint64, notBefore sim.Time) {
	if q.buf == 0 {
		// No EQ memory: hand the event straight to the dispatcher.
		d.dispatch(t, t, f, flow)
		return
	}
	var delay sim.Duration
	if d.fx.in != nil || d.fx.fatal || d.fx.compEQFrozen {
		var drop bool
		if delay, drop = d.eqFault(t, q, f, qpn); drop {
			return
		}
	}
	if q.pi-q.ci >= q.nent {
		d.warn(t, CtrEQOverrun, "EQ %d overrun: producer %d, consumer %d, %d entries; %v EQE dropped", q.eqn, q.pi, q.ci, q.nent, f.Type)
		d.eqOverrun(t, q)
		return
	}
	t = t.Add(d.cyc(d.spec.Core.CQECycles))
	f.Owner = mlx5.EQEOwnerBit(q.pi, q.nent)
	addr := q.buf + uint64(q.pi&(q.nent-1))*mlx5.EQESize
	d.dma.SetTarget(fault.KindEQE)
	done, st, err := d.dma.TimeWrite(t, addr, mlx5.EQESize)
	if err != nil {
		d.warn(t, CtrEQEWriteError, "EQ %d EQE write at %#x: %v", q.eqn, addr, err)
		return
	}
	// EQEs of one EQ land in the order written (a late one holds those
	// behind it): the handler stops at the first entry it does not own,
	// so an EQE that overtook a late one would only re-interrupt.
	done = max(done.AddSat(delay), notBefore, q.landBy)
	q.landBy = done
	var l *eqeLanding
	if k := len(d.ev.eqeFree); k > 0 {
		l = d.ev.eqeFree[k-1]
		d.ev.eqeFree = d.ev.eqeFree[:k-1]
	} else {
		l = &eqeLanding{}
	}
	l.q, l.addr, l.flow = q, addr, flow
	mlx5.EQE(l.buf[:]).Encode(f)
	d.eng.At(done, l)
	q.pi++
	d.inc(CtrEQEs)
	d.rec.Stage(d.node, "device", "eqe_write", t, done, mlx5.EQESize, st.TLPs(), qpn, flow)
}

// interrupt sends the EQ's MSI-X message (a 4-byte posted write, ordered
// behind the EQEs) and disarms the EQ; the handler runs IRQLatency after
// the write reaches the host.
func (d *Device) interrupt(t sim.Time, q *eq, flow uint64) {
	q.armed, q.irq = false, true
	done, st := d.link.DeviceWrite(t, msiAddr, 4)
	d.inc(CtrInterrupts)
	d.rec.Stage(d.node, "device", "msix", t, done, 4, st.TLPs(), 0, flow)
	d.eng.At(done.Add(d.ev.spec.IRQLatency), &q.handler)
}

// eqHandler is the kernel's interrupt handler for one EQ (mlx5_eq_int):
// every EQE software owns is read and dispatched, then the consumer index
// is written back with the EQ arm doorbell.
type eqHandler struct{ q *eq }

func (h *eqHandler) Fire(now sim.Time) {
	q := h.q
	d := q.d
	t := now
	for n := uint32(0); n < q.nent; n++ {
		// The kernel's read of the ring, through the region rather than
		// a slice of it kept from initEQs: the device holds no slice of
		// host memory, so a region taken away (the daemon closes a
		// departed client's memory) makes a late read fail, never fault.
		var b [mlx5.EQESize]byte
		off := uint64(q.kci&(q.nent-1)) * mlx5.EQESize
		if d.mem.Read(q.buf+off, b[:]) != nil {
			break
		}
		e := mlx5.EQE(b[:])
		if !mlx5.EQEOwnedBySW(e, q.kci, q.nent) {
			break
		}
		// dma_rmb() after the owner check: in process the ring is written
		// from this goroutine, owner byte last.
		f := e.Fields()
		q.kci++
		start := t
		t = t.Add(d.ev.spec.HandlerPerEQE)
		d.dispatch(start, t, &f, d.dispatchFlow(&f))
	}
	// eq_update_ci(eq, 1): one uncached 4-byte store to the EQ's UAR.
	arrive, _ := d.link.HostWrite(t, uint64(q.uar)*mlx5.UARPageSize+mlx5.UAREQArmOffset, 4)
	q.rearm.ci = q.kci
	d.eng.At(arrive, &q.rearm)
}

// eqRearm is the handler's EQ doorbell arriving at the device.
type eqRearm struct {
	q  *eq
	ci uint32
}

func (r *eqRearm) Fire(now sim.Time) {
	q := r.q
	q.irq = false
	q.d.eqDoorbell(now, q, true, r.ci)
}

// EQDoorbell is called by BAR0 for a store to UAR+0x40 (arm) or UAR+0x48
// (bar.ControlHandler). The EQs belong to the kernel and their doorbell
// is on the kernel's UAR page, which no user context maps: a store on a
// user UAR page names an EQ of another owner and is ignored and counted.
func (d *Device) EQDoorbell(t sim.Time, uar uint32, arm bool, db [4]byte) {
	eqn, ci := mlx5.ParseEQDoorbell(db[:])
	var q *eq
	switch eqn {
	case asyncEQN:
		q = &d.ev.async
	case compEQN:
		q = &d.ev.comp
	default:
		d.warn(t, CtrEQDoorbellUnknownEQ, "EQ doorbell on UAR %d for EQ %d, which does not exist", uar, eqn)
		return
	}
	if uar != q.uar {
		d.warn(t, CtrEQDoorbellWrongUAR, "EQ doorbell for EQ %d on UAR %d; the EQ's doorbell is on UAR %d", eqn, uar, q.uar)
		return
	}
	d.eqDoorbell(t, q, arm, ci)
}

// CmdDoorbell is the command-interface doorbell (bar.ControlHandler). The
// mailbox command queue is not modelled (commands arrive through
// mlx5.Control): the ring is counted and ignored.
func (d *Device) CmdDoorbell(t sim.Time, slots uint32) {
	d.warn(t, CtrCmdDoorbellIgnored, "command doorbell %#x: the mailbox command interface is not modelled", slots)
}

// eqDoorbell updates the EQ's consumer index and, with arm, arms it: an
// armed EQ with EQEs beyond the consumer index interrupts at once.
func (d *Device) eqDoorbell(t sim.Time, q *eq, arm bool, ci24 uint32) {
	back := (q.lpi - ci24) & 0xffffff
	if back > q.nent {
		d.warn(t, CtrEQDoorbellBadCI, "EQ %d doorbell CI %#x is not within the %d EQEs written (producer %d)", q.eqn, ci24, q.nent, q.lpi)
		return
	}
	q.ci = q.lpi - back
	d.inc(CtrEQDoorbells)
	if !arm {
		return
	}
	q.armed = true
	if q.lpi != q.ci && !q.irq {
		d.interrupt(t, q, 0)
	}
}
