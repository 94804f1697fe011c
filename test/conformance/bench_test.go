package conformance

import (
	"testing"
	"time"

	"github.com/softnic/softnic/provider"
)

// BenchmarkPostSend is the cost of one post_send with its doorbell: an
// 8-byte RDMA WRITE, one WR per call, every 16th signaled (the SQ is
// drained when 16 are outstanding). post_ns/op is the time inside
// PostSend alone: on rxe the WQE store plus the write() system call that
// rings; on the emulated NIC the WQE build plus the MMIO doorbell (or
// BlueFlame copy) into the device model. ns/op includes the polling.
func BenchmarkPostSend(b *testing.B) {
	for _, be := range backends(b) {
		b.Run(be.name, func(b *testing.B) {
			p := connect(b, be)
			a, z := p.ep[0], p.ep[1]
			wr := provider.SendWR{Opcode: provider.WRRDMAWrite, SGL: []provider.SGE{a.mr.SGE(0, 8)},
				RemoteAddr: z.buf.Addr, RKey: z.mr.RKey}
			wcs := make([]provider.WC, 16)
			var inPost time.Duration
			n := 0
			for b.Loop() {
				wr.Flags = 0
				if n%16 == 15 {
					wr.Flags = provider.SendSignaled
				}
				t0 := time.Now()
				if _, err := a.qp.PostSend([]provider.SendWR{wr}); err != nil {
					b.Fatal(err)
				}
				inPost += time.Since(t0)
				n++
				if n%16 == 0 {
					deadline := time.Now().Add(pollTimeout)
					for {
						k, err := a.cq.Poll(wcs)
						if err != nil {
							b.Fatal(err)
						}
						if k > 0 {
							if wcs[0].Status != provider.WCSuccess {
								b.Fatalf("completion %v", wcs[0].Status)
							}
							break
						}
						if time.Now().After(deadline) {
							b.Fatalf("no completion after %v", pollTimeout)
						}
					}
				}
			}
			b.ReportMetric(float64(inPost.Nanoseconds())/float64(n), "post_ns/op")
		})
	}
}
