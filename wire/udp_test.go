package wire_test

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/internal/freeport"
	"github.com/softnic/softnic/wire"
)

// openUDPPair opens two UDP transports on loopback pointing at each other.
// Ports are found by binding :0 first, so tests never collide.
func openUDPPair(t *testing.T) (*wire.UDP, *wire.UDP) {
	t.Helper()
	pa, pb := freeUDPPort(t), freeUDPPort(t)
	lo := netip.MustParseAddr("127.0.0.1")
	a, err := wire.OpenUDP(netip.AddrPortFrom(lo, pa), netip.AddrPortFrom(lo, pb))
	require.NoError(t, err)
	t.Cleanup(func() { a.Close() })
	b, err := wire.OpenUDP(netip.AddrPortFrom(lo, pb), netip.AddrPortFrom(lo, pa))
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	return a, b
}

func freeUDPPort(t *testing.T) uint16 {
	t.Helper()
	p, err := freeport.UDP()
	require.NoError(t, err)
	return uint16(p)
}

func recvFrame(t *testing.T, tr wire.RealTransport) []byte {
	t.Helper()
	select {
	case f, ok := <-tr.Frames():
		require.True(t, ok, "channel closed")
		return f
	case <-time.After(5 * time.Second):
		t.Fatal("no frame within 5 s")
	}
	return nil
}

func TestUDPCarriesOneFramePerDatagram(t *testing.T) {
	a, b := openUDPPair(t)
	frames := [][]byte{
		make([]byte, 14),   // bare Ethernet header: no padding added
		make([]byte, 42),   // an ARP frame
		make([]byte, 1098), // a PMTU-1024 RoCE frame
		make([]byte, 9000),
	}
	for i, f := range frames {
		for j := range f {
			f[j] = byte(i*31 + j)
		}
		require.NoError(t, a.Send(f))
	}
	for _, f := range frames {
		require.Equal(t, f, recvFrame(t, b))
	}
	// And back.
	require.NoError(t, b.Send(frames[1]))
	require.Equal(t, frames[1], recvFrame(t, a))
	sa := a.Stats()
	require.Equal(t, uint64(4), sa.TxFrames)
	require.Equal(t, uint64(14+42+1098+9000), sa.TxBytes)
	require.Equal(t, uint64(1), sa.RxFrames)
	require.Equal(t, uint64(4), b.Stats().RxFrames)
	require.Contains(t, a.String(), "udp:127.0.0.1:")
}

func TestUDPRejectsBadFrameSizes(t *testing.T) {
	a, _ := openUDPPair(t)
	require.ErrorIs(t, a.Send(make([]byte, 13)), wire.ErrFrameSize)
	require.ErrorIs(t, a.Send(make([]byte, wire.MaxRealFrame+1)), wire.ErrFrameSize)
	require.Equal(t, uint64(2), a.Stats().TxErrors)
	require.Equal(t, uint64(0), a.Stats().TxFrames)
}

func TestUDPDropsForeignAndRuntDatagrams(t *testing.T) {
	// The peer here is a plain socket, so it can send what a transport
	// refuses to (a runt).
	lo := net.IPv4(127, 0, 0, 1)
	peer, err := net.ListenUDP("udp4", &net.UDPAddr{IP: lo})
	require.NoError(t, err)
	defer peer.Close()
	stranger, err := net.ListenUDP("udp4", &net.UDPAddr{IP: lo})
	require.NoError(t, err)
	defer stranger.Close()
	b, err := wire.OpenUDP(netip.MustParseAddrPort("127.0.0.1:0"), peer.LocalAddr().(*net.UDPAddr).AddrPort())
	require.NoError(t, err)
	defer b.Close()

	_, err = stranger.WriteToUDPAddrPort(make([]byte, 60), b.LocalAddr())
	require.NoError(t, err)
	_, err = peer.WriteToUDPAddrPort(make([]byte, 5), b.LocalAddr())
	require.NoError(t, err)
	marker := []byte("0123456789abcdef")
	_, err = peer.WriteToUDPAddrPort(marker, b.LocalAddr())
	require.NoError(t, err)
	require.Equal(t, marker, recvFrame(t, b), "only the peer's whole frame is queued")
	s := b.Stats()
	require.Equal(t, uint64(1), s.RxForeign, "stats %+v", s)
	require.Equal(t, uint64(1), s.RxErrors, "stats %+v", s)
	require.Equal(t, uint64(1), s.RxFrames, "stats %+v", s)

	// What b sends arrives at the peer unchanged.
	require.NoError(t, b.Send(marker))
	buf := make([]byte, 100)
	require.NoError(t, peer.SetReadDeadline(time.Now().Add(5*time.Second)))
	n, _, err := peer.ReadFromUDPAddrPort(buf)
	require.NoError(t, err)
	require.Equal(t, marker, buf[:n])
}

func TestUDPCloseEndsTheReader(t *testing.T) {
	a, _ := openUDPPair(t)
	require.NoError(t, a.Close())
	select {
	case _, ok := <-a.Frames():
		require.False(t, ok, "Frames is closed after Close")
	case <-time.After(5 * time.Second):
		t.Fatal("reader did not stop")
	}
	require.NoError(t, a.Close(), "Close is idempotent")
	require.Error(t, a.Send(make([]byte, 60)))
}

func TestUDPOpenErrors(t *testing.T) {
	lo := netip.MustParseAddr("127.0.0.1")
	_, err := wire.OpenUDP(netip.AddrPortFrom(lo, 0), netip.AddrPort{})
	require.ErrorIs(t, err, wire.ErrBadWireSpec)
	a, _ := openUDPPair(t)
	_, err = wire.OpenUDP(a.LocalAddr(), netip.AddrPortFrom(lo, 9))
	require.Error(t, err, "address in use")
	_, err = wire.OpenReal(wire.WireSpec{Kind: "carrier-pigeon"})
	require.ErrorIs(t, err, wire.ErrBadWireSpec)
	tr, err := wire.OpenReal(wire.WireSpec{Kind: "udp", Listen: a.LocalAddr(), Peer: netip.AddrPortFrom(lo, 9)})
	require.Error(t, err, "address in use")
	require.True(t, tr == nil, "a failed OpenReal is a nil interface, not a typed nil (%#v)", tr)
}
