package device

import (
	"github.com/softnic/softnic/env"
	"net/netip"
	"unsafe"

	"github.com/softnic/softnic/bar"
	"github.com/softnic/softnic/dma"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/pcie"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/shm"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/trace"
	"github.com/softnic/softnic/wqefetch"
)

// Port is the device's Ethernet port: wire.Port (and later real-socket
// transports) satisfy it.
type Port interface {
	Send(t sim.Time, frame []byte) sim.Time
}

// Identity is what makes one NIC instance distinct from another with the
// same profile.
type Identity struct {
	Node int // trace node id
	MAC  [6]byte
	IP   netip.Addr // IPv4; the RoCEv2 GID is ::ffff:IP
}

// Device is one emulated NIC and the host memory it is plugged into.
//
// It is driven only from outside: MMIO (Doorbell, BlueFlame, CQArm, through
// BAR0), received frames (ReceiveFrame), the completions of its own DMA
// and its timers (events on the engine), and the control plane. It reaches
// the world only through its DMA engine and its port.
type Device struct {
	eng  *sim.Engine
	spec Spec
	id   Identity
	node int
	mem  *shm.Region
	rec  *trace.Recorder
	ctr  trace.Counters

	link    *pcie.Link
	tlpRate sim.Serializer // spec.PCIe.TLPRate(), precomputed once (issued)
	bar     *bar.BAR0
	dma     *dma.Engine
	keys    *dma.Keys
	fetch   *wqefetch.Engine
	port    Port
	vport   verifiedPort // port, if it is one (Connect)
	pport   pacedPort    // port, if it says how long a frame occupies it (Connect)
	tx      txBuffer     // the port's transmit buffer (txbuf.go)

	pds      map[uint32]bool
	nextPD   uint32
	cqs      map[uint32]*cq
	nextCQN  uint32
	qps      map[uint32]*qp
	nextQPN  uint32
	srqs     map[uint32]*srq
	nextSRQN uint32
	nextMR   uint32
	nextUAR  uint32
	nQPs     int
	sqBBs    int // WQEBBs of every live QP's send queue (maxSQWQEBBs)
	errQPs   int // QPs in ERR with a receive queue (see scanErrorRQs)

	pkt     roce.Packet
	qpCache [4]qpEnt   // recently used QPs, direct-mapped (qp)
	txq     *sim.Queue // txEvents: a QP's frames leave in order
	rxOwn   []byte     // ReceiveKeptFrame: the frame's buffer, until a WRITE's payload lands from it
	rxSpare []byte     // what ReceiveKeptFrame hands back to the port
	rxFrame []byte     // the frame being received (a UD datagram parked copies it: udpark.go)
	fp      roce.FrameParams
	frames  [][]byte
	txFree  []*txEvent
	// noLocalLB: frames to the port's own MAC go out on the port like
	// any other (SetLocalLoopback); loopFree pools loopbackEvents.
	noLocalLB bool
	loopFree  []*loopbackEvent
	lfree     []*cqeLanding
	landed    uint64 // CQEs made visible in host memory (CQEsLanded)
	rqbuf     [1024]byte
	atomBuf   [8]byte

	ev eventState // event queues, completion channels, link state (events.go, eq.go)

	cycMemo [16]cycMemo // cyc's conversions of cycle counts

	fx  faultState // fault injection and device fatal (faults.go, fatal.go)
	chk *Checker   // checked mode (check.go); nil: off
}

// New builds a device with profile spec in front of host memory mem. Its
// port is connected later with Connect.
func New(eng *sim.Engine, spec Spec, id Identity, mem *shm.Region, rec *trace.Recorder) *Device {
	d := &Device{
		eng: eng, spec: spec, id: id, node: id.Node, mem: mem, rec: rec,
		pds: map[uint32]bool{}, cqs: map[uint32]*cq{}, qps: map[uint32]*qp{},
		nextPD: 1, nextCQN: 1, nextSRQN: 1, nextQPN: spec.Caps.FirstQPN, nextMR: 1,
	}
	if d.nextQPN < 2 {
		d.nextQPN = 2
	}
	d.link = pcie.NewLink(spec.PCIe)
	d.tlpRate = sim.NewSerializer(spec.PCIe.TLPRate())
	ev := env.Env{Eng: eng, Rec: rec, Ctr: &d.ctr, Node: id.Node} // what every engine of this device is given
	d.bar = bar.New(ev, d.link, d, spec.BAR)
	d.dma = dma.New(ev, d.link, mem, spec.DMA)
	d.keys = dma.NewKeys()
	d.fetch = wqefetch.New(ev, d.dma, d)
	d.nextUAR = spec.BAR.FirstUAR
	d.bar.Reset()
	d.initEQs()
	return d
}

// Connect attaches the device's Ethernet port.
func (d *Device) Connect(p Port) {
	d.port = p
	d.vport, _ = p.(verifiedPort)
	d.pport, _ = p.(pacedPort)
	d.tx.connect(d, d.pport)
}

// verifiedPort is a Port that can carry a frame whose ICRC is still to be
// written (roce.BuildFrameUnsealed) and writes it, with roce.SealFrame,
// before anyone but a peer device on the same process's wire reads the
// bytes (wire.Port.SendUnsealed); that peer trusts its sender and needs
// no ICRC, so a frame that goes only there costs no CRC pass at all.
type verifiedPort interface {
	SendUnsealed(t sim.Time, frame []byte, seal func(frame []byte)) (end sim.Time, spare []byte)
}

// BARPort is the device end of BAR0: the posted writes and reads a host
// CPU model (host.CPU) in front of it issues.
func (d *Device) BARPort() pcie.BARPort { return d.bar }

// BARConfig is BAR0's configuration in use (defaults filled in): the
// layout a host CPU in front of it must know (host.Layout).
func (d *Device) BARConfig() bar.Config { return d.bar.Config() }

// Mem is the host memory the device is plugged into.
func (d *Device) Mem() *shm.Region { return d.mem }

// Counters are the device's named event counters.
func (d *Device) Counters() *trace.Counters { return &d.ctr }

// Spec is the device's profile.
func (d *Device) Spec() Spec { return d.spec }

// Identity is the device's MAC/IP identity.
func (d *Device) Identity() Identity { return d.id }

// Link is the device's PCIe link (for TLP statistics).
func (d *Device) Link() *pcie.Link { return d.link }

// GID is the device's RoCEv2 GID (::ffff:a.b.c.d).
func (d *Device) GID() [16]byte { return d.id.IP.As16() }

// Progress runs the simulation to its next event (mlx5.Progressor). When
// nothing is scheduled it first looks for receives posted to QPs in ERR
// (scanErrorRQs), which must be flushed.
func (d *Device) Progress() bool {
	if d.eng.Step() {
		return true
	}
	return d.scanErrorRQs(d.eng.Now())
}

// noPSN is the PSN of a trace stage that handles no packet.
const noPSN = trace.NoPSN

// cyc is the duration of n core cycles. The few counts the spec names
// come back on every packet, so each conversion (a rounded float
// division) is kept in a small direct-mapped memo.
func (d *Device) cyc(n int64) sim.Duration {
	m := &d.cycMemo[uint64(n)%uint64(len(d.cycMemo))]
	if !m.ok || m.n != n {
		*m = cycMemo{n: n, d: d.spec.Core.cycles(n), ok: true}
	}
	return m.d
}

type cycMemo struct {
	n  int64
	d  sim.Duration
	ok bool
}

// inc counts one event of name.
func (d *Device) inc(name trace.Counter) { d.ctr.Inc(name) }

// warn counts name and records a trace warning.
func (d *Device) warn(t sim.Time, name trace.Counter, format string, args ...any) {
	d.ctr.Inc(name)
	d.rec.Warnf(d.node, t, "device", name.String(), format, args...)
}

// Doorbell is called by BAR0 when an 8-byte doorbell arrives (bar.Handler).
func (d *Device) Doorbell(t sim.Time, uar uint32, bfreg int, ctrl [8]byte) {
	if (d.fx.in != nil || d.fx.fatal) && d.doorbellFault(t, uar, bfreg, &ctrl, nil) {
		return
	}
	if len(d.fx.held) > 0 {
		defer d.releaseHeldDoorbells(t)
	}
	if d.chk != nil && !d.fx.chkSkip {
		d.chk.doorbell(t, uar, bfreg, ctrl, false)
	}
	d.fx.chkSkip = false
	c := mlx5.CtrlSeg(ctrl[:])
	q := d.qp(c.QPN())
	if q == nil {
		d.warn(t, CtrDBUnknownQP, "doorbell on UAR %d bfreg %d names QP %#x, which does not exist", uar, bfreg, c.QPN())
		return
	}
	d.inc(CtrDoorbells)
	d.rec.Stage(d.node, "device", "doorbell_decode", t, t.Add(d.cyc(d.spec.Core.DoorbellCycles)), 8, 0, q.qpn, wqefetch.FlowID(q.qpn, c.WQEIndex()))
	t = t.Add(d.cyc(d.spec.Core.DoorbellCycles))
	if q.state == mlx5.QPStateRST || q.state == mlx5.QPStateINIT {
		d.warn(t, CtrDBBadState, "doorbell on QP %#x in state %v ignored", q.qpn, q.state)
		return
	}
	q.rq.kick(t)
	if err := d.fetch.Doorbell(t, q.req.sq, ctrl); err != nil {
		d.inc(CtrDBRejected)
	}
}

// BlueFlame is called by BAR0 when a whole BlueFlame WQE has arrived.
func (d *Device) BlueFlame(t sim.Time, uar uint32, bfreg int, wqe []byte) {
	if len(wqe) < mlx5.CtrlSegSize {
		d.warn(t, CtrBFShort, "BlueFlame write of %d bytes on UAR %d bfreg %d: no control segment", len(wqe), uar, bfreg)
		return
	}
	if (d.fx.in != nil || d.fx.fatal) && d.doorbellFault(t, uar, bfreg, (*[8]byte)(wqe), wqe) {
		return
	}
	if len(d.fx.held) > 0 {
		defer d.releaseHeldDoorbells(t)
	}
	if d.chk != nil {
		d.chk.blueFlame(t, uar, bfreg, wqe)
	}
	c := mlx5.CtrlSeg(wqe)
	q := d.qp(c.QPN())
	if q == nil {
		d.warn(t, CtrBFUnknownQP, "BlueFlame write on UAR %d bfreg %d names QP %#x, which does not exist", uar, bfreg, c.QPN())
		return
	}
	d.inc(CtrBlueFlameWrites)
	d.rec.Stage(d.node, "device", "bf_decode", t, t.Add(d.cyc(d.spec.Core.DoorbellCycles)), len(wqe), 0, q.qpn, wqefetch.FlowID(q.qpn, c.WQEIndex()))
	t = t.Add(d.cyc(d.spec.Core.DoorbellCycles))
	if q.state == mlx5.QPStateRST || q.state == mlx5.QPStateINIT {
		d.warn(t, CtrDBBadState, "BlueFlame on QP %#x in state %v ignored", q.qpn, q.state)
		return
	}
	q.rq.kick(t)
	if d.fetch.BlueFlame(t, q.req.sq, wqe) {
		return
	}
	var db [8]byte
	copy(db[:], wqe[:8])
	if err := d.fetch.Doorbell(t, q.req.sq, db); err != nil {
		d.inc(CtrDBRejected)
	}
}

// The transmit path -------------------------------------------------------

// txEvent hands one built frame to the port at its ready time, unless its
// QP has been destroyed or has gone to ERR, SQE or RESET (or the device to
// fatal) since the frame was built: a QP in error sends nothing more,
// except the answers its responder had built before it found the error
// that took the QP to ERR (qp.respKeep). The last frame of a UC or UD WQE
// then completes it (depart).
type txEvent struct {
	d    *Device
	q    *qp
	gen  uint32 // q.txGen when built
	resp bool   // a READ response: the responder may build the next one
	ans  bool   // a response of any kind (READ response, ACK, atomic ACK): see qp.respKeep
	// depart: the last packet of a UC or UD WQE (WQE counter widx), which
	// completes when this frame has left the port (requester.departed).
	depart bool
	widx   uint16
	buf    []byte
	n      int
}

func (e *txEvent) Fire(now sim.Time) {
	d, q := e.d, e.q
	buf := e.buf // what goes back to the pool
	left := now  // when the frame's last bit has left the port
	switch {
	case q != nil && (q.dead || e.gen != q.txGen && !(e.ans && e.gen+1 == q.respKeep)):
		d.inc(CtrTxDropDestroyed)
		d.tx.unsent(d, now, e.n)
	case d.ev.linkDown:
		// Never on the wire, so in no capture: the trace says so.
		d.warn(now, CtrTxDropLinkDown, "port 1 down: a %d-byte frame is not sent", e.n)
		d.tx.unsent(d, now, e.n)
	case d.fx.fatal:
		d.inc(CtrTxDropDestroyed)
		d.tx.unsent(d, now, e.n)
	case !d.noLocalLB && e.n >= 6 && [6]byte(e.buf[:6]) == d.id.MAC:
		left, buf = d.loopBack(now, e.buf, e.n), nil // the loopback keeps the buffer
	case d.vport != nil:
		// Built by roce.BuildFrameUnsealed in emit, unchanged since; the
		// wire keeps the buffer and gives one back.
		left, buf = d.vport.SendUnsealed(now, e.buf[:e.n], roce.SealFrame)
	case d.port != nil:
		left = d.port.Send(now, e.buf[:e.n])
	default:
		d.inc(CtrTxNoPort)
	}
	if e.depart && q != nil && !q.dead && e.gen == q.txGen {
		// A frame not sent because the link is down still completes its
		// WQE: the loss is the network's. One built before the QP went to
		// ERR, SQE or RESET (txGen moved on) does not: that flush (or
		// reset) has dealt with the WQE already.
		q.req.departed(max(left, now), e.widx)
	}
	if cap(buf) >= frameBufSize {
		d.frames = append(d.frames, buf[:frameBufSize])
	}
	resp, live := e.resp, q != nil && !q.dead && e.gen == q.txGen
	e.buf, e.q = nil, nil
	d.txFree = append(d.txFree, e)
	if resp && live {
		q.resp.sent(now)
	}
}

// SetLocalLoopback turns the NIC's local loopback on (the default) or
// off. On, a frame the device sends to its own port's MAC (a QP connected
// to another QP of the same device, a datagram to its own GID) is looped
// back inside the NIC to its own receive path and never reaches the wire,
// as a ConnectX's embedded switch does for its own function's traffic
// (mlx5_ib turns local loopback on for RDMA: mlx5_ib_enable_lb) and as
// Linux rxe does (rocev2.md §5.1, Loopback). Off, it goes out on the
// port like any other frame: a port cabled to itself
// (testbed.Config.Loopback) brings it back through the cable, with the
// wire's faults, taps and timing.
func (d *Device) SetLocalLoopback(on bool) { d.noLocalLB = !on }

// loopBack hands the n-byte frame in buf, addressed to this port, to the
// device's own receive path, and keeps buf until then (it goes back to
// the pool after). The frame occupies no wire time (its booking goes back
// to the transmit buffer) and arrives after it would have taken to
// serialize at the port's rate (an assumption: the latency of a
// ConnectX's internal loopback is not public; the receive pipeline then
// adds its own). It returns when the frame has left the transmit path.
func (d *Device) loopBack(now sim.Time, buf []byte, n int) sim.Time {
	d.tx.unsent(d, now, n)
	d.inc(CtrTxLoopback)
	var e *loopbackEvent
	if k := len(d.loopFree); k > 0 {
		e = d.loopFree[k-1]
		d.loopFree = d.loopFree[:k-1]
	} else {
		e = &loopbackEvent{d: d}
	}
	e.buf, e.n = buf, n
	if d.vport != nil {
		roce.SealFrame(e.buf[:e.n]) // built unsealed for the wire to seal (emit)
	}
	at := now
	if d.pport != nil {
		at = at.Add(d.pport.WireTime(e.n))
	}
	d.eng.At(at, e)
	return at
}

// loopbackEvent delivers a looped-back frame to the device's receive
// path. Its ICRC was computed over exactly these bytes by this device.
type loopbackEvent struct {
	d   *Device
	buf []byte
	n   int
}

func (e *loopbackEvent) Fire(now sim.Time) {
	d := e.d
	d.receive(now, e.buf[:e.n], true)
	if cap(e.buf) >= frameBufSize {
		d.frames = append(d.frames, e.buf[:frameBufSize])
	}
	e.buf = nil
	d.loopFree = append(d.loopFree, e)
}

func (d *Device) frameBuf() []byte {
	if k := len(d.frames); k > 0 {
		b := d.frames[k-1]
		d.frames = d.frames[:k-1]
		return b
	}
	// A new buffer starts frameAlign bytes past a 64-byte boundary, and
	// every later use keeps its start: the payload of an IPv4 packet
	// without extension headers (Ethernet, IPv4, UDP and BTH: 54 bytes)
	// then starts on a cache line, and both copies of its bytes (host
	// memory to frame, frame to host memory) run on whole lines.
	b := make([]byte, frameBufSize+64)
	off := (frameAlign - int(uintptr(unsafe.Pointer(&b[0])))) & 63
	return b[off : off+frameBufSize : off+frameBufSize]
}

// frameAlign is where a frame buffer starts in its 64-byte line.
const frameAlign = 64 - (roce.EthHeaderSize+roce.IPv4HeaderSize+roce.UDPHeaderSize+roce.BTHSize)%64

// frameBufSize is the size of the device's frame buffers: a 4096-byte
// payload and every header.
const frameBufSize = 4096 + 128

// emit builds d.fp with payload into buf and hands it to the port once it
// is ready: not before the QP's previous frame (packets of a QP leave in
// order) and after cost has been spent building it. It returns when the
// build started and ended and the frame length; on a build error buf goes
// back to the pool. resp marks a READ response (see responder.sent);
// depart the last packet of UC or UD WQE widx (see requester.departed).
func (d *Device) emit(q *qp, buf, payload []byte, ready sim.Time, cost sim.Duration, resp, depart bool, widx uint16) (start, end sim.Time, n int, err error) {
	start = max(ready, q.txReady)
	end = start.Add(cost)
	build := roce.BuildFrame
	if d.vport != nil {
		build = roce.BuildFrameUnsealed // the port seals it if anyone will read it (txEvent.Fire)
	}
	if n, err = build(buf, &d.fp, payload); err != nil {
		d.frames = append(d.frames, buf)
		return start, end, 0, err
	}
	q.txReady = end
	d.tx.built(d, end.Add(d.spec.Core.TxPipeline), n)
	var e *txEvent
	if k := len(d.txFree); k > 0 {
		e = d.txFree[k-1]
		d.txFree = d.txFree[:k-1]
	} else {
		e = &txEvent{d: d}
	}
	e.q, e.gen, e.resp, e.buf, e.n = q, q.txGen, resp, buf, n
	e.depart, e.widx = depart, widx
	e.ans = d.fp.BTH.Opcode.Info().Response
	// The frame leaves the port a pipeline latency after it is built:
	// latency only, the packetizer is free for the next one (see
	// CoreSpec.TxPipeline).
	if d.txq == nil {
		d.txq = d.eng.NewQueue()
	}
	d.txq.At(end.Add(d.spec.Core.TxPipeline), e)
	d.inc(CtrSentPkts)
	return start, end, n, nil
}

// qpEnt is a qpCache entry (q nil: empty).
type qpEnt struct {
	qpn uint32
	q   *qp
}

// qp is d.qps[qpn] through a small cache: the doorbell, WQE and receive
// paths look their QP up on every WQE and packet. Only DestroyQP takes a
// QP out of d.qps, and it empties the cache.
func (d *Device) qp(qpn uint32) *qp {
	c := &d.qpCache[qpn&3]
	if c.q != nil && c.qpn == qpn {
		return c.q
	}
	q := d.qps[qpn]
	if q != nil {
		*c = qpEnt{qpn: qpn, q: q}
	}
	return q
}
