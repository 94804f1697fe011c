package testbed

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/softnic/softnic/device"
	"github.com/softnic/softnic/fault"
	"github.com/softnic/softnic/host"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/shm"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/trace"
	"github.com/softnic/softnic/uverbsdev"
	"github.com/softnic/softnic/wire"
)

// Config describes a world.
type Config struct {
	Device  device.Spec
	Host    host.Config // each node's host CPU (its BAR layout is taken from the device)
	Wire    wire.Spec
	MemSize int         // host memory per node (default 32 MiB)
	Trace   bool        // record trace events
	Faults  *fault.Plan // optional fault plan: the wire's points and every device hook point
	// DeferTimedFaults: New attaches Faults but does not arm its timed
	// rules (port, device); World.ArmTimedFaults does, and at_ps then
	// counts from the time of that call (the start of the workload)
	// instead of from the start of the simulation. Without it, connection
	// setup and any Settle before the workload run the clock to a rule
	// that is due later, and it fires before the first post.
	DeferTimedFaults bool
	// Check turns on each device's checked mode (device.EnableCheck);
	// OnViolation, if set, sees each violation as it is found.
	Check       bool
	OnViolation func(*device.Violation)
	// Loopback builds ONE host whose NIC's port is cabled to itself; both
	// endpoints of ConnectRC then live on that NIC (Hosts[1] == Hosts[0]),
	// and their frames go through the cable, local loopback off (without
	// it they loop inside the NIC: device.SetLocalLoopback).
	Loopback bool
	// UverbsControl opens each host's provider context over uverbs bytes
	// (provider.UverbsControl through an in-process uverbsdev.Server)
	// instead of the device's Go control interface (uverbs.go). The
	// environment variable SOFTNIC_TESTBED_UVERBS=1 turns it on for every
	// world, so that a whole suite can be rerun over uverbs.
	UverbsControl bool
	// HostClocks gives each host of a two-host world its own CPU clock
	// (hostclock.go) instead of the engine's: two hosts are two machines,
	// and one host's CPU work does not stop the other's. Ignored with
	// Loopback (one host).
	HostClocks bool
}

// DefaultConfig is the built-in profile: two default devices back to back.
func DefaultConfig() Config {
	return Config{Device: device.DefaultSpec(), Host: host.DefaultConfig(), Wire: wire.DefaultSpec(), MemSize: 32 << 20}
}

// Host is one node: host memory, its NIC, the CPU in front of the NIC's
// BAR0 and a provider context on them.
type Host struct {
	Node int
	// ID is the NIC's address (MAC, IP); ConnectRC and Connect give it to
	// the peer. A Host of a daemon's device (provider.Dial) has only Node,
	// ID and Ctx.
	ID  device.Identity
	Mem *shm.Region
	Dev *device.Device
	CPU *host.CPU // the provider's MMIO port (Device.MMIO)
	Ctx *provider.Context
	// Uverbs is the device end (the uverbsdev server) that Ctx's control
	// path talks to over uverbs bytes, with Config.UverbsControl or
	// SOFTNIC_TESTBED_UVERBS; nil otherwise.
	Uverbs *uverbsdev.Server
}

// World is a deterministic two-node simulation.
type World struct {
	Eng   *sim.Engine
	Rec   *trace.Recorder
	Link  *wire.Link
	Wire  trace.Counters
	Hosts [2]*Host
	// Injector is the fault injector built from Config.Faults (nil
	// without a plan): Injector.Fired says what each rule did.
	Injector *fault.Injector
	clocks   *hostClocks // Config.HostClocks; nil: the hosts run on the engine's clock
}

// HostNow is host i's CPU time: its own clock with Config.HostClocks, the
// engine's otherwise.
func (w *World) HostNow(i int) sim.Time {
	if w.clocks != nil && i < len(w.clocks.clocks) {
		return w.clocks.clocks[i].Now()
	}
	return w.Eng.Now()
}

// HostsIdle tells a world with host clocks that no host can act until
// the engine moves on (a driver about to step the engine itself because
// every host waits): each host spins, its clock following the engine's.
// Without host clocks it does nothing.
func (w *World) HostsIdle() {
	if w.clocks != nil {
		w.clocks.idle()
	}
}

// Addresses used by the two nodes. 192.0.2.0/24 is TEST-NET-1 (RFC 5737):
// the frames only ever exist inside the simulation or a capture file.
var (
	MACs = [2][6]byte{{0x02, 0x53, 0x4e, 0x00, 0x00, 0x01}, {0x02, 0x53, 0x4e, 0x00, 0x00, 0x02}}
	IPs  = [2]netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")}
)

// hostBase is the IOVA of each host's memory: fixed, so that addresses and
// traces are the same on every run.
var hostBase = [2]uint64{0x7f0000000000, 0x7f8000000000}

// checkPlanNodes refuses a plan with a rule for a node the world does not
// have: it could never fire, and the run would report "none fired" as if
// the workload had simply not reached it.
func checkPlanNodes(p *fault.Plan, nodes int) error {
	if p == nil {
		return nil
	}
	for i := range p.Rules {
		r := &p.Rules[i]
		if n := r.Match.Node; n != nil && *n >= nodes {
			return fmt.Errorf("testbed: %w: rule %d (%s): match.node %d, but this world has nodes 0..%d: the rule would never fire",
				fault.ErrInvalidPlan, i, r.String(), *n, nodes-1)
		}
	}
	return nil
}

// New builds a world.
func New(cfg Config) (*World, error) {
	if cfg.MemSize == 0 {
		cfg.MemSize = 32 << 20
	}
	nodes := 2
	if cfg.Loopback {
		nodes = 1
	}
	if err := checkPlanNodes(cfg.Faults, nodes); err != nil {
		return nil, err
	}
	w := &World{Eng: sim.NewEngine()}
	if cfg.Trace {
		w.Rec = trace.NewRecorder()
	}
	var inj *fault.Injector
	if cfg.Faults != nil {
		inj = fault.NewInjector(cfg.Faults)
	}
	if cfg.Loopback {
		w.Link = wire.NewLoopback(w.Eng, cfg.Wire, w.Rec, &w.Wire, inj)
	} else {
		w.Link = wire.NewLink(w.Eng, cfg.Wire, w.Rec, &w.Wire, inj)
	}
	ports := [2]*wire.Port{w.Link.A(), w.Link.B()}
	if cfg.HostClocks && !cfg.Loopback {
		w.clocks = &hostClocks{eng: w.Eng}
	}
	for i := 0; i < nodes; i++ {
		mem, err := shm.New(fmt.Sprintf("softnic-host%d", i), cfg.MemSize, hostBase[i])
		if err != nil {
			w.Close()
			return nil, err
		}
		dev := device.New(w.Eng, cfg.Device, device.Identity{Node: i, MAC: MACs[i], IP: IPs[i]}, mem, w.Rec)
		switch {
		case inj != nil && cfg.DeferTimedFaults:
			dev.AttachFaults(inj)
		case inj != nil:
			dev.SetFaults(inj)
		}
		if cfg.Check {
			dev.EnableCheck(device.CheckOptions{OnViolation: cfg.OnViolation})
		}
		var clk host.Clock = w.Eng
		var side simSide = dev
		var ctl mlx5.Control = dev
		if w.clocks != nil {
			hc := &hostClock{all: w.clocks, dev: dev, waiting: true}
			w.clocks.clocks = append(w.clocks.clocks, hc)
			cd := clockedDevice{Device: dev, clk: hc}
			clk, side, ctl = hc, cd, cd
		}
		cpu := NewCPU(clk, w.Rec, dev, cfg.Host)
		if inj != nil {
			cpu.SetFaults(inj)
		}
		dev.Connect(ports[i])
		ports[i].Attach(i, dev)
		if cfg.Loopback {
			// The cable brings the frames back: the NIC's own local
			// loopback would keep them off it (device.SetLocalLoopback).
			dev.SetLocalLoopback(false)
		}
		var srv *uverbsdev.Server
		if cfg.UverbsControl || uverbsFromEnv {
			ctl, srv = uverbsLoopback(dev, side)
		}
		ctx, err := provider.Open(provider.Device{Name: fmt.Sprintf("softnic%d", i), Control: ctl, MMIO: cpu, Mem: mem})
		if err != nil {
			mem.Close()
			w.Close()
			return nil, err
		}
		w.Hosts[i] = &Host{Node: i, ID: dev.Identity(), Mem: mem, Dev: dev, CPU: cpu, Ctx: ctx, Uverbs: srv}
	}
	if cfg.Loopback {
		w.Hosts[1] = w.Hosts[0]
	}
	w.Injector = inj
	return w, nil
}

// The host CPU times the provider's own work.
var _ provider.HostWorker = (*host.CPU)(nil)

// NewCPU is the host CPU in front of dev, on clock clk (the engine's, or
// with Config.HostClocks the host's own), with the device's recorder
// and counter set and with the same node, so that its stages and counters
// sit with the device's; cfg's BAR layout is replaced by dev's. Give it to
// the provider as provider.Device.MMIO (and SetFaults it the device's
// injector: the WC-buffer hook is the CPU's).
func NewCPU(clk host.Clock, rec *trace.Recorder, dev *device.Device, cfg host.Config) *host.CPU {
	b := dev.BARConfig()
	cfg.Layout = host.Layout{FirstUAR: b.FirstUAR, NumUARs: b.NumUARs, BFRegSize: b.BFRegSize}
	return host.New(clk, rec, dev.Counters(), dev.Identity().Node, dev.BARPort(), cfg)
}

// Close closes each host's provider context, then releases its host
// memory. The context goes first: its rings, doorbell records and buffers
// live in that memory, so an object of a context left open would fault
// (SIGSEGV, not a panic) on its next verb once the memory is unmapped;
// closed, it fails with provider.ErrClosed. A context the caller closed
// already is left as it is.
func (w *World) Close() {
	for i, h := range w.Hosts {
		if h != nil && (i == 0 || h != w.Hosts[0]) {
			if h.Ctx != nil {
				_ = h.Ctx.Close() // ErrClosed if the caller closed it
			}
			h.Mem.Close()
		}
	}
}

// SetLink pulls the cable between the NICs (up false) or plugs it back:
// both ports learn the link state (device.Device.SetLinkState) and raise
// PORT_ERR / PORT_ACTIVE.
func (w *World) SetLink(up bool) {
	for i, h := range w.Hosts {
		if h != nil && (i == 0 || h != w.Hosts[0]) {
			h.Dev.SetLinkState(up)
		}
	}
}

// Settle runs the simulation until nothing is scheduled (or limit events).
// A timed fault rule armed for later is something scheduled: Settle runs
// the clock to it (Drain does not).
func (w *World) Settle(limit int) int { return w.Eng.Run(limit) }

// devices calls f for each distinct device of the world.
func (w *World) devices(f func(*device.Device)) {
	for i, h := range w.Hosts {
		if h != nil && h.Dev != nil && (i == 0 || h != w.Hosts[0]) {
			f(h.Dev)
		}
	}
}

// ArmTimedFaults arms the timed rules (port, device) of the fault plan on
// every device at at_ps from now (device.Device.ArmTimedFaults), and
// returns now: the origin of their times. With Config.DeferTimedFaults a
// command calls it when its workload starts.
func (w *World) ArmTimedFaults() sim.Time {
	now := w.Eng.Now()
	w.devices(func(d *device.Device) { d.ArmTimedFaults(now) })
	return now
}

// TimedFaultsPending is how many events of timed fault rules (rules not
// fired yet, ends of port-down windows) are scheduled.
func (w *World) TimedFaultsPending() int {
	n := 0
	w.devices(func(d *device.Device) { n += d.TimedFaultsPending() })
	return n
}

// endDrainSteps bounds EndTimedFaults' drain.
const endDrainSteps = 1 << 22

// Drain is Settle for the end of a workload: it runs the simulation until
// nothing but timed fault rules is scheduled (or limit events; limit <= 0:
// no limit), and returns the number of events it ran. A timed rule due
// before the last of the workload's events fires on the way; one due
// after the run's natural end stays pending (EndTimedFaults stops it).
func (w *World) Drain(limit int) int {
	n := 0
	for (limit <= 0 || n < limit) && w.Eng.Pending() > w.TimedFaultsPending() && w.Eng.Step() {
		n++
	}
	return n
}

// EndTimedFaults is the end of the run for the fault plan: it drains the
// workload (at most endDrainSteps events) and stops the timed rules that
// have not fired (the run ended first), and the ends of port-down
// windows. It returns the plan's timed rules that fired on no device, in
// plan order.
func (w *World) EndTimedFaults() []fault.Scheduled {
	// Bounded: after a failed wait the simulation may be busy for ever
	// (RNR NAKs with infinite retry); what is left after a finished run
	// is a few ACKs and timers.
	w.Drain(endDrainSteps)
	w.devices(func(d *device.Device) { d.DisarmTimedFaults() })
	var out []fault.Scheduled
	stats := w.Injector.Fired()
	for _, s := range w.Injector.Scheduled() {
		if stats[s.Rule].Fired == 0 {
			out = append(out, s)
		}
	}
	return out
}

// NoInline is ConnOpts.MaxInline for QPs that ask max_inline_data 0, as
// perftest's bandwidth tests do without -I (0 there takes the default).
const NoInline = -1

// ConnOpts shapes an RC connection.
type ConnOpts struct {
	MTU       int // path MTU in bytes (default 1024)
	BufSize   int // registered buffer per side (default 64 KiB)
	SQDepth   int // max_send_wr (default 64)
	RQDepth   int // max_recv_wr (default 64)
	MaxSGE    int // default 4
	MaxInline int // default 256; NoInline asks max_inline_data 0
	CQDepth   int // default 256
	SigAll    bool
	PSN       [2]uint32 // initial send PSNs (default 0x1000, 0x2000)
	Access    provider.Access
	MinRNR    uint8 // min_rnr_timer code (default 12 ≈ 0.64 ms, rocev2.md §5.4 #3)
	RNRRetry  uint8 // default 7 (infinite)
	// Timeout is the local ACK timeout exponent (4.096 µs · 2^Timeout):
	// 0 takes the default 14 (≈ 67 ms), -1 means no timer.
	Timeout int
	// RetryCnt is retry_cnt: 0 takes the default 7, -1 means 0 retries.
	RetryCnt int
	// MaxRdAtomic is max_rd_atomic on both QPs (default 16), MaxDestRdAtomic
	// max_dest_rd_atomic (default 16).
	MaxRdAtomic, MaxDestRdAtomic int
	// Type is the QP type (default RC). UC QPs connect like RC ones without
	// the reliability attributes; UD QPs get QKey and an AH each to the
	// other QP (Endpoint.AH), and no destination.
	Type provider.QPType
	// QKey is the UD Q_Key of both QPs (default 0x11111111).
	QKey uint32
	// SRQ: each side's receives come from a shared receive queue of
	// RQDepth WQEs (Endpoint.SRQ) instead of the QP's own RQ.
	SRQ bool
	// UseSRQ attaches side i's QP to an existing SRQ (one SRQ behind the
	// QPs of several connections).
	UseSRQ [2]*provider.SRQ
	// Channel: each side's CQs report their completion events to a
	// completion channel of its own (Endpoint.Channel).
	Channel bool
	// TrafficClass is the GRH traffic class of both QPs (UD: of both
	// AHs): on RoCEv2 the IPv4 ToS byte of every frame (default 0).
	TrafficClass uint8
}

// Endpoint is one side of a connection.
type Endpoint struct {
	Host   *Host
	PD     *provider.PD
	SendCQ *provider.CQ
	RecvCQ *provider.CQ
	QP     *provider.QP
	Buf    provider.Buffer
	MR     *provider.MR
	SRQ    *provider.SRQ // with ConnOpts.SRQ
	AH     *provider.AH  // UD: the address of the other endpoint
	QKey   uint32        // UD
	// Channel is the completion channel of SendCQ and RecvCQ (with
	// ConnOpts.Channel).
	Channel *provider.CompChannel
}

// ConnectRC creates a PD, CQs, a registered buffer and a QP (RC unless
// o.Type says otherwise) on each host and brings both QPs to RTS connected
// to each other (UD: each with an AH to the other).
func (w *World) ConnectRC(o ConnOpts) ([2]*Endpoint, error) { return Connect(w.Hosts, o) }

// Connect is ConnectRC between any two hosts: the two of a World, or
// contexts on a daemon's devices (provider.Dial), in one process or
// across several. It is the one way every test and command brings a
// connection up.
func Connect(hosts [2]*Host, o ConnOpts) ([2]*Endpoint, error) {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.MTU, 1024)
	def(&o.BufSize, 64<<10)
	def(&o.SQDepth, 64)
	def(&o.RQDepth, 64)
	def(&o.MaxSGE, 4)
	if o.MaxInline == NoInline {
		o.MaxInline = 0
	} else {
		def(&o.MaxInline, 256)
	}
	def(&o.CQDepth, 256)
	if o.PSN == [2]uint32{} {
		o.PSN = [2]uint32{0x1000, 0x2000}
	}
	if o.Access == 0 {
		o.Access = provider.AccessLocalWrite | provider.AccessRemoteWrite | provider.AccessRemoteRead
	}
	if o.MinRNR == 0 {
		o.MinRNR = 12
	}
	if o.RNRRetry == 0 {
		o.RNRRetry = 7
	}
	if o.QKey == 0 {
		o.QKey = 0x11111111
	}
	def(&o.Timeout, 14)
	def(&o.RetryCnt, 7)
	def(&o.MaxRdAtomic, 16)
	def(&o.MaxDestRdAtomic, 16)
	timeout, retry := uint8(max(o.Timeout, 0)), uint8(max(o.RetryCnt, 0))
	mtu := mlx5.MTUFromBytes(o.MTU)
	if mtu == 0 {
		return [2]*Endpoint{}, fmt.Errorf("testbed: MTU %d is not 256..4096", o.MTU)
	}
	var eps [2]*Endpoint
	for i, h := range hosts {
		e := &Endpoint{Host: h}
		var err error
		if e.PD, err = h.Ctx.AllocPD(); err != nil {
			return eps, err
		}
		if o.Channel {
			if e.Channel, err = h.Ctx.CreateCompChannel(); err != nil {
				return eps, err
			}
		}
		if e.SendCQ, err = h.Ctx.CreateCQEx(provider.CQInitAttr{Entries: o.CQDepth, Channel: e.Channel}); err != nil {
			return eps, err
		}
		if e.RecvCQ, err = h.Ctx.CreateCQEx(provider.CQInitAttr{Entries: o.CQDepth, Channel: e.Channel}); err != nil {
			return eps, err
		}
		if e.Buf, err = h.Ctx.AllocBuffer(o.BufSize, 4096); err != nil {
			return eps, err
		}
		if e.MR, err = e.PD.RegMR(e.Buf.Addr, uint64(o.BufSize), o.Access); err != nil {
			return eps, err
		}
		if o.SRQ {
			if e.SRQ, err = e.PD.CreateSRQ(provider.SRQInitAttr{MaxWR: o.RQDepth, MaxSGE: o.MaxSGE}); err != nil {
				return eps, err
			}
		}
		if o.UseSRQ[i] != nil {
			e.SRQ = o.UseSRQ[i]
		}
		e.QP, err = h.Ctx.CreateQP(e.PD, provider.QPInitAttr{Type: o.Type, SendCQ: e.SendCQ, RecvCQ: e.RecvCQ, SRQ: e.SRQ,
			Cap:    provider.QPCap{MaxSendWR: o.SQDepth, MaxRecvWR: o.RQDepth, MaxSendSGE: o.MaxSGE, MaxRecvSGE: o.MaxSGE, MaxInline: o.MaxInline},
			SigAll: o.SigAll})
		if err != nil {
			return eps, err
		}
		e.QKey = o.QKey
		eps[i] = e
	}
	if o.Type == provider.QPTypeUD {
		return eps, connectUD(eps, o)
	}
	// Both QPs to RTR before either goes to RTS.
	attr := func(i int) provider.ConnectAttr {
		peer := eps[1-i]
		pid := peer.Host.ID
		return provider.ConnectAttr{
			Peer: provider.Peer{QPN: peer.QP.QPN(), PSN: o.PSN[1-i], GID: pid.IP.As16(), MAC: pid.MAC},
			PSN:  o.PSN[i], MTU: o.MTU, Access: o.Access, SGIDIndex: 1, HopLimit: 64, TrafficClass: o.TrafficClass,
			MaxRdAtomic: uint8(o.MaxRdAtomic), MaxDestRdAtomic: uint8(o.MaxDestRdAtomic), MinRNRTimer: o.MinRNR,
			Timeout: timeout, RetryCnt: retry, RNRRetry: o.RNRRetry,
		}
	}
	for i, e := range eps {
		if err := e.QP.ToInit(attr(i)); err != nil {
			return eps, err
		}
		if err := e.QP.ToRTR(attr(i)); err != nil {
			return eps, err
		}
	}
	for i, e := range eps {
		if err := e.QP.ToRTS(attr(i)); err != nil {
			return eps, err
		}
	}
	return eps, nil
}

// connectUD brings both UD QPs to RTS with the Q_Key and gives each an AH
// to the other.
func connectUD(eps [2]*Endpoint, o ConnOpts) error {
	for i, e := range eps {
		pid := eps[1-i].Host.ID
		var err error
		if e.AH, err = e.PD.CreateAH(provider.AHAttr{DGID: pid.IP.As16(), DMAC: pid.MAC, Port: 1, SGIDIndex: 1, HopLimit: 64, TrafficClass: o.TrafficClass}); err != nil {
			return err
		}
		if err := e.QP.Connect(provider.ConnectAttr{QKey: o.QKey, PSN: o.PSN[i]}); err != nil {
			return err
		}
	}
	return nil
}

// ErrTimeout is returned when a wait ends without its completions: three
// polls in a row found none, each driving the device for at most the
// provider's progress budget. Either the simulation went idle (nothing
// left to complete them) or it kept busy without completing them (a
// retry loop: RNR NAKs with infinite retry, say).
var ErrTimeout = errors.New("testbed: the completions did not arrive (the simulation went idle, or kept busy without completing them)")

// Wait polls cq until n completions arrived, driving the simulation through
// the provider's poll (a poll of an empty CQ advances the engine).
func Wait(cq *provider.CQ, n int) ([]provider.WC, error) {
	out := make([]provider.WC, 0, n)
	wcs := make([]provider.WC, 16)
	idle := 0
	for len(out) < n {
		k, err := cq.Poll(wcs[:min(len(wcs), n-len(out))])
		if err != nil {
			return out, err
		}
		if k == 0 {
			idle++
			if idle > 2 {
				return out, ErrTimeout
			}
			continue
		}
		idle = 0
		out = append(out, wcs[:k]...)
	}
	return out, nil
}
