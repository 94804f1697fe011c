package wire_test

import (
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
