package provider

import (
	"errors"
	"fmt"
	"math/bits"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/softnic/softnic/attach"
	"github.com/softnic/softnic/host"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/mmioring"
	"github.com/softnic/softnic/pcie"
	"github.com/softnic/softnic/shm"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/uverbs"
)

// SocketEnv is the environment variable naming the daemon's socket when
// DialOptions.Socket is empty.
const SocketEnv = "SOFTNIC_SOCKET"

// DialOptions shape a context on a device served by softnic serve.
type DialOptions struct {
	// Socket is the daemon's unix socket (default: $SOFTNIC_SOCKET).
	Socket string
	// MemSize is the host memory the context allocates its rings and
	// buffers from (default 32 MiB, rounded up to 4 KiB): a memfd of this
	// process, which the daemon maps.
	MemSize int
	// MemBase is the IOVA of its first byte (default DefaultMemBase(n) for
	// device softnic<n>, the in-process testbed's addresses, so that traces
	// match).
	MemBase uint64
	// RingSlots is the MMIO ring's capacity (default 4096).
	RingSlots int
	// Host is the host CPU model's costs (default host.DefaultConfig()); the
	// BAR layout always comes from the daemon.
	Host *host.Config
	// NewCPU, if set, builds the host CPU (to record its stages into a
	// trace, say) instead of host.New(clk, nil, nil, node, port, cfg).
	NewCPU func(clk host.Clock, node int, port pcie.BARPort, cfg host.Config) *host.CPU
	// Clock is the host clock (default: one of the context's own).
	// Contexts a single thread drives together share one, as in one
	// process the application's thread has one clock for all its devices;
	// they must then be used from one goroutine.
	Clock *HostClock
	// Timeout bounds every exchange with the daemon (default 1 s): a dead
	// or wedged daemon makes calls fail with ErrDeviceGone after at most
	// this long, never hang.
	Timeout time.Duration
}

// DefaultMemBase is the default IOVA of softnic<n>'s host memory.
func DefaultMemBase(n int) uint64 { return 0x7f0000000000 + uint64(n)*0x8000000000 }

// Dial opens device name (softnic0, softnic1, ...) served by the softnic
// daemon (package serve): it creates the host memory and the MMIO ring as
// memfds of this process, attaches with them, and returns a context whose
// datapath is the same as in one process — WQEs, doorbell records and
// CQEs in this process's memory, MMIO through a host CPU model whose
// posted writes travel as records of the ring, control as uverbs bytes on
// the socket. Errors of the daemon's refusal carry its errno (errors.Is
// with syscall.EBUSY, ENODEV, ...).
func Dial(name string, o DialOptions) (*Context, error) {
	const op = "dial"
	if o.Socket == "" {
		o.Socket = os.Getenv(SocketEnv)
	}
	if o.Socket == "" {
		return nil, opErr(op, 0, detail(ErrInvalidArg, "no daemon socket: give one or set %s", SocketEnv))
	}
	if len(o.Socket) > attach.MaxSocketPath {
		return nil, opErr(op, 0, detail(ErrInvalidArg, "socket path of %d bytes: a unix socket's holds at most %d bytes", len(o.Socket), attach.MaxSocketPath))
	}
	if o.MemSize == 0 {
		o.MemSize = 32 << 20
	}
	if o.RingSlots == 0 {
		o.RingSlots = 4096
	}
	if o.Timeout <= 0 {
		o.Timeout = time.Second
	}
	if o.Host != nil {
		// The caller's costs; the layout is the daemon's (checked at ATTACHED).
		cfg := *o.Host
		cfg.Layout = host.Layout{}
		if err := cfg.Validate(); err != nil {
			return nil, opErr(op, 0, detail(ErrInvalidArg, "%v", err))
		}
	}
	if o.MemBase == 0 {
		n, err := strconv.ParseUint(strings.TrimPrefix(name, "softnic"), 10, 8)
		if err != nil {
			n = 0 // not softnic<0..255>: any base will do
		}
		o.MemBase = DefaultMemBase(int(n))
	}
	l, err := dialLink(name, o)
	if err != nil {
		return nil, opErr(op, 0, err)
	}
	ctx, err := Open(Device{Name: name, Control: l, MMIO: l.cpu, Mem: l.mem})
	if err != nil {
		l.Close()
		return nil, err
	}
	return ctx, nil
}

// daemonLink is the control side of a dialled context: the uverbs control
// over the socket, the sim side (events, CQ moderation, counters), the
// ring's calls (progress, sync) and the host clock.
type daemonLink struct {
	*UverbsControl
	name    string
	timeout time.Duration
	conn    *attach.Conn
	mem     *shm.Region
	rmem    *shm.Region
	ring    *mmioring.Ring
	prod    *mmioring.Producer
	cpu     *host.CPU
	clk     *HostClock
	synced  sim.Time // the host clock when the daemon last confirmed it ran to it
	node    int
	seq     uint32
	buf     []byte
	err     error // sticky: the daemon is gone
	pending bool  // records pushed since the last call: Sync must ask
	notify  func(ch uint32)
	// unread counts, per channel (0: the async queue), the events the
	// daemon said it queued and this side has not read: a read of a
	// channel with none is answered here, without a round trip.
	unread  map[uint32]int
	closeMu sync.Mutex
	closed  bool
}

func dialLink(name string, o DialOptions) (*daemonLink, error) {
	mem, err := shm.New("softnic-"+name, o.MemSize, o.MemBase)
	if err != nil {
		return nil, detail(ErrNoMemory, "host memory: %v", err)
	}
	if mem.Fd() < 0 {
		mem.Close()
		return nil, detail(ErrNotSupported, "no memfd for host memory: it could not be shared with the daemon")
	}
	rsize := mmioring.Size(o.RingSlots)
	rmem, err := shm.New("softnic-ring-"+name, rsize, 0)
	if err != nil || rmem.Fd() < 0 {
		mem.Close()
		if rmem != nil {
			rmem.Close()
		}
		return nil, detail(ErrNoMemory, "MMIO ring: %v", err)
	}
	ring, err := mmioring.Init(rmem.Bytes(), o.RingSlots)
	if err != nil {
		mem.Close()
		rmem.Close()
		return nil, detail(ErrInvalidArg, "MMIO ring: %v", err)
	}
	conn, err := attach.Dial(o.Socket, o.Timeout)
	if err != nil {
		mem.Close()
		rmem.Close()
		return nil, fmt.Errorf("%w: no softnic daemon answers on %s: %w", ErrDeviceGone, o.Socket, err)
	}
	l := &daemonLink{unread: map[uint32]int{}, name: name, timeout: o.Timeout, conn: conn, mem: mem, rmem: rmem, ring: ring, prod: ring.Producer(),
		buf: make([]byte, 0, attach.MaxPayload)}
	fail := func(err error) (*daemonLink, error) {
		conn.Close()
		mem.Close()
		rmem.Close()
		return nil, err
	}
	req := attach.AttachReq{Version: attach.Version, Device: name, MemBase: mem.Base(), MemSize: uint64(mem.Size()),
		RingSize: uint64(rsize)}
	p, err := req.Encode(nil)
	if err != nil {
		return fail(detail(ErrInvalidArg, "%v", err))
	}
	conn.SetDeadline(time.Now().Add(o.Timeout))
	if err := conn.Send(attach.TAttach, 0, p, mem.Fd(), rmem.Fd()); err != nil {
		return fail(fmt.Errorf("%w: attach: %w", ErrDeviceGone, err))
	}
	h, rp, fds, err := conn.Recv()
	closeFDs(fds)
	if errors.Is(err, syscall.ECONNRESET) {
		// A daemon that refuses a connection before reading its ATTACH
		// (too many waiting to attach) sends its ERROR and closes: the
		// reset comes first, the ERROR is still queued behind it.
		h2, rp2, fds2, err2 := conn.Recv()
		closeFDs(fds2)
		if err2 == nil && h2.Type == attach.TError {
			h, rp, err = h2, rp2, nil
		}
	}
	if err != nil {
		return fail(fmt.Errorf("%w: attach: %w", ErrDeviceGone, err))
	}
	switch h.Type {
	case attach.TAttached:
	case attach.TError:
		em, err := attach.DecodeError(rp)
		if err != nil {
			return fail(fmt.Errorf("%w: attach: %w", ErrDeviceGone, err))
		}
		return fail(fmt.Errorf("%w: attach %s: %w", ErrnoSentinel("ATTACH", em.Errno), name, &em))
	default:
		return fail(fmt.Errorf("%w: attach: answered with %v", ErrDeviceGone, h.Type))
	}
	ar, err := attach.DecodeAttachResp(rp)
	if err != nil {
		return fail(fmt.Errorf("%w: attach: %w", ErrDeviceGone, err))
	}
	l.node = int(ar.Node)
	l.clk = o.Clock
	if l.clk == nil {
		l.clk = NewHostClock()
	}
	l.clk.catchUp(sim.Time(ar.Now))
	l.synced = l.clk.now
	cfg := host.DefaultConfig()
	if o.Host != nil {
		cfg = *o.Host
	}
	cfg.Layout = host.Layout{FirstUAR: ar.FirstUAR, NumUARs: int(ar.NumUARs), BFRegSize: int(ar.BFRegSize)}
	cfg.UARNonCached = ar.UARNonCached
	if err := cfg.Validate(); err != nil {
		// A layout the wire format carries but no host can have (a bfreg
		// size other than 0, 128, 256, 512): host.New would panic on it.
		return fail(fmt.Errorf("%w: attach: %w: ATTACHED layout: %v", ErrDeviceGone, attach.ErrProtocol, err))
	}
	port := ringPort{l}
	if o.NewCPU != nil {
		l.cpu = o.NewCPU(l.clk, l.node, port, cfg)
	} else {
		l.cpu = host.New(l.clk, nil, nil, l.node, port, cfg)
	}
	l.UverbsControl = NewUverbsControl(socketTransport{l})
	return l, nil
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		syscall.Close(fd)
	}
}

// gone records the daemon's death (the first error) and returns it.
func (l *daemonLink) gone(what string, err error) error {
	if l.err == nil {
		l.err = fmt.Errorf("%w: softnic daemon (%s): %s: %w", ErrDeviceGone, l.name, what, err)
	}
	return l.err
}

// Err is non-nil once the daemon is gone (Context checks it).
func (l *daemonLink) Err() error { return l.err }

// call is one ring call at the host's time; rec carries its arguments
// (Off, and for OpStepCQ QPN and Flow).
func (l *daemonLink) call(op uint64, rec mmioring.Record) (mmioring.Reply, error) {
	if l.err != nil {
		return mmioring.Reply{}, l.err
	}
	rec.Time = int64(l.clk.now)
	r, err := l.prod.CallRecord(rec, op, time.Now().Add(l.timeout))
	if err != nil {
		return r, l.gone("ring call", err)
	}
	if r.Status != 0 {
		return r, fmt.Errorf("%w: ring call %d refused with errno %d", ErrInvalidArg, op, r.Status)
	}
	l.clk.catchUp(sim.Time(r.Time))
	l.synced, l.pending = l.clk.now, false
	return r, nil
}

// Sync brings the device up to the host's clock, so that what this
// process reads of its own memory (CQEs) is what the device had written
// by then.
func (l *daemonLink) Sync() error {
	if !l.pending && l.clk.now <= l.synced && l.err == nil {
		return nil
	}
	_, err := l.call(attach.OpSync, mmioring.Record{})
	return err
}

// step is a step call; it delivers the event notifications the daemon
// reports and says whether anything ran.
func (l *daemonLink) step(op uint64, rec mmioring.Record) bool {
	r, err := l.call(op, rec)
	if err != nil {
		return false
	}
	if r.Value&attach.StepEvents != 0 {
		l.deliverNotifications()
	}
	return r.Value&attach.StepRan != 0
}

// Progress is mlx5.Progressor: one step of the daemon's engine (not past
// the host's own next timer, which then fires here).
func (l *daemonLink) Progress() bool {
	return l.step(attach.OpStep, mmioring.Record{Off: uint64(l.clk.next())})
}

// ProgressCQ runs the daemon until the CQE at addr is software's for
// consumer index ci (or it idles, or the host's next timer is due), in one
// round trip: the poll loop Poll runs in one process, step for step.
func (l *daemonLink) ProgressCQ(addr uint64, ci, nent uint32) bool {
	shift := uint64(bits.TrailingZeros32(nent))
	return l.step(attach.OpStepCQ|shift<<32, mmioring.Record{Off: addr, QPN: ci, Flow: uint64(l.clk.next())})
}

// VirtualNow is mlx5.VirtualClock: the host's clock.
func (l *daemonLink) VirtualNow() time.Duration { return time.Duration(l.clk.now / 1000) }

// request sends one socket request after a sync and returns its response.
func (l *daemonLink) request(t attach.Type, p []byte) ([]byte, error) {
	if err := l.Sync(); err != nil {
		return nil, err
	}
	l.seq++
	l.conn.SetDeadline(time.Now().Add(l.timeout + attach.CommandWait))
	if err := l.conn.Send(t, l.seq, p); err != nil {
		return nil, l.gone(t.String(), err)
	}
	h, rp, fds, err := l.conn.Recv()
	closeFDs(fds)
	if err != nil {
		return nil, l.gone(t.String(), err)
	}
	if h.Seq != l.seq {
		return nil, l.gone(t.String(), fmt.Errorf("response %d to request %d", h.Seq, l.seq))
	}
	switch h.Type {
	case t + 1: // the response type follows the request's
		return rp, nil
	case attach.TError:
		em, err := attach.DecodeError(rp)
		if err != nil {
			return nil, l.gone(t.String(), err)
		}
		return nil, &em
	}
	return nil, l.gone(t.String(), fmt.Errorf("answered with %v", h.Type))
}

// socketTransport carries UverbsControl's commands (Transport).
type socketTransport struct{ l *daemonLink }

func (s socketTransport) Do(req, resp []byte) (int, error) {
	rp, err := s.l.request(attach.TUverbs, req)
	if err != nil {
		var em *attach.ErrorMsg
		if errors.As(err, &em) { // a refusal: the same error as in one process
			return 0, &uverbs.Error{Errno: em.Errno, Reason: em.Reason}
		}
		return 0, err
	}
	return copy(resp, rp), nil
}

// sim runs one Sim op.
func (l *daemonLink) sim(op attach.SimOp, args ...uint32) ([]byte, error) {
	rp, err := l.request(attach.TSim, attach.EncodeSim(l.buf[:0], op, args...))
	if err != nil {
		var em *attach.ErrorMsg
		if errors.As(err, &em) {
			return nil, fmt.Errorf("%w: %v: %w", ErrnoSentinel(op.String(), em.Errno), op, em)
		}
		return nil, err
	}
	return rp, nil
}

func (l *daemonLink) simU32(op attach.SimOp, args ...uint32) (uint32, error) {
	rp, err := l.sim(op, args...)
	if err != nil {
		return 0, err
	}
	w, err := attach.U32s(rp, 0)
	if err != nil {
		return 0, l.gone(op.String(), err)
	}
	return w[0], nil
}

func (l *daemonLink) simNone(op attach.SimOp, args ...uint32) error {
	rp, err := l.sim(op, args...)
	if err == nil && len(rp) != 0 {
		return l.gone(op.String(), fmt.Errorf("%d unexpected bytes", len(rp)))
	}
	return err
}

// ---- mlx5.EventControl, mlx5.CQControl, CounterSource ----

func (l *daemonLink) CreateCompChannel() (uint32, error) {
	return l.simU32(attach.SimCreateCompChannel)
}
func (l *daemonLink) DestroyCompChannel(ch uint32) error {
	return l.simNone(attach.SimDestroyCompChannel, ch)
}
func (l *daemonLink) AttachCQ(cqn, ch uint32) error { return l.simNone(attach.SimAttachCQ, cqn, ch) }

// read accounts for a read of n events of ch out of asked.
func (l *daemonLink) read(ch uint32, n, asked int) {
	if l.unread[ch] -= n; n < asked || l.unread[ch] < 0 {
		l.unread[ch] = 0 // the daemon had fewer (a destroyed CQ's events)
	}
}

func (l *daemonLink) ReadCompEvents(ch uint32, out []mlx5.CompEvent) (int, error) {
	if l.unread[ch] == 0 && l.err == nil {
		return 0, nil
	}
	asked := min(len(out), attach.MaxEvents)
	rp, err := l.sim(attach.SimReadCompEvents, ch, uint32(asked))
	if err != nil {
		return 0, err
	}
	w, err := attach.U32s(rp, 1)
	if err != nil || len(w) > len(out) {
		return 0, l.gone("READ_COMP_EVENTS", fmt.Errorf("bad result: %v", err))
	}
	for i, cqn := range w {
		out[i] = mlx5.CompEvent{CQN: cqn}
	}
	l.read(ch, len(w), asked)
	return len(w), nil
}

func (l *daemonLink) ReadAsyncEvents(out []mlx5.AsyncEvent) int {
	if l.unread[0] == 0 {
		return 0
	}
	asked := min(len(out), attach.MaxEvents)
	rp, err := l.sim(attach.SimReadAsyncEvents, uint32(asked))
	if err != nil {
		return 0
	}
	w, err := attach.U32s(rp, 2)
	if err != nil || len(w)/2 > len(out) {
		l.gone("READ_ASYNC_EVENTS", fmt.Errorf("bad result: %v", err))
		return 0
	}
	for i := 0; i < len(w)/2; i++ {
		out[i] = mlx5.AsyncEvent{Type: mlx5.EventType(w[2*i]), Num: w[2*i+1]}
	}
	l.read(0, len(w)/2, asked)
	return len(w) / 2
}

func (l *daemonLink) PendingEvents(ch uint32) int {
	n, err := l.simU32(attach.SimPendingEvents, ch)
	if err != nil {
		return 0
	}
	l.unread[ch] = int(n)
	return int(n)
}

// SetEventNotify installs f, called for each event the daemon queued,
// when a step reports some (the daemon keeps the channel numbers).
func (l *daemonLink) SetEventNotify(f func(ch uint32)) { l.notify = f }

func (l *daemonLink) deliverNotifications() {
	rp, err := l.sim(attach.SimNotified)
	if err != nil {
		return
	}
	w, err := attach.U32s(rp, 1)
	if err != nil {
		l.gone("NOTIFIED", err)
		return
	}
	for _, ch := range w {
		l.unread[ch]++
	}
	if l.notify != nil {
		for _, ch := range w {
			l.notify(ch)
		}
	}
}

func (l *daemonLink) ModifyCQ(c mlx5.ModifyCQCmd) error {
	return l.simNone(attach.SimModifyCQ, c.CQN, uint32(c.Count), uint32(c.Period))
}

func (l *daemonLink) ResizeCQ(c mlx5.ResizeCQCmd) error {
	return l.simNone(attach.SimResizeCQ, c.CQN, uint32(c.Entries), uint32(c.CQESize), uint32(c.BufAddr), uint32(c.BufAddr>>32))
}

// HWCounters is CounterSource: the device's counters, as sysfs shows them.
func (l *daemonLink) HWCounters() map[string]uint64 {
	rp, err := l.sim(attach.SimCounters)
	m := map[string]uint64{}
	if err != nil {
		return m
	}
	for _, line := range strings.Split(string(rp), "\n") {
		k, v, ok := strings.Cut(line, " ")
		if n, err := strconv.ParseUint(v, 10, 64); ok && err == nil {
			m[k] = n
		}
	}
	return m
}

// Close detaches: it sends DETACH and waits for the daemon to answer that
// it has torn the device's objects down and freed the device, so that a
// Dial of the same device right after Close finds it free, whatever the
// daemon's goroutines are doing; then the socket closes and the memory
// and the ring are unmapped here. The wait is a request's (the timeout
// and attach.CommandWait): a daemon that misses it fails Close with
// ErrDeviceGone (its teardown then follows the socket's close). A daemon
// from before DETACH answers EPROTO; the socket's close then detaches, as
// it did.
func (l *daemonLink) Close() error {
	l.closeMu.Lock()
	defer l.closeMu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	err := l.detach()
	l.prod.Close()
	l.conn.Close()
	l.rmem.Close()
	// l.mem is the context's memory: it is unmapped last, after the
	// context has destroyed its objects (Context.Close calls Close last).
	if e := l.mem.Close(); err == nil {
		err = e
	}
	return err
}

// detach is the DETACH exchange of Close.
func (l *daemonLink) detach() error {
	if l.err != nil {
		return nil // the daemon is gone, and the device with it
	}
	rp, err := l.request(attach.TDetach, nil)
	var em *attach.ErrorMsg
	switch {
	case errors.As(err, &em) && em.Errno == syscall.EPROTO:
		return nil // a daemon that does not know DETACH
	case err != nil:
		return err
	case len(rp) != 0:
		return l.gone("DETACH", fmt.Errorf("%d unexpected bytes", len(rp)))
	}
	return nil
}

// ---- the MMIO port ----

// ringPort is the host CPU's BAR port: each posted write becomes a ring
// record stamped with the host's time.
type ringPort struct{ l *daemonLink }

var _ pcie.FlowPort = ringPort{}

func (p ringPort) PostedWrite(t sim.Time, off uint64, b []byte) { p.PostedWriteFlow(t, off, b, 0, 0) }

func (p ringPort) PostedWriteFlow(t sim.Time, off uint64, b []byte, qpn uint32, flow uint64) {
	l := p.l
	if l.err != nil {
		return // the daemon is gone: the store goes nowhere, as to a dead device
	}
	var rec mmioring.Record
	switch {
	case (len(b) == 4 || len(b) == 8) && off%uint64(len(b)) == 0:
		rec = mmioring.Record{Off: off, Time: int64(t), Width: uint8(len(b))}
		copy(rec.Data[:], b)
	case len(b) > 0 && len(b) <= 64 && int(off&63)+len(b) <= 64:
		o := off & 63
		rec = mmioring.Record{Off: off &^ 63, Time: int64(t), Width: 64}
		copy(rec.Data[o:], b)
		if len(b) == 64 {
			rec.Mask = mmioring.FullMask
		} else {
			rec.Mask = (uint64(1)<<uint(len(b)) - 1) << o
		}
	default:
		return // the host CPU never emits such a write
	}
	rec.QPN, rec.Flow = qpn, flow
	if err := l.prod.Push(&rec, time.Now().Add(l.timeout)); err != nil {
		l.gone("MMIO ring", err)
		return
	}
	l.pending = true
}

func (p ringPort) Read32(t sim.Time, off uint64) (uint32, sim.Time) {
	r, err := p.l.call(attach.OpRead32, mmioring.Record{Off: off})
	if err != nil {
		return ^uint32(0), t // a dead device reads all ones, as on PCIe
	}
	return uint32(r.Value), sim.Time(r.Time)
}

// ---- the host clock ----

// HostClock is the host clock of dialled contexts (host.Clock): it moves
// with the provider's own work and stores, and catches up with the
// daemon's clock when a call returns it; it never moves backwards. Host
// timers (the WC buffer's self-drain) fire here, in time order, as the
// clock passes them. Not safe for concurrent use.
type HostClock struct {
	now    sim.Time
	timers []clockTimer
	seq    uint64
}

type clockTimer struct {
	at  sim.Time
	seq uint64
	h   sim.Handler
}

// NewHostClock returns a clock at time 0 (a context's attach moves it to
// the daemon's time).
func NewHostClock() *HostClock { return &HostClock{} }

// Now is the host's time.
func (c *HostClock) Now() sim.Time { return c.now }

// Advance spends d of host time, firing the host timers due meanwhile.
func (c *HostClock) Advance(d sim.Duration) { c.runTo(c.now.Add(d)) }

// At schedules a host timer.
func (c *HostClock) At(t sim.Time, h sim.Handler) {
	c.seq++
	tm := clockTimer{at: t, seq: c.seq, h: h}
	i := len(c.timers)
	for i > 0 && (c.timers[i-1].at > t) {
		i--
	}
	c.timers = append(c.timers, clockTimer{})
	copy(c.timers[i+1:], c.timers[i:])
	c.timers[i] = tm
}

// runTo fires the timers due by t, then sets the clock to t.
func (c *HostClock) runTo(t sim.Time) {
	for len(c.timers) > 0 && c.timers[0].at <= t {
		tm := c.timers[0]
		// Shift down rather than reslice, so that the slice keeps its
		// capacity and At does not allocate (a few timers at most).
		n := copy(c.timers, c.timers[1:])
		c.timers[n] = clockTimer{}
		c.timers = c.timers[:n]
		if tm.at > c.now {
			c.now = tm.at
		}
		tm.h.Fire(c.now)
	}
	if t > c.now {
		c.now = t
	}
}

// catchUp moves the clock to the daemon's time if that is later.
func (c *HostClock) catchUp(t sim.Time) {
	if t > c.now {
		c.runTo(t)
	}
}

// next is the earliest host timer, or 0 if none is set.
func (c *HostClock) next() sim.Time {
	if len(c.timers) == 0 {
		return 0
	}
	return c.timers[0].at
}
