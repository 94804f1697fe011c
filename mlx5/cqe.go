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
	FlagsRQPN     uint32 // [29:28] GRH, [25:24] RoCE L3 type, [23:0] source QPN (UD)
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

// SrcQPN is flags_rqpn[23:0]: the source QPN of a UD receive (the
// sender's DETH source QP).
func (c CQE64) SrcQPN() uint32 { return c.FlagsRQPN() & 0xffffff }

// GRHBits is flags_rqpn[29:28]: non-zero when the receive carried a GRH
// (RoCE: the network header scattered into the first 40 bytes of a UD
// receive buffer); libmlx5 and mlx5_ib set IBV_WC_GRH for any non-zero
// value.
func (c CQE64) GRHBits() uint8 { return c[CQEOffFlagsRQPN] >> 4 & 3 }

// SL is flags_rqpn[27:24] as libmlx5 reads wc.sl. On a RoCE port its low
// two bits are the RoCE L3 header type (RoCEL3Type), which libmlx5 reports
// as part of the SL all the same; mlx5_ib takes the SL from the VLAN PCP.
func (c CQE64) SL() uint8 { return c[CQEOffFlagsRQPN] & 0xf }

// RoCEL3Type is flags_rqpn[25:24], the network header of a RoCE receive
// (MLX5_CQE_ROCE_L3_HEADER_TYPE_*: RoCEL3GRH, RoCEL3IPv6, RoCEL3IPv4), from
// which mlx5_ib sets ib_wc.network_hdr_type.
func (c CQE64) RoCEL3Type() uint8 { return c[CQEOffFlagsRQPN] & 3 }

// L3HdrType is l4_hdr_type_etc[3:2], the L3 header type of an Ethernet
// (raw packet) receive (MLX5_CQE_L3_HDR_TYPE_*: L3HdrNone, L3HdrIPv6,
// L3HdrIPv4); libmlx5 reads it for the IP checksum flag. RoCE receives
// report their network header in RoCEL3Type instead.
func (c CQE64) L3HdrType() uint8 { return c[CQEOffL4L3Hdr] >> 2 & 3 }

// RoCE L3 header types, flags_rqpn[25:24] (kernel
// MLX5_CQE_ROCE_L3_HEADER_TYPE_*; not in mlx5dv.h).
const (
	RoCEL3GRH  = 0 // RoCEv1: a GRH
	RoCEL3IPv6 = 1 // RoCEv2 over IPv6
	RoCEL3IPv4 = 2 // RoCEv2 over IPv4
)

// Ethernet L3 header types, l4_hdr_type_etc[3:2] (MLX5_CQE_L3_HDR_TYPE_*).
const (
	L3HdrNone = 0
	L3HdrIPv6 = 1
	L3HdrIPv4 = 2
)

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
