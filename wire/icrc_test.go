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
