package device_test

import (
	"testing"

	"github.com/softnic/softnic/fault"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/testbed"
	"github.com/stretchr/testify/require"
)

// TestUCHeldReceiveForgottenAtReset: a UC message that lost a packet keeps
// the receive WQE it had taken for the next message (dropMessage). A
// RESET must forget it: it is a WQE of the old incarnation. Kept, the
// first SEND after reconnecting landed in the old WQE's buffer (while the
// provider reported the new receive), and ERR flushed the old WQE by its
// index: a CQE for no receive the provider had.
func TestUCHeldReceiveForgottenAtReset(t *testing.T) {
	cfg := testbed.DefaultConfig()
	node := 0
	cfg.Faults = &fault.Plan{Seed: 1, Rules: []fault.Rule{{Point: fault.WireTx, Action: fault.Drop, Nth: 2, Match: fault.Match{Node: &node}}}}
	w, err := testbed.New(cfg)
	require.NoError(t, err)
	defer w.Close()
	o := testbed.ConnOpts{Type: provider.QPTypeUC, SigAll: true}
	eps, err := w.ConnectRC(o)
	require.NoError(t, err)
	req, rsp := eps[0], eps[1]
	_, err = rsp.QP.PostRecv([]provider.RecvWR{{WRID: 1, SGL: []provider.SGE{rsp.MR.SGE(0, 4096)}}})
	require.NoError(t, err)
	// Three packets, the second lost: the third ends the message, whose
	// WQE is kept.
	_, err = req.QP.PostSend([]provider.SendWR{{WRID: 1, Opcode: provider.WRSend, SGL: []provider.SGE{req.MR.SGE(0, 3000)}}})
	require.NoError(t, err)
	_, err = testbed.Wait(req.SendCQ, 1)
	require.NoError(t, err)
	w.Settle(0)
	// Reset and reconnect both with fresh PSNs.
	for _, e := range eps {
		require.NoError(t, e.QP.Modify(&provider.QPAttr{QPState: provider.QPStateReset}, mlx5.AttrState))
	}
	psn := [2]uint32{0x5000, 0x6000}
	for i, e := range eps {
		peer := eps[1-i]
		a := provider.ConnectAttr{PSN: psn[i], MTU: 1024, Access: provider.AccessLocalWrite | provider.AccessRemoteWrite, SGIDIndex: 1, HopLimit: 64,
			Peer: provider.Peer{QPN: peer.QP.QPN(), PSN: psn[1-i], GID: peer.Host.ID.IP.As16(), MAC: peer.Host.ID.MAC}}
		require.NoError(t, e.QP.Connect(a))
	}
	_, err = rsp.QP.PostRecv([]provider.RecvWR{{WRID: 2, SGL: []provider.SGE{rsp.MR.SGE(8192, 4096)}}})
	require.NoError(t, err)
	copy(req.Buf.Bytes[4096:], "second")
	clear(rsp.Buf.Bytes[:16])
	_, err = req.QP.PostSend([]provider.SendWR{{WRID: 2, Opcode: provider.WRSend, SGL: []provider.SGE{req.MR.SGE(4096, 6)}}})
	require.NoError(t, err)
	wcs, err := testbed.Wait(rsp.RecvCQ, 1)
	require.NoError(t, err)
	require.Equal(t, uint64(2), wcs[0].WRID)
	require.Equal(t, provider.WCSuccess, wcs[0].Status)
	require.Equal(t, []byte("second"), rsp.Buf.Bytes[8192:8198], "the new receive's buffer")
	require.Equal(t, make([]byte, 6), rsp.Buf.Bytes[:6], "not the old one's")
	require.NoError(t, rsp.QP.Modify(&provider.QPAttr{QPState: provider.QPStateErr}, mlx5.AttrState))
	w.Settle(0)
	n, err := rsp.RecvCQ.Poll(make([]provider.WC, 4))
	require.NoError(t, err, "nothing of the old incarnation is flushed")
	require.Equal(t, 0, n)
}
