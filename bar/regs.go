package bar

import (
	"encoding/binary"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/trace"
)

// Access is a register's access type.
type Access uint8

// Register access types.
const (
	RO  Access = iota // read-only: writes are counted (bar_ro_write) and dropped
	RW                // read-write (WMask limits the writable bits)
	WO                // write-only (doorbells): reads are counted (bar_wo_read) and return 0
	W1C               // write 1 to clear
)

// Reg is one row of the register table. Offsets are relative to the
// region: BAR0 for the init segment, the start of each UAR page for UAR
// registers (one row serves every page).
type Reg struct {
	Name   string
	Offset uint64
	Size   uint64 // bytes covered: Width for a plain register, more for a block
	Width  int    // the only access width accepted (4 or 8); 0 = any run inside Size (BlueFlame buffers)
	Access Access
	Reset  uint32
	WMask  uint32 // writable bits of an RW register (0 = all)
	// OnRead computes a read's value (BE32 register value); nil = the stored value.
	OnRead func(b *BAR0, a *Acc) uint32
	// OnWrite runs after the stored value (init segment) is updated.
	OnWrite func(b *BAR0, a *Acc)
}

// Acc is one access as the register table sees it.
type Acc struct {
	T     sim.Time // arrival at the device
	Reg   int      // row index in the region's table
	UAR   uint32   // UAR page index (UAR registers)
	Rel   uint64   // byte offset inside the register
	Data  []byte   // bytes written (nil for reads); valid during the call
	Value uint32   // a 4-byte write as a BE32 register value
}

// initRegs is the initialization segment (mlx5.md §1.1, §1.2). Register
// values are big-endian in BAR0 as in the kernel's ioread32be/iowrite32be;
// reserved and unlisted offsets (incl. the newer cmd_exec_to/cmd_q_init_to,
// unconfirmed) are unknown accesses.
var initRegs = []Reg{
	{Name: "fw_rev", Offset: mlx5.InitSegFWRev, Size: 4, Width: 4, Access: RO, OnRead: readFWRev},
	{Name: "cmdif_rev_fw_sub", Offset: mlx5.InitSegCmdifRevFW, Size: 4, Width: 4, Access: RO, OnRead: readCmdifRev},
	{Name: "cmdq_addr_h", Offset: mlx5.InitSegCmdqAddrH, Size: 4, Width: 4, Access: RW},
	{Name: "cmdq_addr_l_sz", Offset: mlx5.InitSegCmdqAddrLSz, Size: 4, Width: 4, Access: RW, OnRead: readCmdqL, OnWrite: writeCmdqL},
	{Name: "cmd_dbell", Offset: mlx5.InitSegCmdDbell, Size: 4, Width: 4, Access: WO, OnWrite: writeCmdDbell},
	// bit31 initializing; bit30 FW-reset support (0 here); host writes bit22
	// to acknowledge a sync FW reset (stored, no effect).
	{Name: "initializing", Offset: mlx5.InitSegInitializing, Size: 4, Width: 4, Access: RW, WMask: 1 << 22, Reset: mlx5.InitializingBit},
	{Name: "health_buffer", Offset: mlx5.InitSegHealth, Size: 64, Width: 4, Access: RO, OnRead: readHealth},
	{Name: "internal_timer_h", Offset: mlx5.InitSegTimerH, Size: 4, Width: 4, Access: RO, OnRead: readTimerH},
	{Name: "internal_timer_l", Offset: mlx5.InitSegTimerL, Size: 4, Width: 4, Access: RO, OnRead: readTimerL},
	{Name: "health_counter", Offset: mlx5.InitSegHealthCount, Size: 4, Width: 4, Access: RO, OnRead: readHealthCounter},
	{Name: "real_time_h", Offset: 0x1040, Size: 4, Width: 4, Access: RO, OnRead: readRealTimeH},
	{Name: "real_time_l", Offset: 0x1044, Size: 4, Width: 4, Access: RO, OnRead: readRealTimeL},
	{Name: "ieee1588_clk", Offset: 0x2000, Size: 8, Width: 4, Access: RO},
	{Name: "ieee1588_clk_type", Offset: 0x2008, Size: 4, Width: 4, Access: RO},
	{Name: "clr_intx", Offset: 0x200C, Size: 4, Width: 4, Access: WO},
}

// Command-queue geometry reported in cmdq_addr_l_sz (32 slots of 64 B, the
// kernel's usual values; the FW's choice is unconfirmed).
const (
	logCmdqSize   = 5
	logCmdqStride = 6
)

func (b *BAR0) initReg(name string) int {
	for i := range initRegs {
		if initRegs[i].Name == name {
			return i
		}
	}
	panic("bar: no init register " + name)
}

// UAR page registers (mlx5.md §2.2). The bfreg rows are added by
// buildUARRegs according to BFRegSize.
var (
	bfregNames = [...]string{"bfreg0", "bfreg1", "bfreg2", "bfreg3"}
	dbNames    = [...]string{"db0", "db1", "db2", "db3", "db4", "db5", "db6", "db7"}
)

const (
	bufsPerUAR = 8     // 4 bfregs × 2 BF buffers, or 8 doorbell-only slots
	dbSlot     = 0x100 // doorbell-only register stride (non-cached UARs)
)

func buildUARRegs(cfg *Config) []Reg {
	regs := []Reg{
		{Name: "cq_arm", Offset: mlx5.UARCQArmOffset, Size: 8, Width: 8, Access: WO, OnWrite: writeCQArm},
		{Name: "eq_arm", Offset: mlx5.UAREQArmOffset, Size: 4, Width: 4, Access: WO, OnWrite: writeEQ},
		{Name: "eq_update", Offset: mlx5.UAREQUpdateOffset, Size: 4, Width: 4, Access: WO, OnWrite: writeEQ},
	}
	if cfg.BFRegSize == 0 {
		for k := range dbNames {
			regs = append(regs, Reg{Name: dbNames[k], Offset: mlx5.UARBFRegOffset + uint64(k)*dbSlot, Size: 8, Width: 8, Access: WO, OnWrite: writeDBSlot})
		}
		return regs
	}
	for k := range bfregNames {
		regs = append(regs, Reg{Name: bfregNames[k], Offset: mlx5.UARBFRegOffset + uint64(k*cfg.BFRegSize), Size: uint64(cfg.BFRegSize), Width: 0, Access: WO, OnWrite: writeBF})
	}
	return regs
}

// find returns the index of the row containing rel, or -1. Tables are
// sorted by offset and small; a linear scan is the clearest.
func find(table []Reg, rel uint64) int {
	for i := range table {
		if rel >= table[i].Offset && rel-table[i].Offset < table[i].Size {
			return i
		}
	}
	return -1
}

// unknownValue is what a read of nothing returns (a master abort / UR
// completion reads as all ones).
const unknownValue = 0xFFFFFFFF

// dispatch routes every access that reaches BAR0 — writes when their TLP
// arrives, reads when the MRd does — through the register table. It never
// panics: unknown offsets, bad widths or alignment, writes to read-only and
// reads of write-only registers are counted and traced. It returns a read's
// register value (BE32 semantics).
func (b *BAR0) dispatch(t sim.Time, off uint64, width int, data []byte) uint32 {
	write := data != nil
	var table []Reg
	var vals []uint32
	a := &b.acc
	*a = Acc{T: t, Data: data}
	rel := off
	switch {
	case off < mlx5.InitSegSize:
		table, vals = initRegs, b.vals
	case off/mlx5.UARPageSize >= uint64(b.cfg.FirstUAR) && off/mlx5.UARPageSize-uint64(b.cfg.FirstUAR) < uint64(b.cfg.NumUARs):
		table = b.uarRegs
		a.UAR = uint32(off / mlx5.UARPageSize)
		rel = off % mlx5.UARPageSize
	}
	i := find(table, rel)
	if i < 0 {
		b.bad(t, CtrBarUnknownAccess, off, width, write)
		return unknownValue
	}
	r := &table[i]
	a.Reg, a.Rel = i, rel-r.Offset
	if r.Width != 0 && (width != r.Width || a.Rel%uint64(width) != 0) || a.Rel+uint64(width) > r.Size {
		b.bad(t, CtrBarBadWidth, off, width, write)
		return unknownValue
	}
	if !write {
		if r.Access == WO {
			b.bad(t, CtrBarWoRead, off, width, write)
			return 0
		}
		if r.OnRead != nil {
			return r.OnRead(b, a)
		}
		return vals[i]
	}
	if width == 4 {
		a.Value = binary.BigEndian.Uint32(data)
	}
	switch r.Access {
	case RO:
		b.bad(t, CtrBarRoWrite, off, width, write)
		return 0
	case RW:
		if vals != nil {
			m := r.WMask
			if m == 0 {
				m = ^uint32(0)
			}
			vals[i] = vals[i]&^m | a.Value&m
		}
	case W1C:
		if vals != nil {
			vals[i] &^= a.Value
		}
	case WO:
		if vals != nil {
			vals[i] = a.Value
		}
	}
	if r.OnWrite != nil {
		r.OnWrite(b, a)
	}
	return 0
}

func (b *BAR0) bad(t sim.Time, counter trace.Counter, off uint64, width int, write bool) {
	b.ctr.Inc(counter)
	op := "read"
	if write {
		op = "write"
	}
	b.rec.Warnf(b.node, t, "bar", counter.String(), "%d-byte %s at BAR0 %#x", width, op, off)
}

func readFWRev(b *BAR0, _ *Acc) uint32 {
	return uint32(b.cfg.FWRev.Minor)<<16 | uint32(b.cfg.FWRev.Major)
}

func readCmdifRev(b *BAR0, _ *Acc) uint32 {
	return mlx5.CmdifRev<<16 | uint32(b.cfg.FWRev.Sub)
}

func readCmdqL(b *BAR0, a *Acc) uint32 {
	return b.vals[a.Reg]&^0xfff | uint32(b.nicInterface)<<8 | logCmdqSize<<4 | logCmdqStride
}

// writeCmdqL: the host writes the 4 KiB-aligned low address bits, or a new
// nic_interface state in [10:8] (mlx5.md §1.1).
func writeCmdqL(b *BAR0, a *Acc) {
	b.vals[a.Reg] = a.Value &^ 0xfff
	b.nicInterface = uint8(a.Value >> 8 & 7)
}

func writeCmdDbell(b *BAR0, a *Acc) {
	b.ctr.Inc(CtrBarCmdDbell)
	if b.ctl != nil {
		b.ctl.CmdDoorbell(a.T, a.Value)
	}
}

// readHealth: all of the health buffer reads 0 (healthy) except fw_ver at
// 0x230 ([31:24] major, [23:16] minor, [15:0] sub as the kernel prints it).
func readHealth(b *BAR0, a *Acc) uint32 {
	if a.Rel == 0x30 {
		v := b.cfg.FWRev
		return uint32(v.Major&0xff)<<24 | uint32(v.Minor&0xff)<<16 | uint32(v.Sub)
	}
	return b.healthWord(a.Rel, 0)
}

func (b *BAR0) ticks(t sim.Time) uint64 {
	p := b.cfg.CoreClock.Period()
	if p <= 0 {
		return 0
	}
	return uint64(t) / uint64(p)
}

func readTimerH(b *BAR0, a *Acc) uint32 { return uint32(b.ticks(a.T) >> 32) }
func readTimerL(b *BAR0, a *Acc) uint32 { return uint32(b.ticks(a.T)) }

func readHealthCounter(b *BAR0, a *Acc) uint32 {
	if b.fx.fatal {
		return b.fx.frozen // FW is dead: the heartbeat stops
	}
	if b.cfg.HealthTick <= 0 {
		return 0
	}
	return uint32(uint64(a.T)/uint64(b.cfg.HealthTick)) & 0xffffff
}

// Real-time clock: [63:32] seconds, [31:0] nanoseconds of virtual time.
func readRealTimeH(_ *BAR0, a *Acc) uint32 { return uint32(uint64(a.T) / uint64(sim.Second)) }
func readRealTimeL(_ *BAR0, a *Acc) uint32 {
	return uint32(uint64(a.T) % uint64(sim.Second) / uint64(sim.Nanosecond))
}

func writeCQArm(b *BAR0, a *Acc) {
	var db [8]byte
	copy(db[:], a.Data)
	b.ctr.Inc(CtrBarCqArm)
	b.h.CQArm(a.T, a.UAR, db)
}

func writeEQ(b *BAR0, a *Acc) {
	b.ctr.Inc(CtrBarEqDoorbell)
	if b.ctl != nil {
		var db [4]byte
		copy(db[:], a.Data)
		b.ctl.EQDoorbell(a.T, a.UAR, a.Rel == 0 && b.uarRegs[a.Reg].Offset == mlx5.UAREQArmOffset, db)
	}
}

func writeDBSlot(b *BAR0, a *Acc) {
	k := b.uarRegs[a.Reg].Offset - mlx5.UARBFRegOffset
	b.doorbell(a.T, a.UAR, int(k/dbSlot), a.Data)
}

func (b *BAR0) doorbell(t sim.Time, uar uint32, bfreg int, data []byte) {
	var ctrl [8]byte
	copy(ctrl[:], data)
	b.ctr.Inc(CtrBarDoorbell)
	b.h.Doorbell(t, uar, bfreg, ctrl)
}

// writeBF handles writes into a bfreg: an 8-byte write at offset 0 of a BF
// buffer is a doorbell; anything else is part of a BlueFlame WQE.
func writeBF(b *BAR0, a *Acc) {
	k := int(b.uarRegs[a.Reg].Offset-mlx5.UARBFRegOffset) / b.cfg.BFRegSize
	half := uint64(b.bfBuf)
	buf := int(a.Rel / half)
	rel := a.Rel % half
	if rel+uint64(len(a.Data)) > half {
		b.bad(a.T, CtrBarBadWidth, uint64(a.UAR)*mlx5.UARPageSize+b.uarRegs[a.Reg].Offset+a.Rel, len(a.Data), true)
		return
	}
	idx := int(a.UAR-b.cfg.FirstUAR)*bufsPerUAR + 2*k + buf
	b.bf[idx].write(a.T, a.UAR, k, rel, a.Data)
}

// bfAsm assembles one BlueFlame buffer's WQE from the lines that arrive.
// Device behaviour here is inferred (mlx5.md §4.9): a WQE whose lines all
// arrive is executed from the MMIO copy; a torn one falls back to a
// doorbell with its first 8 bytes, and the device then fetches the WQE
// from the SQ in host memory.
type bfAsm struct {
	b       *BAR0
	pending bool
	mask    uint64 // valid dwords of buf
	first   sim.Time
	uar     uint32
	bfreg   int
	next    uint64 // where the next line must start: lines ascend from the base
	unorder bool   // a line arrived out of order (faults.go)
	buf     [256]byte
}

func dwordMask(rel uint64, n int) uint64 {
	lo, cnt := rel/4, uint64(n+3)/4
	if cnt >= 64 {
		return ^uint64(0) << lo
	}
	return (uint64(1)<<cnt - 1) << lo
}

func (s *bfAsm) write(t sim.Time, uar uint32, bfreg int, rel uint64, data []byte) {
	b := s.b
	if rel == 0 && len(data) == 8 {
		if s.pending {
			s.torn(t, "a doorbell arrived")
		}
		b.doorbell(t, uar, bfreg, data)
		return
	}
	if rel%4 != 0 || len(data)%4 != 0 {
		b.bad(t, CtrBarBadWidth, uint64(uar)*mlx5.UARPageSize+rel, len(data), true)
		return
	}
	if rel == 0 && s.pending && s.mask&3 == 3 {
		s.torn(t, "a new WQE started")
	}
	start := !s.pending
	if start {
		s.pending, s.mask, s.first, s.uar, s.bfreg = true, 0, t, uar, bfreg
		s.next, s.unorder = 0, false
	}
	if rel != s.next {
		s.unorder = true
	}
	s.next = rel + uint64(len(data))
	copy(s.buf[rel:], data)
	s.mask |= dwordMask(rel, len(data))
	if s.mask&3 == 3 { // the first 8 bytes (opmod_idx_opcode, qpn_ds) are in
		ds := int(s.buf[7] & 0x3f)
		need := (ds*mlx5.DSSize + mlx5.WQEBBSize - 1) &^ (mlx5.WQEBBSize - 1)
		if ds == 0 || need > b.bfBuf {
			b.ctr.Inc(CtrBfBadDs)
			b.rec.Warnf(b.node, t, "bar", CtrBfBadDs.String(), "UAR %d bfreg %d: BlueFlame ctrl has ds %d (buffer %d B); ringing as a doorbell", uar, bfreg, ds, b.bfBuf)
			s.pending = false
			b.doorbell(t, uar, bfreg, s.buf[:8])
			return
		}
		if want := dwordMask(0, need); s.mask&want == want {
			s.pending = false
			if s.unorder {
				// Lines that did not arrive in ascending order are not
				// used: the device rings the doorbell and fetches the WQE
				// (faults.md §2.4, inferred from the kernel's WC test).
				b.ctr.Inc(CtrBfOutOfOrder)
				b.rec.Warnf(b.node, t, "bar", CtrBfOutOfOrder.String(), "UAR %d bfreg %d: BlueFlame lines arrived out of order; falling back to a doorbell", uar, bfreg)
				b.doorbell(t, uar, bfreg, s.buf[:8])
				return
			}
			b.ctr.Inc(CtrBarBlueflame)
			b.h.BlueFlame(t, uar, bfreg, s.buf[:need])
			return
		}
	}
	if start && b.cfg.WCDrain > 0 {
		b.eng.At(t.Add(b.cfg.WCDrain), s)
	}
}

// Fire is the device's give-up timer for a partially received BF WQE.
func (s *bfAsm) Fire(now sim.Time) {
	if s.pending && now >= s.first.Add(s.b.cfg.WCDrain) {
		s.torn(now, "lines missing after the drain timeout")
	}
}

func (s *bfAsm) torn(t sim.Time, why string) {
	b := s.b
	s.pending = false
	b.ctr.Inc(CtrBfTorn)
	if s.mask&3 != 3 {
		b.rec.Warnf(b.node, t, "bar", CtrBfTorn.String(), "UAR %d bfreg %d: torn BlueFlame WQE without its ctrl segment dropped (%s)", s.uar, s.bfreg, why)
		return
	}
	b.rec.Warnf(b.node, t, "bar", CtrBfTorn.String(), "UAR %d bfreg %d: torn BlueFlame WQE (%s); falling back to a doorbell", s.uar, s.bfreg, why)
	b.doorbell(t, s.uar, s.bfreg, s.buf[:8])
}
