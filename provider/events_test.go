package provider

import (
	"encoding/binary"
	"fmt"
	"math"
	"syscall"
	"testing"
	"time"

	"github.com/softnic/softnic/mlx5"
	"github.com/stretchr/testify/require"
)

// TestReqNotifyBytes: the arm follows libmlx5's mlx5_arm_cq: the arm word
// in doorbell-record word 1, then fence, one 64-bit store of
// BE32(sn<<28 | cmd | ci) ‖ BE32(cqn) to UAR+0x20, fence; sn is the
// number of events read, mod 4.
func TestReqNotifyBytes(t *testing.T) {
	e := NewEnv(t, EnvOpts{})
	e.Dev.RecordOps = true
	cases := []struct {
		name      string
		ci, sn    uint32
		solicited bool
	}{
		{"next completion at 0", 0, 0, false},
		{"solicited, ci 5, sn 1", 5, 1, true},
		{"ci wraps at 24 bits, sn wraps at 2", 1<<24 + 3, 6, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e.CQ.ci, e.CQ.armSN = c.ci, c.sn
			e.Dev.Ops = nil
			require.NoError(t, e.CQ.ReqNotify(c.solicited))
			want := c.sn&3<<28 | c.ci&0xffffff
			if c.solicited {
				want |= mlx5.CQArmCmdSolicited
			}
			require.Equal(t, want, e.CQ.dbr.Word(mlx5.DBRArm))
			var db [8]byte
			binary.BigEndian.PutUint32(db[0:], want)
			binary.BigEndian.PutUint32(db[4:], e.CQ.cqn)
			off := uint64(e.Ctx.uctx.UARIndex)*mlx5.UARPageSize + mlx5.UARCQArmOffset
			require.Equal(t, []MMIOOp{{Flush: true}, {Off: off, V: binary.LittleEndian.Uint64(db[:])}, {Flush: true}}, e.Dev.Ops)
		})
	}
}

// TestEventsNotSupported: a device without mlx5.EventControl / CQControl
// makes the event verbs fail with ErrNotSupported, never panic or block.
func TestEventsNotSupported(t *testing.T) {
	e := NewEnv(t, EnvOpts{Progress: true})
	_, err := e.Ctx.CreateCompChannel()
	require.ErrorIs(t, err, ErrNotSupported)
	_, err = e.Ctx.GetAsyncEvent(time.Second)
	require.ErrorIs(t, err, ErrNotSupported)
	_, err = e.Ctx.AsyncFd()
	require.ErrorIs(t, err, ErrNotSupported)
	require.ErrorIs(t, e.CQ.Modify(CQModeration{Count: 1}), ErrNotSupported)
	require.ErrorIs(t, e.CQ.Resize(100), ErrNotSupported)
	_, err = e.Ctx.CreateCQEx(CQInitAttr{Entries: 4, CompVector: 1})
	require.ErrorIs(t, err, ErrInvalidArg)
	require.Zero(t, e.Ctx.UnackedAsyncEvents())
	var ch *CompChannel
	_, err = ch.GetCQEvent(time.Second)
	require.ErrorIs(t, err, ErrClosed)
	require.ErrorIs(t, ch.Destroy(), ErrClosed)
	require.Equal(t, -1, ch.Fd())
}

// fakeEvents is a minimal mlx5.EventControl over the fake device: events
// are queued by the test, as a device that progresses on its own would.
type fakeEvents struct {
	FakeProgDev
	comp   map[uint32][]mlx5.CompEvent
	async  []mlx5.AsyncEvent
	notify func(uint32)
	next   uint32
	attach map[uint32]uint32
}

func (f *fakeEvents) CreateCompChannel() (uint32, error) { f.next++; return f.next, nil }
func (f *fakeEvents) DestroyCompChannel(uint32) error    { return nil }
func (f *fakeEvents) AttachCQ(cqn, ch uint32) error      { f.attach[cqn] = ch; return nil }
func (f *fakeEvents) ReadCompEvents(ch uint32, out []mlx5.CompEvent) (int, error) {
	n := copy(out, f.comp[ch])
	f.comp[ch] = f.comp[ch][n:]
	return n, nil
}
func (f *fakeEvents) ReadAsyncEvents(out []mlx5.AsyncEvent) int {
	n := copy(out, f.async)
	f.async = f.async[n:]
	return n
}
func (f *fakeEvents) PendingEvents(ch uint32) int {
	if ch == 0 {
		return len(f.async)
	}
	return len(f.comp[ch])
}
func (f *fakeEvents) SetEventNotify(fn func(uint32)) { f.notify = fn }

func (f *fakeEvents) queue(ch, cqn uint32) {
	f.comp[ch] = append(f.comp[ch], mlx5.CompEvent{CQN: cqn})
	f.notify(ch)
}

// newFakeEventsCtx opens a context on fakeEvents with one channel and a
// CQ on it; the context is closed when the test ends.
func newFakeEventsCtx(t *testing.T) (*fakeEvents, *Context, *CompChannel, *CQ) {
	t.Helper()
	e := NewEnv(t, EnvOpts{Progress: true})
	fe := &fakeEvents{FakeProgDev: FakeProgDev{e.Dev}, comp: map[uint32][]mlx5.CompEvent{}, attach: map[uint32]uint32{}}
	ctx, err := Open(Device{Name: "fake-ev", Control: fe, MMIO: e.Dev, Mem: e.Mem})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ctx.Close() })
	ch, err := ctx.CreateCompChannel()
	require.NoError(t, err)
	cq, err := ctx.CreateCQEx(CQInitAttr{Entries: 8, Channel: ch})
	require.NoError(t, err)
	return fe, ctx, ch, cq
}

// TestChannelBookkeeping: events of destroyed objects are skipped, arm_sn
// advances per event read, channels in use cannot be destroyed, the fd
// tracks pending events.
func TestChannelBookkeeping(t *testing.T) {
	fe, ctx, ch, cq := newFakeEventsCtx(t)
	require.Same(t, ch, cq.Channel())
	require.Equal(t, ch.id, fe.attach[cq.cqn])
	other, err := ctx.CreateCQ(8)
	require.NoError(t, err)

	fe.queue(ch.id, other.cqn) // a CQ not on this channel: skipped
	fe.queue(ch.id, 999)       // no such CQ: skipped
	fe.queue(ch.id, cq.cqn)
	require.Equal(t, 3, ch.pipe.bytes)
	got, err := ch.GetCQEvent(0)
	require.NoError(t, err)
	require.Same(t, cq, got)
	require.Equal(t, uint32(1), cq.armSN)
	require.Equal(t, 0, ch.pipe.bytes, "one byte per event taken")
	_, err = ch.GetCQEvent(0)
	require.ErrorIs(t, err, ErrTimeout)

	require.ErrorIs(t, ch.Destroy(), ErrBusy)
	require.ErrorIs(t, cq.Destroy(), ErrBusy, "its event is not acknowledged")
	cq.AckEvents(1)
	require.NoError(t, cq.Destroy())
	fe.queue(ch.id, cq.cqn) // after the destroy: skipped
	_, err = ch.GetCQEvent(time.Millisecond)
	require.ErrorIs(t, err, ErrTimeout)
	require.NoError(t, ch.Destroy())

	fe.async = append(fe.async, mlx5.AsyncEvent{Type: mlx5.EventQPFatal, Num: 0x999}, mlx5.AsyncEvent{Type: mlx5.EventCQErr, Num: other.cqn})
	ev, err := ctx.GetAsyncEvent(0)
	require.NoError(t, err, "the QP event of an unknown QP is skipped")
	require.Same(t, other, ev.CQ)
	require.Equal(t, fmt.Sprintf("CQ_ERR cq %#x", other.cqn), ev.String())
}

// TestEventVerbsNilAndClosed: every event verb on a nil or destroyed
// object, or on a closed context, fails with (a wrapped) ErrClosed or,
// having nothing to fail, answers nothing; none panics (AckEvents on a
// nil CQ did).
func TestEventVerbsNilAndClosed(t *testing.T) {
	type objs struct {
		cq  *CQ
		ch  *CompChannel
		ctx *Context
	}
	states := []struct {
		name string
		make func(t *testing.T) objs
	}{
		{"nil", func(t *testing.T) objs { return objs{} }},
		{"destroyed", func(t *testing.T) objs {
			_, ctx, ch, cq := newFakeEventsCtx(t)
			require.NoError(t, cq.Destroy())
			require.NoError(t, ch.Destroy())
			require.NoError(t, ctx.Close())
			return objs{cq, ch, ctx}
		}},
		{"destroyed by the context's Close", func(t *testing.T) objs {
			_, ctx, ch, cq := newFakeEventsCtx(t)
			require.NoError(t, cq.ReqNotify(false))
			require.NoError(t, ctx.Close())
			return objs{cq, ch, ctx}
		}},
	}
	// fails is set for the verbs that return an error; answers checks
	// what the others answer.
	cases := []struct {
		name    string
		fails   func(o objs) error
		answers func(t *testing.T, o objs)
	}{
		{name: "CQ.AckEvents", answers: func(t *testing.T, o objs) { o.cq.AckEvents(1); require.Zero(t, o.cq.UnackedEvents()) }},
		{name: "CQ.UnackedEvents", answers: func(t *testing.T, o objs) { require.Zero(t, o.cq.UnackedEvents()) }},
		{name: "CQ.Channel", answers: func(t *testing.T, o objs) {
			if o.cq == nil {
				require.Nil(t, o.cq.Channel())
			} else {
				_ = o.cq.Channel() // the channel it had
			}
		}},
		{name: "CQ.ReqNotify", fails: func(o objs) error { return o.cq.ReqNotify(false) }},
		{name: "CQ.Modify", fails: func(o objs) error { return o.cq.Modify(CQModeration{Count: 1}) }},
		{name: "CQ.Resize", fails: func(o objs) error { return o.cq.Resize(8) }},
		{name: "CompChannel.GetCQEvent", fails: func(o objs) error {
			cq, err := o.ch.GetCQEvent(time.Millisecond)
			if cq != nil {
				return fmt.Errorf("a CQ returned with %v", err)
			}
			return err
		}},
		{name: "CompChannel.Fd", answers: func(t *testing.T, o objs) { require.Equal(t, -1, o.ch.Fd()) }},
		{name: "CompChannel.Destroy", fails: func(o objs) error { return o.ch.Destroy() }},
		{name: "Context.CreateCompChannel", fails: func(o objs) error {
			ch, err := o.ctx.CreateCompChannel()
			if ch != nil {
				return fmt.Errorf("a channel returned with %v", err)
			}
			return err
		}},
		{name: "Context.CreateCQEx", fails: func(o objs) error {
			cq, err := o.ctx.CreateCQEx(CQInitAttr{Entries: 4})
			if cq != nil {
				return fmt.Errorf("a CQ returned with %v", err)
			}
			return err
		}},
		{name: "Context.GetAsyncEvent", fails: func(o objs) error {
			ev, err := o.ctx.GetAsyncEvent(time.Millisecond)
			if ev != (AsyncEvent{}) {
				return fmt.Errorf("event %v returned with %v", ev, err)
			}
			return err
		}},
		{name: "Context.AckAsyncEvent", answers: func(t *testing.T, o objs) {
			o.ctx.AckAsyncEvent(AsyncEvent{})
			require.Zero(t, o.ctx.UnackedAsyncEvents())
		}},
		{name: "Context.UnackedAsyncEvents", answers: func(t *testing.T, o objs) { require.Zero(t, o.ctx.UnackedAsyncEvents()) }},
		{name: "Context.AsyncFd", fails: func(o objs) error {
			fd, err := o.ctx.AsyncFd()
			if fd != -1 {
				return fmt.Errorf("fd %d returned with %v", fd, err)
			}
			return err
		}},
	}
	for _, st := range states {
		for _, c := range cases {
			t.Run(st.name+"/"+c.name, func(t *testing.T) {
				o := st.make(t)
				require.NotPanics(t, func() {
					if c.fails != nil {
						require.ErrorIs(t, c.fails(o), ErrClosed)
						return
					}
					c.answers(t, o)
				})
			})
		}
	}
}

// fdReadable reports whether fd has data to read, without waiting.
func fdReadable(t *testing.T, fd int) bool {
	t.Helper()
	require.GreaterOrEqual(t, fd, 0)
	for {
		var set syscall.FdSet
		set.Bits[fd/64] |= 1 << (uint(fd) % 64)
		tv := syscall.Timeval{}
		n, err := syscall.Select(fd+1, &set, nil, nil, &tv)
		if err == syscall.EINTR { // the runtime's preemption signal
			continue
		}
		require.NoError(t, err)
		return n > 0
	}
}

// eventSource is one kind of event the provider keeps a readiness pipe
// for, on newFakeEventsCtx's context: queue makes the fake device queue
// one, get takes one (timeout 0), fd is the application's fd, pipe the
// provider's pipe behind it.
type eventSource struct {
	name  string
	queue func(fe *fakeEvents, ch *CompChannel, cq *CQ)
	get   func(ctx *Context, ch *CompChannel) error
	fd    func(ctx *Context, ch *CompChannel) int
	pipe  func(ctx *Context, ch *CompChannel) *evPipe
}

var eventSources = []eventSource{
	{"completion channel",
		func(fe *fakeEvents, ch *CompChannel, cq *CQ) { fe.queue(ch.id, cq.cqn) },
		func(ctx *Context, ch *CompChannel) error { _, err := ch.GetCQEvent(0); return err },
		func(ctx *Context, ch *CompChannel) int { return ch.Fd() },
		func(ctx *Context, ch *CompChannel) *evPipe { return ch.pipe }},
	{"async events",
		func(fe *fakeEvents, ch *CompChannel, cq *CQ) {
			fe.async = append(fe.async, mlx5.AsyncEvent{Type: mlx5.EventPortActive, Num: 1})
			fe.notify(0)
		},
		func(ctx *Context, ch *CompChannel) error { _, err := ctx.GetAsyncEvent(0); return err },
		func(ctx *Context, ch *CompChannel) int { fd, _ := ctx.AsyncFd(); return fd },
		func(ctx *Context, ch *CompChannel) *evPipe { return ctx.ev.async }},
}

// bounded runs f and fails the test if it has not returned within 5 s: a
// read of the event pipe that blocks blocks for ever. p then gets a byte,
// which lets such a read return before the test ends.
func bounded(t *testing.T, p *evPipe, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
		return
	case <-time.After(5 * time.Second):
	}
	_, _ = p.w.Write([]byte{1})
	select {
	case <-done:
	case <-time.After(time.Second):
	}
	t.Fatalf("%s did not return within 5 s", what)
}

// boundedGet is src.get under bounded.
func boundedGet(t *testing.T, src eventSource, ctx *Context, ch *CompChannel) error {
	t.Helper()
	var err error
	bounded(t, src.pipe(ctx, ch), "get event", func() { err = src.get(ctx, ch) })
	return err
}

// appRead reads up to n bytes from fd as an application would, without
// blocking (on a descriptor left in blocking mode it would block; the
// callers read only after fdReadable).
func appRead(t *testing.T, fd, n int) int {
	t.Helper()
	buf := make([]byte, n)
	k, err := syscall.Read(fd, buf)
	require.NoError(t, err)
	return k
}

// TestEventFdBeyondPipeCap: the readiness pipe holds at most maxPipeBytes
// bytes; with more events queued, the fd must stay readable until the
// last of them is taken (it went quiet with events still pending, an
// epoll reader's lost wakeup).
func TestEventFdBeyondPipeCap(t *testing.T) {
	const extra = 3
	for _, c := range eventSources {
		t.Run(c.name, func(t *testing.T) {
			fe, ctx, ch, cq := newFakeEventsCtx(t)
			fd := c.fd(ctx, ch)
			for i := 0; i < maxPipeBytes+extra; i++ {
				c.queue(fe, ch, cq)
			}
			for i := 0; i < maxPipeBytes+extra; i++ {
				require.True(t, fdReadable(t, fd), "event %d of %d pending, fd not readable", i, maxPipeBytes+extra)
				require.NoError(t, c.get(ctx, ch))
			}
			require.False(t, fdReadable(t, fd))
			require.ErrorIs(t, c.get(ctx, ch), ErrTimeout)
		})
	}
}

// TestEventFdStaysNonBlocking: the fd handed to the application is the
// pipe's read end; os.File.Fd would switch it to blocking mode (it does
// in go1.26), after which the provider's own non-blocking read of a byte
// the application had already taken blocked for ever in read(2), and a
// wait's read deadline could no longer end it.
func TestEventFdStaysNonBlocking(t *testing.T) {
	for _, src := range eventSources {
		t.Run(src.name, func(t *testing.T) {
			fe, ctx, ch, cq := newFakeEventsCtx(t)
			fd := src.fd(ctx, ch)
			fl, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_GETFL, 0)
			require.Zero(t, errno)
			require.NotZero(t, fl&syscall.O_NONBLOCK, "the application's fd is in blocking mode")

			src.queue(fe, ch, cq)
			require.True(t, fdReadable(t, fd))
			require.Equal(t, 1, appRead(t, fd, 1), "the application takes the byte itself")
			require.NoError(t, boundedGet(t, src, ctx, ch), "the event is still there")

			p := src.pipe(ctx, ch)
			var got bool
			bounded(t, p, "waitReadable on an empty pipe", func() { got = p.waitReadable(10 * time.Millisecond) })
			require.False(t, got)
			src.queue(fe, ch, cq)
			bounded(t, p, "waitReadable with a byte", func() { got = p.waitReadable(time.Second) })
			require.True(t, got)
			require.NoError(t, boundedGet(t, src, ctx, ch), "the event waitReadable announced")
			require.False(t, fdReadable(t, fd))
			require.Zero(t, p.bytes+p.credit)
		})
	}
}

// TestEventFdReadByApp: an application that reads the fd itself (it
// should not, but an epoll loop may) takes bytes the provider counted.
// The fd must still be readable whenever an event is queued, however many
// bytes the application took at once; the provider's count of bytes
// climbed with each event whose byte the application had taken, until at
// maxPipeBytes no byte was written any more and the fd stayed unreadable
// with events queued.
func TestEventFdReadByApp(t *testing.T) {
	cases := []struct {
		name string
		run  func(t *testing.T, src eventSource, fe *fakeEvents, ctx *Context, ch *CompChannel, cq *CQ, fd int)
	}{
		{"one event at a time, beyond the pipe's cap", func(t *testing.T, src eventSource, fe *fakeEvents, ctx *Context, ch *CompChannel, cq *CQ, fd int) {
			for i := 0; i < maxPipeBytes+3; i++ {
				src.queue(fe, ch, cq)
				require.True(t, fdReadable(t, fd), "event %d queued, fd not readable", i)
				require.Equal(t, 1, appRead(t, fd, 1))
				require.NoError(t, boundedGet(t, src, ctx, ch), "event %d", i)
				require.False(t, fdReadable(t, fd), "event %d taken, none queued", i)
			}
		}},
		{"the application drains the pipe", func(t *testing.T, src eventSource, fe *fakeEvents, ctx *Context, ch *CompChannel, cq *CQ, fd int) {
			const n = 5
			for i := 0; i < n; i++ {
				src.queue(fe, ch, cq)
			}
			require.Equal(t, n, appRead(t, fd, 64))
			for i := 0; i < n; i++ {
				require.NoError(t, boundedGet(t, src, ctx, ch), "event %d", i)
				require.Equal(t, i < n-1, fdReadable(t, fd), "%d of %d events still queued", n-1-i, n)
			}
		}},
		{"one byte per wakeup, several events queued", func(t *testing.T, src eventSource, fe *fakeEvents, ctx *Context, ch *CompChannel, cq *CQ, fd int) {
			const n = 6
			for i := 0; i < n; i++ {
				src.queue(fe, ch, cq)
			}
			for i := 0; i < n; i++ {
				require.True(t, fdReadable(t, fd), "%d of %d events still queued", n-i, n)
				require.Equal(t, 1, appRead(t, fd, 1))
				require.NoError(t, boundedGet(t, src, ctx, ch), "event %d", i)
			}
			require.False(t, fdReadable(t, fd))
		}},
	}
	for _, src := range eventSources {
		for _, c := range cases {
			t.Run(src.name+"/"+c.name, func(t *testing.T) {
				fe, ctx, ch, cq := newFakeEventsCtx(t)
				fd := src.fd(ctx, ch)
				c.run(t, src, fe, ctx, ch, cq, fd)
				require.False(t, fdReadable(t, fd))
				require.ErrorIs(t, boundedGet(t, src, ctx, ch), ErrTimeout)
			})
		}
	}
}

// TestAckEventsLargeCounts acknowledges more events than were reported,
// with counts beyond 32 bits: the acknowledged count saturates at the
// reported one (an int truncated to uint32 used to wrap it backwards, so
// that an ack raised UnackedEvents, or acked nothing).
func TestAckEventsLargeCounts(t *testing.T) {
	cases := []struct {
		name      string
		first, n  int // AckEvents(first) after the first of two events, AckEvents(n) after both
		wantFirst int
		want      int
	}{
		{"one_then_one", 1, 1, 0, 0},
		{"one_then_two", 1, 2, 0, 0},
		{"zero_then_too_many", 0, 5, 1, 0},
		{"one_then_max_uint32", 1, math.MaxUint32, 0, 0},
		{"one_then_2^32", 1, 1 << 32, 0, 0},
		{"one_then_max_int", 1, math.MaxInt, 0, 0},
		{"max_int_then_max_int", math.MaxInt, math.MaxInt, 0, 0},
		{"negative", -1, math.MinInt, 1, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fe, _, ch, cq := newFakeEventsCtx(t)
			fe.queue(ch.id, cq.cqn)
			_, err := ch.GetCQEvent(0)
			require.NoError(t, err)
			cq.AckEvents(c.first)
			require.Equal(t, c.wantFirst, cq.UnackedEvents())
			fe.queue(ch.id, cq.cqn)
			_, err = ch.GetCQEvent(0)
			require.NoError(t, err)
			cq.AckEvents(c.n)
			require.Equal(t, c.want, cq.UnackedEvents())
		})
	}
}

// TestDestroyCQUnackedEvents: a CQ with completion events GetCQEvent
// returned and AckEvents did not acknowledge cannot be destroyed
// (ibv_destroy_cq waits for them; here ErrBusy, no wait); once they are
// acknowledged it can. Context.Close releases such a CQ all the same.
func TestDestroyCQUnackedEvents(t *testing.T) {
	cases := []struct {
		name     string
		events   int
		ack      int
		wantBusy bool
	}{
		{"no_events", 0, 0, false},
		{"one_unacked", 1, 0, true},
		{"two_one_acked", 2, 1, true},
		{"two_acked", 2, 2, false},
		{"over_acked", 1, 5, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fe, _, ch, cq := newFakeEventsCtx(t)
			for i := 0; i < c.events; i++ {
				fe.queue(ch.id, cq.cqn)
				_, err := ch.GetCQEvent(0)
				require.NoError(t, err)
			}
			cq.AckEvents(c.ack)
			err := cq.Destroy()
			if !c.wantBusy {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrBusy)
			var oe *OpError
			require.ErrorAs(t, err, &oe)
			require.Equal(t, "destroy_cq", oe.Op)
			cq.AckEvents(cq.UnackedEvents())
			require.NoError(t, cq.Destroy())
		})
	}
	t.Run("close_releases", func(t *testing.T) {
		fe, ctx, ch, cq := newFakeEventsCtx(t)
		fe.queue(ch.id, cq.cqn)
		_, err := ch.GetCQEvent(0)
		require.NoError(t, err)
		require.NoError(t, ctx.Close())
		require.ErrorIs(t, cq.Destroy(), ErrClosed)
	})
}

// lyingEvents is a device (a daemon, say) that never runs out of events,
// every one of a CQ or a QP the context does not have.
type lyingEvents struct{ fakeEvents }

func (l *lyingEvents) ReadCompEvents(_ uint32, out []mlx5.CompEvent) (int, error) {
	out[0] = mlx5.CompEvent{CQN: 0x999}
	return 1, nil
}
func (l *lyingEvents) ReadAsyncEvents(out []mlx5.AsyncEvent) int {
	out[0] = mlx5.AsyncEvent{Type: mlx5.EventQPFatal, Num: 0x999}
	return 1
}
func (l *lyingEvents) PendingEvents(uint32) int { return 1 }

// TestWaitEndsOnEndlessUnknownEvents: a device that keeps reporting events
// of objects the context does not have cannot hold GetCQEvent or
// GetAsyncEvent past its timeout: the skipping is bounded, and the wait
// ends with ErrTimeout. Before the fix both skipped for ever, whatever
// the timeout (0 included).
func TestWaitEndsOnEndlessUnknownEvents(t *testing.T) {
	e := NewEnv(t, EnvOpts{Progress: true})
	le := &lyingEvents{fakeEvents{FakeProgDev: FakeProgDev{e.Dev}, comp: map[uint32][]mlx5.CompEvent{}, attach: map[uint32]uint32{}}}
	ctx, err := Open(Device{Name: "fake-liar", Control: le, MMIO: e.Dev, Mem: e.Mem})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ctx.Close() })
	ch, err := ctx.CreateCompChannel()
	require.NoError(t, err)
	_, err = ctx.CreateCQEx(CQInitAttr{Entries: 8, Channel: ch})
	require.NoError(t, err)
	for _, c := range []struct {
		name string
		wait func(time.Duration) error
	}{
		{"get_cq_event", func(d time.Duration) error { _, err := ch.GetCQEvent(d); return err }},
		{"get_async_event", func(d time.Duration) error { _, err := ctx.GetAsyncEvent(d); return err }},
	} {
		for _, d := range []time.Duration{0, time.Millisecond, time.Hour} {
			t.Run(fmt.Sprintf("%s/%v", c.name, d), func(t *testing.T) {
				done := make(chan error, 1)
				go func() { done <- c.wait(d) }()
				select {
				case err := <-done:
					require.ErrorIs(t, err, ErrTimeout)
				case <-time.After(10 * time.Second): // a guard against a hang, not a measure
					t.Fatal("the wait did not end")
				}
			})
		}
	}
}

// uncomparableEvents is an EventControl that cannot be a map key: its
// type is comparable, the slice its interface field holds is not.
type uncomparableEvents struct {
	*fakeEvents
	extra any
}

// TestEventHubUncomparableControl: a control whose value cannot be a map
// key gets an event hub of its own rather than a panic.
func TestEventHubUncomparableControl(t *testing.T) {
	ec := uncomparableEvents{fakeEvents: &fakeEvents{}, extra: []int{1}}
	v := joinHub(ec, func(mlx5.AsyncEvent) bool { return true })
	require.NotNil(t, v)
	v.SetEventNotify(func(uint32) {})
	require.Equal(t, 0, v.PendingEvents(0))
	v.SetEventNotify(nil)
	require.True(t, v.gone)
}
