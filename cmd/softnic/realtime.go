package main

// The real-time driver shared by `softnic rdma` and `softnic rc_pingpong`:
// one emulated NIC (host memory, device, provider) whose Ethernet port is on
// a real transport (udp: or tap:) through ethport.
//
// Threads. One goroutine — the command's — owns the engine, the device, the
// port and the provider. The transport's reader goroutine only fills a
// queue; goroutines that block on stdin or TCP only hand their results over
// channels. Everything the simulation sees therefore happens in one order on
// one goroutine, as in the in-process testbed.
//
// Time policy. The virtual clock is tied to the wall clock since the driver
// started (wall):
//   - it never lags: before anything else, each pump runs the engine up to
//     wall (sim.Engine.RunUntil), so a frame that arrives is stamped no
//     earlier than the wall time it arrived at, and timers (ARP retries,
//     RNR waits) measured in virtual time elapse in real time;
//   - it may run ahead by at most lead (default 100 µs, --lead): events due
//     up to wall+lead run at once, later ones wait until the wall clock
//     catches up. The device's own latencies (ns to µs) fit in the lead, so
//     a message is processed without sleeping, while a 0.64 ms RNR timer
//     or a 333 ms ARP retry really takes about that long on the wire — a
//     peer such as rdma_rxe sees sane timing, never an RNR-NAK storm
//     (rocev2.md §5.4 #3).
//
// Waiting. When nothing is due and no frame is queued, a pump blocks on the
// receive queue until a frame arrives, the next event becomes due, or its
// wait (at most idle, 1 ms) ends — it never spins. The provider's Poll of an
// empty CQ calls Progress (mlx5.Progressor), which is one pump; Progress
// returns false after an idle wait or when the poller's time slice is used
// up, so Poll returns 0 and the command's loop checks its own deadline and
// names what it was waiting for.

import (
	"cmp"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strings"
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

// Defaults of the real-time driver.
const (
	defaultLead  = 100 * time.Microsecond
	idleWait     = time.Millisecond
	spinWait     = 50 * time.Microsecond // polling before a pump sleeps ...
	spinWindow   = 2 * time.Millisecond  // ... if it found work this recently
	pollSlice    = 10 * time.Millisecond // longest a single provider Poll may drive the network
	maxWarnLines = 200                   // device/port warnings echoed to stderr
	recorderCap  = 1 << 14               // trace events kept before the recorder is reset
	realMemBase  = 0x7f0000000000        // IOVA of host memory (as testbed's node 0)
)

// neighFlag collects repeated --neigh IP=MAC flags.
type neighFlag []ethport.Neighbor

func (n *neighFlag) String() string {
	s := make([]string, len(*n))
	for i, e := range *n {
		s[i] = fmt.Sprintf("%v=%s", e.IP, macString(e.MAC))
	}
	return strings.Join(s, ",")
}

func (n *neighFlag) Set(v string) error {
	e, err := ethport.ParseNeighbor(v)
	if err != nil {
		return err
	}
	*n = append(*n, e)
	return nil
}

// netOpts are the flags every real-network command shares.
type netOpts struct {
	wire    string
	ip      string
	mac     string
	neigh   neighFlag
	pcap    string
	lead    time.Duration
	memSize int
	quiet   bool
	faults  string
	check   bool
	profile string
}

func (o *netOpts) register(fs *flag.FlagSet) {
	fs.StringVar(&o.wire, "wire", "", "real transport: udp:LISTEN,PEER (one frame per datagram, as qemu -netdev socket,udp=) or tap:NAME")
	fs.StringVar(&o.ip, "ip", "", "IPv4 address of the emulated port (its RoCEv2 GID is ::ffff:IP)")
	fs.StringVar(&o.mac, "mac", "", "MAC address of the emulated port (default 02:00 followed by the IPv4 bytes)")
	fs.Var(&o.neigh, "neigh", "static neighbour IP=MAC (repeatable); other peers are resolved by ARP")
	fs.StringVar(&o.pcap, "pcap", "", "write every frame sent and received on the wire to this pcap file")
	fs.DurationVar(&o.lead, "lead", defaultLead, "how far virtual time may run ahead of the wall clock")
	intVar(fs, &o.memSize, "mem", 0, "host memory in bytes (default: enough for the buffers)")
	fs.BoolVar(&o.quiet, "quiet", false, "do not echo device and port warnings to stderr")
	fs.StringVar(&o.profile, "profile", "", "device profile: a name (see softnic profiles) or a JSON file (default "+profile.DefaultName+")")
	fs.StringVar(&o.faults, "faults", "", "fault plan JSON applied where the port meets the real wire (wire.tx: frames sent, wire.rx: frames received) and at every device hook point (see softnic faults --explain)")
	fs.BoolVar(&o.check, "check", false, "checked mode: report each mlx5 host-protocol violation the device observes (rules R1-R15, docs/faults.md) on stderr")
}

// realNet is one emulated NIC on a real network plus its driver.
type realNet struct {
	eng        *sim.Engine
	rec        *trace.Recorder
	mem        *shm.Region
	dev        *device.Device
	port       *ethport.Port
	tr         wire.RealTransport
	rx         <-chan []byte // nil once the transport has closed it
	ctx        *provider.Context
	ident      device.Identity
	profile    string                // the profile's name, for headers
	inj        *fault.Injector       // --faults at the real wire, or nil
	plan       *fault.Plan           // the --faults plan, or nil
	faulty     *wire.FaultyTransport // tr's fault wrapper (tr itself), or nil
	faultTimer *sim.Timer            // fires when faulty next releases a held frame
	rxOut      [][]byte              // Filter's output, reused

	start    time.Time
	lead     sim.Duration
	sliceEnd time.Time
	lastWork time.Time // when a pump last found work (spin-before-sleep window)
	timer    *time.Timer
	rxClosed bool

	pcapFile *os.File
	pcapW    *pcapgo.Writer
	pcapErr  error

	stderr io.Writer
	quiet  bool
	warned int
}

// rtControl is the control channel the provider sees: the device itself,
// except that Progress pumps the real network (see the time policy above).
type rtControl struct {
	*device.Device
	rt *realNet
}

// Progress implements mlx5.Progressor for the provider's Poll.
func (c rtControl) Progress() bool { return c.rt.progress() }

// openRealNet builds the NIC from the flags and opens its transport.
// memNeed is the memory the command's buffers need (rings and doorbells
// come on top).
func openRealNet(o netOpts, memNeed int, stderr io.Writer) (*realNet, error) {
	if o.wire == "" {
		return nil, errors.New("--wire is required (udp:LISTEN,PEER or tap:NAME)")
	}
	spec, err := wire.ParseWireSpec(o.wire)
	if err != nil {
		return nil, err
	}
	if _, _, err := o.identity(); err != nil {
		return nil, err
	}
	tr, err := wire.OpenReal(spec)
	if err != nil {
		return nil, err
	}
	r, err := newRealNet(o, memNeed, tr, stderr)
	if err != nil {
		tr.Close()
		return nil, err
	}
	return r, nil
}

// identity is the port's IPv4 address and MAC from --ip and --mac.
func (o *netOpts) identity() (netip.Addr, [6]byte, error) {
	ip, err := netip.ParseAddr(o.ip)
	if err != nil || !ip.Is4() {
		return ip, [6]byte{}, fmt.Errorf("--ip %q: need an IPv4 address", o.ip)
	}
	mac := ethport.DefaultMAC(ip)
	if o.mac != "" {
		if mac, err = ethport.ParseMAC(o.mac); err != nil {
			return ip, mac, err
		}
	}
	return ip, mac, nil
}

// newRealNet builds host memory, the device, the port and the provider
// around an open transport, which it owns from then on (Close closes it).
// A --faults plan is applied between the port and the transport.
func newRealNet(o netOpts, memNeed int, tr wire.RealTransport, stderr io.Writer) (*realNet, error) {
	ip, mac, err := o.identity()
	if err != nil {
		return nil, err
	}
	plan, err := loadFaults(o.faults)
	if err != nil {
		return nil, err
	}
	var inj *fault.Injector
	var faulty *wire.FaultyTransport
	if plan != nil {
		inj = fault.NewInjector(plan)
		faulty = wire.NewFaultyTransport(tr, inj, 0)
		tr = faulty
	}
	if o.lead < 0 {
		return nil, fmt.Errorf("--lead %v is negative", o.lead)
	}
	memSize := o.memSize
	if memSize == 0 {
		memSize = memNeed + 16<<20
	}
	if memSize < memNeed {
		return nil, fmt.Errorf("--mem %d is smaller than the %d bytes the buffers need", memSize, memNeed)
	}
	r := &realNet{eng: sim.NewEngine(), rec: trace.NewRecorder(), lead: sim.Duration(o.lead.Nanoseconds()) * sim.Nanosecond,
		stderr: stderr, quiet: o.quiet, ident: device.Identity{Node: 0, MAC: mac, IP: ip}, tr: tr, rx: tr.Frames(),
		inj: inj, plan: plan, faulty: faulty}
	r.rec.Sinks = append(r.rec.Sinks, r.echoWarning)
	r.faultTimer = r.eng.NewTimer(sim.HandlerFunc(func(sim.Time) { r.pollFaults() }))
	fail := func(err error) (*realNet, error) {
		r.tr = nil // the caller closes it (the fault wrapper holds nothing of its own yet)
		r.Close()
		return nil, err
	}
	if r.mem, err = shm.New("softnic-real", memSize, realMemBase); err != nil {
		return fail(err)
	}
	if o.pcap != "" {
		if r.pcapFile, err = os.Create(o.pcap); err != nil {
			return fail(err)
		}
		r.pcapW = pcapgo.NewWriterNanos(r.pcapFile)
		if err := r.pcapW.WriteFileHeader(trace.PcapSnaplen, layers.LinkTypeEthernet); err != nil {
			return fail(err)
		}
	}
	prof, err := profile.Load(o.profile)
	if err != nil {
		return fail(err)
	}
	r.profile = prof.Name
	if !o.quiet {
		fmt.Fprintf(stderr, "softnic: profile %s\n", profileLabel(prof))
	}
	r.dev = device.New(r.eng, prof.Device, r.ident, r.mem, r.rec)
	if inj != nil {
		r.dev.SetFaults(inj)
	}
	if o.check {
		r.dev.EnableCheck(device.CheckOptions{OnViolation: func(v *device.Violation) { fmt.Fprintf(stderr, "softnic: check: %v\n", v) }})
	}
	r.port, err = ethport.New(r.eng, ethport.Config{MAC: mac, IP: ip, Static: o.neigh}, tr, r.rec)
	if err != nil {
		return fail(err)
	}
	r.port.Attach(r.dev)
	if r.pcapW != nil {
		r.port.SetTap(r.capture)
	}
	r.dev.Connect(r.port)
	cpu := testbed.NewCPU(r.eng, r.rec, r.dev, prof.Host())
	if inj != nil {
		cpu.SetFaults(inj)
	}
	r.ctx, err = provider.Open(provider.Device{Name: "softnic0", Control: rtControl{Device: r.dev, rt: r},
		MMIO: cpu, Mem: r.mem})
	if err != nil {
		return fail(err)
	}
	if plan != nil {
		for _, l := range strings.Split(strings.TrimRight(plan.Explain(), "\n"), "\n") {
			fmt.Fprintf(stderr, "softnic: fault plan %s: %s\n", o.faults, l)
		}
	}
	r.start = time.Now()
	r.timer = time.NewTimer(time.Hour)
	r.timer.Stop()
	return r, nil
}

// Close releases the transport, the capture and host memory. A NIC does
// not vanish when its program is done: first the device keeps running
// for a moment (at most closeLinger), so that the ACK of the peer's last
// message still leaves, a retransmission is still answered, and work in
// flight finishes (a ConnectX ACKs in hardware; without this the peer of a
// finished rc_pingpong saw retry-exceeded).
func (r *realNet) Close() {
	if r.ctx != nil && r.tr != nil && r.rx != nil {
		r.linger(closeLinger)
	}
	if r.ctx != nil {
		_ = r.ctx.Close()
		r.ctx = nil
	}
	if r.tr != nil {
		_ = r.tr.Close()
		r.tr = nil
	}
	if r.pcapFile != nil {
		if err := r.pcapFile.Close(); err != nil && r.pcapErr == nil {
			r.pcapErr = err
		}
		if r.pcapErr != nil {
			fmt.Fprintln(r.stderr, "softnic: the capture is incomplete:", r.pcapErr)
		}
		r.pcapFile = nil
	}
	if r.mem != nil {
		_ = r.mem.Close()
		r.mem = nil
	}
}

// closeLinger bounds how long Close keeps the device running.
const closeLinger = 300 * time.Millisecond

// linger drives the network until the device has nothing left to do, but
// at least 30 ms (a peer's last frames may still be on their way) and at
// most max.
func (r *realNet) linger(max time.Duration) {
	start := time.Now()
	for time.Since(start) < max {
		if !r.pump(idleWait, 64) && r.eng.Pending() == 0 && time.Since(start) > 30*time.Millisecond {
			return
		}
	}
}

// GID is the port's RoCEv2 GID.
func (r *realNet) GID() [16]byte { return r.ident.IP.As16() }

// capture writes one frame to the pcap file with its wall-clock time (so the
// file lines up with captures taken elsewhere, e.g. in a guest).
func (r *realNet) capture(_ sim.Time, frame []byte, _ bool) {
	if r.pcapErr != nil {
		return
	}
	ci := gopacket.CaptureInfo{Timestamp: time.Now(), CaptureLength: len(frame), Length: len(frame)}
	r.pcapErr = r.pcapW.WritePacket(ci, frame)
}

// echoWarning prints device and port warnings to stderr (trace.Recorder
// sink), so that a failed exchange names the frame that was refused.
func (r *realNet) echoWarning(ev *trace.Event) {
	if ev.Level != trace.Warn || r.quiet {
		return
	}
	r.warned++
	switch {
	case r.warned <= maxWarnLines:
		fmt.Fprintf(r.stderr, "softnic: warning: %s %s: %s\n", ev.Component, ev.Name, ev.Detail)
	case r.warned == maxWarnLines+1:
		fmt.Fprintf(r.stderr, "softnic: further warnings suppressed; see the counters\n")
	}
}

// wall is the wall-clock time since the driver started, as virtual time.
func (r *realNet) wall() sim.Time {
	return sim.Time(time.Since(r.start).Nanoseconds()) * sim.Time(sim.Nanosecond)
}

// syncClock runs the engine up to the wall clock (the virtual clock never
// lags). It reports whether any event ran.
func (r *realNet) syncClock() bool {
	before := r.eng.Fired()
	if w := r.wall(); r.eng.Now() < w {
		r.eng.RunUntil(w)
	}
	r.pollFaults()
	return r.eng.Fired() != before
}

// pollFaults tells the fault wrapper the virtual time, so that the frames
// a Delay or Reorder rule holds go out when they are due, and arms a timer
// for the next one (an engine event: the pump wakes for it like for any
// other).
func (r *realNet) pollFaults() {
	if r.faulty == nil {
		return
	}
	_ = r.faulty.Poll(r.eng.Now()) // a failed send is counted (real_tx_errors)
	switch due := r.faulty.NextDue(); {
	case due == sim.Never:
		r.faultTimer.Stop()
	case !r.faultTimer.Armed() || r.faultTimer.When() != due:
		r.faultTimer.Reset(due)
	}
}

// deliver hands one received frame to the port, through the wire.rx rules
// of --faults.
func (r *realNet) deliver(f []byte) {
	if r.faulty == nil {
		r.port.ReceiveFrame(r.eng.Now(), f)
		return
	}
	r.rxOut = r.faulty.Filter(f, r.rxOut[:0])
	for _, g := range r.rxOut {
		r.port.ReceiveFrame(r.eng.Now(), g)
	}
	clear(r.rxOut)
}

// pump is one round of the driver: catch the clock up, deliver queued
// frames (at most 64), run up to maxSteps events that are due (at or before
// wall+lead); if none of that found work, block for at most wait on the
// receive queue. It reports whether it did any work.
func (r *realNet) pump(wait time.Duration, maxSteps int) bool {
	did := r.syncClock()
	if len(r.rec.Events()) > recorderCap {
		r.rec.Reset()
	}
drain:
	for i := 0; i < 64 && r.rx != nil; i++ {
		select {
		case f, ok := <-r.rx:
			if !ok {
				r.transportClosed()
				break drain
			}
			r.deliver(f)
			did = true
		default:
			break drain
		}
	}
	limit := r.wall().Add(r.lead)
	for i := 0; i < maxSteps && r.eng.Next() <= limit; i++ {
		r.eng.Step()
		did = true
	}
	if did {
		r.pollFaults()
		r.lastWork = time.Now()
		return true
	}
	d := wait
	if next := r.eng.Next(); next != sim.Never {
		due := time.Duration(int64(next.Sub(limit)) / int64(sim.Nanosecond))
		if due < d {
			d = due
		}
	}
	if d <= 0 {
		return false
	}
	// While traffic flows, spin briefly before sleeping: waking a parked
	// goroutine costs tens of µs on a busy VM, more than a frame's round
	// trip on loopback. An idle NIC sleeps at once.
	if r.rx != nil && time.Since(r.lastWork) < spinWindow {
		spinEnd := time.Now().Add(min(d, spinWait))
		for time.Now().Before(spinEnd) {
			select {
			case f, ok := <-r.rx:
				if !ok {
					r.transportClosed()
					return false
				}
				r.syncClock()
				r.deliver(f)
				r.lastWork = time.Now()
				return true
			default:
				runtime.Gosched()
			}
		}
	}
	r.timer.Reset(d)
	defer r.timer.Stop()
	select {
	case f, ok := <-r.rx: // a nil channel (transport closed) never fires
		if !ok {
			r.transportClosed()
			return false
		}
		r.syncClock()
		r.deliver(f)
		r.lastWork = time.Now()
		return true
	case <-r.timer.C:
		return false
	}
}

func (r *realNet) transportClosed() {
	r.rx = nil
	r.rxClosed = true
}

// progress is the provider's Progress: one pump of at most one event, so
// that Poll sees each CQE as soon as it is written; false once idle or when
// the current Poll's time slice is over.
func (r *realNet) progress() bool {
	if !r.pump(idleWait, 1) {
		return false
	}
	return time.Now().Before(r.sliceEnd)
}

// errTimeout is wrapped by every wait that gives up.
var errTimeout = errors.New("timed out")

// errTransportClosed is returned when the transport stopped delivering.
var errTransportClosed = errors.New("the transport closed (socket or TAP device gone)")

// pollCQ polls cq until it yields completions, driving the network while it
// is empty, for at most timeout (0: no limit). what names the awaited
// completion for the error.
func (r *realNet) pollCQ(cq *provider.CQ, wcs []provider.WC, timeout time.Duration, what func() string) (int, error) {
	return r.pollCQSince(cq, wcs, time.Now(), timeout, what)
}

// pollCQSince is pollCQ for a wait that began at start (a command that
// polls several times shares one budget).
func (r *realNet) pollCQSince(cq *provider.CQ, wcs []provider.WC, start time.Time, timeout time.Duration, what func() string) (int, error) {
	for {
		n, err := r.pollOnce(cq, wcs, start, timeout, what)
		if err != nil || n > 0 {
			return n, err
		}
	}
}

// pollOnce is one provider Poll of cq (driving the network for at most one
// time slice while it is empty); n may be 0. It fails once the wait that
// began at start has lasted timeout (0: no limit) or the transport closed.
func (r *realNet) pollOnce(cq *provider.CQ, wcs []provider.WC, start time.Time, timeout time.Duration, what func() string) (int, error) {
	r.sliceEnd = time.Now().Add(pollSlice)
	n, err := cq.Poll(wcs)
	if err != nil || n > 0 {
		return n, err
	}
	if r.rxClosed && r.eng.Pending() == 0 {
		return 0, fmt.Errorf("waiting for %s: %w", what(), errTransportClosed)
	}
	if timeout > 0 && time.Since(start) >= timeout {
		return 0, fmt.Errorf("%w after %v waiting for %s (counters: %s)", errTimeout, timeout, what(), r.counterLine())
	}
	return 0, nil
}

// await waits for a value on ch while driving the network (so that ARP
// requests are answered and frames processed while the command blocks on
// stdin or TCP), for at most timeout (0: no limit).
func await[T any](r *realNet, ch <-chan T, timeout time.Duration, what string) (T, error) {
	start := time.Now()
	for {
		select {
		case v := <-ch:
			return v, nil
		default:
		}
		if timeout > 0 && time.Since(start) >= timeout {
			var zero T
			return zero, fmt.Errorf("%w after %v waiting for %s", errTimeout, timeout, what)
		}
		r.pump(idleWait, 64)
	}
}

// idle drives the network for d (a sleep that keeps answering ARP and
// processing frames).
func (r *realNet) idle(d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); {
		r.pump(min(idleWait, time.Until(end)), 64)
	}
}

// resolve finds the MAC of ip: a static neighbour, or ARP on the wire while
// the network is pumped (ethport's retry timers run in virtual time, which
// tracks the wall clock).
func (r *realNet) resolve(ip netip.Addr) ([6]byte, error) {
	res := r.port.Resolve(ip)
	deadline := time.Now().Add(10 * time.Second) // far beyond the ARP budget: a safety net only
	for !res.Done() {
		if r.rxClosed {
			return [6]byte{}, fmt.Errorf("resolving %v: %w", ip, errTransportClosed)
		}
		if time.Now().After(deadline) {
			return [6]byte{}, fmt.Errorf("resolving %v: %w", ip, errTimeout)
		}
		r.pump(idleWait, 64)
	}
	return res.MAC, res.Err
}

// counters returns every non-zero counter of the device, the port and the
// transport, sorted by name.
func (r *realNet) counters() []counter {
	var out []counter
	add := func(m map[string]uint64) {
		for k, v := range m {
			if v != 0 {
				out = append(out, counter{k, v})
			}
		}
	}
	add(r.hwCounters())
	add(r.port.Counters().Snapshot())
	if r.tr != nil {
		add(r.tr.Stats().Map())
	}
	for _, st := range r.inj.Fired() {
		add(map[string]uint64{fmt.Sprintf("fault_rule%d_matched", st.Rule): st.Matched,
			fmt.Sprintf("fault_rule%d_fired", st.Rule): st.Fired})
	}
	slices.SortFunc(out, func(a, b counter) int { return cmp.Compare(a.name, b.name) })
	return out
}

// hwCounters are the device's hw counters (Linux hw_counter names for the
// transport, softnic's own for the rest), read through the provider as an
// application would (ibv_read_counters / rdma statistic), or from the
// device itself if the provider cannot.
func (r *realNet) hwCounters() map[string]uint64 {
	if r.ctx != nil {
		if m, err := r.ctx.Counters(); err == nil {
			return m
		}
	}
	return r.dev.HWCounters()
}

type counter struct {
	name  string
	value uint64
}

// counterLine formats counters as "name=value ..." on one line.
func (r *realNet) counterLine() string {
	var b strings.Builder
	for i, c := range r.counters() {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%d", c.name, c.value)
	}
	return b.String()
}

// gidHex formats a GID as 32 hex digits in raw byte order (the wire format
// of ibv_rc_pingpong's handshake and of the LOCAL line).
func gidHex(g [16]byte) string { return fmt.Sprintf("%x", g[:]) }

// parseGIDHex parses 32 hex digits in raw byte order.
func parseGIDHex(s string) ([16]byte, error) {
	var g [16]byte
	if len(s) != 32 {
		return g, fmt.Errorf("GID %q: want 32 hex digits", s)
	}
	if _, err := hex.Decode(g[:], []byte(s)); err != nil {
		return [16]byte{}, fmt.Errorf("GID %q: %w", s, err)
	}
	return g, nil
}

// gidIPv4 returns the IPv4 address of an IPv4-mapped RoCEv2 GID.
func gidIPv4(g [16]byte) (netip.Addr, bool) {
	a := netip.AddrFrom16(g)
	if !a.Is4In6() {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

func macString(m [6]byte) string {
	return fmt.Sprintf("%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5])
}

// profileLabel names a profile for a run's header: its name, and what it
// models when it says.
func profileLabel(p profile.Profile) string {
	if p.Description == "" {
		return p.Name
	}
	return p.Name + " (" + p.Description + ")"
}
