package test

import (
	"testing"

	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/testbed"
	"github.com/stretchr/testify/require"
)

// sendLatency posts one SEND of n bytes at mtu on a traced world and
// returns the post → requester CQE time and the recorded events.
func sendLatency(t *testing.T, n, mtu int, prefetch bool) (sim.Duration, *testbed.World) {
	t.Helper()
	cfg := testbed.DefaultConfig()
	cfg.Trace = true
	cfg.Device.Core.RQPrefetch = prefetch
	w, err := testbed.New(cfg)
	require.NoError(t, err)
	t.Cleanup(w.Close)
	eps, err := w.ConnectRC(testbed.ConnOpts{MTU: mtu, BufSize: 64 << 10})
	require.NoError(t, err)
	req, rsp := eps[0], eps[1]
	_, err = rsp.QP.PostRecv([]provider.RecvWR{{WRID: 1, SGL: []provider.SGE{rsp.MR.SGE(0, 8192)}}})
	require.NoError(t, err)
	w.Settle(0)
	w.Rec.Reset()
	start := w.Eng.Now()
	_, err = req.QP.PostSend([]provider.SendWR{{WRID: 2, Opcode: provider.WRSend, Flags: provider.SendSignaled,
		SGL: []provider.SGE{req.MR.SGE(0, uint32(n))}}})
	require.NoError(t, err)
	wc := waitOne(t, req.SendCQ)
	require.Equal(t, provider.WCSuccess, wc.Status)
	return w.Eng.Now().Sub(start), w
}

// TestResponderInOrder: a QP's received packets are handled one after the
// other. A 1024-byte SEND (one packet) must not take longer than a
// 1025-byte one (two packets) at MTU 1024, and with MTU 256 the ACK of a
// 2048-byte SEND leaves only after its receive WQE has been fetched.
func TestResponderInOrder(t *testing.T) {
	for _, prefetch := range []bool{true, false} {
		one, _ := sendLatency(t, 1024, 1024, prefetch)
		two, _ := sendLatency(t, 1025, 1024, prefetch)
		t.Logf("SEND post → CQE (RQ prefetch %v): 1024 B %v, 1025 B %v", prefetch, one, two)
		require.LessOrEqual(t, one, two, "one packet is not slower than two")
	}

	// Without read-ahead the receive WQE is fetched when the first packet
	// arrives, and the ACK must wait for it.
	_, w := sendLatency(t, 2048, 256, false)
	var fetched, ack sim.Time = -1, -1
	for _, ev := range w.Rec.Events() {
		switch {
		case ev.Node == 1 && ev.Name == "rq_wqe_fetch" && fetched < 0:
			fetched = ev.End
		case ev.Node == 1 && ev.Name == "ack" && ack < 0:
			ack = ev.Start
		}
	}
	require.Positive(t, fetched)
	require.Positive(t, ack)
	require.GreaterOrEqual(t, ack, fetched, "the ACK leaves after the receive WQE is in the device")
}
