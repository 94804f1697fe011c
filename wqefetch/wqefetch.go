package wqefetch

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/softnic/softnic/dma"
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
)

// MaxWQEBytes is the largest WQE the device accepts (63 DS = 1008 B).
const MaxWQEBytes = mlx5.MaxDS * mlx5.DSSize

// MaxSGE is the most data segments one WQE can carry.
const MaxSGE = mlx5.MaxDS - 1

// WQE is one fetched and decoded send WQE. It is owned by the engine and
// valid only during Sink.WQEReady: the sink copies what it keeps.
type WQE struct {
	Index     uint16 // wqe_index (WQEBB counter of the first basic block)
	BBs       int
	Bytes     []byte // the whole WQE, DS*16 bytes (copied out of the ring)
	Ctrl      mlx5.CtrlFields
	HasRaddr  bool
	Raddr     mlx5.RaddrFields
	SGEs      []mlx5.DataFields
	Inline    []byte // inline payload, nil when none
	IsInline  bool
	Length    uint64 // total payload bytes (SGEs or inline)
	Source    Source
	State     State
	Err       error // set when State == StateInvalid
	Announced sim.Time
	Fetched   sim.Time

	buf  [MaxWQEBytes]byte
	sges [MaxSGE]mlx5.DataFields
}

// Queue is the fetch state of one send queue.
type Queue struct {
	QPN    uint32
	Base   uint64 // IOVA of WQEBB 0
	Size   int    // WQEBBs, a power of two
	Node   int
	next   mlx5.WQECounter // next WQEBB the device will parse
	issued mlx5.WQECounter // fetch requested up to here
	stage  []byte          // device-side copy of the ring
	// Stats
	Fetches    uint64
	FetchBytes uint64
	BFs        uint64
}

// NewQueue returns the fetch state for a send queue of size WQEBBs at base.
func NewQueue(qpn uint32, base uint64, size int, node int) *Queue {
	return &Queue{QPN: qpn, Base: base, Size: size, Node: node, stage: make([]byte, size*mlx5.WQEBBSize)}
}

// Next is the counter of the next WQEBB the device expects.
func (q *Queue) Next() uint16 { return uint16(q.next) }

// Reset sets both counters (QP moved to RESET, or a new queue).
func (q *Queue) Reset(c uint16) { q.next, q.issued = mlx5.WQECounter(c), mlx5.WQECounter(c) }

// Pending reports whether a fetch is outstanding.
func (q *Queue) Pending() bool { return q.next != q.issued }

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
}

// New returns a fetch engine that DMA-reads through d and hands WQEs to s.
func New(eng *sim.Engine, d *dma.Engine, s Sink, rec *trace.Recorder, ctr *trace.Counters, node int) *Engine {
	return &Engine{eng: eng, dma: d, sink: s, rec: rec, ctr: ctr, node: node}
}

// fetchDone is the event at which a DMA fetch's data is in the device.
type fetchDone struct {
	e        *Engine
	q        *Queue
	from, to mlx5.WQECounter
	start    sim.Time
	src      Source
}

func (f *fetchDone) Fire(now sim.Time) {
	e, q := f.e, f.q
	from, to := f.from, f.to
	e.free = append(e.free, f)
	e.parse(now, q, from, to, FromDMA)
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
	if c.QPN() != q.QPN {
		e.ctr.Inc("db_bad_qpn")
		e.rec.Warnf(e.node, t, "wqefetch", "db_bad_qpn", "doorbell QPN %#x on queue of QP %#x", c.QPN(), q.QPN)
		return ErrBadQPN
	}
	bbs := mlx5.WQEBBs(ds)
	if bbs == 0 {
		bbs = 1
	}
	end := idx.Add(bbs)
	// The new producer value must be ahead of what was already requested
	// and not lap the ring.
	ahead := q.issued.Dist(end)
	if ahead == 0 {
		e.ctr.Inc("db_no_new_wqe")
		e.rec.Warnf(e.node, t, "wqefetch", "db_no_new_wqe", "QP %#x doorbell for wqe_index %d announces nothing new", q.QPN, idx)
		return nil
	}
	if ahead > q.Size || q.next.Dist(end) > q.Size {
		e.ctr.Inc("db_bad_counter")
		e.rec.Warnf(e.node, t, "wqefetch", "db_bad_counter", "QP %#x doorbell wqe_index %d (+%d BBs) laps the %d-BB ring (device at %d)", q.QPN, idx, bbs, q.Size, q.next)
		return ErrBadDoorbell
	}
	e.fetch(t, q, end)
	return nil
}

// fetch DMA-reads WQEBBs [q.issued, end) into the staging copy: one read per
// contiguous run (two when the range wraps); the DMA engine splits each read
// into MRd TLPs by MRRS.
func (e *Engine) fetch(t sim.Time, q *Queue, end mlx5.WQECounter) {
	from := q.issued
	n := from.Dist(end)
	mask := q.Size - 1
	first := int(uint16(from)) & mask
	done := t
	var st int
	var tlps int
	bytes := 0
	for n > 0 {
		run := n
		if first+run > q.Size {
			run = q.Size - first
		}
		off := first * mlx5.WQEBBSize
		dst := q.stage[off : off+run*mlx5.WQEBBSize]
		d, s, err := e.dma.Read(t, q.Base+uint64(off), dst)
		if err != nil {
			// The ring is outside host memory: the WQEs cannot be read.
			// Mark the bytes invalid (zero) so validation fails them.
			clear(dst)
			e.ctr.Inc("wqe_fetch_dma_error")
			e.rec.Warnf(e.node, t, "wqefetch", "wqe_fetch_dma_error", "QP %#x SQ read [%#x,+%d): %v", q.QPN, q.Base+uint64(off), len(dst), err)
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
	e.ctr.Add("wqe_fetch_reads", uint64(st))
	e.ctr.Add("wqe_fetch_bytes", uint64(bytes))
	e.rec.Stage(e.node, "wqefetch", "wqe_fetch", t, done, bytes, tlps, q.QPN, flowID(q.QPN, uint16(from)))
	var f *fetchDone
	if k := len(e.free); k > 0 {
		f = e.free[k-1]
		e.free = e.free[:k-1]
	} else {
		f = &fetchDone{e: e}
	}
	f.q, f.from, f.to, f.start = q, from, end, t
	e.eng.At(done, f)
}

// BlueFlame handles a complete BlueFlame write. It returns false when the
// WQE cannot be taken from the BF buffer (an earlier fetch is still pending,
// or the index is not the next expected one); the caller then treats the
// first 8 bytes as a doorbell, as hardware falls back to the memory copy.
func (e *Engine) BlueFlame(t sim.Time, q *Queue, wqe []byte) bool {
	if len(wqe) < mlx5.CtrlSegSize {
		return false
	}
	c := mlx5.CtrlSeg(wqe)
	idx := mlx5.WQECounter(c.WQEIndex())
	if q.Pending() || idx != q.next || c.QPN() != q.QPN {
		e.ctr.Inc("bf_fallback_fetch")
		return false
	}
	bbs := mlx5.WQEBBs(int(c.DS()))
	if bbs == 0 || bbs*mlx5.WQEBBSize > len(wqe) || bbs > q.Size {
		e.ctr.Inc("bf_fallback_fetch")
		return false
	}
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
	e.ctr.Inc("wqe_bf")
	e.parse(t, q, idx, end, FromBlueFlame)
	return true
}

// parse decodes WQEs in [from, to) from the staging ring and hands them to
// the sink in order.
func (e *Engine) parse(t sim.Time, q *Queue, from, to mlx5.WQECounter, src Source) {
	for from != to {
		if q.next != from {
			// Fetches complete in order, so this means a reset in between.
			e.ctr.Inc("wqe_fetch_stale")
			return
		}
		w := &e.wqe
		bbs := e.decode(q, from, to, w)
		w.Source = src
		w.Announced = t
		w.Fetched = t
		from = from.Add(bbs)
		q.next = from
		e.sink.WQEReady(t, q, w)
	}
}

// decode copies one WQE starting at counter idx (limit: to) into w and
// validates it. It always returns at least one basic block so that a
// corrupt ring still makes progress.
func (e *Engine) decode(q *Queue, idx, to mlx5.WQECounter, w *WQE) int {
	*w = WQE{buf: w.buf}
	w.Index = uint16(idx)
	avail := idx.Dist(to)
	mask := q.Size - 1
	slot := int(uint16(idx)) & mask
	copy(w.buf[:mlx5.WQEBBSize], q.stage[slot*mlx5.WQEBBSize:])
	c := mlx5.CtrlSeg(w.buf[:mlx5.CtrlSegSize])
	w.Ctrl = c.Fields()
	ds := int(w.Ctrl.DS)
	bbs := mlx5.WQEBBs(ds)
	fail := func(err error, format string, args ...any) int {
		w.State = StateInvalid
		w.Err = fmt.Errorf("%w: "+format, append([]any{err}, args...)...)
		w.BBs = 1
		w.Bytes = w.buf[:mlx5.WQEBBSize]
		e.ctr.Inc("wqe_invalid")
		return 1
	}
	if ds == 0 {
		return fail(ErrBadDS, "DS 0")
	}
	if bbs > avail {
		return fail(ErrBadDS, "DS %d needs %d basic blocks but only %d were announced", ds, bbs, avail)
	}
	for i := 1; i < bbs; i++ {
		s := (int(uint16(idx)) + i) & mask
		copy(w.buf[i*mlx5.WQEBBSize:(i+1)*mlx5.WQEBBSize], q.stage[s*mlx5.WQEBBSize:])
	}
	w.BBs = bbs
	w.Bytes = w.buf[:ds*mlx5.DSSize]
	if w.Ctrl.QPN != q.QPN {
		return failBBs(w, bbs, e, ErrBadQPN, fmt.Sprintf("ctrl QPN %#x on QP %#x", w.Ctrl.QPN, q.QPN))
	}
	if w.Ctrl.WQEIndex != uint16(idx) {
		return failBBs(w, bbs, e, ErrBadIndex, fmt.Sprintf("wqe_index %d at producer counter %d", w.Ctrl.WQEIndex, uint16(idx)))
	}
	segs := w.Bytes[mlx5.CtrlSegSize:]
	switch w.Ctrl.Opcode {
	case mlx5.OpRDMAWrite, mlx5.OpRDMAWriteImm, mlx5.OpRDMARead:
		if len(segs) < mlx5.RaddrSegSize {
			return failBBs(w, bbs, e, ErrBadDS, fmt.Sprintf("%v needs a remote-address segment, DS %d", w.Ctrl.Opcode, ds))
		}
		w.HasRaddr = true
		w.Raddr = mlx5.RaddrSeg(segs).Fields()
		segs = segs[mlx5.RaddrSegSize:]
	case mlx5.OpSend, mlx5.OpSendImm, mlx5.OpNOP:
	default:
		return failBBs(w, bbs, e, ErrBadOpcode, fmt.Sprintf("opcode %v", w.Ctrl.Opcode))
	}
	if w.Ctrl.Opcode == mlx5.OpNOP {
		w.State = StateValid
		return bbs
	}
	// Data: one inline segment, or data-pointer segments.
	if len(segs) >= 4 && mlx5.IsInline(binary.BigEndian.Uint32(segs)) {
		if w.Ctrl.Opcode == mlx5.OpRDMARead {
			return failBBs(w, bbs, e, ErrBadSegment, "inline data on an RDMA READ")
		}
		n := int(mlx5.InlineSeg(segs).Len())
		if mlx5.InlineSegSize(n) != len(segs) {
			return failBBs(w, bbs, e, ErrBadSegment, fmt.Sprintf("inline length %d does not fill the %d bytes DS leaves", n, len(segs)))
		}
		w.IsInline = true
		w.Inline = segs[mlx5.InlineHdrSize : mlx5.InlineHdrSize+n]
		w.Length = uint64(n)
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
		w.sges[n] = d
		n++
		w.Length += uint64(d.ByteCount)
	}
	w.SGEs = w.sges[:n]
	w.State = StateValid
	return bbs
}

func failBBs(w *WQE, bbs int, e *Engine, err error, detail string) int {
	w.State = StateInvalid
	w.Err = fmt.Errorf("%w: %s", err, detail)
	w.BBs = bbs
	e.ctr.Inc("wqe_invalid")
	return bbs
}

// FlowID is the trace flow of a WQE: QPN and wqe_index.
func FlowID(qpn uint32, idx uint16) uint64 { return flowID(qpn, idx) }

func flowID(qpn uint32, idx uint16) uint64 { return uint64(qpn)<<16 | uint64(idx) }
