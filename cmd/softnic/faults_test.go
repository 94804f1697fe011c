package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// writePlan writes a fault plan into the test's directory.
func writePlan(t *testing.T, name, json string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte(json), 0o644))
	return p
}

const (
	// dropMiddle loses the first RDMA WRITE MIDDLE packet node 0 sends.
	dropMiddle = `{"seed": 7, "rules": [{"point": "wire.tx", "action": "drop", "nth": 1,
		"match": {"node": 0, "opcode": "RC_RDMA_WRITE_MIDDLE"}}]}`
	// dropFirstACK loses the first ACK node 1 sends.
	dropFirstACK = `{"seed": 1, "rules": [{"point": "wire.tx", "action": "drop", "nth": 1,
		"match": {"node": 1, "opcode": "RC_ACKNOWLEDGE"}}]}`
)

func TestFaultsCommand(t *testing.T) {
	good := writePlan(t, "good.json", dropMiddle)
	two := writePlan(t, "two.json", `{"seed": 3, "rules": [
		{"point": "wire.tx", "action": "drop", "nth": 3},
		{"point": "wire.rx", "action": "corrupt", "prob": 0.01, "count": 5}]}`)
	badPoint := writePlan(t, "bad-point.json", `{"seed": 1, "rules": [{"point": "wire.sideways", "action": "drop"}]}`)
	badField := writePlan(t, "bad-field.json", `{"seed": 1, "rules": [{"point": "wire.tx", "action": "drop", "nht": 3}]}`)
	notJSON := writePlan(t, "not.json", `seed = 1`)
	// 0 in nth, every, mask: the docs say >= 1 (1..255); it used to be
	// explained as "drop every frame".
	nthZero := writePlan(t, "nth0.json", `{"rules": [{"point": "wire.tx", "action": "drop", "nth": 0}]}`)
	everyZero := writePlan(t, "every0.json", `{"rules": [{"point": "wire.tx", "action": "drop", "every": 0}]}`)
	maskZero := writePlan(t, "mask0.json", `{"rules": [{"point": "wire.tx", "action": "corrupt", "mask": 0}]}`)
	tests := []struct {
		name       string
		args       []string
		code       int
		stdout     []string // substrings of stdout
		stderr     []string // substrings of stderr
		wantNoText bool     // stdout must stay empty
	}{
		{name: "explain", args: []string{"--explain", good}, code: 0,
			stdout: []string{"seed 7\n", "rule 0: wire.tx: drop", "RC_RDMA_WRITE_MIDDLE"}},
		{name: "explain two rules", args: []string{"-explain", two}, code: 0,
			stdout: []string{"seed 3\n", "rule 0: wire.tx", "rule 1: wire.rx"}},
		{name: "explain after the file", args: []string{good, "--explain"}, code: 0, stdout: []string{"rule 0: wire.tx: drop"}},
		{name: "check only", args: []string{two}, code: 0, stdout: []string{"valid fault plan, seed 3, 2 rules"}},
		{name: "check only, one rule", args: []string{good}, code: 0, stdout: []string{"valid fault plan, seed 7, 1 rule\n"}},
		{name: "help", args: []string{"--help"}, code: 0, stdout: []string{"usage: softnic faults", "-explain"}},
		{name: "unknown point", args: []string{"--explain", badPoint}, code: 1, stderr: []string{"softnic faults:", "wire.sideways"}, wantNoText: true},
		{name: "misspelt trigger", args: []string{"--explain", badField}, code: 1, stderr: []string{"softnic faults:", "nht"}, wantNoText: true},
		{name: "nth 0", args: []string{"--explain", nthZero}, code: 1, stderr: []string{"softnic faults:", "rule 0: nth 0: want nth >= 1"}, wantNoText: true},
		{name: "every 0", args: []string{"--explain", everyZero}, code: 1, stderr: []string{"softnic faults:", "rule 0: every 0: want every >= 1"}, wantNoText: true},
		{name: "mask 0", args: []string{"--explain", maskZero}, code: 1, stderr: []string{"softnic faults:", "rule 0: mask 0: want a mask of 1..255"}, wantNoText: true},
		{name: "not JSON", args: []string{"--explain", notJSON}, code: 1, stderr: []string{"softnic faults:"}, wantNoText: true},
		{name: "missing file", args: []string{"--explain", filepath.Join(t.TempDir(), "nope.json")}, code: 1,
			stderr: []string{"softnic faults:", "nope.json"}, wantNoText: true},
		{name: "no file", args: []string{"--explain"}, code: 2, stderr: []string{"usage: softnic faults"}, wantNoText: true},
		{name: "two files", args: []string{good, two}, code: 2, stderr: []string{"usage: softnic faults"}, wantNoText: true},
		{name: "unknown flag", args: []string{"--nope", good}, code: 2, stderr: []string{"softnic faults: flag provided but not defined: -nope\n"}, wantNoText: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			require.Equal(t, tc.code, run(append([]string{"faults"}, tc.args...), &out, &errb), "stdout %s\nstderr %s", out.String(), errb.String())
			for _, s := range tc.stdout {
				require.Contains(t, out.String(), s)
			}
			for _, s := range tc.stderr {
				require.Contains(t, errb.String(), s)
			}
			if tc.wantNoText {
				require.Empty(t, out.String())
			}
		})
	}
}

// --faults of the real-network commands loads the plan before anything
// else happens: a bad plan is an error naming the flag.
func TestRealNetFaultsFlag(t *testing.T) {
	bad := writePlan(t, "bad.json", `{"rules": [{"point": "pcie.nowhere", "action": "drop"}]}`)
	// On a real wire the NIC is node 0: dropFirstACK's node 1 could never
	// fire there, and is refused (it used to run without a word).
	node1 := writePlan(t, "node1.json", dropFirstACK)
	good := writePlan(t, "good.json", `{"seed": 1, "rules": [{"point": "wire.tx", "action": "drop", "nth": 1,
		"match": {"node": 0, "opcode": "RC_ACKNOWLEDGE"}}]}`)
	wire := "udp:127.0.0.1:0,127.0.0.1:9"
	tests := []struct {
		name   string
		argv   []string
		code   int
		stderr string
	}{
		{"rdma bad plan", []string{"rdma", "--wire", wire, "--ip", "192.0.2.1", "--faults", bad}, 1, "--faults: fault:"},
		{"rdma missing plan", []string{"rdma", "--wire", wire, "--ip", "192.0.2.1", "--faults", bad + ".missing"}, 1, "--faults: fault:"},
		{"rc_pingpong bad plan", []string{"rc_pingpong", "--wire", wire, "--ip", "192.0.2.1", "-g", "1", "--faults", bad}, 1, "--faults: fault:"},
		{"rdma plan for node 1", []string{"rdma", "--wire", wire, "--ip", "192.0.2.1", "--faults", node1}, 1, "match.node 1, but the NIC on a real wire is node 0"},
		{"rc_pingpong plan for node 1", []string{"rc_pingpong", "--wire", wire, "--ip", "192.0.2.1", "-g", "1", "--faults", node1}, 1, "the rule would never fire"},
		{"perf --wire plan for node 1", []string{"perf", "write_lat", "--wire", wire, "--ip", "192.0.2.1", "--faults", node1}, 1, "the rule would never fire"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			require.Equal(t, tc.code, run(tc.argv, &out, &errb), "stderr %s", errb.String())
			require.Contains(t, errb.String(), tc.stderr)
		})
	}

	// A good plan is explained on stderr and its rules show up in the
	// counters once they have seen traffic.
	r, _, stderr := newTestNet(t, netOpts{faults: good})
	require.Contains(t, stderr.String(), "softnic: fault plan "+good+": rule 0: wire.tx: drop")
	require.NotNil(t, r.Faults())
	o, err := parsePingpongArgs([]string{"--faults", good, "-g", "1"}, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, good, o.net.faults, "rc_pingpong has --faults")
}
