package wallclock

// Tests on a real wire: UDP on the loopback interface, one frame per
// datagram, between two NICs of one process.

import (
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/device"
	"github.com/softnic/softnic/ethport"
	"github.com/softnic/softnic/fault"
	"github.com/softnic/softnic/internal/freeport"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/profile"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/shm"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/testbed"
	"github.com/softnic/softnic/trace"
	"github.com/softnic/softnic/wire"
)

func freeUDPPort(t *testing.T) int {
	t.Helper()
	p, err := freeport.UDP()
	require.NoError(t, err)
	return p
}

// udpPair is the two wire specs of a loopback UDP cable.
func udpPair(t *testing.T) [2]string {
	a, b := freeUDPPort(t), freeUDPPort(t)
	return [2]string{fmt.Sprintf("udp:127.0.0.1:%d,127.0.0.1:%d", a, b), fmt.Sprintf("udp:127.0.0.1:%d,127.0.0.1:%d", b, a)}
}

var udpIPs = [2]netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")}

// side is what one end of the SEND tests sets up on a provider context.
type side struct {
	pd  *provider.PD
	cq  *provider.CQ
	qp  *provider.QP
	buf provider.Buffer
	mr  *provider.MR
}

func newSide(t *testing.T, ctx *provider.Context) *side {
	t.Helper()
	s := &side{}
	var err error
	s.pd, err = ctx.AllocPD()
	require.NoError(t, err)
	s.buf, err = ctx.AllocBuffer(4096, 4096)
	require.NoError(t, err)
	s.mr, err = s.pd.RegMR(s.buf.Addr, 4096, provider.AccessLocalWrite)
	require.NoError(t, err)
	s.cq, err = ctx.CreateCQ(16)
	require.NoError(t, err)
	s.qp, err = ctx.CreateQP(s.pd, provider.QPInitAttr{Type: provider.QPTypeRC, SendCQ: s.cq, RecvCQ: s.cq,
		Cap: provider.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	return s
}

// connect brings both QPs up, each to the other (static neighbours: the
// MAC is the default of the peer's IP).
func connect(t *testing.T, s [2]*side) {
	t.Helper()
	for i := range s {
		a := provider.DefaultConnectAttr()
		a.Peer = provider.Peer{QPN: s[1-i].qp.QPN(), PSN: 0x100, GID: udpIPs[1-i].As16(), MAC: ethport.DefaultMAC(udpIPs[1-i])}
		a.PSN = 0x100
		require.NoError(t, s[i].qp.Connect(a))
	}
}

func (s *side) postRecv(t *testing.T) {
	_, err := s.qp.PostRecv([]provider.RecvWR{{WRID: 1, SGL: []provider.SGE{s.mr.SGE(0, 4096)}}})
	require.NoError(t, err)
}

func (s *side) postSend(t *testing.T, msg string) {
	copy(s.buf.Bytes, msg)
	_, err := s.qp.PostSend([]provider.SendWR{{WRID: 2, Opcode: provider.WRSend, Flags: provider.SendSignaled,
		SGL: []provider.SGE{s.mr.SGE(0, uint32(len(msg)))}}})
	require.NoError(t, err)
}

// sendPair opens two Nets on a loopback UDP pair (the first under plan0,
// if any), connects an RC QP on each and posts a receive on the second:
// ready for a SEND from nets[0].
func sendPair(t *testing.T, plan0 *fault.Plan) ([2]*Net, [2]*side) {
	wires := udpPair(t)
	var nets [2]*Net
	var sides [2]*side
	for i := range nets {
		cfg := Config{Wire: wires[i], IP: udpIPs[i], Lead: DefaultLead, MemNeed: 1 << 20, Profile: profile.Default(),
			Neighbors: []ethport.Neighbor{{IP: udpIPs[1-i], MAC: ethport.DefaultMAC(udpIPs[1-i])}}}
		if i == 0 {
			cfg.Faults = plan0
		}
		n, err := Open(cfg)
		require.NoError(t, err)
		t.Cleanup(n.Close)
		nets[i] = n
		sides[i] = newSide(t, n.Context())
	}
	connect(t, sides)
	sides[1].postRecv(t)
	return nets, sides
}

// sendUntilSent posts a SEND of msg on s and pumps n until a frame has
// left its port (5 s at most).
func sendUntilSent(t *testing.T, n *Net, s *side, msg string) {
	t.Helper()
	n.Sync()
	s.postSend(t, msg)
	for end := time.Now().Add(5 * time.Second); n.Port().Counters().Value(ethport.CtrTxFrames) == 0; {
		require.True(t, time.Now().Before(end), "the SEND never left")
		n.Pump(0, 64)
	}
}

// Two Nets, each driven by its own goroutine, exchange a SEND over UDP.
func TestNetsOverUDP(t *testing.T) {
	nets, sides := sendPair(t, nil)

	done, finished := make(chan struct{}), make(chan struct{})
	got := make(chan error, 1)
	go func() { // the receiver's goroutine owns nets[1] until finished
		defer close(finished)
		wcs := make([]provider.WC, 1)
		_, err := nets[1].PollCQ(sides[1].cq, wcs, 10*time.Second, func() string { return "the SEND" })
		if err == nil && (wcs[0].Status != provider.WCSuccess || wcs[0].ByteLen != 5) {
			err = fmt.Errorf("receive completion %+v", wcs[0])
		}
		got <- err
		// Keep the NIC running (its ACK, a retransmission) until the
		// sender is done.
		_, _ = Await(nets[1], done, 10*time.Second, "the sender")
	}()
	nets[0].Sync()
	sides[0].postSend(t, "hello")
	wcs := make([]provider.WC, 1)
	_, err := nets[0].PollCQ(sides[0].cq, wcs, 10*time.Second, func() string { return "the SEND's completion" })
	close(done)
	<-finished // nets[1] is the test goroutine's again (its Close)
	require.NoError(t, err)
	require.Equal(t, provider.WCSuccess, wcs[0].Status)
	require.NoError(t, <-got)
	require.Equal(t, "hello", string(sides[1].buf.Bytes[:5]))
	require.Contains(t, nets[0].CounterLine(), "real_tx_frames=")
}

// noProgress is a device as a control channel whose provider does not run
// the engine from Poll: the daemon's case, where a pacer goroutine does.
type noProgress struct{ mlx5.Control }

// One Pacer, one engine, two devices on two UDP ports: the pacer runs on
// its own goroutine under a mutex, the test adds the devices, submits work
// and polls under the same mutex — the daemon's use.
func TestPacerTwoDevicesOverUDP(t *testing.T) {
	wires := udpPair(t)
	eng := sim.NewEngine()
	rec := trace.NewRecorder()
	var mu sync.Mutex
	p := NewPacer(eng, DefaultLead)
	p.SetLocker(&mu)
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		p.Run(stop)
	}()
	defer func() {
		close(stop)
		<-stopped
	}()
	// locked runs f with the mutex held (and released if f fails the test).
	locked := func(f func()) {
		mu.Lock()
		defer mu.Unlock()
		f()
	}

	var sides [2]*side
	var trs [2]wire.RealTransport
	for i := range sides {
		locked(func() {
			spec, err := wire.ParseWireSpec(wires[i])
			require.NoError(t, err)
			tr, err := wire.OpenReal(spec)
			require.NoError(t, err)
			t.Cleanup(func() { tr.Close() })
			trs[i] = tr
			mem, err := shm.New(fmt.Sprintf("wallclock-test%d", i), 4<<20, uint64(0x7f0000000000+i<<32))
			require.NoError(t, err)
			t.Cleanup(func() { mem.Close() })
			id := device.Identity{Node: i, MAC: ethport.DefaultMAC(udpIPs[i]), IP: udpIPs[i]}
			dev := device.New(eng, profile.Default().Device, id, mem, rec)
			port, err := ethport.New(eng, ethport.Config{MAC: id.MAC, IP: id.IP, Node: i,
				Static: []ethport.Neighbor{{IP: udpIPs[1-i], MAC: ethport.DefaultMAC(udpIPs[1-i])}}}, tr, rec)
			require.NoError(t, err)
			port.Attach(dev)
			dev.Connect(port)
			pp := p.AddPort(port, tr)
			require.Same(t, port, pp.Port())
			ctx, err := provider.Open(provider.Device{Name: fmt.Sprintf("softnic%d", i), Control: noProgress{dev}, MMIO: testbed.NewCPU(eng, rec, dev, profile.Default().Host()), Mem: mem})
			require.NoError(t, err)
			t.Cleanup(func() { ctx.Close() })
			sides[i] = newSide(t, ctx)
		})
	}
	locked(func() {
		connect(t, sides)
		sides[1].postRecv(t)
		p.Sync()
		sides[0].postSend(t, "paced")
	})
	p.Wake()

	// Both completions, each polled under the mutex.
	var wcs [2][1]provider.WC
	var seen [2]bool
	deadline := time.Now().Add(10 * time.Second)
	for !seen[0] || !seen[1] {
		require.False(t, time.Now().After(deadline), "no completions within 10 s (send %v, receive %v)", seen[0], seen[1])
		var err error
		mu.Lock()
		for i := range sides {
			if !seen[i] && err == nil {
				var k int
				k, err = sides[i].cq.Poll(wcs[i][:])
				seen[i] = k > 0
			}
		}
		mu.Unlock()
		require.NoError(t, err)
		time.Sleep(100 * time.Microsecond)
	}
	for i := range wcs {
		require.Equal(t, provider.WCSuccess, wcs[i][0].Status, "side %d", i)
	}
	mu.Lock()
	got := string(sides[1].buf.Bytes[:5])
	mu.Unlock()
	require.Equal(t, "paced", got)
	for i, tr := range trs {
		require.NotZero(t, tr.Stats().TxFrames, "side %d sent on its own UDP port", i)
	}
}

// TestSenderThatDoesNotPollForASecond: an application posts a SEND, then
// does something else for longer than its QP's whole retry budget (7
// retries of 67 ms) before it polls. The peer's ACK arrived long before;
// a ConnectX, which does not wait for its host to poll, took it then and
// the SEND completes. The pump used to run the overdue ACK timers before
// it looked at the frames queued meanwhile, so the SEND failed
// RETRY_EXC_ERR on a healthy link.
func TestSenderThatDoesNotPollForASecond(t *testing.T) {
	nets, sides := sendPair(t, nil)

	done, finished := make(chan struct{}), make(chan struct{})
	got := make(chan error, 1)
	go func() { // the receiver's goroutine owns nets[1] until finished
		defer close(finished)
		wcs := make([]provider.WC, 1)
		_, err := nets[1].PollCQ(sides[1].cq, wcs, 10*time.Second, func() string { return "the SEND" })
		got <- err
		_, _ = Await(nets[1], done, 10*time.Second, "the sender")
	}()
	sendUntilSent(t, nets[0], sides[0], "hello")
	// The ACK comes back within microseconds; the sender looks after a
	// second and a half.
	select {
	case err := <-got:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the receiver got no SEND")
	}
	time.Sleep(1500 * time.Millisecond)
	wcs := make([]provider.WC, 1)
	_, err := nets[0].PollCQ(sides[0].cq, wcs, 10*time.Second, func() string { return "the SEND's completion" })
	close(done)
	<-finished
	require.NoError(t, err)
	require.Equal(t, provider.WCSuccess, wcs[0].Status, "status %v, counters %s", wcs[0].Status, nets[0].CounterLine())
}

// TestStalledSenderSpendsNoRetries: the sender's process does nothing for
// longer than its QP's whole retry budget (7 retries of 67 ms): it was
// stopped (SIGSTOP, a paused VM) or busy elsewhere without polling. When
// it runs again, its NIC — which ran in that process and stood still with
// it — goes on where it stopped. The catch-up to the wall clock used to
// run the whole stall in virtual time at once, with the wire frozen: every
// ACK timeout due meanwhile fired within microseconds of real time, each
// retransmission's timer fell due again before the peer could answer it,
// and the SEND failed RETRY_EXC_ERR on a healthy link (seen with `softnic
// rdma` stopped for 3 s mid-WRITE, local_ack_timeout_err=7). Two paths:
// the next post's Sync (the ACK sits in the socket), and a poll when the
// SEND itself was lost before the stall (it must be resent and answered).
func TestStalledSenderSpendsNoRetries(t *testing.T) {
	for _, tc := range []struct {
		name   string
		plan   string // the sender's fault plan, "" for none
		resume func(t *testing.T, n *Net, s *side)
	}{
		{"post after the stall", "", func(t *testing.T, n *Net, s *side) {
			n.Sync()
			s.postSend(t, "again")
		}},
		{"lost SEND polled after the stall", `{"rules": [{"point": "wire.tx", "action": "drop", "nth": 1, "match": {"opcode": "RC_SEND_ONLY"}}]}`,
			func(*testing.T, *Net, *side) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var plan *fault.Plan
			if tc.plan != "" {
				var err error
				plan, err = fault.Parse([]byte(tc.plan))
				require.NoError(t, err)
			}
			nets, sides := sendPair(t, plan)
			sides[1].postRecv(t)

			done, finished := make(chan struct{}), make(chan struct{})
			go func() { // the receiver's goroutine owns nets[1] until finished
				defer close(finished)
				_, _ = Await(nets[1], done, 10*time.Second, "the sender")
			}()
			sendUntilSent(t, nets[0], sides[0], "hello")
			time.Sleep(time.Second) // the stall: nothing pumps nets[0]
			tc.resume(t, nets[0], sides[0])
			wcs := make([]provider.WC, 1)
			_, err := nets[0].PollCQ(sides[0].cq, wcs, 10*time.Second, func() string { return "the SEND's completion" })
			close(done)
			<-finished
			require.NoError(t, err)
			require.Equal(t, provider.WCSuccess, wcs[0].Status, "status %v, counters %s", wcs[0].Status, nets[0].CounterLine())
			require.NotContains(t, nets[0].CounterLine(), "local_ack_timeout_err=7", "retries spent while the wire stood still")
		})
	}
}
