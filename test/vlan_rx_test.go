package test

import (
	"bytes"
	"testing"

	"github.com/softnic/softnic/device"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/testbed"
	"github.com/stretchr/testify/require"
)

// TestVLANTaggedFrameDropped: the device's receive path parses frames
// with roce.ParseFrame, which skips 802.1Q and QinQ tags (the ICRC does
// not cover them), so it knows a tagged frame for RoCE. Its port has no
// VLAN (assumption, device/receive.go): a UC SEND Only that arrives again
// behind a tag, or a stack of two, reaches no QP and is counted as
// rx_drop_vlan with a warning, not as not RoCE or malformed; the same
// frame untagged is a new message, delivered with its bytes.
func TestVLANTaggedFrameDropped(t *testing.T) {
	w, req, rsp := connect(t, testbed.ConnOpts{Type: provider.QPTypeUC, BufSize: 4 * 4096})
	var err error
	var sent []byte
	w.Link.AddTap(func(_ sim.Time, f []byte) {
		var p roce.Packet
		if sent == nil && roce.ParseFrame(f, &p) == nil && p.SrcMAC == testbed.MACs[0] && p.Opcode == roce.OpUCSendOnly {
			sent = bytes.Clone(f)
		}
	})
	for k := range 3 {
		_, err := rsp.QP.PostRecv([]provider.RecvWR{{WRID: uint64(k), SGL: []provider.SGE{rsp.MR.SGE(uint64(k)*4096, 4096)}}})
		require.NoError(t, err)
	}
	payload := req.Buf.Bytes[:64]
	for i := range payload {
		payload[i] = byte(i*7 + 1)
	}
	_, err = req.QP.PostSend([]provider.SendWR{{WRID: 1, Opcode: provider.WRSend, Flags: provider.SendSignaled, SGL: []provider.SGE{req.MR.SGE(0, 64)}}})
	require.NoError(t, err)
	wcs, err := testbed.Wait(req.SendCQ, 1)
	require.NoError(t, err)
	require.Equal(t, provider.WCSuccess, wcs[0].Status)
	w.Settle(0)
	wcs, err = testbed.Wait(rsp.RecvCQ, 1)
	require.NoError(t, err)
	require.Equal(t, provider.WCSuccess, wcs[0].Status)
	require.NotNil(t, sent, "the tap saw the SEND")

	dev := w.Hosts[1].Dev
	for k, tags := range [][]byte{
		{0x81, 0x00, 0x60, 0x64},                         // 802.1Q, VID 100, PCP 3
		{0x88, 0xa8, 0x00, 0x0a, 0x81, 0x00, 0x00, 0x64}, // QinQ: 802.1ad VID 10, 802.1Q VID 100
	} {
		tagged := append(append(bytes.Clone(sent[:12]), tags...), sent[12:]...)
		var p roce.Packet
		require.NoError(t, roce.ParseFrame(tagged, &p))
		require.Equal(t, len(tags)/4, p.VLANTags)
		c := dev.Counters()
		notRoCE, malformed, vlan := c.Value(device.CtrRxDropNotRoCE), c.Value(device.CtrRxDropMalformed), c.Value(device.CtrRxDropVLAN)
		dev.ReceiveFrame(w.Eng.Now(), tagged)
		w.Settle(0)
		_, err = testbed.Wait(rsp.RecvCQ, 1)
		require.ErrorIs(t, err, testbed.ErrTimeout, "%d tag bytes: the frame reached no QP", len(tags))
		require.Equal(t, vlan+1, c.Value(device.CtrRxDropVLAN))
		require.Equal(t, notRoCE, c.Value(device.CtrRxDropNotRoCE))
		require.Equal(t, malformed, c.Value(device.CtrRxDropMalformed))
		// The same frame untagged is a new UC message, delivered.
		dev.ReceiveFrame(w.Eng.Now(), sent)
		w.Settle(0)
		wcs, err = testbed.Wait(rsp.RecvCQ, 1)
		require.NoError(t, err)
		require.Equal(t, provider.WCSuccess, wcs[0].Status)
		require.Equal(t, uint64(k+1), wcs[0].WRID)
		require.Equal(t, uint32(64), wcs[0].ByteLen)
		require.Equal(t, payload, rsp.Buf.Bytes[(k+1)*4096:][:64])
	}
}
