package test

import (
	"encoding/binary"
	"testing"

	"github.com/softnic/softnic/device"
	"github.com/softnic/softnic/fault"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/testbed"
	"github.com/stretchr/testify/require"
)

// snapshot copies both hosts' registered buffers.
func snapshot(req, rsp *testbed.Endpoint) [2][]byte {
	return [2][]byte{append([]byte(nil), req.Buf.Bytes...), append([]byte(nil), rsp.Buf.Bytes...)}
}

// sameBytes fails at the first differing byte (without dumping MBs).
func sameBytes(t *testing.T, want, got []byte, what string) {
	t.Helper()
	require.Equal(t, len(want), len(got))
	for i := range want {
		if want[i] != got[i] {
			t.Fatalf("%s: byte %d changed: %#x → %#x", what, i, want[i], got[i])
		}
	}
}

// TestErrorClasses drives every verbs error class end to end. For each it
// checks the failing WQE's status (and syndrome, through the vendor
// error), the QP state, that the WQE behind it is flushed, the counter,
// and that no byte of either MR changed outside the range the operation
// may write.
func TestErrorClasses(t *testing.T) {
	type env struct {
		w        *testbed.World
		req, rsp *testbed.Endpoint
	}
	cases := []struct {
		name     string
		opts     testbed.ConnOpts
		rules    []fault.Rule
		wr       func(e env) provider.SendWR
		status   provider.WCStatus
		synd     uint32 // vendor_err is not checked when 0
		node     int    // whose counter
		counter  string
		rspState provider.QPState  // the responder's state afterwards
		rspRecv  provider.WCStatus // non-zero: the responder's receive completes with this
		// rspWrites is a range of the responder's MR the failed operation
		// may have written (a receive buffer the SEND partly filled).
		rspWrites [2]int
	}{
		{name: "local QP operation (atomic with two result buffers)", wr: func(e env) provider.SendWR {
			return provider.SendWR{Opcode: provider.WRAtomicFetchAdd, SGL: []provider.SGE{e.req.MR.SGE(0, 8), e.req.MR.SGE(8, 8)}, RemoteAddr: e.rsp.MR.Addr, RKey: e.rsp.MR.RKey}
		}, status: provider.WCLocQPOpErr, counter: device.CtrWQEMalformed.String(), rspState: provider.QPStateRTS},
		{name: "local length at the responder (SEND larger than the receive buffer)", wr: func(e env) provider.SendWR {
			_, err := e.rsp.QP.PostRecv([]provider.RecvWR{{WRID: 50, SGL: []provider.SGE{e.rsp.MR.SGE(4096, 64)}}})
			if err != nil {
				panic(err)
			}
			return provider.SendWR{Opcode: provider.WRSend, SGL: []provider.SGE{e.req.MR.SGE(0, 100)}}
		}, status: provider.WCRemInvReqErr, rspRecv: provider.WCLocLenErr, node: 1, counter: device.CtrRespLocalLengthError.String(), rspState: provider.QPStateErr,
			rspWrites: [2]int{4096, 4096 + 64}},
		{name: "local protection (bad lkey)", wr: func(e env) provider.SendWR {
			s := e.req.MR.SGE(0, 64)
			s.LKey ^= 0x4400
			return provider.SendWR{Opcode: provider.WRRDMAWrite, SGL: []provider.SGE{s}, RemoteAddr: e.rsp.MR.Addr, RKey: e.rsp.MR.RKey}
		}, status: provider.WCLocProtErr, counter: device.CtrWQEBadLKey.String(), rspState: provider.QPStateRTS},
		{name: "remote access (bad rkey)", wr: func(e env) provider.SendWR {
			return provider.SendWR{Opcode: provider.WRRDMAWrite, SGL: []provider.SGE{e.req.MR.SGE(0, 64)}, RemoteAddr: e.rsp.MR.Addr, RKey: e.rsp.MR.RKey ^ 0x1100}
		}, status: provider.WCRemAccessErr, node: 0, counter: device.CtrReqRemoteAccessErrors.String(), rspState: provider.QPStateErr},
		{name: "remote access (READ out of bounds)", wr: func(e env) provider.SendWR {
			return provider.SendWR{Opcode: provider.WRRDMARead, SGL: []provider.SGE{e.req.MR.SGE(0, 64)}, RemoteAddr: e.rsp.MR.Addr + e.rsp.MR.Length - 32, RKey: e.rsp.MR.RKey}
		}, status: provider.WCRemAccessErr, node: 1, counter: device.CtrRespRemoteAccessErrors.String(), rspState: provider.QPStateErr},
		{name: "remote invalid request (misaligned atomic)", opts: testbed.ConnOpts{Access: provider.AccessLocalWrite | provider.AccessRemoteAtomic},
			wr: func(e env) provider.SendWR {
				return provider.SendWR{Opcode: provider.WRAtomicFetchAdd, SGL: []provider.SGE{e.req.MR.SGE(0, 8)}, RemoteAddr: e.rsp.MR.Addr + 4, RKey: e.rsp.MR.RKey, CompareAdd: 1}
			}, status: provider.WCRemInvReqErr, node: 1, counter: device.CtrRxAtomicMisaligned.String(), rspState: provider.QPStateErr},
		{name: "remote invalid request (READ without remote-read access)", opts: testbed.ConnOpts{Access: provider.AccessLocalWrite | provider.AccessRemoteWrite},
			wr: func(e env) provider.SendWR {
				return provider.SendWR{Opcode: provider.WRRDMARead, SGL: []provider.SGE{e.req.MR.SGE(0, 8)}, RemoteAddr: e.rsp.MR.Addr, RKey: e.rsp.MR.RKey}
			}, status: provider.WCRemInvReqErr, node: 0, counter: device.CtrReqRemoteInvalidRequest.String(), rspState: provider.QPStateErr},
		{name: "remote operational (receive buffer outside its MR)", wr: func(e env) provider.SendWR {
			_, err := e.rsp.QP.PostRecv([]provider.RecvWR{{WRID: 50, SGL: []provider.SGE{{Addr: e.rsp.MR.Addr, Length: 64, LKey: e.rsp.MR.LKey ^ 0x2200}}}})
			if err != nil {
				panic(err)
			}
			return provider.SendWR{Opcode: provider.WRSend, SGL: []provider.SGE{e.req.MR.SGE(0, 64)}}
		}, status: provider.WCRemOpErr, node: 1, counter: device.CtrRxRecvProt.String(), rspState: provider.QPStateErr},
		{name: "retry exceeded (peer gone)", opts: testbed.ConnOpts{Timeout: 4, RetryCnt: 3},
			rules: []fault.Rule{{Point: fault.WireTx, Action: fault.Drop, Match: fault.Match{Node: node(0)}}},
			wr: func(e env) provider.SendWR {
				return provider.SendWR{Opcode: provider.WRRDMAWrite, SGL: []provider.SGE{e.req.MR.SGE(0, 64)}, RemoteAddr: e.rsp.MR.Addr, RKey: e.rsp.MR.RKey}
			}, status: provider.WCRetryExcErr, counter: device.CtrReqTransportRetriesExceeded.String(), rspState: provider.QPStateRTS},
		{name: "RNR retry exceeded", opts: testbed.ConnOpts{MinRNR: 1, RNRRetry: 1}, wr: func(e env) provider.SendWR {
			return provider.SendWR{Opcode: provider.WRSend, SGL: []provider.SGE{e.req.MR.SGE(0, 64)}}
		}, status: provider.WCRNRRetryExcErr, counter: device.CtrReqRNRRetriesExceeded.String(), rspState: provider.QPStateRTS},
		{name: "bad response (an ACK-only answer to a READ is corrupted into a WRITE response)",
			rules: []fault.Rule{{Point: fault.WireTx, Action: fault.Drop, Match: fault.Match{Node: node(1), Opcode: opc(roce.OpRCReadResponseOnly)}}},
			wr:    nil, status: provider.WCBadRespErr, counter: device.CtrRxResponseBadOpcode.String(), rspState: provider.QPStateRTS},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w, req, rsp := faulty(t, c.opts, c.rules...)
			e := env{w, req, rsp}
			fill(req.Buf.Bytes, 1)
			fill(rsp.Buf.Bytes, 2)
			before := snapshot(req, rsp)
			var wr provider.SendWR
			if c.wr == nil {
				// A forged READ RESPONSE for a WRITE: the requester must
				// fail the WRITE with BAD_RESP, not place the bytes.
				wr = provider.SendWR{Opcode: provider.WRRDMAWrite, SGL: []provider.SGE{req.MR.SGE(0, 64)}, RemoteAddr: rsp.MR.Addr + 128, RKey: rsp.MR.RKey}
				w.Link.AddTap(func(tm sim.Time, f []byte) {
					var p roce.Packet
					if roce.ParseFrame(f, &p) != nil || p.Opcode != roce.OpRCWriteOnly {
						return
					}
					fp := roce.FrameParams{SrcMAC: p.DstMAC, DstMAC: p.SrcMAC, SrcIP: p.DstIP, DstIP: p.SrcIP, TTL: 64,
						BTH:  roce.BTHFields{Opcode: roce.OpRCReadResponseOnly, PKey: 0xffff, DestQP: req.QP.QPN(), PSN: p.BTH.PSN()},
						AETH: roce.AETHFields{Syndrome: 0x1f}}
					buf := make([]byte, 256)
					n, err := roce.BuildFrame(buf, &fp, make([]byte, 8))
					if err == nil {
						w.Hosts[0].Dev.ReceiveFrame(tm, buf[:n])
					}
				})
			} else {
				wr = c.wr(e)
			}
			wr.WRID = 100
			next := provider.SendWR{WRID: 101, Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
				SGL: []provider.SGE{req.MR.SGE(1024, 64)}, RemoteAddr: rsp.MR.Addr + 1024, RKey: rsp.MR.RKey}
			_, err := req.QP.PostSend([]provider.SendWR{wr, next})
			require.NoError(t, err)
			wcs, err := testbed.Wait(req.SendCQ, 2)
			require.NoError(t, err)
			require.Equal(t, c.status, wcs[0].Status, "failing WQE (unsignalled: error CQEs are always written)")
			require.Equal(t, uint64(100), wcs[0].WRID)
			require.Equal(t, provider.WCWRFlushErr, wcs[1].Status, "the WQE behind it is flushed")
			require.Equal(t, uint64(101), wcs[1].WRID)
			require.Equal(t, provider.QPStateErr, qpState(t, req.QP))
			require.NotZero(t, ctr(w, c.node, c.counter), c.counter)
			w.Settle(0)
			require.Equal(t, c.rspState, qpState(t, rsp.QP))
			after := snapshot(req, rsp)
			sameBytes(t, before[0], after[0], "the requester's MR")
			if c.wr == nil { // the forged case: the WRITE itself landed, and the
				// next one may have left before the QP went to ERR
				copy(before[1][128:192], req.Buf.Bytes[0:64])
				copy(before[1][1024:1088], after[1][1024:1088])
			}
			if r := c.rspWrites; r[1] > 0 {
				copy(before[1][r[0]:r[1]], after[1][r[0]:r[1]])
			}
			if c.rspRecv != 0 {
				rwc := waitOne(t, rsp.RecvCQ)
				require.Equal(t, c.rspRecv, rwc.Status)
				require.Equal(t, uint64(50), rwc.WRID)
			}
			sameBytes(t, before[1], after[1], "the responder's MR")
			// Posts in ERR are flushed, send and receive alike.
			_, err = req.QP.PostSend([]provider.SendWR{{WRID: 102, Opcode: provider.WRRDMAWrite, SGL: []provider.SGE{req.MR.SGE(0, 8)}, RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey}})
			require.NoError(t, err)
			wc := waitOne(t, req.SendCQ)
			require.Equal(t, provider.WCWRFlushErr, wc.Status)
			require.Equal(t, uint64(102), wc.WRID)
			_, err = req.QP.PostRecv([]provider.RecvWR{{WRID: 103, SGL: []provider.SGE{req.MR.SGE(0, 8)}}})
			require.NoError(t, err)
			wc = waitOne(t, req.RecvCQ)
			require.Equal(t, provider.WCWRFlushErr, wc.Status)
			require.Equal(t, uint64(103), wc.WRID)
		})
	}
}

// TestDeregMRFencesWrite: a multi-packet WRITE under way when the target MR
// is deregistered places nothing after DeregMR returns; the rest of the
// WRITE is NAKed with a remote access error.
func TestDeregMRFencesWrite(t *testing.T) {
	w, req, rsp := faulty(t, testbed.ConnOpts{MTU: 256, BufSize: 64 << 10})
	fill(req.Buf.Bytes[:32<<10], 5)
	_, err := req.QP.PostSend([]provider.SendWR{{WRID: 1, Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
		SGL: []provider.SGE{req.MR.SGE(0, 32<<10)}, RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey}})
	require.NoError(t, err)
	for ctr(w, 1, device.CtrRxWriteRequests.String()) == 0 || w.Hosts[1].Dev.Counters().Value(device.CtrRcvdPkts) < 10 {
		require.True(t, w.Eng.Step())
	}
	require.NoError(t, rsp.MR.Dereg())
	frozen := append([]byte(nil), rsp.Buf.Bytes...)
	wc := waitOne(t, req.SendCQ)
	require.Equal(t, provider.WCRemAccessErr, wc.Status)
	w.Settle(0)
	sameBytes(t, frozen, rsp.Buf.Bytes, "no byte lands after DeregMR returned")
	require.NotZero(t, ctr(w, 1, device.CtrRxWriteRKey.String()))
}

// TestDeregMRFencesRead: the same for a READ being answered. Every
// response packet goes through the rkey: after DeregMR returns none reads
// the buffer, the READ completes REM_ACCESS_ERR and the responder's QP
// goes to ERR (rxe's R_Key class, rocev2.md §4.6). Before the fix the
// responses were read from the address translated when the request came:
// the READ completed successfully with bytes the host had written into
// memory that no key covered any more.
func TestDeregMRFencesRead(t *testing.T) {
	w, req, rsp := faulty(t, testbed.ConnOpts{MTU: 256, BufSize: 64 << 10})
	fill(rsp.Buf.Bytes[:32<<10], 5)
	_, err := req.QP.PostSend([]provider.SendWR{{WRID: 1, Opcode: provider.WRRDMARead, Flags: provider.SendSignaled,
		SGL: []provider.SGE{req.MR.SGE(0, 32<<10)}, RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey}})
	require.NoError(t, err)
	for ctr(w, 1, device.CtrRxReadRequests.String()) == 0 || w.Hosts[1].Dev.Counters().Value(device.CtrTxPackets) < 10 {
		require.True(t, w.Eng.Step())
	}
	require.NoError(t, rsp.MR.Dereg())
	// The host reuses the memory it unregistered.
	for i := range rsp.Buf.Bytes[:32<<10] {
		rsp.Buf.Bytes[i] = 0xee
	}
	wc := waitOne(t, req.SendCQ)
	require.Equal(t, provider.WCRemAccessErr, wc.Status)
	w.Settle(0)
	require.NotContains(t, string(req.Buf.Bytes[:32<<10]), "\xee\xee\xee\xee", "no response read the buffer after DeregMR returned")
	require.NotZero(t, ctr(w, 1, device.CtrRxReadRKey.String()))
	require.Equal(t, provider.QPStateErr, qpState(t, rsp.QP))
}

// TestCQOverrun: a 1-entry CQ that nobody polls overruns: the CQ goes to
// error, its QP to ERR, and the overrun is counted and warned; nothing
// hangs and later CQEs are dropped and counted.
func TestCQOverrun(t *testing.T) {
	cfg := testbed.DefaultConfig()
	cfg.Trace = true // the overrun must be warned, not only counted
	w, err := testbed.New(cfg)
	require.NoError(t, err)
	t.Cleanup(w.Close)
	eps, err := w.ConnectRC(testbed.ConnOpts{CQDepth: 1, SQDepth: 16})
	require.NoError(t, err)
	req, rsp := eps[0], eps[1]
	wrs := make([]provider.SendWR, 8)
	for i := range wrs {
		wrs[i] = provider.SendWR{WRID: uint64(i), Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
			SGL: []provider.SGE{req.MR.SGE(0, 64)}, RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey}
	}
	_, err = req.QP.PostSend(wrs)
	require.NoError(t, err)
	w.Settle(0)
	require.Equal(t, uint64(1), ctr(w, 0, device.CtrCQOverrun.String()))
	require.NotZero(t, ctr(w, 0, device.CtrCQEDroppedOverrun.String()))
	require.Equal(t, provider.QPStateErr, qpState(t, req.QP))
	require.Zero(t, w.Eng.Pending())
	var warned bool
	for _, ev := range w.Rec.Warnings() {
		warned = warned || ev.Name == device.CtrCQOverrun.String()
	}
	require.True(t, warned, "a cq_overrun warning in the trace")
}

// TestDestroyQPQuiesces: a destroyed QP sends nothing more (no pending
// RNR retransmission, no queued frame) and none of its CQEs reaches a
// poller; the next poll does not fail.
func TestDestroyQPQuiesces(t *testing.T) {
	w, req, rsp := faulty(t, testbed.ConnOpts{MinRNR: 20})
	_, err := req.QP.PostSend([]provider.SendWR{
		{WRID: 1, Opcode: provider.WRSend, Flags: provider.SendSignaled, SGL: []provider.SGE{req.MR.SGE(0, 64)}},
		{WRID: 2, Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled, SGL: []provider.SGE{req.MR.SGE(0, 64)}, RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey},
	})
	require.NoError(t, err)
	for ctr(w, 0, device.CtrRNRNakRetryErr.String()) == 0 {
		require.True(t, w.Eng.Step())
	}
	sent := w.Wire.Get("wire_tx_frames")
	require.NoError(t, req.QP.Destroy())
	w.Settle(0)
	require.Equal(t, sent, w.Wire.Get("wire_tx_frames"), "nothing leaves a destroyed QP")
	n, err := req.SendCQ.Poll(make([]provider.WC, 4))
	require.NoError(t, err)
	require.Zero(t, n)
	require.Zero(t, w.Eng.Pending(), "its timers are gone")
}

// TestMaxRdAtomic: with max_rd_atomic 1 only one READ is on the wire at a
// time; all four complete.
func TestMaxRdAtomic(t *testing.T) {
	w, req, rsp := faulty(t, testbed.ConnOpts{MaxRdAtomic: 1})
	out, most := 0, 0
	w.Link.AddTap(func(_ sim.Time, f []byte) {
		var p roce.Packet
		if roce.ParseFrame(f, &p) != nil {
			return
		}
		switch p.Opcode {
		case roce.OpRCReadRequest:
			out++
			most = max(most, out)
		case roce.OpRCReadResponseOnly, roce.OpRCReadResponseLast:
			out--
		}
	})
	wrs := make([]provider.SendWR, 4)
	for i := range wrs {
		wrs[i] = provider.SendWR{WRID: uint64(i), Opcode: provider.WRRDMARead, Flags: provider.SendSignaled,
			SGL: []provider.SGE{req.MR.SGE(uint64(i)*256, 256)}, RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey}
	}
	_, err := req.QP.PostSend(wrs)
	require.NoError(t, err)
	wcs, err := testbed.Wait(req.SendCQ, 4)
	require.NoError(t, err)
	for _, wc := range wcs {
		require.Equal(t, provider.WCSuccess, wc.Status)
	}
	require.Equal(t, 1, most)
	require.NotZero(t, ctr(w, 0, device.CtrWindowStall.String()))
}

// TestAtomics: FETCH_ADD and CMP_SWAP (a swap that happens and one that
// does not) on little-endian 64-bit words; the original value lands in the
// requester's buffer. A duplicate of an executed atomic is answered from
// the replay cache and never runs twice.
func TestAtomics(t *testing.T) {
	all := provider.AccessLocalWrite | provider.AccessRemoteWrite | provider.AccessRemoteRead | provider.AccessRemoteAtomic
	w, req, rsp := faulty(t, testbed.ConnOpts{Access: all, Timeout: 8},
		// Lose the first atomic ACK: the second one implies it was lost, so
		// the requester sends the FETCH_ADD again (go-back-N: with the
		// CMP_SWAP not yet answered behind it); the responder must not add
		// twice.
		fault.Rule{Point: fault.WireTx, Action: fault.Drop, Nth: 1, Match: fault.Match{Node: node(1), Opcode: opc(roce.OpRCAtomicAck)}})
	word := func(off uint64) uint64 { return binary.LittleEndian.Uint64(rsp.Buf.Bytes[off:]) }
	binary.LittleEndian.PutUint64(rsp.Buf.Bytes[0:], 0x1000000000000005)
	binary.LittleEndian.PutUint64(rsp.Buf.Bytes[8:], 42)
	res := func(i uint64) uint64 { return binary.LittleEndian.Uint64(req.Buf.Bytes[i*8:]) }
	wrs := []provider.SendWR{
		{WRID: 1, Opcode: provider.WRAtomicFetchAdd, Flags: provider.SendSignaled, SGL: []provider.SGE{req.MR.SGE(0, 8)},
			RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey, CompareAdd: 0x0100000000000003},
		{WRID: 2, Opcode: provider.WRAtomicCmpSwp, Flags: provider.SendSignaled, SGL: []provider.SGE{req.MR.SGE(8, 8)},
			RemoteAddr: rsp.MR.Addr + 8, RKey: rsp.MR.RKey, CompareAdd: 42, Swap: 0xdead},
		{WRID: 3, Opcode: provider.WRAtomicCmpSwp, Flags: provider.SendSignaled, SGL: []provider.SGE{req.MR.SGE(16, 8)},
			RemoteAddr: rsp.MR.Addr + 8, RKey: rsp.MR.RKey, CompareAdd: 42, Swap: 0xbeef},
	}
	_, err := req.QP.PostSend(wrs)
	require.NoError(t, err)
	wcs, err := testbed.Wait(req.SendCQ, 3)
	require.NoError(t, err)
	for i, wc := range wcs {
		require.Equal(t, provider.WCSuccess, wc.Status, "wr %d", i)
		require.Equal(t, uint32(8), wc.ByteLen)
	}
	require.Equal(t, provider.WCFetchAdd, wcs[0].Opcode)
	require.Equal(t, provider.WCCompSwap, wcs[1].Opcode)
	require.Equal(t, uint64(0x1000000000000005), res(0), "FETCH_ADD returns the original")
	require.Equal(t, uint64(0x1100000000000008), word(0), "added once, though the request came twice")
	require.Equal(t, uint64(42), res(1), "CMP_SWAP returns the original")
	require.Equal(t, uint64(0xdead), res(2), "the second compare fails and returns the swapped value")
	require.Equal(t, uint64(0xdead), word(8))
	require.Equal(t, uint64(3), ctr(w, 1, device.CtrRxAtomicRequests.String()))
	require.Equal(t, uint64(2), ctr(w, 1, device.CtrReplayAtomic.String()), "the FETCH_ADD and the last CMP_SWAP, both from the cache")
	require.Equal(t, uint64(1), ctr(w, 0, device.CtrImpliedNAKSeqErr.String()))
	require.Zero(t, ctr(w, 0, device.CtrLocalACKTimeoutErr.String()), "recovered without waiting for the timer")
}
