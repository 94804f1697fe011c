package sim

import (
	"math"
	"testing"
)

// TestAddSat: the sums the fault hooks form (now + delay_ps, origin +
// at_ps + for_ps) saturate instead of wrapping to a time before now.
func TestAddSat(t *testing.T) {
	tests := []struct {
		name string
		t    Time
		d    Duration
		want Time
	}{
		{"small", 1000, 5, 1005},
		{"zero", 7, 0, 7},
		{"negative", 7, -5, 2},
		{"to the last instant", Never - 10, 10, Never},
		{"one past the end", Never - 10, 11, Never},
		{"delay near 2^63", 1_678_064, 9223372036854775000, Never},
		{"both huge", Never / 2, Duration(Never/2 + 2), Never},
		{"negative overflow", math.MinInt64 + 3, -4, math.MinInt64},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.t.AddSat(tc.d); got != tc.want {
				t.Errorf("%d.AddSat(%d) = %d, want %d", int64(tc.t), int64(tc.d), int64(got), int64(tc.want))
			}
		})
	}
}
