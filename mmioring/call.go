package mmioring

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
)

// Reply is the consumer's answer to a call (the ring's reply line).
type Reply struct {
	Time   int64  // the consumer's clock when it answered, ps
	Value  uint64 // the call's result
	Status uint32 // 0, or the consumer's error code (an errno in the daemon)
}

// Reply answers the last call popped: it writes the reply line with plain
// stores and then publishes it with one atomic store of the call's ring
// position + 1 to the reply sequence word, waking the producer if it
// sleeps on it. A producer has at most one call outstanding
// (Producer.Call waits for its reply), so calls are answered one at a
// time, in ring order. Without a call popped since the last Reply it does
// nothing and returns false.
func (c *Consumer) Reply(r Reply) bool {
	if !c.haveCall {
		return false
	}
	c.haveCall = false
	pos := c.call
	le := binary.LittleEndian
	m := c.r.mem
	le.PutUint64(m[offReplyTime:], uint64(r.Time))
	le.PutUint64(m[offReplyValue:], r.Value)
	le.PutUint32(m[offReplyState:], r.Status)
	atomic.StoreUint32(c.r.replySeq, pos+1)
	c.wakeCaller()
	return true
}

// wakeCaller wakes the producer if it sleeps for a reply (the tail of
// Reply). The producer sleeps on its flag word, as every waiter of the
// ring does (doc.go, rule 5), not on the reply sequence word: a Reply
// preempted between its load of the flag and its swap cleared the flag
// of the producer's next call, which by then slept on an unchanged
// sequence word, so the next reply found no flag, woke nobody, and that
// call waited out its whole deadline (a daemon's client saw a 1 s ring
// call that had been answered in microseconds). On the flag word a swap
// before the sleep makes FUTEX_WAIT return at once.
func (c *Consumer) wakeCaller() {
	if atomic.LoadUint32(c.r.replyWait) != 0 && atomic.SwapUint32(c.r.replyWait, 0) != 0 {
		futexWake(c.r.replyWait, 1)
	}
}

// testHookReplySleep, set by tests, runs just before a call's wait goes
// to sleep.
var testHookReplySleep func()

// Call publishes a call (a Width-0 record with FlagCall: op in the first
// 8 bytes of Data, arg in Off, t the host time) after every record pushed
// before it, and waits until deadline for the consumer's reply. The wait
// spins, yields, then sleeps on the reply sequence word with a futex; it
// fails with ErrTimeout at the deadline and ErrClosed once either side
// has closed the ring, so a dead consumer costs at most the deadline.
func (p *Producer) Call(op uint64, arg uint64, t int64, deadline time.Time) (Reply, error) {
	return p.CallRecord(Record{Off: arg, Time: t}, op, deadline)
}

// CallRecord is Call with more arguments: rec's Off, QPN and Flow words
// (whose meaning the call's op defines) and Time; its Width, Flags, Mask
// and Data are set here.
func (p *Producer) CallRecord(rec Record, op uint64, deadline time.Time) (Reply, error) {
	rec.Width, rec.Flags, rec.Mask, rec.Data = 0, FlagCall, 0, [64]byte{}
	binary.LittleEndian.PutUint64(rec.Data[:8], op)
	pos := p.pos
	if err := p.Push(&rec, deadline); err != nil {
		return Reply{}, err
	}
	want := pos + 1
	r := p.r
	got := func() bool { return atomic.LoadUint32(r.replySeq) == want }
	for i := 0; i < p.Spin+p.Yield && !got(); i++ {
		if i >= p.Spin {
			runtime.Gosched()
		}
	}
	for !got() {
		if atomic.LoadUint32(r.closed) != 0 {
			return Reply{}, ErrClosed
		}
		d := time.Until(deadline)
		if d <= 0 {
			return Reply{}, fmt.Errorf("%w: no reply to call %#x at ring position %d", ErrTimeout, op, pos)
		}
		atomic.StoreUint32(r.replyWait, 1)
		if got() {
			break
		}
		if testHookReplySleep != nil {
			testHookReplySleep()
		}
		futexWait(r.replyWait, 1, d) // Consumer.wakeCaller
	}
	atomic.StoreUint32(r.replyWait, 0)
	le := binary.LittleEndian
	return Reply{Time: int64(le.Uint64(r.mem[offReplyTime:])), Value: le.Uint64(r.mem[offReplyValue:]),
		Status: le.Uint32(r.mem[offReplyState:])}, nil
}
