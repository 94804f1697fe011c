package test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/testbed"
)

// TestRdAtomicZeroIsOne: max_rd_atomic 0 and max_dest_rd_atomic 0 work as
// 1, as on a ConnectX: mlx5_ib's modify_qp writes log_sra_max and
// log_rra_max only for non-zero values, so the QP context keeps 0, one
// READ/atomic outstanding (and query_qp answers 1 << 0). Before the fix a
// READ or atomic on a QP with max_rd_atomic 0 failed LOC_QP_OP_ERR, and one
// to a peer with max_dest_rd_atomic 0 REM_INV_REQ_ERR, taking both QPs to
// ERR; QUERY_QP answered 0.
func TestRdAtomicZeroIsOne(t *testing.T) {
	for _, c := range []struct {
		name     string
		rd, dest uint8
	}{
		{"max_rd_atomic_0", 0, 4},
		{"max_dest_rd_atomic_0", 4, 0},
		{"both_0", 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			w, err := testbed.New(testbed.DefaultConfig())
			require.NoError(t, err)
			t.Cleanup(w.Close)
			eps := rdAtomicPair(t, w, c.rd, c.dest)
			for i, e := range eps {
				a, _, err := e.QP.Query()
				require.NoError(t, err)
				require.Equal(t, max(c.rd, 1), a.MaxRdAtomic, "QP %d max_rd_atomic", i)
				require.Equal(t, max(c.dest, 1), a.MaxDestRdAtomic, "QP %d max_dest_rd_atomic", i)
			}
			req, rsp := eps[0], eps[1]
			var wrs []provider.SendWR
			for i := 0; i < 3; i++ {
				wrs = append(wrs, provider.SendWR{WRID: uint64(i), Opcode: provider.WRRDMARead, Flags: provider.SendSignaled,
					SGL: []provider.SGE{req.MR.SGE(uint64(i)*64, 64)}, RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey})
			}
			wrs = append(wrs, provider.SendWR{WRID: 3, Opcode: provider.WRAtomicFetchAdd, Flags: provider.SendSignaled,
				SGL: []provider.SGE{req.MR.SGE(1024, 8)}, RemoteAddr: rsp.MR.Addr + 2048, RKey: rsp.MR.RKey, CompareAdd: 1})
			n, err := req.QP.PostSend(wrs)
			require.NoError(t, err)
			require.Equal(t, len(wrs), n)
			wcs, err := testbed.Wait(req.SendCQ, len(wrs))
			require.NoError(t, err)
			for i, wc := range wcs {
				require.Equal(t, uint64(i), wc.WRID)
				require.Equal(t, provider.WCSuccess, wc.Status, "WR %d: %v", i, wc.Status)
			}
		})
	}
}

// rdAtomicPair connects two RC QPs with the given max_rd_atomic and
// max_dest_rd_atomic on both (testbed.ConnOpts takes 0 for its default).
func rdAtomicPair(t *testing.T, w *testbed.World, rd, dest uint8) [2]*testbed.Endpoint {
	t.Helper()
	full := provider.AccessLocalWrite | provider.AccessRemoteWrite | provider.AccessRemoteRead | provider.AccessRemoteAtomic
	var eps [2]*testbed.Endpoint
	for i, h := range w.Hosts {
		e := &testbed.Endpoint{Host: h}
		var err error
		e.PD, err = h.Ctx.AllocPD()
		require.NoError(t, err)
		e.SendCQ, err = h.Ctx.CreateCQ(64)
		require.NoError(t, err)
		e.RecvCQ, err = h.Ctx.CreateCQ(64)
		require.NoError(t, err)
		e.Buf, err = h.Ctx.AllocBuffer(8192, 4096)
		require.NoError(t, err)
		e.MR, err = e.PD.RegMR(e.Buf.Addr, 8192, full)
		require.NoError(t, err)
		e.QP, err = h.Ctx.CreateQP(e.PD, provider.QPInitAttr{Type: provider.QPTypeRC, SendCQ: e.SendCQ, RecvCQ: e.RecvCQ,
			Cap: provider.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		require.NoError(t, err)
		eps[i] = e
	}
	attr := func(i int) provider.ConnectAttr {
		a := provider.DefaultConnectAttr()
		p := eps[1-i]
		a.Peer = provider.Peer{QPN: p.QP.QPN(), PSN: uint32(0x100 * (2 - i)), GID: p.Host.ID.IP.As16(), MAC: p.Host.ID.MAC}
		a.PSN = uint32(0x100 * (1 + i))
		a.Access = full
		a.MaxRdAtomic, a.MaxDestRdAtomic = rd, dest
		return a
	}
	for i, e := range eps {
		require.NoError(t, e.QP.ToInit(attr(i)))
		require.NoError(t, e.QP.ToRTR(attr(i)))
	}
	for i, e := range eps {
		require.NoError(t, e.QP.ToRTS(attr(i)))
	}
	return eps
}
