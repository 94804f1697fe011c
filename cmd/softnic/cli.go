package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// The command-line conventions every command shares (docs/cli.md).

// parseCommand parses args with fs, flags anywhere among the positional
// arguments, with help (then the flag defaults) as the usage text. It
// returns the positional arguments, or ok false and the exit status: 0
// for --help, 2 for a bad flag.
func parseCommand(fs *flag.FlagSet, help string, args []string, stderr io.Writer) (pos []string, code int, ok bool) {
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, help)
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, 0, false
		}
		return nil, 2, false
	}
	return pos, 0, true
}

// noArgs refuses positional arguments for a command that takes none.
func noArgs(cmd string, pos []string, stderr io.Writer) bool {
	if len(pos) > 0 {
		fmt.Fprintf(stderr, "softnic %s: unexpected argument %q\n", cmd, pos[0])
		return false
	}
	return true
}

// intVar defines a size or count flag: decimal, 0x for hex, never octal
// (a leading 0 is a decimal digit), never negative.
func intVar(fs *flag.FlagSet, p *int, name string, def int, usage string) {
	*p = def
	fs.Var(sizeFlagInt(p), name, usage)
}
