package device

import (
	"encoding/binary"
	"errors"
	"net/netip"

	"github.com/softnic/softnic/dma"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/wqefetch"
)

// Requester limits, as rxe has them (rocev2.md §2.3, §4.1).
const (
	// maxPktsPerAckReq: a non-final packet gets AckReq once this many went
	// without one (RXE_MAX_PKT_PER_ACK).
	maxPktsPerAckReq = 64
	// maxUnackedPSNs: the requester sends nothing that starts more than
	// this many PSNs beyond the oldest unacknowledged one
	// (RXE_MAX_UNACKED_PSNS).
	maxUnackedPSNs = 128
)

const (
	wqeExecuting = wqefetch.StateExecuting
	wqeDone      = wqefetch.StateDone
)

// swqe is an outstanding send WQE on the requester side.
type swqe struct {
	idx       uint16
	op        mlx5.Opcode
	signaled  bool
	se        bool
	fence     bool
	imm       uint32
	raddr     uint64
	rkey      uint32
	av        wqefetch.Datagram // UD: where the datagram goes
	swapAdd   uint64            // atomics: swap (CMP_SWAP) or add (FETCH_ADD) value
	compare   uint64            // CMP_SWAP: compare value
	sges      []mlx5.DataFields // out of line: kept (and reused) by the slot
	nsge      int
	inline    []byte // out of line, like sges
	isInline  bool
	length    uint64
	firstPSN  roce.PSN
	npkts     int      // PSNs the WQE consumes (0: a NOP)
	readGot   uint64   // READ: response bytes placed
	readNext  roce.PSN // READ/atomic: PSN of the next response expected
	rereq     roce.PSN // READ: readNext when a gap last made us re-request
	rereqOn   bool
	responded bool // READ/atomic: every response is in
	counted   bool // READ/atomic: counted against max_rd_atomic
	flow      uint64
	errSynd   mlx5.Syndrome // non-zero: complete with this error instead of WR_FLUSH
	errVendor uint8         // its vendor syndrome (0: by syndrome, faults.go vendorFor)
	state     wqefetch.State
}

func (w *swqe) lastPSN() roce.PSN { return w.firstPSN.Add(w.npkts - 1) }

// rdAtomic reports whether w is answered by responses (READ, atomics)
// rather than by ACKs.
func (w *swqe) rdAtomic() bool {
	return w.op == mlx5.OpRDMARead || w.op == mlx5.OpAtomicCS || w.op == mlx5.OpAtomicFA
}

// requester is the send side of a QP: the ring of outstanding WQEs in
// arrival order, the transmit cursor, the PSN window and the timers.
type requester struct {
	q        *qp
	sq       *wqefetch.Queue
	psn      roce.PSN // next new PSN
	ackPSN   roce.PSN // last PSN acknowledged (cumulative)
	sentPSN  roce.PSN // next PSN never sent before (retransmissions are behind it)
	wqes     []swqe
	maxSlots int // the ring never grows past one slot per WQEBB of the SQ
	head     int
	count    int
	cur      int // WQEs [0,cur) of the ring (relative to head) are fully transmitted
	curPkt   int // packets of WQE cur already transmitted
	sinceAck int // packets sent since the last AckReq
	// rdOut counts the READ/atomic WQEs transmitted and not yet
	// completed: a credit of max_rd_atomic comes back only when its WQE
	// completes, in order, so that the window runs from the oldest
	// unanswered READ/atomic. (Giving it back when a later one was
	// answered let the requester run more than max_dest_rd_atomic ahead of
	// a missing response, and the responder had recycled that READ's or
	// atomic's resource by the time it was asked again.) rxe likewise
	// returns rd_atomic in complete_ack.
	rdOut int

	retryLeft int
	rnrLeft   int
	timer     *sim.Timer // local ACK timeout
	rnrTimer  *sim.Timer // RNR wait
	rnrWait   bool
	// nakPSN is the PSN of the PSN-sequence NAK that made the last
	// go-back, while nakBack says nothing has been acknowledged since
	// (progress clears it): the same NAK again goes back again but
	// spends no retry.
	nakPSN  roce.PSN
	nakBack bool
}

type ackTimeout struct{ r *requester }

func (h ackTimeout) Fire(now sim.Time) { h.r.onTimeout(now) }

type rnrExpiry struct{ r *requester }

func (h rnrExpiry) Fire(now sim.Time) { h.r.onRNR(now) }

// initialSlots is how many swqe slots a requester's ring has once its
// first WQE arrives (none before); it doubles, up to one slot per SQ basic
// block, only when WQEs outstanding fill it, so an idle or lightly used QP
// costs little Go heap.
const initialSlots = 4

func (r *requester) init(q *qp, sq *wqefetch.Queue, slots int) {
	r.q, r.sq = q, sq
	r.maxSlots = slots
	r.timer = q.d.eng.NewTimer(ackTimeout{r})
	r.rnrTimer = q.d.eng.NewTimer(rnrExpiry{r})
}

func (r *requester) reset() {
	r.stopTimers()
	r.sq.Reset(0)
	r.head, r.count, r.cur, r.curPkt, r.sinceAck, r.rdOut = 0, 0, 0, 0, 0, 0
	r.psn, r.ackPSN, r.sentPSN = 0, roce.PSN(0).Sub(1), 0
	r.nakBack = false
}

// setSQPSN sets the initial send PSN (MODIFY_QP sq_psn).
func (r *requester) setSQPSN(p roce.PSN) { r.psn, r.ackPSN, r.sentPSN = p, p.Sub(1), p }

func (r *requester) stopTimers() {
	r.timer.Stop()
	r.rnrTimer.Stop()
	r.rnrWait = false
}

// grow doubles the ring (up to maxSlots), keeping the outstanding WQEs in
// order from index 0.
func (r *requester) grow() {
	n := make([]swqe, min(max(2*len(r.wqes), initialSlots), r.maxSlots))
	for i := 0; i < r.count; i++ {
		n[i] = *r.at(i)
	}
	r.wqes, r.head = n, 0
}

func (r *requester) at(i int) *swqe { return &r.wqes[(r.head+i)%len(r.wqes)] }

func (r *requester) push() *swqe {
	if r.count == len(r.wqes) {
		if len(r.wqes) >= r.maxSlots {
			return nil
		}
		r.grow()
	}
	w := r.at(r.count)
	r.count++
	return w
}

func (r *requester) front() *swqe {
	if r.count == 0 {
		return nil
	}
	return &r.wqes[r.head]
}

func (r *requester) pop() {
	r.head = (r.head + 1) % len(r.wqes)
	r.count--
	if r.cur > 0 {
		r.cur--
	} else {
		r.curPkt = 0
	}
}

// timeoutDur is the local ACK timeout, 4.096 µs · 2^timeout (0: none).
func (r *requester) timeoutDur() sim.Duration {
	if r.q.timeout == 0 {
		return 0
	}
	return 4096 * sim.Nanosecond << r.q.timeout
}

// WQEReady is called by the fetch engine for each decoded WQE, in ring
// order (wqefetch.Sink).
func (d *Device) WQEReady(t sim.Time, sq *wqefetch.Queue, w *wqefetch.WQE) {
	q := d.qp(sq.QPN)
	if q == nil || q.dead {
		d.warn(t, CtrWQEUnknownQP, "WQE for QP %#x, which no longer exists", sq.QPN)
		return
	}
	r := &q.req
	if d.chk != nil {
		d.chk.wqe(t, q, w)
	}
	d.rec.Stage(d.node, "device", "wqe_parse", t, t.Add(d.cyc(d.spec.Core.WQEParseCycles)), len(w.Bytes), 0, q.qpn, wqefetch.FlowID(q.qpn, w.Index))
	t = t.Add(d.cyc(d.spec.Core.WQEParseCycles))
	e := r.push()
	if e == nil {
		// More WQEs than the ring has slots: the provider overwrote WQEs
		// still outstanding. The QP cannot go on.
		d.warn(t, CtrSQOverflow, "QP %#x: WQE %d arrived with %d WQEs outstanding in a %d-slot SQ", q.qpn, w.Index, r.count, len(r.wqes))
		q.toError(t)
		d.asyncEvent(t, mlx5.EventQPFatal, q.qpn) // no CQE can report it (docs/events.md)
		return
	}
	ce := w.Ctrl.FMCESE & mlx5.CEMask
	sges, inline := e.sges[:0], e.inline[:0]
	*e = swqe{sges: sges, inline: inline, idx: w.Index, op: w.Ctrl.Opcode, flow: wqefetch.FlowID(q.qpn, w.Index), imm: w.Ctrl.Imm,
		state:    wqefetch.StateValid,
		signaled: q.sigAll || ce == mlx5.CECQUpdate || ce == mlx5.CECQAndEQ,
		se:       w.Ctrl.FMCESE&mlx5.SolicitedEvent != 0,
		fence:    fences(w.Ctrl.FMCESE)}
	switch {
	case q.state == mlx5.QPStateERR || q.state == mlx5.QPStateSQER:
		r.flushAll(t) // posted to a queue in error: flushed
		return
	case w.State == wqefetch.StateInvalid && errors.Is(w.Err, wqefetch.ErrFetchDMA):
		d.warn(t, CtrWQEFetchPCIeError, "QP %#x WQE %d: %v", q.qpn, w.Index, w.Err)
		if d.spec.Faults.WQEFetchErrorFatal {
			d.EnterFatal(t, 0xa, "WQE fetch failed on PCIe")
			return
		}
		e.errVendor = VendorPCIe
		r.fail(t, e, mlx5.SyndLocalProt)
		return
	case w.State == wqefetch.StateInvalid:
		d.warn(t, CtrWQEMalformed, "QP %#x WQE %d: %v", q.qpn, w.Index, w.Err)
		r.fail(t, e, mlx5.SyndLocalQPOp)
		return
	case q.state != mlx5.QPStateRTS:
		d.warn(t, CtrWQEBadState, "QP %#x WQE %d executed in state %v", q.qpn, w.Index, q.state)
		r.fail(t, e, mlx5.SyndLocalQPOp)
		return
	}
	e.raddr, e.rkey = w.Raddr.RAddr, w.Raddr.RKey
	e.swapAdd, e.compare = w.Atomic.SwapAdd, w.Atomic.Compare
	e.av = w.AV
	e.length = w.Length
	e.isInline = w.IsInline
	if w.IsInline {
		e.inline = append(e.inline, w.Inline...)
	} else {
		e.sges = append(e.sges, w.SGEs...)
		e.nsge = len(e.sges)
	}
	if e.op == mlx5.OpNOP {
		// A NOP completes in order, once everything before it has.
		e.firstPSN = r.psn
		if q.typ != mlx5.QPTypeRC {
			r.pump(t) // UC, UD: once the WQEs before it have left the port
			return
		}
		r.ack(t, r.ackPSN)
		return
	}
	switch {
	case q.typ == mlx5.QPTypeUC && (e.rdAtomic() || e.op == mlx5.OpSendInval):
		d.warn(t, CtrWQEBadOpcodeForQP, "UC QP %#x WQE %d: %v is not a UC operation", q.qpn, w.Index, e.op)
		r.fail(t, e, mlx5.SyndLocalQPOp)
		return
	case q.typ == mlx5.QPTypeUD && int(e.length) > d.spec.Caps.ActiveMTU:
		// A ConnectX completes a UD send larger than the MTU with a local
		// length error (documented inference: mlx5 forum reports; the PRM
		// is not public). rxe instead "completes" it successfully without
		// sending anything (rocev2.md §2.2, C10-93.1.1).
		d.warn(t, CtrUDOversize, "UD QP %#x WQE %d: %d bytes over the port MTU %d", q.qpn, w.Index, e.length, d.spec.Caps.ActiveMTU)
		r.fail(t, e, mlx5.SyndLocalLength)
		return
	case q.typ == mlx5.QPTypeUD && !netip.AddrFrom16(e.av.DGID).Unmap().Is4():
		d.warn(t, CtrWQEMalformed, "UD QP %#x WQE %d: destination GID %v is not an IPv4-mapped RoCEv2 GID", q.qpn, w.Index, netip.AddrFrom16(e.av.DGID))
		r.fail(t, e, mlx5.SyndLocalQPOp)
		return
	case e.length > d.spec.Caps.MaxMsgSize || e.isInline && int(e.length) > d.spec.Caps.MaxInline:
		d.warn(t, CtrWQELocalLength, "QP %#x WQE %d: message of %d bytes", q.qpn, w.Index, e.length)
		r.fail(t, e, mlx5.SyndLocalLength)
		return
	case (e.op == mlx5.OpAtomicCS || e.op == mlx5.OpAtomicFA) && e.length != 8:
		// Assumption: a ConnectX answers an atomic whose local buffer is
		// not 8 bytes with a local length error (the IB spec requires 8).
		d.warn(t, CtrWQELocalLength, "QP %#x WQE %d: atomic with a %d-byte local buffer (needs 8)", q.qpn, w.Index, e.length)
		r.fail(t, e, mlx5.SyndLocalLength)
		return
	case e.rdAtomic() && q.maxRd == 0:
		// Not reachable through MODIFY_QP, which takes max_rd_atomic 0
		// as 1 (as mlx5_ib leaves log_sra_max 0): a QP that never set it
		// cannot issue a READ/atomic; rxe would wait for ever, softnic
		// fails it.
		d.warn(t, CtrWQEBadState, "QP %#x WQE %d: %v with max_rd_atomic 0", q.qpn, w.Index, e.op)
		r.fail(t, e, mlx5.SyndLocalQPOp)
		return
	}
	// Local key checks for every SGE before anything goes on the wire.
	need := dma.LocalRead
	if e.rdAtomic() {
		need = dma.LocalWrite
	}
	for i := 0; i < e.nsge; i++ {
		s := &e.sges[i]
		if s.ByteCount == 0 {
			continue
		}
		if _, err := d.keys.Check(s.LKey, q.pdn, s.Addr, uint64(s.ByteCount), need); err != nil {
			d.warn(t, CtrWQEBadLKey, "QP %#x WQE %d SGE %d: %v", q.qpn, w.Index, i, err)
			r.fail(t, e, dma.Syndrome(err))
			return
		}
	}
	e.npkts = 1
	if e.op != mlx5.OpAtomicCS && e.op != mlx5.OpAtomicFA && q.typ != mlx5.QPTypeUD {
		mtu := uint64(q.mtu)
		e.npkts = max(1, int((e.length+mtu-1)/mtu))
	}
	e.firstPSN = r.psn
	e.readNext = e.firstPSN
	e.state = wqeExecuting
	r.psn = r.psn.Add(e.npkts)
	r.pump(t)
}

// fences reports whether the fence mode of fm_ce_se (bits 7:5, mlx5.md
// §4.3) makes a WQE wait until no READ or atomic before it is
// outstanding: FENCE (2, 0x40, what mlx5_ib writes for IB_SEND_FENCE),
// strong ordering (3, 0x60; assumed at least as strong as a fence) and
// small-and-fence (4, 0x80, libmlx5's). The initiator small fence (1)
// orders only behind UMR / local invalidate, which this device does not
// execute. The reserved modes 5-7 (the checker's bad-fm-ce-se) are taken
// as fenced, the order that never runs ahead (assumption: the PRM is not
// public).
func fences(fmcese uint8) bool { return fmcese>>5 >= mlx5.FenceFence>>5 }

// pump transmits what the window allows, from the transmit cursor on:
// at most maxUnackedPSNs beyond the oldest unacknowledged PSN, at most
// max_rd_atomic READs/atomics unanswered, nothing past a fenced WQE while
// READs/atomics are outstanding, nothing while an RNR wait runs.
func (r *requester) pump(t sim.Time) {
	q := r.q
	if q.state != mlx5.QPStateRTS || r.rnrWait || q.dead || q.d.fx.fatal {
		return // a dead device builds nothing (fatal.go)
	}
	if q.typ != mlx5.QPTypeRC {
		r.pumpUnreliable(t)
		return
	}
	sent := false
	var last sim.Time
	for r.cur < r.count {
		w := r.at(r.cur)
		if w.npkts == 0 || w.responded || !w.rdAtomic() && r.curPkt == 0 && !w.lastPSN().After(r.ackPSN) {
			// Nothing to send: a NOP, an answered READ/atomic waiting to
			// complete in order, a message the responder acknowledged.
			r.cur++
			continue
		}
		if r.curPkt == 0 {
			if w.fence && r.rdOut > 0 {
				break
			}
			if w.rdAtomic() && r.rdOut >= int(q.maxRd) {
				q.d.inc(CtrWindowStall)
				break
			}
		}
		psn := w.firstPSN.Add(r.curPkt)
		if w.rdAtomic() {
			psn = w.readNext
		}
		if psn.Diff(r.oldestUnacked()) >= maxUnackedPSNs {
			q.d.inc(CtrWindowStall)
			break
		}
		if q.d.tx.full(q, t) {
			q.d.tx.wait(q.d, q, t, txWaitReq)
			break
		}
		end, ok := r.transmit(t, w, r.curPkt, psn)
		if !ok {
			return // the WQE failed and the QP is in ERR
		}
		sent, last = true, end
		if w.rdAtomic() {
			if !w.counted {
				w.counted = true
				r.rdOut++
			}
			r.cur++
			r.curPkt = 0
			continue
		}
		r.curPkt++
		if r.curPkt == w.npkts {
			r.cur++
			r.curPkt = 0
		}
	}
	if !r.timer.Armed() && r.count > 0 {
		// Armed whenever WQEs are outstanding, so that whatever holds the
		// queue up ends in a retry or an error, never in silence.
		if d := r.timeoutDur(); d > 0 {
			if !sent {
				last = t
			}
			r.timer.Reset(last.Add(d))
		}
	}
}

// pumpUnreliable sends UC and UD WQEs: no window, no timers, no ACKs. A
// WQE stays at its place in the ring, fully built and awaiting departure
// (behind the cursor, still executing), until its last packet has left
// the port: that frame's txEvent completes it (departed), so WQEs
// complete in ring order and a flush or a reset still finds every WQE it
// must account for. (Completing when the packetizer had built it let the
// send queue run ahead of the wire without bound, and UC write_bw
// reported the PCIe read rate, 106 Gb/s on a 100 GbE port.) That a
// ConnectX completes an unreliable WQE only once its packet is on the
// wire is an assumption; a real NIC's bounded transmit buffer gives the
// same rate.
//
// Assumption (the PRM is not public): a frame is handed to the port when
// its txEvent fires, at the end of the transmit pipeline. One already
// handed over when the QP goes to ERR, SQE or RESET has been sent and its
// WQE completed successfully, ahead of the flush CQEs; one still in the
// pipeline is not sent (txGen, as for RC) and its WQE is flushed in ring
// order with the rest (or, on RESET, forgotten with it).
func (r *requester) pumpUnreliable(t sim.Time) {
	q := r.q
	for r.cur < r.count && q.state == mlx5.QPStateRTS {
		w := r.at(r.cur)
		if w.npkts == 0 {
			// A NOP: no packet. It completes in order: now if it heads the
			// ring, else when the WQE before it has left (departed).
			if r.cur == 0 {
				q.d.complete(t, q, w)
				r.pop()
				continue
			}
			r.cur++
			continue
		}
		for r.curPkt < w.npkts {
			if q.d.tx.full(q, t) {
				q.d.tx.wait(q.d, q, t, txWaitReq)
				return
			}
			if _, ok := r.transmit(t, w, r.curPkt, w.firstPSN.Add(r.curPkt)); !ok {
				return
			}
			r.curPkt++
		}
		r.cur++
		r.curPkt = 0
	}
}

// departed completes UC or UD WQE widx, the ring's head, whose last
// packet has left the port at t (txEvent.Fire), and the NOPs right behind
// it. The txEvent of a frame built before the QP last went to ERR, SQE or
// RESET (or the device to fatal) does not come here: those flushed or
// dropped the WQE already. The check of the head is a guard only.
func (r *requester) departed(t sim.Time, widx uint16) {
	q := r.q
	if w := r.front(); w == nil || r.cur == 0 || w.idx != widx {
		q.d.inc(CtrTxDepartStale)
		return
	}
	q.d.complete(t, q, r.front())
	r.pop()
	for w := r.front(); w != nil && r.cur > 0 && w.npkts == 0; w = r.front() {
		q.d.complete(t, q, w)
		r.pop()
	}
}

// transmit builds and sends packet i (PSN psn) of w and returns when it
// leaves the packetizer; ok is false when the WQE failed instead.
func (r *requester) transmit(t sim.Time, w *swqe, i int, psn roce.PSN) (sim.Time, bool) {
	q := r.q
	d := q.d
	fp := &d.fp
	d.frameHeader(q, fp)
	fp.BTH.PSN = psn
	var pl payload
	switch w.op {
	case mlx5.OpRDMARead:
		// A READ asks for what is still missing: from the first response
		// not yet received (rocev2.md §4.4, retry of a partly answered READ).
		fp.BTH.Opcode = roce.OpRCReadRequest
		fp.BTH.AckReq = true
		fp.RETH = roce.RETHFields{VA: w.raddr + w.readGot, RKey: w.rkey, DMALen: uint32(w.length - w.readGot)}
	case mlx5.OpAtomicCS, mlx5.OpAtomicFA:
		fp.BTH.Opcode = roce.OpRCFetchAdd
		if w.op == mlx5.OpAtomicCS {
			fp.BTH.Opcode = roce.OpRCCmpSwap
		}
		fp.BTH.AckReq = true
		fp.AtomicETH = roce.AtomicETHFields{VA: w.raddr, RKey: w.rkey, SwapAdd: w.swapAdd, Compare: w.compare}
	default:
		mtu := uint64(q.mtu)
		if q.typ == mlx5.QPTypeUD {
			mtu = max(w.length, 1)
		}
		off := uint64(i) * mtu
		n := min(w.length-off, mtu)
		last := i == w.npkts-1
		fp.BTH.Opcode = reqOpcode(w.op, i, w.npkts)
		fp.BTH.SE = last && w.se && (w.op == mlx5.OpSend || w.op == mlx5.OpSendImm || w.op == mlx5.OpSendInval || w.op == mlx5.OpRDMAWriteImm)
		switch q.typ {
		case mlx5.QPTypeUC:
			fp.BTH.Opcode += roce.OpUCSendFirst // UC opcodes are the RC ones + 0x20
		case mlx5.QPTypeUD:
			fp.BTH.Opcode = roce.OpUDSendOnly
			if w.op == mlx5.OpSendImm {
				fp.BTH.Opcode = roce.OpUDSendOnlyImm
			}
			a := &w.av
			fp.DstMAC, fp.DstIP = a.DMAC, netip.AddrFrom16(a.DGID).Unmap()
			fp.TOS, fp.TTL = a.TClass, a.HopLimit
			if fp.TTL == 0 {
				fp.TTL = 64
			}
			if a.UDPSPort != 0 {
				fp.SrcPort = a.UDPSPort
			}
			fp.BTH.DestQP = a.DestQPN
			// A Q_Key with bit 31 set means the QP's own (IB spec C10-15):
			// libmlx5 copies remote_qkey into the segment as given, so the
			// device applies the rule (inferred for a ConnectX).
			qkey := a.QKey
			if qkey&0x80000000 != 0 {
				qkey = q.qkey
			}
			fp.DETH = roce.DETHFields{QKey: qkey, SrcQP: q.qpn}
		}
		r.sinceAck++
		fp.BTH.AckReq = q.typ == mlx5.QPTypeRC && (last || r.sinceAck >= maxPktsPerAckReq)
		fp.RETH = roce.RETHFields{VA: w.raddr, RKey: w.rkey, DMALen: uint32(w.length)}
		fp.Imm = w.imm
		fp.InvRKey = w.imm // SEND_INVAL's ctrl immediate is the R_Key (IETH; only its last packet has one)
		pl.n = int(n)
		pl.depart, pl.widx = last && q.typ != mlx5.QPTypeRC, w.idx
		if w.isInline {
			pl.inline = w.inline[off : off+n]
		} else {
			pl.sges, pl.off, pl.pdn = w.sges[:w.nsge], off, q.pdn
		}
	}
	if fp.BTH.AckReq {
		r.sinceAck = 0
	}
	// sentPSN is past every PSN a response may now carry: a READ's
	// request stands for all its response PSNs.
	next := psn.Next()
	if w.op == mlx5.OpRDMARead {
		next = w.lastPSN().Next()
	}
	if psn.Before(r.sentPSN) {
		d.inc(CtrRetransmittedPkts)
	}
	if next.After(r.sentPSN) {
		r.sentPSN = next
	}
	end, err := d.packetize(t, q, &pl, w.flow)
	if err != nil {
		if pl.sges != nil && err != errPacketize {
			d.warn(t, CtrPayloadDMAError, "QP %#x WQE %d: %v", q.qpn, w.idx, err)
			r.failDMA(t, w, err)
		} else {
			d.warn(t, CtrPacketizeError, "QP %#x WQE %d: %v", q.qpn, w.idx, err)
			r.fail(t, w, mlx5.SyndLocalQPOp)
		}
		return t, false
	}
	return end, true
}

// reqOps lists, per send opcode, the BTH opcodes of a message's First,
// Middle, Last and Only packets (rocev2.md §2.1).
var reqOps = [256][4]roce.Opcode{
	mlx5.OpSend:         {roce.OpRCSendFirst, roce.OpRCSendMiddle, roce.OpRCSendLast, roce.OpRCSendOnly},
	mlx5.OpSendImm:      {roce.OpRCSendFirst, roce.OpRCSendMiddle, roce.OpRCSendLastImm, roce.OpRCSendOnlyImm},
	mlx5.OpSendInval:    {roce.OpRCSendFirst, roce.OpRCSendMiddle, roce.OpRCSendLastInv, roce.OpRCSendOnlyInv},
	mlx5.OpRDMAWrite:    {roce.OpRCWriteFirst, roce.OpRCWriteMiddle, roce.OpRCWriteLast, roce.OpRCWriteOnly},
	mlx5.OpRDMAWriteImm: {roce.OpRCWriteFirst, roce.OpRCWriteMiddle, roce.OpRCWriteLastImm, roce.OpRCWriteOnlyImm},
}

// reqOpcode is the BTH opcode of packet i of n of a SEND or WRITE.
func reqOpcode(op mlx5.Opcode, i, n int) roce.Opcode {
	ops := &reqOps[op]
	switch {
	case i == 0 && n == 1:
		return ops[3]
	case i == 0:
		return ops[0]
	case i == n-1:
		return ops[2]
	}
	return ops[1]
}

// oldestUnacked is where go-back-N restarts: the first PSN not yet
// acknowledged, or the next response a READ/atomic at the head awaits.
func (r *requester) oldestUnacked() roce.PSN {
	w := r.front()
	if w == nil {
		return r.psn
	}
	if w.rdAtomic() {
		return w.readNext
	}
	p := r.ackPSN.Next()
	if p.Before(w.firstPSN) {
		p = w.firstPSN
	}
	return p
}

// rewind moves the transmit cursor back to PSN p (go-back-N): the WQE
// holding p is sent again from the packet of p on (a READ from its first
// missing response), and everything after it follows.
func (r *requester) rewind(p roce.PSN) {
	i := 0
	for ; i < r.count; i++ {
		w := r.at(i)
		if w.npkts == 0 || w.responded {
			continue
		}
		if w.rdAtomic() {
			if !p.After(w.lastPSN()) {
				break
			}
			continue
		}
		if !w.lastPSN().Before(p) {
			break
		}
	}
	pkt := 0
	if i < r.count {
		if w := r.at(i); !w.rdAtomic() && p.After(w.firstPSN) {
			pkt = int(p.Diff(w.firstPSN))
		}
	}
	if i > r.cur || i == r.cur && pkt >= r.curPkt {
		// The cursor is at or before p already: an earlier rewind's resend
		// (or the first transmission) has not got there yet, held by the
		// transmit buffer, max_rd_atomic or a fence. Moving it forward to p
		// would skip the WQEs in between, never to be sent; a READ among
		// them, uncounted by that rewind, then let a fenced WQE behind it
		// go while its responses were still missing (the soak's READ that
		// returned a later WRITE's bytes).
		return
	}
	// WQEs from i to the old cursor are sent again: READ/atomics among them
	// are counted again when they are.
	for j := i; j < r.count && j <= r.cur; j++ {
		if w := r.at(j); w.counted && !w.responded {
			w.counted = false
			r.rdOut--
		}
	}
	r.cur, r.curPkt, r.sinceAck = i, pkt, 0
}

// retry restarts transmission at p (go-back-N) after a timeout, a NAK or
// a gap in READ responses.
func (r *requester) retry(t sim.Time, p roce.PSN) {
	if r.q.state != mlx5.QPStateRTS || r.q.dead {
		return
	}
	r.q.d.inc(CtrRoceAdpRetrans)
	r.timer.Stop()
	r.rewind(p)
	r.pump(t)
}

// useRetry spends one transport retry; false when none is left. retry_cnt
// 7 is 7 retries (IB spec); Spec.Transport.RetryCnt7Infinite makes it
// infinite, as rxe does (rocev2.md §4.4).
func (r *requester) useRetry() bool {
	if r.q.retryCnt == 7 && r.q.d.spec.Transport.RetryCnt7Infinite {
		return true
	}
	if r.retryLeft == 0 {
		return false
	}
	r.retryLeft--
	return true
}

// progress notes forward progress: the retry counters start again and the
// ACK timer restarts (or stops with nothing in flight).
func (r *requester) progress(t sim.Time) {
	r.retryLeft, r.rnrLeft = int(r.q.retryCnt), int(r.q.rnrRetry)
	r.nakBack = false
	if r.count == 0 {
		r.timer.Stop()
		return
	}
	if d := r.timeoutDur(); d > 0 {
		r.timer.Reset(t.Add(d))
	}
}

func (r *requester) onTimeout(now sim.Time) {
	q := r.q
	if q.state != mlx5.QPStateRTS || q.dead || r.count == 0 || r.rnrWait {
		return
	}
	d := q.d
	if !r.useRetry() {
		w := r.front()
		d.warn(now, CtrReqTransportRetriesExceeded, "QP %#x WQE %d: no ACK after %d retries (timeout %v each)", q.qpn, w.idx, q.retryCnt, r.timeoutDur())
		r.fail(now, w, mlx5.SyndTransportRetry)
		return
	}
	d.inc(CtrLocalACKTimeoutErr)
	d.inc(CtrRoceAdpRetransTo)
	d.rec.Warnf(d.node, now, "device", CtrLocalACKTimeoutErr.String(), "QP %#x: ACK timeout, resending from PSN %#x", q.qpn, uint32(r.oldestUnacked()))
	if w := r.front(); w.rdAtomic() {
		w.rereqOn, w.rereq = true, w.readNext
	}
	r.retry(now, r.oldestUnacked())
}

func (r *requester) onRNR(now sim.Time) {
	r.rnrWait = false
	r.retry(now, r.oldestUnacked())
}

// ack handles a cumulative acknowledgement of every PSN up to psn: WQEs
// whose packets are all acknowledged complete in order (rocev2.md §4.3),
// as do answered READs/atomics and NOPs; an acknowledged PSN beyond an
// unanswered READ/atomic means its responses were lost (implied NAK).
func (r *requester) ack(t sim.Time, psn roce.PSN) { r.ackThen(t, psn, psn, false, true) }

// ackFrom is ack; fromACK says an ACK packet carried seen, which alone can
// imply a NAK (a re-check after a response never does, and neither does an
// ACK while a re-request for the READ is under way). psn is what it
// acknowledges: seen itself, or less when seen falls inside an unanswered
// READ/atomic (ackInside).
func (r *requester) ackFrom(t sim.Time, psn, seen roce.PSN, fromACK bool) {
	r.ackThen(t, psn, seen, fromACK, true)
}

// ackThen is ackFrom; pump says the acknowledgement may send what it let
// into the window. A caller that may move the QP to ERR next passes
// false, since every frame built meanwhile would only be dropped
// (tx_drop_destroyed_qp), and pumps itself when it does not (pend: the
// acknowledgement moved the queue on and would have pumped).
func (r *requester) ackThen(t sim.Time, psn, seen roce.PSN, fromACK, pump bool) (pend bool) {
	q := r.q
	advanced := psn.After(r.ackPSN)
	if advanced {
		r.ackPSN = psn
	}
	done := false
	for w := r.front(); w != nil; w = r.front() {
		switch {
		case w.npkts == 0:
		case w.rdAtomic():
			if !w.responded {
				// Only an ACK beyond the READ/atomic's last PSN implies
				// its responses were lost (rocev2.md §4.3; rxe's
				// check_psn: psn_compare(psn, last_psn) > 0).
				if fromACK && !w.rereqOn && seen.After(w.lastPSN()) && w.counted {
					r.regap(t, w)
				}
				goto out
			}
		case w.lastPSN().After(r.ackPSN):
			goto out
		}
		r.uncount(w)
		q.d.complete(t, q, w)
		r.pop()
		done = true
	}
out:
	if advanced || done {
		r.progress(t)
		if !pump {
			return true
		}
		r.pump(t)
	}
	return false
}

// ackInside handles an ACK whose PSN is one of the response PSNs of w, an
// unanswered READ/atomic: a responder answers those with READ responses or
// an atomic ACK, never with an ACK. As rxe's completer does (check_psn),
// it acknowledges the requests before w, and implies a NAK for an earlier
// unanswered READ/atomic it lies beyond, but it is neither an implied NAK
// for w (it is not beyond w's last PSN) nor an answer to it: dropped,
// counted and warned, w still awaits its responses and nothing restarts
// the retry counters for it. Before, an ACK at a READ's last PSN was
// taken as an implied NAK and made the requester ask again. (rxe, when
// the ACK's PSN is also the next it expects — a one-packet READ, or the
// LAST of a READ whose other responses came — takes it as completing the
// READ successfully, with data missing; softnic does not copy that.)
func (r *requester) ackInside(t sim.Time, psn roce.PSN, w *swqe) {
	q := r.q
	q.d.warn(t, CtrACKInsideRead, "QP %#x WQE %d (%v): ACK PSN %#x inside its response PSNs %#x..%#x: dropped", q.qpn, w.idx, w.op, uint32(psn), uint32(w.firstPSN), uint32(w.lastPSN()))
	r.ackFrom(t, w.firstPSN.Sub(1), psn, true)
}

// fail completes w with an error CQE (written signalled or not), moves the
// QP to ERR (RC) or SQE (UC, UD) and flushes the rest in ring order
// (mlx5.md §6.4).
func (r *requester) fail(t sim.Time, w *swqe, synd mlx5.Syndrome) {
	w.errSynd = synd
	if r.q.typ == mlx5.QPTypeUD || r.q.typ == mlx5.QPTypeUC {
		// A send error leaves a UD or UC QP's receive side alone: SQE
		// exists for every QP type but RC (IB spec; mlx5.md §7.2).
		r.q.toSQE(t)
		return
	}
	r.q.toError(t)
}

// flushAll completes every outstanding send WQE: the failed one with its
// syndrome, the others with WR_FLUSH_ERR.
func (r *requester) flushAll(t sim.Time) {
	q := r.q
	d := q.d
	for w := r.front(); w != nil; w = r.front() {
		synd := mlx5.SyndWRFlush
		if w.errSynd != 0 {
			synd = w.errSynd
			d.inc(CtrReqCQEError)
			d.inc(ctrCQEError(synd))
		} else {
			d.inc(CtrWQEFlushed)
			d.inc(CtrReqCQEFlushError)
		}
		w.state = wqeDone
		if !q.dead {
			f := mlx5.CQEFields{Opcode: mlx5.CQEReqErr, WQEOpcode: uint8(w.op), QPN: q.qpn, WQECounter: w.idx, Syndrome: synd, VendorErrSynd: d.wqeVendor(w, synd)}
			d.writeCQE(t, q.scq, &f, w.flow, noPSN)
		}
		r.pop()
	}
	r.cur, r.curPkt, r.rdOut = 0, 0, 0
}

// find returns the outstanding WQE that consumed psn, among those sent.
func (r *requester) find(psn roce.PSN) *swqe {
	for i := 0; i < r.count && i <= r.cur; i++ {
		w := r.at(i)
		if w.npkts > 0 && psn.InWindow(w.firstPSN, uint32(w.npkts)) {
			return w
		}
	}
	return nil
}

// rx handles a response: ACK / NAK / RNR NAK, READ response or atomic ACK.
func (r *requester) rx(arrive, t sim.Time, p *roce.Packet) {
	q := r.q
	d := q.d
	psn := p.BTH.PSN()
	if !psn.Before(r.sentPSN) {
		// Beyond anything sent (a PSN a posted WQE holds but whose packet
		// has not left yet is not sent): not a response to this QP's
		// requests. Taken, an ACK completed a WRITE whose later packets
		// had never left, and a READ response landed in a READ never
		// asked for; rxe's completer likewise completes only WQEs whose
		// packets were all sent (rocev2.md §4.3).
		d.warn(t, CtrACKBadPSN, "QP %#x %v PSN %#x, next PSN never sent %#x", q.qpn, p.Opcode, uint32(psn), uint32(r.sentPSN))
		return
	}
	switch p.Info.Operation {
	case roce.OperationAck:
		d.rec.StagePSN(d.node, "device", "ack_rx", arrive, t, 0, 0, q.qpn, 0, int32(psn&0xffffff))
		d.inc(CtrACKsRcvd)
		r.ackPacket(t, psn, p.AETH.Syndrome())
	case roce.OperationReadResponse:
		r.readResponse(t, p)
	case roce.OperationAtomicAck:
		r.atomicAck(t, p)
	default:
		d.warn(t, CtrRespUnexpected, "QP %#x: %v", q.qpn, p.Opcode)
	}
}

func (r *requester) ackPacket(t sim.Time, psn roce.PSN, synd roce.Syndrome) {
	q := r.q
	d := q.d
	if synd.IsNAK() || synd.IsRNRNAK() {
		if psn.Before(r.ackPSN.Next()) {
			d.inc(CtrACKStale)
			return
		}
	} else if !psn.After(r.ackPSN) {
		d.inc(CtrACKStale)
		return
	}
	switch {
	case synd.IsACK():
		if w := r.find(psn); w != nil && w.rdAtomic() && !w.responded {
			r.ackInside(t, psn, w)
			return
		}
		r.ackFrom(t, psn, psn, true)
	case synd.IsRNRNAK():
		r.ack(t, psn.Sub(1))
		if q.state != mlx5.QPStateRTS {
			return
		}
		w := r.front()
		if w == nil || !psn.InWindow(w.firstPSN, uint32(max(w.npkts, 1))) && !w.rdAtomic() {
			d.inc(CtrACKStale)
			return
		}
		if w.rdAtomic() && !w.responded && w.counted && psn.After(w.lastPSN()) {
			// An RNR NAK for a later request: the responder executed this
			// READ/atomic, whose responses were lost. Ask for them again
			// (an implied NAK, rxe's check_psn COMPST_ERROR_RETRY); the
			// RNR NAK is not this WQE's and spends none of its RNR retries.
			r.regap(t, w)
			return
		}
		if q.rnrRetry != 7 {
			if r.rnrLeft == 0 {
				d.warn(t, CtrReqRNRRetriesExceeded, "QP %#x WQE %d: RNR retries used up", q.qpn, w.idx)
				r.fail(t, w, mlx5.SyndRNRRetry)
				return
			}
			r.rnrLeft--
		}
		d.inc(CtrRNRNakRetryErr)
		r.timer.Stop()
		r.rnrWait = true
		r.rewind(psn)
		r.rnrTimer.Reset(t.Add(roce.RNRTimer(synd.Value())))
	case synd.IsNAK():
		// The NAK acknowledges what precedes its PSN; what that lets into
		// the window is sent unless the NAK fails a WQE (the QP goes to
		// ERR and would drop it).
		pend := r.ackThen(t, psn.Sub(1), psn.Sub(1), false, false)
		if q.state != mlx5.QPStateRTS {
			return
		}
		code := synd.Value()
		if code == nakPSNSeq {
			if pend {
				r.pump(t)
			}
			d.inc(CtrPacketSeqErr)
			if r.nakBack && psn == r.nakPSN {
				// The NAK of the go-back under way once more, nothing
				// acknowledged since: a copy the network made, or the
				// responder seeing the resend without psn (softnic's
				// responder NAKs such a go-back again). Going back again
				// is cheap, but it spends no retry, and leaves the ACK
				// timer running: a psn that never arrives still ends in
				// RETRY_EXC_ERR by timeouts. Spent, each copy of one NAK
				// took a retry of its own, and a wire that only
				// duplicated and reordered frames, losing none, used
				// them up (rxe's completer likewise starts no second
				// retry while one is under way).
				d.inc(CtrNAKSeqRepeat)
				d.inc(CtrRoceAdpRetrans)
				r.rnrWait = false
				r.rnrTimer.Stop()
				r.rewind(psn)
				r.pump(t)
				return
			}
			if !r.useRetry() {
				w := r.front()
				if w == nil {
					return
				}
				d.warn(t, CtrReqTransportRetriesExceeded, "QP %#x WQE %d: PSN-sequence NAKs used up %d retries", q.qpn, w.idx, q.retryCnt)
				r.fail(t, w, mlx5.SyndTransportRetry)
				return
			}
			r.rnrWait = false
			r.rnrTimer.Stop()
			r.retry(t, psn)
			r.nakPSN, r.nakBack = psn, true
			return
		}
		w := r.front()
		if w == nil || w.npkts == 0 || !psn.InWindow(w.firstPSN, uint32(w.npkts)) {
			// A NAK for a PSN the head does not hold: stale, or an implied
			// NAK already restarted an earlier READ.
			d.inc(CtrACKStale)
			if pend {
				r.pump(t)
			}
			return
		}
		s := mlx5.SyndRemoteOp
		switch code {
		case nakInvalidReq:
			s = mlx5.SyndRemoteInvalidReq
			d.inc(CtrReqRemoteInvalidRequest)
		case nakRemoteAcc:
			s = mlx5.SyndRemoteAccess
			d.inc(CtrReqRemoteAccessErrors)
		}
		d.warn(t, CtrRxNAKRcvd, "QP %#x WQE %d: NAK %v", q.qpn, w.idx, synd)
		r.fail(t, w, s)
	default:
		d.warn(t, CtrRxBadAETH, "QP %#x AETH syndrome %v", q.qpn, synd)
	}
}

// badResponse fails w: a response arrived that does not fit it. Like
// every response it acknowledges the requests before w first (rxe's
// completer completes them, then fails w; assumed the same for a
// ConnectX): fully sent, they were answered. w is the head after that,
// unless one before it is a READ/atomic still awaiting its own responses,
// which then flushes with the rest.
func (r *requester) badResponse(t sim.Time, w *swqe, format string, args ...any) {
	r.badResponseCtr(t, w, CtrRxResponseBadOpcode, format, args...)
}

// badResponseCtr is badResponse counted and warned under ctr. Its
// acknowledgement sends nothing it lets into the window: w fails and the
// QP goes to ERR next, which would drop every frame built meanwhile.
// Where the acknowledgement itself ends RTS (a CQ error), a pump would
// have sent nothing either.
func (r *requester) badResponseCtr(t sim.Time, w *swqe, ctr counter, format string, args ...any) {
	r.q.d.warn(t, ctr, format, args...)
	r.ackThen(t, w.firstPSN.Sub(1), w.firstPSN.Sub(1), false, false)
	if r.q.state != mlx5.QPStateRTS {
		return
	}
	r.fail(t, w, mlx5.SyndBadResp)
}

// readLengthBad reports whether READ response p, the next one w awaits,
// carries the wrong number of bytes for its place in the stream: more
// than is left or than the MTU, a FIRST or MIDDLE short of the MTU, a
// LAST or ONLY short of what is left, an empty LAST.
func (r *requester) readLengthBad(w *swqe, p *roce.Packet) bool {
	n, mtu, left := uint64(len(p.Payload)), uint64(r.q.mtu), w.length-w.readGot
	pos := p.Info.Pos
	return n > left || n > mtu || !pos.Last() && n != mtu || pos.Last() && n != left || pos.Last() && !pos.First() && n == 0
}

func (r *requester) readResponse(t sim.Time, p *roce.Packet) {
	q := r.q
	d := q.d
	psn := p.BTH.PSN()
	w := r.find(psn)
	switch {
	case w == nil:
		d.inc(CtrRespDuplicate) // for a WQE completed already
		return
	case w.op != mlx5.OpRDMARead:
		r.badResponse(t, w, "QP %#x WQE %d (%v): %v PSN %#x", q.qpn, w.idx, w.op, p.Opcode, uint32(psn))
		return
	case w.responded || psn.Before(w.readNext):
		d.inc(CtrRespDuplicate)
		return
	}
	// A response acknowledges every request before the READ. One that
	// fails the READ (below: no FIRST where one is due, a bad length)
	// sends nothing the acknowledgement lets into the window: the QP goes
	// to ERR, which would drop it. (A scatter fault on the READ's buffer
	// is found only by the copy, after the acknowledgement has pumped.)
	pos := p.Info.Pos
	fails := !psn.After(w.readNext) && (w.readNext == w.firstPSN && !pos.First() || r.readLengthBad(w, p))
	r.ackThen(t, w.firstPSN.Sub(1), w.firstPSN.Sub(1), false, !fails)
	if q.state != mlx5.QPStateRTS {
		return
	}
	if psn.After(w.readNext) {
		d.inc(CtrReadRespOOO)
		if h := r.firstUnanswered(); h != nil && h != w {
			// An earlier READ/atomic is missing responses too: go back
			// to it (which asks for w's rest as well).
			r.regap(t, h)
			return
		}
		r.regap(t, w)
		return
	}
	if w.readNext == w.firstPSN && !pos.First() {
		// Nothing of this READ has arrived yet, so its response stream
		// must open with a FIRST or an ONLY: a MIDDLE or LAST here is out
		// of sequence, as rxe's completer checks the response opcode
		// sequence (check_ack: a packet without the start mask while no
		// READ response is open is an error, QP to ERR). rxe leaves that
		// WQE's status unset there (its WARN_ON_ONCE fires); BAD_RESP_ERR
		// is the IB spec's class for a response that does not fit its
		// request, what a ConnectX reports (assumed, not confirmed on
		// hardware). Taken, a forged LAST completed the READ with bytes
		// the responder never sent as its first packet. A continuation
		// after bytes arrived may start with a MIDDLE or LAST (rxe
		// replays a partly answered READ so) or a FIRST (softnic's
		// responder), so only the start of the stream is checked.
		r.badResponseCtr(t, w, CtrReadRespNoFirst, "QP %#x READ WQE %d: %v PSN %#x where the READ's FIRST or ONLY is due", q.qpn, w.idx, p.Opcode, uint32(psn))
		return
	}
	n := uint64(len(p.Payload))
	if r.readLengthBad(w, p) {
		d.warn(t, CtrRxResponseLength, "QP %#x READ WQE %d: %v of %d bytes with %d of %d left", q.qpn, w.idx, p.Opcode, n, w.length-w.readGot, w.length)
		r.fail(t, w, mlx5.SyndBadResp)
		return
	}
	done := t
	if n > 0 {
		dn, tlps, _, err := d.sgeCopy(t, q.pdn, w.sges[:w.nsge], w.readGot, p.Payload, dma.LocalWrite)
		if err != nil {
			d.warn(t, CtrReadScatterProt, "QP %#x READ WQE %d: %v", q.qpn, w.idx, err)
			r.failDMA(t, w, err)
			return
		}
		d.rec.Stage(d.node, "dma", "read_scatter", t, dn, int(n), tlps, q.qpn, w.flow)
		done = dn
	}
	w.readGot += n
	w.readNext = w.readNext.Next()
	if pos.Last() {
		r.answered(w)
	}
	r.progress(done)
	r.ack(done, r.ackPSN)
	r.impliedGap(done, w)
	r.pump(done)
}

// regap handles responses of READ/atomic w that are missing although
// later PSNs were answered (an implied NAK, or READ responses out of
// order): ask again for the rest, once per gap; if that request is lost
// too, the ACK timer asks again.
func (r *requester) regap(t sim.Time, w *swqe) {
	if w.rereqOn && w.rereq == w.readNext {
		return
	}
	r.q.d.inc(CtrImpliedNAKSeqErr)
	w.rereqOn, w.rereq = true, w.readNext
	if r.useRetry() {
		r.retry(t, w.readNext)
	} else {
		r.fail(t, w, mlx5.SyndTransportRetry)
	}
}

// answered marks a READ/atomic as fully answered. Its max_rd_atomic
// credit stays taken until it completes (uncount).
func (r *requester) answered(w *swqe) { w.responded = true }

// uncount gives back w's max_rd_atomic credit, if it holds one.
func (r *requester) uncount(w *swqe) {
	if w.counted {
		w.counted = false
		r.rdOut--
	}
}

// firstUnanswered is the oldest READ/atomic transmitted and not fully
// answered, or nil.
func (r *requester) firstUnanswered() *swqe {
	for i := 0; i < r.count && i <= r.cur; i++ {
		if w := r.at(i); w.rdAtomic() && w.counted && !w.responded {
			return w
		}
	}
	return nil
}

// impliedGap handles a response for w that arrived while an earlier
// READ/atomic is still unanswered: responses come back in PSN order, so
// the earlier one's were lost (rxe's completer retries on it, rocev2.md
// §4.3). w's response is kept; the earlier one is asked again, once per
// gap (regap).
func (r *requester) impliedGap(t sim.Time, w *swqe) {
	if r.q.state != mlx5.QPStateRTS {
		return
	}
	if h := r.firstUnanswered(); h != nil && h != w && h.firstPSN.Before(w.firstPSN) {
		r.regap(t, h)
	}
}

func (r *requester) atomicAck(t sim.Time, p *roce.Packet) {
	q := r.q
	d := q.d
	psn := p.BTH.PSN()
	w := r.find(psn)
	switch {
	case w == nil || w.responded:
		d.inc(CtrRespDuplicate)
		return
	case w.op != mlx5.OpAtomicCS && w.op != mlx5.OpAtomicFA:
		r.badResponse(t, w, "QP %#x WQE %d (%v): atomic ACK PSN %#x", q.qpn, w.idx, w.op, uint32(psn))
		return
	}
	r.ack(t, w.firstPSN.Sub(1))
	if q.state != mlx5.QPStateRTS {
		return
	}
	// The original value travels big-endian (AtomicAckETH); it lands in
	// the local buffer as a host-order (little-endian) 64-bit word, as rxe
	// stores it.
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], p.AtomicAckETH.OrigData())
	done, _, _, err := d.sgeCopy(t, q.pdn, w.sges[:w.nsge], 0, b[:], dma.LocalWrite)
	if err != nil {
		d.warn(t, CtrAtomicResultProt, "QP %#x atomic WQE %d: %v", q.qpn, w.idx, err)
		r.failDMA(t, w, err)
		return
	}
	w.readNext = w.readNext.Next()
	r.answered(w)
	r.progress(done)
	r.ack(done, r.ackPSN)
	r.impliedGap(done, w)
	r.pump(done)
}
