//go:build !linux

package attach

import "net"

// PeerClosed cannot look without poll's POLLRDHUP: it takes the peer for
// closed, so that an empty read ends the connection, as it did before
// Recv told an empty message from the end.
func PeerClosed(c *net.UnixConn) bool { return true }
