package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// trace --faults shows the fault and its consequence in the walk.
func TestTraceFaultWalk(t *testing.T) {
	t.Run("torn BlueFlame: fallback fetch", func(t *testing.T) {
		plan := writePlan(t, "torn.json", `{"seed":1,"rules":[{"point":"wc.buffer","action":"tear","nth":1,"match":{"node":0}}]}`)
		var out bytes.Buffer
		require.Equal(t, 0, run([]string{"trace", "--op", "write", "--size", "100", "--inline", "--faults", plan}, &out, os.Stderr))
		s := out.String()
		require.Contains(t, s, "→ the BlueFlame WQE does not arrive whole") // the plan explained
		require.Contains(t, s, "faults and their consequences:")
		require.Contains(t, s, "FAULT WC line at BAR0 0x3800 torn: 32 of 64 bytes leave")
		require.Contains(t, s, "→ BlueFlame WQE torn: doorbell fallback")
		require.Contains(t, s, "→ WQE fetched from host memory: 192 bytes, 2 TLPs")
		require.Contains(t, s, "data verified")
	})
	t.Run("DMA error: error CQE", func(t *testing.T) {
		plan := writePlan(t, "dma.json", `{"rules":[{"point":"dma.read","action":"timeout","nth":1,"match":{"node":0,"target":"data"}}]}`)
		var out, errb bytes.Buffer
		require.Equal(t, 1, run([]string{"trace", "--size", "2048", "--faults", plan}, &out, &errb))
		require.Contains(t, errb.String(), "WR 1 completed with LOC_PROT_ERR")
		require.Contains(t, out.String(), "completion timeout")
		require.Contains(t, out.String(), "→ QP to ERR")
		require.Contains(t, out.String(), "→ error CQE: wr_id 1 LOC_PROT_ERR (status 4) vendor_err 0x51")
	})
	t.Run("CQ overrun: event", func(t *testing.T) {
		plan := writePlan(t, "cq.json", `{"rules":[{"point":"cq","action":"overrun","nth":1,"match":{"node":0}}]}`)
		var out, errb bytes.Buffer
		require.Equal(t, 1, run([]string{"trace", "--faults", plan}, &out, &errb))
		require.Contains(t, out.String(), "→ CQ overrun")
		require.Contains(t, out.String(), "→ async event on node 0: CQ_ERR")
	})
	t.Run("wire drop: listed, not 'none fired'", func(t *testing.T) {
		// The wire's faults record a warning (wire_fault_drop), not a
		// fault event: the section used to say "faults: none fired".
		plan := writePlan(t, "drop.json", `{"rules":[{"point":"wire.tx","action":"drop","nth":3}]}`)
		var out bytes.Buffer
		require.Equal(t, 0, run([]string{"trace", "--size", "65536", "--faults", plan}, &out, os.Stderr))
		require.NotContains(t, out.String(), "faults: none fired")
		require.Contains(t, out.String(), "faults and their consequences:")
		require.Contains(t, out.String(), "FAULT tx: frame of 1082 B (qpn 0x100) dropped by fault rule 0")
		require.Contains(t, out.String(), "data verified")
	})
	t.Run("a rule the setup set off: named, not 'none fired'", func(t *testing.T) {
		// Node 1's first doorbell-record read is its receive queue's, at
		// the connection setup: the rule fired there, and the walk (whose
		// records start at the post) used to say "faults: none fired".
		plan := writePlan(t, "setup.json", `{"rules":[{"point":"dma.read","action":"timeout","nth":1,"match":{"node":1,"target":"dbr"}}]}`)
		var out bytes.Buffer
		require.Equal(t, 0, run([]string{"trace", "--faults", plan}, &out, os.Stderr))
		require.NotContains(t, out.String(), "faults: none fired")
		require.Contains(t, out.String(), "faults and their consequences:")
		require.Contains(t, out.String(), "rule 0 (dma.read timeout nth=1 node=1 target=dbr) fired 1 time(s) during the connection setup, before the post: not in the walk")
		require.Contains(t, out.String(), "data verified")
	})
	t.Run("a fault whose record the bounded trace dropped: named, not 'none fired'", func(t *testing.T) {
		// A small recorder keeps only the walk's tail: the fault, at the
		// walk's start, is gone from the records (a fault that sets off an
		// endless RNR retry does that with the real recorder). The section
		// used to say "faults: none fired".
		defer func(c int) { traceRecorderCap = c }(traceRecorderCap)
		traceRecorderCap = 20
		plan := writePlan(t, "drop1.json", `{"rules":[{"point":"wire.tx","action":"drop","nth":1,"match":{"node":0}}]}`)
		var out bytes.Buffer
		require.Equal(t, 0, run([]string{"trace", "--size", "65536", "--faults", plan}, &out, os.Stderr))
		require.NotContains(t, out.String(), "faults: none fired")
		require.Contains(t, out.String(), "faults and their consequences:")
		require.Contains(t, out.String(), "rule 0 (wire.tx drop nth=1 node=0) fired 1 time(s) in the walk; the trace kept its last events only")
		require.Contains(t, out.String(), "data verified")
	})
	t.Run("check: clean walk", func(t *testing.T) {
		var out bytes.Buffer
		require.Equal(t, 0, run([]string{"trace", "--check"}, &out, os.Stderr))
		require.Contains(t, out.String(), "check: no host-protocol violation observed")
		j := runTraceJSON(t, "--check")
		require.Empty(t, j.Violations)
		require.Empty(t, j.Problems)
	})
	t.Run("check: torn BlueFlame, at the walk's time, in the JSON", func(t *testing.T) {
		// The check lines used to give the absolute virtual time (10033
		// ns) beside a walk counted from the post (33 ns), and --json
		// carried neither the violations nor the problem.
		plan := writePlan(t, "torn.json", `{"seed":1,"rules":[{"point":"wc.buffer","action":"tear","nth":1,"match":{"node":0}}]}`)
		args := []string{"--op", "write", "--size", "100", "--inline", "--check", "--faults", plan}
		// Violations are the run's problem: exit 1, as a checker's, with
		// every output written (the walk, the check lines, the JSON).
		var out, errb bytes.Buffer
		require.Equal(t, 1, run(append([]string{"trace"}, args...), &out, &errb))
		require.Contains(t, errb.String(), "checked mode found 1 host-protocol violation(s)")
		require.Contains(t, out.String(), "data verified")
		require.Contains(t, out.String(), "@      33.000 ns node 0  CHECK R11")
		require.Contains(t, out.String(), "check: R11 bf-not-whole-lines: node 0 QP 0x100 at 33.000ns: 32 bytes at +0x0")
		require.Contains(t, out.String(), "PROBLEM checked mode found host-protocol violations")
		out.Reset()
		require.Equal(t, 1, run(append([]string{"trace", "--json"}, args...), &out, io.Discard))
		var j traceJSON
		require.NoError(t, json.Unmarshal(out.Bytes(), &j))
		require.True(t, j.DataOK)
		require.Len(t, j.Violations, 1)
		v := j.Violations[0]
		require.Equal(t, violationJSON{Rule: "R11", Name: "bf-not-whole-lines", Node: 0, QPN: 0x100, AtNS: 33, Observed: "32 bytes at +0x0 of UAR 3 bfreg 0 half 0",
			Source: v.Source}, v)
		require.NotEmpty(t, v.Source)
		require.Contains(t, j.Problems, "checked mode found host-protocol violations")
	})
}

// TestTimedFaultsCountFromTheWorkload: a timed rule's at_ps counts from
// the start of the workload (trace: the post; perf and stat: the first
// post), and a rule due after the run's natural end does not fire. The
// trace and perf used to settle after connection setup with the rule
// armed, which ran the clock to it: a fatal at 1 s killed a 2 µs walk
// before its post ("faults: none fired", then a dead device), a port down
// at 1 s gave RETRY_EXC_ERR, and perf called the run stuck.
func TestTimedFaultsCountFromTheWorkload(t *testing.T) {
	const (
		fatal1s = `{"rules":[{"point":"device","action":"fatal","at_ps":1000000000000}]}`
		down1s  = `{"rules":[{"point":"port","action":"down","at_ps":1000000000000}]}`
		// The cookbook's link flap: down at 1 µs after the post, for 2 µs.
		flap1us  = `{"rules":[{"point":"port","action":"down","at_ps":1000000,"for_ps":2000000,"match":{"node":0}}]}`
		fatal1us = `{"rules":[{"point":"device","action":"fatal","at_ps":1000000,"match":{"node":0}}]}`
		down5us  = `{"rules":[{"point":"port","action":"down","at_ps":5000000}]}`
	)
	tests := []struct {
		name, plan string
		args       []string
		code       int
		stdout     []string // substrings of stdout
		not        []string // must not be in stdout
		stderr     []string // substrings of stderr
	}{
		{name: "trace: fatal at 1 s after a 2 µs walk", plan: fatal1s, args: []string{"trace"}, code: 0,
			stdout: []string{"faults: none fired", "rule 0 (device fatal always at=1000000000000ps) did not fire: the run ended first, at 2144.096 ns (it was due at 1000000000.000 ns)",
				"data verified"},
			not: []string{"async event", "FAULT"}},
		{name: "trace: port down at 1 s after the walk", plan: down1s, args: []string{"trace"}, code: 0,
			stdout: []string{"faults: none fired", "did not fire: the run ended first", "data verified"},
			not:    []string{"async event", "FAULT", "error CQE"}},
		{name: "trace: flap 1 µs after the post hits the walk", plan: flap1us, args: []string{"trace"}, code: 0,
			stdout: []string{"@    1000.000 ns node 0  FAULT port down", "@    3000.000 ns node 0    → link up", "→ ACK timeout, retry",
				"async event on node 0: PORT_ERR", "async event on node 0: PORT_ACTIVE", "data verified"},
			not: []string{"did not fire"}},
		{name: "trace: fatal 1 µs after the post", plan: fatal1us, args: []string{"trace"}, code: 1,
			stdout: []string{"@    1000.000 ns node 0  FAULT device fatal", "error CQE: wr_id 1 WR_FLUSH_ERR", "async event on node 0: DEVICE_FATAL"},
			stderr: []string{"WR 1 completed with WR_FLUSH_ERR"}},
		{name: "perf: fatal at 1 s after the run", plan: fatal1s, args: []string{"perf", "write_lat", "-n", "10"}, code: 0,
			stdout: []string{" 2       10   "},
			stderr: []string{"softnic perf: fault rule 0 (device fatal always at=1000000000000ps) did not fire: the run ended first"}},
		{name: "perf: port down within the run", plan: down5us, args: []string{"perf", "write_lat", "-n", "1000"}, code: 1,
			stderr: []string{"completion with error RETRY_EXC_ERR"}},
		{name: "stat: fatal at 1 s after the workload", plan: fatal1s, args: []string{"stat", "--all"}, code: 0,
			stdout: []string{"sent_pkts 100"}, not: []string{"device_fatal", "fault_timed"},
			stderr: []string{"softnic stat: fault rule 0 (device fatal always at=1000000000000ps) did not fire: the run ended first"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			plan := writePlan(t, "plan.json", tc.plan)
			var out, errb bytes.Buffer
			args := append(append([]string{}, tc.args...), "--faults", plan)
			require.Equal(t, tc.code, run(args, &out, &errb), "stdout:\n%s\nstderr:\n%s", out.String(), errb.String())
			for _, s := range tc.stdout {
				require.Contains(t, out.String(), s)
			}
			for _, s := range tc.not {
				require.NotContains(t, out.String(), s)
			}
			for _, s := range tc.stderr {
				require.Contains(t, errb.String(), s)
			}
		})
	}
	// A rule after the run's end changes nothing in the figures.
	plan := writePlan(t, "fatal1s.json", fatal1s)
	with, _, code := runPerfCmd(t, "write_lat", "-n", "10", "--faults", plan)
	require.Equal(t, 0, code)
	without, _, code := runPerfCmd(t, "write_lat", "-n", "10")
	require.Equal(t, 0, code)
	require.Equal(t, without, with)
}

// A faulted walk that ends in an error (an error CQE, no CQE at the
// requester or at the responder) is still written in every format asked
// for, with how it ended, and the command still fails; softnic view takes
// its JSON.
func TestTraceFailedWalkOutputs(t *testing.T) {
	dropAll := writePlan(t, "dropall.json", `{"rules":[{"point":"wire.tx","action":"drop"}]}`)
	lostCQE := writePlan(t, "cqdrop.json", `{"rules":[{"point":"cq","action":"drop","nth":1,"match":{"node":0}}]}`)
	for _, tc := range []struct {
		name   string
		args   []string
		err    string // the command's error, in every output
		status string // the requester completion that came, if one did
	}{
		{"every frame dropped: retries exceeded", []string{"--faults", dropAll}, "WR 1 completed with RETRY_EXC_ERR", "RETRY_EXC_ERR"},
		{"requester CQE lost", []string{"--faults", lostCQE}, "waiting for the requester CQE", ""},
		{"UD SEND lost: no receive", []string{"--op", "ud_send", "--faults", dropAll}, "waiting for the responder CQE", "SUCCESS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			page, chrome, walk := filepath.Join(dir, "w.html"), filepath.Join(dir, "c.json"), filepath.Join(dir, "walk.json")

			var out, errb bytes.Buffer
			require.Equal(t, 1, run(append([]string{"trace", "--json"}, tc.args...), &out, &errb))
			require.Contains(t, errb.String(), tc.err)
			var j traceJSON
			require.NoError(t, json.Unmarshal(out.Bytes(), &j), "stdout is the walk's JSON")
			require.Contains(t, j.Error, tc.err)
			require.False(t, j.DataOK)
			require.Contains(t, j.Problems, j.Error)
			require.NotEmpty(t, j.Stages)
			require.NotEmpty(t, j.Faults, "the plan in words")
			if tc.status != "" {
				require.NotEmpty(t, j.Completions)
				require.Equal(t, tc.status, j.Completions[0].Status)
				// total_ns is post → the requester's CQE, as in a walk
				// that succeeds: the end of the last poll stage.
				var polled float64
				for _, st := range j.Stages {
					if st.Name == "poll" && st.Node == 0 {
						polled = st.EndNS
					}
				}
				require.Equal(t, polled, j.TotalNS, "total_ns is the requester's CQE")
			}
			require.NoError(t, os.WriteFile(walk, out.Bytes(), 0o644))

			out.Reset()
			errb.Reset()
			require.Equal(t, 1, run(append([]string{"trace", "--html", page, "--chrome-trace", chrome}, tc.args...), &out, &errb))
			require.Contains(t, errb.String(), tc.err)
			require.Contains(t, out.String(), "\nfaults", "the text walk and its fault section, as before")
			b, err := os.ReadFile(page)
			require.NoError(t, err, "--html written")
			require.Contains(t, string(b), "FAILED: "+j.Error)
			// The page lists the walk's warnings (the faults and what they
			// caused), as the text does.
			require.Contains(t, string(b), fmt.Sprintf("Warnings and faults (%d)", len(j.Warnings)))
			for _, w := range j.Warnings {
				require.Contains(t, string(b), html.EscapeString(w.Detail))
			}
			b, err = os.ReadFile(chrome)
			require.NoError(t, err, "--chrome-trace written")
			var v any
			require.NoError(t, json.Unmarshal(b, &v))
			require.Contains(t, string(b), "the walk failed: "+j.Error)

			out.Reset()
			errb.Reset()
			require.Equal(t, 1, run(append([]string{"trace", "--html", "-"}, tc.args...), &out, &errb))
			require.True(t, strings.HasPrefix(out.String(), "<!DOCTYPE html>"), "stdout is the page only: %.80q", out.String())

			out.Reset()
			errb.Reset()
			require.Equal(t, 0, run([]string{"view", walk}, &out, &errb), errb.String())
			require.Contains(t, out.String(), "FAILED: "+j.Error)
		})
	}
}

// TestPerfCheck: perf --check in the simulation runs checked mode and
// prints each violation on stderr (the flag used to be parsed and
// ignored). A clean run prints none; a jumped doorbell is seen as R1.
func TestPerfCheck(t *testing.T) {
	dir := t.TempDir()
	jump := filepath.Join(dir, "jump.json")
	require.NoError(t, os.WriteFile(jump, []byte(`{"rules":[{"point":"doorbell","action":"jump","nth":1,"match":{"node":0}}]}`), 0o600))
	tests := []struct {
		name string
		args []string
		want string // "" no violation
	}{
		{"clean", []string{"write_lat", "-n", "20", "-s", "64", "--check"}, ""},
		{"jumped doorbell", []string{"write_lat", "-n", "20", "-s", "64", "--check", "--faults", jump}, "softnic: check: R1 doorbell-before-record: node 0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, errs, _ := runPerfCmd(t, tc.args...)
			if tc.want == "" {
				require.NotContains(t, errs, "check:")
				return
			}
			require.Contains(t, errs, tc.want)
		})
	}
}

// TestTraceDataMismatchFailsEveryForm: a walk that completes but leaves
// the responder's bytes different from the requester's (a DMA write
// corrupted on its way to host memory, which no ICRC sees) exits 1 in
// every output form. --json and --html - used to exit 0 with data_ok
// false, so a script reading only the status missed it.
func TestTraceDataMismatchFailsEveryForm(t *testing.T) {
	plan := writePlan(t, "dmaw.json", `{"rules":[{"point":"dma.write","action":"corrupt","nth":1,"match":{"node":1}}]}`)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"text", nil},
		{"json", []string{"--json"}},
		{"html to stdout", []string{"--html", "-"}},
		{"html to a file", []string{"--html", filepath.Join(t.TempDir(), "w.html")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			require.Equal(t, 1, run(append([]string{"trace", "--faults", plan}, tc.args...), &out, &errb), out.String())
			require.Contains(t, errb.String(), "data mismatch")
			if tc.name == "json" {
				var j traceJSON
				require.NoError(t, json.Unmarshal(out.Bytes(), &j))
				require.False(t, j.DataOK)
				require.Empty(t, j.Error, "the walk itself completed")
				require.NotEmpty(t, j.Problems)
			}
		})
	}
	// The same walk without the plan passes in every form.
	for _, args := range [][]string{nil, {"--json"}, {"--html", "-"}} {
		var out, errb bytes.Buffer
		require.Equal(t, 0, run(append([]string{"trace"}, args...), &out, &errb), errb.String())
	}
}

// TestRunNamesRulesThatNeverFired: perf and stat say on stderr which
// event rules of the plan never fired and how many events each matched.
// A rule for a QP the run does not have, or an nth the run never
// reaches, used to leave a clean run without a word, as if the plan had
// been left out.
func TestRunNamesRulesThatNeverFired(t *testing.T) {
	for _, tc := range []struct {
		name, plan string
		args       []string
		stderr     string // "" : no "never fired" line
	}{
		{"perf: a QP the run does not have", `{"rules":[{"point":"wire.tx","action":"drop","nth":5,"match":{"qpn":"0x999"}}]}`,
			[]string{"perf", "write_lat", "-n", "10"}, "softnic perf: fault rule 0 (wire.tx drop nth=5 qpn=0x999) never fired: it matched 0 events"},
		{"perf: an nth past the run", `{"rules":[{"point":"cq","action":"drop","nth":100000}]}`,
			[]string{"perf", "write_lat", "-n", "10"}, "softnic perf: fault rule 0 (cq drop nth=100000) never fired: it matched "},
		{"stat: a QP the run does not have", `{"rules":[{"point":"cq","action":"drop","match":{"qpn":"0x999"}}]}`,
			[]string{"stat"}, "softnic stat: fault rule 0 (cq drop always qpn=0x999) never fired: it matched 0 events"},
		{"perf: a rule that fires", `{"seed":1,"rules":[{"point":"dma.read","action":"delay","delay_ps":1000,"nth":3}]}`,
			[]string{"perf", "write_lat", "-n", "10"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := writePlan(t, "plan.json", tc.plan)
			var out, errb bytes.Buffer
			require.Equal(t, 0, run(append(append([]string{}, tc.args...), "--faults", plan), &out, &errb), "stderr:\n%s", errb.String())
			if tc.stderr == "" {
				require.NotContains(t, errb.String(), "never fired")
				return
			}
			require.Contains(t, errb.String(), tc.stderr)
		})
	}
}

// TestTraceJSONFaultRules: trace --json lists each rule of the plan with
// how many events it matched and how often it fired (in the setup too),
// and a timed rule the walk ended before. Before, --json carried only
// the plan in words and the warnings of the faults that fired: a script
// could not tell a rule that never fired from one with nothing to show.
func TestTraceJSONFaultRules(t *testing.T) {
	plan := writePlan(t, "rules.json", `{"rules":[
		{"point":"wire.tx","action":"drop","nth":3,"match":{"node":0}},
		{"point":"cq","action":"drop","match":{"qpn":"0x999"}},
		{"point":"dma.read","action":"timeout","nth":1,"match":{"node":1,"target":"dbr"}},
		{"point":"port","action":"down","at_ps":1000000000000}]}`)
	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"trace", "--size", "65536", "--json", "--faults", plan}, &out, &errb), errb.String())
	var got struct {
		FaultRules []faultRuleJSON `json:"fault_rules"`
	}
	require.NoError(t, json.Unmarshal(out.Bytes(), &got))
	require.Len(t, got.FaultRules, 4)
	r := got.FaultRules
	require.Equal(t, "wire.tx drop nth=3 node=0", r[0].Desc)
	require.Equal(t, uint64(1), r[0].Fired)
	require.GreaterOrEqual(t, r[0].Matched, uint64(3))
	require.Zero(t, r[0].FiredInSetup)
	require.Equal(t, faultRuleJSON{Rule: 1, Desc: "cq drop always qpn=0x999"}, r[1], "matched nothing, never fired")
	require.Equal(t, uint64(1), r[2].Fired)
	require.Equal(t, uint64(1), r[2].FiredInSetup, "the receive queue's first record read is at the setup")
	require.True(t, r[3].EndedFirst, "%+v", r[3])
	require.Zero(t, r[3].Fired)

	// Without a plan, no list.
	out.Reset()
	require.Equal(t, 0, run([]string{"trace", "--json"}, &out, &errb))
	require.NotContains(t, out.String(), "fault_rules")
}
