package device_test

import (
	"testing"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/testbed"
)

// TestWQELargerThanTheSQFails: a WQE whose DS needs more WQEBBs than the
// whole send queue holds (DS 63 is 16 WQEBBs; a one-WR SQ has 8) is a
// malformed WQE: it completes with LOCAL_QP_OP_ERR and the QP goes to
// ERR (faults.md R4, §2.2 model). Before the fix the fetch engine took
// the doorbell for a counter lapping the ring and refused it
// (db_bad_counter): no CQE, the QP stayed in RTS, and every later
// doorbell, counted from past the big WQE, was refused too, so the QP
// never completed anything again.
func TestWQELargerThanTheSQFails(t *testing.T) {
	for _, tc := range []struct {
		name string
		bf   bool
	}{{"doorbell", false}, {"BlueFlame", true}} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := testbed.New(testbed.DefaultConfig())
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			all := provider.AccessLocalWrite | provider.AccessRemoteWrite | provider.AccessRemoteRead
			eps, err := w.ConnectRC(testbed.ConnOpts{MTU: 1024, BufSize: 64 << 10, SQDepth: 1, Access: all, Timeout: 2, RetryCnt: 2})
			if err != nil {
				t.Fatal(err)
			}
			req := eps[0]
			r := &rawSQ{w: w, ep: req, peer: eps[1], pi: req.QP.SQProducer(), bf: req.QP.SQInfo().BFOffset}
			if bbs := mlx5.WQEBBs(63); r.info().WQEBBs >= bbs {
				t.Fatalf("the SQ has %d WQEBBs: a DS-63 WQE (%d) fits", r.info().WQEBBs, bbs)
			}
			// A signalled 64-byte WRITE whose ctrl claims DS 63.
			b := r.build([]byte{0, 1, 63, mlx5.CECQUpdate, 0, 0, 1, 0, 0, 64, 0, 0, 0, 0, 0, 0})
			r.put(r.pi, b)
			r.pi += uint16(mlx5.WQEBBs(63))
			r.record(mlx5.DBRSend, uint32(r.pi))
			if tc.bf {
				r.blueFlame(b)
			} else {
				r.doorbell(b)
			}
			w.Settle(1 << 20)
			c := req.Host.Dev.Counters()
			if got := c.Get("req_cqe_error"); got != 1 {
				t.Errorf("req_cqe_error = %d, want 1 (db_bad_counter %d)", got, c.Get("db_bad_counter"))
			}
			if got := c.Get("cqe_error_" + mlx5.SyndLocalQPOp.String()); got != 1 {
				t.Errorf("LOCAL_QP_OP_ERR CQEs = %d, want 1", got)
			}
			if st, err := req.QP.QueryState(); err != nil || st != provider.QPStateErr {
				t.Errorf("QP in %v (%v), want ERR", st, err)
			}
		})
	}
}
