package attach

import (
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// TestRecvEmptyMessage: an empty SOCK_SEQPACKET message and the end of
// the connection both read as zero bytes; Recv tells them apart. An
// empty message from a live peer is ErrProtocol (the daemon answers
// EPROTO and serves on); only the peer's close is ErrPeerGone. Recv took
// the empty message for the close.
func TestRecvEmptyMessage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s")
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cl, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	srv, err := l.AcceptUnix()
	if err != nil {
		t.Fatal(err)
	}
	c := NewConn(srv)
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	for _, tc := range []struct {
		name string
		send func() error
		want error
	}{
		{"empty message", func() error { _, _, err := cl.WriteMsgUnix(nil, nil, nil); return err }, ErrProtocol},
		{"a message after it", func() error { return NewConn(cl).Send(TSim, 7, []byte{1, 0, 0, 0}) }, nil},
		{"the peer's close", cl.Close, ErrPeerGone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.send(); err != nil {
				t.Fatal(err)
			}
			h, _, _, err := c.Recv()
			switch {
			case tc.want == nil && err != nil:
				t.Fatalf("Recv: %v", err)
			case tc.want == nil && (h.Type != TSim || h.Seq != 7):
				t.Fatalf("Recv: %+v", h)
			case tc.want != nil && !errors.Is(err, tc.want):
				t.Fatalf("Recv: %v, want %v", err, tc.want)
			}
		})
	}
}
