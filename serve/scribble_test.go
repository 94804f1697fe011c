package serve_test

import (
	"math/rand"
	"testing"
	"time"

	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/serve"
	"github.com/stretchr/testify/require"
)

// TestScribbledHostMemory: a client that rewrites its own host memory
// under the device — its send and receive rings, doorbell records, CQ
// buffer and data, with random runs of bytes, while it goes on posting —
// and a peer that sends and writes to it. The memfd is sealed against
// shrinking, not against writes: the device reads whatever is there. Each
// of the peer's operations completes, successfully or with an error
// status (the victim's RQ in garbage: RNR, a remote error), never hangs,
// and the daemon serves on.
func TestScribbledHostMemory(t *testing.T) {
	d, sock, _ := startDaemon(t, 2, nil)
	o := provider.DialOptions{Socket: sock, MemSize: 1 << 20}
	for seed := int64(1); seed <= 10; seed++ {
		victim, err := newSide(0, o)
		require.NoError(t, err)
		me, err := newSide(1, o)
		require.NoError(t, err)
		require.NoError(t, victim.connect(1, me.qp.QPN(), 0x1000, 0x2000))
		a := provider.DefaultConnectAttr()
		id := serve.Identity(0)
		a.Peer = provider.Peer{QPN: victim.qp.QPN(), PSN: 0x1000, GID: id.IP.As16(), MAC: id.MAC}
		a.PSN, a.Access = 0x2000, provider.AccessRemoteWrite
		a.RNRRetry = 3 // not 7, infinite: the victim's RQ may be garbage
		require.NoError(t, me.qp.Connect(a))
		for i := 0; i < 8; i++ {
			_, err := victim.qp.PostRecv([]provider.RecvWR{{WRID: uint64(i), SGL: []provider.SGE{victim.mr.SGE(0, 4096)}}})
			require.NoError(t, err)
		}
		rng := rand.New(rand.NewSource(seed))
		mem := victim.ctx.Mem().Bytes()
		stop, done := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			for {
				select {
				case <-stop:
					return
				default:
				}
				off := rng.Intn(64 << 10) // the rings and CQ are allocated first
				rng.Read(mem[off : off+1+rng.Intn(4096)])
				// Errors are the victim's own business: its QP may be in error.
				victim.qp.PostSend([]provider.SendWR{{WRID: 9, Opcode: provider.WRSend, Flags: provider.SendSignaled,
					SGL: []provider.SGE{victim.mr.SGE(0, 64)}}})
				victim.qp.PostRecv([]provider.RecvWR{{WRID: 10, SGL: []provider.SGE{victim.mr.SGE(0, 4096)}}})
				time.Sleep(100 * time.Microsecond)
			}
		}()
		var last provider.WCStatus
		for i := 0; i < 50 && last == provider.WCSuccess; i++ {
			op := provider.WRSend
			if i%2 == 1 {
				op = provider.WRRDMAWrite
			}
			_, err := me.qp.PostSend([]provider.SendWR{{WRID: uint64(i), Opcode: op, Flags: provider.SendSignaled,
				SGL: []provider.SGE{me.mr.SGE(0, 256)}, RemoteAddr: victim.buf.Addr, RKey: victim.mr.RKey}})
			require.NoError(t, err)
			wcs, err := waitWC(me.cq, 1, time.Now().Add(20*time.Second))
			require.NoError(t, err, "seed %d: operation %d", seed, i)
			last = wcs[0].Status
		}
		close(stop)
		<-done
		t.Logf("seed %d: last status %v", seed, last)
		require.NoError(t, victim.ctx.Close())
		require.NoError(t, me.ctx.Close())
	}
	requireServing(t, d, sock)
}
