package wire

import (
	"bytes"
	"errors"
	"sync/atomic"

	"github.com/softnic/softnic/fault"
	"github.com/softnic/softnic/sim"
)

// MaxHeldFrames bounds the frames a FaultyTransport holds for Delay: when
// a new hold would exceed it, the frame due first is sent at once.
const MaxHeldFrames = 1024

// FaultyTransport applies a fault plan at the port of a real transport
// ("on a real wire the plan acts at the port"): wire.tx rules on Send,
// wire.rx rules on the frames the owner pulls from Frames() and passes
// through Filter. Rules match as on the simulated link (FrameEvent: the
// BTH's destination QP, opcode and PSN; node is the node given to
// NewFaultyTransport).
//
// What each action does here:
//
//   - tx drop: the frame is not sent; Send returns nil.
//   - tx duplicate: the frame is sent twice, back to back.
//   - tx corrupt: a copy with one byte past the Ethernet header flipped is
//     sent (the caller's frame is untouched).
//   - tx delay: the frame is held and goes out at the first Poll(now) with
//     now >= T + Decision.Delay, where T is the now of the Poll before the
//     Send (the owner's virtual clock). A frame held by Reorder at that time
//     is held with it and goes right after it.
//   - tx reorder: the frame is held and goes out right after the frame of
//     the next Send (even if that one is dropped; with it if that one is
//     delayed), or at the first Poll(now) with now >= T +
//     DefaultReorderWindow, whichever comes first.
//   - rx drop, duplicate, corrupt: Filter returns no frame, the frame twice
//     (the second a copy), or the frame with one byte flipped in place.
//   - rx delay and reorder, and tear anywhere: not applied (the frame
//     passes); counted as real_fault_unsupported.
//
// Held frames also go out on Flush and Close, and when more than
// MaxHeldFrames are held (the earliest due first). Nothing here waits, sleeps,
// reads the wall clock or starts a goroutine: held frames leave only inside
// Send, Poll, Flush or Close. The owner (the goroutine that owns the
// simulation; fault.Injector is not goroutine-safe) calls every method
// except Frames and Stats, which are safe from any goroutine.
//
// A nil injector makes FaultyTransport a pass-through.
type FaultyTransport struct {
	t    RealTransport
	inj  *fault.Injector
	node int

	now     sim.Time    // the owner's clock at the last Poll
	held    []heldFrame // delayed frames, by due time (ties in hold order)
	reorder *heldFrame  // the frame a Reorder holds behind the next Send
	rhold   heldFrame   // storage for reorder
	free    [][]byte    // spare hold buffers
	scratch []byte      // the corrupted copy of a tx frame
	stats   faultCounters
}

var _ RealTransport = (*FaultyTransport)(nil)

type heldFrame struct {
	due sim.Time
	buf []byte
}

// faultCounters are what FaultyTransport adds to RealStats.
type faultCounters struct {
	drop, corrupt, duplicate, delay, reorder, unsupported atomic.Uint64
}

// NewFaultyTransport wraps t so that inj's wire.tx and wire.rx rules act on
// it, as node. The wrapper owns t: Close closes it.
func NewFaultyTransport(t RealTransport, inj *fault.Injector, node int) *FaultyTransport {
	return &FaultyTransport{t: t, inj: inj, node: node}
}

// Unwrap returns the wrapped transport.
func (f *FaultyTransport) Unwrap() RealTransport { return f.t }

// Send applies the wire.tx decision to frame (see FaultyTransport), then
// sends the frame held by an earlier Reorder, if any. Frames the wrapped
// transport would refuse (too short or too long) are handed to it at once,
// with no fault decision, as the simulated link drops them before its hook.
// The error is the wrapped Send's for this frame, joined with any error
// sending a released frame.
func (f *FaultyTransport) Send(frame []byte) error {
	if len(frame) < EthHeaderLen || len(frame) > MaxRealFrame {
		return f.t.Send(frame)
	}
	dec := f.inj.Decide(fault.WireTx, FrameEvent(f.node, frame))
	var err, rerr error
	switch dec.Action {
	case fault.None:
		err = f.t.Send(frame)
	case fault.Drop:
		f.stats.drop.Add(1)
	case fault.Corrupt:
		f.scratch = append(f.scratch[:0], frame...)
		corrupt(f.scratch, dec)
		f.stats.corrupt.Add(1)
		err = f.t.Send(f.scratch)
	case fault.Duplicate:
		f.stats.duplicate.Add(1)
		err = joinErr(f.t.Send(frame), f.t.Send(frame))
	case fault.Delay:
		f.stats.delay.Add(1)
		due := f.now.AddSat(dec.Delay)
		rerr = f.hold(f.copyOf(frame), due)
		if f.reorder != nil { // it goes right after the delayed frame
			r := f.reorder
			f.reorder = nil
			rerr = joinErr(rerr, f.hold(r.buf, due))
		}
	case fault.Reorder:
		f.stats.reorder.Add(1)
		if f.reorder != nil { // two in a row: the older one goes first
			rerr = f.releaseReorder()
		}
		f.rhold = heldFrame{due: f.now.Add(DefaultReorderWindow), buf: f.copyOf(frame)}
		f.reorder = &f.rhold
		return rerr
	default:
		f.stats.unsupported.Add(1)
		err = f.t.Send(frame)
	}
	if f.reorder != nil {
		rerr = joinErr(rerr, f.releaseReorder())
	}
	return joinErr(err, rerr)
}

// Poll records the owner's clock (virtual time; it never goes back) and
// sends every held frame due at or before now: delayed frames in due order,
// and a Reorder hold whose DefaultReorderWindow has passed. Call it
// whenever the clock advances while frames may be held (Held > 0); NextDue
// says when the next one is due.
func (f *FaultyTransport) Poll(now sim.Time) error {
	if now > f.now {
		f.now = now
	}
	var err error
	if f.reorder != nil && f.reorder.due <= f.now {
		err = f.releaseReorder()
	}
	k := 0
	for k < len(f.held) && f.held[k].due <= f.now {
		k++
	}
	if k > 0 {
		err = joinErr(err, f.release(k))
	}
	return err
}

// NextDue is when Poll will next send a held frame, or sim.Never if none is
// held.
func (f *FaultyTransport) NextDue() sim.Time {
	next := sim.Never
	if len(f.held) > 0 {
		next = f.held[0].due
	}
	if f.reorder != nil && f.reorder.due < next {
		next = f.reorder.due
	}
	return next
}

// Held is the number of frames held by Delay and Reorder.
func (f *FaultyTransport) Held() int {
	n := len(f.held)
	if f.reorder != nil {
		n++
	}
	return n
}

// Flush sends every held frame now, in due order (a Reorder hold among
// them by its timeout).
func (f *FaultyTransport) Flush() error {
	var err error
	if f.reorder != nil {
		r := f.reorder
		f.reorder = nil
		f.insert(*r)
	}
	if len(f.held) > 0 {
		err = f.release(len(f.held))
	}
	return err
}

// Filter applies the wire.rx decision to frame, which the owner has just
// pulled from Frames() (so it owns it: a Corrupt decision flips a byte in
// place). It appends the frames to deliver, in order, to out and returns
// it: none (drop), the frame, or the frame and a copy (duplicate). With a
// reused out it allocates only for a duplicate.
func (f *FaultyTransport) Filter(frame []byte, out [][]byte) [][]byte {
	if len(frame) < EthHeaderLen {
		return append(out, frame)
	}
	dec := f.inj.Decide(fault.WireRx, FrameEvent(f.node, frame))
	switch dec.Action {
	case fault.None:
	case fault.Drop:
		f.stats.drop.Add(1)
		return out
	case fault.Corrupt:
		corrupt(frame, dec)
		f.stats.corrupt.Add(1)
	case fault.Duplicate:
		f.stats.duplicate.Add(1)
		return append(out, frame, bytes.Clone(frame))
	default:
		f.stats.unsupported.Add(1)
	}
	return append(out, frame)
}

// Frames yields the wrapped transport's received frames; pass each through
// Filter before delivering it, or wire.rx rules do not act.
func (f *FaultyTransport) Frames() <-chan []byte { return f.t.Frames() }

// Stats is the wrapped transport's statistics plus the faults applied here
// (safe from any goroutine).
func (f *FaultyTransport) Stats() RealStats {
	s := f.t.Stats()
	s.FaultDrop = f.stats.drop.Load()
	s.FaultCorrupt = f.stats.corrupt.Load()
	s.FaultDuplicate = f.stats.duplicate.Load()
	s.FaultDelay = f.stats.delay.Load()
	s.FaultReorder = f.stats.reorder.Load()
	s.FaultUnsupported = f.stats.unsupported.Load()
	return s
}

// Close sends the held frames (Flush), then closes the wrapped transport.
func (f *FaultyTransport) Close() error {
	ferr := f.Flush()
	return joinErr(ferr, f.t.Close())
}

// String is the wrapped transport's name.
func (f *FaultyTransport) String() string { return f.t.String() }

// joinErr is errors.Join for two errors without wrapping a lone one.
func joinErr(a, b error) error {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	return errors.Join(a, b)
}

// copyOf copies frame into a spare buffer.
func (f *FaultyTransport) copyOf(frame []byte) []byte {
	var b []byte
	if k := len(f.free); k > 0 {
		b = f.free[k-1][:0]
		f.free = f.free[:k-1]
	}
	return append(b, frame...)
}

// hold queues buf for Poll at due, sending the earliest frame at once if
// the hold is full.
func (f *FaultyTransport) hold(buf []byte, due sim.Time) error {
	var err error
	if len(f.held) >= MaxHeldFrames {
		err = f.release(1)
	}
	f.insert(heldFrame{due: due, buf: buf})
	return err
}

// insert puts h into held after every frame due at or before it.
func (f *FaultyTransport) insert(h heldFrame) {
	i := len(f.held)
	for i > 0 && f.held[i-1].due > h.due {
		i--
	}
	f.held = append(f.held, heldFrame{})
	copy(f.held[i+1:], f.held[i:])
	f.held[i] = h
}

// release sends the first k held frames.
func (f *FaultyTransport) release(k int) error {
	var err error
	for i := 0; i < k; i++ {
		err = joinErr(err, f.t.Send(f.held[i].buf))
		f.free = append(f.free, f.held[i].buf)
	}
	n := copy(f.held, f.held[k:])
	clear(f.held[n:])
	f.held = f.held[:n]
	return err
}

func (f *FaultyTransport) releaseReorder() error {
	r := f.reorder
	f.reorder = nil
	err := f.t.Send(r.buf)
	f.free = append(f.free, r.buf)
	r.buf = nil
	return err
}
