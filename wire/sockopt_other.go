//go:build !linux

package wire

import "net"

// tuneSocket sets the buffer sizes the portable way; the sizes in effect
// and the kernel's drop counter are Linux-only.
func tuneSocket(c *net.UDPConn, rcv, snd int) (rcvGot, sndGot int, ovfl bool) {
	if rcv > 0 {
		_ = c.SetReadBuffer(rcv)
	}
	if snd > 0 {
		_ = c.SetWriteBuffer(snd)
	}
	return 0, 0, false
}

const oobLen = 0

func kernelDrops([]byte) (uint32, bool) { return 0, false }
