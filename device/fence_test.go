package device_test

import (
	"bytes"
	"testing"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/testbed"
	"github.com/stretchr/testify/require"
)

// TestFenceModes: a SEND of the buffer a READ before it fills, posted by
// hand with each fence mode of fm_ce_se (bits 7:5, mlx5.md §4.3). FENCE
// (0x40, what mlx5_ib writes for IB_SEND_FENCE), strong ordering (0x60)
// and small-and-fence (0x80, libmlx5's) make the SEND wait for the READ,
// so it carries the bytes the READ brought; no fence and the initiator
// small fence (which orders only behind UMR / local invalidate) let it
// leave at once with the buffer's old contents.
func TestFenceModes(t *testing.T) {
	for _, c := range []struct {
		name   string
		fm     uint8
		fenced bool
	}{
		{"none", mlx5.FenceNone, false},
		{"initiator small fence", mlx5.FenceInitSmall, false},
		{"fence (mlx5_ib IB_SEND_FENCE)", mlx5.FenceFence, true},
		{"strong ordering", mlx5.FenceStrongOrder, true},
		{"small and fence (libmlx5 IBV_SEND_FENCE)", mlx5.FenceSmallAndFen, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			w, err := testbed.New(testbed.DefaultConfig())
			require.NoError(t, err)
			defer w.Close()
			all := provider.AccessLocalWrite | provider.AccessRemoteWrite | provider.AccessRemoteRead
			eps, err := w.ConnectRC(testbed.ConnOpts{Access: all})
			require.NoError(t, err)
			req, rsp := eps[0], eps[1]
			for i := 0; i < 64; i++ {
				req.Buf.Bytes[i], rsp.Buf.Bytes[i] = 0x11, byte(0x80+i)
			}
			_, err = rsp.QP.PostRecv([]provider.RecvWR{{WRID: 1, SGL: []provider.SGE{rsp.MR.SGE(4096, 64)}}})
			require.NoError(t, err)
			r := &rawSQ{w: w, ep: req, peer: rsp, bf: req.QP.SQInfo().BFOffset}
			qpn := req.QP.QPN()
			seg := func(f func(b []byte)) []byte { b := make([]byte, 16); f(b); return b }
			read := make([]byte, 0, 48)
			read = append(read, seg(func(b []byte) {
				mlx5.CtrlSeg(b).Encode(&mlx5.CtrlFields{Opcode: mlx5.OpRDMARead, WQEIndex: 0, QPN: qpn, DS: 3})
			})...)
			read = append(read, seg(func(b []byte) {
				mlx5.RaddrSeg(b).Encode(&mlx5.RaddrFields{RAddr: rsp.MR.Addr, RKey: rsp.MR.RKey})
			})...)
			read = append(read, seg(func(b []byte) {
				mlx5.DataSeg(b).Encode(&mlx5.DataFields{ByteCount: 64, LKey: req.MR.LKey, Addr: req.MR.Addr})
			})...)
			send := make([]byte, 0, 32)
			send = append(send, seg(func(b []byte) {
				mlx5.CtrlSeg(b).Encode(&mlx5.CtrlFields{Opcode: mlx5.OpSend, WQEIndex: 1, QPN: qpn, DS: 2, FMCESE: c.fm | mlx5.CECQUpdate})
			})...)
			send = append(send, seg(func(b []byte) {
				mlx5.DataSeg(b).Encode(&mlx5.DataFields{ByteCount: 64, LKey: req.MR.LKey, Addr: req.MR.Addr})
			})...)
			r.put(0, read)
			r.put(1, send)
			r.record(mlx5.DBRSend, 2)
			r.doorbell(send)
			w.Settle(0)
			wc := mlx5.CQE64(req.SendCQ.CQE(0))
			require.True(t, mlx5.CQEOwnedBySW(wc, 0, uint32(req.SendCQ.Entries())), "the SEND completed")
			require.Equal(t, mlx5.CQEReq, wc.Opcode())
			require.Equal(t, uint16(1), wc.WQECounter())
			want := req.Buf.Bytes[:64] // what the READ brought
			require.True(t, bytes.Equal(want, rsp.Buf.Bytes[:64]), "the READ landed")
			got := rsp.Buf.Bytes[4096 : 4096+64]
			if c.fenced {
				require.Equal(t, want, got, "the fenced SEND waited for the READ")
			} else {
				require.Equal(t, bytes.Repeat([]byte{0x11}, 64), got, "the unfenced SEND left before the READ's response")
			}
		})
	}
}
