package fault

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"reflect"
	"strconv"
	"strings"

	"github.com/softnic/softnic/sim"
)

// Point names a hook point where a component consults the Injector.
type Point string

// Hook points. A component that owns one calls Decide there once per event
// (one frame, one TLP, one store, one DMA, one doorbell, one CQE).
const (
	WireTx   Point = "wire.tx"   // a frame starts transmission on a link
	WireRx   Point = "wire.rx"   // a frame arrives at a port
	PCIeTLP  Point = "pcie.tlp"  // a TLP crosses the PCIe link
	WCBuffer Point = "wc.buffer" // the write-combining buffer emits a line
	DMARead  Point = "dma.read"  // the device reads host memory
	DMAWrite Point = "dma.write" // the device writes host memory
	Doorbell Point = "doorbell"  // a doorbell or BlueFlame store reaches the UAR
	CQ       Point = "cq"        // the device writes a CQE
	EQ       Point = "eq"        // the device writes an EQE
	Port     Point = "port"      // the Ethernet port (timed rules: at_ps)
	Dev      Point = "device"    // the device as a whole (timed rules: at_ps)
)

// Points lists every hook point in a fixed order.
var Points = [...]Point{WireTx, WireRx, PCIeTLP, WCBuffer, DMARead, DMAWrite, Doorbell, CQ, EQ, Port, Dev}

// index returns the position of p in Points, or -1.
func (p Point) index() int {
	switch p {
	case WireTx:
		return 0
	case WireRx:
		return 1
	case PCIeTLP:
		return 2
	case WCBuffer:
		return 3
	case DMARead:
		return 4
	case DMAWrite:
		return 5
	case Doorbell:
		return 6
	case CQ:
		return 7
	case EQ:
		return 8
	case Port:
		return 9
	case Dev:
		return 10
	}
	return -1
}

// Valid reports whether p is one of the known hook points.
func (p Point) Valid() bool { return p.index() >= 0 }

// framePoint reports whether events at p are frames, whose hooks fill
// Event.Opcode and Event.PSN.
func (p Point) framePoint() bool { return p == WireTx || p == WireRx }

// Action is what a fired rule asks the hook to do. What each action means
// at a given point is the hook owner's business (documented there); e.g. on
// the wire Tear is meaningless, on the WC buffer it emits a partial line.
type Action uint8

// Actions.
const (
	None      Action = iota // do nothing (no rule fired)
	Drop                    // lose the event (frame, TLP, store, ...)
	Corrupt                 // flip bits in one byte
	Duplicate               // deliver the event twice
	Delay                   // deliver the event Decision.Delay later
	Reorder                 // hold the event and release it after the next one
	Tear                    // split the event (e.g. a torn 64-byte WC line)

	// Point-specific actions (see pointActions for where each applies).
	Timeout  // dma.*: the completion never comes (completion timeout)
	Abort    // dma.*: completer abort
	UR       // dma.*, pcie.tlp (MRd): unsupported request
	Poison   // dma.*: a poisoned TLP (EP bit set)
	IOMMU    // dma.*: IOMMU translation fault
	Stale    // doorbell: the previous doorbell's counter arrives instead
	Jump     // doorbell: the counter jumps Value WQEBBs (default 1) past the WQEs written
	Early    // doorbell: it reaches the device before the doorbell record is visible
	Overrun  // cq, eq: the queue overruns now
	Down     // port: the link goes down at at_ps (back up after for_ps, if set)
	Fatal    // device: firmware fatal error at at_ps (health syndrome Value, default 0x8)
	LinkLoss // device: the PCIe link is lost at at_ps (BAR0 reads all ones)
	numActions
)

var actionNames = [numActions]string{"none", "drop", "corrupt", "duplicate", "delay", "reorder", "tear",
	"timeout", "abort", "ur", "poison", "iommu", "stale", "jump", "early", "overrun", "down", "fatal", "link_loss"}

// pointActions is the set of actions each point's owner implements, as a
// bit mask of 1<<Action; a plan naming another is refused.
var pointActions = func() (m [len(Points)]uint32) {
	bits := func(as ...Action) (v uint32) {
		for _, a := range as {
			v |= 1 << a
		}
		return v
	}
	generic := bits(Drop, Corrupt, Duplicate, Delay, Reorder)
	m[0] = generic // wire.tx
	m[1] = generic // wire.rx
	m[2] = bits(Drop, Corrupt, Duplicate, Delay, UR)
	m[3] = bits(Drop, Corrupt, Duplicate, Delay, Reorder, Tear)
	m[4] = bits(Corrupt, Delay, Timeout, Abort, UR, Poison, IOMMU)
	m[5] = bits(Corrupt, Delay, Timeout, Abort, UR, Poison, IOMMU)
	m[6] = bits(Drop, Corrupt, Duplicate, Delay, Reorder, Stale, Jump, Early)
	m[7] = bits(Drop, Corrupt, Delay, Overrun)
	m[8] = bits(Drop, Delay, Overrun)
	m[9] = bits(Down)
	m[10] = bits(Fatal, LinkLoss)
	return m
}()

// Timed reports whether rules at p fire at a virtual time (at_ps) rather
// than on events.
func (p Point) Timed() bool { return p == Port || p == Dev }

// String returns the action's lower-case name, as used in JSON.
func (a Action) String() string {
	if a < numActions {
		return actionNames[a]
	}
	return fmt.Sprintf("action(%d)", uint8(a))
}

// MarshalText writes the action's name.
func (a Action) MarshalText() ([]byte, error) {
	if a >= numActions {
		return nil, fmt.Errorf("fault: unknown action %d", uint8(a))
	}
	return []byte(actionNames[a]), nil
}

// UnmarshalText parses an action name (case-insensitive).
func (a *Action) UnmarshalText(b []byte) error {
	s := strings.ToLower(string(b))
	for i, n := range actionNames {
		if n == s {
			*a = Action(i)
			return nil
		}
	}
	return fmt.Errorf("unknown action %q (want one of %s)", string(b), strings.Join(actionNames[1:], ", "))
}

// Event is what a hook owner knows about one event when it calls Decide.
// Fields a hook cannot fill take their "unknown" value: QPN 0, Opcode and
// PSN Unknown (-1). Build one with NewEvent so that a forgotten field reads
// as unknown rather than as opcode 0 / PSN 0.
type Event struct {
	Node   int    // the node that owns the hook (for Match.Node)
	QPN    uint32 // the event's QP; 0 if unknown. On the wire: the frame's BTH DestQP
	Opcode int16  // the BTH opcode (0..0xff) of a RoCE frame, or Unknown
	PSN    int32  // the BTH PSN (0..0xffffff) of a RoCE frame, or Unknown
	WQE    int32  // the wqe_index (doorbell, BlueFlame line, CQE wqe_counter, WQE fetch), or Unknown
	Addr   uint64 // dma.*: host IOVA; pcie.tlp, wc.buffer: BAR0 offset
	Len    uint32 // bytes at Addr; 0: no address known (an address match never matches)
	Kind   Kind   // pcie.tlp: the TLP type; dma.*: what the access is for; 0 unknown
}

// Kind is a TLP type (pcie.tlp) or the target of a DMA access (dma.*).
type Kind uint8

// Kinds.
const (
	KindNone Kind = iota
	KindMWr       // pcie.tlp: a posted MMIO write from the host
	KindMRd       // pcie.tlp: an MMIO read from the host
	KindData      // dma.*: payload (gather, scatter, READ response, atomic)
	KindWQE       // dma.read: a send WQE fetch, or a receive WQE read
	KindDBR       // dma.*: a doorbell record
	KindCQE       // dma.write: a CQE
	KindEQE       // dma.write: an EQE
	numKinds
)

var kindNames = [numKinds]string{"", "MWr", "MRd", "data", "wqe", "dbr", "cqe", "eqe"}

// String is the kind's name as used in JSON.
func (k Kind) String() string {
	if k < numKinds {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

func parseKind(s string, tlp bool) (Kind, bool) {
	lo, hi := KindData, numKinds
	if tlp {
		lo, hi = KindMWr, KindData
	}
	for k := lo; k < hi; k++ {
		if strings.EqualFold(kindNames[k], s) {
			return k, true
		}
	}
	return 0, false
}

// Unknown is the Opcode and PSN of an Event that has none (a TLP, a non-RoCE
// frame, ...).
const Unknown = -1

// NewEvent is an Event of node and qpn with no opcode and no PSN.
func NewEvent(node int, qpn uint32) Event {
	return Event{Node: node, QPN: qpn, Opcode: Unknown, PSN: Unknown, WQE: Unknown}
}

// MaxPSN is the largest 24-bit packet sequence number.
const MaxPSN = 0xFFFFFF

// maxQPN is the largest 24-bit QP number.
const maxQPN = 0xFFFFFF

// Match narrows a rule to some events. Nil fields match everything; a set
// field must equal the event's (Opcode, PSN and the PSN range never match
// an event whose opcode or PSN is Unknown).
//
// In JSON, qpn, psn, psn_from and psn_to take a number or a string holding
// a decimal or 0x-prefixed hex number ("0x100"); opcode also takes a BTH
// opcode name such as "RC_SEND_ONLY" or "UD_SEND_ONLY" (see opcodeNames).
type Match struct {
	Node   *int    `json:"node,omitempty"`   // only events of this node
	QPN    *uint32 `json:"qpn,omitempty"`    // only events of this QP (hooks pass 0 when unknown)
	Opcode *uint8  `json:"opcode,omitempty"` // only RoCE frames with this BTH opcode (wire points)
	PSN    *uint32 `json:"psn,omitempty"`    // only RoCE frames with this PSN (wire points)
	// PSNFrom and PSNTo bound the PSN, inclusive (wire points); either may
	// be omitted (0 and MaxPSN). No 24-bit wrap: from <= to. Not with PSN.
	PSNFrom *uint32 `json:"psn_from,omitempty"`
	PSNTo   *uint32 `json:"psn_to,omitempty"`
	// WQE is a wqe_index (doorbell, wc.buffer, cq: the CQE's wqe_counter,
	// dma.read with target wqe: the first WQEBB fetched).
	WQE *uint16 `json:"wqe,omitempty"`
	// AddrFrom and AddrTo bound an address range, inclusive: an event
	// matches when its bytes overlap it (dma.*: host IOVA; pcie.tlp and
	// wc.buffer: BAR0 offset). Either may be omitted.
	AddrFrom *uint64 `json:"addr_from,omitempty"`
	AddrTo   *uint64 `json:"addr_to,omitempty"`
	// TLP is a TLP type, "MWr" or "MRd" (pcie.tlp).
	TLP string `json:"tlp,omitempty"`
	// Target is what a DMA access is for: "data", "wqe", "dbr", "cqe",
	// "eqe" (dma.read, dma.write).
	Target string `json:"target,omitempty"`
}

// UnmarshalJSON decodes a match, accepting numbers, number strings and
// opcode names, and rejecting unknown fields.
func (m *Match) UnmarshalJSON(b []byte) error {
	if string(bytes.TrimSpace(b)) == "null" {
		return nil
	}
	var v struct {
		Node     *int     `json:"node"`
		QPN      *flexNum `json:"qpn"`
		Opcode   *flexNum `json:"opcode"`
		PSN      *flexNum `json:"psn"`
		PSNFrom  *flexNum `json:"psn_from"`
		PSNTo    *flexNum `json:"psn_to"`
		WQE      *flexNum `json:"wqe"`
		AddrFrom *flexNum `json:"addr_from"`
		AddrTo   *flexNum `json:"addr_to"`
		TLP      string   `json:"tlp"`
		Target   string   `json:"target"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return err
	}
	var out Match
	out.Node = v.Node
	u32 := func(name string, f *flexNum, max uint64) (*uint32, error) {
		if f == nil {
			return nil, nil
		}
		if f.op {
			return nil, fmt.Errorf("match.%s: %q is not a number", name, f.name)
		}
		if f.n > max {
			return nil, fmt.Errorf("match.%s %#x exceeds %#x", name, f.n, max)
		}
		x := uint32(f.n)
		return &x, nil
	}
	var err error
	if out.QPN, err = u32("qpn", v.QPN, maxQPN); err != nil {
		return err
	}
	if out.PSN, err = u32("psn", v.PSN, MaxPSN); err != nil {
		return err
	}
	if out.PSNFrom, err = u32("psn_from", v.PSNFrom, MaxPSN); err != nil {
		return err
	}
	if out.PSNTo, err = u32("psn_to", v.PSNTo, MaxPSN); err != nil {
		return err
	}
	if v.WQE != nil {
		w, err := u32("wqe", v.WQE, 0xFFFF)
		if err != nil {
			return err
		}
		x := uint16(*w)
		out.WQE = &x
	}
	u64 := func(name string, f *flexNum) (*uint64, error) {
		if f == nil {
			return nil, nil
		}
		if f.op {
			return nil, fmt.Errorf("match.%s: %q is not a number", name, f.name)
		}
		x := f.n
		return &x, nil
	}
	if out.AddrFrom, err = u64("addr_from", v.AddrFrom); err != nil {
		return err
	}
	if out.AddrTo, err = u64("addr_to", v.AddrTo); err != nil {
		return err
	}
	if v.TLP != "" {
		k, ok := parseKind(v.TLP, true)
		if !ok {
			return fmt.Errorf("match.tlp %q: want MWr or MRd", v.TLP)
		}
		out.TLP = k.String()
	}
	if v.Target != "" {
		k, ok := parseKind(v.Target, false)
		if !ok {
			return fmt.Errorf("match.target %q: want data, wqe, dbr, cqe or eqe", v.Target)
		}
		out.Target = k.String()
	}
	if f := v.Opcode; f != nil {
		if f.n > 0xFF {
			return fmt.Errorf("match.opcode %#x exceeds 0xff", f.n)
		}
		op := uint8(f.n)
		out.Opcode = &op
	}
	*m = out
	return nil
}

// flexNum is a JSON number, or a string with a decimal or 0x-hex number or
// (op set) an opcode name.
type flexNum struct {
	n    uint64
	op   bool   // parsed from an opcode name
	name string // the name, for errors
}

func (f *flexNum) UnmarshalJSON(b []byte) error {
	n, s, other, err := jsonUint(b)
	switch {
	case err != nil:
		return err
	case !other:
		f.n = n
		return nil
	}
	if op, ok := parseOpcodeName(s); ok {
		*f = flexNum{n: uint64(op), op: true, name: s}
		return nil
	}
	return fmt.Errorf("%q: want a number, 0x-hex or an opcode name like RC_SEND_ONLY", s)
}

// numArg is a JSON number, or a string with a decimal or 0x-hex number:
// an action's argument (mask, value).
type numArg struct{ n uint64 }

func (a *numArg) UnmarshalJSON(b []byte) error {
	n, s, other, err := jsonUint(b)
	switch {
	case err != nil:
		return err
	case other:
		return fmt.Errorf("%q: want a number or 0x-hex", s)
	}
	a.n = n
	return nil
}

// jsonUint decodes a JSON non-negative integer, or a string holding a
// decimal or 0x-hex one. A string that holds something else comes back
// as s with other set, for the caller to read otherwise or refuse.
func jsonUint(b []byte) (n uint64, s string, other bool, err error) {
	if len(b) > 0 && b[0] == '"' {
		if err := json.Unmarshal(b, &s); err != nil {
			return 0, "", false, err
		}
		if n, ok := parseNum(s); ok {
			return n, "", false, nil
		}
		return 0, s, true, nil
	}
	n, err = strconv.ParseUint(string(b), 10, 64)
	if err != nil {
		return 0, "", false, fmt.Errorf("%s: want a non-negative integer", b)
	}
	return n, "", false, nil
}

// parseNum parses "123" or "0x7b" (no sign, no octal, no underscores).
func parseNum(s string) (uint64, bool) {
	base := 10
	if len(s) > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') {
		s, base = s[2:], 16
	}
	if s == "" || s[0] == '+' || s[0] == '-' || strings.IndexByte(s, '_') >= 0 {
		return 0, false
	}
	n, err := strconv.ParseUint(s, base, 64)
	return n, err == nil
}

// Match flags of a compiled matcher.
const (
	mNode uint8 = 1 << iota
	mQPN
	mOpcode
	mPSN
	mWQE
	mAddr
	mKind
)

// matcher is a Match compiled for Decide: no pointers to chase and no
// aliasing with the caller's Plan.
type matcher struct {
	flags          uint8
	opcode         uint8
	kind           Kind
	wqe            int32
	qpn            uint32
	node           int
	psnLo, psnHi   int32
	addrLo, addrHi uint64
}

func compile(m *Match) matcher {
	var c matcher
	if m.Node != nil {
		c.flags |= mNode
		c.node = *m.Node
	}
	if m.QPN != nil {
		c.flags |= mQPN
		c.qpn = *m.QPN
	}
	if m.Opcode != nil {
		c.flags |= mOpcode
		c.opcode = *m.Opcode
	}
	// An unvalidated PSN above MaxPSN clamps to MaxPSN+1: no event has it.
	clamp := func(v uint32) int32 { return int32(min(v, MaxPSN+1)) }
	switch {
	case m.PSN != nil:
		c.flags |= mPSN
		c.psnLo, c.psnHi = clamp(*m.PSN), clamp(*m.PSN)
	case m.PSNFrom != nil || m.PSNTo != nil:
		c.flags |= mPSN
		lo, hi := psnBounds(m)
		c.psnLo, c.psnHi = clamp(lo), clamp(hi)
	}
	if m.WQE != nil {
		c.flags |= mWQE
		c.wqe = int32(*m.WQE)
	}
	if m.AddrFrom != nil || m.AddrTo != nil {
		c.flags |= mAddr
		c.addrLo, c.addrHi = 0, ^uint64(0)
		if m.AddrFrom != nil {
			c.addrLo = *m.AddrFrom
		}
		if m.AddrTo != nil {
			c.addrHi = *m.AddrTo
		}
	}
	if m.TLP != "" || m.Target != "" {
		c.flags |= mKind
		if k, ok := parseKind(m.TLP, true); ok && m.TLP != "" {
			c.kind = k
		} else if k, ok := parseKind(m.Target, false); ok {
			c.kind = k
		} else {
			c.kind = numKinds // matches nothing
		}
	}
	return c
}

func (c *matcher) matches(ev *Event) bool {
	if c.flags == 0 {
		return true
	}
	if c.flags&mNode != 0 && ev.Node != c.node {
		return false
	}
	if c.flags&mQPN != 0 && ev.QPN != c.qpn {
		return false
	}
	if c.flags&mOpcode != 0 && ev.Opcode != int16(c.opcode) {
		return false // also Unknown
	}
	if c.flags&mPSN != 0 && (ev.PSN < c.psnLo || ev.PSN > c.psnHi) {
		return false // psnLo >= 0, so also Unknown
	}
	if c.flags&mWQE != 0 && ev.WQE != c.wqe {
		return false
	}
	if c.flags&mAddr != 0 && (ev.Len == 0 || ev.Addr > c.addrHi || ev.Addr+uint64(ev.Len)-1 < c.addrLo) {
		return false
	}
	if c.flags&mKind != 0 && ev.Kind != c.kind {
		return false
	}
	return true
}

// packetMatch reports whether m uses the frame-only fields.
func (m *Match) packetMatch() bool {
	return m.Opcode != nil || m.PSN != nil || m.PSNFrom != nil || m.PSNTo != nil
}

func (m *Match) validate(pt Point) error {
	if m.Node != nil && *m.Node < 0 {
		// Nodes are numbered from 0: a negative node matches no event,
		// and the rule would never fire without saying so.
		return fmt.Errorf("match.node %d: want a node number >= 0 (leave node out for every node)", *m.Node)
	}
	for _, f := range [...]struct {
		name string
		v    *uint32
	}{{"qpn", m.QPN}, {"psn", m.PSN}, {"psn_from", m.PSNFrom}, {"psn_to", m.PSNTo}} {
		if f.v != nil && *f.v > MaxPSN {
			return fmt.Errorf("match.%s %#x exceeds %#x", f.name, *f.v, MaxPSN)
		}
	}
	switch {
	case m.PSN != nil && (m.PSNFrom != nil || m.PSNTo != nil):
		return errors.New("set match.psn or match.psn_from/psn_to, not both")
	case m.PSNFrom != nil && m.PSNTo != nil && *m.PSNFrom > *m.PSNTo:
		return fmt.Errorf("match.psn_from %d > psn_to %d (no 24-bit wrap)", *m.PSNFrom, *m.PSNTo)
	case m.packetMatch() && !pt.framePoint():
		return fmt.Errorf("match.opcode and match.psn apply to frames (%s, %s), not %s", WireTx, WireRx, pt)
	case m.WQE != nil && pt != Doorbell && pt != WCBuffer && pt != CQ && pt != DMARead:
		return fmt.Errorf("match.wqe applies to %s, %s, %s and %s, not %s", Doorbell, WCBuffer, CQ, DMARead, pt)
	case (m.AddrFrom != nil || m.AddrTo != nil) && pt != DMARead && pt != DMAWrite && pt != PCIeTLP && pt != WCBuffer:
		return fmt.Errorf("match.addr_from/addr_to apply to %s, %s, %s and %s, not %s", DMARead, DMAWrite, PCIeTLP, WCBuffer, pt)
	case m.AddrFrom != nil && m.AddrTo != nil && *m.AddrFrom > *m.AddrTo:
		return fmt.Errorf("match.addr_from %#x > addr_to %#x", *m.AddrFrom, *m.AddrTo)
	case m.TLP != "" && pt != PCIeTLP:
		return fmt.Errorf("match.tlp applies to %s, not %s", PCIeTLP, pt)
	case m.Target != "" && pt != DMARead && pt != DMAWrite:
		return fmt.Errorf("match.target applies to %s and %s, not %s", DMARead, DMAWrite, pt)
	case m.TLP != "":
		if _, ok := parseKind(m.TLP, true); !ok {
			return fmt.Errorf("match.tlp %q: want MWr or MRd", m.TLP)
		}
	case m.Target != "":
		k, ok := parseKind(m.Target, false)
		switch {
		case !ok:
			return fmt.Errorf("match.target %q: want data, wqe, dbr, cqe or eqe", m.Target)
		// The device only fetches WQEs (receive WQE reads are data), only
		// reads doorbell records and only writes CQEs and EQEs: such a
		// rule would never match.
		case k == KindWQE && pt != DMARead:
			return fmt.Errorf("match.target wqe is a WQE fetch, a %s: a %s rule with it never fires", DMARead, pt)
		case k == KindDBR && pt != DMARead:
			return fmt.Errorf("match.target dbr: the device only reads doorbell records (%s): a %s rule with it never fires", DMARead, pt)
		case (k == KindCQE || k == KindEQE) && pt != DMAWrite:
			return fmt.Errorf("match.target %s is a %s: a %s rule with it never fires", m.Target, DMAWrite, pt)
		// At dma.read only a WQE fetch carries a wqe_index.
		case m.WQE != nil && k != KindWQE:
			return fmt.Errorf("match.wqe at %s is the first WQEBB of a WQE fetch: with match.target %s the rule never fires (set target wqe, or leave it out)", pt, m.Target)
		}
	}
	if pt.Timed() && (m.QPN != nil || m.WQE != nil) {
		return fmt.Errorf("%s rules are timed: only match.node applies", pt)
	}
	return nil
}

// Rule is one line of a fault plan.
//
// Trigger: at most one of Nth, Every and Prob is set. Nth fires on the n-th
// matching event at Point (1-based), Every on every k-th (k, 2k, 3k, ...),
// Prob on each matching event with that probability (drawn from the point's
// seeded stream). A rule with none of them fires on every matching event
// (e.g. "drop everything": a link that is down). Count caps the number of
// firings (0: no cap). Events are counted per rule, after Match: "the 3rd
// frame of QP 7" rather than "the 3rd frame if it happens to be QP 7".
type Rule struct {
	Point  Point        `json:"point"`
	Action Action       `json:"action"`
	Nth    uint64       `json:"nth,omitempty"`
	Every  uint64       `json:"every,omitempty"`
	Prob   float64      `json:"prob,omitempty"`
	Count  uint64       `json:"count,omitempty"`
	Delay  sim.Duration `json:"delay_ps,omitempty"` // for Delay: how much later
	// Byte is the offset of the byte to corrupt; -1 (the JSON default)
	// lets the hook choose one from Decision.Rand. Note that a Rule built
	// in Go has Byte 0 unless set.
	Byte int `json:"byte"`
	// Mask is the XOR mask Corrupt applies to the byte (0: a random
	// non-zero one).
	Mask uint8 `json:"mask,omitempty"`
	// At is when a timed rule (port, device) fires, in virtual time.
	At sim.Time `json:"at_ps,omitempty"`
	// For is how long a port stays down (0: until the end of the run).
	For sim.Duration `json:"for_ps,omitempty"`
	// Value is the action's argument: jump, the WQEBBs the counter jumps
	// (default 1); fatal, the health syndrome (default 0x8).
	Value uint64 `json:"value,omitempty"`
	Match Match  `json:"match,omitzero"`
}

// UnmarshalJSON decodes a rule, defaulting Byte to -1 (random) and
// rejecting unknown fields, and an explicit 0 in nth, every or mask.
func (r *Rule) UnmarshalJSON(b []byte) error {
	type plain Rule // no methods: avoids recursion
	// mask and value are a byte mask and a syndrome or count: like the
	// match fields they take a number or a string with a decimal or
	// 0x-hex one ("mask": "0x80", "value": "0x8"). The outer fields
	// shadow plain's of the same name.
	// nth, every and count likewise ("nth": "0x10"), as every number
	// softnic reads takes 0x.
	var w struct {
		plain
		Mask  *numArg         `json:"mask"`
		Value *numArg         `json:"value"`
		Nth   json.RawMessage `json:"nth"`
		Every json.RawMessage `json:"every"`
		Count json.RawMessage `json:"count"`
	}
	w.Byte = -1
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return err
	}
	v := w.plain
	if w.Mask != nil {
		if w.Mask.n > 0xff {
			return fmt.Errorf("mask %#x: want a mask of 1..255", w.Mask.n)
		}
		v.Mask = uint8(w.Mask.n)
	}
	if w.Value != nil {
		v.Value = w.Value.n
	}
	for _, f := range []struct {
		name string
		raw  json.RawMessage
		p    *uint64
	}{{"nth", w.Nth, &v.Nth}, {"every", w.Every, &v.Every}, {"count", w.Count, &v.Count}} {
		if len(f.raw) == 0 || string(f.raw) == "null" {
			continue
		}
		n, _, other, err := jsonUint(f.raw)
		if err != nil || other {
			return fmt.Errorf("%s %s: want an integer in 0..18446744073709551615, or a string of one in decimal or 0x-hex", f.name, f.raw)
		}
		*f.p = n
	}
	if err := explicitZero(b, v.Nth, v.Every, v.Mask, v.Prob); err != nil {
		return err
	}
	if err := explicitZeroArg(b, v.Action, v.Value, v.For); err != nil {
		return err
	}
	// byte, like mask, only means something for corrupt. It cannot be
	// checked in validate (a Rule built in Go has Byte 0 unless set), but
	// the decoder starts from -1, the default that MarshalJSON also
	// writes: any other value on a drop rule is a plan that does not say
	// what its author thinks.
	if v.Action != Corrupt && v.Byte != -1 {
		return fmt.Errorf("byte set on a %s action (it is for corrupt)", v.Action)
	}
	*r = Rule(v)
	return nil
}

// explicitZero refuses nth, every, mask and prob given as 0. In Rule
// these fields are plain numbers where 0 means "not set" (no nth trigger,
// no every trigger, a random mask, no probability), so an explicit
// "nth": 0 would silently become "fire on every event" — the docs say nth
// and every are >= 1 and mask 1..255 — and "prob": 0, which reads as
// "never", would fire on every event too. Only the JSON shows whether the
// field was written: a field left out (or null) is still "not set".
func explicitZero(b []byte, nth, every uint64, mask uint8, prob float64) error {
	var set struct {
		Nth   json.RawMessage `json:"nth"`
		Every json.RawMessage `json:"every"`
		Mask  json.RawMessage `json:"mask"`
		Prob  json.RawMessage `json:"prob"`
	}
	if err := json.Unmarshal(b, &set); err != nil {
		return err
	}
	given := func(m json.RawMessage) bool { return m != nil && string(m) != "null" }
	switch {
	case given(set.Nth) && nth == 0:
		return zeroFieldError("nth 0: want nth >= 1 (1-based: the 1st matching event is nth 1); leave nth out to fire on every matching event")
	case given(set.Every) && every == 0:
		return zeroFieldError("every 0: want every >= 1; leave every out to fire on every matching event")
	case given(set.Mask) && mask == 0:
		return zeroFieldError("mask 0: want a mask of 1..255 (0 flips no bit); leave mask out for a random non-zero mask")
	case given(set.Prob) && prob == 0:
		return zeroFieldError("prob 0: a rule with probability 0 never fires, want prob in (0, 1]; leave the rule out (or prob out, to fire on every matching event)")
	}
	return nil
}

// explicitZeroArg refuses a jump or fatal "value": 0 and a port down's
// "for_ps": 0, which, like nth 0, are read as "not set" and so mean the
// opposite of what they say: a jump of 0 WQEBBs jumped 1, a fatal error
// with syndrome 0 (no error) raised 0x8, and a link down for 0 ps never
// came back.
func explicitZeroArg(b []byte, a Action, value uint64, forPS sim.Duration) error {
	var set struct {
		Value json.RawMessage `json:"value"`
		For   json.RawMessage `json:"for_ps"`
	}
	if err := json.Unmarshal(b, &set); err != nil {
		return err
	}
	given := func(m json.RawMessage) bool { return m != nil && string(m) != "null" }
	switch {
	case given(set.Value) && value == 0 && a == Jump:
		return zeroFieldError("value 0: a jump of 0 WQEBBs is no jump, want 1..0xffff; leave value out to jump 1")
	case given(set.Value) && value == 0 && a == Fatal:
		return zeroFieldError("value 0: health syndrome 0 is no error, want 1..0xff; leave value out for 0x8 (unrecoverable HW error)")
	case given(set.For) && forPS == 0 && a == Down:
		return zeroFieldError("for_ps 0: want for_ps > 0; leave for_ps out for a link that stays down")
	}
	return nil
}

// zeroFieldError is explicitZero's error: its text names the field, and
// it is ErrZeroField for errors.Is.
type zeroFieldError string

func (e zeroFieldError) Error() string        { return string(e) }
func (e zeroFieldError) Is(target error) bool { return target == ErrZeroField }

// String is a short description used in errors and stats, e.g.
// "wire.tx drop nth=3".
func (r *Rule) String() string {
	var sb strings.Builder
	sb.WriteString(string(r.Point))
	sb.WriteByte(' ')
	sb.WriteString(r.Action.String())
	switch {
	case r.Nth != 0:
		fmt.Fprintf(&sb, " nth=%d", r.Nth)
	case r.Every != 0:
		fmt.Fprintf(&sb, " every=%d", r.Every)
	case r.Prob != 0:
		fmt.Fprintf(&sb, " prob=%g", r.Prob)
	default:
		sb.WriteString(" always")
	}
	if r.Count != 0 {
		fmt.Fprintf(&sb, " count=%d", r.Count)
	}
	m := &r.Match
	if m.Node != nil {
		fmt.Fprintf(&sb, " node=%d", *m.Node)
	}
	if m.QPN != nil {
		fmt.Fprintf(&sb, " qpn=%#x", *m.QPN)
	}
	if m.Opcode != nil {
		fmt.Fprintf(&sb, " opcode=0x%02x", *m.Opcode)
	}
	if m.PSN != nil {
		fmt.Fprintf(&sb, " psn=%d", *m.PSN)
	}
	if m.PSNFrom != nil || m.PSNTo != nil {
		lo, hi := psnBounds(m)
		fmt.Fprintf(&sb, " psn=%d..%d", lo, hi)
	}
	if m.WQE != nil {
		fmt.Fprintf(&sb, " wqe=%d", *m.WQE)
	}
	if m.AddrFrom != nil || m.AddrTo != nil {
		lo, hi := addrBounds(m)
		fmt.Fprintf(&sb, " addr=%#x..%#x", lo, hi)
	}
	if m.TLP != "" {
		fmt.Fprintf(&sb, " tlp=%s", m.TLP)
	}
	if m.Target != "" {
		fmt.Fprintf(&sb, " target=%s", m.Target)
	}
	if r.Point.Timed() {
		fmt.Fprintf(&sb, " at=%dps", int64(r.At))
		if r.For != 0 {
			fmt.Fprintf(&sb, " for=%dps", int64(r.For))
		}
	}
	if r.Value != 0 {
		fmt.Fprintf(&sb, " value=%#x", r.Value)
	}
	return sb.String()
}

// addrBounds is the inclusive address range of m's addr_from/addr_to.
func addrBounds(m *Match) (lo, hi uint64) {
	lo, hi = 0, ^uint64(0)
	if m.AddrFrom != nil {
		lo = *m.AddrFrom
	}
	if m.AddrTo != nil {
		hi = *m.AddrTo
	}
	return lo, hi
}

// psnBounds is the inclusive PSN range of m's psn_from/psn_to.
func psnBounds(m *Match) (lo, hi uint32) {
	lo, hi = 0, MaxPSN
	if m.PSNFrom != nil {
		lo = *m.PSNFrom
	}
	if m.PSNTo != nil {
		hi = *m.PSNTo
	}
	return lo, hi
}

// Plan is a seeded list of rules. The zero Plan injects nothing.
type Plan struct {
	Seed  uint64 `json:"seed"`
	Rules []Rule `json:"rules"`
}

// ErrInvalidPlan is wrapped by every error Parse and Validate return.
var ErrInvalidPlan = errors.New("invalid fault plan")

// MaxPlanSize is the largest plan file Load reads (64 MiB: a million
// rules fit in a fraction of it).
const MaxPlanSize = 64 << 20

// ErrPlanTooLarge is wrapped, with ErrInvalidPlan, by Load for a file of
// more than MaxPlanSize bytes.
var ErrPlanTooLarge = errors.New("plan file too large")

// MaxDuration bounds delay_ps and for_ps, and MaxTime at_ps: 10^18 ps
// (10^6 s, about 11.6 days of virtual time), far beyond any run. Virtual
// time is int64 picoseconds (at most about 9.22·10^18), and the hooks add
// these values to a clock: now + delay_ps, origin + at_ps (+ for_ps for
// the end of a port-down window). With each term at most 10^18 such a sum
// cannot wrap to a negative time while the clock is below about 7.2·10^18
// ps (83 days); a value near 2^63 used to wrap, so that a "delay" made a
// frame arrive before it was sent. The hooks saturate those sums at
// sim.Never as well (sim.Time.AddSat), for plans built in Go.
const (
	MaxDuration sim.Duration = 1_000_000_000_000_000_000
	MaxTime     sim.Time     = sim.Time(MaxDuration)
)

// ErrTimeRange is wrapped (with ErrInvalidPlan, by Parse, Load and
// Validate) by the error for an at_ps, for_ps or delay_ps above
// MaxTime / MaxDuration.
var ErrTimeRange = errors.New("time out of range")

// ErrZeroField is wrapped (with ErrInvalidPlan, by Parse and Load) by the
// error for a nth, every, mask or prob written as 0, which the format
// forbids.
var ErrZeroField = errors.New("field set to 0")

// Parse decodes and validates a JSON plan such as
//
//	{"seed": 7, "rules": [
//	  {"point": "wire.tx", "action": "drop", "nth": 3},
//	  {"point": "wire.tx", "action": "corrupt", "prob": 0.01, "count": 5},
//	  {"point": "wire.tx", "action": "delay", "every": 10, "delay_ps": 2000000,
//	   "match": {"node": 1}}]}
//
// Unknown fields are rejected so that a misspelt trigger cannot silently
// turn into "always".
func Parse(data []byte) (*Plan, error) {
	p, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("fault: %w", err)
	}
	return p, nil
}

// Load reads and parses the plan in the file at path. Errors name the path
// and wrap ErrInvalidPlan (a bad plan) or the read error (fs.ErrNotExist,
// ...).
func Load(path string) (*Plan, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("fault: load plan: %w", err) // a PathError names path
	}
	defer f.Close()
	return LoadReader(f, path)
}

// LoadReader is Load for a plan read from r (stdin, say); name stands for
// the path in errors. At most MaxPlanSize bytes are read: /dev/zero or a
// runaway generator must end in an error, not in reading for ever.
func LoadReader(r io.Reader, name string) (*Plan, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxPlanSize+1))
	if err != nil {
		return nil, fmt.Errorf("fault: load plan: %w", err)
	}
	if len(data) > MaxPlanSize {
		return nil, fmt.Errorf("fault: %s: %w: %w: more than %d bytes", name, ErrInvalidPlan, ErrPlanTooLarge, MaxPlanSize)
	}
	p, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("fault: %s: %w", name, err)
	}
	return p, nil
}

// parse is Parse without the package prefix on errors.
func parse(data []byte) (*Plan, error) {
	// The rules are decoded one by one so that an error found while
	// decoding one (an unknown field, nth 0) names its index.
	// The plan's own fields come through the embedded Plan; its rules are
	// decoded one by one below (the outer Rules shadows Plan's), so that
	// an error names the rule.
	// An empty file and a bare null would otherwise decode as a plan
	// with no rules (or fail with a bare "EOF"): both are far more likely
	// a truncated or mis-generated file than a request for no faults,
	// which is written {} or {"rules": []}.
	switch string(bytes.TrimSpace(data)) {
	case "":
		return nil, fmt.Errorf("%w: empty plan: want a JSON object such as {\"rules\": [...]} ({} injects nothing)", ErrInvalidPlan)
	case "null":
		return nil, fmt.Errorf("%w: the plan is null: want a JSON object such as {\"rules\": [...]} ({} injects nothing)", ErrInvalidPlan)
	}
	var raw struct {
		Plan
		Rules []json.RawMessage `json:"rules"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidPlan, jsonError(err))
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: trailing data after the plan", ErrInvalidPlan)
	}
	if err := noDuplicateKeys(data); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidPlan, err)
	}
	p := raw.Plan
	if raw.Rules != nil {
		p.Rules = make([]Rule, len(raw.Rules))
	}
	for i, b := range raw.Rules {
		if string(bytes.TrimSpace(b)) == "null" {
			return nil, fmt.Errorf("%w: rule %d is null: want an object with point and action", ErrInvalidPlan, i)
		}
		if err := json.Unmarshal(b, &p.Rules[i]); err != nil {
			return nil, fmt.Errorf("%w: rule %d: %w", ErrInvalidPlan, i, jsonError(err))
		}
	}
	if err := p.validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

// typeError is a JSON value of the wrong type for its field, said in the
// plan's terms rather than the decoder's Go types (a plan's author never
// saw "Go struct field .plain.count of type uint64"). It unwraps to the
// decoder's error.
type typeError struct{ err *json.UnmarshalTypeError }

func (e *typeError) Error() string {
	want := "a value of another type"
	switch e.err.Type.Kind() {
	case reflect.Struct, reflect.Map:
		want = "an object"
	case reflect.Slice, reflect.Array:
		want = "an array"
	case reflect.String:
		want = "a string"
	case reflect.Bool:
		want = "true or false"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		want = fmt.Sprintf("an integer in 0..%d", ^uint64(0)>>(64-e.err.Type.Bits()))
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		b := e.err.Type.Bits() - 1
		want = fmt.Sprintf("an integer in %d..%d", -int64(1)<<b, int64(1)<<b-1)
	case reflect.Float32, reflect.Float64:
		want = "a number"
	}
	field := e.err.Field
	for _, p := range []string{".plain.", "plain.", "."} {
		field = strings.TrimPrefix(field, p)
	}
	if field == "" {
		return fmt.Sprintf("the plan is a JSON %s, want %s", e.err.Value, want)
	}
	return fmt.Sprintf("%q is a JSON %s, want %s", field, e.err.Value, want)
}

func (e *typeError) Unwrap() error { return e.err }

// jsonError is err with a type mismatch said as typeError says it.
func jsonError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Type != nil {
		return &typeError{te}
	}
	return err
}

// noDuplicateKeys refuses an object with the same field twice: encoding/json
// keeps the last one silently, so {"action": "drop", "action": "corrupt"}
// or a second "rules" would quietly replace what the author wrote first.
// data has already decoded once (so it is valid JSON within the decoder's
// depth limit).
func noDuplicateKeys(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	type frame struct {
		obj  bool
		seen map[string]bool
		key  bool // an object expecting a key next
	}
	var stack []frame
	rule := -1 // index in the top-level rules array, for the message
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		var top *frame
		if n := len(stack); n > 0 {
			top = &stack[n-1]
		}
		if top != nil && top.obj && top.key {
			if k, ok := tok.(string); ok {
				// encoding/json matches a key to a field without
				// regard to case (bytes.EqualFold), so "Action" after
				// "action" replaces it as silently: keys are compared
				// folded (upper then lower case folds as EqualFold
				// does for these names, ſ and K included).
				fk := strings.ToLower(strings.ToUpper(k))
				if top.seen[fk] {
					if rule >= 0 && len(stack) >= 3 {
						return fmt.Errorf("rule %d: field %q given twice", rule, k)
					}
					return fmt.Errorf("field %q given twice", k)
				}
				top.seen[fk] = true
				top.key = false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			if len(stack) == 2 && !stack[1].obj {
				rule++
			}
			stack = append(stack, frame{obj: true, seen: map[string]bool{}, key: true})
			continue
		case json.Delim('['):
			stack = append(stack, frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		// A value ended: the enclosing object expects a key again.
		if n := len(stack); n > 0 && stack[n-1].obj {
			stack[n-1].key = true
		}
	}
}

// Validate checks every rule and names the first bad one.
func (p *Plan) Validate() error {
	if err := p.validate(); err != nil {
		return fmt.Errorf("fault: %w", err)
	}
	return nil
}

func (p *Plan) validate() error {
	for i := range p.Rules {
		if err := p.Rules[i].validate(); err != nil {
			return fmt.Errorf("%w: rule %d (%s): %w", ErrInvalidPlan, i, p.Rules[i].String(), err)
		}
	}
	return nil
}

func (r *Rule) validate() error {
	switch {
	case !r.Point.Valid():
		return fmt.Errorf("unknown point %q", r.Point)
	case r.Action == None || r.Action >= numActions:
		return errors.New("action must be one of " + strings.Join(actionNames[1:], ", "))
	case pointActions[r.Point.index()]&(1<<r.Action) == 0:
		return fmt.Errorf("%s does not take action %s (it takes %s)", r.Point, r.Action, strings.Join(ActionsAt(r.Point), ", "))
	case r.Point.Timed() && (r.Nth != 0 || r.Every != 0 || r.Prob != 0 || r.Count != 0):
		return fmt.Errorf("%s rules fire once at at_ps: no nth, every, prob or count", r.Point)
	case !r.Point.Timed() && (r.At != 0 || r.For != 0):
		return fmt.Errorf("at_ps and for_ps apply to the timed points (%s, %s)", Port, Dev)
	case r.At < 0 || r.For < 0:
		return errors.New("negative at_ps or for_ps")
	case r.At > MaxTime:
		return fmt.Errorf("%w: at_ps %d exceeds %d (10^18 ps, about 11.6 days of virtual time)", ErrTimeRange, int64(r.At), int64(MaxTime))
	case r.For > MaxDuration:
		return fmt.Errorf("%w: for_ps %d exceeds %d (10^18 ps, about 11.6 days of virtual time)", ErrTimeRange, int64(r.For), int64(MaxDuration))
	case r.Delay > MaxDuration:
		return fmt.Errorf("%w: delay_ps %d exceeds %d (10^18 ps, about 11.6 days of virtual time)", ErrTimeRange, int64(r.Delay), int64(MaxDuration))
	case r.For != 0 && r.Action != Down:
		return errors.New("for_ps applies to a port down")
	case r.Value != 0 && r.Action != Jump && r.Action != Fatal:
		return fmt.Errorf("value set on a %s action (it is for jump and fatal)", r.Action)
	case r.Action == Jump && r.Value > 0xFFFF, r.Action == Fatal && r.Value > 0xFF:
		return fmt.Errorf("value %#x out of range for %s", r.Value, r.Action)
	case r.Mask != 0 && r.Action != Corrupt:
		return fmt.Errorf("mask set on a %s action", r.Action)
	case r.Nth != 0 && r.Every != 0, r.Nth != 0 && r.Prob != 0, r.Every != 0 && r.Prob != 0:
		return errors.New("set at most one of nth, every, prob")
	case math.IsNaN(r.Prob) || r.Prob < 0 || r.Prob > 1:
		return fmt.Errorf("prob %v outside (0, 1]", r.Prob)
	case r.Action == Delay && r.Delay <= 0:
		return errors.New("delay action needs delay_ps > 0")
	case r.Action != Delay && r.Delay != 0:
		return fmt.Errorf("delay_ps set on a %s action", r.Action)
	case r.Byte < -1:
		return fmt.Errorf("byte %d: want an offset >= 0 or -1 (random)", r.Byte)
	}
	return r.Match.validate(r.Point)
}

// Decision is the Injector's answer at one event. The zero Decision (Action
// None) means "proceed normally".
type Decision struct {
	Action Action
	Delay  sim.Duration // for Delay
	Byte   int          // for Corrupt: the rule's offset, -1 = choose from Rand
	Rand   uint64       // random bits from the point's stream, for the hook's choices
	Rule   int          // index of the rule that fired (meaningless for None)
	Value  uint64       // the rule's Value (jump, fatal)
	XOR    uint8        // the rule's Mask (0: use Mask())
}

// Offset picks the byte to corrupt in a buffer of n bytes: the rule's Byte
// if it is inside [lo, n), else a Rand-chosen offset in [lo, n). It returns
// -1 if the range is empty.
func (d Decision) Offset(lo, n int) int {
	if lo < 0 {
		lo = 0
	}
	if n <= lo {
		return -1
	}
	if d.Byte >= lo && d.Byte < n {
		return d.Byte
	}
	return lo + int(d.Rand%uint64(n-lo))
}

// Mask is a non-zero XOR mask, from Rand, for corrupting one byte: applying
// it always changes the byte.
func (d Decision) Mask() byte {
	if d.XOR != 0 {
		return d.XOR
	}
	m := byte(d.Rand >> 56)
	if m == 0 {
		m = 0xFF
	}
	return m
}

// Stat is what one rule has done so far.
type Stat struct {
	Rule    int    // index in Plan.Rules
	Desc    string // Rule.String()
	Matched uint64 // events at the rule's point that passed Match
	Fired   uint64 // times the rule's action was returned
}

type ruleState struct {
	rule    Rule
	match   matcher
	matched uint64
	fired   uint64
}

type pointState struct {
	events uint64
	rules  []int // indexes into Injector.rules, in plan order
	rng    *rand.Rand
}

// Injector applies a Plan at run time. A nil *Injector injects nothing, so
// components call it unconditionally. Not safe for concurrent use (the
// simulation is single-threaded).
type Injector struct {
	seed   uint64
	rules  []ruleState
	points [len(Points)]pointState
}

// NewInjector builds an Injector from p; a nil or empty plan gives nil. The
// plan should have passed Validate (Parse does it); rules for unknown points
// never fire.
func NewInjector(p *Plan) *Injector {
	if p == nil || len(p.Rules) == 0 {
		return nil
	}
	in := &Injector{seed: p.Seed, rules: make([]ruleState, len(p.Rules))}
	for i, r := range p.Rules {
		// A plan that skipped Validate cannot hand a hook a time whose
		// sum with the clock wraps (see MaxDuration).
		r.Delay, r.For, r.At = min(r.Delay, MaxDuration), min(r.For, MaxDuration), min(r.At, MaxTime)
		in.rules[i].rule = r
		in.rules[i].match = compile(&r.Match)
		if k := r.Point.index(); k >= 0 {
			in.points[k].rules = append(in.points[k].rules, i)
		}
	}
	for k := range in.points {
		// Each point gets its own stream: seed plus a hash of the point
		// name, so adding a rule elsewhere never shifts this point.
		in.points[k].rng = rand.New(rand.NewPCG(p.Seed, fnv64a(string(Points[k]))))
	}
	return in
}

// fnv64a is the 64-bit FNV-1a hash.
func fnv64a(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// Decide is called by the owner of hook point pt once per event, with what
// it knows of the event (see Event; NewEvent for hooks that know no opcode
// or PSN). It returns the first rule at pt (in plan order) that fires, or a
// None decision. Every rule at pt sees the event (its match counter and
// random draw advance) whether or not an earlier rule fired, so one rule's
// trigger does not shift another's. It does not allocate.
func (in *Injector) Decide(pt Point, ev Event) Decision {
	if in == nil {
		return Decision{}
	}
	k := pt.index()
	if k < 0 {
		return Decision{}
	}
	ps := &in.points[k]
	ps.events++
	var d Decision
	for _, ri := range ps.rules {
		rs := &in.rules[ri]
		r := &rs.rule
		if !rs.match.matches(&ev) {
			continue
		}
		rs.matched++
		var hit bool
		switch {
		case r.Nth != 0:
			hit = rs.matched == r.Nth
		case r.Every != 0:
			hit = rs.matched%r.Every == 0
		case r.Prob != 0:
			hit = ps.rng.Float64() < r.Prob
		default:
			hit = true
		}
		if !hit || d.Action != None || (r.Count != 0 && rs.fired >= r.Count) {
			continue
		}
		rs.fired++
		d = Decision{Action: r.Action, Delay: r.Delay, Byte: r.Byte, Rule: ri, Value: r.Value, XOR: r.Mask}
	}
	if d.Action != None {
		d.Rand = ps.rng.Uint64()
	}
	return d
}

// Events returns how many events have been seen at pt.
func (in *Injector) Events(pt Point) uint64 {
	if in == nil {
		return 0
	}
	if k := pt.index(); k >= 0 {
		return in.points[k].events
	}
	return 0
}

// Fired returns one Stat per rule, in plan order.
func (in *Injector) Fired() []Stat {
	if in == nil {
		return nil
	}
	s := make([]Stat, len(in.rules))
	for i := range in.rules {
		rs := &in.rules[i]
		s[i] = Stat{Rule: i, Desc: rs.rule.String(), Matched: rs.matched, Fired: rs.fired}
	}
	return s
}

// ActionsAt lists the actions point p takes, in Action order.
func ActionsAt(p Point) []string {
	k := p.index()
	if k < 0 {
		return nil
	}
	var out []string
	for a := Drop; a < numActions; a++ {
		if pointActions[k]&(1<<a) != 0 {
			out = append(out, a.String())
		}
	}
	return out
}

// Scheduled is a timed rule (port, device) as its owner schedules it.
type Scheduled struct {
	Rule   int
	Point  Point
	Action Action
	Node   int // -1: every node
	At     sim.Time
	For    sim.Duration
	Value  uint64
}

// Scheduled lists the timed rules, in plan order. The owner of the point
// schedules each on its engine and calls MarkFired when it fires.
func (in *Injector) Scheduled() []Scheduled {
	if in == nil {
		return nil
	}
	var out []Scheduled
	for i := range in.rules {
		r := &in.rules[i].rule
		if !r.Point.Timed() {
			continue
		}
		s := Scheduled{Rule: i, Point: r.Point, Action: r.Action, Node: -1, At: r.At, For: r.For, Value: r.Value}
		if r.Match.Node != nil {
			s.Node = *r.Match.Node
		}
		out = append(out, s)
	}
	return out
}

// MarkFired counts one firing of timed rule i (see Scheduled).
func (in *Injector) MarkFired(i int) {
	if in == nil || i < 0 || i >= len(in.rules) {
		return
	}
	in.rules[i].matched++
	in.rules[i].fired++
}

// RuleString describes rule i of the injector's plan (for trace warnings).
func (in *Injector) RuleString(i int) string {
	if in == nil || i < 0 || i >= len(in.rules) {
		return ""
	}
	return in.rules[i].rule.String()
}

var counterNames = func() (m [len(Points)][numActions]string) {
	for k, p := range Points {
		for a := Drop; a < numActions; a++ {
			m[k][a] = "fault_" + strings.ReplaceAll(string(p), ".", "_") + "_" + a.String()
		}
	}
	return m
}()

// CounterName is the counter a component increments each time a rule of
// action a fires at point p, e.g. "fault_doorbell_drop" (built once: no
// allocation).
func CounterName(p Point, a Action) string {
	k := p.index()
	if k < 0 || a >= numActions {
		return "fault_unknown"
	}
	return counterNames[k][a]
}

// Has reports whether the plan has a rule at any of the points: a hook
// owner with none need not consult the injector at all.
func (in *Injector) Has(pts ...Point) bool {
	if in == nil {
		return false
	}
	for _, p := range pts {
		if k := p.index(); k >= 0 && len(in.points[k].rules) > 0 {
			return true
		}
	}
	return false
}
