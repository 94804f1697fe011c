package test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/device"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/testbed"
	"github.com/softnic/softnic/wire"
)

// TestLocalLoopback: two QPs of one NIC connected to each other (a driver
// test on one machine, one device), or a datagram to the NIC's own GID.
// A ConnectX loops such frames back inside the NIC. softnic sent them out
// of the port, to the other host, which dropped them as not its address:
// the RC WRITE ended RETRY_EXC_ERR and the UD datagram, completed
// SUCCESS at the sender, never arrived. Now they loop back inside the
// NIC and never reach the wire; a port cabled to itself
// (testbed.Config.Loopback) still sends them through the cable.
func TestLocalLoopback(t *testing.T) {
	for _, tc := range []struct {
		name string
		typ  provider.QPType
		op   provider.WROpcode
	}{
		{"RC WRITE", provider.QPTypeRC, provider.WRRDMAWrite},
		{"RC SEND", provider.QPTypeRC, provider.WRSend},
		{"RC READ", provider.QPTypeRC, provider.WRRDMARead},
		{"UC WRITE", provider.QPTypeUC, provider.WRRDMAWrite},
		{"UD SEND", provider.QPTypeUD, provider.WRSend},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := testbed.New(testbed.DefaultConfig())
			require.NoError(t, err)
			t.Cleanup(w.Close)
			h := w.Hosts[0]
			all := provider.AccessLocalWrite | provider.AccessRemoteWrite | provider.AccessRemoteRead
			eps, err := testbed.Connect([2]*testbed.Host{h, h}, testbed.ConnOpts{Type: tc.typ, Access: all, Timeout: 8, RetryCnt: 1})
			require.NoError(t, err)
			req, rsp := eps[0], eps[1]
			size := 3000
			if tc.typ == provider.QPTypeUD {
				size = 512
			}
			msg := bytes.Repeat([]byte("loop"), size/4)
			copy(req.Buf.Bytes, msg)
			off := uint64(0)
			if tc.typ == provider.QPTypeUD {
				off = 40 // the GRH area
			}
			if tc.op == provider.WRSend {
				_, err = rsp.QP.PostRecv([]provider.RecvWR{{WRID: 7, SGL: []provider.SGE{rsp.MR.SGE(0, uint32(size)+uint32(off))}}})
				require.NoError(t, err)
			}
			wr := provider.SendWR{WRID: 1, Opcode: tc.op, Flags: provider.SendSignaled, SGL: []provider.SGE{req.MR.SGE(0, uint32(size))},
				RemoteAddr: rsp.Buf.Addr, RKey: rsp.MR.RKey, AH: req.AH, RemoteQPN: rsp.QP.QPN(), RemoteQKey: 0x11111111}
			if tc.op == provider.WRRDMARead {
				copy(rsp.Buf.Bytes, msg)
				clear(req.Buf.Bytes[:size])
			}
			_, err = req.QP.PostSend([]provider.SendWR{wr})
			require.NoError(t, err)
			wcs, err := testbed.Wait(req.SendCQ, 1)
			require.NoError(t, err)
			require.Equal(t, provider.WCSuccess, wcs[0].Status, "%v", wcs[0])
			if tc.op == provider.WRSend {
				rwcs, err := testbed.Wait(rsp.RecvCQ, 1)
				require.NoError(t, err, "the datagram or SEND never arrived")
				require.Equal(t, provider.WCSuccess, rwcs[0].Status)
				require.Equal(t, uint32(size)+uint32(off), rwcs[0].ByteLen)
			}
			w.Settle(1 << 20)
			got := rsp.Buf.Bytes[off : off+uint64(size)]
			if tc.op == provider.WRRDMARead {
				got = req.Buf.Bytes[:size]
			}
			require.Equal(t, msg, got)
			c := h.Dev.Counters()
			require.NotZero(t, c.Get(device.CtrTxLoopback.String()))
			require.Zero(t, w.Hosts[1].Dev.Counters().Get(device.CtrRxPackets.String()), "the other host saw the frames")
			require.Zero(t, w.Wire.Get(wire.CtrTxFrames.String()), "frames on the wire")
		})
	}
}

// TestLoopbackCableKeepsTheWire: a port cabled to itself (the testbed's
// Loopback world) turns the NIC's local loopback off: its frames go
// through the cable, where the wire's faults, taps and timing apply.
func TestLoopbackCableKeepsTheWire(t *testing.T) {
	cfg := testbed.DefaultConfig()
	cfg.Loopback = true
	w, err := testbed.New(cfg)
	require.NoError(t, err)
	t.Cleanup(w.Close)
	eps, err := w.ConnectRC(testbed.ConnOpts{})
	require.NoError(t, err)
	writeWR(t, eps[0], eps[1], 1, 0, 2048)
	wcs, err := testbed.Wait(eps[0].SendCQ, 1)
	require.NoError(t, err)
	require.Equal(t, provider.WCSuccess, wcs[0].Status)
	require.NotZero(t, w.Wire.Get(wire.CtrTxFrames.String()))
	require.Zero(t, w.Hosts[0].Dev.Counters().Get(device.CtrTxLoopback.String()))
}
