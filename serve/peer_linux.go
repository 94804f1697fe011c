package serve

import (
	"net"
	"syscall"
	"unsafe"
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
		pfd := pollFd{fd: int32(fd), events: pollIn | pollRdHup}
		var none syscall.Timespec // ppoll(2) with a zero timeout: do not wait
		n, _, errno := syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1, uintptr(unsafe.Pointer(&none)), 0, 0, 0)
		closed = errno == 0 && n > 0 && pfd.revents&(pollRdHup|pollHup|pollErr) != 0
	})
	return closed || cerr != nil
}

// pollFd is struct pollfd and these its event bits (<poll.h>, Linux):
// the standard library's syscall package has neither, and serve keeps to
// it (DESIGN.md §3).
type pollFd struct {
	fd              int32
	events, revents int16
}

const (
	pollIn    = 0x1
	pollErr   = 0x8
	pollHup   = 0x10
	pollRdHup = 0x2000
)
