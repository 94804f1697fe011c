package main

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/wallclock"
)

// ctxNet is what a command's NIC is when nothing in this process has to
// drive it: a device of the softnic serve daemon (daemonRT) or a kernel
// device (kernelNet). The device resolves a peer's MAC from its GID
// inside modify_qp, as the kernel does for RoCE; posts need no sync; a
// wait is a sleep.
type ctxNet struct {
	ctx *provider.Context
	// An empty poll sleeps nap once spins polls in a row found nothing.
	spins int
	nap   time.Duration
}

func (n ctxNet) Context() *provider.Context { return n.ctx }

// Sync is a no-op: the device moves by itself (or each post carries its
// host time to the daemon).
func (n ctxNet) Sync() {}

// Resolve leaves the MAC to the device (zero: resolve it in modify_qp).
func (n ctxNet) Resolve(netip.Addr) ([6]byte, error) { return [6]byte{}, nil }

// Idle sleeps: the device needs nothing of this process.
func (n ctxNet) Idle(t time.Duration) { time.Sleep(t) }

func (n ctxNet) Close() { _ = n.ctx.Close() }

// pollCQ polls cq until it yields completions, for at most timeout (0:
// no limit); counters names the device's counters for the timeout's
// error. On a daemon's device a poll that finds nothing has already asked
// the daemon to run to the next event this process can see, and fails
// with provider.ErrDeviceGone once the daemon is gone.
func (n ctxNet) pollCQ(cq *provider.CQ, wcs []provider.WC, timeout time.Duration, what func() string, counters func() string) (int, error) {
	start := time.Now()
	for i := 0; ; i++ {
		k, err := cq.Poll(wcs)
		if err != nil || k > 0 {
			return k, err
		}
		if timeout > 0 && time.Since(start) >= timeout {
			return 0, fmt.Errorf("%w after %v waiting for %s (counters: %s)", wallclock.ErrTimeout, timeout, what(), counters())
		}
		if i >= n.spins {
			time.Sleep(n.nap)
		}
	}
}

// daemonRT is a command's NIC when it is a device of the softnic serve
// daemon (provider.Dial): the daemon owns the device, its clock and its
// cable.
type daemonRT struct{ ctxNet }

func openDaemonRT(name, socket string, memNeed int) (*daemonRT, error) {
	mem := max(32<<20, memNeed+16<<20)
	ctx, err := provider.Dial(name, provider.DialOptions{Socket: socket, MemSize: mem})
	if err != nil {
		return nil, fmt.Errorf("couldn't attach to %s on %s: %w", name, socket, err)
	}
	// Each empty poll is a round trip to the daemon: spin briefly, then
	// leave the cores to the other processes.
	return &daemonRT{ctxNet{ctx: ctx, spins: 64, nap: 20 * time.Microsecond}}, nil
}

func (d *daemonRT) GID() [16]byte { return d.ctx.Attr().GID }

func (d *daemonRT) PollCQ(cq *provider.CQ, wcs []provider.WC, timeout time.Duration, what func() string) (int, error) {
	return d.pollCQ(cq, wcs, timeout, what, d.CounterLine)
}

// Gone is the provider's ErrDeviceGone error once the daemon has gone
// (died, stopped, or closed the connection), else nil: a completion in
// error after that is the flush of the lost device, and the daemon's loss
// is what to report.
func (d *daemonRT) Gone() error {
	if _, err := d.ctx.Counters(); errors.Is(err, provider.ErrDeviceGone) {
		return err
	}
	return nil
}

// CounterLine is the device's non-zero hardware counters.
func (d *daemonRT) CounterLine() string {
	m, err := d.ctx.Counters()
	if err != nil {
		return "(" + err.Error() + ")"
	}
	return wallclock.FormatCounters(wallclock.CountersOf(m))
}
