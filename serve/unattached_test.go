package serve_test

import (
	"net"
	"testing"
	"time"

	"github.com/softnic/softnic/provider"
	"github.com/stretchr/testify/require"
)

// TestUnattachedNotRefused: a connection closed at once by its peer (the
// liveness check another daemon makes of the socket path) and one still
// waiting to attach when the daemon stops are not refusals: counted as
// Unattached, not logged as "refused". A client attached when the daemon
// stops is detached with the reason "daemon stopping", and the detach
// line counts its completion channels with the other objects left open.
func TestUnattachedNotRefused(t *testing.T) {
	d, sock, log := startDaemon(t, 1, nil)
	const probes, waiting = 5, 3
	for i := 0; i < probes; i++ {
		c, err := net.Dial("unixpacket", sock)
		require.NoError(t, err)
		require.NoError(t, c.Close())
	}
	require.Eventually(t, func() bool { return d.Counters().Unattached == probes }, 5*time.Second, 10*time.Millisecond)
	for i := 0; i < waiting; i++ {
		c, err := net.Dial("unixpacket", sock)
		require.NoError(t, err)
		defer c.Close()
	}
	ctx, err := provider.Dial("softnic0", provider.DialOptions{Socket: sock, MemSize: 1 << 20, RingSlots: 64})
	require.NoError(t, err)
	defer ctx.Close()
	for i := 0; i < 2; i++ {
		_, err := ctx.CreateCompChannel()
		require.NoError(t, err)
	}
	require.NoError(t, d.Close())
	c := d.Counters()
	require.Zero(t, c.Refusals, log.String())
	require.Equal(t, uint64(probes+waiting), c.Unattached)
	require.NotContains(t, log.String(), "refused pid")
	require.Contains(t, log.String(), "daemon stopping; destroyed 2 completion channels")
}
