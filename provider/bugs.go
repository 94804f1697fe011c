package provider

import (
	"encoding/binary"

	"github.com/softnic/softnic/mlx5"
)

// Bugs is a set of deliberate mlx5 host-protocol mistakes, for testing a
// device's checked mode (device.EnableCheck) and nothing else: with a bug
// set the provider breaks the rule it names (faults.md §3), on purpose.
// The zero value is the correct provider; the post path costs one test of
// a zero field when no bug is set.
type Bugs uint32

// The bugs, each named after the rule it breaks.
const (
	BugRecordAfterDoorbell Bugs = 1 << iota // R1: ring the doorbell, then update the record (no barrier order)
	BugWrongRecord                          // R2: the record says one WQEBB more than was written
	BugDoorbellFirstWQE                     // R3: a batch's doorbell carries the first WQE's ctrl, not the last's
	BugWrongBfreg                           // R3: ring on the neighbouring bfreg
	BugBadIndex                             // R4: wqe_index in the ctrl segment off by one
	BugInlineOverLimit                      // R5: inline data past max_inline_data is posted, not refused
	BugSQOverrun                            // R6: no mlx5_wq_overflow check: the ring is overwritten
	BugNeverSignal                          // R7: no WQE requests a CQE (and, like raw DevX drivers, no overflow check)
	BugBadFence                             // R8: a reserved fm_ce_se bit set
	BugSetCIPast                            // R9: set_ci written past what was consumed
	BugArmBadSN                             // R10: arm with sn one ahead
	BugArmNoRecord                          // R10: arm doorbell without writing dbrec[1]
	BugBFReuseHalf                          // R11: the BF half is not alternated
	BugBFNoPad                              // R11: BlueFlame copy not padded to whole 64-byte lines
	BugBFAnyBfreg                           // R11: BlueFlame even on a bfreg without a BF buffer (bfreg 0)
	BugBFTooLong                            // R11: BlueFlame for a WQE longer than the BF buffer
	Bug32BitDoorbell                        // R15: the doorbell as two 32-bit stores
	BugRecvNoTerminator                     // R12: a short receive SGE list without the terminator entry
)

// qpBugs is a QP's deliberate mistakes and what committing them needs.
type qpBugs struct {
	set   Bugs
	first int // ring offset of the post list's first WQE (BugDoorbellFirstWQE)
}

// SetBugs makes the QP commit the given protocol mistakes (tests only).
func (qp *QP) SetBugs(b Bugs) {
	if qp == nil || qp.ctx == nil {
		return
	}
	qp.bug.set = b
	qp.refreshFast()
}

// SetBugs makes the CQ commit the given protocol mistakes (tests only).
func (cq *CQ) SetBugs(b Bugs) {
	if cq != nil {
		cq.bugs = b
	}
}

// bugWQE breaks a just-built control segment, WQE nreq of its post list
// at ring offset off.
func (qp *QP) bugWQE(ctrl mlx5.CtrlSeg, nreq, off int) {
	if nreq == 0 {
		qp.bug.first = off
	}
	if qp.bug.set&BugNeverSignal != 0 {
		ctrl[11] &^= mlx5.CEMask
	}
	if qp.bug.set&BugBadFence != 0 {
		ctrl[11] |= 0x01
	}
	if qp.bug.set&BugBadIndex != 0 {
		binary.BigEndian.PutUint16(ctrl[1:3], binary.BigEndian.Uint16(ctrl[1:3])+1)
	}
}

// ringSendBuggy is ringSend with the QP's bugs.
func (qp *QP) ringSendBuggy(nreq, lastOff, lastDS int) {
	firstOff := qp.bug.first
	sq := &qp.sq
	sq.head += uint32(nreq)
	rec := sq.curPost & 0xffff
	if qp.bug.set&BugWrongRecord != 0 {
		rec++
	}
	if qp.bug.set&BugRecordAfterDoorbell == 0 {
		qp.dbr.SetWord(mlx5.DBRSend, rec)
	}
	mmio := qp.ctx.mmio
	mmio.Flush()
	reg := qp.bfReg + *qp.bfOff
	if qp.bug.set&BugWrongBfreg != 0 {
		reg = qp.bfReg ^ 2*max(qp.bfBufSize, 0x80) // the neighbouring bfreg
	}
	bufSize := qp.bfBufSize
	if qp.bug.set&(BugBFAnyBfreg|BugBFTooLong) != 0 {
		bufSize = mlx5.MaxDS * mlx5.DSSize
	}
	if qp.bfOn && nreq == 1 && bufSize > 0 && lastDS > 1 && uint64(lastDS*mlx5.DSSize) <= bufSize {
		n := (lastDS*mlx5.DSSize + 63) &^ 63
		if qp.bug.set&BugBFNoPad != 0 {
			n = (lastDS*mlx5.DSSize + 7) &^ 7
		}
		src := lastOff
		for i := 0; i < n; i += 8 {
			if src == len(sq.buf) {
				src = 0
			}
			mmio.Store64(reg+uint64(i), binary.LittleEndian.Uint64(sq.buf[src:src+8]))
			src += 8
		}
	} else {
		off := lastOff
		if qp.bug.set&BugDoorbellFirstWQE != 0 {
			off = firstOff
		}
		if qp.bug.set&Bug32BitDoorbell != 0 {
			mmio.Store32(reg, binary.LittleEndian.Uint32(sq.buf[off:off+4]))
			mmio.Flush()
			mmio.Store32(reg+4, binary.LittleEndian.Uint32(sq.buf[off+4:off+8]))
		} else {
			mmio.Store64(reg, binary.LittleEndian.Uint64(sq.buf[off:off+8]))
		}
	}
	mmio.Flush()
	if qp.bug.set&BugRecordAfterDoorbell != 0 {
		// Late: an uncached read (any register) first, which lets the
		// doorbell reach the device before the record changes.
		_ = mmio.Load32(0)
		qp.dbr.SetWord(mlx5.DBRSend, rec)
	}
	if qp.bug.set&BugBFReuseHalf == 0 {
		*qp.bfOff ^= qp.bfBufSize
	}
}

// bugCI is what a buggy CQ writes as set_ci.
func (cq *CQ) bugCI(ci uint32) uint32 {
	if cq.bugs&BugSetCIPast != 0 {
		return ci + 5
	}
	return ci
}
