package trace

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// update rewrites golden files under testdata/: go test ./trace -update.
// Any golden-file test in this package should use golden() rather than
// define its own flag (a flag defined twice panics at init).
var update = flag.Bool("update", false, "rewrite golden files in testdata/")

// golden compares got with testdata/name, or rewrites the file with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(path, got, 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "missing golden file; run go test ./trace -update")
	require.Equal(t, string(want), string(got), "output differs from %s; if intended, run go test ./trace -update", path)
}
