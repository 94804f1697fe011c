package test

import (
	"math/rand/v2"
	"testing"

	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/testbed"
	"github.com/stretchr/testify/require"
)

// TestUDManyQPsFaults: 32 UD pairs, on their own receive queues and then
// on an SRQ each, send up to an MTU each on a wire that drops,
// duplicates, reorders, corrupts and delays. Every send completes
// successfully, and every receive holds, after its 40-byte GRH area, the
// exact payload of a SEND of its pair (lost ones missing, duplicated ones
// twice, corrupted ones dropped by the ICRC check, never delivered).
func TestUDManyQPsFaults(t *testing.T) {
	w := lossyWorld(t, 96<<20, 4, scaleFaults(0.05, 0.02, 0.02, 0.01, 0.02))
	const pairs, msgs, depth = 32, 120, 32
	for _, srq := range []bool{false, true} {
		var eps [][2]*testbed.Endpoint
		for i := 0; i < pairs; i++ {
			e, err := w.ConnectRC(testbed.ConnOpts{Type: provider.QPTypeUD, SQDepth: depth, RQDepth: 128, CQDepth: 512, SRQ: srq, MTU: 1024, BufSize: 512 << 10})
			require.NoError(t, err)
			eps = append(eps, e)
		}
		rng := rand.New(rand.NewPCG(1, 2))
		for i, e := range eps {
			req, rsp := e[0], e[1]
			post := func(k int) {
				wr := provider.RecvWR{WRID: uint64(k), SGL: []provider.SGE{rsp.MR.SGE(uint64(k%128)*2048, 2048)}}
				var err error
				if srq {
					_, err = rsp.SRQ.PostRecv([]provider.RecvWR{wr})
				} else {
					_, err = rsp.QP.PostRecv([]provider.RecvWR{wr})
				}
				require.NoError(t, err)
			}
			for k := 0; k < 128; k++ {
				post(k)
			}
			sent := map[string]bool{}
			posted, done, recvd := 0, 0, 0
			for done < msgs {
				for posted < msgs && posted-done < depth {
					n := rng.IntN(1025)
					off := uint64(posted%depth) * 1024
					fillRand(rng, req.Buf.Bytes[off:off+1024])
					sent[string(req.Buf.Bytes[off:off+uint64(n)])] = true
					_, err := req.QP.PostSend([]provider.SendWR{{WRID: uint64(posted), Opcode: provider.WRSend, Flags: provider.SendSignaled,
						SGL: []provider.SGE{req.MR.SGE(off, uint32(n))}, AH: req.AH, RemoteQPN: rsp.QP.QPN(), RemoteQKey: rsp.QKey}})
					require.NoError(t, err)
					posted++
				}
				wcs, err := testbed.Wait(req.SendCQ, 1)
				require.NoError(t, err, "pair %d", i)
				require.Equal(t, provider.WCSuccess, wcs[0].Status)
				done++
			}
			w.Settle(0)
			rw := make([]provider.WC, 64)
			for {
				n, err := rsp.RecvCQ.Poll(rw)
				require.NoError(t, err)
				if n == 0 {
					break
				}
				for _, wc := range rw[:n] {
					require.Equal(t, provider.WCSuccess, wc.Status)
					off := (wc.WRID % 128) * 2048
					got := rsp.Buf.Bytes[off+40 : off+uint64(wc.ByteLen)]
					require.True(t, sent[string(got)], "pair %d: a received payload (%d bytes) that was never sent", i, len(got))
					recvd++
					post(int(wc.WRID) + 128)
				}
			}
			require.NotZero(t, recvd, "srq %v pair %d", srq, i)
		}
	}
}
