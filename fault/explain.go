package fault

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/softnic/softnic/sim"
)

// opOps names the operation (BTH opcode bits 4-0) of RC opcodes; UC uses
// the same names for 0x00-0x0B, UD for 0x04 and 0x05 (IBTA vol. 1 §9.2,
// rocev2.md §2.1). The fault package cannot import roce, so the names live
// here, spelt as the kernel's ib_pack.h spells them (without IB_OPCODE_).
var opOps = [32]string{
	0x00: "SEND_FIRST",
	0x01: "SEND_MIDDLE",
	0x02: "SEND_LAST",
	0x03: "SEND_LAST_WITH_IMMEDIATE",
	0x04: "SEND_ONLY",
	0x05: "SEND_ONLY_WITH_IMMEDIATE",
	0x06: "RDMA_WRITE_FIRST",
	0x07: "RDMA_WRITE_MIDDLE",
	0x08: "RDMA_WRITE_LAST",
	0x09: "RDMA_WRITE_LAST_WITH_IMMEDIATE",
	0x0A: "RDMA_WRITE_ONLY",
	0x0B: "RDMA_WRITE_ONLY_WITH_IMMEDIATE",
	0x0C: "RDMA_READ_REQUEST",
	0x0D: "RDMA_READ_RESPONSE_FIRST",
	0x0E: "RDMA_READ_RESPONSE_MIDDLE",
	0x0F: "RDMA_READ_RESPONSE_LAST",
	0x10: "RDMA_READ_RESPONSE_ONLY",
	0x11: "ACKNOWLEDGE",
	0x12: "ATOMIC_ACKNOWLEDGE",
	0x13: "COMPARE_SWAP",
	0x14: "FETCH_ADD",
	0x16: "SEND_LAST_WITH_INVALIDATE",
	0x17: "SEND_ONLY_WITH_INVALIDATE",
	0x1C: "FLUSH",
	0x1D: "ATOMIC_WRITE",
}

// opcodeCNP is the RoCEv2 congestion notification packet.
const opcodeCNP = 0x81

// opcodeName returns the name of a BTH opcode ("RC_SEND_ONLY"), or "" for
// a reserved or unnamed one.
func opcodeName(op uint8) string {
	if op == opcodeCNP {
		return "CNP"
	}
	low := op & 0x1F
	name := opOps[low]
	if name == "" {
		return ""
	}
	switch op >> 5 {
	case 0:
		return "RC_" + name
	case 1:
		if low <= 0x0B {
			return "UC_" + name
		}
	case 3:
		if low == 0x04 || low == 0x05 {
			return "UD_" + name
		}
	}
	return ""
}

// parseOpcodeName parses an opcode name, case-insensitive, with or without
// an "IB_OPCODE_" prefix.
func parseOpcodeName(s string) (uint8, bool) {
	s = strings.ToUpper(s)
	s = strings.TrimPrefix(s, "IB_OPCODE_")
	if s == "CNP" {
		return opcodeCNP, true
	}
	var hi uint8
	switch {
	case strings.HasPrefix(s, "RC_"):
		hi = 0x00
	case strings.HasPrefix(s, "UC_"):
		hi = 0x20
	case strings.HasPrefix(s, "UD_"):
		hi = 0x60
	default:
		return 0, false
	}
	for low, n := range opOps {
		if n != "" && n == s[3:] {
			op := hi | uint8(low)
			return op, opcodeName(op) != ""
		}
	}
	return 0, false
}

// pointNouns names one event at each point, for Explain.
var pointNouns = [len(Points)]string{"frame", "frame", "TLP", "line", "read", "write", "doorbell", "CQE", "EQE", "port", "device"}

// Explain describes the plan in words, one line per rule, e.g.
//
//	seed 7
//	rule 0: wire.tx: drop the 3rd frame of QP 0x100 with opcode 0x0a (RC_RDMA_WRITE_ONLY)
//	rule 1: wire.rx: corrupt each frame with probability 0.5% (byte chosen at random)
//
// The text depends only on the plan.
func (p *Plan) Explain() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "seed %d\n", p.Seed)
	if len(p.Rules) == 0 {
		sb.WriteString("no rules: nothing is injected\n")
	}
	shadowed := p.shadows() // ShadowedBy of each rule, in one pass
	for i := range p.Rules {
		fmt.Fprintf(&sb, "rule %d: %s\n", i, p.Rules[i].Explain())
		if c := p.Rules[i].Consequence(); c != "" {
			fmt.Fprintf(&sb, "        → %s\n", c)
		}
		if k := shadowed[i]; k >= 0 {
			fmt.Fprintf(&sb, "        ! never fires: rule %d fires first on every event this rule matches (the first rule that fires decides)\n", k)
		}
	}
	return sb.String()
}

// ShadowedBy returns the index of an earlier rule that fires on every
// event rule i matches, so that rule i never fires (Decide: the first rule
// that fires decides), or -1. Only the sure case is found: an earlier rule
// at the same point with no nth, every, prob or count whose match covers
// rule i's. Timed rules are never shadowed. One call scans the rules
// before i; Explain, which asks for every rule, finds all in one pass
// (shadows).
func (p *Plan) ShadowedBy(i int) int {
	r := &p.Rules[i]
	if r.Point.Timed() {
		return -1
	}
	for k := 0; k < i; k++ {
		e := &p.Rules[k]
		if e.Point == r.Point && shadowing(e) && covers(&e.Match, &r.Match) {
			return k
		}
	}
	return -1
}

// covers reports whether every event b matches also matches a.
func covers(a, b *Match) bool {
	same := func(x, y *uint32) bool { return x == nil || y != nil && *x == *y }
	switch {
	case a.Node != nil && (b.Node == nil || *a.Node != *b.Node),
		!same(a.QPN, b.QPN),
		a.Opcode != nil && (b.Opcode == nil || *a.Opcode != *b.Opcode),
		a.WQE != nil && (b.WQE == nil || *a.WQE != *b.WQE),
		a.TLP != "" && !strings.EqualFold(a.TLP, b.TLP),
		a.Target != "" && !strings.EqualFold(a.Target, b.Target):
		return false
	}
	// PSN: b's PSNs (one, a range, or all) within a's.
	blo, bhi := psnBounds(b)
	if b.PSN != nil {
		blo, bhi = *b.PSN, *b.PSN
	}
	alo, ahi := psnBounds(a)
	if a.PSN != nil {
		alo, ahi = *a.PSN, *a.PSN
	}
	if a.PSN != nil || a.PSNFrom != nil || a.PSNTo != nil {
		if b.PSN == nil && b.PSNFrom == nil && b.PSNTo == nil || blo < alo || bhi > ahi {
			return false
		}
	}
	// Addresses: an event matches when it overlaps the range, so b's range
	// must lie within a's.
	if a.AddrFrom != nil || a.AddrTo != nil {
		alo, ahi := addrBounds(a)
		blo, bhi := addrBounds(b)
		if blo < alo || bhi > ahi {
			return false
		}
	}
	return true
}

// Explain describes one rule in words (see Plan.Explain).
func (r *Rule) Explain() string {
	if r.Point.Timed() {
		return r.explainTimed()
	}
	noun := "event"
	if k := r.Point.index(); k >= 0 {
		noun = pointNouns[k]
	}
	var sb strings.Builder
	sb.WriteString(string(r.Point))
	sb.WriteString(": ")
	if v, ok := actionVerbs[r.Action]; ok {
		sb.WriteString(v[0])
	} else {
		sb.WriteString(r.Action.String())
	}
	sb.WriteByte(' ')
	switch {
	case r.Nth != 0:
		fmt.Fprintf(&sb, "the %s %s", ordinal(r.Nth), noun)
	case r.Every > 1:
		fmt.Fprintf(&sb, "every %s %s", ordinal(r.Every), noun)
	case r.Prob != 0:
		fmt.Fprintf(&sb, "each %s with probability %s%%", noun, strconv.FormatFloat(r.Prob*100, 'g', 6, 64))
	case r.Count == 1: // always, once: the first matching event
		fmt.Fprintf(&sb, "the first %s", noun)
	case r.Count > 1:
		fmt.Fprintf(&sb, "the first %d %ss", r.Count, noun)
	default:
		fmt.Fprintf(&sb, "every %s", noun)
	}
	always := r.Nth == 0 && r.Every <= 1 && r.Prob == 0
	m := &r.Match
	if m.Node != nil {
		fmt.Fprintf(&sb, " on node %d", *m.Node)
	}
	if m.QPN != nil {
		fmt.Fprintf(&sb, " of QP %#x", *m.QPN)
	}
	if m.Opcode != nil {
		fmt.Fprintf(&sb, " with opcode 0x%02x", *m.Opcode)
		if n := opcodeName(*m.Opcode); n != "" {
			fmt.Fprintf(&sb, " (%s)", n)
		}
	}
	if m.PSN != nil {
		fmt.Fprintf(&sb, " with PSN %d", *m.PSN)
	}
	if m.PSNFrom != nil || m.PSNTo != nil {
		lo, hi := psnBounds(m)
		fmt.Fprintf(&sb, " with PSN %d..%d", lo, hi)
	}
	if m.WQE != nil {
		fmt.Fprintf(&sb, " with wqe_index %d", *m.WQE)
	}
	if m.AddrFrom != nil || m.AddrTo != nil {
		lo, hi := addrBounds(m)
		fmt.Fprintf(&sb, " touching %#x..%#x", lo, hi)
	}
	if m.TLP != "" {
		fmt.Fprintf(&sb, " of type %s", m.TLP)
	}
	if m.Target != "" {
		fmt.Fprintf(&sb, " of a %s", targetWords[m.Target])
	}
	if v, ok := actionVerbs[r.Action]; ok {
		sb.WriteString(v[1])
	}
	switch r.Action {
	case Delay:
		sb.WriteString(" by ")
		sb.WriteString(formatDuration(r.Delay))
	case Corrupt:
		if r.Byte < 0 {
			sb.WriteString(" (byte chosen at random")
		} else {
			fmt.Fprintf(&sb, " (byte %d, or a random one if the %s is shorter", r.Byte, noun)
		}
		if r.Mask != 0 {
			fmt.Fprintf(&sb, ", bits %#02x flipped", r.Mask)
		}
		sb.WriteString(")")
	case Reorder:
		if r.Point == WireRx {
			// docs/faults.md: neither the simulated link nor a real
			// port reorders on arrival.
			sb.WriteString(" (not supported at wire.rx: the frame passes, counted as unsupported)")
		} else {
			sb.WriteString(" (held behind the next one)")
		}
	case Jump:
		fmt.Fprintf(&sb, " (by %d WQEBBs)", max(r.Value, 1))
	}
	switch {
	case r.Count == 0 || always || r.Nth != 0: // said above, or fires once anyway
	case r.Count == 1:
		sb.WriteString(", once")
	default:
		fmt.Fprintf(&sb, ", at most %d times", r.Count)
	}
	return sb.String()
}

// ordinal is "1st", "2nd", "3rd", "4th", "11th", "21st", ...
func ordinal(n uint64) string {
	suf := "th"
	if n%100 < 11 || n%100 > 13 {
		switch n % 10 {
		case 1:
			suf = "st"
		case 2:
			suf = "nd"
		case 3:
			suf = "rd"
		}
	}
	return strconv.FormatUint(n, 10) + suf
}

// formatDuration prints d in the largest unit that keeps it >= 1: "50µs",
// "2ns", "1.5ns", "300ps".
func formatDuration(d sim.Duration) string {
	units := [...]struct {
		name string
		ps   sim.Duration
	}{{"s", 1e12}, {"ms", 1e9}, {"µs", 1e6}, {"ns", 1e3}}
	for _, u := range units {
		if d >= u.ps || -d >= u.ps {
			return strconv.FormatFloat(float64(d)/float64(u.ps), 'g', 6, 64) + u.name
		}
	}
	return strconv.FormatInt(int64(d), 10) + "ps"
}

var targetWords = map[string]string{"data": "data buffer", "wqe": "WQE", "dbr": "doorbell record", "cqe": "CQE", "eqe": "EQE"}

// explainTimed describes a port or device rule.
func (r *Rule) explainTimed() string {
	var sb strings.Builder
	sb.WriteString(string(r.Point))
	sb.WriteString(": ")
	switch r.Action {
	case Down:
		fmt.Fprintf(&sb, "take the link down at %s", formatDuration(sim.Duration(r.At)))
		if r.For > 0 {
			fmt.Fprintf(&sb, " for %s", formatDuration(r.For))
		}
	case Fatal:
		fmt.Fprintf(&sb, "firmware fatal error (health syndrome %#x) at %s", healthSynd(r.Value), formatDuration(sim.Duration(r.At)))
	case LinkLoss:
		fmt.Fprintf(&sb, "lose the PCIe link at %s", formatDuration(sim.Duration(r.At)))
	default:
		fmt.Fprintf(&sb, "%s at %s", r.Action, formatDuration(sim.Duration(r.At)))
	}
	if m := &r.Match; m.Node != nil {
		fmt.Fprintf(&sb, " on node %d", *m.Node)
	}
	return sb.String()
}

// actionVerbs say the point-specific actions as verbs.
var actionVerbs = map[Action][2]string{
	Timeout: {"time out", ""}, Abort: {"fail", " with a completer abort"}, UR: {"fail", " with unsupported request (UR)"},
	Poison: {"poison", ""}, IOMMU: {"fail", " with an IOMMU translation fault"}, Stale: {"replace", " with the previous counter"},
	Jump: {"jump", ""}, Early: {"deliver", " before the doorbell record"}, Overrun: {"overrun the queue at", ""},
}

// Consequence says what the device does when the rule fires (empty for the
// wire, where the frame's fate is the whole story).
func (r *Rule) Consequence() string {
	if (r.Point == DMARead || r.Point == DMAWrite) && r.Action != Delay && r.Action != Corrupt && r.Match.Target != "" {
		return dmaConsequence[r.Match.Target]
	}
	if r.Point == PCIeTLP && r.Action == UR {
		// bar/faults.go: an MRd reads all ones; a posted write gets no
		// completion, so UR discards it.
		switch strings.ToUpper(r.Match.TLP) {
		case "MRD":
			return "an MMIO read completes with UR and reads all ones"
		case "MWR":
			return "a posted MMIO write answered UR is discarded (lost, as a dropped TLP)"
		}
		return "an MMIO read completes with UR and reads all ones; a posted MMIO write answered UR is discarded (lost)"
	}
	return consequence(r)
}

// dmaConsequence is what a failed DMA access does, by target.
var dmaConsequence = map[string]string{
	"data": "requester: error CQE LOC_PROT_ERR (0x04), vendor 0x51, QP to ERR; responder: NAK (remote operational error)",
	"wqe":  "the WQEs fetched fail: LOC_PROT_ERR (0x04), vendor 0x51, QP to ERR (device fatal with faults.wqe_fetch_error_fatal)",
	"dbr":  "the record is not read: a CQ that looks full overruns; a receive queue sees no new WQEs (RNR)",
	"cqe":  "CQ error: EQE 0x04 (syndrome 0x2), IBV_EVENT_CQ_ERR, its QPs to ERR",
	"eqe":  "the EQE is lost",
}

// healthSynd is a fatal rule's health syndrome (default 0x8, unrecoverable
// HW error).
func healthSynd(v uint64) uint64 {
	if v == 0 {
		return 0x8
	}
	return v
}

// HealthSyndrome is the health-buffer syndrome a fatal rule's Value
// names (default 0x8).
func HealthSyndrome(v uint64) uint8 { return uint8(healthSynd(v)) }

// consequence is what the device does when a rule of action a fires at p
// (docs/faults.md has the table with its sources).
func consequence(r *Rule) string {
	p, a := r.Point, r.Action
	switch p {
	case Doorbell:
		switch a {
		case Drop:
			return "the SQ stalls silently until a later doorbell's counter covers the WQE"
		case Stale:
			return "the device sees an older counter and ignores it (the SQ stalls like a lost doorbell)"
		case Jump:
			return "the device fetches WQEBBs nobody wrote; the control segment fails validation: syndrome 0x02, QP to ERR, flush"
		case Early:
			return "the doorbell overtakes the doorbell record (checked mode reports R1; profile switch Faults.DoorbellReadsRecord decides whether the device waits)"
		case Duplicate:
			return "the doorbell arrives twice: the device ignores the second, which announces nothing new"
		case Reorder:
			return "the doorbell is held behind the next one (or the drain time); the one that announces nothing new is ignored"
		case Delay:
			return "the doorbell arrives later: the SQ starts later"
		case Corrupt:
			return "a byte of the doorbell flipped: a bad QPN or counter is refused and counted, a bad index fails validation"
		}
	case WCBuffer:
		switch a {
		case Tear, Drop, Reorder:
			return "the BlueFlame WQE does not arrive whole and in order: the device falls back to the doorbell and fetches the WQE from memory"
		case Delay:
			return "the line stays in the WC buffer as if unflushed, and leaves by eviction or drain"
		case Corrupt:
			return "a byte of the line flipped: a doorbell or BlueFlame WQE arrives damaged (a bad QPN, counter or WQE is refused or fails validation)"
		case Duplicate:
			return "the line leaves the CPU twice (a doorbell line twice: the second announces nothing new)"
		}
	case DMARead, DMAWrite:
		switch a {
		case Delay:
			return "a latency spike, nothing else"
		case Corrupt:
			return "the bytes are changed in flight, undetected"
		default:
			// Without a target the rule hits whatever access comes: the
			// same consequences as the targeted rules, by target (the
			// device reads WQEs and records, and writes CQEs and EQEs).
			if r.Point == DMARead {
				return "by target: data: " + dmaConsequence["data"] + "; wqe: " + dmaConsequence["wqe"] + "; dbr: " + dmaConsequence["dbr"]
			}
			return "by target: data: " + dmaConsequence["data"] + "; cqe: " + dmaConsequence["cqe"] + "; eqe: " + dmaConsequence["eqe"]
		}
	case PCIeTLP:
		switch a {
		case UR:
			return "an MMIO read completes with UR and reads all ones"
		case Drop:
			if strings.EqualFold(r.Match.TLP, "MRd") {
				return "an MMIO read's completion is lost: it completes with UR and reads all ones"
			}
			return "a posted MMIO write is lost (an MMIO read reads all ones)"
		case Corrupt:
			return "a byte of the write, or of a read's completion data, flipped"
		case Duplicate:
			return "a posted write arrives twice; a read's second completion is discarded"
		case Delay:
			return "the write arrives later, or the read's completion comes back later"
		}
	case CQ:
		switch a {
		case Drop:
			return "the CQE is lost (its wr_id never completes)"
		case Delay:
			return "the CQE lands later, and the completion EQE it raises lands behind it"
		case Corrupt:
			return "a byte of the CQE other than op_own flipped: the poller meets the damage"
		case Overrun:
			return "CQ error: EQE 0x04, IBV_EVENT_CQ_ERR, QPs to ERR (not with overrun-ignore)"
		}
	case EQ:
		switch a {
		case Drop:
			return "the EQE is lost"
		case Delay:
			return "the EQE lands later, and the EQEs behind it on that EQ wait for it"
		case Overrun:
			return "async EQ: device fatal (health syndrome 0xc); completion EQ: frozen, no more interrupts"
		}
	case Port:
		return "PORT_ERR; RC requesters retry and report RETRY_EXC_ERR (0x15/0x81) unless the link is back in time (PORT_ACTIVE)"
	case Dev:
		if a == LinkLoss {
			return "BAR0 reads all ones; the driver sees fw_ver 0xffffffff and enters the error state (device fatal)"
		}
		return "health syndrome in BAR0, health counter frozen, commands fail, IBV_EVENT_DEVICE_FATAL, outstanding work flushed (vendor_err 5)"
	}
	return ""
}
