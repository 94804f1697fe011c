package main

import (
	"bytes"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ethport"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/wire"
)

// fakeTransport is a wire.RealTransport in memory: what the NIC sends is
// recorded, frames pushed into in are received.
type fakeTransport struct {
	mu     sync.Mutex
	sent   [][]byte
	in     chan []byte
	closed bool
}

func newFakeTransport() *fakeTransport { return &fakeTransport{in: make(chan []byte, 64)} }

func (f *fakeTransport) Send(frame []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return wire.ErrClosed
	}
	f.sent = append(f.sent, append([]byte(nil), frame...))
	return nil
}

func (f *fakeTransport) Frames() <-chan []byte { return f.in }
func (f *fakeTransport) Stats() wire.RealStats {
	return wire.RealStats{TxFrames: uint64(len(f.Sent()))}
}
func (f *fakeTransport) String() string { return "fake" }

func (f *fakeTransport) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.closed {
		f.closed = true
		close(f.in)
	}
	return nil
}

func (f *fakeTransport) Sent() [][]byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]byte(nil), f.sent...)
}

// Test addresses (TEST-NET-1): they exist only inside these tests.
var (
	testIP   = netip.MustParseAddr("192.0.2.1")
	testPeer = netip.MustParseAddr("192.0.2.2")
	peerMAC  = [6]byte{0x02, 0x00, 0xc0, 0x00, 0x02, 0x02}
)

func newTestNet(t *testing.T, o netOpts) (*realNet, *fakeTransport, *bytes.Buffer) {
	t.Helper()
	if o.ip == "" {
		o.ip = testIP.String()
	}
	if o.lead == 0 {
		o.lead = defaultLead
	}
	tr := newFakeTransport()
	var stderr bytes.Buffer
	r, err := newRealNet(o, 1<<20, tr, &stderr)
	require.NoError(t, err)
	t.Cleanup(func() { r.Close(); tr.Close() })
	return r, tr, &stderr
}

func whoHas(from [6]byte, fromIP, target netip.Addr) []byte {
	b := make([]byte, ethport.ARPFrameLen)
	ethport.BuildARPFrame(b, ethport.Broadcast, from, &ethport.ARPFields{Op: ethport.ARPRequest,
		SenderMAC: from, SenderIP: fromIP, TargetIP: target})
	return b
}

func TestNewRealNetRejectsBadFlags(t *testing.T) {
	tests := []struct {
		name string
		o    netOpts
	}{
		{"no IP", netOpts{}},
		{"IPv6", netOpts{ip: "2001:db8::1"}},
		{"bad MAC", netOpts{ip: "192.0.2.1", mac: "02:00"}},
		{"multicast MAC", netOpts{ip: "192.0.2.1", mac: "01:00:5e:00:00:01"}},
		{"negative lead", netOpts{ip: "192.0.2.1", lead: -time.Second}},
		{"memory too small", netOpts{ip: "192.0.2.1", memSize: 4096}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := newFakeTransport()
			_, err := newRealNet(tc.o, 1<<20, tr, &bytes.Buffer{})
			require.Error(t, err)
		})
	}
	_, err := openRealNet(netOpts{ip: "192.0.2.1"}, 0, &bytes.Buffer{})
	require.ErrorContains(t, err, "--wire is required")
	_, err = openRealNet(netOpts{ip: "192.0.2.1", wire: "udp:nonsense"}, 0, &bytes.Buffer{})
	require.ErrorIs(t, err, wire.ErrBadWireSpec)
}

// The virtual clock never lags the wall clock, and events further than the
// lead ahead do not run.
func TestPumpTimePolicy(t *testing.T) {
	r, _, _ := newTestNet(t, netOpts{})
	before := r.wall()
	r.pump(0, 64)
	require.GreaterOrEqual(t, r.eng.Now(), before, "virtual time caught up with the wall clock")

	var near, far bool
	r.eng.At(r.eng.Now().Add(r.lead/2), sim.HandlerFunc(func(sim.Time) { near = true }))
	r.eng.At(r.eng.Now().Add(sim.Duration(time.Hour/time.Nanosecond)*sim.Nanosecond), sim.HandlerFunc(func(sim.Time) { far = true }))
	for i := 0; i < 4 && !near; i++ {
		r.pump(0, 64)
	}
	require.True(t, near, "an event within the lead runs without waiting for the wall clock")
	require.False(t, far, "an event an hour ahead waits for the wall clock")
	require.False(t, r.pump(time.Millisecond, 64), "idle: the pump waits and reports no work")
}

// While the command blocks on something else (stdin, TCP), the NIC answers
// ARP: a peer's modify_qp(RTR) must not time out.
func TestAwaitAnswersARP(t *testing.T) {
	r, tr, _ := newTestNet(t, netOpts{})
	tr.in <- whoHas(peerMAC, testPeer, testIP)
	ch := make(chan int, 1)
	go func() {
		for len(tr.Sent()) == 0 {
			time.Sleep(time.Millisecond)
		}
		ch <- 42
	}()
	v, err := await(r, ch, 10*time.Second, "the ARP reply")
	require.NoError(t, err)
	require.Equal(t, 42, v)
	sent := tr.Sent()
	require.Len(t, sent, 1)
	require.Equal(t, peerMAC[:], sent[0][0:6], "reply to the asker")
	require.Equal(t, uint64(1), r.port.Counters().Value(ethport.CtrARPRepliesSent))

	_, err = await(r, make(chan int), 5*time.Millisecond, "nothing")
	require.ErrorIs(t, err, errTimeout)
	require.ErrorContains(t, err, "waiting for nothing")
}

func TestResolve(t *testing.T) {
	r, tr, _ := newTestNet(t, netOpts{neigh: neighFlag{{IP: netip.MustParseAddr("192.0.2.9"), MAC: peerMAC}}})
	mac, err := r.resolve(netip.MustParseAddr("192.0.2.9"))
	require.NoError(t, err)
	require.Equal(t, peerMAC, mac)
	require.Empty(t, tr.Sent(), "a static neighbour needs no ARP")

	// A peer that answers the who-has.
	go func() {
		for len(tr.Sent()) == 0 {
			time.Sleep(time.Millisecond)
		}
		b := make([]byte, ethport.ARPFrameLen)
		ethport.BuildARPFrame(b, ethport.DefaultMAC(testIP), peerMAC, &ethport.ARPFields{Op: ethport.ARPReply,
			SenderMAC: peerMAC, SenderIP: testPeer, TargetMAC: ethport.DefaultMAC(testIP), TargetIP: testIP})
		tr.in <- b
	}()
	mac, err = r.resolve(testPeer)
	require.NoError(t, err)
	require.Equal(t, peerMAC, mac)
}

func TestResolveTimesOutAfterRetries(t *testing.T) {
	if testing.Short() {
		t.Skip("waits the ARP budget (about 1 s)")
	}
	r, tr, stderr := newTestNet(t, netOpts{})
	_, err := r.resolve(netip.MustParseAddr("192.0.2.77"))
	require.ErrorIs(t, err, ethport.ErrARPTimeout)
	require.Len(t, tr.Sent(), ethport.DefaultARPTries)
	require.Contains(t, stderr.String(), "port_arp_timeouts", "the warning names the counter")
}

func TestTransportClosed(t *testing.T) {
	r, tr, _ := newTestNet(t, netOpts{})
	tr.Close()
	_, err := r.resolve(testPeer)
	require.ErrorIs(t, err, errTransportClosed)
}

// pollCQ on a CQ that never fills gives up after its timeout, naming what it
// waited for and the counters; the provider's Poll does not spin (each
// empty round blocks in the pump).
func TestPollCQTimesOut(t *testing.T) {
	r, _, _ := newTestNet(t, netOpts{})
	cq, err := r.ctx.CreateCQ(4)
	require.NoError(t, err)
	wcs := make([]provider.WC, 1)
	_, err = r.pollCQ(cq, wcs, 20*time.Millisecond, func() string { return "the answer" })
	require.ErrorIs(t, err, errTimeout)
	require.ErrorContains(t, err, "waiting for the answer")
}

func TestEchoWarningIsBounded(t *testing.T) {
	r, tr, stderr := newTestNet(t, netOpts{})
	for i := 0; i < maxWarnLines+10; i++ {
		tr.in <- roceJunk(t) // the device drops it with a warning
		for r.pump(0, 64) {
		}
	}
	require.Equal(t, maxWarnLines+1, strings.Count(stderr.String(), "\n")-strings.Count(stderr.String(), "softnic: profile "),
		"warnings are echoed up to the cap, then one suppression note")
	require.Contains(t, stderr.String(), "rx_drop_bad_icrc")
	require.Equal(t, uint64(maxWarnLines+10), r.dev.Counters().Get("rx_drop_bad_icrc"), "every drop is counted")

	quiet, tr2, stderr2 := newTestNet(t, netOpts{quiet: true})
	tr2.in <- roceJunk(t)
	for quiet.pump(0, 64) {
	}
	require.Empty(t, stderr2.String(), "--quiet")
}

// roceJunk is a RoCEv2 SEND for our address whose ICRC is wrong.
func roceJunk(t *testing.T) []byte {
	t.Helper()
	fp := roce.FrameParams{SrcMAC: peerMAC, DstMAC: ethport.DefaultMAC(testIP), SrcIP: testPeer, DstIP: testIP, TTL: 64,
		BTH: roce.BTHFields{Opcode: roce.OpRCSendOnly, PKey: 0xffff, DestQP: 0x100}}
	b := make([]byte, 256)
	n, err := roce.BuildFrame(b, &fp, []byte("junk"))
	require.NoError(t, err)
	b[n-1] ^= 0xff
	return b[:n]
}
