package wire

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/fault"
	"github.com/softnic/softnic/sim"
)

// fakeReal is a RealTransport in memory: it records what is sent.
type fakeReal struct {
	sent   [][]byte
	ch     chan []byte
	closed bool
	fail   bool // Send fails
	count  bool // only count sent frames (no copies): for allocation tests
	n      int
}

func newFakeReal() *fakeReal { return &fakeReal{ch: make(chan []byte, 16)} }

func (f *fakeReal) Send(frame []byte) error {
	if f.fail {
		return errors.New("cable cut")
	}
	f.n++
	if f.count {
		return nil
	}
	f.sent = append(f.sent, bytes.Clone(frame))
	return nil
}
func (f *fakeReal) Frames() <-chan []byte { return f.ch }
func (f *fakeReal) Stats() RealStats      { return RealStats{TxFrames: uint64(len(f.sent))} }
func (f *fakeReal) Close() error          { f.closed = true; return nil }
func (f *fakeReal) String() string        { return "fake:0" }

// psns is the PSN of every frame sent.
func (f *fakeReal) psns() []int32 {
	var p []int32
	for _, s := range f.sent {
		p = append(p, FrameEvent(0, s).PSN)
	}
	return p
}

func faultyWith(t *testing.T, rules ...fault.Rule) (*FaultyTransport, *fakeReal) {
	t.Helper()
	p := &fault.Plan{Seed: 1, Rules: rules}
	if err := p.Validate(); unsupportedOnly(rules) {
		// A plan built in Go need not be validated: the transport must
		// still refuse an action the wire has not (Validate does too).
		require.ErrorIs(t, err, fault.ErrInvalidPlan)
	} else {
		require.NoError(t, err)
	}
	fr := newFakeReal()
	return NewFaultyTransport(fr, fault.NewInjector(p), 0), fr
}

const us = sim.Time(sim.Microsecond)

func TestFaultyTransportTx(t *testing.T) {
	tests := []struct {
		name      string
		rules     []fault.Rule
		wantSent  []int32 // after the 5 Sends
		wantAfter []int32 // after Poll(1 ms)
		stat      func(RealStats) uint64
	}{
		{"none", nil, []int32{1, 2, 3, 4, 5}, nil, nil},
		{"drop", []fault.Rule{{Point: fault.WireTx, Action: fault.Drop, Nth: 2}},
			[]int32{1, 3, 4, 5}, nil, func(s RealStats) uint64 { return s.FaultDrop }},
		{"duplicate", []fault.Rule{{Point: fault.WireTx, Action: fault.Duplicate, Nth: 2}},
			[]int32{1, 2, 2, 3, 4, 5}, nil, func(s RealStats) uint64 { return s.FaultDuplicate }},
		{"delay released by poll", []fault.Rule{{Point: fault.WireTx, Action: fault.Delay, Nth: 2, Delay: 2500 * sim.Nanosecond}},
			[]int32{1, 3, 4, 2, 5}, nil, func(s RealStats) uint64 { return s.FaultDelay }},
		{"delay of the last frame", []fault.Rule{{Point: fault.WireTx, Action: fault.Delay, Nth: 5, Delay: 50 * sim.Microsecond}},
			[]int32{1, 2, 3, 4}, []int32{5}, func(s RealStats) uint64 { return s.FaultDelay }},
		{"reorder", []fault.Rule{{Point: fault.WireTx, Action: fault.Reorder, Nth: 2}},
			[]int32{1, 3, 2, 4, 5}, nil, func(s RealStats) uint64 { return s.FaultReorder }},
		{"reorder twice in a row", []fault.Rule{{Point: fault.WireTx, Action: fault.Reorder, Count: 2}},
			[]int32{1, 3, 2, 4, 5}, nil, func(s RealStats) uint64 { return s.FaultReorder }},
		{"reorder of the last frame times out", []fault.Rule{{Point: fault.WireTx, Action: fault.Reorder, Nth: 5}},
			[]int32{1, 2, 3, 4}, []int32{5}, func(s RealStats) uint64 { return s.FaultReorder }},
		{"reorder released by a dropped frame", []fault.Rule{
			{Point: fault.WireTx, Action: fault.Reorder, Nth: 2},
			{Point: fault.WireTx, Action: fault.Drop, Nth: 3}},
			[]int32{1, 2, 4, 5}, nil, func(s RealStats) uint64 { return s.FaultDrop }},
		{"reorder goes with a delayed frame", []fault.Rule{
			{Point: fault.WireTx, Action: fault.Reorder, Nth: 2},
			{Point: fault.WireTx, Action: fault.Delay, Nth: 3, Delay: 1500 * sim.Nanosecond}},
			[]int32{1, 4, 3, 2, 5}, nil, func(s RealStats) uint64 { return s.FaultDelay }},
		{"tear is not a wire fault", []fault.Rule{{Point: fault.WireTx, Action: fault.Tear, Nth: 1}},
			[]int32{1, 2, 3, 4, 5}, nil, func(s RealStats) uint64 { return s.FaultUnsupported }},
		{"opcode match", []fault.Rule{{Point: fault.WireTx, Action: fault.Drop, Match: fault.Match{Opcode: new(uint8(0x11))}}},
			[]int32{1, 3, 5}, nil, func(s RealStats) uint64 { return s.FaultDrop }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ft, fr := faultyWith(t, tc.rules...)
			for i := int32(1); i <= 5; i++ {
				require.NoError(t, ft.Poll(sim.Time(i)*us))
				op := uint8(0x0A)
				if i%2 == 0 {
					op = 0x11 // even PSNs are ACKs
				}
				require.NoError(t, ft.Send(roceFrameOp(false, 0x100, op, uint32(i), 64)))
			}
			require.Equal(t, tc.wantSent, fr.psns())
			require.NoError(t, ft.Poll(1000*us))
			require.Equal(t, append(tc.wantSent, tc.wantAfter...), fr.psns())
			require.Zero(t, ft.Held())
			require.Equal(t, sim.Never, ft.NextDue())
			if tc.stat != nil {
				require.NotZero(t, tc.stat(ft.Stats()))
			}
			require.Equal(t, uint64(len(fr.sent)), ft.Stats().TxFrames, "the wrapped transport's stats pass through")
		})
	}
}

func TestFaultyTransportCorruptTx(t *testing.T) {
	for _, b := range []int{-1, 20} {
		ft, fr := faultyWith(t, fault.Rule{Point: fault.WireTx, Action: fault.Corrupt, Nth: 1, Byte: b})
		orig := roceFrameOp(false, 9, 4, 1, 100)
		f := bytes.Clone(orig)
		require.NoError(t, ft.Send(f))
		require.NoError(t, ft.Send(f))
		require.Equal(t, orig, f, "the caller's frame is untouched")
		require.Len(t, fr.sent, 2)
		require.Equal(t, orig, fr.sent[1])
		var diff []int
		for i := range orig {
			if fr.sent[0][i] != orig[i] {
				diff = append(diff, i)
			}
		}
		require.Len(t, diff, 1)
		require.GreaterOrEqual(t, diff[0], EthHeaderLen)
		if b >= 0 {
			require.Equal(t, b, diff[0])
		}
		require.Equal(t, uint64(1), ft.Stats().FaultCorrupt)
	}
}

func TestFaultyTransportHeldFrames(t *testing.T) {
	ft, fr := faultyWith(t, fault.Rule{Point: fault.WireTx, Action: fault.Delay, Delay: sim.Millisecond})
	require.NoError(t, ft.Poll(10*us))
	for i := range 3 {
		require.NoError(t, ft.Send(roceFrameOp(false, 1, 4, uint32(i), 0)))
	}
	require.Equal(t, 3, ft.Held())
	require.Equal(t, 10*us+sim.Time(sim.Millisecond), ft.NextDue())
	require.NoError(t, ft.Poll(500*us))
	require.Empty(t, fr.sent, "not due yet")
	require.NoError(t, ft.Flush())
	require.Equal(t, []int32{0, 1, 2}, fr.psns())
	require.Zero(t, ft.Held())

	// More than MaxHeldFrames: the earliest goes out at once.
	for i := range MaxHeldFrames + 2 {
		require.NoError(t, ft.Send(roceFrameOp(false, 1, 4, uint32(i), 0)))
	}
	require.Equal(t, MaxHeldFrames, ft.Held())
	require.Equal(t, []int32{0, 1, 2, 0, 1}, fr.psns())

	// Close sends what is still held, then closes the wrapped transport.
	require.NoError(t, ft.Close())
	require.True(t, fr.closed)
	require.Len(t, fr.sent, 3+MaxHeldFrames+2)
	require.Zero(t, ft.Held())
}

func TestFaultyTransportErrorsAndPassThrough(t *testing.T) {
	// Frames the transport refuses skip the hook (as on the link).
	ft, fr := faultyWith(t, fault.Rule{Point: fault.WireTx, Action: fault.Drop, Nth: 1})
	fr.fail = true
	require.Error(t, ft.Send(make([]byte, 5)))
	fr.fail = false
	require.NoError(t, ft.Send(frame(60, 1))) // the 1st event: dropped
	require.Empty(t, fr.sent)

	// An error sending a released frame surfaces.
	ft, fr = faultyWith(t, fault.Rule{Point: fault.WireTx, Action: fault.Reorder, Nth: 1})
	require.NoError(t, ft.Send(frame(60, 1)))
	fr.fail = true
	require.ErrorContains(t, ft.Send(frame(60, 2)), "cable cut")

	// A nil injector passes everything through.
	fr = newFakeReal()
	ft = NewFaultyTransport(fr, nil, 0)
	require.NoError(t, ft.Send(frame(60, 1)))
	f := frame(60, 2)
	require.Equal(t, [][]byte{f}, ft.Filter(f, nil))
	require.Len(t, fr.sent, 1)
	require.Equal(t, "fake:0", ft.String())
	require.Same(t, fr, ft.Unwrap())
	require.Equal(t, fr.Frames(), ft.Frames())
}

func TestFaultyTransportRx(t *testing.T) {
	tests := []struct {
		name  string
		rule  fault.Rule
		want  []int32 // PSNs delivered for frames 1..4
		stat  func(RealStats) uint64
		check func(t *testing.T, out [][]byte)
	}{
		{"drop", fault.Rule{Point: fault.WireRx, Action: fault.Drop, Every: 2}, []int32{1, 3},
			func(s RealStats) uint64 { return s.FaultDrop }, nil},
		{"duplicate", fault.Rule{Point: fault.WireRx, Action: fault.Duplicate, Nth: 3}, []int32{1, 2, 3, 3, 4},
			func(s RealStats) uint64 { return s.FaultDuplicate }, func(t *testing.T, out [][]byte) {
				require.NotSame(t, &out[2][0], &out[3][0], "the duplicate is a copy")
			}},
		{"corrupt in place", fault.Rule{Point: fault.WireRx, Action: fault.Corrupt, Nth: 1, Byte: 14}, []int32{1, 2, 3, 4},
			func(s RealStats) uint64 { return s.FaultCorrupt }, func(t *testing.T, out [][]byte) {
				require.NotEqual(t, byte(0x45), out[0][EthHeaderLen], "the IPv4 version/IHL byte was flipped")
			}},
		{"delay is not applied at rx", fault.Rule{Point: fault.WireRx, Action: fault.Delay, Nth: 1, Delay: 5}, []int32{1, 2, 3, 4},
			func(s RealStats) uint64 { return s.FaultUnsupported }, nil},
		{"psn match", fault.Rule{Point: fault.WireRx, Action: fault.Drop, Match: fault.Match{PSNFrom: new(uint32(2)), PSNTo: new(uint32(3))}}, []int32{1, 4},
			func(s RealStats) uint64 { return s.FaultDrop }, nil},
		{"tx rules do not act on rx", fault.Rule{Point: fault.WireTx, Action: fault.Drop}, []int32{1, 2, 3, 4}, nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ft, _ := faultyWith(t, tc.rule)
			var out [][]byte
			for i := uint32(1); i <= 4; i++ {
				out = ft.Filter(roceFrameOp(false, 5, 4, i, 32), out)
			}
			var got []int32
			for _, f := range out {
				got = append(got, int32(bytesPSN(f)))
			}
			require.Equal(t, tc.want, got)
			if tc.stat != nil {
				require.Equal(t, uint64(1), min(tc.stat(ft.Stats()), 1))
			}
			if tc.check != nil {
				tc.check(t, out)
			}
		})
	}
}

// bytesPSN reads the PSN at the IPv4 BTH offset even if a corrupted header
// hides the frame from FrameEvent.
func bytesPSN(f []byte) uint32 {
	return uint32(f[EthHeaderLen+28+9])<<16 | uint32(f[EthHeaderLen+28+10])<<8 | uint32(f[EthHeaderLen+28+11])
}

func TestFaultyTransportAllocs(t *testing.T) {
	ft, _ := faultyWith(t,
		fault.Rule{Point: fault.WireTx, Action: fault.Drop, Nth: 1 << 40, Match: fault.Match{Opcode: new(uint8(4))}},
		fault.Rule{Point: fault.WireRx, Action: fault.Drop, Nth: 1 << 40},
		fault.Rule{Point: fault.WireTx, Action: fault.Delay, Every: 2, Delay: 1},
	)
	fr := ft.Unwrap().(*fakeReal)
	fr.count = true
	f := roceFrameOp(false, 5, 4, 1, 32)
	out := make([][]byte, 0, 2)
	now := sim.Time(0)
	step := func() {
		now += 10
		_ = ft.Poll(now)
		_ = ft.Send(f)
		out = ft.Filter(f, out[:0])
	}
	for range 4 {
		step() // warm the hold buffers
	}
	require.Zero(t, testing.AllocsPerRun(200, step))
	require.Greater(t, fr.n, 200)
}

// unsupportedOnly reports whether a rule asks the wire for an action it
// does not take (tear): such plans fail Validate.
func unsupportedOnly(rules []fault.Rule) bool {
	for _, r := range rules {
		if r.Action == fault.Tear {
			return true
		}
	}
	return false
}
