package wire_test

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/wire"
)

func TestParseWireSpec(t *testing.T) {
	ap := netip.MustParseAddrPort
	tests := []struct {
		in   string
		want wire.WireSpec
		bad  bool
	}{
		{in: "udp:127.0.0.1:5000,127.0.0.1:5001", want: wire.WireSpec{Kind: "udp", Listen: ap("127.0.0.1:5000"), Peer: ap("127.0.0.1:5001")}},
		{in: "udp:0.0.0.0:0,127.0.0.1:5001", want: wire.WireSpec{Kind: "udp", Listen: ap("0.0.0.0:0"), Peer: ap("127.0.0.1:5001")}},
		{in: "udp:[::1]:5000,[::1]:5001", want: wire.WireSpec{Kind: "udp", Listen: ap("[::1]:5000"), Peer: ap("[::1]:5001")}},
		{in: "tap:tap0", want: wire.WireSpec{Kind: "tap", Name: "tap0"}},
		{in: "tap:softnic-tap-0", want: wire.WireSpec{Kind: "tap", Name: "softnic-tap-0"}},
		{in: "udp:127.0.0.1:5000", bad: true},
		{in: "udp:127.0.0.1,127.0.0.1:5001", bad: true},
		{in: "udp:127.0.0.1:5000,127.0.0.1:0", bad: true},
		{in: "udp:127.0.0.1:5000,0.0.0.0:5001", bad: true},
		{in: "udp:localhost:5000,127.0.0.1:5001", bad: true},
		{in: "tap:", bad: true},
		{in: "tap:a-name-longer-than-15", bad: true},
		{in: "tap:has/slash", bad: true},
		{in: "tap:has space", bad: true},
		{in: "socket:127.0.0.1:1", bad: true},
		{in: "tap0", bad: true},
		{in: "", bad: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := wire.ParseWireSpec(tc.in)
			if tc.bad {
				require.ErrorIs(t, err, wire.ErrBadWireSpec)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
			again, err := wire.ParseWireSpec(got.String())
			require.NoError(t, err)
			require.Equal(t, got, again, "String round-trips")
		})
	}
}

func TestRealStatsMap(t *testing.T) {
	m := wire.RealStats{TxFrames: 1, RxForeign: 2, RxQueueFull: 3}.Map()
	require.Equal(t, uint64(1), m["real_tx_frames"])
	require.Equal(t, uint64(2), m["real_rx_foreign"])
	require.Equal(t, uint64(3), m["real_rx_queue_full"])
	require.Len(t, m, 8)
}
