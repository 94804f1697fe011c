package ethport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/trace"
	"github.com/softnic/softnic/wire"
)

// Component is the trace component of the port's events.
const Component = "ethport"

// Counter (and warning) names.
var (
	CtrRxFrames        = trace.NewCounter("port_rx_frames")          // frames from the transport
	CtrRxRoCE          = trace.NewCounter("port_rx_roce")            // IPv4/UDP-4791 frames for us, handed to the device
	CtrTxFrames        = trace.NewCounter("port_tx_frames")          // frames handed to the transport (device and ARP)
	CtrTxErrors        = trace.NewCounter("port_tx_errors")          // the transport refused a frame
	CtrARPRequestsRcvd = trace.NewCounter("port_arp_requests_rcvd")  // who-has for our IP
	CtrARPRepliesSent  = trace.NewCounter("port_arp_replies_sent")   // our answers
	CtrARPRequestsSent = trace.NewCounter("port_arp_requests_sent")  // our who-has (first tries and retries)
	CtrARPRepliesRcvd  = trace.NewCounter("port_arp_replies_rcvd")   // replies addressed to our IP
	CtrARPResolved     = trace.NewCounter("port_arp_resolved")       // resolutions completed by a reply
	CtrARPTimeouts     = trace.NewCounter("port_arp_timeouts")       // resolutions that ran out of retries
	CtrARPNotForUs     = trace.NewCounter("port_arp_not_for_us")     // ARP about other addresses (may refresh the cache)
	CtrARPStale        = trace.NewCounter("port_arp_stale")          // learned entries past ReachableTime, asked for again
	CtrARPExpired      = trace.NewCounter("port_arp_expired")        // stale entries whose neighbour did not answer: removed
	CtrDropRunt        = trace.NewCounter("port_drop_runt")          // shorter than an Ethernet header
	CtrDropOtherMAC    = trace.NewCounter("port_drop_other_mac")     // unicast to another MAC, multicast, or broadcast non-ARP
	CtrDropEtherType   = trace.NewCounter("port_drop_ethertype")     // not IPv4 or ARP (IPv6, VLAN tags, LLDP, ...)
	CtrDropARPBad      = trace.NewCounter("port_drop_arp_malformed") // short or not IPv4-over-Ethernet ARP, unknown op
	CtrDropIPBad       = trace.NewCounter("port_drop_ip_malformed")  // not a whole IPv4 header
	CtrDropOtherIP     = trace.NewCounter("port_drop_other_ip")      // IPv4 to another address
	CtrDropFragment    = trace.NewCounter("port_drop_ip_fragment")   // IPv4 fragment (RoCEv2 is never fragmented)
	CtrDropNotUDP      = trace.NewCounter("port_drop_not_udp")       // IPv4 protocol other than UDP (ICMP, TCP, ...)
	CtrDropNotRoCE     = trace.NewCounter("port_drop_not_roce")      // UDP to a port other than 4791
	CtrDropNoReceiver  = trace.NewCounter("port_drop_no_receiver")   // RoCE frame but no device attached
)

// Defaults for Config's zero fields. Three requests 333 ms apart give the
// ~1 s budget rdma_rxe allows for resolving a peer inside modify_qp(RTR)
// (rxe-peer.md).
const (
	DefaultARPTries    = 3
	DefaultARPInterval = 333 * sim.Millisecond
	// DefaultReachableTime is how long a learned entry is trusted without
	// news from its neighbour: Linux's base_reachable_time (30 s; Linux
	// draws each entry's between 15 and 45 s, this port uses the base,
	// deterministically).
	DefaultReachableTime = 30 * sim.Second
)

// Errors; returned errors wrap them.
var (
	ErrARPTimeout = errors.New("ethport: no ARP reply")
	ErrBadAddress = errors.New("ethport: bad address")
)

// Neighbor is a static IPv4-to-MAC entry.
type Neighbor struct {
	IP  netip.Addr
	MAC [6]byte
}

// Config is a port's identity and ARP behaviour.
type Config struct {
	MAC         [6]byte
	IP          netip.Addr // IPv4
	Node        int        // trace node
	ARPTries    int        // who-has requests per resolution (default 3)
	ARPInterval sim.Duration
	// ReachableTime: a learned entry older than this is stale, and the
	// next Resolve asks for it again (default DefaultReachableTime;
	// negative: learned entries never go stale).
	ReachableTime sim.Duration
	Static        []Neighbor // permanent entries: never sent for, never overwritten, never stale
}

// Sender is where the port's frames go; wire.RealTransport satisfies it.
type Sender interface {
	Send(frame []byte) error
}

// neighbor is a cache entry.
type neighbor struct {
	mac    [6]byte
	static bool
	at     sim.Time // learned or last confirmed by an ARP from the neighbour
}

// Port is the emulated NIC's Ethernet port. It is driven by the one
// goroutine that owns the engine: Send from the device, ReceiveFrame from
// the driver that drains the transport.
type Port struct {
	eng     *sim.Engine
	cfg     Config
	tx      Sender
	rx      wire.Receiver
	rec     *trace.Recorder
	ctr     trace.Counters
	cache   map[netip.Addr]neighbor
	pending map[netip.Addr]*Resolution
	tap     func(t sim.Time, frame []byte, out bool)
	arpBuf  [ARPFrameLen]byte
}

// New builds a port. tx may not be nil; the device is attached later with
// Attach (it needs the port to exist first).
func New(eng *sim.Engine, cfg Config, tx Sender, rec *trace.Recorder) (*Port, error) {
	if !unicast4(cfg.IP) {
		return nil, fmt.Errorf("%w: port IP %v must be a unicast IPv4 address", ErrBadAddress, cfg.IP)
	}
	if cfg.MAC == ([6]byte{}) || cfg.MAC[0]&1 != 0 {
		return nil, fmt.Errorf("%w: port MAC %s must be a non-zero unicast address", ErrBadAddress, net.HardwareAddr(cfg.MAC[:]))
	}
	if tx == nil {
		return nil, errors.New("ethport: nil transport")
	}
	if cfg.ARPTries <= 0 {
		cfg.ARPTries = DefaultARPTries
	}
	if cfg.ARPInterval <= 0 {
		cfg.ARPInterval = DefaultARPInterval
	}
	if cfg.ReachableTime == 0 {
		cfg.ReachableTime = DefaultReachableTime
	}
	p := &Port{eng: eng, cfg: cfg, tx: tx, rec: rec,
		cache: map[netip.Addr]neighbor{}, pending: map[netip.Addr]*Resolution{}}
	for _, n := range cfg.Static {
		if err := p.AddStatic(n); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// limitedBroadcast is 255.255.255.255, the broadcast of every IPv4 network.
var limitedBroadcast = netip.AddrFrom4([4]byte{255, 255, 255, 255})

// unicast4 reports whether ip may be a host's IPv4 address: not the
// unspecified address, a multicast group or the limited broadcast (the
// port's own address, a neighbour's, a resolution's target).
func unicast4(ip netip.Addr) bool {
	return ip.Is4() && !ip.IsUnspecified() && !ip.IsMulticast() && ip != limitedBroadcast
}

// Attach sets the receiver of RoCE frames (the device).
func (p *Port) Attach(r wire.Receiver) { p.rx = r }

// SetTap installs a function that sees every frame the port receives (out
// false, before filtering) and sends (out true), e.g. a pcap writer.
func (p *Port) SetTap(f func(t sim.Time, frame []byte, out bool)) { p.tap = f }

// MAC is the port's MAC address.
func (p *Port) MAC() [6]byte { return p.cfg.MAC }

// IP is the port's IPv4 address.
func (p *Port) IP() netip.Addr { return p.cfg.IP }

// Counters are the port's named counters.
func (p *Port) Counters() *trace.Counters { return &p.ctr }

// AddStatic adds a permanent neighbour entry (replacing a learned one).
func (p *Port) AddStatic(n Neighbor) error {
	if !unicast4(n.IP) {
		return fmt.Errorf("%w: neighbour IP %v is not an IPv4 unicast address", ErrBadAddress, n.IP)
	}
	if n.MAC == ([6]byte{}) || n.MAC[0]&1 != 0 {
		return fmt.Errorf("%w: neighbour MAC %s is not a unicast address", ErrBadAddress, net.HardwareAddr(n.MAC[:]))
	}
	p.cache[n.IP] = neighbor{mac: n.MAC, static: true}
	if r := p.pending[n.IP]; r != nil {
		r.finish(n.MAC, nil)
	}
	return nil
}

// Neighbor looks ip up in the cache: a static entry, or a learned one
// that is not stale (Resolve asks again for a stale one).
func (p *Port) Neighbor(ip netip.Addr) ([6]byte, bool) {
	n, ok := p.cache[ip]
	if !ok || p.stale(n, p.eng.Now()) {
		return [6]byte{}, false
	}
	return n.mac, true
}

// stale reports whether learned entry n has gone without news from its
// neighbour for longer than ReachableTime at t.
func (p *Port) stale(n neighbor, t sim.Time) bool {
	return !n.static && p.cfg.ReachableTime > 0 && t.Sub(n.at) > p.cfg.ReachableTime
}

// Send is the device's transmit path (device.Port): the frame goes to the
// transport at once; the port adds no delay, so it returns t. A transport
// error is counted and traced, and the frame is lost (the RC transport
// retransmits, as after a loss on a cable).
func (p *Port) Send(t sim.Time, frame []byte) sim.Time {
	p.send(t, frame)
	return t
}

func (p *Port) send(t sim.Time, frame []byte) {
	if p.tap != nil {
		p.tap(t, frame, true)
	}
	if err := p.tx.Send(frame); err != nil {
		p.ctr.Inc(CtrTxErrors)
		p.rec.Warnf(p.cfg.Node, t, Component, CtrTxErrors.String(), "frame of %d bytes: %v", len(frame), err)
		return
	}
	p.ctr.Inc(CtrTxFrames)
}

// drop counts a dropped frame. Drops are expected on a shared segment
// (IPv6 neighbour discovery, other hosts' traffic), so they are counted
// rather than traced.
func (p *Port) drop(name trace.Counter) { p.ctr.Inc(name) }

// ReceiveFrame takes one frame from the transport (wire.Receiver). ARP is
// handled here; IPv4/UDP-4791 frames for the port's MAC and IP go to the
// device, which parses and checks them fully; the rest is dropped and
// counted by reason.
func (p *Port) ReceiveFrame(t sim.Time, frame []byte) {
	p.ctr.Inc(CtrRxFrames)
	if p.tap != nil {
		p.tap(t, frame, false)
	}
	if len(frame) < EthHeaderLen {
		p.drop(CtrDropRunt)
		return
	}
	dst := [6]byte(frame[0:6])
	et := binary.BigEndian.Uint16(frame[12:])
	if et == EtherTypeARP {
		if dst != p.cfg.MAC && dst != Broadcast {
			p.drop(CtrDropOtherMAC)
			return
		}
		p.receiveARP(t, ARP(frame[EthHeaderLen:]))
		return
	}
	if dst != p.cfg.MAC {
		p.drop(CtrDropOtherMAC)
		return
	}
	if et != EtherTypeIPv4 {
		p.drop(CtrDropEtherType)
		return
	}
	ip := frame[EthHeaderLen:]
	if len(ip) < 20 || ip[0]>>4 != 4 || int(ip[0]&0xf)*4 < 20 || len(ip) < int(ip[0]&0xf)*4 {
		p.drop(CtrDropIPBad)
		return
	}
	if netip.AddrFrom4([4]byte(ip[16:20])) != p.cfg.IP {
		p.drop(CtrDropOtherIP)
		return
	}
	if binary.BigEndian.Uint16(ip[6:])&0x3fff != 0 { // MF or a fragment offset
		p.drop(CtrDropFragment)
		return
	}
	if ip[9] != 17 {
		p.drop(CtrDropNotUDP)
		return
	}
	ihl := int(ip[0]&0xf) * 4
	if len(ip) < ihl+8 {
		p.drop(CtrDropIPBad)
		return
	}
	if binary.BigEndian.Uint16(ip[ihl+2:]) != roce.UDPPort {
		p.drop(CtrDropNotRoCE)
		return
	}
	if p.rx == nil {
		p.drop(CtrDropNoReceiver)
		return
	}
	p.ctr.Inc(CtrRxRoCE)
	p.rx.ReceiveFrame(t, frame)
}

// receiveARP answers who-has for our address, completes our resolutions
// and keeps the cache fresh (RFC 826's merge rule: an entry that exists is
// updated by any ARP from that address; new entries only from packets
// addressed to us, or from an address we are resolving).
func (p *Port) receiveARP(t sim.Time, a ARP) {
	if !a.IsValid() {
		p.drop(CtrDropARPBad)
		return
	}
	op := a.Op()
	if op != ARPRequest && op != ARPReply {
		p.drop(CtrDropARPBad)
		return
	}
	sip, smac := a.SenderIP(), a.SenderMAC()
	forUs := a.TargetIP() == p.cfg.IP
	valid := sip.IsValid() && !sip.IsUnspecified() && smac != ([6]byte{}) && smac[0]&1 == 0 && sip != p.cfg.IP
	if valid {
		r := p.pending[sip]
		n, known := p.cache[sip]
		switch {
		case known && n.static: // permanent: never overwritten
		case known || forUs || r != nil:
			p.cache[sip] = neighbor{mac: smac, at: t}
		}
		if r != nil {
			p.ctr.Inc(CtrARPResolved)
			r.finish(p.cache[sip].mac, nil)
		}
	}
	if !forUs {
		p.ctr.Inc(CtrARPNotForUs)
		return
	}
	switch op {
	case ARPRequest:
		p.ctr.Inc(CtrARPRequestsRcvd)
		if !valid {
			p.drop(CtrDropARPBad)
			return
		}
		f := ARPFields{Op: ARPReply, SenderMAC: p.cfg.MAC, SenderIP: p.cfg.IP, TargetMAC: smac, TargetIP: sip}
		n := BuildARPFrame(p.arpBuf[:], smac, p.cfg.MAC, &f)
		p.ctr.Inc(CtrARPRepliesSent)
		p.send(t, p.arpBuf[:n])
	case ARPReply:
		p.ctr.Inc(CtrARPRepliesRcvd)
	}
}

// Resolution is an ARP resolution in progress or done. Poll Done while the
// simulation runs; then MAC or Err holds the answer.
type Resolution struct {
	IP    netip.Addr
	MAC   [6]byte
	Err   error
	Tries int // who-has requests sent
	done  bool
	p     *Port
}

// Done reports whether the resolution has finished.
func (r *Resolution) Done() bool { return r.done }

func (r *Resolution) finish(mac [6]byte, err error) {
	if r.done {
		return
	}
	r.done, r.MAC, r.Err = true, mac, err
	delete(r.p.pending, r.IP)
}

// Fire is the retry timer (sim.Handler): send another who-has, or give up.
func (r *Resolution) Fire(now sim.Time) {
	if r.done {
		return
	}
	p := r.p
	if r.Tries >= p.cfg.ARPTries {
		p.ctr.Inc(CtrARPTimeouts)
		if n, ok := p.cache[r.IP]; ok && !n.static {
			// A stale entry asked for again, and nobody answered: the
			// neighbour is gone (or has another address); forget it.
			p.ctr.Inc(CtrARPExpired)
			delete(p.cache, r.IP)
		}
		p.rec.Warnf(p.cfg.Node, now, Component, CtrARPTimeouts.String(), "no ARP reply for %v after %d requests", r.IP, r.Tries)
		r.finish([6]byte{}, fmt.Errorf("%w for %v after %d requests %.0f ms apart", ErrARPTimeout, r.IP, r.Tries,
			float64(p.cfg.ARPInterval)/float64(sim.Millisecond)))
		return
	}
	p.request(now, r)
}

// request sends one who-has for r.IP and arms the retry timer.
func (p *Port) request(now sim.Time, r *Resolution) {
	r.Tries++
	f := ARPFields{Op: ARPRequest, SenderMAC: p.cfg.MAC, SenderIP: p.cfg.IP, TargetIP: r.IP}
	n := BuildARPFrame(p.arpBuf[:], Broadcast, p.cfg.MAC, &f)
	p.ctr.Inc(CtrARPRequestsSent)
	p.send(now, p.arpBuf[:n])
	p.eng.At(now.Add(p.cfg.ARPInterval), r)
}

// Resolve finds ip's MAC: at once from the cache (static, or learned and
// not stale), else by broadcasting who-has up to ARPTries times,
// ARPInterval apart on the engine's clock. A resolution already running
// for ip is shared. A stale entry is asked for again like a missing one
// (rather than used while it is checked, as Linux's STALE state does:
// what resolves here is a new connection's destination, which would keep
// a wrong MAC for its whole life); if the neighbour does not answer, the
// entry is removed.
func (p *Port) Resolve(ip netip.Addr) *Resolution {
	r := &Resolution{IP: ip, p: p}
	switch {
	case !unicast4(ip):
		r.done, r.Err = true, fmt.Errorf("%w: cannot resolve %v (IPv4 unicast only)", ErrBadAddress, ip)
		return r
	case ip == p.cfg.IP:
		r.done, r.Err = true, fmt.Errorf("%w: %v is the port's own address", ErrBadAddress, ip)
		return r
	}
	if old := p.pending[ip]; old != nil {
		return old
	}
	if n, ok := p.cache[ip]; ok {
		if !p.stale(n, p.eng.Now()) {
			r.done, r.MAC = true, n.mac
			return r
		}
		p.ctr.Inc(CtrARPStale)
	}
	p.pending[ip] = r
	p.request(p.eng.Now(), r)
	return r
}

// ParseMAC parses a 6-byte MAC address ("02:00:c0:00:02:01").
func ParseMAC(s string) ([6]byte, error) {
	hw, err := net.ParseMAC(s)
	if err != nil || len(hw) != 6 {
		return [6]byte{}, fmt.Errorf("%w: MAC %q", ErrBadAddress, s)
	}
	return [6]byte(hw), nil
}

// ParseNeighbor parses "IP=MAC".
func ParseNeighbor(s string) (Neighbor, error) {
	ipS, macS, ok := strings.Cut(s, "=")
	if !ok {
		return Neighbor{}, fmt.Errorf("%w: neighbour %q: want IP=MAC", ErrBadAddress, s)
	}
	ip, err := netip.ParseAddr(ipS)
	if err != nil || !ip.Is4() {
		return Neighbor{}, fmt.Errorf("%w: neighbour %q: %q is not an IPv4 address", ErrBadAddress, s, ipS)
	}
	mac, err := ParseMAC(macS)
	if err != nil {
		return Neighbor{}, fmt.Errorf("neighbour %q: %w", s, err)
	}
	return Neighbor{IP: ip, MAC: mac}, nil
}

// DefaultMAC derives a locally administered MAC from an IPv4 address:
// 02:00:a:b:c:d. Convenient for command lines that give only --ip.
func DefaultMAC(ip netip.Addr) [6]byte {
	a := ip.Unmap().As4()
	return [6]byte{0x02, 0x00, a[0], a[1], a[2], a[3]}
}
