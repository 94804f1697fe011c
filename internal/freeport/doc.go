// Package freeport hands tests loopback TCP and UDP ports that are free
// when picked and never handed out twice in one process.
//
// It follows the Linux rule for bind(2) to port 0: the kernel picks an
// unused port, but a port released a moment ago may be picked again, so
// two picks in a row can name the same port. Ports already handed out are
// skipped. A test that also listens on port 0 itself must pick after its
// listener is open, so the kernel cannot hand it the picked port.
package freeport
