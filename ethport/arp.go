package ethport

import (
	"encoding/binary"
	"net/netip"
)

// ARP for IPv4 over Ethernet (RFC 826), as a byte-slice view in the style of
// gVisor's pkg/tcpip/header.

// Ethernet and ARP constants.
const (
	EthHeaderLen  = 14
	EtherTypeARP  = 0x0806
	EtherTypeIPv4 = 0x0800
	ARPLen        = 28 // ARP payload for IPv4 over Ethernet
	ARPFrameLen   = EthHeaderLen + ARPLen

	arpHTypeEthernet = 1
	ARPRequest       = 1
	ARPReply         = 2
)

// Broadcast is the Ethernet broadcast address.
var Broadcast = [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// ARP is a view of an ARP packet (the Ethernet payload).
type ARP []byte

// HardwareType is the htype field (1 = Ethernet).
func (a ARP) HardwareType() uint16 { return binary.BigEndian.Uint16(a[0:]) }

// ProtocolType is the ptype field (0x0800 = IPv4).
func (a ARP) ProtocolType() uint16 { return binary.BigEndian.Uint16(a[2:]) }

// HardwareLen is hlen (6 for Ethernet).
func (a ARP) HardwareLen() uint8 { return a[4] }

// ProtocolLen is plen (4 for IPv4).
func (a ARP) ProtocolLen() uint8 { return a[5] }

// Op is the operation (1 request, 2 reply).
func (a ARP) Op() uint16 { return binary.BigEndian.Uint16(a[6:]) }

// SenderMAC is sha.
func (a ARP) SenderMAC() [6]byte { return [6]byte(a[8:14]) }

// SenderIP is spa.
func (a ARP) SenderIP() netip.Addr { return netip.AddrFrom4([4]byte(a[14:18])) }

// TargetMAC is tha.
func (a ARP) TargetMAC() [6]byte { return [6]byte(a[18:24]) }

// TargetIP is tpa.
func (a ARP) TargetIP() netip.Addr { return netip.AddrFrom4([4]byte(a[24:28])) }

// IsValid reports whether a is a whole IPv4-over-Ethernet ARP packet.
func (a ARP) IsValid() bool {
	return len(a) >= ARPLen && a.HardwareType() == arpHTypeEthernet && a.ProtocolType() == EtherTypeIPv4 &&
		a.HardwareLen() == 6 && a.ProtocolLen() == 4
}

// ARPFields describes an ARP packet to encode.
type ARPFields struct {
	Op                   uint16
	SenderMAC, TargetMAC [6]byte
	SenderIP, TargetIP   netip.Addr // IPv4
}

// Encode writes the 28-byte packet into a (len(a) >= ARPLen).
func (a ARP) Encode(f *ARPFields) {
	binary.BigEndian.PutUint16(a[0:], arpHTypeEthernet)
	binary.BigEndian.PutUint16(a[2:], EtherTypeIPv4)
	a[4], a[5] = 6, 4
	binary.BigEndian.PutUint16(a[6:], f.Op)
	copy(a[8:14], f.SenderMAC[:])
	s := f.SenderIP.As4()
	copy(a[14:18], s[:])
	copy(a[18:24], f.TargetMAC[:])
	d := f.TargetIP.As4()
	copy(a[24:28], d[:])
}

// BuildARPFrame writes an Ethernet frame carrying f into dst (at least
// ARPFrameLen bytes) and returns its length. The frame is not padded to the
// 60-byte minimum: real transports carry frames without padding or FCS.
func BuildARPFrame(dst []byte, ethDst, ethSrc [6]byte, f *ARPFields) int {
	copy(dst[0:6], ethDst[:])
	copy(dst[6:12], ethSrc[:])
	binary.BigEndian.PutUint16(dst[12:], EtherTypeARP)
	ARP(dst[EthHeaderLen:]).Encode(f)
	return ARPFrameLen
}
