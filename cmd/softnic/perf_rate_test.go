package main

import (
	"strconv"
	"strings"
	"testing"
)

// perfGbits runs a bandwidth test with -o bandwidth --report_gbits and
// returns BW average in Gb/s.
func perfGbits(t *testing.T, args ...string) float64 {
	t.Helper()
	out, errs, code := runPerfCmd(t, append(args, "-o", "bandwidth", "--report_gbits", "--no-progress")...)
	if code != 0 {
		t.Fatalf("%q: exit %d: %s", args, code, errs)
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(out), 64)
	if err != nil {
		t.Fatalf("%q: -o bandwidth printed %q", args, out)
	}
	return v
}

// TestPerfReadBWKeepsUpWithTheWire: a large RDMA READ is bound by the
// port, as a large WRITE is (both move the same frames; the responder's
// PCIe read goodput, timing.md §1.3, is above every built-in port rate).
// The READ responder must keep enough response frames in flight to cover
// its DMA read latency at line rate on every profile, the 400 GbE one
// included.
func TestPerfReadBWKeepsUpWithTheWire(t *testing.T) {
	for _, p := range []string{"cx5-gen3x16", "cx6-gen4x16", "cx7-gen5x16", "pciebench-gen3x8"} {
		t.Run(p, func(t *testing.T) {
			args := []string{"-s", "262144", "-n", "40", "--profile", p}
			w := perfGbits(t, append([]string{"write_bw"}, args...)...)
			r := perfGbits(t, append([]string{"read_bw"}, args...)...)
			if r < 0.97*w {
				t.Errorf("read_bw %.2f Gb/s, write_bw %.2f Gb/s: READ below 97%% of WRITE", r, w)
			}
		})
	}
}
