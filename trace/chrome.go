package trace

import (
	"bufio"
	"io"
	"slices"
	"strconv"
	"unicode/utf8"
)

// componentOrder is the order of a node's tracks in the Chrome trace: the
// walk of one post_send (DESIGN.md §2). Other components follow,
// alphabetically.
var componentOrder = []string{"provider", "bar", "pcie", "wqefetch", "dma", "roce", "wire", "device"}

func componentRank(c string) int {
	if i := slices.Index(componentOrder, c); i >= 0 {
		return i
	}
	return len(componentOrder)
}

// track is one Chrome thread (pid, tid): one lane of one component.
type track struct {
	pid, tid int
	name     string
}

// chromeLayout places events on tracks such that the slices on each track
// nest strictly (Perfetto drops or mangles partially overlapping X events
// on one track).
type chromeLayout struct {
	tracks  []track // in (pid, tid) order
	trackOf []int   // event index -> index in tracks
	order   []int   // event indexes in output order
}

// interval end used for nesting: a malformed event (End < Start) is laid
// out, and written, as an instant.
func endOf(ev *Event) int64 {
	if ev.End < ev.Start || ev.Level == Warn {
		return int64(ev.Start)
	}
	return int64(ev.End)
}

func layoutChrome(events []Event) *chromeLayout {
	lay := &chromeLayout{trackOf: make([]int, len(events)), order: timeline(events)}
	// Group the events by (node, component), visiting them in start order
	// so that a greedy lane assignment sees parents before children.
	type key struct {
		node int
		comp string
	}
	groups := map[key][]int{}
	var keys []key
	for _, i := range lay.order {
		k := key{events[i].Node, events[i].Component}
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], i)
	}
	slices.SortFunc(keys, func(a, b key) int {
		if a.node != b.node {
			return a.node - b.node
		}
		if ra, rb := componentRank(a.comp), componentRank(b.comp); ra != rb {
			return ra - rb
		}
		switch {
		case a.comp < b.comp:
			return -1
		case a.comp > b.comp:
			return 1
		}
		return 0
	})
	nextTid := map[int]int{}
	for _, k := range keys {
		// lanes[j] is the stack of end times of the open slices on lane j.
		var lanes [][]int64
		var laneTrack []int
		for _, i := range groups[k] {
			ev := &events[i]
			start, end := int64(ev.Start), endOf(ev)
			lane := -1
			for j := range lanes {
				st := lanes[j]
				for len(st) > 0 && st[len(st)-1] <= start {
					st = st[:len(st)-1]
				}
				lanes[j] = st
				if lane < 0 && (len(st) == 0 || st[len(st)-1] >= end) {
					lane = j
				}
			}
			if lane < 0 {
				lane = len(lanes)
				lanes = append(lanes, nil)
				nextTid[k.node]++
				name := k.comp
				if lane > 0 {
					name += " #" + strconv.Itoa(lane+1)
				}
				laneTrack = append(laneTrack, len(lay.tracks))
				lay.tracks = append(lay.tracks, track{pid: k.node, tid: nextTid[k.node], name: name})
			}
			// A zero-length slice closes at once; it never encloses.
			if end > start {
				lanes[lane] = append(lanes[lane], end)
			}
			lay.trackOf[i] = laneTrack[lane]
		}
	}
	return lay
}

// WriteChrome writes events in the Chrome Trace Event Format (JSON object
// form) that Perfetto and chrome://tracing open (timing.md §8):
//
//   - pid is the node ("nic0 (host+device)"), tid one track per component,
//     ordered along the post_send walk; slices of one component that
//     overlap without nesting go on extra tracks ("dma #2", "dma #3"), since
//     slices on one track must nest strictly;
//   - stages are complete events (ph "X"), warnings instant events (ph "i",
//     thread scope); args carry bytes, tlps, qpn, flow and detail;
//   - events sharing a non-zero Flow are chained in time order by flow
//     arrows: a ph "s" at the source slice's start and a ph "f" with
//     "bp":"e" at the target slice's start, both binding to the enclosing
//     slice. Each flow event is written right after its slice, so for
//     equal timestamps the slice it belongs to is already open;
//   - ts and dur are microseconds written exactly from integer picoseconds
//     with 6 decimals.
//
// The output depends only on events (byte for byte).
func WriteChrome(w io.Writer, events []Event) error {
	lay := layoutChrome(events)

	// Flow arrows: consecutive Info events of one flow, in time order.
	type arrow struct{ id, from, to int }
	flows := map[uint64][]int{}
	var flowIDs []uint64
	for _, i := range lay.order {
		ev := &events[i]
		if ev.Flow == 0 || ev.Level == Warn {
			continue
		}
		if _, ok := flows[ev.Flow]; !ok {
			flowIDs = append(flowIDs, ev.Flow)
		}
		flows[ev.Flow] = append(flows[ev.Flow], i)
	}
	slices.Sort(flowIDs)
	out := map[int][]arrow{} // arrows leaving an event
	in := map[int][]arrow{}  // arrows arriving at an event
	id := 0
	for _, f := range flowIDs {
		evs := flows[f]
		for j := 1; j < len(evs); j++ {
			id++
			a := arrow{id: id, from: evs[j-1], to: evs[j]}
			out[a.from] = append(out[a.from], a)
			in[a.to] = append(in[a.to], a)
		}
	}

	bw := bufio.NewWriter(w)
	var b []byte
	first := true
	emit := func() {
		if !first {
			bw.WriteString(",\n")
		}
		first = false
		bw.Write(b)
		b = b[:0]
	}
	bw.WriteString("{\"traceEvents\":[\n")

	// Metadata: process and thread names and sort order.
	lastPid, havePid := 0, false
	for _, tr := range lay.tracks {
		if !havePid || tr.pid != lastPid {
			havePid, lastPid = true, tr.pid
			b = appendMeta(b, "process_name", tr.pid, 0, "name", "nic"+strconv.Itoa(tr.pid)+" (host+device)")
			emit()
			b = appendMetaInt(b, "process_sort_index", tr.pid, 0, tr.pid)
			emit()
		}
		b = appendMeta(b, "thread_name", tr.pid, tr.tid, "name", tr.name)
		emit()
		b = appendMetaInt(b, "thread_sort_index", tr.pid, tr.tid, tr.tid)
		emit()
	}

	for _, i := range lay.order {
		ev := &events[i]
		tr := &lay.tracks[lay.trackOf[i]]
		b = append(b, `{"name":`...)
		b = appendJSONString(b, ev.Name)
		b = append(b, `,"cat":`...)
		b = appendJSONString(b, ev.Component)
		if ev.Level == Warn {
			b = append(b, `,"ph":"i","s":"t"`...)
		} else {
			b = append(b, `,"ph":"X"`...)
		}
		b = appendPidTid(b, tr.pid, tr.tid)
		b = append(b, `,"ts":`...)
		b = appendFixed(b, int64(ev.Start), 1e6, 6)
		if ev.Level != Warn {
			b = append(b, `,"dur":`...)
			b = appendFixed(b, endOf(ev)-int64(ev.Start), 1e6, 6)
		}
		b = append(b, `,"args":{"bytes":`...)
		b = strconv.AppendInt(b, int64(ev.Bytes), 10)
		b = append(b, `,"tlps":`...)
		b = strconv.AppendInt(b, int64(ev.TLPs), 10)
		if ev.QPN != 0 {
			b = append(b, `,"qpn":"`...)
			b = append(b, qpnHex(ev.QPN)...)
			b = append(b, '"')
		}
		if ev.Flow != 0 {
			b = append(b, `,"flow":`...)
			b = strconv.AppendUint(b, ev.Flow, 10)
		}
		if ev.Detail != "" {
			b = append(b, `,"detail":`...)
			b = appendJSONString(b, ev.Detail)
		}
		b = append(b, "}}"...)
		emit()
		for _, a := range in[i] {
			b = appendFlow(b, "f", a.id, tr, ev)
			emit()
		}
		for _, a := range out[i] {
			b = appendFlow(b, "s", a.id, tr, ev)
			emit()
		}
	}
	bw.WriteString("\n],\n\"displayTimeUnit\":\"ns\"}\n")
	return bw.Flush()
}

func appendPidTid(b []byte, pid, tid int) []byte {
	b = append(b, `,"pid":`...)
	b = strconv.AppendInt(b, int64(pid), 10)
	b = append(b, `,"tid":`...)
	return strconv.AppendInt(b, int64(tid), 10)
}

func appendMeta(b []byte, name string, pid, tid int, key, val string) []byte {
	b = append(b, `{"name":"`...)
	b = append(b, name...)
	b = append(b, `","ph":"M"`...)
	b = appendPidTid(b, pid, tid)
	b = append(b, `,"args":{"`...)
	b = append(b, key...)
	b = append(b, `":`...)
	b = appendJSONString(b, val)
	return append(b, "}}"...)
}

func appendMetaInt(b []byte, name string, pid, tid, v int) []byte {
	b = append(b, `{"name":"`...)
	b = append(b, name...)
	b = append(b, `","ph":"M"`...)
	b = appendPidTid(b, pid, tid)
	b = append(b, `,"args":{"sort_index":`...)
	b = strconv.AppendInt(b, int64(v), 10)
	return append(b, "}}"...)
}

// appendFlow writes one end of a flow arrow at ev's start on track tr.
func appendFlow(b []byte, ph string, id int, tr *track, ev *Event) []byte {
	b = append(b, `{"name":"flow","cat":"flow","ph":"`...)
	b = append(b, ph...)
	b = append(b, `","id":`...)
	b = strconv.AppendInt(b, int64(id), 10)
	if ph == "f" {
		b = append(b, `,"bp":"e"`...)
	}
	b = appendPidTid(b, tr.pid, tr.tid)
	b = append(b, `,"ts":`...)
	b = appendFixed(b, int64(ev.Start), 1e6, 6)
	return append(b, '}')
}

// appendJSONString appends s as a JSON string: quotes, backslashes and
// control characters escaped, invalid UTF-8 replaced by U+FFFD, nothing
// else (unlike encoding/json, no HTML escaping).
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c == '\t':
				b = append(b, '\\', 't')
			case c < 0x20:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, `\ufffd`...)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}

// LinkFlows returns a copy of events in which the stages of the peer and
// of the wire carry the flow of the WQE they serve, so that one flow runs
// from wqe_build to poll across both nodes. The devices record those
// stages without a flow (the responder does not know the requester's WQE
// index); the rule, exact for a walk without loss or retransmission:
//
//   - the k-th wire stage of a node carries the k-th frame that node
//     built (its packetize and ack stages, in start order);
//   - the k-th responder stage of a node serves the k-th frame the other
//     node put on the wire;
//   - an ack, or a packetize without a flow (a READ response), belongs to
//     the responder stage of its node that ended when it started, else to
//     the latest one that started before it;
//   - an ack_rx belongs to the wire stage that ended when it started.
//
// Events that already have a flow keep it.
func LinkFlows(events []Event) []Event {
	out := append([]Event(nil), events...)
	order := timeline(out)
	pick := func(node int, match func(e *Event) bool) []int {
		var r []int
		for _, i := range order {
			if e := &out[i]; e.Node == node && e.Level == Info && match(e) {
				r = append(r, i)
			}
		}
		return r
	}
	isFrame := func(e *Event) bool { return e.Component == "roce" && (e.Name == "packetize" || e.Name == "ack") }
	isWire := func(e *Event) bool { return e.Name == "wire" }
	isResp := func(e *Event) bool { return e.Name == "responder" }
	set := func(i int, f uint64) {
		if out[i].Flow == 0 {
			out[i].Flow = f
		}
	}
	nodes := map[int]bool{}
	for _, e := range out {
		nodes[e.Node] = true
	}
	wireOf := func(n int) {
		frames, wires := pick(n, isFrame), pick(n, isWire)
		for k := 0; k < len(frames) && k < len(wires); k++ {
			set(wires[k], out[frames[k]].Flow)
		}
	}
	// Requester frames and wires first (node 0), then the peer's stages
	// from them, then the peer's frames and wires.
	for _, n := range []int{0, 1} {
		if !nodes[n] {
			continue
		}
		wireOf(n)
		peer := 1 - n
		wires, resp := pick(n, isWire), pick(peer, isResp)
		for k := 0; k < len(wires) && k < len(resp); k++ {
			set(resp[k], out[wires[k]].Flow)
		}
		for _, i := range pick(peer, isFrame) {
			best := -1 // the one that ended as it started, else the latest before it
			for _, r := range resp {
				if out[r].End == out[i].Start {
					best = r
					break
				}
				if out[r].Start <= out[i].Start {
					best = r
				}
			}
			if best >= 0 {
				set(i, out[best].Flow)
			}
		}
	}
	for _, n := range []int{0, 1} {
		if nodes[n] {
			wireOf(n)
		}
	}
	// The provider's stages: the k-th wqe_build is the k-th parsed WQE,
	// the k-th poll reads the k-th CQE of its node, a dbr_update rings for
	// the wqe_build before it.
	for n := range nodes {
		pair := func(a, b string) {
			as, bs := pick(n, func(e *Event) bool { return e.Name == a }), pick(n, func(e *Event) bool { return e.Name == b })
			for k := 0; k < len(as) && k < len(bs); k++ {
				set(as[k], out[bs[k]].Flow)
			}
		}
		pair("wqe_build", "wqe_parse")
		pair("poll", "cqe_write")
		var last uint64
		for _, i := range order {
			if e := &out[i]; e.Node == n && e.Name == "wqe_build" {
				last = e.Flow
			} else if e.Node == n && e.Name == "dbr_update" {
				set(i, last)
			}
		}
	}
	for _, i := range order {
		e := &out[i]
		if e.Name != "ack_rx" || e.Flow != 0 {
			continue
		}
		for _, j := range pick(1-e.Node, isWire) {
			if out[j].End == e.Start {
				e.Flow = out[j].Flow
			}
		}
	}
	return out
}
