package roce

import "encoding/binary"

// Header sizes in bytes (rocev2.md §1.4, §1.5).
const (
	BTHSize          = 12
	RETHSize         = 16
	AETHSize         = 4
	AtomicETHSize    = 28
	AtomicAckETHSize = 8
	ImmDtSize        = 4
	IETHSize         = 4
	DETHSize         = 8
	FETHSize         = 4
	CNPPadSize       = 16
	GRHSize          = 40
	ICRCSize         = 4
)

// ---------------------------------------------------------------- BTH

// BTH is a view of a Base Transport Header.
//
//	byte 0     OpCode
//	byte 1     SE(7) M(6) PadCnt(5-4) TVer(3-0)
//	bytes 2-3  P_Key
//	byte 4     FECN(7) BECN(6) resv6a(5-0)
//	bytes 5-7  DestQP
//	byte 8     AckReq(7) resv7(6-0)
//	bytes 9-11 PSN
type BTH []byte

// BTH field offsets.
const (
	bthOpcode = 0
	bthFlags  = 1
	bthPKey   = 2
	bthECN    = 4
	bthDestQP = 4 // 24-bit field in the low 3 bytes of the word at 4
	bthAck    = 8
	bthPSN    = 8 // 24-bit field in the low 3 bytes of the word at 8
)

// BTHFields holds the BTH's fields. PadCnt is ignored by BuildFrame (it sets
// it from the payload length). Reserved bits are written as 0.
type BTHFields struct {
	Opcode Opcode
	SE     bool   // solicited event
	MigReq bool   // M bit
	PadCnt uint8  // 0..3
	TVer   uint8  // transport version, 0
	PKey   uint16 // partition key, 0xFFFF default
	FECN   bool
	BECN   bool
	DestQP uint32 // 24 bits
	AckReq bool
	PSN    PSN // 24 bits
}

func (b BTH) Opcode() Opcode     { return Opcode(b[bthOpcode]) }
func (b BTH) SE() bool           { return b[bthFlags]&0x80 != 0 }
func (b BTH) MigReq() bool       { return b[bthFlags]&0x40 != 0 }
func (b BTH) PadCnt() uint8      { return (b[bthFlags] >> 4) & 3 }
func (b BTH) TVer() uint8        { return b[bthFlags] & 0x0F }
func (b BTH) PKey() uint16       { return binary.BigEndian.Uint16(b[bthPKey:]) }
func (b BTH) FECN() bool         { return b[bthECN]&0x80 != 0 }
func (b BTH) BECN() bool         { return b[bthECN]&0x40 != 0 }
func (b BTH) DestQP() uint32     { return binary.BigEndian.Uint32(b[bthDestQP:]) & 0xFFFFFF }
func (b BTH) AckReq() bool       { return b[bthAck]&0x80 != 0 }
func (b BTH) PSN() PSN           { return PSN(binary.BigEndian.Uint32(b[bthPSN:]) & PSNMask) }
func (b BTH) SetOpcode(o Opcode) { b[bthOpcode] = byte(o) }

// SetPadCnt sets the pad count (0..3).
func (b BTH) SetPadCnt(n uint8) { b[bthFlags] = b[bthFlags]&^0x30 | (n&3)<<4 }

// SetPSN sets the PSN (24 bits), keeping AckReq and resv7.
func (b BTH) SetPSN(p PSN) {
	binary.BigEndian.PutUint32(b[bthPSN:], uint32(b[bthAck])<<24|uint32(p)&PSNMask)
}

// SetDestQP sets the destination QPN (24 bits), keeping byte 4.
func (b BTH) SetDestQP(qpn uint32) {
	binary.BigEndian.PutUint32(b[bthDestQP:], uint32(b[bthECN])<<24|qpn&0xFFFFFF)
}

// SetAckReq sets or clears the AckReq bit.
func (b BTH) SetAckReq(v bool) { b[bthAck] = setBit(b[bthAck], 0x80, v) }

// Fields returns all fields.
func (b BTH) Fields() BTHFields {
	return BTHFields{
		Opcode: b.Opcode(), SE: b.SE(), MigReq: b.MigReq(), PadCnt: b.PadCnt(), TVer: b.TVer(),
		PKey: b.PKey(), FECN: b.FECN(), BECN: b.BECN(), DestQP: b.DestQP(), AckReq: b.AckReq(), PSN: b.PSN(),
	}
}

// Encode writes all fields; reserved bits become 0.
func (b BTH) Encode(f *BTHFields) {
	_ = b[BTHSize-1]
	b[bthOpcode] = byte(f.Opcode)
	b[bthFlags] = boolBit(f.SE, 0x80) | boolBit(f.MigReq, 0x40) | (f.PadCnt&3)<<4 | f.TVer&0x0F
	binary.BigEndian.PutUint16(b[bthPKey:], f.PKey)
	binary.BigEndian.PutUint32(b[bthDestQP:], uint32(boolBit(f.FECN, 0x80)|boolBit(f.BECN, 0x40))<<24|f.DestQP&0xFFFFFF)
	binary.BigEndian.PutUint32(b[bthPSN:], uint32(boolBit(f.AckReq, 0x80))<<24|uint32(f.PSN)&PSNMask)
}

// ---------------------------------------------------------------- RETH

// RETH is a view of an RDMA Extended Transport Header: VA(0-7) R_Key(8-11)
// DMA length(12-15).
type RETH []byte

// RETHFields holds the RETH's fields.
type RETHFields struct {
	VA     uint64
	RKey   uint32
	DMALen uint32
}

func (r RETH) VA() uint64     { return binary.BigEndian.Uint64(r[0:]) }
func (r RETH) RKey() uint32   { return binary.BigEndian.Uint32(r[8:]) }
func (r RETH) DMALen() uint32 { return binary.BigEndian.Uint32(r[12:]) }

// Fields returns all fields.
func (r RETH) Fields() RETHFields { return RETHFields{VA: r.VA(), RKey: r.RKey(), DMALen: r.DMALen()} }

// Encode writes all fields.
func (r RETH) Encode(f *RETHFields) {
	_ = r[RETHSize-1]
	binary.BigEndian.PutUint64(r[0:], f.VA)
	binary.BigEndian.PutUint32(r[8:], f.RKey)
	binary.BigEndian.PutUint32(r[12:], f.DMALen)
}

// ---------------------------------------------------------------- AETH

// AETH is a view of an ACK Extended Transport Header: syndrome(0) MSN(1-3).
type AETH []byte

// AETHFields holds the AETH's fields.
type AETHFields struct {
	Syndrome Syndrome
	MSN      uint32 // 24 bits
}

func (a AETH) Syndrome() Syndrome { return Syndrome(a[0]) }
func (a AETH) MSN() uint32        { return binary.BigEndian.Uint32(a[0:]) & 0xFFFFFF }

// Fields returns all fields.
func (a AETH) Fields() AETHFields { return AETHFields{Syndrome: a.Syndrome(), MSN: a.MSN()} }

// Encode writes all fields.
func (a AETH) Encode(f *AETHFields) {
	binary.BigEndian.PutUint32(a[0:], uint32(f.Syndrome)<<24|f.MSN&0xFFFFFF)
}

// ---------------------------------------------------------------- AtomicETH

// AtomicETH is a view of an Atomic Extended Transport Header: VA(0-7)
// R_Key(8-11) swap-or-add(12-19) compare(20-27).
type AtomicETH []byte

// AtomicETHFields holds the AtomicETH's fields.
type AtomicETHFields struct {
	VA      uint64
	RKey    uint32
	SwapAdd uint64 // swap value (CmpSwap) or add value (FetchAdd)
	Compare uint64 // compare value (CmpSwap)
}

func (a AtomicETH) VA() uint64      { return binary.BigEndian.Uint64(a[0:]) }
func (a AtomicETH) RKey() uint32    { return binary.BigEndian.Uint32(a[8:]) }
func (a AtomicETH) SwapAdd() uint64 { return binary.BigEndian.Uint64(a[12:]) }
func (a AtomicETH) Compare() uint64 { return binary.BigEndian.Uint64(a[20:]) }

// Fields returns all fields.
func (a AtomicETH) Fields() AtomicETHFields {
	return AtomicETHFields{VA: a.VA(), RKey: a.RKey(), SwapAdd: a.SwapAdd(), Compare: a.Compare()}
}

// Encode writes all fields.
func (a AtomicETH) Encode(f *AtomicETHFields) {
	_ = a[AtomicETHSize-1]
	binary.BigEndian.PutUint64(a[0:], f.VA)
	binary.BigEndian.PutUint32(a[8:], f.RKey)
	binary.BigEndian.PutUint64(a[12:], f.SwapAdd)
	binary.BigEndian.PutUint64(a[20:], f.Compare)
}

// ---------------------------------------------------------------- AtomicAckETH

// AtomicAckETH is a view of an Atomic ACK Extended Transport Header: the
// original remote 64-bit value.
type AtomicAckETH []byte

// AtomicAckETHFields holds the AtomicAckETH's field.
type AtomicAckETHFields struct {
	OrigData uint64
}

func (a AtomicAckETH) OrigData() uint64 { return binary.BigEndian.Uint64(a[0:]) }

// Fields returns all fields.
func (a AtomicAckETH) Fields() AtomicAckETHFields { return AtomicAckETHFields{OrigData: a.OrigData()} }

// Encode writes all fields.
func (a AtomicAckETH) Encode(f *AtomicAckETHFields) { binary.BigEndian.PutUint64(a[0:], f.OrigData) }

// ---------------------------------------------------------------- ImmDt

// ImmDt is a view of the Immediate Data header (4 opaque bytes, read as a
// big-endian uint32: the value passes through in network order).
type ImmDt []byte

func (i ImmDt) Imm() uint32 { return binary.BigEndian.Uint32(i[0:]) }

// Encode writes the immediate value.
func (i ImmDt) Encode(imm uint32) { binary.BigEndian.PutUint32(i[0:], imm) }

// ---------------------------------------------------------------- IETH

// IETH is a view of the Invalidate Extended Transport Header: the R_Key to
// invalidate.
type IETH []byte

func (i IETH) RKey() uint32 { return binary.BigEndian.Uint32(i[0:]) }

// Encode writes the R_Key.
func (i IETH) Encode(rkey uint32) { binary.BigEndian.PutUint32(i[0:], rkey) }

// ---------------------------------------------------------------- DETH

// DETH is a view of a Datagram Extended Transport Header: Q_Key(0-3)
// reserved(4) source QPN(5-7).
type DETH []byte

// DETHFields holds the DETH's fields.
type DETHFields struct {
	QKey  uint32
	SrcQP uint32 // 24 bits
}

func (d DETH) QKey() uint32  { return binary.BigEndian.Uint32(d[0:]) }
func (d DETH) SrcQP() uint32 { return binary.BigEndian.Uint32(d[4:]) & 0xFFFFFF }

// Fields returns all fields.
func (d DETH) Fields() DETHFields { return DETHFields{QKey: d.QKey(), SrcQP: d.SrcQP()} }

// Encode writes all fields; the reserved byte becomes 0.
func (d DETH) Encode(f *DETHFields) {
	_ = d[DETHSize-1]
	binary.BigEndian.PutUint32(d[0:], f.QKey)
	binary.BigEndian.PutUint32(d[4:], f.SrcQP&0xFFFFFF)
}

// GSIQKey is the Q_Key of QP1 (rocev2.md §1.5).
const GSIQKey = 0x80010000

// ---------------------------------------------------------------- FETH

// FETH is a view of the FLUSH Extended Transport Header (IBTA 1.5): a 32-bit
// word with placement type in bits 3-0 and selectivity in bits 5-4.
type FETH []byte

// FETHFields holds the FETH's fields.
type FETHFields struct {
	PlacementType uint8 // 4 bits
	Selectivity   uint8 // 2 bits
}

func (f FETH) PlacementType() uint8 { return f[3] & 0x0F }
func (f FETH) Selectivity() uint8   { return (f[3] >> 4) & 3 }

// Fields returns all fields.
func (f FETH) Fields() FETHFields {
	return FETHFields{PlacementType: f.PlacementType(), Selectivity: f.Selectivity()}
}

// Encode writes all fields; reserved bits become 0.
func (f FETH) Encode(v *FETHFields) {
	binary.BigEndian.PutUint32(f[0:], uint32(v.Selectivity&3)<<4|uint32(v.PlacementType&0x0F))
}

// ---------------------------------------------------------------- GRH

// GRH is a view of the 40-byte Global Route Header area at the start of a UD
// receive buffer (rocev2.md §2.2). It has the IPv6 header layout:
// IPVer(4 bits) TClass(8) FlowLabel(20) | PayLen(16) NxtHdr(8) HopLmt(8) |
// SGID(16 bytes) | DGID(16 bytes). For RoCEv2 over IPv4, rxe instead writes 20
// zero bytes followed by the IPv4 header; see FillGRH.
type GRH []byte

// GRHFields holds the GRH's fields.
type GRHFields struct {
	IPVer     uint8
	TClass    uint8
	FlowLabel uint32 // 20 bits
	PayLen    uint16
	NextHdr   uint8
	HopLimit  uint8
	SGID      [16]byte
	DGID      [16]byte
}

func (g GRH) IPVer() uint8      { return g[0] >> 4 }
func (g GRH) TClass() uint8     { return uint8(binary.BigEndian.Uint16(g[0:]) >> 4) }
func (g GRH) FlowLabel() uint32 { return binary.BigEndian.Uint32(g[0:]) & 0xFFFFF }
func (g GRH) PayLen() uint16    { return binary.BigEndian.Uint16(g[4:]) }
func (g GRH) NextHdr() uint8    { return g[6] }
func (g GRH) HopLimit() uint8   { return g[7] }
func (g GRH) SGID() [16]byte    { return [16]byte(g[8:24]) }
func (g GRH) DGID() [16]byte    { return [16]byte(g[24:40]) }

// Fields returns all fields.
func (g GRH) Fields() GRHFields {
	return GRHFields{
		IPVer: g.IPVer(), TClass: g.TClass(), FlowLabel: g.FlowLabel(), PayLen: g.PayLen(),
		NextHdr: g.NextHdr(), HopLimit: g.HopLimit(), SGID: g.SGID(), DGID: g.DGID(),
	}
}

// Encode writes all fields.
func (g GRH) Encode(f *GRHFields) {
	_ = g[GRHSize-1]
	binary.BigEndian.PutUint32(g[0:], uint32(f.IPVer&0x0F)<<28|uint32(f.TClass)<<20|f.FlowLabel&0xFFFFF)
	binary.BigEndian.PutUint16(g[4:], f.PayLen)
	g[6] = f.NextHdr
	g[7] = f.HopLimit
	copy(g[8:24], f.SGID[:])
	copy(g[24:40], f.DGID[:])
}

// FillGRH writes the 40-byte GRH area of a UD receive buffer for a parsed
// packet the way rxe does: IPv6 → the IPv6 header; IPv4 → 20 zero bytes then
// the IPv4 header. dst must hold GRHSize bytes.
func FillGRH(dst GRH, pkt *Packet) {
	_ = dst[GRHSize-1]
	if pkt.IPVersion == 4 {
		clear(dst[:20])
		copy(dst[20:40], pkt.IPHeader)
		return
	}
	copy(dst[:40], pkt.IPHeader)
}

func boolBit(v bool, bit byte) byte {
	if v {
		return bit
	}
	return 0
}

func setBit(b, bit byte, v bool) byte {
	if v {
		return b | bit
	}
	return b &^ bit
}
