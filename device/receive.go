package device

import (
	"errors"

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
// any check is dropped and counted (rocev2.md §4.7). A QP handles its
// packets one after the other, in arrival order: each starts when the
// previous one is done.
func (d *Device) ReceiveFrame(t sim.Time, frame []byte) { d.receive(t, frame, false) }

// ReceiveVerifiedFrame implements wire.VerifiedReceiver: ReceiveFrame for
// a frame whose ICRC the sending device computed over exactly these bytes
// (roce.ParseFrameVerified skips recomputing it).
func (d *Device) ReceiveVerifiedFrame(t sim.Time, frame []byte) { d.receive(t, frame, true) }

// ReceiveKeptFrame implements wire.KeepingReceiver: ReceiveVerifiedFrame,
// except that a WRITE's payload may land from frame's own buffer, which
// the DMA engine then keeps until it lands (dma.WriteVisibleKeep) instead
// of copying it; the port gets another buffer back.
func (d *Device) ReceiveKeptFrame(t sim.Time, frame []byte) []byte {
	d.rxOwn, d.rxSpare = frame, frame
	d.receive(t, frame, true)
	spare := d.rxSpare
	d.rxOwn, d.rxSpare = nil, nil
	return spare
}

func (d *Device) receive(t sim.Time, frame []byte, verified bool) {
	if d.ev.linkDown {
		// On the wire (and in its capture), lost at the port.
		d.warn(t, CtrRxDropLinkDown, "port 1 down: a %d-byte frame from the wire is dropped", len(frame))
		return
	}
	if d.fx.fatal {
		d.inc(CtrDeadRxDrop) // a dead device receives nothing
		return
	}
	p := &d.pkt
	parse := roce.ParseFrame
	if verified {
		parse = roce.ParseFrameVerified
	}
	if err := parse(frame, p); err != nil {
		switch {
		case errors.Is(err, roce.ErrNotRoCE):
			d.inc(CtrRxDropNotRoCE)
		case errors.Is(err, roce.ErrBadICRC):
			d.warn(t, CtrRxDropBadICRC, "frame of %d bytes: %v", len(frame), err)
		default:
			d.warn(t, CtrRxDropMalformed, "frame of %d bytes: %v", len(frame), err)
		}
		return
	}
	if p.VLANTags > 0 {
		// Assumption: softnic's port has no VLAN. Its GID table holds the
		// untagged RoCEv2 GID only, and a ConnectX steers a tagged RoCE
		// frame only to a GID of that VLAN (the GID entry carries the
		// VLAN; mlx5e filters VLANs nobody configured), so a tagged frame
		// reaches no QP.
		d.warn(t, CtrRxDropVLAN, "%v PSN %#x for QP %#x behind %d VLAN tag(s): the port has no VLAN", p.Opcode, p.BTH.PSN(), p.BTH.DestQP(), p.VLANTags)
		return
	}
	if p.DstMAC != d.id.MAC {
		d.inc(CtrRxDropWrongMAC)
		return
	}
	if p.DstIP.Unmap() != d.id.IP {
		d.inc(CtrRxDropWrongIP)
		return
	}
	qpn := p.BTH.DestQP()
	q := d.qp(qpn)
	switch {
	case q == nil || q.dead:
		d.warn(t, CtrRxDropNoQP, "%v PSN %#x for QP %#x, which does not exist", p.Opcode, p.BTH.PSN(), qpn)
		return
	case p.Opcode.Transport() != q.transport():
		d.warn(t, CtrRxDropBadTransport, "%v for %v QP %#x", p.Opcode, q.typ, qpn)
		return
	case p.BTH.PKey()&0x7fff != 0x7fff:
		d.warn(t, CtrRxDropBadPKey, "P_Key %#x on QP %#x", p.BTH.PKey(), qpn)
		return
	case !q.receives():
		d.warn(t, CtrRxDropQPState, "%v PSN %#x for QP %#x in state %v", p.Opcode, p.BTH.PSN(), qpn, q.state)
		return
	case q.typ != mlx5.QPTypeUD && p.SrcIP.Unmap() != q.dstIP:
		d.warn(t, CtrRxDropBadSrc, "%v from %v for QP %#x connected to %v", p.Opcode, p.SrcIP, qpn, q.dstIP)
		return
	}
	d.inc(CtrRxPackets)
	d.inc(CtrRcvdPkts)
	if pl := d.spec.Core.RxPipeline; pl > 0 {
		// The port's receive pipeline (MAC, parser, steering): latency
		// only, packets keep their order (see CoreSpec.RxPipeline).
		d.rec.StagePSN(d.node, "roce", "rx_pipeline", t, t.Add(pl), len(frame), 0, qpn, 0, int32(p.BTH.PSN()&0xffffff))
		t = t.Add(pl)
	}
	if q.resp.parked() {
		// Behind a datagram waiting for its doorbell-record read: in
		// order, after it (udpark.go).
		q.resp.parkBack(t, frame)
		return
	}
	d.rxFrame = frame
	d.process(q, t, p)
	d.rxFrame = nil
}

// process runs a packet of q that reached the QP at t through the QP's
// receive pipeline: each packet starts when the one before is done.
func (d *Device) process(q *qp, t sim.Time, p *roce.Packet) {
	// The message's DMA (payload, receive WQEs, atomics, CQEs) is q's to
	// fault rules (match.qpn).
	defer d.dma.RestoreFaultQP(d.dma.SetFaultQP(q.qpn))
	start := max(t, q.rxBusy)
	t = start.Add(d.cyc(d.spec.Core.RxCycles))
	q.rxBusy = t
	d.commEst(t, q)
	if p.Info.Response {
		if q.state != mlx5.QPStateRTS {
			d.warn(t, CtrRxDropQPState, "response %v for QP %#x in state %v", p.Opcode, q.qpn, q.state)
			return
		}
		q.req.rx(start, t, p)
		return
	}
	q.resp.rx(start, t, p)
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
