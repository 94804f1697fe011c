package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/softnic/softnic/fault"
)

func init() {
	register("faults", "check a fault plan (JSON) and explain it in words", runFaults)
}

const faultsHelp = `usage: softnic faults [--explain] FILE

Loads the fault plan FILE (the JSON that --faults of trace, perf, stat,
rdma and rc_pingpong takes) and checks it. With --explain it prints the plan in
words, one line per rule, and under each device-side rule what the device
will do when it fires (→ ...); without, one line saying it is valid. A bad
plan prints the error and exits 1. Points: wire.tx, wire.rx, pcie.tlp,
wc.buffer, dma.read, dma.write, doorbell, cq, eq, and the timed port and
device (docs/faults.md).

Flags:
`

func runFaults(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("faults", flag.ContinueOnError)
	explain := fs.Bool("explain", false, "print the plan in words")
	quietFlags(fs)
	if err := fs.Parse(args); err != nil {
		return flagFailed(fs, faultsHelp, err, stdout, stderr)
	}
	// Go's flag package stops at the first argument: accept the flag after
	// the file too (softnic faults FILE --explain).
	rest := fs.Args()
	if len(rest) == 2 && (rest[1] == "--explain" || rest[1] == "-explain") {
		*explain, rest = true, rest[:1]
	}
	if len(rest) != 1 {
		printUsage(fs, faultsHelp, stderr)
		return 2
	}
	p, err := loadPlan(rest[0])
	if err != nil {
		fmt.Fprintln(stderr, "softnic faults:", err)
		return 1
	}
	if *explain {
		fmt.Fprint(stdout, p.Explain())
		return 0
	}
	fmt.Fprintf(stdout, "%s: valid fault plan, seed %d, %d rule%s\n", rest[0], p.Seed, len(p.Rules), plural(len(p.Rules)))
	return 0
}

// loadFaults loads the plan named by a --faults flag ("" = none).
func loadFaults(path string) (*fault.Plan, error) {
	if path == "" {
		return nil, nil
	}
	p, err := loadPlan(path)
	if err != nil {
		return nil, fmt.Errorf("--faults: %w", err)
	}
	return p, nil
}

// loadPlan is fault.Load, with "-" for a plan on stdin (fault.LoadReader:
// as capped as a file).
func loadPlan(path string) (*fault.Plan, error) {
	if path != "-" {
		return fault.Load(path)
	}
	return fault.LoadReader(stdin, "(the plan on stdin)")
}
