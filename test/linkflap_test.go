package test

import (
	"testing"

	"github.com/softnic/softnic/device"
	"github.com/softnic/softnic/fault"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/testbed"
	"github.com/stretchr/testify/require"
)

// TestLinkDownManyQPs: the port of the responder's NIC goes down while
// many QPs have mixed work in flight. Down for longer than the retries
// last, every requester completes its oldest WQE RETRY_EXC_ERR and every
// later one WR_FLUSH_ERR, in order, each exactly once; nothing hangs.
// Down for less, everything completes successfully.
func TestLinkDownManyQPs(t *testing.T) {
	cases := []struct {
		name    string
		down    sim.Duration // 0: for ever
		wantErr bool
	}{
		{"down for ever", 0, true},
		{"down 2 ms of 7 retries of 1 ms", 2 * sim.Millisecond, false},
	}
	const pairs, depth = 32, 24
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testbed.DefaultConfig()
			one := 1
			cfg.Faults = &fault.Plan{Seed: 1, Rules: []fault.Rule{{Point: fault.Port, Action: fault.Down,
				At: sim.Time(10 * sim.Microsecond), For: tc.down, Match: fault.Match{Node: &one}}}}
			cfg.DeferTimedFaults = true // from the first post on
			w, err := testbed.New(cfg)
			require.NoError(t, err)
			t.Cleanup(w.Close)
			all := provider.AccessLocalWrite | provider.AccessRemoteWrite | provider.AccessRemoteRead | provider.AccessRemoteAtomic
			var eps [][2]*testbed.Endpoint
			for i := 0; i < pairs; i++ {
				e, err := w.ConnectRC(testbed.ConnOpts{Access: all, Timeout: 8, SQDepth: depth, CQDepth: 2 * depth, MaxRdAtomic: 2, MaxDestRdAtomic: 2})
				require.NoError(t, err)
				for k := 0; k < depth; k++ {
					_, err := e[1].QP.PostRecv([]provider.RecvWR{{WRID: uint64(k), SGL: []provider.SGE{e[1].MR.SGE(uint64(k)*1024, 1024)}}})
					require.NoError(t, err)
				}
				eps = append(eps, e)
			}
			ops := []provider.WROpcode{provider.WRRDMAWrite, provider.WRRDMARead, provider.WRSend, provider.WRAtomicFetchAdd,
				provider.WRRDMAWriteImm, provider.WRAtomicCmpSwp}
			w.ArmTimedFaults()
			for i, e := range eps {
				req, rsp := e[0], e[1]
				var wrs []provider.SendWR
				for k := 0; k < depth; k++ {
					op := ops[(i+k)%len(ops)]
					wr := provider.SendWR{WRID: uint64(k), Opcode: op, Flags: provider.SendSignaled, RKey: rsp.MR.RKey,
						RemoteAddr: rsp.MR.Addr + 32<<10 + uint64(k)*1024, SGL: []provider.SGE{req.MR.SGE(uint64(k)*1024, 1000)}}
					if op == provider.WRAtomicFetchAdd || op == provider.WRAtomicCmpSwp {
						wr.RemoteAddr = rsp.MR.Addr + 60<<10 + uint64(k)*8
						wr.SGL = []provider.SGE{req.MR.SGE(uint64(k)*1024, 8)}
					}
					wrs = append(wrs, wr)
				}
				_, err := req.QP.PostSend(wrs)
				require.NoError(t, err)
			}
			ok := 0
			for i, e := range eps {
				wcs, err := testbed.Wait(e[0].SendCQ, depth)
				require.NoError(t, err, "pair %d", i)
				failed := false
				for k, wc := range wcs {
					require.Equal(t, uint64(k), wc.WRID, "pair %d: completions in order", i)
					switch {
					case !tc.wantErr:
						require.Equal(t, provider.WCSuccess, wc.Status, "pair %d WR %d", i, k)
					case wc.Status == provider.WCSuccess:
						ok++
						require.False(t, failed, "pair %d WR %d: success after the error", i, k)
					case !failed:
						require.Equal(t, provider.WCRetryExcErr, wc.Status, "pair %d WR %d", i, k)
						require.Equal(t, uint32(0x81), wc.VendorErr)
						failed = true
					default:
						require.Equal(t, provider.WCWRFlushErr, wc.Status, "pair %d WR %d", i, k)
					}
				}
				require.Equal(t, tc.wantErr, failed, "pair %d", i)
				if tc.wantErr {
					require.Equal(t, provider.QPStateErr, qpState(t, e[0].QP))
					// Work posted in ERR is flushed, unsignaled too, in order.
					var more []provider.SendWR
					for k := 0; k < 5; k++ {
						more = append(more, provider.SendWR{WRID: uint64(100 + k), Opcode: ops[k%len(ops)], RKey: e[1].MR.RKey,
							RemoteAddr: e[1].MR.Addr + 60<<10, SGL: []provider.SGE{e[0].MR.SGE(0, 8)}})
					}
					_, err := e[0].QP.PostSend(more)
					require.NoError(t, err)
					wcs, err := testbed.Wait(e[0].SendCQ, len(more))
					require.NoError(t, err, "pair %d: WRs posted in ERR", i)
					for k, wc := range wcs {
						require.Equal(t, uint64(100+k), wc.WRID)
						require.Equal(t, provider.WCWRFlushErr, wc.Status)
					}
				}
				n, err := e[0].SendCQ.Poll(make([]provider.WC, 4))
				require.NoError(t, err)
				require.Zero(t, n, "pair %d: nothing more", i)
			}
			if tc.wantErr {
				require.NotZero(t, ok, "some WRs completed before the link went down")
				t.Logf("%d of %d completed before the link went down", ok, pairs*depth)
			}
		})
	}
}

// TestCQOverrunManyQPs: many QP pairs on a faulty wire post more signaled
// work than their 4-entry CQs hold and nobody polls. Every overrun CQ
// raises CQ_ERR and takes its QP to ERR with QP_FATAL; the simulation
// ends (no timer keeps it busy), and polling afterwards neither fails
// nor panics.
func TestCQOverrunManyQPs(t *testing.T) {
	cfg := testbed.DefaultConfig()
	cfg.Faults = &fault.Plan{Seed: 5, Rules: scaleFaults(0.03, 0.01, 0.01, 0.005, 0.01)}
	w, err := testbed.New(cfg)
	require.NoError(t, err)
	t.Cleanup(w.Close)
	const pairs, depth = 16, 16
	var eps [][2]*testbed.Endpoint
	for i := 0; i < pairs; i++ {
		e, err := w.ConnectRC(testbed.ConnOpts{Timeout: 8, SQDepth: depth, CQDepth: 4})
		require.NoError(t, err)
		for k := 0; k < depth; k++ {
			_, err := e[1].QP.PostRecv([]provider.RecvWR{{WRID: uint64(k), SGL: []provider.SGE{e[1].MR.SGE(uint64(k)*1024, 1024)}}})
			require.NoError(t, err)
		}
		var wrs []provider.SendWR
		for k := 0; k < depth; k++ {
			op := []provider.WROpcode{provider.WRSend, provider.WRRDMAWrite, provider.WRRDMARead}[k%3]
			wrs = append(wrs, provider.SendWR{WRID: uint64(k), Opcode: op, Flags: provider.SendSignaled, RKey: e[1].MR.RKey,
				RemoteAddr: e[1].MR.Addr + 32<<10, SGL: []provider.SGE{e[0].MR.SGE(uint64(k)*1024, 700)}})
		}
		_, err = e[0].QP.PostSend(wrs)
		require.NoError(t, err)
		eps = append(eps, e)
	}
	w.Settle(0)
	require.Zero(t, w.Eng.Pending(), "nothing keeps the simulation busy")
	overruns := ctr(w, 0, device.CtrCQOverrun.String())
	require.Equal(t, uint64(pairs), overruns, "every requester's send CQ")
	ctx := w.Hosts[0].Ctx
	cqErr, qpFatal := map[*provider.CQ]bool{}, map[*provider.QP]bool{}
	for {
		ev, err := ctx.GetAsyncEvent(0)
		if err != nil {
			require.ErrorIs(t, err, provider.ErrTimeout)
			break
		}
		switch ev.Type {
		case mlx5.EventCQErr:
			cqErr[ev.CQ] = true
		case mlx5.EventQPFatal:
			qpFatal[ev.QP] = true
		}
		ctx.AckAsyncEvent(ev)
	}
	for i, e := range eps {
		require.True(t, cqErr[e[0].SendCQ], "pair %d: CQ_ERR", i)
		require.True(t, qpFatal[e[0].QP], "pair %d: QP_FATAL", i)
		require.Equal(t, provider.QPStateErr, qpState(t, e[0].QP))
		wcs := make([]provider.WC, 32)
		n, err := e[0].SendCQ.Poll(wcs)
		require.NoError(t, err)
		require.LessOrEqual(t, n, e[0].SendCQ.Size(), "pair %d: no more than the CQ held", i)
		for k, wc := range wcs[:n] {
			require.Equal(t, uint64(k), wc.WRID, "pair %d", i)
		}
	}
}

// TestErrorFlushUnderLoad: a requester with a deep SQ of mixed, partly
// unsignaled work hits an error: the first incomplete WQE completes with
// the error, every later one WR_FLUSH_ERR (unsignaled ones too), in
// order, once each; the counters agree; no timer is left running.
func TestErrorFlushUnderLoad(t *testing.T) {
	cases := []struct {
		name   string
		o      testbed.ConnOpts
		rules  []fault.Rule
		recvs  int // receives posted at the responder
		status provider.WCStatus
	}{
		{"retry_cnt 0, a request lost", testbed.ConnOpts{RetryCnt: -1, Timeout: 8},
			[]fault.Rule{{Point: fault.WireTx, Action: fault.Drop, Nth: 20, Match: fault.Match{Node: node(0)}}}, 64, provider.WCRetryExcErr},
		{"retry_cnt 3, the responder's port down", testbed.ConnOpts{RetryCnt: 3, Timeout: 8},
			[]fault.Rule{{Point: fault.WireTx, Action: fault.Drop, Match: fault.Match{Node: node(1)}}}, 64, provider.WCRetryExcErr},
		{"rnr_retry 1, receives run out", testbed.ConnOpts{RNRRetry: 1, MinRNR: 1}, nil, 5, provider.WCRNRRetryExcErr},
	}
	const depth = 48
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.SQDepth, tc.o.CQDepth, tc.o.RQDepth = depth, 2*depth, 64
			tc.o.Access = provider.AccessLocalWrite | provider.AccessRemoteWrite | provider.AccessRemoteRead | provider.AccessRemoteAtomic
			w, req, rsp := faulty(t, tc.o, tc.rules...)
			for k := 0; k < tc.recvs; k++ {
				_, err := rsp.QP.PostRecv([]provider.RecvWR{{WRID: uint64(k), SGL: []provider.SGE{rsp.MR.SGE(uint64(k)*512, 512)}}})
				require.NoError(t, err)
			}
			ops := []provider.WROpcode{provider.WRSend, provider.WRRDMAWrite, provider.WRRDMARead, provider.WRAtomicFetchAdd}
			var wrs []provider.SendWR
			signaled := 0
			for k := 0; k < depth; k++ {
				op := ops[k%len(ops)]
				wr := provider.SendWR{WRID: uint64(k), Opcode: op, RKey: rsp.MR.RKey, RemoteAddr: rsp.MR.Addr + 40<<10 + uint64(k)*8,
					SGL: []provider.SGE{req.MR.SGE(uint64(k)*512, 8)}}
				if k%3 != 1 || k == depth-1 {
					wr.Flags = provider.SendSignaled
					signaled++
				}
				wrs = append(wrs, wr)
			}
			_, err := req.QP.PostSend(wrs)
			require.NoError(t, err)
			var wcs []provider.WC
			for {
				got, err := testbed.Wait(req.SendCQ, 1)
				if err != nil {
					break
				}
				wcs = append(wcs, got...)
			}
			// Successes only where signaled, before the error; then every WQE.
			next, failed := 0, false
			for _, wc := range wcs {
				require.GreaterOrEqual(t, int(wc.WRID), next, "in order")
				switch {
				case wc.Status == provider.WCSuccess:
					require.False(t, failed)
				case !failed:
					require.Equal(t, tc.status, wc.Status, "WR %d", wc.WRID)
					failed = true
				default:
					require.Equal(t, provider.WCWRFlushErr, wc.Status, "WR %d", wc.WRID)
					require.Equal(t, uint32(0xf9), wc.VendorErr)
					require.Equal(t, next, int(wc.WRID), "every WQE after the error, unsignaled too")
				}
				next = int(wc.WRID) + 1
			}
			require.True(t, failed)
			require.Equal(t, depth, next, "the last WQE completed")
			flushed := 0
			for _, wc := range wcs {
				if wc.Status == provider.WCWRFlushErr {
					flushed++
				}
			}
			require.Equal(t, uint64(flushed), ctr(w, 0, device.CtrReqCQEFlushError.String()))
			require.Equal(t, uint64(1), ctr(w, 0, device.CtrReqCQEError.String()))
			require.Equal(t, provider.QPStateErr, qpState(t, req.QP))
			require.Zero(t, w.Eng.Pending(), "no timer left running")
		})
	}
}
