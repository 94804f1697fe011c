package roce

import (
	"encoding/hex"
	"net/netip"

	"github.com/softnic/softnic/sim"
	"testing"
)

func mustHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestViewsGolden(t *testing.T) {
	tests := []struct {
		name   string
		hex    string
		encode func(b []byte)
		check  func(t *testing.T, b []byte)
	}{
		{
			// 0a            opcode RC WRITE ONLY
			// b5            SE=1 M=0 PadCnt=3 TVer=5
			// ffff          P_Key
			// c0 00001b     FECN BECN, DestQP 0x1b
			// 80 532a2f     AckReq, PSN 0x532a2f
			name: "BTH", hex: "0ab5ffffc000001b80532a2f",
			encode: func(b []byte) {
				BTH(b).Encode(&BTHFields{Opcode: OpRCWriteOnly, SE: true, PadCnt: 3, TVer: 5, PKey: 0xFFFF,
					FECN: true, BECN: true, DestQP: 0x1B, AckReq: true, PSN: 0x532A2F})
			},
			check: func(t *testing.T, b []byte) {
				v := BTH(b)
				if v.Opcode() != OpRCWriteOnly || !v.SE() || v.MigReq() || v.PadCnt() != 3 || v.TVer() != 5 ||
					v.PKey() != 0xFFFF || !v.FECN() || !v.BECN() || v.DestQP() != 0x1B || !v.AckReq() || v.PSN() != 0x532A2F {
					t.Fatalf("%+v", v.Fields())
				}
			},
		},
		{
			// 00007f1234567000  VA
			// 00abcdef          R_Key
			// 00000040          DMA length 64
			name: "RETH", hex: "00007f123456700000abcdef00000040",
			encode: func(b []byte) { RETH(b).Encode(&RETHFields{VA: 0x7F1234567000, RKey: 0xABCDEF, DMALen: 64}) },
			check: func(t *testing.T, b []byte) {
				if f := RETH(b).Fields(); f != (RETHFields{VA: 0x7F1234567000, RKey: 0xABCDEF, DMALen: 64}) {
					t.Fatalf("%+v", f)
				}
			},
		},
		{
			// 60 0003e8  NAK PSN sequence error, MSN 1000
			name: "AETH", hex: "600003e8",
			encode: func(b []byte) { AETH(b).Encode(&AETHFields{Syndrome: SyndromeNAKPSNSeq, MSN: 1000}) },
			check: func(t *testing.T, b []byte) {
				a := AETH(b)
				if !a.Syndrome().IsNAK() || a.Syndrome().Value() != NAKPSNSequenceError || a.MSN() != 1000 {
					t.Fatalf("%+v", a.Fields())
				}
			},
		},
		{
			// 0000000000002000 VA, 00000077 R_Key, 0000000000000001 add, 0000000000000002 compare
			name: "AtomicETH", hex: "000000000000200000000077" + "0000000000000001" + "0000000000000002",
			encode: func(b []byte) {
				AtomicETH(b).Encode(&AtomicETHFields{VA: 0x2000, RKey: 0x77, SwapAdd: 1, Compare: 2})
			},
			check: func(t *testing.T, b []byte) {
				if f := AtomicETH(b).Fields(); f != (AtomicETHFields{VA: 0x2000, RKey: 0x77, SwapAdd: 1, Compare: 2}) {
					t.Fatalf("%+v", f)
				}
			},
		},
		{
			name: "AtomicAckETH", hex: "0102030405060708",
			encode: func(b []byte) { AtomicAckETH(b).Encode(&AtomicAckETHFields{OrigData: 0x0102030405060708}) },
			check: func(t *testing.T, b []byte) {
				if AtomicAckETH(b).OrigData() != 0x0102030405060708 {
					t.Fatal()
				}
			},
		},
		{
			name: "ImmDt", hex: "deadbeef",
			encode: func(b []byte) { ImmDt(b).Encode(0xDEADBEEF) },
			check: func(t *testing.T, b []byte) {
				if ImmDt(b).Imm() != 0xDEADBEEF {
					t.Fatal()
				}
			},
		},
		{
			name: "IETH", hex: "00001234",
			encode: func(b []byte) { IETH(b).Encode(0x1234) },
			check: func(t *testing.T, b []byte) {
				if IETH(b).RKey() != 0x1234 {
					t.Fatal()
				}
			},
		},
		{
			// 80010000 Q_Key (GSI), 00 reserved, 000001 source QP
			name: "DETH", hex: "8001000000000001",
			encode: func(b []byte) { DETH(b).Encode(&DETHFields{QKey: GSIQKey, SrcQP: 1}) },
			check: func(t *testing.T, b []byte) {
				if f := DETH(b).Fields(); f != (DETHFields{QKey: GSIQKey, SrcQP: 1}) {
					t.Fatalf("%+v", f)
				}
			},
		},
		{
			// bits 5-4 selectivity 1, bits 3-0 placement type 2
			name: "FETH", hex: "00000012",
			encode: func(b []byte) { FETH(b).Encode(&FETHFields{PlacementType: 2, Selectivity: 1}) },
			check: func(t *testing.T, b []byte) {
				if f := FETH(b).Fields(); f != (FETHFields{PlacementType: 2, Selectivity: 1}) {
					t.Fatalf("%+v", f)
				}
			},
		},
		{
			// 6 68 abcde: version 6, TClass 0x68, flow label 0xabcde; paylen 0x20,
			// next header 17, hop limit 64; SGID fd00::1; DGID fd00::2
			name: "GRH", hex: "668abcde" + "00201140" + "fd000000000000000000000000000001" + "fd000000000000000000000000000002",
			encode: func(b []byte) {
				GRH(b).Encode(&GRHFields{IPVer: 6, TClass: 0x68, FlowLabel: 0xABCDE, PayLen: 0x20, NextHdr: 17, HopLimit: 64,
					SGID: netip.MustParseAddr("fd00::1").As16(), DGID: netip.MustParseAddr("fd00::2").As16()})
			},
			check: func(t *testing.T, b []byte) {
				g := GRH(b)
				if g.IPVer() != 6 || g.TClass() != 0x68 || g.FlowLabel() != 0xABCDE || g.PayLen() != 0x20 ||
					g.NextHdr() != 17 || g.HopLimit() != 64 || g.SGID() != netip.MustParseAddr("fd00::1").As16() {
					t.Fatalf("%+v", g.Fields())
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want := mustHex(t, tc.hex)
			tc.check(t, want)
			got := make([]byte, len(want))
			for i := range got {
				got[i] = 0xEE // Encode must overwrite every byte
			}
			tc.encode(got)
			if hex.EncodeToString(got) != tc.hex {
				t.Fatalf("encoded %x, want %s", got, tc.hex)
			}
		})
	}
}

func TestBTHSetters(t *testing.T) {
	b := BTH(mustHex(t, "0ab5ffffc000001b80532a2f"))
	b.SetPSN(0x123456)
	b.SetDestQP(0xABCDEF)
	b.SetAckReq(false)
	b.SetPadCnt(1)
	b.SetOpcode(OpRCSendOnly)
	if got := hex.EncodeToString(b); got != "0495ffffc0abcdef00123456" {
		t.Fatalf("%s", got)
	}
}

func TestPSN(t *testing.T) {
	tests := []struct {
		name string
		got  any
		want any
	}{
		{"add wraps", PSN(0xFFFFFF).Add(1), PSN(0)},
		{"add negative", PSN(0).Add(-1), PSN(0xFFFFFF)},
		{"next", PSN(0xFFFFFE).Next(), PSN(0xFFFFFF)},
		{"sub", PSN(2).Sub(5), PSN(0xFFFFFD)},
		{"diff across wrap", PSN(1).Diff(0xFFFFFF), int32(2)},
		{"diff negative", PSN(0xFFFFFF).Diff(1), int32(-2)},
		{"diff half space", PSN(0x800000).Diff(0), int32(-0x800000)},
		{"diff just below half", PSN(0x7FFFFF).Diff(0), int32(0x7FFFFF)},
		{"before across wrap", PSN(0xFFFFF0).Before(3), true},
		{"after across wrap", PSN(3).After(0xFFFFF0), true},
		{"not after self", PSN(7).After(7), false},
		{"window wraps", PSN(2).InWindow(0xFFFFFE, 8), true},
		{"window end excluded", PSN(6).InWindow(0xFFFFFE, 8), false},
		{"window before start", PSN(0xFFFFFD).InWindow(0xFFFFFE, 8), false},
		{"valid", PSN(0x1000000).Valid(), false},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, tc.got, tc.want)
		}
	}
}

func TestSyndrome(t *testing.T) {
	tests := []struct {
		s     Syndrome
		kind  AckKind
		value uint8
		str   string
	}{
		{SyndromeACK, KindACK, 31, "ACK(1f)"},
		{ACKSyndrome(5), KindACK, 5, "ACK(05)"},
		{RNRNAKSyndrome(12), KindRNRNAK, 12, "RNR_NAK(2c)"},
		{NAKSyndrome(NAKRemoteAccessError), KindNAK, 2, "NAK(62)"},
		{SyndromeNAKInvalidReq, KindNAK, NAKInvalidRequest, "NAK(61)"},
		{0x40, KindReserved, 0, "RESERVED(40)"},
	}
	for _, tc := range tests {
		if tc.s.Kind() != tc.kind || tc.s.Value() != tc.value || tc.s.String() != tc.str {
			t.Errorf("%#x: kind %v value %d %q", uint8(tc.s), tc.s.Kind(), tc.s.Value(), tc.s.String())
		}
	}
	if RNRTimerMicros(0) != 655360 || RNRTimerMicros(12) != 640 || RNRTimerMicros(31) != 491520 ||
		RNRTimer(1) != 10*sim.Microsecond {
		t.Error("RNR timer table")
	}
	if Credits(0) != 0 || Credits(5) != 6 || Credits(30) != 32768 || Credits(31) != -1 {
		t.Error("credit table")
	}
}

func TestOpcodeTable(t *testing.T) {
	rows := Opcodes()
	if len(rows) != 40 {
		t.Fatalf("%d rows", len(rows))
	}
	for _, r := range rows {
		// UC rows mirror RC rows (UC = RC + 0x20) except for the name prefix.
		if r.Opcode.Transport() == TransportUC {
			rc := (r.Opcode - 0x20).Info()
			if !rc.Valid() || rc.Headers != r.Headers || rc.Payload != r.Payload || rc.Pos != r.Pos || "UC"+rc.Name[2:] != r.Name {
				t.Errorf("%v does not mirror %v", r.Opcode, rc.Opcode)
			}
		}
		// extended header offsets are increasing in HeaderKind order
		sum := 0
		for h := HeaderKind(0); h < numHeaderKinds; h++ {
			if off, ok := r.Offset(h); ok {
				if off != sum {
					t.Errorf("%v: %v at %d, want %d", r.Opcode, h, off, sum)
				}
				sum += h.Size()
			}
		}
		if sum != r.ExtLen() {
			t.Errorf("%v: ext len %d, headers %d", r.Opcode, r.ExtLen(), sum)
		}
	}
	checks := []struct {
		op      Opcode
		name    string
		ext     int
		resp    bool
		payload PayloadRule
	}{
		{OpRCWriteOnlyImm, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", RETHSize + ImmDtSize, false, PayloadOnly},
		{OpRCAtomicAck, "RC_ATOMIC_ACKNOWLEDGE", AETHSize + AtomicAckETHSize, true, PayloadNone},
		{OpRCFlush, "RC_FLUSH", FETHSize + RETHSize, false, PayloadNone},
		{OpUDSendOnlyImm, "UD_SEND_ONLY_WITH_IMMEDIATE", DETHSize + ImmDtSize, false, PayloadOnly},
		{OpCNP, "CNP", CNPPadSize, false, PayloadNone},
		{OpRCReadResponseMiddle, "RC_RDMA_READ_RESPONSE_MIDDLE", 0, true, PayloadPMTU},
	}
	for _, c := range checks {
		i := c.op.Info()
		if c.op.String() != c.name || i.ExtLen() != c.ext || i.Response != c.resp || i.Payload != c.payload {
			t.Errorf("%v: %+v", c.op, *i)
		}
	}
	if Opcode(0x15).Valid() || Opcode(0x15).String() != "Opcode(0x15)" || Opcode(0xff).String() != "Opcode(0xff)" {
		t.Error("invalid opcode")
	}
	if OpCNP.Transport() != TransportCNP || OpUDSendOnly.Transport().String() != "UD" {
		t.Error("transport")
	}
}

func TestFillGRH(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		p := writeOnlyParams()
		if v6 {
			p.SrcIP, p.DstIP = netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2")
		}
		p.BTH.Opcode = OpUDSendOnly
		buf := make([]byte, 256)
		n, _ := BuildFrame(buf, &p, []byte("x"))
		var pkt Packet
		if err := ParseFrame(buf[:n], &pkt); err != nil {
			t.Fatal(err)
		}
		g := make(GRH, GRHSize)
		for i := range g {
			g[i] = 0xEE
		}
		FillGRH(g, &pkt)
		if v6 {
			if g.IPVer() != 6 || g.SGID() != p.SrcIP.As16() || g.DGID() != p.DstIP.As16() {
				t.Fatalf("v6 GRH %x", []byte(g))
			}
		} else if hex.EncodeToString(g[:20]) != hex.EncodeToString(make([]byte, 20)) || string(g[20:]) != string(buf[14:34]) {
			t.Fatalf("v4 GRH %x", []byte(g))
		}
	}
}
