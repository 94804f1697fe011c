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

func benchHost(b *testing.B, uv bool) *testbed.Host {
	cfg := testbed.DefaultConfig()
	cfg.UverbsControl = uv
	w, err := testbed.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(w.Close)
	return w.Hosts[0]
}

func BenchmarkControlCreateDestroyCQ(b *testing.B) {
	for _, mode := range []struct {
		name string
		uv   bool
	}{{"direct", false}, {"uverbs", true}} {
		b.Run(mode.name, func(b *testing.B) {
			h := benchHost(b, mode.uv)
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
}

func BenchmarkControlModifyQP(b *testing.B) {
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
}
