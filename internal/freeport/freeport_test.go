package freeport

import (
	"net"
	"testing"
)

func TestNeverTwice(t *testing.T) {
	for _, c := range []struct {
		name string
		pick func() (int, error)
	}{{"tcp", TCP}, {"udp", UDP}} {
		t.Run(c.name, func(t *testing.T) {
			seen := map[int]bool{}
			for range 200 {
				p, err := c.pick()
				if err != nil {
					t.Fatal(err)
				}
				if seen[p] {
					t.Fatalf("port %d handed out twice", p)
				}
				seen[p] = true
			}
		})
	}
}

func TestClaimedIsSkipped(t *testing.T) {
	// A listener on port 0 that claims its port: the next pick, made
	// after the listener closes, must not return it.
	// (The kernel may give it a port an earlier test was handed and
	// released: such a port is already claimed, so listen again.)
	var (
		l    net.Listener
		held int
	)
	for tries := 0; ; tries++ {
		var err error
		if l, err = net.Listen("tcp4", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		held = l.Addr().(*net.TCPAddr).Port
		if claim("tcp", held) {
			break
		}
		l.Close()
		if tries == 1000 {
			t.Fatal("no unclaimed port in 1000 listens")
		}
	}
	if claim("tcp", held) {
		t.Fatal("a second claim of the same port succeeded")
	}
	l.Close()
	for range 50 {
		p, err := TCP()
		if err != nil {
			t.Fatal(err)
		}
		if p == held {
			t.Fatalf("TCP returned the claimed port %d", p)
		}
	}
}
