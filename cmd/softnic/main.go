package main

import (
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"sort"
)

// command is one subcommand. It parses its own flags from args and returns
// the process exit status.
type command struct {
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

// commands is filled by init functions in this package's files, one file per
// subcommand (trace.go, decode.go, ...).
var commands = map[string]command{}

func register(name, summary string, run func(args []string, stdout, stderr io.Writer) int) {
	commands[name] = command{summary: summary, run: run}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: softnic <command> [flags]")
	fmt.Fprintln(w, "commands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	width := 0
	for _, n := range names {
		width = max(width, len(n))
	}
	for _, n := range names {
		fmt.Fprintf(w, "  %-*s  %s\n", width, n, commands[n].summary)
	}
}

// errWriter passes writes through and keeps the first error; once a write
// failed it drops the rest (a closed pipe or a full disk does not heal).
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	if err != nil {
		e.err = err
	}
	return n, err
}

// versionLine is what --version prints: the module version the binary was
// built from, or "devel" and the VCS revision (with "-dirty" for a modified
// tree) of a build from a checkout.
func versionLine() string {
	v := "devel"
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "softnic " + v
	}
	if mv := bi.Main.Version; mv != "" && mv != "(devel)" {
		return "softnic " + mv
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev != "" {
		v += " " + rev
		if dirty {
			v += "-dirty"
		}
	}
	return "softnic " + v
}

func runVersion(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] != "-h" && args[0] != "--help" {
		fmt.Fprintf(stderr, "softnic version: unexpected argument %q\n", args[0])
		return 2
	}
	fmt.Fprintln(stdout, versionLine())
	return 0
}

func init() {
	register("version", "print the version of softnic (also: softnic --version)", runVersion)
}

func main() {
	stop, err := startCPUProfile(os.Getenv(cpuProfileEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "softnic:", err)
		os.Exit(2)
	}
	code := run(os.Args[1:], os.Stdout, os.Stderr)
	if err := stop(); err != nil {
		fmt.Fprintln(os.Stderr, "softnic:", err)
		code = max(code, 1)
	}
	os.Exit(code)
}

// cpuProfileEnv names a file for a CPU profile of the whole command
// (go tool pprof reads it; docs/pgo.sh merges such profiles into
// default.pgo). Unset: no profile.
const cpuProfileEnv = "SOFTNIC_CPUPROFILE"

// startCPUProfile starts a CPU profile into path ("" for none) and returns
// what stops it and closes the file.
func startCPUProfile(path string) (func() error, error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("$%s: %w", cpuProfileEnv, err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("$%s: %w", cpuProfileEnv, err)
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}

// run dispatches to the subcommand. Every write to stdout is checked: a
// command whose output could not be written (stdout on a full disk, a
// closed pipe) fails with status 1 even if it did its work.
func run(args []string, stdout, stderr io.Writer) int {
	out := &errWriter{w: stdout}
	code := dispatch(args, out, stderr)
	if out.err != nil {
		fmt.Fprintln(stderr, "softnic: writing standard output:", out.err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

func dispatch(args []string, stdout, stderr io.Writer) int {
	if len(args) == 1 && (args[0] == "--version" || args[0] == "-version" || args[0] == "-V") {
		return runVersion(nil, stdout, stderr)
	}
	if len(args) == 0 {
		// No command is bad usage: the usage on stderr, exit 2.
		usage(stderr)
		return 2
	}
	if len(args) >= 2 && args[0] == "help" {
		c, ok := commands[args[1]]
		switch {
		case !ok:
			fmt.Fprintf(stderr, "softnic help: unknown command %q\n", args[1])
			usage(stderr)
			return 2
		case len(args) > 2:
			fmt.Fprintf(stderr, "softnic help: one command at a time (got %q)\n", args[1:])
			return 2
		}
		return c.run([]string{"--help"}, stdout, stderr) // softnic help perf
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		// Asked-for help is the command's output: on stdout, exit 0, as
		// every command's --help (docs/cli.md).
		usage(stdout)
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "softnic: unknown command %q\n", args[0])
		usage(stderr)
		return 2
	}
	return c.run(args[1:], stdout, stderr)
}
