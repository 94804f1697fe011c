package serve_test

import (
	"testing"
	"time"

	"github.com/softnic/softnic/serve"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/uverbs"
	"github.com/softnic/softnic/wallclock"
	"github.com/stretchr/testify/require"
)

// TestWallClockDestroySpam: with ClockWall virtual time follows the wall
// clock, at most the lead ahead, whatever a client sends. DESTROY_QP
// lingers the engine detachLinger (50 us) before it runs, so that what the
// device started for the QP leaves; it ran the engine 50 us further each
// time, past the wall clock, even for a handle the client does not have.
// A client sending a thousand of them pushed the shared clock tens of
// milliseconds ahead, and every device's timers and every other client's
// polls stood still until the wall clock caught up.
func TestWallClockDestroySpam(t *testing.T) {
	start := time.Now() // before the pacer's: its wall clock is behind this one
	d, sock := startDaemonCfg(t, serve.Config{Devices: 2, Clock: serve.ClockWall})
	r := dialRaw(t, sock, "softnic0", 0x10000000)
	b := make([]byte, 64)
	n, err := uverbs.EncodeWrite(b, uverbs.CmdDestroyQP, &uverbs.DestroyQP{QPHandle: 0xdead}, nil, uverbs.DestroyQPRespSize)
	require.NoError(t, err)
	const spam = 1000
	for i := 0; i < spam; i++ {
		_, err := rawTransport{r}.Do(b[:n], make([]byte, 64))
		require.Error(t, err, "no such QP")
	}
	wall := sim.Time(time.Since(start).Nanoseconds()) * sim.Time(sim.Nanosecond)
	ahead := d.Now() - wall
	lead := sim.Time(wallclock.DefaultLead.Nanoseconds()) * sim.Time(sim.Nanosecond) // a time.Duration, in sim's picoseconds
	require.LessOrEqual(t, int64(ahead), int64(lead),
		"virtual time %v ahead of the wall clock after %d DESTROY_QPs", sim.Duration(ahead), spam)
	alive(t, r)
}
