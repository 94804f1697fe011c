package wire

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/fault"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/trace"
)

// sendN sends n 60-byte frames tagged 1..n from A, 100 ns apart, and runs
// the engine dry.
func sendN(e *env, n int) {
	for i := 1; i <= n; i++ {
		e.link.A().Send(sim.Time(i)*100_000, frame(60, byte(i)))
	}
	e.eng.Run(0)
}

// arrival is when frame i (1-based) of sendN arrives without faults.
func arrival(i int) sim.Time { return sim.Time(i)*100_000 + 6720 + 10_000 }

func tags(r *rxLog) []byte {
	var ts []byte
	for _, g := range r.got {
		ts = append(ts, g.frame[EthHeaderLen])
	}
	return ts
}

func warnNames(rec *trace.Recorder) []string {
	var n []string
	for _, w := range rec.Warnings() {
		n = append(n, w.Name)
	}
	return n
}

func TestFaults(t *testing.T) {
	tests := []struct {
		name      string
		rule      fault.Rule
		extra     []fault.Rule
		wantTags  []byte
		wantTimes []sim.Time
		ctr       string
	}{
		{
			name:      "tx drop",
			rule:      fault.Rule{Point: fault.WireTx, Action: fault.Drop, Nth: 2},
			wantTags:  []byte{1, 3},
			wantTimes: []sim.Time{arrival(1), arrival(3)},
			ctr:       CtrFaultDrop.String(),
		},
		{
			name:      "tx duplicate",
			rule:      fault.Rule{Point: fault.WireTx, Action: fault.Duplicate, Nth: 2},
			wantTags:  []byte{1, 2, 2, 3},
			wantTimes: []sim.Time{arrival(1), arrival(2), arrival(2), arrival(3)},
			ctr:       CtrFaultDuplicate.String(),
		},
		{
			name:      "tx delay",
			rule:      fault.Rule{Point: fault.WireTx, Action: fault.Delay, Nth: 1, Delay: 150 * sim.Nanosecond},
			wantTags:  []byte{2, 1, 3},
			wantTimes: []sim.Time{arrival(2), arrival(1) + 150_000, arrival(3)},
			ctr:       CtrFaultDelay.String(),
		},
		{
			name:      "tx reorder",
			rule:      fault.Rule{Point: fault.WireTx, Action: fault.Reorder, Nth: 1},
			wantTags:  []byte{2, 1, 3},
			wantTimes: []sim.Time{arrival(2), arrival(2), arrival(3)},
			ctr:       CtrFaultReorder.String(),
		},
		{
			name:      "tx reorder twice in a row",
			rule:      fault.Rule{Point: fault.WireTx, Action: fault.Reorder, Count: 2},
			wantTags:  []byte{1, 3, 2},
			wantTimes: []sim.Time{arrival(2), arrival(3), arrival(3)},
			ctr:       CtrFaultReorder.String(),
		},
		{
			name:      "tx reorder of the last frame times out",
			rule:      fault.Rule{Point: fault.WireTx, Action: fault.Reorder, Nth: 3},
			wantTags:  []byte{1, 2, 3},
			wantTimes: []sim.Time{arrival(1), arrival(2), arrival(3).Add(DefaultReorderWindow)},
			ctr:       CtrFaultReorder.String(),
		},
		{
			name:      "tx reorder released by a dropped frame",
			rule:      fault.Rule{Point: fault.WireTx, Action: fault.Reorder, Nth: 1},
			extra:     []fault.Rule{{Point: fault.WireTx, Action: fault.Drop, Nth: 2}},
			wantTags:  []byte{1, 3},
			wantTimes: []sim.Time{arrival(2), arrival(3)},
			ctr:       CtrFaultReorder.String(),
		},
		{
			name:      "tx tear is not a wire fault",
			rule:      fault.Rule{Point: fault.WireTx, Action: fault.Tear, Nth: 1},
			wantTags:  []byte{1, 2, 3},
			wantTimes: []sim.Time{arrival(1), arrival(2), arrival(3)},
			ctr:       CtrFaultUnsupported.String(),
		},
		{
			name:      "rx drop",
			rule:      fault.Rule{Point: fault.WireRx, Action: fault.Drop, Every: 2},
			wantTags:  []byte{1, 3},
			wantTimes: []sim.Time{arrival(1), arrival(3)},
			ctr:       CtrFaultDrop.String(),
		},
		{
			name:      "rx duplicate",
			rule:      fault.Rule{Point: fault.WireRx, Action: fault.Duplicate, Nth: 3},
			wantTags:  []byte{1, 2, 3, 3},
			wantTimes: []sim.Time{arrival(1), arrival(2), arrival(3), arrival(3)},
			ctr:       CtrFaultDuplicate.String(),
		},
		{
			name:      "rx delay",
			rule:      fault.Rule{Point: fault.WireRx, Action: fault.Delay, Nth: 1, Delay: 250 * sim.Nanosecond},
			wantTags:  []byte{2, 3, 1},
			wantTimes: []sim.Time{arrival(2), arrival(3), arrival(1) + 250_000},
			ctr:       CtrFaultDelay.String(),
		},
		{
			name:      "rx reorder is not supported",
			rule:      fault.Rule{Point: fault.WireRx, Action: fault.Reorder, Nth: 1},
			wantTags:  []byte{1, 2, 3},
			wantTimes: []sim.Time{arrival(1), arrival(2), arrival(3)},
			ctr:       CtrFaultUnsupported.String(),
		},
		{
			name:      "rule for the other node does not fire",
			rule:      fault.Rule{Point: fault.WireTx, Action: fault.Drop, Match: fault.Match{Node: new(1)}},
			wantTags:  []byte{1, 2, 3},
			wantTimes: []sim.Time{arrival(1), arrival(2), arrival(3)},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, Spec{}, append([]fault.Rule{tc.rule}, tc.extra...)...)
			sendN(e, 3)
			require.Equal(t, tc.wantTags, tags(&e.b))
			require.Equal(t, tc.wantTimes, e.b.times())
			if tc.ctr != "" {
				require.NotZero(t, e.ctr.Get(tc.ctr))
				require.Contains(t, warnNames(e.rec), tc.ctr)
			} else {
				require.Empty(t, e.rec.Warnings())
			}
			// Every pooled packet came back (reference counts balance).
			require.Equal(t, e.link.npkts, len(e.link.free))
			require.NotZero(t, e.link.npkts)
			require.Equal(t, uint64(3), e.ctr.Value(CtrTxFrames))
		})
	}
}

func TestCorrupt(t *testing.T) {
	for _, pt := range []fault.Point{fault.WireTx, fault.WireRx} {
		for _, b := range []int{-1, 20, 3, 1000} {
			t.Run(fmt.Sprintf("%s byte %d", pt, b), func(t *testing.T) {
				e := newEnv(t, Spec{}, fault.Rule{Point: pt, Action: fault.Corrupt, Nth: 1, Byte: b})
				var tapped []byte
				e.link.AddTap(func(_ sim.Time, f []byte) {
					if tapped == nil {
						tapped = append([]byte{}, f...)
					}
				})
				orig := roceFrame(false, 9, 100)
				e.link.A().Send(0, orig)
				e.link.A().Send(0, orig)
				e.eng.Run(0)
				require.Len(t, e.b.got, 2)
				require.Equal(t, orig, tapped, "taps see the frame as sent")
				require.Equal(t, orig, e.b.got[1].frame, "only the first frame is hit")
				got := e.b.got[0].frame
				var diff []int
				for i := range got {
					if got[i] != orig[i] {
						diff = append(diff, i)
					}
				}
				require.Len(t, diff, 1)
				switch {
				case b == 20:
					require.Equal(t, []int{20}, diff)
				default: // random, or outside [14, len): chosen past the Ethernet header
					require.GreaterOrEqual(t, diff[0], EthHeaderLen)
				}
				require.Equal(t, uint64(1), e.ctr.Value(CtrFaultCorrupt))
			})
		}
	}
}

func TestCorruptHeaderOnlyFrame(t *testing.T) {
	e := newEnv(t, Spec{}, fault.Rule{Point: fault.WireTx, Action: fault.Corrupt, Byte: -1})
	e.link.A().Send(0, frame(EthHeaderLen, 0))
	e.eng.Run(0)
	require.Equal(t, frame(EthHeaderLen, 0), e.b.got[0].frame)
}

// run is a lossy scenario used to check determinism: both directions,
// several probabilistic faults.
func run(t *testing.T, seed uint64) ([]rx, []rx, []trace.Event, map[string]uint64) {
	eng := sim.NewEngine()
	rec := trace.NewRecorder()
	ctr := &trace.Counters{}
	inj := fault.NewInjector(&fault.Plan{Seed: seed, Rules: []fault.Rule{
		{Point: fault.WireTx, Action: fault.Drop, Prob: 0.05},
		{Point: fault.WireTx, Action: fault.Corrupt, Prob: 0.05, Byte: -1},
		{Point: fault.WireTx, Action: fault.Duplicate, Prob: 0.05},
		{Point: fault.WireTx, Action: fault.Reorder, Prob: 0.05},
		{Point: fault.WireTx, Action: fault.Delay, Prob: 0.05, Delay: 3 * sim.Microsecond},
		{Point: fault.WireRx, Action: fault.Drop, Prob: 0.02},
	}})
	l := NewLink(eng, Spec{}, rec, ctr, inj)
	var a, b rxLog
	l.A().Attach(0, &a)
	l.B().Attach(1, &b)
	for i := range 400 {
		t := sim.Time(i) * 50_000
		l.A().Send(t, roceFrame(false, uint32(i%7), i%300))
		if i%3 == 0 {
			l.B().Send(t, roceFrame(true, uint32(i%5), 64))
		}
	}
	eng.Run(0)
	require.Equal(t, l.npkts, len(l.free), "packets leaked")
	return a.got, b.got, rec.Events(), ctr.Snapshot()
}

func TestDeterminism(t *testing.T) {
	a1, b1, ev1, c1 := run(t, 11)
	a2, b2, ev2, c2 := run(t, 11)
	require.Equal(t, a1, a2)
	require.Equal(t, b1, b2)
	require.Equal(t, ev1, ev2)
	require.Equal(t, c1, c2)
	// The plan really did something.
	for _, c := range []string{CtrFaultDrop.String(), CtrFaultCorrupt.String(), CtrFaultDuplicate.String(), CtrFaultReorder.String(), CtrFaultDelay.String()} {
		require.NotZero(t, c1[c], c)
	}
	_, b3, _, _ := run(t, 12)
	require.NotEqual(t, b1, b3)
}
