package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func runPerfCmd(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(append([]string{"perf"}, args...), &out, &errb)
	return out.String(), errb.String(), code
}

// tableRows returns the data rows of a perftest table: the lines after
// the heading that starts with " #bytes", up to the closing rule.
func tableRows(t *testing.T, out string) [][]string {
	t.Helper()
	var rows [][]string
	in := false
	for _, l := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(l, " #bytes"):
			in = true
		case in && l == perfRule:
			return rows
		case in:
			rows = append(rows, strings.Fields(l))
		}
	}
	t.Fatalf("no closed table in\n%s", out)
	return nil
}

func TestPerfModeOneEveryTest(t *testing.T) {
	for _, c := range []struct {
		test  string
		args  []string
		cols  int
		title string
	}{
		{"send_lat", nil, 9, "Send Latency Test"},
		{"write_lat", nil, 9, "RDMA_Write Latency Test"},
		{"read_lat", nil, 9, "RDMA_Read Latency Test"},
		{"atomic_lat", nil, 9, "Atomic FETCH_AND_ADD Latency Test"},
		{"send_bw", []string{"-s", "4096"}, 5, "Send BW Test"},
		{"write_bw", []string{"-s", "4096"}, 5, "RDMA_Write BW Test"},
		{"read_bw", []string{"-s", "4096"}, 5, "RDMA_Read BW Test"},
		{"atomic_bw", nil, 5, "Atomic FETCH_AND_ADD BW Test"},
	} {
		t.Run(c.test, func(t *testing.T) {
			args := append([]string{c.test, "-n", "50"}, c.args...)
			out, errs, code := runPerfCmd(t, args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			if errs != "" {
				t.Errorf("stderr %q: no progress bar or message when stderr is not a terminal", errs)
			}
			again, _, _ := runPerfCmd(t, args...)
			if again != out {
				t.Errorf("two runs differ: the figures are not deterministic\n%s\n---\n%s", out, again)
			}
			for _, want := range []string{c.title, "Connection type : RC", "Link type       : Ethernet", " local address: LID 0000 QPN 0x",
				" remote address: LID 0000 QPN 0x", "softnic profile : cx5-gen3x16", " GID: 00:00:00:00:00:00:00:00:00:00:255:255:192:00:02:01"} {
				if !strings.Contains(out, want) {
					t.Errorf("no %q in\n%s", want, out)
				}
			}
			rows := tableRows(t, out)
			if len(rows) != 1 || len(rows[0]) != c.cols {
				t.Fatalf("rows %q, want one of %d columns", rows, c.cols)
			}
			if rows[0][1] != "50" {
				t.Errorf("#iterations %q, want 50", rows[0][1])
			}
			for _, f := range rows[0][2:] {
				v, err := strconv.ParseFloat(f, 64)
				if err != nil || v < 0 {
					t.Errorf("column %q is not a non-negative number", f)
				}
			}
			if c.cols == 9 {
				typ, _ := strconv.ParseFloat(rows[0][4], 64)
				if typ < 0.1 || typ > 20 {
					t.Errorf("t_typical %v µs is outside any plausible band", typ)
				}
			} else {
				avg, _ := strconv.ParseFloat(rows[0][3], 64)
				peak, _ := strconv.ParseFloat(rows[0][2], 64)
				if avg <= 0 || peak+0.01 < avg {
					t.Errorf("BW average %v, peak %v: want 0 < average <= peak", avg, peak)
				}
			}
		})
	}
}

// The half round trip of write_lat counts the peer's turn: read_lat's full
// round trip of one READ is longer than a write's half.
func TestPerfLatencyRelations(t *testing.T) {
	typical := func(test string) float64 {
		out, errs, code := runPerfCmd(t, test, "-n", "20", "-o", "latency")
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", test, code, errs)
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(out), 64)
		if err != nil {
			t.Fatalf("%s -o latency printed %q", test, out)
		}
		return v
	}
	w, r := typical("write_lat"), typical("read_lat")
	if !(r > w) {
		t.Errorf("read_lat %v µs <= write_lat %v µs (half RTT)", r, w)
	}
}

// ib_write_lat spins on the last byte: every byte of the message must be
// there once the last one is (several packets at MTU 1024).
func TestPerfWriteLatLastByteLast(t *testing.T) {
	o, err := parsePerfArgs([]string{"write_lat", "-n", "10", "-s", "16384", "-m", "1024"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	o.verifyLastByte = true
	var out bytes.Buffer
	if err := perfSim(o, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if rows := tableRows(t, out.String()); len(rows) != 1 || rows[0][0] != "16384" {
		t.Fatalf("rows %q", rows)
	}
}

func TestPerfSweepAndUnits(t *testing.T) {
	out, errs, code := runPerfCmd(t, "ib_write_bw", "-a", "-n", "10", "--report_gbits")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(out, "BW peak[Gb/sec]") {
		t.Errorf("no Gb/sec heading:\n%s", out)
	}
	rows := tableRows(t, out)
	if len(rows) != 23 || rows[0][0] != "2" || rows[22][0] != "8388608" {
		t.Fatalf("-a: %d rows from %v to %v, want 23 from 2 to 8388608", len(rows), rows[0], rows[len(rows)-1])
	}
}

func TestPerfJSON(t *testing.T) {
	out, errs, code := runPerfCmd(t, "send_lat", "-n", "10", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var r perfResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if len(r.Latency) != 1 || r.Latency[0].Iters != 10 || r.Latency[0].RTTDivisor != 2 || r.Header.Profile == "" || r.Header.Test != "send_lat" {
		t.Errorf("JSON %+v", r)
	}
}

func TestPerfFlags(t *testing.T) {
	if _, _, code := runPerfCmd(t, "--help"); code != 0 {
		t.Errorf("--help exits %d, want 0", code)
	}
	if _, errs, code := runPerfCmd(t, "nosuch_lat"); code != 2 || !strings.Contains(errs, "unknown test") {
		t.Errorf("unknown test: exit %d, %q", code, errs)
	}
	if _, errs, code := runPerfCmd(t); code != 2 || !strings.Contains(errs, "which test") {
		t.Errorf("no test: exit %d, %q", code, errs)
	}
	// Flags after the test word, decimal and 0x sizes.
	o, err := parsePerfArgs([]string{"ib_send_bw", "-s", "0x1000", "--post_list", "4", "-n", "40"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.test.name != "send_bw" || o.size != 4096 || o.postList != 4 || o.cqMod != 4 || o.iters != 40 {
		t.Errorf("parsed %+v", o)
	}
	// Flags before and after the words; after "--" everything is a word.
	if o, err := parsePerfArgs([]string{"-n", "20", "write_lat", "-s", "8", "--wire", "udp:1,2", "--", "-host"}, io.Discard); err != nil || o.iters != 20 || o.size != 8 || o.host != "-host" {
		t.Errorf("-- host: %+v, %v", o, err)
	}
	// -I 0 is asked for, not perftest's default (220 for write_lat).
	if o, err := parsePerfArgs([]string{"write_lat", "-I", "0"}, io.Discard); err != nil || o.inline != 0 {
		t.Errorf("-I 0: inline %d, %v; want 0", o.inline, err)
	}
	// A leading 0 is a decimal digit, not octal (docs/cli.md).
	if o, err := parsePerfArgs([]string{"write_lat", "-s", "010"}, io.Discard); err != nil || o.size != 10 {
		t.Errorf("-s 010: size %d, %v; want 10", o.size, err)
	}
	o, err = parsePerfArgs([]string{"write_lat"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.size != 2 || o.iters != 1000 || o.txDepth != 1 || o.inline != 220 || o.port != 18515 {
		t.Errorf("write_lat defaults %+v", o)
	}
	o, err = parsePerfArgs([]string{"write_bw"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.size != 65536 || o.iters != 5000 || o.txDepth != 128 || o.cqMod != 1 || o.inline != 0 {
		t.Errorf("write_bw defaults %+v (a 64 KiB message turns CQ moderation off)", o)
	}
	for _, bad := range [][]string{
		{"atomic_lat", "-s", "16"},
		{"read_lat", "-c", "UD"},
		{"write_lat", "-n", "3"},
		{"write_lat", "-m", "1000"},
		{"write_lat", "somehost"},
		{"send_bw", "--post_list", "3", "-n", "10"},
		{"write_lat", "-s", "ten"},
		{"write_lat", "-I", "-1"}, // sizes are never negative (docs/cli.md), -1 is only the default
		{"write_lat", "-n", "-5"},
		{"write_lat", "--wire", "udp:1,2", "--", "host", "-s", "8"}, // after "--", -s is a third word
	} {
		if _, err := parsePerfArgs(bad, io.Discard); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestPerfDevice: -d names a device that is there, as perftest's does: the
// two emulated NICs in one process, the one on a real wire, or a kernel
// device (its own backend); any other name is refused as devinfo -d
// refuses it (softnic7 was accepted and printed in the header).
func TestPerfDevice(t *testing.T) {
	wire := []string{"--wire", "udp:127.0.0.1:0,127.0.0.1:9", "--ip", "192.0.2.1"}
	for _, c := range []struct {
		name string
		args []string
		err  string // "" when accepted
	}{
		{"default", nil, ""},
		{"softnic0", []string{"-d", "softnic0"}, ""},
		{"softnic1 in one process", []string{"-d", "softnic1"}, ""},
		{"kernel device", []string{"-d", "rxe0"}, ""},
		{"unknown softnic", []string{"-d", "softnic7"}, "IB device 'softnic7' wasn't found (have softnic0, softnic1)"},
		{"softnic prefix only", []string{"-d", "softnic"}, "IB device 'softnic' wasn't found"},
		{"softnic1 on a wire", append([]string{"-d", "softnic1"}, wire...), "IB device 'softnic1' wasn't found (have softnic0)"},
		{"softnic0 on a wire", append([]string{"-d", "softnic0"}, wire...), ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := parsePerfArgs(append([]string{"write_lat"}, c.args...), io.Discard)
			if c.err == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Fatalf("error %v, want %q", err, c.err)
			}
		})
	}
	if _, errs, code := runPerfCmd(t, "write_lat", "-d", "softnic7"); code != 2 || !strings.Contains(errs, "softnic perf: IB device 'softnic7' wasn't found") {
		t.Errorf("-d softnic7: exit %d, %q; want 2 and the reason", code, errs)
	}
}

// TestPerfInlineCap: -I passes perftest's range (0..912) at parse time,
// but the device's max inline data (the profile's device.caps.max_inline,
// 512 on the built-in ones; the opened device's on a wire) bounds it: more
// is bad usage, exit 2 with both numbers, not a create_qp failure.
func TestPerfInlineCap(t *testing.T) {
	small := filepath.Join(t.TempDir(), "inline256.json")
	if err := os.WriteFile(small, []byte(`{"caps":{"max_inline":256}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	tiny := filepath.Join(t.TempDir(), "inline128.json")
	if err := os.WriteFile(tiny, []byte(`{"caps":{"max_inline":128}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	wire := []string{"--wire", "udp:127.0.0.1:0,127.0.0.1:9", "--ip", "192.0.2.1", "--timeout", "1s"}
	for _, c := range []struct {
		name string
		args []string
		code int
		want string // on stderr when refused, in the header when run
	}{
		{"perftest's maximum", []string{"-I", "912"}, 2, "-I 912: the device's max inline data is 512 bytes (profile cx5-gen3x16, device.caps.max_inline)"},
		{"one past the device", []string{"-I", "513"}, 2, "max inline data is 512 bytes"},
		{"the device's maximum", []string{"-I", "512"}, 0, "Max inline data : 512[B]"},
		{"a profile's smaller cap", []string{"-I", "300", "--profile", small}, 2, "-I 300: the device's max inline data is 256 bytes (profile inline256, device.caps.max_inline)"},
		{"the default within a smaller cap", []string{"--profile", small}, 0, "Max inline data : 220[B]"},
		{"a default past the cap is cut to it", []string{"--profile", tiny}, 0, "Max inline data : 128[B]"},
		{"on a wire", append([]string{"-I", "600"}, wire...), 2, "-I 600: the device's max inline data is 512 bytes (device softnic0)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, errs, code := runPerfCmd(t, append([]string{"write_lat", "-n", "5"}, c.args...)...)
			if code != c.code {
				t.Fatalf("exit %d, want %d: %s", code, c.code, errs)
			}
			got := errs
			if c.code == 0 {
				got = out
			}
			if !strings.Contains(got, c.want) {
				t.Fatalf("no %q in\n%s", c.want, got)
			}
		})
	}
}

func TestPerfUDAndUC(t *testing.T) {
	for _, args := range [][]string{{"send_lat", "-c", "UD", "-n", "20"}, {"send_bw", "-c", "UD", "-n", "20", "-s", "1024"},
		{"write_lat", "-c", "UC", "-n", "20"}, {"write_bw", "-c", "UC", "-n", "20", "-s", "1024"}} {
		out, errs, code := runPerfCmd(t, args...)
		if code != 0 {
			t.Errorf("%q: exit %d: %s", args, code, errs)
			continue
		}
		if !strings.Contains(out, "Connection type : "+args[2]) {
			t.Errorf("%q: header\n%s", args, out)
		}
		tableRows(t, out)
	}
}

// A fault plan on the simulated wire: lost frames are retransmitted, the
// run completes, the figures are worse and still deterministic.
func TestPerfFaultsOnTheSimulatedWire(t *testing.T) {
	plan := t.TempDir() + "/drop.json"
	if err := os.WriteFile(plan, []byte(`{"seed": 1, "rules": [{"point": "wire.tx", "action": "drop", "prob": 0.02}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	avg := func(args ...string) (float64, string) {
		out, errs, code := runPerfCmd(t, append([]string{"write_bw", "-s", "4096", "-n", "200", "-o", "bandwidth"}, args...)...)
		if code != 0 {
			t.Fatalf("%q: exit %d: %s", args, code, errs)
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(out), 64)
		if err != nil {
			t.Fatalf("-o bandwidth printed %q", out)
		}
		return v, out
	}
	clean, _ := avg()
	lossy, o1 := avg("--faults", plan)
	_, o2 := avg("--faults", plan)
	if o1 != o2 {
		t.Errorf("two runs with the same plan differ: %q, %q", o1, o2)
	}
	if !(lossy < clean) {
		t.Errorf("2%% loss: %v MiB/s, no worse than %v without", lossy, clean)
	}
}

// TestPerfPeakOff: as perftest's force_dependecies does, a bandwidth test
// of more than 20,000 iterations, or a timed one, leaves the peak out (0.00)
// and says so on the first line (on stderr with --json); -N asked for it,
// so it warns of nothing; latency tests have no peak.
func TestPerfPeakOff(t *testing.T) {
	for _, c := range []struct {
		name      string
		args      []string
		off, warn bool
	}{
		{"20000 iterations keep the peak", []string{"write_bw", "-n", "20000"}, false, false},
		{"20001 iterations", []string{"write_bw", "-n", "20001"}, true, true},
		{"per QP", []string{"write_bw", "-n", "12000", "-q", "2"}, false, false},
		{"timed", []string{"send_bw", "-D", "1"}, true, true},
		{"-N", []string{"read_bw", "-N", "-n", "30000"}, true, false},
		{"latency", []string{"write_lat", "-n", "30000"}, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			o, err := parsePerfArgs(c.args, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if o.noPeak != c.off || o.peakOff != c.warn {
				t.Fatalf("noPeak %v, warned %v; want %v, %v", o.noPeak, o.peakOff, c.off, c.warn)
			}
		})
	}
	out, errs, code := runPerfCmd(t, "write_bw", "-s", "64", "-n", "20001")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if first, _, _ := strings.Cut(out, "\n"); first != peakOffWarning {
		t.Fatalf("first line %q, want perftest's warning", first)
	}
	rows := tableRows(t, out)
	if len(rows) != 1 || rows[0][1] != "20001" || rows[0][2] != "0.00" {
		t.Fatalf("rows %q: want 20001 iterations and a 0.00 peak", rows)
	}
	out, errs, code = runPerfCmd(t, "write_bw", "-s", "64", "-n", "20001", "--json")
	if code != 0 || !strings.Contains(errs, peakOffWarning) || strings.Contains(out, "WARNING") {
		t.Fatalf("--json: exit %d, stdout %q, stderr %q: the warning goes to stderr", code, out, errs)
	}
}

// TestPerfTimedLatency: a latency test with -D runs for that many virtual
// seconds and stops, as perftest's duration mode does: the row's
// iterations over its transactions per second are the run's length, a
// second and not the --timeout budget after it (send_lat's client never
// stopped and ran into the budget).
func TestPerfTimedLatency(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
	}{
		{"send_lat", []string{"send_lat"}},
		{"send_lat UD", []string{"send_lat", "-c", "UD"}},
		{"write_lat", []string{"write_lat"}},
		{"read_lat", []string{"read_lat"}},
		{"atomic_lat", []string{"atomic_lat"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, errs, code := runPerfCmd(t, append(c.args, "-D", "1", "--timeout", "2s")...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			rows := tableRows(t, out)
			if len(rows) != 1 || len(rows[0]) != 4 {
				t.Fatalf("rows %q, want one of 4 columns (bytes, iterations, t_avg, tps)", rows)
			}
			iters, err1 := strconv.Atoi(rows[0][1])
			tps, err2 := strconv.ParseFloat(rows[0][3], 64)
			if err1 != nil || err2 != nil || iters < 1000 || tps <= 0 {
				t.Fatalf("row %q", rows[0])
			}
			// The time counts from the first post, which comes a little
			// after the deadline's origin, to the end of the iteration
			// that passed the deadline: 1 s within a few µs either way.
			if secs := float64(iters) / tps; secs < 0.99999 || secs > 1.001 {
				t.Errorf("the run lasted %.6f virtual seconds, want 1 (-D 1)", secs)
			}
		})
	}
}

// TestPerfWatchSkipsNothing: the bandwidth actors' skipped sweeps (cqWatch)
// change no figure: with many QPs, CQ moderation, post lists, a send_bw
// server and a lossy wire, the output is byte for byte the output of
// sweeping every CQ after every event.
func TestPerfWatchSkipsNothing(t *testing.T) {
	for _, args := range [][]string{
		{"write_bw", "-q", "8", "-n", "400", "-s", "4096"},
		{"send_bw", "-q", "4", "-n", "300", "-s", "2048", "--json"},
		{"write_bw", "-q", "6", "-n", "256", "--post_list", "4", "-s", "256"},
		{"read_bw", "-q", "3", "-n", "200", "-s", "8192", "-Q", "7"},
		{"write_bw", "-q", "4", "-D", "1", "-s", "65536"},
		{"send_bw", "-q", "2", "-n", "200", "-s", "4096", "--faults", "testdata/perf_drop.json"},
		// UD datagrams parked for their doorbell-record read.
		{"send_bw", "-c", "UD", "-r", "64", "-n", "3000", "-s", "64"},
		// Shallow TX depths: a sweep that takes a completion frees a slot
		// the next step must post into at once.
		{"write_bw", "-n", "300", "-t", "2", "-Q", "1", "-s", "4096"},
		{"read_bw", "-n", "200", "-t", "1", "-Q", "1", "-s", "64"},
		{"write_bw", "-q", "2", "-n", "400", "-t", "8", "-Q", "4", "-s", "64"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			out, errs, code := runPerfCmd(t, args...)
			sweepEveryStep = true
			t.Cleanup(func() { sweepEveryStep = false }) // even if the run below panics
			ref, referrs, refcode := runPerfCmd(t, args...)
			sweepEveryStep = false
			if code != 0 || refcode != 0 {
				t.Fatalf("exit %d (%s), reference %d (%s)", code, errs, refcode, referrs)
			}
			if out != ref {
				t.Fatalf("skipping sweeps changed the output:\n%s\nsweeping every step:\n%s", out, ref)
			}
		})
	}
}

// TestPerfErrorCause: when WQEs sent before the failing one flush first
// (in SQ order), perf names the completion that put the QP in error, not
// the first flush it polled.
func TestPerfErrorCause(t *testing.T) {
	plan := writePlan(t, "dma.json", `{"seed":5,"rules":[{"point":"dma.read","action":"timeout","nth":50,"match":{"target":"data"}}]}`)
	_, stderr, code := runPerfCmd(t, "write_bw", "-Q", "1", "-n", "2000", "--faults", plan)
	require.Equal(t, 1, code, stderr)
	require.Contains(t, stderr, "completion with error LOC_PROT_ERR (vendor syndrome 0x51; after WR_FLUSH_ERR of wr_id 0)")
}

// TestPerfStuckSaysWhy: a run that fails or cannot finish says what the
// devices reported, from the async events nobody read (perftest reads
// none), and
// a device fatal error ends in the software flush's completions, not in a
// stuck run (the flush did not count as CQEs landing, so the bw loop never
// swept the CQ that held them).
func TestPerfStuckSaysWhy(t *testing.T) {
	for _, c := range []struct{ name, rule, want string }{
		{"CQ overrun", `{"point":"cq","action":"overrun","nth":1,"match":{"node":0}}`,
			"the run is stuck: the simulation is idle and no side can move ([bw client: 128 of 200 posted, 0 completed]); node 0 async events: CQ_ERR cq 0x1, QP_FATAL qp 0x100"},
		{"device fatal", `{"point":"device","action":"fatal","at_ps":1000000,"match":{"node":0}}`,
			"completion with error WR_FLUSH_ERR (vendor syndrome 0x5) on QP 0 after 128 of 200 posted, 0 completed; node 0 async events: DEVICE_FATAL"},
		{"port down", `{"point":"port","action":"down","at_ps":1000000,"match":{"node":0}}`,
			"completion with error RETRY_EXC_ERR (vendor syndrome 0x81) on QP 0 after 128 of 200 posted, 0 completed; node 0 async events: PORT_ERR port 1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			plan := writePlan(t, "p.json", `{"seed":7,"rules":[`+c.rule+`]}`)
			_, stderr, code := runPerfCmd(t, "write_bw", "-n", "200", "--faults", plan)
			require.Equal(t, 1, code, stderr)
			require.Contains(t, stderr, c.want)
		})
	}
}

// TestPerfUDSizeToMTU: as perftest's check_mtu, a UD test whose size is
// over the MTU (the bandwidth tests' default 65536) runs at the MTU and
// says so, instead of refusing its own default.
func TestPerfUDSizeToMTU(t *testing.T) {
	for _, args := range [][]string{{"send_bw", "-c", "UD", "-n", "100"}, {"send_lat", "-c", "UD", "-n", "100", "-s", "8192"}} {
		out, stderr, code := runPerfCmd(t, args...)
		require.Equal(t, 0, code, stderr)
		require.Contains(t, stderr, " Max msg size in UD is MTU 4096\n Changing to this MTU\n", "%v", args)
		rows := tableRows(t, out)
		require.Len(t, rows, 1)
		require.Equal(t, "4096", rows[0][0], "%v", args)
	}
}

// TestPerfIterationsNotAMultipleOfCQMod: with -n not a multiple of the CQ
// moderation, a QP's last CQE stands for the WRs it has left, not for a
// whole cq_mod: counting cq_mod let the total pass while another QP still
// had WRs out, the client stopped polling and the run stuck (`send_bw -q 5
// -n 199 -t 64`). The peak skips the counts no CQE landed on exactly.
func TestPerfIterationsNotAMultipleOfCQMod(t *testing.T) {
	for _, test := range []string{"send_bw", "write_bw", "read_bw"} {
		t.Run(test, func(t *testing.T) {
			out, errs, code := runPerfCmd(t, test, "-q", "5", "-n", "199", "-s", "1024", "-t", "64")
			require.Equal(t, 0, code, "stderr: %s", errs)
			rows := tableRows(t, out)
			require.Len(t, rows, 1)
			require.Equal(t, "995", rows[0][1], "#iterations: 5 QPs × 199")
			peak, err := strconv.ParseFloat(rows[0][2], 64)
			require.NoError(t, err)
			avg, err := strconv.ParseFloat(rows[0][3], 64)
			require.NoError(t, err)
			require.Greater(t, peak, 0.0, "BW peak")
			require.GreaterOrEqual(t, peak, avg, "the peak is at least the average")
		})
	}
}

// TestPerfTimeoutIsAStallBound: in one process --timeout bounds how long
// the run may go without a completion, not the whole run: 5000 WRITEs of
// 64 KiB take about 28 ms of virtual time and pass with --timeout 50us
// (one lands every 6 µs); with every frame dropped and a QP timeout far
// beyond it (-u 30: 73 minutes), nothing completes and the run fails
// after the timeout, naming it.
func TestPerfTimeoutIsAStallBound(t *testing.T) {
	out, errs, code := runPerfCmd(t, "write_bw", "-s", "65536", "-n", "5000", "--timeout", "50us")
	if code != 0 || len(tableRows(t, out)) != 1 {
		t.Fatalf("a long run that keeps completing: exit %d\n%s\n%s", code, out, errs)
	}
	plan := filepath.Join(t.TempDir(), "drop.json")
	if err := os.WriteFile(plan, []byte(`{"seed": 1, "rules": [{"point": "wire.tx", "action": "drop"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errs, code = runPerfCmd(t, "write_bw", "-s", "64", "-n", "50", "-u", "30", "--timeout", "1s", "--faults", plan)
	if code != 1 || !strings.Contains(errs, "no completion for 1s of virtual time (--timeout)") || !strings.Contains(errs, "0 completed") {
		t.Fatalf("a run where nothing completes: exit %d, stderr %q", code, errs)
	}
}
