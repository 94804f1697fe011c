package roce

import (
	"encoding/binary"
	"net/netip"
)

// UDPPort is the RoCEv2 UDP destination port, used for requests and
// responses alike.
const UDPPort = 4791

// EtherTypes of the frames the builder writes and the parser accepts.
const (
	EtherTypeIPv4 = 0x0800
	EtherTypeIPv6 = 0x86DD
)

// DefaultPKey is the default partition key (full member), what rxe sends.
const DefaultPKey = 0xFFFF

// MinFrameLen is the Ethernet minimum frame length without FCS. BuildFrame
// does not pad to it; a link model that needs it appends zeros after the ICRC
// (parsers find the ICRC from the UDP length).
const MinFrameLen = 60

// FrameParams describes one RoCEv2 frame for BuildFrame. Which extended
// headers are written is decided by BTH.Opcode via the opcode table; the
// other header fields are ignored.
type FrameParams struct {
	SrcMAC, DstMAC [6]byte
	// SrcIP and DstIP must both be IPv4 (IPv4-mapped IPv6 counts as IPv4,
	// like a RoCEv2 GID) or both IPv6.
	SrcIP, DstIP netip.Addr
	TOS          uint8  // IPv4 TOS byte (DSCP+ECN) or IPv6 traffic class
	TTL          uint8  // IPv4 TTL or IPv6 hop limit (rxe: 64)
	IPID         uint16 // IPv4 identification
	FlowLabel    uint32 // IPv6 flow label, 20 bits (rxe: 0)
	SrcPort      uint16 // UDP source port, see UDPSourcePort/QPSourcePort

	BTH          BTHFields // PadCnt is computed by BuildFrame
	FETH         FETHFields
	DETH         DETHFields
	RETH         RETHFields
	AtomicETH    AtomicETHFields
	AETH         AETHFields
	AtomicAckETH AtomicAckETHFields
	Imm          uint32 // ImmDt
	InvRKey      uint32 // IETH
}

func (p *FrameParams) is6() (v6, ok bool) {
	s, d := p.SrcIP.Unmap(), p.DstIP.Unmap()
	switch {
	case s.Is4() && d.Is4():
		return false, true
	case s.Is6() && d.Is6():
		return true, true
	}
	return false, false
}

// PadLen returns the pad for a payload of n bytes: (-n) mod 4.
func PadLen(n int) int { return -n & 3 }

// HeaderLen returns the number of bytes before the payload in a frame built
// from p: Ethernet, IP, UDP, BTH and extended headers. A caller may place the
// payload at dst[HeaderLen(p):] itself and pass that slice to BuildFrame,
// which then copies nothing.
func HeaderLen(p *FrameParams) int {
	v6, _ := p.is6()
	n := EthHeaderSize + IPv4HeaderSize + UDPHeaderSize + BTHSize + p.BTH.Opcode.Info().ExtLen()
	if v6 {
		n += IPv6HeaderSize - IPv4HeaderSize
	}
	return n
}

// FrameLen returns the length of the frame BuildFrame writes for p and a
// payload of payloadLen bytes (no Ethernet minimum padding, no FCS).
func FrameLen(p *FrameParams, payloadLen int) int {
	return HeaderLen(p) + payloadLen + PadLen(payloadLen) + ICRCSize
}

func buildErr(field string, err error, detail string) *BuildError {
	return &BuildError{Field: field, Err: err, Detail: detail}
}

// BuildFrame writes an Ethernet/IPv4-or-IPv6/UDP/BTH/extended headers/
// payload/pad/ICRC frame into dst and returns its length. It sets BTH PadCnt
// from len(payload), the IPv4 header checksum and DF, UDP destination port
// 4791, UDP checksum 0, and the ICRC. It allocates nothing. payload may alias
// dst at offset HeaderLen(p).
//
// It rejects an unknown opcode (ErrBadOpcode), mixed or missing addresses
// (ErrBadAddress), payload where the opcode allows none, an empty Last packet
// or an ATOMIC WRITE that is not 8 bytes (ErrBadLength), and a short dst
// (ErrBufferTooSmall). It does not know the path MTU and so does not check
// First/Middle sizes beyond 4-byte alignment.
func BuildFrame(dst []byte, p *FrameParams, payload []byte) (int, error) {
	return buildFrame(dst, p, payload, true)
}

// BuildFrameUnsealed is BuildFrame without the ICRC: the frame's last four
// bytes are left as they were in dst. SealFrame computes them later, so a
// frame nobody reads before its receiver trusts its sender (an in-process
// wire that delivers the bytes unchanged, wire.Port.SendUnsealed) costs no
// CRC pass. Sealed, the frame is byte for byte BuildFrame's.
func BuildFrameUnsealed(dst []byte, p *FrameParams, payload []byte) (int, error) {
	return buildFrame(dst, p, payload, false)
}

// SealFrame writes the ICRC of a frame built by BuildFrameUnsealed (its
// last four bytes), exactly as BuildFrame would have. A frame too short
// or of another EtherType is left alone: it never panics.
func SealFrame(f []byte) {
	if len(f) < EthHeaderSize+ICRCSize {
		return
	}
	ip := f[EthHeaderSize : len(f)-ICRCSize]
	var c uint32
	switch binary.BigEndian.Uint16(f[12:]) {
	case EtherTypeIPv4:
		if len(ip) < IPv4HeaderSize+UDPHeaderSize+BTHSize {
			return
		}
		c = icrc4(ip)
	case EtherTypeIPv6:
		if len(ip) < IPv6HeaderSize+UDPHeaderSize+BTHSize {
			return
		}
		c = icrc6(ip)
	default:
		return
	}
	binary.LittleEndian.PutUint32(f[len(f)-ICRCSize:], c)
}

func buildFrame(dst []byte, p *FrameParams, payload []byte, seal bool) (int, error) {
	info := p.BTH.Opcode.Info()
	if !info.valid {
		return 0, buildErr("BTH.Opcode", ErrBadOpcode, "")
	}
	v6, ok := p.is6()
	if !ok {
		return 0, buildErr("SrcIP/DstIP", ErrBadAddress, "need two IPv4 or two IPv6 addresses")
	}
	n := len(payload)
	switch info.Payload {
	case PayloadNone:
		if n != 0 {
			return 0, buildErr("payload", ErrBadLength, "opcode carries no payload")
		}
	case PayloadPMTU:
		if n == 0 || n&3 != 0 {
			return 0, buildErr("payload", ErrBadLength, "First/Middle payload must be a non-empty multiple of 4")
		}
	case PayloadLast:
		if n == 0 {
			return 0, buildErr("payload", ErrBadLength, "Last packet needs at least one byte")
		}
	case PayloadAtomic8:
		if n != 8 {
			return 0, buildErr("payload", ErrBadLength, "ATOMIC WRITE carries 8 bytes")
		}
	}
	pad := PadLen(n)
	ipLen := IPv4HeaderSize
	if v6 {
		ipLen = IPv6HeaderSize
	}
	udpLen := UDPHeaderSize + BTHSize + info.ExtLen() + n + pad + ICRCSize
	if udpLen+ipLen > 0xFFFF {
		return 0, buildErr("payload", ErrBadLength, "frame exceeds the IP length limit")
	}
	total := EthHeaderSize + ipLen + udpLen
	if len(dst) < total {
		return 0, buildErr("dst", ErrBufferTooSmall, "")
	}
	f := dst[:total]

	// Ethernet.
	copy(f[0:6], p.DstMAC[:])
	copy(f[6:12], p.SrcMAC[:])
	ip := f[EthHeaderSize:]
	if v6 {
		binary.BigEndian.PutUint16(f[12:], EtherTypeIPv6)
		binary.BigEndian.PutUint32(ip[0:], 6<<28|uint32(p.TOS)<<20|p.FlowLabel&0xFFFFF)
		binary.BigEndian.PutUint16(ip[4:], uint16(udpLen))
		ip[6] = 17
		ip[7] = p.TTL
		s, d := p.SrcIP.As16(), p.DstIP.As16()
		copy(ip[8:24], s[:])
		copy(ip[24:40], d[:])
	} else {
		binary.BigEndian.PutUint16(f[12:], EtherTypeIPv4)
		// Version 4, IHL 5, TOS, total length; IP ID, DF; TTL, UDP and
		// the checksum, computed from these words (not read back).
		s, d := p.SrcIP.Unmap().As4(), p.DstIP.Unmap().As4()
		w0 := 0x45<<24 | uint32(p.TOS)<<16 | uint32(uint16(ipLen+udpLen))
		w1 := uint32(p.IPID)<<16 | 0x4000
		w2 := uint32(p.TTL)<<24 | 17<<16
		w3, w4 := binary.BigEndian.Uint32(s[:]), binary.BigEndian.Uint32(d[:])
		w2 |= uint32(ipv4ChecksumWords(w0, w1, w2, w3, w4))
		_ = ip[IPv4HeaderSize-1]
		binary.BigEndian.PutUint32(ip[0:], w0)
		binary.BigEndian.PutUint32(ip[4:], w1)
		binary.BigEndian.PutUint32(ip[8:], w2)
		binary.BigEndian.PutUint32(ip[12:], w3)
		binary.BigEndian.PutUint32(ip[16:], w4)
	}
	udp := ip[ipLen:]
	binary.BigEndian.PutUint16(udp[0:], p.SrcPort)
	binary.BigEndian.PutUint16(udp[2:], UDPPort)
	binary.BigEndian.PutUint16(udp[4:], uint16(udpLen))
	udp[6], udp[7] = 0, 0

	t := udp[UDPHeaderSize:]
	bth := BTH(t[:BTHSize])
	bth.Encode(&p.BTH)
	bth.SetPadCnt(uint8(pad))
	writeExt(t[BTHSize:BTHSize+info.ExtLen()], info, p)

	off := BTHSize + info.ExtLen()
	copy(t[off:off+n], payload)
	off += n
	clear(t[off : off+pad])
	off += pad
	if !seal {
		return total, nil
	}
	c := ip[:ipLen+udpLen-ICRCSize]
	if v6 {
		binary.LittleEndian.PutUint32(t[off:], icrc6(c))
	} else {
		binary.LittleEndian.PutUint32(t[off:], icrc4(c))
	}
	return total, nil
}

// writeExt writes the extended headers of info from p into ext.
func writeExt(ext []byte, info *OpcodeInfo, p *FrameParams) {
	h := info.Headers
	if h.Has(HdrFETH) {
		o := info.offs[HdrFETH]
		FETH(ext[o : o+FETHSize]).Encode(&p.FETH)
	}
	if h.Has(HdrDETH) {
		o := info.offs[HdrDETH]
		DETH(ext[o : o+DETHSize]).Encode(&p.DETH)
		ext[o+4] = 0
	}
	if h.Has(HdrRETH) {
		o := info.offs[HdrRETH]
		RETH(ext[o : o+RETHSize]).Encode(&p.RETH)
	}
	if h.Has(HdrAtomicETH) {
		o := info.offs[HdrAtomicETH]
		AtomicETH(ext[o : o+AtomicETHSize]).Encode(&p.AtomicETH)
	}
	if h.Has(HdrAETH) {
		o := info.offs[HdrAETH]
		AETH(ext[o : o+AETHSize]).Encode(&p.AETH)
	}
	if h.Has(HdrAtomicAckETH) {
		o := info.offs[HdrAtomicAckETH]
		AtomicAckETH(ext[o : o+AtomicAckETHSize]).Encode(&p.AtomicAckETH)
	}
	if h.Has(HdrImmDt) {
		o := info.offs[HdrImmDt]
		ImmDt(ext[o : o+ImmDtSize]).Encode(p.Imm)
	}
	if h.Has(HdrIETH) {
		o := info.offs[HdrIETH]
		IETH(ext[o : o+IETHSize]).Encode(p.InvRKey)
	}
	if h.Has(HdrCNPPad) {
		o := info.offs[HdrCNPPad]
		clear(ext[o : o+CNPPadSize])
	}
}

// QPSourcePort is the UDP source port rxe gives a QP at creation, used by UD
// and GSI (QP1) packets: 0xC000 + the top 14 bits of qpn × 0x61C88647
// (kernel hash_32(qpn, 14); rocev2.md §1.3).
func QPSourcePort(qpn uint32) uint16 {
	return uint16(0xC000 + (qpn*0x61C88647)>>(32-14))
}

// UDPSourcePort is the UDP source port of an RC/UC QP whose address vector
// has a GRH (rdma_get_udp_sport; rocev2.md §1.3). A zero flow label is
// derived from the QPN pair, so both directions of a connection get the same
// port.
func UDPSourcePort(flowLabel, lqpn, rqpn uint32) uint16 {
	fl := flowLabel & 0xFFFFF
	if fl == 0 {
		v := uint64(lqpn) * uint64(rqpn)
		v ^= v >> 20
		v ^= v >> 40
		fl = uint32(v) & 0xFFFFF
	}
	return uint16(0xC000 | (fl&0x3FFF ^ (fl&0xFC000)>>14))
}
