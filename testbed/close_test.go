package testbed_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/testbed"
)

// TestCloseClosesContexts: World.Close closes the hosts' provider
// contexts before it unmaps their memory, so that every verb on an object
// left open fails with ErrClosed. Before the fix the memory went away
// under the live contexts: the next Poll, PostRecv or ReqNotify read or
// wrote a ring in unmapped memory and the process died of SIGSEGV (a
// fatal fault, not a recoverable panic).
func TestCloseClosesContexts(t *testing.T) {
	w, err := testbed.New(testbed.DefaultConfig())
	require.NoError(t, err)
	eps, err := w.ConnectRC(testbed.ConnOpts{SRQ: true, Channel: true})
	require.NoError(t, err)
	req, rsp := eps[0], eps[1]
	w.Close()
	sge := []provider.SGE{req.MR.SGE(0, 64)}
	cases := []struct {
		name string
		verb func() error
	}{
		{"poll_cq", func() error { _, err := req.SendCQ.Poll(make([]provider.WC, 1)); return err }},
		{"req_notify_cq", func() error { return rsp.RecvCQ.ReqNotify(false) }},
		{"resize_cq", func() error { return req.RecvCQ.Resize(512) }},
		{"post_send", func() error {
			_, err := req.QP.PostSend([]provider.SendWR{{Opcode: provider.WRSend, SGL: sge}})
			return err
		}},
		{"post_srq_recv", func() error { _, err := rsp.SRQ.PostRecv([]provider.RecvWR{{SGL: sge}}); return err }},
		{"modify_qp", func() error { return req.QP.Modify(&provider.QPAttr{QPState: provider.QPStateErr}, 1) }},
		{"get_cq_event", func() error { _, err := req.Channel.GetCQEvent(time.Millisecond); return err }},
		{"dereg_mr", func() error { return rsp.MR.Dereg() }},
		{"alloc_pd", func() error { _, err := req.Host.Ctx.AllocPD(); return err }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.ErrorIs(t, c.verb(), provider.ErrClosed)
		})
	}
	require.False(t, req.SendCQ.Ready())
	w.Close() // a second Close does nothing
}
