package device

import (
	"encoding/binary"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/sim"
)

// recvWQE is one receive WQE taken from a receive queue: where its
// message goes.
type recvWQE struct {
	index uint16 // the WQE counter reported in the CQE
	sges  [64]mlx5.DataFields
	nsge  int
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
	// psn is the PSN of the packet that needs it (for the trace).
	take(t sim.Time, w *recvWQE, psn int32) (done sim.Time, ok bool)
	// flushOne retires the oldest posted WQE without data (for a flush)
	// and returns its counter; ok is false when none is left.
	flushOne() (idx uint16, ok bool)
	// reset forgets every posted WQE (QP to RESET).
	reset()
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
}

func (r *rqRing) size() int { return int(r.cnt) }

func (r *rqRing) pd() uint32 { return r.pdn }

func (r *rqRing) reset() { r.head, r.tail = 0, 0 }

func (r *rqRing) refresh(t sim.Time) sim.Time {
	d := r.d
	if r.cnt == 0 {
		return t
	}
	done, posted, ok := d.readProducer(t, r.dbr, r.tail, r.cnt, "QP", r.qpn, CtrRQDBRReadError, CtrRQDBRBad)
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
	done, _, err := d.dma.Read(t, dbr, b[:])
	if err != nil {
		d.warn(t, readErr, "%s %#x: %v", what, id, err)
		return t, 0, false
	}
	c16 := uint16(binary.BigEndian.Uint32(b[:]))
	ahead := uint32(c16 - uint16(consumed))
	if ahead > size {
		d.warn(t, bad, "%s %#x doorbell record %d is %d ahead of the %d consumed (queue of %d)", what, id, c16, ahead, uint16(consumed), size)
		return done, 0, false
	}
	return done, consumed + ahead, true
}

func (r *rqRing) take(t sim.Time, w *recvWQE, psn int32) (sim.Time, bool) {
	d := r.d
	if r.cnt == 0 {
		return t, false
	}
	if r.tail == r.head {
		t = r.refresh(t)
		if r.tail == r.head {
			return t, false
		}
	}
	slot := r.tail & (r.cnt - 1)
	addr := r.base + uint64(slot)*uint64(r.stride)
	buf := d.rqbuf[:r.stride]
	done, st, err := d.dma.Read(t, addr, buf)
	if err != nil {
		d.warn(t, CtrRQReadError, "QP %#x RQ WQE %d: %v", r.qpn, r.tail, err)
		return t, false
	}
	d.rec.StagePSN(d.node, "dma", "rq_wqe_fetch", t, done, len(buf), st.TLPs(), r.qpn, 0, psn)
	w.index = uint16(r.tail)
	w.nsge = 0
	for off := 0; off+mlx5.DataSegSize <= len(buf) && w.nsge < len(w.sges); off += mlx5.DataSegSize {
		s := mlx5.DataSeg(buf[off:]).Fields()
		if s.LKey == mlx5.InvalidKey {
			break
		}
		w.sges[w.nsge] = s
		w.nsge++
	}
	r.tail++
	return done, true
}

func (r *rqRing) flushOne() (uint16, bool) {
	if r.tail == r.head {
		return 0, false
	}
	idx := uint16(r.tail)
	r.tail++
	return idx, true
}
