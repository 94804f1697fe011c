package device

import (
	"errors"

	"github.com/softnic/softnic/dma"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/sim"
)

// NAK codes (AETH value field of a NAK, rocev2.md §1.6).
const (
	nakPSNSeq     = 0
	nakInvalidReq = 1
	nakRemoteAcc  = 2
	nakRemoteOp   = 3
)

// ReceiveFrame is the device's receive path for one Ethernet frame from the
// wire (wire.Receiver). Nothing from the wire is trusted: a frame that fails
// any check is dropped and counted (rocev2.md §4.7).
func (d *Device) ReceiveFrame(t sim.Time, frame []byte) {
	p := &d.pkt
	if err := roce.ParseFrame(frame, p); err != nil {
		switch {
		case errors.Is(err, roce.ErrNotRoCE):
			d.ctr.Inc("rx_drop_not_roce")
		case errors.Is(err, roce.ErrBadICRC):
			d.warn(t, "rx_drop_bad_icrc", "frame of %d bytes: %v", len(frame), err)
		default:
			d.warn(t, "rx_drop_malformed", "frame of %d bytes: %v", len(frame), err)
		}
		return
	}
	if p.DstMAC != d.id.MAC {
		d.ctr.Inc("rx_drop_wrong_mac")
		return
	}
	if p.DstIP.Unmap() != d.id.IP {
		d.ctr.Inc("rx_drop_wrong_ip")
		return
	}
	qpn := p.BTH.DestQP()
	q := d.qps[qpn]
	switch {
	case q == nil:
		d.warn(t, "rx_drop_no_qp", "%v PSN %d for QP %#x, which does not exist", p.Opcode, p.BTH.PSN(), qpn)
		return
	case p.Opcode.Transport() != roce.TransportRC:
		d.warn(t, "rx_drop_bad_transport", "%v for RC QP %#x", p.Opcode, qpn)
		return
	case p.BTH.PKey()&0x7fff != 0x7fff:
		d.warn(t, "rx_drop_bad_pkey", "P_Key %#x on QP %#x", p.BTH.PKey(), qpn)
		return
	case q.state != mlx5.QPStateRTR && q.state != mlx5.QPStateRTS:
		d.warn(t, "rx_drop_qp_state", "%v PSN %d for QP %#x in state %v", p.Opcode, p.BTH.PSN(), qpn, q.state)
		return
	case p.SrcIP.Unmap() != q.dstIP:
		d.warn(t, "rx_drop_bad_src", "%v from %v for QP %#x connected to %v", p.Opcode, p.SrcIP, qpn, q.dstIP)
		return
	}
	d.ctr.Inc("rx_packets")
	start := t
	t = t.Add(d.cyc(d.spec.Core.RxCycles))
	if p.Info.Response {
		if q.state != mlx5.QPStateRTS {
			d.warn(t, "rx_drop_qp_state", "response %v for QP %#x in state %v", p.Opcode, qpn, q.state)
			return
		}
		d.requesterRx(start, t, q, p)
		return
	}
	d.responderRx(start, t, q, p)
}

// payloadOK applies the segmentation rules of rocev2.md §2.2.
func payloadOK(pos roce.Position, n, mtu int) bool {
	switch {
	case pos.First() && pos.Last():
		return n <= mtu
	case pos.Last():
		return n >= 1 && n <= mtu
	}
	return n == mtu
}

// responderRx handles a request packet (SEND, WRITE, READ request).
func (d *Device) responderRx(arrive, t sim.Time, q *qp, p *roce.Packet) {
	psn := p.BTH.PSN()
	diff := psn.Diff(q.ePSN)
	op := p.Info.Operation
	if diff < 0 {
		d.ctr.Inc("rx_duplicate")
		if op == roce.OperationReadRequest {
			d.rxRead(arrive, t, q, p, true)
			return
		}
		// rxe: re-ACK with the last accepted PSN, nothing re-executed.
		d.sendAck(t, q, q.ePSN.Sub(1), roce.ACKSyndrome(0x1f))
		return
	}
	if diff > 0 {
		d.ctr.Inc("rx_out_of_sequence")
		if !q.nakSent {
			q.nakSent = true
			d.sendAck(t, q, q.ePSN, roce.NAKSyndrome(nakPSNSeq))
		}
		return
	}
	q.nakSent = false
	switch op {
	case roce.OperationSend:
		d.rxSend(arrive, t, q, p)
	case roce.OperationWrite:
		d.rxWrite(arrive, t, q, p)
	case roce.OperationReadRequest:
		d.rxRead(arrive, t, q, p, false)
	default:
		d.warn(t, "rx_unsupported_op", "QP %#x: %v not supported", q.qpn, p.Opcode)
		d.respError(t, q, psn, nakInvalidReq, 0)
	}
}

// respError NAKs a request and moves the responder QP to ERR; a non-zero
// syndrome also completes the active receive WQE with it.
func (d *Device) respError(t sim.Time, q *qp, psn roce.PSN, code uint8, synd mlx5.Syndrome) {
	d.sendAck(t, q, psn, roce.NAKSyndrome(code))
	if synd != 0 && q.recv.active {
		f := mlx5.CQEFields{Opcode: mlx5.CQERespErr, QPN: q.qpn, WQECounter: uint16(q.recv.index), Syndrome: synd}
		d.writeCQE(t, q.rcq, &f, 0)
		q.recv.active = false
	}
	q.toError(t)
}

// takeRecv consumes the next receive WQE: refresh the RQ producer count from
// the doorbell record if the cached one shows none, then DMA-read the WQE.
func (d *Device) takeRecv(t sim.Time, q *qp) (sim.Time, bool) {
	if q.rqCnt == 0 {
		return t, false
	}
	if q.rqTail == q.rqHead {
		t = q.refreshRQ(t)
		if q.rqTail == q.rqHead {
			return t, false
		}
	}
	slot := q.rqTail & (q.rqCnt - 1)
	addr := q.rqBase + uint64(slot)*uint64(q.rqStride)
	buf := d.rqbuf[:q.rqStride]
	done, st, err := d.dma.Read(t, addr, buf)
	if err != nil {
		d.warn(t, "rq_read_error", "QP %#x RQ WQE %d: %v", q.qpn, q.rqTail, err)
		return t, false
	}
	d.rec.Stage(d.node, "dma", "rq_wqe_fetch", t, done, len(buf), st.TLPs(), q.qpn, 0)
	r := &q.recv
	*r = recvState{active: true, index: q.rqTail}
	for off := 0; off+mlx5.DataSegSize <= len(buf) && r.nsge < len(r.sges); off += mlx5.DataSegSize {
		s := mlx5.DataSeg(buf[off:]).Fields()
		if s.LKey == mlx5.InvalidKey {
			break
		}
		r.sges[r.nsge] = s
		r.nsge++
	}
	q.rqTail++
	return done, true
}

// scatter writes src at offset off of the active receive WQE's SGEs.
func (d *Device) scatter(t sim.Time, q *qp, off uint64, src []byte) (sim.Time, int, error) {
	done, tlps, left, err := d.sgeCopy(t, q.pdn, q.recv.sges[:q.recv.nsge], off, src, dma.LocalWrite)
	if err == nil && left > 0 {
		err = errRecvTooSmall
	}
	return done, tlps, err
}

var errRecvTooSmall = errors.New("device: message larger than the receive WQE's buffers")

func (d *Device) rxSend(arrive, t sim.Time, q *qp, p *roce.Packet) {
	psn := p.BTH.PSN()
	pos := p.Info.Pos
	if pos.First() {
		if q.recv.active || q.wr.active {
			d.warn(t, "rx_missing_last", "QP %#x: %v while a message is open", q.qpn, p.Opcode)
			d.respError(t, q, psn, nakInvalidReq, mlx5.SyndRemoteInvalidReq)
			return
		}
		var ok bool
		if t, ok = d.takeRecv(t, q); !ok {
			d.rnrNakSend(t, q, psn)
			return
		}
	} else if !q.recv.active {
		d.warn(t, "rx_missing_first", "QP %#x: %v without a First", q.qpn, p.Opcode)
		d.respError(t, q, psn, nakInvalidReq, 0)
		return
	}
	if !payloadOK(pos, len(p.Payload), q.mtu) {
		d.warn(t, "rx_bad_length", "QP %#x: %v with %d payload bytes at MTU %d", q.qpn, p.Opcode, len(p.Payload), q.mtu)
		d.respError(t, q, psn, nakInvalidReq, mlx5.SyndRemoteInvalidReq)
		return
	}
	done, tlps, err := d.scatter(t, q, q.recv.off, p.Payload)
	if err != nil {
		if errors.Is(err, errRecvTooSmall) {
			d.warn(t, "rx_recv_too_small", "QP %#x: %v", q.qpn, err)
			d.respError(t, q, psn, nakInvalidReq, mlx5.SyndLocalLength)
		} else {
			d.warn(t, "rx_recv_prot", "QP %#x receive WQE %d: %v", q.qpn, q.recv.index, err)
			d.respError(t, q, psn, nakRemoteOp, mlx5.SyndLocalProt)
		}
		return
	}
	q.recv.off += uint64(len(p.Payload))
	q.ePSN = q.ePSN.Next()
	d.rec.Stage(d.node, "device", "responder", arrive, done, len(p.Payload), tlps, q.qpn, 0)
	if pos.Last() {
		q.msn++
		f := mlx5.CQEFields{Opcode: mlx5.CQERespSend, QPN: q.qpn, WQECounter: uint16(q.recv.index),
			ByteCnt: uint32(q.recv.off), SE: p.BTH.SE(), FlagsRQPN: 2 << 24}
		if p.Info.HasImm() {
			f.Opcode = mlx5.CQERespSendImm
			f.Imm = p.ImmDt.Imm()
		}
		q.recv.active = false
		d.writeCQE(done, q.rcq, &f, 0)
	}
	if p.BTH.AckReq() {
		d.sendAck(done, q, psn, roce.ACKSyndrome(0x1f))
	}
}

func (d *Device) rxWrite(arrive, t sim.Time, q *qp, p *roce.Packet) {
	psn := p.BTH.PSN()
	pos := p.Info.Pos
	if pos.First() {
		if q.recv.active || q.wr.active {
			d.warn(t, "rx_missing_last", "QP %#x: %v while a message is open", q.qpn, p.Opcode)
			d.respError(t, q, psn, nakInvalidReq, 0)
			return
		}
		if q.access&mlx5.AccessRemoteWrite == 0 {
			d.warn(t, "rx_write_not_allowed", "QP %#x has no remote-write access", q.qpn)
			d.respError(t, q, psn, nakInvalidReq, 0)
			return
		}
		va, rkey, n := p.RETH.VA(), p.RETH.RKey(), p.RETH.DMALen()
		var host uint64
		if n > 0 { // zero-length: R_Key and VA are not checked (C9-88)
			h, err := d.keys.Check(rkey, q.pdn, va, uint64(n), dma.RemoteWrite)
			if err != nil {
				d.warn(t, "rx_write_rkey", "QP %#x WRITE va %#x len %d rkey %#x: %v", q.qpn, va, n, rkey, err)
				d.respError(t, q, psn, nakRemoteAcc, 0)
				return
			}
			host = h
		}
		q.wr = writeState{active: true, host: host, left: uint64(n), total: n}
	} else if !q.wr.active {
		d.warn(t, "rx_missing_first", "QP %#x: %v without a First", q.qpn, p.Opcode)
		d.respError(t, q, psn, nakInvalidReq, 0)
		return
	}
	n := uint64(len(p.Payload))
	if !payloadOK(pos, len(p.Payload), q.mtu) || n > q.wr.left || (pos.Last() && n != q.wr.left) {
		d.warn(t, "rx_bad_length", "QP %#x: %v with %d bytes, %d of the RETH length left", q.qpn, p.Opcode, n, q.wr.left)
		d.respError(t, q, psn, nakInvalidReq, 0)
		return
	}
	// WRITE with immediate consumes a receive WQE: check before placing data
	// so that an RNR NAK leaves nothing half done.
	imm := pos.Last() && p.Info.HasImm()
	if imm {
		var ok bool
		if t, ok = d.takeRecv(t, q); !ok {
			d.rnrNakSend(t, q, psn)
			return
		}
	}
	done := t
	tlps := 0
	if n > 0 {
		dn, st, err := d.dma.Write(t, q.wr.host, p.Payload)
		if err != nil {
			d.warn(t, "rx_write_dma", "QP %#x: %v", q.qpn, err)
			d.respError(t, q, psn, nakRemoteOp, 0)
			return
		}
		done, tlps = dn, st.TLPs()
	}
	q.wr.host += n
	q.wr.left -= n
	q.ePSN = q.ePSN.Next()
	d.rec.Stage(d.node, "device", "responder", arrive, done, int(n), tlps, q.qpn, 0)
	if pos.Last() {
		q.msn++
		q.wr.active = false
		if imm {
			f := mlx5.CQEFields{Opcode: mlx5.CQERespWrImm, QPN: q.qpn, WQECounter: uint16(q.recv.index),
				ByteCnt: q.wr.total, Imm: p.ImmDt.Imm(), SE: p.BTH.SE(), FlagsRQPN: 2 << 24}
			q.recv.active = false
			d.writeCQE(done, q.rcq, &f, 0)
		}
	}
	if p.BTH.AckReq() {
		d.sendAck(done, q, psn, roce.ACKSyndrome(0x1f))
	}
}

// rxRead answers an RDMA READ request with READ RESPONSE packets. A
// duplicate (replay) resends the responses without counting a new message.
func (d *Device) rxRead(arrive, t sim.Time, q *qp, p *roce.Packet, replay bool) {
	psn := p.BTH.PSN()
	if q.access&mlx5.AccessRemoteRead == 0 || q.maxDestRd == 0 {
		d.warn(t, "rx_read_not_allowed", "QP %#x: remote read not enabled (access %#x, max_dest_rd_atomic %d)", q.qpn, q.access, q.maxDestRd)
		d.respError(t, q, psn, nakInvalidReq, 0)
		return
	}
	va, rkey, n := p.RETH.VA(), p.RETH.RKey(), uint64(p.RETH.DMALen())
	var host uint64
	if n > 0 {
		h, err := d.keys.Check(rkey, q.pdn, va, n, dma.RemoteRead)
		if err != nil {
			d.warn(t, "rx_read_rkey", "QP %#x READ va %#x len %d rkey %#x: %v", q.qpn, va, n, rkey, err)
			d.respError(t, q, psn, nakRemoteAcc, 0)
			return
		}
		host = h
	}
	mtu := uint64(q.mtu)
	pkts := int((n + mtu - 1) / mtu)
	if pkts == 0 {
		pkts = 1
	}
	if !replay {
		q.ePSN = psn.Add(pkts)
		q.msn++
	}
	t = t.Add(d.cyc(d.spec.Core.ResponderCycles))
	last := t
	for i := 0; i < pkts; i++ {
		off := uint64(i) * mtu
		sz := n - off
		if sz > mtu {
			sz = mtu
		}
		buf := d.frameBuf()
		fp := &d.fp
		d.frameHeader(q, fp)
		switch {
		case pkts == 1:
			fp.BTH.Opcode = roce.OpRCReadResponseOnly
		case i == 0:
			fp.BTH.Opcode = roce.OpRCReadResponseFirst
		case i == pkts-1:
			fp.BTH.Opcode = roce.OpRCReadResponseLast
		default:
			fp.BTH.Opcode = roce.OpRCReadResponseMiddle
		}
		fp.BTH.PSN = psn.Add(i)
		fp.AETH = roce.AETHFields{Syndrome: roce.ACKSyndrome(0x1f), MSN: q.msn & 0xffffff}
		hdr := roce.HeaderLen(fp)
		payload := buf[hdr : hdr+int(sz)]
		ready := t
		if sz > 0 {
			dn, st, err := d.dma.Read(t, host+off, payload)
			if err != nil {
				d.frames = append(d.frames, buf)
				d.warn(t, "rx_read_dma", "QP %#x: %v", q.qpn, err)
				d.respError(t, q, psn, nakRemoteOp, 0)
				return
			}
			d.rec.Stage(d.node, "dma", "payload_dma", t, dn, int(sz), st.TLPs(), q.qpn, 0)
			ready = dn
		}
		_, end, _, err := d.emit(q, buf, payload, ready, d.cyc(d.spec.Core.PacketizeCycles))
		if err != nil {
			d.warn(t, "packetize_error", "QP %#x READ response: %v", q.qpn, err)
			return
		}
		d.ctr.Inc("tx_packets")
		last = end
	}
	d.rec.Stage(d.node, "device", "responder", arrive, last, int(n), 0, q.qpn, 0)
}

// rnrNakSend answers a request that needs a receive WQE when none is posted.
func (d *Device) rnrNakSend(t sim.Time, q *qp, psn roce.PSN) {
	d.warn(t, "rnr_nak_sent", "QP %#x PSN %d: no receive WQE posted", q.qpn, psn)
	d.sendAck(t, q, psn, roce.RNRNAKSyndrome(q.minRNR))
}

// sendAck builds and sends an ACK / NAK / RNR NAK.
func (d *Device) sendAck(t sim.Time, q *qp, psn roce.PSN, synd roce.Syndrome) {
	buf := d.frameBuf()
	fp := &d.fp
	d.frameHeader(q, fp)
	fp.BTH.Opcode = roce.OpRCAck
	fp.BTH.PSN = psn
	fp.AETH = roce.AETHFields{Syndrome: synd, MSN: q.msn & 0xffffff}
	start, end, n, err := d.emit(q, buf, nil, t, d.cyc(d.spec.Core.AckCycles))
	if err != nil {
		d.warn(t, "packetize_error", "QP %#x ACK: %v", q.qpn, err)
		return
	}
	switch {
	case synd.IsACK():
		d.ctr.Inc("acks_sent")
	case synd.IsRNRNAK():
		d.ctr.Inc("rnr_naks_sent")
	default:
		d.ctr.Inc("naks_sent")
	}
	d.rec.Stage(d.node, "roce", "ack", start, end, n, 0, q.qpn, 0)
}

// requesterRx handles a response: ACK / NAK / RNR NAK or READ RESPONSE.
func (d *Device) requesterRx(arrive, t sim.Time, q *qp, p *roce.Packet) {
	psn := p.BTH.PSN()
	switch p.Info.Operation {
	case roce.OperationAck:
		synd := p.AETH.Syndrome()
		d.rec.Stage(d.node, "device", "ack_rx", arrive, t, 0, 0, q.qpn, 0)
		switch {
		case synd.IsACK():
			d.ackUpTo(t, q, psn)
		case synd.IsRNRNAK():
			d.ctr.Inc("rnr_naks_rcvd")
			d.ackUpTo(t, q, psn.Sub(1))
			d.rnrRetry(t, q, psn, synd.Value())
		case synd.IsNAK():
			d.ackUpTo(t, q, psn.Sub(1))
			code := synd.Value()
			if code == nakPSNSeq {
				d.ctr.Inc("nak_seq_rcvd")
				d.retransmitFrom(t, q, psn)
				return
			}
			w := q.front()
			if w == nil {
				d.warn(t, "rx_unexpected_nak", "QP %#x NAK %v PSN %d with nothing outstanding", q.qpn, synd, psn)
				return
			}
			s := mlx5.SyndRemoteOp
			switch code {
			case nakInvalidReq:
				s = mlx5.SyndRemoteInvalidReq
			case nakRemoteAcc:
				s = mlx5.SyndRemoteAccess
			}
			d.warn(t, "nak_rcvd", "QP %#x WQE %d: NAK %v", q.qpn, w.idx, synd)
			d.failWQE(t, q, w, s)
		default:
			d.warn(t, "rx_bad_aeth", "QP %#x AETH syndrome %v", q.qpn, synd)
		}
	case roce.OperationReadResponse:
		w := q.findRead(psn)
		if w == nil {
			d.warn(t, "rx_unexpected_read_response", "QP %#x %v PSN %d matches no outstanding READ", q.qpn, p.Opcode, psn)
			return
		}
		d.ackUpTo(t, q, w.firstPSN.Sub(1))
		if psn != w.readNext {
			d.ctr.Inc("rx_read_response_out_of_order")
			return
		}
		off := uint64(psn.Diff(w.firstPSN)) * uint64(q.mtu)
		n := uint64(len(p.Payload))
		if off+n > w.length || !payloadOK(p.Info.Pos, len(p.Payload), q.mtu) && w.npkts > 1 {
			d.warn(t, "rx_read_response_length", "QP %#x READ WQE %d: %d bytes at offset %d of %d", q.qpn, w.idx, n, off, w.length)
			d.failWQE(t, q, w, mlx5.SyndBadResp)
			return
		}
		done := t
		if n > 0 {
			var err error
			var tlps int
			done, tlps, err = d.placeRead(t, q, w, off, p.Payload)
			if err != nil {
				d.warn(t, "read_scatter_prot", "QP %#x READ WQE %d: %v", q.qpn, w.idx, err)
				d.failWQE(t, q, w, dma.Syndrome(err))
				return
			}
			d.rec.Stage(d.node, "dma", "read_scatter", t, done, int(n), tlps, q.qpn, w.flow)
		}
		w.readGot += n
		w.readNext = w.readNext.Next()
		if p.Info.Pos.Last() {
			d.ackUpTo(done, q, w.lastPSN())
		}
	default:
		d.warn(t, "rx_unexpected_response", "QP %#x: %v", q.qpn, p.Opcode)
	}
}

// findRead finds the outstanding READ whose PSN range holds psn.
func (q *qp) findRead(psn roce.PSN) *swqe {
	for i := 0; i < q.count; i++ {
		w := &q.swqes[(q.head+i)%len(q.swqes)]
		if w.op == mlx5.OpRDMARead && psn.InWindow(w.firstPSN, uint32(w.npkts)) {
			return w
		}
	}
	return nil
}

// placeRead writes READ response data into the READ WQE's scatter list.
func (d *Device) placeRead(t sim.Time, q *qp, w *swqe, off uint64, src []byte) (sim.Time, int, error) {
	done, tlps, _, err := d.sgeCopy(t, q.pdn, w.sges[:w.nsge], off, src, dma.LocalWrite)
	return done, tlps, err
}

// retxEvent restarts transmission from a PSN (RNR wait over).
type retxEvent struct {
	d   *Device
	q   *qp
	psn roce.PSN
}

func (e *retxEvent) Fire(now sim.Time) { e.d.retransmitFrom(now, e.q, e.psn) }

// rnrRetry waits the RNR timer the NAK names and then resends from psn, or
// fails the WQE when the RNR retry count is used up (7 = infinite).
func (d *Device) rnrRetry(t sim.Time, q *qp, psn roce.PSN, code uint8) {
	w := q.front()
	if w == nil {
		return
	}
	if q.rnrRetry != 7 {
		if w.rnrLeft == 0 {
			d.warn(t, "rnr_retry_exceeded", "QP %#x WQE %d: RNR retries used up", q.qpn, w.idx)
			d.failWQE(t, q, w, mlx5.SyndRNRRetry)
			return
		}
		w.rnrLeft--
	}
	d.eng.At(t.Add(roce.RNRTimer(code)), &retxEvent{d: d, q: q, psn: psn})
}

// retransmitFrom resends every outstanding packet from psn on (go-back-N).
func (d *Device) retransmitFrom(t sim.Time, q *qp, psn roce.PSN) {
	if q.state != mlx5.QPStateRTS {
		return
	}
	d.ctr.Inc("retransmits")
	for i := 0; i < q.count; i++ {
		w := &q.swqes[(q.head+i)%len(q.swqes)]
		if w.npkts == 0 {
			continue
		}
		from := 0
		if psn.InWindow(w.firstPSN, uint32(w.npkts)) {
			from = int(psn.Diff(w.firstPSN))
		} else if w.lastPSN().Before(psn) {
			continue
		}
		if w.op == mlx5.OpRDMARead {
			w.readGot, w.readNext = 0, w.firstPSN
		}
		d.transmit(t, q, w, from)
	}
}
