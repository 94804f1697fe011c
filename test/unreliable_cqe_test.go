package test

import (
	"testing"

	"github.com/softnic/softnic/device"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/testbed"
	"github.com/stretchr/testify/require"
)

// A UC or UD send WQE completes when its last packet leaves the port; until
// then it is held at the head of the device's send ring. These tests catch
// the WQE while its frame is still in the transmit pipeline and change the
// QP (or the device) under it.

var unreliableTypes = []struct {
	name string
	typ  provider.QPType
}{{"UC", provider.QPTypeUC}, {"UD", provider.QPTypeUD}}

// unreliableSend is a signaled SEND of n bytes from the start of req's
// buffer to rsp (UD: through req's AH).
func unreliableSend(req, rsp *testbed.Endpoint, wrid uint64, n uint32) provider.SendWR {
	wr := provider.SendWR{WRID: wrid, Opcode: provider.WRSend, Flags: provider.SendSignaled, SGL: []provider.SGE{req.MR.SGE(0, n)}}
	if req.AH != nil {
		wr.AH, wr.RemoteQPN, wr.RemoteQKey = req.AH, rsp.QP.QPN(), rsp.QKey
	}
	return wr
}

// stepUntilBuilt runs w until req's device has built sent more frames than
// before (a frame is then in the transmit pipeline, not yet on the wire).
func stepUntilBuilt(t *testing.T, w *testbed.World, req *testbed.Endpoint, before uint64) {
	t.Helper()
	for hctr(req.Host, device.CtrSentPkts) == before {
		require.True(t, w.Eng.Step(), "the frame was never built")
	}
}

// pollAll settles w and returns every completion on cq.
func pollAll(t *testing.T, w *testbed.World, cq *provider.CQ) []provider.WC {
	t.Helper()
	w.Settle(0)
	var out []provider.WC
	wcs := make([]provider.WC, 16)
	for {
		n, err := cq.Poll(wcs)
		require.NoError(t, err)
		if n == 0 {
			return out
		}
		out = append(out, wcs[:n]...)
	}
}

func wrids(wcs []provider.WC) []uint64 {
	out := make([]uint64, len(wcs))
	for i, wc := range wcs {
		out[i] = wc.WRID
	}
	return out
}

// eachUnreliableSigned runs f on a fresh connected pair of every
// unreliable QP type, for a signaled and an unsignaled WQE.
func eachUnreliableSigned(t *testing.T, f func(t *testing.T, w *testbed.World, req, rsp *testbed.Endpoint, signaled bool)) {
	for _, tc := range unreliableTypes {
		for _, signaled := range []bool{true, false} {
			name := tc.name + "/signaled"
			if !signaled {
				name = tc.name + "/unsignaled"
			}
			t.Run(name, func(t *testing.T) {
				w, req, rsp := connect(t, testbed.ConnOpts{Type: tc.typ})
				f(t, w, req, rsp, signaled)
			})
		}
	}
}

// TestUnreliableCQEOrderOnSendError: a good SEND whose frame is still in
// the transmit pipeline when the WQE behind it fails (a bad lkey: the QP
// goes to SQE) completes before it, in posting order. Its frame was not
// yet handed to the port, so it is not sent and the WQE is flushed, with
// a CQE whether it was signaled or not. (The device used to pop the WQE
// at once and write its success CQE when the frame fired, after the error
// CQE of the later WQE.)
func TestUnreliableCQEOrderOnSendError(t *testing.T) {
	eachUnreliableSigned(t, func(t *testing.T, w *testbed.World, req, rsp *testbed.Endpoint, signaled bool) {
		_, err := rsp.QP.PostRecv([]provider.RecvWR{{WRID: 9, SGL: []provider.SGE{rsp.MR.SGE(0, 4096)}}})
		require.NoError(t, err)
		good := unreliableSend(req, rsp, 1, 64)
		if !signaled {
			good.Flags = 0
		}
		bad := unreliableSend(req, rsp, 2, 64)
		bad.SGL[0].LKey ^= 0x5500
		frames := w.Wire.Get("wire_tx_frames")
		_, err = req.QP.PostSend([]provider.SendWR{good, bad})
		require.NoError(t, err)
		wcs := pollAll(t, w, req.SendCQ)
		require.Equal(t, []uint64{1, 2}, wrids(wcs), "send completions in posting order")
		require.Equal(t, provider.WCWRFlushErr, wcs[0].Status)
		require.Equal(t, provider.WCLocProtErr, wcs[1].Status)
		require.Equal(t, frames, w.Wire.Get("wire_tx_frames"), "the flushed WQE's frame never left")
		require.Equal(t, uint64(1), hctr(req.Host, device.CtrTxDropDestroyed))
		require.Zero(t, hctr(req.Host, device.CtrTxDepartStale))
		require.Equal(t, provider.QPStateSQE, qpState(t, req.QP))
	})
}

// TestUCCQEOrderOnModifyToError: a long UC WRITE whose last packet is
// still queued when the user moves the QP to ERR is flushed at once, and
// a WQE posted after it is flushed behind it: the CQEs keep posting
// order. (The device used to have popped the WRITE; the later WQE's flush
// came first and the WRITE's success CQE after it, for a frame never
// sent.)
func TestUCCQEOrderOnModifyToError(t *testing.T) {
	w, req, rsp := connect(t, testbed.ConnOpts{Type: provider.QPTypeUC, MTU: 1024, BufSize: 256 << 10})
	_, err := req.QP.PostSend([]provider.SendWR{{WRID: 1, Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
		SGL: []provider.SGE{req.MR.SGE(0, 256<<10)}, RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey}})
	require.NoError(t, err)
	for w.Wire.Get("wire_tx_frames") == 0 {
		require.True(t, w.Eng.Step())
	}
	require.NoError(t, req.QP.Modify(&provider.QPAttr{QPState: provider.QPStateErr}, mlx5.AttrState))
	_, err = req.QP.PostSend([]provider.SendWR{unreliableSend(req, rsp, 2, 64)})
	require.NoError(t, err)
	wcs := pollAll(t, w, req.SendCQ)
	require.Equal(t, []uint64{1, 2}, wrids(wcs), "send completions in posting order")
	for _, wc := range wcs {
		require.Equal(t, provider.WCWRFlushErr, wc.Status, "WQE %d", wc.WRID)
	}
	require.Less(t, w.Wire.Get("wire_tx_frames"), uint64(256), "the WRITE's later packets never left")
}

// TestUnreliableNoCQEAfterReset: a signaled WQE whose frame is in the
// transmit pipeline when the QP is modified to RESET writes no CQE: after
// RESET nothing of the old incarnation reaches the CQ. The same holds for
// a destroyed QP.
func TestUnreliableNoCQEAfterReset(t *testing.T) {
	for _, tc := range unreliableTypes {
		for _, destroy := range []bool{false, true} {
			name := tc.name + "/reset"
			if destroy {
				name = tc.name + "/destroy"
			}
			t.Run(name, func(t *testing.T) {
				w, req, rsp := connect(t, testbed.ConnOpts{Type: tc.typ})
				_, err := req.QP.PostSend([]provider.SendWR{unreliableSend(req, rsp, 1, 64)})
				require.NoError(t, err)
				stepUntilBuilt(t, w, req, hctr(req.Host, device.CtrSentPkts))
				cqes := hctr(req.Host, device.CtrCQEs)
				if destroy {
					require.NoError(t, req.QP.Destroy())
				} else {
					require.NoError(t, req.QP.Modify(&provider.QPAttr{QPState: provider.QPStateReset}, mlx5.AttrState))
				}
				require.Empty(t, pollAll(t, w, req.SendCQ))
				require.Equal(t, cqes, hctr(req.Host, device.CtrCQEs), "no CQE written after the modify")
			})
		}
	}
}

// TestUnreliableFatalFlushesInFlightWQE: a device fatal error while a
// UC/UD WQE's frame is in the transmit pipeline drops the frame; the
// driver's software flush then completes the WQE exactly once, with
// WR_FLUSH_ERR (vendor error 5), signaled or not. (The device used to
// have popped the WQE: its CQE was lost to the dead device and the flush
// did not know it.)
func TestUnreliableFatalFlushesInFlightWQE(t *testing.T) {
	eachUnreliableSigned(t, func(t *testing.T, w *testbed.World, req, rsp *testbed.Endpoint, signaled bool) {
		wr := unreliableSend(req, rsp, 1, 64)
		if !signaled {
			wr.Flags = 0
		}
		frames := w.Wire.Get("wire_tx_frames")
		_, err := req.QP.PostSend([]provider.SendWR{wr})
		require.NoError(t, err)
		stepUntilBuilt(t, w, req, hctr(req.Host, device.CtrSentPkts))
		req.Host.Dev.EnterFatal(w.Eng.Now(), 1, "test")
		wcs := pollAll(t, w, req.SendCQ)
		require.Len(t, wcs, 1, "the WQE completes once")
		require.Equal(t, uint64(1), wcs[0].WRID)
		require.Equal(t, provider.WCWRFlushErr, wcs[0].Status)
		require.Equal(t, uint32(device.VendorSWFlush), wcs[0].VendorErr)
		require.Equal(t, frames, w.Wire.Get("wire_tx_frames"), "the dead device sent nothing")
	})
}

// TestUnreliableLinkDownCompletesOnce: a UC/UD SEND whose frame is
// dropped because the port is down still completes, successfully and
// once (the transport is unreliable: the loss is the network's), and so
// does an unsignaled one before it, silently.
func TestUnreliableLinkDownCompletesOnce(t *testing.T) {
	for _, tc := range unreliableTypes {
		t.Run(tc.name, func(t *testing.T) {
			w, req, rsp := connect(t, testbed.ConnOpts{Type: tc.typ})
			w.SetLink(false)
			first := unreliableSend(req, rsp, 1, 64)
			first.Flags = 0
			_, err := req.QP.PostSend([]provider.SendWR{first, unreliableSend(req, rsp, 2, 64)})
			require.NoError(t, err)
			wcs := pollAll(t, w, req.SendCQ)
			require.Equal(t, []uint64{2}, wrids(wcs))
			require.Equal(t, provider.WCSuccess, wcs[0].Status)
			require.Equal(t, uint64(2), hctr(req.Host, device.CtrTxDropLinkDown))
			require.Equal(t, uint64(1), hctr(req.Host, device.CtrWQEUnsignaled))
			require.Equal(t, provider.QPStateRTS, qpState(t, req.QP))
		})
	}
}

// TestUnreliableStreamNoAllocs: a steady UC/UD stream (lists of 16
// SENDs, the last signaled, the receiver reposting what it took)
// allocates nothing once warm, its WQEs now held on the ring until their
// frames leave.
func TestUnreliableStreamNoAllocs(t *testing.T) {
	for _, tc := range unreliableTypes {
		t.Run(tc.name, func(t *testing.T) {
			w, req, rsp := connect(t, testbed.ConnOpts{Type: tc.typ, SQDepth: 64, RQDepth: 128, CQDepth: 256})
			list := make([]provider.SendWR, 16)
			for i := range list {
				list[i] = unreliableSend(req, rsp, uint64(i), 64)
				list[i].Flags = 0
			}
			list[len(list)-1].Flags = provider.SendSignaled
			recvs := make([]provider.RecvWR, 64)
			for i := range recvs {
				recvs[i] = provider.RecvWR{WRID: uint64(i), SGL: []provider.SGE{rsp.MR.SGE(uint64(i)*128, 128)}}
			}
			_, err := rsp.QP.PostRecv(recvs)
			require.NoError(t, err)
			wcs, rwcs := make([]provider.WC, 4), make([]provider.WC, 64)
			run := func() {
				if _, err := req.QP.PostSend(list); err != nil {
					t.Fatal(err)
				}
				for {
					n, err := req.SendCQ.Poll(wcs)
					if err != nil || n > 1 || n == 1 && wcs[0].Status != provider.WCSuccess {
						t.Fatal(n, err, wcs[0].Status)
					}
					if n == 1 {
						break
					}
				}
				w.Settle(0) // the receiver is slower: let it take every SEND
				n, err := rsp.RecvCQ.Poll(rwcs)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := rsp.QP.PostRecv(recvs[:n]); err != nil {
					t.Fatal(err)
				}
			}
			for i := 0; i < 64; i++ {
				run()
			}
			require.Zero(t, testing.AllocsPerRun(200, run))
			require.Zero(t, hctr(rsp.Host, device.CtrRxUDNoRecv))
			require.Zero(t, hctr(req.Host, device.CtrTxDepartStale))
		})
	}
}
