package fault

import (
	"math/rand"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestShadowsMatchShadowedBy: Explain's one-pass shadows gives, for every
// rule, what ShadowedBy gives (its scan of the rules before it), on
// random plans whose rules draw each field from a few values, so that
// covering, partial covering and ties are frequent. Some plans set a PSN
// and an address range on one rule (Parse refuses those, a Plan built in
// Go may hold them) and TLP/target spellings that differ in case only
// (EqualFold, with the Kelvin sign among them).
func TestShadowsMatchShadowedBy(t *testing.T) {
	points := []Point{WireTx, WireRx, PCIeTLP, DMARead, CQ, Port}
	tlps := []string{"", "MWr", "MRd", "mrd", "MRD", "\u212a", "k", "K"}
	targets := []string{"", "data", "wqe", "DATA", "Wqe"}
	u32 := func(r *rand.Rand, n int) *uint32 {
		if r.Intn(2) == 0 {
			return nil
		}
		v := uint32(r.Intn(n))
		return &v
	}
	u64 := func(r *rand.Rand, n int) *uint64 {
		if r.Intn(2) == 0 {
			return nil
		}
		v := uint64(r.Intn(n)) * 0x100
		return &v
	}
	cases := []struct {
		name  string
		seed  int64
		rules int
		mixed bool // PSN and address ranges on one rule
	}{
		{"small", 5, 32, false},
		{"medium", 2, 64, false},
		{"large", 3, 2000, false},
		{"mixed ranges", 4, 500, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewSource(c.seed))
			shadowed := 0
			for plan := 0; plan < 20; plan++ {
				p := &Plan{Seed: uint64(plan)}
				for range c.rules {
					var e Rule
					e.Point = points[r.Intn(len(points))]
					switch r.Intn(6) {
					case 0:
						e.Count = uint64(1 + r.Intn(2))
					case 1:
						e.Nth = 2
					case 2:
						e.Every = uint64(r.Intn(3)) // 0, 1: always; 2: not
					case 3:
						e.Prob = 0.5
					}
					m := &e.Match
					if r.Intn(3) == 0 {
						n := r.Intn(2)
						m.Node = &n
					}
					m.QPN = u32(r, 3)
					if r.Intn(3) == 0 {
						op := uint8(r.Intn(2))
						m.Opcode = &op
					}
					if r.Intn(3) == 0 {
						w := uint16(r.Intn(2))
						m.WQE = &w
					}
					m.TLP = tlps[r.Intn(len(tlps))]
					m.Target = targets[r.Intn(len(targets))]
					if e.Point.framePoint() || c.mixed {
						if r.Intn(3) == 0 {
							m.PSN = u32(r, 8)
						} else {
							m.PSNFrom, m.PSNTo = u32(r, 8), u32(r, 8)
						}
					}
					if !e.Point.framePoint() || c.mixed {
						m.AddrFrom, m.AddrTo = u64(r, 8), u64(r, 8)
					}
					p.Rules = append(p.Rules, e)
				}
				got := p.shadows()
				for i := range p.Rules {
					require.Equal(t, p.ShadowedBy(i), got[i], "plan %d rule %d: %+v", plan, i, p.Rules[i])
					if got[i] >= 0 {
						shadowed++
					}
				}
			}
			require.NotZero(t, shadowed, "the plans exercise shadowing")
		})
	}
}

// TestExplainBigPlan: Explain of a plan of 10^6 rules (a 64 MiB plan holds
// more) finishes. With ShadowedBy asked for each rule it compared each
// rule with every earlier one, some 5·10^11 comparisons here: far beyond
// the test timeout. Every rule is an always rule at wire.tx on its own
// PSN, so none covers another but the last, which repeats the first.
func TestExplainBigPlan(t *testing.T) {
	const n = 1_000_000
	p := &Plan{Rules: make([]Rule, n)}
	psns := make([]uint32, n)
	for i := range p.Rules {
		psns[i] = uint32(i % (n - 1))
		p.Rules[i] = Rule{Point: WireTx, Action: Drop, Match: Match{PSN: &psns[i]}}
	}
	out := p.Explain()
	require.Equal(t, 1, strings.Count(out, "never fires"), "only the last rule is shadowed")
	require.True(t, strings.HasSuffix(out, "! never fires: rule 0 fires first on every event this rule matches (the first rule that fires decides)\n"))
	require.Equal(t, 0, p.ShadowedBy(n-1))
}

func BenchmarkExplainShadows(b *testing.B) {
	const n = 100_000
	p := &Plan{Rules: make([]Rule, n)}
	for i := range p.Rules {
		psn := uint32(i)
		p.Rules[i] = Rule{Point: WireTx, Action: Drop, Match: Match{PSN: &psn}}
	}
	for b.Loop() {
		_ = p.shadows()
	}
}
