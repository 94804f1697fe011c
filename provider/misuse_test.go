package provider_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/testbed"
)

// TestAllocBufferBadSizes gives AllocBuffer sizes and alignments an
// application may compute wrongly: each is refused with a sentinel (no
// panic, even where rounding the size up would overflow an int).
func TestAllocBufferBadSizes(t *testing.T) {
	w, err := testbed.New(testbed.DefaultConfig())
	require.NoError(t, err)
	t.Cleanup(w.Close)
	ctx := w.Hosts[0].Ctx
	cases := []struct {
		name        string
		size, align int
		want        error
	}{
		{"zero", 0, 8, provider.ErrInvalidArg},
		{"negative", -1, 8, provider.ErrInvalidArg},
		{"min_int", math.MinInt, 8, provider.ErrInvalidArg},
		{"align_zero", 64, 0, provider.ErrInvalidArg},
		{"align_not_pow2", 64, 3, provider.ErrInvalidArg},
		{"align_max_int", 64, math.MaxInt, provider.ErrInvalidArg},
		{"bigger_than_region", ctx.Mem().Size() + 1, 8, provider.ErrNoMemory},
		{"2^62", 1 << 62, 8, provider.ErrNoMemory},
		{"max_int_minus_8", math.MaxInt - 8, 8, provider.ErrNoMemory},
		{"max_int_minus_7", math.MaxInt - 7, 8, provider.ErrNoMemory},
		{"max_int", math.MaxInt, 8, provider.ErrNoMemory},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := ctx.Mem().InUse()
			_, err := ctx.AllocBuffer(c.size, c.align)
			require.ErrorIs(t, err, c.want)
			var oe *provider.OpError
			require.ErrorAs(t, err, &oe)
			require.Equal(t, "alloc_buffer", oe.Op)
			require.Equal(t, before, ctx.Mem().InUse())
		})
	}
}
