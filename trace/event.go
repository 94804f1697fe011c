package trace

import (
	"fmt"
	"sort"

	"github.com/softnic/softnic/sim"
)

// Level says whether an event is a normal stage or a warning.
type Level uint8

// Event levels.
const (
	Info Level = iota
	Warn
)

// Event is one stage of work on the virtual clock, or a warning.
type Event struct {
	Name      string // stage, e.g. "wqe_fetch", or a counter name for warnings
	Component string // "provider", "bar", "pcie", "wqefetch", "dma", "roce", "wire", "device", ...
	Node      int    // which NIC (and its host) the event belongs to
	Start     sim.Time
	End       sim.Time
	Bytes     int
	TLPs      int
	QPN       uint32
	Flow      uint64 // links the stages of one WQE (0: none)
	// PSN is the BTH PSN of the packet the stage handles (packetize,
	// wire, responder, ack, ack_rx), or NoPSN. Stage records NoPSN, so a
	// PSN of 0 is always a real one from StagePSN.
	PSN int32
	// Flows are further flows the stage belongs to besides Flow: a stage
	// shared by the WQEs of a post list (the doorbell, its TLPs, the WQE
	// fetch). Nil when recorded; LinkFlows sets it.
	Flows  []uint64
	Level  Level
	Detail string
}

// DefaultCapacity is how many events a NewRecorder keeps: the most recent
// 65536 (about 8 MiB). A walk of one post_send records a few dozen; a long
// run keeps its tail and counts what it overwrote (Dropped). Sinks still
// see every event.
const DefaultCapacity = 1 << 16

// Recorder collects events into a ring of bounded capacity. A nil
// *Recorder records nothing, so components can call it unconditionally;
// check On() before building costly details.
type Recorder struct {
	events  []Event
	cap     int    // 0: unbounded
	next    int    // once full: the oldest event, overwritten next
	dropped uint64 // events overwritten
	// Sinks see every event as it is recorded (e.g. a streaming writer).
	Sinks []func(*Event)
}

// NewRecorder returns an empty recorder keeping DefaultCapacity events.
func NewRecorder() *Recorder { return &Recorder{cap: DefaultCapacity} }

// NewRecorderCap returns an empty recorder keeping the n most recent
// events (n <= 0: every event, without bound).
func NewRecorderCap(n int) *Recorder { return &Recorder{cap: max(n, 0)} }

// SetCapacity makes the recorder keep the n most recent events from now
// on (n <= 0: every event, without bound), as a caller that knows how much
// it will record does (one walk kept whole). Events already kept stay, in
// order; if more than n, the oldest go and count as Dropped.
func (r *Recorder) SetCapacity(n int) {
	if r == nil {
		return
	}
	evs := r.Events()
	n = max(n, 0)
	if n > 0 && len(evs) > n {
		r.dropped += uint64(len(evs) - n)
		evs = evs[len(evs)-n:]
	}
	r.events = append(make([]Event, 0, len(evs)), evs...)
	r.cap, r.next = n, 0
}

// Capacity is how many events the recorder keeps (0: every event).
func (r *Recorder) Capacity() int {
	if r == nil {
		return 0
	}
	return r.cap
}

// On reports whether events are being recorded.
func (r *Recorder) On() bool { return r != nil }

// Record keeps ev, overwriting the oldest event when the ring is full.
func (r *Recorder) Record(ev Event) {
	if r == nil {
		return
	}
	p := r.slot()
	*p = ev
	r.sink(p)
}

// slot is where the next event goes: appended, or the oldest overwritten
// once the ring is full.
func (r *Recorder) slot() *Event {
	if r.cap == 0 || len(r.events) < r.cap {
		r.events = append(r.events, Event{})
		return &r.events[len(r.events)-1]
	}
	p := &r.events[r.next]
	r.next++
	if r.next == len(r.events) {
		r.next = 0
	}
	r.dropped++
	return p
}

func (r *Recorder) sink(p *Event) {
	for _, s := range r.Sinks {
		s(p)
	}
}

// Dropped is the number of events the ring overwrote.
func (r *Recorder) Dropped() uint64 {
	if r == nil {
		return 0
	}
	return r.dropped
}

// NoPSN is the PSN of an event that handles no packet.
const NoPSN int32 = -1

// Stage records an Info event without a PSN.
func (r *Recorder) Stage(node int, component, name string, start, end sim.Time, bytes, tlps int, qpn uint32, flow uint64) {
	if r != nil {
		r.stagePSN(node, component, name, start, end, bytes, tlps, qpn, flow, NoPSN)
	}
}

// StagePSN records an Info event of the packet with BTH PSN psn (NoPSN:
// none).
func (r *Recorder) StagePSN(node int, component, name string, start, end sim.Time, bytes, tlps int, qpn uint32, flow uint64, psn int32) {
	if r != nil { // small enough to inline: with the recorder off, no call at all
		r.stagePSN(node, component, name, start, end, bytes, tlps, qpn, flow, psn)
	}
}

func (r *Recorder) stagePSN(node int, component, name string, start, end sim.Time, bytes, tlps int, qpn uint32, flow uint64, psn int32) {
	p := r.slot()
	*p = Event{Name: name, Component: component, Node: node, Start: start, End: end, Bytes: bytes, TLPs: tlps, QPN: qpn, Flow: flow, PSN: psn}
	r.sink(p)
}

// AllFlows returns Flow (if any) followed by Flows.
func (e *Event) AllFlows() []uint64 {
	if e.Flow == 0 {
		return e.Flows
	}
	if len(e.Flows) == 0 {
		return []uint64{e.Flow}
	}
	return append([]uint64{e.Flow}, e.Flows...)
}

// Warnf records a warning at time t.
func (r *Recorder) Warnf(node int, t sim.Time, component, name string, format string, args ...any) {
	if r == nil {
		return
	}
	r.Record(Event{Name: name, Component: component, Node: node, Start: t, End: t, PSN: NoPSN, Level: Warn, Detail: fmt.Sprintf(format, args...)})
}

// Events returns the events kept, in recording order (a copy once the
// ring has wrapped).
func (r *Recorder) Events() []Event {
	if r == nil {
		return nil
	}
	if r.next == 0 {
		return r.events
	}
	return append(append(make([]Event, 0, len(r.events)), r.events[r.next:]...), r.events[:r.next]...)
}

// Reset drops all recorded events.
func (r *Recorder) Reset() {
	if r != nil {
		clear(r.events)
		r.events = r.events[:0]
		r.next, r.dropped = 0, 0
	}
}

// Warnings returns the warning events.
func (r *Recorder) Warnings() []Event {
	var w []Event
	for _, e := range r.Events() {
		if e.Level == Warn {
			w = append(w, e)
		}
	}
	return w
}

// Counter is the id of one named counter. Each package declares its
// counters once, in its catalogue, as package-level variables:
//
//	CtrFoo = trace.NewCounter("foo") // what foo counts
//
// so a call site reads ctr.Inc(CtrFoo) and costs an index into a slice,
// not a hash of the name.
type Counter uint32

var (
	counterNames  []string
	counterByName = map[string]Counter{}
)

// NewCounter returns the id of the counter called name, registering it on
// first use; the same name always gives the same id. Call it only from
// package-level variable declarations (program initialisation): the name
// table is not locked.
func NewCounter(name string) Counter {
	if id, ok := counterByName[name]; ok {
		return id
	}
	id := Counter(len(counterNames))
	counterNames = append(counterNames, name)
	counterByName[name] = id
	return id
}

// CounterByName returns the id of a registered counter name.
func CounterByName(name string) (Counter, bool) {
	id, ok := counterByName[name]
	return id, ok
}

// String is the counter's name.
func (c Counter) String() string {
	if int(c) < len(counterNames) {
		return counterNames[c]
	}
	return fmt.Sprintf("counter#%d", uint32(c))
}

// Counters is a set of named event counters (drops, errors, TLPs, ...),
// indexed by Counter id. A counter that was never added to is absent from
// Names and Snapshot (one that was added 0 is present). The zero value is
// ready to use. Not safe for concurrent use.
type Counters struct {
	c []ctrSlot
}

// ctrSlot is one counter: its value and whether it was ever added to,
// side by side (one bounds check and one cache line per Add).
type ctrSlot struct {
	v    uint64
	seen bool
}

// Inc adds one to id.
func (c *Counters) Inc(id Counter) { c.Add(id, 1) }

// Add adds n to id.
func (c *Counters) Add(id Counter, n uint64) {
	if int(id) >= len(c.c) {
		c.grow()
	}
	s := &c.c[id]
	s.v += n
	s.seen = true
}

// grow sizes the set for every registered counter.
func (c *Counters) grow() {
	v := make([]ctrSlot, len(counterNames))
	copy(v, c.c)
	c.c = v
}

// Value returns the value of id (0 if never counted).
func (c *Counters) Value(id Counter) uint64 {
	if int(id) < len(c.c) {
		return c.c[id].v
	}
	return 0
}

// Get returns the value of the counter called name (0 if never counted or
// not a registered name).
func (c *Counters) Get(name string) uint64 {
	if id, ok := counterByName[name]; ok {
		return c.Value(id)
	}
	return 0
}

// Names returns the names of the counters added to, in sorted order.
func (c *Counters) Names() []string {
	n := make([]string, 0)
	for id, sl := range c.c {
		if sl.seen {
			n = append(n, counterNames[id])
		}
	}
	sort.Strings(n)
	return n
}

// Snapshot copies the counters added to, by name.
func (c *Counters) Snapshot() map[string]uint64 {
	s := make(map[string]uint64)
	for id, sl := range c.c {
		if sl.seen {
			s[counterNames[id]] = sl.v
		}
	}
	return s
}

// StageInfo explains one named stage of the walk of a post_send.
type StageInfo struct {
	Summary   string // what happens during the stage
	Reference string // where it is specified (PRM section, IB spec, libmlx5 or kernel function, DESIGN.md)
	Arrow     string // what travels into the stage from the one before (the HTML view's arrows)
}

// Stages documents every stage name the walk records: the one table behind
// `softnic trace --explain` and the HTML view. Keys are Event.Name.
var Stages = map[string]StageInfo{
	"req_notify":      {"The application arms the CQ (ibv_req_notify_cq): the provider writes the arm sequence into the CQ doorbell record and rings the CQ doorbell in the UAR.", "libmlx5 mlx5_arm_cq; mlx5.md §6", "call"},
	"cq_arm":          {"The device sees the CQ arm doorbell and will write an EQE and raise an interrupt on the next completion.", "mlx5.md §6 (CQ arm doorbell)", "MWr TLP"},
	"wqe_build":       {"The provider writes the WQE into the send queue ring in host memory: a control segment (opcode, WQE index, QPN, DS count, fence/completion flags), then the remote-address, datagram, data-pointer or inline segments.", "libmlx5 mlx5_post_send; mlx5.md §4.2", "call"},
	"dbr_update":      {"The provider bumps the send counter in the QP's doorbell record (host memory, big-endian) after a write barrier, so the device can tell how far the producer is.", "libmlx5 mlx5_post_send (qp->db[MLX5_SND_DBR]); mlx5.md §4.7", "store"},
	"bf_mmio":         {"BlueFlame: a single small WQE is copied with 64-byte write-combined stores straight into the UAR's current BlueFlame buffer, so the device gets the WQE itself with the doorbell.", "libmlx5 mlx5_bf_copy; mlx5.md §4.8", "MMIO stores"},
	"doorbell_mmio":   {"Doorbell: one 8-byte store of the control segment's first 8 bytes to UAR+0x800 tells the device the new producer index; the device must then read the WQE from host memory.", "libmlx5 mlx5_write64 / mmio_write64_be; mlx5.md §4.7", "MMIO store"},
	"wc_flush":        {"The CPU's write-combining buffer merges the stores into 64-byte lines and emits them on a fence (sfence), a full line or an eviction; a missing fence shows as a late or torn write.", "Intel SDM Vol. 3 §11.3 (write-combining memory type)", "WC line"},
	"pcie_tlp":        {"Each MMIO write leaves the root complex as a posted Memory Write TLP: header, payload and link overheads serialised at the PCIe generation and width, plus link latency.", "PCIe Base Spec §2 (posted MWr TLPs)", "MWr TLP"},
	"wqe_fetch":       {"On a doorbell the WQE fetch engine DMA-reads the new WQEBBs from the send queue ring (MRd requests, CplD completions), copies and validates them. BlueFlame skips this read.", "mlx5.md §4.9", "MRd/CplD"},
	"rq_wqe_fetch":    {"The responder reads the next receive WQE (scatter list) from its receive queue ring by DMA.", "mlx5.md §5 (receive queue)", "MRd/CplD"},
	"rq_wqe_prefetch": {"The device reads the next posted receive WQE ahead, before a message needs it (after RTR and after each receive it consumes; the read-ahead mechanism is an assumption, see device/recvq.go).", "mlx5.md §5 (receive queue); timing.md §4.1", "MRd/CplD"},
	"tx_pipeline":     {"The built packet crosses the port's transmit pipeline to the wire (latency only; an assumed profile figure, core.tx_pipeline_ps).", "timing.md §4.1, §5.2", ""},
	"rx_pipeline":     {"The received packet crosses the port's receive pipeline to its QP (latency only; an assumed profile figure, core.rx_pipeline_ps).", "timing.md §4.1, §5.2", ""},
	"rq_wqe_hit":      {"The responder takes the receive WQE it read ahead: no DMA on the message's critical path (it waits only if the read-ahead is still in flight).", "mlx5.md §5 (receive queue); timing.md §4.1", ""},
	"srq_wqe_fetch":   {"The responder reads the next receive WQE from the shared receive queue by DMA.", "mlx5.md §5 (SRQ)", "MRd/CplD"},
	"payload_dma":     {"The DMA engine gathers the payload of each data segment after the lkey/PD/bounds checks: Memory Read requests split by MRRS, completions (CplD) split by RCB and MPS.", "PCIe Base Spec §2 (MRd/CplD); mlx5.md §4.3", "MRd/CplD"},
	"read_scatter":    {"The requester scatters an RDMA READ response's payload into the local buffer by DMA writes.", "rocev2.md §4 (READ response); PCIe posted MWr", "frame"},
	"packetize":       {"The packetizer cuts the message by path MTU into RoCEv2 packets: Ethernet, IPv4, UDP port 4791, BTH (opcode, PSN, dest QPN), RETH/AETH/ImmDt/DETH as the opcode needs, payload and ICRC.", "IBTA RoCEv2 Annex A17; rocev2.md §1", "payload"},
	"wire":            {"The frame is serialised at the link rate and propagates to the peer port (or loops back).", "IEEE 802.3; rocev2.md §1", "frame"},
	"responder":       {"The peer NIC depacketizes and checks the packet (ICRC, QPN, PSN, rkey), writes the payload into the memory region or consumes a receive WQE, and schedules the ACK / READ response / NAK.", "IBTA Vol. 1 §9.7 (responder); rocev2.md §4", "frame"},
	"ack":             {"The responder builds an ACK (BTH + AETH with the MSN and credits) for the PSNs it has accepted.", "rocev2.md §4.3; IBTA Vol. 1 §9.7.5", "—"},
	"ack_rx":          {"The requester receives the ACK, retires the acknowledged WQEs and schedules their completions.", "rocev2.md §4.3; IBTA Vol. 1 §9.7.5", "frame"},
	"cqe_write":       {"The device DMA-writes a 64-byte CQE (opcode, owner bit, WQE counter, QPN, byte count) into the CQ ring: a posted MWr.", "mlx5.md §6.1", "CQE DMA"},
	"eqe_write":       {"The device writes an event queue entry naming the CQ that completed.", "mlx5.md §6 (EQE)", "EQE DMA"},
	"msix":            {"The device raises the EQ's MSI-X interrupt: a posted write to the interrupt address.", "PCIe Base Spec §6.1.4 (MSI-X)", "MWr TLP"},
	"event":           {"The kernel's interrupt handler reads the EQ and delivers the completion event to the completion channel.", "Linux mlx5_ib / ib_uverbs completion events", "interrupt"},
	"get_cq_event":    {"The application takes the completion event from the channel (ibv_get_cq_event).", "libibverbs ibv_get_cq_event", "event"},
	"poll":            {"The provider polls the CQ: it sees the CQE's owner bit flip, reads the CQE and returns a work completion.", "libmlx5 mlx5_poll_cq; mlx5.md §6.1", "CQE"},
	"dma_tag_wait":    {"The DMA engine waits for a free read tag (the outstanding-read limit).", "PCIe Base Spec §2.2.6 (tags)", "—"},
	"doorbell_decode": {"The device decodes the 8-byte doorbell and schedules the send queue (doorbell_cycles).", "device/device.go Doorbell; spec core.doorbell_cycles", "—"},
	"bf_decode":       {"The device decodes the BlueFlame write and takes the WQE from the BF buffer (doorbell_cycles).", "device/device.go BlueFlame; spec core.doorbell_cycles", "—"},
	"wqe_parse":       {"The device validates and decodes one WQE (wqe_parse_cycles).", "device/requester.go WQEReady; spec core.wqe_parse_cycles", "—"},
	"cqe_build":       {"The device builds the CQE: owner bit, counters, timestamp (cqe_cycles).", "device/completion.go; spec core.cqe_cycles", "—"},
}
