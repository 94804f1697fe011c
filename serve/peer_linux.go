package serve

import (
	"net"
	"syscall"
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

// peerClosed reports whether the other end of c has closed with nothing
// left unread: a look at the socket (MSG_PEEK, MSG_DONTWAIT) that takes
// nothing from it, safe beside the goroutine blocked reading it. A
// process closes its socket before it can connect again, so the client
// of a Close the daemon has not yet seen is found here at once. A live
// peer, idle or with a request waiting, is not closed.
func peerClosed(c *net.UnixConn) bool {
	raw, err := c.SyscallConn()
	if err != nil {
		return true // closed here: the teardown is under way
	}
	closed := false
	var b [1]byte
	cerr := raw.Control(func(fd uintptr) {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		closed = err == nil && n == 0
	})
	return closed || cerr != nil
}
