package wire

import "sync"

// MemTransport is a RealTransport in memory, for tests and for programs
// that feed a NIC's port themselves: what the NIC sends is kept (Sent),
// and frames given to Deliver are received. Its queue holds depth frames;
// Deliver drops and counts (RxQueueFull) what does not fit, as the real
// transports do.
type MemTransport struct {
	mu     sync.Mutex
	sent   [][]byte
	in     chan []byte
	closed bool
	st     RealStats
}

var _ RealTransport = (*MemTransport)(nil)

// NewMemTransport returns a MemTransport whose receive queue holds depth
// frames.
func NewMemTransport(depth int) *MemTransport { return &MemTransport{in: make(chan []byte, depth)} }

// Send keeps a copy of frame (ErrClosed after Close).
func (m *MemTransport) Send(frame []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		m.st.TxErrors++
		return ErrClosed
	}
	m.sent = append(m.sent, append([]byte(nil), frame...))
	m.st.TxFrames++
	m.st.TxBytes += uint64(len(frame))
	return nil
}

// Deliver queues a copy of frame for the receiver. It reports false when
// the frame was dropped: the queue is full or the transport closed.
func (m *MemTransport) Deliver(frame []byte) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	select {
	case m.in <- append([]byte(nil), frame...):
		m.st.RxFrames++
		m.st.RxBytes += uint64(len(frame))
		return true
	default:
		m.st.RxQueueFull++
		return false
	}
}

// Frames yields the delivered frames; it is closed by Close.
func (m *MemTransport) Frames() <-chan []byte { return m.in }

// Stats is a snapshot of the counters.
func (m *MemTransport) Stats() RealStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.st
}

// String names the transport.
func (m *MemTransport) String() string { return "mem" }

// Close closes the receive queue; later Sends fail.
func (m *MemTransport) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.closed {
		m.closed = true
		close(m.in)
	}
	return nil
}

// Closed reports whether Close was called.
func (m *MemTransport) Closed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

// Sent returns copies of the frames sent so far, oldest first.
func (m *MemTransport) Sent() [][]byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([][]byte(nil), m.sent...)
}
