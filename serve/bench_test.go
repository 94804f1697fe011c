package serve_test

import (
	"testing"
	"time"

	"github.com/softnic/softnic/profile"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/testbed"
	"github.com/stretchr/testify/require"
)

// benchWrites posts one signalled 64 B RDMA WRITE at a time and polls its
// CQE: the whole post→CQE walk per op.
func benchWrites(b *testing.B, eps [2]*testbed.Endpoint) {
	wr := []provider.SendWR{{Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
		SGL: []provider.SGE{eps[0].MR.SGE(0, 64)}, RemoteAddr: eps[1].Buf.Addr, RKey: eps[1].MR.RKey}}
	wcs := make([]provider.WC, 1)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := eps[0].QP.PostSend(wr); err != nil {
			b.Fatal(err)
		}
		for n := 0; n == 0; {
			var err error
			if n, err = eps[0].SendCQ.Poll(wcs); err != nil {
				b.Fatal(err)
			}
		}
		if wcs[0].Status != provider.WCSuccess {
			b.Fatal(wcs[0].Status)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

// BenchmarkPostCQE: the same post→CQE loop on a one-process world and on
// a daemon's devices (socket, ring and memfd between the provider and the
// device; the client here shares the daemon's process, so the figure is
// the protocol's cost without a second scheduler entity). Run side by
// side: go test -run '^$' -bench PostCQE ./serve
func BenchmarkPostCQE(b *testing.B) {
	b.Run("in-process", func(b *testing.B) {
		p := profile.Default()
		w, err := testbed.New(testbed.Config{Device: p.Device, Wire: p.Wire, Host: p.Host()})
		require.NoError(b, err)
		defer w.Close()
		eps, err := w.ConnectRC(allOps)
		require.NoError(b, err)
		benchWrites(b, eps)
	})
	b.Run("daemon", func(b *testing.B) {
		_, sock, _ := startDaemon(b, 2, nil)
		eps, closeAll, err := dialPair(provider.DialOptions{Socket: sock, Clock: provider.NewHostClock(), Timeout: 5 * time.Second}, allOps)
		require.NoError(b, err)
		defer closeAll()
		benchWrites(b, eps)
	})
}
