package bar

import (
	"fmt"
	"github.com/softnic/softnic/env"
	"math/bits"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/pcie"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/trace"
)

// Handler receives the datapath events BAR0 decodes; the device implements
// it. Calls happen at the virtual time the TLP reaches the device.
type Handler interface {
	// Doorbell is an 8-byte send doorbell: the first 8 bytes of the last
	// posted WQE's ctrl segment (opmod_idx_opcode, qpn_ds), big-endian.
	// bfreg is the bfreg index in the UAR page (0-3; 0-7 without BlueFlame).
	Doorbell(t sim.Time, uar uint32, bfreg int, ctrl [8]byte)
	// BlueFlame is a complete WQE written through a BF buffer:
	// align(ds×16, 64) bytes. wqe is valid only during the call.
	BlueFlame(t sim.Time, uar uint32, bfreg int, wqe []byte)
	// CQArm is the 8-byte CQ arm doorbell at UAR+0x20 (mlx5.ParseCQArm).
	CQArm(t sim.Time, uar uint32, db [8]byte)
}

// ControlHandler is optionally implemented by a Handler that also wants the
// command-interface doorbell and EQ doorbells; without it they are only
// counted (bar_cmd_dbell, bar_eq_doorbell).
type ControlHandler interface {
	// CmdDoorbell is a write to cmd_dbell: a bitmap of command slots.
	CmdDoorbell(t sim.Time, slots uint32)
	// EQDoorbell is a 4-byte write to UAR+0x40 (arm=true) or UAR+0x48.
	EQDoorbell(t sim.Time, uar uint32, arm bool, db [4]byte)
}

// BAR0 is the device's BAR0: the device end of the host's MMIO. It
// implements pcie.BARPort (and pcie.FlowPort): a posted write leaving the
// CPU crosses the link (pcie.Link.HostWrite, with fault.PCIeTLP and the
// checker's BFObserver on the way) and is dispatched through the register
// table when it arrives; a read runs the device to the MRd's arrival and
// samples the register there. The CPU in front of it — write combining,
// store costs, the bf_mmio / doorbell_mmio stages — is package host.
//
// Not safe for concurrent use. The write / dispatch path does not
// allocate in steady state.
type BAR0 struct {
	eng  *sim.Engine
	link *pcie.Link
	h    Handler
	ctl  ControlHandler
	cfg  Config
	rec  *trace.Recorder
	node int
	ctr  *trace.Counters

	// device side
	vals         []uint32 // init-segment register values, parallel to initRegs
	uarRegs      []Reg
	acc          Acc
	nicInterface uint8
	initIdx      int
	initAt       sim.Time
	initTimer    initTimer
	bfBuf        int      // bytes per BlueFlame buffer (BFRegSize/2)
	bf           []bfAsm  // NumUARs × 8
	pool         *mwr     // free in-flight writes
	lastArrive   sim.Time // when the last posted write issued so far arrives

	fx faultState // fault injection, device fatal, BF observer (faults.go)
}

// New returns BAR0 for cfg, attached to link, delivering to h, in the
// environment ev (a nil ev.Ctr gets a private counter set). New calls
// Reset. It panics on an invalid cfg (check user configs with Validate).
func New(ev env.Env, link *pcie.Link, h Handler, cfg Config) *BAR0 {
	if err := cfg.Validate(); err != nil {
		panic(fmt.Sprintf("bar.New: %v", err))
	}
	cfg = cfg.withDefaults()
	ev = ev.WithDefaults()
	eng, rec, node, ctr := ev.Eng, ev.Rec, ev.Node, ev.Ctr
	if h == nil {
		h = nopHandler{}
	}
	b := &BAR0{eng: eng, link: link, h: h, cfg: cfg, rec: rec, node: node, ctr: ctr,
		vals: make([]uint32, len(initRegs)), uarRegs: buildUARRegs(&cfg), bfBuf: cfg.BFRegSize / 2,
		bf: make([]bfAsm, cfg.NumUARs*bufsPerUAR)}
	b.ctl, _ = h.(ControlHandler)
	b.initIdx = b.initReg("initializing")
	b.initTimer.b = b
	for i := range b.bf {
		b.bf[i].b = b
	}
	b.Reset()
	return b
}

type nopHandler struct{}

func (nopHandler) Doorbell(sim.Time, uint32, int, [8]byte) {}
func (nopHandler) BlueFlame(sim.Time, uint32, int, []byte) {}
func (nopHandler) CQArm(sim.Time, uint32, [8]byte)         {}

// Config returns the configuration in use (defaults filled in).
func (b *BAR0) Config() Config { return b.cfg }

// Counters returns the counter set BAR0 counts into.
func (b *BAR0) Counters() *trace.Counters { return b.ctr }

// UAROffset is the BAR0 offset of UAR page uar.
func (b *BAR0) UAROffset(uar uint32) uint64 { return uint64(uar) * mlx5.UARPageSize }

// BFRegOffset is the BAR0 offset of bfreg k of UAR page uar (the doorbell /
// BlueFlame address a QP using it writes to, buffer 0).
func (b *BAR0) BFRegOffset(uar uint32, k int) uint64 {
	stride := uint64(b.cfg.BFRegSize)
	if stride == 0 {
		stride = dbSlot
	}
	return b.UAROffset(uar) + mlx5.UARBFRegOffset + uint64(k)*stride
}

// Reset is a device reset: registers return to their reset values, the
// `initializing` bit is set and clears InitDelay later, partial BlueFlame
// assemblies are dropped. (The CPU's WC buffer is not the device's and
// keeps its contents.)
func (b *BAR0) Reset() {
	for i := range initRegs {
		b.vals[i] = initRegs[i].Reset
	}
	b.nicInterface = 0
	for i := range b.bf {
		b.bf[i].pending = false
	}
	b.initAt = b.eng.Now().Add(b.cfg.InitDelay)
	b.eng.At(b.initAt, &b.initTimer)
}

// initTimer clears `initializing` when the newest reset's delay is over.
type initTimer struct{ b *BAR0 }

func (it *initTimer) Fire(now sim.Time) {
	if b := it.b; now >= b.initAt {
		b.vals[b.initIdx] &^= mlx5.InitializingBit
	}
}

// mwr is one MMIO posted write in flight from the CPU to the device.
type mwr struct {
	b    *BAR0
	off  uint64
	n    int
	data [64]byte
	next *mwr
}

// Fire delivers the write to the register table.
func (m *mwr) Fire(now sim.Time) {
	b := m.b
	b.dispatch(now, m.off, m.n, m.data[:m.n])
	m.next, b.pool = b.pool, m
}

var _ pcie.FlowPort = (*BAR0)(nil)

// PostedWrite is one MWr of p at off leaving the CPU at t (pcie.BARPort),
// with no QP / flow labels.
func (b *BAR0) PostedWrite(t sim.Time, off uint64, p []byte) { b.emit(t, off, p, 0, 0) }

// PostedWriteFlow is PostedWrite with the host's labels of the write
// (pcie.FlowPort): they name the pcie_tlp stage and the fault.PCIeTLP
// event.
func (b *BAR0) PostedWriteFlow(t sim.Time, off uint64, p []byte, qpn uint32, flow uint64) {
	b.emit(t, off, p, qpn, flow)
}

// emit sends one MWr of p at BAR0 offset off now and schedules its arrival.
func (b *BAR0) emit(now sim.Time, off uint64, p []byte, qpn uint32, flow uint64) {
	if !b.fx.bypass && (b.fx.in != nil || b.fx.linkLost) && b.emitFault(now, off, p, qpn, flow) {
		return
	}
	if b.fx.obs != nil {
		b.observe(now, off, p)
	}
	arrive, s := b.link.HostWrite(now, off, len(p))
	arrive = arrive.AddSat(b.fx.extra)
	b.lastArrive = max(b.lastArrive, arrive)

	m := b.pool
	if m == nil {
		m = &mwr{b: b}
	} else {
		b.pool = m.next
	}
	m.off, m.n = off, copy(m.data[:], p)
	b.eng.At(arrive, m)
	b.ctr.Add(CtrPcieMmioTlps, uint64(s.TLPs()))
	b.ctr.Add(CtrPcieMmioBytes, uint64(s.WireBytes))
	if b.rec.On() {
		b.rec.Stage(b.node, "pcie", "pcie_tlp", now, arrive, s.WireBytes, s.TLPs(), qpn, flow)
	}
}

// LandPosted runs the engine until every MMIO posted write issued so far
// has been delivered. The device's command interface calls it before a
// command that changes a QP: the host's command is itself a posted write
// (the command doorbell) and does not pass the doorbells the CPU wrote
// before it (PCIe ordering), while the Go control path reaches the device
// at once. Without it a doorbell rung just before MODIFY_QP to RESET
// arrived after the QP had been reconnected, and the device fetched the
// old incarnation's WQEs from the ring as if newly posted.
func (b *BAR0) LandPosted() {
	if b.lastArrive > b.eng.Now() {
		b.eng.RunUntil(b.lastArrive)
	}
}

// Read32 is a 4-byte MRd issued at t (pcie.BARPort): it crosses the link
// (pcie.Link.HostRead), the device runs up to the request's arrival so
// that earlier posted writes land first (PCIe ordering), the register is
// sampled there, and the completion is back at the CPU at done. v is the
// register's memory image (big-endian register, little-endian load).
func (b *BAR0) Read32(t sim.Time, off uint64) (v uint32, done sim.Time) {
	arrive, done, s := b.link.HostRead(t, off, 4)
	b.ctr.Add(CtrPcieMmioTlps, uint64(s.TLPs()))
	b.ctr.Add(CtrPcieMmioBytes, uint64(s.WireBytes))
	b.eng.RunUntil(arrive)
	if off%4 != 0 {
		b.bad(arrive, CtrBarBadWidth, off, 4, false)
		v = unknownValue
	} else {
		v = bits.ReverseBytes32(b.dispatch(arrive, off, 4, nil))
	}
	v, late := b.loadFault(arrive, off, v)
	return v, done.AddSat(late)
}

func (b *BAR0) isUAR(off uint64) bool {
	pg := off / mlx5.UARPageSize
	return pg >= uint64(b.cfg.FirstUAR) && pg-uint64(b.cfg.FirstUAR) < uint64(b.cfg.NumUARs)
}
