package sim

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestEngineOrderAndTies(t *testing.T) {
	e := NewEngine()
	var got []string
	rec := func(s string) Handler { return HandlerFunc(func(Time) { got = append(got, s) }) }
	e.At(30, rec("c"))
	e.At(10, rec("a1"))
	e.At(10, rec("a2"))
	e.At(20, rec("b"))
	e.RunUntil(25)
	require.Equal(t, []string{"a1", "a2", "b"}, got)
	require.Equal(t, Time(25), e.Now())
	e.At(0, rec("past")) // clamps to now
	require.Equal(t, Time(25), e.Next())
	require.Equal(t, 2, e.Run(0))
	require.Equal(t, []string{"a1", "a2", "b", "past", "c"}, got)
	require.False(t, e.Step())
	require.Equal(t, Never, e.Next())
}

func TestUnits(t *testing.T) {
	require.Equal(t, Duration(1000), Nanosecond)
	require.Equal(t, Duration(400), (2.5 * GHz).Period())
	require.Equal(t, Duration(3200), (2.5 * GHz).Cycles(8))
	// 64 bytes at 100 Gb/s = 5.12 ns.
	require.Equal(t, Duration(5120), (100 * Gbps).Serialize(64))
	require.Equal(t, NS(1.5), Duration(1500))
	require.Equal(t, "1.500ns", Time(1500).String())
}

func BenchmarkEngineStep(b *testing.B) {
	e := NewEngine()
	h := nopHandler{}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		e.After(10, h)
		e.Step()
	}
}

type nopHandler struct{}

func (nopHandler) Fire(Time) {}
