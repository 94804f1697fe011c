package device

import (
	"net/netip"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/wqefetch"
)

// qp is the device side of an RC queue pair: the attributes and state it
// shares, and its three roles — the requester (send queue, PSN window,
// timers), the responder (expected PSN, message in progress, READ/atomic
// resources) and the receive queue behind the recvQueue interface.
type qp struct {
	d      *Device
	qpn    uint32
	typ    mlx5.QPType // RC, UC or UD
	pdn    uint32
	scq    *cq
	rcq    *cq
	state  mlx5.QPState
	dead   bool // destroyed: sends nothing, writes no CQE
	sigAll bool
	dbr    uint64 // the doorbell record: RQ counter (word 0), SQ counter (word 1)
	uidx   uint32 // user index: srqn_uidx of every CQE (CQE version 1)

	// attributes
	access    uint32
	qkey      uint32 // UD
	av        mlx5.AV
	dstIP     netip.Addr
	mtu       int
	destQPN   uint32
	sport     uint16
	maxRd     uint8
	maxDestRd uint8
	minRNR    uint8
	timeout   uint8
	retryCnt  uint8
	rnrRetry  uint8

	txReady   sim.Time // when the QP's last frame is built: packets leave in order
	txWaiting uint8    // txWaitReq | txWaitResp: in d.tx.waiting
	rxBusy    sim.Time // when the QP's receive pipeline is done with its last packet
	txGen     uint32   // bumped on ERR, SQE, RESET and device fatal: frames built before are not sent
	// respKeep is txGen+1 of the frames built before the responder found
	// an error and took the QP to ERR (responder.fail; 0: none): the
	// responses among them (READ responses, ACKs, atomic ACKs, for the
	// requests before the failing one) still leave, ahead of the NAK, as
	// a ConnectX's transmit pipeline would send them (assumption: the PRM
	// is not public; the IB spec has every request before the NAKed one
	// answered). Its requests are dropped like every other frame. It is
	// the one mechanism for "answers built before the error": an error
	// found behind READ responses still to be built waits for them
	// (responder.failing) and then takes this same path.
	respKeep uint32
	commEst  uint32 // txGen+1 once COMM_EST was raised (events.go)

	req  requester
	resp responder
	rq   recvQueue // the QP's own RQ, or its SRQ
	srq  *srq      // non-nil: receives come from this shared queue
}

// transport is the BTH transport the QP's packets carry.
func (q *qp) transport() roce.Transport {
	switch q.typ {
	case mlx5.QPTypeUC:
		return roce.TransportUC
	case mlx5.QPTypeUD:
		return roce.TransportUD
	}
	return roce.TransportRC
}

// reset is MODIFY_QP to RESET: every role forgets its state, timers stop.
func (q *qp) reset() {
	q.setState(q.d.eng.Now(), mlx5.QPStateRST)
	q.txGen++
	q.respKeep = 0
	// The pipelines' times are the old incarnation's: the packets queued
	// behind its receive pipeline are dropped (the QP is in RESET) and its
	// frames not yet sent never leave (txGen), so the new incarnation's
	// first packet must not wait for them.
	q.rxBusy, q.txReady = 0, 0
	q.req.reset()
	q.resp.reset()
	q.rq.reset()
}

// setState changes the QP state and keeps the device's count of QPs whose
// receive queue must be watched for flushing (in ERR with an RQ).
func (q *qp) setState(t sim.Time, s mlx5.QPState) {
	watch := func(st mlx5.QPState) bool { return st == mlx5.QPStateERR && q.srq == nil && q.rq.size() > 0 && !q.dead }
	was := watch(q.state)
	q.state = s
	if now := watch(s); now != was {
		if now {
			q.d.errQPs++
		} else {
			q.d.errQPs--
		}
	}
}

// toError moves the QP to ERR: timers stop, every outstanding send WQE is
// flushed (the one that failed, if any, with its own syndrome), and every
// posted receive WQE is flushed with WR_FLUSH_ERR (rocev2.md §4.6,
// mlx5.md §6.4).
func (q *qp) toError(t sim.Time) {
	d := q.d
	if q.state != mlx5.QPStateERR {
		d.rec.Warnf(d.node, t, "device", CtrQPToError.String(), "QP %#x %v → ERR", q.qpn, q.state)
		d.inc(CtrQPToError)
		q.txGen++ // frames built but not yet sent never leave
	}
	q.setState(t, mlx5.QPStateERR)
	q.req.stopTimers()
	q.req.flushAll(t)
	q.flushRecvs(t)
	q.resp.abort()
	q.resp.unpark(t, CtrRxDropQPState, false, "to ERR")
}

// toSQE moves a UD or UC QP to SQE (send queue error): its send WQEs are
// flushed, the failed one with its own syndrome, while it keeps receiving
// (a send error does not take down the receive side of a QP without
// acknowledgements). mlx5.md §7.2 marks the mlx5 trigger list
// unconfirmed; assumed: every error a UC WQE completes with, as for UD.
func (q *qp) toSQE(t sim.Time) {
	d := q.d
	d.rec.Warnf(d.node, t, "device", CtrQPToError.String(), "QP %#x %v → SQE", q.qpn, q.state)
	d.inc(CtrQPToError)
	q.txGen++ // frames built but not yet sent never leave: their WQEs are flushed (pumpUnreliable)
	q.setState(t, mlx5.QPStateSQER)
	q.req.flushAll(t)
}

// flushRecvs completes every posted receive WQE with WR_FLUSH_ERR: first
// the one a message in progress had taken, then the rest of the RQ. A QP
// on an SRQ flushes only the one it had taken (the others belong to the
// SRQ) and reports "last WQE reached".
func (q *qp) flushRecvs(t sim.Time) {
	if q.dead {
		return
	}
	if r := &q.resp.recv; r.active || r.held {
		r.active, r.held = false, false
		q.d.inc(CtrRespCQEFlushError)
		f := mlx5.CQEFields{Opcode: mlx5.CQERespErr, QPN: q.qpn, WQECounter: r.wqe.index, Syndrome: mlx5.SyndWRFlush, VendorErrSynd: q.d.flushVendor()}
		q.d.writeCQE(t, q.rcq, &f, 0, noPSN)
	}
	if q.srq != nil {
		q.d.asyncEvent(t, mlx5.EventQPLastWQEReached, q.qpn)
		return
	}
	if q.rq.size() == 0 {
		return
	}
	t = q.rq.refresh(t)
	for {
		idx, ok := q.rq.flushOne()
		if !ok {
			return
		}
		q.d.inc(CtrRespCQEFlushError)
		f := mlx5.CQEFields{Opcode: mlx5.CQERespErr, QPN: q.qpn, WQECounter: idx, Syndrome: mlx5.SyndWRFlush, VendorErrSynd: q.d.flushVendor()}
		q.d.writeCQE(t, q.rcq, &f, 0, noPSN)
	}
}

// destroy quiesces the QP: timers stop, its queued frames are dropped when
// they come up, the CQEs it has in flight land now (so that the provider's
// destroy can clean them from the CQ), and nothing of it runs again.
func (q *qp) destroy(t sim.Time) {
	if q.state == mlx5.QPStateERR {
		q.setState(t, mlx5.QPStateRST) // leave the ERR watch count
	}
	q.dead = true
	q.req.stopTimers()
	q.resp.unpark(t, CtrRxDropNoQP, false, "destroyed")
	q.rq.quiesce()
	q.req.sq.Close()
	q.d.landAll(q.scq)
	if q.rcq != q.scq {
		q.d.landAll(q.rcq)
	}
}

// frameHeader fills the per-QP fields of a frame.
func (d *Device) frameHeader(q *qp, fp *roce.FrameParams) {
	*fp = roce.FrameParams{}
	fp.SrcMAC, fp.DstMAC = d.id.MAC, q.av.DMAC
	fp.SrcIP, fp.DstIP = d.id.IP, q.dstIP
	fp.TOS, fp.TTL = q.av.TrafficClass, q.av.HopLimit
	if fp.TTL == 0 {
		fp.TTL = 64
	}
	fp.SrcPort = q.sport
	fp.BTH.PKey = 0xffff
	fp.BTH.DestQP = q.destQPN
}

// WQEInfo describes one outstanding send WQE inside the device.
type WQEInfo struct {
	Index    uint16
	Opcode   mlx5.Opcode
	State    wqefetch.State
	FirstPSN uint32
	Packets  int
}

// Outstanding lists the send WQEs QP qpn has in flight (fetched, not yet
// completed), oldest first.
func (d *Device) Outstanding(qpn uint32) []WQEInfo {
	q := d.qps[qpn]
	if q == nil {
		return nil
	}
	r := &q.req
	out := make([]WQEInfo, 0, r.count)
	for i := 0; i < r.count; i++ {
		w := r.at(i)
		out = append(out, WQEInfo{Index: w.idx, Opcode: w.op, State: w.state, FirstPSN: uint32(w.firstPSN), Packets: w.npkts})
	}
	return out
}

// scanErrorRQs looks for receives posted to QPs in ERR and flushes them
// (every WQE posted to a QP in ERR completes with WR_FLUSH_ERR, faults.md
// "Flush"). A receive queue has no doorbell, so the device must read the
// doorbell record to see them; it does so when the simulation is otherwise
// idle, i.e. when a poller finds nothing to do. Assumption: a ConnectX's
// flush engine notices such receives on its own; when exactly is not
// documented, and any time before the poller gives up is indistinguishable
// to software. It reports whether it scheduled or wrote anything.
func (d *Device) scanErrorRQs(t sim.Time) bool {
	if d.errQPs == 0 {
		return false
	}
	before := d.eng.Pending()
	cqes := d.ctr.Value(CtrCQEs)
	for _, q := range d.sortedQPs() {
		if q.state != mlx5.QPStateERR || q.dead || q.rq.size() == 0 {
			continue
		}
		n0 := d.ctr.Value(CtrRespCQEFlushError)
		q.flushRecvs(t)
		d.ctr.Add(CtrRQFlushedInErr, d.ctr.Value(CtrRespCQEFlushError)-n0)
	}
	return d.eng.Pending() != before || d.ctr.Value(CtrCQEs) != cqes
}

// receives reports whether q's state takes incoming packets: RTR and RTS,
// and SQE for UC and UD (an RC QP's SQE is not reachable here: its send
// errors take it to ERR).
func (q *qp) receives() bool {
	return q.state == mlx5.QPStateRTR || q.state == mlx5.QPStateRTS || q.typ != mlx5.QPTypeRC && q.state == mlx5.QPStateSQER
}
