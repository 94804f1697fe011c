package main

import (
	"errors"
	"io"
)

// perfWire is mode 2 (a real wire, stock perftest as the peer).
func perfWire(o perfOpts, stdout, stderr io.Writer) error {
	return errors.New("--wire: the real-wire mode is not in this build yet")
}
