package main

// The loops of perftest's tests as non-blocking state machines (actors).
// perftest's loops block: they spin on a CQ or on the last byte of a
// buffer. Here each blocking point is a state; an actor's step runs until
// it would block and reports whether it got anywhere. A scheduler steps
// every actor and, when none can move, lets the world advance: one engine
// event in one process (so that each side sees a CQE or a byte at the
// virtual time it appears), one pump of the real-time driver on a wire.
//
// The loops follow perftest's run_iter_lat_write, run_iter_lat_send,
// run_iter_lat, run_iter_bw and run_iter_bw_server (perftest.md): the same
// order of polls and posts, the same signalling rule, the same timestamps.

import (
	"errors"
	"fmt"

	"github.com/softnic/softnic/provider"
)

// perfEP is one side's QP and buffers as the loops use them.
type perfEP struct {
	qp       *provider.QP
	scq, rcq *provider.CQ
	mr       *provider.MR
	buf      []byte // the registered buffer, from mr.Addr
	sendOff  uint64 // where messages are sent (written, read into) from
	recvOff  uint64 // where the peer's messages land
	remAddr  uint64 // the peer's receive area
	remKey   uint32
	ah       *provider.AH // UD
	remQPN   uint32
	remQKey  uint32
	ud       bool
	maxInl   int
	atomicOp provider.WROpcode
	// ch is the completion channel of scq and rcq with -e (nil: the loops
	// poll, perftest's default).
	ch             *provider.CompChannel
	evSend, evRecv bool // an event of scq, rcq taken from ch and not yet used (ready)
	// drainSend, drainRecv: an event of scq, rcq was taken and the CQ
	// has not been found empty since (ready).
	drainSend, drainRecv bool
}

// ready reports whether cq has a completion to poll. Polling (the
// default) it looks without polling (cqReady). With -e it is perftest's
// ctx_notify_events first: the CQ's completion event taken from the
// channel without waiting (none: not ready), acknowledged, and the CQ
// armed again (ibv_req_notify_cq) before the poll, as perftest does —
// then whether cq has one. The side's two CQs share the channel; an event
// of the other CQ is kept for it (evSend, evRecv) and that CQ is armed
// again only when its own loop takes it: armed at once, with CQEs past its
// consumer index, it would raise the next event at once, and two loops
// taking each other's events would never get their own.
//
// With drain (the bandwidth loops, which poll CQEs in batches), after an
// event the CQ is polled until it is empty before the next wait, as
// perftest's run_iter_bw_server does (do { ibv_poll_cq } while (ne > 0)):
// an arm that finds CQEs past its consumer index raises an event at once
// on mlx5 (and on softnic's device), but not on every CQ — not on rxe
// (rxe_req_notify_cq reports missed events only when asked, and
// libibverbs does not ask), nor on a moderated mlx5 CQ with fewer than
// cq_max_count pending — so a loop that waited for an event per batch
// stopped with CQEs in its CQ (softnic perf send_bw -e -d rxe0 as
// server: "80 of 100 received", then no progress). The latency loops
// take one CQE per event, as perftest's.
func (e *perfEP) ready(cq *provider.CQ, drain bool) (bool, error) {
	if e.ch == nil {
		return cqReady(cq), nil
	}
	kept, draining := &e.evSend, &e.drainSend
	if cq == e.rcq && cq != e.scq {
		kept, draining = &e.evRecv, &e.drainRecv
	}
	if *draining {
		if cqReady(cq) {
			return true, nil
		}
		*draining = false
	}
	for !*kept {
		ev, err := e.ch.GetCQEvent(0)
		if errors.Is(err, provider.ErrTimeout) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("Failed to get cq_event: %w", err)
		}
		switch ev {
		case e.scq:
			e.evSend = true
		case e.rcq:
			e.evRecv = true
		default:
			return false, fmt.Errorf("get_cq_event: an event of CQ %#x, not this QP's", ev.CQN())
		}
	}
	*kept = false
	cq.AckEvents(1)
	if err := cq.ReqNotify(false); err != nil {
		return false, fmt.Errorf("Couldn't request CQ notification: %w", err)
	}
	ok := cqReady(cq)
	*draining = ok && drain
	return ok, nil
}

// armEvents is perftest's ibv_req_notify_cq before the test: the send
// CQ, and the receive CQ of the send tests (-e only).
func (e *perfEP) armEvents(recv bool) error {
	if e.ch == nil {
		return nil
	}
	if err := e.scq.ReqNotify(false); err != nil {
		return fmt.Errorf("Couldn't request CQ notification: %w", err)
	}
	if recv {
		if err := e.rcq.ReqNotify(false); err != nil {
			return fmt.Errorf("Couldn't request CQ notification: %w", err)
		}
	}
	return nil
}

// perfClock is the time of the run in ps: virtual time in one process,
// the wall clock on a real wire.
type perfClock interface {
	now() int64
	// beforePost brings the clock up to date before an MMIO (the real-time
	// driver stamps the post with the wall clock).
	beforePost()
}

// cqReady reports whether cq's next CQE belongs to software, without
// polling (an empty provider Poll would drive the device on its own).
func cqReady(cq *provider.CQ) bool { return cq.Ready() }

// pollReady takes one successful completion from cq if cqReady says it
// has one: false and no error when it has none yet. test and which name
// the CQ in an error ("write_lat", "send": "write_lat send CQ").
func (e *perfEP) pollReady(cq *provider.CQ, test, which string) (bool, error) {
	if ok, err := e.ready(cq, false); !ok {
		return false, err
	}
	var wc [1]provider.WC
	n, err := cq.Poll(wc[:])
	if err != nil {
		return false, err
	}
	if n == 0 {
		return false, fmt.Errorf("%s %s CQ: the CQE went away", test, which)
	}
	if wc[0].Status != provider.WCSuccess {
		c, note := causeOf(cq, wc[:])
		return false, fmt.Errorf("%s %s CQ: completion with error %v (wr_id %d, vendor syndrome %#x%s)", test, which, c.Status, c.WRID, c.VendorErr, note)
	}
	return true, nil
}

// causeOf is the completion that says why a QP failed. A flushed one
// (WR_FLUSH_ERR) says only that the QP is in error: the WQE that put it
// there may complete after it, since WQEs sent before it and not yet
// acknowledged flush first, in SQ order. batch starts with the failed
// completion and holds the rest of its poll; causeOf looks there, then
// polls the CQ on, at most causeScan completions, for the first error
// that is not a flush, and returns it with a note; otherwise batch[0].
func causeOf(cq *provider.CQ, batch []provider.WC) (provider.WC, string) {
	wc := batch[0]
	if wc.Status != provider.WCWRFlushErr {
		return wc, ""
	}
	for _, w := range batch[1:] {
		if w.Status != provider.WCSuccess && w.Status != provider.WCWRFlushErr {
			return w, fmt.Sprintf("; after WR_FLUSH_ERR of wr_id %d", wc.WRID)
		}
	}
	if w, ok := firstFailure(cq); ok {
		return w, fmt.Sprintf("; after WR_FLUSH_ERR of wr_id %d", wc.WRID)
	}
	return wc, ""
}

// firstFailure polls cq on, at most causeScan completions, for the first
// error that is not a flush.
func firstFailure(cq *provider.CQ) (provider.WC, bool) {
	var buf [16]provider.WC
	for seen := 0; seen < causeScan; {
		n, err := cq.Poll(buf[:])
		if err != nil || n == 0 {
			break
		}
		seen += n
		for _, w := range buf[:n] {
			if w.Status != provider.WCSuccess && w.Status != provider.WCWRFlushErr {
				return w, true
			}
		}
	}
	return provider.WC{}, false
}

// recvCause is causeOf for a receive CQ: a flushed receive says only that
// its QP is in error, and on a QP that also sends (-b) the send queue's
// failure (a RETRY_EXC_ERR, say) is what put it there.
func (e *perfEP) recvCause(batch []provider.WC) (provider.WC, string) {
	c, note := causeOf(e.rcq, batch)
	if c.Status != provider.WCWRFlushErr || e.scq == nil || e.scq == e.rcq {
		return c, note
	}
	if w, ok := firstFailure(e.scq); ok {
		return w, fmt.Sprintf(" on the send queue (wr_id %d), after receive wr_id %d was flushed", w.WRID, c.WRID)
	}
	return c, note
}

// causeScan bounds causeOf's search.
const causeScan = 4096

// perfActor is one side's loop.
type perfActor interface {
	step() (bool, error)
	done() bool
	// progress is the share of the work done, 0..1, for the progress bar.
	progress() float64
	// state names what the actor waits for (for a stuck run's error).
	state() string
}

// sendWR builds the WR of a message of size bytes.
func (e *perfEP) sendWR(op provider.WROpcode, size int, signaled bool, wrid uint64, remOff uint64) provider.SendWR {
	wr := provider.SendWR{WRID: wrid, Opcode: op, SGL: []provider.SGE{e.mr.SGE(e.sendOff, uint32(size))},
		RemoteAddr: e.remAddr + remOff, RKey: e.remKey}
	if signaled {
		wr.Flags |= provider.SendSignaled
	}
	if (op == provider.WRSend || op == provider.WRRDMAWrite) && size <= e.maxInl {
		wr.Flags |= provider.SendInline
	}
	if op == provider.WRRDMARead {
		wr.SGL = []provider.SGE{e.mr.SGE(e.recvOff, uint32(size))}
	}
	if op == provider.WRAtomicFetchAdd || op == provider.WRAtomicCmpSwp {
		wr.CompareAdd, wr.Swap = 1, 1
		wr.SGL = []provider.SGE{e.mr.SGE(e.recvOff, 8)}
	}
	if e.ud {
		wr.RemoteAddr, wr.RKey = 0, 0
		wr.AH, wr.RemoteQPN, wr.RemoteQKey = e.ah, e.remQPN, e.remQKey
	}
	return wr
}

// recvWR is a receive of one message (UD: with room for the GRH).
func (e *perfEP) recvWR(size int, wrid uint64) provider.RecvWR {
	if e.ud {
		size += grhArea
	}
	return provider.RecvWR{WRID: wrid, SGL: []provider.SGE{e.mr.SGE(e.recvOff, uint32(size))}}
}

func (e *perfEP) postRecvs(size, n int) error {
	for i := 0; i < n; i++ {
		if _, err := e.qp.PostRecv([]provider.RecvWR{e.recvWR(size, 0)}); err != nil {
			return fmt.Errorf("couldn't post receive %d of %d: %w", i+1, n, err)
		}
	}
	return nil
}

// --- write_lat --------------------------------------------------------------

// writeLat is run_iter_lat_write: each side RDMA-WRITEs a message whose
// last byte is the iteration count (mod 256) into the peer's buffer and
// spins on the last byte of its own until the peer's count arrives. The
// server posts first.
type writeLat struct {
	ep     *perfEP
	clk    perfClock
	server bool
	iters  int
	size   int
	// deadline ends a timed run (ps, 0: none): no post after it.
	deadline int64

	scnt, rcnt, ccnt int
	phase            int
	posted           []int64
	gap              postGap
	verify           bool
	verifyErr        error
}

const (
	phTop = iota
	phWaitData
	phPost
	phWaitSendCQE
)

func (a *writeLat) done() bool {
	return a.phase == phTop && a.scnt >= a.iters && a.ccnt >= a.iters && a.rcnt >= a.iters
}

func (a *writeLat) progress() float64 { return float64(a.ccnt) / float64(max(a.iters, 1)) }

func (a *writeLat) state() string {
	return fmt.Sprintf("write_lat %s: %d posted, %d completed, %d of the peer's writes seen (phase %d)", sideName(a.server), a.scnt, a.ccnt, a.rcnt, a.phase)
}

func sideName(server bool) string {
	if server {
		return "server"
	}
	return "client"
}

func (a *writeLat) step() (bool, error) {
	moved := false
	for {
		switch a.phase {
		case phTop:
			if a.done() {
				return moved, nil
			}
			if a.deadline > 0 && a.clk.now() >= a.deadline && a.scnt == a.ccnt && a.scnt == a.rcnt+boolInt(a.server) {
				a.iters = a.scnt
				a.rcnt, a.ccnt = a.iters, a.iters
				return true, nil
			}
			if a.rcnt < a.iters && !(a.scnt < 1 && a.server) {
				a.rcnt++
				a.phase = phWaitData
			} else {
				a.phase = phPost
			}
			moved = true
		case phWaitData:
			last := a.ep.recvOff + uint64(a.size) - 1
			if a.ep.buf[last] != byte(a.rcnt) {
				return moved, a.verifyErr
			}
			if a.verify {
				for i, b := range a.ep.buf[a.ep.recvOff:last] {
					if b != byte(a.rcnt) {
						a.verifyErr = fmt.Errorf("write_lat %s: iteration %d: the last byte arrived before byte %d of %d (%#x, want %#x): the device did not write the last byte last",
							sideName(a.server), a.rcnt, i, a.size, b, byte(a.rcnt))
						return moved, a.verifyErr
					}
				}
			}
			a.phase = phPost
			moved = true
		case phPost:
			if a.scnt < a.iters {
				if !a.gap.over(a.clk) {
					return moved, nil
				}
				a.clk.beforePost()
				a.posted = append(a.posted, a.clk.now())
				a.scnt++
				send := a.ep.buf[a.ep.sendOff : a.ep.sendOff+uint64(a.size)]
				if a.verify {
					for i := range send {
						send[i] = byte(a.scnt)
					}
				}
				send[a.size-1] = byte(a.scnt)
				if _, err := a.ep.qp.PostSend([]provider.SendWR{a.ep.sendWR(provider.WRRDMAWrite, a.size, true, uint64(a.scnt), 0)}); err != nil {
					return moved, fmt.Errorf("couldn't post send: scnt=%d: %w", a.scnt, err)
				}
			}
			a.phase = phWaitSendCQE
			moved = true
		case phWaitSendCQE:
			if a.ccnt < a.iters {
				if ok, err := a.ep.pollReady(a.ep.scq, "write_lat", "send"); !ok {
					return moved, err
				}
				a.ccnt++
			}
			a.phase = phTop
			moved = true
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// --- send_lat ---------------------------------------------------------------

// sendLat is run_iter_lat_send: SEND/RECV ping-pong, the client sends
// first; a receive is re-posted while more messages are to come; a send
// is signalled every --cq-mod (1 in latency tests) and waited for.
type sendLat struct {
	ep       *perfEP
	clk      perfClock
	server   bool
	iters    int
	size     int
	rxDepth  int
	cqMod    int
	deadline int64

	scnt, rcnt int
	phase      int
	posted     []int64
	gap        postGap
}

func (a *sendLat) done() bool {
	return a.phase == phTop && a.scnt >= a.iters && a.rcnt >= a.iters
}

func (a *sendLat) progress() float64 { return float64(a.scnt) / float64(max(a.iters, 1)) }

func (a *sendLat) state() string {
	return fmt.Sprintf("send_lat %s: %d sent, %d received (phase %d)", sideName(a.server), a.scnt, a.rcnt, a.phase)
}

func (a *sendLat) step() (bool, error) {
	moved := false
	for {
		switch a.phase {
		case phTop:
			if a.done() {
				return moved, nil
			}
			if a.rcnt < a.iters && !(a.scnt < 1 && !a.server) {
				a.phase = phWaitData
			} else {
				a.phase = phPost
			}
			moved = true
		case phWaitData:
			if ok, err := a.ep.pollReady(a.ep.rcq, "send_lat", "receive"); !ok {
				return moved, err
			}
			a.rcnt++
			if a.deadline > 0 || a.rcnt+a.rxDepth <= a.iters {
				if _, err := a.ep.qp.PostRecv([]provider.RecvWR{a.ep.recvWR(a.size, 0)}); err != nil {
					return moved, fmt.Errorf("couldn't post recv: rcnt=%d: %w", a.rcnt, err)
				}
			}
			a.phase = phPost
			moved = true
		case phPost:
			// A timed run ends on the client once the deadline has
			// passed and the reply to its last send is in: only here,
			// between a receive and the next post, are as many messages
			// received as sent (at phTop the client always has one send
			// in flight, so a check there never fires).
			if a.deadline > 0 && !a.server && a.clk.now() >= a.deadline && a.rcnt == a.scnt {
				a.iters = a.scnt
				a.phase = phTop
				return true, nil
			}
			if a.scnt < a.iters {
				if !a.gap.over(a.clk) {
					return moved, nil
				}
				a.clk.beforePost()
				a.posted = append(a.posted, a.clk.now())
				a.scnt++
				sig := a.scnt%a.cqMod == 0 || (a.deadline == 0 && a.scnt == a.iters)
				if _, err := a.ep.qp.PostSend([]provider.SendWR{a.ep.sendWR(provider.WRSend, a.size, sig, uint64(a.scnt), 0)}); err != nil {
					return moved, fmt.Errorf("couldn't post send: scnt=%d: %w", a.scnt, err)
				}
				if sig {
					a.phase = phWaitSendCQE
					moved = true
					continue
				}
			}
			a.phase = phTop
			moved = true
		case phWaitSendCQE:
			if ok, err := a.ep.pollReady(a.ep.scq, "send_lat", "send"); !ok {
				return moved, err
			}
			a.phase = phTop
			moved = true
		}
	}
}

// --- read_lat, atomic_lat -----------------------------------------------------

// reqLat is run_iter_lat: the client posts one READ (or atomic) and waits
// for its completion, again and again; the server idles.
type reqLat struct {
	ep       *perfEP
	clk      perfClock
	op       provider.WROpcode
	iters    int
	size     int
	deadline int64

	scnt    int
	waiting bool
	posted  []int64
	gap     postGap
}

func (a *reqLat) done() bool { return !a.waiting && a.scnt >= a.iters }

func (a *reqLat) progress() float64 { return float64(a.scnt) / float64(max(a.iters, 1)) }

func (a *reqLat) state() string {
	return fmt.Sprintf("%s client: %d posted, waiting for a completion: %v", opName(a.op), a.scnt, a.waiting)
}

func opName(op provider.WROpcode) string {
	switch op {
	case provider.WRRDMARead:
		return "read_lat"
	case provider.WRAtomicFetchAdd, provider.WRAtomicCmpSwp:
		return "atomic_lat"
	}
	return "lat"
}

func (a *reqLat) step() (bool, error) {
	moved := false
	for {
		if a.waiting {
			if ok, err := a.ep.pollReady(a.ep.scq, opName(a.op), "send"); !ok {
				return moved, err
			}
			a.waiting = false
			moved = true
		}
		if a.deadline > 0 && a.clk.now() >= a.deadline {
			a.iters = a.scnt
		}
		if a.scnt >= a.iters {
			return moved, nil
		}
		if !a.gap.over(a.clk) {
			return moved, nil
		}
		a.clk.beforePost()
		a.posted = append(a.posted, a.clk.now())
		a.scnt++
		if _, err := a.ep.qp.PostSend([]provider.SendWR{a.ep.sendWR(a.op, a.size, true, uint64(a.scnt), 0)}); err != nil {
			return moved, fmt.Errorf("couldn't post send: scnt=%d: %w", a.scnt, err)
		}
		a.waiting = true
		moved = true
	}
}

// --- bandwidth ----------------------------------------------------------------

// bwClient is run_iter_bw: per QP, post while fewer than TX depth are
// outstanding, --post_list WRs per call; WR j of a QP is signalled when
// j % cq_mod == cq_mod-1 or it is the last, and its CQE stands for cq_mod
// completions. posted[k] is the time of the post call that started with
// the k-th WR overall, completed[k] the time the CQE that took the count
// past k arrived.
type bwClient struct {
	eps      []*perfEP
	clk      perfClock
	op       provider.WROpcode
	iters    int // per QP
	size     int
	txDepth  int
	postList int
	cqMod    int
	deadline int64

	scnt, ccnt        []int
	totscnt, totccnt  int
	posted, completed []int64
	wrs               []provider.SendWR
	stopped           bool // a timed run's deadline passed
	wcs               []provider.WC
	watch             cqWatch
}

func newBWClient(eps []*perfEP, clk perfClock, op provider.WROpcode, iters, size, txDepth, postList, cqMod int, deadline int64) *bwClient {
	a := &bwClient{eps: eps, clk: clk, op: op, iters: iters, size: size, txDepth: txDepth, postList: postList, cqMod: cqMod,
		deadline: deadline, scnt: make([]int, len(eps)), ccnt: make([]int, len(eps)), wrs: make([]provider.SendWR, postList),
		wcs: make([]provider.WC, 16)}
	if deadline == 0 {
		a.posted = make([]int64, iters*len(eps))
		a.completed = make([]int64, iters*len(eps))
		for k := range a.completed {
			a.completed[k] = -1 // unset: see perf_peak.go
		}
	}
	return a
}

func (a *bwClient) total() int { return a.iters * len(a.eps) }

func (a *bwClient) done() bool {
	if a.stopped {
		return true
	}
	return a.totscnt >= a.total() && a.totccnt >= a.total()
}

func (a *bwClient) progress() float64 { return float64(a.totccnt) / float64(max(a.total(), 1)) }

func (a *bwClient) state() string {
	return fmt.Sprintf("bw client: %d of %d posted, %d completed", a.totscnt, a.total(), a.totccnt)
}

func (a *bwClient) signaled(j int) bool {
	if a.postList > 1 {
		return (j+1)%a.postList == 0
	}
	return j%a.cqMod == a.cqMod-1 || (a.deadline == 0 && j == a.iters-1)
}

func (a *bwClient) step() (bool, error) {
	moved := false
	if a.deadline > 0 && a.clk.now() >= a.deadline {
		a.stopped = true
		return true, nil
	}
	if a.watch.idle() {
		return false, nil
	}
	took := false
	defer func() { a.watch.swept(took) }()
	for i, e := range a.eps {
		for (a.deadline > 0 || a.scnt[i] < a.iters) && a.scnt[i]-a.ccnt[i]+a.postList <= a.txDepth {
			for k := range a.wrs {
				j := a.scnt[i] + k
				a.wrs[k] = e.sendWR(a.op, a.size, a.signaled(j), uint64(i), 0)
				if a.op == provider.WRSend || a.op == provider.WRRDMAWrite {
					// perftest cycles the remote address; one area suffices here.
					a.wrs[k].RemoteAddr = e.remAddr
				}
				if e.ud {
					a.wrs[k].RemoteAddr = 0
				}
			}
			a.clk.beforePost()
			t := a.clk.now()
			if a.deadline == 0 {
				a.posted[a.totscnt] = t
			} else if a.totscnt == 0 {
				a.posted = append(a.posted, t)
			}
			if _, err := e.qp.PostSend(a.wrs); err != nil {
				return moved, fmt.Errorf("couldn't post send: qp %d scnt=%d: %w", i, a.scnt[i], err)
			}
			a.scnt[i] += a.postList
			a.totscnt += a.postList
			moved = true
		}
	}
	if a.deadline == 0 && a.totccnt >= a.total() {
		return moved, nil
	}
	for i, e := range a.eps {
		for {
			ok, err := e.ready(e.scq, true)
			if err != nil {
				return moved, err
			}
			if !ok {
				break
			}
			n, err := e.scq.Poll(a.wcs)
			if err != nil {
				return moved, err
			}
			for k, wc := range a.wcs[:n] {
				if wc.Status != provider.WCSuccess {
					c, note := causeOf(e.scq, a.wcs[k:n])
					return true, fmt.Errorf("bw: completion with error %v (vendor syndrome %#x%s) on QP %d after %d of %d posted, %d completed",
						c.Status, c.VendorErr, note, i, a.totscnt, a.total(), a.totccnt)
				}
				q := int(wc.WRID)
				if q < 0 || q >= len(a.eps) {
					return true, fmt.Errorf("bw: completion for unknown wr_id %d", wc.WRID)
				}
				// A CQE stands for cq_mod WRs, the last one of a QP for
				// those left: perftest adds cq_mod every time, which
				// overshoots when --iters is not a multiple of it and lets
				// the total pass while another QP still has WRs out.
				inc := a.cqMod
				if a.deadline == 0 {
					inc = max(min(inc, a.iters-a.ccnt[q]), 0)
				}
				a.ccnt[q] += inc
				a.totccnt += inc
				took = true
				t := a.clk.now()
				switch {
				case a.deadline > 0:
					a.completed = append(a.completed[:0], t)
				case a.totccnt > a.total():
					a.completed[a.total()-1] = t
				default:
					a.completed[a.totccnt-1] = t
				}
			}
			moved = true
		}
	}
	return moved, nil
}

// stats is the client's bandwidth row.
func (a *bwClient) stats(gbits, noPeak bool) bwStats {
	if a.deadline > 0 {
		var span int64
		if len(a.completed) > 0 && len(a.posted) > 0 {
			span = a.completed[0] - a.posted[0]
		}
		return bwFromSpan(min(a.totccnt, a.totscnt), span, a.size, gbits)
	}
	return computeBW(a.posted, a.completed, a.size, a.postList, a.cqMod, gbits, noPeak)
}

// bwServer is run_iter_bw_server (send_bw's receiver): receives posted
// ahead, each re-posted while more messages are to come; it times the
// first and the last receive.
type bwServer struct {
	eps     []*perfEP
	clk     perfClock
	iters   int // per QP
	size    int
	posted  []int // receives posted per QP
	rcnt    int
	first   int64
	last    int64
	endless bool // a timed run: runs until the client is done
	wcs     []provider.WC
	watch   cqWatch
}

func newBWServer(eps []*perfEP, clk perfClock, iters, size, rxDepth int, endless bool) (*bwServer, error) {
	a := &bwServer{eps: eps, clk: clk, iters: iters, size: size, posted: make([]int, len(eps)), endless: endless, wcs: make([]provider.WC, 16)}
	for i, e := range eps {
		if err := e.postRecvs(size, rxDepth); err != nil {
			return nil, err
		}
		a.posted[i] = rxDepth
	}
	return a, nil
}

func (a *bwServer) done() bool { return !a.endless && a.rcnt >= a.iters*len(a.eps) }

func (a *bwServer) progress() float64 { return float64(a.rcnt) / float64(max(a.iters*len(a.eps), 1)) }

func (a *bwServer) state() string {
	return fmt.Sprintf("send_bw server: %d of %d received", a.rcnt, a.iters*len(a.eps))
}

func (a *bwServer) step() (bool, error) {
	if a.watch.idle() {
		return false, nil
	}
	moved := false
	defer func() { a.watch.swept(moved) }()
	for i, e := range a.eps {
		for {
			ok, err := e.ready(e.rcq, true)
			if err != nil {
				return moved, err
			}
			if !ok {
				break
			}
			n, err := e.rcq.Poll(a.wcs)
			if err != nil {
				return moved, err
			}
			for k, wc := range a.wcs[:n] {
				if wc.Status != provider.WCSuccess {
					c, note := e.recvCause(a.wcs[k:n])
					return true, fmt.Errorf("send_bw server: receive completion with error %v (vendor syndrome %#x%s) after %d", c.Status, c.VendorErr, note, a.rcnt)
				}
				if a.rcnt == 0 {
					a.first = a.clk.now()
				}
				a.rcnt++
				a.last = a.clk.now()
				if a.endless || a.posted[i] < a.iters {
					if _, err := e.qp.PostRecv([]provider.RecvWR{e.recvWR(a.size, 0)}); err != nil {
						return true, fmt.Errorf("couldn't post recv: rcnt=%d: %w", a.rcnt, err)
					}
					a.posted[i]++
				}
			}
			moved = true
		}
	}
	return moved, nil
}

// cqWatch lets an actor that sweeps the CQs of many QPs skip a sweep that
// cannot find anything: it remembers the emulated devices' count of landed
// CQEs (landed) from the start of a sweep that took no completion, and
// while the count stands still every CQ is as empty as that sweep found it
// and nothing new may be posted. The start, not the end: a post or a poll
// may run the engine, and a CQE that lands mid-sweep moves the count past
// it. landed is nil on a real NIC: every step sweeps.
type cqWatch struct {
	landed func() uint64
	from   uint64
	quiet  bool
}

// idle reports whether the sweep about to start can be skipped; else it
// notes the count it starts from.
func (w *cqWatch) idle() bool {
	if w.landed == nil {
		return false
	}
	n := w.landed()
	if w.quiet && n == w.from {
		return true
	}
	w.from, w.quiet = n, false
	return false
}

// swept records whether the sweep took a completion.
func (w *cqWatch) swept(took bool) { w.quiet = w.landed != nil && !took }

// errStuck is wrapped when no side can move and the world has nothing
// left to do.
var errStuck = errors.New("the run is stuck")

// runActors steps the actors until every one in must is done. advance lets
// the world move on when no actor could; it fails when it cannot (an idle
// simulation, a timeout). tick is called after every round (the progress
// bar).
func runActors(actors []perfActor, must []perfActor, advance func() error, tick func()) error {
	for {
		all := true
		for _, a := range must {
			if !a.done() {
				all = false
				break
			}
		}
		if all {
			return nil
		}
		moved := false
		for _, a := range actors {
			if a.done() {
				continue
			}
			m, err := a.step()
			if err != nil {
				return err
			}
			moved = moved || m
		}
		if tick != nil {
			tick()
		}
		if moved {
			continue
		}
		if err := advance(); err != nil {
			var st []string
			for _, a := range actors {
				st = append(st, a.state())
			}
			return fmt.Errorf("%w (%v)", err, st)
		}
	}
}
