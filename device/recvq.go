package device

import (
	"encoding/binary"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/pcie"
	"github.com/softnic/softnic/sim"
)

// recvWQE is one receive WQE taken from a receive queue: where its
// message goes.
type recvWQE struct {
	index uint16 // the WQE counter reported in the CQE
	sges  [64]mlx5.DataFields
	nsge  int
}

// parse fills w from a receive WQE's data segments, which start at off of
// buf and end at the first terminator key (mlx5.InvalidKey) or buf's end.
func (w *recvWQE) parse(index uint16, buf []byte, off int) {
	w.index = index
	w.nsge = 0
	for ; off+mlx5.DataSegSize <= len(buf) && w.nsge < len(w.sges); off += mlx5.DataSegSize {
		s := mlx5.DataSeg(buf[off:]).Fields()
		if s.LKey == mlx5.InvalidKey {
			break
		}
		w.sges[w.nsge] = s
		w.nsge++
	}
}

// recvQueue is where a QP's incoming SENDs and WRITE-with-immediates find
// their buffers. The QP's own RQ implements it; a shared receive queue
// will implement it too (one SRQ behind several QPs).
type recvQueue interface {
	// size is the number of WQEs the queue holds (0: the QP has none).
	size() int
	// refresh reads the producer counter from the doorbell record by DMA
	// and returns when it is in the device.
	refresh(t sim.Time) sim.Time
	// take consumes the next posted WQE into w, reading it by DMA, and
	// returns when it is in the device; ok is false when none is posted.
	// psn is the PSN of the packet that needs it (for the trace). err is
	// the DMA error of a WQE posted but unreadable (ok false): the QP's
	// own RQ consumes it anyway (w.index says which, w has no SGE), so
	// that it completes in error; an SRQ, which cannot follow its next
	// pointer, keeps it (w.index is its slot).
	take(t sim.Time, w *recvWQE, psn int32) (done sim.Time, ok bool, err error)
	// flushOne retires the oldest posted WQE without data (for a flush)
	// and returns its counter; ok is false when none is left.
	flushOne() (idx uint16, ok bool)
	// reset forgets every posted WQE (QP to RESET).
	reset()
	// prime starts a prefetch: the device reads ahead the next posted
	// WQE so that a message finds it on chip (QP to RTR).
	prime(t sim.Time)
	// noneKnown reports whether the device knows of no posted WQE (take
	// would read the doorbell record first).
	noneKnown() bool
	// kick is a doorbell of the QP's send queue: a QP that has received
	// before reads its next receive WQE ahead, if it has none on chip (a
	// ping-pong reposts its receive just before it answers).
	kick(t sim.Time)
	// quiesce stops any prefetch in progress (QP to ERR, destroyed).
	quiesce()
	// pd is the protection domain the WQEs' lkeys must belong to.
	pd() uint32
}

// rqRing is a QP's own receive queue: a ring of fixed-stride WQEs in host
// memory whose producer counter is word 0 of the QP's doorbell record
// (mlx5.md §5).
type rqRing struct {
	d      *Device
	qpn    uint32
	pdn    uint32
	base   uint64
	dbr    uint64
	cnt    uint32
	stride int
	head   uint32 // WQEs posted, as last read from DBR[0] (16-bit counter extended)
	tail   uint32 // WQEs consumed
	pre    rqPrefetch
}

// rqPrefetch is the receive-WQE read-ahead of one RQ. A ConnectX has
// its next receive WQE on chip when a SEND arrives: ib_send_lat and
// ib_write_lat give the same small-message latency on a CX-5 (timing.md
// §4.1), so the RQ doorbell-record and WQE reads are not on the critical
// path. How the hardware learns of new receives is not public (an RQ has
// no doorbell, only its record in host memory: mlx5.md §5). Assumed here
// (unconfirmed, profile switches core.rq_prefetch, rq_polls and
// rq_poll_interval_ps): after the QP reaches RTR, after each receive WQE
// it consumes, and on each send-queue doorbell of a QP that has received
// before, the device tops up a cache of rqAhead WQEs once half of it is
// taken: it reads the doorbell record if it knows of no WQE beyond the
// cache and reads the posted WQEs it does not hold, in one read per
// contiguous run; if none is posted and the cache is empty it re-reads
// the record every rq_poll_interval up to rq_polls times, then waits for
// the next trigger. A message that finds the cache empty pays the two
// reads as before. Every read is a real DMA on the link; a flush or a
// reset drops the cache.
type rqPrefetch struct {
	buf   []byte     // rqAhead slots of stride bytes: WQE i of the ring in slot i%rqAhead (allocated on first use)
	ready []sim.Time // rqAhead: when each slot's WQE is in the device (allocated with buf)
	n     uint32     // WQEs read ahead: those from the ring's tail on (every consumption takes the first; a flush or reset drops them)
	polls int        // doorbell-record re-reads left in this burst
	timer *sim.Timer
}

// rqAhead is how many receive WQEs the read-ahead keeps on chip. With one,
// a QP's SENDs ran at one message per DMA read latency (4 KiB SENDs at
// 7.2 of 11.7 GB/s on the cx5 profile, 64 B SENDs at 1.84 Mpps), where a
// ConnectX's single-QP send_bw reaches line rate. The depth is an
// assumption (not public): sixty-four, refilled in one read once half are
// taken, so that the thirty-two left outlast the read of thirty-two at the
// QP's own receive rate, one packet per rx_cycles (40 ns on the built-in
// profiles: 1.28 µs against 0.55 µs of DMA latency, timing.md §2.1, plus
// 0.58 µs streaming 2 KiB of 64-byte WQEs, four SGEs each). With sixteen
// (eight left: 320 ns) 64 B UD datagrams arriving every 40 ns stalled the
// QP at each refill and its backlog grew without bound; the doorbell
// record, read when a datagram arrives rather than when the backlog
// reaches it, then hid the receives reposted meanwhile and datagrams were
// dropped (send_bw -c UD -s 64: 79 of 2000, once the receive pipeline no longer waited for each datagram's writes to land). Thirty-two still stalled
// 176 ns every thirty-two with 64-byte WQEs.
const rqAhead = 64

type rqPollTimer struct{ r *rqRing }

func (p rqPollTimer) Fire(now sim.Time) { p.r.prefetch(now) }

// live reports whether the QP still receives (RTR or later, not ERR, on a
// device not in the fatal state).
func (r *rqRing) live() bool {
	q := r.d.qps[r.qpn]
	if q == nil || q.dead || r.d.fx.fatal {
		return false
	}
	switch q.state {
	case mlx5.QPStateRTR, mlx5.QPStateRTS, mlx5.QPStateSQD, mlx5.QPStateSQER:
		return true
	}
	return false
}

func (r *rqRing) prime(t sim.Time) {
	if r.cnt == 0 || !r.d.spec.Core.RQPrefetch {
		return
	}
	r.pre.polls = r.d.spec.Core.RQPolls
	r.prefetch(t)
}

func (r *rqRing) kick(t sim.Time) {
	if r.tail == 0 || r.pre.n > 0 {
		return // never received: a send-only QP does not read its RQ
	}
	r.prime(t)
}

func (r *rqRing) quiesce() {
	r.pre.n, r.pre.polls = 0, 0
	if r.pre.timer != nil {
		r.pre.timer.Stop()
	}
}

// prefetch reads the next posted WQEs ahead, up to rqAhead (once at
// most half are left, so that one read covers the next few messages), or
// schedules the next doorbell-record poll of the burst when none is posted.
func (r *rqRing) prefetch(t sim.Time) {
	d := r.d
	defer d.dma.RestoreFaultQP(d.dma.SetFaultQP(r.qpn))
	if r.pre.n > rqAhead/2 || !r.live() {
		return
	}
	next := r.tail + r.pre.n // the first WQE not read ahead
	if next == r.head {
		t = r.refresh(t)
	}
	if next == r.head {
		if r.pre.n == 0 && r.pre.polls > 0 {
			r.pre.polls--
			if r.pre.timer == nil {
				r.pre.timer = d.eng.NewTimer(rqPollTimer{r})
			}
			r.pre.timer.Reset(t + sim.Time(d.spec.Core.RQPollInterval))
		}
		return
	}
	if r.pre.buf == nil {
		r.pre.buf = make([]byte, rqAhead*r.stride)
		r.pre.ready = make([]sim.Time, rqAhead)
	}
	// One read per contiguous run: the run ends where the ring or the
	// slots wrap.
	k := min(r.head-next, rqAhead-r.pre.n, r.cnt-next&(r.cnt-1), rqAhead-next%rqAhead)
	slot := int(next % rqAhead)
	buf := r.pre.buf[slot*r.stride : (slot+int(k))*r.stride]
	done, st, err := d.dma.Read(t, r.base+uint64(next&(r.cnt-1))*uint64(r.stride), buf)
	if err != nil {
		// Nothing is cached: the message that needs the WQE reads it
		// again (take), and fails if that read fails too. With
		// faults.dma_error_fatal the PCIe error is a device fatal error,
		// as on every other DMA access.
		d.warn(t, CtrRQReadError, "QP %#x RQ WQE %d (prefetch): %v", r.qpn, next, err)
		d.dmaFatal(t, err)
		return
	}
	d.inc(CtrRQPrefetch)
	d.rec.StagePSN(d.node, "dma", "rq_wqe_prefetch", t, done, len(buf), st.TLPs(), r.qpn, 0, noPSN)
	for i := range int(k) {
		r.pre.ready[slot+i] = done
	}
	r.pre.n += k
	if r.pre.timer != nil {
		r.pre.timer.Stop()
	}
}

// await re-reads the doorbell record if every WQE known to be posted is
// consumed, and returns when the device knows.
func (r *rqRing) await(t sim.Time) sim.Time {
	if r.tail == r.head {
		return r.refresh(t)
	}
	return t
}

// slotAddr is the host address of the next WQE to consume.
func (r *rqRing) slotAddr() uint64 {
	return r.base + uint64(r.tail&(r.cnt-1))*uint64(r.stride)
}

func (r *rqRing) size() int { return int(r.cnt) }

func (r *rqRing) noneKnown() bool { return r.cnt > 0 && r.tail == r.head }

func (r *rqRing) pd() uint32 { return r.pdn }

func (r *rqRing) reset() {
	r.quiesce()
	r.head, r.tail = 0, 0
}

func (r *rqRing) refresh(t sim.Time) sim.Time {
	d := r.d
	defer d.dma.RestoreFaultQP(d.dma.SetFaultQP(r.qpn))
	if r.cnt == 0 {
		return t
	}
	done, posted, ok := d.readProducer(t, r.dbr, r.tail, r.cnt, "QP", r.qpn, CtrRQDBRReadError, CtrRQDBRBad)
	if ok && posted-r.tail < r.head-r.tail {
		// Behind the count it gave before (a producer counter never goes
		// back): a provider bug, ignored. The WQEs below the old count
		// stay posted; taken as the producer, the lower count made the
		// read-ahead's next run go from its cache's end past it, into
		// slots never posted, whose stale bytes were later used as the
		// WQEs the provider did post there.
		d.warn(t, CtrRQDBRBad, "QP %#x doorbell record %d is behind the %d it gave before (%d consumed)", r.qpn, uint16(posted), uint16(r.head), uint16(r.tail))
		return done
	}
	if ok {
		r.head = posted
	}
	return done
}

// readProducer reads a receive queue's doorbell record (word 0: the
// 16-bit count of WQEs posted, big-endian) by DMA and extends it relative
// to consumed. A count more than size ahead of consumed is a provider bug:
// counted (bad) and ignored. It returns when the value is in the device.
func (d *Device) readProducer(t sim.Time, dbr uint64, consumed, size uint32, what string, id uint32, readErr, bad counter) (sim.Time, uint32, bool) {
	var b [4]byte
	d.dbrTarget()
	done, _, err := d.dma.Read(t, dbr, b[:])
	if err != nil {
		d.warn(t, readErr, "%s %#x: %v", what, id, err)
		d.dmaFatal(t, err) // faults.dma_error_fatal: as on every other DMA read
		return t, 0, false
	}
	c16 := uint16(binary.BigEndian.Uint32(b[:]))
	posted, ok := extendProducer(c16, consumed, size)
	if !ok {
		d.warn(t, bad, "%s %#x doorbell record %d is %d ahead of the %d consumed (queue of %d)", what, id, c16, posted-consumed, uint16(consumed), size)
		return done, 0, false
	}
	return done, posted, true
}

// extendProducer extends a doorbell record's 16-bit count of WQEs posted
// relative to consumed; ok is false when it is more than size ahead.
func extendProducer(c16 uint16, consumed, size uint32) (posted uint32, ok bool) {
	ahead := uint32(c16 - uint16(consumed))
	return consumed + ahead, ahead <= size
}

func (r *rqRing) take(t sim.Time, w *recvWQE, psn int32) (sim.Time, bool, error) {
	d := r.d
	if r.cnt == 0 {
		return t, false, nil
	}
	if t = r.await(t); r.tail == r.head {
		return t, false, nil
	}
	var buf []byte
	var done sim.Time
	if r.pre.n > 0 {
		r.pre.n--
		// Read ahead: on chip once its read completed.
		slot := int(r.tail % rqAhead)
		buf, done = r.pre.buf[slot*r.stride:(slot+1)*r.stride], max(t, r.pre.ready[slot])
		d.inc(CtrRQPrefetchHit)
		d.rec.StagePSN(d.node, "device", "rq_wqe_hit", t, done, len(buf), 0, r.qpn, 0, psn)
	} else {
		buf = d.rqbuf[:r.stride]
		var st pcie.Stats
		var err error
		done, st, err = d.dma.Read(t, r.slotAddr(), buf)
		if err != nil {
			// Posted but unreadable: consumed, to complete in error.
			// Taken as "none posted", it had the responder answer RNR
			// for ever (rnr_retry 7) while the WQE stayed posted and no
			// completion ever said why.
			d.warn(t, CtrRQReadError, "QP %#x RQ WQE %d: %v", r.qpn, r.tail, err)
			w.index, w.nsge = uint16(r.tail), 0
			r.tail++
			return t, false, err // no read-ahead: the next message reads its own
		}
		d.rec.StagePSN(d.node, "dma", "rq_wqe_fetch", t, done, len(buf), st.TLPs(), r.qpn, 0, psn)
	}
	if d.chk != nil {
		d.chk.recvWQE(done, "QP", r.qpn, r.tail, buf, 0)
	}
	w.parse(uint16(r.tail), buf, 0)
	r.tail++
	r.prime(done) // read the next ones ahead
	return done, true, nil
}

func (r *rqRing) flushOne() (uint16, bool) {
	r.pre.n = 0
	if r.tail == r.head {
		return 0, false
	}
	idx := uint16(r.tail)
	r.tail++
	return idx, true
}
