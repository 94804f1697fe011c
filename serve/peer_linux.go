package serve

import (
	"net"
	"syscall"

	"github.com/softnic/softnic/attach"
)

type netUnixConn = *net.UnixConn

// peerPID is the connecting process's pid (SO_PEERCRED), for the log.
func peerPID(c *net.UnixConn) int32 {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0
	}
	var pid int32
	raw.Control(func(fd uintptr) {
		if u, err := syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED); err == nil {
			pid = u.Pid
		}
	})
	return pid
}

// peerClosed reports whether the client at the other end of c has closed
// its socket (attach.PeerClosed). A process closes its socket before it
// can connect again, so the client of a Close the daemon has not yet seen,
// or one killed with a request in flight, is found here at once.
func peerClosed(c *net.UnixConn) bool { return attach.PeerClosed(c) }
