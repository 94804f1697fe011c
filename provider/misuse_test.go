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

// TestFreeBufferNotAllocated: FreeBuffer frees only AllocBuffer's buffers.
// A double free (the address meanwhile handed to a CQ ring) and the
// addresses of the context's own rings and doorbell records are refused
// with ErrInvalidArg, and nothing is released. Before the fix each was
// freed: the next AllocBuffer returned memory the device still wrote CQEs
// or read WQEs from.
func TestFreeBufferNotAllocated(t *testing.T) {
	w, err := testbed.New(testbed.DefaultConfig())
	require.NoError(t, err)
	t.Cleanup(w.Close)
	ctx := w.Hosts[0].Ctx
	freed, err := ctx.AllocBuffer(4096, 4096)
	require.NoError(t, err)
	require.NoError(t, ctx.FreeBuffer(freed))
	cq, err := ctx.CreateCQ(63) // takes the freed buffer's place
	require.NoError(t, err)
	require.Equal(t, freed.Addr, cq.Info().RingAddr, "the CQ ring reuses the freed address")
	pd, err := ctx.AllocPD()
	require.NoError(t, err)
	qp, err := ctx.CreateQP(pd, provider.QPInitAttr{Type: provider.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: provider.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	live, err := ctx.AllocBuffer(4096, 64)
	require.NoError(t, err)
	cases := []struct {
		name string
		addr uint64
	}{
		{"double_free", freed.Addr},
		{"cq_ring", cq.Info().RingAddr},
		{"cq_doorbell_record", cq.Info().DBRAddr},
		{"qp_buffer", qp.SQInfo().RQAddr},
		{"inside_a_buffer", live.Addr + 64},
		{"zero", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := ctx.Mem().InUse()
			require.ErrorIs(t, ctx.FreeBuffer(provider.Buffer{Addr: c.addr}), provider.ErrInvalidArg)
			require.Equal(t, before, ctx.Mem().InUse(), "nothing freed")
		})
	}
	require.NoError(t, ctx.FreeBuffer(live))
	require.ErrorIs(t, ctx.FreeBuffer(live), provider.ErrInvalidArg)
}

// TestFreeBufferAfterClose: FreeBuffer on a closed context fails with
// ErrClosed, as every verb of a closed context does (package doc), and
// frees nothing. Before the fix it succeeded, handing the range back to
// the allocator of a region a dialled context has unmapped by then.
func TestFreeBufferAfterClose(t *testing.T) {
	for _, c := range []struct {
		name  string
		close func(w *testbed.World) error
	}{
		{"context_close", func(w *testbed.World) error { return w.Hosts[0].Ctx.Close() }},
		{"world_close", func(w *testbed.World) error { w.Close(); return nil }},
	} {
		t.Run(c.name, func(t *testing.T) {
			w, err := testbed.New(testbed.DefaultConfig())
			require.NoError(t, err)
			t.Cleanup(w.Close)
			ctx := w.Hosts[0].Ctx
			buf, err := ctx.AllocBuffer(4096, 4096)
			require.NoError(t, err)
			require.NoError(t, c.close(w))
			before := ctx.Mem().InUse()
			require.ErrorIs(t, ctx.FreeBuffer(buf), provider.ErrClosed)
			require.Equal(t, before, ctx.Mem().InUse(), "nothing freed")
		})
	}
}
