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
// timer wakes them once half of it has drained: each pumps until it finds
// the buffer full again and goes to the back, so QPs share the port
// instead of one QP's whole window queueing ahead of every other's (which
// made the other QPs' retransmit timers expire with no loss).
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

// full reports whether a frame built at t has to wait for room.
func (b *txBuffer) full(t sim.Time) bool {
	return b.limit > 0 && b.busy.Sub(t) > b.limit
}

// wait queues side of q for room, found full at t.
func (b *txBuffer) wait(d *Device, q *qp, t sim.Time, side uint8) {
	if q.txWaiting == 0 {
		b.waiting = append(b.waiting, q)
	}
	q.txWaiting |= side
	d.inc(CtrTxBufferFull)
	b.arm(t)
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
	list := b.waiting
	b.waiting, b.spare = b.spare[:0], list
	for i, q := range list {
		if b.full(now) {
			// The rest keep their turn, ahead of those that just sent.
			front := append(b.spare2[:0], list[i:]...)
			front = append(front, b.waiting...)
			b.spare2, b.waiting = b.waiting, front
			b.arm(now)
			break
		}
		side := q.txWaiting
		q.txWaiting = 0
		if q.dead {
			continue
		}
		if side&txWaitReq != 0 {
			q.req.pump(now)
		}
		if side&txWaitResp != 0 {
			q.resp.pump(now)
		}
	}
	clear(list)
}
