package serve

import (
	"net"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPeerClosed: the daemon's look at a client's socket sees it closed
// once the client has gone, even when the client's last request is still
// unread (a client killed in the middle of a call). The old look (a
// MSG_PEEK of one byte) found the byte and took the dead client for alive,
// so an ATTACH by its restarted process met EBUSY.
func TestPeerClosed(t *testing.T) {
	for _, network := range []string{"unix", "unixpacket"} {
		for _, c := range []struct {
			name   string
			unread bool
			close  bool
		}{
			{"idle, connected", false, false},
			{"a request waiting, connected", true, false},
			{"closed", false, true},
			{"closed with a request unread", true, true},
		} {
			t.Run(network+"/"+c.name, func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "s")
				l, err := net.ListenUnix(network, &net.UnixAddr{Name: path, Net: network})
				require.NoError(t, err)
				defer l.Close()
				cl, err := net.DialUnix(network, nil, &net.UnixAddr{Name: path, Net: network})
				require.NoError(t, err)
				defer cl.Close()
				srv, err := l.AcceptUnix()
				require.NoError(t, err)
				defer srv.Close()
				if c.unread {
					_, err := cl.Write([]byte("request"))
					require.NoError(t, err)
				}
				if c.close {
					require.NoError(t, cl.Close())
				}
				require.Equal(t, c.close, peerClosed(srv))
			})
		}
	}
}
