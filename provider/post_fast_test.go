package provider

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPostSendSingleMatchesGeneralPath posts single WRs through PostSend
// (its one-WR path, postSimple's code in PostSend) and through postSend
// (buildSimple, buildSend and ringSend) on two identical environments, and
// requires the same results, ring bytes, doorbell record, MMIO stores and
// host work, around the ring more than once.
func TestPostSendSingleMatchesGeneralPath(t *testing.T) {
	wrs := []SendWR{
		{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, RemoteAddr: 0x1000, RKey: 7},
		{WRID: 2, Opcode: WRRDMAWriteImm, Flags: SendFence | SendSolicited, Imm: 0xdeadbeef, RemoteAddr: 0xffff_0000_1234_5678, RKey: 0xffffffff},
		{WRID: 3, Opcode: WRSend},
		{WRID: 4, Opcode: WRSendImm, Flags: SendSignaled | SendSolicited, Imm: 5},
		{WRID: 5, Opcode: WRRDMARead, Flags: SendFence, RemoteAddr: 8, RKey: 0x100},
		{WRID: 6, Opcode: WRAtomicFetchAdd, Flags: SendSignaled, RemoteAddr: 0x40, RKey: 9, CompareAdd: 3},
		{WRID: 7, Opcode: WRSend, Flags: SendInline | SendSignaled},
		{WRID: 8, Opcode: WRRDMAWrite, Flags: 1 << 7},
		{WRID: 9, Opcode: 42},
	}
	for _, o := range []EnvOpts{{}, {Progress: true}, {SigAll: true}, {BFBufSize: -1}, {Type: QPTypeUC}, {Type: QPTypeUD}} {
		t.Run(fmt.Sprintf("progress=%v,sigall=%v,bf=%d,type=%d", o.Progress, o.SigAll, o.BFBufSize, o.Type), func(t *testing.T) {
			o.Cap = QPCap{MaxSendWR: 16, MaxRecvWR: 1, MaxSendSGE: 2, MaxInline: 64}
			var es [2]*Env
			for i := range es {
				es[i] = NewEnv(t, o)
				if o.Type == QPTypeRC || o.Type == 0 {
					ToRTS(t, es[i].QP)
				} else {
					ToRTSAs(t, o.Type, es[i].QP)
				}
			}
			for round := 0; round < 40; round++ {
				for k := range wrs {
					wr := wrs[k]
					switch round % 4 {
					case 0:
						wr.SGL = []SGE{es[0].MR.SGE(uint64(k*64), 64)}
					case 1:
						wr.SGL = []SGE{es[0].MR.SGE(0, 0)}
					case 2:
						wr.SGL = nil
					case 3:
						wr.SGL = []SGE{es[0].MR.SGE(0, 8), es[0].MR.SGE(8, 8)}
					}
					for _, e := range es {
						switch {
						case round == 9 && k == 0:
							e.QP.SetBlueFlame(false)
						case round == 20 && k == 0:
							e.QP.SetBugs(BugNeverSignal) // the one-WR path steps aside
						case round == 25 && k == 0:
							e.QP.SetBugs(0)
						case round == 30 && k == 0 && o.Type != QPTypeUD:
							// Posting in ERR is allowed (the WQEs flush).
							require.NoError(t, e.QP.Modify(&QPAttr{QPState: QPStateErr}, AttrState))
						}
					}
					n0, err0 := es[0].QP.PostSend([]SendWR{wr})
					n1, err1 := es[1].QP.postSend([]SendWR{wr})
					require.Equal(t, n1, n0, "round %d wr %d", round, k)
					require.Equal(t, fmt.Sprint(err1), fmt.Sprint(err0), "round %d wr %d", round, k)
					require.Equal(t, es[1].QP.sq.buf, es[0].QP.sq.buf, "round %d wr %d", round, k)
					require.Equal(t, []byte(es[1].QP.dbr), []byte(es[0].QP.dbr))
					require.Equal(t, es[1].Dev.Ops, es[0].Dev.Ops)
					require.Equal(t, es[1].Dev.Host, es[0].Dev.Host)
					require.Equal(t, es[1].QP.sq, es[0].QP.sq)
					require.Equal(t, es[1].QP.bfOffset(), es[0].QP.bfOffset())
					for _, e := range es {
						e.QP.sq.tail = e.QP.sq.head
					}
				}
			}
			if o.Type != QPTypeUD { // (UD WRs here have no AH: all refused)
				require.NotEmpty(t, es[0].Dev.Ops, "MMIO stores recorded")
			}
			if o.Progress {
				require.NotEmpty(t, es[0].Dev.Host, "host work recorded")
			}
		})
	}
}
