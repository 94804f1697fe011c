package freeport

import (
	"fmt"
	"net"
	"sync"
)

var (
	mu   sync.Mutex
	used = map[string]bool{}
)

// Claim records network ("tcp" or "udp") and port as handed out, so that
// TCP and UDP never return it; it reports false if it already was. A
// test that listens on port 0 itself claims the port it got.
func Claim(network string, port int) bool {
	mu.Lock()
	defer mu.Unlock()
	k := fmt.Sprintf("%s:%d", network, port)
	if used[k] {
		return false
	}
	used[k] = true
	return true
}

// tries bounds the picks: the kernel has tens of thousands of ports, so
// running out means something else is wrong.
const tries = 1000

// TCP returns a TCP port on 127.0.0.1 that was free when picked.
func TCP() (int, error) {
	for range tries {
		l, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if Claim("tcp", port) {
			return port, nil
		}
	}
	return 0, fmt.Errorf("freeport: no unclaimed TCP port in %d picks", tries)
}

// UDP returns a UDP port on 127.0.0.1 that was free when picked.
func UDP() (int, error) {
	for range tries {
		c, err := net.ListenPacket("udp4", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := c.LocalAddr().(*net.UDPAddr).Port
		c.Close()
		if Claim("udp", port) {
			return port, nil
		}
	}
	return 0, fmt.Errorf("freeport: no unclaimed UDP port in %d picks", tries)
}
