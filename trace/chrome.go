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
//     thread scope); args carry bytes, tlps, qpn, flow, flows (the
//     further flows of a shared stage) and detail;
//   - events sharing a non-zero flow (Flow or one of Flows) are chained
//     in time order by flow arrows, so a stage shared by a post list has
//     an arrow into the next stage of each of its WQEs (two stages that
//     follow each other in several flows get one arrow): a ph "s" at the source slice's start and a ph "f" with
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
		if ev.Level == Warn {
			continue
		}
		for _, f := range ev.AllFlows() {
			if _, ok := flows[f]; !ok {
				flowIDs = append(flowIDs, f)
			}
			flows[f] = append(flows[f], i)
		}
	}
	slices.Sort(flowIDs)
	out := map[int][]arrow{} // arrows leaving an event
	in := map[int][]arrow{}  // arrows arriving at an event
	id := 0
	type pair struct{ from, to int }
	drawn := map[pair]bool{} // shared stages of several flows: one arrow between two of them
	for _, f := range flowIDs {
		evs := flows[f]
		for j := 1; j < len(evs); j++ {
			p := pair{evs[j-1], evs[j]}
			if drawn[p] {
				continue
			}
			drawn[p] = true
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
		if len(ev.Flows) > 0 {
			b = append(b, `,"flows":[`...)
			for k, f := range ev.Flows {
				if k > 0 {
					b = append(b, ',')
				}
				b = strconv.AppendUint(b, f, 10)
			}
			b = append(b, ']')
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
// from wqe_build to poll across both nodes, and in which the stages a post
// list shares belong to all of its WQEs. The devices record the peer's
// stages without a flow (the responder does not know the requester's WQE
// index) but with the PSN of their packet; the matching is by PSN, so it
// holds with loss and retransmission (a packet sent again keeps its PSN,
// and its stages join the same flow):
//
//   - a requester's packetize (node A, QPN qa, PSN p, flow F) is packet p
//     of the PSN space (A, qa): a request (READ requests included);
//   - a wire stage from node n names the destination QP qd (the BTH's);
//     the QP of node n that sends to qd is the one whose frames share the
//     most PSNs with those wires. It carries the request p of that QP's
//     space, else, as a response (an ACK, a READ response), the flow of
//     the requester (peer, qd) as below;
//   - the responder's stages of packet p (responder, rq_wqe_fetch,
//     srq_wqe_fetch, and the receive's cqe_build / cqe_write, which carry
//     the PSN of the packet that completed it) carry request p of the
//     space of the QP that sends to them;
//   - a response (an ack, a packetize and its payload_dma without a flow
//     — a READ response or an atomic ACK — and the requester's ack_rx) of
//     PSN x carries the
//     flow of the request with the closest PSN at or before x (modulo
//     2^24): an ACK names the PSN of a packet, READ response k of a READ
//     whose request is PSN p has PSN p+k.
//
// Then, per node: the k-th wqe_build of a QP is its k-th wqe_parse, the
// k-th poll reads the k-th CQE; the WQEs built since the previous
// dbr_update of a QP form a post list, and its dbr_update, doorbell_mmio,
// bf_mmio, wc_flush, pcie_tlp, doorbell_decode, bf_decode and wqe_fetch
// (each recorded with the flow of one WQE of the list) get the flows of
// the others in Flows. Events that already have a flow keep it.
func LinkFlows(events []Event) []Event {
	out := append([]Event(nil), events...)
	order := timeline(out)
	set := func(i int, f uint64) {
		if out[i].Flow == 0 {
			out[i].Flow = f
		}
	}
	nodes := map[int]bool{}
	for _, e := range out {
		nodes[e.Node] = true
	}
	// peer is the node at the other end of node n's link: the other of two
	// nodes, n itself on a loopback walk.
	peer := func(n int) int {
		if len(nodes) < 2 {
			return n
		}
		for m := range nodes {
			if m != n && len(nodes) == 2 {
				return m
			}
		}
		return n ^ 1
	}
	type qpKey struct {
		node int
		qpn  uint32
	}
	const psnMask = 0xffffff
	info := func(e *Event) bool { return e.Level == Info && e.PSN >= 0 }

	// The requests of each PSN space.
	reqs := map[qpKey]map[int32]uint64{}
	for i := range out {
		if e := &out[i]; info(e) && e.Name == "packetize" && e.Flow != 0 {
			k := qpKey{e.Node, e.QPN}
			if reqs[k] == nil {
				reqs[k] = map[int32]uint64{}
			}
			reqs[k][e.PSN] = e.Flow
		}
	}
	request := func(k qpKey, psn int32) uint64 { return reqs[k][psn] }
	// The request PSNs of each space in order, for response: a search, not
	// a scan of every request per response (a walk of a million packets
	// has thousands of ACKs).
	sorted := make(map[qpKey][]int32, len(reqs))
	for k, m := range reqs {
		ps := make([]int32, 0, len(m))
		for p := range m {
			ps = append(ps, p)
		}
		slices.Sort(ps)
		sorted[k] = ps
	}
	// response is the flow of the request a response of PSN psn answers:
	// the nearest request PSN at or before psn (modulo 2^24), if less than
	// half the PSN space before it.
	response := func(k qpKey, psn int32) uint64 {
		ps := sorted[k]
		if len(ps) == 0 {
			return 0
		}
		i, found := slices.BinarySearch(ps, psn&psnMask)
		if !found {
			i-- // the largest PSN below psn, or (-1) the largest of all, wrapped
		}
		if i < 0 {
			i = len(ps) - 1
		}
		p := ps[i]
		if (psn-p)&psnMask >= psnMask/2 {
			return 0
		}
		return reqs[k][p]
	}

	// Which local QP sends to a destination QP: the one whose frames share
	// the most PSNs with the wire stages to it.
	type psnKey struct {
		qpKey
		psn int32
	}
	framesAt := map[psnKey][]uint32{} // (node, PSN) -> local QPNs that built a frame
	for i := range out {
		if e := &out[i]; info(e) && e.Component == "roce" && (e.Name == "packetize" || e.Name == "ack") {
			k := psnKey{qpKey{e.Node, 0}, e.PSN}
			if !slices.Contains(framesAt[k], e.QPN) {
				framesAt[k] = append(framesAt[k], e.QPN)
			}
		}
	}
	overlap := map[qpKey]map[uint32]int{} // (node, dest QPN) -> local QPN -> PSNs in common
	seenWire := map[psnKey]bool{}
	for i := range out {
		e := &out[i]
		if !info(e) || e.Name != "wire" {
			continue
		}
		wk := psnKey{qpKey{e.Node, e.QPN}, e.PSN}
		if seenWire[wk] {
			continue // a retransmission: count each PSN once
		}
		seenWire[wk] = true
		d := qpKey{e.Node, e.QPN}
		for _, q := range framesAt[psnKey{qpKey{e.Node, 0}, e.PSN}] {
			if overlap[d] == nil {
				overlap[d] = map[uint32]int{}
			}
			overlap[d][q]++
		}
	}
	sender := map[qpKey]uint32{} // (node, dest QPN) -> local QPN
	for d, m := range overlap {
		best, n := uint32(0), 0
		for q, c := range m {
			if c > n || c == n && q < best {
				best, n = q, c
			}
		}
		sender[d] = best
	}
	// requester is the PSN space served by QP qpn of node n as a
	// responder: the peer's QP that sends to it.
	requester := func(n int, qpn uint32) (qpKey, bool) {
		p := peer(n)
		q, ok := sender[qpKey{p, qpn}]
		return qpKey{p, q}, ok
	}

	for i := range out {
		e := &out[i]
		if !info(e) || e.Flow != 0 {
			continue
		}
		switch e.Name {
		case "wire":
			if q, ok := sender[qpKey{e.Node, e.QPN}]; ok {
				if f := request(qpKey{e.Node, q}, e.PSN); f != 0 {
					e.Flow = f
					continue
				}
			}
			e.Flow = response(qpKey{peer(e.Node), e.QPN}, e.PSN)
		case "responder", "rq_wqe_fetch", "rq_wqe_hit", "srq_wqe_fetch", "cqe_build", "cqe_write":
			if k, ok := requester(e.Node, e.QPN); ok {
				e.Flow = request(k, e.PSN)
			}
		case "rx_pipeline":
			// A request at its responder, or a response at its requester.
			if k, ok := requester(e.Node, e.QPN); ok {
				if f := request(k, e.PSN); f != 0 {
					e.Flow = f
					continue
				}
			}
			e.Flow = response(qpKey{e.Node, e.QPN}, e.PSN)
		case "ack", "packetize", "payload_dma", "tx_pipeline":
			if k, ok := requester(e.Node, e.QPN); ok {
				e.Flow = response(k, e.PSN)
			}
		case "ack_rx":
			e.Flow = response(qpKey{e.Node, e.QPN}, e.PSN)
		}
	}
	// A shared receive queue's WQE fetch names no QP: it takes the flow of
	// the packet of that PSN the node's responder handled.
	for i := range out {
		e := &out[i]
		if !info(e) || e.Flow != 0 || e.Name != "srq_wqe_fetch" {
			continue
		}
		for _, j := range order {
			if r := &out[j]; r.Node == e.Node && r.Name == "responder" && r.PSN == e.PSN && r.Flow != 0 {
				e.Flow = r.Flow
				break
			}
		}
	}

	// The provider's stages.
	for n := range nodes {
		pick := func(name string, qpn uint32, anyQP bool) []int {
			var r []int
			for _, i := range order {
				if e := &out[i]; e.Node == n && e.Level == Info && e.Name == name && (anyQP || e.QPN == qpn) {
					r = append(r, i)
				}
			}
			return r
		}
		qps := map[uint32]bool{}
		for _, i := range order {
			if e := &out[i]; e.Node == n && e.Name == "wqe_build" {
				qps[e.QPN] = true
			}
		}
		for q := range qps {
			as, bs := pick("wqe_build", q, false), pick("wqe_parse", q, false)
			for k := 0; k < len(as) && k < len(bs); k++ {
				set(as[k], out[bs[k]].Flow)
			}
		}
		as, bs := pick("poll", 0, true), pick("cqe_write", 0, true)
		for k := 0; k < len(as) && k < len(bs); k++ {
			set(as[k], out[bs[k]].Flow)
		}
		// Post lists: the WQEs of a QP built since its previous dbr_update.
		lists := map[uint64][]uint64{} // flow -> the flows of its post list
		building := map[uint32][]uint64{}
		for _, i := range order {
			e := &out[i]
			if e.Node != n || e.Level != Info {
				continue
			}
			switch e.Name {
			case "wqe_build":
				if e.Flow != 0 {
					building[e.QPN] = append(building[e.QPN], e.Flow)
				}
			case "dbr_update":
				l := building[e.QPN]
				delete(building, e.QPN)
				if len(l) > 0 {
					set(i, l[len(l)-1])
				}
				for _, f := range l {
					lists[f] = l
				}
			}
		}
		for i := range out {
			e := &out[i]
			if e.Node != n || e.Level != Info || e.Flow == 0 || e.Flows != nil {
				continue
			}
			switch e.Name {
			case "dbr_update", "doorbell_mmio", "bf_mmio", "wc_flush", "pcie_tlp", "doorbell_decode", "bf_decode", "wqe_fetch":
				for _, f := range lists[e.Flow] {
					if f != e.Flow {
						e.Flows = append(e.Flows, f)
					}
				}
			}
		}
	}
	return out
}
