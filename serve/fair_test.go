package serve_test

import (
	"math"
	"testing"
	"time"

	"github.com/softnic/softnic/attach"
	"github.com/softnic/softnic/mmioring"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/testbed"
	"github.com/stretchr/testify/require"
)

// TestBatchDoesNotStarveOthers: a client whose ring holds a batch of
// records that each run the shared engine a long way — ring calls that
// step a CQ which never completes (up to attach.StepBudget events each),
// or stores stamped far in the future (each runs the engine up to 10 s of
// virtual time) — while another pair keeps the engine busy (an RNR storm)
// must not hold the world for the whole batch: another client's command
// waits for at most about one such record, not for all of them (with a
// dial timeout of 1 s, a batch of 64 would make the daemon look gone).
func TestBatchDoesNotStarveOthers(t *testing.T) {
	for _, c := range []struct {
		name string
		rec  func(cq uint64) mmioring.Record
		n    int
		rnr  uint8 // the storm's min_rnr_timer (0: the default 12, 0.64 ms)
	}{
		{"steps of a CQ that never completes", func(cq uint64) mmioring.Record {
			r := mmioring.Record{Off: cq, Flags: mmioring.FlagCall}
			r.Data[0] = attach.OpStepCQ // nent 1 (shift 0), ci 0
			return r
		}, 6, 0},
		{"one step of a CQ that never completes", func(cq uint64) mmioring.Record {
			r := mmioring.Record{Off: cq, Flags: mmioring.FlagCall}
			r.Data[0] = attach.OpStepCQ
			return r
		}, 1, 0},
		{"stores stamped far ahead", func(uint64) mmioring.Record {
			return mmioring.Record{Off: 0, Width: 4, Time: math.MaxInt64} // a store to fw_rev, read-only
		}, 16, 0},
		{"one store stamped far ahead, a dense storm", func(uint64) mmioring.Record {
			return mmioring.Record{Off: 0, Width: 4, Time: math.MaxInt64}
		}, 1, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			// The figures are wall times on a machine other tests share:
			// one attempt in three may meet a scheduling delay. Without
			// the fix every attempt waits for whole records.
			for attempt := 1; ; attempt++ {
				waited, cost := starve(t, c.rec, c.n, c.rnr)
				t.Logf("attempt %d: one record costs %v; with a batch of %d the other client's command waited %v", attempt, cost, c.n, waited)
				// A step and a far-stamped record let others in as they go.
				if waited < max(cost/2, 50*time.Millisecond) {
					return
				}
				if attempt == 3 {
					t.Fatalf("the other client waited for a whole record in all %d attempts (last: %v, one record %v)", attempt, waited, cost)
				}
			}
		})
	}
}

// starve runs one round of TestBatchDoesNotStarveOthers: a daemon, a
// storm, a hog that pushes n records made by rec, and another client's
// ALLOC_PD issued while the batch runs. It returns how long that command
// waited and what one record alone costs.
func starve(t *testing.T, rec func(cq uint64) mmioring.Record, n int, rnr uint8) (waited, cost time.Duration) {
	_, sock, _ := startDaemon(t, 4, nil)
	o := provider.DialOptions{Socket: sock}
	storm, closeStorm, err := dialDevices(o, testbed.ConnOpts{RNRRetry: 7, MinRNR: rnr}, 0, 1)
	require.NoError(t, err)
	defer closeStorm()
	_, err = storm[0].QP.PostSend([]provider.SendWR{{WRID: 1, Opcode: provider.WRSend, SGL: []provider.SGE{storm[0].MR.SGE(0, 8)}}})
	require.NoError(t, err)
	_, err = storm[0].SendCQ.Poll(make([]provider.WC, 1)) // the SEND is on its way
	require.NoError(t, err)
	other, err := provider.Dial("softnic3", o)
	require.NoError(t, err)
	defer other.Close()
	hog := dialRaw(t, sock, "softnic2", 0x30000000)
	cq := hog.mem.Base() + 4096
	hog.mem.Bytes()[4096+63] = 0xf0 // an invalid CQE: never software's
	// What one such record costs the world.
	one := time.Now()
	r := rec(cq)
	if r.Flags == mmioring.FlagCall {
		_, err = hog.prod.CallRecord(r, attach.OpStepCQ, time.Now().Add(time.Minute))
	} else {
		require.NoError(t, hog.prod.Push(&r, time.Now().Add(time.Second)))
		_, err = hog.prod.Call(attach.OpSync, 0, 0, time.Now().Add(time.Minute))
	}
	require.NoError(t, err)
	cost = time.Since(one)
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(cost / 8) // the batch is under way
		s := time.Now()
		if _, err := other.AllocPD(); err != nil {
			t.Error(err)
		}
		waited = time.Since(s)
	}()
	for i := 0; i < n; i++ {
		r := rec(cq)
		require.NoError(t, hog.prod.Push(&r, time.Now().Add(time.Second)))
	}
	<-done
	_, err = hog.prod.Call(attach.OpSync, 0, 0, time.Now().Add(time.Minute)) // the batch is over
	require.NoError(t, err)
	return waited, cost
}
