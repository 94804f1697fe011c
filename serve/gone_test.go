package serve_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/serve"
	"github.com/stretchr/testify/require"
)

// TestFirstCallAfterDaemonGone: the first call a client makes after its
// daemon has gone, with no call before it that saw the death, fails with
// ErrDeviceGone within the dial timeout. Counters returned an empty set
// and no error when the daemon died under its own request (rc_pingpong
// printed "counters: (none non-zero)" after a daemon's SIGTERM).
func TestFirstCallAfterDaemonGone(t *testing.T) {
	for _, tc := range []struct {
		name string
		call func(ctx *provider.Context, cq *provider.CQ) error
	}{
		{"counters", func(ctx *provider.Context, _ *provider.CQ) error { _, err := ctx.Counters(); return err }},
		{"alloc_pd", func(ctx *provider.Context, _ *provider.CQ) error { _, err := ctx.AllocPD(); return err }},
		{"create_cq", func(ctx *provider.Context, _ *provider.CQ) error { _, err := ctx.CreateCQ(4); return err }},
		{"poll_cq", func(_ *provider.Context, cq *provider.CQ) error {
			_, err := cq.Poll(make([]provider.WC, 1))
			return err
		}},
		{"get_async_event", func(ctx *provider.Context, _ *provider.CQ) error {
			_, err := ctx.GetAsyncEvent(2 * time.Second)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock := filepath.Join(t.TempDir(), "softnic.sock")
			d, err := serve.New(serve.Config{Socket: sock, Devices: 2})
			require.NoError(t, err)
			go d.Serve()
			ctx, err := provider.Dial("softnic0", provider.DialOptions{Socket: sock, Timeout: 500 * time.Millisecond})
			require.NoError(t, err)
			defer ctx.Close()
			cq, err := ctx.CreateCQ(4)
			require.NoError(t, err)
			require.NoError(t, d.Close())
			start := time.Now()
			require.ErrorIs(t, tc.call(ctx, cq), provider.ErrDeviceGone)
			require.Less(t, time.Since(start), 3*time.Second)
		})
	}
}
