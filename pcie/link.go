package pcie

import (
	"fmt"
	"math"

	"github.com/softnic/softnic/sim"
)

// Stats counts the TLPs and bytes of one operation (or, summed, of many).
// WireBytes include every TLP's overhead (Spec.Hdr*); PayloadBytes are the
// data bytes carried (for a read: the bytes returned in completions).
type Stats struct {
	MWr, MRd, CplD int
	WireBytes      int
	PayloadBytes   int
}

// TLPs is the total number of TLPs.
func (s Stats) TLPs() int { return s.MWr + s.MRd + s.CplD }

// Add accumulates o into s.
func (s *Stats) Add(o Stats) {
	s.MWr += o.MWr
	s.MRd += o.MRd
	s.CplD += o.CplD
	s.WireBytes += o.WireBytes
	s.PayloadBytes += o.PayloadBytes
}

// Totals are a Link's cumulative counts per direction and per TLP class.
type Totals struct {
	Down Stats // host → device: MMIO writes, MMIO reads, read completions
	Up   Stats // device → host: DMA writes, read requests, MMIO-read completions

	HostMWr   Stats // posted writes by the CPU (MMIO), downstream
	DeviceMWr Stats // posted writes by the device (DMA), upstream
	MRd       Stats // read requests, both directions
	CplD      Stats // completions with data, both directions
}

// maxSpans bounds the busy intervals remembered per direction; when more are
// needed the two closest are merged (conservatively marking the gap busy).
const maxSpans = 32

type span struct{ s, e sim.Time }

// lane is one direction of the link: a calendar of reserved busy intervals,
// sorted, disjoint and non-touching. A calendar rather than a single
// busy-until time lets a TLP that is ready now use the idle gap before
// traffic already booked for later (e.g. completions that wait for host
// memory), so a doorbell never queues behind a DMA that has not started.
type lane struct {
	n     int
	iv    [maxSpans + 1]span
	maxAt sim.Time
	// The last search's finding: no idle time of hd or more starts at or
	// after hr and before he (the end of what it booked). Booking more
	// keeps that true; forgetting intervals (prune) may not, and clears
	// it (hd 0). A later search for hd or more, ready at hr or later,
	// starts at he: the completions of one read, each ready after the one
	// before, skip the gaps the earlier ones could not use.
	hr, he sim.Time
	hd     sim.Duration
}

// prune forgets intervals that ended at or before at, when at is the latest
// call time seen. Callers issue operations in (nearly) non-decreasing time;
// an operation stamped earlier than the latest one seen may overlap traffic
// already forgotten (a small underestimate of contention, never a panic).
func (l *lane) prune(at sim.Time) {
	if at < l.maxAt {
		return
	}
	l.maxAt = at
	k := 0
	for k < l.n && l.iv[k].e <= at {
		k++
	}
	if k > 0 {
		copy(l.iv[:], l.iv[k:l.n])
		l.n -= k
		l.hd = 0
	}
}

// reserve books d of wire time at the earliest start >= ready that fits
// between booked intervals, and returns that start.
func (l *lane) reserve(ready sim.Time, d sim.Duration) sim.Time {
	// Fast path, the common case of a train of TLPs: ready is at or after
	// the start of the last booked interval, so the TLP goes right after
	// it (extending it) or into the idle time beyond; no earlier gap can
	// be used. The same result as the search below.
	if n := l.n; d > 0 && (n == 0 || ready >= l.iv[n-1].s) {
		if n > 0 && ready <= l.iv[n-1].e {
			t := l.iv[n-1].e
			l.iv[n-1].e = t.Add(d)
			return t
		}
		l.iv[n] = span{ready, ready.Add(d)}
		l.n++
		if l.n > maxSpans {
			l.mergeClosest()
		}
		return ready
	}
	return l.search(ready, d)
}

// search is reserve's general case: the earliest gap at or after ready
// that holds d, found by bisection and a scan.
func (l *lane) search(ready sim.Time, d sim.Duration) sim.Time {
	t := ready
	if l.hd > 0 && d >= l.hd && ready >= l.hr && l.he > t {
		t = l.he
	}
	// Skip, by bisection, the intervals that end at or before ready (the
	// loop below would pass over them one by one): ends are increasing.
	i, hi := 0, l.n
	for i < hi {
		m := int(uint(i+hi) >> 1)
		if l.iv[m].e <= t {
			i = m + 1
		} else {
			hi = m
		}
	}
	// From here every interval ends after t: the first by the bisection,
	// each later one because ends increase and t is the one before's end.
	for ; i < l.n; i++ {
		if l.iv[i].s >= t.Add(d) {
			break
		}
		t = l.iv[i].e
	}
	end := t.Add(d)
	if d > 0 {
		l.hr, l.hd, l.he = ready, d, end
	}
	switch {
	case i > 0 && l.iv[i-1].e == t && i < l.n && l.iv[i].s == end:
		// Fills a gap exactly: join the two neighbours.
		l.iv[i-1].e = l.iv[i].e
		copy(l.iv[i:], l.iv[i+1:l.n])
		l.n--
	case i > 0 && l.iv[i-1].e == t:
		l.iv[i-1].e = end
	case i < l.n && l.iv[i].s == end:
		l.iv[i].s = t
	default:
		copy(l.iv[i+1:l.n+1], l.iv[i:l.n])
		l.iv[i] = span{t, end}
		l.n++
		if l.n > maxSpans {
			l.mergeClosest()
		}
	}
	return t
}

func (l *lane) mergeClosest() {
	best, gap := 0, sim.Duration(math.MaxInt64)
	for i := 0; i+1 < l.n; i++ {
		if g := l.iv[i+1].s.Sub(l.iv[i].e); g < gap {
			best, gap = i, g
		}
	}
	l.iv[best].e = l.iv[best+1].e
	copy(l.iv[best+1:], l.iv[best+2:l.n])
	l.n--
}

// Link is one PCIe link between the host (root complex) and the device:
// downstream (host → device) and upstream (device → host) directions, each
// serialising TLP bytes at R_tlp (Spec.TLPRate) so that back-to-back TLPs
// queue, plus Spec.FlightLatency per TLP. Using R_tlp as the serialisation
// rate folds Ack/UpdateFC DLLPs and SKP ordered sets into the TLP stream,
// so saturated throughput equals the pcie-bench model (timing.md §1.3).
// Flow-control credits are not modelled separately.
//
// Not safe for concurrent use; no method allocates.
type Link struct {
	spec      Spec
	psPerByte float64
	down, up  lane
	// The cumulative counts by TLP class and direction; Totals sums them
	// (one bucket counted per TLP train, not a direction and a class).
	hostMWr, devMWr, mrdDown, mrdUp, cplDown, cplUp Stats
	// Posted writes never pass posted writes (PCIe ordering rules): each
	// MWr starts on its lane no earlier than the previous one in the same
	// direction ended, even when an earlier gap in the booked wire time
	// would fit it, and even when the lane has forgotten the previous
	// one's booking (prune: an operation stamped later came first), so
	// posted writes always complete in issue order (the DMA engine lands
	// overlapping writes by it). "Previous" is in virtual time: see
	// postedOrder.
	downMWr, upMWr postedOrder
	serMWrFull     sim.Duration // ser of a whole-MPS MWr
	serMRd         sim.Duration // ser of an MRd
	cplFull        int          // the usual completion: MPS, or RCB with RCBChunks
	// wholeCpl: cplFull is whole cache lines and RCBs; wholeReq: MRRS is
	// whole cplFulls too. DeviceRead's arithmetic trains need them; the
	// spec is fixed, so they are checked once, not with three divisions a
	// request.
	wholeCpl, wholeReq bool
	serTab             []sim.Duration // ser of every w below its length
	serCplFull         sim.Duration   // its ser
}

// NewLink returns a link for spec. It panics if spec is invalid: profiles
// read from users should be checked with Spec.Validate first.
func NewLink(spec Spec) *Link {
	if err := spec.Validate(); err != nil {
		panic(fmt.Sprintf("pcie.NewLink: %v", err))
	}
	l := &Link{spec: spec, psPerByte: 8e3 / spec.TLPGbps()}
	if n := spec.MPS + max(spec.HdrMWr, spec.HdrMRd, spec.HdrCplD) + 1; n > 0 && n <= 1<<14 {
		l.serTab = make([]sim.Duration, n)
		for w := range l.serTab {
			l.serTab[w] = l.serCalc(w)
		}
	}
	l.serMWrFull = l.ser(spec.MPS + spec.HdrMWr)
	l.serMRd = l.ser(spec.HdrMRd)
	l.cplFull = spec.MPS
	if spec.RCBChunks {
		l.cplFull = spec.RCB
	}
	l.serCplFull = l.ser(l.cplFull + spec.HdrCplD)
	f := l.cplFull
	l.wholeCpl = f > 0 && spec.RCB > 0 && f%cacheLine == 0 && f%spec.RCB == 0
	l.wholeReq = l.wholeCpl && spec.MRRS%f == 0
	return l
}

// Spec returns the link's spec.
func (l *Link) Spec() Spec { return l.spec }

// Totals returns the cumulative counts.
func (l *Link) Totals() Totals {
	t := Totals{HostMWr: l.hostMWr, DeviceMWr: l.devMWr, MRd: l.mrdDown, CplD: l.cplDown}
	t.MRd.Add(l.mrdUp)
	t.CplD.Add(l.cplUp)
	t.Down, t.Up = l.hostMWr, l.devMWr
	t.Down.Add(l.mrdDown)
	t.Down.Add(l.cplDown)
	t.Up.Add(l.mrdUp)
	t.Up.Add(l.cplUp)
	return t
}

// ser is the wire time of w bytes, rounded up to the picosecond: from
// serTab, the same formula worked out at NewLink for every TLP size up to
// MPS plus the largest header (a float multiply and a ceil on every TLP
// otherwise).
func (l *Link) ser(w int) sim.Duration {
	if uint(w) < uint(len(l.serTab)) {
		return l.serTab[w]
	}
	return l.serCalc(w)
}

func (l *Link) serCalc(w int) sim.Duration { return sim.Duration(math.Ceil(float64(w) * l.psPerByte)) }

// send books one TLP of payload p and overhead h on lane ln, ready at t,
// and returns when it is usable at the far end.
func (l *Link) send(ln *lane, t sim.Time, p, h int) sim.Time {
	d := l.ser(p + h)
	return ln.reserve(t, d).Add(d + l.spec.FlightLatency)
}

// sendPosted is send for a posted write: it starts no earlier than the
// end of the posted writes issued on the lane at or before t (o), which
// it then joins.
func (l *Link) sendPosted(ln *lane, o *postedOrder, t sim.Time, p, h int) sim.Time {
	d := l.ser(p + h)
	start := ln.reserve(max(t, o.floor(t)), d)
	o.add(t, start.Add(d))
	return start.Add(d + l.spec.FlightLatency)
}

// orderDepth bounds the steps a postedOrder remembers.
const orderDepth = 32

// postedOrder keeps the posted writes of one direction in order by their
// issue time. A write issued at t starts after every posted write issued
// at or before t has ended; one issued earlier in virtual time than a
// write already booked — a device works out some operations ahead of
// others, e.g. the payload write of a message that waits behind a queue
// of its QP's messages, computed when it arrives — went onto the link
// first and does not wait for it. (Ordering by call order instead made
// one QP's writes, booked microseconds ahead, hold back every other QP's:
// send_bw -s 64 -q 4 ran no faster than -q 1.) It is a staircase of
// (issue time, end) with both increasing: floor(t) is the end of the
// last step issued at or before t. Calls in non-decreasing time give the
// previous write's end, as a single "last end" would. Only orderDepth
// steps are kept; when one more comes, the two earliest issued become
// one step (merge; the two after it when the new one is the earliest),
// issued at the earlier's time and ending at the later's end, so that a
// write issued between them waits a little longer than it must, never
// less. (Forgetting a step instead — the earliest issued, or the new one
// when it was the earliest — let the next write, issued after the
// forgotten one, start and complete before it: a device that had booked
// another QP's WRITE packets 32 steps ahead stamped a SEND's payload
// writes earlier than all of them, the forgotten packet's bytes landed
// after the SEND's LAST and its CQE, and the soak saw a receive complete
// with a stale 2 KiB block in the middle. Merging the two steps whose
// ends were closest instead held back writes issued among the recent
// steps: TestManyQPsShareThePort's READs ran 30% under line rate.)
type postedOrder struct {
	n       int
	at, end [orderDepth + 1]sim.Time // one more than kept: add inserts, then merges
}

// floor is when a posted write issued at t may start: the end of the
// posted writes issued at or before t (t itself when none is known).
func (o *postedOrder) floor(t sim.Time) sim.Time {
	for i := o.n - 1; i >= 0; i-- {
		if o.at[i] <= t {
			return o.end[i]
		}
	}
	return t
}

// add records a posted write issued at t that ends at end (end is at or
// after floor(t)). Steps issued at or after t that end no later are
// covered by it and dropped.
func (o *postedOrder) add(t, end sim.Time) {
	i := o.n
	for i > 0 && o.at[i-1] >= t {
		i--
	}
	// o.at[:i] are issued before t and end no later than end; the steps
	// from i on are issued at or after t: keep those that end after end.
	j := i
	for ; j < o.n && o.end[j] <= end; j++ {
	}
	if i > 0 && o.end[i-1] >= end {
		// Covered by the step before it (end == floor(t)): only drop the
		// steps it covers.
		copy(o.at[i:], o.at[j:o.n])
		copy(o.end[i:], o.end[j:o.n])
		o.n -= j - i
		return
	}
	k := o.n - j // steps kept after the new one
	copy(o.at[i+1:], o.at[j:j+k])
	copy(o.end[i+1:], o.end[j:j+k])
	o.at[i], o.end[i] = t, end
	o.n = i + 1 + k
	if o.n > orderDepth {
		// The two earliest issued become one (writes are rarely stamped
		// that far back), but not the new one with the step after it
		// when it is the earliest: the writes its caller issues next, a
		// little later, must find its end as their floor, not the end of
		// a write booked further ahead.
		k := 0
		if i == 0 {
			k = 1
		}
		o.merge(k)
	}
}

// merge makes steps k and k+1 one: issued at the first's time, ending
// at the second's end. Writes issued between them wait for the second's
// end, a little later than they must; none waits less than before.
func (o *postedOrder) merge(k int) {
	o.end[k] = o.end[k+1]
	copy(o.at[k+1:], o.at[k+2:o.n])
	copy(o.end[k+1:], o.end[k+2:o.n])
	o.n--
	o.at[o.n], o.end[o.n] = 0, 0 // the spare slot holds nothing (Links compare equal)
}

// countMWr, countMRd and countCplD add TLPs of one class to their bucket
// and to s: only the fields the class has (the others would be stores of
// the values loaded).
func countMWr(bucket *Stats, s *Stats, k, payload, wire int) {
	bucket.MWr += k
	bucket.PayloadBytes += payload
	bucket.WireBytes += wire
	s.MWr += k
	s.PayloadBytes += payload
	s.WireBytes += wire
}

func countMRd(bucket *Stats, s *Stats, k, wire int) {
	bucket.MRd += k
	bucket.WireBytes += wire
	s.MRd += k
	s.WireBytes += wire
}

func countCplD(bucket *Stats, s *Stats, k, payload, wire int) {
	bucket.CplD += k
	bucket.PayloadBytes += payload
	bucket.WireBytes += wire
	s.CplD += k
	s.PayloadBytes += payload
	s.WireBytes += wire
}

// HostWrite is a CPU MMIO posted write of n bytes at BAR offset addr, issued
// at at: one MWr (callers pass at most one 64 B line; larger writes are
// split by MPS). arrive is when the device has the last TLP.
func (l *Link) HostWrite(at sim.Time, addr uint64, n int) (arrive sim.Time, s Stats) {
	l.down.prune(at)
	arrive = at
	for n > 0 {
		c := chunk(addr, n, l.spec.MPS)
		arrive = max(arrive, l.sendPosted(&l.down, &l.downMWr, at, c, l.spec.HdrMWr))
		countMWr(&l.hostMWr, &s, 1, c, c+l.spec.HdrMWr)
		addr += uint64(c)
		n -= c
	}
	return arrive, s
}

// HostRead is a CPU MMIO read of n (≤ MPS) bytes: an MRd downstream and the
// device's immediate CplD upstream. arrive is when the request reaches the
// device (sample the register then), done when the data is back at the CPU.
func (l *Link) HostRead(at sim.Time, addr uint64, n int) (arrive, done sim.Time, s Stats) {
	_ = addr // the model does not depend on the address
	l.down.prune(at)
	arrive = l.send(&l.down, at, 0, l.spec.HdrMRd)
	countMRd(&l.mrdDown, &s, 1, l.spec.HdrMRd)
	l.up.prune(at)
	done = l.send(&l.up, arrive, n, l.spec.HdrCplD)
	countCplD(&l.cplUp, &s, 1, n, n+l.spec.HdrCplD)
	return arrive, done, s
}

// chunk is the length of the next TLP for a transfer at addr with n bytes
// left, split at size-aligned addresses (size a power of two ≤ 4 KiB, so no
// TLP crosses a 4 KiB boundary). Computed from the offset, never from
// addr+n, so it cannot overflow.
func chunk(addr uint64, n, size int) int {
	return min(n, size-int(addr&uint64(size-1)))
}

// DeviceWrite is a DMA write of n bytes to host address addr issued at at:
// MWr TLPs split at MPS-aligned addresses (hence never across 4 KiB)
// upstream. done is when the last byte is in host memory.
func (l *Link) DeviceWrite(at sim.Time, addr uint64, n int) (done sim.Time, s Stats) {
	l.up.prune(at)
	done = at
	total, k := max(n, 0), 0
	sp := &l.spec
	last := l.upMWr.floor(at)
	for n > 0 {
		c := chunk(addr, n, sp.MPS)
		d := l.ser(c + sp.HdrMWr)
		start := l.up.reserve(max(at, last), d)
		end := start.Add(d)
		last = end
		done = max(done, end.Add(sp.FlightLatency))
		k++
		addr += uint64(c)
		n -= c
		if ln := &l.up; n > 0 && ln.iv[ln.n-1].e == end {
			// This TLP ends the lane's last interval, so each of the rest
			// (ready at the previous one's end, where that interval ends)
			// goes right after it: they extend the interval back to back,
			// whole MPS TLPs (addr is now MPS-aligned) and then the
			// remainder. The sum of their times, TLP by TLP.
			full, rem := n/sp.MPS, n%sp.MPS
			if full > 0 {
				end = end.Add(sim.Duration(full) * l.serMWrFull)
				k += full
			}
			if rem > 0 {
				end = end.Add(l.ser(rem + sp.HdrMWr))
				k++
			}
			last = end
			ln.iv[ln.n-1].e = end
			done = max(done, end.Add(sp.FlightLatency))
			break
		}
	}
	if k > 0 {
		l.upMWr.add(at, last)
	}
	countMWr(&l.devMWr, &s, k, total, total+k*sp.HdrMWr)
	return done, s
}

// DeviceRead is a DMA read of n bytes at host address addr issued at at.
// Requests are split at MRRS-aligned addresses and go upstream back to back.
// The host answers each request HostReadLatency after it arrives; within one
// read its data then streams at HostReadPerLine per 64 B cache line touched
// (each line counted once), and every completion is sent downstream as soon
// as its bytes are ready. Completions end at RCB-aligned addresses and carry
// at most MPS bytes (exactly RCB-sized pieces with RCBChunks). done is when
// the last completion has reached the device.
func (l *Link) DeviceRead(at sim.Time, addr uint64, n int) (done sim.Time, s Stats) {
	l.up.prune(at)
	l.down.prune(at)
	sp := &l.spec
	done = at
	total, nreq, ncpl := max(n, 0), 0, 0
	var cursor sim.Time   // when the host has produced everything so far
	lastLine := uint64(0) // last cache line already charged
	charged := false
	dMRd := l.serMRd
	upTrain := false     // the requests so far end the up lane's calendar
	var lastEnd sim.Time // when the last completion so far ends
	for n > 0 {
		if f := l.cplFull; upTrain && charged && l.wholeReq && n >= sp.MRRS && addr&uint64(sp.MRRS-1) == 0 && addr&uint64(sp.RCB-1) == 0 &&
			addr%cacheLine == 0 {
			// The rest of the read is whole requests of whole completions
			// (f bytes, f/64 new lines each). If the next request (right
			// after the last on the up lane: upTrain) arrives before the
			// host is done with the last one, and a request's completions
			// take the host longer than an MRd takes the link, every later
			// request arrives in time too, and completion j from here has
			// its bytes ready at cursor + j*dr whatever request it is in.
			// With the last completion ending the down lane's calendar,
			// that is a train the loop below would book one by one:
			up, ln := &l.up, &l.down
			dF := l.serCplFull
			dr := sim.Duration(f/cacheLine) * sp.HostReadPerLine
			per := sp.MRRS / f
			next := up.iv[up.n-1].e.Add(dMRd).Add(sp.FlightLatency).Add(sp.HostReadLatency)
			if k := n / sp.MRRS; sim.Duration(per)*dr >= dMRd && cursor >= next && ln.n > 0 && ln.iv[ln.n-1].e == lastEnd {
				ready := cursor
				switch {
				case ready.Add(dr) <= lastEnd:
					// Link-paced: each completion is ready before the one
					// before ends (no gap after the first ready fits one:
					// it would have taken it), so it goes right after it,
					// for as long as ready+j*dr <= lastEnd+(j-1)*dF holds.
					if dr > dF {
						k = min(k, int(lastEnd.Sub(ready)-dF)/int(dr-dF)/per)
					}
					m := k * per
					lastEnd = lastEnd.Add(sim.Duration(m) * dF)
					ln.iv[ln.n-1].e = lastEnd
					ready = ready.Add(sim.Duration(m) * dr)
				case dr > dF:
					// Host-paced: each completion is ready after the one
					// before ends, so it starts then, in a span of its own.
					for range k * per {
						ready = ready.Add(dr)
						ln.iv[ln.n] = span{ready, ready.Add(dF)}
						ln.n++
						if ln.n > maxSpans {
							ln.mergeClosest()
						}
					}
					lastEnd = ready.Add(dF)
				default:
					k = 0
				}
				if k > 0 {
					up.iv[up.n-1].e = up.iv[up.n-1].e.Add(sim.Duration(k) * dMRd)
					nreq += k
					ncpl += k * per
					done = max(done, lastEnd.Add(sp.FlightLatency))
					cursor = ready
					addr += uint64(k * sp.MRRS)
					n -= k * sp.MRRS
					lastLine = (addr - 1) / cacheLine
					continue
				}
			}
		}
		req := chunk(addr, n, sp.MRRS)
		var arrive sim.Time
		if ln := &l.up; upTrain {
			// Every request is the same TLP, ready at at: once one has
			// gone after the last booked interval (no gap fits it), each
			// later one goes right after it (send would find the same).
			ln.iv[ln.n-1].e = ln.iv[ln.n-1].e.Add(dMRd)
			arrive = ln.iv[ln.n-1].e.Add(sp.FlightLatency)
		} else {
			start := ln.reserve(at, dMRd)
			end := start.Add(dMRd)
			arrive = end.Add(sp.FlightLatency)
			upTrain = ln.iv[ln.n-1].e == end
		}
		nreq++
		ready := max(cursor, arrive.Add(sp.HostReadLatency))
		for a, r := addr, req; r > 0; {
			var c int
			if sp.RCBChunks {
				c = chunk(a, r, sp.RCB)
			} else {
				// First completion: up to MPS, ending on an RCB boundary;
				// later ones start RCB-aligned, so this is min(r, MPS).
				c = min(r, sp.MPS-int(a&uint64(sp.RCB-1)))
			}
			first, last := a/cacheLine, (a+uint64(c)-1)/cacheLine
			if charged && first <= lastLine {
				first = lastLine + 1
			}
			if last >= first {
				ready = ready.Add(sim.Duration(last-first+1) * sp.HostReadPerLine)
				lastLine, charged = last, true
			}
			d := l.serCplFull
			if c != l.cplFull {
				d = l.ser(c + sp.HdrCplD)
			}
			ln := &l.down
			end := ln.reserve(ready, d).Add(d)
			done = max(done, end.Add(sp.FlightLatency))
			lastEnd = end
			ncpl++
			a += uint64(c)
			r -= c
			if f := l.cplFull; r >= f && l.wholeCpl && ln.iv[ln.n-1].e == end && a%cacheLine == 0 && a&uint64(sp.RCB-1) == 0 {
				// This completion ends the down lane's calendar and the
				// next ones are whole (f bytes, f/64 new lines each). If
				// the host makes each one's bytes no slower than the link
				// sends it, and the next is ready before this one ends,
				// every one of them is ready before the one before ends
				// and goes right after it: the rest but the remainder are
				// arithmetic, as the loop would find them.
				dr := sim.Duration(f/cacheLine) * sp.HostReadPerLine
				if dF := l.serCplFull; dr <= dF && ready.Add(dr) <= end {
					m := r / f
					ready = ready.Add(sim.Duration(m) * dr)
					end = end.Add(sim.Duration(m) * dF)
					ln.iv[ln.n-1].e = end
					done = max(done, end.Add(sp.FlightLatency))
					a += uint64(m * f)
					r -= m * f
					lastLine, charged = (a-1)/cacheLine, true
					lastEnd = end
					ncpl += m
				}
			}
		}
		cursor = ready
		addr += uint64(req)
		n -= req
	}
	// Counted once for the whole read: every MRd and every CplD alike.
	countMRd(&l.mrdUp, &s, nreq, nreq*sp.HdrMRd)
	countCplD(&l.cplDown, &s, ncpl, total, total+ncpl*sp.HdrCplD)
	return done, s
}
