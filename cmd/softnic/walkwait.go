package main

import (
	"errors"
	"fmt"

	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/testbed"
)

// waitSteps is how many simulation events a walk may take to complete
// beyond its own budget: testbed.Wait's three empty polls of the
// provider's progress budget (2^20 device steps each), rounded up.
const waitSteps = 4 << 20

// waitStepsPerPacket is the budget a walk adds per packet: a packet of a
// clean walk takes about three events end to end; the rest is room for
// retransmission under a fault plan.
const waitStepsPerPacket = 64

// waitWalk is testbed.Wait for a walk of packets packets, whatever its
// length. testbed.Wait gives up after three polls that found no CQE, each
// driving the device for at most the provider's progress budget, and
// calls that the simulation gone idle; a message of about 1 GiB at MTU
// 1024 (a million packets) outlasts that with every packet still on its
// way. waitWalk polls on while the simulation has events pending, until
// the walk's own budget of events (waitSteps + waitStepsPerPacket per
// packet) is spent: a walk that really stalls still ends, with
// testbed.ErrTimeout.
func waitWalk(w *testbed.World, cq *provider.CQ, n, packets int) ([]provider.WC, error) {
	limit := uint64(waitSteps) + uint64(waitStepsPerPacket)*uint64(max(packets, 0))
	start := w.Eng.Fired()
	var out []provider.WC
	for {
		wcs, err := testbed.Wait(cq, n-len(out))
		out = append(out, wcs...)
		switch {
		case !errors.Is(err, testbed.ErrTimeout):
			return out, err
		case w.Eng.Pending() == 0:
			return out, fmt.Errorf("%w: the simulation went idle", err)
		case w.Eng.Fired()-start > limit:
			return out, fmt.Errorf("%w: %d events run, %d still pending (the walk's budget is %d)", err, w.Eng.Fired()-start, w.Eng.Pending(), limit)
		}
	}
}

// walkPackets is how many packets a message of size bytes is at the path
// MTU, n times: one at least (a zero-byte message is one packet).
func walkPackets(size, mtu, n int) int {
	if mtu <= 0 {
		return n
	}
	return max((size+mtu-1)/mtu, 1) * n
}
