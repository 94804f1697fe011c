package attach

import (
	"net"
	"syscall"
	"unsafe"
)

// PeerClosed reports whether the other end of c has closed, whether or
// not it left a message unread: poll(2) with POLLRDHUP and no wait, which
// takes nothing from the socket and is safe beside a goroutine blocked
// reading it (a closed AF_UNIX peer sets RCV_SHUTDOWN on this end at once,
// unread data or not). A live peer, idle or with a message waiting, is not
// closed. The daemon uses it to tell a departed client from a live one
// (an ATTACH for its device), and Recv to tell an empty message from the
// end of the connection: both read as zero bytes.
func PeerClosed(c *net.UnixConn) bool {
	raw, err := c.SyscallConn()
	if err != nil {
		return true // closed here
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
// the standard library's syscall package has neither.
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
