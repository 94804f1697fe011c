package device

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/trace"
	"github.com/softnic/softnic/wqefetch"
)

// Checked mode: the device reports each violation of the mlx5 host
// protocol (faults.md §3, rules R1–R15) it can observe — MMIO writes as
// they arrive, host memory it reads (the checker peeks without timing:
// an observer, not a DMA), doorbell-record values — by rule and name, with
// what it saw and the rule's source. A report is a trace warning
// (component "check"), a counter (check_R<n>_<name>) and a *Violation a
// test can assert on (errors.As, errors.Is ErrProtocol). It never changes
// what the device does.

// ErrProtocol is wrapped by every *Violation.
var ErrProtocol = errors.New("driver protocol violation")

// Violation is one observed violation of a host-protocol rule.
type Violation struct {
	Rule     string // "R1" .. "R15"
	Name     string // short name, e.g. "doorbell-before-record"
	Node     int
	QPN      uint32 // 0 when not about a QP
	At       sim.Time
	Observed string // what the device saw
	Source   string // where the rule comes from
}

func (v *Violation) Error() string {
	q := ""
	if v.QPN != 0 {
		q = fmt.Sprintf(" QP %#x", v.QPN)
	}
	return fmt.Sprintf("%s %s: node %d%s at %v: %s (rule source: %s)", v.Rule, v.Name, v.Node, q, v.At, v.Observed, v.Source)
}

// Unwrap makes errors.Is(v, ErrProtocol) true.
func (v *Violation) Unwrap() error { return ErrProtocol }

// Counter is the violation's counter name, check_R<n>_<name>.
func (v *Violation) Counter() string { return "check_" + v.Rule + "_" + v.Name }

// checkCounters are the counters of the rule table, by violation name.
var checkCounters = func() map[string]trace.Counter {
	m := map[string]trace.Counter{}
	for _, r := range CheckRules {
		m[r.Name] = trace.NewCounter("check_" + r.Rule + "_" + r.Name)
	}
	return m
}()

// CheckRule is one row of the rule table.
type CheckRule struct {
	Rule, Name, Message, Source string
}

// CheckRules is the rule table: each rule the checker enforces, the
// message a violation carries, and the rule's source (faults.md §3).
var CheckRules = []CheckRule{
	{"R1", "doorbell-before-record", "doorbell rung before the doorbell record was updated", "libmlx5 qp.c post_send_db (udma_to_device_barrier, record, mmio_wc_start); DPDK mlx5_doorbell_ring; kernel wc.c"},
	{"R2", "record-mismatch", "doorbell record disagrees with the doorbell's counter", "libmlx5 qp.c post_send_db: dbrec[MLX5_SND_DBR] = cur_post & 0xffff"},
	{"R2", "record-not-zero", "doorbell record not zero at creation", "libmlx5 qp.c/cq.c; ucx#5034"},
	{"R3", "doorbell-wrong-bfreg", "doorbell on a bfreg the QP is not bound to", "libmlx5 qp.c post_send_db (bf->reg of the QP's bfreg)"},
	{"R3", "doorbell-not-last-ctrl", "doorbell payload is not the first 8 bytes of the last WQE's control segment", "libmlx5 qp.c post_send_db; DPDK mlx5_tx.h"},
	{"R3", "record-without-doorbell", "the record announces WQEs no doorbell rang for (the doorbell named an earlier WQE, or was lost)", "libmlx5 qp.c post_send_db; ROCm/mori#428"},
	{"R4", "bad-ctrl-segment", "control segment invalid (wqe_index, opcode, DS, QPN)", "mlx5dv.h mlx5dv_set_ctrl_seg; libmlx5 qp.c; DPDK MLX5_DSEG_MAX"},
	{"R5", "inline-over-limit", "inline data longer than the QP's max_inline_data", "libmlx5 qp.c set_data_inl_seg (ENOMEM)"},
	{"R6", "sq-overrun", "SQ overrun: more WQEBBs posted than the SQ holds past the last CQE", "libmlx5 qp.c mlx5_wq_overflow, cq.c (tail advances on CQEs)"},
	{"R7", "no-signal-in-window", "no signalled WQE within an SQ depth", "libmlx5 qp.c/cq.c; DPDK MLX5_TX_COMP_THRESH; spdk#3195"},
	{"R8", "bad-fm-ce-se", "fm_ce_se has an undefined fence mode or reserved bits", "mlx5dv.h MLX5_WQE_CTRL_* (fm bits 7:5, ce 3:2, se 1)"},
	{"R9", "set-ci-past-producer", "set_ci is past the CQ producer", "libmlx5 cq.c update_cons_index; DPDK mlx5_tx.h cq_pi - cq_ci <= cqe_s"},
	{"R9", "set-ci-backwards", "set_ci moved backwards", "libmlx5 cq.c update_cons_index (monotonic mod 2^24)"},
	{"R9", "cq-overrun", "more CQE-producing work outstanding than free CQ entries", "kernel wc.c (sq->cc after mlx5_cqwq_update_db_record); LNX-doc cq_overrun"},
	{"R10", "arm-bad-sn", "CQ armed with a sequence number that is not the completion events read mod 4", "libmlx5 cq.c mlx5_arm_cq, mlx5_cq_event"},
	{"R10", "arm-bad-ci", "CQ armed with a consumer index other than set_ci [unconfirmed PRM semantics]", "libmlx5 cq.c mlx5_arm_cq"},
	{"R10", "arm-before-record", "CQ arm doorbell without dbrec[1] written first", "libmlx5 cq.c mlx5_arm_cq; rdma-core#89"},
	{"R11", "bf-not-whole-lines", "BlueFlame write not in whole 64-byte lines", "libmlx5 qp.c mlx5_bf_copy (mmio_memcpy_x64); libvma#487"},
	{"R11", "bf-too-long", "BlueFlame WQE longer than the BF buffer", "libmlx5 qp.c post_send_db (ds*16 <= bf->buf_size)"},
	{"R11", "bf-half-reused", "BlueFlame/doorbell half reused without alternating", "libmlx5 qp.c post_send_db (bf->offset ^= buf_size); NVIDIA/daqiri#273"},
	{"R11", "bf-no-buffer", "BlueFlame on a bfreg with no BF buffer (libmlx5: bfreg 0)", "libmlx5 mlx5.c, qp.c (uuarn 0 never does BF)"},
	{"R11", "bf-interleaved", "BlueFlame lines of two QPs interleaved on one bfreg", "libmlx5 qp.c mmio_wc_spinlock; libxlio#123"},
	{"R11", "bf-not-in-memory", "BlueFlame WQE differs from the WQE in host memory", "kernel wc.c (the device may use the memory copy)"},
	{"R12", "rq-sge-terminator", "a short receive SGE list does not end with the terminator (lkey 0x100, byte_count 0)", "libmlx5 qp.c mlx5_post_recv, srq.c mlx5_post_srq_recv (MLX5_INVALID_LKEY)"},
	{"R15", "doorbell-32bit", "doorbell written as 32-bit stores", "DPDK mlx5_common.h; kernel mlx5/doorbell.h"},
}

var checkRuleIndex = func() map[string]*CheckRule {
	m := map[string]*CheckRule{}
	for i := range CheckRules {
		m[CheckRules[i].Name] = &CheckRules[i]
	}
	return m
}()

// CheckOptions configure checked mode.
type CheckOptions struct {
	// OnViolation, if set, is called with each violation as it is found
	// (a test may fail itself there). The device goes on either way.
	OnViolation func(*Violation)
}

// Checker is the device's checked mode.
type Checker struct {
	d      *Device
	opts   CheckOptions
	found  []*Violation
	qps    map[uint32]*chkQP
	cqs    map[uint32]*chkCQ
	bfregs map[[2]uint32]*chkBF
	halves map[uint32]*chkHalf // by uar<<8|bfreg
}

// chkHalf is the last WQE start written to a bfreg: its QP, wqe_index
// and half.
type chkHalf struct {
	qpn  uint32
	idx  uint16
	half int
}

type chkQP struct {
	uar       uint32
	bfreg     int
	bfBuf     int
	dbr       uint64
	sqBase    uint64
	sqSize    int
	maxInline int
	sigAll    bool
	lastEnd   uint16 // counter after the last doorbell seen
	retired   uint16 // counter after the last CQE's WQE
	sinceSig  int    // WQEBBs since the last signalled WQE
	watch     bool   // a recordWatch is pending
	gone      bool   // the QP was destroyed: a pending recordWatch ends
	bbs       []uint8
}

type chkCQ struct {
	lastCI uint32
	seen   bool
}

type chkBF struct {
	pending bool
	pendQPN uint32
	need    int
	got     int
	db32    bool // the last write was the low half of a 32-bit doorbell
	// long: the pending WQE is longer than its BF buffer (bf-too-long):
	// its lines past the end land in the other half and are its own, not
	// the start of another QP's WQE.
	long bool
}

// EnableCheck turns checked mode on (once; later calls return the same
// checker) and returns the checker.
func (d *Device) EnableCheck(o CheckOptions) *Checker {
	if d.chk == nil {
		d.chk = &Checker{d: d, opts: o, qps: map[uint32]*chkQP{}, cqs: map[uint32]*chkCQ{}, bfregs: map[[2]uint32]*chkBF{}, halves: map[uint32]*chkHalf{}}
		d.bar.SetObserver(d.chk) // QPs and CQs created before are not checked
	}
	return d.chk
}

// Checker is the device's checker, nil when checked mode is off.
func (d *Device) Checker() *Checker { return d.chk }

// Violations lists what was found so far, in order.
func (c *Checker) Violations() []*Violation {
	if c == nil {
		return nil
	}
	return c.found
}

// Err is nil when nothing was found, else every violation joined
// (errors.As finds the first *Violation).
func (c *Checker) Err() error {
	if c == nil || len(c.found) == 0 {
		return nil
	}
	errs := make([]error, len(c.found))
	for i, v := range c.found {
		errs[i] = v
	}
	return errors.Join(errs...)
}

func (c *Checker) report(t sim.Time, name string, qpn uint32, format string, args ...any) {
	r := checkRuleIndex[name]
	v := &Violation{Rule: r.Rule, Name: name, Node: c.d.node, QPN: qpn, At: t, Observed: fmt.Sprintf(format, args...), Source: r.Source}
	c.found = append(c.found, v)
	c.d.inc(checkCounters[name])
	c.d.rec.Warnf(c.d.node, t, "check", v.Counter(), "%s %s: %s: %s (source: %s)", r.Rule, r.Message, name, v.Observed, r.Source)
	if c.opts.OnViolation != nil {
		c.opts.OnViolation(v)
	}
}

func (c *Checker) peek32(addr uint64) (uint32, bool) {
	var b [4]byte
	if c.d.mem.Read(addr, b[:]) != nil {
		return 0, false
	}
	return binary.BigEndian.Uint32(b[:]), true
}

// qpCreated is CREATE_QP's hook: the checker learns the QP's bfreg and
// record, and checks that the record is zero (R2).
func (d *Device) qpCreated(q *qp, c mlx5.CreateQPCmd, uar uint32, bfreg int, resp mlx5.CreateQPResp) {
	k := d.chk
	if k == nil {
		return
	}
	rqBytes := c.RQWQECnt << c.RQWQEShift
	k.qps[q.qpn] = &chkQP{uar: uar, bfreg: bfreg, bfBuf: resp.BFBufSize, dbr: c.DBAddr, sqBase: c.BufAddr + uint64(rqBytes),
		sqSize: c.SQWQECnt, maxInline: c.MaxInline, sigAll: c.SigAll, bbs: make([]uint8, c.SQWQECnt)}
	if w0, w1, dirty := k.recordDirty(c.DBAddr); dirty {
		k.report(d.eng.Now(), "record-not-zero", q.qpn, "QP doorbell record at %#x holds %#08x %#08x at CREATE_QP", c.DBAddr, w0, w1)
	}
}

// recordDirty reports whether a new queue's doorbell record (two words
// at addr) is not zero, and what it holds.
func (c *Checker) recordDirty(addr uint64) (w0, w1 uint32, dirty bool) {
	w0, ok0 := c.peek32(addr)
	w1, ok1 := c.peek32(addr + 4)
	return w0, w1, ok0 && ok1 && (w0 != 0 || w1 != 0)
}

// qpDestroyed forgets a destroyed QP: later doorbells naming it are the
// device's business (an unknown QP), and a record watch on it ends.
func (c *Checker) qpDestroyed(qpn uint32) {
	if s := c.qps[qpn]; s != nil {
		s.gone = true
		delete(c.qps, qpn)
	}
}

// qpReset is MODIFY_QP to RESET: the provider starts the SQ again at
// counter 0 with a zeroed record (libmlx5 mlx5_init_qp_indices), so what
// the checker knew of the old incarnation's counters goes (a pending
// record watch on it ends). Without it the new incarnation's first
// doorbell was a whole counter lap past the old one's last CQE: a false
// sq-overrun. The bfreg's half keeps alternating across the reset
// (bf->offset belongs to the bfreg): the next post, wqe_index 0, is taken
// as newer than the last one.
func (c *Checker) qpReset(qpn uint32) {
	s := c.qps[qpn]
	if s == nil {
		return
	}
	s.gone = true
	c.qps[qpn] = &chkQP{uar: s.uar, bfreg: s.bfreg, bfBuf: s.bfBuf, dbr: s.dbr, sqBase: s.sqBase, sqSize: s.sqSize,
		maxInline: s.maxInline, sigAll: s.sigAll, bbs: make([]uint8, s.sqSize)}
	if h := c.halves[s.uar<<8|uint32(s.bfreg)]; h != nil && h.qpn == qpn {
		h.idx = ^uint16(0)
	}
}

// cqCreated checks a new CQ's record is zero (R2).
func (c *Checker) cqCreated(q *cq, cmd mlx5.CreateCQCmd) {
	c.cqs[q.cqn] = &chkCQ{}
	if w0, w1, dirty := c.recordDirty(cmd.DBAddr); dirty {
		c.report(c.d.eng.Now(), "record-not-zero", 0, "CQ %d doorbell record at %#x holds %#08x %#08x at CREATE_CQ", q.cqn, cmd.DBAddr, w0, w1)
	}
}

// doorbell checks an SQ doorbell (or the counter of a BlueFlame write):
// R1, R2, R3, R6.
func (c *Checker) doorbell(t sim.Time, uar uint32, bfreg int, ctrl [8]byte, bf bool) {
	cs := mlx5.CtrlSeg(ctrl[:])
	qpn := cs.QPN()
	s := c.qps[qpn]
	if s == nil {
		return
	}
	if uar != s.uar || bfreg != s.bfreg {
		c.report(t, "doorbell-wrong-bfreg", qpn, "doorbell on UAR %d bfreg %d; the QP is bound to UAR %d bfreg %d", uar, bfreg, s.uar, s.bfreg)
	}
	idx := cs.WQEIndex()
	bbs := uint16(max(mlx5.WQEBBs(int(cs.DS())), 1))
	end := idx + bbs
	// The record, as visible when the doorbell arrives, must cover the
	// doorbell's counter. It may be ahead of it — the provider posted
	// more while the doorbell was on the link — but only over WQEs really
	// written: the control segment at the doorbell's end must carry that
	// index.
	rec, recOK := c.peek32(s.dbr + 4*mlx5.DBRSend)
	r16 := uint16(rec)
	if recOK {
		ahead := r16 - end
		switch {
		case ahead == 0:
		case int16(ahead) < 0 && int(-int16(ahead)) <= s.sqSize:
			c.report(t, "doorbell-before-record", qpn, "doorbell for wqe_index %d (+%d WQEBBs = %d) but the record still holds %d", idx, bbs, end, r16)
		case int(ahead) > s.sqSize || c.slotIndex(s, end) != end:
			c.report(t, "record-mismatch", qpn, "doorbell for wqe_index %d (+%d WQEBBs = %d) but the record holds %d, past what was written", idx, bbs, end, r16)
		}
	}
	if !bf {
		var mem [8]byte
		slot := uint64(int(idx) & (s.sqSize - 1))
		if c.d.mem.Read(s.sqBase+slot*mlx5.WQEBBSize, mem[:]) == nil && mem != ctrl {
			c.report(t, "doorbell-not-last-ctrl", qpn, "doorbell %x, but the control segment at wqe_index %d starts %x", ctrl[:], idx, mem[:])
		}
	}
	if out := int(end - s.retired); out > s.sqSize {
		c.report(t, "sq-overrun", qpn, "counter %d is %d WQEBBs past the last completed WQE (%d) in an SQ of %d", end, out, s.retired, s.sqSize)
	}
	if int16(end-s.lastEnd) > 0 {
		s.lastEnd = end
	}
	// WQEs the record announces past this doorbell need a doorbell of
	// their own soon; look again after a grace period.
	if recOK && r16 != end && int(r16-end) <= s.sqSize && !s.watch {
		s.watch = true
		c.d.eng.At(t.Add(recordGrace), &recordWatch{c: c, s: s, qpn: qpn, rec: r16, end: s.lastEnd})
	}
}

// earlyDoorbell reports a doorbell that a fault delivered before its
// doorbell record was visible (fault doorbell early): R1.
func (c *Checker) earlyDoorbell(t sim.Time, qpn uint32, idx uint16) {
	if c.qps[qpn] == nil {
		return
	}
	c.report(t, "doorbell-before-record", qpn, "doorbell for wqe_index %d arrived before the doorbell record was visible (fault: doorbell early)", idx)
}

// recordGrace is how long the checker waits for the doorbell of WQEs the
// record already announces: far more than a post takes, and than an MMIO
// write spends queued on a busy link (tens of µs under the soak).
const recordGrace = sim.Millisecond

// recordWatch looks again at a QP whose record was ahead of its doorbells.
// It reports only when neither the record nor the doorbells moved for a
// whole grace period (a post caught between its record update and its
// doorbell has moved the record): then WQEs wait for a doorbell that
// does not come.
type recordWatch struct {
	c        *Checker
	s        *chkQP
	qpn      uint32
	rec, end uint16 // at the previous look
}

func (w *recordWatch) Fire(now sim.Time) {
	s := w.s
	if s.gone {
		return
	}
	r32, ok := w.c.peek32(s.dbr + 4*mlx5.DBRSend)
	rec := uint16(r32)
	if ahead := rec - s.lastEnd; !ok || ahead == 0 || int(ahead) > s.sqSize {
		s.watch = false
		return
	}
	if rec == w.rec && s.lastEnd == w.end {
		s.watch = false
		w.c.report(now, "record-without-doorbell", w.qpn, "the record holds %d but doorbells rang only up to %d, unchanged for %v", rec, s.lastEnd, recordGrace)
		return
	}
	w.rec, w.end = rec, s.lastEnd
	w.c.d.eng.At(now.Add(recordGrace), w)
}

// slotIndex is the wqe_index of the control segment at counter i.
func (c *Checker) slotIndex(s *chkQP, i uint16) uint16 {
	var b [4]byte
	slot := uint64(int(i) & (s.sqSize - 1))
	if c.d.mem.Read(s.sqBase+slot*mlx5.WQEBBSize, b[:]) != nil {
		return ^i
	}
	return binary.BigEndian.Uint16(b[1:3])
}

// blueFlame checks a whole BlueFlame WQE (R11) and its counter.
func (c *Checker) blueFlame(t sim.Time, uar uint32, bfreg int, wqe []byte) {
	cs := mlx5.CtrlSeg(wqe)
	qpn := cs.QPN()
	s := c.qps[qpn]
	if s == nil {
		return
	}
	if s.bfBuf == 0 {
		c.report(t, "bf-no-buffer", qpn, "BlueFlame write of %d bytes on UAR %d bfreg %d, which the device gave no BF buffer", len(wqe), uar, bfreg)
	}
	n := min(int(cs.DS())*mlx5.DSSize, len(wqe))
	idx := int(cs.WQEIndex())
	for i := 0; i < n; i += mlx5.WQEBBSize {
		slot := uint64((idx + i/mlx5.WQEBBSize) & (s.sqSize - 1))
		var bb [mlx5.WQEBBSize]byte
		k := min(mlx5.WQEBBSize, n-i)
		mem := bb[:k]
		if c.d.mem.Read(s.sqBase+slot*mlx5.WQEBBSize, mem) != nil {
			break
		}
		if string(mem) != string(wqe[i:i+k]) {
			c.report(t, "bf-not-in-memory", qpn, "BlueFlame WQE %d differs from the ring copy at byte %d", idx, i+firstDiff(mem, wqe[i:i+k]))
			break
		}
	}
	var ctrl [8]byte
	copy(ctrl[:], wqe)
	c.doorbell(t, uar, bfreg, ctrl, true)
}

func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return len(a)
}

// BFWrite is the bar.BFObserver: every write into a BlueFlame buffer as
// it arrives (R11, R15).
func (c *Checker) BFWrite(t sim.Time, uar uint32, bfreg, half int, rel uint64, data []byte) {
	key := [2]uint32{uar, uint32(bfreg)}
	st := c.bfregs[key]
	if st == nil {
		st = &chkBF{}
		c.bfregs[key] = st
	}
	partial := rel%64 != 0 || len(data)%64 != 0
	const partialMsg = "%d bytes at +%#x of UAR %d bfreg %d half %d"
	db32 := st.db32
	st.db32 = false
	if st.long && st.pending && st.got < st.need {
		st.got += len(data)
		return
	}
	if rel != 0 || len(data) < 8 {
		// Not the start of a WQE: a later part of one, or a short store.
		// A doorbell written as two 32-bit stores (offset 0, then 4) is
		// one R15 mistake, not a BlueFlame write: it is reported once,
		// as doorbell-32bit, and neither half as bf-not-whole-lines.
		switch {
		case rel == 0 && len(data) == 4:
			c.report(t, "doorbell-32bit", 0, "4-byte write at offset 0 of UAR %d bfreg %d half %d", uar, bfreg, half)
			st.db32 = true
		case rel == 4 && len(data) == 4 && db32:
		case partial:
			c.report(t, "bf-not-whole-lines", 0, partialMsg, len(data), rel, uar, bfreg, half)
		}
		st.got += len(data)
		return
	}
	qpn := binary.BigEndian.Uint32(data[4:8]) >> 8
	// Halves alternate in post order on a bfreg, whichever QPs post
	// there: libmlx5 keeps bf->offset per bfreg (struct mlx5_bf), so QPs
	// that share one take turns in its halves. A write of the same QP
	// older by wqe_index than the last one seen (delivered late) is not
	// a post after it, so not a reuse.
	idx := binary.BigEndian.Uint16(data[1:3])
	hk := uar<<8 | uint32(bfreg)
	h := c.halves[hk]
	switch {
	case h == nil:
		c.halves[hk] = &chkHalf{qpn: qpn, idx: idx, half: half}
	case h.qpn == qpn && int16(idx-h.idx) <= 0:
	default:
		if half == h.half {
			c.report(t, "bf-half-reused", qpn, "UAR %d bfreg %d: half %d written for QP %#x wqe_index %d right after QP %#x wqe_index %d", uar, bfreg, half, qpn, idx, h.qpn, h.idx)
		}
		h.qpn, h.idx, h.half = qpn, idx, half
	}
	if len(data) == 8 {
		return // a doorbell
	}
	if partial {
		c.report(t, "bf-not-whole-lines", qpn, partialMsg, len(data), rel, uar, bfreg, half)
	}
	if st.pending && st.got < st.need && st.pendQPN != qpn {
		c.report(t, "bf-interleaved", qpn, "UAR %d bfreg %d: QP %#x starts a BlueFlame WQE while %d of %d bytes of QP %#x's are in", uar, bfreg, qpn, st.got, st.need, st.pendQPN)
	}
	ds := int(data[7] & 0x3f)
	st.pending, st.pendQPN, st.need, st.got = true, qpn, (ds*mlx5.DSSize+63)&^63, len(data)
	bufSize := c.d.spec.BAR.BFRegSize / 2
	st.long = st.need > bufSize
	if st.long {
		c.report(t, "bf-too-long", qpn, "BlueFlame WQE of DS %d (%d bytes) in a %d-byte BF buffer", ds, st.need, bufSize)
	}
}

// wqe checks a fetched or BlueFlame WQE: R4, R5, R7, R8.
func (c *Checker) wqe(t sim.Time, q *qp, w *wqefetch.WQE) {
	s := c.qps[q.qpn]
	if s == nil {
		return
	}
	if w.State == wqefetch.StateInvalid && !errors.Is(w.Err, wqefetch.ErrFetchDMA) {
		c.report(t, "bad-ctrl-segment", q.qpn, "WQE %d: %v", w.Index, w.Err)
	}
	if w.IsInline && int(w.Length) > s.maxInline {
		c.report(t, "inline-over-limit", q.qpn, "WQE %d carries %d inline bytes; max_inline_data is %d", w.Index, w.Length, s.maxInline)
	}
	if fm := w.Ctrl.FMCESE >> 5; fm > 4 || w.Ctrl.FMCESE&0x11 != 0 {
		c.report(t, "bad-fm-ce-se", q.qpn, "WQE %d fm_ce_se %#02x", w.Index, w.Ctrl.FMCESE)
	}
	ce := w.Ctrl.FMCESE & mlx5.CEMask
	if s.sigAll || ce == mlx5.CECQUpdate || ce == mlx5.CECQAndEQ {
		s.sinceSig = 0
	} else if s.sinceSig += w.BBs; s.sinceSig > s.sqSize {
		c.report(t, "no-signal-in-window", q.qpn, "%d WQEBBs posted up to WQE %d without a signalled one (SQ of %d)", s.sinceSig, w.Index, s.sqSize)
		s.sinceSig = 0
	}
	s.bbs[int(w.Index)&(s.sqSize-1)] = uint8(w.BBs)
}

// cqe sees each CQE before it is written: requester CQEs retire SQ
// slots (R6), and set_ci is checked against the producer (R9).
func (c *Checker) cqe(t sim.Time, q *cq, f *mlx5.CQEFields) {
	if s := c.qps[f.QPN]; s != nil && (f.Opcode == mlx5.CQEReq || f.Opcode == mlx5.CQEReqErr) {
		s.retired = f.WQECounter + uint16(max(s.bbs[int(f.WQECounter)&(s.sqSize-1)], 1))
	}
	st := c.cqs[q.cqn]
	if st == nil {
		return
	}
	ci, ok := c.peek32(q.dbr + 4*mlx5.DBRSetCI)
	if !ok {
		return
	}
	ci &= 0xffffff
	pi := q.pi & 0xffffff
	if ahead := (ci - pi) & 0xffffff; ahead != 0 && ahead < 1<<23 {
		c.report(t, "set-ci-past-producer", 0, "CQ %d set_ci %d is %d past the producer %d", q.cqn, ci, ahead, pi)
	}
	if back := (st.lastCI - ci) & 0xffffff; st.seen && back != 0 && back < 1<<23 {
		c.report(t, "set-ci-backwards", 0, "CQ %d set_ci went from %d back to %d", q.cqn, st.lastCI, ci)
	}
	st.lastCI, st.seen = ci, true
}

// overrun reports a real CQ overrun (R9).
func (c *Checker) overrun(t sim.Time, q *cq) {
	c.report(t, "cq-overrun", 0, "CQ %d: producer %d, set_ci %d, %d entries: a CQE has no room", q.cqn, q.pi, q.ci, q.nent)
}

// arm checks a CQ arm doorbell (R10).
func (c *Checker) arm(t sim.Time, q *cq, a mlx5.CQArm) {
	// libmlx5 counts arm_sn per completion event the application reads
	// (mlx5_cq_event), so that, not the events raised, is what sn must be.
	if a.SN != uint8(q.evRead&3) {
		c.report(t, "arm-bad-sn", 0, "CQ %d armed with sn %d after %d completion events read (%d raised)", q.cqn, a.SN, q.evRead, q.events)
	}
	if ci, ok := c.peek32(q.dbr + 4*mlx5.DBRSetCI); ok && ci&0xffffff != a.CI&0xffffff {
		c.report(t, "arm-bad-ci", 0, "CQ %d armed with ci %d but set_ci is %d", q.cqn, a.CI&0xffffff, ci&0xffffff)
	}
	if w, ok := c.peek32(q.dbr + 4*mlx5.DBRArm); ok && w != a.ArmWord() {
		c.report(t, "arm-before-record", 0, "CQ %d arm doorbell %#08x but dbrec[1] holds %#08x", q.cqn, a.ArmWord(), w)
	}
}

// recvWQE checks a receive WQE as the responder takes it (R12): its SGE
// list (from off within the WQE) must end at the stride or at a
// terminator, lkey MLX5_INVALID_LKEY with byte_count 0. An all-zero entry
// is a terminator that was never written: no MR has lkey 0 and the
// provider never writes an empty entry. (A stale SGE left over from an
// earlier post in the slot looks valid and cannot be told apart.)
func (c *Checker) recvWQE(t sim.Time, what string, id uint32, idx uint32, wqe []byte, off int) {
	for k, o := 0, off; o+mlx5.DataSegSize <= len(wqe); k, o = k+1, o+mlx5.DataSegSize {
		f := mlx5.DataSeg(wqe[o:]).Fields()
		switch {
		case f.LKey == mlx5.InvalidKey:
			if f.ByteCount != 0 {
				c.report(t, "rq-sge-terminator", id, "%s %#x receive WQE %d: terminator at entry %d has byte_count %d (must be 0)", what, id, idx, k, f.ByteCount)
			}
			return
		case f.LKey == 0 && f.ByteCount == 0 && f.Addr == 0:
			c.report(t, "rq-sge-terminator", id, "%s %#x receive WQE %d: entry %d is empty where the terminator (lkey 0x100) belongs, after %d SGEs", what, id, idx, k, k)
			return
		}
	}
}
