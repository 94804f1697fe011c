package device

import (
	"encoding/binary"
	"errors"

	"github.com/softnic/softnic/dma"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/pcie"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/sim"
)

// responder is the receive side of an RC QP: the expected PSN, the message
// being received, and the resources that let duplicate READs and atomics
// be answered again without executing them twice (rocev2.md §4.5).
type responder struct {
	q       *qp
	ePSN    roce.PSN // expected PSN
	msn     uint32
	nakSent bool     // a PSN-sequence or RNR NAK for ePSN is outstanding
	nakTrig roce.PSN // the PSN that drew it
	nakLast roce.PSN // the PSN of the last packet seen out of sequence since (or nakTrig)
	// failing: the responder has refused a request (or failed a SEND
	// with invalidate) while READ responses before it were still to be
	// built, and the answer to it waits in streams behind them
	// (respStream.fail). Until pump reaches that answer and takes the QP
	// to ERR (fail), no request is taken: the refused one was the last
	// the responder executes (CtrRxDropRespFailing). This only defers the
	// moment the responder acts on the error to when, taking requests in
	// order, it gets there; what lets the answers built before it out of
	// a QP in ERR is qp.respKeep, the same for both cases.
	failing bool

	recv struct { // a SEND (or WRITE with immediate) being placed
		active bool
		held   bool // UC: a receive WQE taken by a message that was dropped, kept for the next one
		// wqe is allocated on the QP's first receive (recvSlot): a kilobyte of SGEs.
		wqe *recvWQE
		off uint64
	}
	wr struct { // an RDMA WRITE being received
		active bool
		va     uint64
		rkey   uint32
		left   uint64
		total  uint32
	}

	res     []rdRes // READ/atomic resources, a ring of max_dest_rd_atomic (power of two)
	resNext int

	// READ responses are built a few at a time, as earlier ones leave
	// (rxe builds one per pass of its responder), not all at once: a 64
	// MiB READ holds a handful of frames, not 65536, and a re-request of a
	// READ being answered restarts its stream instead of queueing a
	// second copy behind the first.
	streams []respStream // in PSN order; streams[0] is being sent
	queued  int          // response frames built and not yet on the wire

	ud *rxPark // packets waiting for their receive stage before a doorbell-record read (udpark.go); nil until one does
}

// respAhead is how many READ response frames a QP keeps built ahead of the
// wire: enough to cover the DMA read latency at line rate. The largest
// case among the built-in profiles is cx7-gen5x16: a 4096-byte frame
// leaves a 400 GbE port every 83.6 ns, and the DMA read of its payload
// takes about 1.68 µs (host_read_latency 313 ns + 64 lines × 18.08 ns +
// flight and completions), so about 21 frames must be in flight; 16 held
// READ at ~265 Gb/s there. 32 covers a read latency of up to ~2.6 µs at
// 400 GbE. How many a ConnectX keeps in flight is not public
// (assumption: enough never to starve the port).
const respAhead = 32

// respStream is a READ (or a replay of one) being answered, or an atomic
// ACK, an ACK, a NAK or a failure queued behind one (an answer, sent by
// answer or pump through sendAnswer): responses leave in PSN order, so
// nothing overtakes the READ responses before it (rxe finishes a READ's
// replies before it takes the next request; an ACK that overtook them
// would tell the requester they were lost, rocev2.md §4.3).
type respStream struct {
	res    *rdRes   // the READ or atomic resource it answers (nil: an ACK, NAK or failure)
	replay bool     // a duplicate's replay (does not count against max_dest_rd_atomic)
	first  roce.PSN // PSN of the request it answers
	psn    roce.PSN // PSN of the next response packet
	va     uint64   // where its next bytes are, through rkey: translated
	rkey   uint32   // (and checked) as each packet is built
	left   uint64   // bytes still to send
	i, n   int      // packet i of n of this stream
	arrive sim.Time // when the request arrived (trace)
	bytes  uint64
	atomic bool // an atomic ACK carrying orig and msn, ready at ready
	orig   uint64
	msn    uint32 // the MSN when the request was processed
	ready  sim.Time
	ack    bool          // an ACK, NAK or RNR NAK for psn with synd and msn, ready at ready
	synd   roce.Syndrome // ack's syndrome
	// fail: the responder found an error at this request; when the entry
	// is reached the QP goes to ERR (responder.fail), then ack, if set
	// (the error NAK, or the ACK of a SEND whose invalidation failed), is
	// sent. Nothing is queued behind it (responder.failing).
	fail bool
}

// answer reports whether s is an answer (an ACK or NAK, an atomic ACK,
// a failure) rather than a READ's responses.
func (s *respStream) answer() bool { return s.ack || s.atomic || s.fail }

// rdRes is what the responder keeps of an executed READ or atomic.
type rdRes struct {
	valid  bool
	atomic bool
	first  roce.PSN
	npkts  int
	va     uint64
	rkey   uint32
	length uint64
	orig   uint64   // atomic: the original value returned
	txEnd  sim.Time // atomic: when its ACK leaves the packetizer
}

func (r *responder) reset() {
	r.ePSN, r.msn, r.nakSent = 0, 0, false
	r.unpark(r.q.d.eng.Now(), CtrRxDropQPState, false, "to RESET")
	r.abort()
	// A receive WQE a dropped UC message kept is one of the old
	// incarnation: kept, the next message after reconnecting took it
	// instead of a new one (its old buffer), and ERR flushed it by its
	// old index, a receive the provider no longer had.
	r.recv.held = false
	clear(r.res)
	r.resNext = 0
}

// abort forgets the message in progress and the READ responses not yet
// built (QP to ERR, RESET, fatal).
func (r *responder) abort() {
	r.recv.active = false
	r.wr.active = false
	r.failing = false
	r.streams = r.streams[:0]
	r.queued = 0
}

// setMaxDestRd sizes the resource ring (max_dest_rd_atomic rounded up to a
// power of two, as rxe does).
func (r *responder) setMaxDestRd(n uint8) {
	size := 1
	for size < int(n) {
		size <<= 1
	}
	if len(r.res) != size {
		r.res = make([]rdRes, size)
		r.resNext = 0
	}
}

// busyRd counts the READs and atomics the responder is still answering
// at t (first executions only: a replay is not a new outstanding request).
func (r *responder) busyRd(t sim.Time) int {
	n := 0
	for i := range r.streams {
		if s := &r.streams[i]; !s.replay && !s.ack && !s.fail {
			n++
		}
	}
	for i := range r.res {
		if e := &r.res[i]; e.valid && e.atomic && e.txEnd > t {
			n++
		}
	}
	return n
}

func (r *responder) newRes() *rdRes {
	e := &r.res[r.resNext]
	r.resNext = (r.resNext + 1) % len(r.res)
	return e
}

// rx handles a request packet (SEND, WRITE, READ request, atomic).
func (r *responder) rx(arrive, t sim.Time, p *roce.Packet) {
	switch r.q.typ {
	case mlx5.QPTypeUD:
		r.rxUD(arrive, t, p)
		return
	case mlx5.QPTypeUC:
		r.rxUC(arrive, t, p)
		return
	}
	q := r.q
	d := q.d
	psn := p.BTH.PSN()
	if r.failing {
		d.warn(t, CtrRxDropRespFailing, "%v PSN %#x for QP %#x, whose responder failed an earlier request and still answers the READs before it: dropped", p.Opcode, uint32(psn), q.qpn)
		return
	}
	op := p.Info.Operation
	diff := psn.Diff(r.ePSN)
	if diff < 0 {
		d.inc(CtrDuplicateRequest)
		switch op {
		case roce.OperationReadRequest:
			r.replayRead(t, p)
		case roce.OperationCmpSwap, roce.OperationFetchAdd:
			r.replayAtomic(t, p)
		default:
			// Re-ACK with the last accepted PSN, nothing re-executed
			// (rocev2.md §4.5); packets that asked for no ACK get none.
			if p.BTH.AckReq() {
				r.ack(t, r.ePSN.Sub(1), roce.ACKSyndrome(0x1f))
			}
		}
		return
	}
	if diff > 0 {
		d.inc(CtrOutOfSequence)
		// NAK once per gap; again when the requester is seen to have gone
		// back (a PSN at or before the one that drew the NAK, and before
		// the packet seen just before it) and the gap is still there.
		// Later packets overtaking each other draw nothing, and neither
		// does a second copy of the packet seen last (a duplicate the
		// network made): taken as a go-back, each copy drew a NAK of its
		// own, each NAK cost the requester one of its retries, and the
		// 1M-message soak (seed 1) ended a SEND RETRY_EXC_ERR after six
		// losses of one packet and a duplicated one. (rxe NAKs once per
		// gap and leaves the rest to the requester's timer; that softnic
		// NAKs a go-back again is its own choice, which costs a retry only
		// when the requester did go back.)
		if !r.nakSent || !psn.After(r.nakTrig) && psn.Before(r.nakLast) {
			r.nakSent, r.nakTrig = true, psn
			r.ack(t, r.ePSN, roce.NAKSyndrome(nakPSNSeq))
		}
		r.nakLast = psn
		return
	}
	r.nakSent = false
	if (r.recv.active || r.wr.active) && !r.continues(p) {
		// In sequence, but not the next packet of the message open: that
		// message misses its Last (rxe's check_op_seq, a class C error).
		// Nothing of this request is executed; the SEND's receive
		// completes REM_INV_REQ_ERR (rocev2.md §4.6).
		d.warn(t, CtrRxMissingLast, "QP %#x: %v PSN %#x while a %s is open", q.qpn, p.Opcode, uint32(psn), r.openKind())
		r.error(t, psn, nakInvalidReq, mlx5.SyndRemoteInvalidReq)
		return
	}
	switch op {
	case roce.OperationSend:
		r.rxSend(arrive, t, p)
	case roce.OperationWrite:
		r.rxWrite(arrive, t, p)
	case roce.OperationReadRequest:
		r.rxRead(arrive, t, p)
	case roce.OperationCmpSwap, roce.OperationFetchAdd:
		r.rxAtomic(arrive, t, p)
	default:
		d.warn(t, CtrRxUnsupportedOp, "QP %#x: %v not supported", q.qpn, p.Opcode)
		r.error(t, psn, nakInvalidReq, 0)
	}
}

// continues reports whether p is a Middle or Last of the message open
// (a SEND or a WRITE).
func (r *responder) continues(p *roce.Packet) bool {
	if p.Info.Pos.First() {
		return false
	}
	if r.wr.active {
		return p.Info.Operation == roce.OperationWrite
	}
	return p.Info.Operation == roce.OperationSend
}

func (r *responder) openKind() string {
	if r.wr.active {
		return "WRITE"
	}
	return "SEND"
}

// error NAKs a request and moves the QP to ERR; a non-zero syndrome also
// completes the receive WQE in use with it (rocev2.md §4.6).
func (r *responder) error(t sim.Time, psn roce.PSN, code uint8, synd mlx5.Syndrome) {
	r.errorVendor(t, psn, code, synd, 0)
}

// dmaError is error for a failed DMA access of the request at psn: NAK
// remote operational error, and the receive WQE in use (if synd is not 0)
// completed with synd and, for a PCIe/IOMMU error, vendor 0x51, as the
// requester's own DMA errors are (faults.md §2.5 suggests RESP_ERR plus a
// NAK [unconfirmed]). With FaultSpec.DMAErrorFatal a PCIe/IOMMU error is
// a device fatal error instead, wherever the access was.
func (r *responder) dmaError(t sim.Time, psn roce.PSN, synd mlx5.Syndrome, err error) {
	if r.q.d.dmaFatal(t, err) {
		return
	}
	r.errorVendor(t, psn, nakRemoteOp, synd, pcieVendor(err))
}

func (r *responder) errorVendor(t sim.Time, psn roce.PSN, code uint8, synd mlx5.Syndrome, vendor uint8) {
	q := r.q
	d := q.d
	if q.typ != mlx5.QPTypeRC {
		d.inc(CtrRxUCError)
		if synd == mlx5.SyndLocalProt && r.recv.active {
			// The receive WQE itself cannot be used (a bad lkey, an MR
			// gone, a PCIe error on its buffer): kept, it would fail every
			// later message too and no completion would ever say why. rxe
			// takes it as a malformed WQE (class A: the receive completes
			// in error and the QP goes to ERR, whatever its type); the
			// syndrome is LOC_PROT_ERR, as on RC and UD.
			r.recvError(t, psn, synd, vendor)
			q.toError(t)
			return
		}
		// Otherwise UC (and UD) never NAK: the message is dropped and
		// counted, the QP carries on (rocev2.md §4.6).
		r.dropMessage(t, psn)
		return
	}
	d.responderError(t, q, code, synd != 0 && r.recv.active)
	switch code {
	case nakInvalidReq:
		d.inc(CtrRespRemoteInvalidRequest)
	case nakRemoteAcc:
		d.inc(CtrRespRemoteAccessErrors)
	}
	if synd != 0 && r.recv.active {
		r.recvError(t, psn, synd, vendor)
	}
	// With READs before this request still being answered, rxe and a
	// ConnectX, which take requests in order, act on this error only once
	// those answers (and the ACKs queued behind them) are out: the QP's
	// move to ERR and the NAK wait until they are built (answer), and
	// once built they leave (qp.respKeep). Sent at once, the NAK overtook
	// the READ responses, the QP in ERR dropped the rest of them, and the
	// requester's READ ended RETRY_EXC_ERR instead of completing before
	// the failed request.
	r.answer(t, respStream{ack: true, fail: true, first: psn, psn: psn, synd: roce.NAKSyndrome(code), msn: r.msn, arrive: t, ready: t})
}

// recvError completes the receive WQE the message in progress took with
// synd (and vendor_err vendor) at t: a responder error CQE.
func (r *responder) recvError(t sim.Time, psn roce.PSN, synd mlx5.Syndrome, vendor uint8) {
	q := r.q
	d := q.d
	d.inc(CtrRespCQEError)
	d.inc(ctrCQEError(synd))
	f := mlx5.CQEFields{Opcode: mlx5.CQERespErr, QPN: q.qpn, WQECounter: r.recv.wqe.index, Syndrome: synd, VendorErrSynd: vendor}
	r.recv.active = false
	d.writeCQE(t, q.rcq, &f, 0, int32(psn&0xffffff))
}

// answer sends st, an answer (respStream.answer) to the request at
// st.first, at t, or queues it behind the READ responses still to be
// built: responses leave in PSN order. Its MSN is the one when the
// request was processed either way. A failure queued behind them makes
// the responder drop every later request meanwhile (failing).
func (r *responder) answer(t sim.Time, st respStream) {
	if len(r.streams) > 0 {
		r.failing = r.failing || st.fail
		r.streams = append(r.streams, st)
		return
	}
	r.sendAnswer(t, &st)
}

// sendAnswer sends answer s at t (not before s.ready); for a failure the
// QP goes to ERR first (fail), not before the error was found (s.arrive).
// It reports whether it did, so that pump stops.
func (r *responder) sendAnswer(t sim.Time, s *respStream) bool {
	q := r.q
	d := q.d
	if s.fail {
		r.fail(max(t, s.arrive))
	}
	switch {
	case s.ack:
		d.sendAck(max(t, s.ready), q, s.psn, s.synd, s.msn)
	case s.atomic:
		end := r.atomicAck(max(t, s.ready), s.psn, s.orig, s.msn)
		if !s.replay { // a replay is neither outstanding nor a new stage
			if s.res.valid && s.res.first == s.first {
				s.res.txEnd = end
			}
			d.rec.StagePSN(d.node, "device", "responder", s.arrive, end, 8, 0, q.qpn, 0, int32(s.first&0xffffff))
		}
	}
	return s.fail
}

// fail moves the QP to ERR for an error the responder found, once the
// answers to every request before the failing one have been built (now,
// or when pump reaches the failure queued behind them). Those answers
// still leave (qp.respKeep); its own answer is built after, in ERR (a
// QP in ERR drops the requests it built before, not what it builds).
func (r *responder) fail(t sim.Time) {
	q := r.q
	gen := q.txGen
	q.toError(t)
	if q.txGen != gen {
		q.respKeep = gen + 1
	}
}

// ack sends an ACK, NAK or RNR NAK for psn, or queues it behind the READ
// responses still to be built (the MSN is the one now either way).
func (r *responder) ack(t sim.Time, psn roce.PSN, synd roce.Syndrome) {
	r.answer(t, respStream{ack: true, first: psn, psn: psn, synd: synd, msn: r.msn, arrive: t, ready: t})
}

// rnr answers a request that needs a receive WQE when none is posted: an
// RNR NAK, no state change; later packets of the message are dropped
// quietly until the requester comes back to psn.
func (r *responder) rnr(t sim.Time, psn roce.PSN) {
	q := r.q
	d := q.d
	d.inc(CtrOutOfBuffer)
	if q.typ != mlx5.QPTypeRC {
		r.dropMessage(t, psn) // no RNR NAK on UC: the message is lost
		return
	}
	d.rec.Warnf(d.node, t, "device", CtrOutOfBuffer.String(), "QP %#x PSN %#x: no receive WQE posted, RNR NAK", q.qpn, uint32(psn))
	r.nakSent, r.nakTrig, r.nakLast = true, psn, psn
	r.ack(t, psn, roce.RNRNAKSyndrome(q.minRNR))
}

// recvSlot is where the responder keeps the receive WQE it takes; QPs
// that never receive never allocate it.
func (r *responder) recvSlot() *recvWQE {
	if r.recv.wqe == nil {
		r.recv.wqe = new(recvWQE)
	}
	return r.recv.wqe
}

// takeRecv opens a message that consumes a receive WQE: the one a UC
// message dropped kept (held), or the next posted one. Without one it
// answers RNR and reports false. t is when the WQE is in the device.
func (r *responder) takeRecv(t sim.Time, psn roce.PSN) (sim.Time, bool) {
	q := r.q
	if !r.recv.held {
		done, ok, err := q.rq.take(t, r.recvSlot(), int32(psn&0xffffff))
		t = done
		q.rxBusy = max(q.rxBusy, done)
		if err != nil {
			// The WQE could not be read: a DMA error of this request.
			// The QP's own RQ consumed it, and it completes LOC_PROT_ERR
			// (vendor 0x51 for a PCIe error) as a receive WQE whose
			// buffer cannot be written does; an SRQ kept it, and only
			// the QP fails.
			synd := mlx5.Syndrome(0)
			if q.srq == nil {
				r.recv.active, synd = true, mlx5.SyndLocalProt
			}
			r.dmaError(t, psn, synd, err)
			return t, false
		}
		if !ok {
			r.rnr(t, psn)
			return t, false
		}
	}
	r.recv.active, r.recv.held = true, false
	return t, true
}

// scatter writes src at offset off of the receive WQE in use.
func (r *responder) scatter(t sim.Time, off uint64, src []byte) (sim.Time, int, error) {
	w := r.recvSlot()
	done, tlps, left, err := r.q.d.sgeCopy(t, r.q.rq.pd(), w.sges[:w.nsge], off, src, dma.LocalWrite)
	if err == nil && left > 0 {
		err = errRecvTooSmall
	}
	return done, tlps, err
}

var errRecvTooSmall = errors.New("device: message larger than the receive WQE's buffers")

func (r *responder) rxSend(arrive, t sim.Time, p *roce.Packet) {
	q := r.q
	d := q.d
	psn := p.BTH.PSN()
	pos := p.Info.Pos
	if pos.First() {
		// A message open here is RC's to refuse (rx) and UC's to drop
		// (rxUC): none is by now.
		if !r.recv.held && r.mustWait(t) {
			// No WQE known and the record read would sample host memory
			// before the receive stage gets here: wait for it, as a
			// datagram does (udpark.go), the QP's later packets behind.
			r.parkFront(arrive, t)
			return
		}
		var ok bool
		if t, ok = r.takeRecv(t, psn); !ok {
			return
		}
		r.recv.off = 0
	} else if !r.recv.active {
		d.warn(t, CtrRxMissingFirst, "QP %#x: %v without a First", q.qpn, p.Opcode)
		r.error(t, psn, nakInvalidReq, 0)
		return
	}
	if !payloadOK(pos, len(p.Payload), q.mtu) {
		d.warn(t, CtrRxBadLength, "QP %#x: %v with %d payload bytes at MTU %d", q.qpn, p.Opcode, len(p.Payload), q.mtu)
		r.error(t, psn, nakInvalidReq, mlx5.SyndRemoteInvalidReq)
		return
	}
	done, tlps, err := r.scatter(t, r.recv.off, p.Payload)
	if err != nil {
		if errors.Is(err, errRecvTooSmall) {
			d.warn(t, CtrRxRecvTooSmall, "QP %#x: %v", q.qpn, err)
			d.inc(CtrRespLocalLengthError)
			r.error(t, psn, nakInvalidReq, mlx5.SyndLocalLength)
		} else {
			d.warn(t, CtrRxRecvProt, "QP %#x receive WQE %d: %v", q.qpn, r.recv.wqe.index, err)
			if !d.dmaFatal(t, err) {
				r.errorVendor(t, psn, nakRemoteOp, mlx5.SyndLocalProt, recvVendor(err))
			}
		}
		return
	}
	issued := d.issued(t, done, len(p.Payload)+tlps*d.spec.PCIe.HdrMWr)
	q.rxBusy = max(q.rxBusy, issued)
	r.recv.off += uint64(len(p.Payload))
	d.rec.StagePSN(d.node, "device", "responder", arrive, done, len(p.Payload), tlps, q.qpn, 0, int32(psn&0xffffff))
	// SEND (Last|Only) with invalidate: the key is invalidated once the
	// data is placed, before the message completes (rxe's execute).
	inv := pos.Last() && p.IETH != nil && q.typ == mlx5.QPTypeRC
	if inv {
		if err := d.keys.Invalidate(p.IETH.RKey(), q.pdn); err != nil {
			r.invalidateFailed(t, issued, done, p, err)
			return
		}
		d.inc(CtrRxSendInvalidate)
	}
	r.ePSN = r.ePSN.Next()
	if pos.Last() {
		r.msn++
		f := mlx5.CQEFields{Opcode: mlx5.CQERespSend, QPN: q.qpn, WQECounter: r.recv.wqe.index,
			ByteCnt: uint32(r.recv.off), SE: p.BTH.SE(), FlagsRQPN: 2 << 24}
		switch {
		case p.Info.HasImm():
			f.Opcode = mlx5.CQERespSendImm
			f.Imm = p.ImmDt.Imm()
		case inv:
			// RESP_SEND_INV: libmlx5 reports IBV_WC_WITH_INV with the
			// invalidated rkey from imm_inval_pkey (mlx5.md §6.1, §6.5).
			f.Opcode = mlx5.CQERespSendInv
			f.Imm = p.IETH.RKey()
		}
		r.recv.active = false
		// The CQE is built while the data's writes are on the link: it
		// queues behind them (posted writes stay ordered) and lands after.
		d.writeCQE(issued, q.rcq, &f, 0, int32(psn&0xffffff))
	}
	if p.BTH.AckReq() && q.typ == mlx5.QPTypeRC {
		r.ack(done, psn, roce.ACKSyndrome(0x1f))
	}
}

// invalidateFailed ends a SEND with invalidate whose IETH key cannot be
// invalidated (rocev2.md §4.6; rxe's class J error): the data is placed,
// the receive completes with REM_INV_REQ_ERR, the packet is ACKed as if
// it had succeeded (if it asks for an ACK; no NAK) and the QP moves to
// ERR. As in rxe, the expected PSN and MSN do not move past the packet.
// Behind READ responses still to be built, the ACK and the move to ERR
// wait for them, as a NAK does (answer): in ERR at once, the QP dropped
// those responses and the requester's READ ended RETRY_EXC_ERR.
//
// Model decision: no key of this model can be invalidated remotely (no
// fast-reg MR, no memory window, REG_MR never sets en_rinval; see
// dma.MR.RemoteInvalidate), so every SEND with invalidate takes this path,
// whether its key is an ordinary MR's or unknown.
func (r *responder) invalidateFailed(t, issued, done sim.Time, p *roce.Packet, err error) {
	q := r.q
	d := q.d
	psn := p.BTH.PSN()
	d.warn(t, CtrRxSendInvRKey, "QP %#x: %v PSN %#x: %v", q.qpn, p.Opcode, uint32(psn), err)
	r.recvError(issued, psn, mlx5.SyndRemoteInvalidReq, 0) // behind the data
	r.answer(t, respStream{ack: p.BTH.AckReq(), fail: true, first: psn, psn: psn, synd: roce.ACKSyndrome(0x1f), msn: r.msn, arrive: t, ready: done})
}

// dropMessage abandons the message in progress (UC): a receive WQE it had
// taken from the QP's own RQ is kept for the next message, as rxe and the
// IB spec keep it (class D1). One taken from an SRQ belongs to the SRQ,
// not the QP: it completes with REM_INV_REQ_ERR and the QP carries on, as
// rxe's class E (do_class_d1e_error; rocev2.md §4.6 "with SRQ, UC posts
// an error CQE"). Assumed, unconfirmed for mlx5: the same syndrome.
func (r *responder) dropMessage(t sim.Time, psn roce.PSN) {
	q := r.q
	if r.recv.active && q.srq != nil {
		r.recvError(t, psn, mlx5.SyndRemoteInvalidReq, 0)
	}
	if r.recv.active {
		r.recv.active, r.recv.held = false, true
	}
	r.wr.active = false
}

func (r *responder) rxWrite(arrive, t sim.Time, p *roce.Packet) {
	q := r.q
	d := q.d
	psn := p.BTH.PSN()
	pos := p.Info.Pos
	if pos.First() {
		// No message is open (rx, rxUC).
		if q.access&mlx5.AccessRemoteWrite == 0 {
			d.warn(t, CtrRxWriteNotAllowed, "QP %#x has no remote-write access", q.qpn)
			r.error(t, psn, nakInvalidReq, 0)
			return
		}
		va, rkey, n := p.RETH.VA(), p.RETH.RKey(), p.RETH.DMALen()
		if n > 0 { // zero-length: R_Key and VA are not checked (C9-88)
			if _, err := d.keys.Check(rkey, q.pdn, va, uint64(n), dma.RemoteWrite); err != nil {
				d.warn(t, CtrRxWriteRKey, "QP %#x WRITE va %#x len %d rkey %#x: %v", q.qpn, va, n, rkey, err)
				r.error(t, psn, nakRemoteAcc, 0)
				return
			}
		}
		d.inc(CtrRxWriteRequests)
		r.wr.active, r.wr.va, r.wr.rkey, r.wr.left, r.wr.total = true, va, rkey, uint64(n), n
	} else if !r.wr.active {
		d.warn(t, CtrRxMissingFirst, "QP %#x: %v without a First", q.qpn, p.Opcode)
		r.error(t, psn, nakInvalidReq, 0)
		return
	}
	n := uint64(len(p.Payload))
	if !payloadOK(pos, len(p.Payload), q.mtu) || n > r.wr.left || (pos.Last() && n != r.wr.left) {
		d.warn(t, CtrRxBadLength, "QP %#x: %v with %d bytes, %d of the RETH length left", q.qpn, p.Opcode, n, r.wr.left)
		r.error(t, psn, nakInvalidReq, 0)
		return
	}
	// WRITE with immediate consumes a receive WQE: take it before placing
	// data so that an RNR NAK leaves nothing half done.
	imm := pos.Last() && p.Info.HasImm()
	if imm {
		var ok bool
		if t, ok = r.takeRecv(t, psn); !ok {
			if pos.First() {
				// An ONLY: the requester sends it again whole after the
				// RNR NAK, so it must find no WRITE open. (A LAST keeps
				// its WRITE open: the retry resumes at the NAKed PSN.)
				r.wr.active = false
			}
			return
		}
	}
	done := t
	tlps, wire := 0, 0
	if n > 0 {
		// Every packet is checked against the rkey, so that a DeregMR (or
		// a destroyed QP) fences out the rest of a WRITE under way.
		host, err := d.keys.Check(r.wr.rkey, q.pdn, r.wr.va, n, dma.RemoteWrite)
		if err != nil {
			d.warn(t, CtrRxWriteRKey, "QP %#x WRITE packet PSN %#x va %#x len %d rkey %#x: %v", q.qpn, uint32(psn), r.wr.va, n, r.wr.rkey, err)
			r.error(t, psn, nakRemoteAcc, mlx5.SyndRemoteAccess)
			return
		}
		// The host sees the bytes when they land (ib_write_lat polls the
		// last one); from a kept frame's buffer they land uncopied.
		var dn sim.Time
		var st pcie.Stats
		if own := d.rxOwn; own != nil {
			d.rxOwn = nil // one payload per frame
			dn, st, err = d.dma.WriteVisibleKeep(t, host, p.Payload, &own)
			d.rxSpare = own
		} else {
			dn, st, err = d.dma.WriteVisible(t, host, p.Payload)
		}
		if err != nil {
			d.warn(t, CtrRxWriteDMA, "QP %#x: %v", q.qpn, err)
			r.dmaError(t, psn, 0, err)
			return
		}
		done, tlps, wire = dn, st.TLPs(), st.WireBytes
	}
	issued := d.issued(t, done, wire)
	q.rxBusy = max(q.rxBusy, issued)
	r.wr.va += n
	r.wr.left -= n
	r.ePSN = r.ePSN.Next()
	d.rec.StagePSN(d.node, "device", "responder", arrive, done, int(n), tlps, q.qpn, 0, int32(psn&0xffffff))
	if pos.Last() {
		r.msn++
		r.wr.active = false
		if imm {
			f := mlx5.CQEFields{Opcode: mlx5.CQERespWrImm, QPN: q.qpn, WQECounter: r.recv.wqe.index,
				ByteCnt: r.wr.total, Imm: p.ImmDt.Imm(), SE: p.BTH.SE(), FlagsRQPN: 2 << 24}
			r.recv.active = false
			d.writeCQE(issued, q.rcq, &f, 0, int32(psn&0xffffff)) // behind the data, as for SEND
		}
	}
	if p.BTH.AckReq() && q.typ == mlx5.QPTypeRC {
		r.ack(done, psn, roce.ACKSyndrome(0x1f))
	}
}

// rdAtomicAllowed applies the checks every READ and atomic passes first:
// the QP's access, max_dest_rd_atomic, and how many are being answered.
func (r *responder) rdAtomicAllowed(t sim.Time, p *roce.Packet, access uint32, ctr counter) bool {
	q := r.q
	d := q.d
	psn := p.BTH.PSN()
	if q.access&access == 0 || q.maxDestRd == 0 {
		d.warn(t, ctr, "QP %#x: %v not enabled (access %#x, max_dest_rd_atomic %d)", q.qpn, p.Opcode, q.access, q.maxDestRd)
		r.error(t, psn, nakInvalidReq, 0)
		return false
	}
	if n := r.busyRd(t); n >= int(q.maxDestRd) {
		d.warn(t, CtrRxReadTooMany, "QP %#x: %v with %d READs/atomics still being answered (max_dest_rd_atomic %d)", q.qpn, p.Opcode, n, q.maxDestRd)
		r.error(t, psn, nakInvalidReq, 0)
		return false
	}
	return true
}

// rxRead executes an RDMA READ request: READ RESPONSE packets from the MR.
func (r *responder) rxRead(arrive, t sim.Time, p *roce.Packet) {
	q := r.q
	d := q.d
	psn := p.BTH.PSN()
	if !r.rdAtomicAllowed(t, p, mlx5.AccessRemoteRead, CtrRxReadNotAllowed) {
		return
	}
	va, rkey, n := p.RETH.VA(), p.RETH.RKey(), uint64(p.RETH.DMALen())
	if n > 0 {
		if _, err := d.keys.Check(rkey, q.pdn, va, n, dma.RemoteRead); err != nil {
			d.warn(t, CtrRxReadRKey, "QP %#x READ va %#x len %d rkey %#x: %v", q.qpn, va, n, rkey, err)
			r.error(t, psn, nakRemoteAcc, 0)
			return
		}
	}
	mtu := uint64(q.mtu)
	pkts := max(1, int((n+mtu-1)/mtu))
	r.ePSN = psn.Add(pkts)
	r.msn++
	d.inc(CtrRxReadRequests)
	res := r.newRes()
	*res = rdRes{valid: true, first: psn, npkts: pkts, va: va, rkey: rkey, length: n}
	r.streams = append(r.streams, respStream{res: res, first: psn, psn: psn, va: va, rkey: rkey, left: n, n: pkts, arrive: arrive, bytes: n, msn: r.msn})
	r.pump(t.Add(d.cyc(d.spec.Core.ResponderCycles)))
}

// pump builds READ response packets, in stream order, until respAhead
// are waiting for the wire.
func (r *responder) pump(t sim.Time) {
	q := r.q
	d := q.d
	for r.queued < respAhead && len(r.streams) > 0 && q.state != mlx5.QPStateERR && !q.dead {
		s := &r.streams[0]
		if s.answer() {
			st := *s
			r.streams = append(r.streams[:0], r.streams[1:]...)
			if r.sendAnswer(t, &st) {
				return // a failure, the last answer (failing): the QP is in ERR
			}
			continue
		}
		if d.tx.full(q, t) {
			d.tx.wait(d, q, t, txWaitResp)
			return
		}
		sz := min(s.left, uint64(q.mtu))
		var host uint64
		if sz > 0 {
			// Every packet goes through the rkey, as a WRITE's do: a
			// DeregMR fences out the rest of a READ being answered. (Read
			// from the address translated when the request came, the
			// responses after DESTROY_MKEY carried whatever the host had
			// put in memory no key covered any more.)
			h, err := d.keys.Check(s.rkey, q.pdn, s.va, sz, dma.RemoteRead)
			if err != nil {
				d.warn(t, CtrRxReadRKey, "QP %#x READ response PSN %#x va %#x len %d rkey %#x: %v", q.qpn, uint32(s.psn), s.va, sz, s.rkey, err)
				first := s.first
				r.streams = r.streams[:0]
				r.error(t, first, nakRemoteAcc, 0)
				return
			}
			host = h
		}
		fp := &d.fp
		d.frameHeader(q, fp)
		switch {
		case s.n == 1:
			fp.BTH.Opcode = roce.OpRCReadResponseOnly
		case s.i == 0:
			fp.BTH.Opcode = roce.OpRCReadResponseFirst
		case s.i == s.n-1:
			fp.BTH.Opcode = roce.OpRCReadResponseLast
		default:
			fp.BTH.Opcode = roce.OpRCReadResponseMiddle
		}
		fp.BTH.PSN = s.psn
		fp.AETH = roce.AETHFields{Syndrome: roce.ACKSyndrome(0x1f), MSN: s.msn & 0xffffff}
		pl := payload{n: int(sz), host: host, isHost: true, resp: true}
		end, err := d.packetize(t, q, &pl, 0)
		if err != nil {
			d.warn(t, CtrRxReadDMA, "QP %#x READ response PSN %#x: %v", q.qpn, uint32(fp.BTH.PSN), err)
			// This READ is the one that failed: it and what waits behind
			// it (answers to later requests) go; the NAK leaves now.
			first := s.first
			r.streams = r.streams[:0]
			r.dmaError(t, first, 0, err)
			return
		}
		r.queued++
		s.psn, s.va, s.left = s.psn.Next(), s.va+sz, s.left-sz
		s.i++
		if s.i == s.n {
			d.rec.StagePSN(d.node, "device", "responder", s.arrive, end, int(s.bytes), 0, q.qpn, 0, int32(s.first&0xffffff))
			r.streams = append(r.streams[:0], r.streams[1:]...)
		}
	}
}

// sent is called when one of the QP's READ response frames has left: the
// next ones can be built.
func (r *responder) sent(t sim.Time) {
	if r.queued > 0 {
		r.queued--
	}
	r.pump(t)
}

// replayRead answers a duplicate READ from the resource whose PSN range
// holds it, if the request asks for part of what that READ covered with
// the same rkey; otherwise, and when no resource holds it, the duplicate
// is dropped (rocev2.md §4.5).
func (r *responder) replayRead(t sim.Time, p *roce.Packet) {
	q := r.q
	d := q.d
	psn := p.BTH.PSN()
	va, rkey, n := p.RETH.VA(), p.RETH.RKey(), uint64(p.RETH.DMALen())
	for i := range r.res {
		e := &r.res[i]
		if !e.valid || e.atomic || !psn.InWindow(e.first, uint32(e.npkts)) {
			continue
		}
		off := uint64(psn.Diff(e.first)) * uint64(q.mtu)
		if rkey != e.rkey || va != e.va+off || va+n != e.va+e.length {
			d.warn(t, CtrReplayMiss, "QP %#x: duplicate %v PSN %#x (va %#x len %d rkey %#x) is not the tail of the READ it repeats (va %#x len %d rkey %#x): dropped",
				q.qpn, p.Opcode, uint32(psn), va, n, rkey, e.va, e.length, e.rkey)
			return
		}
		if n > 0 {
			if _, err := d.keys.Check(rkey, q.pdn, va, n, dma.RemoteRead); err != nil {
				d.warn(t, CtrReplayMiss, "QP %#x: duplicate %v PSN %#x: %v: dropped", q.qpn, p.Opcode, uint32(psn), err)
				return // the MR is gone: nothing to replay
			}
		}
		d.inc(CtrReplayRead)
		mtu := uint64(q.mtu)
		st := respStream{res: e, replay: true, first: e.first, psn: psn, va: va, rkey: rkey, left: n, n: max(1, int((n+mtu-1)/mtu)), arrive: t, bytes: n, msn: r.msn}
		// The stream answering this READ, not any that points at the same
		// ring slot: a replay queued behind other responses keeps its slot
		// after a later READ recycled it, and matched by the pointer alone
		// it was replaced (never sent), while this READ's own stream,
		// still counted against max_dest_rd_atomic, went out a second
		// time.
		r.replayStream(t, st)
		return
	}
	// No resource holds it: the PSN was never a READ's (an old SEND's or
	// WRITE's), or the ring recycled the READ's entry (a requester that
	// ran more than max_dest_rd_atomic READs/atomics past it). rxe drops
	// it (duplicate_request: find_resource fails, a class D error, the
	// request is dropped; rocev2.md §4.5), and so does softnic: it cannot
	// tell the two apart, and answering read memory again under PSNs that
	// were another request's. A requester that keeps asking ends in
	// RETRY_EXC_ERR.
	d.warn(t, CtrReplayMiss, "QP %#x: duplicate %v PSN %#x (va %#x len %d rkey %#x) matches no READ resource (max_dest_rd_atomic %d): dropped",
		q.qpn, p.Opcode, uint32(psn), va, n, rkey, q.maxDestRd)
}

// replayStream answers a duplicate READ with st: if a stream answering
// the same READ (its resource and first PSN) is still being built, it starts again
// from where the requester now asks, keeping its place, its MSN and
// whether it is a first execution (what is queued already goes out);
// otherwise st queues behind the others. A replay does not count against
// max_dest_rd_atomic: only first executions are the requester's
// outstanding READs.
func (r *responder) replayStream(t sim.Time, st respStream) {
	d := r.q.d
	for k := range r.streams {
		if s := &r.streams[k]; s.res == st.res && s.first == st.first && !s.answer() {
			st.replay, st.msn = s.replay, s.msn
			r.streams[k] = st
			r.pump(t.Add(d.cyc(d.spec.Core.ResponderCycles)))
			return
		}
	}
	r.streams = append(r.streams, st)
	r.pump(t.Add(d.cyc(d.spec.Core.ResponderCycles)))
}

// rxAtomic executes CMP_SWAP or FETCH_ADD on an 8-byte, 8-byte-aligned
// word and answers with the original value. The word is a host-order
// (little-endian) 64-bit integer, as rxe reads it.
func (r *responder) rxAtomic(arrive, t sim.Time, p *roce.Packet) {
	q := r.q
	d := q.d
	psn := p.BTH.PSN()
	if !r.rdAtomicAllowed(t, p, mlx5.AccessRemoteAtomic, CtrRxAtomicNotAllowed) {
		return
	}
	a := p.AtomicETH
	va, rkey := a.VA(), a.RKey()
	if va&7 != 0 {
		d.warn(t, CtrRxAtomicMisaligned, "QP %#x: %v at va %#x, not 8-byte aligned", q.qpn, p.Opcode, va)
		r.error(t, psn, nakInvalidReq, 0)
		return
	}
	host, err := d.keys.Check(rkey, q.pdn, va, 8, dma.RemoteAtomic)
	if err != nil {
		d.warn(t, CtrRxAtomicRKey, "QP %#x %v va %#x rkey %#x: %v", q.qpn, p.Opcode, va, rkey, err)
		r.error(t, psn, nakRemoteAcc, 0)
		return
	}
	b := d.atomBuf[:]
	done, _, err := d.dma.Read(t, host, b)
	if err == nil {
		orig := binary.LittleEndian.Uint64(b)
		val := orig + a.SwapAdd()
		if p.Info.Operation == roce.OperationCmpSwap {
			val = orig
			if orig == a.Compare() {
				val = a.SwapAdd()
			}
		}
		binary.LittleEndian.PutUint64(b, val)
		var dn sim.Time
		if dn, _, err = d.dma.Write(done, host, b); err == nil {
			done = dn
		}
		binary.LittleEndian.PutUint64(b, orig)
	}
	if err != nil {
		d.warn(t, CtrRxAtomicDMA, "QP %#x %v: %v", q.qpn, p.Opcode, err)
		r.dmaError(t, psn, 0, err)
		return
	}
	orig := binary.LittleEndian.Uint64(b)
	r.ePSN = psn.Next()
	r.msn++
	d.inc(CtrRxAtomicRequests)
	res := r.newRes()
	*res = rdRes{valid: true, atomic: true, first: psn, npkts: 1, va: va, rkey: rkey, length: 8, orig: orig}
	q.rxBusy = max(q.rxBusy, done)
	// Behind READ responses still to be built, the ACK goes out after
	// them (responses leave in PSN order).
	r.answer(done, respStream{res: res, first: psn, psn: psn, n: 1, arrive: arrive, bytes: 8, atomic: true, orig: orig, msn: r.msn, ready: done})
}

// atomicAck sends the ATOMIC ACKNOWLEDGE for psn carrying orig, and msn
// in its AETH: the MSN when the atomic ran, as rxe answers each request
// as it processes it, even when the ACK waited behind READ responses.
func (r *responder) atomicAck(t sim.Time, psn roce.PSN, orig uint64, msn uint32) sim.Time {
	q := r.q
	d := q.d
	fp := &d.fp
	d.frameHeader(q, fp)
	fp.BTH.Opcode = roce.OpRCAtomicAck
	fp.BTH.PSN = psn
	fp.AETH = roce.AETHFields{Syndrome: roce.ACKSyndrome(0x1f), MSN: msn & 0xffffff}
	fp.AtomicAckETH = roce.AtomicAckETHFields{OrigData: orig}
	var pl payload
	end, err := d.packetize(t, q, &pl, 0)
	if err != nil {
		d.warn(t, CtrPacketizeError, "QP %#x atomic ACK: %v", q.qpn, err)
		return t
	}
	return end
}

// replayAtomic answers a duplicate atomic with the saved original value;
// it is never executed twice. Without a resource it is dropped, counted
// and warned (as rxe drops it, rocev2.md §4.5): the requester's retries
// then end in RETRY_EXC_ERR. A requester that keeps to max_rd_atomic <=
// this QP's max_dest_rd_atomic never gets there, since softnic's counts
// from the oldest unanswered READ/atomic.
func (r *responder) replayAtomic(t sim.Time, p *roce.Packet) {
	q := r.q
	d := q.d
	psn := p.BTH.PSN()
	for i := range r.res {
		e := &r.res[i]
		if e.valid && e.atomic && e.first == psn && e.va == p.AtomicETH.VA() && e.rkey == p.AtomicETH.RKey() {
			d.inc(CtrReplayAtomic)
			ready := t.Add(d.cyc(d.spec.Core.ResponderCycles))
			// Behind READ responses still to be built, the replayed ACK
			// leaves after them, as a first execution's does, so that
			// responses keep PSN order.
			r.answer(ready, respStream{res: e, replay: true, first: psn, psn: psn, n: 1, arrive: t, bytes: 8, atomic: true, orig: e.orig, msn: r.msn, ready: ready})
			return
		}
	}
	d.warn(t, CtrReplayMiss, "QP %#x: duplicate %v PSN %#x matches no atomic resource (max_dest_rd_atomic %d; an atomic is never executed twice): dropped", q.qpn, p.Opcode, uint32(psn), q.maxDestRd)
}

// rxUC handles a UC request packet. There are no ACKs, NAKs or
// duplicates: a packet out of sequence means the message in progress lost
// a packet, so that message is dropped (counted) and reception resumes at
// the next FIRST or ONLY, which always starts a new message (IB spec; rxe
// also drops the first whole message after a loss, rocev2.md §1.5).
func (r *responder) rxUC(arrive, t sim.Time, p *roce.Packet) {
	q := r.q
	d := q.d
	psn := p.BTH.PSN()
	inSeq := psn == r.ePSN
	open := r.recv.active || r.wr.active
	if p.Info.Pos.First() {
		if open {
			d.inc(CtrRxUCDropped)
			r.dropMessage(t, psn)
		}
	} else if !inSeq || !open {
		if open {
			d.inc(CtrRxUCDropped)
			r.dropMessage(t, psn)
		} else {
			d.inc(CtrRxUCError)
		}
		if !inSeq {
			d.inc(CtrOutOfSequence)
		}
		r.ePSN = psn.Next()
		return
	}
	r.ePSN = psn // rxSend / rxWrite move it past the packet
	switch p.Info.Operation {
	case roce.OperationSend:
		r.rxSend(arrive, t, p)
	case roce.OperationWrite:
		r.rxWrite(arrive, t, p)
	default:
		d.warn(t, CtrRxUnsupportedOp, "UC QP %#x: %v not supported", q.qpn, p.Opcode)
	}
	r.ePSN = psn.Next()
}

// rxUD handles a UD SEND: Q_Key check, a receive WQE (none: dropped, UD
// has no RNR), then a 40-byte GRH area and the payload. The GRH area is
// filled as rxe and a ConnectX fill it for RoCEv2: for IPv4, 20 zero bytes
// then the IPv4 header as it was on the wire; for IPv6, the IPv6 header
// (rocev2.md §1.5, §2.2). byte_len counts the 40 bytes.
func (r *responder) rxUD(arrive, t sim.Time, p *roce.Packet) {
	q := r.q
	d := q.d
	if p.Info.Operation != roce.OperationSend || !p.Info.Pos.First() || !p.Info.Pos.Last() {
		d.warn(t, CtrRxUnsupportedOp, "UD QP %#x: %v", q.qpn, p.Opcode)
		return
	}
	if qk := p.DETH.QKey(); qk != q.qkey {
		d.warn(t, CtrRxDropBadQKey, "UD QP %#x: Q_Key %#x, the QP's is %#x", q.qpn, qk, q.qkey)
		return
	}
	if len(p.Payload) > d.spec.Caps.ActiveMTU {
		d.warn(t, CtrRxBadLength, "UD QP %#x: %d payload bytes over the port MTU %d", q.qpn, len(p.Payload), d.spec.Caps.ActiveMTU)
		return
	}
	if r.mustWait(t) {
		r.parkFront(arrive, t)
		return
	}
	w := r.recvSlot()
	done, ok, rerr := q.rq.take(t, w, int32(p.BTH.PSN()&0xffffff))
	q.rxBusy = max(q.rxBusy, done)
	if rerr != nil && q.srq == nil {
		// The WQE could not be read: consumed, it completes LOC_PROT_ERR
		// as one whose buffer cannot be written (below) does, and the QP
		// goes to ERR (below, at the end).
		d.warn(done, CtrRxRecvProt, "UD QP %#x receive WQE %d: %v", q.qpn, w.index, rerr)
		if !d.dmaFatal(done, rerr) {
			r.recvError(done, p.BTH.PSN(), mlx5.SyndLocalProt, pcieVendor(rerr))
			q.toError(done)
		}
		return
	}
	if rerr != nil {
		d.dmaFatal(done, rerr)
		return // an SRQ keeps the WQE: the message is dropped (UD)
	}
	if !ok {
		d.inc(CtrOutOfBuffer)
		d.warn(done, CtrRxUDNoRecv, "UD QP %#x: no receive WQE posted; %v dropped", q.qpn, p.Opcode)
		return
	}
	var grh [40]byte
	l3 := uint32(1) // IPv6
	if len(p.IPHeader) == 20 {
		copy(grh[20:], p.IPHeader)
		l3 = 2 // IPv4 (MLX5_CQE_ROCE_L3_HEADER_TYPE_IPV4)
	} else {
		copy(grh[:], p.IPHeader)
	}
	t = done
	dn1, tlps1, left1, err := d.sgeCopy(t, q.rq.pd(), w.sges[:w.nsge], 0, grh[:], dma.LocalWrite)
	var dn2 sim.Time
	var tlps2, left2 int
	if err == nil && left1 == 0 {
		dn2, tlps2, left2, err = d.sgeCopy(t, q.rq.pd(), w.sges[:w.nsge], 40, p.Payload, dma.LocalWrite)
	}
	f := mlx5.CQEFields{QPN: q.qpn, WQECounter: w.index}
	switch {
	case err != nil:
		d.warn(t, CtrRxRecvProt, "UD QP %#x receive WQE %d: %v", q.qpn, w.index, err)
		if d.dmaFatal(t, err) {
			return
		}
		f.Opcode, f.Syndrome, f.VendorErrSynd = mlx5.CQERespErr, mlx5.SyndLocalProt, recvVendor(err)
	case left1 > 0 || left2 > 0:
		d.warn(t, CtrRxUDTooLong, "UD QP %#x: %d bytes + 40 of GRH do not fit receive WQE %d", q.qpn, len(p.Payload), w.index)
		f.Opcode, f.Syndrome = mlx5.CQERespErr, mlx5.SyndLocalLength
	default:
		f.Opcode = mlx5.CQERespSend
		f.ByteCnt = uint32(40 + len(p.Payload))
		f.SE = p.BTH.SE()
		// flags_rqpn: GRH present (bit 28, read by libmlx5 as IBV_WC_GRH),
		// RoCE L3 type [25:24], source QPN [23:0].
		f.FlagsRQPN = 1<<28 | l3<<24 | p.DETH.SrcQP()
		if p.Info.HasImm() {
			f.Opcode, f.Imm = mlx5.CQERespSendImm, p.ImmDt.Imm()
		}
	}
	if f.Opcode == mlx5.CQERespErr {
		d.inc(CtrRespCQEError)
		d.inc(ctrCQEError(f.Syndrome))
	}
	done = max(done, dn1, dn2)
	// As for an RC SEND (rxSend): the next datagram is processed once
	// these writes are on the link, not once they have landed.
	q.rxBusy = max(q.rxBusy, d.issued(t, done, len(grh)+len(p.Payload)+(tlps1+tlps2)*d.spec.PCIe.HdrMWr))
	d.rec.StagePSN(d.node, "device", "responder", arrive, done, len(p.Payload), tlps1+tlps2, q.qpn, 0, int32(p.BTH.PSN()&0xffffff))
	d.writeCQE(done, q.rcq, &f, 0, int32(p.BTH.PSN()&0xffffff))
	// A UD receive that completes in error (LOC_LEN_ERR: the
	// datagram does not fit the receive WQE; LOC_PROT_ERR: the WQE cannot be
	// read or its buffer cannot be written) takes the QP to ERR, with every
	// outstanding WQE flushed (QP.toError; on an SRQ, the SRQ keeps its WQEs
	// and the QP raises QP_LAST_WQE_REACHED) and no further async event: the
	// error was reported in a CQE, and IBV_EVENT_QP_FATAL is for an error that
	// "prevents the generation of completions" (NVIDIA, RDMA Aware Networks
	// Programming, Events). What was read for it:
	//   - LOC_PROT_ERR: Linux rxe (drivers/infiniband/sw/rxe/rxe_resp.c) takes
	//     a receive WQE it cannot use (copy_data failing other than -ENOSPC:
	//     RESPST_ERR_MALFORMED_WQE) as a class A error for every QP type: the
	//     receive completes in error and the QP goes to ERR. softnic's UC
	//     receive already did (errorVendor); UD now does too.
	//   - LOC_LEN_ERR: on a ConnectX the QP state after it is unconfirmed.
	//     Assumed: the IB QP state machine, which puts a QP whose receive
	//     queue completes a WQE in error into ERR (only send-side errors of
	//     non-RC QPs stop at SQE; the spec text was not at hand to re-read);
	//     HiSilicon's hns RoCE engine reports a UD receive too small for the
	//     datagram with a vendor "general error" CQE precisely so that the QP
	//     need not go to ERR, as the IB specification offers no such
	//     completion (rdma-core PR #1155, "libhns: Add general error type for
	//     CQE"). mlx5 has no such CQE and completes it LOCAL_LENGTH_ERR (0x01),
	//     so the spec behaviour is assumed. rxe differs: it drops the datagram
	//     (no SRQ: class D) or completes it REM_INV_REQ_ERR (SRQ: class E) and
	//     leaves the QP in RTS.
	if f.Opcode == mlx5.CQERespErr {
		q.toError(done) // after the error CQE: the flushes land behind it
	}
}

// issued is when the responder may take its QP's next packet after
// posted writes of wire bytes issued at t that land at done: once the
// last of them has started onto the link (one flight latency plus its
// serialisation before it lands), so that processing the next packet
// overlaps the serialisation of this one, with one packet's writes queued
// behind the link as backpressure. PCIe keeps posted writes in order
// (pcie.Link): the next packet's data, and the CQE, land after these
// anyway. (Holding until landing charged every packet its full write
// latency and capped a 1 MiB WRITE at MTU 1024 to 37 Gb/s of a 100 Gb/s
// port.) ACKs still leave when the data has landed.
func (d *Device) issued(t, done sim.Time, wire int) sim.Time {
	ser := d.tlpRate.Serialize(wire)
	return max(t, done-sim.Time(d.spec.PCIe.FlightLatency)-sim.Time(ser))
}
