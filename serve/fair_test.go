package serve_test

import (
	"math"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/softnic/softnic/attach"
	"github.com/softnic/softnic/mmioring"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/shm"
	"github.com/softnic/softnic/testbed"
	"github.com/stretchr/testify/require"
)

// TestBatchDoesNotStarveOthers: a client whose ring holds a batch of
// records that each run the shared engine a long way — ring calls that
// step a CQ which never completes (up to attach.StepBudget events each),
// or stores stamped far in the future (each runs the engine up to 10 s of
// virtual time) — while another pair keeps the engine busy (an RNR storm)
// must not hold the world for the whole batch: another client's command,
// issued once the daemon has taken the batch off the ring, is answered
// before the batch is over (with a dial timeout of 1 s, a batch of 64
// would otherwise make the daemon look gone). What is compared is the
// order of the two answers, not how long either took.
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
		t.Run(c.name, func(t *testing.T) { starve(t, c.rec, c.n, c.rnr) })
	}
}

// ringConsumed is the consumer index of a ring: the slots the daemon has
// taken off it (mmioring's shared layout, doc.go: offset 256).
func ringConsumed(r *shm.Region) uint32 {
	return atomic.LoadUint32((*uint32)(unsafe.Pointer(&r.Bytes()[256])))
}

// starve runs TestBatchDoesNotStarveOthers for one kind of record: a
// daemon, a storm, a hog that pushes n records made by rec at once, and
// another client's ALLOC_PD issued once the daemon has popped the batch,
// which must be answered before the hog's OpSync queued behind the batch.
func starve(t *testing.T, rec func(cq uint64) mmioring.Record, n int, rnr uint8) {
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

	// The batch, published with one store: the daemon pops it whole.
	before := ringConsumed(hog.rmem)
	recs := make([]mmioring.Record, n)
	for i := range recs {
		recs[i] = rec(cq)
	}
	pushed, err := hog.prod.PushN(recs, time.Now().Add(time.Minute))
	require.NoError(t, err)
	require.Equal(t, n, pushed)
	// The hog's OpSync behind it is answered when the batch is over.
	// Each answer takes a number as it arrives: the order compared is the
	// answers', not the order in which this goroutine gets to look at
	// them (late, both are there and a select picks either).
	type answer struct {
		err error
		n   int32
	}
	var order atomic.Int32
	synced := make(chan answer, 1)
	go func() {
		_, err := hog.prod.Call(attach.OpSync, 0, 0, time.Now().Add(5*time.Minute))
		synced <- answer{err, order.Add(1)}
	}()
	// Once the daemon has taken the batch, its ring goroutine runs it
	// with the world held, letting others in every worldSlice events.
	deadline := time.Now().Add(time.Minute)
	for ringConsumed(hog.rmem) == before {
		require.True(t, time.Now().Before(deadline), "the daemon did not take the batch off the ring within a minute")
		time.Sleep(100 * time.Microsecond)
	}
	answered := make(chan answer, 1)
	go func() {
		_, err := other.AllocPD()
		answered <- answer{err, order.Add(1)}
	}()
	wait := func(ch chan answer, what string) answer {
		select {
		case a := <-ch:
			require.NoError(t, a.err, what)
			return a
		case <-time.After(5 * time.Minute):
			t.Fatalf("%s did not finish within 5 minutes", what)
		}
		return answer{}
	}
	a := wait(answered, "the other client's ALLOC_PD")
	b := wait(synced, "the hog's OpSync")
	require.Less(t, a.n, b.n, "the batch of %d records ran to its end before the other client's ALLOC_PD was answered", n)
}
