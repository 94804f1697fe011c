package wallclock

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ethport"
	"github.com/softnic/softnic/fault"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/wire"
)

// waitSent waits (at most 10 s) until tr has sent at least n frames.
func waitSent(t *testing.T, tr *wire.MemTransport, n int) bool {
	for deadline := time.Now().Add(10 * time.Second); len(tr.Sent()) < n; {
		if time.Now().After(deadline) {
			t.Errorf("the NIC sent %d frames, want %d", len(tr.Sent()), n)
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

// Test addresses (TEST-NET-1): they exist only inside these tests.
var (
	testIP   = netip.MustParseAddr("192.0.2.1")
	testPeer = netip.MustParseAddr("192.0.2.2")
	peerMAC  = [6]byte{0x02, 0x00, 0xc0, 0x00, 0x02, 0x02}
)

// newTestNet is the NIC of cfg (IP testIP and the default lead unless
// given) on a fake transport.
func newTestNet(t *testing.T, cfg Config) (*Net, *wire.MemTransport, *bytes.Buffer) {
	t.Helper()
	if !cfg.IP.IsValid() {
		cfg.IP = testIP
	}
	if cfg.Lead == 0 {
		cfg.Lead = DefaultLead
	}
	tr := wire.NewMemTransport(1024)
	var stderr bytes.Buffer
	cfg.Transport, cfg.Stderr, cfg.MemNeed = tr, &stderr, 1<<20
	n, err := Open(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { n.Close(); tr.Close() })
	return n, tr, &stderr
}

func whoHas(from [6]byte, fromIP, target netip.Addr) []byte {
	b := make([]byte, ethport.ARPFrameLen)
	ethport.BuildARPFrame(b, ethport.Broadcast, from, &ethport.ARPFields{Op: ethport.ARPRequest,
		SenderMAC: from, SenderIP: fromIP, TargetIP: target})
	return b
}

func TestOpenRejectsBadConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
	}{
		{"no IP", Config{}},
		{"IPv6", Config{IP: netip.MustParseAddr("2001:db8::1")}},
		{"unspecified IP", Config{IP: netip.MustParseAddr("0.0.0.0")}},
		{"multicast MAC", Config{IP: testIP, MAC: [6]byte{0x01, 0x00, 0x5e, 0x00, 0x00, 0x01}}},
		{"negative lead", Config{IP: testIP, Lead: -time.Second}},
		// A lead past the ACK timeouts fired them before any ACK could
		// come back: RETRY_EXC_ERR on the first message of a healthy link
		// (perf --wire --lead 600ms), ARP given up at once (--lead 1s).
		{"lead past the timers", Config{IP: testIP, Lead: MaxLead + time.Nanosecond}},
		{"memory too small", Config{IP: testIP, Mem: 4096, MemNeed: 1 << 20}},
	}
	// A rule for a node other than 0 could never fire on a real wire,
	// where the NIC is node 0 (rdma and perf --wire ran such a plan
	// without a word).
	for _, n := range []string{"1", "5"} {
		plan, err := fault.Parse([]byte(`{"rules":[{"point":"wire.tx","action":"drop","match":{"node":` + n + `}}]}`))
		require.NoError(t, err)
		tests = append(tests, struct {
			name string
			cfg  Config
		}{"a fault rule for node " + n, Config{IP: testIP, Faults: plan}})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := wire.NewMemTransport(1024)
			tc.cfg.Transport = tr
			_, err := Open(tc.cfg)
			require.Error(t, err)
			require.False(t, tr.Closed(), "a transport given to a failed Open stays the caller's")
			if tc.cfg.Faults != nil {
				require.ErrorIs(t, err, fault.ErrInvalidPlan)
				require.Contains(t, err.Error(), "the rule would never fire")
			}
		})
	}
	t.Run("a fault rule for node 0", func(t *testing.T) {
		plan, err := fault.Parse([]byte(`{"rules":[{"point":"wire.tx","action":"drop","match":{"node":0}}]}`))
		require.NoError(t, err)
		n, err := Open(Config{IP: testIP, Faults: plan, Transport: wire.NewMemTransport(1024), MemNeed: 1 << 20})
		require.NoError(t, err)
		n.Close()
	})
	_, err := Open(Config{IP: testIP})
	require.ErrorIs(t, err, ErrConfig, "no wire")
	_, err = Open(Config{IP: testIP, Wire: "udp:nonsense"})
	require.ErrorIs(t, err, wire.ErrBadWireSpec)
}

// The virtual clock never lags the wall clock, and events further than the
// lead ahead do not run.
func TestPumpTimePolicy(t *testing.T) {
	n, _, _ := newTestNet(t, Config{})
	p, eng := n.Pacer(), n.Engine()
	before := p.Wall()
	n.Pump(0, 64)
	require.GreaterOrEqual(t, eng.Now(), before, "virtual time caught up with the wall clock")

	var near, far bool
	eng.At(eng.Now().Add(p.Lead()/2), sim.HandlerFunc(func(sim.Time) { near = true }))
	eng.At(eng.Now().Add(sim.Duration(time.Hour/time.Nanosecond)*sim.Nanosecond), sim.HandlerFunc(func(sim.Time) { far = true }))
	for i := 0; i < 4 && !near; i++ {
		n.Pump(0, 64)
	}
	require.True(t, near, "an event within the lead runs without waiting for the wall clock")
	require.False(t, far, "an event an hour ahead waits for the wall clock")
	require.False(t, n.Pump(time.Millisecond, 64), "idle: the pump waits and reports no work")
}

// While the caller blocks on something else (stdin, TCP), the NIC answers
// ARP: a peer's modify_qp(RTR) must not time out.
func TestAwaitAnswersARP(t *testing.T) {
	n, tr, _ := newTestNet(t, Config{})
	tr.Deliver(whoHas(peerMAC, testPeer, testIP))
	ch := make(chan int, 1)
	go func() {
		if waitSent(t, tr, 1) {
			ch <- 42
		}
	}()
	v, err := Await(n, ch, 10*time.Second, "the ARP reply")
	require.NoError(t, err)
	require.Equal(t, 42, v)
	sent := tr.Sent()
	require.Len(t, sent, 1)
	require.Equal(t, peerMAC[:], sent[0][0:6], "reply to the asker")
	require.Equal(t, uint64(1), n.Port().Counters().Value(ethport.CtrARPRepliesSent))

	_, err = Await(n, make(chan int), 5*time.Millisecond, "nothing")
	require.ErrorIs(t, err, ErrTimeout)
	require.ErrorContains(t, err, "waiting for nothing")
}

func TestResolve(t *testing.T) {
	n, tr, _ := newTestNet(t, Config{Neighbors: []ethport.Neighbor{{IP: netip.MustParseAddr("192.0.2.9"), MAC: peerMAC}}})
	mac, err := n.Resolve(netip.MustParseAddr("192.0.2.9"))
	require.NoError(t, err)
	require.Equal(t, peerMAC, mac)
	require.Empty(t, tr.Sent(), "a static neighbour needs no ARP")

	// A peer that answers the who-has.
	go func() {
		if !waitSent(t, tr, 1) {
			return
		}
		b := make([]byte, ethport.ARPFrameLen)
		ethport.BuildARPFrame(b, ethport.DefaultMAC(testIP), peerMAC, &ethport.ARPFields{Op: ethport.ARPReply,
			SenderMAC: peerMAC, SenderIP: testPeer, TargetMAC: ethport.DefaultMAC(testIP), TargetIP: testIP})
		tr.Deliver(b)
	}()
	mac, err = n.Resolve(testPeer)
	require.NoError(t, err)
	require.Equal(t, peerMAC, mac)
}

func TestResolveTimesOutAfterRetries(t *testing.T) {
	if testing.Short() {
		t.Skip("waits the ARP budget (about 1 s)")
	}
	n, tr, stderr := newTestNet(t, Config{})
	_, err := n.Resolve(netip.MustParseAddr("192.0.2.77"))
	require.ErrorIs(t, err, ethport.ErrARPTimeout)
	require.Len(t, tr.Sent(), ethport.DefaultARPTries)
	require.Contains(t, stderr.String(), "port_arp_timeouts", "the warning names the counter")
}

func TestTransportClosed(t *testing.T) {
	n, tr, _ := newTestNet(t, Config{})
	tr.Close()
	_, err := n.Resolve(testPeer)
	require.ErrorIs(t, err, ErrTransportClosed)
	require.True(t, n.TransportClosed())
	for n.Engine().Pending() > 0 {
		n.Pump(0, 64)
	}
	require.ErrorIs(t, n.Advance(), ErrTransportClosed)
	// A wait without a limit (rdma's stdin) ends too, and says on what.
	_, err = Await(n, make(chan int), 0, "a command on stdin")
	require.ErrorIs(t, err, ErrTransportClosed)
	require.Contains(t, err.Error(), "a command on stdin")
}

// PollCQ on a CQ that never fills gives up after its timeout, naming what it
// waited for and the counters; the provider's Poll does not spin (each
// empty round blocks in the pump).
func TestPollCQTimesOut(t *testing.T) {
	n, _, _ := newTestNet(t, Config{})
	cq, err := n.Context().CreateCQ(4)
	require.NoError(t, err)
	wcs := make([]provider.WC, 1)
	_, err = n.PollCQ(cq, wcs, 20*time.Millisecond, func() string { return "the answer" })
	require.ErrorIs(t, err, ErrTimeout)
	require.ErrorContains(t, err, "waiting for the answer")
	k, err := n.PollNow(cq, wcs)
	require.NoError(t, err)
	require.Zero(t, k)
}

func TestEchoWarningIsBounded(t *testing.T) {
	n, tr, stderr := newTestNet(t, Config{})
	for i := 0; i < maxWarnLines+10; i++ {
		tr.Deliver(roceJunk(t)) // the device drops it with a warning
		for n.Pump(0, 64) {
		}
	}
	require.Equal(t, maxWarnLines+1, strings.Count(stderr.String(), "\n"),
		"warnings are echoed up to the cap, then one suppression note")
	require.Contains(t, stderr.String(), "rx_drop_bad_icrc")
	require.Equal(t, uint64(maxWarnLines+10), n.Device().Counters().Get("rx_drop_bad_icrc"), "every drop is counted")
	require.Contains(t, n.CounterLine(), "rx_drop_bad_icrc=", "the counter line has it too")

	quiet, tr2, stderr2 := newTestNet(t, Config{Quiet: true})
	tr2.Deliver(roceJunk(t))
	for quiet.Pump(0, 64) {
	}
	require.Empty(t, stderr2.String(), "Quiet")
}

// A fault plan acts where the port meets the wire: a dropped frame never
// reaches the transport, and the rule's counters say so.
func TestFaultsAtTheWire(t *testing.T) {
	plan, err := fault.Parse([]byte(`{"seed": 1, "rules": [{"point": "wire.tx", "action": "drop", "nth": 1}]}`))
	require.NoError(t, err)
	n, tr, _ := newTestNet(t, Config{Faults: plan})
	require.NotNil(t, n.Faults())
	tr.Deliver(whoHas(peerMAC, testPeer, testIP))
	for n.Pump(0, 64) {
	}
	require.Empty(t, tr.Sent(), "the ARP reply was dropped")
	require.Equal(t, uint64(1), n.Port().Counters().Value(ethport.CtrARPRepliesSent), "the port did answer")
	require.Contains(t, n.CounterLine(), "fault_rule0_fired=1")
}

// roceJunk is a RoCEv2 SEND for our address whose ICRC is wrong.
func roceJunk(t *testing.T) []byte {
	t.Helper()
	fp := roce.FrameParams{SrcMAC: peerMAC, DstMAC: ethport.DefaultMAC(testIP), SrcIP: testPeer, DstIP: testIP, TTL: 64,
		BTH: roce.BTHFields{Opcode: roce.OpRCSendOnly, PKey: 0xffff, DestQP: 0x100}}
	b := make([]byte, 256)
	k, err := roce.BuildFrame(b, &fp, []byte("junk"))
	require.NoError(t, err)
	b[k-1] ^= 0xff
	return b[:k]
}
