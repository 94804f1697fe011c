package test

import (
	"testing"

	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/testbed"
)

// BenchmarkE2EWrite64 posts 64-byte RDMA WRITEs one at a time through the
// whole model (provider → BAR → PCIe → fetch/DMA → RoCE → wire → peer → ACK →
// CQE → poll). ns/op is wall-clock per simulated WRITE, so 1e9/ns_op is the
// emulator's WRITEs per second.
func BenchmarkE2EWrite64(b *testing.B) {
	for _, bf := range []bool{true, false} {
		name := "doorbell"
		if bf {
			name = "blueflame"
		}
		b.Run(name, func(b *testing.B) {
			w, err := testbed.New(testbed.DefaultConfig())
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			eps, err := w.ConnectRC(testbed.ConnOpts{})
			if err != nil {
				b.Fatal(err)
			}
			req, rsp := eps[0], eps[1]
			req.QP.SetBlueFlame(bf)
			wrs := []provider.SendWR{{WRID: 1, Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
				SGL: []provider.SGE{req.MR.SGE(0, 64)}, RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey}}
			wcs := make([]provider.WC, 1)
			b.ReportAllocs()
			fired := w.Eng.Fired()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				postWait(b, req, wrs, wcs)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "writes/s")
			b.ReportMetric(float64(w.Eng.Fired()-fired)/float64(b.N), "events/op")
		})
	}
}
