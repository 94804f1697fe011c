package wqefetch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/softnic/softnic/env"

	"github.com/softnic/softnic/dma"
	"github.com/softnic/softnic/fault"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/trace"
)

// State is a WQE's lifecycle state inside the device.
type State uint8

// WQE lifecycle states. A WQE moves Announced → Fetching → Fetched →
// Valid (or Invalid), then the device's requester takes it to Executing and
// Done; BlueFlame WQEs go from Announced straight to Fetched.
const (
	StateAnnounced State = iota // the producer counter covers it (doorbell or BF)
	StateFetching               // DMA read in flight
	StateFetched                // bytes in the device
	StateValid                  // control segment checked
	StateInvalid                // failed validation: error CQE, QP to error
	StateExecuting              // the requester is working on it
	StateDone                   // completed (CQE written or retired silently)
)

var stateNames = [...]string{"announced", "fetching", "fetched", "valid", "invalid", "executing", "done"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Source says how the WQE reached the device.
type Source uint8

// WQE sources.
const (
	FromDMA Source = iota
	FromBlueFlame
)

func (s Source) String() string {
	if s == FromBlueFlame {
		return "blueflame"
	}
	return "dma"
}

// Validation errors (the device maps them to a LOCAL_QP_OP error CQE).
var (
	ErrBadOpcode   = errors.New("wqefetch: unsupported opcode")
	ErrBadDS       = errors.New("wqefetch: DS inconsistent with the opcode or queue")
	ErrBadQPN      = errors.New("wqefetch: ctrl QPN does not match the queue")
	ErrBadIndex    = errors.New("wqefetch: wqe_index does not match the producer counter")
	ErrBadSegment  = errors.New("wqefetch: malformed segment")
	ErrBadDoorbell = errors.New("wqefetch: doorbell counter outside the ring")
	ErrQueueClosed = errors.New("wqefetch: doorbell on a closed (destroyed) queue")
	// ErrFetchDMA marks a WQE whose fetch failed on PCIe (an injected
	// completion timeout, UR, ...): the device fails it with LOCAL_PROT.
	ErrFetchDMA = errors.New("wqefetch: WQE fetch failed on PCIe")
)

// Counter names this package increments in the engine's trace.Counters.
// Warnings recorded with trace.Recorder.Warnf use the same names.
var (
	CtrDBBadQPN     = trace.NewCounter("db_bad_qpn")      // doorbell QPN is not the queue's QP
	CtrDBNoNewWQE   = trace.NewCounter("db_no_new_wqe")   // doorbell announces nothing past what was already fetched
	CtrDBBadCounter = trace.NewCounter("db_bad_counter")  // doorbell counter laps the ring or is behind it
	CtrDBClosed     = trace.NewCounter("db_closed_queue") // doorbell on a queue after Queue.Close
	CtrDBNoSQ       = trace.NewCounter("db_no_sq")        // doorbell for a QP created without a send queue (max_send_wr 0)

	CtrFetchReads      = trace.NewCounter("wqe_fetch_reads")        // DMA reads issued for WQE fetches (two for a wrapped range)
	CtrFetchBytes      = trace.NewCounter("wqe_fetch_bytes")        // bytes requested by WQE fetches
	CtrFetchDMAError   = trace.NewCounter("wqe_fetch_dma_error")    // a WQE fetch read outside host memory (bytes zeroed)
	CtrFetchOutOfOrder = trace.NewCounter("wqe_fetch_out_of_order") // a fetch completed before an earlier one and waited for it
	CtrFetchStale      = trace.NewCounter("wqe_fetch_stale")        // a fetch dropped because its queue was reset or closed

	CtrBF         = trace.NewCounter("wqe_bf")            // WQE taken from a BlueFlame write, no fetch
	CtrBFFallback = trace.NewCounter("bf_fallback_fetch") // BlueFlame write not usable: the caller falls back to a doorbell

	CtrWQEInvalid = trace.NewCounter("wqe_invalid") // WQE failed validation (StateInvalid)
)

// StageFetch is the trace stage of one doorbell fetch (request to last
// completion), component "wqefetch".
const StageFetch = "wqe_fetch"

// component is the trace component of this package's stages and warnings.
const component = "wqefetch"

// MaxWQEBytes is the largest WQE the device accepts (63 DS = 1008 B).
const MaxWQEBytes = mlx5.MaxDS * mlx5.DSSize

// MaxWQEBBs is the number of basic blocks the largest WQE spans (16).
const MaxWQEBBs = (MaxWQEBytes + mlx5.WQEBBSize - 1) / mlx5.WQEBBSize

// MaxSGE is the most data segments one WQE can carry.
const MaxSGE = mlx5.MaxDS - 1

// AtomicArgs are the operands of an atomic segment (mlx5.md §4.5, as
// libmlx5 set_atomic_seg writes them).
type AtomicArgs struct {
	SwapAdd uint64 // ATOMIC_CS: the swap value; ATOMIC_FA: the add value
	Compare uint64 // ATOMIC_CS: the compare value; ATOMIC_FA: always 0 (libmlx5 leaves the field stale)
}

// WQE is one fetched and decoded send WQE. It is owned by the engine and
// valid only during Sink.WQEReady: the sink copies what it keeps (Bytes,
// SGEs and Inline point into engine storage reused for the next WQE).
type WQE struct {
	Index     uint16 // wqe_index (WQEBB counter of the first basic block)
	BBs       int
	Bytes     []byte // the whole WQE, DS*16 bytes (copied out of the ring)
	Ctrl      mlx5.CtrlFields
	HasRaddr  bool
	Raddr     mlx5.RaddrFields
	HasAtomic bool       // ATOMIC_CS / ATOMIC_FA: Atomic holds the atomic segment
	Atomic    AtomicArgs // valid when HasAtomic
	HasAV     bool       // a UD WQE: AV holds its datagram segment
	AV        Datagram   // valid when HasAV
	SGEs      []mlx5.DataFields
	Inline    []byte // inline payload, nil when none
	IsInline  bool
	Length    uint64 // total payload bytes (SGEs or inline); not checked for atomics (the device does)
	Source    Source
	State     State
	Err       error    // set when State == StateInvalid
	Announced sim.Time // the doorbell (or BlueFlame write) that covered it
	Fetched   sim.Time // its bytes were in the device and it was decoded
}

// Datagram is the decoded 48-byte datagram (address-vector) segment of a
// UD WQE (mlx5.md §4.5): key @0, dqp_dct @8 (bit 31 extended AV, [23:0]
// destination QPN), stat_rate_sl @0xC, rlid / RoCEv2 UDP source port
// @0xE, rmac @0x14, tclass @0x1A, hop_limit @0x1B, grh_gid_fl @0x1C (sgid
// index [27:20], flow label [19:0]), rgid @0x20.
type Datagram struct {
	QKey      uint32
	DestQPN   uint32
	Extended  bool
	UDPSPort  uint16
	DMAC      [6]byte
	TClass    uint8
	HopLimit  uint8
	SGIDIndex uint8
	FlowLabel uint32
	DGID      [16]byte
}

// DatagramSegSize is the size of the UD datagram segment.
const DatagramSegSize = 48

func decodeDatagram(b []byte) Datagram {
	var a Datagram
	a.QKey = binary.BigEndian.Uint32(b[0:])
	dq := binary.BigEndian.Uint32(b[8:])
	a.DestQPN, a.Extended = dq&0xffffff, dq&0x80000000 != 0
	a.UDPSPort = binary.BigEndian.Uint16(b[0x0e:])
	copy(a.DMAC[:], b[0x14:0x1a])
	a.TClass, a.HopLimit = b[0x1a], b[0x1b]
	g := binary.BigEndian.Uint32(b[0x1c:])
	a.SGIDIndex, a.FlowLabel = uint8(g>>20), g&0xfffff
	copy(a.DGID[:], b[0x20:0x30])
	return a
}

// fetchRange is one doorbell fetch of a queue: WQEBBs [from, to), requested
// at start; arrived once its DMA read has completed.
type fetchRange struct {
	from, to mlx5.WQECounter
	start    sim.Time
	arrived  bool
	dmaErr   bool // a read of the range failed: its WQEs are ErrFetchDMA
}

// Queue is the fetch state of one send queue.
//
// Fetches may complete in any order (the DMA engine models PCIe tags and
// completions, so a short read issued later can finish first). The queue
// keeps its in-flight fetches in issue order in a ring of ranges; a fetch
// that completes early is marked arrived and waits, and WQEs are handed to
// the sink strictly in ring order from Next, as soon as every fetch before
// them has arrived.
//
// Reset and Close start a new generation: a fetch issued before completes
// later as stale (counted wqe_fetch_stale, dropped, never delivered).
type Queue struct {
	QPN  uint32
	Base uint64 // IOVA of WQEBB 0
	Size int    // WQEBBs, a power of two
	Node int
	// Datagram: every WQE carries the 48-byte datagram segment after its
	// control segment (a UD queue, mlx5.md §4.6).
	Datagram bool
	next     mlx5.WQECounter // next WQEBB the device will parse
	issued   mlx5.WQECounter // fetch requested up to here
	stage    []byte          // device-side copy of the ring
	gen      uint32          // bumped by Reset and Close; captured by each fetch
	closed   bool
	ranges   []fetchRange // in-flight fetches, ring of Size entries, issue order
	head     uint32       // first in-flight fetch (ranges[head&(Size-1)])
	tail     uint32       // one past the last
	owner    *Engine      // the engine that fetched for this queue last (for counters on Reset/Close)
	// Stats
	Fetches    uint64
	FetchBytes uint64
	BFs        uint64
	OutOfOrder uint64 // fetches that completed before an earlier one
	Stale      uint64 // fetches dropped by Reset or Close
}

// NewQueue returns the fetch state for a send queue of size WQEBBs at base.
// size must be a power of two, or 0 for a QP without a send queue (every
// doorbell refused, counted db_no_sq).
func NewQueue(qpn uint32, base uint64, size int, node int) *Queue {
	return &Queue{QPN: qpn, Base: base, Size: size, Node: node}
}

// alloc makes the staging copy and the in-flight ring the first time the
// queue takes WQEs (a doorbell fetch or a BlueFlame write): a QP that is
// created and never posted to costs no ring-sized Go heap.
func (q *Queue) alloc() {
	if q.stage == nil {
		q.stage = make([]byte, q.Size*mlx5.WQEBBSize)
		q.ranges = make([]fetchRange, q.Size)
	}
}

// Next is the counter of the next WQEBB the device expects.
func (q *Queue) Next() uint16 { return uint16(q.next) }

// Reset sets both counters to c (QP moved to RESET, or a new queue) and
// starts a new generation: every fetch still in flight is counted
// wqe_fetch_stale when it completes and dropped; fetches that had already
// completed but were waiting for an earlier one are dropped and counted now.
// None of their WQEs reaches the sink. Reset does not reopen a closed queue.
func (q *Queue) Reset(c uint16) {
	q.dropFetches()
	q.next, q.issued = mlx5.WQECounter(c), mlx5.WQECounter(c)
}

// Close marks the queue dead (QP destroyed). Like Reset, every fetch in
// flight is dropped and counted wqe_fetch_stale, never delivered; later
// doorbells are refused with ErrQueueClosed and BlueFlame writes are not
// taken. Pending reports false from then on. Close is final.
func (q *Queue) Close() {
	q.dropFetches()
	q.issued = q.next // nothing is pending any more
	q.closed = true
}

// Closed reports whether Close was called.
func (q *Queue) Closed() bool { return q.closed }

// Pending reports whether a fetch is outstanding.
func (q *Queue) Pending() bool { return q.next != q.issued }

// InFlight is the number of fetches of the current generation not yet
// handed to the sink (issued, or arrived and waiting for an earlier one).
func (q *Queue) InFlight() int { return int(q.tail - q.head) }

// dropFetches starts a new generation and forgets the in-flight ranges.
// Ranges still in flight are counted when their fetchDone fires (the
// generation no longer matches); ranges that already arrived are counted
// here.
func (q *Queue) dropFetches() {
	q.gen++
	mask := uint32(q.Size - 1)
	for s := q.head; s != q.tail; s++ {
		r := &q.ranges[s&mask]
		if r.arrived {
			q.Stale++
			if q.owner != nil {
				q.owner.ctr.Inc(CtrFetchStale)
			}
		}
		*r = fetchRange{}
	}
	q.head, q.tail = 0, 0
}

// Sink receives decoded WQEs in ring order.
type Sink interface {
	WQEReady(t sim.Time, q *Queue, w *WQE)
}

// Engine fetches and decodes WQEs for all send queues of one device.
type Engine struct {
	eng  *sim.Engine
	dma  *dma.Engine
	rec  *trace.Recorder
	ctr  *trace.Counters
	node int
	sink Sink
	wqe  WQE
	free []*fetchDone

	buf  [MaxWQEBBs * mlx5.WQEBBSize]byte // the WQE being decoded (whole basic blocks)
	sges [MaxSGE]mlx5.DataFields
}

// New returns a fetch engine that DMA-reads through d and hands WQEs to s.
// ev.Rec may be nil; a nil ev.Ctr gets a private counter set.
func New(ev env.Env, d *dma.Engine, s Sink) *Engine {
	ev = ev.WithDefaults()
	return &Engine{eng: ev.Eng, dma: d, sink: s, rec: ev.Rec, ctr: ev.Ctr, node: ev.Node}
}

// fetchDone is the event at which a DMA fetch's data is in the device.
// Pooled on Engine.free: no allocation in steady state.
type fetchDone struct {
	e   *Engine
	q   *Queue
	gen uint32 // q.gen when the fetch was issued
	seq uint32 // its range: q.ranges[seq&(Size-1)]
}

func (f *fetchDone) Fire(now sim.Time) {
	e, q, gen, seq := f.e, f.q, f.gen, f.seq
	f.q = nil
	e.free = append(e.free, f)
	if q.closed || gen != q.gen {
		// Issued before a Reset or Close: its WQEs belong to a ring
		// that no longer exists.
		q.Stale++
		e.ctr.Inc(CtrFetchStale)
		return
	}
	q.ranges[seq&uint32(q.Size-1)].arrived = true
	if seq != q.head {
		// An earlier fetch is still in flight: these bytes wait for it.
		q.OutOfOrder++
		e.ctr.Inc(CtrFetchOutOfOrder)
		return
	}
	e.drain(now, q)
}

// drain hands to the sink, in ring order, the WQEs of every arrived fetch at
// the head of q's in-flight ring, stopping at the first fetch still in
// flight (or when the sink resets or closes the queue).
func (e *Engine) drain(now sim.Time, q *Queue) {
	mask := uint32(q.Size - 1)
	gen := q.gen
	for q.head != q.tail {
		r := &q.ranges[q.head&mask]
		if !r.arrived {
			return
		}
		from, to, start, bad := r.from, r.to, r.start, r.dmaErr
		*r = fetchRange{}
		q.head++
		if !e.parse(now, q, gen, from, to, start, FromDMA, bad) {
			return
		}
	}
}

// Doorbell handles an 8-byte doorbell whose bytes are the first 8 bytes of
// the last posted WQE's control segment. The doorbell is taken as
// authoritative for the producer counter: the device fetches up to the end
// of the WQE it names (wqe_index + its basic blocks). mlx5.md §4.9 leaves
// doorbell-vs-DBR authority unconfirmed; drivers keep them consistent, and
// reading the DBR would cost a DMA read that hardware measurements (one
// doorbell MWr + one WQE read, timing.md §3.2) do not show.
func (e *Engine) Doorbell(t sim.Time, q *Queue, ctrl [8]byte) error {
	c := mlx5.CtrlSeg(ctrl[:8:8])
	idx := mlx5.WQECounter(binary.BigEndian.Uint16(ctrl[1:3]))
	ds := int(ctrl[7] & 0x3f)
	if q.closed {
		e.ctr.Inc(CtrDBClosed)
		e.rec.Warnf(e.node, t, component, CtrDBClosed.String(), "doorbell for wqe_index %d on the closed queue of QP %#x", idx, q.QPN)
		return ErrQueueClosed
	}
	if q.Size == 0 {
		e.ctr.Inc(CtrDBNoSQ)
		e.rec.Warnf(e.node, t, component, CtrDBNoSQ.String(), "doorbell for wqe_index %d on QP %#x, which has no send queue", idx, q.QPN)
		return ErrBadDoorbell
	}
	if c.QPN() != q.QPN {
		e.ctr.Inc(CtrDBBadQPN)
		e.rec.Warnf(e.node, t, component, CtrDBBadQPN.String(), "doorbell QPN %#x on queue of QP %#x", c.QPN(), q.QPN)
		return ErrBadQPN
	}
	bbs := mlx5.WQEBBs(ds)
	if bbs == 0 {
		bbs = 1
	}
	end := idx.Add(bbs)
	if bbs > q.Size && q.issued.Dist(idx) < q.Size && q.next.Dist(idx) < q.Size {
		// The WQE the doorbell names is larger than the whole ring (DS 63
		// is 16 WQEBBs): not a counter that laps, a malformed WQE. Fetch
		// up to its first basic block, so that it fails validation (DS
		// needs more than was announced: LOCAL_QP_OP_ERR, QP to error,
		// flush) instead of the doorbell being refused, which left the
		// QP in RTS with nothing completing, every later doorbell refused
		// as lapping the ring too.
		end = idx.Add(1)
	}
	// The new producer value must be ahead of what was already requested
	// and not lap the ring.
	ahead := q.issued.Dist(end)
	if ahead == 0 || ahead > q.Size && end.Dist(q.issued) <= q.Size {
		// The counter announced already, or an older one arriving late
		// (a reordered or torn doorbell overtaken by a newer one): stale,
		// not a counter that laps the ring (faults.md §2.2: a counter at
		// or behind the last one is ignored).
		e.ctr.Inc(CtrDBNoNewWQE)
		e.rec.Warnf(e.node, t, component, CtrDBNoNewWQE.String(), "QP %#x doorbell for wqe_index %d announces nothing new", q.QPN, idx)
		return nil
	}
	if ahead > q.Size || q.next.Dist(end) > q.Size {
		e.ctr.Inc(CtrDBBadCounter)
		e.rec.Warnf(e.node, t, component, CtrDBBadCounter.String(), "QP %#x doorbell wqe_index %d (+%d BBs) laps the %d-BB ring (device at %d)", q.QPN, idx, bbs, q.Size, q.next)
		return ErrBadDoorbell
	}
	e.fetch(t, q, end)
	return nil
}

// fetch DMA-reads WQEBBs [q.issued, end) into the staging copy: one read per
// contiguous run (two when the range wraps); the DMA engine splits each read
// into MRd TLPs by MRRS. The bytes are sampled now (dma.Engine.Read); the
// range is recorded in q's in-flight ring and parsed when its completion
// event fires and every earlier fetch has arrived. Ranges in flight never
// overlap in the ring (Doorbell keeps [next, end) within Size), so a later
// fetch never overwrites staged bytes not yet parsed.
func (e *Engine) fetch(t sim.Time, q *Queue, end mlx5.WQECounter) {
	q.owner = e
	q.alloc()
	from := q.issued
	n := from.Dist(end)
	mask := q.Size - 1
	first := int(uint16(from)) & mask
	done := t
	var st int
	var tlps int
	bytes := 0
	dmaErr := false
	for n > 0 {
		run := n
		if first+run > q.Size {
			run = q.Size - first
		}
		off := first * mlx5.WQEBBSize
		dst := q.stage[off : off+run*mlx5.WQEBBSize]
		e.dma.SetTargetFor(fault.KindWQE, q.QPN, uint16(from))
		d, s, err := e.dma.Read(t, q.Base+uint64(off), dst)
		if errors.Is(err, dma.ErrPCIe) {
			dmaErr = true
		}
		if err != nil {
			// The ring is outside host memory: the WQEs cannot be read.
			// Mark the bytes invalid (zero) so validation fails them.
			clear(dst)
			e.ctr.Inc(CtrFetchDMAError)
			e.rec.Warnf(e.node, t, component, CtrFetchDMAError.String(), "QP %#x SQ read [%#x,+%d): %v", q.QPN, q.Base+uint64(off), len(dst), err)
		}
		if d > done {
			done = d
		}
		tlps += s.TLPs()
		bytes += len(dst)
		st++
		n -= run
		first = 0
	}
	q.issued = end
	q.Fetches++
	q.FetchBytes += uint64(bytes)
	e.ctr.Add(CtrFetchReads, uint64(st))
	e.ctr.Add(CtrFetchBytes, uint64(bytes))
	e.rec.Stage(e.node, component, StageFetch, t, done, bytes, tlps, q.QPN, flowID(q.QPN, uint16(from)))
	q.ranges[q.tail&uint32(mask)] = fetchRange{from: from, to: end, start: t, dmaErr: dmaErr}
	var f *fetchDone
	if k := len(e.free); k > 0 {
		f = e.free[k-1]
		e.free = e.free[:k-1]
	} else {
		f = &fetchDone{e: e}
	}
	f.q, f.gen, f.seq = q, q.gen, q.tail
	q.tail++
	e.eng.At(done, f)
}

// BlueFlame handles a complete BlueFlame write. It returns false when the
// WQE cannot be taken from the BF buffer (an earlier fetch is still pending,
// or the index is not the next expected one, or the queue is closed); the
// caller then treats the first 8 bytes as a doorbell, as hardware falls back
// to the memory copy. Refusing while a fetch is pending keeps ring order:
// the BF WQE would otherwise overtake WQEs whose fetch has not arrived.
func (e *Engine) BlueFlame(t sim.Time, q *Queue, wqe []byte) bool {
	if q.closed {
		return false // the doorbell the caller falls back to is refused and counted
	}
	if len(wqe) < mlx5.CtrlSegSize {
		return false
	}
	c := mlx5.CtrlSeg(wqe)
	idx := mlx5.WQECounter(c.WQEIndex())
	if q.Pending() || idx != q.next || c.QPN() != q.QPN {
		e.ctr.Inc(CtrBFFallback)
		return false
	}
	bbs := mlx5.WQEBBs(int(c.DS()))
	if bbs == 0 || bbs*mlx5.WQEBBSize > len(wqe) || bbs > q.Size {
		e.ctr.Inc(CtrBFFallback)
		return false
	}
	q.owner = e
	q.alloc()
	// Copy the BF bytes into the staging ring exactly where the host wrote
	// its copy, so both paths parse the same way.
	mask := q.Size - 1
	for i := 0; i < bbs; i++ {
		slot := (int(uint16(idx)) + i) & mask
		copy(q.stage[slot*mlx5.WQEBBSize:(slot+1)*mlx5.WQEBBSize], wqe[i*mlx5.WQEBBSize:])
	}
	end := idx.Add(bbs)
	q.issued = end
	q.BFs++
	e.ctr.Inc(CtrBF)
	e.parse(t, q, q.gen, idx, end, t, FromBlueFlame, false)
	return true
}

// parse decodes the WQEs in [from, to) (one fetch or one BlueFlame write,
// announced at ann) from the staging ring and hands them to the sink in
// order; dmaErr marks a range whose read failed (every WQE ErrFetchDMA).
// It reports false, dropping the rest of the range, when the sink reset or
// closed the queue (generation gen is gone).
func (e *Engine) parse(t sim.Time, q *Queue, gen uint32, from, to mlx5.WQECounter, ann sim.Time, src Source, dmaErr bool) bool {
	for from != to {
		if q.closed || q.gen != gen || q.next != from {
			// The sink reset or closed the queue while we were
			// delivering this range: the rest is stale.
			q.Stale++
			e.ctr.Inc(CtrFetchStale)
			return false
		}
		w := &e.wqe
		bbs := e.decode(q, from, to, w)
		if dmaErr {
			w.State = StateInvalid
			w.Err = fmt.Errorf("%w: WQEBBs [%d, %d) of QP %#x", ErrFetchDMA, uint16(from), uint16(to), q.QPN)
		}
		w.Source = src
		w.Announced = ann
		w.Fetched = t
		from = from.Add(bbs)
		q.next = from
		e.sink.WQEReady(t, q, w)
	}
	return !q.closed && q.gen == gen
}

// decode copies one WQE starting at counter idx (limit: to, the end of the
// fetch or BlueFlame write it arrived in) into w and validates it. It always
// returns at least one basic block, and never more than idx.Dist(to), so
// that a corrupt ring still makes progress and parsing ends exactly at to.
func (e *Engine) decode(q *Queue, idx, to mlx5.WQECounter, w *WQE) int {
	*w = WQE{}
	w.Index = uint16(idx)
	avail := idx.Dist(to)
	mask := q.Size - 1
	slot := int(uint16(idx)) & mask
	copy(e.buf[:mlx5.WQEBBSize], q.stage[slot*mlx5.WQEBBSize:])
	c := mlx5.CtrlSeg(e.buf[:mlx5.CtrlSegSize])
	w.Ctrl = c.Fields()
	ds := int(w.Ctrl.DS)
	bbs := mlx5.WQEBBs(ds)
	if ds == 0 {
		w.BBs = 1
		w.Bytes = e.buf[:mlx5.WQEBBSize]
		return failBBs(w, 1, e, ErrBadDS, "DS 0")
	}
	if bbs > avail {
		w.BBs = 1
		w.Bytes = e.buf[:mlx5.WQEBBSize]
		return failBBs(w, 1, e, ErrBadDS, fmt.Sprintf("DS %d needs %d basic blocks but only %d were announced", ds, bbs, avail))
	}
	for i := 1; i < bbs; i++ {
		s := (int(uint16(idx)) + i) & mask
		copy(e.buf[i*mlx5.WQEBBSize:(i+1)*mlx5.WQEBBSize], q.stage[s*mlx5.WQEBBSize:])
	}
	w.BBs = bbs
	w.Bytes = e.buf[:ds*mlx5.DSSize]
	if w.Ctrl.QPN != q.QPN {
		return failBBs(w, bbs, e, ErrBadQPN, fmt.Sprintf("ctrl QPN %#x on QP %#x", w.Ctrl.QPN, q.QPN))
	}
	if w.Ctrl.WQEIndex != uint16(idx) {
		return failBBs(w, bbs, e, ErrBadIndex, fmt.Sprintf("wqe_index %d at producer counter %d", w.Ctrl.WQEIndex, uint16(idx)))
	}
	segs := w.Bytes[mlx5.CtrlSegSize:]
	op := w.Ctrl.Opcode
	inlineOK := true // may the data be an inline segment
	atomic := false
	if q.Datagram && op != mlx5.OpNOP {
		if op != mlx5.OpSend && op != mlx5.OpSendImm {
			return failBBs(w, bbs, e, ErrBadOpcode, fmt.Sprintf("opcode %v on a UD queue", op))
		}
		if len(segs) < DatagramSegSize {
			return failBBs(w, bbs, e, ErrBadDS, fmt.Sprintf("UD %v needs a datagram segment, DS %d", op, ds))
		}
		w.HasAV = true
		w.AV = decodeDatagram(segs)
		segs = segs[DatagramSegSize:]
	}
	switch op {
	case mlx5.OpRDMAWrite, mlx5.OpRDMAWriteImm, mlx5.OpRDMARead:
		if len(segs) < mlx5.RaddrSegSize {
			return failBBs(w, bbs, e, ErrBadDS, fmt.Sprintf("%v needs a remote-address segment, DS %d", op, ds))
		}
		w.HasRaddr = true
		w.Raddr = mlx5.RaddrSeg(segs).Fields()
		segs = segs[mlx5.RaddrSegSize:]
		inlineOK = op != mlx5.OpRDMARead
	case mlx5.OpAtomicCS, mlx5.OpAtomicFA:
		// ctrl, raddr, atomic (swap_add, compare), one data segment for
		// the 8-byte local buffer (mlx5.md §4.5-4.6). The 8-byte length
		// is the device's check, not the decoder's.
		if len(segs) < mlx5.RaddrSegSize+mlx5.AtomicSegSize {
			return failBBs(w, bbs, e, ErrBadDS, fmt.Sprintf("%v needs remote-address and atomic segments, DS %d", op, ds))
		}
		w.HasRaddr = true
		w.Raddr = mlx5.RaddrSeg(segs).Fields()
		a := mlx5.AtomicSeg(segs[mlx5.RaddrSegSize:])
		w.HasAtomic = true
		w.Atomic.SwapAdd = a.SwapAdd()
		if op == mlx5.OpAtomicCS {
			w.Atomic.Compare = a.Compare()
		}
		segs = segs[mlx5.RaddrSegSize+mlx5.AtomicSegSize:]
		inlineOK, atomic = false, true
	case mlx5.OpSend, mlx5.OpSendImm, mlx5.OpSendInval:
	case mlx5.OpNOP:
		w.State = StateValid
		return bbs
	default:
		return failBBs(w, bbs, e, ErrBadOpcode, fmt.Sprintf("opcode %v", op))
	}
	// Data: one inline segment, or data-pointer segments.
	//
	// A ConnectX tells them apart by bit 31 (MLX5_INLINE_SEG) of the first
	// dword after the fixed segments: set means an inline segment, whatever
	// the provider meant. A data pointer's byte_count must keep bit 31
	// clear (mlx5.md §4.5), so an SGE of length >= 2^31 is not expressible
	// as a data pointer: a real NIC parses it as inline too, and the only
	// fix is refusing such an SGE at post time, in the provider. The
	// decoder is exact about what it then accepts:
	//   - bit 31 set on READ or an atomic: invalid (ErrBadSegment);
	//   - inline: the header's 31-bit length must need exactly the bytes
	//     DS leaves (InlineSegSize(len) == remaining), so a length larger
	//     than DS leaves, or padding of 16 bytes or more, is invalid
	//     (ErrBadSegment); a 16-byte data segment whose byte_count is
	//     0x80000000|n with n <= 12 is a well-formed inline segment of n
	//     bytes (the lkey and address bytes are its payload);
	//   - bit 31 set on any later data segment: invalid (ErrBadSegment).
	if len(segs) >= mlx5.InlineHdrSize && mlx5.IsInline(binary.BigEndian.Uint32(segs)) {
		if !inlineOK {
			return failBBs(w, bbs, e, ErrBadSegment, fmt.Sprintf("inline data on %v", op))
		}
		n := uint64(mlx5.InlineSeg(segs).Len())
		if n > uint64(len(segs)-mlx5.InlineHdrSize) || mlx5.InlineSegSize(int(n)) != len(segs) {
			return failBBs(w, bbs, e, ErrBadSegment, fmt.Sprintf("inline length %d does not fill the %d bytes DS leaves", n, len(segs)))
		}
		w.IsInline = true
		w.Inline = segs[mlx5.InlineHdrSize : mlx5.InlineHdrSize+int(n)]
		w.Length = n
		w.State = StateValid
		return bbs
	}
	n := 0
	for len(segs) >= mlx5.DataSegSize {
		d := mlx5.DataSeg(segs).Fields()
		segs = segs[mlx5.DataSegSize:]
		if d.ByteCount&mlx5.InlineFlag != 0 {
			return failBBs(w, bbs, e, ErrBadSegment, "inline segment after a data pointer")
		}
		e.sges[n] = d
		n++
		w.Length += uint64(d.ByteCount)
	}
	if atomic && n != 1 {
		return failBBs(w, bbs, e, ErrBadDS, fmt.Sprintf("%v needs exactly one data segment, has %d (DS %d)", op, n, ds))
	}
	w.SGEs = e.sges[:n]
	w.State = StateValid
	return bbs
}

func failBBs(w *WQE, bbs int, e *Engine, err error, detail string) int {
	w.State = StateInvalid
	w.Err = fmt.Errorf("%w: %s", err, detail)
	w.BBs = bbs
	e.ctr.Inc(CtrWQEInvalid)
	return bbs
}

// FlowID is the trace flow of a WQE: QPN and wqe_index.
func FlowID(qpn uint32, idx uint16) uint64 { return flowID(qpn, idx) }

func flowID(qpn uint32, idx uint16) uint64 { return uint64(qpn)<<16 | uint64(idx) }
