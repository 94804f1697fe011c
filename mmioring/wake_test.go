package mmioring

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLateWakeOfPreviousReply: the consumer's Reply to one call ends by
// clearing the producer's awaiting-a-reply flag and waking it; preempted
// just before that, its tail may run once the producer has already
// published its next call and set the flag for it, just before it
// sleeps. The producer slept on the reply sequence word, unchanged by
// that tail, so it slept on with its flag cleared, and the reply to its
// call, finding no flag, woke nobody: the call waited out its deadline (a
// 1 s ring call of a daemon's client, answered in microseconds). Here the
// tail runs out of turn at that point, in every wait of the call.
func TestLateWakeOfPreviousReply(t *testing.T) {
	for _, tc := range []struct {
		name  string
		tails int // late tails run before the call's sleeps
	}{
		{"one late tail", 1},
		{"a late tail before every sleep", 1 << 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, p, c := newTestRing(t, anonMem, 16)
			p.Spin, p.Yield = 0, 0
			hooked := make(chan struct{})
			var once sync.Once
			n := 0
			testHookReplySleep = func() {
				if n < tc.tails {
					n++
					c.wakeCaller() // the previous Reply's tail, late
				}
				once.Do(func() { close(hooked) })
			}
			defer func() { testHookReplySleep = nil }()
			const wait = 2 * time.Second
			type result struct {
				r    Reply
				err  error
				took time.Duration
			}
			done := make(chan result, 1)
			go func() {
				start := time.Now()
				r, err := p.Call(7, 0, 0, time.Now().Add(wait))
				done <- result{r, err, time.Since(start)}
			}()
			var rec Record
			require.NoError(t, c.Pop(&rec, time.Now().Add(wait)))
			<-hooked
			require.True(t, c.Reply(Reply{Value: 42}))
			res := <-done
			require.NoError(t, res.err)
			require.Equal(t, uint64(42), res.r.Value)
			require.Less(t, res.took, wait/2, "the reply woke the caller")
		})
	}
}
