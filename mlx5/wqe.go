package mlx5

import "encoding/binary"

// Segment sizes.
const (
	CtrlSegSize   = 16
	RaddrSegSize  = 16
	DataSegSize   = 16
	AtomicSegSize = 16
	InlineHdrSize = 4
)

// CtrlSeg is the 16-byte control segment that starts every send WQE
// (struct mlx5_wqe_ctrl_seg, mlx5.md §4.2).
//
//	0x0 opmod_idx_opcode  [31:24] opmod, [23:8] wqe_index, [7:0] opcode
//	0x4 qpn_ds            [31:8] QPN, [5:0] DS
//	0x8 signature
//	0x9 dci_stream_channel_id (2 B)
//	0xB fm_ce_se
//	0xC imm / general_id
type CtrlSeg []byte

// CtrlFields are the fields of a control segment.
type CtrlFields struct {
	Opmod     uint8
	WQEIndex  uint16
	Opcode    Opcode
	QPN       uint32
	DS        uint8
	Signature uint8
	FMCESE    uint8
	Imm       uint32 // raw big-endian immediate / invalidate rkey as on the wire
}

// Opmod is the opcode modifier.
func (c CtrlSeg) Opmod() uint8 { return c[0] }

// WQEIndex is the 16-bit WQEBB counter of the WQE's first basic block.
func (c CtrlSeg) WQEIndex() uint16 { return binary.BigEndian.Uint16(c[1:3]) }

// Opcode is the send opcode.
func (c CtrlSeg) Opcode() Opcode { return Opcode(c[3]) }

// QPN is the QP (or SQ) number.
func (c CtrlSeg) QPN() uint32 { return binary.BigEndian.Uint32(c[4:8]) >> 8 }

// DS is the WQE size in 16-byte units (all segments including this one).
func (c CtrlSeg) DS() uint8 { return c[7] & 0x3f }

// Signature is the WQE signature byte.
func (c CtrlSeg) Signature() uint8 { return c[8] }

// FMCESE is the fence / completion / solicited byte.
func (c CtrlSeg) FMCESE() uint8 { return c[11] }

// Imm is the immediate/general_id dword as a big-endian value.
func (c CtrlSeg) Imm() uint32 { return binary.BigEndian.Uint32(c[12:16]) }

// Fields decodes the whole segment.
func (c CtrlSeg) Fields() CtrlFields {
	return CtrlFields{Opmod: c.Opmod(), WQEIndex: c.WQEIndex(), Opcode: c.Opcode(), QPN: c.QPN(), DS: c.DS(),
		Signature: c.Signature(), FMCESE: c.FMCESE(), Imm: c.Imm()}
}

// Encode writes f into c (len(c) >= 16). Bytes 9-10 are zeroed.
func (c CtrlSeg) Encode(f *CtrlFields) {
	binary.BigEndian.PutUint32(c[0:4], uint32(f.Opmod)<<24|uint32(f.WQEIndex)<<8|uint32(f.Opcode))
	binary.BigEndian.PutUint32(c[4:8], f.QPN<<8|uint32(f.DS&0x3f))
	c[8], c[9], c[10], c[11] = f.Signature, 0, 0, f.FMCESE
	binary.BigEndian.PutUint32(c[12:16], f.Imm)
}

// RaddrSeg is the remote-address segment (struct mlx5_wqe_raddr_seg):
// raddr BE64 @0, rkey BE32 @8, reserved @12.
type RaddrSeg []byte

// RaddrFields are the fields of a remote-address segment.
type RaddrFields struct {
	RAddr uint64
	RKey  uint32
}

// RAddr is the remote virtual address.
func (r RaddrSeg) RAddr() uint64 { return binary.BigEndian.Uint64(r[0:8]) }

// RKey is the remote key.
func (r RaddrSeg) RKey() uint32 { return binary.BigEndian.Uint32(r[8:12]) }

// Fields decodes the segment.
func (r RaddrSeg) Fields() RaddrFields { return RaddrFields{RAddr: r.RAddr(), RKey: r.RKey()} }

// Encode writes f into r and zeroes the reserved dword.
func (r RaddrSeg) Encode(f *RaddrFields) {
	binary.BigEndian.PutUint64(r[0:8], f.RAddr)
	binary.BigEndian.PutUint32(r[8:12], f.RKey)
	binary.BigEndian.PutUint32(r[12:16], 0)
}

// DataSeg is a data-pointer (scatter/gather) segment (struct mlx5_wqe_data_seg):
// byte_count BE32 @0, lkey BE32 @4, addr BE64 @8.
type DataSeg []byte

// DataFields are the fields of a data segment.
type DataFields struct {
	ByteCount uint32
	LKey      uint32
	Addr      uint64
}

// ByteCount is the segment length (bit 31 marks an inline segment instead).
func (d DataSeg) ByteCount() uint32 { return binary.BigEndian.Uint32(d[0:4]) }

// LKey is the local memory key.
func (d DataSeg) LKey() uint32 { return binary.BigEndian.Uint32(d[4:8]) }

// Addr is the local virtual address.
func (d DataSeg) Addr() uint64 { return binary.BigEndian.Uint64(d[8:16]) }

// Fields decodes the segment.
func (d DataSeg) Fields() DataFields {
	return DataFields{ByteCount: d.ByteCount(), LKey: d.LKey(), Addr: d.Addr()}
}

// Encode writes f into d.
func (d DataSeg) Encode(f *DataFields) {
	binary.BigEndian.PutUint32(d[0:4], f.ByteCount)
	binary.BigEndian.PutUint32(d[4:8], f.LKey)
	binary.BigEndian.PutUint64(d[8:16], f.Addr)
}

// IsInline reports whether a segment whose first dword is hdr is an inline
// data segment rather than a data pointer.
func IsInline(hdr uint32) bool { return hdr&InlineFlag != 0 }

// InlineSeg is an inline data segment: BE32 byte_count|0x80000000, then the
// data, padded to a 16-byte multiple.
type InlineSeg []byte

// Len is the inline byte count (10 bits are meaningful to the kernel; the
// whole 31-bit field is returned).
func (s InlineSeg) Len() uint32 { return binary.BigEndian.Uint32(s[0:4]) &^ InlineFlag }

// SetLen writes the inline header for n bytes.
func (s InlineSeg) SetLen(n uint32) { binary.BigEndian.PutUint32(s[0:4], n|InlineFlag) }

// InlineSegSize is the size in bytes, a 16-byte multiple, of an inline
// segment carrying n bytes.
func InlineSegSize(n int) int { return (InlineHdrSize + n + DSSize - 1) &^ (DSSize - 1) }

// AtomicSeg is the atomic segment: swap_add BE64 @0, compare BE64 @8.
type AtomicSeg []byte

// SwapAdd is the swap value (CS) or add value (FA).
func (a AtomicSeg) SwapAdd() uint64 { return binary.BigEndian.Uint64(a[0:8]) }

// Compare is the compare value (CS only).
func (a AtomicSeg) Compare() uint64 { return binary.BigEndian.Uint64(a[8:16]) }

// Encode writes the two values.
func (a AtomicSeg) Encode(swapAdd, compare uint64) {
	binary.BigEndian.PutUint64(a[0:8], swapAdd)
	binary.BigEndian.PutUint64(a[8:16], compare)
}

// WQEBBs is the number of basic blocks a WQE of ds octowords occupies.
func WQEBBs(ds int) int { return (ds*DSSize + WQEBBSize - 1) / WQEBBSize }

// RecvWQEStride is the RQ stride for maxSGE scatter entries: a power of two
// of at least 16 bytes (mlx5.md §5).
func RecvWQEStride(maxSGE int) int {
	n := DataSegSize * maxSGE
	if n < DataSegSize {
		n = DataSegSize
	}
	s := DataSegSize
	for s < n {
		s <<= 1
	}
	return s
}

// SRQNextSeg is the 16-byte "next" segment that starts every SRQ WQE
// (struct mlx5_wqe_srq_next_seg, mlx5.md §5): next_wqe_index BE16 @2 links
// the free list, signature @4; the rest is reserved. The data segments
// (DataSeg, terminated by an InvalidKey lkey when not all are used) follow.
type SRQNextSeg []byte

// NextWQEIndex is the index of the WQE after this one in the list.
func (s SRQNextSeg) NextWQEIndex() uint16 { return binary.BigEndian.Uint16(s[SRQOffNextWQEIndex:]) }

// SetNextWQEIndex links this WQE to WQE n; the other bytes are left alone,
// as libmlx5 writes only the index (set_srq_buf_ll, mlx5_free_srq_wqe).
func (s SRQNextSeg) SetNextWQEIndex(n uint16) { binary.BigEndian.PutUint16(s[SRQOffNextWQEIndex:], n) }

// Signature is the WQE signature byte (0 unless the SRQ has signatures).
func (s SRQNextSeg) Signature() uint8 { return s[SRQOffNextSignature] }
