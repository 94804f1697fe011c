package provider_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/testbed"
)

// twoQPs creates one QP of type typ on each host of a default world.
func twoQPs(t *testing.T, typ provider.QPType) (*testbed.World, [2]*provider.QP, [2]*provider.CQ, [2]*provider.PD) {
	t.Helper()
	w, err := testbed.New(testbed.DefaultConfig())
	require.NoError(t, err)
	t.Cleanup(w.Close)
	var qps [2]*provider.QP
	var cqs [2]*provider.CQ
	var pds [2]*provider.PD
	for i, h := range w.Hosts {
		pd, err := h.Ctx.AllocPD()
		require.NoError(t, err)
		pds[i] = pd
		cqs[i], err = h.Ctx.CreateCQ(16)
		require.NoError(t, err)
		qps[i], err = h.Ctx.CreateQP(pd, provider.QPInitAttr{Type: typ, SendCQ: cqs[i], RecvCQ: cqs[i],
			Cap: provider.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: 64}})
		require.NoError(t, err)
	}
	return w, qps, cqs, pds
}

func peerOf(w *testbed.World, qps [2]*provider.QP, i int) provider.Peer {
	id := w.Hosts[1-i].Dev.Identity()
	return provider.Peer{QPN: qps[1-i].QPN(), PSN: uint32(0x100 * (2 - i)), GID: id.IP.As16(), MAC: id.MAC}
}

func TestConnect(t *testing.T) {
	for name, typ := range map[string]provider.QPType{"RC": provider.QPTypeRC, "UC": provider.QPTypeUC, "UD": provider.QPTypeUD} {
		t.Run(name, func(t *testing.T) {
			w, qps, cqs, pds := twoQPs(t, typ)
			for i, qp := range qps {
				a := provider.DefaultConnectAttr()
				a.Peer, a.PSN, a.QKey, a.Access = peerOf(w, qps, i), uint32(0x100*(i+1)), 0x1234, provider.AccessLocalWrite|provider.AccessRemoteWrite
				require.NoError(t, qp.Connect(a))
				require.Equal(t, provider.QPStateRTS, qp.State())
			}
			if typ == provider.QPTypeUD {
				return
			}
			// The connection carries a SEND.
			h0, h1 := w.Hosts[0], w.Hosts[1]
			b0, err := h0.Ctx.AllocBuffer(4096, 4096)
			require.NoError(t, err)
			b1, err := h1.Ctx.AllocBuffer(4096, 4096)
			require.NoError(t, err)
			pd0, pd1 := pds[0], pds[1]
			mr0, err := pd0.RegMR(b0.Addr, 4096, provider.AccessLocalWrite)
			require.NoError(t, err)
			mr1, err := pd1.RegMR(b1.Addr, 4096, provider.AccessLocalWrite)
			require.NoError(t, err)
			_, err = qps[1].PostRecv([]provider.RecvWR{{WRID: 1, SGL: []provider.SGE{mr1.SGE(0, 64)}}})
			require.NoError(t, err)
			copy(b0.Bytes, "hello")
			_, err = qps[0].PostSend([]provider.SendWR{{WRID: 2, Opcode: provider.WRSend, Flags: provider.SendSignaled, SGL: []provider.SGE{mr0.SGE(0, 5)}}})
			require.NoError(t, err)
			wcs, err := testbed.Wait(cqs[1], 1)
			require.NoError(t, err)
			require.Equal(t, provider.WCSuccess, wcs[0].Status)
			require.Equal(t, "hello", string(b1.Bytes[:5]))
		})
	}
}

func TestConnectErrors(t *testing.T) {
	w, qps, _, _ := twoQPs(t, provider.QPTypeRC)
	a := provider.DefaultConnectAttr()
	a.Peer = peerOf(w, qps, 0)
	a.MTU = 1500
	err := qps[0].Connect(a)
	require.ErrorIs(t, err, provider.ErrInvalidArg)
	require.ErrorContains(t, err, "failed to modify QP to RTR")
	require.Equal(t, provider.QPStateInit, qps[0].State(), "INIT went through; RTR was refused")

	a.MTU = 1024
	err = qps[0].ToRTS(a)
	require.Error(t, err, "INIT → RTS is not a transition")
	require.ErrorContains(t, err, "failed to modify QP to RTS")
	require.ErrorIs(t, err, provider.ErrBadTransition)
	require.NoError(t, qps[0].ToRTR(a))
	require.NoError(t, qps[0].ToRTS(a))
}

// A QP moved to INIT early, to post its receives before the peer is known
// (ibv_rc_pingpong's order), is connected from there.
func TestConnectFromInit(t *testing.T) {
	w, qps, cqs, pds := twoQPs(t, provider.QPTypeRC)
	h1 := w.Hosts[1]
	b1, err := h1.Ctx.AllocBuffer(4096, 4096)
	require.NoError(t, err)
	mr1, err := pds[1].RegMR(b1.Addr, 4096, provider.AccessLocalWrite)
	require.NoError(t, err)
	require.NoError(t, qps[1].ToInit(provider.ConnectAttr{}))
	_, err = qps[1].PostRecv([]provider.RecvWR{{WRID: 1, SGL: []provider.SGE{mr1.SGE(0, 64)}}})
	require.NoError(t, err)
	for i, qp := range qps {
		a := provider.DefaultConnectAttr()
		a.Peer, a.PSN = peerOf(w, qps, i), uint32(0x100*(i+1))
		require.NoError(t, qp.Connect(a), "QP %d from %v", i, qp.State())
		require.Equal(t, provider.QPStateRTS, qp.State())
	}
	b0, err := w.Hosts[0].Ctx.AllocBuffer(4096, 4096)
	require.NoError(t, err)
	mr0, err := pds[0].RegMR(b0.Addr, 4096, provider.AccessLocalWrite)
	require.NoError(t, err)
	copy(b0.Bytes, "early")
	_, err = qps[0].PostSend([]provider.SendWR{{WRID: 2, Opcode: provider.WRSend, Flags: provider.SendSignaled, SGL: []provider.SGE{mr0.SGE(0, 5)}}})
	require.NoError(t, err)
	wcs, err := testbed.Wait(cqs[1], 1)
	require.NoError(t, err)
	require.Equal(t, provider.WCSuccess, wcs[0].Status)
	require.Equal(t, "early", string(b1.Bytes[:5]))
}

func ExampleQP_Connect() {
	w := newWorld()
	defer w.Close()
	qps := rcQPs(w)
	for i, qp := range qps {
		// What the out-of-band exchange carries: the peer's QPN, PSN, GID;
		// and the MAC of its GID's next hop.
		fmt.Println(qp.Connect(peerAttr(w, qps, i)), qp.State())
	}
	// Output:
	// <nil> RTS
	// <nil> RTS
}
