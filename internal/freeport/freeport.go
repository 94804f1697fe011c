package freeport

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
)

type key struct {
	network string
	port    int
}

var (
	mu   sync.Mutex
	used = map[key]bool{}
)

// claim records network ("tcp" or "udp") and port as handed out; it
// reports false if it already was.
func claim(network string, port int) bool {
	mu.Lock()
	defer mu.Unlock()
	k := key{network, port}
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
func TCP() (int, error) { return pick("tcp") }

// UDP returns a UDP port on 127.0.0.1 that was free when picked.
func UDP() (int, error) { return pick("udp") }

// pick binds port 0 (and releases it again) until the port it got is one
// not handed out before.
func pick(network string) (int, error) {
	for range tries {
		port, err := bind(network)
		if err != nil {
			return 0, err
		}
		if claim(network, port) {
			return port, nil
		}
	}
	return 0, fmt.Errorf("freeport: no unclaimed %s port in %d picks", network, tries)
}

// bind binds port 0 on 127.0.0.1 and returns the port the kernel gave.
func bind(network string) (int, error) {
	var (
		c   io.Closer
		a   net.Addr
		err error
	)
	if network == "udp" {
		var pc net.PacketConn
		if pc, err = net.ListenPacket("udp4", "127.0.0.1:0"); err == nil {
			c, a = pc, pc.LocalAddr()
		}
	} else {
		var l net.Listener
		if l, err = net.Listen("tcp4", "127.0.0.1:0"); err == nil {
			c, a = l, l.Addr()
		}
	}
	if err != nil {
		return 0, err
	}
	defer c.Close()
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return 0, err
	}
	return int(ap.Port()), nil
}
