package serve_test

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/softnic/softnic/serve"
	"github.com/stretchr/testify/require"
)

// TestSocketPathRefusals: what New finds at its socket path. A stale
// socket of a dead daemon is replaced; anything else is refused with an
// error that names it and left as it was: a path too long for a unix
// socket (it said "bind: invalid argument"), a regular file or a
// directory ("bind: address already in use"), and a live socket of
// another kind, a stream listener of some other program, which New took
// for stale: it removed it, listened in its place and removed its own at
// Close, leaving the other program with no socket at all.
func TestSocketPathRefusals(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, path string) func(t *testing.T) // returns the check that path is as it was
		long  bool
		want  string // "" is accepted
	}{
		{"too long", nil, true, "at most 107 bytes"},
		{"regular file", func(t *testing.T, path string) func(t *testing.T) {
			require.NoError(t, os.WriteFile(path, []byte("keep"), 0o644))
			return func(t *testing.T) {
				b, err := os.ReadFile(path)
				require.NoError(t, err)
				require.Equal(t, "keep", string(b))
			}
		}, false, "is not a socket (a regular file)"},
		{"directory", func(t *testing.T, path string) func(t *testing.T) {
			require.NoError(t, os.Mkdir(path, 0o755))
			return func(t *testing.T) { require.DirExists(t, path) }
		}, false, "is not a socket (a directory)"},
		{"live stream socket", func(t *testing.T, path string) func(t *testing.T) {
			ln, err := net.Listen("unix", path)
			require.NoError(t, err)
			t.Cleanup(func() { ln.Close() })
			return func(t *testing.T) {
				c, err := net.Dial("unix", path)
				require.NoError(t, err, "the other program's socket is still there")
				c.Close()
			}
		}, false, "live socket"},
		{"stale socket", func(t *testing.T, path string) func(t *testing.T) {
			ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
			require.NoError(t, err)
			ln.SetUnlinkOnClose(false)
			ln.Close()
			return nil
		}, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "s.sock")
			if tc.long {
				path = filepath.Join(t.TempDir(), strings.Repeat("x", 120))
			}
			var check func(t *testing.T)
			if tc.setup != nil {
				check = tc.setup(t, path)
			}
			d, err := serve.New(serve.Config{Socket: path, Devices: 1})
			if tc.want == "" {
				require.NoError(t, err)
				require.NoError(t, d.Close())
				return
			}
			if err == nil {
				d.Close()
			}
			require.ErrorContains(t, err, tc.want)
			if check != nil {
				check(t)
			}
			if tc.long {
				require.NoFileExists(t, path)
			}
		})
	}
}

// TestCloseLeavesAnotherDaemonsSocket: a daemon whose socket file was
// removed and taken by another daemon (an operator cleaning up, then
// starting a second one) removed the second one's socket at Close, by
// path, leaving it running and unreachable. Close removes the socket file
// only if it is still the one it listens on.
func TestCloseLeavesAnotherDaemonsSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sock")
	first, err := serve.New(serve.Config{Socket: path, Devices: 1})
	require.NoError(t, err)
	require.NoError(t, os.Remove(path))
	second, err := serve.New(serve.Config{Socket: path, Devices: 1})
	require.NoError(t, err)
	defer second.Close()
	require.NoError(t, first.Close())
	c, err := net.Dial("unixpacket", path)
	require.NoError(t, err, "the second daemon's socket is still there")
	c.Close()
	require.NoError(t, second.Close())
	require.NoFileExists(t, path, "and goes at its own Close")
}
