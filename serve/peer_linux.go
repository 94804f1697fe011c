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
