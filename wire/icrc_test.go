package wire_test

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/fault"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/wire"
)

// parsed records whether each arriving frame passes roce.ParseFrame.
type parsed struct{ errs []error }

func (p *parsed) ReceiveFrame(_ sim.Time, f []byte) {
	var pkt roce.Packet
	p.errs = append(p.errs, roce.ParseFrame(f, &pkt))
}

// TestCorruptCaughtByICRC sends real RoCEv2 frames through a link that
// corrupts a payload byte of every other one: the receiver's ICRC check
// rejects exactly those.
func TestCorruptCaughtByICRC(t *testing.T) {
	p := roce.FrameParams{
		SrcMAC: [6]byte{2, 0, 0, 0, 0, 1}, DstMAC: [6]byte{2, 0, 0, 0, 0, 2},
		SrcIP: netip.MustParseAddr("10.0.0.1"), DstIP: netip.MustParseAddr("10.0.0.2"),
		TTL: 64, SrcPort: roce.UDPSourcePort(0, 0x11, 0x12),
		BTH:  roce.BTHFields{Opcode: roce.OpRCWriteOnly, PKey: roce.DefaultPKey, DestQP: 0x12, PSN: 1},
		RETH: roce.RETHFields{VA: 0x1000, RKey: 0x1234, DMALen: 256},
	}
	payload := make([]byte, 256)
	buf := make([]byte, 2048)
	n, err := roce.BuildFrame(buf, &p, payload)
	require.NoError(t, err)
	frame := buf[:n]
	hdr := roce.HeaderLen(&p)

	eng := sim.NewEngine()
	inj := fault.NewInjector(&fault.Plan{Seed: 3, Rules: []fault.Rule{
		// Byte 17 of the payload.
		{Point: fault.WireTx, Action: fault.Corrupt, Every: 2, Byte: hdr + 17},
	}})
	l := wire.NewLink(eng, wire.Spec{}, nil, nil, inj)
	var rx parsed
	l.B().Attach(1, &rx)
	for range 10 {
		l.A().Send(eng.Now(), frame)
	}
	eng.Run(0)
	require.Len(t, rx.errs, 10)
	for i, err := range rx.errs {
		if i%2 == 1 {
			require.ErrorIs(t, err, roce.ErrBadICRC, "frame %d", i)
		} else {
			require.NoError(t, err, "frame %d", i)
		}
	}
	require.Equal(t, uint64(5), l.Counters().Value(wire.CtrFaultCorrupt))
}

// vparsed is parsed that also takes verified frames, and tells them apart.
type vparsed struct {
	parsed
	verified []bool
}

func (p *vparsed) ReceiveFrame(t sim.Time, f []byte) {
	p.parsed.ReceiveFrame(t, f)
	p.verified = append(p.verified, false)
}

func (p *vparsed) ReceiveVerifiedFrame(_ sim.Time, f []byte) {
	var pkt roce.Packet
	p.errs = append(p.errs, roce.ParseFrameVerified(f, &pkt))
	p.verified = append(p.verified, true)
}

// TestSendVerified: a frame sent with SendVerified reaches a
// VerifiedReceiver as verified only if no fault changed its bytes; a
// corrupted one (at tx or at rx) goes to ReceiveFrame, whose ICRC check
// rejects it. Duplicated, delayed and reordered frames stay verified, and
// a plain Send is never verified.
func TestSendVerified(t *testing.T) {
	p := roce.FrameParams{
		SrcMAC: [6]byte{2, 0, 0, 0, 0, 1}, DstMAC: [6]byte{2, 0, 0, 0, 0, 2},
		SrcIP: netip.MustParseAddr("10.0.0.1"), DstIP: netip.MustParseAddr("10.0.0.2"),
		TTL: 64, SrcPort: roce.UDPSourcePort(0, 0x11, 0x12),
		BTH:  roce.BTHFields{Opcode: roce.OpRCWriteOnly, PKey: roce.DefaultPKey, DestQP: 0x12, PSN: 1},
		RETH: roce.RETHFields{VA: 0x1000, RKey: 0x1234, DMALen: 256},
	}
	buf := make([]byte, 2048)
	n, err := roce.BuildFrame(buf, &p, make([]byte, 256))
	require.NoError(t, err)
	frame := buf[:n]
	hdr := roce.HeaderLen(&p)
	for _, tc := range []struct {
		name  string
		rule  fault.Rule
		want  []bool // verified, per delivery
		bad   []bool // ErrBadICRC, per delivery
		plain bool   // Send instead of SendVerified
	}{
		{name: "clean", want: []bool{true, true, true, true}, bad: []bool{false, false, false, false}},
		{name: "plain send", plain: true, want: []bool{false, false, false, false}, bad: []bool{false, false, false, false}},
		{name: "tx corrupt", rule: fault.Rule{Point: fault.WireTx, Action: fault.Corrupt, Every: 2, Byte: hdr + 17},
			want: []bool{true, false, true, false}, bad: []bool{false, true, false, true}},
		{name: "rx corrupt", rule: fault.Rule{Point: fault.WireRx, Action: fault.Corrupt, Every: 2, Byte: hdr + 3},
			want: []bool{true, false, true, false}, bad: []bool{false, true, false, true}},
		{name: "tx duplicate", rule: fault.Rule{Point: fault.WireTx, Action: fault.Duplicate, Every: 4},
			want: []bool{true, true, true, true, true}, bad: []bool{false, false, false, false, false}},
		{name: "rx delay", rule: fault.Rule{Point: fault.WireRx, Action: fault.Delay, Every: 2, Delay: sim.Microsecond},
			want: []bool{true, true, true, true}, bad: []bool{false, false, false, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eng := sim.NewEngine()
			var inj *fault.Injector
			if tc.rule.Action != 0 {
				inj = fault.NewInjector(&fault.Plan{Seed: 3, Rules: []fault.Rule{tc.rule}})
			}
			l := wire.NewLink(eng, wire.Spec{}, nil, nil, inj)
			var rx vparsed
			l.B().Attach(1, &rx)
			for range 4 {
				if tc.plain {
					l.A().Send(eng.Now(), frame)
				} else {
					l.A().SendVerified(eng.Now(), frame)
				}
			}
			eng.Run(0)
			require.Equal(t, tc.want, rx.verified)
			require.Len(t, rx.errs, len(tc.bad))
			for i, err := range rx.errs {
				if tc.bad[i] {
					require.ErrorIs(t, err, roce.ErrBadICRC, "frame %d", i)
				} else {
					require.NoError(t, err, "frame %d", i)
				}
			}
		})
	}
}

// rec records each delivery: when, whether verified, and the bytes.
type rec struct {
	at       []sim.Time
	verified []bool
	frames   [][]byte
}

func (r *rec) ReceiveFrame(t sim.Time, f []byte) { r.add(t, f, false) }

func (r *rec) ReceiveVerifiedFrame(t sim.Time, f []byte) { r.add(t, f, true) }

func (r *rec) add(t sim.Time, f []byte, v bool) {
	r.at, r.verified, r.frames = append(r.at, t), append(r.verified, v), append(r.frames, append([]byte(nil), f...))
}

// keepRec is rec as a KeepingReceiver: it keeps every verified frame's
// buffer for a few deliveries, checks that nobody wrote to it meanwhile,
// then scribbles over it and hands it back.
type keepRec struct {
	rec
	kept  [][]byte
	seen  [][]byte
	fresh int
	bad   int
}

func (k *keepRec) ReceiveKeptFrame(t sim.Time, f []byte) []byte {
	k.add(t, f, true)
	k.kept, k.seen = append(k.kept, f), append(k.seen, append([]byte(nil), f...))
	if len(k.kept) < 3 {
		if k.fresh++; k.fresh%2 == 0 {
			return nil
		}
		return make([]byte, 0, 16) // too small: the wire must cope
	}
	b, was := k.kept[0], k.seen[0]
	k.kept, k.seen = k.kept[1:], k.seen[1:]
	if string(b) != string(was) {
		k.bad++
	}
	for i := range b[:cap(b)] {
		b[:cap(b)][i] = 0xEE
	}
	return b
}

// plainRec is rec without ReceiveVerifiedFrame.
type plainRec struct{ r rec }

func (p *plainRec) ReceiveFrame(t sim.Time, f []byte) { p.r.add(t, f, false) }

// TestSendUnsealedMatchesSendVerified: random frames built unsealed (the
// ICRC field left as garbage) and sent with SendUnsealed are delivered at
// the same times, as verified or not, with the same counters as the
// sealed frames sent with SendVerified; every byte a tap, a fault rule or
// a plain receiver sees is the sealed frame's; a verified receiver gets
// the same bytes but for the ICRC, which only an unsealed frame that no
// one else read may lack.
func TestSendUnsealedMatchesSendVerified(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	type frame struct{ sealed, unsealed []byte }
	var frames []frame
	for range 40 {
		p := roce.FrameParams{
			SrcMAC: [6]byte{2, 0, 0, 0, 0, 1}, DstMAC: [6]byte{2, 0, 0, 0, 0, 2},
			SrcIP: netip.MustParseAddr("10.0.0.1"), DstIP: netip.MustParseAddr("10.0.0.2"),
			TTL: 64, SrcPort: uint16(r.Uint32()),
			BTH:  roce.BTHFields{Opcode: roce.OpRCWriteOnly, PKey: roce.DefaultPKey, DestQP: r.Uint32() & 0xffffff, PSN: roce.PSN(r.Uint32() & 0xffffff)},
			RETH: roce.RETHFields{VA: r.Uint64(), RKey: r.Uint32(), DMALen: 256},
		}
		if r.IntN(2) == 0 {
			p.SrcIP, p.DstIP = netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2")
		}
		payload := make([]byte, 1+r.IntN(1000))
		for i := range payload {
			payload[i] = byte(r.Uint32())
		}
		a, b := make([]byte, 2048), make([]byte, 2048)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		n, err := roce.BuildFrame(a, &p, payload)
		require.NoError(t, err)
		m, err := roce.BuildFrameUnsealed(b, &p, payload)
		require.NoError(t, err)
		frames = append(frames, frame{a[:n], b[:m]})
	}
	for _, tc := range []struct {
		name  string
		rules []fault.Rule
		tap   bool
		plain bool // a receiver without ReceiveVerifiedFrame
		keep  bool // a KeepingReceiver
	}{
		{name: "clean"},
		{name: "keeping receiver", keep: true},
		{name: "keeping receiver, faults", keep: true, rules: []fault.Rule{
			{Point: fault.WireTx, Action: fault.Duplicate, Every: 5},
			{Point: fault.WireRx, Action: fault.Duplicate, Every: 4},
			{Point: fault.WireRx, Action: fault.Corrupt, Every: 7},
			{Point: fault.WireTx, Action: fault.Reorder, Every: 3}}},
		{name: "tap", tap: true},
		{name: "plain receiver", plain: true},
		{name: "tx corrupt", rules: []fault.Rule{{Point: fault.WireTx, Action: fault.Corrupt, Every: 3}}},
		{name: "rx corrupt", rules: []fault.Rule{{Point: fault.WireRx, Action: fault.Corrupt, Every: 3}}},
		{name: "drop dup delay reorder", rules: []fault.Rule{
			{Point: fault.WireTx, Action: fault.Drop, Every: 7},
			{Point: fault.WireTx, Action: fault.Duplicate, Every: 5},
			{Point: fault.WireTx, Action: fault.Reorder, Every: 4},
			{Point: fault.WireRx, Action: fault.Delay, Every: 3, Delay: sim.Microsecond}}},
		{name: "device rule only", rules: []fault.Rule{{Point: fault.DMAWrite, Action: fault.Drop, Every: 2}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := func(unsealed bool) (rec, [][]byte, map[string]uint64) {
				eng := sim.NewEngine()
				var inj *fault.Injector
				if tc.rules != nil {
					inj = fault.NewInjector(&fault.Plan{Seed: 9, Rules: tc.rules})
				}
				l := wire.NewLink(eng, wire.Spec{}, nil, nil, inj)
				var taps [][]byte
				if tc.tap {
					l.AddTap(func(_ sim.Time, f []byte) { taps = append(taps, append([]byte(nil), f...)) })
				}
				var rx rec
				var prx plainRec
				var krx keepRec
				switch {
				case tc.keep && unsealed:
					l.B().Attach(1, &krx)
				case tc.plain:
					l.B().Attach(1, &prx)
				default:
					l.B().Attach(1, &rx)
				}
				// Unsealed frames are sent from a pool refilled with the
				// spares the wire hands back: a spare still in flight would
				// be overwritten here and fail the comparison.
				var pool [][]byte
				for i, f := range frames {
					at := sim.Time(i) * sim.Time(sim.Nanosecond) * 300
					if unsealed {
						var b []byte
						if k := len(pool); k > 0 {
							b, pool = pool[k-1], pool[:k-1]
						}
						if cap(b) < len(f.unsealed) {
							b = make([]byte, 0, 2048)
						}
						_, spare := l.A().SendUnsealed(at, append(b[:0], f.unsealed...), roce.SealFrame)
						pool = append(pool, spare)
					} else {
						l.A().SendVerified(at, f.sealed)
					}
					if i%5 == 0 {
						eng.RunUntil(at) // let some arrive before the next send
					}
				}
				eng.Run(0)
				if tc.plain {
					rx = prx.r
				}
				if tc.keep && unsealed {
					require.Zero(t, krx.bad, "kept buffers written while kept")
					rx = krx.rec
				}
				return rx, taps, l.Counters().Snapshot()
			}
			want, wantTaps, wantCtr := run(false)
			got, gotTaps, gotCtr := run(true)
			require.NotEmpty(t, want.at)
			require.Equal(t, want.at, got.at)
			require.Equal(t, want.verified, got.verified)
			require.Equal(t, wantTaps, gotTaps)
			require.Equal(t, wantCtr, gotCtr)
			for i := range want.frames {
				w, g := want.frames[i], got.frames[i]
				if !got.verified[i] || tc.rules != nil || tc.tap {
					require.Equal(t, w, g, "delivery %d", i)
				} else {
					require.Equal(t, w[:len(w)-roce.ICRCSize], g[:len(g)-roce.ICRCSize], "delivery %d", i)
				}
			}
		})
	}
}
