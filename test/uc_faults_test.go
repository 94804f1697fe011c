package test

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/testbed"
	"github.com/stretchr/testify/require"
)

// TestUCManyQPsFaults: 16 UC pairs send multi-packet SENDs, SEND_WITH_IMMs
// and WRITE_WITH_IMMs on a wire that drops, duplicates, reorders,
// corrupts and delays. Every send completes successfully; every receive
// that completes is one of the messages sent (a message that lost a
// packet is dropped whole, a duplicated single-packet one may arrive
// twice), with its exact payload and immediate — for a WRITE_WITH_IMM,
// the bytes in the responder's memory where that write alone landed;
// nothing hangs.
func TestUCManyQPsFaults(t *testing.T) {
	w := lossyWorld(t, 64<<20, 8, scaleFaults(0.03, 0.01, 0.01, 0.005, 0.01))
	// The responder's buffer: 100 receive slots, then one region per
	// message for the WRITE_WITH_IMMs, so that each write's bytes stay
	// in memory to be checked after it completed.
	const pairs, msgs, depth, slot, writes = 16, 60, 8, 8192, 100 * 8192
	type sent struct {
		op      provider.WROpcode
		payload []byte
		imm     uint32
		at      uint64 // where in the responder's buffer a write lands
	}
	rng := rand.New(rand.NewPCG(8, 8))
	for i := 0; i < pairs; i++ {
		e, err := w.ConnectRC(testbed.ConnOpts{Type: provider.QPTypeUC, SQDepth: depth, RQDepth: 128, CQDepth: 512, MTU: 1024, BufSize: writes + msgs*slot})
		require.NoError(t, err)
		req, rsp := e[0], e[1]
		for k := 0; k < 100; k++ { // more than can complete: the rest stay posted
			_, err := rsp.QP.PostRecv([]provider.RecvWR{{WRID: uint64(k), SGL: []provider.SGE{rsp.MR.SGE(uint64(k)*slot, slot)}}})
			require.NoError(t, err)
		}
		var log []sent
		posted, done := 0, 0
		for done < msgs {
			for posted < msgs && posted-done < depth {
				op := []provider.WROpcode{provider.WRSend, provider.WRSendImm, provider.WRRDMAWriteImm}[rng.IntN(3)]
				n := rng.IntN(slot + 1)
				off := uint64(posted%depth) * slot
				fillRand(rng, req.Buf.Bytes[off:off+slot])
				at := uint64(writes + posted*slot)
				wr := provider.SendWR{WRID: uint64(posted), Opcode: op, Flags: provider.SendSignaled, Imm: rng.Uint32(),
					RemoteAddr: rsp.MR.Addr + at, RKey: rsp.MR.RKey}
				if n > 0 {
					wr.SGL = []provider.SGE{req.MR.SGE(off, uint32(n))}
				}
				log = append(log, sent{op, append([]byte(nil), req.Buf.Bytes[off:off+uint64(n)]...), wr.Imm, at})
				_, err := req.QP.PostSend([]provider.SendWR{wr})
				require.NoError(t, err)
				posted++
			}
			wcs, err := testbed.Wait(req.SendCQ, 1)
			require.NoError(t, err, "pair %d", i)
			require.Equal(t, provider.WCSuccess, wcs[0].Status)
			done++
		}
		w.Settle(0)
		rw := make([]provider.WC, 128)
		n, err := rsp.RecvCQ.Poll(rw)
		require.NoError(t, err)
		require.NotZero(t, n, "pair %d: something arrived", i)
		for _, wc := range rw[:n] {
			require.Equal(t, provider.WCSuccess, wc.Status)
			match := func(s sent) bool {
				if s.op == provider.WRRDMAWriteImm {
					return wc.Opcode == provider.WCRecvRDMAWithImm && int(wc.ByteLen) == len(s.payload) && wc.Imm == s.imm &&
						bytes.Equal(rsp.Buf.Bytes[s.at:][:len(s.payload)], s.payload)
				}
				got := rsp.Buf.Bytes[wc.WRID*slot:][:wc.ByteLen]
				return wc.Opcode == provider.WCRecv && bytes.Equal(got, s.payload) && (s.op == provider.WRSend || wc.Imm == s.imm)
			}
			k := 0
			for k < len(log) && !match(log[k]) {
				k++
			}
			require.Less(t, k, len(log), "pair %d: receive %d (%v, %d bytes) matches no message sent", i, wc.WRID, wc.Opcode, wc.ByteLen)
		}
	}
}
