package ethport_test

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ethport"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/trace"
)

// Addresses from TEST-NET-1 (RFC 5737): they exist only in these tests.
var (
	ourMAC  = [6]byte{0x02, 0x00, 0xc0, 0x00, 0x02, 0x01}
	ourIP   = netip.MustParseAddr("192.0.2.1")
	peerMAC = [6]byte{0x02, 0x00, 0xc0, 0x00, 0x02, 0x02}
	peerIP  = netip.MustParseAddr("192.0.2.2")
	thirdIP = netip.MustParseAddr("192.0.2.3")
)

// fakeTx records what the port sends.
type fakeTx struct {
	frames [][]byte
	err    error
}

func (f *fakeTx) Send(frame []byte) error {
	if f.err != nil {
		return f.err
	}
	f.frames = append(f.frames, append([]byte(nil), frame...))
	return nil
}

// fakeRx records what the port hands the device.
type fakeRx struct{ frames [][]byte }

func (f *fakeRx) ReceiveFrame(_ sim.Time, frame []byte) {
	f.frames = append(f.frames, append([]byte(nil), frame...))
}

type env struct {
	eng *sim.Engine
	tx  *fakeTx
	rx  *fakeRx
	p   *ethport.Port
	rec *trace.Recorder
}

func newEnv(t *testing.T, static ...ethport.Neighbor) *env {
	t.Helper()
	e := &env{eng: sim.NewEngine(), tx: &fakeTx{}, rx: &fakeRx{}, rec: trace.NewRecorder()}
	p, err := ethport.New(e.eng, ethport.Config{MAC: ourMAC, IP: ourIP, Static: static}, e.tx, e.rec)
	require.NoError(t, err)
	p.Attach(e.rx)
	e.p = p
	return e
}

func arpFrame(op uint16, ethDst, sha [6]byte, spa netip.Addr, tha [6]byte, tpa netip.Addr) []byte {
	b := make([]byte, ethport.ARPFrameLen)
	ethport.BuildARPFrame(b, ethDst, sha, &ethport.ARPFields{Op: op, SenderMAC: sha, SenderIP: spa, TargetMAC: tha, TargetIP: tpa})
	return b
}

// decodeARP decodes a frame with gopacket, an independent ARP codec.
func decodeARP(t *testing.T, frame []byte) (*layers.Ethernet, *layers.ARP) {
	t.Helper()
	pkt := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
	require.Nil(t, pkt.ErrorLayer(), "gopacket decode error")
	eth, _ := pkt.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	arp, _ := pkt.Layer(layers.LayerTypeARP).(*layers.ARP)
	require.NotNil(t, eth)
	require.NotNil(t, arp)
	return eth, arp
}

func TestNewRejectsBadConfig(t *testing.T) {
	good := ethport.Config{MAC: ourMAC, IP: ourIP}
	tests := []struct {
		name string
		mod  func(c *ethport.Config)
		tx   ethport.Sender
	}{
		{"IPv6 address", func(c *ethport.Config) { c.IP = netip.MustParseAddr("2001:db8::1") }, &fakeTx{}},
		{"no address", func(c *ethport.Config) { c.IP = netip.Addr{} }, &fakeTx{}},
		{"unspecified", func(c *ethport.Config) { c.IP = netip.IPv4Unspecified() }, &fakeTx{}},
		{"multicast IP", func(c *ethport.Config) { c.IP = netip.MustParseAddr("224.0.0.1") }, &fakeTx{}},
		{"zero MAC", func(c *ethport.Config) { c.MAC = [6]byte{} }, &fakeTx{}},
		{"multicast MAC", func(c *ethport.Config) { c.MAC = [6]byte{0x01, 0, 0x5e, 0, 0, 1} }, &fakeTx{}},
		{"static with multicast MAC", func(c *ethport.Config) {
			c.Static = []ethport.Neighbor{{IP: peerIP, MAC: ethport.Broadcast}}
		}, &fakeTx{}},
		{"nil transport", func(c *ethport.Config) {}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.mod(&c)
			_, err := ethport.New(sim.NewEngine(), c, tc.tx, nil)
			require.Error(t, err)
		})
	}
}

func TestAnswersWhoHas(t *testing.T) {
	e := newEnv(t)
	e.p.ReceiveFrame(0, arpFrame(ethport.ARPRequest, ethport.Broadcast, peerMAC, peerIP, [6]byte{}, ourIP))
	require.Len(t, e.tx.frames, 1)
	eth, arp := decodeARP(t, e.tx.frames[0])
	require.Equal(t, net.HardwareAddr(peerMAC[:]), eth.DstMAC)
	require.Equal(t, net.HardwareAddr(ourMAC[:]), eth.SrcMAC)
	require.Equal(t, uint16(layers.ARPReply), arp.Operation)
	require.Equal(t, ourMAC[:], arp.SourceHwAddress)
	require.Equal(t, ourIP.AsSlice(), arp.SourceProtAddress)
	require.Equal(t, peerMAC[:], arp.DstHwAddress)
	require.Equal(t, peerIP.AsSlice(), arp.DstProtAddress)
	require.Len(t, e.tx.frames[0], ethport.ARPFrameLen, "no padding on a real transport")
	c := e.p.Counters()
	require.Equal(t, uint64(1), c.Value(ethport.CtrARPRequestsRcvd))
	require.Equal(t, uint64(1), c.Value(ethport.CtrARPRepliesSent))
	require.Equal(t, uint64(1), c.Value(ethport.CtrTxFrames))
	// The asker is learned (it is about to talk to us), so no ARP is needed
	// to answer it.
	mac, ok := e.p.Neighbor(peerIP)
	require.True(t, ok)
	require.Equal(t, peerMAC, mac)
	r := e.p.Resolve(peerIP)
	require.True(t, r.Done())
	require.NoError(t, r.Err)
	require.Len(t, e.tx.frames, 1)
	require.Empty(t, e.rx.frames, "ARP never reaches the device")
}

func TestIgnoresARPForOthers(t *testing.T) {
	e := newEnv(t)
	e.p.ReceiveFrame(0, arpFrame(ethport.ARPRequest, ethport.Broadcast, peerMAC, peerIP, [6]byte{}, thirdIP))
	require.Empty(t, e.tx.frames)
	require.Equal(t, uint64(1), e.p.Counters().Value(ethport.CtrARPNotForUs))
	_, ok := e.p.Neighbor(peerIP)
	require.False(t, ok, "ARP between others creates no entry")
}

func TestResolveByARP(t *testing.T) {
	e := newEnv(t)
	r := e.p.Resolve(peerIP)
	require.False(t, r.Done())
	require.Same(t, r, e.p.Resolve(peerIP), "a running resolution is shared")
	require.Len(t, e.tx.frames, 1)
	eth, arp := decodeARP(t, e.tx.frames[0])
	require.Equal(t, net.HardwareAddr(ethport.Broadcast[:]), eth.DstMAC)
	require.Equal(t, uint16(layers.ARPRequest), arp.Operation)
	require.Equal(t, ourIP.AsSlice(), arp.SourceProtAddress)
	require.Equal(t, peerIP.AsSlice(), arp.DstProtAddress)
	require.Equal(t, make([]byte, 6), arp.DstHwAddress)

	e.eng.Advance(100 * sim.Millisecond) // before the first retry
	e.p.ReceiveFrame(e.eng.Now(), arpFrame(ethport.ARPReply, ourMAC, peerMAC, peerIP, ourMAC, ourIP))
	require.True(t, r.Done())
	require.NoError(t, r.Err)
	require.Equal(t, peerMAC, r.MAC)
	require.Equal(t, 1, r.Tries)
	e.eng.Run(0) // the retry timer fires and does nothing
	require.Len(t, e.tx.frames, 1, "no retry after the answer")
	c := e.p.Counters()
	require.Equal(t, uint64(1), c.Value(ethport.CtrARPResolved))
	require.Equal(t, uint64(1), c.Value(ethport.CtrARPRepliesRcvd))
	require.Equal(t, uint64(0), c.Value(ethport.CtrARPTimeouts))
	again := e.p.Resolve(peerIP)
	require.True(t, again.Done())
	require.Equal(t, peerMAC, again.MAC)
	require.Len(t, e.tx.frames, 1, "cache hit sends nothing")
}

func TestResolveRetriesThenTimesOut(t *testing.T) {
	e := newEnv(t)
	r := e.p.Resolve(peerIP)
	var sentAt []sim.Time
	for !r.Done() {
		n := len(e.tx.frames)
		require.True(t, e.eng.Step(), "a timer is pending until the resolution ends")
		if len(e.tx.frames) > n {
			sentAt = append(sentAt, e.eng.Now())
		}
	}
	require.ErrorIs(t, r.Err, ethport.ErrARPTimeout)
	require.Equal(t, ethport.DefaultARPTries, r.Tries)
	require.Len(t, e.tx.frames, ethport.DefaultARPTries)
	I := ethport.DefaultARPInterval
	require.Equal(t, []sim.Time{sim.Time(I), sim.Time(2 * I)}, sentAt, "retries one interval apart")
	require.Equal(t, sim.Time(3*I), e.eng.Now(), "gives up one interval after the last request")
	require.Equal(t, uint64(1), e.p.Counters().Value(ethport.CtrARPTimeouts))
	require.Equal(t, uint64(3), e.p.Counters().Value(ethport.CtrARPRequestsSent))
	require.Len(t, e.rec.Warnings(), 1)
	require.Equal(t, ethport.CtrARPTimeouts.String(), e.rec.Warnings()[0].Name)
	// A late reply is still learned for next time.
	e.p.ReceiveFrame(e.eng.Now(), arpFrame(ethport.ARPReply, ourMAC, peerMAC, peerIP, ourMAC, ourIP))
	mac, ok := e.p.Neighbor(peerIP)
	require.True(t, ok)
	require.Equal(t, peerMAC, mac)
}

func TestResolveAnsweredAfterRetry(t *testing.T) {
	e := newEnv(t)
	r := e.p.Resolve(peerIP)
	e.eng.RunUntil(sim.Time(ethport.DefaultARPInterval)) // second request goes out
	require.Len(t, e.tx.frames, 2)
	e.p.ReceiveFrame(e.eng.Now(), arpFrame(ethport.ARPReply, ourMAC, peerMAC, peerIP, ourMAC, ourIP))
	require.True(t, r.Done())
	require.NoError(t, r.Err)
	require.Equal(t, 2, r.Tries)
}

func TestStaticNeighbor(t *testing.T) {
	e := newEnv(t, ethport.Neighbor{IP: peerIP, MAC: peerMAC})
	r := e.p.Resolve(peerIP)
	require.True(t, r.Done())
	require.NoError(t, r.Err)
	require.Equal(t, peerMAC, r.MAC)
	require.Empty(t, e.tx.frames, "static entries are never sent for")
	// ARP from the same address with another MAC does not overwrite it.
	other := [6]byte{0x02, 0, 0, 0, 0, 0x99}
	e.p.ReceiveFrame(0, arpFrame(ethport.ARPRequest, ethport.Broadcast, other, peerIP, [6]byte{}, ourIP))
	mac, _ := e.p.Neighbor(peerIP)
	require.Equal(t, peerMAC, mac)
	// A static entry added while a resolution runs finishes it.
	r3 := e.p.Resolve(thirdIP)
	require.False(t, r3.Done())
	require.NoError(t, e.p.AddStatic(ethport.Neighbor{IP: thirdIP, MAC: other}))
	require.True(t, r3.Done())
	require.Equal(t, other, r3.MAC)
}

func TestGratuitousARPRefreshesKnownEntries(t *testing.T) {
	e := newEnv(t)
	e.p.ReceiveFrame(0, arpFrame(ethport.ARPRequest, ethport.Broadcast, peerMAC, peerIP, [6]byte{}, ourIP))
	moved := [6]byte{0x02, 0, 0, 0, 0, 0x42}
	e.p.ReceiveFrame(0, arpFrame(ethport.ARPRequest, ethport.Broadcast, moved, peerIP, [6]byte{}, peerIP))
	mac, _ := e.p.Neighbor(peerIP)
	require.Equal(t, moved, mac)
}

func TestResolveRejectsBadTargets(t *testing.T) {
	e := newEnv(t)
	for _, ip := range []netip.Addr{{}, netip.IPv4Unspecified(), netip.MustParseAddr("2001:db8::2"),
		netip.MustParseAddr("239.1.1.1"), ourIP} {
		r := e.p.Resolve(ip)
		require.True(t, r.Done(), "%v", ip)
		require.ErrorIs(t, r.Err, ethport.ErrBadAddress, "%v", ip)
	}
	require.Empty(t, e.tx.frames)
}

// roceFrame builds a valid RoCEv2 ACK from the peer to us.
func roceFrame(t testing.TB) []byte {
	t.Helper()
	fp := roce.FrameParams{SrcMAC: peerMAC, DstMAC: ourMAC, SrcIP: peerIP, DstIP: ourIP, TTL: 64, SrcPort: 0xc000,
		BTH:  roce.BTHFields{Opcode: roce.OpRCAck, PKey: 0xffff, DestQP: 0x11, PSN: 5},
		AETH: roce.AETHFields{Syndrome: roce.ACKSyndrome(0x1f), MSN: 1}}
	b := make([]byte, 256)
	n, err := roce.BuildFrame(b, &fp, nil)
	require.NoError(t, err)
	return b[:n]
}

func TestPassesRoCEAndDropsTheRest(t *testing.T) {
	good := roceFrame(t)
	mod := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	ipOff := ethport.EthHeaderLen
	udpOff := ipOff + 20
	tests := []struct {
		name  string
		frame []byte
		ctr   string
	}{
		{"RoCE for us", good, ethport.CtrRxRoCE.String()},
		{"runt", good[:13], ethport.CtrDropRunt.String()},
		{"other unicast MAC", mod(func(b []byte) []byte { b[5] = 0x77; return b }), ethport.CtrDropOtherMAC.String()},
		{"broadcast IPv4", mod(func(b []byte) []byte { copy(b, ethport.Broadcast[:]); return b }), ethport.CtrDropOtherMAC.String()},
		{"multicast ARP", mod(func(b []byte) []byte {
			a := arpFrame(ethport.ARPRequest, [6]byte{0x01, 0x80, 0xc2, 0, 0, 0}, peerMAC, peerIP, [6]byte{}, ourIP)
			return a
		}), ethport.CtrDropOtherMAC.String()},
		{"IPv6", mod(func(b []byte) []byte { binary.BigEndian.PutUint16(b[12:], 0x86dd); return b }), ethport.CtrDropEtherType.String()},
		{"VLAN tag", mod(func(b []byte) []byte { binary.BigEndian.PutUint16(b[12:], 0x8100); return b }), ethport.CtrDropEtherType.String()},
		{"short IPv4", good[:ipOff+10], ethport.CtrDropIPBad.String()},
		{"IP version 5", mod(func(b []byte) []byte { b[ipOff] = 0x55; return b }), ethport.CtrDropIPBad.String()},
		{"IHL below 5", mod(func(b []byte) []byte { b[ipOff] = 0x44; return b }), ethport.CtrDropIPBad.String()},
		{"other IP", mod(func(b []byte) []byte { b[ipOff+19] = 9; return b }), ethport.CtrDropOtherIP.String()},
		{"fragment", mod(func(b []byte) []byte { b[ipOff+6] |= 0x20; return b }), ethport.CtrDropFragment.String()},
		{"TCP", mod(func(b []byte) []byte { b[ipOff+9] = 6; return b }), ethport.CtrDropNotUDP.String()},
		{"UDP header cut", good[:udpOff+4], ethport.CtrDropIPBad.String()},
		{"UDP port 4792", mod(func(b []byte) []byte { binary.BigEndian.PutUint16(b[udpOff+2:], 4792); return b }), ethport.CtrDropNotRoCE.String()},
		{"ARP short", mod(func(b []byte) []byte {
			return arpFrame(ethport.ARPRequest, ethport.Broadcast, peerMAC, peerIP, [6]byte{}, ourIP)[:30]
		}), ethport.CtrDropARPBad.String()},
		{"ARP for IPv6", mod(func(b []byte) []byte {
			a := arpFrame(ethport.ARPRequest, ethport.Broadcast, peerMAC, peerIP, [6]byte{}, ourIP)
			binary.BigEndian.PutUint16(a[ethport.EthHeaderLen+2:], 0x86dd)
			return a
		}), ethport.CtrDropARPBad.String()},
		{"ARP op 3", mod(func(b []byte) []byte {
			return arpFrame(3, ethport.Broadcast, peerMAC, peerIP, [6]byte{}, ourIP)
		}), ethport.CtrDropARPBad.String()},
		{"who-has from 0.0.0.0", mod(func(b []byte) []byte {
			return arpFrame(ethport.ARPRequest, ethport.Broadcast, peerMAC, netip.IPv4Unspecified(), [6]byte{}, ourIP)
		}), ethport.CtrDropARPBad.String()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.p.ReceiveFrame(0, tc.frame)
			c := e.p.Counters()
			require.Equal(t, uint64(1), c.Get(tc.ctr), "counters: %v", c.Snapshot())
			require.Equal(t, uint64(1), c.Value(ethport.CtrRxFrames))
			if tc.ctr == ethport.CtrRxRoCE.String() {
				require.Len(t, e.rx.frames, 1)
				require.Equal(t, tc.frame, e.rx.frames[0])
			} else {
				require.Empty(t, e.rx.frames)
			}
			require.Empty(t, e.tx.frames, "nothing is answered")
		})
	}
}

func TestNoReceiverAttached(t *testing.T) {
	p, err := ethport.New(sim.NewEngine(), ethport.Config{MAC: ourMAC, IP: ourIP}, &fakeTx{}, nil)
	require.NoError(t, err)
	p.ReceiveFrame(0, roceFrame(t))
	require.Equal(t, uint64(1), p.Counters().Value(ethport.CtrDropNoReceiver))
}

func TestSendAndTxErrors(t *testing.T) {
	e := newEnv(t)
	var seen []bool
	e.p.SetTap(func(_ sim.Time, _ []byte, out bool) { seen = append(seen, out) })
	f := roceFrame(t)
	require.Equal(t, sim.Time(7), e.p.Send(7, f))
	require.Equal(t, [][]byte{f}, e.tx.frames)
	require.Equal(t, uint64(1), e.p.Counters().Value(ethport.CtrTxFrames))
	e.tx.err = errors.New("link down")
	e.p.Send(8, f)
	require.Equal(t, uint64(1), e.p.Counters().Value(ethport.CtrTxErrors))
	require.Len(t, e.rec.Warnings(), 1)
	e.p.ReceiveFrame(9, f)
	require.Equal(t, []bool{true, true, false}, seen, "the tap sees both directions")
}

func TestParseNeighbor(t *testing.T) {
	tests := []struct {
		in   string
		want ethport.Neighbor
		ok   bool
	}{
		{"192.0.2.2=02:00:c0:00:02:02", ethport.Neighbor{IP: peerIP, MAC: peerMAC}, true},
		{"192.0.2.2=02-00-C0-00-02-02", ethport.Neighbor{IP: peerIP, MAC: peerMAC}, true},
		{"192.0.2.2", ethport.Neighbor{}, false},
		{"2001:db8::1=02:00:c0:00:02:02", ethport.Neighbor{}, false},
		{"192.0.2.2=02:00:c0:00:02", ethport.Neighbor{}, false},
		{"192.0.2.2=00:00:00:00:00:00:00:01", ethport.Neighbor{}, false},
		{"x=02:00:c0:00:02:02", ethport.Neighbor{}, false},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			n, err := ethport.ParseNeighbor(tc.in)
			if !tc.ok {
				require.ErrorIs(t, err, ethport.ErrBadAddress)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, n)
		})
	}
	require.Equal(t, [6]byte{2, 0, 192, 0, 2, 1}, ethport.DefaultMAC(ourIP))
}

// FuzzReceiveFrame: nothing from the wire makes the port panic, and a frame
// reaches the device only if it is IPv4/UDP-4791 to our MAC and IP.
func FuzzReceiveFrame(f *testing.F) {
	f.Add(arpFrame(ethport.ARPRequest, ethport.Broadcast, peerMAC, peerIP, [6]byte{}, ourIP))
	f.Add(arpFrame(ethport.ARPReply, ourMAC, peerMAC, peerIP, ourMAC, ourIP))
	fp := roce.FrameParams{SrcMAC: peerMAC, DstMAC: ourMAC, SrcIP: peerIP, DstIP: ourIP, TTL: 64,
		BTH: roce.BTHFields{Opcode: roce.OpRCSendOnly, PKey: 0xffff, DestQP: 0x11}}
	b := make([]byte, 256)
	n, _ := roce.BuildFrame(b, &fp, []byte("ping"))
	f.Add(b[:n])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, frame []byte) {
		eng := sim.NewEngine()
		rx := &fakeRx{}
		p, err := ethport.New(eng, ethport.Config{MAC: ourMAC, IP: ourIP}, &fakeTx{}, nil)
		require.NoError(t, err)
		p.Attach(rx)
		p.Resolve(peerIP)
		p.ReceiveFrame(0, frame)
		eng.Run(100)
		for _, got := range rx.frames {
			require.Equal(t, ourMAC, [6]byte(got[0:6]))
			require.Equal(t, ourIP, netip.AddrFrom4([4]byte(got[30:34])))
		}
	})
}

// TestNotUnicastAddressesRefused: the limited broadcast 255.255.255.255 and
// multicast addresses are no host's address. The port took 255.255.255.255
// as its own IP and as an address to resolve (softnic rdma --ip
// 255.255.255.255 started, and --remote-ip 255.255.255.255 broadcast
// who-has for a second before "no ARP reply"), and a static neighbour took
// a multicast IP, although each check says "unicast".
func TestNotUnicastAddressesRefused(t *testing.T) {
	for _, ip := range []netip.Addr{netip.MustParseAddr("255.255.255.255"), netip.MustParseAddr("239.1.1.1")} {
		t.Run(ip.String(), func(t *testing.T) {
			_, err := ethport.New(sim.NewEngine(), ethport.Config{MAC: ourMAC, IP: ip}, &fakeTx{}, trace.NewRecorder())
			require.ErrorIs(t, err, ethport.ErrBadAddress, "port IP")
			e := newEnv(t)
			r := e.p.Resolve(ip)
			require.True(t, r.Done(), "resolve")
			require.ErrorIs(t, r.Err, ethport.ErrBadAddress, "resolve")
			require.ErrorIs(t, e.p.AddStatic(ethport.Neighbor{IP: ip, MAC: peerMAC}), ethport.ErrBadAddress, "static neighbour")
			require.Empty(t, e.tx.frames)
		})
	}
}

// TestLearnedEntriesGoStale: a learned entry is trusted for ReachableTime;
// past it, Neighbor no longer gives it and Resolve asks again: an answer
// (here with a new MAC, the neighbour replaced) refreshes it, silence
// removes it. Static entries never go stale; a negative ReachableTime
// keeps learned ones for ever.
func TestLearnedEntriesGoStale(t *testing.T) {
	learn := func(e *env) {
		t.Helper()
		r := e.p.Resolve(peerIP)
		e.p.ReceiveFrame(e.eng.Now(), arpFrame(ethport.ARPReply, ourMAC, peerMAC, peerIP, ourMAC, ourIP))
		require.True(t, r.Done())
		require.NoError(t, r.Err)
		e.eng.Run(0) // the first resolution's retry timer
	}
	past := ethport.DefaultReachableTime + sim.Second

	t.Run("fresh within ReachableTime", func(t *testing.T) {
		e := newEnv(t)
		learn(e)
		e.eng.Advance(ethport.DefaultReachableTime - sim.Second)
		mac, ok := e.p.Neighbor(peerIP)
		require.True(t, ok)
		require.Equal(t, peerMAC, mac)
		require.True(t, e.p.Resolve(peerIP).Done())
		require.Len(t, e.tx.frames, 1, "a fresh entry is not asked for")
	})
	t.Run("stale then answered with a new MAC", func(t *testing.T) {
		e := newEnv(t)
		learn(e)
		e.eng.Advance(past)
		_, ok := e.p.Neighbor(peerIP)
		require.False(t, ok, "a stale entry is not given out")
		r := e.p.Resolve(peerIP)
		require.False(t, r.Done(), "a stale entry is asked for again")
		require.Len(t, e.tx.frames, 2)
		_, arp := decodeARP(t, e.tx.frames[1])
		require.Equal(t, uint16(layers.ARPRequest), arp.Operation)
		moved := [6]byte{0x02, 0, 0, 0, 0, 0x42}
		e.p.ReceiveFrame(e.eng.Now(), arpFrame(ethport.ARPReply, ourMAC, moved, peerIP, ourMAC, ourIP))
		require.True(t, r.Done())
		require.NoError(t, r.Err)
		require.Equal(t, moved, r.MAC)
		mac, ok := e.p.Neighbor(peerIP)
		require.True(t, ok, "the answer makes it fresh again")
		require.Equal(t, moved, mac)
		require.Equal(t, uint64(1), e.p.Counters().Value(ethport.CtrARPStale))
	})
	t.Run("stale and silent is removed", func(t *testing.T) {
		e := newEnv(t)
		learn(e)
		e.eng.Advance(past)
		r := e.p.Resolve(peerIP)
		for !r.Done() {
			require.True(t, e.eng.Step(), "a timer is pending until the resolution ends")
		}
		require.ErrorIs(t, r.Err, ethport.ErrARPTimeout)
		require.Equal(t, uint64(1), e.p.Counters().Value(ethport.CtrARPExpired))
		_, ok := e.p.Neighbor(peerIP)
		require.False(t, ok)
		require.False(t, e.p.Resolve(peerIP).Done(), "a removed entry is resolved from scratch")
	})
	t.Run("gratuitous ARP keeps it fresh", func(t *testing.T) {
		e := newEnv(t)
		learn(e)
		e.eng.Advance(ethport.DefaultReachableTime - sim.Second)
		e.p.ReceiveFrame(e.eng.Now(), arpFrame(ethport.ARPRequest, ethport.Broadcast, peerMAC, peerIP, [6]byte{}, peerIP))
		e.eng.Advance(2 * sim.Second)
		_, ok := e.p.Neighbor(peerIP)
		require.True(t, ok)
	})
	t.Run("static never stale", func(t *testing.T) {
		e := newEnv(t, ethport.Neighbor{IP: peerIP, MAC: peerMAC})
		e.eng.Advance(10 * past)
		mac, ok := e.p.Neighbor(peerIP)
		require.True(t, ok)
		require.Equal(t, peerMAC, mac)
		require.True(t, e.p.Resolve(peerIP).Done())
		require.Empty(t, e.tx.frames)
	})
	t.Run("negative ReachableTime never ages", func(t *testing.T) {
		e := &env{eng: sim.NewEngine(), tx: &fakeTx{}, rx: &fakeRx{}, rec: trace.NewRecorder()}
		p, err := ethport.New(e.eng, ethport.Config{MAC: ourMAC, IP: ourIP, ReachableTime: -1}, e.tx, e.rec)
		require.NoError(t, err)
		e.p = p
		learn(e)
		e.eng.Advance(10 * past)
		_, ok := e.p.Neighbor(peerIP)
		require.True(t, ok)
	})
}
