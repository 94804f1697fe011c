package main

// perftest's flags that `softnic perf` added after its first set:
// -b/--bidirectional, -e/--events, -H/-U (latency samples), --tclass,
// -S/--sl, -T/--tos, -w/--limit_bw, --run_infinitely, --latency_gap,
// --cpu_util, -R/-z (rdma_cm). Each is perftest 4.5-0.17's (the version
// Debian 12 ships): its range check and its refusals, in its words where
// it has them; where softnic cannot honour a flag that changes the
// measurement, it refuses it in one line that names the flag and says why.

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// perfExtra are the options of this file (embedded in perfOpts).
type perfExtra struct {
	bidir     bool    // -b: both sides send at once; the row is the sum
	events    bool    // -e: wait on a completion channel, not by polling
	histogram bool    // -H: print every sorted latency sample
	unsorted  bool    // -U: print every latency sample in the order taken
	tclass    int     // --tclass: the GRH traffic class (RoCEv2: the IPv4 ToS byte)
	sl        int     // -S: service level (on RoCE the VLAN PCP: not modelled)
	tos       int     // -T: rdma_cm's ToS; -1: not given
	limitBW   float64 // -w: fail when BW average is below it
	limitSet  bool
	runInf    bool // --run_infinitely
	latGap    int  // --latency_gap µs
	latGapSet bool
	cpuUtil   bool   // --cpu_util
	rdmaCM    bool   // -R
	comRdmaCM bool   // -z
	mcg       bool   // -g: SEND to a multicast group (refused)
	mgid      string // -M: the group's MGID, used with -g only (as perftest)
}

// registerPerfExtra adds this file's flags to perf's flag set.
func registerPerfExtra(fs *flag.FlagSet, o *perfExtra) {
	b := func(p *bool, usage string, names ...string) {
		for _, n := range names {
			fs.BoolVar(p, n, false, usage)
		}
	}
	b(&o.bidir, "measure bidirectional bandwidth: both sides send at once, the row is the sum of both directions (bandwidth tests)", "b", "bidirectional")
	b(&o.events, "sleep on a completion channel (ibv_req_notify_cq, ibv_get_cq_event) instead of polling the CQ (not the write tests, as perftest)", "e", "events")
	// 4.5-0.17 spells the long option "report-histogrm"; its help says
	// --report-histogram. Both are taken.
	b(&o.histogram, "print every latency sample, sorted, before the row (latency tests)", "H", "report-histogram", "report-histogrm")
	b(&o.unsorted, "print every latency sample in the order taken, before the row (latency tests)", "U", "report-unsorted")
	intVar(fs, &o.tclass, "tclass", 0, "traffic class of the GRH: on RoCEv2 the IPv4 ToS byte (DSCP<<2 | ECN) of every frame, 0..255")
	for _, n := range []string{"S", "sl"} {
		intVar(fs, &o.sl, n, 0, "service level 0..15 (accepted; on RoCE the SL maps to the VLAN PCP, which softnic does not model: no frame changes)")
	}
	for _, n := range []string{"T", "tos"} {
		intVar(fs, &o.tos, n, -1, "ToS of rdma_cm QPs, 0..255: with -R only, as perftest (use --tclass for the ToS of the test's QPs)")
	}
	for _, n := range []string{"w", "limit_bw"} {
		fs.Func(n, "fail (exit 1, \"Error: BW result is below bw limit\") when BW average is below this, in the table's unit (bandwidth tests)", func(s string) error {
			v, err := strconv.ParseFloat(s, 64)
			if err != nil {
				return errors.New("not a number")
			}
			o.limitBW, o.limitSet = v, true
			return nil
		})
	}
	b(&o.runInf, "run for ever, a row every -D seconds (refused: in one process the clock is virtual and the run could not end; on a wire -D is not written)", "run_infinitely")
	fs.Func("latency_gap", "delay in µs before each post; each sample includes it, as perftest's (latency tests)", func(s string) error {
		// Decimal µs (0x accepted, a leading 0 not octal), a C int as
		// perftest's; a negative one is refused below in perftest's words.
		t, neg := strings.CutPrefix(s, "-")
		v, err := parseNum(t, false, 31)
		if err != nil {
			return err
		}
		o.latGap, o.latGapSet = int(v), true
		if neg {
			o.latGap = -o.latGap
		}
		return nil
	})
	b(&o.cpuUtil, "report CPU utilisation (refused: the model has no CPU to measure)", "cpu_util")
	b(&o.rdmaCM, "connect QPs with rdma_cm (refused: softnic's exchange is perftest's TCP one)", "R", "rdma_cm")
	b(&o.comRdmaCM, "exchange data with rdma_cm (refused: softnic's exchange is perftest's TCP one)", "z", "com_rdma_cm")
	b(&o.mcg, "send to a multicast group with 1 QP attached (refused: the device has no multicast groups, max_mcast_grp 0)", "g", "mcg")
	for _, n := range []string{"M", "MGID"} {
		fs.StringVar(&o.mgid, n, "", "the multicast group's GID with -g (-g is refused; without it ignored, as perftest)")
	}
}

// resolveExtra checks this file's flags, perftest's checks first (its
// words where it has them), then softnic's refusals. wire: on a real
// network (--wire or a kernel device).
func (o *perfOpts) resolveExtra(wire bool) error {
	t := o.test
	x := &o.perfExtra
	switch {
	// perftest's parser (parse_args)
	case x.mcg && t.verb != verbSend:
		return errors.New("-g: MultiCast feature only available on SEND verb")
	case x.bidir && !t.bw:
		return errors.New("-b: Bidirectional is only available in BW test")
	case x.events && t.verb == verbWrite:
		return errors.New("-e: Events feature not available on WRITE verb")
	case x.histogram && t.bw:
		return errors.New("-H: Available only on Latency tests")
	case x.unsorted && t.bw:
		return errors.New("-U: is Available only on Latency tests")
	case x.limitSet && x.limitBW < 0:
		return errors.New("-w: Invalid Minimum BW Limit")
	case x.limitSet && !t.bw:
		return errors.New("-w: the BW limit is for bandwidth tests")
	case x.sl < 0 || x.sl > 15:
		return fmt.Errorf("-S %d: Only 15 Service levels", x.sl)
	case x.tos != -1 && (x.tos < 0 || x.tos > 255):
		return fmt.Errorf("-T %d: TOS out of range 0..255", x.tos)
	case x.tclass < 0 || x.tclass > 255:
		return fmt.Errorf("--tclass %d: the traffic class is one byte, 0..255", x.tclass)
	case x.latGapSet && x.latGap < 0:
		return fmt.Errorf("--latency_gap %d: Latency gap time must be non-negative", x.latGap)
	case x.latGapSet && t.bw:
		return errors.New("--latency_gap: Latency gap feature is only for latency tests")
	// perftest's force_dependecies
	case x.rdmaCM || x.comRdmaCM:
		return fmt.Errorf("%s: rdma_cm is not available: softnic connects its QPs by perftest's TCP exchange (\"Data ex. method : Ethernet\"), and in one process both NICs are set up directly", rdmaCMFlag(x))
	case x.tos != -1:
		return errors.New("-T: TOS only valid for rdma_cm based QP and RawEth QP (perftest; --tclass sets the traffic class, the IPv4 ToS, of the test's QPs)")
	case x.mcg && x.bidir:
		return errors.New("-g: Bidirectional mode not supported in multicast")
	case x.mcg && o.qps > 1:
		return errors.New("-g: Only 1 QP supported in multicast")
	case x.mcg:
		// perftest would switch to UD and attach the server's QP to the
		// group (ibv_attach_mcast); softnic's device reports no multicast
		// groups (softnic devinfo -v: max_mcast_grp 0), so that attach
		// would fail on it as it does on any device without them.
		return errors.New("-g: multicast is not available: the emulated NIC has no multicast groups (max_mcast_grp 0, softnic devinfo -v), so ibv_attach_mcast would fail")
	case x.runInf && x.events:
		return errors.New("--run_infinitely: run_infinitely does not support events feature yet")
	case x.runInf && !t.bw:
		return errors.New("--run_infinitely: run_infinitely exists only in BW tests for now")
	case x.runInf && x.bidir && t.verb == verbSend:
		return errors.New("--run_infinitely: run_infinitely mode is not supported in SEND Bidirectional BW test")
	case x.runInf && !wire:
		return errors.New("--run_infinitely: in one process the clock is virtual and the run would never end by itself (nor let ^C land between two deterministic periods): use -D N for one N-second period")
	case x.runInf:
		return errors.New("--run_infinitely: timed runs (-D) are in one process only (for now)")
	case x.cpuUtil:
		return errors.New("--cpu_util: softnic cannot report CPU utilisation: in one process the host is a cost model with no CPU to sample, and on a wire the emulated NIC's own work would be counted as the test's")
	// softnic's
	case x.bidir && o.all && t.verb == verbSend && o.conn == "UD":
		return errors.New("-b: a bidirectional UD send_bw sweep is not supported (a lost datagram ends perftest's run)")
	case (x.histogram || x.unsorted) && o.duration > 0:
		return errors.New("-H/-U: a timed run (-D) keeps no samples (perftest prints none)")
	}
	return nil
}

func rdmaCMFlag(x *perfExtra) string {
	if x.rdmaCM {
		return "-R"
	}
	return "-z"
}

// writeLatSamples prints perftest's -U and -H lists for one size: "#,
// usec" and a "%d, %g" line per sample (µs, the round-trip divisor
// applied): -U all iters-1 samples in the order taken, -H the sorted ones
// the statistics use (the two largest left out); then, as perftest, the
// rule and the heading again above the row.
func writeLatSamples(w io.Writer, unsorted, sorted []float64, heading bool) {
	list := func(v []float64) {
		fmt.Fprintln(w, "#, usec")
		for i, s := range v {
			fmt.Fprintf(w, "%d, %s\n", i+1, cG(s))
		}
	}
	if unsorted != nil {
		list(unsorted)
	}
	if sorted != nil {
		list(sorted)
	}
	if heading {
		fmt.Fprintln(w, perfRule)
		fmt.Fprintln(w, latHeading)
	}
}

// cG formats v as C's printf "%g": six significant digits, no trailing
// zeros, an exponent below 1e-4 and from 1e6.
func cG(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }

// latSamples are the samples of computeLat in µs: in the order taken, and
// sorted without the two largest.
func latSamples(posted []int64, rtt int) (unsorted, sorted []float64) {
	n := len(posted) - 1
	if n < latTail+1 || rtt < 1 {
		return nil, nil
	}
	q := psPerUS * float64(rtt)
	delta := make([]int64, n)
	unsorted = make([]float64, n)
	for i := range delta {
		delta[i] = posted[i+1] - posted[i]
		unsorted[i] = float64(delta[i]) / q
	}
	slices.Sort(delta)
	sorted = make([]float64, n-latTail)
	for i := range sorted {
		sorted[i] = float64(delta[i]) / q
	}
	return unsorted, sorted
}

// bidirRow is the row of a bidirectional run, perftest's
// print_full_bw_report with the peer's report: the client's own size and
// iterations, peak, average and message rate the sums of both sides'.
// A timed send_bw exchanges no reports (each side prints its own), so
// there the row is the client's alone. Both directions stay in the JSON.
func bidirRow(local, remote bwStats, own bool) bwStats {
	row := local
	if !own {
		row.Peak += remote.Peak
		row.Avg += remote.Avg
		row.MsgRate += remote.MsgRate
	}
	row.Local, row.Remote = &local, &remote
	return row
}

// samples prints (or keeps, for --json) the -U and -H lists of one size.
func (p *perfPrinter) samples(posted []int64, rtt, size int) {
	if !p.o.histogram && !p.o.unsorted {
		return
	}
	un, so := latSamples(posted, rtt)
	if !p.o.unsorted {
		un = nil
	}
	if !p.o.histogram {
		so = nil
	}
	if p.o.json {
		p.res.Samples = append(p.res.Samples, latSampleSet{Bytes: size, Unsorted: un, Sorted: so})
		return
	}
	if p.o.output == "" {
		p.heading() // perftest prints the heading before the test runs
	}
	writeLatSamples(p.w, un, so, p.o.output == "")
}

// latSampleSet is one size's -U/-H lists in the JSON document (µs).
type latSampleSet struct {
	Bytes    int       `json:"bytes"`
	Unsorted []float64 `json:"unsorted_us,omitempty"`
	Sorted   []float64 `json:"histogram_us,omitempty"`
}

// limitErr is -w's verdict at the end of the run: perftest's line when
// no row reached the limit (and exit 1).
func (p *perfPrinter) limitErr() error {
	if p.o.limitSet && !p.bwPassed {
		return fmt.Errorf("Error: BW result is below bw limit (-w %g)", p.o.limitBW)
	}
	return nil
}

// runBidir is a bidirectional bandwidth test on a wire, both sides alike
// (perftest's write/read/atomic_bw and send_bw mains with duplex set; the
// flag is not exchanged: both sides must be given -b). Per size:
//   - write/read/atomic: a keys exchange (the barrier before the run),
//     run_iter_bw, with -a only a second barrier (write_bw.c's RUN_ALL
//     loop, when its own version is 4.6 or later: softnic announces 6.06;
//     its RUN_REGULAR branch has none, and a softnic that sent one there
//     had stock perftest read its keys as the report), the reports
//     exchange, the summed row;
//   - send: the receives posted, the barrier, run_iter_bi (each side
//     sends and receives), the reports exchange, the summed row, and with
//     -a the barrier after the size.
//
// Then the closing exchange. Neither side waits for the other's "client
// done" round of a one-way run: perftest skips it when duplex.
func (s *perfWireSide) runBidir(pr *perfPrinter, sizes []int, keys func(string) error) error {
	o := s.o
	t := o.test
	for _, size := range sizes {
		var actors []perfActor
		cli := newBWClient([]*perfEP{s.ep}, s.clk, perfOpcode(t, s.ep.atomicOp), o.iters, size, o.txDepth, o.postList, o.cqMod, 0)
		if t.verb == verbSend {
			srv, err := newBWServer([]*perfEP{s.ep}, s.clk, o.iters, size, o.rxDepth, false)
			if err != nil {
				return err
			}
			actors = append(actors, srv)
			if err := keys("receives posted"); err != nil {
				return err
			}
		} else if err := keys("bidirectional start"); err != nil {
			return err
		}
		actors = append(actors, cli)
		if err := runActors(actors, actors, s.advance(actors), nil); err != nil {
			return fmt.Errorf("%s, %d bytes: %w", t.name, size, err)
		}
		if t.verb != verbSend && o.all {
			if err := keys("bidirectional end"); err != nil {
				return err
			}
		}
		mine := cli.stats(o.gbits, o.noPeak)
		rep, err := s.pc.reports(ptReport{Size: uint64(mine.Bytes), Iters: uint64(mine.Iters), Peak: mine.Peak, Avg: mine.Avg, MsgRate: mine.MsgRate})
		if err != nil {
			return err
		}
		peer := bwStats{Bytes: int(rep.Size), Iters: int(rep.Iters), Peak: rep.Peak, Avg: rep.Avg, MsgRate: rep.MsgRate, Unit: mine.Unit}
		pr.bw(bidirRow(mine, peer, false))
		if t.verb == verbSend && o.all {
			if err := keys("next size"); err != nil {
				return err
			}
		}
	}
	if err := pr.end(); err != nil {
		return err
	}
	return s.pc.close(s.my, 0)
}

// postGap is --latency_gap: perftest busy-waits this long before each
// post of a latency test, and takes the post's timestamp after the wait,
// so every sample includes it.
type postGap struct {
	gap     int64 // ps; 0: none
	until   int64 // the end of the wait under way
	waiting bool
}

// postGap is the gap of the run's latency actors.
func (o *perfOpts) postGap() postGap { return postGap{gap: int64(o.latGap) * 1e6} }

// perfWaker is a clock that can be asked to move to a time: one process,
// where the wait would otherwise find the engine idle (the wall clock
// moves by itself).
type perfWaker interface{ wakeAt(t int64) }

// over reports whether the wait before the next post is over. The first
// call starts it (and has the engine wake at its end).
func (g *postGap) over(clk perfClock) bool {
	if g.gap <= 0 {
		return true
	}
	now := clk.now()
	if !g.waiting {
		g.until, g.waiting = now+g.gap, true
		if w, ok := clk.(perfWaker); ok {
			w.wakeAt(g.until)
		}
	}
	if now < g.until {
		return false
	}
	g.waiting = false
	return true
}
