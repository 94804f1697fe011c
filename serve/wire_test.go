package serve_test

import (
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/internal/freeport"
	"github.com/softnic/softnic/profile"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/serve"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/testbed"
	"github.com/softnic/softnic/wallclock"
)

// startDaemonCfg runs a daemon of cfg on a fresh socket, closed at cleanup.
func startDaemonCfg(t testing.TB, cfg serve.Config) (*serve.Daemon, string) {
	t.Helper()
	cfg.Socket = filepath.Join(t.TempDir(), "softnic.sock")
	d, err := serve.New(cfg)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- d.Serve() }()
	t.Cleanup(func() {
		require.NoError(t, d.Close())
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(5 * time.Second):
			t.Error("Serve did not return after Close")
		}
	})
	return d, cfg.Socket
}

func freeUDP(t *testing.T) int {
	t.Helper()
	p, err := freeport.UDP()
	require.NoError(t, err)
	return p
}

// rcSide is one RC endpoint on a context.
type rcSide struct {
	pd  *provider.PD
	cq  *provider.CQ
	qp  *provider.QP
	buf provider.Buffer
	mr  *provider.MR
}

func newRCSide(t *testing.T, ctx *provider.Context) *rcSide {
	t.Helper()
	s := &rcSide{}
	var err error
	s.pd, err = ctx.AllocPD()
	require.NoError(t, err)
	s.buf, err = ctx.AllocBuffer(8192, 4096)
	require.NoError(t, err)
	s.mr, err = s.pd.RegMR(s.buf.Addr, 8192, provider.AccessLocalWrite)
	require.NoError(t, err)
	s.cq, err = ctx.CreateCQ(16)
	require.NoError(t, err)
	s.qp, err = ctx.CreateQP(s.pd, provider.QPInitAttr{Type: provider.QPTypeRC, SendCQ: s.cq, RecvCQ: s.cq,
		Cap: provider.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	require.NoError(t, s.qp.ToInit(provider.ConnectAttr{}))
	_, err = s.qp.PostRecv([]provider.RecvWR{{WRID: 1, SGL: []provider.SGE{s.mr.SGE(4096, 4096)}}})
	require.NoError(t, err)
	return s
}

func (s *rcSide) send(msg string) error {
	copy(s.buf.Bytes, msg)
	_, err := s.qp.PostSend([]provider.SendWR{{WRID: 2, Opcode: provider.WRSend, Flags: provider.SendSignaled,
		SGL: []provider.SGE{s.mr.SGE(0, uint32(len(msg)))}}})
	return err
}

func (s *rcSide) connect(qpn uint32, gid [16]byte, mac [6]byte) error {
	a := provider.DefaultConnectAttr()
	a.Peer = provider.Peer{QPN: qpn, PSN: 0x100, GID: gid, MAC: mac}
	a.PSN = 0x100
	return s.qp.Connect(a)
}

// TestWireDevice: softnic serve --wire. softnic0 of the daemon is on a
// loopback UDP wire whose other end is a NIC of package wallclock in this
// process (as softnic rdma --wire would be). The daemon's client connects
// with no MAC: modify_qp resolves it by ARP on the wire while the pacer
// runs the free-running engine. A SEND goes each way.
func TestWireDevice(t *testing.T) {
	a, b := freeUDP(t), freeUDP(t)
	daemonIP, peerIP := netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("192.0.2.20")
	d, sock := startDaemonCfg(t, serve.Config{Devices: 1,
		Wires: []serve.Wire{{Spec: fmt.Sprintf("udp:127.0.0.1:%d,127.0.0.1:%d", a, b), IP: daemonIP}}})
	require.Equal(t, []string{"softnic0"}, d.Names())

	peer, err := wallclock.Open(wallclock.Config{Wire: fmt.Sprintf("udp:127.0.0.1:%d,127.0.0.1:%d", b, a), IP: peerIP,
		Lead: wallclock.DefaultLead, MemNeed: 1 << 20, Profile: profile.Default()})
	require.NoError(t, err)
	ps := newRCSide(t, peer.Context())

	ctx, err := provider.Dial("softnic0", provider.DialOptions{Socket: sock})
	require.NoError(t, err)
	defer ctx.Close()
	require.Equal(t, daemonIP.As16(), ctx.Attr().GID)
	cs := newRCSide(t, ctx)

	// The peer's goroutine owns the wallclock NIC until finished.
	start, ready, finished := make(chan struct{}), make(chan struct{}), make(chan struct{})
	peerErr := make(chan error, 1)
	go func() {
		defer close(finished)
		defer peer.Close()
		if _, err := wallclock.Await(peer, start, 10*time.Second, "the daemon's QP"); err != nil {
			peerErr <- err
			return
		}
		mac, err := peer.Resolve(daemonIP) // ARP, answered by the daemon's port
		if err == nil {
			err = ps.connect(cs.qp.QPN(), daemonIP.As16(), mac)
		}
		close(ready)
		wcs := make([]provider.WC, 1)
		if err == nil {
			_, err = peer.PollCQ(ps.cq, wcs, 10*time.Second, func() string { return "the daemon's SEND" })
		}
		if err == nil && (wcs[0].Status != provider.WCSuccess || string(ps.buf.Bytes[4096:4100]) != "ping") {
			err = fmt.Errorf("peer's receive %+v, %q", wcs[0], ps.buf.Bytes[4096:4100])
		}
		if err == nil {
			peer.Sync()
			err = ps.send("pong")
		}
		if err == nil {
			_, err = peer.PollCQ(ps.cq, wcs, 10*time.Second, func() string { return "the pong's completion" })
		}
		if err == nil && wcs[0].Status != provider.WCSuccess {
			err = fmt.Errorf("pong completion %+v", wcs[0])
		}
		peerErr <- err
		peer.Linger(200 * time.Millisecond) // its ACKs still leave
	}()

	close(start)
	// No MAC: the daemon resolves it on the wire inside modify_qp.
	require.NoError(t, cs.connect(ps.qp.QPN(), peerIP.As16(), [6]byte{}))
	<-ready
	require.NoError(t, cs.send("ping"))
	wcs, err := waitWC(cs.cq, 2, time.Now().Add(10*time.Second))
	<-finished
	require.NoError(t, <-peerErr)
	require.NoError(t, err)
	for _, wc := range wcs {
		require.Equal(t, provider.WCSuccess, wc.Status, "%+v", wc)
	}
	require.Equal(t, "pong", string(cs.buf.Bytes[4096:4100]))
	require.Zero(t, d.Counters().Unresolved)
}

// TestWireUnresolved: a destination nobody answers ARP for on the wire
// fails modify_qp(RTR) within the ARP wait, counted, and the daemon goes
// on serving.
func TestWireUnresolved(t *testing.T) {
	a, b := freeUDP(t), freeUDP(t)
	d, sock := startDaemonCfg(t, serve.Config{Devices: 1,
		Wires: []serve.Wire{{Spec: fmt.Sprintf("udp:127.0.0.1:%d,127.0.0.1:%d", a, b)}}})
	// A client timeout shorter than the ARP budget (about 1 s): the client
	// allows for the daemon's wait (attach.CommandWait) and gets the errno,
	// not a daemon taken for dead.
	ctx, err := provider.Dial("softnic0", provider.DialOptions{Socket: sock, Timeout: 300 * time.Millisecond})
	require.NoError(t, err)
	defer ctx.Close()
	cs := newRCSide(t, ctx)
	startT := time.Now()
	err = cs.connect(0x123, netip.MustParseAddr("192.0.2.99").As16(), [6]byte{})
	require.ErrorIs(t, err, syscall.EHOSTUNREACH)
	require.NotErrorIs(t, err, provider.ErrDeviceGone)
	// The daemon's refusal reads as the in-process one: the command named
	// once, no empty "uverbs: :" segment.
	require.Contains(t, err.Error(), "uverbs: MODIFY_QP: no route to host: no neighbour for destination GID ::ffff:192.0.2.99")
	require.NotContains(t, err.Error(), "uverbs: :")
	require.Equal(t, 1, strings.Count(err.Error(), "MODIFY_QP"), err.Error())
	require.Less(t, time.Since(startT), 8*time.Second)
	require.Equal(t, uint64(1), d.Counters().Unresolved)
	_, err = ctx.AllocPD()
	require.NoError(t, err, "the daemon keeps serving")
}

// TestWallClock: with ClockWall the engine moves with the wall clock while
// no client does anything, and a SEND between two back-to-back devices
// completes for a client that only polls after sleeping.
func TestWallClock(t *testing.T) {
	d, sock := startDaemonCfg(t, serve.Config{Devices: 2, Clock: serve.ClockWall})
	var hosts [2]*testbed.Host
	for i := range hosts {
		ctx, err := provider.Dial(fmt.Sprintf("softnic%d", i), provider.DialOptions{Socket: sock})
		require.NoError(t, err)
		defer ctx.Close()
		hosts[i] = &testbed.Host{Node: i, ID: serve.Identity(i), Ctx: ctx}
	}
	eps, err := testbed.Connect(hosts, testbed.ConnOpts{})
	require.NoError(t, err)
	t0 := d.Now()
	require.Eventually(t, func() bool { return d.Now().Sub(t0) >= sim.Duration(40*sim.Millisecond) }, 5*time.Second, 5*time.Millisecond,
		"virtual time follows the wall clock with nobody polling")

	_, err = eps[1].QP.PostRecv([]provider.RecvWR{{WRID: 7, SGL: []provider.SGE{eps[1].MR.SGE(0, 64)}}})
	require.NoError(t, err)
	copy(eps[0].Buf.Bytes, "free-running")
	_, err = eps[0].QP.PostSend([]provider.SendWR{{WRID: 8, Opcode: provider.WRSend, Flags: provider.SendSignaled,
		SGL: []provider.SGE{eps[0].MR.SGE(0, 12)}}})
	require.NoError(t, err)
	// The pacer delivers it with nobody calling the daemon: the bytes
	// land in the receiver's shared memory (outside the Go heap, so the
	// race detector does not watch this read; the device's DMA writes it
	// as a NIC writes host memory under a polling application).
	require.Eventually(t, func() bool { return string(eps[1].Buf.Bytes[:12]) == "free-running" }, 5*time.Second, time.Millisecond,
		"the pacer delivers the send with nobody polling")
	wcs, err := waitWC(eps[1].RecvCQ, 1, time.Now().Add(5*time.Second))
	require.NoError(t, err)
	require.Equal(t, provider.WCSuccess, wcs[0].Status)
	require.Equal(t, "free-running", string(eps[1].Buf.Bytes[:12]))
	wcs, err = waitWC(eps[0].SendCQ, 1, time.Now().Add(5*time.Second))
	require.NoError(t, err)
	require.Equal(t, provider.WCSuccess, wcs[0].Status)
}

// TestBadWireConfig: more wires than devices, a bad spec, an unknown
// clock.
func TestBadWireConfig(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s.sock")
	for name, cfg := range map[string]serve.Config{
		"more_wires_than_devices": {Socket: sock, Devices: 1, Wires: []serve.Wire{{Spec: "tap:x"}, {Spec: "tap:y"}}},
		"bad_spec":                {Socket: sock, Devices: 1, Wires: []serve.Wire{{Spec: "carrier-pigeon"}}},
		"bad_clock":               {Socket: sock, Devices: 1, Clock: serve.Clock(9)},
		"negative_lead":           {Socket: sock, Devices: 1, Clock: serve.ClockWall, Lead: -time.Millisecond},
		"lead_past_the_timers":    {Socket: sock, Devices: 1, Clock: serve.ClockWall, Lead: time.Second},
		"negative_devices":        {Socket: sock, Devices: -1},
		"too_many_devices":        {Socket: sock, Devices: serve.MaxDevices + 1},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := serve.New(cfg)
			require.Error(t, err)
			c, err := net.Dial("unixpacket", sock)
			if err == nil {
				c.Close()
				t.Fatal("a failed New left a listener behind")
			}
		})
	}
	// A wire whose UDP port is taken: an error, the socket released.
	busy, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	defer busy.Close()
	_, err = serve.New(serve.Config{Socket: sock, Devices: 1,
		Wires: []serve.Wire{{Spec: fmt.Sprintf("udp:%s,127.0.0.1:9", busy.LocalAddr())}}})
	require.ErrorContains(t, err, "wire udp:")
	require.NoFileExists(t, sock)

	_, err = serve.ParseClock("lunar")
	require.Error(t, err)
	c, err := serve.ParseClock("wall")
	require.NoError(t, err)
	require.Equal(t, "wall", c.String())
}
