package roce

import (
	"encoding/binary"
	"encoding/hex"
	"hash/crc32"
	"math/rand/v2"
	"net/netip"
	"testing"
)

// refICRC is the slow, obviously-correct ICRC straight from rocev2.md §3.1:
// build the pseudo-packet (8 × 0xFF, masked IP/UDP/BTH copy, rest) in a new
// buffer and run crc32.ChecksumIEEE over it. ip ends before the ICRC field.
func refICRC(ip []byte) uint32 {
	hl := IPv4HeaderSize
	if ip[0]>>4 == 6 {
		hl = IPv6HeaderSize
	}
	p := []byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}
	h := append([]byte(nil), ip[:hl+UDPHeaderSize+BTHSize]...)
	if hl == IPv4HeaderSize {
		h[1] = 0xFF               // TOS
		h[8] = 0xFF               // TTL
		h[10], h[11] = 0xFF, 0xFF // header checksum
	} else {
		h[0] |= 0x0F // traffic class high nibble
		h[1] = 0xFF  // traffic class low nibble + flow label
		h[2] = 0xFF
		h[3] = 0xFF
		h[7] = 0xFF // hop limit
	}
	h[hl+6], h[hl+7] = 0xFF, 0xFF // UDP checksum
	h[hl+UDPHeaderSize+4] = 0xFF  // BTH FECN/BECN/resv6a
	p = append(p, h...)
	p = append(p, ip[hl+UDPHeaderSize+BTHSize:]...)
	return crc32.ChecksumIEEE(p)
}

// §3.2 vector: scapy roce.uts, UC SEND Only over IPv4, 78 bytes.
//
//	0000  24 8a 07 a8 fa 22 24 8a 07 a8 fa 22 08 00 45 01   Eth, IPv4 TOS 1
//	0010  00 40 04 78 40 00 40 11 b4 d5 c0 a8 00 07 c0 a8   len 64 id 1144 DF TTL 64
//	0020  00 07 c0 00 12 b7 00 2c 00 00 24 60 ff ff 00 00   UDP 49152→4791 len 44; BTH op 0x24 M PadCnt 2
//	0030  00 d3 00 cf 17 10 46 30 81 8b e2 89 35 d9 0e 9a   DestQP 0xd3 PSN 0xcf1710; payload
//	0040  95 50 54 01 be 88 5e 50 00 00 78 f3 53 f3         18 B payload, 2 pad, ICRC
const vector32 = "248a07a8fa22248a07a8fa22080045010040047840004011b4d5c0a80007c0a80007c00012b7" +
	"002c00002460ffff000000d300cf17104630818be28935d90e9a95505401be885e50000078f353f3"

func TestICRCVector(t *testing.T) {
	f, _ := hex.DecodeString(vector32)
	ip := f[EthHeaderSize : len(f)-ICRCSize]
	const want = 0xF353F378
	got, err := ICRC(ip)
	if err != nil || got != want {
		t.Fatalf("ICRC = %#x, %v; want %#x", got, err, uint32(want))
	}
	if r := refICRC(ip); r != want {
		t.Fatalf("refICRC = %#x, want %#x", r, uint32(want))
	}
	if w := binary.LittleEndian.Uint32(f[len(f)-4:]); w != want {
		t.Fatalf("wire ICRC read LSB first = %#x", w)
	}
	cp := append([]byte(nil), ip...)
	if got := icrcInPlace(cp, false); got != want || string(cp) != string(ip) {
		t.Fatalf("icrcInPlace = %#x (buffer restored: %v)", got, string(cp) == string(ip))
	}
	// The seed form: eight 0xFF bytes leave the register at 0xDEBB20E3.
	if c := crc32.ChecksumIEEE([]byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}); c != icrcSeed {
		t.Fatalf("crc(ff×8) = %#x, want %#x", c, icrcSeed)
	}
	var pkt Packet
	if err := ParseFrame(f, &pkt); err != nil {
		t.Fatal(err)
	}
	if pkt.Opcode != OpUCSendOnly || pkt.BTH.DestQP() != 0xD3 || pkt.BTH.PSN() != 13571856 ||
		len(pkt.Payload) != 18 || pkt.Pad != 2 || !pkt.BTH.MigReq() || pkt.TOS != 1 || !pkt.ICRCOK {
		t.Fatalf("parsed %+v", pkt)
	}
}

// randomFrame builds a random valid frame (random opcode, addresses, fields,
// payload) with BuildFrame.
func randomFrame(r *rand.Rand, buf []byte) []byte {
	ops := Opcodes()
	var p FrameParams
	for i := range 6 {
		p.SrcMAC[i], p.DstMAC[i] = byte(r.Uint32()), byte(r.Uint32())
	}
	if r.IntN(2) == 0 {
		p.SrcIP = netip.AddrFrom4([4]byte{10, 0, byte(r.IntN(256)), byte(r.IntN(256))})
		p.DstIP = netip.AddrFrom4([4]byte{10, 1, byte(r.IntN(256)), byte(r.IntN(256))})
	} else {
		var a, b [16]byte
		for i := range a {
			a[i], b[i] = byte(r.Uint32()), byte(r.Uint32())
		}
		a[0], b[0] = 0xfd, 0xfd
		p.SrcIP, p.DstIP = netip.AddrFrom16(a), netip.AddrFrom16(b)
		p.FlowLabel = r.Uint32() & 0xFFFFF
	}
	p.TOS, p.TTL, p.IPID, p.SrcPort = uint8(r.Uint32()), uint8(r.Uint32()), uint16(r.Uint32()), uint16(r.Uint32())
	info := ops[r.IntN(len(ops))]
	p.BTH = BTHFields{Opcode: info.Opcode, SE: r.IntN(2) == 0, MigReq: r.IntN(2) == 0, PKey: uint16(r.Uint32()),
		FECN: r.IntN(2) == 0, BECN: r.IntN(2) == 0, DestQP: r.Uint32() & 0xFFFFFF, AckReq: r.IntN(2) == 0, PSN: PSN(r.Uint32() & PSNMask)}
	p.RETH = RETHFields{VA: r.Uint64(), RKey: r.Uint32(), DMALen: r.Uint32()}
	p.AETH = AETHFields{Syndrome: Syndrome(r.Uint32() & 0x7F), MSN: r.Uint32() & 0xFFFFFF}
	p.AtomicETH = AtomicETHFields{VA: r.Uint64(), RKey: r.Uint32(), SwapAdd: r.Uint64(), Compare: r.Uint64()}
	p.AtomicAckETH.OrigData = r.Uint64()
	p.Imm, p.InvRKey = r.Uint32(), r.Uint32()
	p.DETH = DETHFields{QKey: r.Uint32(), SrcQP: r.Uint32() & 0xFFFFFF}
	p.FETH = FETHFields{PlacementType: uint8(r.IntN(16)), Selectivity: uint8(r.IntN(4))}
	var n int
	switch info.Payload {
	case PayloadPMTU:
		n = 4 * (1 + r.IntN(256))
	case PayloadLast:
		n = 1 + r.IntN(1024)
	case PayloadOnly:
		n = r.IntN(1025)
	case PayloadAtomic8:
		n = 8
	}
	payload := make([]byte, n)
	for i := range payload {
		payload[i] = byte(r.Uint32())
	}
	m, err := BuildFrame(buf, &p, payload)
	if err != nil {
		panic(err)
	}
	return buf[:m]
}

func TestICRCAgainstReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 2048)
	for i := range 2000 {
		f := randomFrame(r, buf)
		ip := f[EthHeaderSize : len(f)-ICRCSize]
		want := refICRC(ip)
		got, err := ICRC(ip)
		if err != nil || got != want {
			t.Fatalf("frame %d: ICRC %#x, %v; reference %#x", i, got, err, want)
		}
		if w := binary.LittleEndian.Uint32(f[len(f)-4:]); w != want {
			t.Fatalf("frame %d: built ICRC %#x, reference %#x", i, w, want)
		}
	}
}

func TestICRCErrors(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, ErrTruncated},
		{"short v4", append([]byte{0x45}, make([]byte, 38)...), ErrTruncated},
		{"short v6", append([]byte{0x60}, make([]byte, 58)...), ErrTruncated},
		{"version 5", append([]byte{0x50}, make([]byte, 80)...), ErrBadVersion},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ICRC(tc.in); err != tc.want {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
		})
	}
}

func BenchmarkICRC(b *testing.B) {
	for _, n := range []int{64, 1024, 4096} {
		buf := make([]byte, 8192)
		p := writeOnlyParams()
		m, _ := BuildFrame(buf, &p, make([]byte, n))
		ip := buf[EthHeaderSize : m-ICRCSize]
		b.Run("masked/"+itoa(n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(ip)))
			for b.Loop() {
				icrc4(ip)
			}
		})
		b.Run("inplace/"+itoa(n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(ip)))
			for b.Loop() {
				icrcInPlace(ip, false)
			}
		})
	}
}

// icrcInPlace computes the ICRC of a writable ip buffer by setting the masked
// fields to all-ones, running one CRC pass and restoring them: the builder's
// form before icrc4/icrc6 masked the words as they read them, kept as a
// second reference. len(ip) must be checked by the caller.
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

// TestIPv4ChecksumWords: the 32-bit-word sum gives the 16-bit-word sum's
// checksum for any header (a reference loop, random and edge headers).
func TestIPv4ChecksumWords(t *testing.T) {
	ref := func(h []byte) uint16 {
		var sum uint32
		for i := 0; i < IPv4HeaderSize; i += 2 {
			if i != 10 {
				sum += uint32(h[i])<<8 | uint32(h[i+1])
			}
		}
		for sum > 0xFFFF {
			sum = sum&0xFFFF + sum>>16
		}
		return ^uint16(sum)
	}
	h := make([]byte, IPv4HeaderSize)
	check := func() {
		if got, want := ipv4Checksum(h), ref(h); got != want {
			t.Fatalf("header % x: checksum %#04x, want %#04x", h, got, want)
		}
	}
	check()
	for i := range h {
		h[i] = 0xFF
	}
	check()
	x := uint32(1)
	for n := 0; n < 200000; n++ {
		for i := range h {
			x ^= x << 13
			x ^= x >> 17
			x ^= x << 5
			h[i] = byte(x)
		}
		check()
	}
}

// TestSealFrameMatchesBuildFrame: BuildFrameUnsealed then SealFrame gives
// BuildFrame's bytes, whatever the buffer held before, on random frames
// (IPv4 and IPv6, every opcode); SealFrame leaves short or foreign frames
// alone.
func TestSealFrameMatchesBuildFrame(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	buf := make([]byte, 2048)
	out := make([]byte, 2048)
	for i := range 3000 {
		f := randomFrame(r, buf)
		var pkt Packet
		if err := ParseFrame(f, &pkt); err != nil {
			t.Fatal(err)
		}
		var p FrameParams
		pkt.Params(&p)
		for j := range out {
			out[j] = byte(r.Uint32())
		}
		n, err := BuildFrameUnsealed(out, &p, pkt.Payload)
		if err != nil || n != len(f) {
			t.Fatalf("frame %d: unsealed build: %d bytes, %v; want %d", i, n, err, len(f))
		}
		SealFrame(out[:n])
		if string(out[:n]) != string(f) {
			t.Fatalf("frame %d: sealed frame differs from BuildFrame's", i)
		}
	}
	for _, f := range [][]byte{nil, make([]byte, 17), make([]byte, 60)} {
		g := append([]byte(nil), f...)
		SealFrame(g)
		if string(g) != string(f) {
			t.Fatalf("SealFrame changed a %d-byte non-frame", len(f))
		}
	}
}
