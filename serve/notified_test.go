package serve

import (
	"math/rand"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/attach"
)

// scanList is the notification list as it was, a slice scanned once full
// (the reference the O(1) list must match).
type scanList struct {
	q       []uint32
	dropped uint64
}

func (s *scanList) notify(ch uint32) {
	if len(s.q) >= maxNotified && slices.Contains(s.q, ch) {
		s.dropped++
		return
	}
	s.q = append(s.q, ch)
}

func (s *scanList) notified() []uint32 {
	n := min(len(s.q), attach.MaxEvents)
	out := slices.Clone(s.q[:n])
	s.q = append(s.q[:0], s.q[n:]...)
	return out
}

// takeNotified is SimNotified's part of a client's list.
func takeNotified(c *client) []uint32 {
	n := min(c.notified.len(), attach.MaxEvents)
	out := slices.Clone(c.notified.entries()[:n])
	c.notified.pop(n)
	return out
}

// TestNotifyAtCap: what client.notify keeps, drops and counts, and what
// SimNotified then hands out, is what the list did when it scanned
// itself: below the cap every notification is kept; at the cap one for a
// channel the list names is dropped and counted, one for a channel it
// does not name is kept (the list grows past the cap by it); a channel
// whose entries SimNotified took is new again.
func TestNotifyAtCap(t *testing.T) {
	cases := []struct {
		name     string
		channels int // events name channels 0..channels-1
		events   int
		popEvery int // a SimNotified every popEvery events (0: never)
		dropped  bool
	}{
		{"one channel, never asked", 1, 3 * maxNotified, 0, true},
		{"async and two channels, asked now and then", 3, 4 * maxNotified, 700, true},
		{"many channels past the cap", 2 * maxNotified, 3 * maxNotified, 0, true},
		{"asked often: never full", 64, 4 * maxNotified, 100, false},
		{"asked seldom at the cap", 300, 6 * maxNotified, 3000, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewSource(int64(c.channels)))
			cl := &client{d: &Daemon{}}
			var ref scanList
			for i := 1; i <= c.events; i++ {
				ch := uint32(r.Intn(c.channels))
				cl.notify(ch)
				ref.notify(ch)
				require.Equal(t, ref.dropped, cl.d.ctr.NotifiesDropped, "event %d", i)
				require.Equal(t, len(ref.q), cl.notified.len(), "event %d", i)
				if c.popEvery > 0 && i%c.popEvery == 0 {
					require.Equal(t, ref.notified(), takeNotified(cl), "SimNotified after event %d", i)
				}
			}
			require.Equal(t, ref.q, cl.notified.entries())
			for len(ref.q) > 0 {
				require.Equal(t, ref.notified(), takeNotified(cl))
			}
			require.Zero(t, cl.notified.len())
			require.Empty(t, cl.notified.n, "no channel counted once the list is empty")
			require.Equal(t, c.dropped, ref.dropped > 0)
		})
	}
}

// TestNotifyCostAtCap: a list past the cap by 2^20 channels, each then
// notified twice more. Each notification past the cap scanned the list:
// the 2^20 new channels the whole of it, the 2^21 repeats half of it on
// average, some 1.5·10^12 comparisons, beyond the test timeout; counted
// per channel, each is one look-up.
func TestNotifyCostAtCap(t *testing.T) {
	const channels = 1 << 20
	cl := &client{d: &Daemon{}}
	for ch := range uint32(channels) {
		cl.notify(ch)
	}
	for range 2 {
		for ch := range uint32(channels) {
			cl.notify(ch)
		}
	}
	require.Equal(t, channels, cl.notified.len(), "one entry a channel")
	require.Equal(t, uint64(2*channels), cl.d.ctr.NotifiesDropped)
}
