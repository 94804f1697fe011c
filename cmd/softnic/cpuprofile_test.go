package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCPUProfile: $SOFTNIC_CPUPROFILE writes a profile go tool pprof reads
// (a gzipped protobuf), and a path that cannot be created is an error
// before the command runs.
func TestCPUProfile(t *testing.T) {
	stop, err := startCPUProfile("")
	if err != nil || stop() != nil {
		t.Fatalf("no profile asked: %v", err)
	}
	path := filepath.Join(t.TempDir(), "cpu.prof")
	stop, err = startCPUProfile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"trace"}, &out, &errb); code != 0 {
		t.Fatalf("trace: exit %d: %s", code, errb.String())
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Fatalf("profile %d bytes (%v): want gzip", len(b), err)
	}
	if _, err := startCPUProfile(filepath.Join(t.TempDir(), "no", "such", "dir", "cpu.prof")); err == nil || !strings.Contains(err.Error(), cpuProfileEnv) {
		t.Fatalf("bad path: %v", err)
	}
}
