package trace

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/sim"
)

// TestRecorderRing: a bounded recorder keeps the most recent events in
// recording order, counts what it overwrote, still shows every event to
// its sinks, and Reset empties it; a capacity <= 0 keeps everything.
func TestRecorderRing(t *testing.T) {
	names := func(evs []Event) []string {
		var n []string
		for _, e := range evs {
			n = append(n, e.Name)
		}
		return n
	}
	r := NewRecorderCap(3)
	var sunk []string
	r.Sinks = append(r.Sinks, func(e *Event) { sunk = append(sunk, e.Name) })
	r.Stage(0, "c", "a", 0, 1, 0, 0, 0, 0)
	r.Stage(0, "c", "b", 1, 2, 0, 0, 0, 0)
	require.Equal(t, []string{"a", "b"}, names(r.Events()))
	require.Zero(t, r.Dropped())
	r.StagePSN(0, "c", "c", 2, 3, 0, 0, 0, 0, 7)
	r.Stage(0, "c", "d", 3, 4, 0, 0, 0, 0)
	r.Warnf(0, sim.Time(5), "c", "e", "warning %d", 1)
	require.Equal(t, []string{"c", "d", "e"}, names(r.Events()), "the newest three, oldest first")
	require.Equal(t, uint64(2), r.Dropped())
	require.Equal(t, []string{"a", "b", "c", "d", "e"}, sunk, "sinks see every event")
	ev := r.Events()
	require.Equal(t, int32(7), ev[0].PSN)
	require.Equal(t, NoPSN, ev[1].PSN, "Stage records no PSN")
	require.Equal(t, NoPSN, ev[2].PSN)
	require.Equal(t, "warning 1", ev[2].Detail)
	require.Len(t, r.Warnings(), 1)

	r.Reset()
	require.Empty(t, r.Events())
	require.Zero(t, r.Dropped())
	r.Stage(0, "c", "f", 6, 7, 0, 0, 0, 0)
	require.Equal(t, []string{"f"}, names(r.Events()))

	u := NewRecorderCap(0)
	for i := 0; i < DefaultCapacity+10; i++ {
		u.Stage(0, "c", "x", 0, 0, 0, 0, 0, 0)
	}
	require.Len(t, u.Events(), DefaultCapacity+10)
	require.Zero(t, u.Dropped())

	var none *Recorder
	none.Stage(0, "c", "x", 0, 0, 0, 0, 0, 0)
	require.Nil(t, none.Events())
	require.Zero(t, none.Dropped())
}

// TestRecorderSetCapacity: a recorder resized keeps its events in order,
// an unbounded one keeps every event after it, and shrinking below what it
// holds drops the oldest and counts them.
func TestRecorderSetCapacity(t *testing.T) {
	names := func(evs []Event) (n []string) {
		for _, e := range evs {
			n = append(n, e.Name)
		}
		return n
	}
	record := func(r *Recorder, ns ...string) {
		for _, n := range ns {
			r.Stage(0, "c", n, 0, 0, 0, 0, 0, 0)
		}
	}
	for _, tc := range []struct {
		name    string
		cap     int      // the ring before
		before  []string // recorded before SetCapacity
		set     int
		after   []string // recorded after it
		want    []string
		dropped uint64
	}{
		{"unbounded after a wrapped ring", 2, []string{"a", "b", "c"}, 0, []string{"d", "e", "f"}, []string{"b", "c", "d", "e", "f"}, 1},
		{"grown before the walk", 2, nil, 5, []string{"a", "b", "c", "d"}, []string{"a", "b", "c", "d"}, 0},
		{"shrunk below what it holds", 0, []string{"a", "b", "c", "d"}, 2, []string{"e"}, []string{"d", "e"}, 3},
		{"negative is unbounded", 1, []string{"a"}, -1, []string{"b", "c"}, []string{"a", "b", "c"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewRecorderCap(tc.cap)
			record(r, tc.before...)
			r.SetCapacity(tc.set)
			require.Equal(t, max(tc.set, 0), r.Capacity())
			record(r, tc.after...)
			require.Equal(t, tc.want, names(r.Events()))
			require.Equal(t, tc.dropped, r.Dropped())
		})
	}
	var none *Recorder
	none.SetCapacity(3)
	require.Zero(t, none.Capacity())
	require.Equal(t, DefaultCapacity, NewRecorder().Capacity())
}

var (
	ctrTestA = NewCounter("trace_test_a")
	ctrTestB = NewCounter("trace_test_b")
)

// TestCounters: ids are stable per name, a counter added to (even 0) is
// listed and one never added to is not, and lookups by name agree with
// lookups by id.
func TestCounters(t *testing.T) {
	require.Equal(t, ctrTestA, NewCounter("trace_test_a"), "the same name, the same id")
	require.NotEqual(t, ctrTestA, ctrTestB)
	id, ok := CounterByName("trace_test_b")
	require.True(t, ok)
	require.Equal(t, ctrTestB, id)
	_, ok = CounterByName("trace_test_unregistered")
	require.False(t, ok)
	require.Equal(t, "trace_test_a", ctrTestA.String())

	var c Counters
	require.Empty(t, c.Names())
	require.Zero(t, c.Value(ctrTestA))
	c.Inc(ctrTestA)
	c.Add(ctrTestA, 2)
	c.Add(ctrTestB, 0)
	require.Equal(t, uint64(3), c.Value(ctrTestA))
	require.Equal(t, uint64(3), c.Get("trace_test_a"))
	require.Zero(t, c.Get("trace_test_unregistered"))
	require.Equal(t, []string{"trace_test_a", "trace_test_b"}, c.Names())
	require.Equal(t, map[string]uint64{"trace_test_a": 3, "trace_test_b": 0}, c.Snapshot())
}
