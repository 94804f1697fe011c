package device

import (
	"encoding/binary"
	"errors"

	"github.com/softnic/softnic/dma"
	"github.com/softnic/softnic/fault"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/sim"
)

// cq is the device side of a completion queue.
type cq struct {
	cqn      uint32
	buf, dbr uint64
	nent     uint32
	pi       uint32        // producer index
	ci       uint32        // last consumer index read from the doorbell record
	err      bool          // overrun: in error, writes no more CQEs
	oi       bool          // overrun ignore (cqc.oi): a full CQ is written over
	inflight []*cqeLanding // CQEs written but not yet landed, in order
	landBy   sim.Time      // when the last CQE written lands (a late one included)

	// Notification (control_cq.go, mlx5.md §6.7): the CQC's arm state,
	// last_solicit index and moderation.
	armed      bool
	armSol     bool   // armed for solicited (SE or error) CQEs only
	armSN      uint8  // sequence number of the arm
	armCI      uint32 // consumer index the arm carried (full counter)
	hasSol     bool   // a solicited or error CQE was written
	lastSol    uint32 // index of the last one
	events     uint32 // completion EQEs raised
	dispatched uint32 // of those, handed to the channel by the kernel side
	evRead     uint32 // of those, read by the application (checked mode: arm sn)
	channel    uint32 // completion channel (0: none)
	queued     uint32 // of its events, on the channel's queue and not yet read
	modCount   uint16 // cq_max_count (0: none)
	modPeriod  uint16 // cq_period in µs (0: none)
	modPending uint32 // qualifying CQEs since the arm, not yet notified
	modTimer   *sim.Timer
	modStart   sim.Time // when the armed modTimer started (the first pending CQE)
}

// cqeLanding is a CQE on its way to host memory: the posted write's bytes
// land when it completes, op_own included, so the provider never sees a CQE
// before the device could have written it (mlx5.md §6.6).
type cqeLanding struct {
	d      *Device
	c      *cq
	addr   uint64
	buf    [mlx5.CQE64Size]byte
	landed bool
}

func (l *cqeLanding) Fire(now sim.Time) {
	if !l.landed {
		l.land(now)
	}
	l.c = nil
	l.d.lfree = append(l.d.lfree, l)
}

func (l *cqeLanding) land(now sim.Time) {
	l.landed = true
	l.d.landed++
	if err := l.d.mem.Write(l.addr, l.buf[:]); err != nil {
		l.d.warn(now, CtrCQEWriteError, "CQ %d CQE landing at %#x: %v", l.c.cqn, l.addr, err)
	}
	c := l.c
	for i, p := range c.inflight {
		if p == l {
			c.inflight = append(c.inflight[:i], c.inflight[i+1:]...)
			break
		}
	}
}

// CQEsLanded counts the CQEs the device has made visible in host memory
// so far, on every CQ. A caller that polls many CQs between events (a
// perftest loop over 64 QPs) can skip a sweep while it has not moved: no
// CQ can have become ready without it.
func (d *Device) CQEsLanded() uint64 { return d.landed }

// landAll makes every CQE of c still in flight visible now (a QP being
// destroyed is quiesced before the command returns).
func (d *Device) landAll(c *cq) {
	for len(c.inflight) > 0 {
		c.inflight[0].land(d.eng.Now())
	}
}

// writeCQE DMA-writes one CQE at the CQ's producer index and returns when
// it lands. A CQ with no free entry (after re-reading the consumer index
// from its doorbell record) overruns: it goes to error, every QP that uses
// it goes to ERR, and later CQEs for it are dropped and counted.
//
// psn is the PSN of the packet that completed a receive (noPSN for
// the requester's CQEs, which carry the WQE's flow, and for flushes): the
// trace ties the responder's CQE to the sender's WQE by it.
func (d *Device) writeCQE(t sim.Time, c *cq, f *mlx5.CQEFields, flow uint64, psn int32) sim.Time {
	if c.err {
		d.warn(t, CtrCQEDroppedOverrun, "CQ %d is in error (overrun); CQE for QP %#x dropped", c.cqn, f.QPN)
		return t
	}
	if d.fx.fatal {
		return t // a dead device writes nothing (the driver's software flush does, fatal.go)
	}
	defer d.dma.RestoreFaultQP(d.dma.SetFaultQP(f.QPN)) // the CQE (and its set_ci read) is the QP's to fault rules
	var delay sim.Duration
	if d.fx.in != nil {
		var drop bool
		if delay, drop = d.cqFault(t, c, f, flow); drop {
			return t
		}
	}
	if d.chk != nil {
		d.chk.cqe(t, c, f)
	}
	if c.pi-c.ci >= c.nent {
		// Looks full: refresh the consumer index from the doorbell record.
		var b [4]byte
		d.dma.SetTarget(fault.KindDBR)
		done, _, err := d.dma.Read(t, c.dbr, b[:])
		if err == nil {
			ci := binary.BigEndian.Uint32(b[:]) & 0xffffff
			// set_ci is 24 bits; rebuild the full counter near pi.
			c.ci = c.pi - (c.pi-ci)&0xffffff
		} else {
			d.warn(t, CtrCQDBRReadError, "CQ %d doorbell record: %v", c.cqn, err)
			if d.dmaFatal(t, err) {
				return t // dead: no CQE (the driver's flush completes the work)
			}
		}
		t = done
		if c.pi-c.ci >= c.nent && c.oi {
			d.inc(CtrCQOverrunIgnored) // cqc.oi: the oldest unconsumed CQE is written over
		} else if c.pi-c.ci >= c.nent {
			if d.chk != nil {
				d.chk.overrun(t, c)
			}
			d.cqOverrun(t, c, f.QPN)
			return t
		}
	}
	d.rec.StagePSN(d.node, "device", "cqe_build", t, t.Add(d.cyc(d.spec.Core.CQECycles)), 0, 0, f.QPN, flow, psn)
	t = t.Add(d.cyc(d.spec.Core.CQECycles))
	d.stampUIdx(f)
	f.Owner = mlx5.CQEOwnerBit(c.pi, c.nent)
	f.Timestamp = uint64(t / 1000) // HCA clock in ns
	addr := c.buf + uint64(c.pi&(c.nent-1))*mlx5.CQE64Size
	d.dma.SetTarget(fault.KindCQE)
	done, st, err := d.dma.TimeWrite(t, addr, mlx5.CQE64Size)
	if err != nil {
		d.warn(t, CtrCQEWriteError, "CQ %d CQE write at %#x: %v", c.cqn, addr, err)
		if errors.Is(err, dma.ErrPCIe) {
			d.cqAccessError(t, c, f.QPN, err)
		}
		return t
	}
	done = done.AddSat(delay)
	c.landBy = max(c.landBy, done)
	var l *cqeLanding
	if k := len(d.lfree); k > 0 {
		l = d.lfree[k-1]
		d.lfree = d.lfree[:k-1]
	} else {
		l = &cqeLanding{d: d}
	}
	l.c, l.addr, l.landed = c, addr, false
	mlx5.CQE64(l.buf[:]).Encode(f)
	if d.fx.cqCorrupt.Action != 0 {
		d.corruptCQE(l.buf[:])
	}
	c.inflight = append(c.inflight, l)
	d.eng.At(done, l)
	if f.SE || f.Opcode == mlx5.CQEReqErr || f.Opcode == mlx5.CQERespErr {
		c.hasSol, c.lastSol = true, c.pi
		if c.armed {
			d.cqNotify(t, c, 1)
		}
	} else if c.armed && !c.armSol {
		d.cqNotify(t, c, 1)
	}
	c.pi++
	d.inc(CtrCQEs)
	d.rec.StagePSN(d.node, "device", "cqe_write", t, done, mlx5.CQE64Size, st.TLPs(), f.QPN, flow, psn)
	return done
}

// cqOverrun puts c in error, raises CQ_ERR and, as its own event, moves
// every QP attached to it into ERR (their flushes go to their other CQ, if
// it has room). A CQ in error raises no more completion events.
func (d *Device) cqOverrun(t sim.Time, c *cq, qpn uint32) {
	c.err = true
	c.armed = false
	c.modTimer.Stop()
	d.warn(t, CtrCQOverrun, "CQ %d overrun: producer %d, consumer %d, %d entries; CQE for QP %#x lost, CQ in error",
		c.cqn, c.pi, c.ci, c.nent, qpn)
	d.asyncEvent(t, mlx5.EventCQErr, c.cqn)
	d.eng.At(t, cqErrorEvent{d: d, c: c})
}

type cqErrorEvent struct {
	d *Device
	c *cq
}

func (e cqErrorEvent) Fire(now sim.Time) {
	for _, q := range e.d.sortedQPs() {
		if !q.dead && (q.scq == e.c || q.rcq == e.c) && q.state != mlx5.QPStateRST {
			// The QP can no longer report its completions: a local work
			// queue catastrophic error (IB spec), QP_FATAL — an
			// assumption, see docs/events.md.
			fatal := q.state != mlx5.QPStateERR
			q.toError(now)
			if fatal {
				e.d.asyncEvent(now, mlx5.EventQPFatal, q.qpn)
			}
		}
	}
}

// complete writes the requester CQE for w if it is signalled.
func (d *Device) complete(t sim.Time, q *qp, w *swqe) {
	w.state = wqeDone
	if !w.signaled {
		d.inc(CtrWQEUnsignaled)
		return
	}
	f := mlx5.CQEFields{Opcode: mlx5.CQEReq, WQEOpcode: uint8(w.op), QPN: q.qpn, WQECounter: w.idx}
	switch w.op {
	case mlx5.OpRDMARead:
		f.ByteCnt = uint32(w.length)
	case mlx5.OpAtomicCS, mlx5.OpAtomicFA:
		f.ByteCnt = 8
	}
	d.writeCQE(t, q.scq, &f, w.flow, noPSN)
}

// stampUIdx puts the QP's user index into srqn_uidx (CQE version 1:
// libmlx5 finds the QP of every CQE, requester or responder, by it, and
// a QP on an SRQ through it finds the SRQ; mlx5_parse_cqe,
// get_req_context, get_resp_ctx_v1). A QP created without one (the Go
// provider, which finds QPs by QPN) leaves the field 0 as before.
func (d *Device) stampUIdx(f *mlx5.CQEFields) {
	if q := d.qp(f.QPN); q != nil && q.uidx != 0 {
		f.SRQN = q.uidx
	}
}
