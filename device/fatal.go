package device

import (
	"encoding/binary"
	"maps"
	"slices"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/sim"
)

// Device fatal (faults.md §2.9). Firmware dies: the health buffer in BAR0
// carries a syndrome with the RFR bit and the health counter stops; the
// device does nothing more (no DMA, no frames, no CQEs, no EQEs), UAR
// stores vanish (uverbs maps the pages to a dummy page) and every command
// fails. The driver notices by polling (FaultSpec.HealthPoll later): it
// raises IBV_EVENT_DEVICE_FATAL and, unless FaultSpec.FatalNoUserFlush,
// completes every outstanding WQE of a QP's own queues with WR_FLUSH_ERR
// and vendor_err 5 in software (mlx5_ib_poll_sw_comp); an SRQ's WQEs are
// never completed (swFlush).

// EnterFatal is a firmware fatal error with health syndrome synd at t.
func (d *Device) EnterFatal(t sim.Time, synd uint8, why string) {
	if d.fx.fatal {
		return
	}
	d.fx.fatal, d.fx.synd, d.fx.fatalAt = true, synd, t
	d.bar.SetFatal(t, synd)
	d.dma.Dead()
	d.warn(t, CtrDeviceFatal, "device fatal: %s (health syndrome %#x); the driver will notice within %v", why, synd, d.healthPoll())
	for _, q := range d.sortedQPs() {
		q.req.stopTimers()
		q.txGen++ // frames built but not sent never leave
		q.respKeep = 0
		// The receive WQE a message in progress had taken is kept (as
		// held) for the driver's software flush: abort forgets the
		// message, and the WQE, consumed from the ring, never completed.
		// (The flush completes it only if it came from the QP's own RQ;
		// swFlush.)
		q.resp.recv.held = q.resp.recv.held || q.resp.recv.active
		// Nor is anything more built: READ responses still to be built
		// and the answers queued behind them are forgotten (the pump
		// could otherwise be woken by the transmit buffer and build them).
		q.resp.abort()
		// Nor read: the receive WQE read-ahead stops (its poll timer
		// would re-read the doorbell record of a dead device).
		q.rq.quiesce()
		// Nor does a parked datagram go on (its timer would fire into a
		// dead device): dropped, as a frame arriving now would be.
		q.resp.unpark(t, CtrDeadRxDrop, true, "")
	}
	// The QPs waiting for room in the transmit buffer are not woken: woken,
	// a requester built its next packet, its payload read failed on the
	// dead link and the WQE completed in error, a CQE the dead device
	// does not write, so the driver's software flush no longer found it
	// and the work request never completed.
	d.tx.drop()
	for _, c := range d.cqs {
		c.modTimer.Stop()
	}
	d.eng.At(t.Add(d.healthPoll()), fatalDetect{d})
}

// LosePCIeLink is a surprise link loss at t: BAR0 reads all ones, the
// health poll sees fw_ver 0xffffffff (PCI_COMM_ERR) and the driver enters
// the error state as for a firmware fatal error.
func (d *Device) LosePCIeLink(t sim.Time) {
	d.fx.linkLost = true
	d.bar.SetLinkLost()
	d.inc(CtrPCILinkLost)
	d.EnterFatal(t, 0, "PCIe link lost (BAR0 reads all ones)")
}

// Fatal reports whether the device is in the error state, and its health
// syndrome.
func (d *Device) Fatal() (bool, uint8) { return d.fx.fatal, d.fx.synd }

func (d *Device) healthPoll() sim.Duration {
	if p := d.spec.Faults.HealthPoll; p > 0 {
		return p
	}
	return DefaultHealthPoll
}

type fatalDetect struct{ d *Device }

// Fire is the driver's health poll finding the device dead.
func (e fatalDetect) Fire(now sim.Time) {
	d := e.d
	d.fx.detected = true
	d.inc(CtrDeviceFatalSeen)
	d.rec.Warnf(d.node, now, "kernel", CtrDeviceFatalSeen.String(), "health poll: fatal error detected (syndrome %#x): IB_EVENT_DEVICE_FATAL", d.fx.synd)
	d.kernelEvent(now, mlx5.EventDeviceFatal, 0)
	var flushed []*cq // armed CQs the flush wrote into, in QP order
	for _, q := range d.sortedQPs() {
		if q.dead {
			continue
		}
		if q.state != mlx5.QPStateRST {
			q.setState(now, mlx5.QPStateERR)
		}
		if d.spec.Faults.FatalNoUserFlush {
			continue
		}
		cqs := [2]*cq{q.scq, q.rcq}
		var before [2]uint32
		for i, c := range cqs {
			if c != nil {
				before[i] = c.pi
			}
		}
		d.swFlush(now, q)
		for i, c := range cqs {
			if c != nil && c.armed && c.pi != before[i] && !slices.Contains(flushed, c) {
				flushed = append(flushed, c)
			}
		}
	}
	if !d.spec.Faults.FatalNoUserFlush {
		d.srqsLeft(now)
	}
	// mlx5_ib_handle_internal_error then calls the completion handler of
	// every armed CQ that has flushed work, so that a waiter learns of the
	// flush CQEs (no EQE: the device is dead). Flushes are error CQEs, so a
	// solicited-only arm fires too. Assumption: mlx5_ib does this for the
	// QPs it flushes itself (kernel QPs); the flush of user QPs is this
	// model's unconfirmed switch (FatalNoUserFlush), and its CQs are
	// notified alike so that the flush it writes can be waited for.
	for _, c := range flushed {
		f := d.cqDisarm(c)
		d.dispatch(now, now, &f, eventFlow(flowComp, c.cqn, c.events))
	}
}

// srqsLeft counts and reports, SRQ by SRQ, the posted WQEs no QP had
// taken when the device died: the software flush leaves them outstanding
// (swFlush says why). The doorbell record is read from host memory, as
// swFlush reads a send queue's.
func (d *Device) srqsLeft(t sim.Time) {
	for _, n := range slices.Sorted(maps.Keys(d.srqs)) {
		s := d.srqs[n]
		var b [4]byte
		if d.mem.Read(s.dbr, b[:]) != nil {
			continue
		}
		posted, ok := extendProducer(uint16(binary.BigEndian.Uint32(b[:])), s.taken, s.cnt)
		if !ok || posted == s.taken {
			continue
		}
		d.ctr.Add(CtrFatalSRQWQELeft, uint64(posted-s.taken))
		d.rec.Warnf(d.node, t, "kernel", CtrFatalSRQWQELeft.String(), "SRQ %#x: %d posted receive WQEs are never completed (the kernel flushes no SRQ)", s.srqn, posted-s.taken)
	}
}

// kernelEvent queues an async event the kernel raises itself (no EQE).
func (d *Device) kernelEvent(t sim.Time, typ mlx5.EventType, num uint32) {
	d.inc(asyncEventNames[typ])
	if d.ev.asyncQ.len() >= d.ev.spec.QueueDepth {
		d.warn(t, CtrAsyncEventsDropped, "async queue holds %d events; %v dropped", d.ev.asyncQ.len(), typ)
		return
	}
	d.ev.asyncQ.push(mlx5.AsyncEvent{Type: typ, Num: num})
	d.inc(CtrAsyncEvents)
	d.rec.Stage(d.node, "kernel", "event", t, t, 0, 0, 0, 0)
	if d.ev.notify != nil {
		d.ev.notify(0)
	}
}

// swFlush is the kernel's software completion of q's outstanding work:
// the send WQEs the device held, those posted but never fetched (the
// kernel knows them from its own ring state; here: the doorbell record),
// and the posted receives. Each gets WR_FLUSH_ERR, vendor_err 5, written
// straight into the CQ ring (no DMA: the device is dead).
func (d *Device) swFlush(t sim.Time, q *qp) {
	r := &q.req
	for w := r.front(); w != nil; w = r.front() {
		d.inc(CtrReqCQEFlushError)
		f := mlx5.CQEFields{Opcode: mlx5.CQEReqErr, WQEOpcode: uint8(w.op), QPN: q.qpn, WQECounter: w.idx, Syndrome: mlx5.SyndWRFlush, VendorErrSynd: VendorSWFlush}
		d.swCQE(t, q.scq, &f)
		r.pop()
	}
	r.cur, r.curPkt, r.rdOut = 0, 0, 0
	// Posted but never fetched: walk the ring from the device's next WQEBB
	// to the doorbell record's counter.
	sq := r.sq
	if !sq.Closed() {
		var b [4]byte
		if d.mem.Read(q.dbr+4*mlx5.DBRSend, b[:]) == nil {
			pi := uint16(binary.BigEndian.Uint32(b[:]))
			for idx := sq.Next(); idx != pi && uint16(pi-idx) <= uint16(sq.Size); {
				var c [16]byte
				slot := uint64(int(idx) & (sq.Size - 1))
				if d.mem.Read(sq.Base+slot*mlx5.WQEBBSize, c[:]) != nil {
					break
				}
				ctrl := mlx5.CtrlSeg(c[:])
				bbs := max(mlx5.WQEBBs(int(ctrl.DS())), 1)
				d.inc(CtrReqCQEFlushError) // signalled or not (faults.md §2.11)
				f := mlx5.CQEFields{Opcode: mlx5.CQEReqErr, WQEOpcode: uint8(ctrl.Opcode()), QPN: q.qpn, WQECounter: idx, Syndrome: mlx5.SyndWRFlush, VendorErrSynd: VendorSWFlush}
				d.swCQE(t, q.scq, &f)
				idx += uint16(bbs)
			}
			sq.Reset(pi)
		}
	}
	// First the receive a message in progress had taken (EnterFatal) from
	// the QP's own RQ: the kernel walks the RQ from its tail, which only a
	// polled CQE moves past a WQE, so that one is flushed with the rest.
	//
	// Nothing of an SRQ is flushed, neither the WQE a message in progress
	// had taken from it nor those never taken (they stay outstanding on the
	// SRQ; the application learns of the loss from DEVICE_FATAL): the
	// kernel's flush has no SRQ case. mlx5_ib_handle_internal_error
	// (drivers/infiniband/hw/mlx5/main.c) looks at a QP's RQ only "if
	// (!mqp->ibqp.srq)" ("no handling is needed for SRQ"), and
	// mlx5_ib_poll_sw_comp's sw_recv_comp (cq.c) completes qp->rq's
	// head - tail, which a QP on an SRQ does not have (its own RQ has no
	// WQEs). libmlx5 has no software flush at all: on DEVICE_FATAL
	// mlx5_async_event (providers/mlx5/verbs.c) only sets
	// MLX5_CTX_FLAGS_FATAL_STATE, which only the steering code reads; so
	// flushing user QPs here is itself the model's unconfirmed switch
	// (FatalNoUserFlush).
	if r := &q.resp.recv; r.held {
		r.held = false
		if q.srq != nil {
			d.inc(CtrFatalSRQWQELeft)
			d.rec.Warnf(d.node, t, "kernel", CtrFatalSRQWQELeft.String(), "QP %#x: the SRQ %#x receive WQE %d its message in progress took is never completed (the kernel flushes no SRQ)", q.qpn, q.srq.srqn, r.wqe.index)
		} else {
			d.inc(CtrRespCQEFlushError)
			f := mlx5.CQEFields{Opcode: mlx5.CQERespErr, QPN: q.qpn, WQECounter: r.wqe.index, Syndrome: mlx5.SyndWRFlush, VendorErrSynd: VendorSWFlush}
			d.swCQE(t, q.rcq, &f)
		}
	}
	// Then the rest of its own RQ.
	if rq, ok := q.rq.(*rqRing); ok && rq.cnt > 0 {
		var b [4]byte
		if d.mem.Read(rq.dbr, b[:]) == nil {
			if posted, ok := extendProducer(uint16(binary.BigEndian.Uint32(b[:])), rq.tail, rq.cnt); ok {
				rq.head = posted
			}
		}
		for {
			idx, ok := rq.flushOne()
			if !ok {
				break
			}
			d.inc(CtrRespCQEFlushError)
			f := mlx5.CQEFields{Opcode: mlx5.CQERespErr, QPN: q.qpn, WQECounter: idx, Syndrome: mlx5.SyndWRFlush, VendorErrSynd: VendorSWFlush}
			d.swCQE(t, q.rcq, &f)
		}
	}
}

// swCQE writes a software CQE into c's ring at its producer index.
func (d *Device) swCQE(t sim.Time, c *cq, f *mlx5.CQEFields) {
	if c == nil {
		return
	}
	if c.pi-c.ci >= c.nent {
		var b [4]byte
		if d.mem.Read(c.dbr, b[:]) == nil {
			ci := binary.BigEndian.Uint32(b[:]) & 0xffffff
			c.ci = c.pi - (c.pi-ci)&0xffffff
		}
		if c.pi-c.ci >= c.nent {
			d.inc(CtrCQEDroppedOverrun)
			return
		}
	}
	d.stampUIdx(f)
	f.Owner = mlx5.CQEOwnerBit(c.pi, c.nent)
	f.Timestamp = uint64(t / 1000)
	var buf [mlx5.CQE64Size]byte
	mlx5.CQE64(buf[:]).Encode(f)
	addr := c.buf + uint64(c.pi&(c.nent-1))*mlx5.CQE64Size
	d.landAll(c)
	if err := d.mem.Write(addr, buf[:]); err != nil {
		d.warn(t, CtrCQEWriteError, "CQ %d software CQE at %#x: %v", c.cqn, addr, err)
		return
	}
	c.pi++
	d.landed++ // visible now: a poller that waits for CQEsLanded to move must see it
	d.inc(CtrCQEs)
}

// fatalCmd fails a command in the error state (mlx5_cmd_flush). Teardown
// commands (destroy, dealloc, dereg) succeed so that cleanup can finish:
// an inference from mlx5_core, which answers them in software when the
// device is in internal error.
func (d *Device) fatalCmd(cmd string) error {
	if !d.fx.fatal {
		return nil
	}
	d.inc(CtrCmdFailedFatal)
	return cmdErr(cmd, mlx5.StatusInternalErr, "device in the internal error state (health syndrome %#x)", d.fx.synd)
}
