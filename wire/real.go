package wire

// Real transports: Ethernet frames to and from the world outside the
// simulation (a UDP socket, a TAP device). They run outside the
// deterministic core: a reader goroutine per transport pushes every received
// frame into a bounded queue, and the one goroutine that owns the engine
// pulls frames from Frames() and hands them to a port, stamped with the
// engine's time. Nothing here touches an engine, a recorder or a
// trace.Counters (those are single-goroutine); the statistics below are
// atomics. A fault plan acts at a real port through FaultyTransport, whose
// decisions are all taken on the owner's goroutine.

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/softnic/softnic/internal/tuntap"
)

// RealTransport carries whole Ethernet frames (destination MAC to the last
// payload byte: no preamble, no FCS, no minimum-size padding) between this
// process and a real network.
type RealTransport interface {
	// Send transmits one frame. It copies nothing it keeps and may be called
	// only from the goroutine that owns the simulation.
	Send(frame []byte) error
	// Frames yields the received frames in arrival order; each slice is a
	// fresh copy owned by the receiver. The channel is closed after Close
	// (or when the underlying socket or device fails for good).
	Frames() <-chan []byte
	// Stats is a snapshot of the transport's counters (safe from any
	// goroutine).
	Stats() RealStats
	// Close stops the reader and releases the socket or device. It waits for
	// the reader goroutine to exit; later calls return nil.
	Close() error
	// String names the transport as its spec did ("udp:A,B", "tap:NAME").
	String() string
}

// RealStats are the counters of a real transport.
type RealStats struct {
	TxFrames, TxBytes uint64 // frames handed to the socket / device
	TxErrors          uint64 // Send failures (too short, too long, I/O error)
	RxFrames, RxBytes uint64 // frames queued for the simulation
	RxQueueFull       uint64 // frames dropped because the queue was full
	RxForeign         uint64 // udp: datagrams from an address other than PEER, dropped
	RxErrors          uint64 // read errors other than the final one at Close
	// RxKernelDrops (udp) is the socket's drop counter as the kernel last
	// reported it (SO_RXQ_OVFL): datagrams lost before the reader saw them,
	// mostly to a full receive buffer. The kernel reports it with the next
	// datagram received, so drops after the last one show up late.
	RxKernelDrops uint64
	// RxSockBuf and TxSockBuf (udp) are the socket buffer sizes in effect,
	// as getsockopt(SO_RCVBUF / SO_SNDBUF) reads them back (Linux doubles
	// the requested size for its bookkeeping).
	RxSockBuf, TxSockBuf uint64
	// Faults applied at the port by a FaultyTransport (tx and rx together).
	FaultDrop, FaultCorrupt, FaultDuplicate uint64
	FaultDelay, FaultReorder                uint64 // tx only
	FaultUnsupported                        uint64 // rx delay/reorder, tear: not applied
}

// Map returns the statistics as named counters (the names used in reports
// next to the device's and the port's counters).
func (s RealStats) Map() map[string]uint64 {
	return map[string]uint64{
		"real_tx_frames": s.TxFrames, "real_tx_bytes": s.TxBytes, "real_tx_errors": s.TxErrors,
		"real_rx_frames": s.RxFrames, "real_rx_bytes": s.RxBytes, "real_rx_queue_full": s.RxQueueFull,
		"real_rx_foreign": s.RxForeign, "real_rx_errors": s.RxErrors,
		"real_rx_kernel_drops":  s.RxKernelDrops,
		"real_rx_sockbuf_bytes": s.RxSockBuf, "real_tx_sockbuf_bytes": s.TxSockBuf,
		"real_fault_drop": s.FaultDrop, "real_fault_corrupt": s.FaultCorrupt, "real_fault_duplicate": s.FaultDuplicate,
		"real_fault_delay": s.FaultDelay, "real_fault_reorder": s.FaultReorder, "real_fault_unsupported": s.FaultUnsupported,
	}
}

// Limits of real transports.
const (
	// DefaultQueueLen is the number of received frames a transport buffers
	// before it drops (and counts) new ones. A 4 MiB RDMA WRITE at PMTU 1024
	// is 4096 frames arriving back to back, and the simulation may be busy
	// (or paced behind the wall clock) for all of them: 16384 holds four
	// such bursts. Only queued frames take memory (the queue holds slices).
	DefaultQueueLen = 16384
	// MaxRealFrame is the largest frame a real transport sends or accepts:
	// the largest UDP payload over IPv4 (65535 - 20 - 8).
	MaxRealFrame = 65507
)

// Errors of real transports; returned errors wrap them.
var (
	ErrBadWireSpec = errors.New("bad wire spec")
	ErrFrameSize   = errors.New("frame size out of range")
	ErrClosed      = errors.New("transport closed")
)

// WireSpec names a real transport.
type WireSpec struct {
	Kind   string         // "udp" or "tap"
	Listen netip.AddrPort // udp: local address to bind
	Peer   netip.AddrPort // udp: where every frame is sent
	Name   string         // tap: interface name
}

// String formats the spec as ParseWireSpec accepts it.
func (w WireSpec) String() string {
	switch w.Kind {
	case "udp":
		return "udp:" + w.Listen.String() + "," + w.Peer.String()
	case "tap":
		return "tap:" + w.Name
	}
	return w.Kind + ":?"
}

// ParseWireSpec parses "udp:LISTEN,PEER" (each IPv4 or [IPv6] address with a
// port; qemu's `-netdev socket,udp=PEER,localaddr=LISTEN` is the other end)
// or "tap:NAME" (a Linux TAP interface).
func ParseWireSpec(s string) (WireSpec, error) {
	kind, rest, ok := strings.Cut(s, ":")
	if !ok {
		return WireSpec{}, fmt.Errorf("wire: %w: %q: want udp:LISTEN,PEER or tap:NAME", ErrBadWireSpec, s)
	}
	switch kind {
	case "udp":
		l, p, ok := strings.Cut(rest, ",")
		if !ok {
			return WireSpec{}, fmt.Errorf("wire: %w: %q: udp needs LISTEN,PEER", ErrBadWireSpec, s)
		}
		la, err := netip.ParseAddrPort(l)
		if err != nil {
			return WireSpec{}, fmt.Errorf("wire: %w: listen address %q: %v", ErrBadWireSpec, l, err)
		}
		pa, err := netip.ParseAddrPort(p)
		if err != nil {
			return WireSpec{}, fmt.Errorf("wire: %w: peer address %q: %v", ErrBadWireSpec, p, err)
		}
		if pa.Port() == 0 || pa.Addr().IsUnspecified() {
			return WireSpec{}, fmt.Errorf("wire: %w: peer %v needs an address and a port", ErrBadWireSpec, pa)
		}
		return WireSpec{Kind: kind, Listen: la, Peer: pa}, nil
	case "tap":
		if err := tuntap.CheckName(rest); err != nil {
			return WireSpec{}, fmt.Errorf("wire: %w: %v", ErrBadWireSpec, err)
		}
		return WireSpec{Kind: kind, Name: rest}, nil
	}
	return WireSpec{}, fmt.Errorf("wire: %w: unknown kind %q (want udp or tap)", ErrBadWireSpec, kind)
}

// OpenReal opens the transport a spec names.
func OpenReal(spec WireSpec) (RealTransport, error) {
	// On failure the transport is a nil interface, never a typed nil
	// pointer that a caller's "if tr != nil { tr.Close() }" would call.
	switch spec.Kind {
	case "udp":
		u, err := OpenUDP(spec.Listen, spec.Peer)
		if err != nil {
			return nil, err
		}
		return u, nil
	case "tap":
		t, err := OpenTAP(spec.Name)
		if err != nil {
			return nil, err
		}
		return t, nil
	}
	return nil, fmt.Errorf("wire: %w: unknown kind %q", ErrBadWireSpec, spec.Kind)
}

// realStats are the atomics behind RealStats.
type realStats struct {
	txFrames, txBytes, txErrors atomic.Uint64
	rxFrames, rxBytes, rxFull   atomic.Uint64
	rxForeign, rxErrors         atomic.Uint64
	rxKernelDrops               atomic.Uint64
	rxSockBuf, txSockBuf        atomic.Uint64
}

func (s *realStats) snapshot() RealStats {
	return RealStats{
		TxFrames: s.txFrames.Load(), TxBytes: s.txBytes.Load(), TxErrors: s.txErrors.Load(),
		RxFrames: s.rxFrames.Load(), RxBytes: s.rxBytes.Load(), RxQueueFull: s.rxFull.Load(),
		RxForeign: s.rxForeign.Load(), RxErrors: s.rxErrors.Load(),
		RxKernelDrops: s.rxKernelDrops.Load(),
		RxSockBuf:     s.rxSockBuf.Load(), TxSockBuf: s.txSockBuf.Load(),
	}
}

// rxQueue is the bounded hand-over from a reader goroutine to the
// simulation's goroutine.
type rxQueue struct {
	ch    chan []byte
	stats *realStats
	done  sync.WaitGroup // the reader goroutine
}

func newRxQueue(n int, st *realStats) *rxQueue {
	return &rxQueue{ch: make(chan []byte, n), stats: st}
}

// push queues a copy of frame, or drops and counts it when the queue is full
// (a slow simulation must not block the socket: the peer's transport
// retransmits, as on a congested real link).
func (q *rxQueue) push(frame []byte) {
	f := make([]byte, len(frame))
	copy(f, frame)
	select {
	case q.ch <- f:
		q.stats.rxFrames.Add(1)
		q.stats.rxBytes.Add(uint64(len(f)))
	default:
		q.stats.rxFull.Add(1)
	}
}

// checkTx validates a frame before it is handed to the OS.
func checkTx(frame []byte, st *realStats) error {
	if len(frame) < EthHeaderLen || len(frame) > MaxRealFrame {
		st.txErrors.Add(1)
		return fmt.Errorf("wire: %w: %d bytes (want %d..%d)", ErrFrameSize, len(frame), EthHeaderLen, MaxRealFrame)
	}
	return nil
}
