package testbed

import (
	"github.com/softnic/softnic/device"
	"github.com/softnic/softnic/host"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/sim"
)

// Host clocks (Config.HostClocks): each host of a two-host world runs on
// its own CPU clock, as two machines do, instead of both on the engine's.
//
// On the engine's clock (the default) the hosts' CPU time is one time: a
// client posting a burst of 256 sends advances the one clock by the whole
// burst, the device events due meanwhile run, and the server's CPU, which
// on its own machine would be polling and reposting receives all the
// while, does nothing until the client's call returns. A UD server with a
// shallow receive queue then lost datagrams that two machines deliver
// (send_bw -c UD -s 64 -q 2 -r 64 -n 3000: 10 of 6000; -q 4: 938 of
// 12000).
//
// With host clocks the world is a conservative co-simulation of the two
// CPUs and the engine, one thread still, every decision on virtual times
// only (deterministic):
//   - a host's clock moves with its own work (Advance) only; the engine
//     runs no further than the clock of any host that is working, so a
//     host that works ahead of the other does not run the device past the
//     time the other could act;
//   - a host whose poll finds its CQ empty is waiting: its CPU spins, its
//     clock follows the engine, and it holds nothing back; its poll runs
//     the engine, event by event, no further than the clocks of the hosts
//     that are working, and gives up (no progress, its clock at theirs)
//     when the next event lies beyond them, so that they act first;
//   - a CQE that lands on a waiting host's device wakes it at that time:
//     from then on it is working there, and the engine waits for it;
//   - a host blocked in a provider wait (GetCQEvent, GetAsyncEvent:
//     ProgressBlocked) is waiting too, but unlike a poll it does not give
//     up for the working hosts: in this one-thread program they cannot
//     act until its wait returns, so they are waiting as well (their
//     clocks follow the engine's, each woken again by a CQE that lands on
//     its device), and the engine runs on; the wait ends with its event,
//     its virtual deadline, or an idle world.
//
// The host a burst's call runs on posts ahead of the engine (its stores
// are stamped with its own time and reach the device then); what it writes
// to its memory meanwhile (WQEs, doorbell records) is visible to the
// device up to that call's length early. Assumption: that is closer to two
// machines than one CPU time.
type hostClocks struct {
	eng    *sim.Engine
	clocks []*hostClock
}

// hostClock is one host's CPU clock (host.Clock).
type hostClock struct {
	all     *hostClocks
	dev     *device.Device
	now     sim.Time
	waiting bool   // the host's last act was an empty poll
	landed  uint64 // dev.CQEsLanded() when it started waiting
}

var _ host.Clock = (*hostClock)(nil)

// Now is the host's time. It is never behind the engine's: a waiting
// host's follows it, and a working host's is behind it only after the
// engine ran by other means than the hosts' (World.Settle, Drain, an MMIO
// read), while the host did nothing.
func (c *hostClock) Now() sim.Time {
	c.now = max(c.now, c.all.eng.Now())
	return c.now
}

// Advance spends d of the host's time: the host is working, and the engine
// runs as far as every working host allows.
func (c *hostClock) Advance(d sim.Duration) {
	c.now = c.Now().Add(d)
	c.waiting = false
	c.all.run(c.all.limit(nil))
}

// At schedules a host timer (the WC buffer's self-drain) on the engine.
func (c *hostClock) At(t sim.Time, h sim.Handler) { c.all.eng.At(t, h) }

// wait marks the host waiting (its poll found nothing), its clock at the
// engine's if that is later.
func (c *hostClock) wait() {
	if !c.waiting {
		c.now = max(c.now, c.all.eng.Now())
		c.waiting, c.landed = true, c.dev.CQEsLanded()
	}
}

// limit is the earliest clock of the working hosts other than except
// (sim.Never: none).
func (a *hostClocks) limit(except *hostClock) sim.Time {
	lim := sim.Never
	for _, c := range a.clocks {
		if c != except && !c.waiting {
			lim = min(lim, c.now)
		}
	}
	return lim
}

// run runs the engine's events due by lim, one at a time, each waiting
// host whose device has landed a CQE since it started waiting woken (and
// lim brought down to its time), then moves the engine's clock to lim.
func (a *hostClocks) run(lim sim.Time) {
	for {
		if next := a.eng.Next(); next == sim.Never || next > lim {
			break
		}
		a.eng.Step()
		lim = min(lim, a.wake())
	}
	if lim != sim.Never {
		a.eng.RunUntil(lim)
	}
}

// wake wakes the waiting hosts a landed CQE concerns and returns the
// earliest clock of those it woke (sim.Never: none).
func (a *hostClocks) wake() sim.Time {
	lim := sim.Never
	for _, c := range a.clocks {
		if c.waiting && c.dev.CQEsLanded() != c.landed {
			c.now = max(c.now, a.eng.Now())
			c.waiting = false
			lim = min(lim, c.now)
		}
	}
	return lim
}

// idle marks every host waiting: the world moved on (World.Step) because
// no host could, so each was spinning.
func (a *hostClocks) idle() {
	for _, c := range a.clocks {
		c.wait()
	}
}

// clockedDevice is a host's device as its provider context sees it with
// host clocks: an empty poll's drive (Progress) is the host's wait.
// Embedding the device keeps every other interface the provider asks the
// control for.
type clockedDevice struct {
	*device.Device
	clk *hostClock
}

// Progress runs the engine's next event for a host whose poll found its CQ
// empty, unless a working host's clock comes first: then the host's clock
// moves to that one's and nothing runs (false), so that it acts first.
func (x clockedDevice) Progress() bool {
	c := x.clk
	c.wait()
	a := c.all
	lim := a.limit(c)
	if next := a.eng.Next(); next != sim.Never && next > lim {
		c.now = max(c.now, lim)
		return false
	}
	// The next event, or with none the device's own sweep (an RQ in ERR
	// with WQEs posted since: flushed), which may land CQEs too.
	ok := x.Device.Progress()
	a.wake()
	return ok
}

// ProgressBlocked is Progress for a host blocked in a provider wait
// (mlx5.BlockingProgressor): when a working host's clock comes before the
// next event, that host cannot act before the wait returns (one thread),
// so every other host is marked waiting and the event runs. False only
// when nothing is scheduled and the device's sweep found nothing.
func (x clockedDevice) ProgressBlocked() bool {
	c := x.clk
	c.wait()
	a := c.all
	if next := a.eng.Next(); next != sim.Never && next > a.limit(c) {
		for _, o := range a.clocks {
			o.wait()
		}
	}
	ok := x.Device.Progress()
	a.wake()
	return ok
}

var _ mlx5.BlockingProgressor = clockedDevice{}
