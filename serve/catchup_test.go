package serve

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/sim"
)

// storm keeps the engine busier than real time: an event every
// nanosecond of virtual time, each scheduling the next.
type storm struct{ eng *sim.Engine }

func (s *storm) Fire(sim.Time) { s.eng.After(sim.Nanosecond, s) }

// TestWallCatchUpBounded: with --clock wall, an engine with more work
// than it runs in real time is caught up worldSlice events at a time by
// each holder of the world, not to the wall clock by one. The engine fell
// further behind the longer one holder ran it, so under four pairs of
// clients streaming 4 MiB WRITEs each lock held the world for up to a
// third of a second, growing, until healthy clients' ring calls missed
// their 1 s deadline and they took the daemon for dead (device gone).
func TestWallCatchUpBounded(t *testing.T) {
	d, err := New(Config{Socket: filepath.Join(t.TempDir(), "s.sock"), Devices: 1, Clock: ClockWall})
	require.NoError(t, err)
	// Stop the pacer, so that only the calls below run the engine; Close
	// then finds it stopped.
	close(d.stop)
	d.pacer.Wake()
	<-d.paced
	d.stop = make(chan struct{})
	defer d.Close()
	c := &client{d: d}
	for _, tc := range []struct {
		name string
		run  func()
		most uint64
	}{
		{"lock", func() { d.lock(); d.unlock() }, worldSlice},
		{"step call", func() { d.lock(); c.step(0, 1, nil); d.unlock() }, 2 * worldSlice},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d.mu.Lock()
			d.eng.At(d.eng.Now(), &storm{d.eng})
			d.mu.Unlock()
			// Let the wall clock get 2 ms (2e6 events) ahead.
			for end := time.Now().Add(2 * time.Second); d.pacer.Wall() < d.Now().Add(2*sim.Millisecond); {
				require.True(t, time.Now().Before(end), "the wall clock does not move")
				time.Sleep(100 * time.Microsecond)
			}
			before := d.eng.Fired()
			tc.run()
			require.LessOrEqual(t, d.eng.Fired()-before, tc.most, "events run with the world held")
		})
	}
}
