package device

import (
	"errors"

	"github.com/softnic/softnic/dma"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/pcie"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/sim"
)

// payload says where the bytes of one packet come from: inline data, a
// gather list translated through its lkeys (requests), or host memory
// already translated through an rkey (READ responses).
type payload struct {
	n      int
	inline []byte
	sges   []mlx5.DataFields // gather list
	pdn    uint32
	off    uint64 // offset of the packet's bytes in the gather list
	host   uint64 // READ response: host address of the bytes
	isHost bool
	resp   bool // a READ response (the responder paces them by what left)
	// depart: the last packet of a UC or UD WQE (WQE counter widx), which
	// completes when it has left the port (requester.departed).
	depart bool
	widx   uint16
}

var errPacketize = errors.New("device: frame build failed")

// packetize is the one packetizer: it takes d.fp (headers filled in by the
// caller), fetches the payload (DMA gather, inline copy or a read of host
// memory), builds the frame with its ICRC and queues it behind the QP's
// previous frame. It returns when the frame leaves the packetizer.
func (d *Device) packetize(t sim.Time, q *qp, pl *payload, flow uint64) (sim.Time, error) {
	defer d.dma.RestoreFaultQP(d.dma.SetFaultQP(q.qpn)) // what fault rules match (match.qpn)
	buf := d.frameBuf()
	psn := int32(d.fp.BTH.PSN & 0xffffff) // the caller set the headers
	hdr := roce.HeaderLen(&d.fp)
	data := buf[hdr : hdr+pl.n] // placed where BuildFrame wants it: its copy is a no-op
	ready := t
	if pl.n > 0 {
		var done sim.Time
		var tlps int
		var err error
		switch {
		case pl.inline != nil:
			copy(data, pl.inline)
			done = t
		case pl.isHost:
			var st pcie.Stats
			done, st, err = d.dma.Read(t, pl.host, data)
			tlps = st.TLPs()
		default:
			done, tlps, _, err = d.sgeCopy(t, pl.pdn, pl.sges, pl.off, data, dma.LocalRead)
		}
		if err != nil {
			d.frames = append(d.frames, buf)
			return t, err
		}
		if pl.inline == nil {
			d.rec.StagePSN(d.node, "dma", "payload_dma", t, done, pl.n, tlps, q.qpn, flow, psn)
		}
		ready = done
	}
	start, end, n, err := d.emit(q, buf, data, ready, d.cyc(d.spec.Core.PacketizeCycles), pl.resp, pl.depart, pl.widx)
	if err != nil {
		return t, errPacketize
	}
	d.rec.StagePSN(d.node, "roce", "packetize", start, end, n, 0, q.qpn, flow, psn)
	d.txPipeline(end, n, q.qpn, flow, psn)
	d.inc(CtrTxPackets)
	return end, nil
}

// sgeCopy moves buf to or from bytes [off, off+len(buf)) of a scatter/gather
// list: a DMA read into buf for need == LocalRead (gather), a DMA write of
// buf otherwise (scatter). Each piece is translated and checked through its
// lkey, at the time of the copy (an MR deregistered meanwhile fails here).
// left is how many bytes of buf did not fit in the list.
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
			dn, st, err = d.dma.WriteVisible(t, host, buf[:n])
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

// sendAck builds and sends an ACK / NAK / RNR NAK for psn carrying msn,
// and returns when it leaves the port (its txEvent; t if it could not be
// built).
func (d *Device) sendAck(t sim.Time, q *qp, psn roce.PSN, synd roce.Syndrome, msn uint32) sim.Time {
	buf := d.frameBuf()
	fp := &d.fp
	d.frameHeader(q, fp)
	fp.BTH.Opcode = roce.OpRCAck
	fp.BTH.PSN = psn
	fp.AETH = roce.AETHFields{Syndrome: synd, MSN: msn & 0xffffff}
	start, end, n, err := d.emit(q, buf, nil, t, d.cyc(d.spec.Core.AckCycles), false, false, 0)
	if err != nil {
		d.warn(t, CtrPacketizeError, "QP %#x ACK: %v", q.qpn, err)
		return t
	}
	switch {
	case synd.IsACK():
		d.inc(CtrACKsSent)
	case synd.IsRNRNAK():
		d.inc(CtrRNRNAKsSent)
	default:
		d.inc(CtrNAKsSent)
	}
	d.rec.StagePSN(d.node, "roce", "ack", start, end, n, 0, q.qpn, 0, int32(psn&0xffffff))
	d.txPipeline(end, n, q.qpn, 0, int32(psn&0xffffff))
	return end.Add(d.spec.Core.TxPipeline)
}

// txPipeline records the port's transmit latency after a frame is built
// (emit hands the frame to the port that much later).
func (d *Device) txPipeline(end sim.Time, n int, qpn uint32, flow uint64, psn int32) {
	if pl := d.spec.Core.TxPipeline; pl > 0 {
		d.rec.StagePSN(d.node, "roce", "tx_pipeline", end, end.Add(pl), n, 0, qpn, flow, psn)
	}
}
