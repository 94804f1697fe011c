package wire

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/fault"
	"github.com/softnic/softnic/sim"
)

// roceFrameOp is roceFrame with the BTH opcode and PSN set.
func roceFrameOp(v6 bool, qpn uint32, op uint8, psn uint32, payload int) []byte {
	f := roceFrame(v6, qpn, payload)
	at := bthOffset(f)
	f[at] = op
	binary.BigEndian.PutUint32(f[at+8:], psn&0xFFFFFF|0x80000000) // AckReq set: must be masked off
	return f
}

func TestFrameEvent(t *testing.T) {
	v4 := roceFrameOp(false, 0xABCDEF, 0x11, 0x123456, 0)
	v6 := roceFrameOp(true, 0x11, 0x64, 7, 8)
	withOpts := append(roceFrame(false, 0, 0), 0, 0, 0, 0)
	withOpts[EthHeaderLen] = 0x46 // 24-byte IPv4 header
	copy(withOpts[EthHeaderLen+24:], roceFrameOp(false, 0x42, 0x0C, 99, 0)[EthHeaderLen+20:])
	otherPort := roceFrameOp(false, 5, 4, 1, 0)
	binary.BigEndian.PutUint16(otherPort[EthHeaderLen+20+2:], 4790)
	unknown := fault.NewEvent(3, 0)
	tests := []struct {
		name  string
		frame []byte
		want  fault.Event
	}{
		{"ipv4", v4, fault.Event{Node: 3, QPN: 0xABCDEF, Opcode: 0x11, PSN: 0x123456}},
		{"ipv6", v6, fault.Event{Node: 3, QPN: 0x11, Opcode: 0x64, PSN: 7}},
		{"ipv4 options", withOpts, fault.Event{Node: 3, QPN: 0x42, Opcode: 0x0C, PSN: 99}},
		{"opcode 0 psn 0 is known", roceFrameOp(false, 1, 0, 0, 0), fault.Event{Node: 3, QPN: 1, Opcode: 0, PSN: 0}},
		{"not udp 4791", otherPort, unknown},
		{"other ethertype", frame(100, 0), unknown},
		{"truncated bth", v4[:EthHeaderLen+20+8+11], unknown},
		{"truncated ipv6", v6[:EthHeaderLen+39], unknown},
		{"runt", v4[:10], unknown},
		{"nil", nil, unknown},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, FrameEvent(3, tc.frame))
			require.Equal(t, tc.want.QPN, PeekQPN(tc.frame))
		})
	}
	require.Zero(t, testing.AllocsPerRun(100, func() { FrameEvent(0, v4) }))
}

// Wire rules match the frame's opcode and PSN (the RC-transport tests'
// "drop the 3rd WRITE of QP 0x100", "duplicate every ACK").
func TestFaultsByOpcodeAndPSN(t *testing.T) {
	// The frames A sends, in order: tag i is the PSN.
	type fr struct {
		qpn uint32
		op  uint8
	}
	sent := []fr{
		{0x100, 0x0A}, {0x100, 0x11}, {0x200, 0x0A}, {0x100, 0x0A}, {0x100, 0x0C},
		{0x100, 0x0A}, {0x100, 0x0A}, {0x100, 0x11},
	}
	tests := []struct {
		name string
		rule fault.Rule
		want []int32 // PSNs B receives (-1: the non-RoCE frame sent last)
		ctr  string
	}{
		{"drop the 3rd write of QP 0x100", fault.Rule{Point: fault.WireTx, Action: fault.Drop, Nth: 3,
			Match: fault.Match{QPN: new(uint32(0x100)), Opcode: new(uint8(0x0A))}}, []int32{0, 1, 2, 3, 4, 6, 7, -1}, CtrFaultDrop.String()},
		{"duplicate every ack", fault.Rule{Point: fault.WireTx, Action: fault.Duplicate, Match: fault.Match{Opcode: new(uint8(0x11))}},
			[]int32{0, 1, 1, 2, 3, 4, 5, 6, 7, 7, -1}, CtrFaultDuplicate.String()},
		{"rx drop psn 4", fault.Rule{Point: fault.WireRx, Action: fault.Drop, Match: fault.Match{PSN: new(uint32(4))}},
			[]int32{0, 1, 2, 3, 5, 6, 7, -1}, CtrFaultDrop.String()},
		{"drop psn range 2..5 of opcode 0x0a", fault.Rule{Point: fault.WireTx, Action: fault.Drop,
			Match: fault.Match{PSNFrom: new(uint32(2)), PSNTo: new(uint32(5)), Opcode: new(uint8(0x0A))}}, []int32{0, 1, 4, 6, 7, -1}, CtrFaultDrop.String()},
		{"delay the read request", fault.Rule{Point: fault.WireTx, Action: fault.Delay, Delay: 5 * sim.Microsecond,
			Match: fault.Match{Opcode: new(uint8(0x0C))}}, []int32{0, 1, 2, 3, 5, 6, 7, -1, 4}, CtrFaultDelay.String()},
		{"opcode rule skips non-RoCE frames", fault.Rule{Point: fault.WireTx, Action: fault.Drop, Match: fault.Match{Opcode: new(uint8(0))}},
			[]int32{0, 1, 2, 3, 4, 5, 6, 7, -1}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, Spec{}, tc.rule)
			for i, f := range sent {
				e.link.A().Send(sim.Time(i)*100_000, roceFrameOp(false, f.qpn, f.op, uint32(i), 64))
			}
			e.link.A().Send(sim.Time(len(sent))*100_000, frame(60, 9)) // not RoCE
			e.eng.Run(0)
			var got []int32
			for _, g := range e.b.got {
				got = append(got, FrameEvent(1, g.frame).PSN)
			}
			require.Equal(t, tc.want, got)
			if tc.ctr != "" {
				require.NotZero(t, e.ctr.Get(tc.ctr))
			}
		})
	}
}

func TestSendDeliverAllocsWithPacketRules(t *testing.T) {
	eng := sim.NewEngine()
	inj := fault.NewInjector(&fault.Plan{Rules: []fault.Rule{
		{Point: fault.WireTx, Action: fault.Drop, Nth: 1 << 40, Match: fault.Match{Opcode: new(uint8(0x0A)), PSNTo: new(uint32(100))}},
		{Point: fault.WireRx, Action: fault.Drop, Nth: 1 << 40, Match: fault.Match{QPN: new(uint32(7)), PSN: new(uint32(0))}},
	}})
	l := NewLink(eng, Spec{}, nil, nil, inj)
	var sink discard
	l.B().Attach(1, &sink)
	f := roceFrameOp(false, 7, 0x0A, 0, 256)
	step := func() {
		l.A().Send(eng.Now(), f)
		eng.Run(0)
	}
	step()
	require.Zero(t, testing.AllocsPerRun(200, step))
	require.Equal(t, uint64(202), inj.Fired()[0].Matched)
	require.Equal(t, uint64(202), inj.Fired()[1].Matched)
}
