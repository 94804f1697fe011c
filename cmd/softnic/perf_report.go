package main

// The output of `softnic perf`: perftest's header block and tables (the
// layout of perftest's, so that scripts that read perftest read these),
// or one JSON document with --json.

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// perfRule frames perftest's blocks: 87 dashes.
var perfRule = strings.Repeat("-", 87)

// perfAddr is one side's address line (perftest's pingpong_dest).
type perfAddr struct {
	LID      uint32   `json:"lid"`
	QPN      uint32   `json:"qpn"`
	PSN      uint32   `json:"psn"`
	RKey     uint32   `json:"rkey"`
	VAddr    uint64   `json:"vaddr"`
	OutReads uint32   `json:"out_reads"`
	GID      [16]byte `json:"-"`
	GIDText  string   `json:"gid"`
}

// perfHeader is the block above the table.
type perfHeader struct {
	Title     string     `json:"title"`
	Test      string     `json:"test"`
	Device    string     `json:"device"`
	QPs       int        `json:"qps"`
	Conn      string     `json:"connection_type"`
	TXDepth   int        `json:"tx_depth,omitempty"`
	RXDepth   int        `json:"rx_depth,omitempty"`
	PostList  int        `json:"post_list,omitempty"`
	CQMod     int        `json:"cq_moderation,omitempty"`
	MTU       int        `json:"mtu"`
	LinkType  string     `json:"link_type"`
	GIDIndex  int        `json:"gid_index"`
	MaxInline int        `json:"max_inline_data"`
	OutReads  int        `json:"outstanding_reads,omitempty"`
	Events    bool       `json:"events,omitempty"` // -e
	Profile   string     `json:"profile"`
	Clock     string     `json:"clock"`
	Role      string     `json:"role"`
	Local     []perfAddr `json:"local"`
	Remote    []perfAddr `json:"remote"`
	verb      perfVerb
	bw        bool
}

// cHex formats v as C's printf "%#0<width>x" does: a 0x prefix counted in
// the width for a non-zero value, none for zero.
func cHex(v uint64, width int) string {
	if v == 0 {
		return fmt.Sprintf("%0*x", width, 0)
	}
	return fmt.Sprintf("0x%0*x", max(width-2, 0), v)
}

func newPerfHeader(o *perfOpts, mtu int, profileName, clock, role string) perfHeader {
	t := o.test
	h := perfHeader{Test: t.name, Device: "softnic0", QPs: o.qps, Conn: o.conn, MTU: mtu, LinkType: "Ethernet",
		GIDIndex: o.gidIdx, MaxInline: o.inline, Events: o.events, Profile: profileName, Clock: clock, Role: role, verb: t.verb, bw: t.bw}
	if o.dev != "" {
		h.Device = o.dev
	}
	title := verbTitle[t.verb] + " "
	if t.verb == verbAtomic {
		title += o.atomic + " "
	}
	if t.bw {
		if o.bidir {
			title += "Bidirectional "
		}
		if o.postList > 1 {
			title += "Post List "
		}
		title += "BW "
	} else {
		title += "Latency "
	}
	h.Title = title + "Test"
	if role != "server" || o.bidir {
		h.TXDepth = o.txDepth
	}
	if o.postList > 1 {
		h.PostList = o.postList
	}
	if t.verb == verbSend && (role != "client" || o.bidir) {
		h.RXDepth = o.rxDepth
	}
	if t.bw {
		h.CQMod = o.cqMod
	}
	if t.verb == verbRead || t.verb == verbAtomic {
		h.OutReads = perfOutReads
		if o.outs > 0 {
			h.OutReads = o.outs
		}
	}
	return h
}

func (a *perfAddr) fill() { a.GIDText = gidDecimal(a.GID) }

// gidDecimal is perftest's GID line: the 16 bytes as "%02d:" pairs.
func gidDecimal(g [16]byte) string {
	s := make([]string, 16)
	for i, b := range g {
		s[i] = fmt.Sprintf("%02d", b)
	}
	return strings.Join(s, ":")
}

func (h *perfHeader) write(w io.Writer) {
	fmt.Fprintln(w, perfRule)
	fmt.Fprintf(w, "                    %s\n", h.Title)
	if h.Events {
		// perftest's line names the completion vector, <device>_comp<N>
		// with N its --eq_num (default 0); softnic has one vector.
		fmt.Fprintf(w, " Test with events. Using %s_comp0\n", h.Device)
	}
	fmt.Fprintf(w, " Dual-port       : OFF\t\tDevice         : %s\n", h.Device)
	fmt.Fprintf(w, " Number of qps   : %d\t\tTransport type : IB\n", h.QPs)
	fmt.Fprintf(w, " Connection type : %s\t\tUsing SRQ      : OFF\n", h.Conn)
	fmt.Fprintf(w, " PCIe relax order: OFF\n")
	fmt.Fprintf(w, " ibv_wr* API     : OFF\n")
	if h.TXDepth > 0 {
		fmt.Fprintf(w, " TX depth        : %d\n", h.TXDepth)
	}
	if h.PostList > 1 {
		fmt.Fprintf(w, " Post List       : %d\n", h.PostList)
	}
	if h.RXDepth > 0 {
		fmt.Fprintf(w, " RX depth        : %d\n", h.RXDepth)
	}
	if h.bw {
		fmt.Fprintf(w, " CQ Moderation   : %d\n", h.CQMod)
	}
	fmt.Fprintf(w, " Mtu             : %d[B]\n", h.MTU)
	fmt.Fprintf(w, " Link type       : %s\n", h.LinkType)
	fmt.Fprintf(w, " GID index       : %d\n", h.GIDIndex)
	if h.verb != verbRead && h.verb != verbAtomic {
		fmt.Fprintf(w, " Max inline data : %d[B]\n", h.MaxInline)
	} else {
		fmt.Fprintf(w, " Outstand reads  : %d\n", h.OutReads)
	}
	fmt.Fprintf(w, " rdma_cm QPs\t : OFF\n")
	fmt.Fprintf(w, " Data ex. method : Ethernet\n")
	fmt.Fprintf(w, " softnic profile : %s\n", h.Profile)
	fmt.Fprintf(w, " softnic clock   : %s\n", h.Clock)
	fmt.Fprintln(w, perfRule)
	for i := range h.Local {
		h.addrLine(w, "local", &h.Local[i])
	}
	for i := range h.Remote {
		h.addrLine(w, "remote", &h.Remote[i])
	}
}

func (h *perfHeader) addrLine(w io.Writer, side string, a *perfAddr) {
	fmt.Fprintf(w, " %s address: LID %s QPN %s PSN %s", side, cHex(uint64(a.LID), 4), cHex(uint64(a.QPN), 6), cHex(uint64(a.PSN), 6))
	switch h.verb {
	case verbRead:
		fmt.Fprintf(w, " OUT %s", cHex(uint64(a.OutReads), 4))
		fallthrough
	case verbWrite:
		fmt.Fprintf(w, " RKey %s VAddr %s", cHex(uint64(a.RKey), 8), cHex(a.VAddr, 16))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, " GID: %s\n", gidDecimal(a.GID))
}

// Table headings and rows, in perftest's columns.
const (
	latHeading    = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "
	latDurHeading = " #bytes        #iterations       t_avg[usec]    tps average"
)

func bwHeading(gbits bool) string {
	u := "MiB/sec"
	if gbits {
		u = "Gb/sec"
	}
	return fmt.Sprintf(" #bytes     #iterations    BW peak[%s]    BW average[%s]   MsgRate[Mpps]", u, u)
}

func writeLatRow(w io.Writer, s latStats) {
	fmt.Fprintf(w, " %-7d %d          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f\n",
		s.Bytes, s.Iters, s.Min, s.Max, s.Typical, s.Avg, s.Stdev, s.P99, s.P999)
}

func writeLatDurRow(w io.Writer, s latDuration) {
	fmt.Fprintf(w, " %-7d       %d            %-7.2f        %-7.2f\n", s.Bytes, s.Iters, s.Avg, s.TPS)
}

func writeBWRow(w io.Writer, s bwStats, gbits bool) {
	if gbits && s.Avg < 0.1 {
		fmt.Fprintf(w, " %-7d    %d           %-7.6f            %-7.6f            %-7.6f\n", s.Bytes, s.Iters, s.Peak, s.Avg, s.MsgRate)
		return
	}
	fmt.Fprintf(w, " %-7d    %-10d       %-7.2f            %-7.2f\t\t   %-7.6f\n", s.Bytes, s.Iters, s.Peak, s.Avg, s.MsgRate)
}

// perfResult is a whole run, for --json.
type perfResult struct {
	Header      perfHeader    `json:"header"`
	Latency     []latStats    `json:"latency,omitempty"`
	LatDuration []latDuration `json:"latency_duration,omitempty"`
	Bandwidth   []bwStats     `json:"bandwidth,omitempty"`
	// Samples are -U's and -H's lists, a set per size.
	Samples []latSampleSet `json:"samples,omitempty"`
	// Counters are the devices' non-zero counters (one process: per node).
	Counters map[string]map[string]uint64 `json:"counters,omitempty"`
}

// perfPrinter prints as the run goes: the header, the heading, a row per
// size, the closing rule; or, with --json, the whole run at the end.
type perfPrinter struct {
	w      io.Writer
	o      *perfOpts
	res    perfResult
	headed bool
	// bwPassed: a bandwidth row met -w (perf_flags.go).
	bwPassed bool
}

func (p *perfPrinter) header(h perfHeader) {
	for i := range h.Local {
		h.Local[i].fill()
	}
	for i := range h.Remote {
		h.Remote[i].fill()
	}
	p.res.Header = h
	if p.o.json || p.o.output != "" {
		return
	}
	h.write(p.w)
}

func (p *perfPrinter) heading() {
	if p.headed || p.o.json || p.o.output != "" {
		return
	}
	p.headed = true
	fmt.Fprintln(p.w, perfRule)
	switch {
	case p.o.test.bw:
		fmt.Fprintln(p.w, bwHeading(p.o.gbits))
	case p.o.duration > 0:
		fmt.Fprintln(p.w, latDurHeading)
	default:
		fmt.Fprintln(p.w, latHeading)
	}
}

func (p *perfPrinter) lat(s latStats) {
	p.res.Latency = append(p.res.Latency, s)
	p.row("latency", s.Avg, func() { writeLatRow(p.w, s) })
}

func (p *perfPrinter) latDur(s latDuration) {
	p.res.LatDuration = append(p.res.LatDuration, s)
	p.row("latency", s.Avg, func() { writeLatDurRow(p.w, s) })
}

func (p *perfPrinter) bw(s bwStats) {
	p.res.Bandwidth = append(p.res.Bandwidth, s)
	// -w: perftest's is_bw_limit_passed, set by any row at the limit.
	p.bwPassed = p.bwPassed || s.Avg >= p.o.limitBW
	p.row("bandwidth", s.Avg, func() { writeBWRow(p.w, s, p.o.gbits) })
}

// row prints one result: nothing with --json (end writes the document),
// the average alone with -o output, else a table row under the heading.
func (p *perfPrinter) row(output string, avg float64, write func()) {
	switch {
	case p.o.json:
	case p.o.output == output:
		fmt.Fprintf(p.w, "%f\n", avg)
	default:
		p.heading()
		write()
	}
}

// end closes the table, or writes the JSON document.
func (p *perfPrinter) end() error {
	if p.o.json {
		enc := json.NewEncoder(p.w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(p.res); err != nil {
			return err
		}
		return p.limitErr()
	}
	if p.o.output == "" {
		p.heading()
		fmt.Fprintln(p.w, perfRule)
	}
	return p.limitErr()
}
