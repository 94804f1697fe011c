package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/softnic/softnic/profile"
	"github.com/softnic/softnic/provider"
)

// The command-line conventions every command shares (docs/cli.md).

// parseCommand parses args with fs, flags anywhere among the positional
// arguments, with help (then the flag defaults) as the usage text. It
// returns the positional arguments, or ok false and the exit status: 0
// for --help (the usage on stdout), 2 for a bad flag (one line on stderr,
// flagFailed).
func parseCommand(fs *flag.FlagSet, help string, args []string, stdout, stderr io.Writer) (pos []string, code int, ok bool) {
	quietFlags(fs)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return nil, flagFailed(fs, help, err, stdout, stderr), false
	}
	return pos, 0, true
}

// quietFlags makes the flag package print nothing of its own (not the
// error, not the usage after it, not the usage on -h): flagFailed
// reports both cases. A command that refuses its positional arguments
// prints the usage to stderr itself (printUsage).
func quietFlags(fs *flag.FlagSet) {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
}

// printUsage writes help and fs's flags with their defaults to w.
func printUsage(fs *flag.FlagSet, help string, w io.Writer) {
	fmt.Fprint(w, help)
	out := fs.Output()
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(out)
}

// helpError is flag.ErrHelp from a parser that returns its error to
// the command: it carries what prints the usage (on stdout).
type helpError struct{ usage func(w io.Writer) }

func (helpError) Error() string { return flag.ErrHelp.Error() }
func (helpError) Unwrap() error { return flag.ErrHelp }

// asHelp turns flag.ErrHelp from fs into a helpError that prints help and
// fs's flags; any other error is returned as it is.
func asHelp(fs *flag.FlagSet, help string, err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return helpError{func(w io.Writer) { printUsage(fs, help, w) }}
	}
	return err
}

// flagFailed ends a command whose flags did not parse (docs/cli.md):
// --help or -h prints the usage on stdout, exit 0; a bad flag is one
// line on stderr that names it ("softnic perf: invalid value "-1" for
// flag -s: ..."), exit 2, without the usage after it.
func flagFailed(fs *flag.FlagSet, help string, err error, stdout, stderr io.Writer) int {
	if errors.Is(err, flag.ErrHelp) {
		printUsage(fs, help, stdout)
		return 0
	}
	fmt.Fprintf(stderr, "softnic %s: %v\n", fs.Name(), err)
	return 2
}

// noArgs refuses positional arguments for a command that takes none.
func noArgs(cmd string, fs *flag.FlagSet, help string, pos []string, stderr io.Writer) bool {
	if len(pos) > 0 {
		unexpectedArg(cmd, fs, help, pos[0], stderr)
		return false
	}
	return true
}

// unexpectedArg reports a positional argument cmd does not take: one line
// that names it, then the usage (docs/cli.md), on stderr.
func unexpectedArg(cmd string, fs *flag.FlagSet, help, arg string, stderr io.Writer) {
	fmt.Fprintf(stderr, "softnic %s: unexpected argument %q\n", cmd, arg)
	printUsage(fs, help, stderr)
}

// intVar defines a size or count flag: decimal, 0x for hex, never octal
// (a leading 0 is a decimal digit), never negative.
func intVar(fs *flag.FlagSet, p *int, name string, def int, usage string) {
	*p = def
	fs.Var(sizeFlagInt(p), name, usage)
}

// stdin is what an input named "-" reads (a test puts its own here).
var stdin io.Reader = os.Stdin

// durationVar defines a duration flag (10s, 500ms, 1m30s) whose bad
// value says what a duration looks like: the flag package's own says
// only "parse error".
func durationVar(fs *flag.FlagSet, p *time.Duration, name string, def time.Duration, usage string) {
	*p = def
	fs.Var((*durationFlag)(p), name, usage)
}

type durationFlag time.Duration

func (d *durationFlag) String() string {
	if d == nil {
		return "0s"
	}
	return time.Duration(*d).String()
}

func (d *durationFlag) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration: a number and a unit, as 10s, 500ms or 1m30s", s)
	}
	*d = durationFlag(v)
	return nil
}

// validMTU says whether n is a path MTU of the IB spec (256, 512, 1024,
// 2048 or 4096 bytes); mtuError is the one message every command's MTU
// flag refuses any other value with.
func validMTU(n int) bool { return provider.MTUFromBytes(n) != 0 }

func mtuError(flag string, n int) error {
	return fmt.Errorf("%s %d is not one of 256, 512, 1024, 2048, 4096", flag, n)
}

// maxIters bounds every iteration count (perf -n, stat -n): 2^24 runs
// take seconds to minutes; more is a typo, not a workload.
const maxIters = 1 << 24

// usageError marks an error in a command's arguments found after parsing
// (a value the profile or the device refuses): exit 2, as a bad flag, not
// 1 as a run that failed.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// loadProfile is profile.Load for a --profile (or positional) argument: a
// name that is no built-in profile and no file is a bad argument
// (usageError, exit 2); a file that does not parse is bad input (exit 1).
func loadProfile(nameOrFile string) (profile.Profile, error) {
	p, err := profile.Load(nameOrFile)
	if errors.Is(err, profile.ErrNoSuchProfile) {
		return p, usageError{err}
	}
	return p, err
}

// exitCode is a command's exit status for err: 2 for a usageError, else 1.
func exitCode(err error) int {
	if errors.As(err, new(usageError)) {
		return 2
	}
	return 1
}

// flagGiven says whether the command line set flag name (fs parsed).
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// pathMTU is the path MTU a walk runs at: the --mtu given, or else the
// default cut to the port's active MTU when that is smaller (as perf does).
func pathMTU(mtu int, given bool, active int) int {
	if !given && active < mtu {
		return active
	}
	return mtu
}

// checkGivenMTU refuses a --mtu given above the profile's active MTU: the
// QP's move to RTR would fail on it (the path MTU is at most the port's),
// and the command can tell before anything runs.
func checkGivenMTU(mtu int, given bool, active int) error {
	if given && mtu > active {
		return fmt.Errorf("--mtu %d is above the port's active MTU %d (the profile's device.caps.active_mtu): a QP's path MTU is at most that", mtu, active)
	}
	return nil
}
