package test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/testbed"
)

// TestTwoContextsShareTheDeviceEvents: two contexts opened on one
// in-process device each get the asynchronous events of their own
// objects and every port event, as two processes' contexts do under
// uverbs. The second Open's notify replaced the first's: the first
// context's QP event woke the second, whose GetAsyncEvent threw it away as
// none of its objects, and the first waited for it in vain; closing either
// silenced the other.
func TestTwoContextsShareTheDeviceEvents(t *testing.T) {
	w, err := testbed.New(testbed.DefaultConfig())
	require.NoError(t, err)
	defer w.Close()
	h := w.Hosts[0]
	open := func() (*provider.Context, *testbed.Endpoint) {
		ctx, err := provider.Open(provider.Device{Name: "softnic0", Control: h.Dev, MMIO: h.CPU, Mem: h.Mem})
		require.NoError(t, err)
		own := *h
		own.Ctx = ctx
		eps, err := testbed.Connect([2]*testbed.Host{&own, w.Hosts[1]}, testbed.ConnOpts{SRQ: true})
		require.NoError(t, err)
		_, err = ctx.GetAsyncEvent(0) // sets up its async queue: nothing yet
		require.ErrorIs(t, err, provider.ErrTimeout)
		return ctx, eps[0]
	}
	ctxA, epA := open()
	ctxB, epB := open()
	const wait = 10 * time.Millisecond

	// A's QP with an SRQ goes to error: QP_LAST_WQE_REACHED, A's alone.
	require.NoError(t, epA.QP.Modify(&provider.QPAttr{QPState: provider.QPStateErr}, mlx5.AttrState))
	_, err = ctxB.GetAsyncEvent(wait)
	require.ErrorIs(t, err, provider.ErrTimeout, "B has no event of A's QP")
	ev, err := ctxA.GetAsyncEvent(wait)
	require.NoError(t, err, "A gets its QP's event")
	require.Equal(t, mlx5.EventQPLastWQEReached, ev.Type)
	require.Same(t, epA.QP, ev.QP)
	ctxA.AckAsyncEvent(ev)

	// A port event goes to both, and makes both async fds readable.
	h.Dev.SetLinkState(false)
	w.Settle(0)
	for _, ctx := range []*provider.Context{ctxA, ctxB} {
		fd, err := ctx.AsyncFd()
		require.NoError(t, err)
		require.True(t, readable(t, fd), "the async fd is readable")
		ev, err := ctx.GetAsyncEvent(wait)
		require.NoError(t, err)
		require.Equal(t, mlx5.EventPortErr, ev.Type)
		ctx.AckAsyncEvent(ev)
	}

	// B's QP, then A closes: B still hears its own events and the port's.
	require.NoError(t, epB.QP.Modify(&provider.QPAttr{QPState: provider.QPStateErr}, mlx5.AttrState))
	_, err = ctxA.GetAsyncEvent(wait)
	require.ErrorIs(t, err, provider.ErrTimeout, "A has no event of B's QP")
	require.NoError(t, ctxA.Close())
	h.Dev.SetLinkState(true)
	var got []mlx5.EventType
	for range 2 {
		ev, err := ctxB.GetAsyncEvent(wait)
		require.NoError(t, err)
		got = append(got, ev.Type)
		ctxB.AckAsyncEvent(ev)
	}
	require.Equal(t, []mlx5.EventType{mlx5.EventQPLastWQEReached, mlx5.EventPortActive}, got)
	require.NoError(t, ctxB.Close())
}

// TestTwoContextsCompletionChannels: each context's completion channel
// gets its own CQs' events, and its fd is readable for them alone, with
// two contexts open on one device (the second Open's notify used to take
// every channel's readiness).
func TestTwoContextsCompletionChannels(t *testing.T) {
	w, err := testbed.New(testbed.DefaultConfig())
	require.NoError(t, err)
	defer w.Close()
	h := w.Hosts[0]
	var ctxs [2]*provider.Context
	var eps [2]*testbed.Endpoint
	for i := range ctxs {
		ctx, err := provider.Open(provider.Device{Name: "softnic0", Control: h.Dev, MMIO: h.CPU, Mem: h.Mem})
		require.NoError(t, err)
		defer ctx.Close()
		own := *h
		own.Ctx = ctx
		pair, err := testbed.Connect([2]*testbed.Host{&own, w.Hosts[1]}, testbed.ConnOpts{Channel: true})
		require.NoError(t, err)
		_, err = ctx.GetAsyncEvent(0) // both contexts' events are set up
		require.ErrorIs(t, err, provider.ErrTimeout)
		ctxs[i], eps[i] = ctx, pair[0]
		postRecvs(t, pair[1], 1)
	}
	for _, ep := range eps {
		require.NoError(t, ep.SendCQ.ReqNotify(false))
	}
	// Only the first context's QP sends (the second Open's notify used to
	// look the channel up among its own).
	sendMsg(t, eps[0], 1, false)
	w.Settle(0)
	fd0, fd1 := eps[0].Channel.Fd(), eps[1].Channel.Fd()
	require.True(t, readable(t, fd0), "the sender's channel is readable")
	require.False(t, readable(t, fd1), "the other context's channel is not")
	getEvent(t, eps[0].Channel, eps[0].SendCQ)
	_, err = eps[1].Channel.GetCQEvent(evWait)
	require.ErrorIs(t, err, provider.ErrTimeout)
}
