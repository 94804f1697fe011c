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

// TestPerfSendBWScalesWithQPs: the QPs of send_bw -q N are independent
// (their own SQ, RQ and CQs), so N QPs of small SENDs carry about N times
// the messages of one until something shared saturates. A payload write
// of one QP used to wait behind the writes another QP's queued messages
// had booked microseconds ahead (posted writes ordered by call, not by
// virtual time), and -q 4 ran at the rate of -q 1 (1.94 against 1.84
// Mpps at 64 B on cx5-gen3x16).
func TestPerfSendBWScalesWithQPs(t *testing.T) {
	for _, c := range []struct {
		name string
		qps  string
		min  float64 // Mpps of -q N over Mpps of -q 1
	}{
		{"2 QPs", "2", 1.8},
		{"4 QPs", "4", 3.0},
	} {
		t.Run(c.name, func(t *testing.T) {
			rate := func(q string) float64 {
				out, errs, code := runPerfCmd(t, "send_bw", "-s", "64", "-n", "300", "-q", q, "--no-progress")
				if code != 0 {
					t.Fatalf("-q %s: exit %d: %s", q, code, errs)
				}
				rows := tableRows(t, out)
				v, err := strconv.ParseFloat(rows[0][len(rows[0])-1], 64)
				if err != nil {
					t.Fatalf("-q %s: row %q", q, rows[0])
				}
				return v
			}
			one, n := rate("1"), rate(c.qps)
			if n < c.min*one {
				t.Errorf("send_bw -s 64: %.3f Mpps with %s, %.3f with 1: want at least %.1f×", n, c.name, one, c.min)
			}
		})
	}
}
