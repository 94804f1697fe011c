package device_test

import (
	"bytes"
	"testing"

	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/testbed"
	"github.com/stretchr/testify/require"
)

// TestReceiveCQEBehindItsData: a SEND's receive CQE is visible only once
// every byte of the message has landed, also when the device has booked
// other QPs' payload writes ahead on the PCIe link. Frames are handed to
// node 1's receive path with arrival times ahead of the engine, as the
// device books work ahead when a QP's packets queue: QP A's WRITEs at 50
// µs (the posted-write order's steps beyond the SEND), QP D's WRITEs
// every 55 ns from now (each gap between their TLPs on the up lane holds
// one 256-byte TLP of the SEND's FIRST and leaves room for the 164-byte
// LAST's; with the default profile's link), then QP B's SEND FIRST (2048
// bytes) and LAST (164). Before the fix, with 32 or more steps booked
// ahead the posted-write order forgot the FIRST's write, the LAST started
// in a gap and landed first, and so did the CQE written behind it: the
// poller saw the receive complete with the FIRST's bytes still missing
// (the 1M-message soak, seed 7, saw a stale 2 KiB block so).
func TestReceiveCQEBehindItsData(t *testing.T) {
	cases := []struct {
		name  string
		ahead int // QP A's 256-byte WRITEs booked 50 µs ahead, 40 ns apart
	}{
		{"nothing booked ahead", 0},
		{"a few writes booked ahead", 8},
		{"32 writes booked ahead", 32},
		{"40 writes booked ahead", 40},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w, err := testbed.New(testbed.DefaultConfig())
			require.NoError(t, err)
			t.Cleanup(w.Close)
			access := provider.AccessLocalWrite | provider.AccessRemoteWrite
			var eps [3][2]*testbed.Endpoint
			for i, mtu := range []int{256, 256, 2048} {
				eps[i], err = w.ConnectRC(testbed.ConnOpts{MTU: mtu, BufSize: 1 << 16, Access: access})
				require.NoError(t, err)
			}
			a, d, b := eps[0][1], eps[1][1], eps[2][1]
			_, err = b.QP.PostRecv([]provider.RecvWR{{WRID: 1, SGL: []provider.SGE{b.MR.SGE(0, 4096)}}})
			require.NoError(t, err)
			dev := w.Hosts[1].Dev
			frame := func(e *testbed.Endpoint, op roce.Opcode, psn uint32, payload []byte, off int) []byte {
				p := roce.FrameParams{SrcMAC: testbed.MACs[0], DstMAC: testbed.MACs[1], SrcIP: testbed.IPs[0], DstIP: testbed.IPs[1],
					TTL: 64, SrcPort: 0xc000,
					BTH: roce.BTHFields{Opcode: op, PKey: 0xffff, DestQP: e.QP.QPN(), PSN: roce.PSN(psn), AckReq: true}}
				if op == roce.OpRCWriteOnly {
					p.RETH = roce.RETHFields{VA: e.MR.Addr + uint64(off), RKey: e.MR.RKey, DMALen: uint32(len(payload))}
				}
				buf := make([]byte, 5000)
				n, err := roce.BuildFrame(buf, &p, payload)
				require.NoError(t, err)
				return buf[:n]
			}
			// A WRITE each on A and D first, so that their QP contexts are
			// in the device and their later packets execute on arrival.
			for _, e := range []*testbed.Endpoint{a, d} {
				dev.ReceiveFrame(w.Eng.Now(), frame(e, roce.OpRCWriteOnly, ePSN, make([]byte, 8), 0x8000))
			}
			w.Settle(0)
			now := w.Eng.Now()
			for i := 0; i < tc.ahead; i++ {
				at := now.Add(50*sim.Microsecond + sim.Duration(i)*40*sim.Nanosecond)
				dev.ReceiveFrame(at, frame(a, roce.OpRCWriteOnly, ePSN+1+uint32(i), make([]byte, 256), i*256))
			}
			for i := 0; i < 40; i++ {
				at := now.Add(10*sim.Nanosecond + sim.Duration(i)*55*sim.Nanosecond)
				dev.ReceiveFrame(at, frame(d, roce.OpRCWriteOnly, ePSN+1+uint32(i), make([]byte, 256), i*256))
			}
			msg := make([]byte, 2048+164)
			for i := range msg {
				msg[i] = byte(i*7 + 1) // never 0: a byte still 0 has not landed
			}
			dev.ReceiveFrame(now, frame(b, roce.OpRCSendFirst, ePSN, msg[:2048], 0))
			dev.ReceiveFrame(now, frame(b, roce.OpRCSendLast, ePSN+1, msg[2048:], 0))
			wcs, err := testbed.Wait(b.RecvCQ, 1)
			require.NoError(t, err)
			require.Equal(t, provider.WCSuccess, wcs[0].Status)
			require.Equal(t, uint32(len(msg)), wcs[0].ByteLen)
			got := b.Buf.Bytes[:len(msg)]
			require.True(t, bytes.Equal(msg, got), "the message's bytes are in memory when its CQE is (first byte not landed: %d)", bytes.IndexByte(got, 0))
		})
	}
}
