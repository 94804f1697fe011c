package roce

import (
	"encoding/binary"
	"net/netip"
)

// Packet is a parsed RoCEv2 frame. The []byte fields and header views alias
// the parsed buffer (zero copy); a header view is nil when the opcode does not
// carry that header. The caller owns the Packet and may reuse it: the parsers
// reset it first and never allocate.
type Packet struct {
	// Ethernet (zero when parsed with ParseIP).
	DstMAC, SrcMAC [6]byte
	VLANTags       int // VLAN tags skipped between the MACs and the EtherType

	// IP.
	IPVersion uint8 // 4 or 6
	SrcIP     netip.Addr
	DstIP     netip.Addr
	TOS       uint8  // IPv4 TOS or IPv6 traffic class
	TTL       uint8  // IPv4 TTL or IPv6 hop limit
	IPID      uint16 // IPv4 only
	FlowLabel uint32 // IPv6 only
	IPHeader  []byte // the 20- or 40-byte IP header

	// UDP.
	SrcPort, DstPort uint16

	// Transport.
	BTH          BTH
	Opcode       Opcode
	Info         *OpcodeInfo // the opcode's table row
	FETH         FETH
	DETH         DETH
	RETH         RETH
	AtomicETH    AtomicETH
	AETH         AETH
	AtomicAckETH AtomicAckETH
	ImmDt        ImmDt
	IETH         IETH
	Payload      []byte // without pad
	Pad          uint8  // BTH PadCnt

	// ICRC is the value on the wire (read least-significant byte first),
	// ICRCWant the value computed over the packet. ICRCOK is ICRC == ICRCWant;
	// both are zero/false after ParseTransport.
	ICRC     uint32
	ICRCWant uint32
	ICRCOK   bool

	// Len is the number of input bytes the packet occupies (Ethernet header,
	// VLAN tags and IP total length); the rest of the input is Ethernet
	// padding or FCS.
	Len int
}

// ParseFrame parses an Ethernet frame holding a RoCEv2 packet into pkt. It
// skips VLAN tags (SkipVLAN: 802.1Q and QinQ), and checks lengths,
// EtherType, IP version, the IPv4 header checksum, that the packet is not
// an IP fragment, UDP destination port 4791, IP and UDP lengths against
// each other, BTH TVer 0, the opcode, the extended-header lengths, the pad
// count against the opcode's payload rule, and the ICRC. The ICRC is
// located from the UDP length, so Ethernet padding after it is ignored.
// Error offsets count from the start of the frame, tags included.
//
// Errors are *ParseError wrapping a sentinel (ErrTruncated, ErrNotRoCE,
// ErrBadVersion, ErrBadChecksum, ErrBadLength, ErrBadOpcode, ErrBadICRC).
// The ICRC is checked last: on ErrBadICRC pkt is completely filled (with
// ICRCOK false), so a decoder can show the packet and the expected ICRC.
// ParseFrame never panics and never allocates on success.
func ParseFrame(frame []byte, pkt *Packet) error { return parseFrame(frame, pkt, false) }

// ParseFrameVerified is ParseFrame for a frame whose ICRC is known to be
// the one computed over its bytes: built by BuildFrame and not changed
// since (an in-process wire that delivers exactly the bytes sent says
// so). It skips the ICRC pass and takes ICRCWant to be the wire value,
// and skips the IPv4 header checksum (BuildFrame wrote it over these
// bytes); every other check is ParseFrame's, and on such a frame the
// result is the same. A frame built unsealed (BuildFrameUnsealed) and
// handed over as verified carries no ICRC: its ICRC and ICRCWant are
// whatever its last four bytes hold, and nothing may read them.
func ParseFrameVerified(frame []byte, pkt *Packet) error { return parseFrame(frame, pkt, true) }

func parseFrame(frame []byte, pkt *Packet, verified bool) error {
	*pkt = Packet{}
	if len(frame) < EthHeaderSize {
		return parseErr(LayerEthernet, 0, ErrTruncated, "")
	}
	pkt.DstMAC = [6]byte(frame[0:6])
	pkt.SrcMAC = [6]byte(frame[6:12])
	l3, et, tags := SkipVLAN(frame)
	pkt.VLANTags = tags
	switch {
	case et == EtherTypeIPv4, et == EtherTypeIPv6:
		if err := parseIP(frame[l3:], l3, pkt, verified); err != nil {
			return err
		}
		if (et == EtherTypeIPv4) != (pkt.IPVersion == 4) {
			return parseErr(LayerIP, l3, ErrBadVersion, "IP version does not match EtherType")
		}
		pkt.Len += l3
		return pkt.icrcErr()
	case IsVLANTPID(et):
		return parseErr(LayerEthernet, l3-2, ErrTruncated, "VLAN tag cut short")
	}
	return parseErr(LayerEthernet, l3-2, ErrNotRoCE, "EtherType is not IPv4 or IPv6")
}

// The tag protocol identifiers (TPIDs) of the VLAN tags SkipVLAN skips.
// RoCE with PFC runs on a VLAN (rocev2.md §1.1); the ICRC does not cover
// the tags.
const (
	TPIDVLAN       = 0x8100 // IEEE 802.1Q customer tag
	TPIDQinQ       = 0x88A8 // IEEE 802.1ad service tag (QinQ outer tag)
	TPIDQinQLegacy = 0x9100 // pre-802.1ad QinQ outer tag
	VLANTagSize    = 4      // TPID and TCI
)

// IsVLANTPID reports whether an EtherType field holds the TPID of a VLAN
// tag SkipVLAN skips.
func IsVLANTPID(et uint16) bool {
	return et == TPIDVLAN || et == TPIDQinQ || et == TPIDQinQLegacy
}

// SkipVLAN reads an Ethernet frame's header and any VLAN tags stacked
// after the MACs (802.1Q, and QinQ: 802.1ad or 0x9100 outer tags, as many
// as there are), and returns the offset of what follows them (the IP
// header of a RoCEv2 frame), the EtherType that announces it and the
// number of tags skipped. Untagged, that is EthHeaderSize and the
// frame's EtherType. When a tag is cut short by the end of the frame, et
// is its TPID (IsVLANTPID) and l3 the offset just past that TPID; a frame
// shorter than EthHeaderSize returns zeros. It reads nothing beyond the
// tags and never panics.
func SkipVLAN(frame []byte) (l3 int, et uint16, tags int) {
	if len(frame) < EthHeaderSize {
		return 0, 0, 0
	}
	l3, et = EthHeaderSize, binary.BigEndian.Uint16(frame[12:])
	for IsVLANTPID(et) && len(frame) >= l3+VLANTagSize {
		et = binary.BigEndian.Uint16(frame[l3+2:])
		l3 += VLANTagSize
		tags++
	}
	return l3, et, tags
}

// ParseIP is ParseFrame for a buffer starting at the IP header (raw-IP or
// cooked captures, or a tap below Ethernet). The MAC fields stay zero.
func ParseIP(ip []byte, pkt *Packet) error {
	*pkt = Packet{}
	if err := parseIP(ip, 0, pkt, false); err != nil {
		return err
	}
	return pkt.icrcErr()
}

func (pkt *Packet) icrcErr() error {
	if !pkt.ICRCOK {
		off := pkt.Len - ICRCSize
		return parseErr(LayerICRC, off, ErrBadICRC, "")
	}
	return nil
}

// parseIP parses IP/UDP/transport and computes the ICRC (verified: takes
// the wire value, see ParseFrameVerified); it sets pkt.Len to the IP total
// length. base is the offset of b in the caller's input.
func parseIP(b []byte, base int, pkt *Packet, verified bool) error {
	if len(b) < 1 {
		return parseErr(LayerIP, base, ErrTruncated, "")
	}
	var hl, udpLen int
	switch b[0] >> 4 {
	case 4:
		if len(b) < IPv4HeaderSize {
			return parseErr(LayerIPv4, base, ErrTruncated, "")
		}
		if b[0]&0x0F != 5 {
			return parseErr(LayerIPv4, base, ErrBadLength, "IPv4 options are not supported")
		}
		tl := int(binary.BigEndian.Uint16(b[2:]))
		if tl < IPv4HeaderSize+UDPHeaderSize {
			return parseErr(LayerIPv4, base+2, ErrBadLength, "total length too small")
		}
		if tl > len(b) {
			return parseErr(LayerIPv4, base+2, ErrTruncated, "total length beyond the frame")
		}
		// A verified frame's header checksum is BuildFrame's, over these
		// very bytes: it cannot fail.
		if !verified && binary.BigEndian.Uint16(b[10:]) != ipv4Checksum(b) {
			return parseErr(LayerIPv4, base+10, ErrBadChecksum, "")
		}
		if binary.BigEndian.Uint16(b[6:])&0x3FFF != 0 {
			return parseErr(LayerIPv4, base+6, ErrNotRoCE, "IP fragment")
		}
		if b[9] != 17 {
			return parseErr(LayerIPv4, base+9, ErrNotRoCE, "not UDP")
		}
		pkt.IPVersion = 4
		pkt.TOS = b[1]
		pkt.TTL = b[8]
		pkt.IPID = binary.BigEndian.Uint16(b[4:])
		pkt.SrcIP = netip.AddrFrom4([4]byte(b[12:16]))
		pkt.DstIP = netip.AddrFrom4([4]byte(b[16:20]))
		hl = IPv4HeaderSize
		udpLen = tl - hl
	case 6:
		if len(b) < IPv6HeaderSize {
			return parseErr(LayerIPv6, base, ErrTruncated, "")
		}
		pl := int(binary.BigEndian.Uint16(b[4:]))
		if pl < UDPHeaderSize {
			return parseErr(LayerIPv6, base+4, ErrBadLength, "payload length too small")
		}
		if pl > len(b)-IPv6HeaderSize {
			return parseErr(LayerIPv6, base+4, ErrTruncated, "payload length beyond the frame")
		}
		if b[6] != 17 {
			return parseErr(LayerIPv6, base+6, ErrNotRoCE, "next header is not UDP")
		}
		w0 := binary.BigEndian.Uint32(b[0:])
		pkt.IPVersion = 6
		pkt.TOS = uint8(w0 >> 20)
		pkt.FlowLabel = w0 & 0xFFFFF
		pkt.TTL = b[7]
		pkt.SrcIP = netip.AddrFrom16([16]byte(b[8:24]))
		pkt.DstIP = netip.AddrFrom16([16]byte(b[24:40]))
		hl = IPv6HeaderSize
		udpLen = pl
	default:
		return parseErr(LayerIP, base, ErrBadVersion, "IP version is not 4 or 6")
	}
	pkt.IPHeader = b[:hl:hl]

	udp := b[hl:]
	uoff := base + hl
	pkt.SrcPort = binary.BigEndian.Uint16(udp[0:])
	pkt.DstPort = binary.BigEndian.Uint16(udp[2:])
	if pkt.DstPort != UDPPort {
		return parseErr(LayerUDP, uoff+2, ErrNotRoCE, "UDP destination port is not 4791")
	}
	if int(binary.BigEndian.Uint16(udp[4:])) != udpLen {
		return parseErr(LayerUDP, uoff+4, ErrBadLength, "UDP length does not match the IP length")
	}
	if err := parseTransport(udp[UDPHeaderSize:udpLen], uoff+UDPHeaderSize, pkt); err != nil {
		return err
	}
	end := hl + udpLen - ICRCSize
	pkt.Len = hl + udpLen
	switch {
	case verified:
		pkt.ICRCWant = pkt.ICRC
	case pkt.IPVersion == 4:
		pkt.ICRCWant = icrc4(b[:end])
	default:
		pkt.ICRCWant = icrc6(b[:end])
	}
	pkt.ICRCOK = pkt.ICRCWant == pkt.ICRC
	return nil
}

// ParseTransport parses a UDP payload (BTH through ICRC) into pkt's transport
// fields. It cannot check the ICRC, which covers the IP and UDP headers:
// pkt.ICRC holds the wire value and ICRCOK is false.
func ParseTransport(udpPayload []byte, pkt *Packet) error {
	*pkt = Packet{}
	return parseTransport(udpPayload, 0, pkt)
}

func parseTransport(t []byte, base int, pkt *Packet) error {
	if len(t) < BTHSize+ICRCSize {
		return parseErr(LayerBTH, base, ErrTruncated, "UDP payload too short for BTH and ICRC")
	}
	bth := BTH(t[:BTHSize:BTHSize])
	if bth.TVer() != 0 {
		return parseErr(LayerBTH, base+1, ErrBadVersion, "BTH TVer is not 0")
	}
	op := bth.Opcode()
	info := op.Info()
	if !info.valid {
		return parseErr(LayerBTH, base, ErrBadOpcode, "")
	}
	ext := int(info.extLen)
	if len(t) < BTHSize+ext+ICRCSize {
		return parseErr(LayerExt, base+BTHSize, ErrTruncated, "UDP payload too short for the opcode's headers")
	}
	area := t[BTHSize+ext : len(t)-ICRCSize]
	pad := int(bth.PadCnt())
	if len(area)&3 != 0 {
		return parseErr(LayerPayload, base+BTHSize+ext, ErrBadLength, "payload+pad is not a multiple of 4")
	}
	if pad > len(area) {
		return parseErr(LayerPayload, base+BTHSize+ext, ErrBadLength, "pad count exceeds the payload")
	}
	n := len(area) - pad
	switch info.Payload {
	case PayloadNone:
		if len(area) != 0 {
			return parseErr(LayerPayload, base+BTHSize+ext, ErrBadLength, "opcode carries no payload")
		}
	case PayloadPMTU:
		if pad != 0 || n == 0 {
			return parseErr(LayerPayload, base+BTHSize+ext, ErrBadLength, "First/Middle payload must be a full PMTU")
		}
	case PayloadLast:
		if n == 0 {
			return parseErr(LayerPayload, base+BTHSize+ext, ErrBadLength, "Last packet with empty payload")
		}
	case PayloadAtomic8:
		if n != 8 {
			return parseErr(LayerPayload, base+BTHSize+ext, ErrBadLength, "ATOMIC WRITE payload is not 8 bytes")
		}
	}

	pkt.BTH = bth
	pkt.Opcode = op
	pkt.Info = info
	e := t[BTHSize : BTHSize+ext : BTHSize+ext]
	h := info.Headers
	if h.Has(HdrFETH) {
		o := int(info.offs[HdrFETH])
		pkt.FETH = FETH(e[o : o+FETHSize : o+FETHSize])
	}
	if h.Has(HdrDETH) {
		o := int(info.offs[HdrDETH])
		pkt.DETH = DETH(e[o : o+DETHSize : o+DETHSize])
	}
	if h.Has(HdrRETH) {
		o := int(info.offs[HdrRETH])
		pkt.RETH = RETH(e[o : o+RETHSize : o+RETHSize])
	}
	if h.Has(HdrAtomicETH) {
		o := int(info.offs[HdrAtomicETH])
		pkt.AtomicETH = AtomicETH(e[o : o+AtomicETHSize : o+AtomicETHSize])
	}
	if h.Has(HdrAETH) {
		o := int(info.offs[HdrAETH])
		pkt.AETH = AETH(e[o : o+AETHSize : o+AETHSize])
	}
	if h.Has(HdrAtomicAckETH) {
		o := int(info.offs[HdrAtomicAckETH])
		pkt.AtomicAckETH = AtomicAckETH(e[o : o+AtomicAckETHSize : o+AtomicAckETHSize])
	}
	if h.Has(HdrImmDt) {
		o := int(info.offs[HdrImmDt])
		pkt.ImmDt = ImmDt(e[o : o+ImmDtSize : o+ImmDtSize])
	}
	if h.Has(HdrIETH) {
		o := int(info.offs[HdrIETH])
		pkt.IETH = IETH(e[o : o+IETHSize : o+IETHSize])
	}
	pkt.Payload = area[:n:n]
	pkt.Pad = uint8(pad)
	pkt.ICRC = binary.LittleEndian.Uint32(t[len(t)-ICRCSize:])
	return nil
}

// Params fills fp with everything needed to rebuild pkt with BuildFrame
// (headers the opcode does not carry are left zero).
func (pkt *Packet) Params(fp *FrameParams) {
	*fp = FrameParams{
		SrcMAC: pkt.SrcMAC, DstMAC: pkt.DstMAC,
		SrcIP: pkt.SrcIP, DstIP: pkt.DstIP,
		TOS: pkt.TOS, TTL: pkt.TTL, IPID: pkt.IPID, FlowLabel: pkt.FlowLabel,
		SrcPort: pkt.SrcPort,
	}
	if pkt.BTH != nil {
		fp.BTH = pkt.BTH.Fields()
	}
	if pkt.FETH != nil {
		fp.FETH = pkt.FETH.Fields()
	}
	if pkt.DETH != nil {
		fp.DETH = pkt.DETH.Fields()
	}
	if pkt.RETH != nil {
		fp.RETH = pkt.RETH.Fields()
	}
	if pkt.AtomicETH != nil {
		fp.AtomicETH = pkt.AtomicETH.Fields()
	}
	if pkt.AETH != nil {
		fp.AETH = pkt.AETH.Fields()
	}
	if pkt.AtomicAckETH != nil {
		fp.AtomicAckETH = pkt.AtomicAckETH.Fields()
	}
	if pkt.ImmDt != nil {
		fp.Imm = pkt.ImmDt.Imm()
	}
	if pkt.IETH != nil {
		fp.InvRKey = pkt.IETH.RKey()
	}
}
