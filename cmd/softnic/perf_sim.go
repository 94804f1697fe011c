package main

// Mode 1 of `softnic perf`: both sides in one process, two emulated NICs
// back to back (testbed), virtual time. Nothing here reads the wall clock
// for a figure: the tables are the model's and the same on every run with
// the same profile, workload and fault plan. (The progress bar looks at the
// wall clock only to decide whether to show itself.)

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/softnic/softnic/device"
	"github.com/softnic/softnic/fault"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/testbed"
)

// sweepEveryStep turns cqWatch off: every actor step sweeps every CQ (the
// reference TestPerfWatchSkipsNothing compares the skipping with).
var sweepEveryStep = false

// perfWorldHook, when set (tests only), sees the world of a one-process
// run once it is built (to tap the wire, say).
var perfWorldHook func(*testbed.World)

// simClock is one host's CPU time in virtual time (testbed.World.HostNow:
// each host its own clock, Config.HostClocks).
type simClock struct {
	w    *testbed.World
	host int
}

func (c simClock) now() int64  { return int64(c.w.HostNow(c.host)) }
func (c simClock) beforePost() {}

// wakeAt puts an event at t on the engine (a busy-wait's end: the host
// spins, nothing else happens; --latency_gap).
// The host's clock may run ahead of the engine's (Config.HostClocks): an
// end the engine has passed already needs no event.
func (c simClock) wakeAt(t int64) {
	if e := c.w.Eng; sim.Time(t) > e.Now() {
		e.At(sim.Time(t), sim.HandlerFunc(func(sim.Time) {}))
	}
}

// perfArea is the size of each of a buffer's two areas (send, receive) for
// messages up to maxSize: page-aligned, with room for a UD GRH.
func perfArea(maxSize int) int { return roundUp(max(maxSize+grhArea, 64), 4096) }

func perfSim(o perfOpts, stdout, stderr io.Writer) error {
	prof, err := loadProfile(o.net.profile)
	if err != nil {
		return err
	}
	spec := prof.Device
	if err := o.fitInline(spec.Caps.MaxInline, "profile "+prof.Name+", device.caps.max_inline"); err != nil {
		return err
	}
	if o.test.verb == verbRead || o.test.verb == verbAtomic {
		o.fitOuts(spec.Caps.MaxRdAtom, stderr)
	} else {
		// perftest's out_reads is 1 for the send and write tests,
		// whatever --outs says; the QPs keep the testbed's default
		// (no READ or atomic is posted, so it changes nothing).
		o.outs = 0
	}
	cfg := testbed.DefaultConfig()
	cfg.Device, cfg.Host, cfg.Wire = spec, prof.Host(), prof.Wire
	if cfg.Faults, err = loadFaults(o.net.faults); err != nil {
		return err
	}
	// at_ps counts from the start of the measured run (armed below), not
	// from the start of the simulation: connection setup and the settle
	// after it must not run the clock to a timed rule.
	cfg.DeferTimedFaults = true
	// --check: checked mode on both devices, each violation on stderr as
	// the real-wire path (wallclock) prints it. (It used to be parsed and
	// ignored here: a simulated perf --check never reported anything.)
	if o.net.check {
		cfg.Check = true
		cfg.OnViolation = func(v *device.Violation) { fmt.Fprintf(stderr, "softnic: check: %v\n", v) }
	}
	// Client and server are two machines: each host its own CPU clock.
	cfg.HostClocks = true
	active := spec.Caps.ActiveMTU
	if active == 0 {
		active = 4096
	}
	mtu := o.mtuBytes(active)
	if o.conn == "UD" && o.size > mtu && !o.all {
		// perftest's check_mtu: a UD message is at most one MTU, and a
		// larger size (its bandwidth tests' default 65536 among them) is
		// cut to the MTU with this note. perftest prints it only for a
		// size it chose; softnic says so for an explicit -s too.
		fmt.Fprintf(stderr, " Max msg size in UD is MTU %d\n Changing to this MTU\n", mtu)
		o.size = mtu
	}
	sizes := o.sizes()
	if o.conn == "UD" && o.all {
		sizes = sizes[:0]
		for s := 2; s <= mtu; s *= 2 {
			sizes = append(sizes, s)
		}
	}
	area := perfArea(sizes[len(sizes)-1])
	bufSize := 2 * area
	cfg.MemSize = max(cfg.MemSize, o.qps*bufSize+(16<<20))
	w, err := testbed.New(cfg)
	if err != nil {
		return err
	}
	defer w.Close()
	if perfWorldHook != nil {
		perfWorldHook(w)
	}

	typ := map[string]provider.QPType{"RC": provider.QPTypeRC, "UC": provider.QPTypeUC, "UD": provider.QPTypeUD}[o.conn]
	sq := max(o.txDepth, o.postList)
	rq := 64
	if o.test.verb == verbSend {
		rq = o.rxDepth
	}
	pair := make([][2]*perfEP, o.qps)
	for q := range pair {
		eps, err := w.ConnectRC(testbed.ConnOpts{MTU: mtu, BufSize: bufSize, SQDepth: sq, RQDepth: rq, CQDepth: sq + rq + 16, MaxSGE: 1,
			MaxInline: cmp.Or(o.inline, testbed.NoInline), Type: typ, Timeout: o.qpTimeout, TrafficClass: uint8(o.tclass), Channel: o.events, MaxRdAtomic: o.outs, MaxDestRdAtomic: o.outs,
			Access: provider.AccessLocalWrite | provider.AccessRemoteWrite | provider.AccessRemoteRead | provider.AccessRemoteAtomic})
		if err != nil {
			return fmt.Errorf("couldn't create and connect QP %d: %w", q, err)
		}
		for i, e := range eps {
			peer := eps[1-i]
			pair[q][i] = &perfEP{qp: e.QP, scq: e.SendCQ, rcq: e.RecvCQ, mr: e.MR, buf: e.Buf.Bytes,
				sendOff: 0, recvOff: uint64(area), remAddr: peer.MR.Addr + uint64(area), remKey: peer.MR.RKey,
				ah: e.AH, remQPN: peer.QP.QPN(), remQKey: peer.QKey, ud: typ == provider.QPTypeUD, maxInl: o.inline,
				atomicOp: atomicOpcode(o.atomic), ch: e.Channel}
			if err := pair[q][i].armEvents(o.test.verb == verbSend); err != nil {
				return err
			}
		}
	}
	w.Settle(0)

	hdr := newPerfHeader(&o, mtu, profileLabel(prof), "virtual time (the model's figures, deterministic)", "both")
	hdr.TXDepth = o.txDepth
	if o.test.verb == verbSend {
		hdr.RXDepth = o.rxDepth
	}
	for q := range pair {
		for i, list := range []*[]perfAddr{&hdr.Local, &hdr.Remote} {
			e := pair[q][i]
			*list = append(*list, perfAddr{QPN: e.qp.QPN(), PSN: [2]uint32{0x1000, 0x2000}[i], RKey: e.mr.RKey,
				VAddr: e.mr.Addr + uint64(area), OutReads: uint32(hdr.OutReads), GID: w.Hosts[i].Dev.GID()})
		}
	}
	pr := &perfPrinter{w: stdout, o: &o}
	pr.header(hdr)

	clks := [2]perfClock{simClock{w, 0}, simClock{w, 1}}
	landed := func() uint64 {
		var n uint64
		for _, h := range w.Hosts {
			n += h.Dev.CQEsLanded()
		}
		return n
	}
	cqesLanded := landed // the stall check's measure of progress, whatever the sweep uses
	if sweepEveryStep || o.events {
		// -e: an event may land after its CQE; a sweep that found the CQE
		// but no event must not make the next one skip it.
		landed = nil
	}
	bar := newProgressBar(stderr, o.noProgress)
	defer bar.clear()
	budget := sim.Duration(o.timeout.Nanoseconds()) * sim.Nanosecond
	// --latency_gap's waits are the run's own time, not a lack of progress:
	// one before each post of each side, two an iteration (capped at 10^18
	// ps, far beyond any run, so the sum cannot wrap).
	if g := o.postGap().gap; g > 0 {
		budget += sim.Duration(min(2*float64(o.iters)*float64(g), 1e18))
	}
	// A timed rule due within the run fires at its time and the run
	// meets its consequences (retries, error completions); one due after
	// the run's natural end does not fire (EndTimedFaults), and between
	// sizes Drain, unlike Settle, does not run the clock to it.
	origin := w.ArmTimedFaults()
	// finish ends the output: the timed faults that never fired, the
	// counters (JSON), the table's end.
	finish := func() error {
		reportNotFired(stderr, "perf", w, origin)
		if o.json {
			pr.res.Counters = worldCounters(w)
		}
		bar.clear()
		return pr.end()
	}
	for _, size := range sizes {
		start := w.Eng.Now()
		limit := start.Add(budget)
		var deadline int64
		if o.duration > 0 {
			deadline = int64(start.Add(sim.Duration(o.duration) * sim.Second))
			limit = start.Add(sim.Duration(o.duration)*sim.Second + budget)
		}
		// Without -D the budget is a stall bound: the run fails when no
		// CQE has landed on either side for at least --timeout of
		// virtual time (checked once a window ends, so a window with a
		// completion in it opens the next), however long the whole run
		// takes: -n 16777216 needs more than 20 s of virtual time. With
		// -D it bounds the drain after the deadline, whatever lands.
		seen := cqesLanded()
		advance := func() error {
			if w.Eng.Now() > limit {
				switch n := cqesLanded(); {
				case o.duration > 0:
					return fmt.Errorf("%w: still running %v of virtual time after the -D deadline (--timeout)", errStuck, o.timeout)
				case n == seen:
					return fmt.Errorf("%w: no completion for %v of virtual time (--timeout)", errStuck, o.timeout)
				default:
					seen, limit = n, w.Eng.Now().Add(budget)
				}
			}
			// Every side waits: each spins while the engine moves on.
			w.HostsIdle()
			if w.Eng.Step() {
				return nil
			}
			moved := false
			for _, h := range w.Hosts {
				moved = h.Dev.Progress() || moved
			}
			if !moved {
				return fmt.Errorf("%w: the simulation is idle and no side can move", errStuck)
			}
			return nil
		}
		if err := perfSimSize(&o, pair, clks, size, deadline, advance, landed, bar, pr); err != nil {
			var lost *udLostError
			if errors.As(err, &lost) {
				// The client's row is printed; the run ends here, as
				// ib_send_bw's server ends it (and -a with it).
				lost.where = lossCounters(w)
				if perr := finish(); perr != nil {
					return perr
				}
				return fmt.Errorf("%s, %d bytes: %w", o.test.name, size, err)
			}
			// What the devices raised and nobody read often says why;
			// on UC and UD, frames the wire lost.
			why := asyncSummary(w)
			if errors.Is(err, errStuck) && o.conn != "RC" {
				if where := lossCounters(w); where != "" {
					why += fmt.Sprintf("; %s has no retransmission: frames were lost (%s) and the test waits for them, as perftest's would for ever",
						o.conn, strings.TrimPrefix(where, "; "))
				}
			}
			return fmt.Errorf("%s, %d bytes: %w%s", o.test.name, size, err, why)
		}
		w.Drain(1 << 20)
	}
	return finish()
}

func atomicOpcode(name string) provider.WROpcode {
	if name == "CMP_AND_SWAP" {
		return provider.WRAtomicCmpSwp
	}
	return provider.WRAtomicFetchAdd
}

// perfOpcode is the WR opcode of a test.
func perfOpcode(t perfTest, atomic provider.WROpcode) provider.WROpcode {
	switch t.verb {
	case verbSend:
		return provider.WRSend
	case verbWrite:
		return provider.WRRDMAWrite
	case verbRead:
		return provider.WRRDMARead
	}
	return atomic
}

// perfSimSize runs one message size with both sides' actors and prints
// its row. landed counts the CQEs both devices have made visible
// (bandwidth actors skip sweeps of their CQs while it stands still:
// cqWatch).
func perfSimSize(o *perfOpts, pair [][2]*perfEP, clks [2]perfClock, size int, deadline int64, advance func() error, landed func() uint64, bar *progressBar, pr *perfPrinter) error {
	clk, sclk := clks[0], clks[1] // the client's host, the server's
	t := o.test
	iters := o.iters
	if deadline > 0 {
		iters = 1 << 30
	}
	cli, srv := pair[0][0], pair[0][1]
	op := perfOpcode(t, cli.atomicOp)
	var actors, must []perfActor
	var lat func() []int64
	switch {
	case !t.bw && t.verb == verbWrite:
		for _, e := range pair[0] {
			clear(e.buf)
		}
		c := &writeLat{gap: o.postGap(), ep: cli, clk: clk, iters: iters, size: size, deadline: deadline, verify: o.verifyLastByte}
		s := &writeLat{gap: o.postGap(), ep: srv, clk: sclk, server: true, iters: iters, size: size, verify: o.verifyLastByte}
		actors, must, lat = []perfActor{s, c}, []perfActor{c, s}, func() []int64 { return c.posted }
		if deadline > 0 {
			must = []perfActor{c}
		}
	case !t.bw && t.verb == verbSend:
		for _, e := range pair[0] {
			if err := e.postRecvs(size, o.rxDepth); err != nil {
				return err
			}
		}
		c := &sendLat{gap: o.postGap(), ep: cli, clk: clk, iters: iters, size: size, rxDepth: o.rxDepth, cqMod: o.cqMod, deadline: deadline}
		s := &sendLat{gap: o.postGap(), ep: srv, clk: sclk, server: true, iters: iters, size: size, rxDepth: o.rxDepth, cqMod: o.cqMod, deadline: deadline}
		actors, must, lat = []perfActor{s, c}, []perfActor{c, s}, func() []int64 { return c.posted }
		if deadline > 0 {
			must = []perfActor{c}
		}
	case !t.bw:
		c := &reqLat{gap: o.postGap(), ep: cli, clk: clk, op: op, iters: iters, size: size, deadline: deadline}
		actors, must, lat = []perfActor{c}, []perfActor{c}, func() []int64 { return c.posted }
	default:
		eps := make([]*perfEP, len(pair))
		seps := make([]*perfEP, len(pair))
		for q := range pair {
			eps[q], seps[q] = pair[q][0], pair[q][1]
		}
		c := newBWClient(eps, clk, op, iters, size, o.txDepth, o.postList, o.cqMod, deadline)
		c.watch.landed = landed
		actors, must = []perfActor{c}, []perfActor{c}
		if t.verb == verbSend {
			s, err := newBWServer(seps, sclk, iters, size, o.rxDepth, deadline > 0)
			if err != nil {
				return err
			}
			s.watch.landed = landed
			actors = append([]perfActor{s}, c)
			if deadline == 0 {
				must = append(must, s)
			}
		}
		// -b: the server is a client too (perftest's run_iter_bw on both
		// sides; send_bw's run_iter_bi: each side sends and receives).
		var back *bwClient
		if o.bidir {
			back = newBWClient(seps, sclk, op, iters, size, o.txDepth, o.postList, o.cqMod, deadline)
			back.watch.landed = landed
			actors, must = append(actors, back), append(must, back)
			if t.verb == verbSend {
				s, err := newBWServer(eps, clk, iters, size, o.rxDepth, deadline > 0)
				if err != nil {
					return err
				}
				s.watch.landed = landed
				actors = append([]perfActor{s}, actors...)
				if deadline == 0 {
					must = append(must, s)
				}
			}
		}
		var lost error
		if err := runActors(actors, must, advance, bar.ticker(c, deadline, clk)); err != nil {
			srv := udServerShort(actors, c, err)
			if srv == nil {
				return err
			}
			lost = &udLostError{got: srv.rcnt, want: srv.iters * len(srv.eps)}
		}
		bar.clear()
		row := c.stats(o.gbits, o.noPeak || deadline > 0)
		if back != nil {
			row = bidirRow(row, back.stats(o.gbits, o.noPeak || deadline > 0), t.verb == verbSend && deadline > 0)
		}
		pr.bw(row)
		return lost
	}
	if err := runActors(actors, must, advance, bar.ticker(must[0], deadline, clk)); err != nil {
		return err
	}
	bar.clear() // before the row: stdout and stderr may be one terminal
	posted := lat()
	if deadline > 0 {
		var elapsed int64
		if len(posted) > 0 {
			elapsed = clk.now() - posted[0]
		}
		pr.latDur(computeLatDuration(len(posted), elapsed, size, t.rttDivisor()))
		return nil
	}
	st, ok := computeLat(posted, size, t.rttDivisor())
	if !ok {
		return errors.New("too few iterations for the statistics")
	}
	pr.samples(posted, t.rttDivisor(), size)
	pr.lat(st)
	return nil
}

// udLostError ends a UD send_bw whose server cannot reach its count:
// the client has sent and completed everything, the simulation is idle,
// and datagrams were lost on the way (UD has no retransmission). The
// client's row stands (ib_send_bw's client reports its own completions);
// the server reports nothing, as ib_send_bw's server, which gives up after
// 120 s without a message (check_alive: "Did not get Message for 120
// Seconds, exiting..") and exits with an error.
type udLostError struct {
	got, want int
	where     string // the counters that saw the losses
}

func (e *udLostError) Error() string {
	return fmt.Sprintf("send_bw server: %d of %d datagrams received, %d lost (UD has no retransmission%s); "+
		"as ib_send_bw's server (\"Did not get Message for 120 Seconds, exiting..\"), it gives up without a row",
		e.got, e.want, e.want-e.got, e.where)
}

// udServerShort is the UD send_bw server that a stuck run (err) left short
// of its count with the client done, or nil when the run failed otherwise.
func udServerShort(actors []perfActor, c *bwClient, err error) *bwServer {
	if !errors.Is(err, errStuck) || !c.done() {
		return nil
	}
	for _, a := range actors {
		if s, ok := a.(*bwServer); ok && !s.done() && len(s.eps) > 0 && s.eps[0].ud {
			return s
		}
	}
	return nil
}

// lossCounters names the non-zero counters that count frames or datagrams
// lost: the wire's drops and each node's receive drops (", counters: wire
// wire_fault_drop 28"), or "" when none did.
func lossCounters(w *testbed.World) string {
	all := worldCounters(w)
	owners := make([]string, 0, len(all))
	for o := range all {
		owners = append(owners, o)
	}
	sort.Strings(owners)
	var out []string
	for _, o := range owners {
		names := make([]string, 0, len(all[o]))
		for n := range all[o] {
			if strings.Contains(n, "drop") || n == "rx_ud_no_receive" {
				names = append(names, n)
			}
		}
		sort.Strings(names)
		for _, n := range names {
			out = append(out, fmt.Sprintf("%s %s %d", o, n, all[o][n]))
		}
	}
	if len(out) == 0 {
		return ""
	}
	return "; counters: " + strings.Join(out, ", ")
}

// progressBar draws a bar on stderr when stderr is a terminal and the run
// has lasted longer than a second (wall clock: it is only a display).
type progressBar struct {
	w      io.Writer
	on     bool
	start  time.Time
	calls  int
	shown  bool
	lastPc int
}

func newProgressBar(stderr io.Writer, off bool) *progressBar {
	return &progressBar{w: stderr, on: !off && isTerminal(stderr), start: time.Now(), lastPc: -1}
}

// ticker returns the tick function of runActors for actor a.
func (b *progressBar) ticker(a perfActor, deadline int64, clk perfClock) func() {
	if b == nil || !b.on {
		return nil
	}
	start := clk.now()
	return func() {
		b.calls++
		if b.calls%4096 != 0 || time.Since(b.start) < time.Second {
			return
		}
		f := a.progress()
		if deadline > 0 {
			f = float64(clk.now()-start) / float64(max(deadline-start, 1))
		}
		pc := int(min(max(f, 0), 1) * 100)
		if pc == b.lastPc {
			return
		}
		b.lastPc = pc
		n := pc * 40 / 100
		fmt.Fprintf(b.w, "\rsoftnic perf: [%-40s] %3d%%", string(repeatByte('#', n)), pc)
		b.shown = true
	}
}

func (b *progressBar) clear() {
	if b != nil && b.shown {
		b.lastPc = -1
		fmt.Fprint(b.w, "\r\033[K")
		b.shown = false
	}
}

func repeatByte(c byte, n int) []byte {
	s := make([]byte, n)
	for i := range s {
		s[i] = c
	}
	return s
}

// asyncSummary lists the asynchronous events a failed run left unread on
// each node's context (perftest reads none either), which often say why it
// failed: a CQ in error, a QP fatal, a port down, a dead device.
func asyncSummary(w *testbed.World) string {
	const most = 8
	var out string
	for i, h := range w.Hosts {
		if h == nil || h.Ctx == nil || i > 0 && h == w.Hosts[0] {
			continue
		}
		var evs []string
		for len(evs) < most {
			ev, err := h.Ctx.GetAsyncEvent(time.Microsecond)
			if err != nil {
				break
			}
			evs = append(evs, ev.String())
		}
		if len(evs) > 0 {
			out += fmt.Sprintf("; node %d async events: %s", i, strings.Join(evs, ", "))
		}
	}
	return out
}

// reportNotFired ends the run's timed fault rules (World.EndTimedFaults)
// and says on stderr which did not fire because the run ended before
// their time (origin: when the run started, World.ArmTimedFaults), and
// which event rules never fired, with how many events they matched: a
// rule for a QP the run does not have (0 matched) or an nth the run never
// reaches left the figures clean without a word, as if no plan was given.
func reportNotFired(stderr io.Writer, cmd string, w *testbed.World, origin sim.Time) {
	for _, s := range w.EndTimedFaults() {
		fmt.Fprintf(stderr, "softnic %s: fault rule %d (%s) did not fire: the run ended first, %v after it started (the rule was due at %v)\n",
			cmd, s.Rule, w.Injector.RuleString(s.Rule), w.Eng.Now().Sub(origin), sim.Duration(s.At))
	}
	reportNeverFired(stderr, cmd, w.Injector)
}

// reportNeverFired says on stderr which event rules of inj's plan (timed
// ones are reported by their time) never fired, with how many events each
// matched: a rule for a QP the run does not have (0 matched) or an nth the
// run never reaches left the run clean without a word.
func reportNeverFired(stderr io.Writer, cmd string, inj *fault.Injector) {
	timed := map[int]bool{}
	for _, s := range inj.Scheduled() {
		timed[s.Rule] = true
	}
	for _, s := range inj.Fired() {
		if !timed[s.Rule] && s.Fired == 0 {
			fmt.Fprintf(stderr, "softnic %s: fault rule %d (%s) never fired: it matched %d events\n", cmd, s.Rule, s.Desc, s.Matched)
		}
	}
}
