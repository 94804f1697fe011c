package serve

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
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

// peerClosed reports whether the other end of c has closed, whether or
// not it left a request unread: poll(2) with POLLRDHUP and no wait, which
// takes nothing from the socket and is safe beside the goroutine blocked
// reading it (a closed AF_UNIX peer sets RCV_SHUTDOWN on this end at once,
// unread data or not). A process closes its socket before it can connect
// again, so the client of a Close the daemon has not yet seen, or one
// killed with a request in flight, is found here at once. A live peer,
// idle or with a request waiting, is not closed.
func peerClosed(c *net.UnixConn) bool {
	raw, err := c.SyscallConn()
	if err != nil {
		return true // closed here: the teardown is under way
	}
	closed := false
	cerr := raw.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN | unix.POLLRDHUP}}
		if n, err := unix.Poll(fds, 0); err == nil && n > 0 {
			closed = fds[0].Revents&(unix.POLLRDHUP|unix.POLLHUP|unix.POLLERR) != 0
		}
	})
	return closed || cerr != nil
}
