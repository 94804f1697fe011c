package device_test

import (
	"testing"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/testbed"
	"github.com/stretchr/testify/require"
)

// TestUnreliableNOPCompletesInOrder: a signaled NOP right behind a UC or
// UD SEND completes after it, once the SEND's frame has left the port.
// (The NOP used to complete at once, ahead of the SEND whose CQE waited
// for its frame.) The WQEs are written by hand (rawSQ): the provider
// posts no NOP.
func TestUnreliableNOPCompletesInOrder(t *testing.T) {
	for _, tc := range []struct {
		name string
		typ  provider.QPType
	}{{"UC", provider.QPTypeUC}, {"UD", provider.QPTypeUD}} {
		typ := tc.typ
		t.Run(tc.name, func(t *testing.T) {
			w, err := testbed.New(testbed.DefaultConfig())
			require.NoError(t, err)
			defer w.Close()
			eps, err := w.ConnectRC(testbed.ConnOpts{Type: typ})
			require.NoError(t, err)
			req, rsp := eps[0], eps[1]
			first := provider.SendWR{WRID: 1, Opcode: provider.WRSend, Flags: provider.SendSignaled, SGL: []provider.SGE{req.MR.SGE(0, 64)}}
			if typ == provider.QPTypeUD {
				first.AH, first.RemoteQPN, first.RemoteQKey = req.AH, rsp.QP.QPN(), rsp.QKey
			}
			_, err = req.QP.PostSend([]provider.SendWR{first})
			require.NoError(t, err)
			_, err = testbed.Wait(req.SendCQ, 1)
			require.NoError(t, err)
			r := &rawSQ{w: w, ep: req, peer: rsp, pi: req.QP.SQProducer(), bf: req.QP.SQInfo().BFOffset}
			if typ == provider.QPTypeUD {
				wqe, err := req.QP.WQE(0)
				require.NoError(t, err)
				r.av = wqe[16 : 16+48]
			}
			// A signaled 64-byte SEND (rawOps[3]), then a signaled NOP
			// (rawOps[0]), announced by one doorbell.
			var idx []uint16
			var last []byte
			for _, rc := range [][]byte{{0, 3, 0, mlx5.CECQUpdate, 0, 0, 1, 0, 0, 64}, {0, 0, 0, mlx5.CECQUpdate}} {
				rc = append(rc, make([]byte, 16-len(rc))...)
				b := r.build(rc)
				r.put(r.pi, b)
				idx = append(idx, r.pi)
				r.pi += uint16(max(1, mlx5.WQEBBs(int(b[7]&0x3f))))
				last = b
			}
			r.record(mlx5.DBRSend, uint32(r.pi))
			r.doorbell(last)
			w.Settle(0)
			in := req.SendCQ.Info()
			var got []uint16
			for slot := 1; slot <= 2; slot++ {
				b := make([]byte, mlx5.CQE64Size)
				require.NoError(t, req.Host.Mem.Read(in.RingAddr+uint64(slot*mlx5.CQE64Size), b))
				f := mlx5.CQE64(b).Fields()
				require.Equal(t, mlx5.CQEReq, f.Opcode, "slot %d: a successful requester CQE", slot)
				got = append(got, f.WQECounter)
			}
			require.Equal(t, idx, got, "the SEND's CQE, then the NOP's")
		})
	}
}

// TestUnreliableResetLandsInFlightCQEs: a UD datagram that took a receive
// WQE just before its QP went RTS→RESET (no ERR in between) has its CQE
// land before the command returns, so that the provider's RESET cleans it
// out: the new incarnation's first receive does not complete with it.
// Only ERR→RESET landed the CQEs in flight: this one landed after the QP
// was back in RTS, and the provider reported it as the new receive's
// (WR ID 99, 43 bytes, in a buffer the data never reached).
func TestUnreliableResetLandsInFlightCQEs(t *testing.T) {
	w, err := testbed.New(testbed.DefaultConfig())
	require.NoError(t, err)
	t.Cleanup(w.Close)
	eps, err := w.ConnectRC(testbed.ConnOpts{Type: provider.QPTypeUD})
	require.NoError(t, err)
	req, rsp := eps[0], eps[1]
	dev := w.Hosts[1].Dev
	// Posted while the read-ahead still polls: on chip when the datagram comes.
	_, err = rsp.QP.PostRecv([]provider.RecvWR{{WRID: 1, SGL: []provider.SGE{rsp.MR.SGE(0, 256)}}})
	require.NoError(t, err)
	w.Settle(0)
	dev.ReceiveFrame(w.Eng.Now(), udDatagram(t, req.QP.QPN(), rsp.QP.QPN(), rsp.QKey, 0, []byte{1, 2, 3}, false, 0))
	require.Equal(t, uint64(1), dev.Counters().Get("rq_wqe_prefetch_hit"), "the datagram took WQE 0, its CQE in flight")
	require.NoError(t, rsp.QP.Modify(&provider.QPAttr{QPState: provider.QPStateReset}, mlx5.AttrState))
	require.NoError(t, rsp.QP.Connect(provider.ConnectAttr{QKey: rsp.QKey}))
	_, err = rsp.QP.PostRecv([]provider.RecvWR{{WRID: 99, SGL: []provider.SGE{rsp.MR.SGE(512, 256)}}})
	require.NoError(t, err)
	w.Settle(0)
	n, err := rsp.RecvCQ.Poll(make([]provider.WC, 4))
	require.NoError(t, err)
	require.Zero(t, n, "the old incarnation's CQE was cleaned out with it")
	// The new incarnation receives normally.
	dev.ReceiveFrame(w.Eng.Now(), udDatagram(t, req.QP.QPN(), rsp.QP.QPN(), rsp.QKey, 1, []byte{4, 5, 6}, false, 0))
	wcs, err := testbed.Wait(rsp.RecvCQ, 1)
	require.NoError(t, err)
	require.Equal(t, uint64(99), wcs[0].WRID)
	require.Equal(t, provider.WCSuccess, wcs[0].Status)
	require.Equal(t, []byte{4, 5, 6}, rsp.Buf.Bytes[512+40:512+43])
}
