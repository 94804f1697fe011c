// Package wallclock paces virtual time against the wall clock, for
// emulated NICs whose Ethernet ports are on a real transport (udp: or tap:,
// through ethport) and for the daemon. It is the one package of softnic
// that may read the wall clock (besides cmd/ and tests): everything below
// it runs in virtual time only (DESIGN.md §4).
//
// Two levels. A Pacer runs one engine it is given against the wall clock
// and delivers the frames of any number of (port, transport) pairs; a
// multi-device user (the daemon) builds one per engine and drives it from
// a goroutine of its own (see Pacer). A Net is one NIC — host memory,
// device, port, provider context — on one real wire, with a Pacer of its
// own and the waits a command needs (PollCQ, Await, Idle, Resolve, Linger).
//
// Threads. One goroutine owns the engine, the devices, the ports and the
// providers (for a Net: the caller's; for a Pacer with a Locker: whoever
// holds the lock). A transport's reader goroutine only fills a queue;
// goroutines that block on stdin or TCP only hand their results over
// channels. Everything the simulation sees therefore happens in one order,
// as in the in-process testbed.
//
// Time policy. The virtual clock is tied to the wall clock since the pacer
// started (Pacer.Wall):
//   - it never lags: each pump runs the engine up to the wall clock
//     (sim.Engine.RunUntil), so timers (ARP retries, RNR waits, ACK
//     timeouts) measured in virtual time elapse in real time, and a frame
//     an idle pump wakes for is stamped at the wall time it arrived at.
//     Frames that queued up while nobody pumped (the caller was busy
//     elsewhere) are delivered first, at the engine's time when the pump
//     last looked, and only then do the timers that fell due meanwhile
//     run: a NIC takes a frame when it arrives, whatever its host does, so
//     an ACK that arrived in time is never beaten by the timeout it
//     answered. It lags by MaxLag (10 ms) at most: a stall longer than
//     that (the process stopped, or its goroutine away for seconds) does
//     not pass for the NIC, which stood still with its process and goes
//     on where it stopped; run through at once with the real wire frozen,
//     it made every ACK timeout due meanwhile fire in a burst, with no
//     retransmission answered in time (RETRY_EXC_ERR on a healthy link);
//   - it may run ahead by at most the lead (DefaultLead, 100 µs): events
//     due up to wall+lead run at once, later ones wait until the wall clock
//     catches up. The device's own latencies (ns to µs) fit in the lead, so
//     a message is processed without sleeping, while a 0.64 ms RNR timer or
//     a 333 ms ARP retry really takes about that long on the wire — a peer
//     such as rdma_rxe sees sane timing, never an RNR-NAK storm (rocev2.md
//     §5.4 #3).
//
// Waiting. When nothing is due and no frame is queued, a pump blocks on
// the receive queues until a frame arrives, the next event becomes due,
// Pacer.Wake is called or its wait (at most IdleWait, 1 ms) ends — it never
// spins for long (a short spin, while traffic flows, saves waking a parked
// goroutine). A Net's provider Poll of an empty CQ calls Progress
// (mlx5.Progressor), which is one pump; Progress returns false after an
// idle wait or when the poller's time slice is used up, so Poll returns 0
// and the caller's loop checks its own deadline and names what it was
// waiting for. Every wait of a Net has a timeout that ends in an error
// wrapping ErrTimeout, or ends with ErrTransportClosed.
package wallclock
