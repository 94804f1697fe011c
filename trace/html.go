package trace

// A self-contained HTML view of one walk (or two, compared): a sequence
// diagram with one lane per component and node, a detail panel with the
// stage's bytes and its reference, a per-WQE / per-packet flow table and,
// for two walks, the difference per stage. Everything is inline (CSS, JS,
// SVG); the page fetches nothing (a CSP meta tag forbids it).

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"math"
	"sort"
	"strings"
)

// WalkStage is one stage of a walk as the HTML view shows it.
type WalkStage struct {
	Name      string  `json:"name"`
	Component string  `json:"component"`
	Node      int     `json:"node"`
	StartNS   float64 `json:"start_ns"`
	EndNS     float64 `json:"end_ns"`
	Bytes     int     `json:"bytes"`
	TLPs      int     `json:"tlps"`
	QPN       uint32  `json:"qpn,omitempty"`
	Flow      uint64  `json:"flow,omitempty"`
	// Flows are the further flows of a stage shared by several WQEs.
	Flows  []uint64 `json:"flows,omitempty"`
	PSN    *uint32  `json:"psn,omitempty"`
	Detail string   `json:"detail,omitempty"`
	// Hex is the stage's bytes as annotated hex (as --hexdump prints
	// them), HexNote where they come from; empty when the walk has none.
	Hex     string `json:"hex,omitempty"`
	HexNote string `json:"hex_note,omitempty"`
}

// Walk is one post_send walk: a title line and its stages.
type Walk struct {
	Title   string
	Path    string // "blueflame", "doorbell", or "unknown" (the walk lost its first events)
	TotalNS float64
	Stages  []WalkStage
	// Warnings are the walk's warnings: the faults a plan injected and
	// what they caused (a dropped frame, an ACK timeout, a QP to ERR),
	// listed under the diagram with their times.
	Warnings []WalkStage
}

// laneDef is one lane kind, in the order the diagram draws them.
type laneDef struct{ kind, label string }

var laneDefs = []laneDef{
	{"cpu", "CPU / provider"}, {"wc", "WC buffer"}, {"bar", "BAR / UAR"}, {"pcie", "PCIe"}, {"wqefetch", "WQE fetch"},
	{"dma", "DMA"}, {"roce", "packetizer (RoCE)"}, {"device", "transport engine"}, {"cq", "CQ / completion"}, {"kernel", "kernel"},
}

// laneKind is the lane a stage is drawn in.
func laneKind(s WalkStage) string {
	switch s.Name {
	case "wqe_build", "dbr_update", "poll", "req_notify", "get_cq_event":
		return "cpu"
	case "wc_flush":
		return "wc"
	case "bf_mmio", "doorbell_mmio":
		return "bar"
	case "pcie_tlp":
		return "pcie"
	case "wqe_fetch", "rq_wqe_fetch", "rq_wqe_prefetch", "rq_wqe_hit", "srq_wqe_fetch":
		return "wqefetch"
	case "cqe_write", "eqe_write", "msix", "cq_arm":
		return "cq"
	case "wire":
		return "wire"
	}
	switch s.Component {
	case "provider":
		return "cpu"
	case "dma", "pcie", "wqefetch", "roce", "device", "kernel", "bar":
		return s.Component
	}
	return s.Component
}

// LaneID names a stage's lane: its kind and node ("dma-n1"); the wire is
// one lane between the nodes.
func LaneID(s WalkStage) string {
	k := laneKind(s)
	if k == "wire" {
		return "wire"
	}
	return fmt.Sprintf("%s-n%d", k, s.Node)
}

type htmlLane struct {
	ID, Label string
	Y         float64
}

type htmlStage struct {
	WalkStage
	I, W      int
	Lane      string
	Kind      string // lane kind without the node, for the colour
	X, Y, Wd  float64
	Key       string // name#k, k-th occurrence of the name: the comparison key
	Label     string
	ShowLabel bool
	Doc       htmlDoc
}

// flowsOf is every flow s belongs to (Flow, then Flows); {0} for none.
func flowsOf(s WalkStage) []uint64 {
	if s.Flow == 0 && len(s.Flows) == 0 {
		return []uint64{0}
	}
	var f []uint64
	if s.Flow != 0 {
		f = append(f, s.Flow)
	}
	for _, x := range s.Flows {
		if x != 0 && x != s.Flow {
			f = append(f, x)
		}
	}
	return f
}

type htmlArrow struct {
	To, From           int // stage indices; From -1: the post_send() call
	X1, Y1, X2, Y2     float64
	S1, S2             float64 // times (ns) of the ends, for re-layout
	Kind               string
	FromLane, ToLane   string
	FromLabel, ToLabel string
}

type htmlFlowRow struct {
	Head           bool
	Label          string
	Stages         int
	StartNS, EndNS float64
	Bytes          int
	PSN            string
	First          int // stage index to select
	PacketizeNS    string
	WireNS         string
}

type htmlWalk struct {
	W        int
	Title    string
	Path     string
	TotalNS  float64
	Lanes    []htmlLane
	Stages   []htmlStage
	Arrows   []htmlArrow
	Flows    []htmlFlowRow
	Height   float64
	Ticks    []htmlTick
	PxPerNS  float64
	StagesJS template.JS
	Warnings []WalkStage
}

type htmlTick struct {
	X     float64
	T     float64
	Label string
}

type htmlDiff struct {
	Key, Name  string
	A, B       string
	Delta      string
	Status     string
	DeltaClass string
}

type htmlPage struct {
	Title    string
	Walks    []htmlWalk
	Compare  bool
	Diffs    []htmlDiff
	TotalA   float64
	TotalB   float64
	TotalD   string
	Docs     []docRow
	MaxNS    float64
	LabelW   float64
	Width    float64
	LaneH    float64
	Snapshot string
}

type docRow struct {
	Name string
	htmlDoc
}

// Geometry of the diagram (SVG user units = CSS px at zoom 1).
const (
	htmlLabelW = 170.0
	htmlWidth  = 1180.0
	htmlLaneH  = 34.0
	htmlTop    = 26.0
)

//go:embed html.tmpl
var htmlTemplate string

var htmlTmpl = template.Must(template.New("walk").Funcs(template.FuncMap{
	"f1": func(v float64) string { return fmt.Sprintf("%.1f", v) },
	"f3": func(v float64) string { return fmt.Sprintf("%.3f", v) },
	"sub": func(a, b float64) float64 {
		return a - b
	},
	"add": func(a, b float64) float64 { return a + b },
	"hexflow": func(v uint64) string {
		if v == 0 {
			return "—"
		}
		return fmt.Sprintf("%#x", v)
	},
}).Parse(htmlTemplate))

// WriteHTML writes one self-contained HTML page: the walk, or with two
// walks both on one time scale and their difference per stage.
func WriteHTML(w io.Writer, walks ...Walk) error {
	if len(walks) == 0 || len(walks) > 2 {
		return fmt.Errorf("trace: WriteHTML takes one or two walks, not %d", len(walks))
	}
	p := htmlPage{LabelW: htmlLabelW, Width: htmlWidth, LaneH: htmlLaneH, Compare: len(walks) == 2}
	for _, wk := range walks {
		p.MaxNS = math.Max(p.MaxNS, wk.TotalNS)
		for _, s := range wk.Stages {
			p.MaxNS = math.Max(p.MaxNS, s.EndNS)
		}
	}
	if p.MaxNS <= 0 {
		p.MaxNS = 1
	}
	px := (htmlWidth - htmlLabelW - 20) / p.MaxNS
	for i, wk := range walks {
		p.Walks = append(p.Walks, layoutWalk(i, wk, px, p.MaxNS))
	}
	p.Title = walks[0].Title
	if p.Compare {
		p.Title = "compare: " + walks[0].Title + " vs " + walks[1].Title
		p.Diffs, p.TotalA, p.TotalB = diffWalks(p.Walks[0], p.Walks[1]), walks[0].TotalNS, walks[1].TotalNS
		p.TotalD = fmt.Sprintf("%+.3f", walks[1].TotalNS-walks[0].TotalNS)
	}
	var names []string
	inPage := map[string]bool{}
	for _, wk := range walks {
		for _, s := range wk.Stages {
			if !inPage[s.Name] {
				inPage[s.Name] = true
				names = append(names, s.Name)
			}
		}
	}
	sort.Slice(names, func(i, j int) bool { return stageOrder(names[i]) < stageOrder(names[j]) })
	for _, n := range names {
		p.Docs = append(p.Docs, docRow{n, stageDoc(n, "")})
	}
	return htmlTmpl.Execute(w, p)
}

var docOrder = []string{"req_notify", "cq_arm", "wqe_build", "dbr_update", "bf_mmio", "doorbell_mmio", "wc_flush", "pcie_tlp", "wqe_fetch",
	"rq_wqe_fetch", "srq_wqe_fetch", "dma_tag_wait", "payload_dma", "packetize", "wire", "responder", "ack", "ack_rx", "read_scatter",
	"cqe_write", "eqe_write", "msix", "event", "get_cq_event", "poll"}

func stageOrder(n string) int {
	for i, x := range docOrder {
		if x == n {
			return i
		}
	}
	return len(docOrder)
}

func layoutWalk(wi int, wk Walk, px, maxNS float64) htmlWalk {
	hw := htmlWalk{W: wi, Title: wk.Title, Path: wk.Path, TotalNS: wk.TotalNS, PxPerNS: px, Warnings: wk.Warnings}
	present := map[string]bool{}
	nodes := map[int]bool{}
	for _, s := range wk.Stages {
		present[LaneID(s)] = true
		nodes[s.Node] = true
	}
	// Node 0's lanes top-down, the wire, then the peer's lanes bottom-up
	// (its transport engine next to the wire).
	var order []htmlLane
	for _, d := range laneDefs {
		if id := d.kind + "-n0"; present[id] {
			order = append(order, htmlLane{ID: id, Label: d.label + " · node 0"})
		}
	}
	if present["wire"] {
		order = append(order, htmlLane{ID: "wire", Label: "wire"})
	}
	var others []int
	for n := range nodes {
		if n != 0 {
			others = append(others, n)
		}
	}
	sort.Ints(others)
	for _, n := range others {
		for i := len(laneDefs) - 1; i >= 0; i-- {
			d := laneDefs[i]
			if id := fmt.Sprintf("%s-n%d", d.kind, n); present[id] {
				l := d.label
				if d.kind == "device" {
					l = "peer NIC engines"
				}
				order = append(order, htmlLane{ID: id, Label: fmt.Sprintf("%s · node %d", l, n)})
			}
		}
	}
	// Components the table does not know still get a lane.
	known := map[string]bool{}
	for _, l := range order {
		known[l.ID] = true
	}
	for _, s := range wk.Stages {
		if id := LaneID(s); !known[id] {
			known[id] = true
			order = append(order, htmlLane{ID: id, Label: fmt.Sprintf("%s · node %d", s.Component, s.Node)})
		}
	}
	laneY := map[string]float64{}
	for i := range order {
		order[i].Y = htmlTop + float64(i)*htmlLaneH
		laneY[order[i].ID] = order[i].Y
	}
	hw.Lanes = order
	hw.Height = htmlTop + float64(len(order))*htmlLaneH + 8
	x := func(t float64) float64 { return htmlLabelW + t*px }
	seen := map[string]int{}
	for i, s := range wk.Stages {
		k := seen[s.Name]
		seen[s.Name]++
		hs := htmlStage{WalkStage: s, I: i, W: wi, Lane: LaneID(s), Kind: laneKind(s), Key: fmt.Sprintf("%s#%d", s.Name, k), Doc: stageDoc(s.Name, s.Component)}
		hs.X = x(s.StartNS)
		hs.Wd = math.Max(2, (s.EndNS-s.StartNS)*px)
		hs.Y = laneY[hs.Lane] + 5
		hs.Label = s.Name
		hs.ShowLabel = hs.Wd >= float64(len(s.Name))*6.6+6
		if hs.Doc.Text == "" {
			hs.Doc = stageDoc(s.Name, s.Component)
		}
		hw.Stages = append(hw.Stages, hs)
	}
	// One arrow into every stage: from the previous stage of its flow
	// (a stage shared by a post list is the previous stage of each of its
	// WQEs' flows), else from the stage before it in the walk, else from
	// the call.
	lastOfFlow := map[uint64]int{}
	for i := range hw.Stages {
		s := &hw.Stages[i]
		from := i - 1
		if s.Flow != 0 {
			if j, ok := lastOfFlow[s.Flow]; ok {
				from = j
			}
		}
		for _, f := range flowsOf(s.WalkStage) {
			if f != 0 {
				lastOfFlow[f] = i
			}
		}
		a := htmlArrow{To: i, From: from, Kind: s.Doc.Arrow, ToLane: s.Lane, ToLabel: s.Name}
		a.S2, a.X2, a.Y2 = s.StartNS, s.X, s.Y+12
		if from < 0 {
			a.S1, a.X1, a.Y1, a.FromLabel = 0, htmlLabelW, s.Y+12, "post_send()"
		} else {
			f := hw.Stages[from]
			a.S1, a.X1, a.Y1, a.FromLane, a.FromLabel = f.EndNS, x(f.EndNS), f.Y+12, f.Lane, f.Name
		}
		hw.Arrows = append(hw.Arrows, a)
	}
	hw.Ticks = ticks(maxNS, px)
	hw.Flows = flowRows(hw.Stages)
	js, _ := json.Marshal(hw.Stages)
	hw.StagesJS = template.JS(js)
	return hw
}

func ticks(maxNS, px float64) []htmlTick {
	step := math.Pow(10, math.Floor(math.Log10(maxNS/5)))
	for maxNS/step > 10 {
		step *= 2
	}
	var t []htmlTick
	for v := 0.0; v <= maxNS*1.0001; v += step {
		t = append(t, htmlTick{X: htmlLabelW + v*px, T: v, Label: fmt.Sprintf("%g ns", v)})
	}
	return t
}

// flowRows is one row per WQE (flow) and under it one row per packet of
// that WQE, by PSN: the frame built (packetize, or ack for an ACK/NAK) and
// put on the wire by one node with one PSN. A stage shared by a post list
// counts in the row of each of its WQEs; a packet sent again (same PSN)
// stays one row.
func flowRows(st []htmlStage) []htmlFlowRow {
	var flows []uint64
	by := map[uint64][]int{}
	for i, s := range st {
		for _, f := range flowsOf(s.WalkStage) {
			if _, ok := by[f]; !ok {
				flows = append(flows, f)
			}
			by[f] = append(by[f], i)
		}
	}
	var rows []htmlFlowRow
	for _, f := range flows {
		idx := by[f]
		h := htmlFlowRow{Head: true, Stages: len(idx), StartNS: st[idx[0]].StartNS, First: idx[0]}
		if f == 0 {
			h.Label = "not tied to one WQE"
		} else {
			h.Label = fmt.Sprintf("WQE index %d · QPN %#x", f&0xffff, f>>16)
		}
		type key struct {
			node int
			psn  uint32
		}
		type pkt struct {
			key
			built, wire int // first packetize / ack, first wire stage (-1: none)
			ack         bool
			sent        int // wire stages (more than one: sent again)
		}
		var ps []*pkt
		byKey := map[key]*pkt{}
		reqNode := -1 // the node of the WQE's first packet: its requests
		for _, i := range idx {
			s := st[i]
			h.StartNS = math.Min(h.StartNS, s.StartNS)
			h.EndNS = math.Max(h.EndNS, s.EndNS)
			if f == 0 || s.PSN == nil || (s.Name != "packetize" && s.Name != "ack" && s.Name != "wire") {
				continue
			}
			k := key{s.Node, *s.PSN}
			p := byKey[k]
			if p == nil {
				p = &pkt{key: k, built: -1, wire: -1}
				byKey[k] = p
				ps = append(ps, p)
			}
			switch s.Name {
			case "wire":
				if p.wire < 0 {
					p.wire = i
				}
				p.sent++
			default:
				if p.built < 0 {
					p.built, p.ack = i, s.Name == "ack"
				}
			}
			if reqNode < 0 && s.Name == "packetize" {
				reqNode = s.Node
			}
		}
		rows = append(rows, h)
		nReq, nResp := 0, 0
		for _, p := range ps {
			r := htmlFlowRow{PSN: fmt.Sprintf("%d", p.psn), First: -1}
			switch {
			case p.ack:
				r.Label = "ACK"
			case p.node == reqNode || reqNode < 0:
				nReq++
				r.Label = fmt.Sprintf("packet %d", nReq)
			default:
				nResp++
				r.Label = fmt.Sprintf("response %d", nResp)
			}
			if p.sent > 1 {
				r.Label += fmt.Sprintf(" (sent %d times)", p.sent)
			}
			if p.built >= 0 {
				s := st[p.built]
				r.First, r.StartNS, r.EndNS, r.Bytes = p.built, s.StartNS, s.EndNS, s.Bytes
				r.PacketizeNS = fmt.Sprintf("%.3f–%.3f", s.StartNS, s.EndNS)
			}
			if p.wire >= 0 {
				s := st[p.wire]
				if r.First < 0 {
					r.First, r.StartNS, r.Bytes = p.wire, s.StartNS, s.Bytes
				}
				r.EndNS = math.Max(r.EndNS, s.EndNS)
				r.WireNS = fmt.Sprintf("%.3f–%.3f", s.StartNS, s.EndNS)
			}
			rows = append(rows, r)
		}
	}
	return rows
}

// diffWalks matches stages by name and occurrence and lists each with its
// duration in both walks.
func diffWalks(a, b htmlWalk) []htmlDiff {
	type d struct{ a, b *htmlStage }
	var keys []string
	m := map[string]*d{}
	add := func(s *htmlStage, first bool) {
		e, ok := m[s.Key]
		if !ok {
			e = &d{}
			m[s.Key] = e
			keys = append(keys, s.Key)
		}
		if first {
			e.a = s
		} else {
			e.b = s
		}
	}
	for i := range a.Stages {
		add(&a.Stages[i], true)
	}
	for i := range b.Stages {
		add(&b.Stages[i], false)
	}
	start := func(e *d) float64 {
		if e.a != nil {
			return e.a.StartNS
		}
		return e.b.StartNS
	}
	sort.SliceStable(keys, func(i, j int) bool {
		ei, ej := m[keys[i]], m[keys[j]]
		// b-only stages sort by their start in b against a's starts; good
		// enough to keep the walk order readable.
		return start(ei) < start(ej)
	})
	var out []htmlDiff
	for _, k := range keys {
		e := m[k]
		r := htmlDiff{Key: k, Name: strings.SplitN(k, "#", 2)[0], A: "—", B: "—", Delta: "—"}
		switch {
		case e.a != nil && e.b != nil:
			da, db := e.a.EndNS-e.a.StartNS, e.b.EndNS-e.b.StartNS
			r.A, r.B, r.Status = fmt.Sprintf("%.3f", da), fmt.Sprintf("%.3f", db), "both"
			r.Delta = fmt.Sprintf("%+.3f", db-da)
			switch {
			case db-da > 0.0005:
				r.DeltaClass = "slower"
			case da-db > 0.0005:
				r.DeltaClass = "faster"
			}
		case e.a != nil:
			da := e.a.EndNS - e.a.StartNS
			r.A, r.Status, r.Delta, r.DeltaClass = fmt.Sprintf("%.3f", da), "only in A", fmt.Sprintf("%+.3f", -da), "absent"
		default:
			db := e.b.EndNS - e.b.StartNS
			r.B, r.Status, r.Delta, r.DeltaClass = fmt.Sprintf("%.3f", db), "only in B", fmt.Sprintf("%+.3f", db), "absent"
		}
		out = append(out, r)
	}
	return out
}

// stageDoc is the HTML view's explanation of a stage, from trace.Stages.
func stageDoc(name, component string) htmlDoc {
	if d, ok := Stages[name]; ok {
		return htmlDoc{Text: d.Summary, Ref: d.Reference, Arrow: d.Arrow}
	}
	return htmlDoc{Text: "A stage of the walk (" + component + ").", Ref: "DESIGN.md §2", Arrow: "—"}
}

// htmlDoc is a stage's explanation as the page shows it.
type htmlDoc struct {
	Text, Ref, Arrow string
}
