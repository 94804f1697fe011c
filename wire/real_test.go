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
	m := wire.RealStats{TxFrames: 1, RxForeign: 2, RxQueueFull: 3, RxKernelDrops: 4, RxSockBuf: 5, TxSockBuf: 6,
		FaultDrop: 7, FaultCorrupt: 8, FaultDuplicate: 9, FaultDelay: 10, FaultReorder: 11, FaultUnsupported: 12}.Map()
	for name, want := range map[string]uint64{
		"real_tx_frames": 1, "real_rx_foreign": 2, "real_rx_queue_full": 3, "real_rx_kernel_drops": 4,
		"real_rx_sockbuf_bytes": 5, "real_tx_sockbuf_bytes": 6, "real_fault_drop": 7, "real_fault_corrupt": 8,
		"real_fault_duplicate": 9, "real_fault_delay": 10, "real_fault_reorder": 11, "real_fault_unsupported": 12,
	} {
		require.Equal(t, want, m[name], name)
	}
	require.Len(t, m, 17)
}
