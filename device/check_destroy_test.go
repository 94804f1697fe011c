package device_test

import (
	"testing"

	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/testbed"
	"github.com/stretchr/testify/require"
)

// A QP destroyed while the checker watches its record (ahead of its
// doorbells, R3) is forgotten: the watch ends without a report. The same
// posts on a QP that lives are reported (the control), so the test can
// fail either way.
func TestCheckerForgetsDestroyedQP(t *testing.T) {
	for _, destroy := range []bool{false, true} {
		cfg := testbed.DefaultConfig()
		cfg.Check = true
		w, err := testbed.New(cfg)
		require.NoError(t, err)
		eps, err := w.ConnectRC(testbed.ConnOpts{})
		require.NoError(t, err)
		req, rsp := eps[0], eps[1]
		req.QP.SetBugs(provider.BugDoorbellFirstWQE)
		sge := []provider.SGE{req.MR.SGE(0, 8)}
		_, err = req.QP.PostSend([]provider.SendWR{
			{WRID: 1, Opcode: provider.WRRDMAWrite, SGL: sge, RemoteAddr: rsp.Buf.Addr, RKey: rsp.MR.RKey},
			{WRID: 2, Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled, SGL: sge, RemoteAddr: rsp.Buf.Addr, RKey: rsp.MR.RKey}})
		require.NoError(t, err)
		if destroy { // before the grace period (recordGrace, 1 ms) is over
			require.NoError(t, req.QP.Destroy())
		}
		w.Settle(1 << 20)
		found := false
		for _, v := range w.Hosts[0].Dev.Checker().Violations() {
			found = found || v.Name == "record-without-doorbell"
		}
		require.Equal(t, !destroy, found, "destroyed %v", destroy)
		w.Close()
	}
}
