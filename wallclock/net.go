package wallclock

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/softnic/softnic/device"
	"github.com/softnic/softnic/ethport"
	"github.com/softnic/softnic/fault"
	"github.com/softnic/softnic/profile"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/shm"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/testbed"
	"github.com/softnic/softnic/trace"
	"github.com/softnic/softnic/wire"
)

// Limits of a Net.
const (
	pollSlice    = 10 * time.Millisecond // longest a single provider Poll may drive the network
	maxWarnLines = 200                   // device/port warnings echoed to Stderr
	recorderCap  = 1 << 14               // trace events kept before the recorder is reset
	memBase      = 0x7f0000000000        // IOVA of host memory (as testbed's node 0)
	memSpare     = 16 << 20              // host memory beyond MemNeed when Mem is 0
	closeLinger  = 300 * time.Millisecond
)

// Config is one emulated NIC on a real wire.
type Config struct {
	// Wire is the real transport: udp:LISTEN,PEER (one frame per datagram)
	// or tap:NAME (wire.ParseWireSpec).
	Wire string
	// Transport, if not nil, is used instead of opening Wire: an open
	// transport that the Net owns (and closes) once Open succeeds.
	Transport wire.RealTransport

	IP        netip.Addr // the port's IPv4 address; its RoCEv2 GID is ::ffff:IP
	MAC       [6]byte    // the port's MAC; zero: ethport.DefaultMAC(IP)
	Neighbors []ethport.Neighbor
	// Profile is the device model; a zero Profile is profile.Default().
	Profile profile.Profile
	// Lead is how far virtual time may run ahead of the wall clock (used
	// as given: 0 never runs ahead; DefaultLead is the usual value), at
	// most MaxLead.
	Lead time.Duration
	// Faults is applied where the port meets the real wire (wire.tx,
	// wire.rx) and at every device hook point; nil: none.
	Faults *fault.Plan
	// Check reports every mlx5 host-protocol violation the device
	// observes on Stderr.
	Check bool
	// Pcap, if not "", is a file that gets every frame sent and received
	// on the wire, stamped with the wall clock.
	Pcap string
	// MemNeed is the host memory the user's buffers need (rings and
	// doorbells come on top); Mem is the host memory to allocate (0:
	// MemNeed plus 16 MiB).
	MemNeed int
	Mem     int
	// Stderr gets device and port warnings (unless Quiet), check
	// violations and a failed capture's error; nil: discarded.
	Stderr io.Writer
	Quiet  bool
}

// Net is one emulated NIC (host memory, device, port, provider context)
// whose Ethernet port is on a real transport, paced against the wall
// clock by a Pacer of its own. All its methods are called from one
// goroutine, the one that owns the simulation.
type Net struct {
	eng    *sim.Engine
	pacer  *Pacer
	pp     *PacedPort
	rec    *trace.Recorder
	mem    *shm.Region
	dev    *device.Device
	port   *ethport.Port
	tr     wire.RealTransport
	ctx    *provider.Context
	ident  device.Identity
	prof   profile.Profile
	inj    *fault.Injector // Config.Faults, or nil
	closed bool

	sliceEnd time.Time

	pcapFile *os.File
	pcapW    *pcapgo.Writer
	pcapErr  error

	stderr io.Writer
	quiet  bool
	warned int
}

// Errors of a Net's waits.
var (
	// ErrTimeout is wrapped by every wait that gives up.
	ErrTimeout = errors.New("timed out")
	// ErrTransportClosed is returned when the transport stopped delivering.
	ErrTransportClosed = errors.New("the transport closed (socket or TAP device gone)")
	// ErrConfig is wrapped by Open's errors about the Config itself.
	ErrConfig = errors.New("wallclock: bad config")
)

// control is the control channel the provider sees: the device itself,
// except that Progress pumps the real network (see the time policy).
type control struct {
	*device.Device
	n *Net
}

// Progress implements mlx5.Progressor for the provider's Poll.
func (c control) Progress() bool { return c.n.progress() }

// openProvider opens the provider on dev, its control channel ctl and
// host memory mem: the one place that says how the provider reaches the
// device's BAR.
func (n *Net) openProvider(ctl control) (*provider.Context, error) {
	cpu := testbed.NewCPU(n.eng, n.rec, n.dev, n.prof.Host())
	if n.inj != nil {
		cpu.SetFaults(n.inj)
	}
	return provider.Open(provider.Device{Name: "softnic0", Control: ctl, MMIO: cpu, Mem: n.mem})
}

// Open builds the NIC of cfg and opens its transport.
func Open(cfg Config) (*Net, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	tr := cfg.Transport
	if tr == nil {
		if cfg.Wire == "" {
			return nil, fmt.Errorf("%w: no wire (udp:LISTEN,PEER or tap:NAME)", ErrConfig)
		}
		spec, err := wire.ParseWireSpec(cfg.Wire)
		if err != nil {
			return nil, err
		}
		if tr, err = wire.OpenReal(spec); err != nil {
			return nil, err
		}
	}
	n, err := build(cfg, tr)
	if err != nil {
		if cfg.Transport == nil {
			tr.Close()
		}
		return nil, err
	}
	return n, nil
}

// check validates what Open can tell from cfg alone.
func (cfg *Config) check() error {
	switch {
	case !cfg.IP.Is4():
		return fmt.Errorf("%w: IP %v is not an IPv4 address", ErrConfig, cfg.IP)
	case cfg.Lead < 0:
		return fmt.Errorf("%w: lead %v is negative", ErrConfig, cfg.Lead)
	case cfg.Lead > MaxLead:
		return fmt.Errorf("%w: lead %v: at most %v (timers due within the lead fire at once, before the peer can answer)", ErrConfig, cfg.Lead, MaxLead)
	case cfg.Mem != 0 && cfg.Mem < cfg.MemNeed:
		return fmt.Errorf("%w: %d bytes of memory is less than the %d the buffers need", ErrConfig, cfg.Mem, cfg.MemNeed)
	}
	// The NIC on a real wire is the only node, node 0 (the peer is not
	// one): a rule for another node could never fire, and the run would
	// end as if the workload had not reached it (testbed refuses such a
	// rule the same way).
	if cfg.Faults != nil {
		for i := range cfg.Faults.Rules {
			r := &cfg.Faults.Rules[i]
			if n := r.Match.Node; n != nil && *n != 0 {
				return fmt.Errorf("%w: %w: rule %d (%s): match.node %d, but the NIC on a real wire is node 0 (its peer is no node here): the rule would never fire",
					ErrConfig, fault.ErrInvalidPlan, i, r.String(), *n)
			}
		}
	}
	return nil
}

// build assembles host memory, the device, the port and the provider
// around an open transport; on failure it leaves tr open.
func build(cfg Config, tr wire.RealTransport) (*Net, error) {
	mac := cfg.MAC
	if mac == ([6]byte{}) {
		mac = ethport.DefaultMAC(cfg.IP)
	}
	prof := cfg.Profile
	if prof.Name == "" {
		prof = profile.Default()
	}
	stderr := cfg.Stderr
	if stderr == nil {
		stderr = io.Discard
	}
	memSize := cfg.Mem
	if memSize == 0 {
		memSize = cfg.MemNeed + memSpare
	}
	var faulty *wire.FaultyTransport
	n := &Net{eng: sim.NewEngine(), rec: trace.NewRecorder(), stderr: stderr, quiet: cfg.Quiet,
		ident: device.Identity{Node: 0, MAC: mac, IP: cfg.IP}, prof: prof}
	if cfg.Faults != nil {
		n.inj = fault.NewInjector(cfg.Faults)
		faulty = wire.NewFaultyTransport(tr, n.inj, 0)
		tr = faulty
	}
	n.tr = tr
	n.rec.Sinks = append(n.rec.Sinks, n.echoWarning)
	fail := func(err error) (*Net, error) {
		n.tr = nil // the caller closes it (the fault wrapper holds nothing of its own yet)
		n.closed = true
		n.release()
		return nil, err
	}
	var err error
	if n.mem, err = shm.New("softnic-real", memSize, memBase); err != nil {
		return fail(err)
	}
	if cfg.Pcap != "" {
		if n.pcapFile, err = os.Create(cfg.Pcap); err != nil {
			return fail(err)
		}
		n.pcapW = pcapgo.NewWriterNanos(n.pcapFile)
		if err := n.pcapW.WriteFileHeader(trace.PcapSnaplen, layers.LinkTypeEthernet); err != nil {
			return fail(err)
		}
	}
	n.dev = device.New(n.eng, prof.Device, n.ident, n.mem, n.rec)
	if n.inj != nil {
		n.dev.SetFaults(n.inj)
	}
	if cfg.Check {
		n.dev.EnableCheck(device.CheckOptions{OnViolation: func(v *device.Violation) { fmt.Fprintf(stderr, "softnic: check: %v\n", v) }})
	}
	n.port, err = ethport.New(n.eng, ethport.Config{MAC: mac, IP: cfg.IP, Static: cfg.Neighbors}, tr, n.rec)
	if err != nil {
		return fail(err)
	}
	n.port.Attach(n.dev)
	if n.pcapW != nil {
		n.port.SetTap(n.capture)
	}
	n.dev.Connect(n.port)
	if n.ctx, err = n.openProvider(control{Device: n.dev, n: n}); err != nil {
		return fail(err)
	}
	n.pacer = NewPacer(n.eng, cfg.Lead)
	n.pp = n.pacer.AddPort(n.port, tr)
	return n, nil
}

// Close releases the provider context, the transport, the capture and host
// memory. A NIC does not vanish when its program is done: first the device
// keeps running for a moment (at most 300 ms, see Linger), so that the ACK
// of the peer's last message still leaves, a retransmission is still
// answered, and work in flight finishes (a ConnectX ACKs in hardware;
// without this the peer of a finished rc_pingpong saw retry-exceeded).
// Later calls do nothing.
func (n *Net) Close() {
	if n.closed {
		return
	}
	if !n.pp.Closed() {
		n.Linger(closeLinger)
	}
	n.closed = true
	n.release()
}

// release frees what build made.
func (n *Net) release() {
	if n.ctx != nil {
		_ = n.ctx.Close()
		n.ctx = nil
	}
	if n.tr != nil {
		_ = n.tr.Close()
		n.tr = nil
	}
	if n.pcapFile != nil {
		if err := n.pcapFile.Close(); err != nil && n.pcapErr == nil {
			n.pcapErr = err
		}
		if n.pcapErr != nil {
			fmt.Fprintln(n.stderr, "softnic: the capture is incomplete:", n.pcapErr)
		}
		n.pcapFile = nil
	}
	if n.mem != nil {
		_ = n.mem.Close()
		n.mem = nil
	}
}

// Linger drives the network until the device has nothing left to do, but
// at least 30 ms (a peer's last frames may still be on their way) and at
// most max.
func (n *Net) Linger(max time.Duration) {
	start := time.Now()
	for time.Since(start) < max {
		if !n.Pump(IdleWait, drainMax) && n.eng.Pending() == 0 && time.Since(start) > 30*time.Millisecond {
			return
		}
	}
}

// Context is the provider context opened on the NIC.
func (n *Net) Context() *provider.Context { return n.ctx }

// Device is the emulated NIC.
func (n *Net) Device() *device.Device { return n.dev }

// Port is the NIC's Ethernet port.
func (n *Net) Port() *ethport.Port { return n.port }

// Engine is the NIC's engine.
func (n *Net) Engine() *sim.Engine { return n.eng }

// Pacer is the loop that paces the engine.
func (n *Net) Pacer() *Pacer { return n.pacer }

// Profile is the device profile.
func (n *Net) Profile() profile.Profile { return n.prof }

// Faults is the injector of Config.Faults, or nil.
func (n *Net) Faults() *fault.Injector { return n.inj }

// GID is the port's RoCEv2 GID.
func (n *Net) GID() [16]byte { return n.ident.IP.As16() }

// TransportClosed reports whether the transport has stopped delivering.
func (n *Net) TransportClosed() bool { return n.pp.Closed() }

// capture writes one frame to the pcap file with its wall-clock time (so the
// file lines up with captures taken elsewhere, e.g. in a guest).
func (n *Net) capture(_ sim.Time, frame []byte, _ bool) {
	if n.pcapErr != nil {
		return
	}
	ci := gopacket.CaptureInfo{Timestamp: time.Now(), CaptureLength: len(frame), Length: len(frame)}
	n.pcapErr = n.pcapW.WritePacket(ci, frame)
}

// echoWarning prints device and port warnings to stderr (trace.Recorder
// sink), so that a failed exchange names the frame that was refused.
func (n *Net) echoWarning(ev *trace.Event) {
	if ev.Level != trace.Warn || n.quiet {
		return
	}
	n.warned++
	switch {
	case n.warned <= maxWarnLines:
		fmt.Fprintf(n.stderr, "softnic: warning: %s %s: %s\n", ev.Component, ev.Name, ev.Detail)
	case n.warned == maxWarnLines+1:
		fmt.Fprintf(n.stderr, "softnic: further warnings suppressed; see the counters\n")
	}
}

// Sync runs the engine up to the wall clock; call it before posting work
// (Pacer.Sync).
func (n *Net) Sync() { n.pacer.Sync() }

// Pump is one round of the pacing loop (Pacer.Pump); the trace recorder
// is emptied when it has grown large (warnings have been echoed by then).
func (n *Net) Pump(wait time.Duration, maxSteps int) bool {
	if len(n.rec.Events()) > recorderCap {
		n.rec.Reset()
	}
	return n.pacer.Pump(wait, maxSteps)
}

// progress is the provider's Progress: one pump of at most one event, so
// that Poll sees each CQE as soon as it is written; false once idle or when
// the current Poll's time slice is over.
func (n *Net) progress() bool {
	if !n.Pump(IdleWait, 1) {
		return false
	}
	return time.Now().Before(n.sliceEnd)
}
