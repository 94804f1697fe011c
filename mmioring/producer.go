package mmioring

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"
)

// Default wait policy: polls of the peer's index, then yields, then a
// futex sleep until the deadline.
const (
	DefaultSpin  = 200
	DefaultYield = 20
)

// Producer is the writing end (the client's host side). One goroutine at a
// time may use it.
type Producer struct {
	r *Ring
	// Spin and Yield: how many times a blocked Push polls the consumer
	// index, then polls after runtime.Gosched, before it sleeps on the
	// futex. Set before use.
	Spin, Yield int

	pos       uint32      // next slot to write (authoritative; never re-read)
	published uint32      // last value stored to the shared producer index
	cons      uint32      // cached consumer index
	need      uint32      // slots the blocked PushN waits for (waitSpace)
	closed    atomic.Bool // Close may come from another goroutine
	err       error       // sticky ErrBadRing
}

// Producer returns the ring's producer endpoint, resuming from the
// producer index in shared memory.
func (r *Ring) Producer() *Producer {
	p := atomic.LoadUint32(r.prod)
	return &Producer{r: r, Spin: DefaultSpin, Yield: DefaultYield, pos: p, published: p, cons: atomic.LoadUint32(r.cons)}
}

// Push writes one record. It waits for room until deadline (the zero
// Time: do not wait, ErrFull), then fails with ErrTimeout; ErrClosed once
// either side closed the ring.
func (p *Producer) Push(rec *Record, deadline time.Time) error {
	_, err := p.PushN(unsafe.Slice(rec, 1), deadline)
	return err
}

// PushN writes recs in order and publishes them with one store of the
// producer index (one per ring-full of records if they do not fit at
// once). It returns how many records it published; on a bad record it
// publishes those before it and returns ErrBadRecord.
func (p *Producer) PushN(recs []Record, deadline time.Time) (int, error) {
	if p.err != nil {
		return 0, p.err
	}
	if p.closed.Load() || atomic.LoadUint32(p.r.closed) != 0 {
		return 0, ErrClosed
	}
	n := p.r.n
	for i := range recs {
		rec := &recs[i]
		if err := rec.Check(); err != nil {
			p.publish()
			return i, fmt.Errorf("record %d: %w", i, err)
		}
		need := uint32(nslots(rec.Width))
		if p.pos-p.cons+need > n && (!p.reload() || p.pos-p.cons+need > n) {
			p.publish()
			if p.err != nil {
				return i, p.err
			}
			if err := p.waitSpace(need, deadline); err != nil {
				return i, err
			}
		}
		p.write(rec)
	}
	p.publish()
	return len(recs), nil
}

// write copies rec into the slots at p.pos with plain stores.
func (p *Producer) write(rec *Record) {
	le := binary.LittleEndian
	s := p.r.slot(p.pos)
	le.PutUint32(s[slotSeq:], p.pos)
	s[slotWidth] = rec.Width
	s[slotFlags] = rec.Flags
	le.PutUint16(s[slotRsvd:], 0)
	le.PutUint64(s[slotOff:], rec.Off)
	le.PutUint64(s[slotTime:], uint64(rec.Time))
	le.PutUint64(s[slotMask:], rec.Mask)
	var d uint64
	switch rec.Width {
	case 4:
		d = uint64(le.Uint32(rec.Data[:4]))
	case 8:
		d = le.Uint64(rec.Data[:8])
	case 0:
		if rec.Flags == FlagCall {
			d = le.Uint64(rec.Data[:8])
		}
	}
	le.PutUint64(s[slotData:], d)
	le.PutUint32(s[slotQPN:], rec.QPN)
	le.PutUint32(s[slotRsvd2:], 0)
	le.PutUint64(s[slotFlow:], rec.Flow)
	le.PutUint64(s[56:], 0)
	p.pos++
	if rec.Width == 64 {
		*p.r.slot(p.pos) = rec.Data
		p.pos++
	}
}

// publish makes every written slot visible: one atomic store of the
// producer index after the plain payload stores (timing.md §9.5 rule 1),
// then a wake-up if the consumer said it sleeps.
func (p *Producer) publish() {
	if p.pos == p.published {
		return
	}
	p.published = p.pos
	atomic.StoreUint32(p.r.prod, p.pos)
	if atomic.LoadUint32(p.r.consSleep) != 0 && atomic.SwapUint32(p.r.consSleep, 0) != 0 {
		futexWake(p.r.consSleep, 1)
	}
}

// reload re-reads the consumer index; false (and p.err) if it is
// impossible: ahead of the producer, or moved backwards.
func (p *Producer) reload() bool {
	c := atomic.LoadUint32(p.r.cons)
	if used := p.pos - c; used > p.r.n || used > p.pos-p.cons {
		p.err = fmt.Errorf("%w: consumer index %d with producer at %d (was %d) in a ring of %d", ErrBadRing, c, p.pos, p.cons, p.r.n)
		return false
	}
	p.cons = c
	return true
}

// waitSpace waits until need slots are free, sleeping on the "producer
// waiting" futex word.
func (p *Producer) waitSpace(need uint32, deadline time.Time) error {
	p.need = need
	return await(p.r, p.r.prodWait, p.Spin, p.Yield, deadline, ErrFull, p)
}

// ready reports whether p.need slots are free (or why the ring is bad).
func (p *Producer) ready() (bool, error) {
	return p.reload() && p.pos-p.cons+p.need <= p.r.n, p.err
}

func (p *Producer) closedErr() error { return ErrClosed }

// Close marks the producer side closed and wakes the consumer; the
// consumer still pops what was published, then gets ErrClosed. It may be
// called from any goroutine, and fails a Push blocked in another.
func (p *Producer) Close() error {
	p.closed.Store(true)
	p.r.close(closedProducer)
	return nil
}
