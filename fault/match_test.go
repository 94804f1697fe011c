package fault

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/sim"
)

// pkt is an event of a RoCE frame.
func pkt(node int, qpn uint32, op int16, psn int32) Event {
	return Event{Node: node, QPN: qpn, Opcode: op, PSN: psn}
}

func TestMatchPacket(t *testing.T) {
	tests := []struct {
		name  string
		match Match
		ev    Event
		want  bool
	}{
		{"empty matches a non-RoCE event", Match{}, NewEvent(3, 0), true},
		{"opcode equal", Match{Opcode: ptr(uint8(0x0A))}, pkt(0, 1, 0x0A, 5), true},
		{"opcode differs", Match{Opcode: ptr(uint8(0x0A))}, pkt(0, 1, 0x0B, 5), false},
		{"opcode 0 vs unknown", Match{Opcode: ptr(uint8(0))}, NewEvent(0, 0), false},
		{"opcode 0 vs send first", Match{Opcode: ptr(uint8(0))}, pkt(0, 0, 0, 0), true},
		{"psn equal", Match{PSN: ptr(uint32(7))}, pkt(0, 1, 0x11, 7), true},
		{"psn differs", Match{PSN: ptr(uint32(7))}, pkt(0, 1, 0x11, 8), false},
		{"psn 0 vs unknown", Match{PSN: ptr(uint32(0))}, NewEvent(0, 0), false},
		{"psn range inside", Match{PSNFrom: ptr(uint32(10)), PSNTo: ptr(uint32(20))}, pkt(0, 1, 4, 20), true},
		{"psn range low edge", Match{PSNFrom: ptr(uint32(10)), PSNTo: ptr(uint32(20))}, pkt(0, 1, 4, 10), true},
		{"psn range below", Match{PSNFrom: ptr(uint32(10)), PSNTo: ptr(uint32(20))}, pkt(0, 1, 4, 9), false},
		{"psn range above", Match{PSNFrom: ptr(uint32(10)), PSNTo: ptr(uint32(20))}, pkt(0, 1, 4, 21), false},
		{"psn from only", Match{PSNFrom: ptr(uint32(10))}, pkt(0, 1, 4, MaxPSN), true},
		{"psn to only", Match{PSNTo: ptr(uint32(10))}, pkt(0, 1, 4, 0), true},
		{"psn range vs unknown", Match{PSNTo: ptr(uint32(10))}, NewEvent(0, 1), false},
		{"all fields", Match{Node: ptr(1), QPN: ptr(uint32(0x100)), Opcode: ptr(uint8(6)), PSN: ptr(uint32(3))}, pkt(1, 0x100, 6, 3), true},
		{"all fields, other node", Match{Node: ptr(1), QPN: ptr(uint32(0x100)), Opcode: ptr(uint8(6)), PSN: ptr(uint32(3))}, pkt(0, 0x100, 6, 3), false},
		{"all fields, other qp", Match{Node: ptr(1), QPN: ptr(uint32(0x100)), Opcode: ptr(uint8(6)), PSN: ptr(uint32(3))}, pkt(1, 0x101, 6, 3), false},
		{"unvalidated psn above max", Match{PSN: ptr(uint32(MaxPSN + 1))}, pkt(0, 0, 0, MaxPSN), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := compile(&tc.match)
			require.Equal(t, tc.want, c.matches(&tc.ev))
		})
	}
}

// Events are counted per rule after Match: "the 3rd WRITE of QP 0x100".
func TestNthOfOpcode(t *testing.T) {
	in := NewInjector(&Plan{Rules: []Rule{
		{Point: WireTx, Action: Drop, Nth: 3, Match: Match{QPN: ptr(uint32(0x100)), Opcode: ptr(uint8(0x0A))}},
	}})
	evs := []Event{
		pkt(0, 0x100, 0x0A, 1), // 1st match
		pkt(0, 0x100, 0x11, 2), // an ACK: not counted
		NewEvent(0, 0x100),     // non-RoCE: not counted
		pkt(0, 0x101, 0x0A, 3), // other QP
		pkt(0, 0x100, 0x0A, 4), // 2nd
		pkt(0, 0x100, 0x0A, 5), // 3rd: dropped
		pkt(0, 0x100, 0x0A, 6),
	}
	var got []Action
	for _, ev := range evs {
		got = append(got, in.Decide(WireTx, ev).Action)
	}
	require.Equal(t, []Action{None, None, None, None, None, Drop, None}, got)
	require.Equal(t, uint64(4), in.Fired()[0].Matched)
	require.Equal(t, "wire.tx drop nth=3 qpn=0x100 opcode=0x0a", in.Fired()[0].Desc)
}

// The compiled match does not alias the caller's plan.
func TestInjectorCopiesMatch(t *testing.T) {
	op := uint8(0x11)
	p := &Plan{Rules: []Rule{{Point: WireRx, Action: Duplicate, Match: Match{Opcode: &op}}}}
	in := NewInjector(p)
	op = 0x0A
	require.Equal(t, Duplicate, in.Decide(WireRx, pkt(0, 0, 0x11, 0)).Action)
	require.Equal(t, None, in.Decide(WireRx, pkt(0, 0, 0x0A, 0)).Action)
}

func TestParseMatch(t *testing.T) {
	tests := []struct {
		name  string
		match string
		want  Match
	}{
		{"numbers", `{"qpn": 256, "opcode": 10, "psn": 3}`, Match{QPN: ptr(uint32(256)), Opcode: ptr(uint8(10)), PSN: ptr(uint32(3))}},
		{"hex strings", `{"qpn": "0x100", "opcode": "0x0a", "psn": "0XFFFFFF"}`, Match{QPN: ptr(uint32(256)), Opcode: ptr(uint8(10)), PSN: ptr(uint32(MaxPSN))}},
		{"decimal string", `{"opcode": "17"}`, Match{Opcode: ptr(uint8(17))}},
		{"opcode name", `{"opcode": "RC_SEND_ONLY"}`, Match{Opcode: ptr(uint8(0x04))}},
		{"opcode name, any case, kernel prefix", `{"opcode": "ib_opcode_rc_acknowledge"}`, Match{Opcode: ptr(uint8(0x11))}},
		{"uc name", `{"opcode": "UC_RDMA_WRITE_ONLY"}`, Match{Opcode: ptr(uint8(0x2A))}},
		{"ud name", `{"opcode": "UD_SEND_ONLY_WITH_IMMEDIATE"}`, Match{Opcode: ptr(uint8(0x65))}},
		{"cnp", `{"opcode": "CNP"}`, Match{Opcode: ptr(uint8(0x81))}},
		{"range", `{"psn_from": 100, "psn_to": "0x200"}`, Match{PSNFrom: ptr(uint32(100)), PSNTo: ptr(uint32(0x200))}},
		{"open range", `{"psn_from": 100}`, Match{PSNFrom: ptr(uint32(100))}},
		{"node", `{"node": 1}`, Match{Node: ptr(1)}},
		{"null", `null`, Match{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse([]byte(`{"rules":[{"point":"wire.rx","action":"drop","match":` + tc.match + `}]}`))
			require.NoError(t, err)
			require.Equal(t, tc.want, p.Rules[0].Match)
		})
	}
}

func TestParseMatchErrors(t *testing.T) {
	tests := []struct {
		name, match, want string
	}{
		{"unknown field", `{"opcdoe": 1}`, `unknown field "opcdoe"`},
		{"opcode too big", `{"opcode": 256}`, "match.opcode 0x100 exceeds 0xff"},
		{"hex opcode too big", `{"opcode": "0x1ff"}`, "exceeds 0xff"},
		{"negative opcode", `{"opcode": -1}`, "want a non-negative integer"},
		{"fractional psn", `{"psn": 1.5}`, "want a non-negative integer"},
		{"exponent psn", `{"psn": 1e3}`, "want a non-negative integer"},
		{"psn too big", `{"psn": 16777216}`, "match.psn 0x1000000 exceeds 0xffffff"},
		{"psn_to too big", `{"psn_to": "0x1000000"}`, "match.psn_to"},
		{"qpn too big", `{"qpn": 16777216}`, "match.qpn"},
		{"bad opcode name", `{"opcode": "RC_TELEPORT"}`, `"RC_TELEPORT": want a number`},
		{"reserved opcode name", `{"opcode": "UC_RDMA_READ_REQUEST"}`, "want a number"},
		{"name for psn", `{"psn": "RC_SEND_ONLY"}`, `match.psn: "RC_SEND_ONLY" is not a number`},
		{"octal-looking", `{"psn": "0o17"}`, "want a number"},
		{"signed string", `{"psn": "+5"}`, "want a number"},
		{"bool", `{"psn": true}`, "want a non-negative integer"},
		{"from above to", `{"psn_from": 9, "psn_to": 8}`, "psn_from 9 > psn_to 8"},
		{"psn and range", `{"psn": 9, "psn_to": 10}`, "not both"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse([]byte(`{"rules":[{"point":"wire.tx","action":"drop","match":` + tc.match + `}]}`))
			require.Nil(t, p)
			require.ErrorIs(t, err, ErrInvalidPlan)
			require.ErrorContains(t, err, tc.want)
		})
	}
	// Opcode and PSN are frame fields: other points never see them.
	_, err := Parse([]byte(`{"rules":[{"point":"pcie.tlp","action":"drop","match":{"opcode":4}}]}`))
	require.ErrorContains(t, err, "apply to frames")
	// Validate checks rules built in Go the same way.
	bad := &Plan{Rules: []Rule{{Point: WireTx, Action: Drop, Match: Match{PSN: ptr(uint32(1 << 24))}}}}
	require.ErrorIs(t, bad.Validate(), ErrInvalidPlan)
	require.ErrorContains(t, bad.Validate(), "fault: invalid fault plan: rule 0")
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	require.NoError(t, os.WriteFile(good, []byte(`{"seed":3,"rules":[{"point":"wire.tx","action":"drop","nth":3,"match":{"opcode":"0x0a"}}]}`), 0o644))
	p, err := Load(good)
	require.NoError(t, err)
	require.Equal(t, uint64(3), p.Seed)
	require.Equal(t, uint8(0x0A), *p.Rules[0].Match.Opcode)

	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"rules":[{"point":"wire.tx","action":"drop","nht":3}]}`), 0o644))
	_, err = Load(bad)
	require.ErrorIs(t, err, ErrInvalidPlan)
	require.ErrorContains(t, err, "fault: "+bad+": invalid fault plan")

	_, err = Load(filepath.Join(dir, "missing.json"))
	require.ErrorIs(t, err, fs.ErrNotExist)
	require.ErrorContains(t, err, "missing.json")
}

func TestExplain(t *testing.T) {
	tests := []struct {
		name string
		rule Rule
		want string
	}{
		{"nth of qp and opcode", Rule{Point: WireTx, Action: Drop, Nth: 3, Match: Match{QPN: ptr(uint32(0x100)), Opcode: ptr(uint8(0x0A))}},
			"wire.tx: drop the 3rd frame of QP 0x100 with opcode 0x0a (RC_RDMA_WRITE_ONLY)"},
		{"prob corrupt", Rule{Point: WireRx, Action: Corrupt, Prob: 0.005, Byte: -1},
			"wire.rx: corrupt each frame with probability 0.5% (byte chosen at random)"},
		{"fixed byte", Rule{Point: DMARead, Action: Corrupt, Nth: 1, Byte: 12},
			"dma.read: corrupt the 1st read (byte 12, or a random one if the read is shorter)"},
		{"every with count", Rule{Point: CQ, Action: Drop, Every: 2, Count: 5}, "cq: drop every 2nd CQE, at most 5 times"},
		{"every 1", Rule{Point: Doorbell, Action: Drop, Every: 1}, "doorbell: drop every doorbell"},
		{"always once", Rule{Point: PCIeTLP, Action: Drop, Count: 1}, "pcie.tlp: drop the first TLP"},
		{"always with count", Rule{Point: WireTx, Action: Drop, Count: 3, Match: Match{PSN: ptr(uint32(9))}}, "wire.tx: drop the first 3 frames with PSN 9"},
		{"every 1 with count", Rule{Point: WCBuffer, Action: Tear, Every: 1, Count: 2}, "wc.buffer: tear the first 2 lines"},
		{"nth once", Rule{Point: WireTx, Action: Drop, Nth: 2, Count: 1}, "wire.tx: drop the 2nd frame"},
		{"prob once", Rule{Point: DMAWrite, Action: Drop, Prob: 0.1, Count: 1}, "dma.write: drop each write with probability 10%, once"},
		{"delay by opcode", Rule{Point: WireTx, Action: Delay, Delay: 50 * sim.Microsecond, Match: Match{Opcode: ptr(uint8(0x10))}},
			"wire.tx: delay every frame with opcode 0x10 (RC_RDMA_READ_RESPONSE_ONLY) by 50µs"},
		{"delay in ns", Rule{Point: WireTx, Action: Delay, Delay: 1500, Nth: 12}, "wire.tx: delay the 12th frame by 1.5ns"},
		{"delay in ps", Rule{Point: WireTx, Action: Delay, Delay: 300, Nth: 21}, "wire.tx: delay the 21st frame by 300ps"},
		{"reorder on node, psn range", Rule{Point: WireTx, Action: Reorder, Prob: 0.25, Match: Match{Node: ptr(1), PSNFrom: ptr(uint32(10))}},
			"wire.tx: reorder each frame with probability 25% on node 1 with PSN 10..16777215 (held behind the next one)"},
		{"exact psn, unnamed opcode", Rule{Point: WireRx, Action: Duplicate, Nth: 2, Match: Match{PSN: ptr(uint32(0)), Opcode: ptr(uint8(0x15))}},
			"wire.rx: duplicate the 2nd frame with opcode 0x15 with PSN 0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, tc.rule.Explain())
		})
	}
	p := &Plan{Seed: 7, Rules: []Rule{tests[0].rule, tests[1].rule}}
	require.Equal(t, "seed 7\nrule 0: "+tests[0].want+"\nrule 1: "+tests[1].want+"\n", p.Explain())
	require.Equal(t, p.Explain(), p.Explain())
	require.Equal(t, "seed 0\nno rules: nothing is injected\n", (&Plan{}).Explain())
}

func TestOpcodeNames(t *testing.T) {
	named := 0
	for op := 0; op < 256; op++ {
		n := opcodeName(uint8(op))
		if n == "" {
			continue
		}
		named++
		back, ok := parseOpcodeName(n)
		require.True(t, ok, n)
		require.Equal(t, uint8(op), back, n)
	}
	// 25 RC + 12 UC + 2 UD + CNP.
	require.Equal(t, 40, named)
	for _, s := range []string{"", "RC_", "XX_SEND_ONLY", "UD_RDMA_WRITE_ONLY", "RC_RESERVED"} {
		_, ok := parseOpcodeName(s)
		require.False(t, ok, s)
	}
}

func TestDecideAllocsWithPacketMatch(t *testing.T) {
	in := NewInjector(&Plan{Seed: 5, Rules: []Rule{
		{Point: WireTx, Action: Drop, Prob: 0.5, Match: Match{Opcode: ptr(uint8(0x11))}},
		{Point: WireTx, Action: Corrupt, Every: 3, Byte: -1, Match: Match{PSNFrom: ptr(uint32(1)), PSNTo: ptr(uint32(9))}},
	}})
	ev := pkt(0, 9, 0x11, 5)
	require.Zero(t, testing.AllocsPerRun(1000, func() { in.Decide(WireTx, ev) }))
}

func BenchmarkDecidePacketMatch(b *testing.B) {
	in := NewInjector(&Plan{Seed: 5, Rules: []Rule{
		{Point: WireTx, Action: Drop, Nth: 3, Match: Match{QPN: ptr(uint32(0x100)), Opcode: ptr(uint8(0x0A))}},
		{Point: WireTx, Action: Duplicate, Prob: 0.01, Match: Match{Opcode: ptr(uint8(0x11))}},
		{Point: WireTx, Action: Corrupt, Every: 100, Byte: -1, Match: Match{PSNFrom: ptr(uint32(100)), PSNTo: ptr(uint32(200))}},
	}})
	ev := pkt(0, 0x100, 0x11, 150)
	b.ReportAllocs()
	for b.Loop() {
		in.Decide(WireTx, ev)
	}
}

// FuzzParse: the parser never panics; an accepted plan validates, explains,
// runs, and survives a JSON round trip unchanged.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"seed": 7, "rules": [{"point": "wire.tx", "action": "drop", "nth": 3}]}`,
		`{"rules":[{"point":"wire.rx","action":"corrupt","prob":0.005,"match":{"opcode":"RC_SEND_ONLY","psn_from":1,"psn_to":"0x10"}}]}`,
		`{"rules":[{"point":"wire.tx","action":"delay","delay_ps":50000000,"match":{"qpn":"0x100","psn":5,"node":1}}]}`,
		`{"rules":[{"point":"cq","action":"tear","every":2,"count":1,"byte":3}]}`,
		`{"rules":[null]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data)
		if err != nil {
			require.ErrorIs(t, err, ErrInvalidPlan)
			require.Nil(t, p)
			return
		}
		require.NoError(t, p.Validate())
		_ = p.Explain()
		in := NewInjector(p)
		for i := range 4 {
			for _, pt := range Points {
				in.Decide(pt, pkt(i%2, uint32(i), int16(i), int32(i)))
			}
		}
		out, err := json.Marshal(p)
		require.NoError(t, err)
		back, err := Parse(out)
		require.NoError(t, err, "%s", out)
		require.Equal(t, p, back)
	})
}
