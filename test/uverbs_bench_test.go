package test

import (
	"testing"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/testbed"
)

// Control round trips through provider.UverbsControl and the in-process
// uverbsdev.Server (encode, Handle, decode, errno mapping), beside the
// same calls on the device's Go interface.

// eachControl runs f as a "direct" and a "uverbs" sub-benchmark, each on
// its own world.
func eachControl(b *testing.B, f func(b *testing.B, w *testbed.World)) {
	for _, mode := range []struct {
		name string
		uv   bool
	}{{"direct", false}, {"uverbs", true}} {
		b.Run(mode.name, func(b *testing.B) {
			cfg := testbed.DefaultConfig()
			cfg.UverbsControl = mode.uv
			w, err := testbed.New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			f(b, w)
		})
	}
}

func BenchmarkControlCreateDestroyCQ(b *testing.B) {
	eachControl(b, func(b *testing.B, w *testbed.World) {
		h := w.Hosts[0]
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			cq, err := h.Ctx.CreateCQ(63)
			if err != nil {
				b.Fatal(err)
			}
			if err := cq.Destroy(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkControlModifyQP(b *testing.B) {
	eachControl(b, func(b *testing.B, w *testbed.World) {
		eps, err := w.ConnectRC(testbed.ConnOpts{})
		if err != nil {
			b.Fatal(err)
		}
		qp := eps[0].QP
		attr := &provider.QPAttr{AccessFlags: provider.AccessRemoteRead}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if err := qp.Modify(attr, mlx5.AttrAccessFlags); err != nil {
				b.Fatal(err)
			}
		}
	})
}
