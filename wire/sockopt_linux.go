//go:build linux

package wire

import (
	"encoding/binary"
	"net"
	"syscall"
)

// The socket options here come from the standard syscall package: the
// import graph (test/imports_test.go) keeps golang.org/x/sys out of wire.

// tuneSocket sizes c's receive and send buffers (SO_RCVBUFFORCE, which
// needs CAP_NET_ADMIN and ignores net.core.rmem_max, then SO_RCVBUF, which
// the kernel caps at rmem_max; likewise for sending; a size <= 0 leaves the
// buffer alone) and turns on SO_RXQ_OVFL, so that every datagram carries
// the socket's drop counter. It returns the sizes read back (Linux reports
// twice the size set) and whether SO_RXQ_OVFL is on.
func tuneSocket(c *net.UDPConn, rcv, snd int) (rcvGot, sndGot int, ovfl bool) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, 0, false
	}
	_ = rc.Control(func(fd uintptr) {
		s := int(fd)
		if rcv > 0 && syscall.SetsockoptInt(s, syscall.SOL_SOCKET, syscall.SO_RCVBUFFORCE, rcv) != nil {
			_ = syscall.SetsockoptInt(s, syscall.SOL_SOCKET, syscall.SO_RCVBUF, rcv)
		}
		if snd > 0 && syscall.SetsockoptInt(s, syscall.SOL_SOCKET, syscall.SO_SNDBUFFORCE, snd) != nil {
			_ = syscall.SetsockoptInt(s, syscall.SOL_SOCKET, syscall.SO_SNDBUF, snd)
		}
		ovfl = syscall.SetsockoptInt(s, syscall.SOL_SOCKET, syscall.SO_RXQ_OVFL, 1) == nil
		rcvGot, _ = syscall.GetsockoptInt(s, syscall.SOL_SOCKET, syscall.SO_RCVBUF)
		sndGot, _ = syscall.GetsockoptInt(s, syscall.SOL_SOCKET, syscall.SO_SNDBUF)
	})
	return rcvGot, sndGot, ovfl
}

// oobLen is room for the control messages a datagram brings: the 4-byte
// SO_RXQ_OVFL counter needs CmsgSpace(4) (24 bytes on 64-bit), with margin.
const oobLen = 64

// cmsgLenSize is the size of cmsghdr.cmsg_len (a size_t), which is also
// the alignment of control messages.
const cmsgLenSize = syscall.SizeofCmsghdr - 8

func cmsgAlign(n int) int { return (n + cmsgLenSize - 1) &^ (cmsgLenSize - 1) }

// kernelDrops finds the SO_RXQ_OVFL control message in oob and returns its
// counter: the socket's cumulative drops when this datagram was queued. The
// kernel sends it only once the counter is non-zero. It does not allocate
// (syscall.ParseSocketControlMessage would).
func kernelDrops(oob []byte) (uint32, bool) {
	for len(oob) >= syscall.SizeofCmsghdr {
		var l int
		if cmsgLenSize == 8 {
			l = int(binary.NativeEndian.Uint64(oob))
		} else {
			l = int(binary.NativeEndian.Uint32(oob))
		}
		if l < syscall.SizeofCmsghdr || l > len(oob) {
			return 0, false
		}
		level := int32(binary.NativeEndian.Uint32(oob[cmsgLenSize:]))
		typ := int32(binary.NativeEndian.Uint32(oob[cmsgLenSize+4:]))
		data := oob[min(cmsgAlign(syscall.SizeofCmsghdr), l):l]
		if level == syscall.SOL_SOCKET && typ == syscall.SO_RXQ_OVFL && len(data) >= 4 {
			return binary.NativeEndian.Uint32(data), true
		}
		next := cmsgAlign(l)
		if next >= len(oob) {
			break
		}
		oob = oob[next:]
	}
	return 0, false
}
