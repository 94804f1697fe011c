package serve

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/softnic/softnic/device"
	"github.com/softnic/softnic/profile"
	"github.com/softnic/softnic/shm"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/trace"
	"github.com/softnic/softnic/wire"
)

// Config is a daemon's shape.
type Config struct {
	Socket  string          // path of the unix socket to listen on
	Devices int             // emulated NICs: softnic0 .. softnic<N-1> (default 2)
	Profile profile.Profile // device and wire model (default: profile.Default())
	// Log receives one line per attach, detach and refusal (nil: none).
	Log io.Writer
	// Trace records every device's events (nil: off).
	Trace *trace.Recorder
	// AttachTimeout bounds a new connection's wait for its ATTACH
	// message (default 5 s).
	AttachTimeout time.Duration
}

// Addresses of the daemon's devices: device i has MAC 02:53:4e:00:01:<i+1>
// and IP 192.0.2.<i+1> (TEST-NET-1, RFC 5737), the testbed's scheme.
func identity(i int) device.Identity {
	return device.Identity{Node: i, MAC: [6]byte{0x02, 0x53, 0x4e, 0x00, 0x00, byte(i + 1)},
		IP: netip.AddrFrom4([4]byte{192, 0, 2, byte(i + 1)})}
}

// MaxDevices is the most devices a daemon runs.
const MaxDevices = 64

// Daemon is a running softnic serve.
type Daemon struct {
	cfg  Config
	spec device.Spec
	ln   *net.UnixListener

	mu      sync.Mutex // the world: engine, devices, ports, slots, counters
	eng     *sim.Engine
	rec     *trace.Recorder
	links   []*wire.Link
	wireCtr trace.Counters
	slots   []*slot
	clients map[*client]struct{}
	closed  bool
	ctr     Counters
	logMu   sync.Mutex

	wg sync.WaitGroup
}

// Counters are the daemon's own counts (the devices keep theirs).
type Counters struct {
	Attaches      uint64 // clients attached
	Detaches      uint64 // clients gone (closed, killed, torn down)
	Refusals      uint64 // ATTACH refused (busy, unknown device, bad memory)
	BadMessages   uint64 // malformed socket messages answered with EPROTO
	BadRecords    uint64 // malformed ring records, skipped
	ClampedTimes  uint64 // records stamped before the engine's clock or too far after it
	UverbsErrors  uint64 // uverbs commands refused with an errno
	RingFailures  uint64 // rings that broke (bad index, sequence): client torn down
	FramesDropped uint64 // frames that reached a free device slot
}

// slot is one device name: its port on the wire and, while a client is
// attached, the device built in front of that client's memory.
type slot struct {
	idx   int
	name  string
	ident device.Identity
	port  *wire.Port
	dev   *device.Device // nil while free
	owner *client
	d     *Daemon
	dead  []*shm.Region // revoked memory of earlier owners, unmapped at Close
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
	if cfg.Socket == "" {
		return nil, errors.New("serve: no socket path")
	}
	if c, err := net.Dial("unixpacket", cfg.Socket); err == nil {
		c.Close()
		return nil, fmt.Errorf("serve: %s: a daemon is already listening there", cfg.Socket)
	}
	if fi, err := os.Lstat(cfg.Socket); err == nil && fi.Mode()&os.ModeSocket != 0 {
		os.Remove(cfg.Socket) // stale
	}
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: cfg.Socket, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("serve: listen: %w", err)
	}
	d := &Daemon{cfg: cfg, spec: cfg.Profile.Device, ln: ln, eng: sim.NewEngine(), rec: cfg.Trace, clients: map[*client]struct{}{}}
	for i := 0; i < cfg.Devices; i++ {
		d.slots = append(d.slots, &slot{idx: i, name: fmt.Sprintf("softnic%d", i), ident: identity(i), d: d})
	}
	// Back to back in pairs (0-1, 2-3, ...); an odd last device is cabled
	// to itself.
	for i := 0; i < cfg.Devices; i += 2 {
		if i+1 < cfg.Devices {
			l := wire.NewLink(d.eng, cfg.Profile.Wire, d.rec, &d.wireCtr, nil)
			d.links = append(d.links, l)
			d.slots[i].port, d.slots[i+1].port = l.A(), l.B()
		} else {
			l := wire.NewLoopback(d.eng, cfg.Profile.Wire, d.rec, &d.wireCtr, nil)
			d.links = append(d.links, l)
			d.slots[i].port = l.A()
		}
	}
	for _, s := range d.slots {
		s.port.Attach(s.idx, s)
	}
	return d, nil
}

// Addr is the socket path.
func (d *Daemon) Addr() string { return d.cfg.Socket }

// Serve accepts clients until Close. It returns nil after Close.
func (d *Daemon) Serve() error {
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
			return fmt.Errorf("serve: accept: %w", err)
		}
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			d.handle(c)
		}()
	}
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
	cs := make([]*client, 0, len(d.clients))
	for c := range d.clients {
		cs = append(cs, c)
	}
	d.mu.Unlock()
	err := d.ln.Close()
	for _, c := range cs {
		c.conn.Close() // its socket goroutine tears it down
	}
	d.wg.Wait()
	for _, s := range d.slots {
		for _, r := range s.dead {
			r.Close()
		}
		s.dead = nil
	}
	os.Remove(d.cfg.Socket)
	return err
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
	fmt.Fprintf(d.cfg.Log, "softnic serve: "+format+"\n", args...)
}

// neighbour resolves a GID of one of the daemon's devices to its MAC.
func (d *Daemon) neighbour(gid [16]byte) ([6]byte, bool) {
	for _, s := range d.slots {
		if s.ident.IP.As16() == gid {
			return s.ident.MAC, true
		}
	}
	return [6]byte{}, false
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

// Identity is the MAC and IP of the daemon's device softnic<i>.
func Identity(i int) device.Identity { return identity(i) }
