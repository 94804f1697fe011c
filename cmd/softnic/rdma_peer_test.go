package main

// `softnic rdma` against a scripted responder: the test plays the peer on
// an in-memory transport, answering (or not) each request frame the
// endpoint sends, so that late completions and the atomics' result
// buffer can be checked without a second stack.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ethport"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/wire"
)

const (
	fakePeerQPN = 0x11
	fakePeerPSN = 0x200
	ownPSN      = 0x100
)

// newTestEP is a connected `softnic rdma` endpoint on a fake transport; the
// peer (QPN fakePeerQPN at testPeer) is a static neighbour.
func newTestEP(t *testing.T, wait time.Duration) (*rdmaEP, *wire.MemTransport, *bytes.Buffer) {
	t.Helper()
	r, tr, stderr := newTestNet(t, netOpts{neigh: neighFlag{{IP: testPeer, MAC: peerMAC}}, quiet: true})
	var out bytes.Buffer
	o := rdmaOpts{mtu: 1024, mrSize: 1 << 16, recvOff: -1, recvDepth: 4, gidIndex: 1, timeout: 16, retryCnt: 6, rnrRetry: 6,
		waitMS: int(wait / time.Millisecond)}
	require.NoError(t, o.validate())
	ep := &rdmaEP{o: o, rt: r, out: &out, stderr: stderr, psn: ownPSN, wait: wait, posted: map[uint64]string{}}
	require.NoError(t, ep.setup())
	require.NoError(t, ep.connect(remoteInfo{qpn: fakePeerQPN, psn: fakePeerPSN, ip: testPeer}))
	return ep, tr, &out
}

// run runs one command line and returns what it printed.
func (ep *rdmaEP) run(t *testing.T, out *bytes.Buffer, cmd string) []string {
	t.Helper()
	out.Reset()
	require.False(t, ep.command(strings.Fields(cmd)))
	s := strings.TrimSpace(out.String())
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// fakeResponder plays the peer: for every RoCE request frame the endpoint
// sends (from the first one it is started on), answer returns the reply
// to receive, or nil to stay silent.
type fakeResponder struct {
	stop chan struct{}
	done sync.WaitGroup
	mu   sync.Mutex
	reqs []roce.Packet // every request seen, in order
}

type answerFunc func(ep *rdmaEP, req *roce.Packet) *roce.FrameParams

func startResponder(t *testing.T, ep *rdmaEP, tr *wire.MemTransport, from int, answer answerFunc) *fakeResponder {
	f := &fakeResponder{stop: make(chan struct{})}
	f.done.Add(1)
	go func() {
		defer f.done.Done()
		seen := from
		for {
			select {
			case <-f.stop:
				return
			case <-time.After(200 * time.Microsecond):
			}
			sent := tr.Sent()
			for ; seen < len(sent); seen++ {
				var pkt roce.Packet
				if roce.ParseFrame(sent[seen], &pkt) != nil || pkt.Info == nil || pkt.Info.Response {
					continue // ARP, or not a request
				}
				f.mu.Lock()
				f.reqs = append(f.reqs, pkt)
				f.mu.Unlock()
				if fp := answer(ep, &pkt); fp != nil {
					b := make([]byte, 256)
					n, err := roce.BuildFrame(b, fp, nil)
					if err != nil {
						panic(err)
					}
					tr.Deliver(b[:n])
				}
			}
		}
	}()
	t.Cleanup(f.Stop)
	return f
}

func (f *fakeResponder) Stop() {
	select {
	case <-f.stop:
	default:
		close(f.stop)
	}
	f.done.Wait()
}

func (f *fakeResponder) requests() []roce.Packet {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]roce.Packet(nil), f.reqs...)
}

// reply is a response from the fake peer to the endpoint's QP.
func reply(ep *rdmaEP, req *roce.Packet, op roce.Opcode, psn roce.PSN) *roce.FrameParams {
	return &roce.FrameParams{SrcMAC: peerMAC, DstMAC: ethport.DefaultMAC(testIP), SrcIP: testPeer, DstIP: testIP, TTL: 64,
		SrcPort: roce.QPSourcePort(fakePeerQPN),
		BTH:     roce.BTHFields{Opcode: op, PKey: roce.DefaultPKey, DestQP: ep.qp.QPN(), PSN: psn},
		AETH:    roce.AETHFields{Syndrome: roce.ACKSyndrome(0x1f), MSN: uint32(psn-ownPSN) + 1}}
}

// ackAll acknowledges every request (a coalesced ACK also acknowledges
// every earlier PSN).
func ackAll(ep *rdmaEP, req *roce.Packet) *roce.FrameParams {
	return reply(ep, req, roce.OpRCAck, req.BTH.PSN())
}

// A command waits for its own completion: one that arrives late, for a WR
// of an earlier command that timed out, is printed as a LATE line — by a
// later send command or while `recv` waits — never as the result of the
// command that happens to be waiting.
func TestRDMALateCompletions(t *testing.T) {
	tests := []struct {
		name string
		// after the first write timed out, the responder starts at frame
		// index fromFirst (0: it also acknowledges the first write) ...
		fromFirst bool
		// ... and this command runs.
		next string
		want []string
	}{
		{
			name: "late WRITE completion during the next write",
			next: "write 7f0000000000 1 8 2",
			want: []string{"LATE WC 5 SUCCESS RDMA_WRITE 0 0", "WC 6 SUCCESS RDMA_WRITE 0 0"},
		},
		{
			name:      "late WRITE completion while recv waits",
			fromFirst: true,
			next:      "recv 1",
			want:      []string{"LATE WC 5 SUCCESS RDMA_WRITE 0 0", "ERR timed out after 300ms waiting for receive completion 1 of 1 (counters: *"},
		},
		{
			name: "late WRITE completion before a FETCH_ADD's own",
			next: "fadd 7f0000000008 1 1",
			want: []string{"LATE WC 5 SUCCESS RDMA_WRITE 0 0", "WC 6 SUCCESS FETCH_ADD 8 0", "ORIG 0x0000000000000007"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ep, tr, out := newTestEP(t, 300*time.Millisecond)
			// Nobody answers the first write: the command gives up and
			// names its WR (wr_ids 1..4 are the receives posted at start).
			got := ep.run(t, out, "write 7f0000000000 1 8 1")
			require.Len(t, got, 1)
			require.Contains(t, got[0], "ERR timed out after 300ms waiting for the RDMA_WRITE completion of wr_id 5 (counters:")
			from := len(tr.Sent())
			if tc.fromFirst {
				from = 0
			}
			startResponder(t, ep, tr, from, func(ep *rdmaEP, req *roce.Packet) *roce.FrameParams {
				if req.Opcode == roce.OpRCFetchAdd {
					fp := reply(ep, req, roce.OpRCAtomicAck, req.BTH.PSN())
					fp.AtomicAckETH.OrigData = 7
					return fp
				}
				return ackAll(ep, req)
			})
			requireLines(t, tc.want, ep.run(t, out, tc.next))
			for id, op := range ep.posted {
				require.Equal(t, "RECV", op, "send WR %d was never reported", id)
			}
		})
	}
}

// requireLines checks output lines; a wanted line ending in "*" is a prefix.
func requireLines(t *testing.T, want, got []string) {
	t.Helper()
	require.Len(t, got, len(want), "got %q", got)
	for i, w := range want {
		if p, ok := strings.CutSuffix(w, "*"); ok {
			require.True(t, strings.HasPrefix(got[i], p), "line %d: %q does not start with %q", i, got[i], p)
			continue
		}
		require.Equal(t, w, got[i], "line %d", i)
	}
}

// fadd and cas post one 8-byte atomic whose result buffer is MR[0,8): the
// request carries the operands (AtomicETH, big-endian on the wire), and the
// original value of the AtomicAckETH lands in MR[0,8) in host order, read
// back as ORIG.
func TestRDMAAtomics(t *testing.T) {
	const orig = 0x0102030405060708
	tests := []struct {
		name       string
		cmd        string
		op         roce.Opcode
		swap, cmp  uint64 // AtomicETH SwapAdd and Compare expected on the wire
		wantWC     string
		wantOrig   string
		wrongReply bool // answer with a NAK (remote access error)
	}{
		{name: "fetch_add", cmd: "fadd 7f0000000010 136 0x1122334455667788", op: roce.OpRCFetchAdd,
			swap: 0x1122334455667788, wantWC: "WC 5 SUCCESS FETCH_ADD 8 0", wantOrig: "ORIG 0x0102030405060708"},
		{name: "fetch_add of 0", cmd: "fadd 0x7f0000000010 0x136 0", op: roce.OpRCFetchAdd,
			wantWC: "WC 5 SUCCESS FETCH_ADD 8 0", wantOrig: "ORIG 0x0102030405060708"},
		{name: "cmp_swap", cmd: "cas 7f0000000010 136 43690 0xbbbb", op: roce.OpRCCmpSwap, cmp: 0xaaaa, swap: 0xbbbb,
			wantWC: "WC 5 SUCCESS COMP_SWAP 8 0", wantOrig: "ORIG 0x0102030405060708"},
		{name: "cmp_swap refused", cmd: "cas 7f0000000010 136 1 2", op: roce.OpRCCmpSwap, cmp: 1, swap: 2,
			wrongReply: true, wantWC: "WC 5 REM_ACCESS_ERR COMP_SWAP 0 0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ep, tr, out := newTestEP(t, 2*time.Second)
			copy(ep.buf.Bytes[:8], "\xee\xee\xee\xee\xee\xee\xee\xee")
			resp := startResponder(t, ep, tr, 0, func(ep *rdmaEP, req *roce.Packet) *roce.FrameParams {
				fp := reply(ep, req, roce.OpRCAtomicAck, req.BTH.PSN())
				fp.AtomicAckETH.OrigData = orig
				if tc.wrongReply {
					fp.BTH.Opcode = roce.OpRCAck
					fp.AETH.Syndrome = 0x62 // NAK, remote access error (rocev2.md §3.3)
				}
				return fp
			})
			got := ep.run(t, out, tc.cmd)
			want := []string{tc.wantWC}
			if tc.wantOrig != "" {
				want = append(want, tc.wantOrig)
			}
			require.Equal(t, want, got)

			reqs := resp.requests()
			require.Len(t, reqs, 1)
			a := reqs[0].AtomicETH
			require.Equal(t, tc.op, reqs[0].Opcode)
			require.Equal(t, uint64(0x7f0000000010), a.VA())
			require.Equal(t, uint32(0x136), a.RKey())
			require.Equal(t, tc.swap, a.SwapAdd())
			require.Equal(t, tc.cmp, a.Compare())
			if tc.wrongReply {
				require.Equal(t, "\xee\xee\xee\xee\xee\xee\xee\xee", string(ep.buf.Bytes[:8]), "a refused atomic writes no result")
				return
			}
			// x86 host order: the little-endian bytes of the value.
			var le [8]byte
			binary.LittleEndian.PutUint64(le[:], orig)
			require.Equal(t, le[:], ep.buf.Bytes[:8])
			require.Equal(t, []string{fmt.Sprintf("SUM 0 8 %08x", crc32.ChecksumIEEE(le[:]))}, ep.run(t, out, "sum 0 8"))
		})
	}
}
