package device

import (
	"net/netip"

	"github.com/softnic/softnic/dma"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/pcie"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/wqefetch"
)

// maxPktsPerAckReq is rxe's RXE_MAX_PKT_PER_ACK (rocev2.md §2.3): a
// non-final packet gets AckReq once this many went without one.
const maxPktsPerAckReq = 64

// qp is the device side of an RC queue pair.
type qp struct {
	d        *Device
	qpn      uint32
	pdn      uint32
	scq, rcq *cq
	state    mlx5.QPState
	dbr      uint64 // doorbell record: [0] RQ producer counter
	sigAll   bool

	sqBase uint64
	sq     *wqefetch.Queue

	rqBase   uint64
	rqCnt    uint32
	rqStride int
	rqHead   uint32 // receive WQEs posted, as last read from DBR[0] (16-bit counter extended)
	rqTail   uint32 // receive WQEs consumed

	// attributes
	access    uint32
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

	// requester
	sqPSN    roce.PSN // next PSN to send
	swqes    []swqe   // ring of outstanding WQEs, indexed by arrival order
	head     int      // oldest outstanding
	count    int      // outstanding
	txReady  sim.Time // last packet's ready time: packets leave in order
	sinceAck int      // packets sent since the last AckReq

	// responder
	ePSN    roce.PSN // expected PSN
	msn     uint32
	nakSent bool
	recv    recvState
	wr      writeState
}

// swqe is an outstanding send WQE on the requester side.
type swqe struct {
	idx      uint16
	op       mlx5.Opcode
	signaled bool
	se       bool
	imm      uint32
	raddr    uint64
	rkey     uint32
	sges     [wqefetch.MaxSGE]mlx5.DataFields
	nsge     int
	inline   [wqefetch.MaxWQEBytes]byte
	isInline bool
	length   uint64
	firstPSN roce.PSN
	npkts    int
	readGot  uint64 // READ: response bytes placed
	readNext roce.PSN
	rnrLeft  int
	flow     uint64
	errSynd  mlx5.Syndrome // non-zero: complete with this error instead of WR_FLUSH
	state    wqefetch.State
}

func (w *swqe) lastPSN() roce.PSN { return w.firstPSN.Add(w.npkts - 1) }

// recvState is a SEND being received into one RQ WQE.
type recvState struct {
	active bool
	index  uint32 // RQ WQE counter
	sges   [64]mlx5.DataFields
	nsge   int
	off    uint64
}

// writeState is an RDMA WRITE being received.
type writeState struct {
	active bool
	host   uint64 // host address of the next byte
	left   uint64
	total  uint32
}

func (q *qp) reset() {
	q.state = mlx5.QPStateRST
	q.sq.Reset(0)
	q.rqHead, q.rqTail = 0, 0
	q.head, q.count = 0, 0
	q.sqPSN, q.ePSN, q.msn = 0, 0, 0
	q.nakSent = false
	q.recv = recvState{}
	q.wr = writeState{}
	q.sinceAck = 0
}

func (q *qp) push() *swqe {
	if q.count == len(q.swqes) {
		return nil
	}
	w := &q.swqes[(q.head+q.count)%len(q.swqes)]
	q.count++
	return w
}

func (q *qp) front() *swqe {
	if q.count == 0 {
		return nil
	}
	return &q.swqes[q.head]
}

func (q *qp) pop() {
	q.head = (q.head + 1) % len(q.swqes)
	q.count--
}

// WQEReady is called by the fetch engine for each decoded WQE, in order
// (wqefetch.Sink).
func (d *Device) WQEReady(t sim.Time, sq *wqefetch.Queue, w *wqefetch.WQE) {
	q := d.qps[sq.QPN]
	if q == nil {
		d.warn(t, "wqe_unknown_qp", "WQE for QP %#x, which no longer exists", sq.QPN)
		return
	}
	t = t.Add(d.cyc(d.spec.Core.WQEParseCycles))
	flow := wqefetch.FlowID(q.qpn, w.Index)
	e := q.push()
	if e == nil {
		d.warn(t, "sq_overflow", "QP %#x: more WQEs outstanding than the SQ holds", q.qpn)
		return
	}
	*e = swqe{idx: w.Index, op: w.Ctrl.Opcode, flow: flow, imm: w.Ctrl.Imm,
		state: wqefetch.StateValid, signaled: q.sigAll || w.Ctrl.FMCESE&mlx5.CEMask == mlx5.CECQUpdate || w.Ctrl.FMCESE&mlx5.CEMask == mlx5.CECQAndEQ,
		se: w.Ctrl.FMCESE&mlx5.SolicitedEvent != 0}
	if q.state == mlx5.QPStateERR {
		d.flushAll(t, q)
		return
	}
	if w.State == wqefetch.StateInvalid {
		d.warn(t, "wqe_malformed", "QP %#x WQE %d: %v", q.qpn, w.Index, w.Err)
		d.failWQE(t, q, e, mlx5.SyndLocalQPOp)
		return
	}
	if q.state != mlx5.QPStateRTS {
		d.warn(t, "wqe_bad_state", "QP %#x WQE %d executed in state %v", q.qpn, w.Index, q.state)
		d.failWQE(t, q, e, mlx5.SyndLocalQPOp)
		return
	}
	e.raddr, e.rkey = w.Raddr.RAddr, w.Raddr.RKey
	e.length = w.Length
	e.isInline = w.IsInline
	if w.IsInline {
		copy(e.inline[:], w.Inline)
	} else {
		e.nsge = copy(e.sges[:], w.SGEs)
	}
	if w.Ctrl.Opcode == mlx5.OpNOP {
		// A NOP completes in order, once everything before it has.
		e.npkts = 0
		e.firstPSN = q.sqPSN
		d.ackUpTo(t, q, q.sqPSN.Sub(1))
		return
	}
	if e.length > d.spec.Caps.MaxMsgSize || (e.isInline && int(e.length) > d.spec.Caps.MaxInline) {
		d.warn(t, "wqe_local_length", "QP %#x WQE %d: message of %d bytes", q.qpn, w.Index, e.length)
		d.failWQE(t, q, e, mlx5.SyndLocalLength)
		return
	}
	// Local key checks for every SGE before anything goes on the wire.
	need := dma.LocalRead
	if e.op == mlx5.OpRDMARead {
		need = dma.LocalWrite
	}
	for i := 0; i < e.nsge; i++ {
		s := &e.sges[i]
		if s.ByteCount == 0 {
			continue
		}
		if _, err := d.keys.Check(s.LKey, q.pdn, s.Addr, uint64(s.ByteCount), need); err != nil {
			d.warn(t, "wqe_bad_lkey", "QP %#x WQE %d SGE %d: %v", q.qpn, w.Index, i, err)
			d.failWQE(t, q, e, dma.Syndrome(err))
			return
		}
	}
	mtu := uint64(q.mtu)
	e.npkts = int((e.length + mtu - 1) / mtu)
	if e.npkts == 0 {
		e.npkts = 1
	}
	e.firstPSN = q.sqPSN
	e.readNext = e.firstPSN
	e.state = wqefetch.StateExecuting
	e.rnrLeft = int(q.rnrRetry)
	q.sqPSN = q.sqPSN.Add(e.npkts)
	d.transmit(t, q, e, 0)
}

// transmit packetizes e from packet index from on: per packet a payload DMA
// (or inline data), header build and ICRC, then the wire at its ready time.
// A READ sends a single request packet.
func (d *Device) transmit(t sim.Time, q *qp, e *swqe, from int) {
	mtu := uint64(q.mtu)
	pkts := e.npkts
	if e.op == mlx5.OpRDMARead {
		pkts = 1
		from = 0
	}
	for i := from; i < pkts; i++ {
		off := uint64(i) * mtu
		n := e.length - off
		if e.op == mlx5.OpRDMARead {
			off, n = 0, 0
		}
		if n > mtu {
			n = mtu
		}
		buf := d.frameBuf()
		fp := &d.fp
		d.frameHeader(q, fp)
		fp.BTH.Opcode = reqOpcode(e.op, i, pkts)
		fp.BTH.PSN = e.firstPSN.Add(i)
		last := i == pkts-1
		fp.BTH.SE = last && e.se && (e.op == mlx5.OpSend || e.op == mlx5.OpSendImm || e.op == mlx5.OpRDMAWriteImm)
		q.sinceAck++
		fp.BTH.AckReq = last || q.sinceAck >= maxPktsPerAckReq
		if fp.BTH.AckReq {
			q.sinceAck = 0
		}
		fp.RETH = roce.RETHFields{VA: e.raddr, RKey: e.rkey, DMALen: uint32(e.length)}
		fp.Imm = e.imm
		hdr := roce.HeaderLen(fp)
		payload := buf[hdr : hdr+int(n)] // gathered in place: BuildFrame's copy is then a no-op move
		ready := t
		if n > 0 {
			if e.isInline {
				copy(payload, e.inline[off:off+n])
			} else {
				done, tlps, err := d.gather(t, q, e, off, payload)
				if err != nil {
					d.frames = append(d.frames, buf)
					d.warn(t, "payload_dma_error", "QP %#x WQE %d: %v", q.qpn, e.idx, err)
					d.failWQE(t, q, e, mlx5.SyndLocalProt)
					return
				}
				d.rec.Stage(d.node, "dma", "payload_dma", t, done, int(n), tlps, q.qpn, e.flow)
				ready = done
			}
		}
		start, end, fl, err := d.emit(q, buf, payload, ready, d.cyc(d.spec.Core.PacketizeCycles))
		if err != nil {
			d.warn(t, "packetize_error", "QP %#x WQE %d: %v", q.qpn, e.idx, err)
			d.failWQE(t, q, e, mlx5.SyndLocalQPOp)
			return
		}
		d.rec.Stage(d.node, "roce", "packetize", start, end, fl, 0, q.qpn, e.flow)
		d.ctr.Inc("tx_packets")
	}
}

// gather DMA-reads bytes [off, off+len(dst)) of the WQE's scatter list into
// dst. Keys were checked when the WQE arrived; translation uses them again
// (an MR deregistered meanwhile fails here).
func (d *Device) gather(t sim.Time, q *qp, e *swqe, off uint64, dst []byte) (sim.Time, int, error) {
	done, tlps, _, err := d.sgeCopy(t, q.pdn, e.sges[:e.nsge], off, dst, dma.LocalRead)
	return done, tlps, err
}

// sgeCopy moves buf to or from bytes [off, off+len(buf)) of a scatter/gather
// list: a DMA read into buf for need == LocalRead (gather), a DMA write of
// buf otherwise (scatter). Each piece is translated and checked through its
// lkey. left is how many bytes of buf did not fit in the list.
func (d *Device) sgeCopy(t sim.Time, pdn uint32, sges []mlx5.DataFields, off uint64, buf []byte, need dma.Access) (done sim.Time, tlps, left int, err error) {
	done = t
	pos := uint64(0)
	for i := range sges {
		if len(buf) == 0 {
			break
		}
		s := &sges[i]
		sl := uint64(s.ByteCount)
		if off >= pos+sl {
			pos += sl
			continue
		}
		start := off - pos
		n := min(sl-start, uint64(len(buf)))
		host, err := d.keys.Check(s.LKey, pdn, s.Addr+start, n, need)
		if err != nil {
			return t, tlps, len(buf), err
		}
		var dn sim.Time
		var st pcie.Stats
		if need == dma.LocalRead {
			dn, st, err = d.dma.Read(t, host, buf[:n])
		} else {
			dn, st, err = d.dma.Write(t, host, buf[:n])
		}
		if err != nil {
			return t, tlps, len(buf), err
		}
		done = max(done, dn)
		tlps += st.TLPs()
		buf = buf[n:]
		off += n
		pos += sl
	}
	return done, tlps, len(buf), nil
}

// reqOps lists, per send opcode, the BTH opcodes of a message's First,
// Middle, Last and Only packets (rocev2.md §2.1).
var reqOps = [256][4]roce.Opcode{
	mlx5.OpSend:         {roce.OpRCSendFirst, roce.OpRCSendMiddle, roce.OpRCSendLast, roce.OpRCSendOnly},
	mlx5.OpSendImm:      {roce.OpRCSendFirst, roce.OpRCSendMiddle, roce.OpRCSendLastImm, roce.OpRCSendOnlyImm},
	mlx5.OpRDMAWrite:    {roce.OpRCWriteFirst, roce.OpRCWriteMiddle, roce.OpRCWriteLast, roce.OpRCWriteOnly},
	mlx5.OpRDMAWriteImm: {roce.OpRCWriteFirst, roce.OpRCWriteMiddle, roce.OpRCWriteLastImm, roce.OpRCWriteOnlyImm},
}

// reqOpcode is the BTH opcode of packet i of n of a request.
func reqOpcode(op mlx5.Opcode, i, n int) roce.Opcode {
	if op == mlx5.OpRDMARead {
		return roce.OpRCReadRequest
	}
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

// complete writes the requester CQE for w if it is signalled.
func (d *Device) complete(t sim.Time, q *qp, w *swqe) {
	w.state = wqefetch.StateDone
	if !w.signaled {
		d.ctr.Inc("wqe_unsignaled")
		return
	}
	f := mlx5.CQEFields{Opcode: mlx5.CQEReq, WQEOpcode: uint8(w.op), QPN: q.qpn, WQECounter: w.idx}
	if w.op == mlx5.OpRDMARead {
		f.ByteCnt = uint32(w.length)
	}
	d.writeCQE(t, q.scq, &f, w.flow)
}

// ackUpTo completes, in order, every outstanding WQE whose last PSN is at
// or before psn (ACKs are cumulative, rocev2.md §4.3), and the NOPs that
// follow them. A READ completes only when its last response has arrived.
func (d *Device) ackUpTo(t sim.Time, q *qp, psn roce.PSN) {
	for w := q.front(); w != nil; w = q.front() {
		if w.npkts > 0 {
			if w.op == mlx5.OpRDMARead {
				if w.readGot < w.length || (w.length == 0 && w.readNext == w.firstPSN) {
					return
				}
			} else if w.lastPSN().After(psn) {
				return
			}
		}
		d.complete(t, q, w)
		q.pop()
	}
}

// failWQE marks w to complete with an error CQE (always written, signalled
// or not), moves the QP to ERR and flushes the rest in ring order
// (mlx5.md §6.4; rocev2.md §4.6).
func (d *Device) failWQE(t sim.Time, q *qp, w *swqe, synd mlx5.Syndrome) {
	w.errSynd = synd
	d.ctr.Inc("cqe_error_" + synd.String())
	q.toError(t)
}

// toError moves the QP to ERR and flushes every outstanding send WQE and
// every posted receive WQE with WR_FLUSH error CQEs.
func (q *qp) toError(t sim.Time) {
	d := q.d
	if q.state != mlx5.QPStateERR {
		d.rec.Warnf(d.node, t, "device", "qp_error", "QP %#x %v → ERR", q.qpn, q.state)
		d.ctr.Inc("qp_to_error")
	}
	q.state = mlx5.QPStateERR
	d.flushAll(t, q)
	// Flush posted receives: read the RQ doorbell record to see them.
	if q.rqCnt > 0 {
		t = q.refreshRQ(t)
		if q.recv.active {
			q.recv.active = false
		}
		for q.rqTail != q.rqHead {
			f := mlx5.CQEFields{Opcode: mlx5.CQERespErr, QPN: q.qpn, WQECounter: uint16(q.rqTail), Syndrome: mlx5.SyndWRFlush}
			d.writeCQE(t, q.rcq, &f, 0)
			q.rqTail++
		}
	}
}

func (d *Device) flushAll(t sim.Time, q *qp) {
	for w := q.front(); w != nil; w = q.front() {
		synd := mlx5.SyndWRFlush
		if w.errSynd != 0 {
			synd = w.errSynd
		} else {
			d.ctr.Inc("wqe_flushed")
		}
		f := mlx5.CQEFields{Opcode: mlx5.CQEReqErr, WQEOpcode: uint8(w.op), QPN: q.qpn, WQECounter: w.idx, Syndrome: synd}
		w.state = wqefetch.StateDone
		d.writeCQE(t, q.scq, &f, w.flow)
		q.pop()
	}
}

// refreshRQ reads the RQ doorbell record (DBR[0]) by DMA and returns when
// the value is in the device.
func (q *qp) refreshRQ(t sim.Time) sim.Time {
	d := q.d
	var b [4]byte
	done, _, err := d.dma.Read(t, q.dbr, b[:])
	if err != nil {
		d.warn(t, "rq_dbr_read_error", "QP %#x: %v", q.qpn, err)
		return t
	}
	c16 := uint16(uint32(b[2])<<8 | uint32(b[3]))
	// Extend the 16-bit counter relative to the tail.
	ahead := uint32(c16 - uint16(q.rqTail))
	if ahead > q.rqCnt {
		d.warn(t, "rq_dbr_bad", "QP %#x RQ doorbell record %d is %d ahead of the tail %d (RQ has %d)", q.qpn, c16, ahead, uint16(q.rqTail), q.rqCnt)
		return done
	}
	q.rqHead = q.rqTail + ahead
	return done
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
	out := make([]WQEInfo, 0, q.count)
	for i := 0; i < q.count; i++ {
		w := &q.swqes[(q.head+i)%len(q.swqes)]
		out = append(out, WQEInfo{Index: w.idx, Opcode: w.op, State: w.state, FirstPSN: uint32(w.firstPSN), Packets: w.npkts})
	}
	return out
}
