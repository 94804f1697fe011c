package roce

import (
	"errors"
	"net/netip"
	"strconv"
	"testing"
)

func itoa(n int) string { return strconv.Itoa(n) }

func writeOnlyParams() FrameParams {
	return FrameParams{
		SrcMAC: [6]byte{0x02, 0, 0, 0, 0, 1}, DstMAC: [6]byte{0x02, 0, 0, 0, 0, 2},
		SrcIP: netip.MustParseAddr("10.0.0.1"), DstIP: netip.MustParseAddr("10.0.0.2"),
		TTL: 64, SrcPort: UDPSourcePort(0, 0x11, 0x12),
		BTH:  BTHFields{Opcode: OpRCWriteOnly, PKey: DefaultPKey, DestQP: 0x12, AckReq: true, PSN: 100},
		RETH: RETHFields{VA: 0x7f0000001000, RKey: 0x1234, DMALen: 64},
	}
}

func TestSourcePorts(t *testing.T) {
	tests := []struct {
		name string
		got  uint16
		want uint16
	}{
		{"RC lqpn 0x1D rqpn 0x1B", UDPSourcePort(0, 0x1D, 0x1B), 0xC30F},
		{"RC symmetric", UDPSourcePort(0, 0x1B, 0x1D), 0xC30F},
		{"QP1", QPSourcePort(1), 0xD872},
		{"UD QPN 0x22", QPSourcePort(0x22), 0xFF28},
		{"flow label given", UDPSourcePort(0x12345, 1, 2), 0xC000 | (0x12345&0x3FFF ^ (0x12345&0xFC000)>>14)},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%s: %#x, want %#x", tc.name, tc.got, tc.want)
		}
	}
}

func TestBuildFrameErrors(t *testing.T) {
	buf := make([]byte, 256)
	tests := []struct {
		name    string
		mod     func(p *FrameParams)
		payload int
		dst     int
		want    error
	}{
		{"unknown opcode", func(p *FrameParams) { p.BTH.Opcode = 0x15 }, 0, 256, ErrBadOpcode},
		{"mixed families", func(p *FrameParams) { p.DstIP = netip.MustParseAddr("fd00::1") }, 0, 256, ErrBadAddress},
		{"no address", func(p *FrameParams) { p.SrcIP = netip.Addr{} }, 0, 256, ErrBadAddress},
		{"payload on ACK", func(p *FrameParams) { p.BTH.Opcode = OpRCAck }, 4, 256, ErrBadLength},
		{"empty Last", func(p *FrameParams) { p.BTH.Opcode = OpRCSendLast }, 0, 256, ErrBadLength},
		{"unaligned First", func(p *FrameParams) { p.BTH.Opcode = OpRCSendFirst }, 5, 256, ErrBadLength},
		{"atomic write 4", func(p *FrameParams) { p.BTH.Opcode = OpRCAtomicWrite }, 4, 256, ErrBadLength},
		{"short dst", func(p *FrameParams) {}, 64, 100, ErrBufferTooSmall},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := writeOnlyParams()
			tc.mod(&p)
			_, err := BuildFrame(buf[:tc.dst], &p, make([]byte, tc.payload))
			var be *BuildError
			if !errors.Is(err, tc.want) || !errors.As(err, &be) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
		})
	}
}

func TestBuildParseAllOpcodes(t *testing.T) {
	for _, info := range Opcodes() {
		for _, v6 := range []bool{false, true} {
			t.Run(info.Name+map[bool]string{false: "/v4", true: "/v6"}[v6], func(t *testing.T) {
				p := writeOnlyParams()
				if v6 {
					p.SrcIP, p.DstIP = netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2")
					p.FlowLabel = 0xABCDE
				}
				p.BTH.Opcode = info.Opcode
				p.AETH = AETHFields{Syndrome: SyndromeACK, MSN: 7}
				p.DETH = DETHFields{QKey: 0x11111111, SrcQP: 0x22}
				p.Imm, p.InvRKey = 0xCAFEBABE, 0x5555
				p.AtomicETH = AtomicETHFields{VA: 8, RKey: 9, SwapAdd: 10, Compare: 11}
				p.AtomicAckETH.OrigData = 12
				p.FETH = FETHFields{PlacementType: 1, Selectivity: 2}
				n := map[PayloadRule]int{PayloadNone: 0, PayloadPMTU: 256, PayloadLast: 3, PayloadOnly: 5, PayloadAtomic8: 8}[info.Payload]
				payload := make([]byte, n)
				for i := range payload {
					payload[i] = byte(i + 1)
				}
				buf := make([]byte, 1024)
				m, err := BuildFrame(buf, &p, payload)
				if err != nil {
					t.Fatal(err)
				}
				if m != FrameLen(&p, n) {
					t.Fatalf("len %d, FrameLen %d", m, FrameLen(&p, n))
				}
				var pkt Packet
				if err := ParseFrame(buf[:m], &pkt); err != nil {
					t.Fatal(err)
				}
				var q FrameParams
				pkt.Params(&q)
				want := p
				want.BTH.PadCnt = uint8(PadLen(n))
				clearAbsent(&want, pkt.Info)
				if v6 {
					want.IPID = 0
				} else {
					want.FlowLabel = 0
				}
				if q != want {
					t.Fatalf("params\n got %+v\nwant %+v", q, want)
				}
				if string(pkt.Payload) != string(payload) {
					t.Fatalf("payload %x", pkt.Payload)
				}
			})
		}
	}
}

// clearAbsent zeroes the header fields an opcode does not carry.
func clearAbsent(p *FrameParams, info *OpcodeInfo) {
	h := info.Headers
	if !h.Has(HdrFETH) {
		p.FETH = FETHFields{}
	}
	if !h.Has(HdrDETH) {
		p.DETH = DETHFields{}
	}
	if !h.Has(HdrRETH) {
		p.RETH = RETHFields{}
	}
	if !h.Has(HdrAtomicETH) {
		p.AtomicETH = AtomicETHFields{}
	}
	if !h.Has(HdrAETH) {
		p.AETH = AETHFields{}
	}
	if !h.Has(HdrAtomicAckETH) {
		p.AtomicAckETH = AtomicAckETHFields{}
	}
	if !h.Has(HdrImmDt) {
		p.Imm = 0
	}
	if !h.Has(HdrIETH) {
		p.InvRKey = 0
	}
}

func BenchmarkBuildWriteOnly64(b *testing.B) {
	p := writeOnlyParams()
	payload := make([]byte, 64)
	buf := make([]byte, 256)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := BuildFrame(buf, &p, payload); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseWriteOnly64(b *testing.B) {
	p := writeOnlyParams()
	buf := make([]byte, 256)
	m, _ := BuildFrame(buf, &p, make([]byte, 64))
	frame := buf[:m]
	pkt := new(Packet)
	b.ReportAllocs()
	for b.Loop() {
		if err := ParseFrame(frame, pkt); err != nil {
			b.Fatal(err)
		}
	}
}
