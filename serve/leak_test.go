package serve_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/softnic/softnic/attach"
	"github.com/softnic/softnic/provider"
	"github.com/stretchr/testify/require"
)

// TestChurnNoLeaks: clients attaching and going, by every way a client
// goes — Close (DETACH), a socket closed without DETACH, a socket
// half-closed for writing, an ATTACH refused — leave the daemon as they
// found it: the descriptors of this process (the daemon's and the
// clients', all in it) and its goroutines come back to their count.
func TestChurnNoLeaks(t *testing.T) {
	d, sock, _ := startDaemon(t, 2, nil)
	o := provider.DialOptions{Socket: sock, MemSize: 1 << 20, RingSlots: 64}
	ways := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"close", func(t *testing.T) {
			ctx, err := provider.Dial("softnic0", o)
			require.NoError(t, err)
			_, err = ctx.AllocPD()
			require.NoError(t, err)
			_, err = ctx.CreateCQ(16)
			require.NoError(t, err)
			require.NoError(t, ctx.Close())
		}},
		{"socket closed", func(t *testing.T) {
			r, err := rawAttach(sock, "softnic0", 0x10000000, true)
			require.NoError(t, err)
			_, err = r.ctl.GetContext()
			require.NoError(t, err)
			_, err = r.ctl.AllocPD()
			require.NoError(t, err)
			r.close()
		}},
		{"socket half-closed", func(t *testing.T) {
			r, err := rawAttach(sock, "softnic0", 0x10000000, true)
			require.NoError(t, err)
			require.NoError(t, r.uc.CloseWrite())
			r.conn.SetDeadline(time.Now().Add(5 * time.Second))
			_, _, _, err = r.conn.Recv()
			require.ErrorIs(t, err, attach.ErrPeerGone, "the daemon tears down and closes its end")
			r.close()
		}},
		{"refused", func(t *testing.T) {
			r, err := rawAttach(sock, "softnic9", 0x10000000, false)
			require.NoError(t, err)
			r.conn.SetDeadline(time.Now().Add(5 * time.Second))
			h, _, _, err := r.conn.Recv()
			require.NoError(t, err)
			require.Equal(t, attach.TError, h.Type)
			r.close()
		}},
	}
	settle := func() (int, int) {
		// Wait for the last teardown (its goroutine and socket) to finish:
		// no clients and the counts stable over a few looks.
		fds, gs := -1, -1
		for i, same := 0, 0; i < 500 && same < 5; i++ {
			time.Sleep(5 * time.Millisecond)
			f, g := openFDs(t), runtime.NumGoroutine()
			if f == fds && g == gs && d.Clients() == 0 {
				same++
			} else {
				same = 0
			}
			fds, gs = f, g
		}
		return fds, gs
	}
	for _, w := range ways {
		w.run(t) // warm up: what is made once (the runtime's, the logger's)
	}
	for _, w := range ways {
		t.Run(w.name, func(t *testing.T) {
			fds, gs := settle()
			for i := 0; i < 50; i++ {
				w.run(t)
			}
			f, g := settle()
			require.LessOrEqual(t, f, fds, "descriptors after 50 of %s", w.name)
			require.LessOrEqual(t, g, gs, "goroutines after 50 of %s:\n%s", w.name, stacks())
		})
	}
	c := d.Counters()
	require.Equal(t, c.Attaches, c.Detaches)
}

// stacks is every goroutine's stack.
func stacks() string {
	b := make([]byte, 1<<20)
	return string(b[:runtime.Stack(b, true)])
}
