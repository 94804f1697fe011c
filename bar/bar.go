package bar

import (
	"encoding/binary"
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

// BAR0 is the device's BAR0 behind the CPU's write-combining buffer. It
// implements pcie.MMIO for the provider: the host's thread calls it, each
// store happens at eng.Now() and then charges its CPU cost with
// eng.Advance, so device events run as the host's time moves.
//
// Stores to UAR pages are write-combined (unless Config.UARNonCached):
// 64-byte lines with byte-valid masks, emitted (a) as soon as a line is
// full, (b) on Flush (sfence) — every partial line, one MWr per contiguous
// run of valid bytes, (c) when a store needs a new line and all WCLines are
// busy (the oldest is evicted), (d) by themselves WCDrain after the line's
// first store (counted wc_late_drain: a missing fence shows as a late
// doorbell). Any uncached access — an init-segment store, a Load32 —
// drains the WC buffers first, as on x86 (Intel SDM §11.3.1). Each emitted
// write crosses the link (pcie.Link.HostWrite) and is dispatched through
// the register table when it arrives.
//
// Not safe for concurrent use. The store / flush / dispatch path does not
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
	bfBuf        int     // bytes per BlueFlame buffer (BFRegSize/2)
	bf           []bfAsm // NumUARs × 8
	pool         *mwr    // free in-flight writes

	// CPU side
	wc     []wcLine
	wcSeq  uint64
	posts  []post // NumUARs × 8, CPU-side view of each BF buffer / doorbell slot
	active []int  // indexes of posts with stores not yet fenced

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
		bf:    make([]bfAsm, cfg.NumUARs*bufsPerUAR),
		wc:    make([]wcLine, cfg.WCLines),
		posts: make([]post, cfg.NumUARs*bufsPerUAR), active: make([]int, 0, cfg.NumUARs*bufsPerUAR)}
	b.ctl, _ = h.(ControlHandler)
	b.initIdx = b.initReg("initializing")
	b.initTimer.b = b
	for i := range b.bf {
		b.bf[i].b = b
	}
	for i := range b.wc {
		b.wc[i].b = b
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

// emit sends one MWr of p at BAR0 offset off now and schedules its arrival.
func (b *BAR0) emit(now sim.Time, off uint64, p []byte) {
	if !b.fx.bypass && (b.fx.in != nil || b.fx.linkLost) && b.emitFault(now, off, p) {
		return
	}
	if b.fx.obs != nil {
		b.observe(now, off, p)
	}
	arrive, s := b.link.HostWrite(now, off, len(p))
	arrive = arrive.Add(b.fx.extra)

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
		qpn, flow := b.flowAt(off)
		b.rec.Stage(b.node, "pcie", "pcie_tlp", now, arrive, s.WireBytes, s.TLPs(), qpn, flow)
	}
}

// ---- CPU side: pcie.MMIO ----

var _ pcie.MMIO = (*BAR0)(nil)

// Store64 is one 64-bit store of v's little-endian image at off.
func (b *BAR0) Store64(off uint64, v uint64) {
	var p [8]byte
	binary.LittleEndian.PutUint64(p[:], v)
	b.store(off, p[:])
}

var _ pcie.LineStorer = (*BAR0)(nil)

// StoreLines is a BlueFlame copy in one call (pcie.LineStorer): Flush,
// the 8-byte stores of a then b in ascending order, Flush — the same
// effect, store by store, as the separate calls.
func (b *BAR0) StoreLines(off uint64, x, y []byte) {
	b.Flush()
	for _, p := range [2][]byte{x, y} {
		for i := 0; i+8 <= len(p); i += 8 {
			b.store(off, p[i:i+8])
			off += 8
		}
	}
	b.Flush()
}

// Store32 is one 32-bit store of v's little-endian image at off.
func (b *BAR0) Store32(off uint64, v uint32) {
	var p [4]byte
	binary.LittleEndian.PutUint32(p[:], v)
	b.store(off, p[:])
}

func (b *BAR0) isUAR(off uint64) bool {
	pg := off / mlx5.UARPageSize
	return pg >= uint64(b.cfg.FirstUAR) && pg-uint64(b.cfg.FirstUAR) < uint64(b.cfg.NumUARs)
}

func (b *BAR0) store(off uint64, p []byte) {
	now := b.eng.Now()
	if off%uint64(len(p)) != 0 {
		b.ctr.Inc(CtrBarMisalignedStore)
		b.rec.Warnf(b.node, now, "bar", CtrBarMisalignedStore.String(), "%d-byte store at BAR0 %#x is not naturally aligned; dropped", len(p), off)
		b.eng.Advance(b.cfg.StoreCost)
		return
	}
	if b.isUAR(off) && !b.cfg.UARNonCached {
		b.track(now, off, p)
		b.wcStore(now, off, p)
		b.eng.Advance(b.cfg.StoreCost)
		return
	}
	b.flushWC(now, "uc")
	b.track(now, off, p)
	b.emit(now, off, p)
	b.closePosts() // an uncached store is complete once issued
	b.eng.Advance(b.cfg.UCStoreCost)
}

// Load32 is an uncached 32-bit read. It drains the WC buffers, sends an MRd
// (pcie.Link.HostRead), runs the device up to the request's arrival so that
// earlier posted writes land first (PCIe ordering), samples the register
// there, and returns when the completion is back at the CPU. The result is
// the register's memory image (big-endian register, little-endian load).
func (b *BAR0) Load32(off uint64) uint32 {
	now := b.eng.Now()
	b.flushWC(now, "uc")
	b.closePosts()
	arrive, done, s := b.link.HostRead(now, off, 4)
	b.ctr.Add(CtrPcieMmioTlps, uint64(s.TLPs()))
	b.ctr.Add(CtrPcieMmioBytes, uint64(s.WireBytes))
	b.eng.RunUntil(arrive)
	var v uint32
	if off%4 != 0 {
		b.bad(arrive, CtrBarBadWidth, off, 4, false)
		v = unknownValue
	} else {
		v = bits.ReverseBytes32(b.dispatch(arrive, off, 4, nil))
	}
	v = b.loadFault(arrive, off, v)
	b.eng.RunUntil(done)
	return v
}

// Flush is sfence: every partial WC line goes out now, and the CPU-side
// doorbell / BlueFlame posts are complete.
func (b *BAR0) Flush() {
	b.flushWC(b.eng.Now(), "fence")
	b.closePosts()
}

// ---- write-combining buffer ----

// wcLine is one CPU write-combining buffer.
type wcLine struct {
	b      *BAR0
	active bool
	addr   uint64 // 64-byte aligned BAR0 offset
	mask   uint64 // valid bytes
	alloc  sim.Time
	seq    uint64
	data   [64]byte
}

// Fire is the line's self-drain timer (rule d). A line re-allocated since
// the timer was set has a later deadline and is left alone.
func (l *wcLine) Fire(now sim.Time) {
	if l.active && now >= l.alloc.Add(l.b.cfg.WCDrain) {
		l.b.ctr.Inc(CtrWcLateDrain)
		l.b.rec.Warnf(l.b.node, now, "bar", CtrWcLateDrain.String(), "WC line at BAR0 %#x drained %v after its first store without a fence", l.addr, l.b.cfg.WCDrain)
		l.b.emitLine(now, l, "drain")
	}
}

func byteMask(o uint64, n int) uint64 {
	if n >= 64 {
		return ^uint64(0)
	}
	return (uint64(1)<<uint(n) - 1) << o
}

func (b *BAR0) wcStore(now sim.Time, off uint64, p []byte) {
	la, o := off&^63, off&63
	var l *wcLine
	for i := range b.wc {
		if b.wc[i].active && b.wc[i].addr == la {
			l = &b.wc[i]
			break
		}
	}
	if l == nil {
		l = b.wcAlloc(now)
		l.active, l.addr, l.mask, l.alloc, l.seq = true, la, 0, now, b.wcSeq
		b.wcSeq++
		if b.cfg.WCDrain > 0 {
			b.eng.At(now.Add(b.cfg.WCDrain), l)
		}
	}
	copy(l.data[o:], p)
	l.mask |= byteMask(o, len(p))
	if l.mask == ^uint64(0) {
		b.emitLine(now, l, "full")
	}
}

// wcAlloc returns a free line, evicting the oldest when all are busy.
func (b *BAR0) wcAlloc(now sim.Time) *wcLine {
	var old *wcLine
	for i := range b.wc {
		l := &b.wc[i]
		if !l.active {
			return l
		}
		if old == nil || l.seq < old.seq {
			old = l
		}
	}
	b.ctr.Inc(CtrWcEvict)
	b.emitLine(now, old, "evict")
	return old
}

// flushWC emits every active line, oldest first.
func (b *BAR0) flushWC(now sim.Time, reason string) {
	for {
		var old *wcLine
		for i := range b.wc {
			if l := &b.wc[i]; l.active && (old == nil || l.seq < old.seq) {
				old = l
			}
		}
		if old == nil {
			return
		}
		b.emitLine(now, old, reason)
	}
}

// emitLine sends a line's valid bytes, one MWr per contiguous run, and
// frees it. The wc_flush stage spans the line's stay in the buffer, from
// its first store to its emission; Detail says why it left (full, fence,
// evict, drain, uc).
func (b *BAR0) emitLine(now sim.Time, l *wcLine, reason string) {
	if b.fx.in != nil && b.wcFault(now, l, reason) {
		return
	}
	b.emitRuns(now, l.addr, l.mask, &l.data)
	if b.rec.On() {
		qpn, flow := b.flowAt(l.addr)
		b.rec.Record(trace.Event{Name: "wc_flush", Component: "bar", Node: b.node, Start: l.alloc, End: now,
			Bytes: bits.OnesCount64(l.mask), QPN: qpn, Flow: flow, PSN: trace.NoPSN, Detail: reason})
	}
	l.active = false
	if len(b.fx.pend) > 0 {
		b.releaseReordered(now)
	}
}

// ---- CPU-side posts (trace stages bf_mmio / doorbell_mmio) ----

// post is the CPU's stores into one BF buffer or doorbell slot since the
// last fence: the "bf_mmio" or "doorbell_mmio" stage.
type post struct {
	active   bool
	first    sim.Time
	last     sim.Time
	bytes    int
	end      uint64 // highest byte offset stored + 1
	ctrl     [8]byte
	ctrlMask uint8
	qpn      uint32
	flow     uint64
}

// slot maps a BAR0 offset in a bfreg area to its post index and the offset
// inside the BF buffer (or doorbell slot).
func (b *BAR0) slot(off uint64) (idx int, rel uint64, ok bool) {
	if !b.isUAR(off) {
		return 0, 0, false
	}
	r := off % mlx5.UARPageSize
	if r < mlx5.UARBFRegOffset {
		return 0, 0, false
	}
	r -= mlx5.UARBFRegOffset
	base := int(off/mlx5.UARPageSize-uint64(b.cfg.FirstUAR)) * bufsPerUAR
	if b.cfg.BFRegSize == 0 {
		if r >= bufsPerUAR*dbSlot {
			return 0, 0, false
		}
		return base + int(r/dbSlot), r % dbSlot, true
	}
	if r >= uint64(4*b.cfg.BFRegSize) {
		return 0, 0, false
	}
	return base + int(r/uint64(b.bfBuf)), r % uint64(b.bfBuf), true
}

func (b *BAR0) track(now sim.Time, off uint64, p []byte) {
	idx, rel, ok := b.slot(off)
	if !ok {
		return
	}
	ps := &b.posts[idx]
	if ps.active && rel == 0 {
		b.closePost(idx) // a new WQE starts at offset 0
	}
	if !ps.active {
		*ps = post{active: true, first: now}
		b.active = append(b.active, idx)
	}
	ps.last = now.Add(b.cfg.StoreCost)
	ps.bytes += len(p)
	ps.end = max(ps.end, rel+uint64(len(p)))
	if rel < 8 {
		n := copy(ps.ctrl[rel:], p)
		ps.ctrlMask |= uint8(1<<uint(n)-1) << rel
		if ps.ctrlMask == 0xff {
			ps.qpn = binary.BigEndian.Uint32(ps.ctrl[4:8]) >> 8
			ps.flow = uint64(ps.qpn)<<16 | uint64(binary.BigEndian.Uint16(ps.ctrl[1:3]))
		}
	}
}

func (b *BAR0) closePost(idx int) {
	ps := &b.posts[idx]
	if !ps.active {
		return
	}
	ps.active = false
	for i, v := range b.active {
		if v == idx {
			b.active[i] = b.active[len(b.active)-1]
			b.active = b.active[:len(b.active)-1]
			break
		}
	}
	name := "bf_mmio"
	if ps.bytes == 8 && ps.end == 8 {
		name = "doorbell_mmio"
	}
	b.rec.Stage(b.node, "bar", name, ps.first, ps.last, ps.bytes, 0, ps.qpn, ps.flow)
}

func (b *BAR0) closePosts() {
	for len(b.active) > 0 {
		b.closePost(b.active[len(b.active)-1])
	}
}

// flowAt is the (qpn, flow) of the last post into the BF buffer at off.
func (b *BAR0) flowAt(off uint64) (uint32, uint64) {
	if idx, _, ok := b.slot(off); ok {
		return b.posts[idx].qpn, b.posts[idx].flow
	}
	return 0, 0
}
