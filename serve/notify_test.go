package serve

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/sim"
)

// TestNotifiedBounded: a client that reads its completion events but
// never asks which channels were notified (SimNotified) — a raw client
// arming a CQ that has a CQE pending, over and over, and reading each
// event with SimReadCompEvents — grew the daemon's list of notifications
// by an entry per event, without end. The list stays bounded, and still
// names the channel.
func TestNotifiedBounded(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s.sock")
	d, err := New(Config{Socket: sock, Devices: 1})
	require.NoError(t, err)
	go d.Serve()
	defer d.Close()
	ctx, err := provider.Dial("softnic0", provider.DialOptions{Socket: sock, MemSize: 1 << 20, RingSlots: 64})
	require.NoError(t, err)
	defer ctx.Close()
	ch, err := ctx.CreateCompChannel()
	require.NoError(t, err)
	cq, err := ctx.CreateCQEx(provider.CQInitAttr{Entries: 4, Channel: ch})
	require.NoError(t, err)
	pd, err := ctx.AllocPD()
	require.NoError(t, err)
	buf, err := ctx.AllocBuffer(4096, 4096)
	require.NoError(t, err)
	mr, err := pd.RegMR(buf.Addr, 4096, provider.AccessLocalWrite)
	require.NoError(t, err)
	qp, err := ctx.CreateQP(pd, provider.QPInitAttr{Type: provider.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: provider.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	require.NoError(t, qp.ToInit(provider.DefaultConnectAttr()))
	_, err = qp.PostRecv([]provider.RecvWR{{WRID: 1, SGL: []provider.SGE{mr.SGE(0, 64)}}})
	require.NoError(t, err)
	// The flush of the receive: a CQE the client never polls, so that
	// every arm finds it pending and raises an event at once.
	require.NoError(t, qp.Modify(&provider.QPAttr{QPState: provider.QPStateErr}, mlx5.AttrState))

	d.mu.Lock()
	var c *client
	for k := range d.clients {
		c = k
	}
	d.mu.Unlock()
	const rounds = 6000
	read := 0
	for i := 0; i < rounds; i++ {
		require.NoError(t, cq.ReqNotify(false))
		spare, err := ctx.AllocPD() // a request: the daemon has the arm first
		require.NoError(t, err)
		require.NoError(t, spare.Dealloc())
		d.lock()
		d.eng.RunUntil(d.eng.Now().Add(100 * sim.Microsecond)) // the EQE, the interrupt, the handler
		var evs [4]mlx5.CompEvent
		n, err := c.dev.ReadCompEvents(1, evs[:]) // as SimReadCompEvents, without SimNotified
		d.unlock()
		require.NoError(t, err)
		read += n
	}
	d.mu.Lock()
	kept := c.notified.len()
	named := kept > 0 && c.notified.entries()[0] == 1
	d.mu.Unlock()
	require.Equal(t, rounds, read, "one event an arm")
	require.LessOrEqual(t, kept, 4096, "notifications kept for the client")
	require.True(t, named, "the channel is still named")
}
