package main

import (
	"bytes"
	"github.com/softnic/softnic/fault"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestUsageErrorsExit2: a bad flag value or a combination that cannot
// run is a usage error, found before anything runs: a one-line error on
// stderr that names the flag, exit 2; never a run that fails later with
// the provider's or the device's refusal (exit 1), and never a daemon that
// starts with another configuration than the one asked for.
func TestUsageErrorsExit2(t *testing.T) {
	t.Setenv("SOFTNIC_SOCKET", "")
	sock := filepath.Join(t.TempDir(), "s")
	wire := "udp:127.0.0.1:1,127.0.0.1:2"
	for _, c := range []struct {
		name string
		args []string
		code int
		err  string // on stderr
	}{
		{"trace --inline on a READ", []string{"trace", "--op", "read", "--inline"}, 2, "--inline: an RDMA READ carries no inline data"},
		{"trace --inline larger than the QP takes", []string{"trace", "--inline", "--size", "513"}, 2, "--inline --size 513: the QP's max inline data is 512 bytes"},
		{"trace --inline UD larger than the QP takes", []string{"trace", "--op", "ud_send", "--inline", "--size", "600"}, 2, "--inline --size 600"},
		{"trace --inline at the QP's limit", []string{"trace", "--inline", "--size", "512"}, 0, ""},
		{"devinfo -i 0", []string{"devinfo", "-i", "0"}, 2, "-i 0: ports count from 1"},
		{"devinfo --ib-port 0", []string{"devinfo", "--ib-port", "0"}, 2, "-i 0"},
		{"devinfo -i 1", []string{"devinfo", "-i", "1"}, 0, ""},
		{"serve --devices below the wires", []string{"serve", "--socket", sock, "--devices", "1", "--wire", wire, "--wire", "udp:127.0.0.1:3,127.0.0.1:4"}, 2, "--devices 1 but 2 --wire"},
		{"perf write_lat --outs out of any range", []string{"perf", "write_lat", "-n", "5", "--outs", "99999999999"}, 0, ""},
		{"perf send_bw -o 300", []string{"perf", "send_bw", "-n", "5", "-o", "300"}, 0, ""},
		{"rc_pingpong -s 0", []string{"rc_pingpong", "--wire", wire, "--ip", "192.0.2.1", "-s", "0"}, 2, "-s 0 out of range"},
		{"rc_pingpong -o", []string{"rc_pingpong", "--wire", wire, "--ip", "192.0.2.1", "-o"}, 2, "-o (on demand paging) is not supported"},
		{"rc_pingpong without a device", []string{"rc_pingpong", "-g", "1"}, 2, "no device: give --wire"},
		{"rdma --mtu 1500", []string{"rdma", "--wire", wire, "--ip", "192.0.2.1", "--mtu", "1500"}, 2, "--mtu 1500 is not one of"},
		{"rdma without --wire", []string{"rdma"}, 2, "--wire is required"},
		{"rdma --remote-qpn 0", []string{"rdma", "--wire", wire, "--ip", "192.0.2.1", "--remote-ip", "192.0.2.2", "--remote-qpn", "0"}, 2, "--remote-qpn 0: QPN 0 is reserved"},
		{"rdma bad --wire", []string{"rdma", "--wire", "udp:x", "--ip", "192.0.2.1"}, 2, "udp needs LISTEN,PEER"},
		{"rdma bad --ip", []string{"rdma", "--wire", wire, "--ip", "1.2.3"}, 2, `--ip "1.2.3"`},
		{"rdma negative --lead", []string{"rdma", "--wire", wire, "--ip", "192.0.2.1", "--lead", "-5s"}, 2, "--lead -5s is negative"},
		{"rc_pingpong bad --wire", []string{"rc_pingpong", "--wire", "nope", "--ip", "192.0.2.1", "-g", "1"}, 2, `bad wire spec: "nope"`},
		{"perf --wire without --ip", []string{"perf", "write_lat", "--wire", wire}, 2, "--ip"},
		{"perf --pcap in one process", []string{"perf", "write_lat", "-n", "5", "--pcap", filepath.Join(t.TempDir(), "x.pcap")}, 2, "--pcap describes the emulated NIC on a real wire: give --wire"},
		{"perf --ip and --lead in one process", []string{"perf", "write_bw", "-n", "5", "--ip", "192.0.2.1", "--lead", "1ms"}, 2, "--ip, --lead describe"},
		{"trace --profile of no profile and no file", []string{"trace", "--profile", "nosuch"}, 2, "profile nosuch: no such profile"},
		{"perf --profile of no profile and no file", []string{"perf", "write_bw", "-n", "5", "--profile", "nosuch"}, 2, "no such profile"},
		{"stat --profile of no profile and no file", []string{"stat", "--profile", "nosuch"}, 2, "no such profile"},
		{"devinfo --profile of a missing file", []string{"devinfo", "--profile", filepath.Join(t.TempDir(), "none.json")}, 2, "no such file"},
		{"profiles of no profile and no file", []string{"profiles", "nosuch"}, 2, "no such profile"},
		{"perf --quiet in one process", []string{"perf", "write_lat", "-n", "5", "--quiet"}, 0, ""},
		{"rdma --pcap -", []string{"rdma", "--wire", wire, "--ip", "192.0.2.1", "--pcap", "-"}, 2, "--pcap -: stdout carries the command's output"},
		{"rc_pingpong --pcap -", []string{"rc_pingpong", "--wire", wire, "--ip", "192.0.2.1", "-g", "1", "--pcap", "-"}, 2, "--pcap -: stdout carries"},
		{"perf --wire --pcap -", []string{"perf", "write_lat", "--wire", wire, "--ip", "192.0.2.1", "--pcap", "-"}, 2, "--pcap -: stdout carries"},
		// An empty host ("$HOST" unset) is not "no host": it made a
		// would-be client a server waiting 30 × --timeout for a client.
		{"perf with an empty host", []string{"perf", "write_lat", "--wire", wire, "--ip", "192.0.2.1", ""}, 2, "an empty host argument"},
		{"perf with an empty host after --", []string{"perf", "write_lat", "--wire", wire, "--ip", "192.0.2.1", "--", ""}, 2, "an empty host argument"},
		{"rc_pingpong with an empty host", []string{"rc_pingpong", "--wire", wire, "--ip", "192.0.2.1", "-g", "1", ""}, 2, "an empty host argument"},
		{"rc_pingpong with two empty hosts", []string{"rc_pingpong", "--wire", wire, "--ip", "192.0.2.1", "-g", "1", "", ""}, 2, "an empty host argument"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			done := make(chan int, 1)
			go func() { done <- run(c.args, &stdout, &stderr) }()
			var code int
			select {
			case code = <-done:
			case <-time.After(20 * time.Second):
				t.Fatalf("%q still running after 20 s", c.args)
			}
			if code != c.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, c.code, stderr.String())
			}
			if c.err != "" && !strings.Contains(stderr.String(), c.err) {
				t.Errorf("stderr lacks %q:\n%s", c.err, stderr.String())
			}
			if strings.Contains(stderr.String(), "goroutine ") || strings.Contains(stderr.String(), "panic") {
				t.Errorf("a panic:\n%s", stderr.String())
			}
		})
	}
}

// TestBadFlagIsOneLine: a flag the command does not have, or a bad value,
// is one line on stderr naming it, exit 2, nothing on stdout (the flag
// package used to print its own line and then the whole usage, over a
// hundred lines for perf; perf, rc_pingpong and rdma then said it again).
func TestBadFlagIsOneLine(t *testing.T) {
	for name := range commands {
		if name == "version" {
			continue // takes no flags: any argument is unexpected
		}
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			require := func(cond bool, what string) {
				t.Helper()
				if !cond {
					t.Fatalf("%s: stdout %q stderr %q", what, stdout.String(), stderr.String())
				}
			}
			code := run([]string{name, "--no-such-flag"}, &stdout, &stderr)
			require(code == 2, "exit "+strconv.Itoa(code))
			require(stderr.String() == "softnic "+name+": flag provided but not defined: -no-such-flag\n", "one line naming the flag")
			require(stdout.Len() == 0, "nothing on stdout")
		})
	}
	for _, c := range []struct {
		args []string
		line string
	}{
		{[]string{"perf", "write_lat", "-s", "-1"}, `softnic perf: invalid value "-1" for flag -s: "-1" is not a 63-bit decimal number`},
		{[]string{"trace", "--size", "x"}, `softnic trace: invalid value "x" for flag -size: "x" is not a 63-bit decimal number`},
		{[]string{"rc_pingpong", "-n", "0x"}, `softnic rc_pingpong: invalid value "0x" for flag -n:`},
		{[]string{"rdma", "--mtu", "-5"}, `softnic rdma: invalid value "-5" for flag -mtu:`},
		{[]string{"stat", "-n", "99999999999999999999"}, `softnic stat: invalid value "99999999999999999999" for flag -n: "99999999999999999999" does not fit in 63 bits`},
		{[]string{"serve", "--devices", "two"}, `softnic serve: invalid value "two" for flag -devices:`},
		{[]string{"perf", "write_lat", "--timeout", "10"}, `softnic perf: invalid value "10" for flag -timeout: "10" is not a duration: a number and a unit, as 10s, 500ms or 1m30s`},
		{[]string{"rc_pingpong", "--timeout", "x"}, `softnic rc_pingpong: invalid value "x" for flag -timeout: "x" is not a duration`},
		{[]string{"serve", "--lead", "1"}, `softnic serve: invalid value "1" for flag -lead: "1" is not a duration`},
		{[]string{"rdma", "--lead", "fast"}, `softnic rdma: invalid value "fast" for flag -lead: "fast" is not a duration`},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(c.args, &stdout, &stderr); code != 2 {
				t.Fatalf("exit %d, want 2: %s", code, stderr.String())
			}
			if strings.Count(stderr.String(), "\n") != 1 || !strings.HasPrefix(stderr.String(), c.line) {
				t.Errorf("stderr %q, want one line starting %q", stderr.String(), c.line)
			}
		})
	}
}

// TestInputDash: an input file named - is stdin, as decode's capture
// always was: view's walk (or its --compare, not both), faults' plan and
// --faults. (They used to open a file named "-".)
func TestInputDash(t *testing.T) {
	const plan = `{"seed": 9, "rules": [{"point": "wire.tx", "action": "drop", "nth": 1}]}`
	var walk bytes.Buffer
	if code := run([]string{"trace", "--json"}, &walk, io.Discard); code != 0 {
		t.Fatal("trace --json failed")
	}
	for _, c := range []struct {
		name, in string
		args     []string
		code     int
		out, err string
	}{
		{"faults -", plan, []string{"faults", "-"}, 0, "-: valid fault plan, seed 9, 1 rule\n", ""},
		{"faults --explain -", plan, []string{"faults", "--explain", "-"}, 0, "rule 0: wire.tx: drop the 1st frame", ""},
		{"faults - garbage", "nope", []string{"faults", "-"}, 1, "", "(the plan on stdin)"},
		// A plan on stdin is capped as a file is (fault.MaxPlanSize): a
		// runaway generator ends in an error, not in reading for ever.
		{"faults - too large", strings.Repeat(" ", fault.MaxPlanSize+1), []string{"faults", "-"}, 1, "", "plan file too large"},
		// rdma's stdin is its command stream: a plan there would swallow
		// the commands, or wait for an end of input that never comes.
		{"rdma --faults -", plan, []string{"rdma", "--wire", "udp:127.0.0.1:9,127.0.0.1:9", "--ip", "10.0.0.1", "--faults", "-"}, 2, "", "stdin carries the command's input"},
		{"trace --faults -", plan, []string{"trace", "--faults", "-"}, 0, "fault plan -:", ""},
		{"view -", walk.String(), []string{"view", "-", "-o", "-"}, 0, "<!DOCTYPE html>", ""},
		{"view --compare -", walk.String(), []string{"view", writeTemp(t, walk.Bytes()), "--compare", "-", "-o", "-"}, 0, "<!DOCTYPE html>", ""},
		{"view - --compare -", walk.String(), []string{"view", "-", "--compare", "-"}, 2, "", "cannot both be -"},
		{"view - empty", "", []string{"view", "-", "-o", "-"}, 1, "", "softnic view: -:"},
	} {
		t.Run(c.name, func(t *testing.T) {
			old := stdin
			stdin = strings.NewReader(c.in)
			defer func() { stdin = old }()
			var stdout, stderr bytes.Buffer
			if code := run(c.args, &stdout, &stderr); code != c.code {
				t.Fatalf("exit %d, want %d: %s", code, c.code, stderr.String())
			}
			if !strings.Contains(stdout.String(), c.out) {
				t.Errorf("stdout lacks %q:\n%.400s", c.out, stdout.String())
			}
			if !strings.Contains(stderr.String(), c.err) {
				t.Errorf("stderr lacks %q:\n%s", c.err, stderr.String())
			}
		})
	}
}

func writeTemp(t *testing.T, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "walk.json")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
