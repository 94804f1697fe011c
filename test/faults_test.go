package test

import (
	"bytes"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/softnic/softnic/device"
	"github.com/softnic/softnic/fault"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/testbed"
	"github.com/softnic/softnic/trace"
	"github.com/stretchr/testify/require"
)

// Fault injection at every hook point, with the consequence
// ../shared/reference/faults.md gives (docs/faults.md has the table).

// faultWorld is a connected RC pair under plan (JSON), with the device
// spec changed by mod.
func faultWorld(t *testing.T, plan string, mod func(*testbed.Config)) (*testbed.World, *testbed.Endpoint, *testbed.Endpoint) {
	t.Helper()
	cfg := testbed.DefaultConfig()
	cfg.Trace = true
	if plan != "" {
		p, err := fault.Parse([]byte(plan))
		require.NoError(t, err)
		cfg.Faults = p
	}
	if mod != nil {
		mod(&cfg)
	}
	w, err := testbed.New(cfg)
	require.NoError(t, err)
	t.Cleanup(w.Close)
	eps, err := w.ConnectRC(testbed.ConnOpts{Timeout: 8, RetryCnt: 3})
	require.NoError(t, err)
	fill(eps[0].Buf.Bytes, 1)
	return w, eps[0], eps[1]
}

// writeWR posts one signalled RDMA WRITE of n bytes at off (req → rsp).
func writeWR(t *testing.T, req, rsp *testbed.Endpoint, wrid, off uint64, n uint32) {
	t.Helper()
	_, err := req.QP.PostSend([]provider.SendWR{{WRID: wrid, Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
		SGL: []provider.SGE{req.MR.SGE(off, n)}, RemoteAddr: rsp.Buf.Addr + off, RKey: rsp.MR.RKey}})
	require.NoError(t, err)
}

// noStall expects the CQ to stay empty until the simulation is idle.
func noStall(t *testing.T, cq *provider.CQ) {
	t.Helper()
	_, err := testbed.Wait(cq, 1)
	require.ErrorIs(t, err, testbed.ErrTimeout)
}

// untouched checks rsp's buffer outside [off, off+n) is still zero.
func untouched(t *testing.T, rsp *testbed.Endpoint, off, n int) {
	t.Helper()
	b := rsp.Buf.Bytes
	require.Equal(t, -1, bytes.IndexFunc(b[:off], func(r rune) bool { return r != 0 }), "bytes changed below the expected range")
	for i := off + n; i < len(b); i++ {
		if b[i] != 0 {
			t.Fatalf("byte %d changed outside the expected range [%d,+%d)", i, off, n)
		}
	}
}

// hctr is a counter of h's device, by id or by name.
func hctr(h *testbed.Host, c any) uint64 {
	switch c := c.(type) {
	case trace.Counter:
		return h.Dev.Counters().Value(c)
	case string:
		return h.Dev.Counters().Get(c)
	}
	panic(fmt.Sprintf("hctr: %T", c))
}

func asyncEvents(t *testing.T, h *testbed.Host) []mlx5.EventType {
	t.Helper()
	var out []mlx5.EventType
	for {
		// 10 µs of virtual time: past the interrupt latency (1 µs) and the
		// handler's work (an event is readable when that ends).
		e, err := h.Ctx.GetAsyncEvent(10 * time.Microsecond)
		if err != nil {
			return out
		}
		out = append(out, e.Type)
		h.Ctx.AckAsyncEvent(e)
	}
}

func TestFaultDoorbell(t *testing.T) {
	t.Run("lost: the SQ stalls until a later doorbell covers it", func(t *testing.T) {
		w, req, rsp := faultWorld(t, `{"rules":[{"point":"doorbell","action":"drop","nth":1}]}`, nil)
		req.QP.SetBlueFlame(false)
		writeWR(t, req, rsp, 1, 0, 64)
		noStall(t, req.SendCQ)
		require.Equal(t, uint64(1), hctr(w.Hosts[0], fault.CounterName(fault.Doorbell, fault.Drop)))
		require.Zero(t, hctr(w.Hosts[0], device.CtrReqCQEError))
		writeWR(t, req, rsp, 2, 64, 64)
		wcs := drain(t, req.SendCQ, 2)
		require.Equal(t, []uint64{1, 2}, []uint64{wcs[0].WRID, wcs[1].WRID})
		require.Equal(t, provider.WCSuccess, wcs[0].Status)
		require.Equal(t, req.Buf.Bytes[:128], rsp.Buf.Bytes[:128])
		untouched(t, rsp, 0, 128)
	})
	t.Run("stale: ignored, like a lost one", func(t *testing.T) {
		w, req, rsp := faultWorld(t, `{"rules":[{"point":"doorbell","action":"stale","nth":2}]}`, nil)
		req.QP.SetBlueFlame(false)
		writeWR(t, req, rsp, 1, 0, 64)
		waitOne(t, req.SendCQ)
		writeWR(t, req, rsp, 2, 64, 64)
		noStall(t, req.SendCQ)
		require.Equal(t, uint64(1), hctr(w.Hosts[0], "db_no_new_wqe"))
		writeWR(t, req, rsp, 3, 128, 64)
		require.Len(t, drain(t, req.SendCQ, 2), 2)
	})
	t.Run("jumped: control segment invalid, 0x02, QP to ERR, flush", func(t *testing.T) {
		w, req, rsp := faultWorld(t, `{"rules":[{"point":"doorbell","action":"jump","nth":1}]}`, nil)
		req.QP.SetBlueFlame(false)
		writeWR(t, req, rsp, 1, 0, 64)
		// The phantom WQE fails with 0x02, in a CQE naming a WQE the
		// provider never posted (libmlx5 would be as lost).
		// WQE 0 was fetched with it and had not completed: flushed.
		wc0 := waitOne(t, req.SendCQ)
		require.Equal(t, provider.WCWRFlushErr, wc0.Status)
		require.Equal(t, uint32(device.VendorFlush), wc0.VendorErr)
		_, err := testbed.Wait(req.SendCQ, 1)
		require.ErrorIs(t, err, provider.ErrBadCQE)
		require.Equal(t, uint64(1), hctr(w.Hosts[0], "cqe_error_LOCAL_QP_OP"))
		st, err := req.QP.QueryState()
		require.NoError(t, err)
		require.Equal(t, provider.QPStateErr, st)
		// WQE slot 1 was consumed by the phantom: the next post's doorbell
		// announces nothing new; the one after is flushed.
		writeWR(t, req, rsp, 3, 64, 64)
		writeWR(t, req, rsp, 4, 64, 64)
		wc := waitOne(t, req.SendCQ)
		require.Equal(t, uint64(4), wc.WRID)
		require.Equal(t, provider.WCWRFlushErr, wc.Status)
		require.Equal(t, uint32(device.VendorFlush), wc.VendorErr)
		require.Equal(t, uint64(1), hctr(w.Hosts[0], device.CtrQPToError))
		untouched(t, rsp, 0, 64)
	})
	t.Run("early: harmless by default, a stall with doorbell_reads_record", func(t *testing.T) {
		plan := `{"rules":[{"point":"doorbell","action":"early","nth":1}]}`
		_, req, rsp := faultWorld(t, plan, nil)
		req.QP.SetBlueFlame(false)
		writeWR(t, req, rsp, 1, 0, 64)
		require.Equal(t, provider.WCSuccess, waitOne(t, req.SendCQ).Status)
		_, req, rsp = faultWorld(t, plan, func(c *testbed.Config) { c.Device.Faults.DoorbellReadsRecord = true })
		req.QP.SetBlueFlame(false)
		writeWR(t, req, rsp, 1, 0, 64)
		noStall(t, req.SendCQ)
		writeWR(t, req, rsp, 2, 64, 64)
		require.Len(t, drain(t, req.SendCQ, 2), 2)
	})
	t.Run("delayed, duplicated, reordered: completes", func(t *testing.T) {
		for _, a := range []string{`"delay","delay_ps":5000000`, `"duplicate"`, `"reorder"`, `"corrupt","byte":0,"mask":1`} {
			_, req, rsp := faultWorld(t, `{"rules":[{"point":"doorbell","action":`+a+`,"nth":1}]}`, nil)
			req.QP.SetBlueFlame(false)
			writeWR(t, req, rsp, 1, 0, 64)
			wc := waitOne(t, req.SendCQ)
			require.Equal(t, provider.WCSuccess, wc.Status, a)
		}
	})
}

func TestFaultWCBuffer(t *testing.T) {
	for _, tc := range []struct{ plan, ctr string }{
		{`{"rules":[{"point":"wc.buffer","action":"tear","nth":1}]}`, "bf_torn"},
		{`{"rules":[{"point":"wc.buffer","action":"drop","nth":2}]}`, "bf_torn"},
		{`{"rules":[{"point":"wc.buffer","action":"reorder","nth":1}]}`, "bf_out_of_order"},
	} {
		t.Run(tc.ctr, func(t *testing.T) {
			w, req, rsp := faultWorld(t, tc.plan, nil)
			// 100 bytes inline: a 2-line BlueFlame WQE.
			_, err := req.QP.PostSend([]provider.SendWR{{WRID: 1, Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled | provider.SendInline,
				SGL: []provider.SGE{req.MR.SGE(0, 100)}, RemoteAddr: rsp.Buf.Addr, RKey: rsp.MR.RKey}})
			require.NoError(t, err)
			wc := waitOne(t, req.SendCQ)
			require.Equal(t, provider.WCSuccess, wc.Status)
			h := w.Hosts[0]
			require.Equal(t, uint64(1), hctr(h, tc.ctr))
			require.Zero(t, hctr(h, "wqe_bf"), "the BF payload must not be used")
			require.Equal(t, uint64(1), hctr(h, "wqe_fetch_reads"), "fallback: the WQE is fetched from memory")
			require.Equal(t, req.Buf.Bytes[:100], rsp.Buf.Bytes[:100])
			untouched(t, rsp, 0, 100)
		})
	}
	t.Run("delay: held as if unflushed", func(t *testing.T) {
		_, req, rsp := faultWorld(t, "", nil)
		writeWR(t, req, rsp, 1, 0, 64)
		waitOne(t, req.SendCQ)
		base := req.Host.Dev.Counters().Get("wqe_bf")
		w, req2, rsp2 := faultWorld(t, `{"rules":[{"point":"wc.buffer","action":"delay","delay_ps":3000000,"nth":1}]}`, nil)
		start := w.Eng.Now()
		writeWR(t, req2, rsp2, 1, 0, 64)
		waitOne(t, req2.SendCQ)
		require.Greater(t, w.Eng.Now()-start, sim.Time(3*sim.Microsecond))
		require.Equal(t, base, hctr(w.Hosts[0], "wqe_bf"))
	})
}

func TestFaultDMA(t *testing.T) {
	for _, a := range []string{"timeout", "abort", "ur", "poison", "iommu"} {
		t.Run("data read "+a, func(t *testing.T) {
			w, req, rsp := faultWorld(t, "", nil)
			setPlan(t, w, fmt.Sprintf(`{"rules":[{"point":"dma.read","action":%q,"nth":1,"match":{"target":"data","node":0,"addr_from":%d,"addr_to":%d}}]}`,
				a, req.Buf.Addr, req.Buf.Addr+2047))
			req.QP.SetBlueFlame(false)
			writeWR(t, req, rsp, 1, 0, 2048)
			wc := waitOne(t, req.SendCQ)
			require.Equal(t, provider.WCLocProtErr, wc.Status)
			require.Equal(t, uint32(device.VendorPCIe), wc.VendorErr)
			require.Equal(t, uint64(1), hctr(w.Hosts[0], device.CtrReqCQEError))
			require.Equal(t, uint64(1), hctr(w.Hosts[0], fault.CounterName(fault.DMARead, mustAction(a))))
			untouched(t, rsp, 0, 0) // nothing arrived at all
		})
	}
	t.Run("wqe fetch: LOC_PROT 0x51 on the QP", func(t *testing.T) {
		w, req, rsp := faultWorld(t, `{"rules":[{"point":"dma.read","action":"ur","match":{"target":"wqe"}}]}`, nil)
		req.QP.SetBlueFlame(false)
		writeWR(t, req, rsp, 1, 0, 64)
		wc := waitOne(t, req.SendCQ)
		require.Equal(t, provider.WCLocProtErr, wc.Status)
		require.Equal(t, uint32(device.VendorPCIe), wc.VendorErr)
		require.Equal(t, uint64(1), hctr(w.Hosts[0], device.CtrWQEFetchPCIeError))
		untouched(t, rsp, 0, 0)
	})
	t.Run("wqe fetch fatal with wqe_fetch_error_fatal", func(t *testing.T) {
		w, req, rsp := faultWorld(t, `{"rules":[{"point":"dma.read","action":"ur","match":{"target":"wqe"}}]}`,
			func(c *testbed.Config) {
				c.Device.Faults.WQEFetchErrorFatal = true
				c.Device.Faults.HealthPoll = 10 * sim.Microsecond
			})
		req.QP.SetBlueFlame(false)
		writeWR(t, req, rsp, 1, 0, 64)
		wc := waitOne(t, req.SendCQ)
		require.Equal(t, provider.WCWRFlushErr, wc.Status)
		require.Equal(t, uint32(device.VendorSWFlush), wc.VendorErr)
		fatal, synd := w.Hosts[0].Dev.Fatal()
		require.True(t, fatal)
		require.Equal(t, uint8(0xa), synd)
	})
	t.Run("responder data write: NAK, requester error", func(t *testing.T) {
		w, req, rsp := faultWorld(t, `{"rules":[{"point":"dma.write","action":"poison","nth":1,"match":{"node":1,"target":"data"}}]}`, nil)
		writeWR(t, req, rsp, 1, 0, 64)
		wc := waitOne(t, req.SendCQ)
		require.Equal(t, provider.WCRemOpErr, wc.Status) // NAK remote operational error
		require.Equal(t, uint32(device.VendorRemoteOp), wc.VendorErr)
		require.NotZero(t, hctr(w.Hosts[1], device.CtrNAKsSent))
		st, err := rsp.QP.QueryState()
		require.NoError(t, err)
		require.Equal(t, provider.QPStateErr, st, "the responder QP is in error")
		require.Contains(t, asyncEvents(t, w.Hosts[1]), mlx5.EventQPFatal)
		untouched(t, rsp, 0, 0)
	})
	// The responder fails to read the data of a READ response (the first
	// packet's, or a later one's after some have left): it NAKs remote
	// operational error and goes to ERR; the requester completes the READ
	// REM_OP_ERR at once instead of retrying into RETRY_EXC_ERR.
	for _, tc := range []struct {
		name string
		nth  int
	}{{"first", 1}, {"fourth", 4}} {
		t.Run("responder READ data read, "+tc.name+" packet: NAK, REM_OP_ERR", func(t *testing.T) {
			w, req, rsp := faultWorld(t, fmt.Sprintf(`{"rules":[{"point":"dma.read","action":"timeout","nth":%d,"match":{"node":1,"target":"data"}}]}`, tc.nth), nil)
			_, err := req.QP.PostSend([]provider.SendWR{{WRID: 1, Opcode: provider.WRRDMARead, Flags: provider.SendSignaled,
				SGL: []provider.SGE{req.MR.SGE(0, 8192)}, RemoteAddr: rsp.Buf.Addr, RKey: rsp.MR.RKey}})
			require.NoError(t, err)
			wc := waitOne(t, req.SendCQ)
			require.Equal(t, provider.WCRemOpErr, wc.Status, "vendor %#x", wc.VendorErr)
			require.Equal(t, uint32(device.VendorRemoteOp), wc.VendorErr)
			require.Equal(t, uint64(1), hctr(w.Hosts[1], fault.CounterName(fault.DMARead, fault.Timeout)))
			require.Zero(t, hctr(w.Hosts[0], device.CtrLocalACKTimeoutErr), "no timeout: the NAK ends the READ")
			st, err := rsp.QP.QueryState()
			require.NoError(t, err)
			require.Equal(t, provider.QPStateErr, st, "the responder QP is in error")
		})
	}
	// The same for the second of four READs: the first one's responses,
	// built before the failure, still reach the requester.
	t.Run("responder READ data read of the second READ: the first completes", func(t *testing.T) {
		w, req, rsp := faultWorld(t, `{"rules":[{"point":"dma.read","action":"timeout","nth":20,"match":{"node":1,"target":"data"}}]}`, nil)
		fill(rsp.Buf.Bytes[:64<<10], 0x77)
		var wrs []provider.SendWR
		for i := 0; i < 4; i++ {
			wrs = append(wrs, provider.SendWR{WRID: uint64(i), Opcode: provider.WRRDMARead, Flags: provider.SendSignaled,
				SGL: []provider.SGE{req.MR.SGE(uint64(i)<<14, 16<<10)}, RemoteAddr: rsp.Buf.Addr + uint64(i)<<14, RKey: rsp.MR.RKey})
		}
		_, err := req.QP.PostSend(wrs)
		require.NoError(t, err)
		wcs, err := testbed.Wait(req.SendCQ, 4)
		require.NoError(t, err)
		want := []provider.WCStatus{provider.WCSuccess, provider.WCRemOpErr, provider.WCWRFlushErr, provider.WCWRFlushErr}
		for i, wc := range wcs {
			require.Equal(t, uint64(i), wc.WRID)
			require.Equal(t, want[i], wc.Status, "READ %d: vendor %#x", i, wc.VendorErr)
		}
		require.Equal(t, rsp.Buf.Bytes[:16<<10], req.Buf.Bytes[:16<<10], "the first READ's data")
		require.Equal(t, uint64(1), hctr(w.Hosts[1], fault.CounterName(fault.DMARead, fault.Timeout)))
	})
	t.Run("cqe write: CQ error, CQ_ERR", func(t *testing.T) {
		w, req, rsp := faultWorld(t, `{"rules":[{"point":"dma.write","action":"abort","nth":1,"match":{"node":0,"target":"cqe"}}]}`, nil)
		writeWR(t, req, rsp, 1, 0, 64)
		noStall(t, req.SendCQ)
		require.Equal(t, uint64(1), hctr(w.Hosts[0], device.CtrCQErrorAccess))
		require.Contains(t, asyncEvents(t, w.Hosts[0]), mlx5.EventCQErr)
		require.Equal(t, req.Buf.Bytes[:64], rsp.Buf.Bytes[:64])
	})
	t.Run("delay: a latency spike only", func(t *testing.T) {
		w, req, rsp := faultWorld(t, "", nil)
		// The payload read: matched by the address of the requester's buffer.
		setPlan(t, w, fmt.Sprintf(`{"rules":[{"point":"dma.read","action":"delay","delay_ps":20000000,"nth":1,"match":{"node":0,"addr_from":%d,"addr_to":%d}}]}`,
			req.Buf.Addr, req.Buf.Addr+63))
		start := w.Eng.Now()
		writeWR(t, req, rsp, 1, 0, 64)
		require.Equal(t, provider.WCSuccess, waitOne(t, req.SendCQ).Status)
		require.Greater(t, w.Eng.Now()-start, sim.Time(20*sim.Microsecond))
	})
}

// TestDMAErrorFatal: a PCIe error (here UR) on any DMA access the
// responder makes — a WRITE's or a SEND's data, a READ response's read,
// an atomic's read — is a device fatal error (health syndrome 0x8) with
// faults.dma_error_fatal, as it already was on the requester's payload
// read and on a CQE write; before, the responder's accesses ignored the
// switch and NAKed. Without the switch the responder NAKs (the requester
// sees REM_OP_ERR) and a SEND's receive completes LOC_PROT_ERR with vendor
// 0x51, as a requester's DMA error does (it had vendor 0).
func TestDMAErrorFatal(t *testing.T) {
	const all = provider.AccessLocalWrite | provider.AccessRemoteWrite | provider.AccessRemoteRead | provider.AccessRemoteAtomic
	for _, c := range []struct {
		name   string
		node   int
		point  string // dma.read or dma.write
		op     provider.WROpcode
		target string
	}{
		{"requester payload read", 0, "dma.read", provider.WRRDMAWrite, "data"},
		{"responder WRITE data", 1, "dma.write", provider.WRRDMAWrite, "data"},
		{"responder SEND data", 1, "dma.write", provider.WRSend, "data"},
		{"responder READ response", 1, "dma.read", provider.WRRDMARead, "data"},
		{"responder atomic", 1, "dma.read", provider.WRAtomicFetchAdd, "data"},
		{"responder CQE", 1, "dma.write", provider.WRSend, "cqe"},
	} {
		for _, fatal := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s fatal=%v", c.name, fatal), func(t *testing.T) {
				cfg := testbed.DefaultConfig()
				cfg.Device.Faults.DMAErrorFatal = fatal
				cfg.Device.Faults.HealthPoll = 10 * sim.Microsecond
				w, err := testbed.New(cfg)
				require.NoError(t, err)
				t.Cleanup(w.Close)
				eps, err := w.ConnectRC(testbed.ConnOpts{Timeout: 8, RetryCnt: 3, Access: all})
				require.NoError(t, err)
				req, rsp := eps[0], eps[1]
				_, err = rsp.QP.PostRecv([]provider.RecvWR{{WRID: 5, SGL: []provider.SGE{rsp.MR.SGE(0, 64)}}})
				require.NoError(t, err)
				setPlan(t, w, fmt.Sprintf(`{"rules":[{"point":%q,"action":"ur","nth":1,"match":{"node":%d,"target":%q}}]}`, c.point, c.node, c.target))
				n := uint32(64)
				if c.op == provider.WRAtomicFetchAdd {
					n = 8
				}
				req.QP.SetBlueFlame(false)
				_, err = req.QP.PostSend([]provider.SendWR{{WRID: 1, Opcode: c.op, Flags: provider.SendSignaled,
					SGL: []provider.SGE{req.MR.SGE(0, n)}, RemoteAddr: rsp.Buf.Addr, RKey: rsp.MR.RKey}})
				require.NoError(t, err)
				wc := waitOne(t, req.SendCQ) // fatal: a flush, or RETRY_EXC_ERR from the peer of a dead device
				dead, synd := w.Hosts[c.node].Dev.Fatal()
				require.Equal(t, fatal, dead, "device fatal")
				if fatal {
					require.Equal(t, uint8(0x8), synd)
					return
				}
				switch {
				case c.target == "cqe":
					require.Equal(t, uint64(1), hctr(w.Hosts[1], device.CtrCQErrorAccess), "the responder's CQ in error")
				case c.node == 0:
					require.Equal(t, provider.WCLocProtErr, wc.Status)
					require.Equal(t, uint32(device.VendorPCIe), wc.VendorErr)
				default:
					require.Equal(t, provider.WCRemOpErr, wc.Status, "NAK remote operational error")
					require.Equal(t, provider.QPStateErr, qpState(t, rsp.QP))
					if c.op == provider.WRSend {
						rwc := waitOne(t, rsp.RecvCQ)
						require.Equal(t, provider.WCLocProtErr, rwc.Status)
						require.Equal(t, uint32(device.VendorPCIe), rwc.VendorErr, "a PCIe error, as the requester reports one")
					}
				}
			})
		}
	}
}

// setPlan gives both devices of w a plan built once addresses are known
// (device hook points only: the wire keeps its own).
// TestFaultDMAMatchQPN: match.qpn at dma.read and dma.write names the QP
// whose work the access is (its payload, its CQE). The DMA engine used to
// know a QP only for WQE fetches, so every other DMA event had QPN 0 and
// a rule with a qpn never fired, while faults --explain promised "the
// 1st read of QP 0x100". A qpn of another QP still matches nothing.
func TestFaultDMAMatchQPN(t *testing.T) {
	for _, c := range []struct {
		name   string
		point  string
		action string
		target string
		node   int
		other  bool // match a QPN the world does not have
		want   provider.WCStatus
		ctr    string // counter on the node of the rule
	}{
		{name: "requester payload read", point: "dma.read", action: "timeout", target: "data", node: 0, want: provider.WCLocProtErr, ctr: device.CtrReqCQEError.String()},
		{name: "responder data write", point: "dma.write", action: "poison", target: "data", node: 1, want: provider.WCRemOpErr, ctr: device.CtrNAKsSent.String()},
		{name: "CQE write", point: "dma.write", action: "ur", target: "cqe", node: 0, ctr: device.CtrCQErrorAccess.String()},
		{name: "requester payload read, another QP", point: "dma.read", action: "timeout", target: "data", node: 0, other: true, want: provider.WCSuccess},
		{name: "responder data write, another QP", point: "dma.write", action: "poison", target: "data", node: 1, other: true, want: provider.WCSuccess},
	} {
		t.Run(c.name, func(t *testing.T) {
			w, req, rsp := faultWorld(t, "", nil)
			qpn := []*testbed.Endpoint{req, rsp}[c.node].QP.QPN()
			if c.other {
				qpn += 0x10
			}
			setPlan(t, w, fmt.Sprintf(`{"rules":[{"point":%q,"action":%q,"nth":1,"match":{"node":%d,"qpn":%d,"target":%q}}]}`,
				c.point, c.action, c.node, qpn, c.target))
			writeWR(t, req, rsp, 1, 0, 64)
			fired := func() uint64 {
				return hctr(w.Hosts[c.node], fault.CounterName(fault.Point(c.point), mustAction(c.action)))
			}
			if c.target == "cqe" {
				noStall(t, req.SendCQ) // the CQ is in error: the CQE never lands
				require.Equal(t, uint64(1), fired())
				require.Equal(t, uint64(1), hctr(w.Hosts[0], c.ctr))
				return
			}
			wc := waitOne(t, req.SendCQ)
			require.Equal(t, c.want, wc.Status)
			if c.other {
				require.Zero(t, fired(), "a rule for another QP")
				return
			}
			require.Equal(t, uint64(1), fired())
			require.NotZero(t, hctr(w.Hosts[c.node], c.ctr))
		})
	}
}

// TestRecvLKeyVendor: a receive whose SGE's lkey fails completes
// LOC_PROT_ERR with vendor_err 0x32, as a ConnectX reported a bad lkey on
// an SRQ receive (faults.md §1.2, ucx#9167), on every QP type, on the
// QP's own RQ and on an SRQ; a PCIe error writing the buffer keeps 0x51.
// The vendor syndrome used to be 0 for the key failure.
func TestRecvLKeyVendor(t *testing.T) {
	for _, c := range []struct {
		name   string
		typ    provider.QPType
		srq    bool
		plan   string // a fault plan instead of the bad lkey
		vendor uint32
	}{
		{name: "RC", typ: provider.QPTypeRC, vendor: device.VendorRecvLKey},
		{name: "RC SRQ", typ: provider.QPTypeRC, srq: true, vendor: device.VendorRecvLKey},
		{name: "UC", typ: provider.QPTypeUC, vendor: device.VendorRecvLKey},
		{name: "UD", typ: provider.QPTypeUD, vendor: device.VendorRecvLKey},
		{name: "UD SRQ", typ: provider.QPTypeUD, srq: true, vendor: device.VendorRecvLKey},
		{name: "RC PCIe error", typ: provider.QPTypeRC, plan: `{"rules":[{"point":"dma.write","action":"poison","nth":1,"match":{"node":1,"target":"data"}}]}`, vendor: device.VendorPCIe},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := testbed.DefaultConfig()
			if c.plan != "" {
				p, err := fault.Parse([]byte(c.plan))
				require.NoError(t, err)
				cfg.Faults = p
			}
			w, err := testbed.New(cfg)
			require.NoError(t, err)
			t.Cleanup(w.Close)
			eps, err := w.ConnectRC(testbed.ConnOpts{Type: c.typ, SRQ: c.srq})
			require.NoError(t, err)
			req, rsp := eps[0], eps[1]
			sge := rsp.MR.SGE(0, 256)
			if c.plan == "" {
				sge.LKey ^= 0x5500
			}
			recv := []provider.RecvWR{{WRID: 7, SGL: []provider.SGE{sge}}}
			if c.srq {
				_, err = rsp.SRQ.PostRecv(recv)
			} else {
				_, err = rsp.QP.PostRecv(recv)
			}
			require.NoError(t, err)
			wr := provider.SendWR{WRID: 1, Opcode: provider.WRSend, Flags: provider.SendSignaled, SGL: []provider.SGE{req.MR.SGE(0, 64)}}
			if c.typ == provider.QPTypeUD {
				wr.AH, wr.RemoteQPN, wr.RemoteQKey = req.AH, rsp.QP.QPN(), rsp.QKey
			}
			_, err = req.QP.PostSend([]provider.SendWR{wr})
			require.NoError(t, err)
			rwc := waitOne(t, rsp.RecvCQ)
			require.Equal(t, uint64(7), rwc.WRID)
			require.Equal(t, provider.WCLocProtErr, rwc.Status)
			require.Equal(t, c.vendor, rwc.VendorErr)
		})
	}
}

func setPlan(t *testing.T, w *testbed.World, plan string) {
	t.Helper()
	p, err := fault.Parse([]byte(plan))
	require.NoError(t, err)
	in := fault.NewInjector(p)
	for _, h := range w.Hosts {
		h.Dev.SetFaults(in)
	}
}

func mustAction(s string) fault.Action {
	var a fault.Action
	if err := a.UnmarshalText([]byte(s)); err != nil {
		panic(err)
	}
	return a
}

func TestFaultPCIeTLP(t *testing.T) {
	t.Run("MWr lost: the doorbell never arrives", func(t *testing.T) {
		w, req, rsp := faultWorld(t, `{"rules":[{"point":"pcie.tlp","action":"drop","nth":1,"match":{"tlp":"MWr","node":0}}]}`, nil)
		req.QP.SetBlueFlame(false)
		writeWR(t, req, rsp, 1, 0, 64)
		noStall(t, req.SendCQ)
		require.Equal(t, uint64(1), hctr(w.Hosts[0], "fault_mmio_tlp"))
	})
	t.Run("MRd UR reads all ones", func(t *testing.T) {
		w, _, _ := faultWorld(t, `{"rules":[{"point":"pcie.tlp","action":"ur","nth":1,"match":{"tlp":"MRd","node":0}}]}`, nil)
		require.Equal(t, uint32(0xffffffff), w.Hosts[0].CPU.Load32(mlx5.InitSegFWRev))
		require.NotEqual(t, uint32(0xffffffff), w.Hosts[0].CPU.Load32(mlx5.InitSegFWRev))
	})
}

func TestFaultCQ(t *testing.T) {
	t.Run("lost CQE", func(t *testing.T) {
		w, req, rsp := faultWorld(t, `{"rules":[{"point":"cq","action":"drop","nth":1,"match":{"node":0}}]}`, nil)
		writeWR(t, req, rsp, 1, 0, 64)
		noStall(t, req.SendCQ)
		writeWR(t, req, rsp, 2, 64, 64)
		require.Equal(t, uint64(2), waitOne(t, req.SendCQ).WRID)
		require.Equal(t, uint64(1), hctr(w.Hosts[0], device.CtrFaultCQE))
	})
	t.Run("delayed CQE", func(t *testing.T) {
		w, req, rsp := faultWorld(t, `{"rules":[{"point":"cq","action":"delay","delay_ps":40000000,"nth":1,"match":{"node":0}}]}`, nil)
		start := w.Eng.Now()
		writeWR(t, req, rsp, 1, 0, 64)
		waitOne(t, req.SendCQ)
		require.Greater(t, w.Eng.Now()-start, sim.Time(40*sim.Microsecond))
	})
	t.Run("overrun: CQ error, EQE 0x04, CQ_ERR, QP fatal", func(t *testing.T) {
		w, req, rsp := faultWorld(t, `{"rules":[{"point":"cq","action":"overrun","nth":1,"match":{"node":0}}]}`, nil)
		writeWR(t, req, rsp, 1, 0, 64)
		noStall(t, req.SendCQ)
		h := w.Hosts[0]
		require.Equal(t, uint64(1), hctr(h, device.CtrCQOverrun))
		ev := asyncEvents(t, h)
		require.Contains(t, ev, mlx5.EventCQErr)
		require.Contains(t, ev, mlx5.EventQPFatal)
	})
	t.Run("overrun ignored with cqc.oi", func(t *testing.T) {
		w, req, rsp := faultWorld(t, `{"rules":[{"point":"cq","action":"overrun","nth":1,"match":{"node":0}}]}`, nil)
		require.NoError(t, w.Hosts[0].Dev.ModifyCQOverrunIgnore(req.SendCQ.CQN(), true))
		writeWR(t, req, rsp, 1, 0, 64)
		require.Equal(t, provider.WCSuccess, waitOne(t, req.SendCQ).Status)
		require.Equal(t, uint64(1), hctr(w.Hosts[0], device.CtrCQOverrunIgnored))
		require.Zero(t, hctr(w.Hosts[0], device.CtrCQOverrun))
	})
}

func TestFaultEQ(t *testing.T) {
	t.Run("async EQ overrun is device fatal 0xc", func(t *testing.T) {
		w, req, rsp := faultWorld(t, `{"rules":[{"point":"eq","action":"overrun","nth":1,"match":{"node":0}}]}`,
			func(c *testbed.Config) { c.Device.Faults.HealthPoll = 10 * sim.Microsecond })
		w.Hosts[0].Dev.SetLinkState(false) // raises PORT_ERR: an async EQE
		fatal, synd := w.Hosts[0].Dev.Fatal()
		require.True(t, fatal)
		require.Equal(t, uint8(0xc), synd)
		require.Equal(t, uint64(1), hctr(w.Hosts[0], device.CtrAsyncEQOverrun))
		_ = req
		_ = rsp
	})
	t.Run("completion EQ overrun freezes it", func(t *testing.T) {
		w, err := testbed.New(func() testbed.Config {
			c := testbed.DefaultConfig()
			c.Faults, _ = fault.Parse([]byte(`{"rules":[{"point":"eq","action":"overrun","nth":1,"match":{"node":1}}]}`))
			return c
		}())
		require.NoError(t, err)
		t.Cleanup(w.Close)
		eps, err := w.ConnectRC(testbed.ConnOpts{Channel: true})
		require.NoError(t, err)
		req, rsp := eps[0], eps[1]
		require.NoError(t, rsp.RecvCQ.ReqNotify(false))
		postRecvs(t, rsp, 1)
		sendMsg(t, req, 1, false)
		drain(t, rsp.RecvCQ, 1)
		noEvent(t, rsp.Channel)
		require.Equal(t, uint64(1), hctr(w.Hosts[1], device.CtrCompEQOverrun))
	})
}

func TestFaultPort(t *testing.T) {
	t.Run("down: retry exceeded 0x15/0x81, then flush 0xf9", func(t *testing.T) {
		w, req, rsp := faultWorld(t, `{"rules":[{"point":"port","action":"down","at_ps":1}]}`, nil)
		w.Eng.RunUntil(2)
		writeWR(t, req, rsp, 1, 0, 64)
		writeWR(t, req, rsp, 2, 64, 64)
		wcs := drain(t, req.SendCQ, 2)
		require.Equal(t, provider.WCRetryExcErr, wcs[0].Status)
		require.Equal(t, uint32(device.VendorRetryExceeded), wcs[0].VendorErr)
		require.Equal(t, provider.WCWRFlushErr, wcs[1].Status)
		require.Equal(t, uint32(device.VendorFlush), wcs[1].VendorErr)
		h := w.Hosts[0]
		require.Equal(t, uint64(3), hctr(h, device.CtrLocalACKTimeoutErr))
		require.Equal(t, uint64(1), hctr(h, device.CtrReqCQEFlushError))
		require.Contains(t, asyncEvents(t, h), mlx5.EventPortErr)
		untouched(t, rsp, 0, 0)
	})
	t.Run("flap: back in time, transparent", func(t *testing.T) {
		w, req, rsp := faultWorld(t, `{"rules":[{"point":"port","action":"down","at_ps":1,"for_ps":2000000,"match":{"node":0}}]}`, nil)
		w.Eng.RunUntil(2)
		writeWR(t, req, rsp, 1, 0, 64)
		require.Equal(t, provider.WCSuccess, waitOne(t, req.SendCQ).Status)
		ev := asyncEvents(t, w.Hosts[0])
		require.Equal(t, []mlx5.EventType{mlx5.EventPortErr, mlx5.EventPortActive}, ev)
		require.Equal(t, req.Buf.Bytes[:64], rsp.Buf.Bytes[:64])
	})
}

func TestFaultDeviceFatal(t *testing.T) {
	w, req, rsp := faultWorld(t, `{"rules":[{"point":"device","action":"fatal","at_ps":1000000000,"value":1,"match":{"node":0}}]}`,
		func(c *testbed.Config) { c.Device.Faults.HealthPoll = 50 * sim.Microsecond })
	h := w.Hosts[0]
	mmio := h.CPU
	hc0 := mmio.Load32(mlx5.InitSegHealthCount)
	// Work outstanding when FW dies: the peer does not answer (its link is
	// cut), so the WRITE waits for its ACK.
	w.Hosts[1].Dev.SetLinkState(false)
	writeWR(t, req, rsp, 1, 0, 64)
	landed := h.Dev.CQEsLanded()
	w.Eng.RunUntil(sim.Time(1001 * sim.Microsecond))
	fatal, synd := h.Dev.Fatal()
	require.True(t, fatal)
	require.Equal(t, uint8(1), synd)
	// Health buffer: rfr bit, synd byte; the heartbeat is frozen.
	require.Equal(t, uint32(1)<<31, beSwap(mmio.Load32(mlx5.InitSegHealth+0x38)))
	require.Equal(t, uint32(1)<<16, beSwap(mmio.Load32(mlx5.InitSegHealth+0x3c)))
	hc1 := mmio.Load32(mlx5.InitSegHealthCount)
	w.Eng.RunUntil(w.Eng.Now().Add(5 * sim.Millisecond))
	require.Equal(t, hc1, mmio.Load32(mlx5.InitSegHealthCount), "health counter frozen")
	require.NotEqual(t, hc0, hc1)
	// Commands fail; the driver flushes with vendor_err 5.
	// On either control path: EIO (mlx5_core's errno for INTERNAL_ERR),
	// which the provider matches as ErrClosed; the device's own path also
	// carries the command status.
	_, err := h.Ctx.AllocPD()
	require.ErrorIs(t, err, provider.ErrClosed)
	if h.Uverbs != nil {
		require.ErrorIs(t, err, syscall.EIO)
	} else {
		var ce *mlx5.CmdError
		require.True(t, errors.As(err, &ce), "%v", err)
		require.Equal(t, mlx5.StatusInternalErr, ce.Status)
		require.ErrorIs(t, err, mlx5.StatusInternalErr)
	}
	// The software flush (at the health poll, within the 5 ms run above)
	// counts as a CQE landing: a poller that sweeps its CQs only when
	// CQEsLanded moves (perf's bw loop) sees it. Before, it did not move,
	// and perf write_bw under a device fatal rule ended in "the run is
	// stuck" instead of WR_FLUSH_ERR.
	require.Equal(t, landed+1, h.Dev.CQEsLanded(), "the flushed WRITE")
	wc := waitOne(t, req.SendCQ)
	require.Equal(t, provider.WCWRFlushErr, wc.Status)
	require.Equal(t, uint32(device.VendorSWFlush), wc.VendorErr)
	require.Contains(t, asyncEvents(t, h), mlx5.EventDeviceFatal)
	// UAR pages are dead: a post vanishes.
	writeWR(t, req, rsp, 2, 64, 64)
	noStall(t, req.SendCQ)
	require.NotZero(t, hctr(h, device.CtrDeadUARStore))
	untouched(t, rsp, 0, 0)
	// Teardown still works, so that an application can clean up.
	require.NoError(t, req.QP.Destroy())
}

func beSwap(v uint32) uint32 { return v>>24 | v>>8&0xff00 | v<<8&0xff0000 | v<<24 }

func TestFaultPCIeLinkLoss(t *testing.T) {
	w, _, _ := faultWorld(t, `{"rules":[{"point":"device","action":"link_loss","at_ps":1000,"match":{"node":0}}]}`, nil)
	w.Eng.RunUntil(2000)
	require.Equal(t, uint32(0xffffffff), w.Hosts[0].CPU.Load32(mlx5.InitSegHealth+0x30))
	fatal, _ := w.Hosts[0].Dev.Fatal()
	require.True(t, fatal)
	require.NotZero(t, hctr(w.Hosts[0], device.CtrPCILinkLost))
}

// TestFaultDeterminism: the same plan and seed give the same trace.
func TestFaultDeterminism(t *testing.T) {
	const rules = `"rules":[{"point":"wc.buffer","action":"tear","prob":0.3},{"point":"dma.read","action":"delay","prob":0.2,"delay_ps":100000},
		{"point":"doorbell","action":"drop","prob":0.1},{"point":"wire.tx","action":"drop","prob":0.05}]}`
	plan := `{"seed":9,` + rules
	run := func(plan string) string {
		w, req, rsp := faultWorld(t, plan, nil)
		for i := 0; i < 20; i++ {
			writeWR(t, req, rsp, uint64(i), uint64(i)*64, 64)
		}
		_, _ = testbed.Wait(req.SendCQ, 20)
		var b bytes.Buffer
		for _, e := range w.Rec.Events() {
			fmt.Fprintf(&b, "%+v\n", e)
		}
		return b.String()
	}
	a, b := run(plan), run(plan)
	require.Equal(t, a, b)
	require.Contains(t, a, "fault")
	// The seed is what the probabilistic rules draw from: another seed,
	// another (again repeatable) run.
	other := `{"seed":10,` + rules
	c := run(other)
	require.NotEqual(t, a, c, "seed 10 gave the same faults as seed 9")
	require.Equal(t, c, run(other))
}

// TestFaultRandomPlans runs random plans against live traffic: nothing
// panics, and no QP is wedged without an error — a probe WR completes or
// errors (bounded: the wait ends when the simulation is idle).
func TestFaultRandomPlans(t *testing.T) {
	type opt struct{ pt, act, extra string }
	opts := []opt{
		{"doorbell", "drop", ""}, {"doorbell", "stale", ""}, {"doorbell", "jump", ""}, {"doorbell", "duplicate", ""}, {"doorbell", "reorder", ""},
		{"doorbell", "corrupt", `,"byte":-1`}, {"wc.buffer", "tear", ""}, {"wc.buffer", "reorder", ""}, {"wc.buffer", "drop", ""}, {"wc.buffer", "corrupt", ""},
		{"pcie.tlp", "drop", ""}, {"pcie.tlp", "corrupt", ""}, {"dma.read", "timeout", ""}, {"dma.read", "corrupt", ""}, {"dma.write", "poison", ""},
		{"dma.write", "delay", `,"delay_ps":500000`}, {"cq", "drop", ""}, {"cq", "corrupt", ""}, {"cq", "overrun", ""}, {"eq", "drop", ""},
		{"wire.tx", "drop", ""}, {"wire.rx", "corrupt", ""},
	}
	for seed := uint64(1); seed <= 24; seed++ {
		var rules []string
		for k := uint64(0); k < 3; k++ {
			o := opts[(seed*7+k*13)%uint64(len(opts))]
			rules = append(rules, fmt.Sprintf(`{"point":%q,"action":%q,"prob":0.%d%s}`, o.pt, o.act, 1+(seed+k)%4, o.extra))
		}
		plan := fmt.Sprintf(`{"seed":%d,"rules":[%s]}`, seed, joinComma(rules))
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			w, req, rsp := faultWorld(t, plan, nil)
			for i := 0; i < 16; i++ {
				writeWR(t, req, rsp, uint64(i), uint64(i)*64, 64)
				_, _ = req.SendCQ.Poll(make([]provider.WC, 4))
			}
			_, _ = testbed.Wait(req.SendCQ, 16)
			// The probe: completes, errors, or the QP reports an error.
			_, err := req.QP.PostSend([]provider.SendWR{{WRID: 99, Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
				SGL: []provider.SGE{req.MR.SGE(0, 8)}, RemoteAddr: rsp.Buf.Addr, RKey: rsp.MR.RKey}})
			if err != nil {
				return // refused (queue full after lost CQEs): an error, not a wedge
			}
			for i := 0; i < 64; i++ {
				wcs, werr := testbed.Wait(req.SendCQ, 1)
				if werr != nil && !errors.Is(werr, testbed.ErrTimeout) {
					return // the poll reported an error (a corrupt CQE)
				}
				if werr != nil || len(wcs) == 0 {
					break
				}
				if wcs[0].WRID == 99 || wcs[0].Status != provider.WCSuccess {
					return
				}
			}
			st, qerr := req.QP.QueryState()
			fatal, _ := w.Hosts[0].Dev.Fatal()
			lost := w.Hosts[0].Dev.Counters().Get(fault.CounterName(fault.Doorbell, fault.Drop)) +
				w.Hosts[0].Dev.Counters().Get(fault.CounterName(fault.CQ, fault.Drop)) +
				w.Hosts[0].Dev.Counters().Get("fault_mmio_tlp") + w.Hosts[0].Dev.Counters().Get("fault_wc_line") +
				w.Hosts[0].Dev.Counters().Get(fault.CounterName(fault.Doorbell, fault.Stale)) +
				w.Hosts[0].Dev.Counters().Value(device.CtrCQOverrun) + w.Hosts[0].Dev.Counters().Value(device.CtrCQErrorAccess)
			// Silence is allowed only where the reference says it is: a lost
			// doorbell / MMIO / CQE, or an errored CQ or device.
			require.True(t, qerr != nil || st == provider.QPStateErr || fatal || lost > 0,
				"QP wedged without an error under %s (state %v)", plan, st)
		})
	}
}

func joinComma(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += ","
		}
		out += x
	}
	return out
}

// TestEveryFaultIsCountedAndTraced fires each action of each device-side
// hook point once under a small mixed workload (BlueFlame and doorbell
// WRITEs, a SEND, a CQ arm): it must be counted under
// fault.CounterName(point, action) and recorded in the trace (component
// "fault"), and nothing may panic.
func TestEveryFaultIsCountedAndTraced(t *testing.T) {
	for _, pt := range fault.Points {
		if pt == fault.WireTx || pt == fault.WireRx || pt.Timed() {
			continue // the wire's own tests; timed points: TestFaultPort, TestFaultDeviceFatal
		}
		type variant struct{ an, name, match string }
		var vs []variant
		for _, an := range fault.ActionsAt(pt) {
			vs = append(vs, variant{an, an, `"match":{"node":0}`})
			if pt == fault.PCIeTLP {
				// Both TLP types: an action that fires on the one the
				// hook ignored used to count as fired and do nothing.
				vs = append(vs, variant{an, an + " MRd", `"match":{"node":0,"tlp":"MRd"}`}, variant{an, an + " MWr", `"match":{"node":0,"tlp":"MWr"}`})
			}
		}
		for _, vr := range vs {
			an, match := vr.an, vr.match
			a := mustAction(an)
			t.Run(string(pt)+" "+vr.name, func(t *testing.T) {
				extra := ""
				if a == fault.Delay {
					extra = `,"delay_ps":1000000`
				}
				plan := fmt.Sprintf(`{"seed":3,"rules":[{"point":%q,"action":%q,"nth":1%s,%s}]}`, pt, an, extra, match)
				w, req, rsp := faultWorld(t, plan, func(c *testbed.Config) { c.Device.Faults.HealthPoll = 10 * sim.Microsecond })
				require.NoError(t, req.SendCQ.ReqNotify(false))
				_ = w.Hosts[0].CPU.Load32(mlx5.InitSegFWRev)
				postRecvs(t, rsp, 1)
				sendMsg(t, req, 7, false)
				writeWR(t, req, rsp, 1, 0, 64)
				req.QP.SetBlueFlame(false)
				writeWR(t, req, rsp, 2, 64, 64)
				w.Hosts[0].Dev.SetLinkState(false) // an async EQE
				w.Hosts[0].Dev.SetLinkState(true)
				_, _ = testbed.Wait(req.SendCQ, 3)
				w.Settle(1 << 20)
				require.NotZero(t, hctr(w.Hosts[0], fault.CounterName(pt, a)), "not counted")
				// Every firing the injector reports is counted and traced
				// once: a hook that ignores a decision shows as a gap.
				fired := w.Injector.Fired()[0].Fired
				require.Equal(t, fired, hctr(w.Hosts[0], fault.CounterName(pt, a)), "fired %d times, counted otherwise", fired)
				traced := 0
				for _, e := range w.Rec.Events() {
					if e.Component == "fault" && e.Node == 0 {
						traced++
					}
				}
				require.GreaterOrEqual(t, uint64(traced), fired, "not every firing is in the trace")
			})
		}
	}
}

// TestTimedFaultsDeferred: with Config.DeferTimedFaults the timed rules
// wait for World.ArmTimedFaults and count from it; Drain stops when only
// timed rules are left, and EndTimedFaults stops those (the run ended
// first) and names them. Without it, Settle after connection setup ran
// the clock to the rule: a fatal at 1 s fired before the first post.
func TestTimedFaultsDeferred(t *testing.T) {
	deferred := func(c *testbed.Config) { c.DeferTimedFaults = true }
	tests := []struct {
		name   string
		plan   string
		at     sim.Duration // run the workload this long after arming (0: just drain it)
		fatal  bool         // node 0 dead at the end
		down   bool         // node 0's link down at the end
		unfire []int        // rules EndTimedFaults reports
	}{
		{name: "fatal at 1 s, a 2 µs write", plan: `{"rules":[{"point":"device","action":"fatal","at_ps":1000000000000}]}`, unfire: []int{0}},
		{name: "fatal 1 µs after arming", plan: `{"rules":[{"point":"device","action":"fatal","at_ps":1000000,"match":{"node":0}}]}`,
			at: 2 * sim.Microsecond, fatal: true},
		{name: "port down at 1 s", plan: `{"rules":[{"point":"port","action":"down","at_ps":1000000000000}]}`, unfire: []int{0}},
		{name: "port down 1 µs after arming, back after the run", plan: `{"rules":[{"point":"port","action":"down","at_ps":1000000,"for_ps":1000000000000,"match":{"node":0}}]}`,
			at: 2 * sim.Microsecond, down: true},
		{name: "one fires, one does not", plan: `{"rules":[{"point":"port","action":"down","at_ps":1000000,"for_ps":1000000,"match":{"node":1}},{"point":"device","action":"link_loss","at_ps":5000000000000}]}`,
			at: 3 * sim.Microsecond, unfire: []int{1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w, req, rsp := faultWorld(t, tc.plan, deferred)
			w.Settle(0) // connection setup: nothing armed yet
			require.Zero(t, w.TimedFaultsPending())
			require.Less(t, w.Eng.Now(), sim.Time(sim.Millisecond), "the settle ran the clock to a rule")
			origin := w.ArmTimedFaults()
			require.Equal(t, w.Eng.Now(), origin)
			require.NotZero(t, w.TimedFaultsPending())
			if tc.at > 0 {
				w.Eng.RunUntil(origin.Add(tc.at))
			}
			writeWR(t, req, rsp, 1, 0, 64)
			if !tc.fatal && !tc.down {
				require.Equal(t, provider.WCSuccess, waitOne(t, req.SendCQ).Status)
				require.Equal(t, req.Buf.Bytes[:64], rsp.Buf.Bytes[:64])
			}
			w.Drain(0)
			require.Equal(t, w.TimedFaultsPending(), w.Eng.Pending(), "Drain left workload events")
			var got []int
			for _, s := range w.EndTimedFaults() {
				got = append(got, s.Rule)
			}
			require.Equal(t, tc.unfire, got)
			require.Zero(t, w.Eng.Pending())
			end := w.Eng.Now()
			w.Settle(0)
			require.Equal(t, end, w.Eng.Now(), "a stopped rule still ran the clock")
			fatal, _ := w.Hosts[0].Dev.Fatal()
			require.Equal(t, tc.fatal, fatal)
			if tc.down {
				require.NotZero(t, hctr(w.Hosts[0], device.CtrLinkDown))
				require.Zero(t, hctr(w.Hosts[0], device.CtrLinkUp))
			}
		})
	}
	t.Run("re-arming moves the origin, a fired rule stays fired", func(t *testing.T) {
		w, _, _ := faultWorld(t, `{"rules":[{"point":"port","action":"down","at_ps":1000000,"for_ps":1000,"match":{"node":0}},
			{"point":"device","action":"fatal","at_ps":10000000,"match":{"node":1}}]}`, deferred)
		o1 := w.ArmTimedFaults()
		w.Eng.RunUntil(o1.Add(2 * sim.Microsecond)) // the flap is over, the fatal not due
		o2 := w.ArmTimedFaults()
		w.Eng.RunUntil(o2.Add(9 * sim.Microsecond))
		fatal, _ := w.Hosts[1].Dev.Fatal()
		require.False(t, fatal, "the fatal kept the first origin")
		w.Eng.RunUntil(o2.Add(11 * sim.Microsecond))
		fatal, _ = w.Hosts[1].Dev.Fatal()
		require.True(t, fatal)
		st := w.Injector.Fired()
		require.Equal(t, uint64(1), st[0].Fired, "the port went down again")
		require.Equal(t, uint64(1), st[1].Fired)
	})
	t.Run("without DeferTimedFaults: from the start of the simulation", func(t *testing.T) {
		w, _, _ := faultWorld(t, `{"rules":[{"point":"device","action":"fatal","at_ps":1000,"match":{"node":0}}]}`, nil)
		w.Eng.RunUntil(2000)
		fatal, _ := w.Hosts[0].Dev.Fatal()
		require.True(t, fatal)
	})
}

// TestEndTimedFaultsBusyForEver: a workload that never idles (a SEND with
// no receive posted, RNR retry infinite) still ends: EndTimedFaults
// drains at most its bound, and the timed rule is stopped, not fired.
func TestEndTimedFaultsBusyForEver(t *testing.T) {
	w, req, _ := faultWorld(t, `{"rules":[{"point":"device","action":"fatal","at_ps":1000000000000000}]}`,
		func(c *testbed.Config) { c.DeferTimedFaults = true })
	w.Settle(0)
	w.ArmTimedFaults()
	_, err := req.QP.PostSend([]provider.SendWR{{WRID: 1, Opcode: provider.WRSend, Flags: provider.SendSignaled, SGL: []provider.SGE{req.MR.SGE(0, 8)}}})
	require.NoError(t, err)
	done := make(chan []fault.Scheduled, 1)
	go func() { done <- w.EndTimedFaults() }()
	select {
	case notFired := <-done:
		require.Len(t, notFired, 1)
		require.Zero(t, w.TimedFaultsPending())
		require.Positive(t, w.Eng.Pending(), "the RNR loop is still going")
	case <-time.After(60 * time.Second):
		t.Fatal("EndTimedFaults did not return on a busy simulation")
	}
}

// TestDBRReadErrorFatal: a PCIe error (UR) on the responder's reads of a
// doorbell record — its RQ's, its SRQ's, its receive CQ's (read when the
// CQ looks full, and its arm word, read back at an arm) — is a device
// fatal error with faults.dma_error_fatal,
// as on the other DMA accesses; those reads used to ignore the switch and
// only count the error.
func TestDBRReadErrorFatal(t *testing.T) {
	for _, which := range []string{"RQ", "SRQ", "CQ", "CQ arm"} {
		for _, fatal := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s fatal=%v", which, fatal), func(t *testing.T) {
				cfg := testbed.DefaultConfig()
				cfg.Device.Faults.DMAErrorFatal = fatal
				cfg.Device.Faults.HealthPoll = 10 * sim.Microsecond
				w, err := testbed.New(cfg)
				require.NoError(t, err)
				t.Cleanup(w.Close)
				o := testbed.ConnOpts{Timeout: 8, RetryCnt: 3, SRQ: which == "SRQ"}
				if which == "CQ" {
					o.CQDepth = 4
				}
				eps, err := w.ConnectRC(o)
				require.NoError(t, err)
				req, rsp := eps[0], eps[1]
				match := `"node":1,"target":"dbr"`
				if a := rsp.RecvCQ.Info().DBRAddr; which == "CQ" {
					match += fmt.Sprintf(`,"addr_from":%d,"addr_to":%d`, a, a+3)
				} else if which == "CQ arm" {
					match += fmt.Sprintf(`,"addr_from":%d,"addr_to":%d`, a+4, a+7)
				}
				setPlan(t, w, fmt.Sprintf(`{"rules":[{"point":"dma.read","action":"ur","nth":1,"match":{%s}}]}`, match))
				if which == "CQ arm" {
					require.NoError(t, rsp.RecvCQ.ReqNotify(false))
				}
				n := 1
				if which == "CQ" {
					n = rsp.RecvCQ.Info().Entries + 1
				}
				for i := range n {
					wr := []provider.RecvWR{{WRID: uint64(i), SGL: []provider.SGE{rsp.MR.SGE(uint64(i)*64, 64)}}}
					if which == "SRQ" {
						_, err = rsp.SRQ.PostRecv(wr)
					} else {
						_, err = rsp.QP.PostRecv(wr)
					}
					require.NoError(t, err)
				}
				for i := range n {
					_, err = req.QP.PostSend([]provider.SendWR{{WRID: uint64(i), Opcode: provider.WRSend, Flags: provider.SendSignaled, SGL: []provider.SGE{req.MR.SGE(0, 64)}}})
					require.NoError(t, err)
				}
				w.Settle(0)
				ctr := map[string]trace.Counter{"RQ": device.CtrRQDBRReadError, "SRQ": device.CtrSRQDBRReadError, "CQ": device.CtrCQDBRReadError, "CQ arm": device.CtrCQDBRReadError}[which]
				require.Equal(t, uint64(1), hctr(w.Hosts[1], ctr), "the record read failed, counted")
				dead, synd := w.Hosts[1].Dev.Fatal()
				require.Equal(t, fatal, dead, "device fatal")
				if fatal {
					require.Equal(t, uint8(0x8), synd)
				}
			})
		}
	}
}
