package test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/testbed"
	"github.com/softnic/softnic/trace"
)

// TestEveryStageIsExplained: each stage name the model records on the
// walks `softnic trace` shows (RC WRITE, SEND, READ and atomics, BlueFlame
// and doorbell, a completion event, UD over an SRQ) has its entry in
// trace.Stages, the table behind --explain and the HTML view. dma_read
// and dma_write are the DMA engine's own records, which the walk leaves
// out (cmd/softnic/trace.go).
func TestEveryStageIsExplained(t *testing.T) {
	seen := map[string]string{}
	collect := func(w *testbed.World) {
		for _, e := range w.Rec.Events() {
			if e.Level == trace.Info && !(e.Component == "dma" && (e.Name == "dma_read" || e.Name == "dma_write")) {
				seen[e.Name] = e.Component
			}
		}
	}
	world := func(o testbed.ConnOpts) (*testbed.World, *testbed.Endpoint, *testbed.Endpoint) {
		cfg := testbed.DefaultConfig()
		cfg.Trace = true
		w, err := testbed.New(cfg)
		require.NoError(t, err)
		t.Cleanup(w.Close)
		eps, err := w.ConnectRC(o)
		require.NoError(t, err)
		return w, eps[0], eps[1]
	}

	all := provider.AccessLocalWrite | provider.AccessRemoteWrite | provider.AccessRemoteRead | provider.AccessRemoteAtomic
	w, req, rsp := world(testbed.ConnOpts{Channel: true, Access: all})
	require.NoError(t, req.SendCQ.ReqNotify(false))
	_, err := rsp.QP.PostRecv([]provider.RecvWR{{WRID: 1, SGL: []provider.SGE{rsp.MR.SGE(0, 64)}}})
	require.NoError(t, err)
	for i, op := range []provider.WROpcode{provider.WRRDMAWrite, provider.WRSend, provider.WRRDMARead,
		provider.WRAtomicFetchAdd, provider.WRAtomicCmpSwp, provider.WRRDMAWrite} {
		if i == 5 {
			req.QP.SetBlueFlame(false)
		}
		sge := req.MR.SGE(0, 64)
		if op == provider.WRAtomicFetchAdd || op == provider.WRAtomicCmpSwp {
			sge = req.MR.SGE(0, 8)
		}
		_, err := req.QP.PostSend([]provider.SendWR{{WRID: uint64(i), Opcode: op, Flags: provider.SendSignaled,
			SGL: []provider.SGE{sge}, RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey}})
		require.NoError(t, err)
		require.Equal(t, provider.WCSuccess, waitOne(t, req.SendCQ).Status, "%v", op)
	}
	cq, err := req.Channel.GetCQEvent(time.Second)
	require.NoError(t, err)
	cq.AckEvents(1)
	collect(w)

	w, req, rsp = world(testbed.ConnOpts{Type: provider.QPTypeUD, SRQ: true})
	_, err = rsp.SRQ.PostRecv([]provider.RecvWR{{WRID: 1, SGL: []provider.SGE{rsp.MR.SGE(0, 1024)}}})
	require.NoError(t, err)
	_, err = req.QP.PostSend([]provider.SendWR{{WRID: 2, Opcode: provider.WRSend, Flags: provider.SendSignaled,
		SGL: []provider.SGE{req.MR.SGE(0, 64)}, AH: req.AH, RemoteQPN: rsp.QP.QPN(), RemoteQKey: rsp.QKey}})
	require.NoError(t, err)
	require.Equal(t, provider.WCSuccess, waitOne(t, req.SendCQ).Status)
	require.Equal(t, provider.WCSuccess, waitOne(t, rsp.RecvCQ).Status)
	collect(w)

	for _, n := range []string{"wqe_build", "bf_mmio", "doorbell_mmio", "wqe_fetch", "packetize", "wire", "cqe_write", "poll",
		"get_cq_event", "srq_wqe_fetch"} {
		require.Contains(t, seen, n, "the workload walks %s", n)
	}
	for n, c := range seen {
		_, ok := trace.Stages[n]
		require.True(t, ok, "stage %q (component %s) has no trace.Stages entry", n, c)
	}
}
