package test

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/softnic/softnic/device"
	"github.com/softnic/softnic/fault"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/testbed"
	"github.com/stretchr/testify/require"
)

// Completion channels and asynchronous events end to end, through the
// provider's verbs (docs/events.md).

// readable reports whether fd has data to read, without waiting.
func readable(t *testing.T, fd int) bool {
	t.Helper()
	return pollReadable(t, fd, 0)
}

// pollReadable waits up to timeout (wall clock) for fd to be readable, as
// an application's poll loop does.
func pollReadable(t *testing.T, fd int, timeout time.Duration) bool {
	t.Helper()
	require.GreaterOrEqual(t, fd, 0)
	deadline := time.Now().Add(timeout)
	for {
		var set syscall.FdSet
		set.Bits[fd/64] |= 1 << (uint(fd) % 64)
		tv := syscall.NsecToTimeval(max(time.Until(deadline), 0).Nanoseconds())
		n, err := syscall.Select(fd+1, &set, nil, nil, &tv)
		if err == syscall.EINTR { // the runtime's preemption signal
			continue
		}
		require.NoError(t, err)
		return n > 0
	}
}

// postRecvs posts n 256-byte receives on the responder's QP.
func postRecvs(t *testing.T, rsp *testbed.Endpoint, n int) {
	t.Helper()
	if n == 0 {
		return
	}
	wrs := make([]provider.RecvWR, n)
	for i := range wrs {
		wrs[i] = provider.RecvWR{WRID: uint64(100 + i), SGL: []provider.SGE{rsp.MR.SGE(uint64(i)*256, 256)}}
	}
	_, err := rsp.QP.PostRecv(wrs)
	require.NoError(t, err)
}

// sendMsg posts a signalled 32-byte SEND, solicited or not.
func sendMsg(t *testing.T, req *testbed.Endpoint, wrid uint64, solicited bool) {
	t.Helper()
	fl := provider.SendSignaled
	if solicited {
		fl |= provider.SendSolicited
	}
	_, err := req.QP.PostSend([]provider.SendWR{{WRID: wrid, Opcode: provider.WRSend, Flags: fl, SGL: []provider.SGE{req.MR.SGE(0, 32)}}})
	require.NoError(t, err)
}

const evWait = time.Millisecond // virtual time: far more than any event takes

// getEvent expects one completion event of cq on ch, and acknowledges it.
func getEvent(t *testing.T, ch *provider.CompChannel, cq *provider.CQ) {
	t.Helper()
	got, err := ch.GetCQEvent(evWait)
	require.NoError(t, err)
	require.Same(t, cq, got)
	got.AckEvents(1)
}

// noEvent expects the channel to stay empty until the world is idle.
func noEvent(t *testing.T, ch *provider.CompChannel) {
	t.Helper()
	_, err := ch.GetCQEvent(evWait)
	require.ErrorIs(t, err, provider.ErrTimeout)
}

func drain(t *testing.T, cq *provider.CQ, n int) []provider.WC {
	t.Helper()
	wcs, err := testbed.Wait(cq, n)
	require.NoError(t, err)
	return wcs
}

func TestCompletionChannel(t *testing.T) {
	cases := []struct {
		name string
		run  func(t *testing.T, w *testbed.World, req, rsp *testbed.Endpoint)
	}{
		{"arm, two CQEs: one event", func(t *testing.T, w *testbed.World, req, rsp *testbed.Endpoint) {
			require.NoError(t, rsp.RecvCQ.ReqNotify(false))
			sendMsg(t, req, 1, false)
			sendMsg(t, req, 2, false)
			getEvent(t, rsp.Channel, rsp.RecvCQ)
			require.Len(t, drain(t, rsp.RecvCQ, 2), 2)
			noEvent(t, rsp.Channel)
		}},
		{"re-arm: the next CQE gives the next event", func(t *testing.T, w *testbed.World, req, rsp *testbed.Endpoint) {
			for i := 0; i < 5; i++ { // past the 2-bit arm sequence number
				require.NoError(t, rsp.RecvCQ.ReqNotify(false))
				sendMsg(t, req, uint64(i), false)
				getEvent(t, rsp.Channel, rsp.RecvCQ)
				drain(t, rsp.RecvCQ, 1)
			}
			require.Zero(t, rsp.Host.Dev.Counters().Value(device.CtrCQArmSN), "arm_sn advanced with every event")
		}},
		{"solicited only: a plain SEND gives no event, a solicited one does", func(t *testing.T, w *testbed.World, req, rsp *testbed.Endpoint) {
			require.NoError(t, rsp.RecvCQ.ReqNotify(true))
			sendMsg(t, req, 1, false)
			noEvent(t, rsp.Channel)
			sendMsg(t, req, 2, true)
			getEvent(t, rsp.Channel, rsp.RecvCQ)
			wcs := drain(t, rsp.RecvCQ, 2)
			require.Equal(t, []uint64{100, 101}, []uint64{wcs[0].WRID, wcs[1].WRID})
		}},
		{"arm with CQEs already pending: an event at once", func(t *testing.T, w *testbed.World, req, rsp *testbed.Endpoint) {
			sendMsg(t, req, 1, false)
			w.Settle(0)
			noEvent(t, rsp.Channel)
			require.NoError(t, rsp.RecvCQ.ReqNotify(false))
			getEvent(t, rsp.Channel, rsp.RecvCQ)
		}},
		{"the channel fd is readable while an event is pending", func(t *testing.T, w *testbed.World, req, rsp *testbed.Endpoint) {
			fd := rsp.Channel.Fd()
			require.False(t, readable(t, fd))
			require.NoError(t, rsp.RecvCQ.ReqNotify(false))
			sendMsg(t, req, 1, false)
			w.Settle(0) // the device runs; no verb is called on the channel
			require.True(t, readable(t, fd))
			getEvent(t, rsp.Channel, rsp.RecvCQ)
			require.False(t, readable(t, fd))
		}},
		{"send and receive CQ on one channel", func(t *testing.T, w *testbed.World, req, rsp *testbed.Endpoint) {
			require.NoError(t, req.SendCQ.ReqNotify(false))
			require.NoError(t, req.RecvCQ.ReqNotify(false))
			sendMsg(t, req, 1, false)
			getEvent(t, req.Channel, req.SendCQ)
			noEvent(t, req.Channel)
			require.Equal(t, 0, req.RecvCQ.UnackedEvents())
		}},
		{"unacknowledged events are counted", func(t *testing.T, w *testbed.World, req, rsp *testbed.Endpoint) {
			require.NoError(t, rsp.RecvCQ.ReqNotify(false))
			sendMsg(t, req, 1, false)
			cq, err := rsp.Channel.GetCQEvent(evWait)
			require.NoError(t, err)
			require.Equal(t, 1, cq.UnackedEvents())
			cq.AckEvents(5)
			require.Equal(t, 0, cq.UnackedEvents())
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w, req, rsp := connect(t, testbed.ConnOpts{Channel: true})
			postRecvs(t, rsp, 16)
			c.run(t, w, req, rsp)
		})
	}
}

// TestChannelFdPolledByApp: an application that waits on the channel fd
// itself, poll(2) then a non-blocking read(2) of what woke it, and only
// then GetCQEvent / AckEvents, as an epoll loop does, for more events
// than the provider's pipe holds bytes (maxPipeBytes, 4096). The fd went
// quiet for good after 4096 events (the provider counted the bytes the
// application had read as still in the pipe), or GetCQEvent blocked for
// ever in read(2) (Fd had put the fd in blocking mode). Every wait is
// bounded.
func TestChannelFdPolledByApp(t *testing.T) {
	const (
		events  = 4096 + 64
		bounded = 5 * time.Second
	)
	w, req, rsp := connect(t, testbed.ConnOpts{Channel: true})
	fd := rsp.Channel.Fd()
	buf := make([]byte, 64)
	for i := 0; i < events; i++ {
		require.False(t, readable(t, fd), "event %d: no event pending", i)
		postRecvs(t, rsp, 1)
		require.NoError(t, rsp.RecvCQ.ReqNotify(false))
		sendMsg(t, req, uint64(i), false)
		w.Settle(0) // the device runs; no verb is called on the channel

		require.True(t, pollReadable(t, fd, bounded), "event %d: the fd did not become readable", i)
		n, err := syscall.Read(fd, buf)
		require.NoError(t, err, "event %d: the non-blocking read", i)
		require.Equal(t, 1, n, "event %d: one byte per event", i)

		type result struct {
			cq  *provider.CQ
			err error
		}
		got := make(chan result, 1)
		go func() {
			cq, err := rsp.Channel.GetCQEvent(evWait)
			got <- result{cq, err}
		}()
		var r result
		select {
		case r = <-got:
		case <-time.After(bounded):
			t.Fatalf("event %d: GetCQEvent did not return within %v", i, bounded)
		}
		require.NoError(t, r.err, "event %d", i)
		require.Same(t, rsp.RecvCQ, r.cq)
		r.cq.AckEvents(1)
		require.Zero(t, r.cq.UnackedEvents())
		drain(t, rsp.RecvCQ, 1)
		drain(t, req.SendCQ, 1)
	}
	require.False(t, readable(t, fd))
	noEvent(t, rsp.Channel)
}

// commEstSetup takes the responder back to RTR, so that its first packet
// establishes the connection.
func commEstSetup(t *testing.T, req, rsp *testbed.Endpoint) {
	require.NoError(t, rsp.QP.Modify(&provider.QPAttr{QPState: provider.QPStateReset}, mlx5.AttrState))
	pid := req.Host.Dev.Identity()
	require.NoError(t, rsp.QP.Modify(&provider.QPAttr{QPState: provider.QPStateInit, Port: 1, AccessFlags: provider.AccessLocalWrite | provider.AccessRemoteWrite},
		mlx5.AttrState|mlx5.AttrPKeyIndex|mlx5.AttrPort|mlx5.AttrAccessFlags))
	require.NoError(t, rsp.QP.Modify(&provider.QPAttr{QPState: provider.QPStateRTR, PathMTU: mlx5.MTU1024, DestQPN: req.QP.QPN(), RQPSN: 0x1000,
		MaxDestRdAtomic: 1, MinRNRTimer: 12, AV: provider.AV{DMAC: pid.MAC, DGID: pid.IP.As16(), HopLimit: 64, SGIDIndex: 1}},
		mlx5.AttrState|mlx5.AttrAV|mlx5.AttrPathMTU|mlx5.AttrDestQPN|mlx5.AttrRQPSN|mlx5.AttrMaxDestRdAtomic|mlx5.AttrMinRNRTimer))
}

func TestAsyncEvents(t *testing.T) {
	type want struct {
		host int
		typ  mlx5.EventType
		obj  func(req, rsp *testbed.Endpoint) any // *CQ, *QP, *SRQ or port number
	}
	cases := []struct {
		name string
		opts testbed.ConnOpts
		run  func(t *testing.T, w *testbed.World, req, rsp *testbed.Endpoint)
		want []want // in order; then no host has any further event
	}{
		{name: "CQ error by overrun, and QP fatal for the QP on it", opts: testbed.ConnOpts{CQDepth: 1},
			run: func(t *testing.T, w *testbed.World, req, rsp *testbed.Endpoint) {
				postRecvs(t, rsp, 4)
				for i := 0; i < 3; i++ { // a ring of two entries, never polled
					_, err := req.QP.PostSend([]provider.SendWR{{Opcode: provider.WRSend, SGL: []provider.SGE{req.MR.SGE(0, 8)}}})
					require.NoError(t, err)
					w.Settle(0)
				}
			},
			want: []want{{1, mlx5.EventCQErr, func(_, rsp *testbed.Endpoint) any { return rsp.RecvCQ }},
				{1, mlx5.EventQPFatal, func(_, rsp *testbed.Endpoint) any { return rsp.QP }}}},
		{name: "QP access error: WRITE with a bad rkey (the requester's error is in its CQE)",
			run: func(t *testing.T, w *testbed.World, req, rsp *testbed.Endpoint) {
				_, err := req.QP.PostSend([]provider.SendWR{{Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
					SGL: []provider.SGE{req.MR.SGE(0, 64)}, RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey + 1}})
				require.NoError(t, err)
				require.Equal(t, provider.WCRemAccessErr, waitOne(t, req.SendCQ).Status)
			},
			want: []want{{1, mlx5.EventQPAccessErr, func(_, rsp *testbed.Endpoint) any { return rsp.QP }}}},
		{name: "QP request error: READ without remote-read access", opts: testbed.ConnOpts{Access: provider.AccessLocalWrite | provider.AccessRemoteWrite},
			run: func(t *testing.T, w *testbed.World, req, rsp *testbed.Endpoint) {
				_, err := req.QP.PostSend([]provider.SendWR{{Opcode: provider.WRRDMARead, Flags: provider.SendSignaled,
					SGL: []provider.SGE{req.MR.SGE(0, 64)}, RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey}})
				require.NoError(t, err)
				require.Equal(t, provider.WCRemInvReqErr, waitOne(t, req.SendCQ).Status)
			},
			want: []want{{1, mlx5.EventQPReqErr, func(_, rsp *testbed.Endpoint) any { return rsp.QP }}}},
		{name: "communication established: the first packet on a QP in RTR",
			run: func(t *testing.T, w *testbed.World, req, rsp *testbed.Endpoint) {
				commEstSetup(t, req, rsp)
				for i := 0; i < 3; i++ {
					_, err := req.QP.PostSend([]provider.SendWR{{Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
						SGL: []provider.SGE{req.MR.SGE(0, 64)}, RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey}})
					require.NoError(t, err)
					require.Equal(t, provider.WCSuccess, waitOne(t, req.SendCQ).Status)
				}
			},
			want: []want{{1, mlx5.EventCommEst, func(_, rsp *testbed.Endpoint) any { return rsp.QP }}}},
		{name: "port error and port active: the cable pulled and plugged back",
			run: func(t *testing.T, w *testbed.World, req, rsp *testbed.Endpoint) {
				w.SetLink(false)
				w.Settle(0)
				w.SetLink(true)
			},
			want: []want{{0, mlx5.EventPortErr, func(_, _ *testbed.Endpoint) any { return 1 }}, {0, mlx5.EventPortActive, func(_, _ *testbed.Endpoint) any { return 1 }},
				{1, mlx5.EventPortErr, func(_, _ *testbed.Endpoint) any { return 1 }}, {1, mlx5.EventPortActive, func(_, _ *testbed.Endpoint) any { return 1 }}}},
		{name: "last WQE reached: a QP on an SRQ goes to ERR", opts: testbed.ConnOpts{SRQ: true},
			run: func(t *testing.T, w *testbed.World, req, rsp *testbed.Endpoint) {
				require.NoError(t, rsp.QP.Modify(&provider.QPAttr{QPState: provider.QPStateErr}, mlx5.AttrState))
			},
			want: []want{{1, mlx5.EventQPLastWQEReached, func(_, rsp *testbed.Endpoint) any { return rsp.QP }}}},
		{name: "SRQ limit reached", opts: testbed.ConnOpts{SRQ: true, RQDepth: 16},
			run: func(t *testing.T, w *testbed.World, req, rsp *testbed.Endpoint) {
				wrs := make([]provider.RecvWR, 8)
				for i := range wrs {
					wrs[i] = provider.RecvWR{WRID: uint64(i), SGL: []provider.SGE{rsp.MR.SGE(uint64(i)*256, 256)}}
				}
				_, err := rsp.SRQ.PostRecv(wrs)
				require.NoError(t, err)
				require.NoError(t, rsp.SRQ.Modify(provider.SRQAttr{SRQLimit: 4}, provider.SRQAttrLimit))
				for i := 0; i < 5; i++ {
					sendMsg(t, req, uint64(i), false)
				}
				drain(t, rsp.RecvCQ, 5)
			},
			want: []want{{1, mlx5.EventSRQLimitReached, func(_, rsp *testbed.Endpoint) any { return rsp.SRQ }}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w, req, rsp := connect(t, c.opts)
			eps := [2]*testbed.Endpoint{req, rsp}
			c.run(t, w, req, rsp)
			for _, wnt := range c.want {
				ctx := eps[wnt.host].Host.Ctx
				ev, err := ctx.GetAsyncEvent(evWait)
				require.NoError(t, err, "host %d, want %v", wnt.host, wnt.typ)
				require.Equal(t, wnt.typ, ev.Type, "host %d: %v", wnt.host, ev)
				switch o := wnt.obj(req, rsp).(type) {
				case *provider.CQ:
					require.Same(t, o, ev.CQ)
				case *provider.QP:
					require.Same(t, o, ev.QP)
				case *provider.SRQ:
					require.Same(t, o, ev.SRQ)
				case int:
					require.Equal(t, o, ev.Port)
				}
				require.Equal(t, 1, ctx.UnackedAsyncEvents())
				ctx.AckAsyncEvent(ev)
				require.Equal(t, 0, ctx.UnackedAsyncEvents())
			}
			for n := 0; n < 2; n++ {
				_, err := eps[n].Host.Ctx.GetAsyncEvent(0)
				require.ErrorIs(t, err, provider.ErrTimeout, "host %d has no further event", n)
			}
		})
	}
}

// TestEventTimeouts: waits end with a wrapped ErrTimeout, never block.
func TestEventTimeouts(t *testing.T) {
	t.Run("nothing pending, no wait", func(t *testing.T) {
		_, _, rsp := connect(t, testbed.ConnOpts{Channel: true})
		_, err := rsp.Channel.GetCQEvent(0)
		require.ErrorIs(t, err, provider.ErrTimeout)
		var oe *provider.OpError
		require.True(t, errors.As(err, &oe))
		require.Equal(t, "get_cq_event", oe.Op)
		_, err = rsp.Host.Ctx.GetAsyncEvent(0)
		require.ErrorIs(t, err, provider.ErrTimeout)
	})
	t.Run("idle device: the wait ends at once", func(t *testing.T) {
		w, _, rsp := connect(t, testbed.ConnOpts{Channel: true})
		require.NoError(t, rsp.RecvCQ.ReqNotify(false))
		now := w.Eng.Now()
		_, err := rsp.Channel.GetCQEvent(time.Hour)
		require.ErrorIs(t, err, provider.ErrTimeout)
		_, err = rsp.Host.Ctx.GetAsyncEvent(time.Hour)
		require.ErrorIs(t, err, provider.ErrTimeout)
		require.Less(t, w.Eng.Now().Sub(now), sim.Millisecond, "an idle simulation does not sit out the hour")
	})
	t.Run("busy device: the wait ends after the timeout in virtual time", func(t *testing.T) {
		w, req, rsp := connect(t, testbed.ConnOpts{Channel: true, Timeout: 10, RetryCnt: 7}) // ACK timer ≈ 4.2 ms
		w.SetLink(false)
		_, err := req.QP.PostSend([]provider.SendWR{{Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
			SGL: []provider.SGE{req.MR.SGE(0, 64)}, RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey}})
		require.NoError(t, err)
		require.NoError(t, req.SendCQ.ReqNotify(false))
		start := w.Eng.Now()
		_, err = req.Channel.GetCQEvent(100 * time.Microsecond)
		require.ErrorIs(t, err, provider.ErrTimeout)
		el := w.Eng.Now().Sub(start)
		require.GreaterOrEqual(t, el, 100*sim.Microsecond)
		require.Less(t, el, 10*sim.Millisecond, "at most one retry timer beyond the deadline")
		// The retries run out; the error CQE fires the arm.
		cq, err := req.Channel.GetCQEvent(time.Second)
		require.NoError(t, err)
		require.Same(t, req.SendCQ, cq)
		require.Equal(t, provider.WCRetryExcErr, waitOne(t, req.SendCQ).Status)
	})
}

func TestCQModeration(t *testing.T) {
	t.Run("count: the event waits for the third CQE", func(t *testing.T) {
		_, req, rsp := connect(t, testbed.ConnOpts{Channel: true})
		postRecvs(t, rsp, 8)
		require.NoError(t, rsp.RecvCQ.Modify(provider.CQModeration{Count: 3}))
		require.NoError(t, rsp.RecvCQ.ReqNotify(false))
		sendMsg(t, req, 1, false)
		sendMsg(t, req, 2, false)
		noEvent(t, rsp.Channel)
		sendMsg(t, req, 3, false)
		getEvent(t, rsp.Channel, rsp.RecvCQ)
	})
	t.Run("period: the event comes cq_period after the first CQE", func(t *testing.T) {
		w, req, rsp := connect(t, testbed.ConnOpts{Channel: true})
		postRecvs(t, rsp, 8)
		require.NoError(t, rsp.RecvCQ.Modify(provider.CQModeration{Count: 10, Period: 50}))
		require.NoError(t, rsp.RecvCQ.ReqNotify(false))
		sendMsg(t, req, 1, false)
		drain(t, rsp.RecvCQ, 1)
		landed := w.Eng.Now()
		getEvent(t, rsp.Channel, rsp.RecvCQ)
		el := w.Eng.Now().Sub(landed)
		require.GreaterOrEqual(t, el, 49*sim.Microsecond)
		require.Less(t, el, 55*sim.Microsecond)
		require.Equal(t, uint64(1), rsp.Host.Dev.Counters().Value(device.CtrCQModerationTimer))
	})
	t.Run("period over 12 bits is refused", func(t *testing.T) {
		_, _, rsp := connect(t, testbed.ConnOpts{})
		require.ErrorIs(t, rsp.RecvCQ.Modify(provider.CQModeration{Period: mlx5.MaxCQPeriod + 1}), provider.ErrInvalidArg)
	})
}

func TestResizeCQ(t *testing.T) {
	cases := []struct {
		name           string
		from, to       int // CQ depths
		before, polled int // CQEs written before the resize, and polled of them
		after          int // CQEs written after
		wantErr        error
	}{
		{name: "grow with CQEs not polled", from: 7, to: 100, before: 5, polled: 2, after: 20},
		{name: "shrink, the new ring wraps", from: 100, to: 7, before: 3, polled: 1, after: 30},
		{name: "shrink below the CQEs not polled", from: 100, to: 3, before: 6, polled: 1, wantErr: mlx5.StatusBadSize},
		{name: "same size: nothing happens", from: 15, to: 15, before: 2, after: 4},
		{name: "empty CQ", from: 7, to: 31, after: 12},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, req, rsp := connect(t, testbed.ConnOpts{CQDepth: c.from, RQDepth: 64, Channel: true})
			postRecvs(t, rsp, c.before)
			for i := 0; i < c.before; i++ {
				sendMsg(t, req, uint64(i), false)
			}
			drain(t, req.SendCQ, c.before) // the requester's CQ is as small
			var got []uint64
			for _, wc := range drain(t, rsp.RecvCQ, c.polled) {
				got = append(got, wc.WRID)
			}
			size := rsp.RecvCQ.Entries()
			err := rsp.RecvCQ.Resize(c.to)
			if c.wantErr != nil {
				require.ErrorIs(t, err, c.wantErr)
				require.Equal(t, size, rsp.RecvCQ.Entries())
				return
			}
			require.NoError(t, err)
			require.GreaterOrEqual(t, rsp.RecvCQ.Entries(), c.to)
			for _, wc := range drain(t, rsp.RecvCQ, c.before-c.polled) {
				require.Equal(t, provider.WCSuccess, wc.Status)
				got = append(got, wc.WRID)
			}
			// Later CQEs land in the new ring, lap after lap; an arm still works.
			require.NoError(t, rsp.RecvCQ.ReqNotify(false))
			for i := 0; i < c.after; i++ {
				postRecvs(t, rsp, 1)
				sendMsg(t, req, uint64(i), false)
				wc := waitOne(t, rsp.RecvCQ)
				require.Equal(t, provider.WCSuccess, wc.Status)
				got = append(got, wc.WRID)
				require.Equal(t, provider.WCSuccess, waitOne(t, req.SendCQ).Status)
				if i == 0 {
					getEvent(t, rsp.Channel, rsp.RecvCQ)
				}
			}
			want := make([]uint64, 0, c.before+c.after)
			for i := 0; i < c.before; i++ {
				want = append(want, uint64(100+i))
			}
			for i := 0; i < c.after; i++ {
				want = append(want, 100)
			}
			require.Equal(t, want, got, "every completion once, in order")
		})
	}
}

// TestChannelQueueBound: a channel's queue bound (EventSpec.QueueDepth)
// never takes a CQ's only unread event, or an armed CQ whose CQE landed
// would wait for ever; destroying a CQ takes its unread events (and their
// fd bytes) off the channel, as uverbs does.
func TestChannelQueueBound(t *testing.T) {
	cases := []struct {
		name string
		run  func(t *testing.T, w *testbed.World, req, rsp *testbed.Endpoint)
	}{
		{"two CQs on a channel of depth 1: both events", func(t *testing.T, w *testbed.World, req, rsp *testbed.Endpoint) {
			require.NoError(t, req.SendCQ.ReqNotify(false))
			require.NoError(t, req.RecvCQ.ReqNotify(false))
			sendMsg(t, req, 1, false) // req.SendCQ's event fills the queue
			w.Settle(0)
			sendMsg(t, rsp, 2, false) // then req.RecvCQ's
			w.Settle(0)
			got := map[*provider.CQ]int{}
			for i := 0; i < 2; i++ {
				cq, err := req.Channel.GetCQEvent(evWait)
				require.NoError(t, err, "event %d", i)
				got[cq]++
				cq.AckEvents(1)
			}
			require.Equal(t, map[*provider.CQ]int{req.SendCQ: 1, req.RecvCQ: 1}, got)
			require.Zero(t, req.Host.Dev.Counters().Value(device.CtrCompEventsDropped))
		}},
		{"a second unread event of one CQ beyond the depth is dropped", func(t *testing.T, w *testbed.World, req, rsp *testbed.Endpoint) {
			for i := 0; i < 2; i++ {
				require.NoError(t, rsp.RecvCQ.ReqNotify(false))
				sendMsg(t, req, uint64(i), false)
				w.Settle(0)
				drain(t, rsp.RecvCQ, 1)
			}
			require.Equal(t, uint64(1), rsp.Host.Dev.Counters().Value(device.CtrCompEventsDropped))
			getEvent(t, rsp.Channel, rsp.RecvCQ)
			noEvent(t, rsp.Channel)
		}},
		{"destroying a CQ takes its unread event off the channel", func(t *testing.T, w *testbed.World, req, rsp *testbed.Endpoint) {
			require.NoError(t, rsp.RecvCQ.ReqNotify(false))
			sendMsg(t, req, 1, false)
			w.Settle(0)
			require.True(t, readable(t, rsp.Channel.Fd()))
			require.Equal(t, 1, rsp.Host.Dev.PendingEvents(1))
			require.NoError(t, rsp.QP.Destroy())
			require.NoError(t, rsp.RecvCQ.Destroy())
			require.Zero(t, rsp.Host.Dev.PendingEvents(1))
			require.False(t, readable(t, rsp.Channel.Fd()), "no byte left for an event that is gone")
			noEvent(t, rsp.Channel)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := testbed.DefaultConfig()
			cfg.Device.Events.QueueDepth = 1
			w, err := testbed.New(cfg)
			require.NoError(t, err)
			t.Cleanup(w.Close)
			eps, err := w.ConnectRC(testbed.ConnOpts{Channel: true})
			require.NoError(t, err)
			postRecvs(t, eps[0], 4)
			postRecvs(t, eps[1], 4)
			c.run(t, w, eps[0], eps[1])
		})
	}
}

// TestCQModerationModify: a MODIFY_CQ while completions wait for the
// cq_period timer applies the new period: a shorter one is not sat out
// at the old length.
func TestCQModerationModify(t *testing.T) {
	cases := []struct {
		name     string
		from, to uint16 // cq_period before and after, µs
		wantMax  sim.Duration
		wantMin  sim.Duration
	}{
		{"shorter period", 4000, 20, 25 * sim.Microsecond, 19 * sim.Microsecond},
		{"period switched off, count still pending", 4000, 0, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w, req, rsp := connect(t, testbed.ConnOpts{Channel: true})
			postRecvs(t, rsp, 8)
			require.NoError(t, rsp.RecvCQ.Modify(provider.CQModeration{Count: 10, Period: c.from}))
			require.NoError(t, rsp.RecvCQ.ReqNotify(false))
			sendMsg(t, req, 1, false)
			drain(t, rsp.RecvCQ, 1)
			at := w.Eng.Now()
			require.NoError(t, rsp.RecvCQ.Modify(provider.CQModeration{Count: 10, Period: c.to}))
			if c.to == 0 {
				noEvent(t, rsp.Channel) // only the count is left: it waits for 10
				return
			}
			getEvent(t, rsp.Channel, rsp.RecvCQ)
			el := w.Eng.Now().Sub(at)
			require.GreaterOrEqual(t, el, c.wantMin)
			require.Less(t, el, c.wantMax)
		})
	}
}

// TestEventBehindDelayedCQE: a completion event never overtakes the CQE
// that raised it. A CQE that lands late (fault point cq, delay) holds its
// EQE behind it, as a posted write holds the posted writes after it; the
// event used to come ~40 µs before there was anything to poll.
func TestEventBehindDelayedCQE(t *testing.T) {
	cases := []struct {
		name    string
		armLate bool // arm after the CQE was written (fires at once)
	}{
		{"armed before the CQE", false},
		{"armed while the CQE is in flight", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := fault.Parse([]byte(`{"rules":[{"point":"cq","action":"delay","delay_ps":40000000,"nth":1,"match":{"node":0}}]}`))
			require.NoError(t, err)
			cfg := testbed.DefaultConfig()
			cfg.Faults = p
			w, err := testbed.New(cfg)
			require.NoError(t, err)
			t.Cleanup(w.Close)
			eps, err := w.ConnectRC(testbed.ConnOpts{Channel: true})
			require.NoError(t, err)
			req, rsp := eps[0], eps[1]
			start := w.Eng.Now()
			if !c.armLate {
				require.NoError(t, req.SendCQ.ReqNotify(false))
			}
			writeWR(t, req, rsp, 1, 0, 64)
			if c.armLate {
				for req.Host.Dev.Counters().Value(device.CtrCQEs) == 0 && w.Eng.Step() {
				}
				require.NoError(t, req.SendCQ.ReqNotify(false))
			}
			getEvent(t, req.Channel, req.SendCQ)
			require.Greater(t, w.Eng.Now()-start, sim.Time(40*sim.Microsecond), "event before its CQE landed")
		})
	}
}

// TestAsyncEventsOfDestroyedObjects: destroying a QP takes its unread
// asynchronous events off the async queue (and their bytes off the fd), as
// uverbs' ib_uverbs_release_uevent does; they used to hold places of the
// bounded queue, so a later event of a live object was dropped.
func TestAsyncEventsOfDestroyedObjects(t *testing.T) {
	cases := []struct {
		name     string
		depth    int
		inFlight bool // destroy while the COMM_EST EQE is on its way
	}{
		{"queue of depth 1", 1, false},
		{"default depth", 0, false},
		{"EQE in flight at the destroy", 1, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := testbed.DefaultConfig()
			cfg.Device.Events.QueueDepth = c.depth
			w, err := testbed.New(cfg)
			require.NoError(t, err)
			t.Cleanup(w.Close)
			eps, err := w.ConnectRC(testbed.ConnOpts{})
			require.NoError(t, err)
			req, rsp := eps[0], eps[1]
			ctx := rsp.Host.Ctx
			fd, err := ctx.AsyncFd()
			require.NoError(t, err)
			commEstSetup(t, req, rsp)
			_, err = req.QP.PostSend([]provider.SendWR{{Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
				SGL: []provider.SGE{req.MR.SGE(0, 64)}, RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey}})
			require.NoError(t, err)
			if c.inFlight {
				for rsp.Host.Dev.Counters().Value(device.CtrEQEs) == 0 && w.Eng.Step() {
				}
				require.Zero(t, rsp.Host.Dev.PendingEvents(0))
				require.NoError(t, rsp.QP.Destroy())
				w.Settle(0)
			} else {
				require.Equal(t, provider.WCSuccess, waitOne(t, req.SendCQ).Status)
				w.Settle(0)
				require.Equal(t, 1, rsp.Host.Dev.PendingEvents(0), "COMM_EST of the responder's QP")
				require.NoError(t, rsp.QP.Destroy())
			}
			require.Zero(t, rsp.Host.Dev.PendingEvents(0))
			require.False(t, readable(t, fd))
			w.SetLink(false)
			w.Settle(0)
			ev, err := ctx.GetAsyncEvent(evWait)
			require.NoError(t, err)
			require.Equal(t, mlx5.EventPortErr, ev.Type)
			ctx.AckAsyncEvent(ev)
		})
	}
}

// TestCQModerationRearm: an arm starts moderation afresh. A cq_period
// timer the previous arm started for CQEs the application has since
// polled used to run on, so the next CQE's event came early (5 µs after
// it instead of the 50 µs period).
func TestCQModerationRearm(t *testing.T) {
	cases := []struct {
		name       string
		pollFirst  bool // poll the first CQE before the re-arm
		wantMinGap sim.Duration
	}{
		{"first CQE polled: the period counts from the second", true, 49 * sim.Microsecond},
		{"first CQE still pending: it keeps its deadline", false, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w, req, rsp := connect(t, testbed.ConnOpts{Channel: true})
			postRecvs(t, rsp, 8)
			require.NoError(t, rsp.RecvCQ.Modify(provider.CQModeration{Count: 10, Period: 50}))
			require.NoError(t, rsp.RecvCQ.ReqNotify(false))
			sendMsg(t, req, 1, false)
			for rsp.Host.Dev.Counters().Value(device.CtrCQEs) == 0 && w.Eng.Step() {
			}
			first := w.Eng.Now()
			if c.pollFirst {
				drain(t, rsp.RecvCQ, 1)
			}
			w.Eng.RunUntil(first.Add(40 * sim.Microsecond))
			require.NoError(t, rsp.RecvCQ.ReqNotify(false))
			sendMsg(t, req, 2, false)
			for rsp.Host.Dev.Counters().Value(device.CtrCQEs) < 2 && w.Eng.Step() {
			}
			second := w.Eng.Now()
			getEvent(t, rsp.Channel, rsp.RecvCQ)
			require.GreaterOrEqual(t, w.Eng.Now().Sub(second), c.wantMinGap)
			require.Less(t, w.Eng.Now().Sub(first), 55*sim.Microsecond+c.wantMinGap)
		})
	}
}

// TestEventAfterDeviceFatal: the driver's software flush after a device
// fatal error notifies the armed CQs it completed into
// (mlx5_ib_handle_internal_error calls each one's completion handler);
// a thread blocked in GetCQEvent used to learn nothing of the flush.
func TestEventAfterDeviceFatal(t *testing.T) {
	cases := []struct {
		name      string
		solicited bool
	}{
		{"next-completion arm", false},
		{"solicited-only arm: a flush is an error CQE", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := fault.Parse([]byte(`{"rules":[{"point":"device","action":"fatal","at_ps":1000000000,"value":1,"match":{"node":0}}]}`))
			require.NoError(t, err)
			cfg := testbed.DefaultConfig()
			cfg.Faults = p
			cfg.Device.Faults.HealthPoll = 50 * sim.Microsecond
			w, err := testbed.New(cfg)
			require.NoError(t, err)
			t.Cleanup(w.Close)
			eps, err := w.ConnectRC(testbed.ConnOpts{Channel: true, Timeout: 20, RetryCnt: 7})
			require.NoError(t, err)
			req, rsp := eps[0], eps[1]
			w.Hosts[1].Dev.SetLinkState(false) // the WRITE waits for its ACK
			writeWR(t, req, rsp, 1, 0, 64)
			require.NoError(t, req.SendCQ.ReqNotify(c.solicited))
			cq, err := req.Channel.GetCQEvent(10 * time.Millisecond)
			require.NoError(t, err)
			require.Same(t, req.SendCQ, cq)
			cq.AckEvents(1)
			require.Equal(t, provider.WCWRFlushErr, waitOne(t, req.SendCQ).Status)
		})
	}
}
