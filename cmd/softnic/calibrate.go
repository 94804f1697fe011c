package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/softnic/softnic/calibrate"
)

func init() {
	register("calibrate", "measure the model against the published anchors and write docs/calibration.md", runCalibrate)
}

const calibrateHelp = `usage: softnic calibrate [-o FILE]

Measures every profile against the anchors of timing.md (the PCIe
equations, DMA read latency against size, Kalia's MMIO and DMA-read rates,
the BlueFlame and doorbell-batching bounds, the perftest 2 B RC half round
trip, the BlueFlame saving) and writes the tables as markdown: the
published figure, softnic's, the error and the tolerance. Everything is
virtual time, so the output is the same on every machine. Exits 1 if a row
is outside its tolerance.

Flags:
`

func runCalibrate(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("calibrate", flag.ContinueOnError)
	out := fs.String("o", "-", "output file (- is stdout), e.g. docs/calibration.md")
	pos, code, ok := parseCommand(fs, calibrateHelp, args, stdout, stderr)
	if !ok {
		return code
	}
	if !noArgs("calibrate", fs, calibrateHelp, pos, stderr) {
		return 2
	}
	ts, err := calibrate.All()
	if err != nil {
		fmt.Fprintln(stderr, "softnic calibrate:", err)
		return 1
	}
	w := stdout
	var f *os.File
	var fw *errWriter // keeps the first write error to the file
	if *out != "-" {
		if f, err = os.Create(*out); err != nil {
			fmt.Fprintln(stderr, "softnic calibrate:", err)
			return 1
		}
		fw = &errWriter{w: f}
		w = fw
	}
	if err := calibrate.Markdown(w, ts); err != nil {
		fmt.Fprintln(stderr, "softnic calibrate:", err)
		return 1
	}
	if f != nil {
		werr := fw.err
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			fmt.Fprintln(stderr, "softnic calibrate:", werr)
			return 1
		}
	}
	bad := 0
	for _, t := range ts {
		for _, r := range t.Rows {
			if !r.OK() {
				fmt.Fprintf(stderr, "softnic calibrate: %s, %s: %s %.4g %s, %+.2f%% outside %.1f%%\n", t.Profile, t.Anchor, r.Quantity, r.Model, r.Unit, 100*r.Err(), 100*r.Tol())
				bad++
			}
		}
	}
	if bad > 0 {
		return 1
	}
	return 0
}
