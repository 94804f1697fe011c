package provider

import (
	"encoding/binary"
	"fmt"
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

// TestChannelBookkeeping: events of destroyed objects are skipped, arm_sn
// advances per event read, channels in use cannot be destroyed, the fd
// tracks pending events.
func TestChannelBookkeeping(t *testing.T) {
	e := NewEnv(t, EnvOpts{Progress: true})
	fe := &fakeEvents{FakeProgDev: FakeProgDev{e.Dev}, comp: map[uint32][]mlx5.CompEvent{}, attach: map[uint32]uint32{}}
	ctx, err := Open(Device{Name: "fake-ev", Control: fe, MMIO: e.Dev, Mem: e.Mem})
	require.NoError(t, err)
	defer ctx.Close()
	ch, err := ctx.CreateCompChannel()
	require.NoError(t, err)
	cq, err := ctx.CreateCQEx(CQInitAttr{Entries: 8, Channel: ch})
	require.NoError(t, err)
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
// object answers ErrClosed or nothing; none panics (AckEvents on a nil CQ
// did).
func TestEventVerbsNilAndClosed(t *testing.T) {
	var (
		cq  *CQ
		ch  *CompChannel
		ctx *Context
	)
	cases := []struct {
		name string
		run  func() error
	}{
		{"CQ.AckEvents", func() error { cq.AckEvents(1); return nil }},
		{"CQ.UnackedEvents", func() error { _ = cq.UnackedEvents(); return nil }},
		{"CQ.Channel", func() error { _ = cq.Channel(); return nil }},
		{"CQ.ReqNotify", func() error { return cq.ReqNotify(false) }},
		{"CQ.Modify", func() error { return cq.Modify(CQModeration{Count: 1}) }},
		{"CQ.Resize", func() error { return cq.Resize(8) }},
		{"CompChannel.GetCQEvent", func() error { _, err := ch.GetCQEvent(time.Millisecond); return err }},
		{"CompChannel.Fd", func() error { _ = ch.Fd(); return nil }},
		{"CompChannel.Destroy", func() error { return ch.Destroy() }},
		{"Context.GetAsyncEvent", func() error { _, err := ctx.GetAsyncEvent(time.Millisecond); return err }},
		{"Context.AckAsyncEvent", func() error { ctx.AckAsyncEvent(AsyncEvent{}); return nil }},
		{"Context.UnackedAsyncEvents", func() error { _ = ctx.UnackedAsyncEvents(); return nil }},
		{"Context.AsyncFd", func() error { _, err := ctx.AsyncFd(); return err }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.NotPanics(t, func() {
				if err := c.run(); err != nil {
					require.ErrorIs(t, err, ErrClosed)
				}
			})
		})
	}
}

// fdReadable reports whether fd has data to read, without waiting.
func fdReadable(t *testing.T, fd int) bool {
	t.Helper()
	require.GreaterOrEqual(t, fd, 0)
	var set syscall.FdSet
	set.Bits[fd/64] |= 1 << (uint(fd) % 64)
	tv := syscall.Timeval{}
	n, err := syscall.Select(fd+1, &set, nil, nil, &tv)
	require.NoError(t, err)
	return n > 0
}

// TestEventFdBeyondPipeCap: the readiness pipe holds at most maxPipeBytes
// bytes; with more events queued, the fd must stay readable until the
// last of them is taken (it went quiet with events still pending, an
// epoll reader's lost wakeup).
func TestEventFdBeyondPipeCap(t *testing.T) {
	const extra = 3
	cases := []struct {
		name  string
		queue func(fe *fakeEvents, ch *CompChannel, cq *CQ)
		get   func(ctx *Context, ch *CompChannel) error
		fd    func(ctx *Context, ch *CompChannel) int
	}{
		{"completion channel",
			func(fe *fakeEvents, ch *CompChannel, cq *CQ) { fe.queue(ch.id, cq.cqn) },
			func(ctx *Context, ch *CompChannel) error { _, err := ch.GetCQEvent(0); return err },
			func(ctx *Context, ch *CompChannel) int { return ch.Fd() }},
		{"async events",
			func(fe *fakeEvents, ch *CompChannel, cq *CQ) {
				fe.async = append(fe.async, mlx5.AsyncEvent{Type: mlx5.EventPortActive, Num: 1})
				fe.notify(0)
			},
			func(ctx *Context, ch *CompChannel) error { _, err := ctx.GetAsyncEvent(0); return err },
			func(ctx *Context, ch *CompChannel) int { fd, _ := ctx.AsyncFd(); return fd }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := NewEnv(t, EnvOpts{Progress: true})
			fe := &fakeEvents{FakeProgDev: FakeProgDev{e.Dev}, comp: map[uint32][]mlx5.CompEvent{}, attach: map[uint32]uint32{}}
			ctx, err := Open(Device{Name: "fake-ev", Control: fe, MMIO: e.Dev, Mem: e.Mem})
			require.NoError(t, err)
			defer ctx.Close()
			ch, err := ctx.CreateCompChannel()
			require.NoError(t, err)
			cq, err := ctx.CreateCQEx(CQInitAttr{Entries: 8, Channel: ch})
			require.NoError(t, err)
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
