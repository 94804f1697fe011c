package mlx5

import "encoding/binary"

// CQE64 is a 64-byte completion queue entry (struct mlx5_cqe64, mlx5.md §6).
// The error CQE (struct mlx5_err_cqe) overlays the same bytes.
//
//	0x18 flags_rqpn       0x20 srqn_uidx     0x24 imm_inval_pkey
//	0x2C byte_cnt         0x30 timestamp     0x34 hw_err_synd (err)
//	0x35 hw_synd_type     0x36 vendor_err_synd 0x37 syndrome (err)
//	0x38 sop_drop_qpn     0x3C wqe_counter   0x3E signature  0x3F op_own
type CQE64 []byte

// CQE offsets.
const (
	CQEOffFlagsRQPN     = 0x18
	CQEOffL4L3Hdr       = 0x1D
	CQEOffSRQN          = 0x20
	CQEOffImm           = 0x24
	CQEOffByteCnt       = 0x2C
	CQEOffTimestamp     = 0x30
	CQEOffHWErrSynd     = 0x34
	CQEOffHWSyndType    = 0x35
	CQEOffVendorErrSynd = 0x36
	CQEOffSyndrome      = 0x37
	CQEOffSopDropQPN    = 0x38
	CQEOffWQECounter    = 0x3C
	CQEOffSignature     = 0x3E
	CQEOffOpOwn         = 0x3F
)

// CQEFields are the fields softnic writes and the provider reads.
type CQEFields struct {
	Opcode        CQEOpcode
	Owner         bool
	SE            bool
	FlagsRQPN     uint32 // [25:24] RoCE L3 type, [23:0] source QPN (UD)
	SRQN          uint32
	Imm           uint32 // raw big-endian immediate / invalidated rkey
	ByteCnt       uint32
	Timestamp     uint64
	WQEOpcode     uint8  // sop_drop_qpn[31:24]: requester: opcode of the completed WQE; errors: s_wqe_opcode
	QPN           uint32 // sop_drop_qpn[23:0]
	WQECounter    uint16
	Syndrome      Syndrome // error CQEs only
	VendorErrSynd uint8    // error CQEs only
	HWErrSynd     uint8    // error CQEs only
}

// OpOwn is the op_own byte.
func (c CQE64) OpOwn() uint8 { return c[CQEOffOpOwn] }

// Opcode is op_own[7:4].
func (c CQE64) Opcode() CQEOpcode { return CQEOpcode(c[CQEOffOpOwn] >> 4) }

// Owner is op_own bit 0.
func (c CQE64) Owner() bool { return c[CQEOffOpOwn]&1 != 0 }

// SE is the solicited-event bit (op_own bit 1).
func (c CQE64) SE() bool { return c[CQEOffOpOwn]&2 != 0 }

// ByteCnt is the byte count.
func (c CQE64) ByteCnt() uint32 { return binary.BigEndian.Uint32(c[CQEOffByteCnt:]) }

// Imm is imm_inval_pkey.
func (c CQE64) Imm() uint32 { return binary.BigEndian.Uint32(c[CQEOffImm:]) }

// QPN is sop_drop_qpn[23:0].
func (c CQE64) QPN() uint32 { return binary.BigEndian.Uint32(c[CQEOffSopDropQPN:]) & 0xffffff }

// WQEOpcode is sop_drop_qpn[31:24].
func (c CQE64) WQEOpcode() uint8 { return c[CQEOffSopDropQPN] }

// WQECounter is the completed WQE's index.
func (c CQE64) WQECounter() uint16 { return binary.BigEndian.Uint16(c[CQEOffWQECounter:]) }

// Syndrome is the error syndrome (error CQEs).
func (c CQE64) Syndrome() Syndrome { return Syndrome(c[CQEOffSyndrome]) }

// VendorErrSynd is the vendor syndrome (error CQEs).
func (c CQE64) VendorErrSynd() uint8 { return c[CQEOffVendorErrSynd] }

// FlagsRQPN is the flags_rqpn dword.
func (c CQE64) FlagsRQPN() uint32 { return binary.BigEndian.Uint32(c[CQEOffFlagsRQPN:]) }

// Timestamp is the completion timestamp.
func (c CQE64) Timestamp() uint64 { return binary.BigEndian.Uint64(c[CQEOffTimestamp:]) }

// SRQN is srqn_uidx[23:0].
func (c CQE64) SRQN() uint32 { return binary.BigEndian.Uint32(c[CQEOffSRQN:]) & 0xffffff }

// IsError reports an error-CQE opcode.
func (c CQE64) IsError() bool { op := c.Opcode(); return op == CQEReqErr || op == CQERespErr }

// Fields decodes the CQE. Error fields are decoded only for error opcodes;
// their bytes overlay the timestamp in a success CQE.
func (c CQE64) Fields() CQEFields {
	f := CQEFields{Opcode: c.Opcode(), Owner: c.Owner(), SE: c.SE(), FlagsRQPN: c.FlagsRQPN(), SRQN: c.SRQN(),
		Imm: c.Imm(), ByteCnt: c.ByteCnt(), WQEOpcode: c.WQEOpcode(), QPN: c.QPN(), WQECounter: c.WQECounter()}
	if c.IsError() {
		f.Syndrome, f.VendorErrSynd, f.HWErrSynd = c.Syndrome(), c.VendorErrSynd(), c[CQEOffHWErrSynd]
	} else {
		f.Timestamp = c.Timestamp()
	}
	return f
}

// Encode writes a whole CQE: every byte of c[:64] is written, op_own last so
// that a reader that checks ownership first never sees a half-written entry.
func (c CQE64) Encode(f *CQEFields) {
	_ = c[63]
	clear(c[:CQEOffOpOwn])
	binary.BigEndian.PutUint32(c[CQEOffFlagsRQPN:], f.FlagsRQPN)
	binary.BigEndian.PutUint32(c[CQEOffSRQN:], f.SRQN&0xffffff)
	binary.BigEndian.PutUint32(c[CQEOffImm:], f.Imm)
	binary.BigEndian.PutUint32(c[CQEOffByteCnt:], f.ByteCnt)
	if f.Opcode == CQEReqErr || f.Opcode == CQERespErr {
		c[CQEOffHWErrSynd] = f.HWErrSynd
		c[CQEOffVendorErrSynd] = f.VendorErrSynd
		c[CQEOffSyndrome] = uint8(f.Syndrome)
	} else {
		binary.BigEndian.PutUint64(c[CQEOffTimestamp:], f.Timestamp)
	}
	binary.BigEndian.PutUint32(c[CQEOffSopDropQPN:], uint32(f.WQEOpcode)<<24|f.QPN&0xffffff)
	binary.BigEndian.PutUint16(c[CQEOffWQECounter:], f.WQECounter)
	op := uint8(f.Opcode) << 4
	if f.SE {
		op |= 2
	}
	if f.Owner {
		op |= 1
	}
	c[CQEOffOpOwn] = op
}

// CQEOwnedBySW reports whether the CQE at consumer index ci of a CQ with
// nent entries (a power of two) belongs to software (mlx5.md §6.6).
func CQEOwnedBySW(c CQE64, ci uint32, nent uint32) bool {
	op := c.OpOwn()
	if CQEOpcode(op>>4) == CQEInvalid {
		return false
	}
	return (op&1 != 0) == (ci&nent != 0)
}

// CQEOwnerBit is the owner value the device writes for producer index pi.
func CQEOwnerBit(pi uint32, nent uint32) bool { return pi&nent != 0 }

// CQInitOpOwn is the op_own value software initialises every CQE to
// (opcode INVALID, owner 0).
const CQInitOpOwn = 0xF0
