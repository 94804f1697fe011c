package roce

import (
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"testing"
)

func addFrameSeeds(f *testing.F) {
	for _, gc := range loadGolden(f) {
		b, _ := hex.DecodeString(gc.Frame)
		f.Add(b)
	}
	v, _ := hex.DecodeString(vector32)
	f.Add(v)
	for _, g := range []string{goldenVLAN, goldenQinQ} {
		v, _ := hex.DecodeString(g)
		f.Add(v)
	}
	r := rand.New(rand.NewPCG(3, 4))
	buf := make([]byte, 2048)
	for range 8 {
		f.Add(append([]byte(nil), randomFrame(r, buf)...))
	}
}

// FuzzParseFrame: the parser never panics; a frame it accepts rebuilds with
// BuildFrame into a frame that parses to the same fields; a frame rejected
// only for its ICRC is still fully parsed.
func FuzzParseFrame(f *testing.F) {
	addFrameSeeds(f)
	out := make([]byte, 70000)
	f.Fuzz(func(t *testing.T, frame []byte) {
		var pkt Packet
		err := ParseFrame(frame, &pkt)
		var pe *ParseError
		if err != nil && !errors.As(err, &pe) {
			t.Fatalf("error %v is not a *ParseError", err)
		}
		if errors.Is(err, ErrBadICRC) {
			if pkt.BTH == nil || pkt.ICRCOK || pkt.ICRC == pkt.ICRCWant {
				t.Fatalf("ErrBadICRC with incomplete packet %+v", pkt)
			}
			return
		}
		if err != nil {
			return
		}
		if pkt.Len > len(frame) || !pkt.ICRCOK {
			t.Fatalf("accepted packet %+v", pkt)
		}
		var p FrameParams
		pkt.Params(&p)
		n, err := BuildFrame(out, &p, pkt.Payload)
		if err != nil {
			t.Fatalf("rebuild: %v", err)
		}
		if n != pkt.Len-VLANTagSize*pkt.VLANTags { // BuildFrame writes no tags
			t.Fatalf("rebuilt %d bytes, parsed %d with %d VLAN tags", n, pkt.Len, pkt.VLANTags)
		}
		var q Packet
		if err := ParseFrame(out[:n], &q); err != nil {
			t.Fatalf("reparse: %v", err)
		}
		var p2 FrameParams
		q.Params(&p2)
		if p2 != p || string(q.Payload) != string(pkt.Payload) || q.Pad != pkt.Pad || q.Opcode != pkt.Opcode {
			t.Fatalf("round trip differs:\n%+v\n%+v", p, p2)
		}
	})
}

// FuzzParseIP runs the same parser from the IP header.
func FuzzParseIP(f *testing.F) {
	for _, gc := range loadGolden(f) {
		b, _ := hex.DecodeString(gc.Frame)
		f.Add(b[EthHeaderSize:])
	}
	f.Fuzz(func(t *testing.T, ip []byte) {
		var pkt Packet
		_ = ParseIP(ip, &pkt)
		_ = ParseTransport(ip, &pkt)
	})
}

// FuzzICRC compares the zero-allocation ICRC with the slow reference.
func FuzzICRC(f *testing.F) {
	for _, gc := range loadGolden(f) {
		b, _ := hex.DecodeString(gc.Frame)
		f.Add(b[EthHeaderSize : len(b)-ICRCSize])
	}
	f.Fuzz(func(t *testing.T, ip []byte) {
		got, err := ICRC(ip)
		if err != nil {
			return
		}
		if want := refICRC(ip); got != want {
			t.Fatalf("ICRC %#x, reference %#x", got, want)
		}
		cp := append([]byte(nil), ip...)
		if in := icrcInPlace(cp, ip[0]>>4 == 6); in != got || string(cp) != string(ip) {
			t.Fatalf("in place %#x, masked %#x", in, got)
		}
	})
}

// FuzzViews decodes each header view and re-encodes its fields: decoding
// the re-encoded bytes must give the same fields.
func FuzzViews(f *testing.F) {
	f.Add(make([]byte, 40))
	f.Add([]byte("0123456789abcdefghijklmnopqrstuvwxyzABCD"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < GRHSize {
			return
		}
		o := make([]byte, GRHSize)
		{
			v := BTH(b).Fields()
			BTH(o).Encode(&v)
			if BTH(o).Fields() != v {
				t.Fatal("BTH")
			}
		}
		{
			v := RETH(b).Fields()
			RETH(o).Encode(&v)
			if RETH(o).Fields() != v {
				t.Fatal("RETH")
			}
		}
		{
			v := AETH(b).Fields()
			AETH(o).Encode(&v)
			if AETH(o).Fields() != v {
				t.Fatal("AETH")
			}
		}
		{
			v := AtomicETH(b).Fields()
			AtomicETH(o).Encode(&v)
			if AtomicETH(o).Fields() != v {
				t.Fatal("AtomicETH")
			}
		}
		{
			v := AtomicAckETH(b).Fields()
			AtomicAckETH(o).Encode(&v)
			if AtomicAckETH(o).Fields() != v {
				t.Fatal("AtomicAckETH")
			}
		}
		{
			v := DETH(b).Fields()
			DETH(o).Encode(&v)
			if DETH(o).Fields() != v {
				t.Fatal("DETH")
			}
		}
		{
			v := FETH(b).Fields()
			FETH(o).Encode(&v)
			if FETH(o).Fields() != v {
				t.Fatal("FETH")
			}
		}
		{
			v := GRH(b).Fields()
			GRH(o).Encode(&v)
			if GRH(o).Fields() != v {
				t.Fatal("GRH")
			}
		}
		ImmDt(o).Encode(ImmDt(b).Imm())
		IETH(o[4:]).Encode(IETH(b).RKey())
		if ImmDt(o).Imm() != ImmDt(b).Imm() || IETH(o[4:]).RKey() != IETH(b).RKey() {
			t.Fatal("ImmDt/IETH")
		}
	})
}
