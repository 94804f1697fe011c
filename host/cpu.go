package host

import (
	"encoding/binary"
	"fmt"
	"math/bits"

	"github.com/softnic/softnic/fault"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/pcie"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/trace"
)

// Clock is the host's clock. In one process it is the simulation engine
// (*sim.Engine satisfies it): a host that spends d runs the device events
// due meanwhile. Across processes it would be a client-local clock.
type Clock interface {
	Now() sim.Time
	Advance(d sim.Duration)
	At(t sim.Time, h sim.Handler)
}

var _ Clock = (*sim.Engine)(nil)

// CPU is the host CPU one provider context runs on, in front of one
// device's BAR0 port. It implements pcie.MMIO for the provider: each store
// happens at the clock's Now and then charges its cost with Advance, so
// device events run as the host's time moves.
//
// Stores to UAR pages are write-combined (unless Config.UARNonCached):
// 64-byte lines with byte-valid masks, emitted (a) as soon as a line is
// full, (b) on Flush (sfence) — every partial line, one MWr per contiguous
// run of valid bytes, (c) when a store needs a new line and all WCLines are
// busy (the oldest is evicted), (d) by themselves WCDrain after the line's
// first store (counted wc_late_drain: a missing fence shows as a late
// doorbell). Any uncached access — an init-segment store, a Load32 —
// drains the WC buffers first, as on x86 (Intel SDM §11.3.1). Each emitted
// write is one port.PostedWrite (PostedWriteFlow when the port is a
// pcie.FlowPort, labelled with the post it belongs to).
//
// The CPU also records the CPU-side stages of a post: bf_mmio /
// doorbell_mmio (the stores into one BF buffer or doorbell slot until the
// fence) and wc_flush (a line's stay in the buffer). They keep the
// component name "bar" they have always had in traces.
//
// Not safe for concurrent use. The store / flush path does not allocate in
// steady state.
type CPU struct {
	clk   Clock
	rec   *trace.Recorder
	ctr   *trace.Counters
	node  int
	port  pcie.BARPort
	fport pcie.FlowPort // port as a FlowPort; nil if it is not one
	cfg   Config
	bfBuf int // bytes per BlueFlame buffer (BFRegSize/2)

	wc     []wcLine
	nwc    int // lines of wc active
	wcSeq  uint64
	posts  []post  // NumUARs × 8, the CPU-side view of each BF buffer / doorbell slot
	active []int   // indexes of posts with stores not yet fenced
	st     [8]byte // the bytes of the store being made (a field: no allocation through the port)

	fx faultState // WC-buffer fault injection (faults.go)
}

// bufsPerUAR is the number of BF buffers (or doorbell slots) of a UAR page.
const bufsPerUAR = 8

// dbSlot is the stride of the doorbell slots of a UAR without BlueFlame.
const dbSlot = 0x100

// New returns the CPU for cfg on clock clk, emitting to port; stages and
// warnings go to rec (nil: none), counters to ctr (nil: a private set),
// labelled with node. In one process clk is the device's engine and rec,
// ctr and node are the device's, so the host's events sit in the same
// trace and counter set as the device's (testbed.NewCPU does this). It
// panics on an invalid cfg (check user configs with Validate).
func New(clk Clock, rec *trace.Recorder, ctr *trace.Counters, node int, port pcie.BARPort, cfg Config) *CPU {
	if err := cfg.Validate(); err != nil {
		panic(fmt.Sprintf("host.New: %v", err))
	}
	cfg = cfg.withDefaults()
	if ctr == nil {
		ctr = &trace.Counters{}
	}
	c := &CPU{clk: clk, rec: rec, ctr: ctr, node: node, port: port, cfg: cfg, bfBuf: cfg.BFRegSize / 2,
		wc:    make([]wcLine, cfg.WCLines),
		posts: make([]post, cfg.NumUARs*bufsPerUAR), active: make([]int, 0, cfg.NumUARs*bufsPerUAR)}
	c.fport, _ = port.(pcie.FlowPort)
	for i := range c.wc {
		c.wc[i].c = c
	}
	return c
}

// Config returns the configuration in use (defaults filled in).
func (c *CPU) Config() Config { return c.cfg }

// Counters returns the counter set the CPU counts into.
func (c *CPU) Counters() *trace.Counters { return c.ctr }

// Work charges provider work on the host clock and records it as a
// "provider" stage: wqe_build (WQEBuild + PerWQEBB per 64-byte block of
// bytes), dbr_update (DBRUpdate), poll (PollCQE); any other stage
// (req_notify, get_cq_event) is recorded at no cost.
func (c *CPU) Work(stage string, qpn uint32, bytes int) {
	var cost sim.Duration
	switch stage {
	case "wqe_build":
		cost = c.cfg.WQEBuild + c.cfg.PerWQEBB*sim.Duration((bytes+mlx5.WQEBBSize-1)/mlx5.WQEBBSize)
	case "dbr_update":
		cost = c.cfg.DBRUpdate
	case "poll":
		cost = c.cfg.PollCQE
	}
	start := c.clk.Now()
	c.clk.Advance(cost)
	c.rec.Stage(c.node, "provider", stage, start, c.clk.Now(), bytes, 0, qpn, 0)
}

// ---- pcie.MMIO ----

var _ pcie.MMIO = (*CPU)(nil)

// Store64 is one 64-bit store of v's little-endian image at off.
func (c *CPU) Store64(off uint64, v uint64) {
	binary.LittleEndian.PutUint64(c.st[:], v)
	c.store(off, c.st[:8])
}

var _ pcie.LineStorer = (*CPU)(nil)

// StoreLines is a BlueFlame copy in one call (pcie.LineStorer): Flush,
// the 8-byte stores of x then y in ascending order, Flush — the same
// effect, store by store, as the separate calls.
func (c *CPU) StoreLines(off uint64, x, y []byte) {
	c.Flush()
	if len(y) == 0 && c.storeLine(off, x) {
		c.Flush()
		return
	}
	for _, p := range [2][]byte{x, y} {
		for i := 0; i+8 <= len(p); i += 8 {
			copy(c.st[:], p[i:i+8])
			c.store(off, c.st[:8])
			off += 8
		}
	}
	c.Flush()
}

// storeLine makes the eight 8-byte stores of p, one whole 64-byte line at
// a line-aligned off in a write-combined UAR page, with the effect store
// has for each of them in turn, in one pass: the post's bookkeeping
// (track), one WC line filled and emitted "full" at the eighth store's
// time, and the clock advanced past each store. It runs only right after
// a Flush (no WC line active) and without WC faults, where nothing can
// observe the state between the stores: events the clock runs meanwhile
// (RunUntil, in time order either way) are the device's, and a WC line's
// self-drain timer cannot fall due within the eight stores. Otherwise it
// does nothing and returns false.
func (c *CPU) storeLine(off uint64, p []byte) bool {
	sc := c.cfg.StoreCost
	if len(p) != 64 || off&63 != 0 || c.fx.in != nil || len(c.fx.pend) > 0 || sc < 0 ||
		c.cfg.WCDrain > 0 && c.cfg.WCDrain <= 8*sc || !c.isUAR(off) || c.cfg.UARNonCached {
		return false
	}
	if c.nwc > 0 {
		return false
	}
	idx, rel, inPost := c.slot(off)
	if inPost {
		if idx7, rel7, ok := c.slot(off + 56); !ok || idx7 != idx || rel7 != rel+56 || rel&63 != 0 {
			return false
		}
	}
	now := c.clk.Now()
	if inPost { // track, store by store: only the first can start a post or be at its ctrl
		ps := &c.posts[idx]
		if ps.active && rel == 0 {
			c.closePost(idx)
		}
		if !ps.active {
			*ps = post{active: true, first: now}
			c.active = append(c.active, idx)
		}
		ps.last = now.Add(8 * sc)
		ps.bytes += 64
		ps.end = max(ps.end, rel+64)
		if rel == 0 {
			copy(ps.ctrl[:], p[:8])
			ps.ctrlMask = 0xff
			ps.qpn = binary.BigEndian.Uint32(ps.ctrl[4:8]) >> 8
			ps.flow = uint64(ps.qpn)<<16 | uint64(binary.BigEndian.Uint16(ps.ctrl[1:3]))
		}
	}
	// wcStore: the first store allocates the line (none is active, so
	// none is evicted), the eighth fills it.
	l := c.wcAlloc(now)
	l.active, l.addr, l.mask, l.alloc, l.seq = true, off, 0, now, c.wcSeq
	c.wcSeq++
	c.nwc++
	if c.cfg.WCDrain > 0 {
		c.clk.At(now.Add(c.cfg.WCDrain), l)
	}
	copy(l.data[:], p)
	l.mask = ^uint64(0)
	c.clk.Advance(7 * sc)
	c.emitLine(now.Add(7*sc), l, "full")
	c.clk.Advance(sc)
	return true
}

// Store32 is one 32-bit store of v's little-endian image at off.
func (c *CPU) Store32(off uint64, v uint32) {
	binary.LittleEndian.PutUint32(c.st[:], v)
	c.store(off, c.st[:4])
}

func (c *CPU) isUAR(off uint64) bool {
	pg := off / mlx5.UARPageSize
	return pg >= uint64(c.cfg.FirstUAR) && pg-uint64(c.cfg.FirstUAR) < uint64(c.cfg.NumUARs)
}

func (c *CPU) store(off uint64, p []byte) {
	now := c.clk.Now()
	if off%uint64(len(p)) != 0 {
		c.ctr.Inc(CtrBarMisalignedStore)
		c.rec.Warnf(c.node, now, "bar", CtrBarMisalignedStore.String(), "%d-byte store at BAR0 %#x is not naturally aligned; dropped", len(p), off)
		c.clk.Advance(c.cfg.StoreCost)
		return
	}
	if c.isUAR(off) && !c.cfg.UARNonCached {
		c.track(now, off, p)
		c.wcStore(now, off, p)
		c.clk.Advance(c.cfg.StoreCost)
		return
	}
	c.flushWC(now, "uc")
	c.track(now, off, p)
	c.emit(now, off, p)
	c.closePosts() // an uncached store is complete once issued
	c.clk.Advance(c.cfg.UCStoreCost)
}

// Load32 is an uncached 32-bit read. It drains the WC buffers, issues the
// MRd (port.Read32: the device runs to its arrival, so earlier posted
// writes land first) and returns when the completion is back at the CPU.
// The result is the register's memory image (big-endian register,
// little-endian load).
func (c *CPU) Load32(off uint64) uint32 {
	now := c.clk.Now()
	c.flushWC(now, "uc")
	c.closePosts()
	v, done := c.port.Read32(now, off)
	c.clk.Advance(max(done.Sub(c.clk.Now()), 0)) // to done (the port ran the clock to the MRd's arrival)
	return v
}

// Flush is sfence: every partial WC line goes out now, and the CPU-side
// doorbell / BlueFlame posts are complete.
func (c *CPU) Flush() {
	c.flushWC(c.clk.Now(), "fence")
	c.closePosts()
}

// emit sends one MWr of p at off now, labelled with its post.
func (c *CPU) emit(now sim.Time, off uint64, p []byte) {
	if c.fport != nil {
		qpn, flow := c.flowAt(off)
		c.fport.PostedWriteFlow(now, off, p, qpn, flow)
		return
	}
	c.port.PostedWrite(now, off, p)
}

// ---- write-combining buffer ----

// wcLine is one CPU write-combining buffer.
type wcLine struct {
	c      *CPU
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
	if c := l.c; l.active && now >= l.alloc.Add(c.cfg.WCDrain) {
		c.ctr.Inc(CtrWcLateDrain)
		c.rec.Warnf(c.node, now, "bar", CtrWcLateDrain.String(), "WC line at BAR0 %#x drained %v after its first store without a fence", l.addr, c.cfg.WCDrain)
		c.emitLine(now, l, "drain")
	}
}

func byteMask(o uint64, n int) uint64 {
	if n >= 64 {
		return ^uint64(0)
	}
	return (uint64(1)<<uint(n) - 1) << o
}

func (c *CPU) wcStore(now sim.Time, off uint64, p []byte) {
	la, o := off&^63, off&63
	var l *wcLine
	for i := range c.wc {
		if c.wc[i].active && c.wc[i].addr == la {
			l = &c.wc[i]
			break
		}
	}
	if l == nil {
		l = c.wcAlloc(now)
		l.active, l.addr, l.mask, l.alloc, l.seq = true, la, 0, now, c.wcSeq
		c.wcSeq++
		c.nwc++
		if c.cfg.WCDrain > 0 {
			c.clk.At(now.Add(c.cfg.WCDrain), l)
		}
	}
	copy(l.data[o:], p)
	l.mask |= byteMask(o, len(p))
	if l.mask == ^uint64(0) {
		c.emitLine(now, l, "full")
	}
}

// wcAlloc returns a free line, evicting the oldest when all are busy.
func (c *CPU) wcAlloc(now sim.Time) *wcLine {
	var old *wcLine
	for i := range c.wc {
		l := &c.wc[i]
		if !l.active {
			return l
		}
		if old == nil || l.seq < old.seq {
			old = l
		}
	}
	c.ctr.Inc(CtrWcEvict)
	c.emitLine(now, old, "evict")
	return old
}

// flushWC emits every active line, oldest first.
func (c *CPU) flushWC(now sim.Time, reason string) {
	for c.nwc > 0 {
		var old *wcLine
		for i := range c.wc {
			if l := &c.wc[i]; l.active && (old == nil || l.seq < old.seq) {
				old = l
			}
		}
		if old == nil {
			return
		}
		c.emitLine(now, old, reason)
	}
}

// emitLine sends a line's valid bytes, one MWr per contiguous run, and
// frees it. The wc_flush stage spans the line's stay in the buffer, from
// its first store to its emission; Detail says why it left (full, fence,
// evict, drain, uc).
func (c *CPU) emitLine(now sim.Time, l *wcLine, reason string) {
	if c.fx.in != nil && c.wcFault(now, l, reason) {
		return
	}
	c.emitRuns(now, l.addr, l.mask, &l.data)
	if c.rec.On() {
		qpn, flow := c.flowAt(l.addr)
		c.rec.Record(trace.Event{Name: "wc_flush", Component: "bar", Node: c.node, Start: l.alloc, End: now,
			Bytes: bits.OnesCount64(l.mask), QPN: qpn, Flow: flow, PSN: trace.NoPSN, Detail: reason})
	}
	l.active = false
	c.nwc--
	if len(c.fx.pend) > 0 {
		c.releaseReordered(now)
	}
}

// emitRuns sends the valid bytes of a line, one MWr per contiguous run.
func (c *CPU) emitRuns(now sim.Time, addr, mask uint64, data *[64]byte) {
	for m := mask; m != 0; {
		start := bits.TrailingZeros64(m)
		run := bits.TrailingZeros64(^(m >> uint(start)))
		if start+run >= 64 {
			run = 64 - start
		}
		c.emit(now, addr+uint64(start), data[start:start+run])
		m &^= byteMask(uint64(start), run)
	}
}

// ---- posts (trace stages bf_mmio / doorbell_mmio) ----

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
func (c *CPU) slot(off uint64) (idx int, rel uint64, ok bool) {
	if !c.isUAR(off) {
		return 0, 0, false
	}
	r := off % mlx5.UARPageSize
	if r < mlx5.UARBFRegOffset {
		return 0, 0, false
	}
	r -= mlx5.UARBFRegOffset
	base := int(off/mlx5.UARPageSize-uint64(c.cfg.FirstUAR)) * bufsPerUAR
	if c.cfg.BFRegSize == 0 {
		if r >= bufsPerUAR*dbSlot {
			return 0, 0, false
		}
		return base + int(r/dbSlot), r % dbSlot, true
	}
	if r >= uint64(4*c.cfg.BFRegSize) {
		return 0, 0, false
	}
	return base + int(r/uint64(c.bfBuf)), r % uint64(c.bfBuf), true
}

func (c *CPU) track(now sim.Time, off uint64, p []byte) {
	idx, rel, ok := c.slot(off)
	if !ok {
		return
	}
	ps := &c.posts[idx]
	if ps.active && rel == 0 {
		c.closePost(idx) // a new WQE starts at offset 0
	}
	if !ps.active {
		*ps = post{active: true, first: now}
		c.active = append(c.active, idx)
	}
	ps.last = now.Add(c.cfg.StoreCost)
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

func (c *CPU) closePost(idx int) {
	ps := &c.posts[idx]
	if !ps.active {
		return
	}
	ps.active = false
	for i, v := range c.active {
		if v == idx {
			c.active[i] = c.active[len(c.active)-1]
			c.active = c.active[:len(c.active)-1]
			break
		}
	}
	name := "bf_mmio"
	if ps.bytes == 8 && ps.end == 8 {
		name = "doorbell_mmio"
	}
	c.rec.Stage(c.node, "bar", name, ps.first, ps.last, ps.bytes, 0, ps.qpn, ps.flow)
}

func (c *CPU) closePosts() {
	for len(c.active) > 0 {
		c.closePost(c.active[len(c.active)-1])
	}
}

// flowAt is the (qpn, flow) of the last post into the BF buffer at off.
func (c *CPU) flowAt(off uint64) (uint32, uint64) {
	if idx, _, ok := c.slot(off); ok {
		return c.posts[idx].qpn, c.posts[idx].flow
	}
	return 0, 0
}

// SetFaults makes the CPU consult in at fault.WCBuffer for every line
// leaving the WC buffer (faults.go). An injector with no rule at
// fault.WCBuffer or fault.PCIeTLP is not kept — the condition bar.BAR0
// uses for the same injector, so both halves consult it exactly as the
// single BAR0 did.
func (c *CPU) SetFaults(in *fault.Injector) {
	c.fx.in = nil
	if in.Has(fault.WCBuffer, fault.PCIeTLP) {
		c.fx.in = in
	}
}
