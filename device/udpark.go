package device

import (
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/trace"
)

// A UD datagram that finds no receive WQE on chip makes the device read
// the RQ's doorbell record, and is dropped if the host has posted nothing
// more (UD has no RNR). The device handles a frame when it arrives, but a
// QP whose receive pipeline is busy processes it later, at t, and a DMA
// read samples host memory when it is called (dma.Engine.Read): read at
// arrival, the record would show the receives posted before the datagram
// arrived, not before the pipeline got to it. A QP behind the wire then
// dropped datagrams for want of WQEs the host had long reposted (send_bw
// -c UD -s 64 -r 64: 4808 of 5000, the QP 2 ms behind the wire at the
// end, each drop's record read holding the pipeline 0.53 µs). So such a
// datagram waits, parked, until the engine reaches t, and is taken then;
// the QP's later frames queue behind it in order. An RC or UC SEND that
// opens a message waits the same way (rxSend): answered RNR NAK (or, UC,
// dropped) on the record as it was at arrival, send_bw -s 64 -r 64 drew
// 13 RNR NAKs, every one for a receive the host had reposted before the
// receive stage ran, and ran at 2.0 Mpps instead of 12.8 (-r 16: 649 of
// 651, 0.047 Mpps instead of 0.53). Re-run from the top of responder.rx
// once the engine gets there, the SEND finds the QP as it left it (it
// parked before changing anything), so PSN order and the ACK/NAK rules
// hold; the QP's later packets, requests and responses, wait behind it.
type rxPark struct {
	// q[head:] wait, in order. drain consumes from head rather than
	// shifting the rest down (and a datagram that parks again in front
	// takes the slot it left): shifting every waiting frame at each one
	// that went on cost a flood of 64-byte datagrams at a QP with no
	// receive, 1 MiB of them parked, 40 µs of copying per datagram.
	q      []rxParked
	head   int
	bytes  int // of the frames waiting
	timer  *sim.Timer
	pkt    roce.Packet
	frames [][]byte // buffers of parked frames that went on, for reuse
}

// rxParked is one frame waiting: took means its packet has been through
// the QP's receive stage (arrive and t are rxUD's); otherwise t is when
// it reached the QP (process's).
type rxParked struct {
	frame     []byte
	arrive, t sim.Time
	took      bool // waits until the engine reaches t; otherwise goes on at once
}

type rxParkTimer struct{ r *responder }

func (u rxParkTimer) Fire(now sim.Time) { u.r.drain(now) }

// parked reports whether frames of the QP wait behind a parked datagram.
func (r *responder) parked() bool { return r.ud != nil && len(r.ud.q) > r.ud.head }

// park is the QP's parking, made on first use: a QP that never parks a
// packet carries only the pointer.
func (r *responder) park() *rxPark {
	if r.ud == nil {
		r.ud = &rxPark{}
	}
	return r.ud
}

// mustWait reports whether a packet (a UD datagram, an RC or UC SEND that
// opens a message) whose receive stage runs at t must wait for the engine
// to get there: the device knows of no posted WQE, so
// take would read the doorbell record, and t is still ahead.
func (r *responder) mustWait(t sim.Time) bool {
	return t > r.q.d.eng.Now() && r.q.rq.noneKnown()
}

func (r *responder) copyFrame(f []byte) []byte {
	var b []byte
	u := r.park()
	if n := len(u.frames); n > 0 {
		b, u.frames = u.frames[n-1][:0], u.frames[:n-1]
	}
	return append(b, f...)
}

// parkFront parks the datagram being received (Device.rxFrame), whose
// receive stage ran from arrive to t, ahead of any parked behind it, until
// the engine reaches t.
func (r *responder) parkFront(arrive, t sim.Time) {
	d := r.q.d
	e := rxParked{frame: r.copyFrame(d.rxFrame), arrive: arrive, t: t, took: true}
	u := r.ud
	if u.head > 0 { // drain took the one before: its slot is free
		u.head--
		u.q[u.head] = e
	} else { // nothing is parked (a queue drain has emptied is reset to head 0)
		u.q = append(u.q, e)
	}
	u.bytes += len(e.frame)
	if r.ud.timer == nil {
		r.ud.timer = d.eng.NewTimer(rxParkTimer{r})
	}
	r.ud.timer.Reset(t)
}

// rxParkMax bounds the bytes of the frames parked behind a datagram (a
// QP's share of the port's receive buffer, an assumption: 1 MiB). A peer
// that floods a QP whose receive stage is behind finds the rest dropped
// and counted, as a full receive buffer drops them, rather than held
// without bound.
const rxParkMax = 1 << 20

// parkBack queues a frame that reached the QP at t behind the parked ones.
func (r *responder) parkBack(t sim.Time, frame []byte) {
	if r.ud.bytes+len(frame) > rxParkMax {
		r.q.d.warn(t, CtrRxUDParkFull, "%v QP %#x: %d frames (%d bytes) already wait behind a parked packet; a %d-byte frame is dropped", r.q.typ, r.q.qpn, len(r.ud.q)-r.ud.head, r.ud.bytes, len(frame))
		return
	}
	f := r.copyFrame(frame) // makes r.ud
	u := r.ud
	u.bytes += len(f)
	if u.head > 0 && u.head >= len(u.q)/2 {
		// Reclaim the slots drain has gone past (amortised: at most as
		// many moves as frames appended since the last time).
		n := copy(u.q, u.q[u.head:])
		clear(u.q[n:])
		u.q, u.head = u.q[:n], 0
	}
	u.q = append(u.q, rxParked{frame: f, t: t})
}

// unpark drops the parked frames, as the QP would drop a datagram
// arriving now, and stops the timer: the QP stops receiving (destroyed,
// to RESET or ERR, the device fatal), so none may reach a receive WQE
// later, of this incarnation or of the one after a RESET, nor may the
// timer fire into a destroyed QP. The drop is counted under ctr, with a
// warning unless quiet (a dead device counts only, as receive does). RESET
// used to forget the frames uncounted; ERR, destroy and fatal left them
// to the timer, which dropped them at their receive time, into a QP
// already gone.
func (r *responder) unpark(t sim.Time, ctr trace.Counter, quiet bool, why string) {
	if r.ud == nil {
		return
	}
	if n := len(r.ud.q) - r.ud.head; n > 0 {
		d := r.q.d
		if quiet {
			d.ctr.Add(ctr, uint64(n))
		} else {
			d.ctr.Add(ctr, uint64(n-1))
			d.warn(t, ctr, "%v QP %#x %s: the %d frames (%d bytes) parked behind a packet are dropped", r.q.typ, r.q.qpn, why, n, r.ud.bytes)
		}
	}
	for _, e := range r.ud.q[r.ud.head:] {
		r.ud.frames = append(r.ud.frames, e.frame)
	}
	clear(r.ud.q) // no stale references to the pooled buffers
	r.ud.q, r.ud.head, r.ud.bytes = r.ud.q[:0], 0, 0
	if r.ud.timer != nil {
		r.ud.timer.Stop()
	}
}

// drain lets the parked frames go on, in order, until one must wait again.
func (r *responder) drain(now sim.Time) {
	if r.ud == nil {
		return
	}
	q := r.q
	d := q.d
	for u := r.ud; len(u.q) > u.head; {
		e := u.q[u.head]
		if e.took && e.t > now {
			u.timer.Reset(e.t)
			return
		}
		u.q[u.head] = rxParked{}
		if u.head++; u.head == len(u.q) {
			u.q, u.head = u.q[:0], 0
		}
		u.bytes -= len(e.frame)
		p := &r.ud.pkt
		switch {
		case roce.ParseFrameVerified(e.frame, p) != nil:
			// It parsed when it arrived; nothing changed it since.
			d.warn(now, CtrRxDropMalformed, "%v QP %#x: a parked frame no longer parses", q.typ, q.qpn)
		case d.fx.fatal:
			d.inc(CtrDeadRxDrop)
		case q.dead || !q.receives():
			d.warn(now, CtrRxDropQPState, "%v PSN %#x for QP %#x in state %v", p.Opcode, p.BTH.PSN(), q.qpn, q.state)
		default:
			d.rxFrame = e.frame
			if e.took {
				r.rx(e.arrive, e.t, p) // from the top: parking changed nothing
			} else {
				// Not before now: the QP was busy with the frames ahead.
				d.process(q, max(e.t, now), p)
			}
			d.rxFrame = nil
		}
		r.ud.frames = append(r.ud.frames, e.frame)
	}
}
