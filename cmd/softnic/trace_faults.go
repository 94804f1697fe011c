package main

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/softnic/softnic/device"
	"github.com/softnic/softnic/fault"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/testbed"
	"github.com/softnic/softnic/trace"
)

// trace --faults and --check: the fault in the walk and what it caused.
// The stage table above is the walk; this section lists, in time order,
// each fault that fired (component "fault") and each consequence the
// device recorded (a torn or out-of-order BlueFlame write and the doorbell
// fallback with its WQE fetch, an error CQE, a QP or CQ in error, an
// event, a device fatal), then the completions and the async events.

// consequenceNames are the warnings that are consequences of a fault.
var consequenceNames = map[string]string{
	"bf_torn": "BlueFlame WQE torn: doorbell fallback", "bf_out_of_order": "BlueFlame lines out of order: doorbell fallback",
	"bf_fallback_fetch": "BlueFlame not usable: WQE fetched from memory", "db_no_new_wqe": "doorbell ignored (announces nothing new)",
	"db_bad_counter": "doorbell counter laps the ring: refused", device.CtrWQEFetchPCIeError.String(): "WQE fetch failed on PCIe",
	device.CtrWQEMalformed.String(): "WQE failed validation", device.CtrPayloadDMAError.String(): "payload DMA failed", device.CtrQPToError.String(): "QP to ERR",
	device.CtrCQOverrun.String(): "CQ overrun", device.CtrCQErrorAccess.String(): "CQ error (access)", device.CtrDeviceFatal.String(): "device fatal",
	device.CtrDeviceFatalSeen.String(): "driver saw the fatal error", device.CtrLinkDown.String(): "link down", device.CtrLinkUp.String(): "link up",
	device.CtrLocalACKTimeoutErr.String(): "ACK timeout, retry", device.CtrReqTransportRetriesExceeded.String(): "retries exceeded",
	device.CtrAsyncEQOverrun.String(): "async EQ overrun", device.CtrCompEQOverrun.String(): "completion EQ overrun", "wc_late_drain": "WC line drained late",
	"rx_write_dma": "responder write DMA failed: NAK", device.CtrCQEWriteError.String(): "CQE write failed",
}

// faultSection prints the faults and their consequences since t0, the
// timed rules that did not fire because the run ended first (notFired,
// from World.EndTimedFaults: the clock is at the run's end), and the
// rules that fired during the connection setup, before the walk (setup:
// Injector.Fired then).
func faultSection(out io.Writer, w *testbed.World, t0 sim.Time, wcs []provider.WC, notFired []fault.Scheduled, setup []fault.Stat) {
	type line struct {
		t    sim.Time
		node int
		text string
	}
	var lines []line
	var after []trace.Event // stages after the first fault, for the fallback
	first := sim.Never
	for _, e := range w.Rec.Events() {
		switch {
		case e.Component == "fault" || e.Level == trace.Warn && strings.Contains(e.Name, "_fault_"):
			// The device's own points record a fault event; the wire's and
			// the DMA engine's a warning named for the fault
			// (wire_fault_drop, dma_fault_read, ...).
			lines = append(lines, line{e.Start, e.Node, "FAULT " + e.Detail})
			first = min(first, e.Start)
		case e.Level == trace.Warn && strings.HasPrefix(e.Name, "check_"):
			lines = append(lines, line{e.Start, e.Node, "CHECK " + e.Detail})
		case e.Level == trace.Warn && consequenceNames[e.Name] != "":
			lines = append(lines, line{e.Start, e.Node, "  → " + consequenceNames[e.Name] + ": " + e.Detail})
		case e.Level != trace.Warn && e.Start >= first:
			after = append(after, e)
		}
	}
	// The fallback: a doorbell decoded after a BlueFlame post, and the
	// fetch it started.
	for i, e := range after {
		if e.Name == "doorbell_decode" && i+1 < len(after) {
			for _, f := range after[i+1:] {
				if f.Name == "wqe_fetch" && f.Node == e.Node {
					lines = append(lines, line{f.Start, f.Node, fmt.Sprintf("  → WQE fetched from host memory: %d bytes, %d TLPs (%.3f ns)", f.Bytes, f.TLPs, f.End.Sub(f.Start).NS())})
					break
				}
			}
			break
		}
	}
	sort.SliceStable(lines, func(i, j int) bool { return lines[i].t < lines[j].t })
	var early []string
	for _, s := range setup {
		if s.Fired > 0 {
			early = append(early, fmt.Sprintf("  rule %d (%s) fired %d time(s) during the connection setup, before the post: not in the walk", s.Rule, s.Desc, s.Fired))
		}
	}
	if dropped := w.Rec.Dropped(); dropped > 0 {
		// The recorder kept the walk's tail: a fault early in a long walk
		// (one that set off an endless RNR retry, say) is gone from the
		// records above, but not from the rules' counts.
		for i, s := range w.Injector.Fired() {
			n := s.Fired
			if i < len(setup) {
				n -= setup[i].Fired
			}
			if n > 0 {
				early = append(early, fmt.Sprintf("  rule %d (%s) fired %d time(s) in the walk; the trace kept its last events only (%d earlier ones dropped), so some of what it did is not listed", s.Rule, s.Desc, n, dropped))
			}
		}
	}
	if len(lines) == 0 && len(early) == 0 {
		fmt.Fprintln(out, "faults: none fired")
	} else {
		fmt.Fprintln(out, "faults and their consequences:")
	}
	for _, l := range lines {
		fmt.Fprintf(out, "  @%12.3f ns node %d  %s\n", l.t.Sub(t0).NS(), l.node, l.text)
	}
	for _, s := range notFired {
		fmt.Fprintf(out, "  rule %d (%s) did not fire: the run ended first, at %.3f ns (it was due at %.3f ns)\n",
			s.Rule, w.Injector.RuleString(s.Rule), w.Eng.Now().Sub(t0).NS(), s.At.NS())
	}
	for _, s := range early {
		fmt.Fprintln(out, s)
	}
	for _, wc := range wcs {
		if wc.Status != provider.WCSuccess {
			fmt.Fprintf(out, "  → error CQE: wr_id %d %v (status %d) vendor_err %#x\n", wc.WRID, wc.Status, int(wc.Status), wc.VendorErr)
		}
	}
	for i, h := range w.Hosts {
		if i > 0 && h == w.Hosts[0] {
			break
		}
		for {
			ev, err := h.Ctx.GetAsyncEvent(0)
			if err != nil {
				break
			}
			fmt.Fprintf(out, "  → async event on node %d: %v\n", i, ev.Type)
			h.Ctx.AckAsyncEvent(ev)
		}
	}
}

// checkSection prints what checked mode found (trace --check: vs, from
// checkViolations, times counted from the post as the walk's are).
func checkSection(out io.Writer, vs []*device.Violation) {
	for _, v := range vs {
		fmt.Fprintf(out, "check: %v\n", v)
	}
	if len(vs) == 0 {
		fmt.Fprintln(out, "check: no host-protocol violation observed")
	}
}

// checkViolations is what checked mode found on every device of w, in
// order, each a copy with its time counted from t0.
func checkViolations(w *testbed.World, t0 sim.Time) []*device.Violation {
	var vs []*device.Violation
	for i, h := range w.Hosts {
		if i > 0 && h == w.Hosts[0] {
			break
		}
		for _, v := range h.Dev.Checker().Violations() {
			c := *v
			c.At = sim.Time(v.At.Sub(t0))
			vs = append(vs, &c)
		}
	}
	return vs
}

// violationJSON is one checked-mode violation in trace --json.
type violationJSON struct {
	Rule     string  `json:"rule"`
	Name     string  `json:"name"`
	Node     int     `json:"node"`
	QPN      uint32  `json:"qpn,omitempty"`
	AtNS     float64 `json:"at_ns"` // from the post
	Observed string  `json:"observed"`
	Source   string  `json:"source"`
}

func violationsJSON(vs []*device.Violation) []violationJSON {
	var out []violationJSON
	for _, v := range vs {
		out = append(out, violationJSON{Rule: v.Rule, Name: v.Name, Node: v.Node, QPN: v.QPN, AtNS: sim.Duration(v.At).NS(), Observed: v.Observed, Source: v.Source})
	}
	return out
}

// faultFailure is the walk of a post whose WR failed under a fault plan
// (or in checked mode): every stage and warning in time order, then the
// fault section (notFired: what World.EndTimedFaults returned at the
// walk's end).
func faultFailure(out io.Writer, w *testbed.World, t0 sim.Time, wcs []provider.WC, check bool, notFired []fault.Scheduled, setup []fault.Stat) {
	fmt.Fprintf(out, "%3s  %-16s %-9s %4s %12s %12s %7s %5s\n", "#", "stage", "component", "node", "start_ns", "end_ns", "bytes", "tlps")
	n := 0
	for _, e := range w.Rec.Events() {
		if e.Level == trace.Warn {
			continue
		}
		n++
		fmt.Fprintf(out, "%3d  %-16s %-9s %4d %12.3f %12.3f %7d %5d\n", n, e.Name, e.Component, e.Node, e.Start.Sub(t0).NS(), e.End.Sub(t0).NS(), e.Bytes, e.TLPs)
	}
	faultSection(out, w, t0, wcs, notFired, setup)
	if check {
		checkSection(out, checkViolations(w, t0))
	}
}
