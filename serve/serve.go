package serve

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/softnic/softnic/attach"
	"github.com/softnic/softnic/device"
	"github.com/softnic/softnic/ethport"
	"github.com/softnic/softnic/profile"
	"github.com/softnic/softnic/shm"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/trace"
	"github.com/softnic/softnic/wallclock"
	"github.com/softnic/softnic/wire"
)

// Config is a daemon's shape.
type Config struct {
	Socket string // path of the unix socket to listen on
	// Devices is how many emulated NICs: softnic0 .. softnic<N-1>; 0 is
	// the default 2, and a negative count or more than MaxDevices is
	// refused. softnic serve refuses an explicit --devices 0 itself.
	Devices int
	Profile profile.Profile // device and wire model (default: profile.Default())
	// Log receives one line per attach, detach and refusal (nil: none);
	// refusals at most 16 a second, the rest summed up in one line.
	Log io.Writer
	// Trace records every device's events (nil: off).
	Trace *trace.Recorder
	// AttachTimeout bounds a new connection's wait for its ATTACH
	// message (default 5 s).
	AttachTimeout time.Duration
	// MaxPending bounds the connections not attached yet (waiting for
	// their ATTACH or in it); one more is closed at once and logged as a
	// refusal (default 4 x MaxDevices). Each costs the daemon a goroutine
	// and its buffers until AttachTimeout.
	MaxPending int
	// Wires cables devices to real networks: device i is on Wires[i]
	// (udp: or tap:, as softnic rdma --wire), the devices after the last
	// wire are cabled back to back among themselves. Any wire makes the
	// clock ClockWall.
	Wires []Wire
	// Clock is how virtual time moves (default ClockSim).
	Clock Clock
	// Lead is how far virtual time may run ahead of the wall clock with
	// ClockWall; 0 is wallclock.DefaultLead, and a negative one or one
	// above wallclock.MaxLead is refused.
	Lead time.Duration
}

// Clock is the daemon's time policy (docs/daemon.md, "Time across the
// boundary").
type Clock int

const (
	// ClockSim moves the engine only when a client asks: to the host time
	// of each of its records, and one step at a time while it polls. One
	// client gives the trace of one process.
	ClockSim Clock = iota
	// ClockWall is free-running: a pacer runs the engine against the wall
	// clock (package wallclock), so timers fire and frames move while
	// every client sleeps; records take effect at the wall clock's time
	// and a poll that finds nothing returns at once. For programs that do
	// not poll synchronously, and for devices on real wires.
	ClockWall
)

func (c Clock) String() string {
	switch c {
	case ClockSim:
		return "sim"
	case ClockWall:
		return "wall"
	}
	return fmt.Sprintf("Clock(%d)", int(c))
}

// ParseClock reads "sim" or "wall".
func ParseClock(s string) (Clock, error) {
	switch s {
	case "sim":
		return ClockSim, nil
	case "wall":
		return ClockWall, nil
	}
	return 0, fmt.Errorf("serve: clock %q: want sim or wall", s)
}

// Wire is one device's real network.
type Wire struct {
	// Spec is a wire.ParseWireSpec spec (udp:LISTEN,PEER or tap:NAME),
	// opened by New unless Transport is set (then Spec only labels it).
	Spec      string
	Transport wire.RealTransport
	// IP and MAC are the device's address on that network (default: the
	// daemon's scheme, Identity(i); the MAC defaults to
	// ethport.DefaultMAC(IP) when only IP is given).
	IP        netip.Addr
	MAC       [6]byte
	Neighbors []ethport.Neighbor // static neighbours; others are resolved by ARP
}

// Addresses of the daemon's devices: device i has MAC 02:53:4e:00:01:<i+1>
// and IP 192.0.2.<i+1> (TEST-NET-1, RFC 5737), the testbed's scheme.
func identity(i int) device.Identity {
	return device.Identity{Node: i, MAC: [6]byte{0x02, 0x53, 0x4e, 0x00, 0x00, byte(i + 1)},
		IP: netip.AddrFrom4([4]byte{192, 0, 2, byte(i + 1)})}
}

// MaxDevices is the most devices a daemon runs.
const MaxDevices = 64

// MaxSocketPath is the longest socket path (sockaddr_un's sun_path of 108
// bytes, NUL included).
const MaxSocketPath = attach.MaxSocketPath

// Daemon is a running softnic serve.
type Daemon struct {
	cfg  Config
	spec device.Spec
	ln   *net.UnixListener
	// sockFile is the socket file New made: Close removes the path only
	// while it is that file, not another daemon's that took the path since.
	sockFile os.FileInfo

	mu      sync.Mutex // the world: engine, devices, ports, slots, counters
	eng     *sim.Engine
	rec     *trace.Recorder
	links   []*wire.Link
	wireCtr trace.Counters
	slots   []*slot
	clients map[*client]struct{}
	// conns is every connection Serve accepted and has not finished
	// with, attached or not yet: Close closes them all, so that one that
	// never sends ATTACH does not hold the shutdown for AttachTimeout.
	conns   map[netUnixConn]struct{}
	pending int // of conns, those not attached yet (Config.MaxPending)
	closed  bool
	ctr     Counters
	logMu   sync.Mutex
	refLog  refusalLog       // under logMu
	pacer   *wallclock.Pacer // ClockWall: runs eng against the wall clock
	taken   uint64           // eng.Fired() when lock last took the world (slice)
	stop    chan struct{}    // stops the pacer's goroutine
	paced   chan struct{}    // closed when it has stopped

	wg sync.WaitGroup
}

// lock takes the world; with ClockWall it first brings the engine up to
// the wall clock, so what the caller schedules is stamped no earlier than
// now (the pacer's contract), running worldSlice events of that at most:
// an engine behind the wall clock under more load than it runs in real
// time is caught up by the pacer and every holder in turn, not by one
// holder for all (wallclock.Pacer.SyncAtMost, TestWallCatchUpBounded).
func (d *Daemon) lock() {
	d.mu.Lock()
	if d.pacer != nil {
		d.pacer.SyncAtMost(worldSlice)
	}
	d.taken = d.eng.Fired()
}

// slice bounds how long one caller drives the shared simulation with the
// world held. Called with the world held between two pieces of work (an
// engine event, a progress step, a ring record), it lets go of the world
// and takes it back once worldSlice engine events have run since lock
// took it, so that other clients waiting for the world go first.
//
// runtime.Gosched sits between the two: a bare unlock and lock lets the
// running goroutine take the mutex straight back before the waiter it
// woke is even scheduled, and sync.Mutex only hands it over once a waiter
// has starved for a millisecond, so every command of another client would
// wait that long at least, for as many slices as fit in it.
func (d *Daemon) slice() {
	if d.eng.Fired()-d.taken < worldSlice {
		return
	}
	d.unlock()
	runtime.Gosched()
	d.lock()
}

// unlock releases the world and wakes the pacer to run what was scheduled.
func (d *Daemon) unlock() {
	d.mu.Unlock()
	if d.pacer != nil {
		d.pacer.Wake()
	}
}

// Counters are the daemon's own counts (the devices keep theirs).
type Counters struct {
	Attaches uint64 // clients attached
	Detaches uint64 // clients gone (closed, killed, torn down)
	Refusals uint64 // ATTACH refused (busy, unknown device, bad memory)
	// Unattached counts connections that ended before any message
	// without being refused: closed by their peer at once (a liveness
	// check of another daemon on the same path), or by Close.
	Unattached    uint64
	LeaveWaits    uint64 // ATTACHes that waited for a departing owner's teardown
	BadMessages   uint64 // malformed socket messages answered with EPROTO
	BadRecords    uint64 // malformed ring records, skipped
	ClampedTimes  uint64 // records stamped before the engine's clock or too far after it
	UverbsErrors  uint64 // uverbs commands refused with an errno
	RingFailures  uint64 // rings that broke (bad index, sequence): client torn down
	FramesDropped uint64 // frames that reached a free device slot
	Unresolved    uint64 // modify_qp destinations ARP did not resolve on a wire
	// NotifiesDropped counts event notifications not kept for a client
	// that let more than maxNotified pile up unasked (client.notify).
	NotifiesDropped uint64
}

// slot is one device name: its port on the wire and, while a client is
// attached, the device built in front of that client's memory.
type slot struct {
	idx   int
	name  string
	ident device.Identity
	port  device.Port   // the link end the device sends on
	eth   *ethport.Port // the port on a real wire (nil: back to back)
	tr    wire.RealTransport
	dev   *device.Device // nil while free
	owner *client
	d     *Daemon
	dead  []*shm.Region // revoked memory of the last maxDead owners, unmapped at Close
}

// ReceiveFrame delivers a frame to the slot's current device, or drops it.
func (s *slot) ReceiveFrame(t sim.Time, frame []byte) {
	if s.dev == nil {
		s.d.ctr.FramesDropped++
		return
	}
	s.dev.ReceiveFrame(t, frame)
}

// New builds a daemon's devices and listens on cfg.Socket (a stale socket
// file left by a dead daemon is replaced; a live one is an error).
func New(cfg Config) (*Daemon, error) {
	if cfg.Devices == 0 {
		cfg.Devices = 2
	}
	if cfg.Devices < 1 || cfg.Devices > MaxDevices {
		return nil, fmt.Errorf("serve: %d devices (want 1 to %d)", cfg.Devices, MaxDevices)
	}
	if cfg.Profile.Name == "" {
		cfg.Profile = profile.Default()
	}
	if cfg.AttachTimeout <= 0 {
		cfg.AttachTimeout = 5 * time.Second
	}
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = 4 * MaxDevices
	}
	if cfg.Socket == "" {
		return nil, errors.New("serve: no socket path")
	}
	if len(cfg.Wires) > cfg.Devices {
		return nil, fmt.Errorf("serve: %d wires for %d devices", len(cfg.Wires), cfg.Devices)
	}
	if cfg.Clock != ClockSim && cfg.Clock != ClockWall {
		return nil, fmt.Errorf("serve: unknown %v", cfg.Clock)
	}
	if len(cfg.Wires) > 0 {
		cfg.Clock = ClockWall
	}
	switch {
	case cfg.Lead < 0:
		return nil, fmt.Errorf("serve: lead %v is negative", cfg.Lead)
	case cfg.Lead > wallclock.MaxLead:
		return nil, fmt.Errorf("serve: lead %v: at most %v (timers due within the lead fire at once)", cfg.Lead, wallclock.MaxLead)
	case cfg.Lead == 0:
		cfg.Lead = wallclock.DefaultLead
	}
	if len(cfg.Socket) > MaxSocketPath {
		return nil, fmt.Errorf("serve: socket path of %d bytes: a unix socket's path holds at most %d bytes", len(cfg.Socket), MaxSocketPath)
	}
	c, err := net.Dial("unixpacket", cfg.Socket)
	if err == nil {
		c.Close()
		return nil, fmt.Errorf("serve: %s: a daemon is already listening there", cfg.Socket)
	}
	if fi, lerr := os.Lstat(cfg.Socket); lerr == nil {
		switch {
		case fi.Mode()&os.ModeSocket == 0:
			return nil, fmt.Errorf("serve: %s exists and is not a socket (%s)", cfg.Socket, fileKind(fi.Mode()))
		case errors.Is(err, syscall.ECONNREFUSED):
			os.Remove(cfg.Socket) // stale: nobody listens on it
		default:
			// A stream or datagram socket of another program (EPROTOTYPE),
			// or one this process may not reach: not stale, not ours.
			return nil, fmt.Errorf("serve: %s: a live socket that is no daemon's is there: %w", cfg.Socket, err)
		}
	}
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: cfg.Socket, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("serve: listen: %w", err)
	}
	// Close removes the file only if it is still this one (removeSocket).
	ln.SetUnlinkOnClose(false)
	sockFile, _ := os.Lstat(cfg.Socket)
	d := &Daemon{cfg: cfg, spec: cfg.Profile.Device, ln: ln, sockFile: sockFile, eng: sim.NewEngine(), rec: cfg.Trace, clients: map[*client]struct{}{},
		conns: map[netUnixConn]struct{}{}}
	for i := 0; i < cfg.Devices; i++ {
		d.slots = append(d.slots, &slot{idx: i, name: fmt.Sprintf("softnic%d", i), ident: identity(i), d: d})
	}
	if err := d.cable(); err != nil {
		ln.Close()
		os.Remove(cfg.Socket)
		for _, s := range d.slots {
			if s.tr != nil && (s.idx >= len(cfg.Wires) || cfg.Wires[s.idx].Transport == nil) {
				s.tr.Close()
			}
		}
		return nil, err
	}
	if cfg.Clock == ClockWall {
		d.pacer = wallclock.NewPacer(d.eng, cfg.Lead)
		d.pacer.SetLocker(&d.mu)
		for _, s := range d.slots {
			if s.eth != nil {
				d.pacer.AddPort(s.eth, s.tr)
			}
		}
		d.stop, d.paced = make(chan struct{}), make(chan struct{})
		go func() {
			defer close(d.paced)
			d.pacer.Run(d.stop)
		}()
	}
	return d, nil
}

// cable connects the slots: the first len(cfg.Wires) to their real
// networks, the rest back to back in pairs (an odd last one to itself).
func (d *Daemon) cable() error {
	cfg := d.cfg
	for i, w := range cfg.Wires {
		s := d.slots[i]
		if w.IP.IsValid() {
			s.ident.IP = w.IP
			s.ident.MAC = ethport.DefaultMAC(w.IP)
		}
		if w.MAC != ([6]byte{}) {
			s.ident.MAC = w.MAC
		}
		s.tr = w.Transport
		if s.tr == nil {
			spec, err := wire.ParseWireSpec(w.Spec)
			if err != nil {
				return fmt.Errorf("serve: %s: %w", s.name, err)
			}
			tr, err := wire.OpenReal(spec)
			if err != nil {
				return fmt.Errorf("serve: %s: wire %s: %w", s.name, w.Spec, err)
			}
			s.tr = tr
		}
		eth, err := ethport.New(d.eng, ethport.Config{MAC: s.ident.MAC, IP: s.ident.IP, Node: i, Static: w.Neighbors}, s.tr, d.rec)
		if err != nil {
			return fmt.Errorf("serve: %s: %w", s.name, err)
		}
		eth.Attach(s)
		s.eth, s.port = eth, eth
	}
	for i := len(cfg.Wires); i < cfg.Devices; i += 2 {
		if i+1 < cfg.Devices {
			l := wire.NewLink(d.eng, cfg.Profile.Wire, d.rec, &d.wireCtr, nil)
			d.links = append(d.links, l)
			a, b := l.A(), l.B()
			a.Attach(i, d.slots[i])
			b.Attach(i+1, d.slots[i+1])
			d.slots[i].port, d.slots[i+1].port = a, b
		} else {
			l := wire.NewLoopback(d.eng, cfg.Profile.Wire, d.rec, &d.wireCtr, nil)
			d.links = append(d.links, l)
			a := l.A()
			a.Attach(i, d.slots[i])
			d.slots[i].port = a
		}
	}
	return nil
}

// Addr is the socket path.
func (d *Daemon) Addr() string { return d.cfg.Socket }

// Serve accepts clients until Close. It returns nil after Close.
func (d *Daemon) Serve() error {
	var backoff time.Duration
	for {
		c, err := d.ln.AcceptUnix()
		if err != nil {
			d.mu.Lock()
			closed := d.closed
			d.mu.Unlock()
			if closed {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if acceptRetry(err) {
				// Out of descriptors or memory for now (a client holding
				// many connections open): the connections that end give
				// them back, so wait and accept again rather than stop
				// serving every client (net/http does the same).
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				d.logf("accept: %v; retrying in %v", err, backoff)
				time.Sleep(backoff)
				continue
			}
			return fmt.Errorf("serve: accept: %w", err)
		}
		backoff = 0
		// Counted and recorded under the lock Close sets closed with,
		// so that Close's Wait sees every connection it must close.
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			c.Close()
			return nil
		}
		if d.pending >= d.cfg.MaxPending {
			d.ctr.Refusals++
			d.mu.Unlock()
			d.logRefusal("refused pid %d: %d connections are waiting to attach", peerPID(c), d.cfg.MaxPending)
			refuseBusy(c, d.cfg.MaxPending)
			continue
		}
		d.pending++
		d.wg.Add(1)
		d.conns[c] = struct{}{}
		d.mu.Unlock()
		go func() {
			defer d.wg.Done()
			d.handle(c)
			d.mu.Lock()
			delete(d.conns, c)
			d.mu.Unlock()
		}()
	}
}

// isClosed reports whether Close has begun.
func (d *Daemon) isClosed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.closed
}

// fileKind names the type of a file in words.
func fileKind(m os.FileMode) string {
	switch t := m.Type(); {
	case t == 0:
		return "a regular file"
	case t&os.ModeDir != 0:
		return "a directory"
	case t&os.ModeSymlink != 0:
		return "a symbolic link"
	case t&os.ModeNamedPipe != 0:
		return "a named pipe"
	case t&os.ModeCharDevice != 0:
		return "a character device"
	case t&os.ModeDevice != 0:
		return "a block device"
	default:
		return "file type " + t.String()
	}
}

// refuseBusy answers a connection over the cap of those waiting to
// attach with an ERROR (EAGAIN: the daemon is busy, try again) and closes
// it, so that the client learns why rather than meeting a closed socket.
// Its ATTACH is not read (reading could wait on a client that has not
// sent it), so the close resets the connection; the client reads the
// ERROR queued before the reset (provider.Dial does). The write goes to
// an empty socket buffer and cannot wait; the deadline is a bound all
// the same, since the accept loop runs it.
func refuseBusy(c netUnixConn, pending int) {
	conn := attach.NewConn(c)
	conn.SetDeadline(time.Now().Add(10 * time.Millisecond))
	em := attach.ErrorMsg{Errno: syscall.EAGAIN, Reason: fmt.Sprintf("daemon busy: %d connections are waiting to attach; try again", pending)}
	conn.Send(attach.TError, 0, em.Encode(nil))
	conn.Close()
}

// acceptRetry reports whether an accept error is a shortage that passes
// (descriptors, memory, a connection aborted before it was taken), not a
// broken listener.
func acceptRetry(err error) bool {
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED, syscall.EINTR} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// Close stops accepting, tears every client down (as if it had died),
// waits for their goroutines and unmaps what is left.
func (d *Daemon) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	cs := make([]netUnixConn, 0, len(d.conns))
	for c := range d.conns {
		cs = append(cs, c)
	}
	d.mu.Unlock()
	err := d.ln.Close()
	for _, c := range cs {
		// An attached client's socket goroutine tears it down; one
		// still before ATTACH (or waiting in it) is refused at once.
		c.Close()
	}
	d.wg.Wait()
	if d.cfg.Log != nil {
		d.logMu.Lock()
		d.flushRefusals()
		d.logMu.Unlock()
	}
	if d.pacer != nil {
		close(d.stop)
		d.pacer.Wake()
		<-d.paced
	}
	for i, s := range d.slots {
		if s.tr != nil && d.cfg.Wires[i].Transport == nil {
			s.tr.Close()
		}
	}
	for _, s := range d.slots {
		for _, r := range s.dead {
			r.Close()
		}
		s.dead = nil
	}
	d.removeSocket()
	return err
}

// removeSocket removes the socket file if it is still the one New made.
func (d *Daemon) removeSocket() {
	if fi, err := os.Lstat(d.cfg.Socket); err == nil && d.sockFile != nil && os.SameFile(fi, d.sockFile) {
		os.Remove(d.cfg.Socket)
	}
}

// Counters returns a snapshot of the daemon's counters.
func (d *Daemon) Counters() Counters {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ctr
}

// Device returns the device currently attached as name, or nil. The
// caller must not use it while clients run (tests read counters after).
func (d *Daemon) Device(name string) *device.Device {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range d.slots {
		if s.name == name {
			return s.dev
		}
	}
	return nil
}

// Now is the engine's clock.
func (d *Daemon) Now() sim.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.eng.Now()
}

// Clients is the number of attached clients.
func (d *Daemon) Clients() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.clients)
}

// logf writes one log line.
func (d *Daemon) logf(format string, args ...any) {
	if d.cfg.Log == nil {
		return
	}
	d.logMu.Lock()
	defer d.logMu.Unlock()
	d.flushRefusals()
	fmt.Fprintf(d.cfg.Log, "softnic serve: "+format+"\n", args...)
}

// maxRefusalLogs bounds the refusal lines logged in one refusalWindow;
// the rest are counted (Counters.Refusals) and summed up in one line when
// the next refusal is logged, or at Close. A client reconnecting in a loop
// with a bad ATTACH, or a flood past MaxPending, logged one line for each.
const (
	maxRefusalLogs = 16
	refusalWindow  = time.Second
)

// refusalLog is logRefusal's window of wall time (the daemon's log, not
// the simulation).
type refusalLog struct {
	start  time.Time
	logged int
	quiet  uint64 // refusals counted and not logged since the last line
}

// logRefusal logs an ATTACH refusal, at most maxRefusalLogs a
// refusalWindow; the first line after a quiet spell says how many
// refusals were not logged.
func (d *Daemon) logRefusal(format string, args ...any) {
	if d.cfg.Log == nil {
		return
	}
	d.logMu.Lock()
	defer d.logMu.Unlock()
	r := &d.refLog
	if now := time.Now(); now.Sub(r.start) >= refusalWindow {
		r.start, r.logged = now, 0
	}
	if r.logged >= maxRefusalLogs {
		r.quiet++
		return
	}
	r.logged++
	d.flushRefusals()
	fmt.Fprintf(d.cfg.Log, "softnic serve: "+format+"\n", args...)
}

// flushRefusals logs how many refusals were not logged; under logMu.
func (d *Daemon) flushRefusals() {
	if r := &d.refLog; r.quiet > 0 {
		fmt.Fprintf(d.cfg.Log, "softnic serve: %d more refusals not logged (over %d a second)\n", r.quiet, maxRefusalLogs)
		r.quiet = 0
	}
}

// neighbour resolves a GID of one of the daemon's back-to-back devices to
// its MAC.
func (d *Daemon) neighbour(gid [16]byte) ([6]byte, bool) {
	for _, s := range d.slots {
		if s.eth == nil && s.ident.IP.As16() == gid {
			return s.ident.MAC, true
		}
	}
	return [6]byte{}, false
}

// arpWait bounds a modify_qp's wait for ARP on a real wire (the kernel's
// resolution gives up after a few seconds too); clients allow for it.
const arpWait = attach.CommandWait

// neighbour is the slot's neighbour table, what modify_qp(RTR) resolves a
// destination GID with (called with d.mu held). Back to back it is the
// daemon's devices. On a real wire it is the port's ARP cache; a miss
// sends ARP requests and waits for the answer with the world unlocked, so
// that the pacer runs the engine meanwhile (as the kernel sleeps in
// rdma_addr_find_l2_eth_by_grh), for at most arpWait.
func (s *slot) neighbour(gid [16]byte) ([6]byte, bool) {
	d := s.d
	if s.eth == nil {
		return d.neighbour(gid)
	}
	ip := netip.AddrFrom16(gid).Unmap()
	if !ip.Is4() {
		return [6]byte{}, false
	}
	if mac, ok := s.eth.Neighbor(ip); ok {
		return mac, true
	}
	res := s.eth.Resolve(ip)
	deadline := time.Now().Add(arpWait)
	for !res.Done() && time.Now().Before(deadline) {
		d.mu.Unlock()
		d.pacer.Wake()
		time.Sleep(time.Millisecond)
		d.mu.Lock()
		d.pacer.SyncAtMost(worldSlice)
	}
	if !res.Done() || res.Err != nil {
		d.ctr.Unresolved++
		return [6]byte{}, false
	}
	return res.MAC, true
}

// slotByName finds a slot.
func (d *Daemon) slotByName(name string) *slot {
	for _, s := range d.slots {
		if s.name == name {
			return s
		}
	}
	return nil
}

// Names lists the daemon's device names, softnic0 first.
func (d *Daemon) Names() []string {
	var n []string
	for _, s := range d.slots {
		n = append(n, s.name)
	}
	return n
}

// Clock is the daemon's time policy (ClockWall whenever a device is on a
// wire).
func (d *Daemon) Clock() Clock { return d.cfg.Clock }

// Ident is the address of the daemon's device softnic<i> (its wire's, or
// Identity(i)).
func (d *Daemon) Ident(i int) device.Identity { return d.slots[i].ident }

// Identity is the MAC and IP of the daemon's device softnic<i> when it is
// cabled back to back (the default address of one on a wire).
func Identity(i int) device.Identity { return identity(i) }
