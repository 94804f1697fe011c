package test

import (
	"fmt"

	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/device"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/testbed"
)

// pingPong runs n SEND (or WRITE) ping-pongs of size bytes between two QPs
// as ib_send_lat / ib_write_lat do — each side reposts its receive, then
// answers — and returns the mean half round trip in virtual time.
func pingPong(t *testing.T, op provider.WROpcode, size, n int, prefetch bool) (sim.Duration, *testbed.World) {
	t.Helper()
	cfg := testbed.DefaultConfig()
	cfg.Device.Core.RQPrefetch = prefetch
	w, err := testbed.New(cfg)
	require.NoError(t, err)
	t.Cleanup(w.Close)
	eps, err := w.ConnectRC(testbed.ConnOpts{MTU: 1024, BufSize: 8192, MaxInline: 256})
	require.NoError(t, err)
	post := func(e *testbed.Endpoint, peer *testbed.Endpoint) {
		wr := provider.SendWR{WRID: 1, Opcode: op, Flags: provider.SendSignaled | provider.SendInline,
			SGL: []provider.SGE{e.MR.SGE(0, uint32(size))}}
		if op == provider.WRRDMAWriteImm {
			wr.RemoteAddr, wr.RKey = peer.MR.Addr, peer.MR.RKey
		}
		_, err := e.QP.PostSend([]provider.SendWR{wr})
		require.NoError(t, err)
	}
	recv := func(e *testbed.Endpoint) {
		_, err := e.QP.PostRecv([]provider.RecvWR{{WRID: 2, SGL: []provider.SGE{e.MR.SGE(4096, 4096)}}})
		require.NoError(t, err)
	}
	recv(eps[0])
	recv(eps[1])
	w.Settle(0)
	start := w.Eng.Now()
	for i := 0; i < n; i++ {
		for side := 0; side < 2; side++ {
			me, peer := eps[side], eps[1-side]
			post(me, peer)
			wc := waitOne(t, peer.RecvCQ) // the peer sees the message
			require.Equal(t, provider.WCSuccess, wc.Status)
			recv(peer)
			require.Equal(t, provider.WCSuccess, waitOne(t, me.SendCQ).Status)
		}
	}
	return w.Eng.Now().Sub(start) / sim.Duration(2*n), w
}

// TestRQPrefetchSendLikeWrite: with the receive WQE read ahead, a SEND
// ping-pong costs what a WRITE-with-immediate ping-pong costs (both
// consume a receive WQE), as ib_send_lat ≈ ib_write_lat on a CX-5; without
// it every SEND pays the doorbell-record and WQE reads at the responder.
func TestRQPrefetchSendLikeWrite(t *testing.T) {
	send, w := pingPong(t, provider.WRSend, 2, 20, true)
	write, _ := pingPong(t, provider.WRRDMAWriteImm, 2, 20, true)
	sendNoPre, _ := pingPong(t, provider.WRSend, 2, 20, false)
	t.Logf("2 B half round trip: SEND %v, WRITE_IMM %v, SEND without RQ prefetch %v", send, write, sendNoPre)
	require.InEpsilon(t, float64(write), float64(send), 0.03, "SEND within 3%% of WRITE_IMM")
	require.Greater(t, float64(sendNoPre), 1.3*float64(send), "read-ahead takes two serial DMA reads off the critical path")
	hits := w.Hosts[1].Dev.Counters().Value(device.CtrRQPrefetchHit)
	require.GreaterOrEqual(t, hits, uint64(19), "the responder found its WQE read ahead (%d hits)", hits)
}

// A receive posted long after the poll burst gave up is still found: the
// message falls back to fetching it, and the world goes idle in between
// (the burst is bounded).
func TestRQPrefetchBoundedAndFallback(t *testing.T) {
	w, req, rsp := connect(t, testbed.ConnOpts{MTU: 1024, BufSize: 8192})
	w.Settle(0)
	require.Zero(t, w.Eng.Pending(), "the RTR poll burst ends")
	// 1 ms later nobody polls any more; post, then send.
	w.Eng.RunUntil(w.Eng.Now() + sim.Time(sim.Millisecond))
	_, err := rsp.QP.PostRecv([]provider.RecvWR{{WRID: 7, SGL: []provider.SGE{rsp.MR.SGE(0, 4096)}}})
	require.NoError(t, err)
	_, err = req.QP.PostSend([]provider.SendWR{{WRID: 8, Opcode: provider.WRSend, Flags: provider.SendSignaled,
		SGL: []provider.SGE{req.MR.SGE(0, 64)}}})
	require.NoError(t, err)
	require.Equal(t, provider.WCSuccess, waitOne(t, rsp.RecvCQ).Status)
	require.Equal(t, provider.WCSuccess, waitOne(t, req.SendCQ).Status)
	ctr := rsp.Host.Dev.Counters()
	require.Zero(t, ctr.Value(device.CtrRQPrefetchHit), "nothing was read ahead: the message fetched its WQE")
	w.Settle(0)
	require.Zero(t, w.Eng.Pending(), "the burst after the consumed WQE ends too")
}

// A WQE read ahead is flushed exactly once when the QP goes to ERR.
func TestRQPrefetchFlush(t *testing.T) {
	w, req, rsp := connect(t, testbed.ConnOpts{MTU: 1024, BufSize: 8192})
	_, err := rsp.QP.PostRecv([]provider.RecvWR{{WRID: 1, SGL: []provider.SGE{rsp.MR.SGE(0, 4096)}}, {WRID: 2, SGL: []provider.SGE{rsp.MR.SGE(4096, 4096)}}})
	require.NoError(t, err)
	w.Settle(0)
	require.Positive(t, rsp.Host.Dev.Counters().Value(device.CtrRQPrefetch))
	require.NoError(t, rsp.QP.Modify(&provider.QPAttr{QPState: provider.QPStateErr}, mlx5.AttrState))
	w.Settle(0)
	wcs, err := testbed.Wait(rsp.RecvCQ, 2)
	require.NoError(t, err)
	require.Equal(t, []uint64{1, 2}, []uint64{wcs[0].WRID, wcs[1].WRID})
	for _, wc := range wcs {
		require.Equal(t, provider.WCWRFlushErr, wc.Status)
	}
	n, err := rsp.RecvCQ.Poll(make([]provider.WC, 4))
	require.NoError(t, err)
	require.Zero(t, n, "no third completion")
	_ = req
}

// A device fatal error during the receive-WQE read-ahead's poll burst
// ends it: the dead device reads no doorbell record (before, the burst's
// timer kept polling, each read failing on the dead link with a warning).
func TestRQPrefetchStopsOnFatal(t *testing.T) {
	w, _, rsp := connect(t, testbed.ConnOpts{MTU: 1024, BufSize: 8192})
	require.NotZero(t, w.Eng.Pending(), "the RTR poll burst runs")
	rsp.Host.Dev.EnterFatal(w.Eng.Now(), 1, "test")
	reads := hctr(rsp.Host, device.CtrRQPrefetch)
	w.Settle(0)
	require.Zero(t, hctr(rsp.Host, device.CtrRQDBRReadError), "no poll of the dead device")
	require.Equal(t, reads, hctr(rsp.Host, device.CtrRQPrefetch))
}

// TestRQPrefetchRingSizes: receive queues smaller than, as large as and
// larger than the read-ahead's sixteen slots, each wrapped many times
// (ring and slots), on RC, UC and UD, with receives posted one at a time
// behind the messages and in bursts that fill the ring: every message
// lands in the buffer of the WQE posted for it, completes with that WQE's
// wr_id, in order, and checked mode finds nothing wrong.
func TestRQPrefetchRingSizes(t *testing.T) {
	types := []struct {
		name string
		typ  provider.QPType
	}{{"RC", provider.QPTypeRC}, {"UC", provider.QPTypeUC}, {"UD", provider.QPTypeUD}}
	for _, tc := range types {
		for _, depth := range []int{1, 2, 4, 8, 16, 32} {
			t.Run(fmt.Sprintf("%s/%d", tc.name, depth), func(t *testing.T) {
				cfg := testbed.DefaultConfig()
				cfg.Check = true
				w, err := testbed.New(cfg)
				require.NoError(t, err)
				t.Cleanup(w.Close)
				eps, err := w.ConnectRC(testbed.ConnOpts{MTU: 1024, BufSize: 64 << 10, RQDepth: depth, SQDepth: 64, Type: tc.typ})
				require.NoError(t, err)
				req, rsp := eps[0], eps[1]
				const slot, msgs = 256, 120
				depth := rsp.QP.SQInfo().RQWQEs // what the provider made of it
				nextRecv, nextSend, done := 0, 0, 0
				post := func(k int) {
					for ; k > 0 && nextRecv-done < depth; k-- {
						off := uint64(nextRecv%64) * slot
						_, err := rsp.QP.PostRecv([]provider.RecvWR{{WRID: uint64(1000 + nextRecv), SGL: []provider.SGE{rsp.MR.SGE(off, slot)}}})
						require.NoError(t, err)
						nextRecv++
					}
				}
				send := func() {
					b := req.Buf.Bytes[nextSend%64*slot:]
					for i := range 64 {
						b[i] = byte(nextSend + i)
					}
					wr := provider.SendWR{WRID: uint64(nextSend), Opcode: provider.WRSend, Flags: provider.SendSignaled,
						SGL: []provider.SGE{req.MR.SGE(uint64(nextSend%64*slot), 64)}}
					if tc.typ == provider.QPTypeUD {
						wr.AH, wr.RemoteQPN, wr.RemoteQKey = req.AH, rsp.QP.QPN(), rsp.QKey
					}
					_, err := req.QP.PostSend([]provider.SendWR{wr})
					require.NoError(t, err)
					nextSend++
				}
				for round := 0; done < msgs; round++ {
					if round%2 == 0 {
						post(1)
					} else {
						post(depth)
					}
					w.Settle(0)
					for nextSend < nextRecv {
						send()
					}
					wcs, err := testbed.Wait(rsp.RecvCQ, nextSend-done)
					require.NoError(t, err)
					for _, wc := range wcs {
						require.Equal(t, provider.WCSuccess, wc.Status, "message %d", done)
						require.Equal(t, uint64(1000+done), wc.WRID, "in order")
						off := tc.typ == provider.QPTypeUD // 40-byte GRH first
						got := rsp.Buf.Bytes[done%64*slot:]
						if off {
							got = got[40:]
						}
						for i := range 64 {
							require.Equal(t, byte(done+i), got[i], "message %d byte %d", done, i)
						}
						done++
					}
					_, err = testbed.Wait(req.SendCQ, len(wcs))
					require.NoError(t, err)
				}
				require.Zero(t, rsp.Host.Dev.Counters().Value(device.CtrRQReadError))
				require.Positive(t, rsp.Host.Dev.Counters().Value(device.CtrRQPrefetchHit))
				require.Empty(t, w.Hosts[1].Dev.Checker().Violations(), "checked mode")
			})
		}
	}
}

// TestRQWQEUnreadable: the responder's receive WQEs cannot be read (every
// DMA read of its RQ ring fails: the read-ahead's and the message's own).
// Each message that needs one consumes it with an error completion,
// LOC_PROT_ERR with vendor 0x51 as for a receive buffer the device cannot
// write: RC NAKs remote operational error (REM_OP_ERR at the requester)
// and goes to ERR, UC and UD go to ERR (UD used to complete each receive
// in error and carry on in RTS). Before, an unreadable WQE was taken for "none posted": RC
// answered RNR for ever (rnr_retry 7), UC and UD dropped the messages, and
// the posted WQEs never completed. With faults.dma_error_fatal the first
// failed read, the read-ahead's, is a device fatal error.
func TestRQWQEUnreadable(t *testing.T) {
	types := []struct {
		name string
		typ  provider.QPType
	}{{"RC", provider.QPTypeRC}, {"UC", provider.QPTypeUC}, {"UD", provider.QPTypeUD}}
	for _, tc := range types {
		for _, fatal := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/fatal=%v", tc.name, fatal), func(t *testing.T) {
				cfg := testbed.DefaultConfig()
				cfg.Device.Faults.DMAErrorFatal = fatal
				w, err := testbed.New(cfg)
				require.NoError(t, err)
				t.Cleanup(w.Close)
				eps, err := w.ConnectRC(testbed.ConnOpts{MTU: 1024, BufSize: 64 << 10, Type: tc.typ})
				require.NoError(t, err)
				req, rsp := eps[0], eps[1]
				in := rsp.QP.SQInfo()
				setPlan(t, w, fmt.Sprintf(`{"rules":[{"point":"dma.read","action":"iommu","match":{"node":1,"addr_from":%d,"addr_to":%d}}]}`,
					in.RQAddr, in.RQAddr+uint64(in.RQWQEs*in.RQStride)-1))
				_, err = rsp.QP.PostRecv([]provider.RecvWR{{WRID: 5, SGL: []provider.SGE{rsp.MR.SGE(0, 4096)}}, {WRID: 6, SGL: []provider.SGE{rsp.MR.SGE(4096, 4096)}}})
				require.NoError(t, err)
				w.Settle(0)
				if fatal {
					dead, synd := rsp.Host.Dev.Fatal()
					require.True(t, dead, "the read-ahead's PCIe error is fatal")
					require.Equal(t, uint8(0x8), synd)
					return
				}
				sendTwo(t, req, rsp, tc.typ)
				require.Less(t, w.Settle(1<<20), 1<<20, "the world goes idle")
				rwcs, err := testbed.Wait(rsp.RecvCQ, 2)
				require.NoError(t, err, "both receives complete")
				require.Equal(t, uint64(5), rwcs[0].WRID)
				require.Equal(t, provider.WCLocProtErr, rwcs[0].Status)
				require.Equal(t, uint32(0x51), rwcs[0].VendorErr)
				require.Equal(t, uint64(6), rwcs[1].WRID)
				swcs, err := testbed.Wait(req.SendCQ, 2)
				require.NoError(t, err)
				st, err := rsp.QP.QueryState()
				require.NoError(t, err)
				switch tc.typ {
				case provider.QPTypeRC:
					require.Equal(t, provider.WCWRFlushErr, rwcs[1].Status)
					require.Equal(t, provider.WCRemOpErr, swcs[0].Status)
					require.Equal(t, provider.QPStateErr, st)
				default: // UC and UD: a receive that completes in error takes the QP to ERR
					require.Equal(t, provider.WCWRFlushErr, rwcs[1].Status)
					require.Equal(t, provider.QPStateErr, st)
				}
				require.Zero(t, hctr(rsp.Host, device.CtrOutOfBuffer), "no RNR: the WQEs are posted")
			})
		}
	}
}

// TestRQPrefetchFlushPartlyConsumed: twenty receives posted, three
// consumed (the read-ahead holds some of the rest, not all), then the QP
// goes to ERR: the other seventeen are flushed exactly once, in order,
// each with its own wr_id.
func TestRQPrefetchFlushPartlyConsumed(t *testing.T) {
	w, req, rsp := connect(t, testbed.ConnOpts{MTU: 1024, BufSize: 64 << 10, RQDepth: 32})
	var wrs []provider.RecvWR
	for i := range 20 {
		wrs = append(wrs, provider.RecvWR{WRID: uint64(100 + i), SGL: []provider.SGE{rsp.MR.SGE(uint64(i)*1024, 1024)}})
	}
	_, err := rsp.QP.PostRecv(wrs)
	require.NoError(t, err)
	for i := range 3 {
		_, err = req.QP.PostSend([]provider.SendWR{{WRID: uint64(i), Opcode: provider.WRSend, Flags: provider.SendSignaled, SGL: []provider.SGE{req.MR.SGE(0, 64)}}})
		require.NoError(t, err)
	}
	wcs, err := testbed.Wait(rsp.RecvCQ, 3)
	require.NoError(t, err)
	for i, wc := range wcs {
		require.Equal(t, uint64(100+i), wc.WRID)
	}
	w.Settle(0)
	require.Positive(t, rsp.Host.Dev.Counters().Value(device.CtrRQPrefetchHit))
	require.NoError(t, rsp.QP.Modify(&provider.QPAttr{QPState: provider.QPStateErr}, mlx5.AttrState))
	flushed := pollAll(t, w, rsp.RecvCQ)
	require.Len(t, flushed, 17, "each posted WQE once")
	for i, wc := range flushed {
		require.Equal(t, provider.WCWRFlushErr, wc.Status)
		require.Equal(t, uint64(103+i), wc.WRID, "in order")
	}
}

// TestRQPrefetchResetReuse: receives read ahead, some consumed, then the
// QP goes to RESET and back to RTS: the cache of the old incarnation is
// gone, and the new receives (other buffers, other wr_ids) get the new
// messages.
func TestRQPrefetchResetReuse(t *testing.T) {
	cfg := testbed.DefaultConfig()
	cfg.Check = true
	w, err := testbed.New(cfg)
	require.NoError(t, err)
	t.Cleanup(w.Close)
	eps, err := w.ConnectRC(testbed.ConnOpts{MTU: 1024, BufSize: 64 << 10, RQDepth: 32})
	require.NoError(t, err)
	req, rsp := eps[0], eps[1]
	var wrs []provider.RecvWR
	for i := range 10 {
		wrs = append(wrs, provider.RecvWR{WRID: uint64(100 + i), SGL: []provider.SGE{rsp.MR.SGE(uint64(i)*1024, 1024)}})
	}
	_, err = rsp.QP.PostRecv(wrs)
	require.NoError(t, err)
	send := func(seed byte) {
		fill(req.Buf.Bytes[:64], seed)
		_, err := req.QP.PostSend([]provider.SendWR{{WRID: uint64(seed), Opcode: provider.WRSend, Flags: provider.SendSignaled, SGL: []provider.SGE{req.MR.SGE(0, 64)}}})
		require.NoError(t, err)
		_, err = testbed.Wait(req.SendCQ, 1)
		require.NoError(t, err)
	}
	send(1)
	send(2)
	_, err = testbed.Wait(rsp.RecvCQ, 2)
	require.NoError(t, err)
	w.Settle(0)
	reconnect(t, eps, [2]uint32{0x5000, 0x6000}, provider.ConnectAttr{MTU: 1024, SGIDIndex: 1, HopLimit: 64,
		MaxRdAtomic: 16, MaxDestRdAtomic: 16, MinRNRTimer: 12, Timeout: 14, RetryCnt: 7, RNRRetry: 7})
	_, err = rsp.QP.PostRecv([]provider.RecvWR{{WRID: 900, SGL: []provider.SGE{rsp.MR.SGE(40<<10, 1024)}}, {WRID: 901, SGL: []provider.SGE{rsp.MR.SGE(41<<10, 1024)}}})
	require.NoError(t, err)
	send(0x40)
	send(0x41)
	wcs, err := testbed.Wait(rsp.RecvCQ, 2)
	require.NoError(t, err)
	for i, wc := range wcs {
		require.Equal(t, provider.WCSuccess, wc.Status)
		require.Equal(t, uint64(900+i), wc.WRID)
		want := make([]byte, 64)
		fill(want, byte(0x40+i))
		require.Equal(t, want, rsp.Buf.Bytes[(40+i)<<10:(40+i)<<10+64], "message %d in the new WQE's buffer", i)
	}
	require.Empty(t, rsp.Host.Dev.Checker().Violations())
}

// TestRQPrefetchLKeyCheckedAtUse: a receive WQE read ahead whose MR is
// deregistered before a message uses it fails when it is used (the lkey
// is checked at placement, not when the WQE was read): LOC_PROT_ERR on
// RC, UC and UD, and the QP goes to ERR, the WQE behind it flushed (on UD
// it used to take the next datagram: the QP stayed in RTS).
func TestRQPrefetchLKeyCheckedAtUse(t *testing.T) {
	for _, tc := range []struct {
		name string
		typ  provider.QPType
	}{{"RC", provider.QPTypeRC}, {"UC", provider.QPTypeUC}, {"UD", provider.QPTypeUD}} {
		t.Run(tc.name, func(t *testing.T) {
			w, req, rsp := connect(t, testbed.ConnOpts{MTU: 1024, BufSize: 64 << 10, Type: tc.typ})
			ob, err := rsp.Host.Ctx.AllocBuffer(4096, 4096)
			require.NoError(t, err)
			mr2, err := rsp.PD.RegMR(ob.Addr, 4096, provider.AccessLocalWrite)
			require.NoError(t, err)
			_, err = rsp.QP.PostRecv([]provider.RecvWR{{WRID: 5, SGL: []provider.SGE{mr2.SGE(0, 4096)}}, {WRID: 6, SGL: []provider.SGE{rsp.MR.SGE(0, 4096)}}})
			require.NoError(t, err)
			w.Settle(0)
			require.Positive(t, rsp.Host.Dev.Counters().Value(device.CtrRQPrefetch), "read ahead")
			require.NoError(t, mr2.Dereg())
			sendTwo(t, req, rsp, tc.typ)
			wcs := pollAll(t, w, rsp.RecvCQ)
			require.Len(t, wcs, 2)
			require.Equal(t, uint64(5), wcs[0].WRID)
			require.Equal(t, provider.WCLocProtErr, wcs[0].Status)
			require.Equal(t, uint64(6), wcs[1].WRID)
			require.Equal(t, provider.WCWRFlushErr, wcs[1].Status, "the QP went to ERR")
		})
	}
}

// TestRQPrefetchCheckedOnce: checked mode judges a receive WQE (R12) once,
// when a message takes it, whether it was read ahead or not: twenty
// receives without the terminator, twelve messages, twelve violations,
// one per WQE used, in order.
func TestRQPrefetchCheckedOnce(t *testing.T) {
	cfg := testbed.DefaultConfig()
	cfg.Check = true
	w, err := testbed.New(cfg)
	require.NoError(t, err)
	t.Cleanup(w.Close)
	eps, err := w.ConnectRC(testbed.ConnOpts{MaxSGE: 4, RQDepth: 32})
	require.NoError(t, err)
	req, rsp := eps[0], eps[1]
	rsp.QP.SetBugs(provider.BugRecvNoTerminator)
	for i := range 20 {
		_, err = rsp.QP.PostRecv([]provider.RecvWR{{WRID: uint64(i), SGL: []provider.SGE{rsp.MR.SGE(0, 256)}}})
		require.NoError(t, err)
	}
	w.Settle(0)
	for i := range 12 {
		_, err = req.QP.PostSend([]provider.SendWR{{WRID: uint64(i), Opcode: provider.WRSend, Flags: provider.SendSignaled, SGL: []provider.SGE{req.MR.SGE(0, 64)}}})
		require.NoError(t, err)
	}
	_, err = testbed.Wait(rsp.RecvCQ, 12)
	require.NoError(t, err)
	w.Settle(0)
	require.Positive(t, rsp.Host.Dev.Counters().Value(device.CtrRQPrefetchHit))
	vs := w.Hosts[1].Dev.Checker().Violations()
	require.Len(t, vs, 12)
	for i, v := range vs {
		require.Equal(t, "R12", v.Rule)
		require.Contains(t, v.Observed, fmt.Sprintf("receive WQE %d:", i))
	}
}

// sendTwo posts two signaled 64-byte SENDs (WR ids 0 and 1) from req to
// rsp on a QP of type typ (UD: addressed to rsp's QP).
func sendTwo(t *testing.T, req, rsp *testbed.Endpoint, typ provider.QPType) {
	t.Helper()
	for i := range 2 {
		wr := provider.SendWR{WRID: uint64(i), Opcode: provider.WRSend, Flags: provider.SendSignaled, SGL: []provider.SGE{req.MR.SGE(0, 64)}}
		if typ == provider.QPTypeUD {
			wr.AH, wr.RemoteQPN, wr.RemoteQKey = req.AH, rsp.QP.QPN(), rsp.QKey
		}
		_, err := req.QP.PostSend([]provider.SendWR{wr})
		require.NoError(t, err)
	}
}
