package main

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/wallclock"
)

// daemonRT is a command's NIC when it is a device of the softnic serve
// daemon (provider.Dial): the daemon owns the device, its clock and its
// cable, and resolves a peer's MAC from its GID inside modify_qp, as the
// kernel does for RoCE. A poll that finds nothing has already asked the
// daemon to run to the next event this process can see; if there is none
// the other side is simply busy (it may be another process), so the wait
// backs off to short sleeps until the timeout.
type daemonRT struct {
	ctx *provider.Context
}

func openDaemonRT(name, socket string, memNeed int) (*daemonRT, error) {
	mem := max(32<<20, memNeed+16<<20)
	ctx, err := provider.Dial(name, provider.DialOptions{Socket: socket, MemSize: mem})
	if err != nil {
		return nil, fmt.Errorf("couldn't attach to %s on %s: %w", name, socket, err)
	}
	return &daemonRT{ctx: ctx}, nil
}

func (d *daemonRT) Context() *provider.Context { return d.ctx }

func (d *daemonRT) GID() [16]byte { return d.ctx.Attr().GID }

// Sync is a no-op: every post carries its host time to the daemon.
func (d *daemonRT) Sync() {}

// Resolve leaves the MAC to the daemon's neighbour table (zero: resolve).
func (d *daemonRT) Resolve(netip.Addr) ([6]byte, error) { return [6]byte{}, nil }

// Idle sleeps: the daemon's device needs nothing of this process.
func (d *daemonRT) Idle(t time.Duration) { time.Sleep(t) }

// pollBackoff is how long an empty poll of an idle device sleeps once
// spinPolls polls in a row found nothing.
const (
	spinPolls   = 64
	pollBackoff = 20 * time.Microsecond
)

func (d *daemonRT) PollCQ(cq *provider.CQ, wcs []provider.WC, timeout time.Duration, what func() string) (int, error) {
	start := time.Now()
	for i := 0; ; i++ {
		k, err := cq.Poll(wcs) // fails with provider.ErrDeviceGone once the daemon is gone
		if err != nil || k > 0 {
			return k, err
		}
		if time.Since(start) >= timeout {
			return 0, fmt.Errorf("%w after %v waiting for %s (counters: %s)", wallclock.ErrTimeout, timeout, what(), d.CounterLine())
		}
		if i >= spinPolls {
			time.Sleep(pollBackoff)
		}
	}
}

// CounterLine is the device's non-zero hardware counters, "name=value ...".
func (d *daemonRT) CounterLine() string {
	m, err := d.ctx.Counters()
	if err != nil {
		return "(" + err.Error() + ")"
	}
	var names []string
	for k, v := range m {
		if v != 0 {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	var b strings.Builder
	for i, k := range names {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%d", k, m[k])
	}
	return b.String()
}

func (d *daemonRT) Close() { d.ctx.Close() }
