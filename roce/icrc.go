package roce

import (
	"encoding/binary"
	"hash/crc32"
)

// icrcSeed is the CRC-32 register after eight 0xFF bytes (the masked LRH
// stand-in of rocev2.md §3.1 step 2). crc32.Update takes and returns the
// finalized (complemented) form, hence the ^.
const icrcSeed = ^uint32(0xDEBB20E3)

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

// icrc4 runs the CRC over the IPv4, UDP and BTH headers (40 bytes, five
// 8-byte words) with the masked fields set to all-ones as the words are
// read — TOS(1), TTL(8), header checksum(10-11), UDP checksum(26-27), BTH
// byte 4 (32) — then over the rest of ip in one crc32 pass. ip is only
// read. len(ip) >= 40.
func icrc4(ip []byte) uint32 {
	_ = ip[39]
	r := ^icrcSeed
	r = crcWord(r, binary.LittleEndian.Uint64(ip[0:])|0xFF<<8)
	r = crcWord(r, binary.LittleEndian.Uint64(ip[8:])|0xFFFF00FF)
	r = crcWord(r, binary.LittleEndian.Uint64(ip[16:]))
	r = crcWord(r, binary.LittleEndian.Uint64(ip[24:])|0xFFFF<<16)
	r = crcWord(r, binary.LittleEndian.Uint64(ip[32:])|0xFF)
	return crc32.Update(^r, crc32.IEEETable, ip[40:])
}

// icrc6 is icrc4 for IPv6: traffic class (byte 0 low nibble, byte 1 high
// nibble), flow label (bytes 1-3), hop limit (7), UDP checksum (46-47),
// BTH byte 4 (52); seven words, then the rest from byte 56. len(ip) >= 60.
func icrc6(ip []byte) uint32 {
	_ = ip[59]
	r := ^icrcSeed
	r = crcWord(r, binary.LittleEndian.Uint64(ip[0:])|0xFF000000FFFFFF0F)
	r = crcWord(r, binary.LittleEndian.Uint64(ip[8:]))
	r = crcWord(r, binary.LittleEndian.Uint64(ip[16:]))
	r = crcWord(r, binary.LittleEndian.Uint64(ip[24:]))
	r = crcWord(r, binary.LittleEndian.Uint64(ip[32:]))
	r = crcWord(r, binary.LittleEndian.Uint64(ip[40:])|0xFFFF<<48)
	r = crcWord(r, binary.LittleEndian.Uint64(ip[48:])|0xFF<<32)
	return crc32.Update(^r, crc32.IEEETable, ip[56:])
}

// crcTab8 are the eight slicing tables of the reflected IEEE CRC-32:
// crcTab8[0] is crc32.IEEETable, crcTab8[k][i] is entry i advanced k more
// zero bytes.
var crcTab8 = func() (t [8][256]uint32) {
	t[0] = *crc32.IEEETable
	for k := 1; k < 8; k++ {
		for i := range 256 {
			v := t[k-1][i]
			t[k][i] = v>>8 ^ t[0][v&0xFF]
		}
	}
	return t
}()

// crcWord advances the (non-complemented) CRC register r over the eight
// bytes of w, least significant byte first.
func crcWord(r uint32, w uint64) uint32 {
	r ^= uint32(w)
	h := uint32(w >> 32)
	return crcTab8[7][r&0xFF] ^ crcTab8[6][r>>8&0xFF] ^ crcTab8[5][r>>16&0xFF] ^ crcTab8[4][r>>24] ^
		crcTab8[3][h&0xFF] ^ crcTab8[2][h>>8&0xFF] ^ crcTab8[1][h>>16&0xFF] ^ crcTab8[0][h>>24]
}

// ipv4Checksum returns the ones'-complement header checksum of a 20-byte
// IPv4 header, treating the checksum field (bytes 10-11) as zero. The
// 16-bit words are summed as 32-bit ones (RFC 1071 §2: the sum is the same
// with end-around carries folded in at the end).
func ipv4Checksum(h []byte) uint16 {
	_ = h[IPv4HeaderSize-1]
	return ipv4ChecksumWords(binary.BigEndian.Uint32(h[0:]), binary.BigEndian.Uint32(h[4:]),
		binary.BigEndian.Uint32(h[8:]), binary.BigEndian.Uint32(h[12:]), binary.BigEndian.Uint32(h[16:]))
}

// ipv4ChecksumWords is ipv4Checksum of the header whose five big-endian
// 32-bit words are w0..w4 (w2's low half, the checksum field, is ignored):
// buildFrame computes it from the words it stores, so that it never reads
// back bytes it has just written.
func ipv4ChecksumWords(w0, w1, w2, w3, w4 uint32) uint16 {
	sum := uint64(w0) + uint64(w1) + uint64(w2&0xFFFF0000) + uint64(w3) + uint64(w4)
	sum = sum&0xFFFFFFFF + sum>>32
	sum = sum&0xFFFF + sum>>16
	sum = sum&0xFFFF + sum>>16
	sum = sum&0xFFFF + sum>>16
	return ^uint16(sum)
}
