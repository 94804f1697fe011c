package device

import (
	"encoding/binary"

	"github.com/softnic/softnic/fault"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/sim"
)

// CQ notification (mlx5.md §6.7): the arm doorbell, one completion event
// per arm, solicited-only arms, moderation; and the CQ commands that
// change a CQ under way (MODIFY_CQ, RESIZE_CQ).
//
// Rules, as far as the sources state them (the PRM body is not among
// them):
//   - An arm carries the consumer index; the CQ fires for CQEs at or
//     beyond it. A next-completion arm fires on any CQE; a solicited-only
//     arm on a CQE with the SE bit or an error CQE (IB spec; the responder
//     sets SE in op_own when the last packet of a SEND / WRITE with
//     immediate carried it).
//   - An arm that finds such CQEs already written fires at once (the CQC's
//     last_notified / last_solicit indexes against the arm's CI).
//   - One arm, one event: the CQ is FIRED (disarmed) until the next arm.
//     CQEs written while disarmed raise nothing.
//   - Arming for solicited-only while a next-completion arm is pending
//     keeps the next-completion arm (verbs: the broader request prevails).
//   - The arm's sequence number should equal the completion events raised
//     so far mod 4 (libmlx5 counts arm_sn per event read): a mismatch is
//     counted and warned, the arm still taken (assumption; what firmware
//     does with a stale sn is unconfirmed).

// CQArm is called by BAR0 for a CQ arm doorbell at UAR+0x20.
func (d *Device) CQArm(t sim.Time, uar uint32, db [8]byte) {
	if d.fx.fatal {
		d.inc(CtrDeadUARStore)
		return
	}
	a := mlx5.ParseCQArm(db[:])
	c := d.cqs[a.CQN]
	if c == nil {
		d.warn(t, CtrCQArmUnknownCQ, "CQ arm on UAR %d for CQ %#x, which does not exist", uar, a.CQN)
		return
	}
	d.inc(CtrCQArms)
	if a.SolicitedOnly {
		d.inc(CtrCQArmsSolicited)
	}
	d.rec.Stage(d.node, "device", "cq_arm", t, t.Add(d.cyc(d.spec.Core.DoorbellCycles)), 8, 1, 0, eventFlow(flowComp, c.cqn, c.events+1))
	t = t.Add(d.cyc(d.spec.Core.DoorbellCycles))
	if a.SN != uint8(c.events&3) {
		d.warn(t, CtrCQArmSN, "CQ %d armed with sn %d after %d completion events (want sn %d)", c.cqn, a.SN, c.events, c.events&3)
	}
	// Checked mode: libmlx5 writes the arm word to DBR[1] before the
	// doorbell. The device reads it back by DMA and compares (the arm
	// itself takes the doorbell's value, without waiting for the read).
	if d.chk != nil {
		d.chk.arm(t, c, a)
	}
	var b [4]byte
	d.dma.SetTarget(fault.KindDBR)
	if _, _, err := d.dma.Read(t, c.dbr+4*mlx5.DBRArm, b[:]); err == nil {
		if w := binary.BigEndian.Uint32(b[:]); w != a.ArmWord() {
			d.warn(t, CtrCQArmDBRMismatch, "CQ %d arm doorbell %#08x but doorbell record word 1 holds %#08x", c.cqn, a.ArmWord(), w)
		}
	} else {
		d.warn(t, CtrCQDBRReadError, "CQ %d doorbell record (arm word): %v", c.cqn, err)
		if d.dmaFatal(t, err) {
			return
		}
	}
	if c.err {
		d.warn(t, CtrCQArmInError, "CQ %d armed while in error: no completion event will come", c.cqn)
		return
	}
	back := (c.pi - a.CI) & 0xffffff
	ci := c.pi - back
	if back > c.nent {
		d.warn(t, CtrCQArmBadCI, "CQ %d armed with CI %#x, not within the %d entries behind the producer %d", c.cqn, a.CI, c.nent, c.pi)
		ci = c.pi
	}
	sol := a.SolicitedOnly
	if c.armed && !c.armSol {
		sol = false
	}
	c.armed, c.armSol, c.armSN, c.armCI = true, sol, a.SN, ci
	c.modPending = 0
	var n uint32
	switch {
	case !sol:
		n = c.pi - ci
	case c.hasSol && int32(c.lastSol-ci) >= 0 && int32(c.lastSol-c.pi) < 0:
		n = 1
	}
	if n == 0 {
		// Nothing pending for this arm: a cq_period timer the previous arm
		// started for CQEs since polled must not cut the next one's
		// period short. With CQEs still pending it runs on, so they are
		// notified within the period of the first.
		c.modTimer.Stop()
	}
	if n > 0 {
		d.inc(CtrCQArmImmediate)
		d.cqNotify(t, c, n)
	}
}

// cqNotify counts n qualifying CQEs for an armed CQ and raises its event
// when moderation allows: at once without moderation, once cq_max_count
// are pending, or when the cq_period timer started by the first one
// expires.
func (d *Device) cqNotify(t sim.Time, c *cq, n uint32) {
	c.modPending += n
	switch {
	case c.modCount == 0 && c.modPeriod == 0,
		c.modCount > 0 && c.modPending >= uint32(c.modCount):
		d.cqFire(t, c)
	case c.modPeriod > 0 && !c.modTimer.Armed():
		c.modStart = t
		c.modTimer.Reset(t.Add(sim.Duration(c.modPeriod) * sim.Microsecond))
	}
}

// cqFire disarms c and writes its completion EQE.
func (d *Device) cqFire(t sim.Time, c *cq) {
	f := d.cqDisarm(c)
	d.writeEQE(t, &d.ev.comp, &f, 0, eventFlow(flowComp, c.cqn, c.events), c.landBy)
}

// cqDisarm disarms c for the completion event it is about to raise,
// counts the event and returns its EQE.
func (d *Device) cqDisarm(c *cq) mlx5.EQEFields {
	c.armed = false
	c.modPending = 0
	c.modTimer.Stop()
	c.events++
	d.inc(CtrCQEvents)
	return mlx5.EQEFields{Type: mlx5.EQEComp, CQN: c.cqn}
}

// cqModTimer is a CQ's cq_period timer.
type cqModTimer struct {
	d *Device
	c *cq
}

func (m *cqModTimer) Fire(now sim.Time) {
	d, c := m.d, m.c
	if d.cqs[c.cqn] != c || !c.armed || c.modPending == 0 {
		return
	}
	d.inc(CtrCQModerationTimer)
	d.cqFire(now, c)
}

// ModifyCQ sets a CQ's moderation (MODIFY_CQ, IB_CQ_MODERATE).
func (d *Device) ModifyCQ(m mlx5.ModifyCQCmd) error {
	if err := d.fatalCmd("MODIFY_CQ"); err != nil {
		return err
	}
	c := d.cqs[m.CQN]
	switch {
	case c == nil:
		return cmdErr("MODIFY_CQ", mlx5.StatusBadResource, "CQ %d does not exist", m.CQN)
	case m.Period > mlx5.MaxCQPeriod:
		return cmdErr("MODIFY_CQ", mlx5.StatusBadParam, "cq_period %d µs (at most %d)", m.Period, mlx5.MaxCQPeriod)
	}
	c.modCount, c.modPeriod = m.Count, m.Period
	if m.Period > 0 && c.modTimer == nil {
		c.modTimer = d.eng.NewTimer(&cqModTimer{d: d, c: c})
	}
	if m.Period == 0 {
		c.modTimer.Stop()
	} else if c.modTimer.Armed() {
		// A running cq_period timer takes the new period, still counted
		// from the first pending CQE (an assumption: the PRM's handling
		// of MODIFY_CQ under a running timer is not in the sources); it
		// kept the old deadline, so a period cut from 4 ms to 20 µs still
		// held the event for 4 ms.
		now := d.eng.Now()
		c.modTimer.Reset(max(now, c.modStart.Add(sim.Duration(m.Period)*sim.Microsecond)))
	}
	if c.armed && c.modPending > 0 {
		d.cqNotify(d.eng.Now(), c, 0)
	}
	return nil
}

// ResizeCQ moves a CQ to a new ring (RESIZE_CQ). The CQEs in flight land
// first; then the device writes a RESIZE_CQ CQE at its producer index in
// the old ring and continues in the new ring at the next index, with the
// new ring's owner bits. The provider copies what it has not polled yet
// from the old ring to the new one, at the same indexes shifted by the
// resize CQE (libmlx5 mlx5_cq_resize_copy_cqes), so the new ring must hold
// every CQE not yet consumed. The command completes when the resize CQE
// is in host memory.
func (d *Device) ResizeCQ(r mlx5.ResizeCQCmd) error {
	if err := d.fatalCmd("RESIZE_CQ"); err != nil {
		return err
	}
	c := d.cqs[r.CQN]
	switch {
	case c == nil:
		return cmdErr("RESIZE_CQ", mlx5.StatusBadResource, "CQ %d does not exist", r.CQN)
	case c.err:
		return cmdErr("RESIZE_CQ", mlx5.StatusBadResState, "CQ %d is in error", r.CQN)
	case r.Entries <= 0 || r.Entries&(r.Entries-1) != 0 || r.Entries > d.spec.Caps.CQRing():
		return cmdErr("RESIZE_CQ", mlx5.StatusBadParam, "%d entries (need a power of two <= %d)", r.Entries, d.spec.Caps.CQRing())
	case r.CQESize != mlx5.CQE64Size:
		return cmdErr("RESIZE_CQ", mlx5.StatusBadParam, "CQE size %d (only 64 is modelled)", r.CQESize)
	case !d.mem.Contains(r.BufAddr, r.Entries*mlx5.CQE64Size) || r.BufAddr%64 != 0:
		return cmdErr("RESIZE_CQ", mlx5.StatusBadParam, "buffer %#x not in host memory or not 64-byte aligned", r.BufAddr)
	}
	now := d.eng.Now()
	d.landAll(c)
	var b [4]byte
	d.dbrTarget()
	if _, _, err := d.dma.Read(now, c.dbr, b[:]); err == nil {
		ci := binary.BigEndian.Uint32(b[:]) & 0xffffff
		if back := (c.pi - ci) & 0xffffff; back <= c.nent {
			c.ci = c.pi - back
		}
	} else {
		d.warn(now, CtrCQDBRReadError, "CQ %d doorbell record (RESIZE_CQ): %v", c.cqn, err)
		if d.dmaFatal(now, err) {
			return d.fatalCmd("RESIZE_CQ")
		}
	}
	switch used := c.pi - c.ci; {
	case used >= c.nent:
		return cmdErr("RESIZE_CQ", mlx5.StatusBadSize, "CQ %d is full (%d CQEs not consumed): no room for the resize CQE", c.cqn, used)
	case used+1 > uint32(r.Entries):
		return cmdErr("RESIZE_CQ", mlx5.StatusBadSize, "CQ %d has %d CQEs not consumed; %d entries cannot hold them", c.cqn, used, r.Entries)
	}
	f := mlx5.CQEFields{Opcode: mlx5.CQEResizeCQ, Owner: mlx5.CQEOwnerBit(c.pi, c.nent), Timestamp: uint64(now / 1000)}
	var cqe [mlx5.CQE64Size]byte
	mlx5.CQE64(cqe[:]).Encode(&f)
	addr := c.buf + uint64(c.pi&(c.nent-1))*mlx5.CQE64Size
	done, st, err := d.dma.TimeWrite(now, addr, mlx5.CQE64Size)
	if err == nil {
		err = d.mem.Write(addr, cqe[:])
	}
	if err != nil {
		return cmdErr("RESIZE_CQ", mlx5.StatusInternalErr, "CQ %d: resize CQE at %#x: %v", c.cqn, addr, err)
	}
	d.rec.Stage(d.node, "device", "cqe_write", now, done, mlx5.CQE64Size, st.TLPs(), 0, 0)
	d.inc(CtrCQResizes)
	c.pi++
	c.buf, c.nent = r.BufAddr, uint32(r.Entries)
	return nil
}
