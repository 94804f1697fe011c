package provider

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/softnic/softnic/mlx5"
)

// Events: completion channels (channel.go) and asynchronous events, in
// ibv terms. The device (or, on real hardware, the kernel) queues events;
// the provider reads them, and keeps one byte per queued event in a pipe
// whose read end an application may poll (CompChannel.Fd, Context.AsyncFd)
// the way it polls an ibv_comp_channel's or the async event's fd. The
// pipe only signals readiness: read events with GetCQEvent and
// GetAsyncEvent, never from the fd itself.
//
// Waiting. On an emulated device the application's thread is the one that
// moves the simulation, so a wait drives the device (mlx5.Progressor) as
// Poll does, until an event arrives, the device has nothing left to do or
// the timeout has passed on the device's virtual clock
// (mlx5.VirtualClock). The clock moves in whole device events, so a wait
// may end a little after its deadline. A device of the daemon (Dial) is
// driven the same way, but its engine is shared with other processes
// whose work may not have reached it yet: there an idle engine does not
// end the wait, which steps, then naps, until the timeout has passed on
// the wall clock or the virtual one. A device that progresses by itself
// is waited for on the pipe, for the timeout in wall-clock time. A
// timeout <= 0 never waits (a non-blocking read). Nothing blocks for ever.

// ErrTimeout is returned (wrapped) by GetCQEvent and GetAsyncEvent when no
// event came within the timeout, or the emulated device went idle first.
var ErrTimeout = errors.New("timed out waiting for an event")

// ctxEvents is a context's event state, set up on first use.
type ctxEvents struct {
	ec    mlx5.EventControl
	clock mlx5.VirtualClock // nil: wall-clock waits
	chans map[uint32]*CompChannel
	async *evPipe // nil until first use
	// reported and acknowledged async events (ibv_ack_async_event)
	asyncReported, asyncAcked uint64
}

// events returns the context's event state; ErrNotSupported when the
// device's control object is not an mlx5.EventControl.
func (c *Context) events(op string) (*ctxEvents, error) {
	if c == nil || c.closed {
		return nil, opErr(op, 0, ErrClosed)
	}
	if c.ev != nil {
		return c.ev, nil
	}
	ec, ok := c.ctl.(mlx5.EventControl)
	if !ok {
		return nil, opErr(op, 0, detail(ErrNotSupported, "device %q delivers no events", c.name))
	}
	ev := &ctxEvents{ec: ec, chans: map[uint32]*CompChannel{}}
	ev.clock, _ = c.ctl.(mlx5.VirtualClock)
	c.ev = ev
	ec.SetEventNotify(ev.notify)
	return ev, nil
}

// notify is called by the device for every event it queues.
func (ev *ctxEvents) notify(ch uint32) {
	if ch == 0 {
		ev.async.signal()
		return
	}
	if cc := ev.chans[ch]; cc != nil {
		cc.pipe.signal()
	}
}

// closeEvents closes every channel and the async pipe (Context.Close).
func (c *Context) closeEvents(keep func(error)) {
	if c.kev != nil {
		for ch := range c.kev.chans {
			keep(ch.Destroy())
		}
	}
	if c.ev == nil {
		return
	}
	for _, id := range sortedKeys(c.ev.chans) {
		keep(c.ev.chans[id].Destroy())
	}
	c.ev.async.close()
	c.ev.ec.SetEventNotify(nil)
}

// evPipe is the readiness pipe: one byte per queued event.
type evPipe struct {
	r, w   *os.File
	bytes  int  // written and not yet taken back
	credit int  // bytes waitReadable took ahead of their event
	capped bool // a signal was skipped at maxPipeBytes: events may lack a byte
}

// maxPipeBytes keeps the pipe far below its kernel capacity (64 KiB), so
// that a write never blocks: beyond it readiness is already signalled.
const maxPipeBytes = 4096

func newEvPipe(pending int) (*evPipe, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, detail(ErrNoMemory, "event pipe: %v", err)
	}
	p := &evPipe{r: r, w: w}
	for i := 0; i < pending; i++ {
		p.signal()
	}
	return p, nil
}

func (p *evPipe) signal() {
	if p == nil {
		return
	}
	if p.bytes >= maxPipeBytes {
		p.capped = true
		return
	}
	if n, _ := p.w.Write([]byte{1}); n == 1 {
		p.bytes++
	}
}

// take reads back the byte of one event without blocking (an application
// that read the fd itself has taken it already: nothing is lost but
// readiness).
func (p *evPipe) take() {
	switch {
	case p == nil:
	case p.credit > 0:
		p.credit--
	case p.bytes > 0:
		if p.readByte(false) {
			p.bytes--
		}
	}
}

// refill keeps the fd readable while events are queued beyond the bytes
// the cap let through: after the last byte is taken, pending (the events
// still queued) says whether one more is due. Only a pipe that reached the
// cap asks, so the common path costs no query of the device.
func (p *evPipe) refill(pending func() int) {
	if p == nil || !p.capped || p.bytes > 0 {
		return
	}
	if pending() > 0 {
		p.signal()
		return
	}
	p.capped = false
}

// readByte reads one byte; with wait it waits for one (up to the read
// deadline).
func (p *evPipe) readByte(wait bool) bool {
	rc, err := p.r.SyscallConn()
	if err != nil {
		return false
	}
	var b [1]byte
	got := false
	err = rc.Read(func(fd uintptr) bool {
		n, e := syscall.Read(int(fd), b[:])
		got = n == 1
		return got || !wait || e != syscall.EAGAIN
	})
	return err == nil && got
}

// waitReadable waits up to timeout (wall clock) for a byte; the byte it
// takes is credited to the event it announces.
func (p *evPipe) waitReadable(timeout time.Duration) bool {
	if err := p.r.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return false
	}
	got := p.readByte(true)
	_ = p.r.SetReadDeadline(time.Time{})
	if got {
		p.bytes--
		p.credit++
	}
	return got
}

func (p *evPipe) fd() int {
	if p == nil {
		return -1
	}
	return int(p.r.Fd())
}

func (p *evPipe) close() {
	if p == nil {
		return
	}
	_ = p.r.Close()
	_ = p.w.Close()
}

// wait runs try until it reports an event, driving an emulated device in
// between, for at most timeout (see the package comment above). what
// names the awaited event in the error.
func (c *Context) wait(op string, timeout time.Duration, p *evPipe, try func() (bool, error), what func() string) error {
	if ok, err := try(); ok || err != nil {
		return err
	}
	if timeout <= 0 {
		return opErr(op, 0, detail(ErrTimeout, "no %s pending", what()))
	}
	if c.prog != nil {
		start := time.Now()
		var deadline time.Duration
		if c.ev.clock != nil {
			deadline = c.ev.clock.VirtualNow() + timeout
		}
		for i := 1; ; i++ {
			ran := c.prog.Progress()
			if ok, err := try(); ok || err != nil {
				return err
			}
			if c.link != nil {
				if err := c.link.Err(); err != nil {
					return opErr(op, 0, err)
				}
			} else if !ran {
				// In one process nothing else can feed the device.
				return opErr(op, 0, detail(ErrTimeout, "no %s: the device is idle", what()))
			}
			if c.ev.clock != nil && c.ev.clock.VirtualNow() >= deadline {
				return opErr(op, 0, detail(ErrTimeout, "no %s within %v (virtual time)", what(), timeout))
			}
			switch {
			case c.link == nil && i >= progressBudget:
				return opErr(op, 0, detail(ErrTimeout, "no %s after %d device steps", what(), progressBudget))
			case c.link != nil && time.Since(start) >= timeout:
				return opErr(op, 0, detail(ErrTimeout, "no %s within %v", what(), timeout))
			case c.link != nil && !ran:
				time.Sleep(dialledNap) // another process may be about to feed the engine
			}
		}
	}
	if p.waitReadable(timeout) {
		if ok, err := try(); ok || err != nil {
			return err
		}
	}
	return opErr(op, 0, detail(ErrTimeout, "no %s within %v", what(), timeout))
}

// dialledNap is how long a wait on a daemon's device sleeps when the
// engine has nothing to run (another process may be about to feed it).
const dialledNap = 50 * time.Microsecond

// asyncPending is the number of asynchronous events queued, -1 when the
// context has no async fd yet (no byte to take back).
func (c *Context) asyncPending() int {
	if c.ev == nil || c.ev.async == nil {
		return -1
	}
	return c.ev.ec.PendingEvents(0)
}

// asyncGone takes back the fd bytes of the events a destroy removed from
// the async queue (the kernel drops a destroyed object's events);
// before is asyncPending ahead of the destroy.
func (c *Context) asyncGone(before int) {
	if before < 0 {
		return
	}
	for n := before - c.ev.ec.PendingEvents(0); n > 0; n-- {
		c.ev.async.take()
	}
	c.ev.async.refill(func() int { return c.ev.ec.PendingEvents(0) })
}

// AsyncEvent is an asynchronous event (struct ibv_async_event): its type
// and the object it concerns. Exactly one of CQ, QP, SRQ is set for CQ,
// QP and SRQ events, Port for port events; Num is the object's number as
// the device reported it.
type AsyncEvent struct {
	Type mlx5.EventType
	CQ   *CQ
	QP   *QP
	SRQ  *SRQ
	Port int
	Num  uint32
}

// String is the event type and the object it is about: "CQ_ERR cq 0x1",
// "PORT_ACTIVE port 1".
func (e AsyncEvent) String() string {
	switch {
	case e.CQ != nil:
		return fmt.Sprintf("%v cq %#x", e.Type, e.Num)
	case e.QP != nil:
		return fmt.Sprintf("%v qp %#x", e.Type, e.Num)
	case e.SRQ != nil:
		return fmt.Sprintf("%v srq %#x", e.Type, e.Num)
	case e.Port != 0:
		return fmt.Sprintf("%v port %d", e.Type, e.Port)
	}
	return fmt.Sprintf("%v %#x", e.Type, e.Num)
}

// eventObject says what an event's number names.
func eventObject(t mlx5.EventType) string {
	switch t {
	case mlx5.EventCQErr:
		return "cq"
	case mlx5.EventSRQErr, mlx5.EventSRQLimitReached:
		return "srq"
	case mlx5.EventDeviceFatal:
		return "device"
	case mlx5.EventPortActive, mlx5.EventPortErr, mlx5.EventLIDChange, mlx5.EventPKeyChange, mlx5.EventSMChange:
		return "port"
	}
	return "qp"
}

// AsyncFd is a file descriptor that is readable while asynchronous events
// are pending (the async fd of ibv_context): for poll/epoll only.
func (c *Context) AsyncFd() (int, error) {
	if c != nil && c.kev != nil && !c.closed && c.kev.async != nil {
		return c.kev.async.Fd(), nil
	}
	ev, err := c.events("async_fd")
	if err != nil {
		return -1, err
	}
	if err := c.asyncPipe(ev); err != nil {
		return -1, opErr("async_fd", 0, err)
	}
	return ev.async.fd(), nil
}

func (c *Context) asyncPipe(ev *ctxEvents) error {
	if ev.async != nil {
		return nil
	}
	p, err := newEvPipe(ev.ec.PendingEvents(0))
	if err != nil {
		return err
	}
	ev.async = p
	return nil
}

// GetAsyncEvent returns the next asynchronous event (ibv_get_async_event),
// waiting for at most timeout (see "Waiting" above). Events of objects
// destroyed meanwhile are skipped, as the kernel removes them on destroy.
// Each event returned must be acknowledged with AckAsyncEvent.
func (c *Context) GetAsyncEvent(timeout time.Duration) (AsyncEvent, error) {
	const op = "get_async_event"
	if c != nil && c.kev != nil && !c.closed {
		return c.kernGetAsyncEvent(timeout)
	}
	ev, err := c.events(op)
	if err != nil {
		return AsyncEvent{}, err
	}
	if err := c.asyncPipe(ev); err != nil {
		return AsyncEvent{}, opErr(op, 0, err)
	}
	var out AsyncEvent
	try := func() (bool, error) {
		for {
			var buf [1]mlx5.AsyncEvent
			if ev.ec.ReadAsyncEvents(buf[:]) == 0 {
				return false, nil
			}
			ev.async.take()
			ev.async.refill(func() int { return ev.ec.PendingEvents(0) })
			a := AsyncEvent{Type: buf[0].Type, Num: buf[0].Num}
			switch eventObject(a.Type) {
			case "cq":
				if a.CQ = c.cqs[a.Num]; a.CQ == nil || a.CQ.dead {
					continue
				}
			case "qp":
				if a.QP = c.qps[a.Num]; a.QP == nil || a.QP.dead {
					continue
				}
			case "srq":
				if a.SRQ = c.srqs[a.Num]; a.SRQ == nil || a.SRQ.dead {
					continue
				}
			case "port":
				a.Port = int(a.Num)
			}
			ev.asyncReported++
			out = a
			return true, nil
		}
	}
	err = c.wait(op, timeout, ev.async, try, func() string { return "asynchronous event" })
	return out, err
}

// AckAsyncEvent acknowledges an event GetAsyncEvent returned
// (ibv_ack_async_event).
func (c *Context) AckAsyncEvent(e AsyncEvent) {
	switch {
	case c == nil:
	case c.kev != nil:
		if c.kev.asyncAcked < c.kev.asyncReported {
			c.kev.asyncAcked++
		}
	case c.ev != nil && c.ev.asyncAcked < c.ev.asyncReported:
		c.ev.asyncAcked++
	}
}

// UnackedAsyncEvents is the number of events returned by GetAsyncEvent
// and not yet acknowledged.
func (c *Context) UnackedAsyncEvents() int {
	switch {
	case c == nil:
		return 0
	case c.kev != nil:
		return int(c.kev.asyncReported - c.kev.asyncAcked)
	case c.ev == nil:
		return 0
	}
	return int(c.ev.asyncReported - c.ev.asyncAcked)
}
