package provider_test

import (
	"errors"
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/softnic/softnic/attach"
	"github.com/softnic/softnic/host"
	"github.com/softnic/softnic/provider"
	"github.com/stretchr/testify/require"
)

// fakeDaemon listens at a socket in a temporary directory and answers
// the first ATTACH with resp; it closes the connection after that.
func fakeDaemon(t *testing.T, resp attach.AttachResp) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "s")
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: sock, Net: "unixpacket"})
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		uc, err := ln.AcceptUnix()
		if err != nil {
			return
		}
		defer uc.Close()
		c := attach.NewConn(uc)
		c.SetDeadline(time.Now().Add(5 * time.Second))
		h, _, fds, err := c.Recv()
		for _, fd := range fds {
			syscall.Close(fd)
		}
		if err != nil {
			return
		}
		c.Send(attach.TAttached, h.Seq, resp.Encode(nil))
		c.Recv() // until the client goes
	}()
	return sock
}

// TestDialRefusesBadLayout: a BAR layout from the daemon that the wire
// format carries but the host model cannot build (a bfreg size of 1280
// bytes, say: a multiple of 64 under 4096, so DecodeAttachResp takes it)
// fails Dial as a daemon that breaks the protocol does, and a host
// config of the caller's that is invalid fails it as a bad argument.
// Both made host.New panic inside Dial.
func TestDialRefusesBadLayout(t *testing.T) {
	good := attach.AttachResp{Profile: "cx5", FirstUAR: 3, NumUARs: 8, BFRegSize: 512}
	for _, tc := range []struct {
		name string
		resp func(r *attach.AttachResp)
		host *host.Config
		want error
	}{
		{"bfreg of 1280 bytes", func(r *attach.AttachResp) { r.BFRegSize = 1280 }, nil, provider.ErrDeviceGone},
		{"bfreg of 64 bytes", func(r *attach.AttachResp) { r.BFRegSize = 64 }, nil, provider.ErrDeviceGone},
		{"caller's host config invalid", nil, &host.Config{WCLines: 65}, provider.ErrInvalidArg},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := good
			if tc.resp != nil {
				tc.resp(&r)
			}
			sock := fakeDaemon(t, r)
			var ctx *provider.Context
			var err error
			require.NotPanics(t, func() {
				ctx, err = provider.Dial("softnic0", provider.DialOptions{Socket: sock, MemSize: 1 << 20, RingSlots: 64,
					Host: tc.host, Timeout: 500 * time.Millisecond})
			})
			if ctx != nil {
				ctx.Close()
			}
			require.Error(t, err)
			require.True(t, errors.Is(err, tc.want), "%v", err)
		})
	}
}

// TestDialSocketPathTooLong: a socket path longer than a unix socket's
// can hold is the caller's mistake (ErrInvalidArg), not a daemon gone:
// Dial said "device gone: ... connect: invalid argument".
func TestDialSocketPathTooLong(t *testing.T) {
	sock := filepath.Join(t.TempDir(), strings.Repeat("x", attach.MaxSocketPath))
	_, err := provider.Dial("softnic0", provider.DialOptions{Socket: sock, MemSize: 1 << 20, RingSlots: 64})
	require.ErrorIs(t, err, provider.ErrInvalidArg)
	require.NotErrorIs(t, err, provider.ErrDeviceGone)
	require.ErrorContains(t, err, "at most 107 bytes")
}
