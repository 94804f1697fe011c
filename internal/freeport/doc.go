// Package freeport hands tests loopback TCP and UDP ports that are free
// when picked and never handed out twice in one process.
//
// It follows the Linux rule for bind(2) to port 0: the kernel picks an
// unused port, but a port released a moment ago may be picked again, so
// two picks in a row (or a pick and a later listener on port 0) can name
// the same port. Ports already handed out are skipped.
package freeport
