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

// TestPerfSendBWKeepsUpWithTheWire: one QP's SENDs of 4 KiB run at the
// rate of its WRITEs on every profile: the receive WQEs are read ahead
// far enough that a message never waits for its WQE's DMA read. With one
// WQE ahead, send_bw -s 4096 gave 7.2 of 11.7 GB/s on cx5-gen3x16.
func TestPerfSendBWKeepsUpWithTheWire(t *testing.T) {
	for _, p := range []string{"cx5-gen3x16", "cx6-gen4x16", "cx7-gen5x16"} {
		t.Run(p, func(t *testing.T) {
			args := []string{"-s", "4096", "-n", "2000", "--profile", p}
			w := perfGbits(t, append([]string{"write_bw"}, args...)...)
			s := perfGbits(t, append([]string{"send_bw"}, args...)...)
			if s < 0.95*w {
				t.Errorf("send_bw %.2f Gb/s, write_bw %.2f Gb/s: SEND below 95%% of WRITE", s, w)
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
// Mpps at 64 B on cx5-gen3x16). With the receive WQEs read sixty-four
// ahead one QP carries 15.9 Mpps (-n 300; 13.4 with sixteen), 2 QPs 24.1
// (1.52×) and 4 QPs 25.2 (1.58×), where the one posting thread and the
// receiving side's one poller are shared.
func TestPerfSendBWScalesWithQPs(t *testing.T) {
	for _, c := range []struct {
		name string
		qps  string
		min  float64 // Mpps of -q N over Mpps of -q 1
	}{
		{"2 QPs", "2", 1.4},
		{"4 QPs", "4", 1.5},
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

// TestPerfUnreliableBWUnderLineRate: no bandwidth test may carry more
// than the port: UC and UD WQEs complete when their last packet has left
// the port, not when the packetizer has built it (then the send queue ran
// ahead of the wire and UC write_bw reported the PCIe read rate: 106.0
// Gb/s on cx5's 100 GbE, 422.1 on cx7's 400 GbE).
func TestPerfUnreliableBWUnderLineRate(t *testing.T) {
	for _, c := range []struct {
		name string
		port float64 // Gb/s
		args []string
	}{
		{"UC write_bw cx5", 100, []string{"write_bw", "-c", "UC", "-s", "65536", "-n", "300", "--profile", "cx5-gen3x16"}},
		{"UC write_bw cx7", 400, []string{"write_bw", "-c", "UC", "-s", "65536", "-n", "300", "--profile", "cx7-gen5x16"}},
		{"UD send_bw cx5", 100, []string{"send_bw", "-c", "UD", "-s", "4096", "-n", "300", "--profile", "cx5-gen3x16"}},
		{"RC write_bw cx5", 100, []string{"write_bw", "-s", "65536", "-n", "300", "--profile", "cx5-gen3x16"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			// Payload over payload plus each frame's least overhead
			// (Ethernet 14 + FCS 4 + preamble and gap 20, IPv4 20, UDP 8,
			// BTH 12, ICRC 4) at MTU 4096.
			limit := c.port * 4096 / (4096 + 82)
			if bw := perfGbits(t, c.args...); bw > limit {
				t.Errorf("%.2f Gb/s, over the %.2f Gb/s a %.0f GbE port carries", bw, limit, c.port)
			}
		})
	}
}

// TestPerfOuts: perftest's -o is --outs, the READs and atomics a QP keeps
// outstanding (max_rd_atomic); at most the device's max_qp_rd_atom, more
// is cut to it with perftest's note. A small READ's rate is bound by it:
// about one per round trip per outstanding READ. -o with a word is still
// --output.
func TestPerfOuts(t *testing.T) {
	rate := func(t *testing.T, args ...string) (float64, string, string) {
		t.Helper()
		out, errs, code := runPerfCmd(t, append([]string{"read_bw", "-s", "2", "-n", "500", "--no-progress"}, args...)...)
		if code != 0 {
			t.Fatalf("%q: exit %d: %s", args, code, errs)
		}
		rows := tableRows(t, out)
		v, err := strconv.ParseFloat(rows[0][len(rows[0])-1], 64)
		if err != nil {
			t.Fatalf("%q: row %q", args, rows[0])
		}
		return v, out, errs
	}
	one, _, _ := rate(t, "-o", "1")
	for _, c := range []struct {
		name   string
		args   []string
		outs   int
		capped bool
	}{
		{"-o 4", []string{"-o", "4"}, 4, false},
		{"--outs 8", []string{"--outs", "8"}, 8, false},
		{"default", nil, 16, false},
		{"-o 32 cut to 16", []string{"-o", "32"}, 16, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, out, errs := rate(t, c.args...)
			if !strings.Contains(out, " Outstand reads  : "+strconv.Itoa(c.outs)+"\n") {
				t.Errorf("header does not say %d outstanding reads:\n%s", c.outs, out)
			}
			if got := strings.Contains(errs, "Number of outstanding reads is above max = 16"); got != c.capped {
				t.Errorf("note on stderr: %v, want %v (%q)", got, c.capped, errs)
			}
			if lo, hi := 0.9*float64(c.outs)*one, 1.1*float64(c.outs)*one; r < lo || r > hi {
				t.Errorf("%.3f Mpps, want %d × %.3f (one outstanding) within 10%%", r, c.outs, one)
			}
		})
	}
	if _, _, code := runPerfCmd(t, "read_bw", "-n", "50", "-o", "bandwidth"); code != 0 {
		t.Errorf("-o bandwidth: exit %d", code)
	}
}
