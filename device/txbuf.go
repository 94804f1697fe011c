package device

import "github.com/softnic/softnic/sim"

// pacedPort is a Port that says how long a frame of n bytes occupies its
// transmitter (wire.Port).
type pacedPort interface {
	WireTime(n int) sim.Duration
}

// txBuffer is the port's transmit buffer (CoreSpec.TxBufferBytes): the
// frames built and not yet serialized onto the wire. busy mirrors the
// port's transmitter: when the last frame built so far will have left it.
// The buffer is full while more than limit of wire time is ahead of the
// packetizer; a QP that finds it full waits in waiting, in order, and the
// timer wakes them once half of it has drained. The woken QPs then take
// turns of one frame each, round robin, until the buffer is full again:
// a QP with more to send goes to the back after each frame. While any QP
// waits, a QP that is not taking its turn finds the buffer full too and
// queues behind them. So QPs share the port frame by frame instead of one
// QP's whole window queueing ahead of every other's (which made the other
// QPs' retransmit timers expire with no loss). Turns of "until full" (the
// first version) gave each woken QP the whole half buffer: with hundreds
// of QPs waiting, a QP's next turn came hundreds of half buffers later
// (about 0.5 ms for 200 QPs at 100 Gb/s) and its ACK timer expired; and a
// QP pumped by its ACKs outside the wake-ups took the room as it drained,
// ahead of the QPs waiting for it. How a ConnectX arbitrates among its send
// queues is not public: frame-by-frame round robin is an assumption.
//
// Without a pacedPort (a real wire) or with TxBufferBytes 0 the buffer is
// unbounded.
type txBuffer struct {
	limit   sim.Duration // 0: unbounded
	busy    sim.Time
	waiting []*qp // the QPs waiting for room, in turn
	spare   []*qp // Fire's scratch lists
	spare2  []*qp
	timer   *sim.Timer
	turn    *qp  // the QP taking its turn (txWake.Fire), if any
	spent   bool // turn has built its frame
}

// The sides of a QP waiting for room (qp.txWaiting).
const (
	txWaitReq  uint8 = 1 << iota // its requester
	txWaitResp                   // its responder's READ responses
)

// connect sizes the buffer for port p.
func (b *txBuffer) connect(d *Device, p pacedPort) {
	b.limit = 0
	if p != nil && d.spec.Core.TxBufferBytes > 0 {
		b.limit = p.WireTime(d.spec.Core.TxBufferBytes)
	}
	if b.timer == nil {
		b.timer = d.eng.NewTimer(txWake{d})
	}
}

// built accounts a frame of n bytes that reaches the port at ready.
func (b *txBuffer) built(d *Device, ready sim.Time, n int) {
	if b.limit == 0 {
		return
	}
	b.busy = max(b.busy, ready).Add(d.pport.WireTime(n))
	b.spent = true // read only in a turn, which starts with it false
}

// unsent takes back a frame of n bytes that reached the port at now and
// was not sent (its QP gone to ERR, SQE or RESET or destroyed since it was
// built, the link down, the device dead): the port's transmitter never
// spends its wire time on it. Kept in busy, every such frame made the
// mirror run ahead of the port for good (a stream never lets busy fall
// back to the port's own time): after 20 µs of link down the buffer
// held a phantom backlog of half its size, and one QP's wake-ups came
// too late to keep the port busy. Taking the whole wire time back is
// exact while the frames behind it queue back to back (a full buffer,
// when it matters); a frame that had a gap behind it leaves busy early
// by at most its own wire time, never before now. Waiting QPs are woken
// as soon as half of what is left has drained.
func (b *txBuffer) unsent(d *Device, now sim.Time, n int) {
	if b.limit == 0 || b.busy <= now {
		return
	}
	b.busy = max(now, b.busy.Add(-d.pport.WireTime(n)))
	if len(b.waiting) > 0 && b.timer.Armed() {
		if at := max(now, b.busy.Add(-b.limit/2)); at < b.timer.When() {
			b.timer.Reset(at)
		}
	}
}

// full reports whether q's next frame, built at t, has to wait: the
// buffer is full, q has had its turn's frame, or (not in its turn) other
// QPs wait for room before it.
func (b *txBuffer) full(q *qp, t sim.Time) bool {
	switch {
	case b.limit == 0:
		return false
	case b.busy.Sub(t) > b.limit:
		return true
	case q == b.turn:
		return b.spent
	}
	return len(b.waiting) > 0
}

// wait queues side of q for room, found full (full) at t. A QP whose turn
// is over goes to the back without counting as held: the wake-up goes on.
func (b *txBuffer) wait(d *Device, q *qp, t sim.Time, side uint8) {
	if q.txWaiting == 0 {
		b.waiting = append(b.waiting, q)
	}
	q.txWaiting |= side
	if q == b.turn && b.busy.Sub(t) <= b.limit {
		return
	}
	d.inc(CtrTxBufferFull)
	if b.turn == nil {
		b.arm(t)
	}
}

// arm wakes the waiting QPs once half the buffer has drained.
func (b *txBuffer) arm(t sim.Time) {
	if !b.timer.Armed() {
		b.timer.Reset(max(t, b.busy.Add(-b.limit/2)))
	}
}

// drop forgets the waiting QPs and stops the timer (device fatal: a dead
// device builds nothing more, so nobody is woken to build).
func (b *txBuffer) drop() {
	for _, q := range b.waiting {
		q.txWaiting = 0
	}
	clear(b.waiting)
	b.waiting = b.waiting[:0]
	b.turn, b.spent = nil, false
	if b.timer != nil {
		b.timer.Stop()
	}
}

// txWake is the buffer's timer: the waiting QPs pump in turn.
type txWake struct{ d *Device }

func (w txWake) Fire(now sim.Time) {
	b := &w.d.tx
	if w.d.fx.fatal {
		b.drop()
		return
	}
	// Rounds of one frame per QP, in turn, until the buffer is full or
	// nobody has more to send. Each round builds a frame for every QP that
	// goes on to the next one, so the rounds end.
	for len(b.waiting) > 0 && b.busy.Sub(now) <= b.limit {
		list := b.waiting
		b.waiting, b.spare = b.spare[:0], list
		for i, q := range list {
			if b.busy.Sub(now) > b.limit {
				// The rest keep their turn, ahead of those that just sent.
				front := append(b.spare2[:0], list[i:]...)
				front = append(front, b.waiting...)
				b.spare2, b.waiting = b.waiting, front
				break
			}
			side := q.txWaiting
			q.txWaiting = 0
			if q.dead {
				continue
			}
			b.turn = q
			if side&txWaitReq != 0 {
				b.spent = false
				q.req.pump(now)
			}
			if side&txWaitResp != 0 {
				b.spent = false
				q.resp.pump(now)
			}
			b.turn, b.spent = nil, false
		}
		clear(list)
	}
	if len(b.waiting) > 0 {
		b.arm(now)
	}
}
