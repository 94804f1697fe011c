package device_test

import (
	"testing"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/testbed"
	"github.com/stretchr/testify/require"
)

// TestResetForgetsReceiveBacklog: the receive pipeline time of a QP
// (rxBusy) and the build time of its last frame (txReady) belong to an
// incarnation. A burst of requests queued behind the responder's pipeline
// when the QP is reset must not delay the first request of the new
// incarnation: its ACK leaves as soon after it arrives as in a world that
// never saw the burst. Kept, the new request waited for the old
// incarnation's backlog, requests the RESET had discarded anyway.
func TestResetForgetsReceiveBacklog(t *testing.T) {
	lat := func(backlog int) sim.Duration {
		r := newRxWorld(t, testbed.ConnOpts{})
		var acks []sim.Time
		r.w.Link.AddTap(func(at sim.Time, f []byte) {
			var p roce.Packet
			if roce.ParseFrame(f, &p) == nil && p.SrcIP == testbed.IPs[1] && p.BTH.PSN() == 0x6000 {
				acks = append(acks, at)
			}
		})
		dev := r.w.Hosts[1].Dev
		for i := range backlog {
			p := r.params(roce.OpRCWriteOnly, ePSN+uint32(i))
			p.RETH = roce.RETHFields{VA: r.eps[1].MR.Addr, RKey: r.eps[1].MR.RKey}
			buf := make([]byte, 256)
			n, err := roce.BuildFrame(buf, &p, nil)
			require.NoError(t, err)
			dev.ReceiveFrame(r.w.Eng.Now(), buf[:n])
		}
		rsp := r.eps[1]
		require.NoError(t, rsp.QP.Modify(&provider.QPAttr{QPState: provider.QPStateReset}, mlx5.AttrState))
		peer := r.eps[0]
		a := provider.ConnectAttr{PSN: 0x7000, MTU: 1024, Access: provider.AccessLocalWrite | provider.AccessRemoteWrite, SGIDIndex: 1, HopLimit: 64,
			Peer: provider.Peer{QPN: peer.QP.QPN(), PSN: 0x6000, GID: peer.Host.ID.IP.As16(), MAC: peer.Host.ID.MAC}}
		require.NoError(t, rsp.QP.Connect(a))
		p := r.params(roce.OpRCWriteOnly, 0x6000)
		p.RETH = roce.RETHFields{VA: r.eps[1].MR.Addr, RKey: r.eps[1].MR.RKey}
		buf := make([]byte, 256)
		n, err := roce.BuildFrame(buf, &p, nil)
		require.NoError(t, err)
		t1 := r.w.Eng.Now()
		dev.ReceiveFrame(t1, buf[:n])
		r.w.Settle(0)
		require.Len(t, acks, 1, "the new incarnation's request is acknowledged")
		return acks[0].Sub(t1)
	}
	fresh, after := lat(0), lat(2000)
	t.Logf("ACK latency: %v fresh, %v after a reset behind a backlog", fresh, after)
	require.Equal(t, fresh, after)
}
