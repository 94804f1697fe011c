package roce

import (
	"encoding/binary"
	"hash/crc32"
)

// icrcSeed is the CRC-32 register after eight 0xFF bytes (the masked LRH
// stand-in of rocev2.md §3.1 step 2). crc32.Update takes and returns the
// finalized (complemented) form, hence the ^.
const icrcSeed = ^uint32(0xDEBB20E3)

// ones supplies the all-ones bytes that replace masked fields.
var ones = [8]byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}

// v6Byte0 maps an IPv6 version nibble to byte 0 with its traffic-class
// nibble masked: v<<4 | 0xF.
var v6Byte0 = [16]byte{0x0F, 0x1F, 0x2F, 0x3F, 0x4F, 0x5F, 0x6F, 0x7F, 0x8F, 0x9F, 0xAF, 0xBF, 0xCF, 0xDF, 0xEF, 0xFF}

// Sizes of the fixed IP headers RoCEv2 uses (no IPv4 options, no IPv6
// extension headers).
const (
	IPv4HeaderSize = 20
	IPv6HeaderSize = 40
	UDPHeaderSize  = 8
	EthHeaderSize  = 14
)

// ICRC computes the RoCEv2 invariant CRC (rocev2.md §3.1) of ip, which starts
// at the IPv4 or IPv6 header (chosen by the version nibble) and ends just
// before the 4-byte ICRC field: IP header, UDP header, BTH, extended headers,
// payload and pad. The result is the CRC value; it goes on the wire least
// significant byte first (binary.LittleEndian). ip is not modified and
// nothing is allocated.
func ICRC(ip []byte) (uint32, error) {
	if len(ip) < 1 {
		return 0, ErrTruncated
	}
	switch ip[0] >> 4 {
	case 4:
		if len(ip) < IPv4HeaderSize+UDPHeaderSize+BTHSize {
			return 0, ErrTruncated
		}
		return icrc4(ip), nil
	case 6:
		if len(ip) < IPv6HeaderSize+UDPHeaderSize+BTHSize {
			return 0, ErrTruncated
		}
		return icrc6(ip), nil
	}
	return 0, ErrBadVersion
}

// icrc4 feeds ip to the CRC in pieces, substituting all-ones for the masked
// fields: TOS(1), TTL(8), header checksum(10-11), UDP checksum(26-27), BTH
// byte 4 (32). len(ip) >= 40.
func icrc4(ip []byte) uint32 {
	t := crc32.IEEETable
	c := crc32.Update(icrcSeed, t, ip[0:1]) // version, IHL
	c = crc32.Update(c, t, ones[:1])        // TOS
	c = crc32.Update(c, t, ip[2:8])         // total length, ID, flags, fragment
	c = crc32.Update(c, t, ones[:1])        // TTL
	c = crc32.Update(c, t, ip[9:10])        // protocol
	c = crc32.Update(c, t, ones[:2])        // header checksum
	c = crc32.Update(c, t, ip[12:26])       // addresses, UDP ports, UDP length
	c = crc32.Update(c, t, ones[:2])        // UDP checksum
	c = crc32.Update(c, t, ip[28:32])       // BTH 0-3
	c = crc32.Update(c, t, ones[:1])        // BTH 4: FECN, BECN, resv6a
	return crc32.Update(c, t, ip[33:])      // rest of BTH, ext headers, payload, pad
}

// icrc6: traffic class (byte 0 low nibble, byte 1 high nibble), flow label
// (bytes 1-3), hop limit (7), UDP checksum (46-47), BTH byte 4 (52).
// len(ip) >= 60.
func icrc6(ip []byte) uint32 {
	t := crc32.IEEETable
	v := ip[0] >> 4
	c := crc32.Update(icrcSeed, t, v6Byte0[v:v+1]) // version, TC high nibble masked
	c = crc32.Update(c, t, ones[:3])               // TC low nibble, flow label
	c = crc32.Update(c, t, ip[4:7])                // payload length, next header
	c = crc32.Update(c, t, ones[:1])               // hop limit
	c = crc32.Update(c, t, ip[8:46])               // addresses, UDP ports, UDP length
	c = crc32.Update(c, t, ones[:2])               // UDP checksum
	c = crc32.Update(c, t, ip[48:52])              // BTH 0-3
	c = crc32.Update(c, t, ones[:1])               // BTH 4
	return crc32.Update(c, t, ip[53:])
}

// icrcInPlace computes the ICRC of a writable ip buffer by setting the masked
// fields to all-ones, running one CRC pass and restoring them. It is the
// fastest form; the builder uses it. len(ip) must be checked by the caller.
func icrcInPlace(ip []byte, v6 bool) uint32 {
	if v6 {
		w0 := binary.BigEndian.Uint32(ip[0:])
		hl := ip[7]
		uc := binary.BigEndian.Uint16(ip[46:])
		b4 := ip[52]
		binary.BigEndian.PutUint32(ip[0:], w0|0x0FFFFFFF)
		ip[7] = 0xFF
		binary.BigEndian.PutUint16(ip[46:], 0xFFFF)
		ip[52] = 0xFF
		c := crc32.Update(icrcSeed, crc32.IEEETable, ip)
		binary.BigEndian.PutUint32(ip[0:], w0)
		ip[7] = hl
		binary.BigEndian.PutUint16(ip[46:], uc)
		ip[52] = b4
		return c
	}
	tos, ttl := ip[1], ip[8]
	hc := binary.BigEndian.Uint16(ip[10:])
	uc := binary.BigEndian.Uint16(ip[26:])
	b4 := ip[32]
	ip[1], ip[8] = 0xFF, 0xFF
	binary.BigEndian.PutUint16(ip[10:], 0xFFFF)
	binary.BigEndian.PutUint16(ip[26:], 0xFFFF)
	ip[32] = 0xFF
	c := crc32.Update(icrcSeed, crc32.IEEETable, ip)
	ip[1], ip[8] = tos, ttl
	binary.BigEndian.PutUint16(ip[10:], hc)
	binary.BigEndian.PutUint16(ip[26:], uc)
	ip[32] = b4
	return c
}

// ipv4Checksum returns the ones'-complement header checksum of a 20-byte
// IPv4 header, treating the checksum field (bytes 10-11) as zero.
func ipv4Checksum(h []byte) uint16 {
	_ = h[IPv4HeaderSize-1]
	var sum uint32
	for i := 0; i < IPv4HeaderSize; i += 2 {
		if i == 10 {
			continue
		}
		sum += uint32(h[i])<<8 | uint32(h[i+1])
	}
	for sum > 0xFFFF {
		sum = sum&0xFFFF + sum>>16
	}
	return ^uint16(sum)
}
