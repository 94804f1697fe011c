package test

import (
	"errors"
	"testing"

	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/testbed"
	"github.com/stretchr/testify/require"
)

// TestCQAtMaxCQE creates a CQ of exactly the max_cqe QUERY_DEVICE reports,
// in process and over uverbs: as on a ConnectX (max_cqe 2^22 - 1, a ring of
// 2^22) the reported figure is one a CQ can have, and one more is EINVAL.
// The device reported its ring limit as max_cqe, so a CQ of max_cqe entries
// (a ring one power of two larger) was refused with BAD_PARAM.
func TestCQAtMaxCQE(t *testing.T) {
	for _, c := range []struct {
		name   string
		maxCQE int
		uverbs bool
	}{
		{"power of two, in process", 1024, false},
		{"power of two, over uverbs", 1024, true},
		{"one under, in process", 1023, false},
		{"one under, over uverbs", 1023, true},
		{"odd, over uverbs", 1000, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := controlWorld(t, c.uverbs, func(cfg *testbed.Config) { cfg.Device.Caps.MaxCQE = c.maxCQE })
			ctx := w.Hosts[0].Ctx
			a := ctx.Attr()
			require.Equal(t, c.maxCQE, a.MaxCQE)
			in := ctx.Mem().InUse()
			cq, err := ctx.CreateCQ(a.MaxCQE)
			require.NoError(t, err, "a CQ of max_cqe %d entries", a.MaxCQE)
			require.GreaterOrEqual(t, cq.Entries(), a.MaxCQE)
			require.NoError(t, cq.Resize(a.MaxCQE/2))
			require.NoError(t, cq.Resize(a.MaxCQE))
			require.NoError(t, cq.Destroy())
			_, err = ctx.CreateCQ(a.MaxCQE + 1)
			require.True(t, errors.Is(err, provider.ErrInvalidArg), "%v", err)
			require.Equal(t, in, ctx.Mem().InUse(), "host memory after the CQs")
		})
	}
}

// controlWorld is a default two-host world (changed by mod, if any) whose
// providers reach their devices through the Go control interface or,
// with uverbs, over uverbs bytes; closed when the test ends.
func controlWorld(t *testing.T, uverbs bool, mod func(*testbed.Config)) *testbed.World {
	t.Helper()
	cfg := testbed.DefaultConfig()
	if mod != nil {
		mod(&cfg)
	}
	cfg.UverbsControl = uverbs
	w, err := testbed.New(cfg)
	require.NoError(t, err)
	t.Cleanup(w.Close)
	return w
}
