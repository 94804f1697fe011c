package device_test

import (
	"testing"
	"time"

	"github.com/softnic/softnic/device"
	"github.com/softnic/softnic/fault"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/testbed"
	"github.com/stretchr/testify/require"
)

// TestDoorbellBeforeResetLandsFirst: a WRITE posted, and the QP reset and
// reconnected before its doorbell has crossed PCIe. The doorbell was
// written first, so it reaches the device first (posted writes stay in
// order, the command among them), to a QP about to be reset. It used to
// arrive after the reconnect: the device fetched the old incarnation's
// WQE from the ring and completed it on the new one, a CQE for no WQE the
// provider had posted.
func TestDoorbellBeforeResetLandsFirst(t *testing.T) {
	w, err := testbed.New(testbed.DefaultConfig())
	require.NoError(t, err)
	defer w.Close()
	eps, err := w.ConnectRC(testbed.ConnOpts{SigAll: true})
	require.NoError(t, err)
	w.Settle(0)
	req, rsp := eps[0], eps[1]
	_, err = req.QP.PostSend([]provider.SendWR{{WRID: 1, Opcode: provider.WRRDMAWrite, SGL: []provider.SGE{req.MR.SGE(0, 64)},
		RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey}})
	require.NoError(t, err)
	for _, e := range eps {
		require.NoError(t, e.QP.Modify(&provider.QPAttr{QPState: provider.QPStateReset}, mlx5.AttrState))
	}
	psn := [2]uint32{0x7000, 0x8000}
	for i, e := range eps {
		peer := eps[1-i]
		a := provider.ConnectAttr{PSN: psn[i], MTU: 1024, Access: provider.AccessLocalWrite | provider.AccessRemoteWrite, SGIDIndex: 1, HopLimit: 64,
			MaxRdAtomic: 1, MaxDestRdAtomic: 1, MinRNRTimer: 12, Timeout: 14, RetryCnt: 7, RNRRetry: 7,
			Peer: provider.Peer{QPN: peer.QP.QPN(), PSN: psn[1-i], GID: peer.Host.ID.IP.As16(), MAC: peer.Host.ID.MAC}}
		require.NoError(t, e.QP.ToInit(a))
		require.NoError(t, e.QP.ToRTR(a))
	}
	for i, e := range eps {
		peer := eps[1-i]
		require.NoError(t, e.QP.ToRTS(provider.ConnectAttr{PSN: psn[i], MaxRdAtomic: 1, Timeout: 14, RetryCnt: 7, RNRRetry: 7,
			Peer: provider.Peer{QPN: peer.QP.QPN()}}))
	}
	require.Less(t, w.Settle(1_000_000), 1_000_000)
	n, err := req.SendCQ.Poll(make([]provider.WC, 4))
	require.NoError(t, err, "the reset QP completes nothing of its old incarnation")
	require.Equal(t, 0, n)
	// The new incarnation works.
	_, err = req.QP.PostSend([]provider.SendWR{{WRID: 2, Opcode: provider.WRRDMAWrite, SGL: []provider.SGE{req.MR.SGE(0, 64)},
		RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey}})
	require.NoError(t, err)
	wcs, err := testbed.Wait(req.SendCQ, 1)
	require.NoError(t, err)
	require.Equal(t, uint64(2), wcs[0].WRID)
	require.Equal(t, provider.WCSuccess, wcs[0].Status)
}

// TestFatalFlushesReceiveInProgress: a SEND whose later packets are lost
// has taken the responder's receive WQE when the device dies. The
// driver's software flush completes it with the receives still posted
// (WR_FLUSH_ERR): EnterFatal forgot the message and the WQE, consumed
// from the ring, used to never complete.
func TestFatalFlushesReceiveInProgress(t *testing.T) {
	rsp := fatalMidSend(t, false)
	wcs, err := testbed.Wait(rsp.RecvCQ, 2)
	require.NoError(t, err, "both receives complete")
	for i, wc := range wcs {
		require.Equal(t, uint64(i+1), wc.WRID)
		require.Equal(t, provider.WCWRFlushErr, wc.Status)
	}
}

// fatalMidSend posts two receives (on the responder's RQ, or its SRQ) and
// a 3000-byte SEND whose packets after the first are lost, then kills the
// responder's device mid-message and runs the world idle. It returns the
// responder.
func fatalMidSend(t *testing.T, srq bool) *testbed.Endpoint { return fatalAfter(t, srq, true) }

// fatalAfter is fatalMidSend, the SEND left out without send.
func fatalAfter(t *testing.T, srq, send bool) *testbed.Endpoint {
	t.Helper()
	cfg := testbed.DefaultConfig()
	node, from, to := 0, uint32(0x1001), uint32(0x1002)
	cfg.Faults = &fault.Plan{Seed: 1, Rules: []fault.Rule{{Point: fault.WireTx, Action: fault.Drop, Match: fault.Match{Node: &node, PSNFrom: &from, PSNTo: &to}}}}
	w, err := testbed.New(cfg)
	require.NoError(t, err)
	t.Cleanup(w.Close)
	eps, err := w.ConnectRC(testbed.ConnOpts{SigAll: true, Timeout: -1, SRQ: srq})
	require.NoError(t, err)
	req, rsp := eps[0], eps[1]
	for i := range 2 {
		wr := []provider.RecvWR{{WRID: uint64(i + 1), SGL: []provider.SGE{rsp.MR.SGE(uint64(i)*4096, 4096)}}}
		if srq {
			_, err = rsp.SRQ.PostRecv(wr)
		} else {
			_, err = rsp.QP.PostRecv(wr)
		}
		require.NoError(t, err)
	}
	if send {
		_, err = req.QP.PostSend([]provider.SendWR{{WRID: 1, Opcode: provider.WRSend, SGL: []provider.SGE{req.MR.SGE(0, 3000)}}})
		require.NoError(t, err)
	}
	require.Less(t, w.Settle(1_000_000), 1_000_000)
	w.Hosts[1].Dev.EnterFatal(w.Eng.Now(), 1, "test")
	require.Less(t, w.Settle(1_000_000), 1_000_000)
	return rsp
}

// TestFatalFlushLeavesSRQ: after a device fatal error the driver's
// software flush completes the outstanding work of a QP's own RQ, the
// receive a message in progress had taken included (the QP on an RQ), and
// nothing of an SRQ, neither the WQE a message in progress had taken from
// it nor those never taken: mlx5_ib_handle_internal_error has "no
// handling ... for SRQ" and mlx5_ib_poll_sw_comp walks only qp->rq
// (device/fatal.go, swFlush). The SRQ's WQEs stay outstanding, counted and
// reported; the application learns of the loss from DEVICE_FATAL. The
// receive the message had taken from the SRQ used to be flushed.
func TestFatalFlushLeavesSRQ(t *testing.T) {
	for _, c := range []struct {
		name        string
		srq, send   bool
		flushed     int // receive CQEs, all WR_FLUSH_ERR
		outstanding int // on the SRQ, as the provider counts them
		left        uint64
	}{
		{"rq_in_progress", false, true, 2, 0, 0},
		{"rq_untaken", false, false, 2, 0, 0},
		{"srq_in_progress", true, true, 0, 2, 2},
		{"srq_untaken", true, false, 0, 2, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			rsp := fatalAfter(t, c.srq, c.send)
			dev := rsp.Host.Dev
			dead, _ := dev.Fatal()
			require.True(t, dead)
			require.Equal(t, uint64(1), dev.Counters().Get(device.CtrDeviceFatalSeen.String()), "the driver saw it")
			wcs := make([]provider.WC, 4)
			n, err := rsp.RecvCQ.Poll(wcs)
			require.NoError(t, err)
			require.Equal(t, c.flushed, n)
			for i, wc := range wcs[:n] {
				require.Equal(t, uint64(i+1), wc.WRID)
				require.Equal(t, provider.WCWRFlushErr, wc.Status)
				require.Equal(t, uint32(device.VendorSWFlush), wc.VendorErr)
			}
			if c.srq {
				require.Equal(t, c.outstanding, rsp.SRQ.Outstanding())
			}
			require.Equal(t, c.left, dev.Counters().Get(device.CtrFatalSRQWQELeft.String()))
			e, err := rsp.Host.Ctx.GetAsyncEvent(time.Microsecond)
			require.NoError(t, err)
			require.Equal(t, mlx5.EventDeviceFatal, e.Type)
		})
	}
}
