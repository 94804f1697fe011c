package mmioring

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"
)

// Consumer is the reading end (the device daemon). One goroutine at a
// time may use it. Everything it reads from shared memory is checked:
// a producer can make it return errors, never panic, loop or read outside
// the ring.
type Consumer struct {
	r *Ring
	// Spin and Yield: how many times a blocked Pop polls the producer
	// index, then polls after runtime.Gosched, before it sleeps on the
	// futex. Set before use.
	Spin, Yield int

	pos      uint32      // next slot to read (authoritative; never re-read)
	released uint32      // last value stored to the shared consumer index
	prod     uint32      // cached producer index
	closed   atomic.Bool // Close may come from another goroutine
	err      error       // sticky ErrBadRing
	call     uint32      // ring position of the last call popped (Reply answers it)
	haveCall bool
}

// Consumer returns the ring's consumer endpoint, resuming from the
// consumer index in shared memory.
func (r *Ring) Consumer() *Consumer {
	c := atomic.LoadUint32(r.cons)
	return &Consumer{r: r, Spin: DefaultSpin, Yield: DefaultYield, pos: c, released: c, prod: c}
}

// Pop reads one record into rec. It waits for one until deadline (the zero
// Time: do not wait, ErrEmpty), then fails with ErrTimeout; ErrClosed once
// this side closed, or the producer closed and every record was popped.
func (c *Consumer) Pop(rec *Record, deadline time.Time) error {
	_, err := c.PopN(unsafe.Slice(rec, 1), deadline)
	return err
}

// PopN waits (as Pop) for at least one record, then reads up to len(out)
// of those published and releases their slots with one store of the
// consumer index. A malformed record is skipped and reported alone, as
// (0, error wrapping ErrBadRecord); records before it are returned first.
func (c *Consumer) PopN(out []Record, deadline time.Time) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	if c.closed.Load() {
		return 0, ErrClosed
	}
	if len(out) == 0 {
		return 0, nil
	}
	if c.prod == c.pos && !c.refill() {
		if c.err != nil {
			return 0, c.err
		}
		if err := c.waitData(deadline); err != nil {
			return 0, err
		}
	}
	le := binary.LittleEndian
	n := 0
	var err error
	for n < len(out) {
		avail := c.prod - c.pos
		if avail == 0 {
			break
		}
		s := c.r.slot(c.pos)
		// Each shared word is read once, into a local, then checked.
		seq := le.Uint32(s[slotSeq:])
		width, flags := s[slotWidth], s[slotFlags]
		off := le.Uint64(s[slotOff:])
		t := le.Uint64(s[slotTime:])
		mask := le.Uint64(s[slotMask:])
		data := le.Uint64(s[slotData:])
		qpn := le.Uint32(s[slotQPN:])
		flow := le.Uint64(s[slotFlow:])
		if seq != c.pos {
			err = c.fail("slot %d holds sequence %d", c.pos, seq)
			break
		}
		if e := checkFields(width, flags, off, mask); e != nil {
			if n > 0 {
				break // return the good ones; this one comes next call
			}
			skip := uint32(nslots(width))
			if skip > avail {
				err = c.fail("record at %d needs %d slots, %d published", c.pos, skip, avail)
				break
			}
			err = fmt.Errorf("slot %d: %w", c.pos, e)
			c.pos += skip
			break
		}
		rec := &out[n]
		rec.Off, rec.Time, rec.Width, rec.Flags, rec.Mask = off, int64(t), width, flags, mask
		rec.QPN, rec.Flow = qpn, flow
		switch width {
		case 64:
			if avail < 2 {
				err = c.fail("line record at %d has its data slot unpublished", c.pos)
				break
			}
			rec.Data = *c.r.slot(c.pos + 1)
		case 0:
			clear(rec.Data[:])
			if flags == FlagCall {
				le.PutUint64(rec.Data[:8], data)
				c.call, c.haveCall = c.pos, true
			}
		default:
			if width == 4 {
				data &= 0xffffffff
			}
			le.PutUint64(rec.Data[:8], data)
			clear(rec.Data[8:])
		}
		if c.err != nil {
			break
		}
		c.pos += uint32(nslots(width))
		n++
	}
	c.release()
	return n, err
}

func (c *Consumer) fail(format string, args ...any) error {
	c.err = fmt.Errorf("%w: %s", ErrBadRing, fmt.Sprintf(format, args...))
	return c.err
}

// release returns the popped slots to the producer: one atomic store of
// the consumer index after the plain payload loads (timing.md §9.5 rule
// 1, reversed), then a wake-up if the producer said it waits for room.
func (c *Consumer) release() {
	if c.pos == c.released {
		return
	}
	c.released = c.pos
	atomic.StoreUint32(c.r.cons, c.pos)
	if atomic.LoadUint32(c.r.prodWait) != 0 && atomic.SwapUint32(c.r.prodWait, 0) != 0 {
		futexWake(c.r.prodWait, 1)
	}
}

// refill re-reads the producer index and reports whether records are
// available; an impossible index (more than a ring ahead, or moved
// backwards) sets the sticky error.
func (c *Consumer) refill() bool {
	p := atomic.LoadUint32(c.r.prod)
	avail := p - c.pos
	if avail > c.r.n || avail < c.prod-c.pos {
		c.fail("producer index %d with consumer at %d (producer was %d) in a ring of %d", p, c.pos, c.prod, c.r.n)
		return false
	}
	c.prod = p
	return avail != 0
}

// waitData waits until a record is published, sleeping on the "consumer
// sleeping" futex word; once the ring is closed it still drains what the
// producer published before it closed.
func (c *Consumer) waitData(deadline time.Time) error {
	return await(c.r, c.r.consSleep, c.Spin, c.Yield, deadline, ErrEmpty, c)
}

// ready reports whether records are available (or why the ring is bad).
func (c *Consumer) ready() (bool, error) { return c.refill(), c.err }

// closedErr: the producer may have published its last records and closed
// since the last look, so drain those first.
func (c *Consumer) closedErr() error {
	if ok, err := c.ready(); ok || err != nil {
		return err
	}
	return ErrClosed
}

// Close marks the consumer side closed and wakes the producer, whose
// pushes then fail with ErrClosed. It may be called from any goroutine,
// and fails a Pop blocked in another.
func (c *Consumer) Close() error {
	c.closed.Store(true)
	c.r.close(closedConsumer)
	return nil
}
