package wallclock

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/softnic/softnic/provider"
)

// resolveLimit bounds Resolve far beyond ethport's ARP budget: a safety
// net only.
const resolveLimit = 10 * time.Second

// PollCQ polls cq until it yields completions, driving the network while it
// is empty, for at most timeout (0: no limit). what names the awaited
// completion for the error.
func (n *Net) PollCQ(cq *provider.CQ, wcs []provider.WC, timeout time.Duration, what func() string) (int, error) {
	return n.PollCQSince(cq, wcs, time.Now(), timeout, what)
}

// PollCQSince is PollCQ for a wait that began at start (a command that
// polls several times shares one budget).
func (n *Net) PollCQSince(cq *provider.CQ, wcs []provider.WC, start time.Time, timeout time.Duration, what func() string) (int, error) {
	for {
		k, err := n.PollOnce(cq, wcs, start, timeout, what)
		if err != nil || k > 0 {
			return k, err
		}
	}
}

// PollOnce is one provider Poll of cq (driving the network for at most one
// time slice while it is empty); it may return 0. It fails once the wait
// that began at start has lasted timeout (0: no limit) or the transport
// closed.
func (n *Net) PollOnce(cq *provider.CQ, wcs []provider.WC, start time.Time, timeout time.Duration, what func() string) (int, error) {
	n.sliceEnd = time.Now().Add(pollSlice)
	k, err := cq.Poll(wcs)
	if err != nil || k > 0 {
		return k, err
	}
	if n.pp.Closed() && n.eng.Pending() == 0 {
		return 0, fmt.Errorf("waiting for %s: %w", what(), ErrTransportClosed)
	}
	if timeout > 0 && time.Since(start) >= timeout {
		return 0, fmt.Errorf("%w after %v waiting for %s (counters: %s)", ErrTimeout, timeout, what(), n.CounterLine())
	}
	return 0, nil
}

// PollNow is one provider Poll of cq that drives the network at most once
// while it is empty: what is already there, without waiting.
func (n *Net) PollNow(cq *provider.CQ, wcs []provider.WC) (int, error) {
	n.sliceEnd = time.Now()
	return cq.Poll(wcs)
}

// Advance is one round of the pacing loop for a caller with its own
// progress test (at most IdleWait of blocking); it returns
// ErrTransportClosed once the transport has closed and nothing is left to
// run.
func (n *Net) Advance() error {
	if n.pp.Closed() && n.eng.Pending() == 0 {
		return ErrTransportClosed
	}
	n.Pump(IdleWait, drainMax)
	return nil
}

// Await waits for a value on ch while driving the network (so that ARP
// requests are answered and frames processed while the caller blocks on
// stdin or TCP), for at most timeout (0: no limit). It ends in
// ErrTransportClosed once the transport has closed and nothing is left to
// run (Advance), so even a wait without a limit ends.
func Await[T any](n *Net, ch <-chan T, timeout time.Duration, what string) (T, error) {
	return AwaitWith(n.Advance, ch, timeout, what)
}

// AwaitWith is Await for a caller that drives its network itself: step
// runs between looks at ch, blocking for about IdleWait at most, and an
// error from it ends the wait.
func AwaitWith[T any](step func() error, ch <-chan T, timeout time.Duration, what string) (T, error) {
	start := time.Now()
	for {
		select {
		case v := <-ch:
			return v, nil
		default:
		}
		var zero T
		if timeout > 0 && time.Since(start) >= timeout {
			return zero, fmt.Errorf("%w after %v waiting for %s", ErrTimeout, timeout, what)
		}
		if err := step(); err != nil {
			return zero, fmt.Errorf("waiting for %s: %w", what, err)
		}
	}
}

// Idle drives the network for d (a sleep that keeps answering ARP and
// processing frames).
func (n *Net) Idle(d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); {
		n.Pump(min(IdleWait, time.Until(end)), drainMax)
	}
}

// Resolve finds the MAC of ip: a static neighbour, or ARP on the wire while
// the network is pumped (ethport's retry timers run in virtual time, which
// tracks the wall clock).
func (n *Net) Resolve(ip netip.Addr) ([6]byte, error) {
	res := n.port.Resolve(ip)
	deadline := time.Now().Add(resolveLimit)
	for !res.Done() {
		if n.pp.Closed() {
			return [6]byte{}, fmt.Errorf("resolving %v: %w", ip, ErrTransportClosed)
		}
		if time.Now().After(deadline) {
			return [6]byte{}, fmt.Errorf("resolving %v: %w", ip, ErrTimeout)
		}
		n.Pump(IdleWait, drainMax)
	}
	return res.MAC, res.Err
}

// Counter is one named counter.
type Counter struct {
	Name  string
	Value uint64
}

// Counters returns every non-zero counter of the device, the port, the
// transport and the fault plan's rules, sorted by name.
func (n *Net) Counters() []Counter {
	ms := []map[string]uint64{n.HWCounters(), n.port.Counters().Snapshot()}
	if n.tr != nil {
		ms = append(ms, n.tr.Stats().Map())
	}
	for _, st := range n.inj.Fired() {
		ms = append(ms, map[string]uint64{fmt.Sprintf("fault_rule%d_matched", st.Rule): st.Matched,
			fmt.Sprintf("fault_rule%d_fired", st.Rule): st.Fired})
	}
	return CountersOf(ms...)
}

// HWCounters are the device's hw counters (Linux hw_counter names for the
// transport, softnic's own for the rest), read through the provider as an
// application would (ibv_read_counters / rdma statistic), or from the
// device itself if the provider cannot.
func (n *Net) HWCounters() map[string]uint64 {
	if n.ctx != nil {
		if m, err := n.ctx.Counters(); err == nil {
			return m
		}
	}
	return n.dev.HWCounters()
}

// CounterLine formats Counters as "name=value ..." on one line.
func (n *Net) CounterLine() string { return FormatCounters(n.Counters()) }

// CountersOf is the non-zero counters of ms, sorted by name.
func CountersOf(ms ...map[string]uint64) []Counter {
	var out []Counter
	for _, m := range ms {
		for k, v := range m {
			if v != 0 {
				out = append(out, Counter{k, v})
			}
		}
	}
	slices.SortFunc(out, func(a, b Counter) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// FormatCounters writes cs as "name=value ..." on one line (what
// CounterLine prints, for counters of another source); "(none non-zero)"
// for none.
func FormatCounters(cs []Counter) string {
	if len(cs) == 0 {
		return "(none non-zero)"
	}
	var b strings.Builder
	for i, c := range cs {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%d", c.Name, c.Value)
	}
	return b.String()
}
