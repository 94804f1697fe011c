package fault

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
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
)

// Points lists every hook point in a fixed order.
var Points = [...]Point{WireTx, WireRx, PCIeTLP, WCBuffer, DMARead, DMAWrite, Doorbell, CQ}

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
	}
	return -1
}

// Valid reports whether p is one of the known hook points.
func (p Point) Valid() bool { return p.index() >= 0 }

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
	numActions
)

var actionNames = [numActions]string{"none", "drop", "corrupt", "duplicate", "delay", "reorder", "tear"}

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

// Match narrows a rule to some events. Nil fields match everything.
type Match struct {
	Node *int    `json:"node,omitempty"` // only events of this node
	QPN  *uint32 `json:"qpn,omitempty"`  // only events of this QP (hooks pass 0 when unknown)
}

func (m *Match) matches(node int, qpn uint32) bool {
	return (m.Node == nil || *m.Node == node) && (m.QPN == nil || *m.QPN == qpn)
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
	Byte  int   `json:"byte"`
	Match Match `json:"match,omitzero"`
}

// UnmarshalJSON decodes a rule, defaulting Byte to -1 (random) and
// rejecting unknown fields.
func (r *Rule) UnmarshalJSON(b []byte) error {
	type plain Rule // no methods: avoids recursion
	v := plain{Byte: -1}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return err
	}
	*r = Rule(v)
	return nil
}

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
	return sb.String()
}

// Plan is a seeded list of rules. The zero Plan injects nothing.
type Plan struct {
	Seed  uint64 `json:"seed"`
	Rules []Rule `json:"rules"`
}

// ErrInvalidPlan is wrapped by every error Parse and Validate return.
var ErrInvalidPlan = errors.New("invalid fault plan")

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
	var p Plan
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("fault: %w: %w", ErrInvalidPlan, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("fault: %w: trailing data after the plan", ErrInvalidPlan)
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

// Validate checks every rule and names the first bad one.
func (p *Plan) Validate() error {
	for i := range p.Rules {
		if err := p.Rules[i].validate(); err != nil {
			return fmt.Errorf("fault: %w: rule %d (%s): %s", ErrInvalidPlan, i, p.Rules[i].String(), err)
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
	case r.Nth != 0 && r.Every != 0, r.Nth != 0 && r.Prob != 0, r.Every != 0 && r.Prob != 0:
		return errors.New("set at most one of nth, every, prob")
	case math.IsNaN(r.Prob) || r.Prob < 0 || r.Prob > 1:
		return fmt.Errorf("prob %v outside [0,1]", r.Prob)
	case r.Action == Delay && r.Delay <= 0:
		return errors.New("delay action needs delay_ps > 0")
	case r.Action != Delay && r.Delay != 0:
		return fmt.Errorf("delay_ps set on a %s action", r.Action)
	case r.Byte < -1:
		return fmt.Errorf("byte %d: want an offset >= 0 or -1 (random)", r.Byte)
	}
	return nil
}

// Decision is the Injector's answer at one event. The zero Decision (Action
// None) means "proceed normally".
type Decision struct {
	Action Action
	Delay  sim.Duration // for Delay
	Byte   int          // for Corrupt: the rule's offset, -1 = choose from Rand
	Rand   uint64       // random bits from the point's stream, for the hook's choices
	Rule   int          // index of the rule that fired (meaningless for None)
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
		in.rules[i].rule = r
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

// Decide is called by the owner of hook point pt once per event, with the
// event's node and QPN (0 if unknown). It returns the first rule at pt (in
// plan order) that fires, or a None decision. Every rule at pt sees the
// event (its match counter and random draw advance) whether or not an
// earlier rule fired, so one rule's trigger does not shift another's.
func (in *Injector) Decide(pt Point, node int, qpn uint32) Decision {
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
		if !r.Match.matches(node, qpn) {
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
		d = Decision{Action: r.Action, Delay: r.Delay, Byte: r.Byte, Rule: ri}
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
