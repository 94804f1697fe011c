package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/testbed"
)

// TestPerfRecvCause: a receive flushed because its QP's own send queue
// failed (a -b run, each QP both sending and receiving) names the send
// queue's error, not WR_FLUSH_ERR.
func TestPerfRecvCause(t *testing.T) {
	for _, c := range []struct {
		name     string
		badRKey  bool
		want     provider.WCStatus
		wantNote string
	}{
		{"send queue failed", true, provider.WCRemAccessErr, " on the send queue (wr_id 7), after receive wr_id 3 was flushed"},
		{"no send failure", false, provider.WCWRFlushErr, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			w, err := testbed.New(testbed.DefaultConfig())
			require.NoError(t, err)
			defer w.Close()
			eps, err := w.ConnectRC(testbed.ConnOpts{BufSize: 1 << 16, SQDepth: 16, RQDepth: 16})
			require.NoError(t, err)
			a, b := eps[0], eps[1]
			for k := uint64(3); k < 6; k++ {
				_, err := a.QP.PostRecv([]provider.RecvWR{{WRID: k, SGL: []provider.SGE{a.MR.SGE(k*1024, 1024)}}})
				require.NoError(t, err)
			}
			if c.badRKey {
				_, err = a.QP.PostSend([]provider.SendWR{{WRID: 7, Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
					SGL: []provider.SGE{a.MR.SGE(0, 64)}, RemoteAddr: b.MR.Addr, RKey: b.MR.RKey ^ 0x100}})
				require.NoError(t, err)
				w.Settle(1 << 20)
			} else {
				require.NoError(t, a.QP.Modify(&provider.QPAttr{QPState: provider.QPStateErr}, provider.AttrState))
				w.Settle(1 << 20)
			}
			var wcs [4]provider.WC
			n, err := a.RecvCQ.Poll(wcs[:])
			require.NoError(t, err)
			require.Equal(t, 3, n)
			require.Equal(t, provider.WCWRFlushErr, wcs[0].Status)
			e := &perfEP{qp: a.QP, scq: a.SendCQ, rcq: a.RecvCQ}
			got, note := e.recvCause(wcs[:n])
			require.Equal(t, c.want, got.Status)
			require.Equal(t, c.wantNote, note)
		})
	}
}
