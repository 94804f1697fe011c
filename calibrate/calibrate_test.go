package calibrate

import (
	"bytes"
	"flag"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite docs/calibration.md")

// TestAnchors holds every row to its tolerance: model identities within
// 0.5%, measurements within 10%, bands within 10% of their edges.
func TestAnchors(t *testing.T) {
	ts, err := All()
	require.NoError(t, err)
	rows := 0
	for _, tb := range ts {
		for _, r := range tb.Rows {
			rows++
			require.True(t, r.OK(), "%s / %s / %s: model %.4g %s against %.4g: %+.2f%% (tolerance %.1f%%)",
				tb.Profile, tb.Anchor, r.Quantity, r.Model, r.Unit, r.Ref, 100*r.Err(), 100*r.Tol())
		}
	}
	require.Greater(t, rows, 60, "every profile has its anchors")
}

func TestRowErr(t *testing.T) {
	for _, c := range []struct {
		name string
		r    Row
		err  float64
		ok   bool
	}{
		{"identity on the dot", Row{Ref: 100, Model: 100.4, Kind: Identity}, 0.004, true},
		{"identity off", Row{Ref: 100, Model: 101, Kind: Identity}, 0.01, false},
		{"measurement within", Row{Ref: 100, Model: 91, Kind: Measurement}, -0.09, true},
		{"measurement off", Row{Ref: 100, Model: 111, Kind: Measurement}, 0.11, false},
		{"inside the band", Row{Ref: 0.8, RefHigh: 1.0, Model: 0.9, Kind: Band}, 0, true},
		{"above the band, within 10%", Row{Ref: 0.8, RefHigh: 1.0, Model: 1.05, Kind: Band}, 0.05, true},
		{"below the band, outside", Row{Ref: 0.8, RefHigh: 1.0, Model: 0.7, Kind: Band}, -0.125, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			require.InDelta(t, c.err, c.r.Err(), 1e-9)
			require.Equal(t, c.ok, c.r.OK())
		})
	}
}

// TestDocIsGenerated: docs/calibration.md is what softnic calibrate
// writes (virtual time: the same on every machine). Regenerate with
// go run ./cmd/softnic calibrate -o docs/calibration.md (or -update).
func TestDocIsGenerated(t *testing.T) {
	ts, err := All()
	require.NoError(t, err)
	var b bytes.Buffer
	require.NoError(t, Markdown(&b, ts))
	const path = "../docs/calibration.md"
	if *update {
		require.NoError(t, os.WriteFile(path, b.Bytes(), 0o644))
	}
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, b.String(), string(got), "docs/calibration.md is stale: go run ./cmd/softnic calibrate -o docs/calibration.md")
}
