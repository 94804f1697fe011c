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

// TestAtomicAckBehindReadResponses: an atomic, or a WRITE asking for an
// ACK, that arrives while a long READ's responses are still being built is
// answered after them: the responder's responses leave in PSN order, as a
// requester expects (a later response or ACK means earlier ones were lost,
// rocev2.md §4.3; rxe finishes a READ's replies before it takes the next
// request). Before, a WRITE's ACK left at once: the requester took it for
// a lost READ response and asked for the whole READ again. A duplicate of
// the atomic (the wire delivers it twice) is answered from its saved
// result, behind the READ responses too. Each answer carries the MSN of
// the moment its request was processed (READ 1, atomic 2, WRITE 3), not
// of when it left.
func TestAtomicAckBehindReadResponses(t *testing.T) {
	const n = 64 << 10 // 64 responses: more than the responder builds ahead
	const reads = n / 1024
	dupAtomic := fault.Rule{Point: fault.WireTx, Action: fault.Duplicate, Nth: 1,
		Match: fault.Match{Node: node(0), Opcode: opc(roce.OpRCFetchAdd)}}
	atomic := provider.SendWR{WRID: 2, Opcode: provider.WRAtomicFetchAdd, Flags: provider.SendSignaled, CompareAdd: 5}
	write := provider.SendWR{WRID: 3, Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled}
	for _, c := range []struct {
		name  string
		after []provider.SendWR // posted behind the READ
		rules []fault.Rule
		want  []answer // what follows the READ's responses
	}{
		{"atomic", []provider.SendWR{atomic}, nil, []answer{{roce.OpRCAtomicAck, reads, 2}}},
		{"atomic and its duplicate", []provider.SendWR{atomic}, []fault.Rule{dupAtomic},
			[]answer{{roce.OpRCAtomicAck, reads, 2}, {roce.OpRCAtomicAck, reads, 2}}},
		{"WRITE", []provider.SendWR{write}, nil, []answer{{roce.OpRCAck, reads, 2}}},
		{"atomic then WRITE", []provider.SendWR{atomic, write}, nil,
			[]answer{{roce.OpRCAtomicAck, reads, 2}, {roce.OpRCAck, reads + 1, 3}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, w := readThen(t, n, c.after, c.rules...)
			require.Len(t, got, reads+len(c.want), "%v", got)
			for i := range reads {
				want := answer{readResponseOp(i, reads), uint32(i), 1}
				if want.op == roce.OpRCReadResponseMiddle {
					want.msn = 0
				}
				require.Equal(t, want, got[i], "response %d: %v", i, got)
			}
			require.Equal(t, c.want, got[reads:], "after the READ's responses: %v", got)
			require.Zero(t, ctr(w, 0, device.CtrImpliedNAKSeqErr.String()))
			require.Equal(t, uint64(len(c.rules)), ctr(w, 1, device.CtrDuplicateRequest.String()), "no duplicate but the wire's")
		})
	}
}

// answer is a response or ACK as it left the responder.
type answer struct {
	op       roce.Opcode
	psn, msn uint32
}

func readResponseOp(i, n int) roce.Opcode {
	switch {
	case i == 0:
		return roce.OpRCReadResponseFirst
	case i == n-1:
		return roce.OpRCReadResponseLast
	}
	return roce.OpRCReadResponseMiddle
}

// readThen posts an n-byte READ (PSN 0 in the answers, which count from
// the QP's first PSN) and the WRs of after behind it
// (an atomic on the first 8 bytes, a WRITE of 8 bytes past the READ's),
// checks that they complete with the right data, and returns the answers
// that left the responder, in order.
func readThen(t *testing.T, n int, after []provider.SendWR, rules ...fault.Rule) ([]answer, *testbed.World) {
	all := provider.AccessLocalWrite | provider.AccessRemoteWrite | provider.AccessRemoteRead | provider.AccessRemoteAtomic
	w, req, rsp := faulty(t, testbed.ConnOpts{MTU: 1024, BufSize: 256 << 10, Access: all}, rules...)
	var got []answer
	w.Link.AddTap(func(_ sim.Time, f []byte) {
		const bth = 14 + 20 + 8 // Ethernet, IPv4, UDP
		if len(f) < bth+16 {
			return
		}
		switch op := roce.Opcode(f[bth]); op {
		case roce.OpRCReadResponseFirst, roce.OpRCReadResponseMiddle, roce.OpRCReadResponseLast,
			roce.OpRCReadResponseOnly, roce.OpRCAtomicAck, roce.OpRCAck:
			// Node 0's PSNs start at 0x1000 (the testbed's default).
			a := answer{op: op, psn: (binary.BigEndian.Uint32(f[bth+8:]) - 0x1000) & 0xffffff}
			if op != roce.OpRCReadResponseMiddle { // a middle response has no AETH
				a.msn = binary.BigEndian.Uint32(f[bth+12:]) & 0xffffff
			}
			got = append(got, a)
		}
	})
	fill(rsp.Buf.Bytes[8:8+n], 0x5e)
	binary.LittleEndian.PutUint64(rsp.Buf.Bytes[0:], 100)
	fill(req.Buf.Bytes[8+n:16+n], 0xa7)
	wrs := []provider.SendWR{{WRID: 1, Opcode: provider.WRRDMARead, Flags: provider.SendSignaled, SGL: []provider.SGE{req.MR.SGE(8, uint32(n))},
		RemoteAddr: rsp.MR.Addr + 8, RKey: rsp.MR.RKey}}
	for _, wr := range after {
		wr.RKey = rsp.MR.RKey
		if wr.Opcode == provider.WRRDMAWrite {
			wr.SGL, wr.RemoteAddr = []provider.SGE{req.MR.SGE(uint64(8+n), 8)}, rsp.MR.Addr+uint64(8+n)
		} else {
			wr.SGL, wr.RemoteAddr = []provider.SGE{req.MR.SGE(0, 8)}, rsp.MR.Addr
		}
		wrs = append(wrs, wr)
	}
	_, err := req.QP.PostSend(wrs)
	require.NoError(t, err)
	wcs, err := testbed.Wait(req.SendCQ, len(wrs))
	require.NoError(t, err)
	for i, wc := range wcs {
		require.Equal(t, provider.WCSuccess, wc.Status)
		require.Equal(t, wrs[i].WRID, wc.WRID, "completions in order")
	}
	w.Settle(1 << 20) // a duplicate's answer too
	require.Equal(t, rsp.Buf.Bytes[8:8+n], req.Buf.Bytes[8:8+n])
	for _, wr := range after {
		if wr.Opcode == provider.WRRDMAWrite {
			require.Equal(t, req.Buf.Bytes[8+n:16+n], rsp.Buf.Bytes[8+n:16+n])
		} else {
			require.Equal(t, uint64(100), binary.LittleEndian.Uint64(req.Buf.Bytes[0:]))
			require.Equal(t, uint64(105), binary.LittleEndian.Uint64(rsp.Buf.Bytes[0:]), "executed once")
		}
	}
	return got, w
}

// TestResponderErrorBehindRead: a request the responder must refuse (a
// WRITE with a bad rkey, a SEND larger than its receive) arriving while
// an earlier READ is still being answered is NAKed only after the READ's
// responses: rxe and a ConnectX take requests in order and find the error
// when they get to it. So the READ completes with its data, the refused
// request with the NAK's status, and what was posted after it flushes.
// Before, the NAK left at once, the QP in ERR dropped the READ's remaining
// responses, and the READ ended RETRY_EXC_ERR, the WRITE flushed.
func TestResponderErrorBehindRead(t *testing.T) {
	const n = 64 << 10 // 64 responses: more than the responder builds ahead
	for _, c := range []struct {
		name   string
		bad    func(req, rsp *testbed.Endpoint) provider.SendWR
		status provider.WCStatus
		recv   bool // the responder has a receive posted (64 bytes)
	}{
		{"WRITE with a bad rkey", func(req, rsp *testbed.Endpoint) provider.SendWR {
			return provider.SendWR{WRID: 2, Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled, SGL: []provider.SGE{req.MR.SGE(n, 8)},
				RemoteAddr: rsp.MR.Addr + n, RKey: rsp.MR.RKey ^ 0x5500}
		}, provider.WCRemAccessErr, false},
		{"SEND larger than the receive", func(req, rsp *testbed.Endpoint) provider.SendWR {
			return provider.SendWR{WRID: 2, Opcode: provider.WRSend, Flags: provider.SendSignaled, SGL: []provider.SGE{req.MR.SGE(n, 100)}}
		}, provider.WCRemInvReqErr, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			all := provider.AccessLocalWrite | provider.AccessRemoteWrite | provider.AccessRemoteRead
			w, req, rsp := faulty(t, testbed.ConnOpts{MTU: 1024, BufSize: 256 << 10, Access: all, Timeout: 8, RetryCnt: 3})
			var naks, after int // NAKs the responder sent; READ responses after the first NAK
			w.Link.AddTap(func(_ sim.Time, f []byte) {
				var p roce.Packet
				if roce.ParseFrame(f, &p) != nil || p.SrcIP != testbed.IPs[1] {
					return
				}
				switch {
				case p.Opcode == roce.OpRCAck && !p.AETH.Syndrome().IsACK():
					naks++
				case naks > 0 && p.Info.Operation == roce.OperationReadResponse:
					after++
				}
			})
			fill(rsp.Buf.Bytes[:n], 0x11)
			if c.recv {
				_, err := rsp.QP.PostRecv([]provider.RecvWR{{WRID: 7, SGL: []provider.SGE{rsp.MR.SGE(2*n, 64)}}})
				require.NoError(t, err)
			}
			_, err := req.QP.PostSend([]provider.SendWR{
				{WRID: 1, Opcode: provider.WRRDMARead, Flags: provider.SendSignaled, SGL: []provider.SGE{req.MR.SGE(0, n)},
					RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey},
				c.bad(req, rsp),
				{WRID: 3, Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled, SGL: []provider.SGE{req.MR.SGE(n, 8)},
					RemoteAddr: rsp.MR.Addr + n + 64, RKey: rsp.MR.RKey},
			})
			require.NoError(t, err)
			wcs, err := testbed.Wait(req.SendCQ, 3)
			require.NoError(t, err)
			require.Equal(t, provider.WCSuccess, wcs[0].Status, "the READ before the refused request")
			require.Equal(t, rsp.Buf.Bytes[:n], req.Buf.Bytes[:n])
			require.Equal(t, c.status, wcs[1].Status)
			require.Equal(t, provider.WCWRFlushErr, wcs[2].Status)
			require.Equal(t, 1, naks)
			require.Zero(t, after, "the NAK leaves after every READ response")
			require.Equal(t, provider.QPStateErr, qpState(t, rsp.QP))
			require.Equal(t, uint64(1), ctr(w, 1, device.CtrQPToError.String()), "to ERR once")
			require.Zero(t, ctr(w, 0, device.CtrLocalACKTimeoutErr.String()), "no timeout: nothing was lost")
			require.Equal(t, make([]byte, 8), rsp.Buf.Bytes[n+64:n+72], "nothing after the refused request was executed")
			// The WRITE behind the refused request arrived while the NAK
			// waited: dropped under its own counter, not as a QP in ERR.
			require.Equal(t, uint64(1), ctr(w, 1, device.CtrRxDropRespFailing.String()))
			require.Zero(t, ctr(w, 1, device.CtrRxDropQPState.String()))
		})
	}
}

// TestSendWithInvalidateBehindRead: a SEND with invalidate whose key
// cannot be invalidated (TestSendWithInvalidate: the receive completes
// REM_INV_REQ_ERR, the SEND is ACKed, the responder QP goes to ERR) that
// arrives while an earlier READ is still being answered fails only after
// the READ's responses, as a refused request's NAK does
// (TestResponderErrorBehindRead): the READ completes with its data, the
// SEND's ACK is the last answer, the QP goes to ERR once. Before, the QP
// went to ERR at once: the READ's remaining responses were dropped and
// the READ ended RETRY_EXC_ERR, the SEND flushed.
func TestSendWithInvalidateBehindRead(t *testing.T) {
	const n = 64 << 10 // 64 responses: more than the responder builds ahead
	all := provider.AccessLocalWrite | provider.AccessRemoteWrite | provider.AccessRemoteRead
	w, req, rsp := faulty(t, testbed.ConnOpts{MTU: 1024, BufSize: 256 << 10, Access: all, Timeout: 8, RetryCnt: 3})
	var acks, after int // ACKs the responder sent; READ responses after the first
	w.Link.AddTap(func(_ sim.Time, f []byte) {
		var p roce.Packet
		if roce.ParseFrame(f, &p) != nil || p.SrcIP != testbed.IPs[1] {
			return
		}
		switch {
		case p.Opcode == roce.OpRCAck:
			require.True(t, p.AETH.Syndrome().IsACK(), "no NAK: %v", p.AETH.Syndrome())
			acks++
		case acks > 0 && p.Info.Operation == roce.OperationReadResponse:
			after++
		}
	})
	fill(rsp.Buf.Bytes[:n], 0x22)
	_, err := rsp.QP.PostRecv([]provider.RecvWR{{WRID: 7, SGL: []provider.SGE{rsp.MR.SGE(2*n, 64)}},
		{WRID: 8, SGL: []provider.SGE{rsp.MR.SGE(2*n+64, 64)}}})
	require.NoError(t, err)
	fill(req.Buf.Bytes[n:n+32], 0x9c)
	_, err = req.QP.PostSend([]provider.SendWR{
		{WRID: 1, Opcode: provider.WRRDMARead, Flags: provider.SendSignaled, SGL: []provider.SGE{req.MR.SGE(0, n)},
			RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey},
		{WRID: 2, Opcode: provider.WRSendWithInv, Flags: provider.SendSignaled, SGL: []provider.SGE{req.MR.SGE(n, 32)},
			InvalidateRKey: rsp.MR.RKey},
	})
	require.NoError(t, err)
	wcs, err := testbed.Wait(req.SendCQ, 2)
	require.NoError(t, err)
	require.Equal(t, provider.WCSuccess, wcs[0].Status, "the READ before the SEND")
	require.Equal(t, rsp.Buf.Bytes[:n], req.Buf.Bytes[:n])
	require.Equal(t, provider.WCSuccess, wcs[1].Status, "the SEND is ACKed (rxe class J)")
	rwcs, err := testbed.Wait(rsp.RecvCQ, 2)
	require.NoError(t, err)
	require.Equal(t, uint64(7), rwcs[0].WRID)
	require.Equal(t, provider.WCRemInvReqErr, rwcs[0].Status)
	require.Equal(t, uint64(8), rwcs[1].WRID)
	require.Equal(t, provider.WCWRFlushErr, rwcs[1].Status)
	require.Equal(t, req.Buf.Bytes[n:n+32], rsp.Buf.Bytes[2*n:2*n+32], "the data was placed")
	require.Equal(t, 1, acks)
	require.Zero(t, after, "the ACK leaves after every READ response")
	require.Equal(t, provider.QPStateErr, qpState(t, rsp.QP))
	require.Equal(t, uint64(1), ctr(w, 1, device.CtrQPToError.String()), "to ERR once")
	require.Equal(t, uint64(1), ctr(w, 1, device.CtrRxSendInvRKey.String()))
	require.Zero(t, ctr(w, 0, device.CtrLocalACKTimeoutErr.String()), "no timeout: nothing was lost")
	require.Zero(t, ctr(w, 0, device.CtrImpliedNAKSeqErr.String()))
}

// TestFatalStopsReadResponses: a device fatal error while the responder
// is answering a READ, its pump waiting for room in the port's transmit
// buffer, ends the READ's answers: nothing more is built (no READ
// response, no ACK or NAK), as a dead device does nothing. Before, the
// responder kept its pending READ stream; the transmit buffer's timer woke
// it and it went on building frames after the fatal error.
func TestFatalStopsReadResponses(t *testing.T) {
	const n = 64 << 10
	cfg := testbed.DefaultConfig()
	cfg.Device.Core.TxBufferBytes = 4 << 10 // the responder soon waits for room
	w, err := testbed.New(cfg)
	require.NoError(t, err)
	t.Cleanup(w.Close)
	eps, err := w.ConnectRC(testbed.ConnOpts{MTU: 1024, BufSize: 256 << 10,
		Access: provider.AccessLocalWrite | provider.AccessRemoteWrite | provider.AccessRemoteRead})
	require.NoError(t, err)
	req, rsp := eps[0], eps[1]
	_, err = req.QP.PostSend([]provider.SendWR{{WRID: 1, Opcode: provider.WRRDMARead, Flags: provider.SendSignaled,
		SGL: []provider.SGE{req.MR.SGE(0, n)}, RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey}})
	require.NoError(t, err)
	for hctr(rsp.Host, device.CtrTxBufferFull) == 0 {
		require.True(t, w.Eng.Step(), "the responder never waited for the transmit buffer")
	}
	rsp.Host.Dev.EnterFatal(w.Eng.Now(), 1, "test")
	built := hctr(rsp.Host, device.CtrSentPkts)
	require.Less(t, built, uint64(n/1024), "the READ was still being answered")
	w.Settle(0)
	require.Equal(t, built, hctr(rsp.Host, device.CtrSentPkts), "nothing built after the fatal error")
	require.Zero(t, hctr(rsp.Host, device.CtrNAKsSent))
	require.Zero(t, hctr(rsp.Host, device.CtrRxReadDMA))
}
