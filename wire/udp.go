package wire

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
)

// UDP is the udp:LISTEN,PEER transport: every Ethernet frame travels as
// exactly one UDP datagram, with no header of its own, no FCS and no
// padding — the encapsulation of qemu's `-netdev socket,udp=...` backend,
// so a qemu guest's virtio-net NIC and another softnic process are both
// valid peers. Only datagrams whose source is PEER are accepted; others are
// dropped and counted (RxForeign). No privileges are needed.
type UDP struct {
	conn  *net.UDPConn
	peer  netip.AddrPort
	spec  string
	q     *rxQueue
	stats realStats
	once  sync.Once
}

var _ RealTransport = (*UDP)(nil)

// maxReadFailures consecutive read errors end the reader.
const maxReadFailures = 100

// OpenUDP binds listen and starts the reader. A zero listen port binds an
// ephemeral one (see LocalAddr).
func OpenUDP(listen, peer netip.AddrPort) (*UDP, error) {
	if !peer.IsValid() || peer.Port() == 0 {
		return nil, fmt.Errorf("wire: %w: udp peer %v", ErrBadWireSpec, peer)
	}
	conn, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(listen))
	if err != nil {
		return nil, fmt.Errorf("wire: udp listen %v: %w", listen, err)
	}
	u := &UDP{conn: conn, peer: peer, spec: "udp:" + listen.String() + "," + peer.String()}
	u.q = newRxQueue(DefaultQueueLen, &u.stats)
	u.q.done.Add(1)
	go u.read()
	return u, nil
}

// LocalAddr is the bound address.
func (u *UDP) LocalAddr() netip.AddrPort { return u.conn.LocalAddr().(*net.UDPAddr).AddrPort() }

// read is the reader goroutine: one datagram, one frame.
func (u *UDP) read() {
	defer u.q.done.Done()
	defer close(u.q.ch)
	buf := make([]byte, 65536)
	want := u.peer.Addr().Unmap()
	failures := 0
	for {
		n, from, err := u.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Transient errors (an ICMP error reported on the socket) are
			// counted and skipped; a socket that only fails is given up.
			u.stats.rxErrors.Add(1)
			if failures++; failures >= maxReadFailures {
				return
			}
			continue
		}
		failures = 0
		if from.Addr().Unmap() != want || from.Port() != u.peer.Port() {
			u.stats.rxForeign.Add(1)
			continue
		}
		if n < EthHeaderLen {
			u.stats.rxErrors.Add(1)
			continue
		}
		u.q.push(buf[:n])
	}
}

// Send transmits frame as one datagram to PEER. A peer that is not
// listening loses it silently, as on a cable nobody plugged in.
func (u *UDP) Send(frame []byte) error {
	if err := checkTx(frame, &u.stats); err != nil {
		return err
	}
	if _, err := u.conn.WriteToUDPAddrPort(frame, u.peer); err != nil {
		u.stats.txErrors.Add(1)
		return fmt.Errorf("wire: udp send to %v: %w", u.peer, err)
	}
	u.stats.txFrames.Add(1)
	u.stats.txBytes.Add(uint64(len(frame)))
	return nil
}

// Frames yields received frames.
func (u *UDP) Frames() <-chan []byte { return u.q.ch }

// Stats snapshots the counters.
func (u *UDP) Stats() RealStats { return u.stats.snapshot() }

// Close closes the socket and waits for the reader to exit.
func (u *UDP) Close() error {
	var err error
	u.once.Do(func() {
		err = u.conn.Close()
		u.q.done.Wait()
	})
	return err
}

func (u *UDP) String() string { return u.spec }
