//go:build !linux

package main

import "io"

// isTerminal is false where softnic cannot ask: no progress bar.
func isTerminal(io.Writer) bool { return false }
