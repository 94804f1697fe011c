package shm

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestMapShares: a region mapped from another region's memfd sees the same
// bytes in both directions, and Revoke cuts it off without faulting.
func TestMapShares(t *testing.T) {
	a, err := New("map-test", 8192, 0x10000)
	require.NoError(t, err)
	defer a.Close()
	fd, err := unix.Dup(a.Fd())
	require.NoError(t, err)
	b, err := Map(fd, 8192, 0x10000)
	require.NoError(t, err)
	defer b.Close()
	require.NoError(t, a.Write(0x10010, []byte("hello")))
	got := make([]byte, 5)
	require.NoError(t, b.Read(0x10010, got))
	require.Equal(t, "hello", string(got))
	require.NoError(t, b.Write(0x11000, []byte("back")))
	got = got[:4]
	require.NoError(t, a.Read(0x11000, got))
	require.Equal(t, "back", string(got))

	require.NoError(t, b.Revoke())
	require.NoError(t, b.Write(0x11000, []byte("gone"))) // lands in b's private pages
	require.NoError(t, a.Read(0x11000, got))
	require.Equal(t, "back", string(got), "a revoked mapping no longer reaches the memfd")
	require.NoError(t, b.Read(0x10010, got))
	require.Equal(t, []byte{0, 0, 0, 0}, got)
}

// TestMapRefuses: fds that are not sealed memfds, are too short, or
// addresses that wrap are refused with ErrBadArg (and the fd closed).
func TestMapRefuses(t *testing.T) {
	unsealed, err := unix.MemfdCreate("unsealed", unix.MFD_CLOEXEC)
	require.NoError(t, err)
	require.NoError(t, unix.Ftruncate(unsealed, 8192))
	short, err := New("short", 4096, 0x1000)
	require.NoError(t, err)
	defer short.Close()
	shortFd, _ := unix.Dup(short.Fd())
	pipe := make([]int, 2)
	require.NoError(t, unix.Pipe(pipe))
	unix.Close(pipe[1])
	good, err := New("good", 8192, 0x1000)
	require.NoError(t, err)
	defer good.Close()
	dup := func() int { fd, _ := unix.Dup(good.Fd()); return fd }
	for _, tc := range []struct {
		name string
		fd   int
		size int
		base uint64
	}{
		{"not sealed", unsealed, 8192, 0x1000},
		{"shorter than claimed", shortFd, 8192, 0x1000},
		{"not a memfd", pipe[0], 4096, 0x1000},
		{"odd size", dup(), 100, 0x1000},
		{"zero base", dup(), 4096, 0},
		{"wrapping base", dup(), 8192, ^uint64(0) &^ 4095},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Map(tc.fd, tc.size, tc.base)
			require.True(t, errors.Is(err, ErrBadArg), "%v", err)
			_, err = unix.FcntlInt(uintptr(tc.fd), unix.F_GETFD, 0)
			require.Error(t, err, "Map closes the fd it refuses")
		})
	}
}
