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
