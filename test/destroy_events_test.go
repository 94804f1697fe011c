package test

import (
	"testing"

	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/testbed"
	"github.com/stretchr/testify/require"
)

// TestDestroyUnackedAsyncEvents: ibv_destroy_qp, ibv_destroy_srq and
// ibv_destroy_cq wait until every asynchronous event reported for the
// object is acknowledged. The provider's Destroy refuses with ErrBusy
// instead (the wait is the caller's), leaving the object usable; once
// AckAsyncEvent acknowledged its events, Destroy succeeds. Events of
// other objects do not hold it.
func TestDestroyUnackedAsyncEvents(t *testing.T) {
	type target struct {
		mine    func(ev provider.AsyncEvent) bool // the event is about the object
		first   func(t *testing.T)                // destroys what holds the object (its QP)
		destroy func() error
		usable  func(t *testing.T)
	}
	cases := []struct {
		name string
		opts testbed.ConnOpts
		run  func(t *testing.T, w *testbed.World, req, rsp *testbed.Endpoint)
		obj  func(rsp *testbed.Endpoint) target
	}{
		{name: "qp_access_err", // a WRITE with a bad rkey
			run: func(t *testing.T, w *testbed.World, req, rsp *testbed.Endpoint) {
				_, err := req.QP.PostSend([]provider.SendWR{{Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
					SGL: []provider.SGE{req.MR.SGE(0, 64)}, RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey + 1}})
				require.NoError(t, err)
				require.Equal(t, provider.WCRemAccessErr, waitOne(t, req.SendCQ).Status)
			},
			obj: func(rsp *testbed.Endpoint) target {
				return target{
					mine:    func(ev provider.AsyncEvent) bool { return ev.QP == rsp.QP },
					first:   func(t *testing.T) {},
					destroy: rsp.QP.Destroy,
					usable: func(t *testing.T) {
						a, _, err := rsp.QP.Query()
						require.NoError(t, err)
						require.Equal(t, provider.QPStateErr, a.QPState)
					},
				}
			}},
		{name: "srq_limit_reached", opts: testbed.ConnOpts{SRQ: true, RQDepth: 16},
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
			obj: func(rsp *testbed.Endpoint) target {
				return target{
					mine:    func(ev provider.AsyncEvent) bool { return ev.SRQ == rsp.SRQ },
					first:   func(t *testing.T) { require.NoError(t, rsp.QP.Destroy()) },
					destroy: rsp.SRQ.Destroy,
					usable: func(t *testing.T) {
						_, err := rsp.SRQ.PostRecv([]provider.RecvWR{{WRID: 9, SGL: []provider.SGE{rsp.MR.SGE(0, 256)}}})
						require.NoError(t, err)
					},
				}
			}},
		{name: "cq_err_overrun", opts: testbed.ConnOpts{CQDepth: 1},
			run: func(t *testing.T, w *testbed.World, req, rsp *testbed.Endpoint) {
				postRecvs(t, rsp, 4)
				for i := 0; i < 3; i++ { // a ring of two entries, never polled
					_, err := req.QP.PostSend([]provider.SendWR{{Opcode: provider.WRSend, SGL: []provider.SGE{req.MR.SGE(0, 8)}}})
					require.NoError(t, err)
					w.Settle(0)
				}
			},
			obj: func(rsp *testbed.Endpoint) target {
				return target{
					mine:    func(ev provider.AsyncEvent) bool { return ev.CQ == rsp.RecvCQ },
					first:   func(t *testing.T) { require.NoError(t, rsp.QP.Destroy()) },
					destroy: rsp.RecvCQ.Destroy,
					usable: func(t *testing.T) {
						_, err := rsp.RecvCQ.Poll(make([]provider.WC, 4))
						require.NotErrorIs(t, err, provider.ErrClosed)
					},
				}
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w, req, rsp := connect(t, c.opts)
			c.run(t, w, req, rsp)
			ctx := rsp.Host.Ctx
			obj := c.obj(rsp)
			var mine []provider.AsyncEvent
			for {
				ev, err := ctx.GetAsyncEvent(evWait)
				if err != nil {
					require.ErrorIs(t, err, provider.ErrTimeout)
					break
				}
				if obj.mine(ev) {
					mine = append(mine, ev)
				} else {
					ctx.AckAsyncEvent(ev) // another object's: it must not hold this one
				}
			}
			require.NotEmpty(t, mine, "the run raised an event on the object")
			obj.first(t)
			for i, ev := range mine {
				err := obj.destroy()
				require.ErrorIs(t, err, provider.ErrBusy, "%d of %d events unacknowledged", len(mine)-i, len(mine))
				require.ErrorContains(t, err, "AckAsyncEvent")
				obj.usable(t)
				ctx.AckAsyncEvent(ev)
			}
			require.Zero(t, ctx.UnackedAsyncEvents())
			require.NoError(t, obj.destroy())
			require.ErrorIs(t, obj.destroy(), provider.ErrClosed)
		})
	}
}

// TestCloseUnackedAsyncEvents: closing the context releases a QP whose
// asynchronous event was never acknowledged, as a process exit does.
func TestCloseUnackedAsyncEvents(t *testing.T) {
	_, req, rsp := connect(t, testbed.ConnOpts{})
	_, err := req.QP.PostSend([]provider.SendWR{{Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
		SGL: []provider.SGE{req.MR.SGE(0, 64)}, RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey + 1}})
	require.NoError(t, err)
	require.Equal(t, provider.WCRemAccessErr, waitOne(t, req.SendCQ).Status)
	ev, err := rsp.Host.Ctx.GetAsyncEvent(evWait)
	require.NoError(t, err)
	require.Same(t, rsp.QP, ev.QP)
	require.ErrorIs(t, rsp.QP.Destroy(), provider.ErrBusy)
	require.NoError(t, rsp.Host.Ctx.Close())
	require.ErrorIs(t, rsp.QP.Destroy(), provider.ErrClosed)
}
