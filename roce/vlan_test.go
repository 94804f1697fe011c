package roce

import (
	"errors"
	"net/netip"
	"testing"
)

// vlanGolden are frames of cmd/softnic/testdata/captures (written by its
// gen.py, not by BuildFrame): an RC SEND Only of 16 bytes from 10.0.0.1
// to 10.0.0.2, QP 0x11, PSN 1, behind one 802.1Q tag (VID 100, PCP 3)
// and behind a QinQ stack (802.1ad VID 10 outside, 802.1Q VID 100).
const (
	goldenVLAN = "020000000002020000000001" + "8100" + "6064" + "0800" +
		"4500003c00014000401126ae0a0000010a000002" + "c00012b700280000" +
		"0400ffff0000001100000001" + "030a11181f262d343b424950575e656c" + "6a246743"
	goldenQinQ = "020000000002020000000001" + "88a8" + "000a" + "8100" + "0064" + "0800" +
		"4500003c00014000401126ae0a0000010a000002" + "c00012b700280000" +
		"0400ffff0000001100000001" + "030a11181f262d343b424950575e656c" + "6a246743"
)

func TestSkipVLAN(t *testing.T) {
	const macs = "ffffffffffff020000000001"
	for _, c := range []struct {
		name  string
		frame string
		l3    int
		et    uint16
		tags  int
	}{
		{"empty", "", 0, 0, 0},
		{"shorter than the Ethernet header", macs + "08", 0, 0, 0},
		{"untagged IPv4", macs + "0800" + "45", 14, EtherTypeIPv4, 0},
		{"untagged, header only", macs + "86dd", 14, EtherTypeIPv6, 0},
		{"ARP is not skipped", macs + "0806", 14, 0x0806, 0},
		{"802.1Q", macs + "8100" + "6064" + "0800" + "45", 18, EtherTypeIPv4, 1},
		{"802.1Q, priority tag VID 0", macs + "8100" + "e000" + "86dd", 18, EtherTypeIPv6, 1},
		{"QinQ 802.1ad", macs + "88a8" + "000a" + "8100" + "0064" + "0800", 22, EtherTypeIPv4, 2},
		{"QinQ 0x9100", macs + "9100" + "000a" + "8100" + "0064" + "86dd", 22, EtherTypeIPv6, 2},
		{"three tags", macs + "88a8" + "0001" + "88a8" + "0002" + "8100" + "0003" + "0800", 26, EtherTypeIPv4, 3},
		{"802.1Q then RoCEv1", macs + "8100" + "0064" + "8915", 18, 0x8915, 1},
		{"tag cut in its TCI", macs + "8100" + "00", 14, TPIDVLAN, 0},
		{"tag without the EtherType after it", macs + "8100" + "0064", 14, TPIDVLAN, 0},
		{"inner tag cut", macs + "88a8" + "000a" + "8100" + "00", 18, TPIDVLAN, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			l3, et, tags := SkipVLAN(mustHex(t, c.frame))
			if l3 != c.l3 || et != c.et || tags != c.tags {
				t.Errorf("SkipVLAN = %d, %#04x, %d; want %d, %#04x, %d", l3, et, tags, c.l3, c.et, c.tags)
			}
		})
	}
}

// TestParseFrameVLAN: ParseFrame reads a RoCEv2 frame behind VLAN tags as
// the same packet as without them (the ICRC does not cover the tags);
// only VLANTags, Len and error offsets count the tags.
func TestParseFrameVLAN(t *testing.T) {
	for _, c := range []struct {
		name   string
		frame  string
		tags   int
		untag  func(f []byte) []byte // the frame with its tags taken out
		l3     int
		wantIP netip.Addr
	}{
		{"802.1Q golden", goldenVLAN, 1, func(f []byte) []byte { return append(f[:12:12], f[16:]...) }, 18, netip.MustParseAddr("10.0.0.2")},
		{"QinQ golden", goldenQinQ, 2, func(f []byte) []byte { return append(f[:12:12], f[20:]...) }, 22, netip.MustParseAddr("10.0.0.2")},
	} {
		t.Run(c.name, func(t *testing.T) {
			frame := mustHex(t, c.frame)
			var pkt Packet
			if err := ParseFrame(frame, &pkt); err != nil {
				t.Fatal(err)
			}
			if pkt.VLANTags != c.tags || pkt.Len != len(frame) || pkt.DstIP != c.wantIP ||
				pkt.Opcode != OpRCSendOnly || pkt.BTH.DestQP() != 0x11 || pkt.BTH.PSN() != 1 || len(pkt.Payload) != 16 || !pkt.ICRCOK {
				t.Fatalf("parsed %+v", pkt)
			}
			if &pkt.IPHeader[0] != &frame[c.l3] {
				t.Errorf("IP header not at offset %d of the frame", c.l3)
			}
			var v Packet
			if err := ParseFrameVerified(frame, &v); err != nil || v.VLANTags != c.tags || v.Len != pkt.Len {
				t.Errorf("verified: %v, %+v", err, v)
			}
			// The same packet untagged: every field but the tags' own.
			plain := c.untag(append([]byte(nil), frame...))
			var u Packet
			if err := ParseFrame(plain, &u); err != nil {
				t.Fatal(err)
			}
			var pp, up FrameParams
			pkt.Params(&pp)
			u.Params(&up)
			if pp != up || string(pkt.Payload) != string(u.Payload) || pkt.ICRC != u.ICRC || u.VLANTags != 0 || pkt.Len != u.Len+VLANTagSize*c.tags {
				t.Errorf("tagged %+v\nuntagged %+v", pkt, u)
			}
			// A bad ICRC is still found behind the tags.
			bad := append([]byte(nil), frame...)
			bad[len(bad)-1] ^= 1
			err := ParseFrame(bad, &pkt)
			var pe *ParseError
			if !errors.Is(err, ErrBadICRC) || !errors.As(err, &pe) || pe.Offset != len(frame)-ICRCSize || pkt.BTH == nil {
				t.Errorf("flipped ICRC: %v", err)
			}
		})
	}
}

// TestParseFrameVLANErrors: errors behind tags are those of the untagged
// frame, their offsets counted from the start of the frame.
func TestParseFrameVLANErrors(t *testing.T) {
	golden := func(t *testing.T) []byte { return mustHex(t, goldenVLAN) }
	for _, c := range []struct {
		name   string
		mod    func(f []byte) []byte
		want   error
		layer  string
		offset int
	}{
		{"tag cut short", func(f []byte) []byte { return f[:16] }, ErrTruncated, LayerEthernet, 12},
		{"inner EtherType ARP", func(f []byte) []byte { f[16], f[17] = 0x08, 0x06; return f }, ErrNotRoCE, LayerEthernet, 16},
		{"inner EtherType IPv6, IPv4 inside", func(f []byte) []byte { f[16], f[17] = 0x86, 0xdd; return f }, ErrBadVersion, LayerIP, 18},
		{"IPv4 checksum", func(f []byte) []byte { f[18+10] ^= 1; return f }, ErrBadChecksum, LayerIPv4, 28},
		{"UDP port", func(f []byte) []byte { f[38+3] = 0xb8; return f }, ErrNotRoCE, LayerUDP, 40},
		{"IP total length beyond the frame", func(f []byte) []byte { return f[:len(f)-1] }, ErrTruncated, LayerIPv4, 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			var pkt Packet
			err := ParseFrame(c.mod(golden(t)), &pkt)
			var pe *ParseError
			if !errors.Is(err, c.want) || !errors.As(err, &pe) || pe.Layer != c.layer || pe.Offset != c.offset {
				t.Errorf("got %v (%+v); want %v in %s at %d", err, pe, c.want, c.layer, c.offset)
			}
		})
	}
}
