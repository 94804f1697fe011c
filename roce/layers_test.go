package roce

import (
	"encoding/hex"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

func TestLayersGolden(t *testing.T) {
	for _, gc := range loadGolden(t) {
		t.Run(gc.Name, func(t *testing.T) {
			frame, _ := hex.DecodeString(gc.Frame)
			var pkt Packet
			if err := ParseFrame(frame, &pkt); err != nil {
				t.Fatal(err)
			}
			gp := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
			if el := gp.ErrorLayer(); el != nil {
				t.Fatal(el.Error())
			}
			// Expected layer sequence after UDP.
			want := []gopacket.LayerType{layers.LayerTypeEthernet, layers.LayerTypeIPv4, layers.LayerTypeUDP, LayerTypeBTH}
			if pkt.IPVersion == 6 {
				want[1] = layers.LayerTypeIPv6
			}
			for h := HeaderKind(0); h < numHeaderKinds; h++ {
				if pkt.Info.Headers.Has(h) {
					want = append(want, *extLayerTypes[h])
				}
			}
			if len(pkt.Payload) > 0 {
				want = append(want, gopacket.LayerTypePayload)
			}
			var got []gopacket.LayerType
			for _, l := range gp.Layers() {
				got = append(got, l.LayerType())
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("layers %v, want %v", got, want)
			}
			bth := gp.Layer(LayerTypeBTH).(*BTHLayer)
			if bth.BTHFields != pkt.BTH.Fields() || bth.ICRC != pkt.ICRC || int(bth.PadCnt) != len(bth.PadBytes) {
				t.Fatalf("BTH layer %+v", bth)
			}
			if l := gp.Layer(LayerTypeRETH); l != nil && l.(*RETHLayer).RETHFields != pkt.RETH.Fields() {
				t.Fatalf("RETH %+v", l)
			}
			if l := gp.Layer(LayerTypeAETH); l != nil && l.(*AETHLayer).AETHFields != pkt.AETH.Fields() {
				t.Fatalf("AETH %+v", l)
			}
			if l := gp.Layer(LayerTypeDETH); l != nil && l.(*DETHLayer).DETHFields != pkt.DETH.Fields() {
				t.Fatalf("DETH %+v", l)
			}
			if l := gp.Layer(LayerTypeImmDt); l != nil && l.(*ImmDtLayer).Imm != pkt.ImmDt.Imm() {
				t.Fatalf("ImmDt %+v", l)
			}
			if l := gp.ApplicationLayer(); len(pkt.Payload) > 0 && (l == nil || string(l.Payload()) != string(pkt.Payload)) {
				t.Fatalf("payload %v", l)
			}

			// Serialize the decoded layers again, patch, compare.
			var sl []gopacket.SerializableLayer
			for _, l := range gp.Layers() {
				sl = append(sl, l.(gopacket.SerializableLayer))
			}
			buf := gopacket.NewSerializeBuffer()
			if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true}, sl...); err != nil {
				t.Fatal(err)
			}
			out := buf.Bytes()
			for i := range 4 { // scramble the ICRC field so PatchFrame must write it
				out[len(frame)-4+i] ^= 0x5A
			}
			if err := PatchFrame(out); err != nil {
				t.Fatal(err)
			}
			if len(out) < len(frame) || hex.EncodeToString(out[:len(frame)]) != gc.Frame {
				t.Fatalf("serialized\n %x\nwant\n %s", out, gc.Frame)
			}
		})
	}
}

func TestDecodingLayerParserNoAlloc(t *testing.T) {
	var (
		eth     layers.Ethernet
		ip4     layers.IPv4
		ip6     layers.IPv6
		udp     layers.UDP
		payload gopacket.Payload
	)
	rl := NewDecodingLayers()
	dl := append([]gopacket.DecodingLayer{&eth, &ip4, &ip6, &udp, &payload}, rl.Layers()...)
	parser := gopacket.NewDecodingLayerParser(layers.LayerTypeEthernet, dl...)
	decoded := make([]gopacket.LayerType, 0, 16)
	for _, gc := range loadGolden(t) {
		frame, _ := hex.DecodeString(gc.Frame)
		if err := parser.DecodeLayers(frame, &decoded); err != nil {
			t.Fatalf("%s: %v", gc.Name, err)
		}
		var pkt Packet
		_ = ParseFrame(frame, &pkt)
		n := 4 + pkt.Info.Headers.count()
		if len(pkt.Payload) > 0 {
			n++
		}
		if len(decoded) != n {
			t.Fatalf("%s: decoded %v", gc.Name, decoded)
		}
		if rl.BTH.BTHFields != pkt.BTH.Fields() {
			t.Fatalf("%s: BTH %+v", gc.Name, rl.BTH.BTHFields)
		}
		if pkt.RETH != nil && rl.RETH.RETHFields != pkt.RETH.Fields() {
			t.Fatalf("%s: RETH", gc.Name)
		}
		allocs := testing.AllocsPerRun(100, func() { _ = parser.DecodeLayers(frame, &decoded) })
		if allocs != 0 {
			t.Fatalf("%s: %v allocs per DecodeLayers", gc.Name, allocs)
		}
	}
}

func (s HeaderSet) count() int {
	n := 0
	for h := HeaderKind(0); h < numHeaderKinds; h++ {
		if s.Has(h) {
			n++
		}
	}
	return n
}

// Example builds an RDMA WRITE ONLY frame with gopacket layers, patches the
// ICRC, and decodes it again with gopacket and with ParseFrame.
func Example() {
	eth := &layers.Ethernet{
		SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2},
		EthernetType: layers.EthernetTypeIPv4,
	}
	ip := &layers.IPv4{Version: 4, TTL: 64, Flags: layers.IPv4DontFragment, Protocol: layers.IPProtocolUDP,
		SrcIP: net.IP{10, 0, 0, 1}, DstIP: net.IP{10, 0, 0, 2}}
	udp := &layers.UDP{SrcPort: layers.UDPPort(UDPSourcePort(0, 0x11, 0x12)), DstPort: UDPPort}
	bth := &BTHLayer{BTHFields: BTHFields{Opcode: OpRCWriteOnly, PKey: DefaultPKey, DestQP: 0x12, AckReq: true, PSN: 100}}
	reth := &RETHLayer{RETHFields: RETHFields{VA: 0x1000, RKey: 0x1234, DMALen: 5}}
	buf := gopacket.NewSerializeBuffer()
	err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true},
		eth, ip, udp, bth, reth, gopacket.Payload("hello"))
	if err != nil {
		panic(err)
	}
	frame := buf.Bytes()
	if err := PatchFrame(frame); err != nil { // IPv4 checksum + ICRC
		panic(err)
	}

	p := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
	var names []string
	for _, l := range p.Layers() {
		names = append(names, l.LayerType().String())
	}
	fmt.Println(strings.Join(names, " "))
	r := p.Layer(LayerTypeRETH).(*RETHLayer)
	fmt.Printf("RETH va=%#x rkey=%#x len=%d\n", r.VA, r.RKey, r.DMALen)

	var pkt Packet
	err = ParseFrame(frame, &pkt)
	fmt.Println(pkt.Opcode, pkt.BTH.PSN(), string(pkt.Payload), pkt.Pad, pkt.ICRCOK, err)
	// Output:
	// Ethernet IPv4 UDP BTH RETH Payload
	// RETH va=0x1000 rkey=0x1234 len=5
	// RC_RDMA_WRITE_ONLY 100 hello 3 true <nil>
}
