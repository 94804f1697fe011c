//go:build linux

package wire_test

import (
	"bufio"
	"encoding/binary"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/wire"
)

// softnetDrops sums the per-CPU "dropped" column of /proc/net/softnet_stat:
// frames the kernel lost before they reached any socket (loopback's
// backlog queue). 0 if the file cannot be read.
func softnetDrops() uint64 {
	f, err := os.Open("/proc/net/softnet_stat")
	if err != nil {
		return 0
	}
	defer f.Close()
	var sum uint64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fs := strings.Fields(sc.Text()); len(fs) > 1 {
			n, _ := strconv.ParseUint(fs[1], 16, 64)
			sum += n
		}
	}
	return sum
}

// TestUDPBurstAccounting blasts a burst at a transport nobody drains, then
// drains it: every datagram is either received, dropped at the full queue,
// or dropped by the kernel (SO_RXQ_OVFL) — the stats account for all.
func TestUDPBurstAccounting(t *testing.T) {
	if testing.Short() {
		t.Skip("sends 20000 datagrams")
	}
	const n = 20000
	tests := []struct {
		name string
		cfg  wire.UDPConfig
	}{
		// 20000 > DefaultQueueLen: the tail of the burst is queue-full.
		{"default buffers and queue", wire.UDPConfig{}},
		// A socket buffer of a few dozen datagrams: the kernel drops what
		// the reader cannot take in time.
		{"small socket buffer", wire.UDPConfig{RecvBuffer: 32 << 10, QueueLen: 1000}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lo := net.IPv4(127, 0, 0, 1)
			peer, err := net.ListenUDP("udp4", &net.UDPAddr{IP: lo})
			require.NoError(t, err)
			defer peer.Close()
			_ = peer.SetWriteBuffer(8 << 20)
			u, err := wire.OpenUDPConfig(netip.MustParseAddrPort("127.0.0.1:0"), peer.LocalAddr().(*net.UDPAddr).AddrPort(), tc.cfg)
			require.NoError(t, err)
			defer u.Close()
			to := u.LocalAddr()
			netDrops := softnetDrops()

			frame := make([]byte, 1098) // a PMTU-1024 RoCE frame
			start := time.Now()
			for i := range n {
				binary.BigEndian.PutUint32(frame[14:], uint32(i))
				_, err := peer.WriteToUDPAddrPort(frame, to)
				require.NoError(t, err)
			}
			blast := time.Since(start)

			// Wait (bounded) for the reader to have taken everything the
			// socket holds: its counters stop moving.
			seen := func() uint64 { s := u.Stats(); return s.RxFrames + s.RxQueueFull }
			last, stable := seen(), 0
			for deadline := time.Now().Add(10 * time.Second); stable < 20 && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
				if cur := seen(); cur != last {
					last, stable = cur, 0
				} else {
					stable++
				}
			}

			// Drain, then send markers until the latest one comes through:
			// its SO_RXQ_OVFL counter covers every drop of the burst.
			drained := 0
			drain := func() {
				for {
					select {
					case <-u.Frames():
						drained++
					default:
						return
					}
				}
			}
			drain()
			markers := 0
			got := false
			for !got && markers < 20 {
				markers++
				m := make([]byte, 60)
				binary.BigEndian.PutUint32(m[14:], 0xFFFF0000|uint32(markers))
				_, err := peer.WriteToUDPAddrPort(m, to)
				require.NoError(t, err)
				timeout := time.After(500 * time.Millisecond)
			wait:
				for {
					select {
					case f := <-u.Frames():
						drained++
						if len(f) == 60 && binary.BigEndian.Uint32(f[14:]) == 0xFFFF0000|uint32(markers) {
							got = true
							break wait
						}
					case <-timeout:
						break wait
					}
				}
			}
			require.True(t, got, "no marker came through")
			drain()

			s := u.Stats()
			sent := uint64(n + markers)
			accounted := s.RxFrames + s.RxQueueFull + s.RxKernelDrops
			slack := softnetDrops() - netDrops
			t.Logf("sent %d in %v: received %d, queue full %d, kernel drops %d (softnet drops %d); sockbuf rx %d tx %d",
				sent, blast, s.RxFrames, s.RxQueueFull, s.RxKernelDrops, slack, s.RxSockBuf, s.TxSockBuf)
			require.Equal(t, uint64(drained), s.RxFrames, "every queued frame was drained")
			require.LessOrEqual(t, accounted, sent)
			require.GreaterOrEqual(t, accounted+slack, sent, "frames unaccounted for: %+v", s)
			require.Zero(t, s.RxErrors)
			queueLen := tc.cfg.QueueLen
			if queueLen == 0 {
				queueLen = wire.DefaultQueueLen
			}
			// What reached the reader beyond the queue's room was queue-full.
			require.GreaterOrEqual(t, int64(s.RxQueueFull), int64(n-queueLen)-int64(s.RxKernelDrops+slack), "the burst overflowed the queue")
		})
	}
}

// The socket buffers are what was asked for (as root, beyond rmem_max).
func TestUDPSocketBuffers(t *testing.T) {
	u, err := wire.OpenUDP(netip.MustParseAddrPort("127.0.0.1:0"), netip.MustParseAddrPort("127.0.0.1:9"))
	require.NoError(t, err)
	defer u.Close()
	s := u.Stats()
	require.NotZero(t, s.RxSockBuf)
	require.NotZero(t, s.TxSockBuf)
	if s.RxSockBuf < wire.DefaultSocketBuffer || s.TxSockBuf < wire.DefaultSocketBuffer {
		if os.Geteuid() != 0 {
			t.Skipf("not root: the kernel capped the buffers at rx %d, tx %d (net.core.rmem_max/wmem_max)", s.RxSockBuf, s.TxSockBuf)
		}
		t.Fatalf("as root, SO_RCVBUFFORCE/SO_SNDBUFFORCE should give %d: got rx %d, tx %d", wire.DefaultSocketBuffer, s.RxSockBuf, s.TxSockBuf)
	}
	// Linux reports twice the size set.
	require.Equal(t, uint64(2*wire.DefaultSocketBuffer), s.RxSockBuf)
	require.Equal(t, uint64(2*wire.DefaultSocketBuffer), s.TxSockBuf)

	// A negative size leaves the system default.
	d, err := wire.OpenUDPConfig(netip.MustParseAddrPort("127.0.0.1:0"), netip.MustParseAddrPort("127.0.0.1:9"), wire.UDPConfig{RecvBuffer: -1, SendBuffer: -1})
	require.NoError(t, err)
	defer d.Close()
	require.Less(t, d.Stats().RxSockBuf, s.RxSockBuf)
}
