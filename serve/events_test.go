package serve_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/testbed"
)

// TestEventsThroughDaemon: completion channels and asynchronous events of
// dialled contexts. A solicited SEND raises one completion event on the
// receiver's channel; a WRITE with a bad rkey raises QP_ACCESS_ERR on the
// responder's async queue; with nothing queued both waits end in
// ErrTimeout. The events reach the client as step replies announce them
// (a read of a channel nobody notified is answered without a round trip).
func TestEventsThroughDaemon(t *testing.T) {
	_, sock, _ := startDaemon(t, 2, nil)
	co := allOps
	co.Channel = true
	eps, closeAll, err := dialPair(provider.DialOptions{Socket: sock}, co)
	require.NoError(t, err)
	defer closeAll()
	req, rsp := eps[0], eps[1]

	_, err = rsp.Channel.GetCQEvent(10 * time.Millisecond)
	require.ErrorIs(t, err, provider.ErrTimeout, "nothing armed, nothing queued")

	_, err = rsp.QP.PostRecv([]provider.RecvWR{{WRID: 5, SGL: []provider.SGE{rsp.MR.SGE(0, 64)}}})
	require.NoError(t, err)
	require.NoError(t, rsp.RecvCQ.ReqNotify(false))
	copy(req.Buf.Bytes, "event")
	_, err = req.QP.PostSend([]provider.SendWR{{WRID: 6, Opcode: provider.WRSend, Flags: provider.SendSignaled | provider.SendSolicited,
		SGL: []provider.SGE{req.MR.SGE(0, 5)}}})
	require.NoError(t, err)
	cq, err := rsp.Channel.GetCQEvent(time.Second)
	require.NoError(t, err)
	require.Same(t, rsp.RecvCQ, cq)
	cq.AckEvents(1)
	wcs, err := testbed.Wait(rsp.RecvCQ, 1)
	require.NoError(t, err)
	require.Equal(t, uint64(5), wcs[0].WRID)
	require.Equal(t, "event", string(rsp.Buf.Bytes[:5]))
	_, err = rsp.Channel.GetCQEvent(10 * time.Millisecond)
	require.ErrorIs(t, err, provider.ErrTimeout, "one arm, one event")

	_, err = req.QP.PostSend([]provider.SendWR{{WRID: 7, Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
		SGL: []provider.SGE{req.MR.SGE(0, 64)}, RemoteAddr: rsp.Buf.Addr, RKey: rsp.MR.RKey ^ 0x5a5a00}})
	require.NoError(t, err)
	wcs, err = testbed.Wait(req.SendCQ, 2) // the SEND's, then the WRITE's
	require.NoError(t, err)
	require.Equal(t, provider.WCSuccess, wcs[0].Status)
	require.Equal(t, provider.WCRemAccessErr, wcs[1].Status)
	ev, err := rsp.Host.Ctx.GetAsyncEvent(time.Second)
	require.NoError(t, err)
	require.Equal(t, mlx5.EventQPAccessErr, ev.Type, "%v", ev)
	require.Same(t, rsp.QP, ev.QP)
	rsp.Host.Ctx.AckAsyncEvent(ev)
	_, err = rsp.Host.Ctx.GetAsyncEvent(10 * time.Millisecond)
	require.ErrorIs(t, err, provider.ErrTimeout)
}
