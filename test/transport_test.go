package test

import (
	"testing"

	"github.com/softnic/softnic/device"
	"github.com/softnic/softnic/fault"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/testbed"
	"github.com/stretchr/testify/require"
)

// faulty builds a two-NIC world whose wire applies rules, and connects a
// QP pair on it.
func faulty(t *testing.T, o testbed.ConnOpts, rules ...fault.Rule) (*testbed.World, *testbed.Endpoint, *testbed.Endpoint) {
	t.Helper()
	cfg := testbed.DefaultConfig()
	if len(rules) > 0 {
		cfg.Faults = &fault.Plan{Seed: 1, Rules: rules}
	}
	w, err := testbed.New(cfg)
	require.NoError(t, err)
	t.Cleanup(w.Close)
	eps, err := w.ConnectRC(o)
	require.NoError(t, err)
	return w, eps[0], eps[1]
}

func node(n int) *int { return &n }

func opc(o roce.Opcode) *uint8 { v := uint8(o); return &v }

func ctr(w *testbed.World, n int, name string) uint64 { return w.Hosts[n].Dev.Counters().Get(name) }

func qpState(t *testing.T, qp *provider.QP) provider.QPState {
	t.Helper()
	st, err := qp.QueryState()
	require.NoError(t, err)
	return st
}

// TestLossRecoveredByTimeout: each of the packets whose loss nothing but
// the local ACK timer can detect — the last packet of a WRITE, its ACK, a
// READ request, a READ response — is dropped once; the operation completes
// successfully after one timeout, with the data intact.
func TestLossRecoveredByTimeout(t *testing.T) {
	cases := []struct {
		name string
		op   provider.WROpcode
		size int
		rule fault.Rule
	}{
		{"last WRITE packet", provider.WRRDMAWrite, 3000, fault.Rule{Point: fault.WireTx, Action: fault.Drop, Nth: 1,
			Match: fault.Match{Node: node(0), Opcode: opc(roce.OpRCWriteLast)}}},
		{"the ACK", provider.WRRDMAWrite, 3000, fault.Rule{Point: fault.WireTx, Action: fault.Drop, Nth: 1,
			Match: fault.Match{Node: node(1), Opcode: opc(roce.OpRCAck)}}},
		{"the READ request", provider.WRRDMARead, 3000, fault.Rule{Point: fault.WireTx, Action: fault.Drop, Nth: 1,
			Match: fault.Match{Node: node(0), Opcode: opc(roce.OpRCReadRequest)}}},
		{"the last READ response", provider.WRRDMARead, 3000, fault.Rule{Point: fault.WireTx, Action: fault.Drop, Nth: 1,
			Match: fault.Match{Node: node(1), Opcode: opc(roce.OpRCReadResponseLast)}}},
		{"a SEND ONLY", provider.WRSend, 500, fault.Rule{Point: fault.WireTx, Action: fault.Drop, Nth: 1,
			Match: fault.Match{Node: node(0), Opcode: opc(roce.OpRCSendOnly)}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w, req, rsp := faulty(t, testbed.ConnOpts{Timeout: 8}, c.rule)
			src, dst := req.Buf.Bytes[:c.size], rsp.Buf.Bytes[:c.size]
			if c.op == provider.WRRDMARead {
				src, dst = dst, src
			}
			fill(src, 0x42)
			if c.op == provider.WRSend {
				_, err := rsp.QP.PostRecv([]provider.RecvWR{{WRID: 3, SGL: []provider.SGE{rsp.MR.SGE(0, 4096)}}})
				require.NoError(t, err)
			}
			_, err := req.QP.PostSend([]provider.SendWR{{WRID: 7, Opcode: c.op, Flags: provider.SendSignaled,
				SGL: []provider.SGE{req.MR.SGE(0, uint32(c.size))}, RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey}})
			require.NoError(t, err)
			start := w.Eng.Now()
			wc := waitOne(t, req.SendCQ)
			require.Equal(t, provider.WCSuccess, wc.Status)
			require.Equal(t, uint64(7), wc.WRID)
			require.Equal(t, src, dst)
			require.Equal(t, uint64(1), ctr(w, 0, device.CtrLocalACKTimeoutErr.String()), "exactly one timeout")
			// 4.096 µs · 2^8 ≈ 1.05 ms: recovery took one timeout, not more.
			el := w.Eng.Now().Sub(start)
			require.Greater(t, el, 1048*sim.Microsecond)
			require.Less(t, el, 2*1048*sim.Microsecond)
			require.Equal(t, provider.QPStateRTS, qpState(t, req.QP))
		})
	}
}

// TestRetryExceeded: a peer that never answers is reported. With
// retry_cnt 2 the WQE completes with RETRY_EXC_ERR after three timeouts,
// the QP goes to ERR and the WQE behind it is flushed.
func TestRetryExceeded(t *testing.T) {
	w, req, rsp := faulty(t, testbed.ConnOpts{Timeout: 6, RetryCnt: 2},
		fault.Rule{Point: fault.WireTx, Action: fault.Drop, Match: fault.Match{Node: node(1)}})
	before := append([]byte(nil), req.Buf.Bytes...)
	wrs := []provider.SendWR{
		{WRID: 1, Opcode: provider.WRRDMAWrite, SGL: []provider.SGE{req.MR.SGE(0, 100)}, RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey},
		{WRID: 2, Opcode: provider.WRRDMARead, Flags: provider.SendSignaled, SGL: []provider.SGE{req.MR.SGE(100, 100)}, RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey},
	}
	_, err := req.QP.PostSend(wrs)
	require.NoError(t, err)
	wcs, err := testbed.Wait(req.SendCQ, 2)
	require.NoError(t, err)
	require.Equal(t, provider.WCRetryExcErr, wcs[0].Status, "unsignalled, but an error CQE is always written")
	require.Equal(t, uint64(1), wcs[0].WRID)
	require.Equal(t, provider.WCWRFlushErr, wcs[1].Status)
	require.Equal(t, uint64(2), wcs[1].WRID)
	require.Equal(t, provider.QPStateErr, qpState(t, req.QP))
	require.Equal(t, uint64(2), ctr(w, 0, device.CtrLocalACKTimeoutErr.String()), "two retries, then the third expiry fails")
	require.Equal(t, uint64(1), ctr(w, 0, device.CtrReqTransportRetriesExceeded.String()))
	require.Equal(t, before, req.Buf.Bytes, "the READ placed nothing")
	w.Settle(0)
	require.Zero(t, w.Eng.Pending(), "no timer left behind")
}

// TestRetryCnt7: retry_cnt 7 is seven retries on a ConnectX; the rxe
// profile switch makes it infinite.
func TestRetryCnt7(t *testing.T) {
	for _, inf := range []bool{false, true} {
		cfg := testbed.DefaultConfig()
		cfg.Device.Transport.RetryCnt7Infinite = inf
		cfg.Faults = &fault.Plan{Rules: []fault.Rule{{Point: fault.WireTx, Action: fault.Drop, Match: fault.Match{Node: node(1)}}}}
		w, err := testbed.New(cfg)
		require.NoError(t, err)
		defer w.Close()
		eps, err := w.ConnectRC(testbed.ConnOpts{Timeout: 1})
		require.NoError(t, err)
		req := eps[0]
		_, err = req.QP.PostSend([]provider.SendWR{{WRID: 1, Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
			SGL: []provider.SGE{req.MR.SGE(0, 8)}, RemoteAddr: eps[1].MR.Addr, RKey: eps[1].MR.RKey}})
		require.NoError(t, err)
		if !inf {
			wc := waitOne(t, req.SendCQ)
			require.Equal(t, provider.WCRetryExcErr, wc.Status)
			require.Equal(t, uint64(7), ctr(w, 0, device.CtrLocalACKTimeoutErr.String()))
			continue
		}
		w.Eng.RunUntil(w.Eng.Now().Add(100 * sim.Millisecond)) // ≈ 12000 timeouts of 8.2 µs
		n, err := req.SendCQ.Poll(make([]provider.WC, 1))
		require.NoError(t, err)
		require.Zero(t, n, "still retrying")
		require.Greater(t, ctr(w, 0, device.CtrLocalACKTimeoutErr.String()), uint64(10000))
	}
}

// TestRNRRetryExceeded: with rnr_retry 2 and no receive ever posted, the
// SEND completes with RNR_RETRY_EXC_ERR after three RNR NAKs.
func TestRNRRetryExceeded(t *testing.T) {
	w, req, _ := faulty(t, testbed.ConnOpts{MinRNR: 1, RNRRetry: 2})
	_, err := req.QP.PostSend([]provider.SendWR{{WRID: 4, Opcode: provider.WRSend, Flags: provider.SendSignaled,
		SGL: []provider.SGE{req.MR.SGE(0, 10)}}})
	require.NoError(t, err)
	wc := waitOne(t, req.SendCQ)
	require.Equal(t, provider.WCRNRRetryExcErr, wc.Status)
	require.Equal(t, uint64(3), ctr(w, 1, device.CtrRNRNAKsSent.String()))
	require.Equal(t, uint64(3), ctr(w, 1, device.CtrOutOfBuffer.String()))
	require.Equal(t, uint64(2), ctr(w, 0, device.CtrRNRNakRetryErr.String()))
	require.Equal(t, uint64(1), ctr(w, 0, device.CtrReqRNRRetriesExceeded.String()))
	require.Equal(t, provider.QPStateErr, qpState(t, req.QP))
}

// TestReadResponsesOutOfOrder: a READ response lost in the middle makes the
// later ones arrive out of order; the requester asks again for the rest
// (one re-request, not one per packet) and later WQEs are not blocked.
func TestReadResponsesOutOfOrder(t *testing.T) {
	w, req, rsp := faulty(t, testbed.ConnOpts{MTU: 1024, BufSize: 64 << 10},
		fault.Rule{Point: fault.WireTx, Action: fault.Drop, Nth: 2, Match: fault.Match{Node: node(1), Opcode: opc(roce.OpRCReadResponseMiddle)}})
	fill(rsp.Buf.Bytes[:16<<10], 0x11)
	fill(req.Buf.Bytes[16<<10:17<<10], 0x22)
	_, err := req.QP.PostSend([]provider.SendWR{
		{WRID: 1, Opcode: provider.WRRDMARead, Flags: provider.SendSignaled, SGL: []provider.SGE{req.MR.SGE(0, 16<<10)}, RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey},
		{WRID: 2, Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled, SGL: []provider.SGE{req.MR.SGE(16<<10, 1024)}, RemoteAddr: rsp.MR.Addr + 32<<10, RKey: rsp.MR.RKey},
	})
	require.NoError(t, err)
	wcs, err := testbed.Wait(req.SendCQ, 2)
	require.NoError(t, err)
	require.Equal(t, provider.WCSuccess, wcs[0].Status)
	require.Equal(t, provider.WCSuccess, wcs[1].Status)
	require.Equal(t, rsp.Buf.Bytes[:16<<10], req.Buf.Bytes[:16<<10])
	require.Equal(t, req.Buf.Bytes[16<<10:17<<10], rsp.Buf.Bytes[32<<10:33<<10])
	require.Greater(t, ctr(w, 0, device.CtrReadRespOOO.String()), uint64(1))
	require.Equal(t, uint64(1), ctr(w, 0, device.CtrImpliedNAKSeqErr.String()), "one re-request for the gap")
	require.Equal(t, uint64(1), ctr(w, 1, device.CtrReplayRead.String()))
	require.Zero(t, ctr(w, 0, device.CtrLocalACKTimeoutErr.String()), "recovered without waiting for the timer")
}

// TestNAKLostWithPacket: a packet and the PSN-sequence NAK it causes are
// both lost; the responder NAKs again when it sees the retransmission, and
// the message completes.
func TestNAKLostWithPacket(t *testing.T) {
	w, req, rsp := faulty(t, testbed.ConnOpts{MTU: 256, BufSize: 64 << 10, Timeout: 10},
		fault.Rule{Point: fault.WireTx, Action: fault.Drop, Nth: 3, Match: fault.Match{Node: node(0)}},
		fault.Rule{Point: fault.WireTx, Action: fault.Drop, Nth: 1, Match: fault.Match{Node: node(1), Opcode: opc(roce.OpRCAck)}})
	fill(req.Buf.Bytes[:8192], 0x77)
	writeWR(t, req, rsp, 1, 0, 8192)
	wc := waitOne(t, req.SendCQ)
	require.Equal(t, provider.WCSuccess, wc.Status)
	require.Equal(t, req.Buf.Bytes[:8192], rsp.Buf.Bytes[:8192])
	require.GreaterOrEqual(t, ctr(w, 1, device.CtrNAKsSent.String()), uint64(1))
	require.Equal(t, provider.QPStateRTS, qpState(t, req.QP))
}

// TestOneWRPerPostAsSlotsFree: a small SQ kept full with one WR per post,
// a new one each time a completion frees a slot, with sizes that make a
// later, smaller WQE fetch finish before an earlier one. Every WR must
// complete (the fetch engine reassembles by WQE index).
func TestOneWRPerPostAsSlotsFree(t *testing.T) {
	for _, bf := range []bool{false, true} {
		w, req, rsp := faulty(t, testbed.ConnOpts{SQDepth: 8, MaxSGE: 16, BufSize: 64 << 10, CQDepth: 64})
		req.QP.SetBlueFlame(bf)
		const total = 400
		posted, done := 0, 0
		post := func() {
			nsge := 1 + (posted*7)%13 // 1..13 SGEs: WQEs of 1..4 basic blocks
			sgl := make([]provider.SGE, nsge)
			for i := range sgl {
				sgl[i] = req.MR.SGE(uint64(i*64), 64)
			}
			_, err := req.QP.PostSend([]provider.SendWR{{WRID: uint64(posted), Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
				SGL: sgl, RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey}})
			require.NoError(t, err)
			posted++
		}
		for i := 0; i < 8; i++ {
			post()
		}
		wcs := make([]provider.WC, 8)
		for done < total {
			n, err := req.SendCQ.Poll(wcs)
			require.NoError(t, err)
			require.NotZero(t, n, "SQ stalled after %d of %d completions (bf=%v)", done, total, bf)
			for _, wc := range wcs[:n] {
				require.Equal(t, provider.WCSuccess, wc.Status)
				require.Equal(t, uint64(done), wc.WRID)
				done++
				if posted < total {
					post()
				}
			}
		}
		require.Zero(t, w.Hosts[0].Dev.Counters().Get("wqe_fetch_stale"))
	}
}

// TestRNRThenReceivePosted: a message that consumes a receive arrives when
// none is posted, draws RNR NAKs, and completes once a receive is posted
// late, with its data and immediate in place. A WRITE_WITH_IMM ONLY used
// to leave its WRITE open at the responder after the RNR NAK, so its
// retransmission was "a First while a message is open": NAK invalid
// request, REM_INV_REQ_ERR, both QPs in ERR.
func TestRNRThenReceivePosted(t *testing.T) {
	cases := []struct {
		name string
		op   provider.WROpcode
		size int
	}{
		{"WRITE_WITH_IMM only", provider.WRRDMAWriteImm, 100},
		{"WRITE_WITH_IMM multi-packet", provider.WRRDMAWriteImm, 3000},
		{"WRITE_WITH_IMM zero length", provider.WRRDMAWriteImm, 0},
		{"SEND only", provider.WRSend, 100},
		{"SEND multi-packet", provider.WRSend, 3000},
		{"SEND_WITH_IMM only", provider.WRSendImm, 100},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w, req, rsp := faulty(t, testbed.ConnOpts{MTU: 1024, MinRNR: 1, RNRRetry: 7})
			fill(req.Buf.Bytes[:tc.size], 0x5a)
			wr := provider.SendWR{WRID: 1, Opcode: tc.op, Flags: provider.SendSignaled, Imm: 0xfeedbeef,
				RemoteAddr: rsp.MR.Addr + 0x8000, RKey: rsp.MR.RKey}
			if tc.size > 0 {
				wr.SGL = []provider.SGE{req.MR.SGE(0, uint32(tc.size))}
			}
			_, err := req.QP.PostSend([]provider.SendWR{wr})
			require.NoError(t, err)
			for i := 0; i < 100000 && ctr(w, 1, device.CtrRNRNAKsSent.String()) < 3; i++ {
				w.Eng.Step()
			}
			require.GreaterOrEqual(t, ctr(w, 1, device.CtrRNRNAKsSent.String()), uint64(3), "RNR NAKs while no receive is posted")
			_, err = rsp.QP.PostRecv([]provider.RecvWR{{WRID: 9, SGL: []provider.SGE{rsp.MR.SGE(0, 4096)}}})
			require.NoError(t, err)
			wc := waitOne(t, req.SendCQ)
			require.Equal(t, provider.WCSuccess, wc.Status, "vendor %#x", wc.VendorErr)
			rwc := waitOne(t, rsp.RecvCQ)
			require.Equal(t, provider.WCSuccess, rwc.Status)
			require.Equal(t, uint64(9), rwc.WRID)
			require.Equal(t, uint32(tc.size), rwc.ByteLen)
			at := 0
			if tc.op == provider.WRRDMAWriteImm {
				at = 0x8000
			}
			require.Equal(t, req.Buf.Bytes[:tc.size], rsp.Buf.Bytes[at:at+tc.size])
			if tc.op != provider.WRSend {
				require.Equal(t, uint32(0xfeedbeef), rwc.Imm)
			}
			require.Equal(t, provider.QPStateRTS, qpState(t, req.QP))
			require.Equal(t, provider.QPStateRTS, qpState(t, rsp.QP))
		})
	}
}

// TestDuplicatedNAKCostsOneRetry: the network delivers a PSN-sequence NAK
// twice. The second copy asks again for the go-back the first one started,
// with nothing acknowledged in between: it goes back again but costs no
// retry of its own. Each copy used to spend one, so with retry_cnt 1 a single lost
// packet and a duplicated NAK ended the WRITE RETRY_EXC_ERR on a wire that
// lost nothing else (softnic rdma over udp: with only duplicates and
// reordering in the fault plan ended a 4 MiB WRITE so).
func TestDuplicatedNAKCostsOneRetry(t *testing.T) {
	w, req, rsp := faulty(t, testbed.ConnOpts{MTU: 256, BufSize: 64 << 10, Timeout: 10, RetryCnt: 1},
		fault.Rule{Point: fault.WireTx, Action: fault.Drop, Nth: 3, Match: fault.Match{Node: node(0)}},
		fault.Rule{Point: fault.WireTx, Action: fault.Duplicate, Match: fault.Match{Node: node(1), Opcode: opc(roce.OpRCAck)}})
	fill(req.Buf.Bytes[:8192], 0x78)
	writeWR(t, req, rsp, 1, 0, 8192)
	wc := waitOne(t, req.SendCQ)
	require.Equal(t, provider.WCSuccess, wc.Status)
	require.Equal(t, req.Buf.Bytes[:8192], rsp.Buf.Bytes[:8192])
	require.Equal(t, uint64(2), ctr(w, 0, device.CtrPacketSeqErr.String()), "the NAK and its copy")
	require.Equal(t, uint64(2), ctr(w, 0, device.CtrRoceAdpRetrans.String()), "a go-back for each copy")
	require.Equal(t, uint64(1), ctr(w, 0, device.CtrNAKSeqRepeat.String()), "the copy, counted")
	require.Equal(t, provider.QPStateRTS, qpState(t, req.QP))
}

// TestPSNNeverArrivesEndsInRetryExceeded: a packet the wire drops every
// time it is sent draws a NAK, then the same NAK again at each go-back
// (which spends no retry); the ACK timer, left running by those, still
// ends the WRITE RETRY_EXC_ERR after retry_cnt timeouts.
func TestPSNNeverArrivesEndsInRetryExceeded(t *testing.T) {
	psn := uint32(0x1002) // the third packet of the first WQE (ConnOpts' PSN 0x1000)
	w, req, rsp := faulty(t, testbed.ConnOpts{MTU: 256, BufSize: 64 << 10, Timeout: 8, RetryCnt: 3},
		fault.Rule{Point: fault.WireTx, Action: fault.Drop, Match: fault.Match{Node: node(0), PSN: &psn}})
	writeWR(t, req, rsp, 1, 0, 8192)
	wc := waitOne(t, req.SendCQ)
	require.Equal(t, provider.WCRetryExcErr, wc.Status)
	require.NotZero(t, ctr(w, 0, device.CtrNAKSeqRepeat.String()), "the NAK came again at each go-back")
	require.Equal(t, uint64(1), ctr(w, 0, device.CtrReqTransportRetriesExceeded.String()))
	require.Equal(t, provider.QPStateErr, qpState(t, req.QP))
}
