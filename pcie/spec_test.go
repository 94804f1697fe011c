package pcie

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/sim"
)

// TestCheckValues reproduces timing.md §1.3 / §7 check 1 (pcie-bench model
// outputs, 64-bit addressing, MPS 256, MRRS 512, no ECRC) within ±0.1 Gb/s
// (± 1 Mtps for transaction rates). docs/calibration.md lists the same rows.
func TestCheckValues(t *testing.T) {
	type q func(Spec) float64
	raw := func(s Spec) float64 { return s.RawGbps() }
	tlp := func(s Spec) float64 { return s.TLPGbps() }
	wr := func(n int) q { return func(s Spec) float64 { return s.WriteGoodput(n) } }
	rd := func(n int) q { return func(s Spec) float64 { return s.ReadGoodput(n) } }
	wtps := func(n int) q { return func(s Spec) float64 { return s.WriteTPS(n) / 1e6 } }
	rtps := func(n int) q { return func(s Spec) float64 { return s.ReadTPS(n) / 1e6 } }
	rw := func(n int) q { return func(s Spec) float64 { return s.ReadWriteGoodput(n) } }
	tests := []struct {
		name string
		spec Spec
		f    q
		want float64
		tol  float64
	}{
		{"gen3x8 R_raw", Gen3x8(), raw, 63.02, 0.01},
		{"gen3x8 R_tlp", Gen3x8(), tlp, 57.88, 0.01},
		{"gen3x8 64B write", Gen3x8(), wr(64), 42.1, 0.1},
		{"gen3x8 64B write Mtps", Gen3x8(), wtps(64), 82, 1},
		{"gen3x8 64B read", Gen3x8(), rd(64), 44.1, 0.1},
		{"gen3x8 64B read Mtps", Gen3x8(), rtps(64), 86, 1},
		{"gen3x8 256B write", Gen3x8(), wr(256), 52.9, 0.1},
		{"gen3x8 256B write Mtps", Gen3x8(), wtps(256), 25.8, 0.1},
		{"gen3x8 256B read", Gen3x8(), rd(256), 53.7, 0.1},
		{"gen3x8 512B write", Gen3x8(), wr(512), 52.9, 0.1},
		{"gen3x8 512B read", Gen3x8(), rd(512), 53.7, 0.1},
		{"gen3x8 64B read+write", Gen3x8(), rw(64), 33.1, 0.1},
		{"gen3x16 R_raw", Gen3x16(), raw, 126.0, 0.1},
		{"gen3x16 R_tlp", Gen3x16(), tlp, 113.7, 0.1},
		{"gen3x16 64B write", Gen3x16(), wr(64), 82.7, 0.1},
		{"gen3x16 64B write Mtps", Gen3x16(), wtps(64), 162, 1},
		{"gen3x16 64B read", Gen3x16(), rd(64), 86.6, 0.1},
		{"gen3x16 256B write", Gen3x16(), wr(256), 104.0, 0.1},
		{"gen3x16 256B read", Gen3x16(), rd(256), 105.5, 0.1},
		{"gen4x16 R_raw", Gen4x16(), raw, 252.1, 0.1},
		{"gen4x16 R_tlp", Gen4x16(), tlp, 227.4, 0.1},
		{"gen4x16 64B write", Gen4x16(), wr(64), 165.4, 0.1},
		{"gen4x16 64B write Mtps", Gen4x16(), wtps(64), 323, 1},
		{"gen4x16 64B read", Gen4x16(), rd(64), 173.3, 0.1},
		{"gen4x16 256B write", Gen4x16(), wr(256), 207.9, 0.1},
		{"gen4x16 256B read", Gen4x16(), rd(256), 210.9, 0.1},
		{"gen5x16 R_raw", Gen5x16(), raw, 504.1, 0.1},
		{"gen5x16 R_tlp", Gen5x16(), tlp, 454.8, 0.1},
		{"gen5x16 64B write", Gen5x16(), wr(64), 330.8, 0.1},
		{"gen5x16 64B write Mtps", Gen5x16(), wtps(64), 646, 1},
		{"gen5x16 64B read", Gen5x16(), rd(64), 346.5, 0.1},
		{"gen5x16 256B write", Gen5x16(), wr(256), 415.8, 0.1},
		{"gen5x16 256B read", Gen5x16(), rd(256), 421.8, 0.1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.f(tc.spec)
			t.Logf("model %.3f reference %.3f", got, tc.want)
			require.InDelta(t, tc.want, got, tc.tol)
		})
	}
}

// TestTables spot-checks the DLLP tables against pcie-bench's transcription
// of the PCIe 5.0 spec tables, including the cells where Ack and FC differ.
func TestTables(t *testing.T) {
	tests := []struct {
		name     string
		gen      int
		lanes    int
		mps      int
		ack, fcg int
	}{
		{"gen3 x8 mps256", 3, 8, 256, 203, 203},
		{"gen3 x16 mps256", 3, 16, 256, 168, 168},
		{"gen3 x1 mps128", 3, 1, 128, 333, 333},
		{"gen5 x32 mps4096", 5, 32, 4096, 372, 372},
		{"gen1 x32 mps2048", 1, 32, 2048, 148, 248},
		{"gen2 x32 mps4096", 2, 32, 4096, 237, 327},
		{"gen2 x8 mps512", 2, 8, 512, 137, 137},
		{"gen6 x16 mps256 (copied from gen5)", 6, 16, 256, 168, 168},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := baseSpec("x", tc.gen, tc.lanes).WithMPS(tc.mps)
			require.NoError(t, s.Validate())
			require.Equal(t, tc.ack, s.AckLimitBytes())
			require.Equal(t, tc.fcg, s.FCGuideBytes())
		})
	}
	s := Gen3x8()
	s.AckLimit, s.FCGuide = 100, 50
	require.Equal(t, 100, s.AckLimitBytes())
	require.Equal(t, 50, s.FCGuideBytes())
	require.InDelta(t, 63.0154*(1-0.08-0.16-4.0/1538), s.TLPGbps(), 1e-3)
}

// TestKaliaIdentities reproduces timing.md §3.1 / §7 check 2 with Kalia's
// header constants (request 26 B, completion 22 B), both from the formulas
// and from the Link's own byte accounting.
func TestKaliaIdentities(t *testing.T) {
	k := Gen3x16().WithHeaders(26, 26, 22).WithRCB(128, true)
	require.InDelta(t, 175e6, k.KaliaMMIOLineRate(64), 0.1e6)
	require.InDelta(t, 13443e6, k.KaliaDMAReadRate(128), 1e6)
	require.InDelta(t, 350e6, Gen4x16().WithHeaders(26, 26, 22).KaliaMMIOLineRate(64), 0.2e6)

	// Ten 65 B WQEs by MMIO: two 64 B write-combined lines each.
	l := NewLink(k)
	for i := 0; i < 10; i++ {
		l.HostWrite(0, 0x1800, 64)
		l.HostWrite(0, 0x1840, 64)
	}
	require.Equal(t, 1800, l.Totals().Down.WireBytes)
	require.Equal(t, 20, l.Totals().HostMWr.MWr)

	// The same by one 8 B doorbell plus one DMA read of ten 128 B slots.
	l = NewLink(k)
	l.HostWrite(0, 0x1800, 8)
	_, s := l.DeviceRead(0, 0x100000, 10*128)
	require.Equal(t, 10, s.CplD)
	require.Equal(t, 1534, l.Totals().Down.WireBytes)
	// The read requests travel upstream (MRRS 512: three of them) and are
	// not part of Kalia's host → device count.
	require.Equal(t, 3, l.Totals().Up.MRd)
}

func TestValidate(t *testing.T) {
	good := Gen3x8()
	require.NoError(t, good.Validate())
	tests := []struct {
		name string
		mut  func(*Spec)
	}{
		{"gen 0", func(s *Spec) { s.Gen = 0 }},
		{"gen 7", func(s *Spec) { s.Gen = 7 }},
		{"lanes 3", func(s *Spec) { s.Lanes = 3 }},
		{"mps 100", func(s *Spec) { s.MPS = 100 }},
		{"mps 0", func(s *Spec) { s.MPS = 0 }},
		{"mps 8192", func(s *Spec) { s.MPS = 8192 }},
		{"mrrs 64", func(s *Spec) { s.MRRS = 64 }},
		{"rcb 32", func(s *Spec) { s.RCB = 32 }},
		{"rcb above mps", func(s *Spec) { s.MPS, s.RCB = 128, 256 }},
		{"zero header", func(s *Spec) { s.HdrCplD = 0 }},
		{"header past 64 B", func(s *Spec) { s.HdrMWr = MaxTLPOverhead + 1 }},
		{"header 2^40 B", func(s *Spec) { s.HdrMRd = 1 << 40 }},
		{"negative ack", func(s *Spec) { s.AckLimit = -1 }},
		{"negative latency", func(s *Spec) { s.FlightLatency = -1 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := good
			tc.mut(&s)
			require.ErrorIs(t, s.Validate(), ErrSpec)
			require.Panics(t, func() { NewLink(s) })
			require.NotPanics(t, func() { s.TLPGbps(); s.ReadGoodput(64); s.WriteGoodput(64) })
		})
	}
}

func TestSpecJSONAndWith(t *testing.T) {
	s := Gen4x16().WithMPS(512).WithMRRS(1024).WithRCB(128, true).
		WithLatency(50*sim.Nanosecond, 200*sim.Nanosecond, sim.Nanosecond)
	b, err := json.Marshal(s)
	require.NoError(t, err)
	require.Contains(t, string(b), `"flight_latency_ps":50000`)
	var back Spec
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, s, back)
	// With* return copies: the profile itself is untouched.
	require.Equal(t, 256, Gen4x16().MPS)
}
