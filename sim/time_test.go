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

// TestSerializerMatches checks the precomputed serialization against
// BitRate.Serialize, for the profiles' rates, rates that do not divide
// 8e12, and sizes up to and past the multiplication's bound.
func TestSerializerMatches(t *testing.T) {
	rates := []BitRate{0, -1, 1, 3, 7e9, 10 * Gbps, 25 * Gbps, 40 * Gbps, 100 * Gbps, 200 * Gbps, 400 * Gbps,
		126.03e9, 113.7e9, 8e12, 16e12, 1.5, 64e9, 128e9, 256e9, 512e9, 31.5e9}
	sizes := []int{-5, 0, 1, 2, 7, 63, 64, 65, 84, 1500, 4096, 4178, 65536, 1 << 20, 1<<25 - 1, 1 << 25, 1<<25 + 1, 1 << 30}
	for _, r := range rates {
		s := NewSerializer(r)
		for _, n := range sizes {
			if got, want := s.Serialize(n), r.Serialize(n); got != want {
				t.Errorf("rate %v, %d bytes: Serializer %v, BitRate %v", r, n, got, want)
			}
		}
		for n := 1; n < 10000; n += 13 {
			if got, want := s.Serialize(n), r.Serialize(n); got != want {
				t.Fatalf("rate %v, %d bytes: Serializer %v, BitRate %v", r, n, got, want)
			}
		}
	}
	if NewSerializer(100*Gbps).psPerByte != 80 {
		t.Fatal("100 Gb/s: want the 80 ps a byte multiplication")
	}
}
