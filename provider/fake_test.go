package provider

// A fake mlx5 device for the provider's tests: a Control that hands out
// numbers and records commands, an MMIO port that records every store and
// flush, and (FakeProgDev) a tiny execution engine that walks the SQ from
// the doorbell record and writes requester CQEs into the CQ ring in shm
// with mlx5.CQE64.Encode. It is exported (inside the test binary) so the
// provider_test package can use it too.

import (
	"encoding/binary"
	"fmt"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/shm"
)

// MMIOOp is one recorded MMIO access.
type MMIOOp struct {
	Flush   bool
	Off     uint64
	V       uint64
	DBRSend uint32 // DBR[1] of the QP owning the bfreg at the time of the store (stores only)
}

// FakeQP is the device's view of a QP.
type FakeQP struct {
	Cmd       mlx5.CreateQPCmd
	QPN       uint32
	BFReg     uint64
	State     mlx5.QPState
	Consumed  uint16 // next WQEBB counter the fake engine executes
	RecvTaken uint32 // RQ WQEs consumed by Deliver
	Errors    []string
}

// FakeCQ is the device's view of a CQ.
type FakeCQ struct {
	Cmd     mlx5.CreateCQCmd
	CQN     uint32
	PI      uint32 // producer index
	Overrun int    // CQEs that would have overwritten unpolled entries
}

// FakeSRQ is the device's view of an SRQ: like a ConnectX it keeps the
// index of the next WQE to consume, starting at 0, and follows each
// consumed WQE's next_wqe_index.
type FakeSRQ struct {
	Cmd   mlx5.CreateSRQCmd
	SRQN  uint32
	Limit uint32
	Cur   uint16 // next WQE to consume
	Taken uint16 // WQEs consumed (compared with the doorbell record's counter)
	Users int    // QPs attached
}

// FakeDev implements mlx5.Control, mlx5.SRQControl and pcie.MMIO.
type FakeDev struct {
	Mem       *shm.Region
	Attr      mlx5.DeviceAttr
	UCtx      mlx5.ContextResp
	BFBufSize int
	Cmds      []string
	Modifies  []mlx5.ModifyQPCmd
	Fail      map[string]error // command name -> error to return once
	QPs       map[uint32]*FakeQP
	CQs       map[uint32]*FakeCQ
	SRQs      map[uint32]*FakeSRQ
	SRQMods   []mlx5.ModifySRQCmd
	Ops       []MMIOOp
	Host      []string          // HostWorker calls (FakeHostMMIO): "stage qpn bytes"
	HW        map[string]uint64 // what FakeProgDev.HWCounters returns
	nextQPN   uint32
	nextCQN   uint32
	nextPDN   uint32
	nextSRQN  uint32
	nextKey   uint32
	nQP       int
	order     []uint32 // QPNs in creation order
	RecordOps bool     // record MMIO ops (benchmarks turn it off)
}

// NewFakeDev returns a device with ConnectX-like limits over mem.
func NewFakeDev(mem *shm.Region) *FakeDev {
	return &FakeDev{
		Mem: mem,
		Attr: mlx5.DeviceAttr{FWVersion: "fake", MaxQP: 1 << 16, MaxQPWR: 1 << 15, MaxSGE: 30, MaxCQE: 1 << 22,
			MaxMR: 1 << 16, MaxPD: 1 << 16, MaxMRSize: 1 << 40, MaxInline: 912, MaxSQDescSz: 1024, MaxQPRdAtomic: 16,
			BFRegSize: mlx5.DefaultBFRegSize, BFBufSize: mlx5.DefaultBFBufSize, NumUARs: 8, ActiveMTU: mlx5.MTU4096},
		UCtx:      mlx5.ContextResp{UARIndex: 1, NumUARs: 8, TotBFRegs: 16, BFRegSize: mlx5.DefaultBFRegSize},
		BFBufSize: mlx5.DefaultBFBufSize,
		Fail:      map[string]error{},
		QPs:       map[uint32]*FakeQP{},
		CQs:       map[uint32]*FakeCQ{},
		SRQs:      map[uint32]*FakeSRQ{},
		nextQPN:   0x100, nextCQN: 0x40, nextPDN: 1, nextSRQN: 0x20, nextKey: 0x1000,
		RecordOps: true,
	}
}

func (d *FakeDev) cmd(name string) error {
	d.Cmds = append(d.Cmds, name)
	if err, ok := d.Fail[name]; ok {
		delete(d.Fail, name)
		return err
	}
	return nil
}

// SetNextQPN makes the next CreateQP hand out qpn (golden WQEs name
// fixed QPNs).
func (d *FakeDev) SetNextQPN(qpn uint32) { d.nextQPN = qpn - 1 }

// QueryDevice implements mlx5.Control.
func (d *FakeDev) QueryDevice() (mlx5.DeviceAttr, error) { return d.Attr, d.cmd("query_device") }

// GetContext implements mlx5.Control.
func (d *FakeDev) GetContext() (mlx5.ContextResp, error) { return d.UCtx, d.cmd("get_context") }

// AllocPD implements mlx5.Control.
func (d *FakeDev) AllocPD() (mlx5.PDResp, error) {
	if err := d.cmd("alloc_pd"); err != nil {
		return mlx5.PDResp{}, err
	}
	d.nextPDN++
	return mlx5.PDResp{PDN: d.nextPDN}, nil
}

// DeallocPD implements mlx5.Control.
func (d *FakeDev) DeallocPD(uint32) error { return d.cmd("dealloc_pd") }

// RegMR implements mlx5.Control.
func (d *FakeDev) RegMR(c mlx5.RegMRCmd) (mlx5.RegMRResp, error) {
	if err := d.cmd("reg_mr"); err != nil {
		return mlx5.RegMRResp{}, err
	}
	d.nextKey += 0x100
	return mlx5.RegMRResp{LKey: d.nextKey | 0x11, RKey: d.nextKey | 0x11}, nil
}

// DeregMR implements mlx5.Control.
func (d *FakeDev) DeregMR(uint32) error { return d.cmd("dereg_mr") }

// CreateCQ implements mlx5.Control.
func (d *FakeDev) CreateCQ(c mlx5.CreateCQCmd) (mlx5.CreateCQResp, error) {
	if err := d.cmd("create_cq"); err != nil {
		return mlx5.CreateCQResp{}, err
	}
	d.nextCQN++
	d.CQs[d.nextCQN] = &FakeCQ{Cmd: c, CQN: d.nextCQN}
	return mlx5.CreateCQResp{CQN: d.nextCQN}, nil
}

// DestroyCQ implements mlx5.Control.
func (d *FakeDev) DestroyCQ(cqn uint32) error {
	if err := d.cmd("destroy_cq"); err != nil {
		return err
	}
	delete(d.CQs, cqn)
	return nil
}

// CreateQP implements mlx5.Control: bfregs are handed out two per UAR page
// starting at the context's UAR.
func (d *FakeDev) CreateQP(c mlx5.CreateQPCmd) (mlx5.CreateQPResp, error) {
	if err := d.cmd("create_qp"); err != nil {
		return mlx5.CreateQPResp{}, err
	}
	if c.SRQN != 0 {
		srq := d.SRQs[c.SRQN]
		switch {
		case srq == nil:
			return mlx5.CreateQPResp{}, &mlx5.CmdError{Cmd: "CREATE_QP", Status: mlx5.StatusBadResource, Reason: "no such SRQ"}
		case c.RQWQECnt != 0:
			return mlx5.CreateQPResp{}, &mlx5.CmdError{Cmd: "CREATE_QP", Status: mlx5.StatusBadParam, Reason: "RQ on an SRQ QP"}
		}
		srq.Users++
	}
	d.nextQPN++
	uar := uint64(d.UCtx.UARIndex) + uint64(d.nQP/2)
	bf := uint64(d.nQP % 2)
	d.nQP++
	off := uar*mlx5.UARPageSize + mlx5.UARBFRegOffset + bf*mlx5.DefaultBFRegSize
	d.QPs[d.nextQPN] = &FakeQP{Cmd: c, QPN: d.nextQPN, BFReg: off}
	d.order = append(d.order, d.nextQPN)
	return mlx5.CreateQPResp{QPN: d.nextQPN, BFRegIndex: int(bf), BFRegOffset: off, BFBufSize: d.BFBufSize}, nil
}

// ModifyQP implements mlx5.Control.
func (d *FakeDev) ModifyQP(c mlx5.ModifyQPCmd) error {
	if err := d.cmd("modify_qp"); err != nil {
		return err
	}
	d.Modifies = append(d.Modifies, c)
	q := d.QPs[c.QPN]
	if q == nil {
		return &mlx5.CmdError{Cmd: "MODIFY_QP", Status: mlx5.StatusBadResource, Reason: "no such QP"}
	}
	q.State = c.State
	if c.State == mlx5.QPStateRST {
		q.Consumed, q.RecvTaken = 0, 0
	}
	return nil
}

// QueryQP implements mlx5.Control.
func (d *FakeDev) QueryQP(qpn uint32) (mlx5.QPAttr, error) {
	if err := d.cmd("query_qp"); err != nil {
		return mlx5.QPAttr{}, err
	}
	q := d.QPs[qpn]
	if q == nil {
		return mlx5.QPAttr{}, &mlx5.CmdError{Cmd: "QUERY_QP", Status: mlx5.StatusBadResource, Reason: "no such QP"}
	}
	return mlx5.QPAttr{State: q.State}, nil
}

// DestroyQP implements mlx5.Control.
func (d *FakeDev) DestroyQP(qpn uint32) error {
	if err := d.cmd("destroy_qp"); err != nil {
		return err
	}
	if q := d.QPs[qpn]; q != nil && q.Cmd.SRQN != 0 {
		if srq := d.SRQs[q.Cmd.SRQN]; srq != nil {
			srq.Users--
		}
	}
	delete(d.QPs, qpn)
	// Drop it from the Progress order too: a long fuzz run creates and
	// destroys a QP per input, and Progress walks the order on every step.
	for i, n := range d.order {
		if n == qpn {
			d.order = append(d.order[:i], d.order[i+1:]...)
			break
		}
	}
	return nil
}

// CreateSRQ implements mlx5.SRQControl.
func (d *FakeDev) CreateSRQ(c mlx5.CreateSRQCmd) (mlx5.CreateSRQResp, error) {
	if err := d.cmd("create_srq"); err != nil {
		return mlx5.CreateSRQResp{}, err
	}
	if c.WQECnt <= 0 || c.WQECnt&(c.WQECnt-1) != 0 || c.WQEShift < 5 {
		return mlx5.CreateSRQResp{}, &mlx5.CmdError{Cmd: "CREATE_SRQ", Status: mlx5.StatusBadParam, Reason: "bad size"}
	}
	d.nextSRQN++
	d.SRQs[d.nextSRQN] = &FakeSRQ{Cmd: c, SRQN: d.nextSRQN, Limit: c.Limit}
	return mlx5.CreateSRQResp{SRQN: d.nextSRQN}, nil
}

// ModifySRQ implements mlx5.SRQControl.
func (d *FakeDev) ModifySRQ(c mlx5.ModifySRQCmd) error {
	if err := d.cmd("modify_srq"); err != nil {
		return err
	}
	d.SRQMods = append(d.SRQMods, c)
	s := d.SRQs[c.SRQN]
	switch {
	case s == nil:
		return &mlx5.CmdError{Cmd: "MODIFY_SRQ", Status: mlx5.StatusBadResource, Reason: "no such SRQ"}
	case c.Mask&mlx5.SRQAttrMaxWR != 0:
		return &mlx5.CmdError{Cmd: "MODIFY_SRQ", Status: mlx5.StatusBadParam, Reason: "resize"}
	}
	if c.Mask&mlx5.SRQAttrLimit != 0 {
		s.Limit = c.Limit
	}
	return nil
}

// QuerySRQ implements mlx5.SRQControl: max_wr as mlx5_ib_query_srq
// reports it (WQEs - 1).
func (d *FakeDev) QuerySRQ(srqn uint32) (mlx5.SRQAttr, error) {
	if err := d.cmd("query_srq"); err != nil {
		return mlx5.SRQAttr{}, err
	}
	s := d.SRQs[srqn]
	if s == nil {
		return mlx5.SRQAttr{}, &mlx5.CmdError{Cmd: "QUERY_SRQ", Status: mlx5.StatusBadResource, Reason: "no such SRQ"}
	}
	return mlx5.SRQAttr{MaxWR: s.Cmd.WQECnt - 1, MaxSGE: (1<<s.Cmd.WQEShift - mlx5.SRQNextSegSize) / mlx5.DataSegSize,
		Limit: s.Limit}, nil
}

// DestroySRQ implements mlx5.SRQControl.
func (d *FakeDev) DestroySRQ(srqn uint32) error {
	if err := d.cmd("destroy_srq"); err != nil {
		return err
	}
	s := d.SRQs[srqn]
	switch {
	case s == nil:
		return &mlx5.CmdError{Cmd: "DESTROY_SRQ", Status: mlx5.StatusBadResource, Reason: "no such SRQ"}
	case s.Users > 0:
		return &mlx5.CmdError{Cmd: "DESTROY_SRQ", Status: mlx5.StatusResourceBusy, Reason: "QPs attached"}
	}
	delete(d.SRQs, srqn)
	return nil
}

// TakeSRQ consumes the next posted WQE of an SRQ the way a ConnectX does
// (the WQE at its current index, then that WQE's next_wqe_index) and
// returns its slot and data segments (up to the InvalidKey terminator).
func (d *FakeDev) TakeSRQ(srqn uint32) (uint16, []mlx5.DataFields, error) {
	s := d.SRQs[srqn]
	if s == nil {
		return 0, nil, fmt.Errorf("fake: no SRQ %#x", srqn)
	}
	dbr, err := d.Mem.Slice(s.Cmd.DBAddr, 8)
	if err != nil {
		return 0, nil, err
	}
	if uint16(mlx5.DBRec(dbr).Word(mlx5.DBRRecv)) == s.Taken {
		return 0, nil, fmt.Errorf("fake: SRQ %#x has no receive posted", srqn)
	}
	stride := 1 << s.Cmd.WQEShift
	slot := s.Cur & uint16(s.Cmd.WQECnt-1)
	wqe, err := d.Mem.Slice(s.Cmd.BufAddr+uint64(slot)*uint64(stride), stride)
	if err != nil {
		return 0, nil, err
	}
	var sges []mlx5.DataFields
	for off := mlx5.SRQNextSegSize; off < stride; off += mlx5.DataSegSize {
		f := mlx5.DataSeg(wqe[off:]).Fields()
		if f.LKey == mlx5.InvalidKey {
			break
		}
		sges = append(sges, f)
	}
	s.Cur = mlx5.SRQNextSeg(wqe).NextWQEIndex()
	s.Taken++
	return slot, sges, nil
}

// qpOfReg finds the QP whose bfreg holds BAR0 offset off.
func (d *FakeDev) qpOfReg(off uint64) *FakeQP {
	for _, q := range d.QPs {
		if off >= q.BFReg && off < q.BFReg+mlx5.DefaultBFRegSize {
			return q
		}
	}
	return nil
}

// Store64 implements pcie.MMIO.
func (d *FakeDev) Store64(off uint64, v uint64) {
	if !d.RecordOps {
		return
	}
	op := MMIOOp{Off: off, V: v}
	if q := d.qpOfReg(off); q != nil {
		if b, err := d.Mem.Slice(q.Cmd.DBAddr, 8); err == nil {
			op.DBRSend = mlx5.DBRec(b).Word(mlx5.DBRSend)
		}
	}
	d.Ops = append(d.Ops, op)
}

// StoreLines implements pcie.LineStorer: the separate calls.
func (d *FakeDev) StoreLines(off uint64, a, b []byte) {
	if !d.RecordOps {
		return
	}
	d.Flush()
	for _, p := range [2][]byte{a, b} {
		for i := 0; i+8 <= len(p); i += 8 {
			d.Store64(off, binary.LittleEndian.Uint64(p[i:]))
			off += 8
		}
	}
	d.Flush()
}

// Store32 implements pcie.MMIO.
func (d *FakeDev) Store32(off uint64, v uint32) { d.Store64(off, uint64(v)) }

// Load32 implements pcie.MMIO.
func (d *FakeDev) Load32(uint64) uint32 { return 0 }

// Flush implements pcie.MMIO.
func (d *FakeDev) Flush() {
	if d.RecordOps {
		d.Ops = append(d.Ops, MMIOOp{Flush: true})
	}
}

// WriteCQE writes one CQE at the CQ's producer index with the right owner
// bit, counting an overrun if the consumer (set_ci) has not freed the slot.
func (d *FakeDev) WriteCQE(cqn uint32, f mlx5.CQEFields) error {
	cq := d.CQs[cqn]
	if cq == nil {
		return fmt.Errorf("fake: no CQ %#x", cqn)
	}
	nent := uint32(cq.Cmd.Entries)
	dbr, err := d.Mem.Slice(cq.Cmd.DBAddr, 8)
	if err != nil {
		return err
	}
	ci := mlx5.DBRec(dbr).Word(mlx5.DBRSetCI)
	if (cq.PI-ci)&0xffffff >= nent {
		cq.Overrun++
		return fmt.Errorf("fake: CQ %#x overrun (pi %d ci %d)", cqn, cq.PI, ci)
	}
	b, err := d.Mem.Slice(cq.Cmd.BufAddr+uint64(cq.PI&(nent-1))*mlx5.CQE64Size, mlx5.CQE64Size)
	if err != nil {
		return err
	}
	f.Owner = mlx5.CQEOwnerBit(cq.PI, nent)
	mlx5.CQE64(b).Encode(&f)
	cq.PI++
	return nil
}

// WriteRawCQE writes 64 CQE bytes (a golden vector, say) at the CQ's
// producer index, with the owner bit that index needs.
func (d *FakeDev) WriteRawCQE(cqn uint32, raw []byte) error {
	cq := d.CQs[cqn]
	if cq == nil || len(raw) != mlx5.CQE64Size {
		return fmt.Errorf("fake: no CQ %#x or a CQE of %d bytes", cqn, len(raw))
	}
	nent := uint32(cq.Cmd.Entries)
	b, err := d.Mem.Slice(cq.Cmd.BufAddr+uint64(cq.PI&(nent-1))*mlx5.CQE64Size, mlx5.CQE64Size)
	if err != nil {
		return err
	}
	copy(b, raw)
	b[mlx5.CQEOffOpOwn] &^= 1
	if mlx5.CQEOwnerBit(cq.PI, nent) {
		b[mlx5.CQEOffOpOwn] |= 1
	}
	cq.PI++
	return nil
}

// sqRing is the SQ ring of q.
func (d *FakeDev) sqRing(q *FakeQP) ([]byte, error) {
	rqBytes := uint64(q.Cmd.RQWQECnt) << q.Cmd.RQWQEShift
	return d.Mem.Slice(q.Cmd.BufAddr+rqBytes, q.Cmd.SQWQECnt*mlx5.WQEBBSize)
}

// step executes the next posted WQE of q, if any: checks its ctrl segment
// and writes a REQ CQE when it asks for one. It reports whether it did
// anything. It does not allocate, so that benchmarks through it measure
// the provider.
func (d *FakeDev) step(q *FakeQP) bool {
	dbr, err := d.Mem.Slice(q.Cmd.DBAddr, 8)
	if err != nil {
		q.Errors = append(q.Errors, err.Error())
		return false
	}
	prod := uint16(mlx5.DBRec(dbr).Word(mlx5.DBRSend))
	if q.Consumed == prod || q.Cmd.SQWQECnt == 0 {
		return false
	}
	ring, err := d.sqRing(q)
	if err != nil {
		q.Errors = append(q.Errors, err.Error())
		return false
	}
	off := int(q.Consumed) & (q.Cmd.SQWQECnt - 1) * mlx5.WQEBBSize
	ctrl := mlx5.CtrlSeg(ring[off : off+16])
	if ctrl.WQEIndex() != q.Consumed || ctrl.QPN() != q.QPN || ctrl.DS() == 0 {
		q.Errors = append(q.Errors, fmt.Sprintf("bad ctrl at %#x: %+v", q.Consumed, ctrl.Fields()))
		q.Consumed = prod // give up on the rest, like a QP in error
		return true
	}
	var byteCnt uint32
	if ctrl.Opcode() == mlx5.OpRDMARead {
		for i := 2; i < int(ctrl.DS()); i++ { // data segments after ctrl + raddr, modulo the ring
			o := (off + 16*i) % len(ring)
			byteCnt += mlx5.DataSeg(ring[o : o+16]).ByteCount()
		}
	}
	if ctrl.FMCESE()&mlx5.CEMask == mlx5.CECQUpdate {
		if err := d.WriteCQE(q.Cmd.SendCQN, mlx5.CQEFields{Opcode: mlx5.CQEReq, WQEOpcode: uint8(ctrl.Opcode()),
			QPN: q.QPN, WQECounter: ctrl.WQEIndex(), ByteCnt: byteCnt}); err != nil {
			q.Errors = append(q.Errors, err.Error())
		}
	}
	q.Consumed += uint16(mlx5.WQEBBs(int(ctrl.DS())))
	return true
}

// Deliver consumes the next RQ WQE of qpn (or, for a QP on an SRQ, the
// next WQE of the SRQ) with a responder CQE of the given opcode (the
// "peer" sent something); srcQP is the whole flags_rqpn dword.
func (d *FakeDev) Deliver(qpn uint32, op mlx5.CQEOpcode, byteCnt, immBE uint32, srcQP uint32) error {
	q := d.QPs[qpn]
	if q == nil {
		return fmt.Errorf("fake: no QP %#x", qpn)
	}
	if q.Cmd.SRQN != 0 { // a receive from the QP's SRQ: wqe_counter names the slot
		slot, _, err := d.TakeSRQ(q.Cmd.SRQN)
		if err != nil {
			return err
		}
		q.RecvTaken++
		return d.WriteCQE(q.Cmd.RecvCQN, mlx5.CQEFields{Opcode: op, QPN: qpn, SRQN: q.Cmd.SRQN, WQECounter: slot,
			ByteCnt: byteCnt, Imm: immBE, FlagsRQPN: srcQP})
	}
	dbr, err := d.Mem.Slice(q.Cmd.DBAddr, 8)
	if err != nil {
		return err
	}
	if uint16(mlx5.DBRec(dbr).Word(mlx5.DBRRecv)) == uint16(q.RecvTaken) {
		return fmt.Errorf("fake: QP %#x has no receive posted", qpn)
	}
	f := mlx5.CQEFields{Opcode: op, QPN: qpn, WQECounter: uint16(q.RecvTaken), ByteCnt: byteCnt, Imm: immBE, FlagsRQPN: srcQP}
	q.RecvTaken++
	return d.WriteCQE(q.Cmd.RecvCQN, f)
}

// FakeProgDev adds mlx5.Progressor and CounterSource to the fake's
// control side.
type FakeProgDev struct{ *FakeDev }

// Progress implements mlx5.Progressor: one WQE of the first-created QP
// with work.
func (p FakeProgDev) Progress() bool {
	for _, qpn := range p.order {
		if q := p.QPs[qpn]; q != nil && p.step(q) {
			return true
		}
	}
	return false
}

// FakeHostMMIO is the fake's MMIO port as a host CPU model: it adds
// HostWorker, recording each call in Host.
type FakeHostMMIO struct{ *FakeDev }

// Work implements HostWorker.
func (p FakeHostMMIO) Work(stage string, qpn uint32, bytes int) {
	if p.RecordOps {
		p.Host = append(p.Host, fmt.Sprintf("%s %#x %d", stage, qpn, bytes))
	}
}

// HWCounters implements CounterSource: the live FakeDev.HW map (the
// provider must copy it).
func (p FakeProgDev) HWCounters() map[string]uint64 { return p.HW }

// BE32 is a helper for tests: the uint32 whose big-endian bytes are b.
func BE32(b []byte) uint32 { return binary.BigEndian.Uint32(b) }
