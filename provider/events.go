package provider

import (
	"errors"
	"fmt"
	"math"
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
// GetAsyncEvent. An application that reads the fd as well (an epoll loop
// draining it) takes only readiness: the provider notices the bytes gone
// and keeps the fd readable while events are queued (evPipe). The fd is
// non-blocking and belongs to the channel (the context): valid until the
// channel's Destroy (the context's Close), not to be closed by the
// application nor switched to blocking mode.
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
	if c.gone() {
		return nil, opErr(op, 0, ErrClosed)
	}
	if c.ev != nil {
		return c.ev, nil
	}
	ec, ok := c.ctl.(mlx5.EventControl)
	if !ok {
		return nil, opErr(op, 0, detail(ErrNotSupported, "device %q delivers no events", c.name))
	}
	ev := &ctxEvents{ec: joinHub(ec, c.ownsEvent), chans: map[uint32]*CompChannel{}}
	ev.clock, _ = c.ctl.(mlx5.VirtualClock)
	c.ev = ev
	ev.ec.SetEventNotify(ev.notify)
	return ev, nil
}

// ownsEvent reports whether async event e is this context's: its QP, CQ or
// SRQ is one of the context's, or it is a port or device event (every
// context gets those). The eventHub routes by it once several contexts
// share the device.
func (c *Context) ownsEvent(e mlx5.AsyncEvent) bool {
	switch eventObject(e.Type) {
	case "cq":
		return !c.cqs[e.Num].gone()
	case "qp":
		return !c.qps[e.Num].gone()
	case "srq":
		return !c.srqs[e.Num].gone()
	}
	return !c.closed
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
//
// The application may read the fd itself (an epoll loop draining what
// woke it), taking bytes the provider counted. bytes is therefore an
// upper bound on what the pipe holds: exact until the application reads,
// and made exact again whenever a read of the provider's finds the pipe
// empty (readByte). It is then 0, not bytes-1: the application may have
// taken several bytes in one read(2), and a count left above what the
// pipe holds is what wedged the fd — at maxPipeBytes signal stopped
// writing, refill waited for a 0 that never came, and the fd stayed
// unreadable with events queued. short then says that queued events may
// lack their byte, and refill gives the fd one while any is queued.
type evPipe struct {
	r, w   *os.File
	rfd    int  // r's descriptor, the application's fd (see fd)
	bytes  int  // written and not yet read back by the provider: at least what the pipe holds
	credit int  // bytes waitReadable took ahead of their event
	short  bool // queued events may lack a byte (a signal skipped at maxPipeBytes, bytes the application read)
}

// maxPipeBytes keeps the pipe far below its kernel capacity (64 KiB), so
// that a write never blocks: beyond it readiness is already signalled.
const maxPipeBytes = 4096

func newEvPipe(pending int) (*evPipe, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, detail(ErrNoMemory, "event pipe: %v", err)
	}
	p := &evPipe{r: r, w: w, rfd: -1}
	if rc, err := r.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { p.rfd = int(fd) })
	}
	if p.rfd < 0 {
		_ = r.Close()
		_ = w.Close()
		return nil, detail(ErrNoMemory, "event pipe: no descriptor")
	}
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
		p.short = true
		return
	}
	if n, _ := p.w.Write([]byte{1}); n == 1 {
		p.bytes++
	}
}

// take reads back the byte of one event without blocking. If the
// application read the fd itself the byte may be gone: readByte then
// finds the pipe empty and sets the count right.
func (p *evPipe) take() {
	switch {
	case p == nil:
	case p.credit > 0:
		p.credit--
	case p.bytes > 0:
		p.readByte(false)
	}
}

// dropGone takes back the bytes of n events the device removed from the
// queue (their object destroyed), then refills as take does (pending:
// the events still queued).
func (p *evPipe) dropGone(n int, pending func() int) {
	for ; n > 0; n-- {
		p.take()
	}
	p.refill(pending)
}

// refill keeps the fd readable while events are queued beyond the bytes
// the pipe holds (the cap let them through without one, or the
// application read theirs): after the last byte is taken, pending (the
// events still queued) says whether one more is due. Only a short pipe
// asks, so the common path costs no query of the device.
func (p *evPipe) refill(pending func() int) {
	if p == nil || !p.short || p.bytes > 0 {
		return
	}
	if pending() > 0 {
		p.signal()
		return
	}
	p.short = false
}

// readByte reads one byte back and keeps bytes consistent; with wait it
// waits for one (up to the read deadline). It asks for two, to learn
// whether the pipe is left empty: a second byte is written back (the
// pipe still holds one at least); with one byte or none the pipe is
// empty and bytes is 0, and short if the pipe held fewer bytes than
// counted (the application read some). The cost is one read(2) per
// event, and a write(2) when more than one byte was left.
func (p *evPipe) readByte(wait bool) bool {
	rc, err := p.r.SyscallConn()
	if err != nil {
		return false
	}
	var b [2]byte
	n, empty := 0, false
	_ = rc.Read(func(fd uintptr) bool {
		for {
			k, e := syscall.Read(int(fd), b[:])
			switch {
			case k > 0:
				n = k
				return true
			case e == syscall.EINTR:
				continue
			case e == syscall.EAGAIN:
				empty = true
				return !wait
			}
			return true // closed or failing: leave the count alone
		}
	})
	switch {
	case n == 2:
		if k, _ := p.w.Write(b[1:]); k == 1 {
			p.bytes = max(p.bytes-1, 0)
		} else {
			p.bytes = max(p.bytes-2, 0)
			p.short = true
		}
	case n == 1:
		p.short = p.short || p.bytes > 1
		p.bytes = 0
	case empty: // the pipe was empty at the last read
		p.short = p.short || p.bytes > 0
		p.bytes = 0
	}
	return n > 0
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
		p.credit++
	}
	return got
}

// fd is the read end's descriptor, for the application to poll. It is
// not os.File.Fd, which switches the descriptor to blocking mode (it
// still does in go1.26): readByte(false) would then block in read(2) on
// an empty pipe, and waitReadable's read deadline could not end its read.
// The descriptor stays the pipe's: valid until close (the channel's
// Destroy, the context's Close), never to be closed by the application
// nor put in blocking mode (O_NONBLOCK is a flag of the open file, which
// the application and the provider share).
func (p *evPipe) fd() int {
	if p == nil {
		return -1
	}
	return p.rfd
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
			// Saturate: a timeout near the largest Duration (an
			// application's "forever") must not wrap the deadline into
			// the past and end the wait before the first step.
			now := c.ev.clock.VirtualNow()
			if deadline = now + timeout; deadline < now {
				deadline = math.MaxInt64
			}
		}
		// A blocking wait, unlike a poll, lets a co-simulated world run
		// past the clocks of hosts whose last act was work: they cannot
		// act while this caller is blocked (mlx5.BlockingProgressor).
		progress := c.prog.Progress
		if b, ok := c.prog.(mlx5.BlockingProgressor); ok {
			progress = b.ProgressBlocked
		}
		for i := 1; ; i++ {
			ran := progress()
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

// maxSkippedEvents bounds the events of unknown or destroyed objects one
// read of GetCQEvent or GetAsyncEvent skips before it lets the wait check
// its timers. A device drops a destroyed object's events (as the kernel
// does), so a correct one never comes near it; a device (a daemon) that
// keeps answering with events of objects the context does not have would
// otherwise hold the wait for ever, whatever its timeout.
const maxSkippedEvents = 1024

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
// before is asyncPending ahead of the destroy of object num of kind
// ("qp", "cq", "srq").
func (c *Context) asyncGone(before int, kind string, num uint32) {
	if before < 0 {
		return
	}
	if v, ok := c.ev.ec.(*eventView); ok {
		v.drop(kind, num) // events routed to this context already
	}
	c.ev.async.dropGone(before-c.ev.ec.PendingEvents(0), func() int { return c.ev.ec.PendingEvents(0) })
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
// are pending (the async fd of ibv_context): for poll/epoll only (see the
// package comment above). It stays the context's: valid until Close.
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
		for skipped := 0; skipped < maxSkippedEvents; skipped++ {
			var buf [1]mlx5.AsyncEvent
			if ev.ec.ReadAsyncEvents(buf[:]) == 0 {
				return false, nil
			}
			ev.async.take()
			ev.async.refill(func() int { return ev.ec.PendingEvents(0) })
			a := AsyncEvent{Type: buf[0].Type, Num: buf[0].Num}
			switch eventObject(a.Type) {
			case "cq":
				if a.CQ = c.cqs[a.Num]; a.CQ.gone() {
					continue
				}
			case "qp":
				if a.QP = c.qps[a.Num]; a.QP.gone() {
					continue
				}
			case "srq":
				if a.SRQ = c.srqs[a.Num]; a.SRQ.gone() {
					continue
				}
			case "port":
				a.Port = int(a.Num)
			}
			ev.asyncReported++
			a.reported()
			out = a
			return true, nil
		}
		return false, nil // only events of no object of ours so far: the wait's timers decide
	}
	err = c.wait(op, timeout, ev.async, try, func() string { return "asynchronous event" })
	return out, err
}

// unacked is the count of unacknowledged asynchronous events of the
// object e concerns (nil: a port or device event).
func (e AsyncEvent) unacked() *uint32 {
	switch {
	case e.CQ != nil:
		return &e.CQ.asyncUnacked
	case e.QP != nil:
		return &e.QP.asyncUnacked
	case e.SRQ != nil:
		return &e.SRQ.asyncUnacked
	}
	return nil
}

// reported counts e as returned by GetAsyncEvent on its object, whose
// Destroy then waits for its AckAsyncEvent.
func (e AsyncEvent) reported() {
	if n := e.unacked(); n != nil {
		*n++
	}
}

// AckAsyncEvent acknowledges an event GetAsyncEvent returned
// (ibv_ack_async_event). Its object (QP, SRQ, CQ) can be destroyed once
// every event returned for it is acknowledged.
func (c *Context) AckAsyncEvent(e AsyncEvent) {
	if n := e.unacked(); c != nil && n != nil && *n > 0 {
		*n--
	}
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
