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
//
// Bursts: a 4 MiB transfer arrives as thousands of back-to-back datagrams.
// The socket's buffers are sized generously (UDPConfig; as root beyond
// net.core.rmem_max/wmem_max), the reader moves datagrams into a queue of
// DefaultQueueLen frames, and every loss is counted: RxQueueFull when the
// queue is full, RxKernelDrops (SO_RXQ_OVFL) when the socket's buffer was.
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

// DefaultSocketBuffer is the receive and send buffer a UDP transport asks
// the kernel for: 8 MiB holds a 4 MiB transfer's datagrams at PMTU 1024
// with the kernel's per-datagram overhead, should the reader fall behind.
const DefaultSocketBuffer = 8 << 20

// UDPConfig tunes a UDP transport; zero fields take the defaults.
type UDPConfig struct {
	// RecvBuffer and SendBuffer are the socket buffer sizes to ask for, in
	// bytes (0: DefaultSocketBuffer; < 0: the system's default). As root
	// SO_RCVBUFFORCE/SO_SNDBUFFORCE are used, otherwise the kernel caps the
	// size at net.core.rmem_max/wmem_max. RealStats.RxSockBuf/TxSockBuf say
	// what was granted.
	RecvBuffer, SendBuffer int
	// QueueLen is how many received frames wait for the simulation before
	// new ones are dropped (RxQueueFull); 0: DefaultQueueLen.
	QueueLen int
}

// OpenUDP binds listen and starts the reader, with the default UDPConfig. A
// zero listen port binds an ephemeral one (see LocalAddr).
func OpenUDP(listen, peer netip.AddrPort) (*UDP, error) {
	return OpenUDPConfig(listen, peer, UDPConfig{})
}

// OpenUDPConfig is OpenUDP with the buffers and queue of cfg.
func OpenUDPConfig(listen, peer netip.AddrPort, cfg UDPConfig) (*UDP, error) {
	if !peer.IsValid() || peer.Port() == 0 {
		return nil, fmt.Errorf("wire: %w: udp peer %v", ErrBadWireSpec, peer)
	}
	if cfg.RecvBuffer == 0 {
		cfg.RecvBuffer = DefaultSocketBuffer
	}
	if cfg.SendBuffer == 0 {
		cfg.SendBuffer = DefaultSocketBuffer
	}
	if cfg.QueueLen <= 0 {
		cfg.QueueLen = DefaultQueueLen
	}
	conn, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(listen))
	if err != nil {
		return nil, fmt.Errorf("wire: udp listen %v: %w", listen, err)
	}
	u := &UDP{conn: conn, peer: peer, spec: "udp:" + listen.String() + "," + peer.String()}
	rcv, snd, _ := tuneSocket(conn, cfg.RecvBuffer, cfg.SendBuffer)
	u.stats.rxSockBuf.Store(uint64(max(rcv, 0)))
	u.stats.txSockBuf.Store(uint64(max(snd, 0)))
	u.q = newRxQueue(cfg.QueueLen, &u.stats)
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
	var oob [max(oobLen, 1)]byte
	want := u.peer.Addr().Unmap()
	failures := 0
	for {
		n, oobn, _, from, err := u.conn.ReadMsgUDPAddrPort(buf, oob[:oobLen])
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
		if oobn > 0 {
			if d, ok := kernelDrops(oob[:oobn]); ok {
				u.stats.rxKernelDrops.Store(uint64(d))
			}
		}
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
