package test

import (
	"encoding/binary"
	"testing"

	"github.com/softnic/softnic/device"
	"github.com/softnic/softnic/fault"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/testbed"
	"github.com/stretchr/testify/require"
)

// TestRNRNAKBehindLostReadResponse: a READ (or an atomic) whose last
// response is lost, then a SEND the responder RNR-NAKs for want of a
// receive. The RNR NAK names the SEND's PSN, past the READ's: the
// responder executed the READ and its responses were lost, so the
// requester asks for them again (an implied NAK, as rxe's check_psn
// retries a READ/atomic a later PSN passes) and the RNR NAK spends no RNR
// retry of the READ's. Before the fix the RNR NAK was charged to the
// oldest WQE, the unanswered READ: with rnr_retry 0 the READ failed
// RNR_RETRY_EXC_ERR (and the SEND was flushed) although nothing was wrong
// with it.
func TestRNRNAKBehindLostReadResponse(t *testing.T) {
	cases := []struct {
		name     string
		op       provider.WROpcode
		lost     roce.Opcode // the response opcode dropped once
		rnrRetry uint8
		recv     bool // post a receive after the first RNR NAK
		wantSend provider.WCStatus
	}{
		{"READ, rnr_retry 0, no receive", provider.WRRDMARead, roce.OpRCReadResponseLast, 0, false, provider.WCRNRRetryExcErr},
		{"READ, rnr_retry 1, receive posted late", provider.WRRDMARead, roce.OpRCReadResponseLast, 1, true, provider.WCSuccess},
		{"FETCH_ADD, rnr_retry 0, no receive", provider.WRAtomicFetchAdd, roce.OpRCAtomicAck, 0, false, provider.WCRNRRetryExcErr},
		{"FETCH_ADD, rnr_retry 1, receive posted late", provider.WRAtomicFetchAdd, roce.OpRCAtomicAck, 1, true, provider.WCSuccess},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			access := provider.AccessLocalWrite | provider.AccessRemoteWrite | provider.AccessRemoteRead | provider.AccessRemoteAtomic
			w, req, rsp := faulty(t, testbed.ConnOpts{MinRNR: 1, Access: access},
				fault.Rule{Point: fault.WireTx, Action: fault.Drop, Nth: 1, Match: fault.Match{Node: node(1), Opcode: opc(c.lost)}})
			// testbed takes rnr_retry 0 for its default (7): bring the
			// requester up again with the value under test; nothing has
			// been sent yet, so both PSNs are still the initial ones.
			require.NoError(t, req.QP.Modify(&provider.QPAttr{QPState: provider.QPStateReset}, mlx5.AttrState))
			pid := rsp.Host.ID
			a := provider.ConnectAttr{Peer: provider.Peer{QPN: rsp.QP.QPN(), PSN: 0x2000, GID: pid.IP.As16(), MAC: pid.MAC},
				PSN: 0x1000, MTU: 1024, Access: access, SGIDIndex: 1, HopLimit: 64,
				MaxRdAtomic: 16, MaxDestRdAtomic: 16, MinRNRTimer: 1, Timeout: 14, RetryCnt: 7, RNRRetry: c.rnrRetry}
			require.NoError(t, req.QP.ToInit(a))
			require.NoError(t, req.QP.ToRTR(a))
			require.NoError(t, req.QP.ToRTS(a))
			fill(rsp.Buf.Bytes[:4096], 0x5a)
			binary.LittleEndian.PutUint64(rsp.Buf.Bytes[4096:], 41)
			first := provider.SendWR{WRID: 1, Opcode: c.op, Flags: provider.SendSignaled, RKey: rsp.MR.RKey}
			if c.op == provider.WRRDMARead {
				first.SGL, first.RemoteAddr = []provider.SGE{req.MR.SGE(0, 3000)}, rsp.MR.Addr
			} else {
				first.SGL, first.RemoteAddr, first.CompareAdd = []provider.SGE{req.MR.SGE(8192, 8)}, rsp.MR.Addr+4096, 1
			}
			_, err := req.QP.PostSend([]provider.SendWR{first,
				{WRID: 2, Opcode: provider.WRSend, Flags: provider.SendSignaled, SGL: []provider.SGE{req.MR.SGE(0, 10)}}})
			require.NoError(t, err)
			for i := 0; i < 100000 && ctr(w, 1, device.CtrRNRNAKsSent.String()) == 0; i++ {
				require.True(t, w.Eng.Step())
			}
			require.NotZero(t, ctr(w, 1, device.CtrRNRNAKsSent.String()))
			if c.recv {
				_, err := rsp.QP.PostRecv([]provider.RecvWR{{WRID: 9, SGL: []provider.SGE{rsp.MR.SGE(8192, 64)}}})
				require.NoError(t, err)
			}
			wcs, err := testbed.Wait(req.SendCQ, 2)
			require.NoError(t, err)
			require.Equal(t, provider.WCSuccess, wcs[0].Status, "the %v the RNR NAK passed", c.op)
			require.Equal(t, c.wantSend, wcs[1].Status, "the SEND")
			if c.op == provider.WRRDMARead {
				require.Equal(t, rsp.Buf.Bytes[:3000], req.Buf.Bytes[:3000])
			} else {
				require.Equal(t, uint64(41), binary.LittleEndian.Uint64(req.Buf.Bytes[8192:]))
				require.Equal(t, uint64(42), binary.LittleEndian.Uint64(rsp.Buf.Bytes[4096:]), "the add ran once")
			}
			require.NotZero(t, ctr(w, 0, device.CtrImpliedNAKSeqErr.String()), "the lost responses asked for again")
		})
	}
}
