package wallclock

import (
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softnic/softnic/ethport"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/wire"
)

// Defaults of the pacing loop.
const (
	// DefaultLead is how far virtual time may run ahead of the wall clock
	// unless told otherwise.
	DefaultLead = 100 * time.Microsecond
	// MaxLead is the largest lead a Net or a daemon takes: a timer due
	// within the lead fires at once, so a lead past the ACK timeout fired
	// every retry before any ACK could come back (RETRY_EXC_ERR on the
	// first message of a healthy link), and one past ARP's 333 ms retries
	// gave up resolving at once. 10 ms is well under the shortest ACK
	// timeouts in use (4.096 µs × 2^14, 67 ms).
	MaxLead = 10 * time.Millisecond
	// IdleWait is the longest one Pump of an idle network blocks.
	IdleWait = time.Millisecond
	// MaxLag is the furthest the virtual clock may lag the wall clock.
	// When nothing ran the engine for longer (its process was stopped,
	// or its only goroutine busy elsewhere), the time beyond MaxLag does
	// not pass for the NIC: it stood still with its process, and goes on
	// where it stopped (see Pacer.Wall). Well under the shortest ACK
	// timeout in use (4.096 µs × 2^14, 67 ms: perftest's, rdma-core's).
	MaxLag = 10 * time.Millisecond

	spinWait   = 50 * time.Microsecond // polling before a pump sleeps ...
	spinWindow = 2 * time.Millisecond  // ... if it found work this recently
	drainMax   = 64                    // received frames one pump delivers per port
)

// Pacer runs one engine against the wall clock (the time policy of the
// package comment) and delivers the frames its ports' real transports
// receive. It is the loop Net drives for one NIC; a user with several
// devices on one engine (the daemon) builds its own:
//
//	p := wallclock.NewPacer(eng, wallclock.DefaultLead)
//	p.SetLocker(&mu) // mu guards eng and everything on it
//	for each device: port, _ := ethport.New(eng, cfg, tr, rec); port.Attach(dev); dev.Connect(port); p.AddPort(port, tr)
//	go p.Run(stop) // or: for { p.Pump(wallclock.IdleWait, 64) }
//	// any goroutine: mu.Lock(); p.Sync(); post work ...; mu.Unlock(); p.Wake()
//
// Pump is called from one goroutine at a time. Without a Locker that
// goroutine owns the engine and every method may be called from it alone.
// With a Locker, Pump takes the lock around each touch of the engine and
// releases it while it blocks, so that other goroutines may take it to
// submit work; they call Sync first (so what they schedule is stamped no
// earlier than the wall clock) and Wake after (so a blocked Pump runs
// what they scheduled at once). Wake and Wall need no lock; every other
// method, AddPort included (a device may join while the pacer runs), must
// be called with the lock held.
type Pacer struct {
	eng   *sim.Engine
	lead  sim.Duration
	base  sim.Time  // the engine's time when the pacer started ...
	start time.Time // ... and the wall clock's
	// stood is the wall-clock time (ns) that did not pass for the
	// engine: what stalls beyond MaxLag added up to (see bound).
	stood atomic.Int64
	mu    sync.Locker
	ports []*PacedPort // guarded by mu
	added bool         // ports has grown since the pump last looked
	wake  chan struct{}
	timer *time.Timer

	// The pump goroutine's own state, read while it blocks without the
	// lock: the ports it waits on (a copy of ports, refreshed under the
	// lock), the select over several of them (the timer, the wake
	// channel, then each port's receive queue), when it last found work
	// (the spin-before-sleep window).
	view     []*PacedPort
	cases    []reflect.SelectCase
	lastWork time.Time
}

// NewPacer paces eng with at most lead of virtual time ahead of the wall
// clock (a negative lead counts as 0). The wall clock starts now, at the
// engine's current virtual time.
func NewPacer(eng *sim.Engine, lead time.Duration) *Pacer {
	lead = max(lead, 0)
	p := &Pacer{eng: eng, lead: sim.Duration(lead.Nanoseconds()) * sim.Nanosecond, base: eng.Now(), start: time.Now(),
		wake: make(chan struct{}, 1), timer: time.NewTimer(time.Hour)}
	p.timer.Stop()
	p.cases = []reflect.SelectCase{
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(p.timer.C)},
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(p.wake)},
	}
	return p
}

// SetLocker makes Pump hold l while it touches the engine (see Pacer).
func (p *Pacer) SetLocker(l sync.Locker) { p.mu = l }

// Engine is the paced engine.
func (p *Pacer) Engine() *sim.Engine { return p.eng }

// Lead is how far virtual time may run ahead of the wall clock.
func (p *Pacer) Lead() sim.Duration { return p.lead }

// PacedPort is one port of a Pacer and its real transport.
type PacedPort struct {
	p          *Pacer
	port       *ethport.Port
	tr         wire.RealTransport
	rx         <-chan []byte // nil once the transport has closed it
	closed     bool
	faulty     *wire.FaultyTransport // tr, when it is a fault wrapper
	faultTimer *sim.Timer            // fires when faulty next releases a held frame
	rxOut      [][]byte              // Filter's output, reused
	sel        int                   // its case in Pacer.cases, once in the view
}

// AddPort has the pacer deliver the frames tr receives to port. tr is the
// transport port sends on; when it is a *wire.FaultyTransport, received
// frames go through its wire.rx rules and the frames it holds (Delay,
// Reorder) are released when they are due in virtual time.
func (p *Pacer) AddPort(port *ethport.Port, tr wire.RealTransport) *PacedPort {
	pp := &PacedPort{p: p, port: port, tr: tr, rx: tr.Frames(), sel: -1}
	if f, ok := tr.(*wire.FaultyTransport); ok {
		pp.faulty = f
		pp.faultTimer = p.eng.NewTimer(sim.HandlerFunc(func(sim.Time) { pp.pollFaults() }))
	}
	p.ports = append(p.ports, pp)
	p.added = true
	return pp
}

// Port is the emulated port.
func (pp *PacedPort) Port() *ethport.Port { return pp.port }

// Transport is the transport the port is on.
func (pp *PacedPort) Transport() wire.RealTransport { return pp.tr }

// Closed reports whether the transport has stopped delivering frames (its
// socket or TAP device is gone).
func (pp *PacedPort) Closed() bool { return pp.closed }

// Wall is the wall-clock time since the pacer started, as virtual time
// (from the engine's time then), less the stalls the engine stood still
// for: each catch-up that finds the engine more than MaxLag behind moves
// the wall clock back to MaxLag ahead of it (bound).
func (p *Pacer) Wall() sim.Time {
	return p.base + sim.Time(time.Since(p.start).Nanoseconds()-p.stood.Load())*sim.Time(sim.Nanosecond)
}

// bound makes the engine lag the wall clock by at most MaxLag before a
// catch-up. Catching up a stall of seconds at once ran it in virtual time
// with the real wire frozen: every ACK timeout due meanwhile fired within
// microseconds, each retransmission's timer fell due again before the peer
// could answer, and a healthy QP failed RETRY_EXC_ERR
// (TestStalledSenderSpendsNoRetries). Frames that arrived meanwhile are
// still delivered first, at the engine's time (Pump).
func (p *Pacer) bound() {
	if over := p.Wall().Sub(p.eng.Now()) - sim.Duration(MaxLag.Nanoseconds())*sim.Nanosecond; over > 0 {
		p.stood.Add(int64(over / sim.Nanosecond))
	}
}

// Sync delivers the frames queued since the pump last looked, then runs
// the engine up to the wall clock (the virtual clock never lags, beyond a
// stall's MaxLag), and reports whether anything ran. Call it before
// posting work, so that a doorbell is stamped no earlier than the wall
// time it was rung at. The frames go first, as in Pump: they arrived
// before the timers that fell due while nobody looked (an ACK in the
// socket must stop its ACK timeout, not lose to it).
func (p *Pacer) Sync() bool {
	did := false
	for _, pp := range p.ports {
		if pp.drain() {
			did = true
		}
	}
	return p.catchUp() || did
}

// catchUp is Sync without the queued frames: for received, whose frame
// came out of the queue first.
func (p *Pacer) catchUp() bool {
	before := p.eng.Fired()
	p.bound()
	if w := p.Wall(); p.eng.Now() < w {
		p.eng.RunUntil(w)
	}
	p.pollFaults()
	return p.eng.Fired() != before
}

// SyncAtMost is Sync that runs at most n events (n <= 0: none), for a
// caller holding a lock others wait for: an engine with more work than it
// can run in real time falls further behind the wall clock the longer it
// runs, so a full catch-up under the lock held it for longer at every
// turn (hundreds of ms under a daemon's load, until its clients' calls
// missed their deadlines). What is left is run by the next callers, the
// pump first; until then the engine lags the wall clock, and what the
// caller schedules is stamped at the engine's time, as on an overloaded
// NIC. It reports whether any event ran.
func (p *Pacer) SyncAtMost(n int) bool {
	before := p.eng.Fired()
	p.bound()
	w := p.Wall()
	for i := 0; i < n && p.eng.Next() <= w; i++ {
		p.eng.Step()
	}
	if p.eng.Next() > w && p.eng.Now() < w {
		p.eng.RunUntil(w) // nothing more is due by w: the clock goes there
	}
	p.pollFaults()
	return p.eng.Fired() != before
}

// SyncBudget is how many events Pump's catch-up runs with the lock held
// (SyncAtMost), a millisecond's worth or so.
const SyncBudget = 1 << 12

// Wake makes a Pump that is blocked return at once (reporting work), so
// that what another goroutine scheduled runs without waiting out the
// pump's wait. It is safe from any goroutine and never blocks.
func (p *Pacer) Wake() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// runIdle bounds Run's sleep while nothing is due. A frame, a closed
// transport, a Wake (every caller that schedules work under the lock
// wakes the pacer; so does closing stop) and the engine's next event all
// end the sleep sooner, so the bound only keeps an idle daemon from
// waking a thousand times a second, as IdleWait would.
const runIdle = 100 * time.Millisecond

// Run pumps until stop is closed and Wake called (a daemon's pacing
// goroutine).
func (p *Pacer) Run(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		p.Pump(runIdle, drainMax)
	}
}

func (p *Pacer) lock() {
	if p.mu != nil {
		p.mu.Lock()
	}
}

func (p *Pacer) unlock() {
	if p.mu != nil {
		p.mu.Unlock()
	}
}

// pollFaults releases the due frames of every fault wrapper.
func (p *Pacer) pollFaults() {
	for _, pp := range p.ports {
		pp.pollFaults()
	}
}

// pollFaults tells the fault wrapper the virtual time, so that the frames
// a Delay or Reorder rule holds go out when they are due, and arms a timer
// for the next one (an engine event: the pump wakes for it like for any
// other).
func (pp *PacedPort) pollFaults() {
	if pp.faulty == nil {
		return
	}
	_ = pp.faulty.Poll(pp.p.eng.Now()) // a failed send is counted (real_tx_errors)
	switch due := pp.faulty.NextDue(); {
	case due == sim.Never:
		pp.faultTimer.Stop()
	case !pp.faultTimer.Armed() || pp.faultTimer.When() != due:
		pp.faultTimer.Reset(due)
	}
}

// deliver hands one received frame to the port, through the wire.rx rules
// of a fault wrapper.
func (pp *PacedPort) deliver(f []byte) {
	now := pp.p.eng.Now()
	if pp.faulty == nil {
		pp.port.ReceiveFrame(now, f)
		return
	}
	pp.rxOut = pp.faulty.Filter(f, pp.rxOut[:0])
	for _, g := range pp.rxOut {
		pp.port.ReceiveFrame(now, g)
	}
	clear(pp.rxOut)
}

func (pp *PacedPort) transportClosed() {
	pp.rx = nil
	pp.closed = true
	if pp.sel >= 0 {
		pp.p.cases[pp.sel].Chan = reflect.Value{} // a zero case is never chosen
	}
}

// drain delivers the frames already queued (at most drainMax); it reports
// whether there were any.
func (pp *PacedPort) drain() bool {
	did := false
	for i := 0; i < drainMax && pp.rx != nil; i++ {
		select {
		case f, ok := <-pp.rx:
			if !ok {
				pp.transportClosed()
				return did
			}
			pp.deliver(f)
			did = true
		default:
			return did
		}
	}
	return did
}

// Pump is one round of the pacing loop: deliver the frames queued since
// the pump last looked, catch the clock up (at most SyncBudget events of
// it: the next round goes on), run up to maxSteps events that are due (at
// or before wall+lead); if none of that found work, block for at most
// wait until a frame arrives, the next event is due or Wake is called. It
// reports whether it did any work (or was woken).
//
// The queued frames go first, at the engine's time (when the pump last
// looked: the earliest they can have arrived), and the timers that fell
// due while nobody pumped run after them. A ConnectX takes a frame when
// it arrives, whatever its host is doing; an application that posts,
// computes for a second and then polls must find its SEND acknowledged,
// not failed by ACK timeouts that ran out while the ACK sat in the
// socket (TestSenderThatDoesNotPollForASecond).
func (p *Pacer) Pump(wait time.Duration, maxSteps int) bool {
	p.lock()
	if p.added {
		p.refreshView()
	}
	did := false
	for _, pp := range p.ports {
		if pp.drain() {
			did = true
		}
	}
	if p.SyncAtMost(SyncBudget) {
		did = true
	}
	limit := p.Wall().Add(p.lead)
	for i := 0; i < maxSteps && p.eng.Next() <= limit; i++ {
		p.eng.Step()
		did = true
	}
	if did {
		p.pollFaults()
		p.lastWork = time.Now()
		p.unlock()
		return true
	}
	d := wait
	if next := p.eng.Next(); next != sim.Never {
		due := time.Duration(int64(next.Sub(limit)) / int64(sim.Nanosecond))
		if due < d {
			d = due
		}
	}
	p.unlock()
	if d <= 0 {
		return false
	}
	return p.block(d)
}

// block waits for at most d (outside the lock) for a frame or a Wake.
func (p *Pacer) block(d time.Duration) bool {
	// While traffic flows, spin briefly before sleeping: waking a parked
	// goroutine costs tens of µs on a busy VM, more than a frame's round
	// trip on loopback. An idle NIC sleeps at once.
	if p.open() && time.Since(p.lastWork) < spinWindow {
		spinEnd := time.Now().Add(min(d, spinWait))
		for time.Now().Before(spinEnd) {
			for _, pp := range p.view {
				if pp.rx == nil {
					continue
				}
				select {
				case f, ok := <-pp.rx:
					return p.received(pp, f, ok)
				default:
				}
			}
			select {
			case <-p.wake:
				return true
			default:
				runtime.Gosched()
			}
		}
	}
	p.timer.Reset(d)
	defer p.timer.Stop()
	if len(p.view) == 1 {
		pp := p.view[0]
		select {
		case f, ok := <-pp.rx: // a nil channel (transport closed) never fires
			return p.received(pp, f, ok)
		case <-p.wake:
			return true
		case <-p.timer.C:
			return false
		}
	}
	chosen, v, ok := reflect.Select(p.cases)
	switch chosen {
	case 0:
		return false
	case 1:
		return true
	}
	var f []byte
	if ok {
		f = v.Interface().([]byte)
	}
	return p.received(p.view[chosen-2], f, ok)
}

// received delivers a frame block or the spin took off pp's queue (ok
// false: the queue was closed).
func (p *Pacer) received(pp *PacedPort, f []byte, ok bool) bool {
	p.lock()
	defer p.unlock()
	if !ok {
		pp.transportClosed()
		return false
	}
	p.catchUp()
	pp.deliver(f)
	p.lastWork = time.Now()
	return true
}

// refreshView copies the ports (under the lock) into the pump's view and
// rebuilds its select.
func (p *Pacer) refreshView() {
	p.added = false
	p.view = append(p.view[:0], p.ports...)
	p.cases = p.cases[:2]
	for i, pp := range p.view {
		pp.sel = 2 + i
		c := reflect.SelectCase{Dir: reflect.SelectRecv}
		if pp.rx != nil {
			c.Chan = reflect.ValueOf(pp.rx)
		}
		p.cases = append(p.cases, c)
	}
}

// open reports whether any port's transport still delivers.
func (p *Pacer) open() bool {
	for _, pp := range p.view {
		if pp.rx != nil {
			return true
		}
	}
	return false
}
