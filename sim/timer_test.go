package sim

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTimerStopResetFire(t *testing.T) {
	e := NewEngine()
	var fired []Time
	tm := e.NewTimer(HandlerFunc(func(now Time) { fired = append(fired, now) }))
	require.False(t, tm.Armed())
	require.False(t, tm.Stop(), "stopping a stopped timer")

	tm.Reset(100)
	require.True(t, tm.Armed())
	require.Equal(t, Time(100), tm.When())
	tm.Reset(50) // earlier deadline replaces the first
	require.Equal(t, 1, e.Pending(), "a reset timer has one event")
	e.Run(0)
	require.Equal(t, []Time{50}, fired)
	require.False(t, tm.Armed())

	tm.Reset(200)
	require.True(t, tm.Stop())
	require.Equal(t, 0, e.Pending(), "a stopped timer leaves nothing behind")
	e.Run(0)
	require.Equal(t, []Time{50}, fired, "stopped timer did not fire")
	require.Equal(t, Time(50), e.Now(), "a stopped timer does not move the clock")

	// Re-arming from inside its own handler.
	n := 0
	var self *Timer
	self = e.NewTimer(HandlerFunc(func(now Time) {
		n++
		if n < 3 {
			self.ResetAfter(10)
		}
	}))
	self.ResetAfter(10)
	e.Run(0)
	require.Equal(t, 3, n)
	require.Equal(t, Time(80), e.Now())
}

// TestTimerHeapConsistency mixes plain events and many timers that are
// reset and stopped at random, and checks everything fires in time order,
// exactly the armed timers fire, and each at its last deadline.
func TestTimerHeapConsistency(t *testing.T) {
	e := NewEngine()
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 200
	want := make([]Time, n) // Never: stopped
	got := make([]Time, n)
	timers := make([]*Timer, n)
	for i := range timers {
		i := i
		got[i] = Never
		timers[i] = e.NewTimer(HandlerFunc(func(now Time) { got[i] = now }))
	}
	last := Time(0)
	order := true
	for i := 0; i < 500; i++ {
		e.At(Time(rng.IntN(10000)), HandlerFunc(func(now Time) {
			if now < last {
				order = false
			}
			last = now
		}))
	}
	for round := 0; round < 2000; round++ {
		k := rng.IntN(n)
		if rng.IntN(4) == 0 {
			timers[k].Stop()
			want[k] = Never
		} else {
			at := Time(rng.IntN(10000))
			timers[k].Reset(at)
			want[k] = at
		}
	}
	e.Run(0)
	require.True(t, order)
	require.Equal(t, want, got)
}

func BenchmarkTimerReset(b *testing.B) {
	e := NewEngine()
	tm := e.NewTimer(nopHandler{})
	for i := 0; i < 64; i++ {
		e.At(Time(i*1000), nopHandler{})
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tm.Reset(Time(i % 50000))
	}
}
