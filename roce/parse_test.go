package roce

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

func buildT(t *testing.T, p *FrameParams, payload []byte) []byte {
	t.Helper()
	buf := make([]byte, 2048)
	n, err := BuildFrame(buf, p, payload)
	if err != nil {
		t.Fatal(err)
	}
	return buf[:n]
}

func fixIPv4(f []byte) {
	binary.BigEndian.PutUint16(f[24:], ipv4Checksum(f[14:34]))
}

func TestParseErrors(t *testing.T) {
	w := writeOnlyParams()
	good := buildT(t, &w, make([]byte, 64)) // 14+20+8+12+16+64+4
	ack := w
	ack.BTH.Opcode = OpRCAck
	goodACK := buildT(t, &ack, nil)
	send := w
	send.BTH.Opcode = OpRCSendOnly
	emptySend := buildT(t, &send, nil)
	v6 := w
	v6.SrcIP, v6.DstIP = netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2")
	good6 := buildT(t, &v6, make([]byte, 8))

	tests := []struct {
		name  string
		base  []byte
		mod   func(f []byte) []byte
		want  error
		layer string
	}{
		{"empty", good, func(f []byte) []byte { return nil }, ErrTruncated, LayerEthernet},
		{"ARP", good, func(f []byte) []byte { f[12], f[13] = 8, 6; return f }, ErrNotRoCE, LayerEthernet},
		{"EtherType IPv4, IPv6 inside", good6, func(f []byte) []byte { f[12], f[13] = 8, 0; return f }, ErrBadVersion, LayerIP},
		{"IP version 5", good, func(f []byte) []byte { f[14] = 0x55; return f }, ErrBadVersion, LayerIP},
		{"IPv4 options", good, func(f []byte) []byte { f[14] = 0x46; return f }, ErrBadLength, LayerIPv4},
		{"IPv4 short header", good, func(f []byte) []byte { return f[:30] }, ErrTruncated, LayerIPv4},
		{"IPv4 total length beyond frame", good, func(f []byte) []byte { return f[:len(f)-1] }, ErrTruncated, LayerIPv4},
		{"IPv4 total length tiny", good, func(f []byte) []byte { f[16], f[17] = 0, 20; fixIPv4(f); return f }, ErrBadLength, LayerIPv4},
		{"IPv4 checksum", good, func(f []byte) []byte { f[24] ^= 1; return f }, ErrBadChecksum, LayerIPv4},
		{"IPv4 fragment", good, func(f []byte) []byte { f[20] |= 0x20; fixIPv4(f); return f }, ErrNotRoCE, LayerIPv4},
		{"TCP", good, func(f []byte) []byte { f[23] = 6; fixIPv4(f); return f }, ErrNotRoCE, LayerIPv4},
		{"UDP port", good, func(f []byte) []byte { f[37] = 0xB8; return f }, ErrNotRoCE, LayerUDP},
		{"UDP length", good, func(f []byte) []byte { f[39]--; return f }, ErrBadLength, LayerUDP},
		{"BTH TVer", good, func(f []byte) []byte { f[43] |= 1; return f }, ErrBadVersion, LayerBTH},
		{"opcode 0x15", good, func(f []byte) []byte { f[42] = 0x15; return f }, ErrBadOpcode, LayerBTH},
		{"payload on ACK", good, func(f []byte) []byte { f[42] = byte(OpRCAck); f[43] &^= 0x30; return f }, ErrBadLength, LayerPayload},
		{"pad beyond payload", emptySend, func(f []byte) []byte { f[43] |= 0x30; return f }, ErrBadLength, LayerPayload},
		{"First with pad", good, func(f []byte) []byte { f[42] = byte(OpRCWriteFirst); f[43] |= 0x10; return f }, ErrBadLength, LayerPayload},
		{"empty Last", emptySend, func(f []byte) []byte { f[42] = byte(OpRCSendLast); return f }, ErrBadLength, LayerPayload},
		{"unaligned payload", good, func(f []byte) []byte {
			f = f[:len(f)-1]
			binary.BigEndian.PutUint16(f[16:], uint16(len(f)-14))
			binary.BigEndian.PutUint16(f[38:], uint16(len(f)-34))
			fixIPv4(f)
			return f
		}, ErrBadLength, LayerPayload},
		{"headers cut", goodACK, func(f []byte) []byte { f[42] = byte(OpRCReadRequest); return f }, ErrTruncated, LayerExt},
		{"UDP too short for BTH", goodACK, func(f []byte) []byte {
			f = f[:34+8+12]
			binary.BigEndian.PutUint16(f[16:], uint16(len(f)-14))
			binary.BigEndian.PutUint16(f[38:], uint16(len(f)-34))
			fixIPv4(f)
			return f
		}, ErrTruncated, LayerBTH},
		{"ICRC", good, func(f []byte) []byte { f[len(f)-1] ^= 0x80; return f }, ErrBadICRC, LayerICRC},
		{"payload bit flip", good, func(f []byte) []byte { f[100] ^= 1; return f }, ErrBadICRC, LayerICRC},
		{"IPv6 short", good6, func(f []byte) []byte { return f[:40] }, ErrTruncated, LayerIPv6},
		{"IPv6 payload length beyond frame", good6, func(f []byte) []byte { return f[:len(f)-1] }, ErrTruncated, LayerIPv6},
		{"IPv6 payload length tiny", good6, func(f []byte) []byte { f[18], f[19] = 0, 4; return f }, ErrBadLength, LayerIPv6},
		{"IPv6 next header", good6, func(f []byte) []byte { f[20] = 0; return f }, ErrNotRoCE, LayerIPv6},
		{"IPv6 flow label is masked", good6, func(f []byte) []byte { f[15] ^= 0x0F; return f }, nil, ""},
		{"IPv4 TTL is masked", good, func(f []byte) []byte { f[22]--; fixIPv4(f); return f }, nil, ""},
		{"BTH FECN is masked", good, func(f []byte) []byte { f[46] |= 0x80; return f }, nil, ""},
		{"BTH resv7 is covered", good, func(f []byte) []byte { f[50] |= 1; return f }, ErrBadICRC, LayerICRC},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.mod(append([]byte(nil), tc.base...))
			var pkt Packet
			err := ParseFrame(f, &pkt)
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
			var pe *ParseError
			if !errors.As(err, &pe) || pe.Layer != tc.layer || !strings.HasPrefix(err.Error(), "roce: parse "+tc.layer) {
				t.Fatalf("err %#v (%v), want layer %s", err, err, tc.layer)
			}
			if pe.Offset < 0 || pe.Offset > len(f) {
				t.Fatalf("offset %d", pe.Offset)
			}
			if tc.want == ErrBadICRC && (pkt.BTH == nil || pkt.ICRCOK || pkt.RETH == nil || pkt.ICRC == pkt.ICRCWant) {
				t.Fatalf("bad-ICRC packet not filled: %+v", pkt)
			}
		})
	}
}

func TestParseEthernetPadding(t *testing.T) {
	p := writeOnlyParams()
	p.BTH.Opcode = OpRCSendOnly
	f := buildT(t, &p, nil) // 14+20+8+12+4 = 58 bytes
	if len(f) != 58 {
		t.Fatalf("len %d", len(f))
	}
	padded := append(append([]byte(nil), f...), 0, 0, 0xde, 0xad, 0xbe, 0xef) // Ethernet pad + FCS
	var pkt Packet
	if err := ParseFrame(padded, &pkt); err != nil {
		t.Fatal(err)
	}
	if pkt.Len != 58 || len(pkt.Payload) != 0 || !pkt.ICRCOK {
		t.Fatalf("%+v", pkt)
	}
}

func TestParseIPAndTransport(t *testing.T) {
	p := writeOnlyParams()
	f := buildT(t, &p, []byte("abcd"))
	var pkt Packet
	if err := ParseIP(f[EthHeaderSize:], &pkt); err != nil || !pkt.ICRCOK || pkt.RETH.RKey() != 0x1234 {
		t.Fatalf("ParseIP: %v %+v", err, pkt)
	}
	if err := ParseTransport(f[EthHeaderSize+IPv4HeaderSize+UDPHeaderSize:], &pkt); err != nil ||
		pkt.ICRCOK || string(pkt.Payload) != "abcd" || pkt.BTH.PSN() != 100 {
		t.Fatalf("ParseTransport: %v %+v", err, pkt)
	}
}

func TestParseAllPrefixes(t *testing.T) {
	for _, gc := range loadGolden(t) {
		f := mustHex(t, gc.Frame)
		var pkt Packet
		for n := range len(f) {
			if err := ParseFrame(f[:n], &pkt); err == nil {
				t.Fatalf("%s: prefix %d accepted", gc.Name, n)
			}
		}
	}
}

func TestParseNoAlloc(t *testing.T) {
	var pkt Packet
	for _, gc := range loadGolden(t) {
		f := mustHex(t, gc.Frame)
		if n := testing.AllocsPerRun(50, func() { _ = ParseFrame(f, &pkt) }); n != 0 {
			t.Errorf("%s: %v allocs", gc.Name, n)
		}
		var p FrameParams
		pkt.Params(&p)
		out := make([]byte, len(f))
		if n := testing.AllocsPerRun(50, func() { _, _ = BuildFrame(out, &p, pkt.Payload) }); n != 0 {
			t.Errorf("%s: build %v allocs", gc.Name, n)
		}
	}
}

// TestParseFrameVerified: on frames BuildFrame built (IPv4 and IPv6, with
// and without payload) ParseFrameVerified fills the packet exactly as
// ParseFrame does; on malformed frames it fails as ParseFrame fails.
func TestParseFrameVerified(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		for _, n := range []int{0, 1, 64, 1000} {
			p := writeOnlyParams()
			if v6 {
				p.SrcIP, p.DstIP = netip.MustParseAddr("fe80::1"), netip.MustParseAddr("fe80::2")
			}
			buf := make([]byte, 2048)
			m, err := BuildFrame(buf, &p, make([]byte, n))
			if err != nil {
				t.Fatal(err)
			}
			var a, b Packet
			if err := ParseFrame(buf[:m], &a); err != nil {
				t.Fatal(err)
			}
			if err := ParseFrameVerified(buf[:m], &b); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("v6 %v, %d B: verified %+v, want %+v", v6, n, b, a)
			}
			for _, cut := range []int{10, 30, m - 3} {
				ea, eb := ParseFrame(buf[:cut], &a), ParseFrameVerified(buf[:cut], &b)
				if ea == nil || eb == nil || ea.Error() != eb.Error() {
					t.Fatalf("v6 %v, %d B cut at %d: %v, want %v", v6, n, cut, eb, ea)
				}
			}
		}
	}
}

// TestIPv4HeaderWordsMatchBytes: BuildFrame writes the IPv4 header as five
// words and computes its checksum from them; on random headers the bytes
// are the field-by-field header and the checksum is RFC 1071's over those
// bytes, 16 bits at a time, and ParseFrameVerified (which skips that checksum) fills
// the packet exactly as ParseFrame does.
func TestIPv4HeaderWordsMatchBytes(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 4))
	for i := 0; i < 5000; i++ {
		p := writeOnlyParams()
		var s, d [4]byte
		binary.BigEndian.PutUint32(s[:], rng.Uint32())
		binary.BigEndian.PutUint32(d[:], rng.Uint32())
		p.SrcIP, p.DstIP = netip.AddrFrom4(s), netip.AddrFrom4(d)
		if rng.IntN(4) == 0 { // IPv4-mapped, as GIDs are
			p.SrcIP, p.DstIP = netip.AddrFrom16(p.SrcIP.As16()), netip.AddrFrom16(p.DstIP.As16())
		}
		p.TOS, p.TTL, p.IPID = uint8(rng.Uint32()), uint8(rng.Uint32()), uint16(rng.Uint32())
		n := 1 + rng.IntN(1500)
		buf := make([]byte, 2048)
		m, err := BuildFrame(buf, &p, make([]byte, n))
		if err != nil {
			t.Fatal(err)
		}
		ip := buf[EthHeaderSize : EthHeaderSize+IPv4HeaderSize]
		want := make([]byte, IPv4HeaderSize)
		want[0], want[1] = 0x45, p.TOS
		binary.BigEndian.PutUint16(want[2:], uint16(m-EthHeaderSize))
		binary.BigEndian.PutUint16(want[4:], p.IPID)
		binary.BigEndian.PutUint16(want[6:], 0x4000)
		want[8], want[9] = p.TTL, 17
		copy(want[12:16], s[:])
		copy(want[16:20], d[:])
		binary.BigEndian.PutUint16(want[10:], refIPv4Checksum(want))
		if !bytes.Equal(ip, want) {
			t.Fatalf("header % x, want % x", ip, want)
		}
		var a, b Packet
		if err := ParseFrame(buf[:m], &a); err != nil {
			t.Fatal(err)
		}
		if err := ParseFrameVerified(buf[:m], &b); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("verified %+v, want %+v", b, a)
		}
	}
}

// refIPv4Checksum is RFC 1071 done plainly: the ones'-complement sum of
// the header's 16-bit words, the checksum field taken as zero.
func refIPv4Checksum(h []byte) uint16 {
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
