package serve_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/serve"
)

// TestCloseAfterDaemonDied: a context whose daemon died fails Close (no
// destroy command gets an answer) and unmaps its memory; the QP, SRQ, CQ
// and completion channel whose destroys failed are then dead, refused
// with ErrClosed. Before the fix they stayed live over unmapped rings:
// CQ.Ready, CQ.ReqNotify and SRQ.PostRecv (which do not ask the link
// first) died of SIGSEGV; and the channel kept its pipe open for ever.
func TestCloseAfterDaemonDied(t *testing.T) {
	d, sock := startDaemonCfg(t, serve.Config{Devices: 1})
	ctx, err := provider.Dial("softnic0", provider.DialOptions{Socket: sock})
	require.NoError(t, err)
	pd, err := ctx.AllocPD()
	require.NoError(t, err)
	ch, err := ctx.CreateCompChannel()
	require.NoError(t, err)
	pipe := fmt.Sprintf("/proc/self/fd/%d", ch.Fd())
	pipeWas, err := os.Readlink(pipe)
	require.NoError(t, err)
	cq, err := ctx.CreateCQEx(provider.CQInitAttr{Entries: 16, Channel: ch})
	require.NoError(t, err)
	srq, err := pd.CreateSRQ(provider.SRQInitAttr{MaxWR: 8, MaxSGE: 1})
	require.NoError(t, err)
	qp, err := ctx.CreateQP(pd, provider.QPInitAttr{Type: provider.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: provider.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	buf, err := ctx.AllocBuffer(4096, 64)
	require.NoError(t, err)
	mr, err := pd.RegMR(buf.Addr, 4096, provider.AccessLocalWrite)
	require.NoError(t, err)
	require.NoError(t, d.Close())
	require.ErrorIs(t, ctx.Close(), provider.ErrDeviceGone)

	recv := []provider.RecvWR{{SGL: []provider.SGE{mr.SGE(0, 8)}}}
	for _, c := range []struct {
		name string
		verb func() error
	}{
		{"poll_cq", func() error { _, err := cq.Poll(make([]provider.WC, 1)); return err }},
		{"req_notify_cq", func() error { return cq.ReqNotify(false) }},
		{"resize_cq", func() error { return cq.Resize(64) }},
		{"destroy_cq", cq.Destroy},
		{"post_recv", func() error { _, err := qp.PostRecv(recv); return err }},
		{"post_send", func() error {
			_, err := qp.PostSend([]provider.SendWR{{Opcode: provider.WRSend, SGL: recv[0].SGL}})
			return err
		}},
		{"wqe", func() error { _, err := qp.WQE(0); return err }},
		{"destroy_qp", qp.Destroy},
		{"post_srq_recv", func() error { _, err := srq.PostRecv(recv); return err }},
		{"destroy_srq", srq.Destroy},
		{"get_cq_event", func() error { _, err := ch.GetCQEvent(time.Millisecond); return err }},
		{"destroy_comp_channel", ch.Destroy},
	} {
		t.Run(c.name, func(t *testing.T) {
			require.ErrorIs(t, c.verb(), provider.ErrClosed)
		})
	}
	require.False(t, cq.Ready())
	require.Nil(t, cq.CQE(0))
	require.Equal(t, -1, ch.Fd())
	if now, err := os.Readlink(pipe); err == nil {
		require.NotEqual(t, pipeWas, now, "the channel's pipe is closed")
	}
}
