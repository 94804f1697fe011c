package fault

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNewMatches(t *testing.T) {
	p, err := Parse([]byte(`{"seed":1,"rules":[
		{"point":"doorbell","action":"drop","match":{"qpn":"0x100","wqe":5}},
		{"point":"dma.read","action":"timeout","match":{"target":"wqe","addr_from":"0x1000","addr_to":"0x1fff"}},
		{"point":"pcie.tlp","action":"ur","match":{"tlp":"mrd"}}]}`))
	require.NoError(t, err)
	require.Equal(t, "MRd", p.Rules[2].Match.TLP, "kinds are canonicalised")
	in := NewInjector(p)
	db := NewEvent(0, 0x100)
	db.WQE = 4
	require.Equal(t, None, in.Decide(Doorbell, db).Action)
	db.WQE = 5
	require.Equal(t, Drop, in.Decide(Doorbell, db).Action)
	rd := NewEvent(0, 1)
	rd.Addr, rd.Len, rd.Kind = 0x0f01, 0x100, KindWQE // [0xf01, 0x1001): touches 0x1000
	require.Equal(t, Timeout, in.Decide(DMARead, rd).Action)
	rd.Addr = 0x0e00 // [0xe00, 0xf00): outside
	require.Equal(t, None, in.Decide(DMARead, rd).Action)
	rd.Addr, rd.Kind = 0x1800, KindData // inside, wrong target
	require.Equal(t, None, in.Decide(DMARead, rd).Action)
	rd.Kind, rd.Len = KindWQE, 0 // no address known: never matches a range
	require.Equal(t, None, in.Decide(DMARead, rd).Action)
	mrd := NewEvent(0, 0)
	mrd.Kind = KindMWr
	require.Equal(t, None, in.Decide(PCIeTLP, mrd).Action)
	mrd.Kind = KindMRd
	require.Equal(t, UR, in.Decide(PCIeTLP, mrd).Action)
}

func TestPointActionsValidated(t *testing.T) {
	bad := map[string]string{
		`{"point":"wire.tx","action":"tear"}`:                                    "does not take action tear",
		`{"point":"doorbell","action":"timeout"}`:                                "does not take action timeout",
		`{"point":"port","action":"down","nth":2}`:                               "fire once at at_ps",
		`{"point":"doorbell","action":"drop","at_ps":5}`:                         "apply to the timed points",
		`{"point":"port","action":"down","at_ps":1,"match":{"qpn":1}}`:           "only match.node",
		`{"point":"doorbell","action":"drop","match":{"target":"wqe"}}`:          "match.target applies",
		`{"point":"dma.read","action":"ur","match":{"tlp":"MRd"}}`:               "match.tlp applies",
		`{"point":"wire.rx","action":"drop","match":{"wqe":1}}`:                  "match.wqe applies",
		`{"point":"cq","action":"drop","match":{"addr_from":1}}`:                 "addr_from/addr_to apply",
		`{"point":"dma.read","action":"ur","match":{"addr_from":9,"addr_to":1}}`: "addr_from 0x9 > addr_to 0x1",
		`{"point":"dma.read","action":"ur","match":{"target":"nowhere"}}`:        "match.target",
		`{"point":"doorbell","action":"jump","value":70000}`:                     "out of range",
		`{"point":"doorbell","action":"drop","value":1}`:                         "value set on a drop",
		`{"point":"doorbell","action":"drop","mask":1}`:                          "mask set on a drop",
		`{"point":"device","action":"fatal","at_ps":1,"for_ps":2}`:               "for_ps applies to a port down",
	}
	for rule, want := range bad {
		_, err := Parse([]byte(`{"rules":[` + rule + `]}`))
		require.ErrorIs(t, err, ErrInvalidPlan, rule)
		require.Contains(t, err.Error(), want, rule)
	}
	for _, pt := range Points {
		require.NotEmpty(t, ActionsAt(pt), pt)
	}
}

func TestTimedRules(t *testing.T) {
	p, err := Parse([]byte(`{"rules":[{"point":"port","action":"down","at_ps":5000000,"for_ps":1000000,"match":{"node":1}},
		{"point":"device","action":"fatal","at_ps":7,"value":12},{"point":"doorbell","action":"drop"}]}`))
	require.NoError(t, err)
	in := NewInjector(p)
	s := in.Scheduled()
	require.Len(t, s, 2)
	require.Equal(t, Scheduled{Rule: 0, Point: Port, Action: Down, Node: 1, At: 5000000, For: 1000000}, s[0])
	require.Equal(t, Scheduled{Rule: 1, Point: Dev, Action: Fatal, Node: -1, At: 7, Value: 12}, s[1])
	in.MarkFired(1)
	require.Equal(t, uint64(1), in.Fired()[1].Fired)
	ex := p.Explain()
	require.Contains(t, ex, "port: take the link down at 5µs for 1µs on node 1")
	require.Contains(t, ex, "device: firmware fatal error (health syndrome 0xc) at 7ps")
	require.Contains(t, ex, "→ the SQ stalls silently")
	require.Equal(t, "fault_dma_read_timeout", CounterName(DMARead, Timeout))
	require.Equal(t, uint8(8), HealthSyndrome(0))
}

func TestExplainNewFields(t *testing.T) {
	r := Rule{Point: DMARead, Action: Corrupt, Byte: 3, Mask: 0x10, Match: Match{Target: "wqe", AddrFrom: ptr(uint64(0x10)), AddrTo: ptr(uint64(0x20))}}
	require.Equal(t, "dma.read: corrupt every read touching 0x10..0x20 of a WQE (byte 3, or a random one if the read is shorter, bits 0x10 flipped)", r.Explain())
	r = Rule{Point: Doorbell, Action: Jump, Nth: 2, Value: 3, Match: Match{WQE: ptr(uint16(9))}}
	require.Equal(t, "doorbell: jump the 2nd doorbell with wqe_index 9 (by 3 WQEBBs)", r.Explain())
	require.True(t, strings.Contains(r.Consequence(), "syndrome 0x02"))
}

func TestNewFieldsRoundTrip(t *testing.T) {
	p, err := Parse([]byte(`{"seed":4,"rules":[{"point":"dma.write","action":"corrupt","byte":2,"mask":128,"match":{"target":"cqe","addr_from":16}},
		{"point":"port","action":"down","at_ps":10,"for_ps":20},{"point":"doorbell","action":"jump","value":2,"match":{"wqe":"0x10"}}]}`))
	require.NoError(t, err)
	out, err := json.Marshal(p)
	require.NoError(t, err)
	back, err := Parse(out)
	require.NoError(t, err, "%s", out)
	require.Equal(t, p, back)
}

// QA round: Explain and Consequence say what the hooks do (docs/faults.md),
// and a target a point never sees is refused rather than never firing.
func TestExplainMatchesHooks(t *testing.T) {
	tests := []struct {
		name       string
		rule       Rule
		text, cons string // substrings of Explain and Consequence
	}{
		{"wire.rx reorder is unsupported", Rule{Point: WireRx, Action: Reorder, Nth: 1},
			"wire.rx: reorder the 1st frame (not supported at wire.rx: the frame passes, counted as unsupported)", ""},
		{"wire.tx reorder holds the frame", Rule{Point: WireTx, Action: Reorder, Nth: 1},
			"(held behind the next one)", ""},
		{"ur on MWr discards the write", Rule{Point: PCIeTLP, Action: UR, Nth: 1, Match: Match{TLP: "MWr"}},
			"of type MWr", "posted MMIO write answered UR is discarded"},
		{"ur on MRd reads all ones", Rule{Point: PCIeTLP, Action: UR, Nth: 1, Match: Match{TLP: "MRd"}},
			"of type MRd", "reads all ones"},
		{"ur on any TLP says both", Rule{Point: PCIeTLP, Action: UR, Nth: 1},
			"fail the 1st TLP", "reads all ones; a posted MMIO write answered UR is discarded"},
		{"dma without target agrees with dbr target", Rule{Point: DMARead, Action: Timeout, Nth: 1},
			"time out the 1st read", "dbr: " + dmaConsequence["dbr"]},
		{"dbr target names the receive queue", Rule{Point: DMARead, Action: Timeout, Nth: 1, Match: Match{Target: "dbr"}},
			"of a doorbell record", "a receive queue sees no new WQEs"},
		// Without a target, only what the point can hit: a read has no
		// CQE, a write no WQE or record.
		{"dma.read without target: no cqe or eqe", Rule{Point: DMARead, Action: UR, Nth: 1},
			"fail the 1st read", "; dbr: " + dmaConsequence["dbr"]},
		{"dma.write without target: no wqe or dbr", Rule{Point: DMAWrite, Action: Poison, Nth: 1},
			"poison the 1st write", "; eqe: " + dmaConsequence["eqe"]},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, (&Plan{Rules: []Rule{tc.rule}}).Validate())
			require.Contains(t, tc.rule.Explain(), tc.text)
			require.Contains(t, tc.rule.Consequence(), tc.cons)
		})
	}
	// An untargeted DMA rule lists the consequences of the accesses its
	// point has, not the other direction's (it promised a dma.read a CQE).
	for _, tc := range []struct {
		pt     Point
		absent []string
	}{{DMARead, []string{"cqe:", "eqe:"}}, {DMAWrite, []string{"wqe:", "dbr:"}}} {
		t.Run(string(tc.pt)+" without target", func(t *testing.T) {
			cons := (&Rule{Point: tc.pt, Action: Timeout, Nth: 1}).Consequence()
			for _, a := range tc.absent {
				require.NotContains(t, cons, a)
			}
		})
	}
	never := []struct{ name, json, want string }{
		{"cqe read", `{"rules":[{"point":"dma.read","action":"timeout","match":{"target":"cqe"}}]}`, "match.target cqe is a dma.write"},
		{"eqe read", `{"rules":[{"point":"dma.read","action":"ur","match":{"target":"eqe"}}]}`, "match.target eqe is a dma.write"},
		{"wqe write", `{"rules":[{"point":"dma.write","action":"abort","match":{"target":"wqe"}}]}`, "match.target wqe is a WQE fetch, a dma.read"},
		// At dma.read only a WQE fetch has a wqe_index.
		{"wqe index of a data read", `{"rules":[{"point":"dma.read","action":"timeout","match":{"wqe":0,"target":"data"}}]}`, "match.wqe at dma.read is the first WQEBB of a WQE fetch: with match.target data the rule never fires"},
		{"wqe index of a record read", `{"rules":[{"point":"dma.read","action":"timeout","match":{"wqe":3,"target":"dbr"}}]}`, "with match.target dbr the rule never fires"},
		// The device reads doorbell records and never writes one.
		{"dbr write", `{"rules":[{"point":"dma.write","action":"poison","match":{"target":"dbr"}}]}`, "match.target dbr: the device only reads doorbell records (dma.read)"},
	}
	for _, tc := range never {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.json))
			require.ErrorIs(t, err, ErrInvalidPlan)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// Every action a device-side point takes has a consequence in Explain
// (several had none: doorbell delay and corrupt, cq corrupt, eq delay,
// wc.buffer corrupt and duplicate, pcie.tlp corrupt, duplicate and delay).
func TestEveryActionHasAConsequence(t *testing.T) {
	for _, pt := range Points {
		if pt == WireTx || pt == WireRx {
			continue // the frame's fate is the whole story
		}
		for _, an := range ActionsAt(pt) {
			var a Action
			require.NoError(t, a.UnmarshalText([]byte(an)))
			t.Run(string(pt)+" "+an, func(t *testing.T) {
				r := Rule{Point: pt, Action: a}
				require.NotEmpty(t, r.Consequence())
			})
		}
	}
	drop := Rule{Point: PCIeTLP, Action: Drop, Match: Match{TLP: "MRd"}}
	require.Contains(t, drop.Consequence(), "reads all ones")
}

// Overlapping rules: a later rule that an earlier "always" rule covers can
// never fire, and Explain says so; a rule it only partly covers, or one
// behind a counted or probabilistic rule, can fire and gets no note.
func TestExplainShadowedRules(t *testing.T) {
	tests := []struct {
		name   string
		rules  string
		shadow int // of the last rule; -1 none
	}{
		{"drop all then corrupt the 2nd", `{"point":"wire.tx","action":"drop"},{"point":"wire.tx","action":"corrupt","nth":2}`, 0},
		{"node rule covers the node's qpn rule", `{"point":"cq","action":"drop","match":{"node":0}},{"point":"cq","action":"delay","delay_ps":5,"match":{"node":0,"qpn":7}}`, 0},
		{"psn range covers a psn", `{"point":"wire.tx","action":"drop","match":{"psn_from":10,"psn_to":20}},{"point":"wire.tx","action":"duplicate","match":{"psn":15}}`, 0},
		{"addr range covers a narrower one", `{"point":"dma.read","action":"timeout","match":{"addr_from":"0x1000","addr_to":"0x2000"}},{"point":"dma.read","action":"ur","match":{"addr_from":"0x1100","addr_to":"0x1200"}}`, 0},
		{"other point", `{"point":"wire.tx","action":"drop"},{"point":"wire.rx","action":"drop"}`, -1},
		{"narrower first", `{"point":"cq","action":"drop","match":{"qpn":7}},{"point":"cq","action":"corrupt"}`, -1},
		{"other node", `{"point":"cq","action":"drop","match":{"node":0}},{"point":"cq","action":"corrupt","match":{"node":1}}`, -1},
		{"counted first", `{"point":"cq","action":"drop","count":2},{"point":"cq","action":"corrupt"}`, -1},
		{"probabilistic first", `{"point":"cq","action":"drop","prob":0.5},{"point":"cq","action":"corrupt"}`, -1},
		// prob 1 fires on every event (the draw is in [0, 1)), as every 1 does.
		{"prob 1 first", `{"point":"cq","action":"drop","prob":1},{"point":"cq","action":"corrupt"}`, 0},
		{"every 1 first", `{"point":"cq","action":"drop","every":1},{"point":"cq","action":"corrupt"}`, 0},
		{"psn outside", `{"point":"wire.tx","action":"drop","match":{"psn_from":10,"psn_to":20}},{"point":"wire.tx","action":"duplicate","match":{"psn":21}}`, -1},
		{"psn range vs all psns", `{"point":"wire.tx","action":"drop","match":{"psn_from":10}},{"point":"wire.tx","action":"duplicate"}`, -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse([]byte(`{"rules":[` + tc.rules + `]}`))
			require.NoError(t, err)
			last := len(p.Rules) - 1
			require.Equal(t, tc.shadow, p.ShadowedBy(last))
			if tc.shadow >= 0 {
				require.Contains(t, p.Explain(), "! never fires: rule 0 fires first")
			} else {
				require.NotContains(t, p.Explain(), "never fires")
			}
			// What Explain says is what Decide does: a shadowed rule
			// never fires on any event.
			in := NewInjector(p)
			for k := 0; k < 50; k++ {
				ev := NewEvent(0, 7)
				ev.PSN, ev.Opcode, ev.Addr, ev.Len = 15, 4, 0x1100, 16
				in.Decide(p.Rules[last].Point, ev)
			}
			if tc.shadow >= 0 {
				require.Zero(t, in.Fired()[last].Fired)
			}
		})
	}
}
