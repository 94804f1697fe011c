package serve_test

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/softnic/softnic/attach"
	"github.com/softnic/softnic/provider"
	"github.com/stretchr/testify/require"
)

// TestReopenAfterClose: Context.Close frees the device before it returns
// (DETACH, answered after the teardown), so a Dial of the same device
// right after it never meets the closed context's teardown (EBUSY
// "attached by pid" of this very process), however the daemon's
// goroutines are scheduled. A device whose owner is alive is still
// refused at once.
func TestReopenAfterClose(t *testing.T) {
	d, sock, log := startDaemon(t, 4, nil)
	o := provider.DialOptions{Socket: sock}
	ctx, err := provider.Dial("softnic3", o)
	require.NoError(t, err)
	for i := 0; i < 200; i++ {
		_, err = ctx.AllocPD()
		require.NoError(t, err, "round %d", i)
		require.NoError(t, ctx.Close(), "round %d", i)
		ctx, err = provider.Dial("softnic3", o)
		require.NoError(t, err, "round %d: Dial right after Close", i)
	}
	waits := d.Counters().LeaveWaits
	_, err = provider.Dial("softnic3", o)
	require.ErrorIs(t, err, syscall.EBUSY, "the owner is alive")
	// At once: the daemon did not wait for a teardown (of an owner it
	// took to be leaving) before refusing.
	require.Equal(t, waits, d.Counters().LeaveWaits, "refused at once, not after waiting for the owner to leave")
	require.NoError(t, ctx.Close())
	require.Equal(t, 0, d.Clients())
	require.Equal(t, 201, strings.Count(log.String(), "softnic3: pid "+strconv.Itoa(os.Getpid())+": detached; nothing left open"),
		"each Close detached (its objects destroyed before)")
}

// TestReattachAfterSocketClose: a client that only closes its socket (one
// killed, or a provider from before DETACH) frees its device for an
// ATTACH sent right after, too: the daemon sees the closed socket and
// waits for that teardown rather than answering EBUSY.
func TestReattachAfterSocketClose(t *testing.T) {
	_, sock, _ := startDaemon(t, 1, nil)
	for i := 0; i < 200; i++ {
		r := dialRaw(t, sock, "softnic0", 0x10000000)
		r.conn.Close()
		r.mem.Close()
		r.rmem.Close()
	}
}

// TestDetachOldDaemon: against a daemon that does not know DETACH (a
// proxy answers it EPROTO, as such a daemon answers an unknown type)
// Close still succeeds, and the device is free again for the next Dial.
func TestDetachOldDaemon(t *testing.T) {
	_, sock, _ := startDaemon(t, 1, nil)
	o := provider.DialOptions{Socket: startProxy(t, sock, true)}
	for i := 0; i < 20; i++ {
		// Through the proxy the daemon sees the old connection close only
		// once the proxy has closed its own: a Dial right after Close may
		// meet EBUSY until then (the old daemon's behaviour), never for
		// long.
		var ctx *provider.Context
		var err error
		for deadline := time.Now().Add(2 * time.Second); ; {
			ctx, err = provider.Dial("softnic0", o)
			if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Millisecond)
		}
		require.NoError(t, err, "round %d", i)
		_, err = ctx.AllocPD()
		require.NoError(t, err, "round %d", i)
		require.NoError(t, ctx.Close(), "round %d: DETACH refused with EPROTO is no failure", i)
	}
}

// TestDetachUnanswered: a daemon that never answers DETACH fails Close
// with ErrDeviceGone after the request's deadline, never hangs.
func TestDetachUnanswered(t *testing.T) {
	_, sock, _ := startDaemon(t, 1, nil)
	timeout := 100 * time.Millisecond
	ctx, err := provider.Dial("softnic0", provider.DialOptions{Socket: startProxy(t, sock, false), Timeout: timeout})
	require.NoError(t, err)
	start := time.Now()
	err = ctx.Close()
	require.ErrorIs(t, err, provider.ErrDeviceGone)
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	var oe *provider.OpError
	require.ErrorAs(t, err, &oe)
	require.Less(t, time.Since(start), timeout+attach.CommandWait+time.Second)
}

// startProxy listens on a socket of its own and relays each connection to
// the daemon at sock (see proxy).
func startProxy(t *testing.T, sock string, answerDetach bool) string {
	path := filepath.Join(t.TempDir(), "proxy.sock")
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			uc, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			go proxy(attach.NewConn(uc), sock, answerDetach)
		}
	}()
	return path
}

// proxy relays a client's messages (and ATTACH's fds) to the daemon at
// sock and back, but answers DETACH as a daemon of before it did, ERROR
// EPROTO for an unknown message type, or, with answerDetach false, not
// at all.
func proxy(c *attach.Conn, sock string, answerDetach bool) {
	defer c.Close()
	up, err := attach.Dial(sock, time.Second)
	if err != nil {
		return
	}
	defer up.Close()
	for {
		h, p, fds, err := c.Recv()
		if err != nil {
			closeFDs(fds)
			return
		}
		if h.Type == attach.TDetach {
			if !answerDetach {
				c.Recv() // until the client gives up and closes
				return
			}
			em := attach.ErrorMsg{Errno: syscall.EPROTO, Reason: "unknown message type 8"}
			if c.Send(attach.TError, h.Seq, em.Encode(nil)) != nil {
				return
			}
			continue
		}
		err = up.Send(h.Type, h.Seq, p, fds...)
		closeFDs(fds)
		if err != nil {
			return
		}
		h, p, fds, err = up.Recv()
		closeFDs(fds)
		if err != nil || c.Send(h.Type, h.Seq, p) != nil {
			return
		}
	}
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		syscall.Close(fd)
	}
}
