package dma

import (
	"errors"
	"github.com/softnic/softnic/env"
	"github.com/softnic/softnic/fault"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/pcie"
	"github.com/softnic/softnic/shm"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/trace"
)

// Config sizes the DMA engine.
type Config struct {
	// MaxReadTags is the number of non-posted read requests the device may
	// have outstanding (PCIe tags); a read waits for free tags. 0 = 32
	// (the classic 5-bit tag field without extended tags; ConnectX parts
	// support more, the exact number in use is unconfirmed).
	MaxReadTags int `json:"max_read_tags"`
}

// DefaultReadTags is MaxReadTags when the config leaves it 0.
const DefaultReadTags = 32

// Engine is the device's DMA engine. Reads and writes move bytes between
// the device and the shm region at once and return the virtual time at
// which the transfer is complete by the pcie model. It never panics on a
// bad address: range errors come back as errors (the device turns them into
// error CQEs), counted and traced.
//
// Not safe for concurrent use; Read, Write, WriteVisible, Gather and
// Scatter do not allocate on success (with a nil or pre-grown recorder).
type Engine struct {
	eng  *sim.Engine
	link *pcie.Link
	mem  *shm.Region
	cfg  Config
	rec  *trace.Recorder
	node int
	ctr  *trace.Counters

	// tagFree is when each read tag is free again, kept sorted as a ring:
	// the i-th earliest is tagFree[(tagHead+i) % len(tagFree)]. A ring
	// lets release retire the first tags and append the new time in O(k)
	// in the common case (the new time is the latest), not O(tags).
	tagFree []sim.Time
	tagHead int
	picked  int // tags acquire chose for the read under way (the first ones)

	qpn  uint32 // trace labels for the next operations (SetFlow)
	flow uint64

	landings *landing   // free list of deferred writes
	lq       *sim.Queue // their landing events (posted writes land in order)
	pending  []*landing // deferred writes not yet landed, in issue order

	faults *fault.Injector // fault.DMARead / fault.DMAWrite (faults.go)
	target fault.Kind      // what the next access is for (SetTarget)
	tqpn   uint32          // SetTargetFor's QP and wqe_index+1 (0: the flow's)
	twqe   int32
	fqpn   uint32 // SetFaultQP: the QP of the accesses under way, +1 (0: none)
	dead   bool   // every access fails (Dead)
}

// New returns an engine on link and mem in the environment ev (ev.Rec may
// be nil; a nil ev.Ctr gets a private counter set).
func New(ev env.Env, link *pcie.Link, mem *shm.Region, cfg Config) *Engine {
	if cfg.MaxReadTags <= 0 {
		cfg.MaxReadTags = DefaultReadTags
	}
	ev = ev.WithDefaults()
	eng, rec, node, ctr := ev.Eng, ev.Rec, ev.Node, ev.Ctr
	return &Engine{eng: eng, link: link, mem: mem, cfg: cfg, rec: rec, node: node, ctr: ctr,
		tagFree: make([]sim.Time, cfg.MaxReadTags)}
}

// Config returns the engine's configuration (defaults filled in).
func (e *Engine) Config() Config { return e.cfg }

// Counters returns the counter set the engine counts into.
func (e *Engine) Counters() *trace.Counters { return e.ctr }

// SetFlow labels the trace stages of the following operations with a QP
// number and flow id (trace.Event.Flow: qpn<<16 | wqe index). The device
// sets it before the DMA work of each WQE; 0, 0 clears it.
func (e *Engine) SetFlow(qpn uint32, flow uint64) { e.qpn, e.flow = qpn, flow }

// requests is the number of MRd TLPs a read of n bytes at addr needs
// (split at MRRS-aligned addresses, as pcie.Link.DeviceRead does).
func requests(addr uint64, n, mrrs int) int {
	if n <= 0 {
		return 0
	}
	head := mrrs - int(addr&uint64(mrrs-1))
	if n <= head {
		return 1
	}
	return 1 + (n-head+mrrs-1)/mrrs
}

// acquire picks the k tags that free up first and returns when all k are
// free (not before at). k is capped at MaxReadTags: a longer read holds
// every tag for its whole duration, a simplification of real engines that
// reissue tags as completions return. Tags are interchangeable, so
// tagFree is kept sorted: the k that free up first are its first k.
func (e *Engine) acquire(at sim.Time, k int) sim.Time {
	k = min(k, len(e.tagFree))
	e.picked = k
	if k == 0 {
		return at
	}
	return max(at, e.tagFree[e.tagIdx(k-1)])
}

// tagIdx is the index in tagFree of the i-th earliest tag (0 <= i < len).
func (e *Engine) tagIdx(i int) int {
	i += e.tagHead
	if i >= len(e.tagFree) {
		i -= len(e.tagFree)
	}
	return i
}

// release frees the tags acquire picked at done, keeping tagFree sorted
// (done goes after the tags that are free at or before it).
func (e *Engine) release(done sim.Time) {
	k, f, n := e.picked, e.tagFree, len(e.tagFree)
	if k == 0 {
		return
	}
	old := e.tagHead
	e.tagHead = e.tagIdx(k) // drop the first k: the rest start here
	if k == n || f[e.tagIdx(n-k-1)] <= done {
		// done is the latest: it takes the k freed slots, now the last.
		for i, j := 0, old; i < k; i++ {
			f[j] = done
			if j++; j == n {
				j = 0
			}
		}
		return
	}
	// j of the rest are free at or before done (found by bisection: they
	// are sorted): shift the others up by k.
	j, hi := 0, n-k-1 // f[tagIdx(n-k-1)] > done, from the test above
	for j < hi {
		m := int(uint(j+hi) >> 1)
		if f[e.tagIdx(m)] <= done {
			j = m + 1
		} else {
			hi = m
		}
	}
	for i := n - 1; i >= j+k; i-- {
		f[e.tagIdx(i)] = f[e.tagIdx(i-k)]
	}
	for i := j; i < j+k; i++ {
		f[e.tagIdx(i)] = done
	}
}

// InFlightReads is the number of read tags still held at time t.
func (e *Engine) InFlightReads(t sim.Time) int {
	n := 0
	for _, f := range e.tagFree {
		if f > t {
			n++
		}
	}
	return n
}

func (e *Engine) rangeError(at sim.Time, op string, err error) {
	e.ctr.Inc(CtrDmaRangeError)
	e.rec.Warnf(e.node, at, "dma", CtrDmaRangeError.String(), "%s: %v", op, err)
}

// Read copies len(dst) bytes of host memory at addr into dst. The data is
// sampled at the call (the request time): later host writes to the range
// are not seen, even though the completions arrive later in virtual time.
// The read waits for free tags, then takes pcie.Link.DeviceRead's time;
// done is when the last completion is at the device.
func (e *Engine) Read(at sim.Time, addr uint64, dst []byte) (done sim.Time, s pcie.Stats, err error) {
	if len(e.pending) > 0 {
		e.settle(addr, len(dst))
	}
	if err = e.mem.Read(addr, dst); err != nil {
		e.rangeError(at, "read", err)
		return at, s, err
	}
	var extra sim.Duration
	if e.faults != nil || e.dead || e.target != 0 {
		if extra, err = e.inject(fault.DMARead, at, addr, dst); err != nil {
			clear(dst)
			return failTime(at, err), s, err
		}
	}
	if len(dst) == 0 {
		return at, s, nil
	}
	start := e.acquire(at, requests(addr, len(dst), e.link.Spec().MRRS))
	if start > at {
		e.ctr.Inc(CtrDmaTagStall)
		e.rec.Stage(e.node, "dma", "dma_tag_wait", at, start, 0, 0, e.qpn, e.flow)
	}
	done, s = e.link.DeviceRead(start, addr, len(dst))
	done = done.AddSat(extra)
	e.release(done)
	e.ctr.Inc(CtrDmaReads)
	e.ctr.Add(CtrDmaReadBytes, uint64(len(dst)))
	e.ctr.Add(CtrPcieDmaTlps, uint64(s.TLPs()))
	e.ctr.Add(CtrPcieDmaBytes, uint64(s.WireBytes))
	e.rec.Stage(e.node, "dma", "dma_read", start, done, len(dst), s.TLPs(), e.qpn, e.flow)
	return done, s, nil
}

// Write stores src at host address addr. The bytes are in shm at once;
// done (pcie.Link.DeviceWrite) is when the host could first observe them.
// A caller that publishes ownership with a write (a CQE owner bit, a
// doorbell record) must not let the host see it before done: use
// WriteVisible, or write at done from its own scheduled event.
func (e *Engine) Write(at sim.Time, addr uint64, src []byte) (done sim.Time, s pcie.Stats, err error) {
	if len(e.pending) > 0 {
		e.settle(addr, len(src)) // posted writes stay in order: an earlier one must not land over these bytes
	}
	var extra sim.Duration
	if e.faults != nil || e.dead || e.target != 0 {
		if extra, err = e.writeFault(at, addr, src); err != nil {
			return at, s, err
		}
		if extra < 0 { // corrupted: landed by writeFault
			done, s = e.timeWrite(at, addr, len(src))
			return done, s, nil
		}
	}
	if err = e.mem.Write(addr, src); err != nil {
		e.rangeError(at, "write", err)
		return at, s, err
	}
	done, s = e.timeWrite(at, addr, len(src))
	return done.AddSat(extra), s, nil
}

func (e *Engine) timeWrite(at sim.Time, addr uint64, n int) (sim.Time, pcie.Stats) {
	if n == 0 {
		return at, pcie.Stats{}
	}
	done, s := e.link.DeviceWrite(at, addr, n)
	e.ctr.Inc(CtrDmaWrites)
	e.ctr.Add(CtrDmaWriteBytes, uint64(n))
	e.ctr.Add(CtrPcieDmaTlps, uint64(s.TLPs()))
	e.ctr.Add(CtrPcieDmaBytes, uint64(s.WireBytes))
	e.rec.Stage(e.node, "dma", "dma_write", at, done, n, s.TLPs(), e.qpn, e.flow)
	return done, s
}

// landing is a write whose bytes reach shm at a scheduled time.
type landing struct {
	e    *Engine
	addr uint64
	buf  []byte
	own  []byte // a buffer taken from WriteVisibleKeep's caller (buf lies in it), kept across reuses
	next *landing
	live bool // not yet stored (a device read may store it early)
}

// Fire stores the bytes and returns the landing to the free list.
func (l *landing) Fire(now sim.Time) {
	e := l.e
	if l.live {
		if err := e.mem.Write(l.addr, l.buf); err != nil {
			e.rangeError(now, "write", err) // only if the region was closed meanwhile
		}
	}
	for i, p := range e.pending {
		if p == l {
			e.pending = append(e.pending[:i], e.pending[i+1:]...)
			break
		}
	}
	l.live = false
	l.next, e.landings = e.landings, l
}

// store lands a deferred write early (its Fire then only recycles it).
func (l *landing) store() {
	if l.live {
		_ = l.e.mem.Write(l.addr, l.buf) // the range was checked when it was issued
		l.live = false
	}
}

// Drain stores every deferred write now (a control command that must not
// return while DMA writes are still on their way, e.g. DESTROY_MKEY).
func (e *Engine) Drain() {
	for _, l := range e.pending {
		l.store()
	}
}

// settle stores, in issue order, the deferred writes that overlap
// [addr, addr+n) before a device access of that range. PCIe does not let
// a read pass the posted writes issued before it, so the read must see
// them (a WRITE then a READ or an atomic of the same bytes), even though
// the host's CPU would see them only at their landing time; nor does it
// let a later posted write pass them, so they must not land over it.
// For the same reason a write stored early first stores the earlier
// pending writes that overlap it (storeAt).
func (e *Engine) settle(addr uint64, n int) {
	for i, l := range e.pending {
		if l.live && l.overlaps(addr, n) {
			e.storeAt(i)
		}
	}
}

func (l *landing) overlaps(addr uint64, n int) bool {
	return addr < l.addr+uint64(len(l.buf)) && l.addr < addr+uint64(n)
}

// storeAt stores e.pending[i] early, after the earlier pending writes
// that overlap it (each in turn after its own), so that none of them lands
// over its bytes afterwards: two WRITE packets to overlapping ranges, the
// later one's bytes read back (a READ) before the earlier one has landed.
func (e *Engine) storeAt(i int) {
	l := e.pending[i]
	if !l.live {
		return
	}
	for j := 0; j < i; j++ {
		if p := e.pending[j]; p.live && p.overlaps(l.addr, len(l.buf)) {
			e.storeAt(j)
		}
	}
	l.store()
}

// TimeWrite times a posted write of n bytes to addr without touching
// host memory: for a caller that lands the bytes itself at done (the
// device's CQE path, which must be able to land or hold them on its own
// terms). The range is checked now.
func (e *Engine) TimeWrite(at sim.Time, addr uint64, n int) (done sim.Time, s pcie.Stats, err error) {
	if !e.mem.Contains(addr, n) {
		err = &shm.RangeError{Op: "write", Addr: addr, Len: n}
		e.rangeError(at, "write", err)
		return at, s, err
	}
	var extra sim.Duration
	if e.faults != nil || e.dead || e.target != 0 {
		var scratch [64]byte // the caller lands the bytes: corruption is its business
		if extra, err = e.inject(fault.DMAWrite, at, addr, scratch[:min(n, 64)]); err != nil {
			return at, s, err
		}
	}
	done, s = e.timeWrite(at, addr, n)
	return done.AddSat(extra), s, nil
}

// WriteVisible is Write whose bytes land in shm only at done, scheduled on
// the engine: what a CQE or any other ownership-publishing write needs so
// that a poller cannot see it early. src is copied (pooled buffers, no
// allocation in steady state); the range is checked now.
func (e *Engine) WriteVisible(at sim.Time, addr uint64, src []byte) (done sim.Time, s pcie.Stats, err error) {
	if !e.mem.Contains(addr, len(src)) {
		err = &shm.RangeError{Op: "write", Addr: addr, Len: len(src)}
		e.rangeError(at, "write", err)
		return at, s, err
	}
	var extra sim.Duration
	var corrupt []byte
	if e.faults == nil && !e.dead {
		e.clearTarget()
	} else {
		corrupt = append([]byte(nil), src...)
		if extra, err = e.inject(fault.DMAWrite, at, addr, corrupt); err != nil {
			return at, s, err
		}
		src = corrupt
	}
	done, s = e.timeWrite(at, addr, len(src))
	done = done.AddSat(extra)
	l := e.landing()
	l.addr, l.buf, l.live = addr, append(l.buf[:0], src...), true
	e.pending = append(e.pending, l)
	e.landAt(done, l)
	return done, s, nil
}

// landAt schedules l to land at done.
func (e *Engine) landAt(done sim.Time, l *landing) {
	if e.lq == nil {
		e.lq = e.eng.NewQueue()
	}
	e.lq.At(done, l)
}

func (e *Engine) landing() *landing {
	l := e.landings
	if l == nil {
		return &landing{e: e}
	}
	e.landings = l.next
	return l
}

// WriteVisibleKeep is WriteVisible for src lying in *own, a buffer the
// caller gives up: instead of copying src, the write keeps *own until it
// lands and puts in its place a buffer of its own for the caller (one it
// kept before, of any capacity, or nil). Everything observable is
// WriteVisible's. Under a fault plan or on a dead engine it is
// WriteVisible, and *own stays the caller's.
func (e *Engine) WriteVisibleKeep(at sim.Time, addr uint64, src []byte, own *[]byte) (done sim.Time, s pcie.Stats, err error) {
	if e.faults != nil || e.dead || *own == nil {
		return e.WriteVisible(at, addr, src)
	}
	if !e.mem.Contains(addr, len(src)) {
		err = &shm.RangeError{Op: "write", Addr: addr, Len: len(src)}
		e.rangeError(at, "write", err)
		return at, s, err
	}
	e.clearTarget()
	done, s = e.timeWrite(at, addr, len(src))
	l := e.landing()
	l.own, *own = *own, l.own
	l.addr, l.buf, l.live = addr, src, true
	e.pending = append(e.pending, l)
	e.landAt(done, l)
	return done, s, nil
}

// Gather reads the SGEs' bytes, in order, into dst: for each data segment
// an lkey check (local read, addresses by the MR's Addr) and a DMA read,
// all issued at at. Zero-length segments are skipped. It stops at the first
// failing segment (reads already issued stay on the link, as in hardware)
// and returns the bytes gathered so far; more bytes than len(dst) is an
// ErrLength. done is when the last read completes.
func (e *Engine) Gather(at sim.Time, pdn uint32, sges []mlx5.DataFields, keys *Keys, dst []byte) (n int, done sim.Time, s pcie.Stats, err error) {
	done = at
	for i := range sges {
		sg := &sges[i]
		bc := uint64(sg.ByteCount)
		if bc == 0 {
			continue
		}
		if bc > uint64(len(dst)-n) {
			err = &LengthError{Need: uint64(n) + bc, Have: uint64(len(dst))}
			return n, done, s, e.fail(at, "gather", err)
		}
		host, kerr := keys.Check(sg.LKey, pdn, sg.Addr, bc, LocalRead)
		if kerr != nil {
			return n, done, s, e.fail(at, "gather", kerr)
		}
		d, rs, rerr := e.Read(at, host, dst[n:n+int(bc)])
		if rerr != nil {
			return n, done, s, rerr
		}
		s.Add(rs)
		done = max(done, d)
		n += int(bc)
	}
	return n, done, s, nil
}

// Scatter writes src across the SGEs of a receive WQE, in order: lkey
// checks (local write) for the segments that receive bytes, then DMA
// writes, all issued at at. A segment with the terminator key
// (mlx5.InvalidKey) ends the list. If src is longer than the list holds,
// nothing is written and the error wraps ErrLength (the responder's
// LOCAL_LENGTH). Writes land at once (see Write); done is the last one's.
func (e *Engine) Scatter(at sim.Time, pdn uint32, sges []mlx5.DataFields, keys *Keys, src []byte) (n int, done sim.Time, s pcie.Stats, err error) {
	done = at
	var capacity uint64
	for i := range sges {
		if sges[i].LKey == mlx5.InvalidKey {
			break
		}
		capacity += uint64(sges[i].ByteCount)
	}
	if uint64(len(src)) > capacity {
		return 0, done, s, e.fail(at, "scatter", &LengthError{Need: uint64(len(src)), Have: capacity})
	}
	for i := 0; i < len(sges) && n < len(src); i++ {
		sg := &sges[i]
		if sg.LKey == mlx5.InvalidKey {
			break
		}
		c := min(uint64(sg.ByteCount), uint64(len(src)-n))
		if c == 0 {
			continue
		}
		host, kerr := keys.Check(sg.LKey, pdn, sg.Addr, c, LocalWrite)
		if kerr != nil {
			return n, done, s, e.fail(at, "scatter", kerr)
		}
		d, ws, werr := e.Write(at, host, src[n:n+int(c)])
		if werr != nil {
			return n, done, s, werr
		}
		s.Add(ws)
		done = max(done, d)
		n += int(c)
	}
	return n, done, s, nil
}

// fail counts and traces a key or length error and returns it.
func (e *Engine) fail(at sim.Time, op string, err error) error {
	name := CtrDmaKeyError
	switch {
	case errors.Is(err, ErrLength):
		name = CtrDmaLengthError
	case errors.Is(err, ErrBadKey):
		name = CtrDmaBadKey
	case errors.Is(err, ErrPDMismatch):
		name = CtrDmaPdMismatch
	case errors.Is(err, ErrBounds):
		name = CtrDmaBounds
	case errors.Is(err, ErrAccess):
		name = CtrDmaAccess
	}
	e.ctr.Inc(name)
	e.rec.Warnf(e.node, at, "dma", name.String(), "%s: %v", op, err)
	return err
}
