package test

import (
	"fmt"
	"testing"

	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/testbed"
	"github.com/stretchr/testify/require"
)

func dumpCtrs(t *testing.T, w *testbed.World, names ...string) {
	for i, h := range w.Hosts {
		s := ""
		for _, n := range names {
			s += fmt.Sprintf(" %s=%d", n, hctr(h, n))
		}
		t.Logf("node %d:%s", i, s)
	}
}

func TestProbe6AfterError(t *testing.T) {
	w, req, rsp := faultWorld(t, "", nil)
	sge := req.MR.SGE(0, 64)
	bad := sge
	bad.LKey ^= 0x55500
	_, err := req.QP.PostSend([]provider.SendWR{
		{WRID: 1, Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled, SGL: []provider.SGE{bad}, RemoteAddr: rsp.Buf.Addr, RKey: rsp.MR.RKey},
		{WRID: 2, Opcode: provider.WRRDMAWrite, SGL: []provider.SGE{sge}, RemoteAddr: rsp.Buf.Addr, RKey: rsp.MR.RKey},
		{WRID: 3, Opcode: provider.WRRDMAWrite, SGL: []provider.SGE{sge}, RemoteAddr: rsp.Buf.Addr, RKey: rsp.MR.RKey},
		{WRID: 4, Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled, SGL: []provider.SGE{sge}, RemoteAddr: rsp.Buf.Addr, RKey: rsp.MR.RKey},
	})
	require.NoError(t, err)
	wcs, err := testbed.Wait(req.SendCQ, 4)
	for _, wc := range wcs {
		t.Logf("wc %d %v vendor %#x op %v", wc.WRID, wc.Status, wc.VendorErr, wc.Opcode)
	}
	t.Logf("err %v", err)
	writeWR(t, req, rsp, 5, 0, 64)
	wcs, err = testbed.Wait(req.SendCQ, 1)
	for _, wc := range wcs {
		t.Logf("after: wc %d %v vendor %#x", wc.WRID, wc.Status, wc.VendorErr)
	}
	dumpCtrs(t, w, "req_cqe_error", "req_cqe_flush_error", "wqe_flushed", "cqe_error_LOCAL_PROT")
	t.Logf("events0 %v events1 %v", asyncEvents(t, w.Hosts[0]), asyncEvents(t, w.Hosts[1]))
}

func TestProbe6BadRKey(t *testing.T) {
	for _, op := range []provider.WROpcode{provider.WRRDMAWrite, provider.WRRDMARead} {
		w, req, rsp := faultWorld(t, "", nil)
		_, err := req.QP.PostSend([]provider.SendWR{
			{WRID: 1, Opcode: op, Flags: provider.SendSignaled, SGL: []provider.SGE{req.MR.SGE(0, 64)}, RemoteAddr: rsp.Buf.Addr, RKey: rsp.MR.RKey ^ 0x1000},
			{WRID: 2, Opcode: op, Flags: provider.SendSignaled, SGL: []provider.SGE{req.MR.SGE(0, 64)}, RemoteAddr: rsp.Buf.Addr, RKey: rsp.MR.RKey},
		})
		require.NoError(t, err)
		wcs, err := testbed.Wait(req.SendCQ, 2)
		for _, wc := range wcs {
			t.Logf("%v: wc %d %v vendor %#x", op, wc.WRID, wc.Status, wc.VendorErr)
		}
		st, _ := rsp.QP.QueryState()
		t.Logf("err %v rsp state %v", err, st)
		dumpCtrs(t, w, "req_cqe_error", "req_cqe_flush_error", "req_remote_access_errors", "resp_remote_access_errors", "resp_cqe_error")
		t.Logf("events0 %v events1 %v", asyncEvents(t, w.Hosts[0]), asyncEvents(t, w.Hosts[1]))
	}
}

func TestProbe6RNR(t *testing.T) {
	cfg := testbed.DefaultConfig()
	w, err := testbed.New(cfg)
	require.NoError(t, err)
	defer w.Close()
	eps, err := w.ConnectRC(testbed.ConnOpts{RNRRetry: 2})
	require.NoError(t, err)
	req := eps[0]
	_, err = req.QP.PostSend([]provider.SendWR{
		{WRID: 1, Opcode: provider.WRSend, Flags: provider.SendSignaled, SGL: []provider.SGE{req.MR.SGE(0, 64)}},
		{WRID: 2, Opcode: provider.WRSend, SGL: []provider.SGE{req.MR.SGE(0, 64)}},
	})
	require.NoError(t, err)
	wcs, err := testbed.Wait(req.SendCQ, 2)
	for _, wc := range wcs {
		t.Logf("wc %d %v vendor %#x", wc.WRID, wc.Status, wc.VendorErr)
	}
	t.Logf("err %v", err)
	dumpCtrs(t, w, "req_cqe_error", "req_rnr_retries_exceeded", "rnr_nak_retry_err", "out_of_buffer", "rnr_naks_sent")
	t.Logf("events0 %v events1 %v", asyncEvents(t, w.Hosts[0]), asyncEvents(t, w.Hosts[1]))
}
