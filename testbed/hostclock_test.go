package testbed_test

import (
	"testing"
	"time"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/testbed"
	"github.com/stretchr/testify/require"
)

// TestHostClocks: with Config.HostClocks a host's CPU work does not hold
// the other host up. Host 1 waits on an empty receive CQ; host 0 sends it
// a message and then keeps its CPU busy for 18 µs. The receive CQE lands
// on host 1 long before that: host 1 wakes at the landing, the engine
// runs no further while host 0 works on (it waits for host 1, which could
// act there), and host 1's poll takes the completion at its own time, not
// at the end of host 0's burst. On the engine's clock (the default) there
// is one CPU time: host 1 only sees the completion at the burst's end.
func TestHostClocks(t *testing.T) {
	const burst = 1000 // host-0 WQE builds of 18 ns (15 + 3 per WQEBB)
	for _, c := range []struct {
		name   string
		clocks bool
	}{
		{"host_clocks", true},
		{"one_clock", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := testbed.DefaultConfig()
			cfg.Host.WQEBuild, cfg.Host.PerWQEBB = sim.NS(15), sim.NS(3)
			cfg.HostClocks = c.clocks
			w, err := testbed.New(cfg)
			require.NoError(t, err)
			t.Cleanup(w.Close)
			eps, err := w.ConnectRC(testbed.ConnOpts{})
			require.NoError(t, err)
			req, rsp := eps[0], eps[1]
			w.Settle(0)
			_, err = rsp.QP.PostRecv([]provider.RecvWR{{WRID: 1, SGL: []provider.SGE{rsp.MR.SGE(0, 64)}}})
			require.NoError(t, err)
			wcs := make([]provider.WC, 1)
			n, err := rsp.RecvCQ.Poll(wcs)
			require.NoError(t, err)
			require.Zero(t, n, "nothing sent yet: host 1 waits")
			_, err = req.QP.PostSend([]provider.SendWR{{WRID: 2, Opcode: provider.WRSend, SGL: []provider.SGE{req.MR.SGE(0, 64)}}})
			require.NoError(t, err)
			start := w.HostNow(0)
			for range burst {
				w.Hosts[0].CPU.Work("wqe_build", 0, 64)
			}
			end := w.HostNow(0)
			require.Equal(t, start.Add(burst*sim.NS(18)), end, "host 0's clock moves with its work")
			require.True(t, rsp.RecvCQ.Ready(), "the receive completed during host 0's burst")
			n, err = rsp.RecvCQ.Poll(wcs)
			require.NoError(t, err)
			require.Equal(t, 1, n)
			seen := w.HostNow(1)
			if !c.clocks {
				require.Equal(t, end.Add(cfg.Host.PollCQE), seen, "one CPU time: seen after the burst")
				return
			}
			t.Logf("landed and seen %v after the send; host 0 busy for %v", seen.Sub(start), end.Sub(start))
			require.Less(t, seen.Sub(start), sim.Microsecond*5, "seen soon after it landed, not after the burst (%v)", end.Sub(start))
			require.Less(t, w.Eng.Now(), end, "the engine waited for host 1")
			// Host 1 now waits again: the engine catches up with host 0.
			n, err = rsp.RecvCQ.Poll(wcs)
			require.NoError(t, err)
			require.Zero(t, n)
			w.Hosts[0].CPU.Work("poll", 0, 64)
			require.Equal(t, w.Eng.Now(), w.HostNow(0), "no host holds the engine back but the one working")
		})
	}
}

// TestHostClocksBlockingWait: with host clocks, a host blocked in a
// provider wait (GetCQEvent, GetAsyncEvent) lets the engine run past the
// clock of a host whose last act was work: in this one-thread program
// that host cannot act until the wait returns. Host 0 posts a WQE (its
// clock runs ahead of the engine by the post's CPU cost), then host 1
// blocks for the event it causes: the receive's completion event (a
// SEND), or QP_ACCESS_ERR (a WRITE with a bad rkey). The wait must end
// with the event, and with ErrTimeout only when the world is idle (host 0
// posts nothing).
func TestHostClocksBlockingWait(t *testing.T) {
	type wait int
	const (
		cqEvent wait = iota
		asyncEvent
	)
	for _, c := range []struct {
		name   string
		clocks bool
		wait   wait
		post   bool // host 0 posts; otherwise nothing will ever happen
		want   error
	}{
		{"host_clocks_cq_event", true, cqEvent, true, nil},
		{"one_clock_cq_event", false, cqEvent, true, nil},
		{"host_clocks_cq_idle", true, cqEvent, false, provider.ErrTimeout},
		{"one_clock_cq_idle", false, cqEvent, false, provider.ErrTimeout},
		{"host_clocks_async_event", true, asyncEvent, true, nil},
		{"one_clock_async_event", false, asyncEvent, true, nil},
		{"host_clocks_async_idle", true, asyncEvent, false, provider.ErrTimeout},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := testbed.DefaultConfig()
			cfg.HostClocks = c.clocks
			w, err := testbed.New(cfg)
			require.NoError(t, err)
			t.Cleanup(w.Close)
			eps, err := w.ConnectRC(testbed.ConnOpts{Channel: true})
			require.NoError(t, err)
			req, rsp := eps[0], eps[1]
			w.Settle(0)
			if c.wait == asyncEvent {
				// Port and other events of the setup are not the awaited one.
				for {
					if _, err := rsp.Host.Ctx.GetAsyncEvent(0); err != nil {
						break
					}
				}
			}
			_, err = rsp.QP.PostRecv([]provider.RecvWR{{WRID: 1, SGL: []provider.SGE{rsp.MR.SGE(0, 64)}}})
			require.NoError(t, err)
			require.NoError(t, rsp.RecvCQ.ReqNotify(false))
			if c.post {
				wr := provider.SendWR{WRID: 2, Opcode: provider.WRSend, SGL: []provider.SGE{req.MR.SGE(0, 64)}}
				if c.wait == asyncEvent {
					wr.Opcode, wr.RemoteAddr, wr.RKey = provider.WRRDMAWrite, rsp.MR.Addr, rsp.MR.RKey+1
				}
				_, err = req.QP.PostSend([]provider.SendWR{wr})
				require.NoError(t, err)
				if c.clocks {
					require.Greater(t, w.HostNow(0), w.Eng.Now(), "host 0 worked ahead of the engine")
				}
			}
			if c.wait == asyncEvent {
				ev, err := rsp.Host.Ctx.GetAsyncEvent(time.Second)
				if c.want != nil {
					require.ErrorIs(t, err, c.want)
					return
				}
				require.NoError(t, err)
				require.Equal(t, mlx5.EventQPAccessErr, ev.Type, "%v", ev)
				rsp.Host.Ctx.AckAsyncEvent(ev)
				return
			}
			cq, err := rsp.Channel.GetCQEvent(time.Second)
			if c.want != nil {
				require.ErrorIs(t, err, c.want)
				return
			}
			require.NoError(t, err)
			require.Same(t, rsp.RecvCQ, cq)
			cq.AckEvents(1)
			wcs := make([]provider.WC, 1)
			n, err := rsp.RecvCQ.Poll(wcs)
			require.NoError(t, err)
			require.Equal(t, 1, n)
			require.Equal(t, uint64(1), wcs[0].WRID)
		})
	}
}
