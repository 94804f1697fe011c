package provider

import (
	"encoding/binary"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/internal/kverbs"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/shm"
	"github.com/softnic/softnic/uverbs"
)

// fakeKernelMLX5 is the control of a kernel mlx5 context as the provider
// sees it (UverbsControl with event support: a user_handle per object,
// the channel of the next CREATE_CQ) in front of FakeDev.
type fakeKernelMLX5 struct {
	*FakeDev
	uhs      map[uhKey]uint64
	next     uint64
	channels []int32 // setCQChannel's arguments, in order
}

func (f *fakeKernelMLX5) give(kind byte, num uint32) {
	f.next++
	f.uhs[uhKey{kind, num}] = f.next
}

func (f *fakeKernelMLX5) CreateCQ(c mlx5.CreateCQCmd) (mlx5.CreateCQResp, error) {
	r, err := f.FakeDev.CreateCQ(c)
	if err == nil {
		f.give('c', r.CQN)
	}
	return r, err
}

func (f *fakeKernelMLX5) CreateQP(c mlx5.CreateQPCmd) (mlx5.CreateQPResp, error) {
	r, err := f.FakeDev.CreateQP(c)
	if err == nil {
		f.give('q', r.QPN)
	}
	return r, err
}

func (f *fakeKernelMLX5) UserHandle(kind byte, num uint32) uint64 { return f.uhs[uhKey{kind, num}] }
func (f *fakeKernelMLX5) setCQChannel(fd int32)                   { f.channels = append(f.channels, fd) }

// kernelPipe is a pipe standing for a kernel event fd: the provider reads
// r, the test writes the kernel's records into w.
type kernelPipe struct{ r, w int }

func newKernelPipe(t *testing.T) kernelPipe {
	var p [2]int
	require.NoError(t, syscall.Pipe2(p[:], syscall.O_CLOEXEC))
	t.Cleanup(func() { syscall.Close(p[1]) })
	return kernelPipe{p[0], p[1]}
}

func (p kernelPipe) compEvent(t *testing.T, uh uint64) {
	var b [uverbs.CompEventDescSize]byte
	binary.NativeEndian.PutUint64(b[:], uh)
	_, err := syscall.Write(p.w, b[:])
	require.NoError(t, err)
}

func (p kernelPipe) asyncEvent(t *testing.T, element uint64, typ uint32) {
	var b [uverbs.AsyncEventDescSize]byte
	binary.NativeEndian.PutUint64(b[0:], element)
	binary.NativeEndian.PutUint32(b[8:], typ)
	_, err := syscall.Write(p.w, b[:])
	require.NoError(t, err)
}

// TestKernelMLX5Events: a kernel mlx5 context's events, with the kernel's
// fds played by pipes. The completion channel is an fd named in CREATE_CQ
// itself (the next CREATE_CQ names none); ReqNotify arms the CQ through
// the UAR, as libmlx5 does; completion and asynchronous event records
// find their CQ and QP by the user_handle the control gave them; a
// destroyed object's records are skipped; nothing waits past its timeout.
func TestKernelMLX5Events(t *testing.T) {
	mem, err := shm.New("kmlx5-ev", 4<<20, 1<<32)
	require.NoError(t, err)
	defer mem.Close()
	f := &fakeKernelMLX5{FakeDev: NewFakeDev(mem), uhs: map[uhKey]uint64{}}
	ctx, err := Open(Device{Name: "mlx5_fake", Control: f, MMIO: f.FakeDev, Mem: mem})
	require.NoError(t, err)
	chanPipe, asyncPipe := newKernelPipe(t), newKernelPipe(t)
	channels := 0
	ctx.kev = newKernEvents(func() (int, error) {
		channels++
		if channels > 1 {
			return -1, &uverbs.Error{Cmd: "CREATE_COMP_CHANNEL", Errno: syscall.EMFILE, Reason: "fake: one channel"}
		}
		return chanPipe.r, nil
	}, kverbs.NewEventFD(asyncPipe.r))
	defer ctx.Close()

	ch, err := ctx.CreateCompChannel()
	require.NoError(t, err)
	require.Equal(t, chanPipe.r, ch.Fd())
	_, err = ctx.CreateCompChannel()
	require.ErrorIs(t, err, syscall.EMFILE, "the kernel's refusal, with its errno")

	cq, err := ctx.CreateCQEx(CQInitAttr{Entries: 16, Channel: ch})
	require.NoError(t, err)
	require.Equal(t, ch, cq.Channel())
	require.Equal(t, []int32{int32(chanPipe.r), uverbs.NoCompChannel}, f.channels,
		"the channel names this CREATE_CQ only")
	plain, err := ctx.CreateCQ(8)
	require.NoError(t, err)
	require.Nil(t, plain.Channel())

	// Arming is libmlx5's: the arm word in the doorbell record and the
	// 64-bit store to the UAR's CQ doorbell.
	f.RecordOps = true
	require.NoError(t, cq.ReqNotify(false))
	f.RecordOps = false
	var arm []MMIOOp
	for _, op := range f.Ops {
		if !op.Flush {
			arm = append(arm, op)
		}
	}
	require.Len(t, arm, 1)
	require.Equal(t, uint64(f.UCtx.UARIndex)*mlx5.UARPageSize+mlx5.UARCQArmOffset, arm[0].Off)

	// A completion event names the CQ by its user_handle.
	chanPipe.compEvent(t, f.UserHandle('c', cq.cqn))
	got, err := ch.GetCQEvent(time.Second)
	require.NoError(t, err)
	require.Same(t, cq, got)
	require.Equal(t, 1, cq.UnackedEvents())
	cq.AckEvents(1)
	_, err = ch.GetCQEvent(20 * time.Millisecond)
	require.ErrorIs(t, err, ErrTimeout)

	// Asynchronous events: a QP's, by user_handle; a port's, by number.
	pd, err := ctx.AllocPD()
	require.NoError(t, err)
	qp, err := ctx.CreateQP(pd, QPInitAttr{Type: QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	fd, err := ctx.AsyncFd()
	require.NoError(t, err)
	require.Equal(t, asyncPipe.r, fd)
	qpUH := f.UserHandle('q', qp.qpn)
	require.NotZero(t, qpUH)
	asyncPipe.asyncEvent(t, qpUH, uint32(mlx5.EventQPFatal))
	ev, err := ctx.GetAsyncEvent(time.Second)
	require.NoError(t, err)
	require.Same(t, qp, ev.QP)
	require.Equal(t, qp.qpn, ev.Num)
	// ibv_ack_async_event bookkeeping holds on a kernel context too (it
	// counted nothing there: always 0 unacknowledged).
	require.Equal(t, 1, ctx.UnackedAsyncEvents())
	ctx.AckAsyncEvent(ev)
	require.Equal(t, 0, ctx.UnackedAsyncEvents())

	// After DESTROY_QP its records are skipped: the next event returned
	// is the port's.
	require.NoError(t, qp.Destroy())
	asyncPipe.asyncEvent(t, qpUH, uint32(mlx5.EventQPFatal))
	asyncPipe.asyncEvent(t, 1, uint32(mlx5.EventPortErr))
	ev, err = ctx.GetAsyncEvent(time.Second)
	require.NoError(t, err)
	require.Nil(t, ev.QP)
	require.Equal(t, 1, ev.Port)
	_, err = ctx.GetAsyncEvent(20 * time.Millisecond)
	require.ErrorIs(t, err, ErrTimeout)

	// A channel in use cannot go; once its CQ is destroyed it can, and a
	// record for the dead CQ finds nothing.
	require.ErrorIs(t, ch.Destroy(), ErrBusy)
	cqUH := f.UserHandle('c', cq.cqn)
	require.NoError(t, cq.Destroy())
	require.NotContains(t, ctx.kev.cqs, cqUH)
	require.NoError(t, ch.Destroy())
}

// TestUverbsControlUserHandles: with event support, CREATE_CQ carries a
// fresh user_handle and the pending channel's fd exactly once; without it
// (the emulated NIC), user_handle stays 0 and comp_channel -1.
func TestUverbsControlUserHandles(t *testing.T) {
	answer := func(req, resp []byte) (int, error) {
		if len(resp) < uverbs.CreateCQRespSize+uverbs.MLX5CreateCQRespSize { // DESTROY_CQ
			clear(resp)
			return len(resp), nil
		}
		binary.NativeEndian.PutUint32(resp[0:], 5)  // cq_handle
		binary.NativeEndian.PutUint32(resp[8:], 77) // mlx5 cqn
		return uverbs.CreateCQRespSize + uverbs.MLX5CreateCQRespSize, nil
	}
	for _, events := range []bool{false, true} {
		tr := &scripted{answer: answer}
		u := NewUverbsControl(tr)
		u.events = events
		u.setCQChannel(9)
		_, err := u.CreateCQ(mlx5.CreateCQCmd{Entries: 16, CQESize: 64})
		require.NoError(t, err)
		_, err = u.CreateCQ(mlx5.CreateCQCmd{Entries: 16, CQESize: 64})
		require.NoError(t, err)
		var cores [2]uverbs.CreateCQ
		for i := range cores {
			m, err := uverbs.ParseWrite(tr.reqs[i])
			require.NoError(t, err)
			require.NoError(t, cores[i].Decode(m.Core))
		}
		require.Equal(t, int32(9), cores[0].CompChannel)
		require.Equal(t, uverbs.NoCompChannel, cores[1].CompChannel)
		if events {
			require.Equal(t, uint64(1), cores[0].UserHandle)
			require.Equal(t, uint64(2), cores[1].UserHandle)
			require.Equal(t, uint64(2), u.UserHandle('c', 77), "the last CQ created as 77")
			require.NoError(t, u.DestroyCQ(77))
			require.Zero(t, u.UserHandle('c', 77))
		} else {
			require.Zero(t, cores[0].UserHandle)
			require.Zero(t, u.UserHandle('c', 77))
		}
	}
}
