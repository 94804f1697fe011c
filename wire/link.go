package wire

import (
	"encoding/binary"

	"github.com/softnic/softnic/fault"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/trace"
)

// Receiver takes frames arriving at a port. frame is valid only during the
// call and must be treated as read-only; copy what must be kept.
type Receiver interface {
	ReceiveFrame(t sim.Time, frame []byte)
}

// VerifiedReceiver is a Receiver that can also take a frame whose RoCE
// ICRC is known good: one a port got with SendVerified and delivers with
// exactly the bytes sent (no fault changed them), so the receiver may skip
// recomputing the ICRC (roce.ParseFrameVerified). Such frames are valid
// and read-only for the call, as for ReceiveFrame.
type VerifiedReceiver interface {
	Receiver
	ReceiveVerifiedFrame(t sim.Time, frame []byte)
}

// KeepingReceiver is a VerifiedReceiver that may keep the buffer of a
// verified frame: ReceiveKeptFrame is ReceiveVerifiedFrame, except that
// the receiver may hold on to frame's buffer (its whole capacity) after
// the call and returns the buffer the port is to use in its place (frame
// itself if it kept nothing; any capacity, or nil). The port delivers this
// way only a frame it delivers once.
type KeepingReceiver interface {
	VerifiedReceiver
	ReceiveKeptFrame(t sim.Time, frame []byte) (spare []byte)
}

// Transport is the port-side contract a device uses to reach the network.
// *Port implements it over the simulated link; a real-socket transport
// (UDP datagrams between processes, a TAP device) can implement it too,
// stamping received frames with the engine's time.
type Transport interface {
	// Send starts transmitting frame (an Ethernet frame without FCS) at t,
	// or as soon as the transmitter is free, and returns when its last bit
	// has left. The frame is copied; the caller may reuse it at once.
	Send(t sim.Time, frame []byte) sim.Time
	// Attach names the node that owns this end and where arriving frames
	// go (nil detaches: frames are then dropped and counted).
	Attach(node int, r Receiver)
}

// Counter (and warning) names used by the link.
var (
	CtrTxFrames         = trace.NewCounter("wire_tx_frames")         // frames that started transmission
	CtrTxBytes          = trace.NewCounter("wire_tx_bytes")          // their bytes (without FCS/preamble/IFG)
	CtrRxFrames         = trace.NewCounter("wire_rx_frames")         // frames handed to a receiver
	CtrRxBytes          = trace.NewCounter("wire_rx_bytes")          // their bytes
	CtrDropOversize     = trace.NewCounter("wire_drop_oversize")     // frame longer than 14 B + MTU, never sent
	CtrDropRunt         = trace.NewCounter("wire_drop_runt")         // frame shorter than an Ethernet header, never sent
	CtrDropNoReceiver   = trace.NewCounter("wire_drop_no_receiver")  // arrived at a port with nothing attached
	CtrFaultDrop        = trace.NewCounter("wire_fault_drop")        // lost by a fault rule (tx or rx)
	CtrFaultCorrupt     = trace.NewCounter("wire_fault_corrupt")     // one byte flipped by a fault rule
	CtrFaultDuplicate   = trace.NewCounter("wire_fault_duplicate")   // delivered twice by a fault rule
	CtrFaultDelay       = trace.NewCounter("wire_fault_delay")       // delivered late by a fault rule
	CtrFaultReorder     = trace.NewCounter("wire_fault_reorder")     // held behind the next frame by a fault rule
	CtrFaultUnsupported = trace.NewCounter("wire_fault_unsupported") // an action the wire cannot apply (tear, rx reorder); ignored
	CtrTapErrors        = trace.NewCounter("wire_tap_errors")        // a FrameWriter tap failed
)

// Component is the trace component name of wire events.
const Component = "wire"

// Port is one end of a Link. It implements Transport.
type Port struct {
	link *Link
	out  *direction // frames this port sends
	node int
	recv Receiver
}

var _ Transport = (*Port)(nil)

// Attach sets the node that owns the port (for trace events, counters and
// fault matching) and the receiver of arriving frames.
func (p *Port) Attach(node int, r Receiver) {
	p.node = node
	p.recv = r
}

// Node is the node attached to the port.
func (p *Port) Node() int { return p.node }

// Link is the link the port belongs to.
func (p *Port) Link() *Link { return p.link }

// WireTime is how long a frame of n bytes occupies the port's transmitter:
// WireBytes(n) at the link's rate (the device paces its transmit buffer
// by it).
func (p *Port) WireTime(n int) sim.Duration { return p.link.ser.Serialize(WireBytes(n)) }

// direction is one way of a link: its transmitter and what it carries.
type direction struct {
	from, to  *Port
	busyUntil sim.Time   // the transmitter is free from here on
	held      *packet    // a frame held back by a Reorder fault
	q         *sim.Queue // the arrivals, in (nearly always) rising time
}

// packet is a frame in flight. Packets are pooled per link and scheduled on
// the engine directly (a *packet is a sim.Handler), so a frame's journey
// allocates nothing once the pool is warm.
type packet struct {
	link      *Link
	dir       *direction
	buf       []byte
	refs      int                // scheduled engine events that will fire this packet
	delivered bool               // handed to the receiver (or dropped at rx)
	verified  bool               // the bytes are those given to SendVerified: the ICRC is the sender's
	seal      func(frame []byte) // SendUnsealed: writes the ICRC, before anyone but a VerifiedReceiver sees the bytes
	rxDone    bool               // the rx fault hook has been consulted
}

// Fire delivers the packet (the first time) and returns it to the pool when
// no more events refer to it.
func (pk *packet) Fire(now sim.Time) { pk.link.fire(pk, now) }

// Link is a full-duplex point-to-point Ethernet link, or a loopback.
type Link struct {
	eng   *sim.Engine
	spec  Spec
	ser   sim.Serializer // spec.Rate, precomputed
	rec   *trace.Recorder
	ctr   *trace.Counters
	inj   *fault.Injector
	ports [2]Port
	dirs  [2]direction
	ndirs int
	free  []*packet
	npkts int // packets ever allocated (all are in free when nothing is in flight)
	taps  []func(t sim.Time, frame []byte)
}

func newLink(eng *sim.Engine, spec Spec, rec *trace.Recorder, ctr *trace.Counters, inj *fault.Injector) *Link {
	if ctr == nil {
		ctr = &trace.Counters{}
	}
	l := &Link{eng: eng, spec: spec.withDefaults(), rec: rec, ctr: ctr, inj: inj}
	l.ser = sim.NewSerializer(l.spec.Rate)
	for i := range l.ports {
		l.ports[i].link = l
	}
	return l
}

// NewLink connects two ports, A and B, with the given spec (zero fields
// take the defaults; see Spec.Validate for checking a profile). rec, ctr
// and inj may be nil.
func NewLink(eng *sim.Engine, spec Spec, rec *trace.Recorder, ctr *trace.Counters, inj *fault.Injector) *Link {
	l := newLink(eng, spec, rec, ctr, inj)
	a, b := &l.ports[0], &l.ports[1]
	l.dirs[0] = direction{from: a, to: b}
	l.dirs[1] = direction{from: b, to: a}
	a.out, b.out = &l.dirs[0], &l.dirs[1]
	l.ndirs = 2
	return l
}

// NewLoopback is a link with one port whose frames come back to itself
// after serialisation and propagation (a NIC port with a loopback cable).
// A and B return the same port.
func NewLoopback(eng *sim.Engine, spec Spec, rec *trace.Recorder, ctr *trace.Counters, inj *fault.Injector) *Link {
	l := newLink(eng, spec, rec, ctr, inj)
	a := &l.ports[0]
	l.dirs[0] = direction{from: a, to: a}
	a.out = &l.dirs[0]
	l.ndirs = 1
	return l
}

// A is the first port.
func (l *Link) A() *Port { return &l.ports[0] }

// B is the second port (the same as A on a loopback).
func (l *Link) B() *Port {
	if l.ndirs == 1 {
		return &l.ports[0]
	}
	return &l.ports[1]
}

// Spec is the link's configuration with defaults filled in.
func (l *Link) Spec() Spec { return l.spec }

// Counters are the counters the link increments.
func (l *Link) Counters() *trace.Counters { return l.ctr }

// AddTap registers f to see every frame that starts transmission, at its
// transmit start time, as the sender sent it (before any fault). frame is
// valid only during the call. Taps run in registration order.
func (l *Link) AddTap(f func(t sim.Time, frame []byte)) { l.taps = append(l.taps, f) }

// FrameWriter is what a capture file writer offers (trace.PcapWriter
// implements it).
type FrameWriter interface {
	WriteFrame(t sim.Time, frame []byte) error
}

// AddWriter taps the link into w (e.g. a pcap file). A write error is
// counted as wire_tap_errors and reported as a warning (the first one
// only, so a full disk does not flood the trace); the simulation goes on.
func (l *Link) AddWriter(w FrameWriter) {
	failed := false
	l.AddTap(func(t sim.Time, frame []byte) {
		if err := w.WriteFrame(t, frame); err != nil {
			l.ctr.Inc(CtrTapErrors)
			if !failed {
				failed = true
				l.rec.Warnf(l.ports[0].node, t, Component, CtrTapErrors.String(), "capture write failed: %v", err)
			}
		}
	})
}

// Send transmits frame; see Transport.Send.
func (p *Port) Send(t sim.Time, frame []byte) sim.Time { return p.sendFlow(t, frame, 0, false, nil) }

// SendVerified is Send for a frame whose RoCE ICRC its sender computed
// over exactly these bytes (roce.BuildFrame's output, unchanged): if the
// frame reaches a VerifiedReceiver with its bytes untouched by any fault,
// it is delivered by ReceiveVerifiedFrame. Everything else (timing,
// counters, taps, faults, the trace) is Send's.
func (p *Port) SendVerified(t sim.Time, frame []byte) sim.Time {
	return p.sendFlow(t, frame, 0, true, nil)
}

// SendUnsealed is SendVerified for a frame whose ICRC field is not written
// yet (roce.BuildFrameUnsealed): seal writes it. The wire calls seal
// before anything other than a VerifiedReceiver could read the bytes: at
// once when the link has taps or a fault plan, at arrival when the
// receiver is a plain Receiver. A frame that reaches a VerifiedReceiver
// untouched is never sealed: nobody reads its ICRC. Everything observable
// is SendVerified's with the frame sealed first.
//
// The wire takes frame's buffer (its whole capacity) instead of copying
// it, and returns spare, a buffer the caller may use in its place: that
// of a recycled packet (of any capacity, or nil), or frame itself when
// the wire copied it after all (a fault rule fired, or the frame was not
// sent).
func (p *Port) SendUnsealed(t sim.Time, frame []byte, seal func(frame []byte)) (end sim.Time, spare []byte) {
	return p.send(t, frame, 0, true, seal, true)
}

// SendFlow is Send with a trace flow id, so that the wire stage joins the
// WQE's flow in the trace.
//
// Timing: transmission starts at max(t, now, the end of the previous frame
// in this direction) and lasts FrameTime(len(frame)); the frame is handed
// to the peer's receiver when its last bit arrives, Propagation later.
// Frames shorter than an Ethernet header or longer than 14 B + MTU are
// dropped and counted without using the link; Send then returns t.
func (p *Port) SendFlow(t sim.Time, frame []byte, flow uint64) sim.Time {
	return p.sendFlow(t, frame, flow, false, nil)
}

func (p *Port) sendFlow(t sim.Time, frame []byte, flow uint64, verified bool, seal func([]byte)) sim.Time {
	end, _ := p.send(t, frame, flow, verified, seal, false)
	return end
}

// send is sendFlow; with own it may keep frame's buffer in the packet
// (SendUnsealed) and returns the one the caller gets instead.
func (p *Port) send(t sim.Time, frame []byte, flow uint64, verified bool, seal func([]byte), own bool) (sim.Time, []byte) {
	spare := frame
	l := p.link
	n := len(frame)
	if n < EthHeaderLen {
		l.ctr.Inc(CtrDropRunt)
		l.rec.Warnf(p.node, t, Component, CtrDropRunt.String(), "frame of %d B is shorter than an Ethernet header", n)
		return t, spare
	}
	if n > EthHeaderLen+l.spec.MTU {
		l.ctr.Inc(CtrDropOversize)
		l.rec.Warnf(p.node, t, Component, CtrDropOversize.String(), "frame of %d B exceeds MTU %d + %d B header", n, l.spec.MTU, EthHeaderLen)
		return t, spare
	}
	if seal != nil && (len(l.taps) > 0 || l.inj != nil) {
		seal(frame) // a tap or a fault rule reads the frame as sent
		seal = nil
	}
	d := p.out
	start := max(t, l.eng.Now(), d.busyUntil)
	end := start.Add(l.ser.Serialize(WireBytes(n)))
	d.busyUntil = end
	arrive := end.Add(l.spec.Propagation)

	for _, tap := range l.taps {
		tap(start, frame)
	}
	l.ctr.Inc(CtrTxFrames)
	l.ctr.Add(CtrTxBytes, uint64(n))
	// Wire rules match on the frame's BTH: Match.QPN is the frame's
	// destination QP (BTH DestQP), also for ACKs and READ responses, which
	// carry the requester's QPN.
	// Without a fault plan or a recorder nothing reads them: the frame
	// is not parsed.
	var ev fault.Event
	if l.inj != nil || l.rec != nil {
		ev = FrameEvent(p.node, frame)
	}
	qpn := ev.QPN

	var dec fault.Decision // no plan: fault.None, without the call
	if l.inj != nil {
		dec = l.inj.Decide(fault.WireTx, ev)
	}
	var pk *packet
	switch dec.Action {
	case fault.None:
		if own {
			pk, spare = l.adopt(d, frame, arrive)
		} else {
			pk = l.schedule(d, frame, arrive)
		}
		pk.verified, pk.seal = verified, seal
	case fault.Drop:
		l.ctr.Inc(CtrFaultDrop)
		l.rec.Warnf(p.node, start, Component, CtrFaultDrop.String(), "tx: frame of %d B (qpn %#x) dropped by fault rule %d", n, qpn, dec.Rule)
	case fault.Corrupt:
		pk = l.schedule(d, frame, arrive)
		off := corrupt(pk.buf, dec)
		l.ctr.Inc(CtrFaultCorrupt)
		l.rec.Warnf(p.node, start, Component, CtrFaultCorrupt.String(), "tx: frame of %d B (qpn %#x): byte %d flipped by fault rule %d", n, qpn, off, dec.Rule)
	case fault.Duplicate:
		pk = l.schedule(d, frame, arrive)
		pk.verified = verified
		l.schedule(d, frame, arrive).verified = verified
		l.ctr.Inc(CtrFaultDuplicate)
		l.rec.Warnf(p.node, start, Component, CtrFaultDuplicate.String(), "tx: frame of %d B (qpn %#x) duplicated by fault rule %d", n, qpn, dec.Rule)
	case fault.Delay:
		arrive = arrive.AddSat(dec.Delay)
		pk = l.schedule(d, frame, arrive)
		pk.verified = verified
		l.ctr.Inc(CtrFaultDelay)
		l.rec.Warnf(p.node, start, Component, CtrFaultDelay.String(), "tx: frame of %d B (qpn %#x) delayed %v by fault rule %d", n, qpn, dec.Delay, dec.Rule)
	case fault.Reorder:
		if d.held != nil { // two reorders in a row: the older one goes first
			l.release(d, arrive)
		}
		pk = l.schedule(d, frame, arrive.Add(l.spec.ReorderWindow))
		pk.verified = verified
		d.held = pk
		l.ctr.Inc(CtrFaultReorder)
		l.rec.Warnf(p.node, start, Component, CtrFaultReorder.String(), "tx: frame of %d B (qpn %#x) held behind the next frame by fault rule %d", n, qpn, dec.Rule)
	default:
		pk = l.schedule(d, frame, arrive)
		l.ctr.Inc(CtrFaultUnsupported)
		l.rec.Warnf(p.node, start, Component, CtrFaultUnsupported.String(), "tx: fault action %s (rule %d) does not apply to the wire; ignored", dec.Action, dec.Rule)
	}
	// A frame held by Reorder goes right after the next frame (even a
	// lost one: it would have released it on a real network).
	if d.held != nil && d.held != pk {
		l.release(d, arrive)
	}
	l.rec.StagePSN(p.node, Component, Component, start, arrive, n, 0, qpn, flow, ev.PSN)
	return end, spare
}

// schedule copies frame into a pooled packet due at arrive.
func (l *Link) schedule(d *direction, frame []byte, arrive sim.Time) *packet {
	pk := l.get(frame)
	pk.dir = d
	pk.refs++
	l.arriveAt(d, arrive, pk)
	return pk
}

// adopt is schedule for a frame whose buffer the packet may keep: it
// takes a pooled packet's old buffer out instead of copying frame in, and
// returns it (nil for a new packet).
func (l *Link) adopt(d *direction, frame []byte, arrive sim.Time) (*packet, []byte) {
	var pk *packet
	var old []byte
	if k := len(l.free); k > 0 {
		pk = l.free[k-1]
		l.free = l.free[:k-1]
		old = pk.buf[:0]
	} else {
		pk = &packet{link: l}
		l.npkts++
	}
	pk.buf = frame
	pk.dir = d
	pk.refs++
	l.arriveAt(d, arrive, pk)
	return pk, old
}

// arriveAt schedules pk's arrival through d.
func (l *Link) arriveAt(d *direction, t sim.Time, pk *packet) {
	if d.q == nil {
		d.q = l.eng.NewQueue()
	}
	d.q.At(t, pk)
}

// release schedules the held frame of d at t; events at equal times run in
// schedule order, so it arrives right after the frame that released it.
func (l *Link) release(d *direction, t sim.Time) {
	pk := d.held
	d.held = nil
	pk.refs++
	l.eng.At(t, pk)
}

func (l *Link) get(frame []byte) *packet {
	var pk *packet
	if k := len(l.free); k > 0 {
		pk = l.free[k-1]
		l.free = l.free[:k-1]
	} else {
		pk = &packet{link: l, buf: make([]byte, 0, EthHeaderLen+l.spec.MTU)}
		l.npkts++
	}
	pk.buf = append(pk.buf[:0], frame...)
	return pk
}

func (l *Link) put(pk *packet) {
	*pk = packet{link: l, buf: pk.buf[:0]}
	l.free = append(l.free, pk)
}

func (l *Link) fire(pk *packet, now sim.Time) {
	pk.refs--
	if !pk.delivered {
		pk.delivered = true
		if pk.dir.held == pk { // a Reorder hold that timed out
			pk.dir.held = nil
		}
		l.arrive(pk, now)
	}
	if pk.refs == 0 {
		l.put(pk)
	}
}

// arrive applies the rx fault hook and hands the frame to the receiver.
func (l *Link) arrive(pk *packet, now sim.Time) {
	to := pk.dir.to
	n := len(pk.buf)
	copies := 1
	// qpn is the frame's BTH DestQP as it arrived (before any rx
	// corruption), for warnings; without a fault plan the frame is parsed
	// only if a warning needs it.
	qpn, haveQPN := uint32(0), false
	if !pk.rxDone && l.inj != nil {
		pk.rxDone = true
		// The rx hook sees the frame as it arrives (after any tx corruption).
		ev := FrameEvent(to.node, pk.buf)
		qpn, haveQPN = ev.QPN, true
		dec := l.inj.Decide(fault.WireRx, ev)
		switch dec.Action {
		case fault.None:
		case fault.Drop:
			l.ctr.Inc(CtrFaultDrop)
			l.rec.Warnf(to.node, now, Component, CtrFaultDrop.String(), "rx: frame of %d B (qpn %#x) dropped by fault rule %d", n, qpn, dec.Rule)
			return
		case fault.Corrupt:
			off := corrupt(pk.buf, dec)
			pk.verified = false
			l.ctr.Inc(CtrFaultCorrupt)
			l.rec.Warnf(to.node, now, Component, CtrFaultCorrupt.String(), "rx: frame of %d B (qpn %#x): byte %d flipped by fault rule %d", n, qpn, off, dec.Rule)
		case fault.Duplicate:
			copies = 2
			l.ctr.Inc(CtrFaultDuplicate)
			l.rec.Warnf(to.node, now, Component, CtrFaultDuplicate.String(), "rx: frame of %d B (qpn %#x) duplicated by fault rule %d", n, qpn, dec.Rule)
		case fault.Delay:
			// Hand a copy over later; it has passed the rx hook already.
			late := l.get(pk.buf)
			late.dir, late.rxDone, late.refs, late.verified = pk.dir, true, 1, pk.verified
			l.eng.At(now.AddSat(dec.Delay), late)
			l.ctr.Inc(CtrFaultDelay)
			l.rec.Warnf(to.node, now, Component, CtrFaultDelay.String(), "rx: frame of %d B (qpn %#x) delayed %v by fault rule %d", n, qpn, dec.Delay, dec.Rule)
			return
		default:
			l.ctr.Inc(CtrFaultUnsupported)
			l.rec.Warnf(to.node, now, Component, CtrFaultUnsupported.String(), "rx: fault action %s (rule %d) does not apply at wire.rx; ignored", dec.Action, dec.Rule)
		}
	}
	for range copies {
		if to.recv == nil {
			if !haveQPN {
				qpn = PeekQPN(pk.buf)
			}
			l.ctr.Inc(CtrDropNoReceiver)
			l.rec.Warnf(to.node, now, Component, CtrDropNoReceiver.String(), "frame of %d B (qpn %#x) arrived at a port with no receiver", n, qpn)
			continue
		}
		l.ctr.Inc(CtrRxFrames)
		l.ctr.Add(CtrRxBytes, uint64(n))
		if pk.verified {
			if kr, ok := to.recv.(KeepingReceiver); ok && copies == 1 {
				pk.buf = kr.ReceiveKeptFrame(now, pk.buf)[:0]
				continue
			}
			if vr, ok := to.recv.(VerifiedReceiver); ok {
				vr.ReceiveVerifiedFrame(now, pk.buf)
				continue
			}
		}
		if pk.seal != nil {
			pk.seal(pk.buf)
			pk.seal = nil
		}
		to.recv.ReceiveFrame(now, pk.buf)
	}
}

// corrupt flips bits in one byte of frame past the Ethernet header (a
// corrupted Ethernet header would fail the FCS and vanish at the MAC; what
// this models is damage the receiver's own checks, the IPv4 checksum and the
// RoCE ICRC, must catch). It returns the offset, or -1 for a header-only
// frame.
func corrupt(frame []byte, dec fault.Decision) int {
	off := dec.Offset(EthHeaderLen, len(frame))
	if off >= 0 {
		frame[off] ^= dec.Mask()
	}
	return off
}

// PeekQPN returns the destination QP of a RoCEv2 frame (Ethernet + IPv4 or
// IPv6 + UDP port 4791 + BTH), or 0 if frame is anything else. It reads
// only fixed offsets and never fails; the wire uses it for trace events and
// fault matching, not for delivery.
func PeekQPN(frame []byte) uint32 {
	if at := bthOffset(frame); at >= 0 {
		return binary.BigEndian.Uint32(frame[at+bthDestQPAt:]) & 0xFFFFFF
	}
	return 0
}

// FrameEvent is the fault event of a frame at node: for a RoCEv2 frame the
// BTH's destination QP, opcode and PSN; for anything else QPN 0 and an
// Unknown opcode and PSN (so rules matching an opcode or a PSN skip it).
// It reads only fixed offsets, never fails and does not allocate.
func FrameEvent(node int, frame []byte) fault.Event {
	at := bthOffset(frame)
	if at < 0 {
		return fault.NewEvent(node, 0)
	}
	return fault.Event{
		Node:   node,
		QPN:    binary.BigEndian.Uint32(frame[at+bthDestQPAt:]) & 0xFFFFFF,
		Opcode: int16(frame[at]),
		PSN:    int32(binary.BigEndian.Uint32(frame[at+bthPSNAt:]) & 0xFFFFFF),
	}
}

// Offsets within the BTH (rocev2.md §1.4): byte 0 opcode, bytes 5-7 DestQP
// (byte 4 reserved), bytes 9-11 PSN (byte 8 AckReq + reserved).
const (
	bthLen      = 12
	bthDestQPAt = 4 // the 32-bit word whose low 24 bits are DestQP
	bthPSNAt    = 8 // the 32-bit word whose low 24 bits are the PSN
)

// bthOffset returns where the BTH of a RoCEv2 frame starts (Ethernet
// without VLAN tag, IPv4 with its IHL or IPv6 without extension headers,
// UDP destination port 4791, a whole BTH within the frame), or -1.
func bthOffset(frame []byte) int {
	const (
		udpLen     = 8
		rocePort   = 4791
		protoUDP   = 17
		etherIPv4  = 0x0800
		etherIPv6  = 0x86DD
		ipv6HdrLen = 40
		ipv4MinHdr = 20
	)
	if len(frame) < EthHeaderLen {
		return -1
	}
	var l4 int
	switch binary.BigEndian.Uint16(frame[12:]) {
	case etherIPv4:
		if len(frame) < EthHeaderLen+ipv4MinHdr || frame[EthHeaderLen+9] != protoUDP {
			return -1
		}
		ihl := int(frame[EthHeaderLen]&0x0F) * 4
		if ihl < ipv4MinHdr {
			return -1
		}
		l4 = EthHeaderLen + ihl
	case etherIPv6:
		if len(frame) < EthHeaderLen+ipv6HdrLen || frame[EthHeaderLen+6] != protoUDP {
			return -1
		}
		l4 = EthHeaderLen + ipv6HdrLen
	default:
		return -1
	}
	if len(frame) < l4+udpLen+bthLen || binary.BigEndian.Uint16(frame[l4+2:]) != rocePort {
		return -1
	}
	return l4 + udpLen
}
