package test

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/softnic/softnic/device"
	"github.com/softnic/softnic/fault"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/testbed"
	"github.com/stretchr/testify/require"
)

// rdAtomicOps are the operations answered by responses rather than ACKs.
var rdAtomicOps = []provider.WROpcode{provider.WRRDMARead, provider.WRAtomicFetchAdd, provider.WRAtomicCmpSwp}

// rdAtomicRun posts total READs or atomics, at most outstanding at a time
// (max_rd_atomic and max_dest_rd_atomic 16 unless o says otherwise, the
// device limit maxRdAtom if not 0), on a wire that applies rules, and
// checks that every one completes successfully with its data:
//   - READ i copies readSize bytes (default 64) at offset readSize·i of the
//     responder's buffer;
//   - FETCH_ADD i adds i+1 to one remote word and returns the sum of the
//     adds before it (so an add executed twice shows);
//   - CMP_SWAP i swaps the remote word from i to i+1 and returns i (so a
//     swap executed twice, or out of order, shows).
func rdAtomicRun(t *testing.T, op provider.WROpcode, total, outstanding, readSize int, o testbed.ConnOpts, maxRdAtom int, rules ...fault.Rule) *testbed.World {
	t.Helper()
	return rdAtomicRunSeed(t, 1, op, total, outstanding, readSize, o, maxRdAtom, rules...)
}

// rdAtomicRunSeed is rdAtomicRun with the fault plan's seed.
func rdAtomicRunSeed(t *testing.T, seed uint64, op provider.WROpcode, total, outstanding, readSize int, o testbed.ConnOpts, maxRdAtom int, rules ...fault.Rule) *testbed.World {
	t.Helper()
	o.Access = provider.AccessLocalWrite | provider.AccessRemoteWrite | provider.AccessRemoteRead | provider.AccessRemoteAtomic
	o.SQDepth = max(o.SQDepth, outstanding)
	o.CQDepth = max(o.CQDepth, 2*outstanding)
	if o.Timeout == 0 {
		o.Timeout = 8 // ≈ 1 ms
	}
	slot := 8
	if op == provider.WRRDMARead {
		slot = cmp.Or(readSize, 64)
	}
	o.BufSize = max(o.BufSize, total*slot+4096)
	cfg := testbed.DefaultConfig()
	cfg.Faults = &fault.Plan{Seed: seed, Rules: rules}
	if maxRdAtom > 0 {
		cfg.Device.Caps.MaxRdAtom = maxRdAtom
	}
	w, err := testbed.New(cfg)
	require.NoError(t, err)
	t.Cleanup(w.Close)
	eps, err := w.ConnectRC(o)
	require.NoError(t, err)
	req, rsp := eps[0], eps[1]
	fill(rsp.Buf.Bytes, 0x3c)
	const word = 0 // the remote word of the atomics
	binary.LittleEndian.PutUint64(rsp.Buf.Bytes[word:], 0)
	wr := func(i int) provider.SendWR {
		s := provider.SendWR{WRID: uint64(i), Opcode: op, Flags: provider.SendSignaled, RKey: rsp.MR.RKey,
			SGL: []provider.SGE{req.MR.SGE(uint64(i*slot), uint32(slot))}}
		switch op {
		case provider.WRRDMARead:
			s.RemoteAddr = rsp.MR.Addr + uint64(i*slot)
		case provider.WRAtomicFetchAdd:
			s.RemoteAddr, s.CompareAdd = rsp.MR.Addr+word, uint64(i+1)
		case provider.WRAtomicCmpSwp:
			s.RemoteAddr, s.CompareAdd, s.Swap = rsp.MR.Addr+word, uint64(i), uint64(i+1)
		}
		return s
	}
	posted, done := 0, 0
	for done < total {
		var wrs []provider.SendWR
		for ; posted < total && posted-done < outstanding; posted++ {
			wrs = append(wrs, wr(posted))
		}
		if len(wrs) > 0 {
			_, err := req.QP.PostSend(wrs)
			require.NoError(t, err)
		}
		// Wait for the whole batch when it is the first, so that exactly
		// outstanding are in flight when the loss happens; then keep the
		// SQ full, one completion at a time.
		n := 1
		if done == 0 {
			n = posted
		}
		wcs, err := testbed.Wait(req.SendCQ, n)
		require.NoError(t, err, "after %d of %d completed", done, total)
		for _, wc := range wcs {
			require.Equal(t, provider.WCSuccess, wc.Status, "WR %d: %v", wc.WRID, wc.Status)
			require.Equal(t, uint64(done), wc.WRID, "completions in order")
			done++
		}
	}
	got := func(i int) uint64 { return binary.LittleEndian.Uint64(req.Buf.Bytes[i*8:]) }
	switch op {
	case provider.WRRDMARead:
		require.Equal(t, rsp.Buf.Bytes[:total*slot], req.Buf.Bytes[:total*slot])
	case provider.WRAtomicFetchAdd:
		sum := uint64(0)
		for i := 0; i < total; i++ {
			require.Equal(t, sum, got(i), "FETCH_ADD %d returns the adds before it", i)
			sum += uint64(i + 1)
		}
		require.Equal(t, sum, binary.LittleEndian.Uint64(rsp.Buf.Bytes[word:]), "every add once")
	case provider.WRAtomicCmpSwp:
		for i := 0; i < total; i++ {
			require.Equal(t, uint64(i), got(i), "CMP_SWAP %d", i)
		}
		require.Equal(t, uint64(total), binary.LittleEndian.Uint64(rsp.Buf.Bytes[word:]), "every swap once")
	}
	if op != provider.WRRDMARead {
		require.Equal(t, uint64(total), ctr(w, 1, device.CtrRxAtomicRequests.String()), "no atomic executed twice")
	}
	require.Equal(t, provider.QPStateRTS, qpState(t, req.QP))
	require.Equal(t, provider.QPStateRTS, qpState(t, rsp.QP))
	return w
}

// TestRdAtomicResponseLoss: with more READs/atomics posted than
// max_rd_atomic (16), the loss of one response must not kill the QP. The
// requester may run only max_rd_atomic ahead of the oldest unanswered
// READ/atomic, so the responder still holds that one's resource when it is
// asked again (before the fix, later answers gave credits back, #17 went
// out while #1 was missing, #1's resource was recycled and its retries went
// unanswered until RETRY_EXC_ERR). The same holds on 1 % random loss in
// both directions.
func TestRdAtomicResponseLoss(t *testing.T) {
	first := fault.Rule{Point: fault.WireTx, Action: fault.Drop, Nth: 1, Match: fault.Match{Node: node(1)}}
	type tc struct {
		name               string
		op                 provider.WROpcode
		total, outstanding int
		rules              []fault.Rule
	}
	var cases []tc
	for _, op := range rdAtomicOps {
		for _, n := range []int{17, 32, 128} {
			cases = append(cases, tc{fmt.Sprintf("%v first response lost, %d outstanding", op, n), op, n, n, []fault.Rule{first}})
		}
		cases = append(cases, tc{fmt.Sprintf("%v 1%% random loss, 128 outstanding", op), op, 1000, 128,
			[]fault.Rule{{Point: fault.WireTx, Action: fault.Drop, Prob: 0.01}}})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := rdAtomicRun(t, c.op, c.total, c.outstanding, 0, testbed.ConnOpts{}, 0, c.rules...)
			require.NotZero(t, ctr(w, 1, device.CtrDuplicateRequest.String()), "the loss was recovered by a request sent again")
			require.Zero(t, ctr(w, 1, device.CtrReplayMiss.String()), "every duplicate found its resource")
			if c.rules[0].Nth == 1 {
				require.Equal(t, uint64(1), ctr(w, 0, device.CtrImpliedNAKSeqErr.String()), "the next response implies the lost one")
				require.Zero(t, ctr(w, 0, device.CtrLocalACKTimeoutErr.String()), "recovered without waiting for the timer")
			}
		})
	}
}

// TestReadEvictedResource: a requester allowed 32 READs outstanding
// (max_rd_atomic 32) against a responder that keeps 16 resources
// (max_dest_rd_atomic 16) loses the first READ's response; by the time it
// asks again the responder has recycled that READ's resource. The
// duplicate is dropped, counted and warned (replay_miss), as rxe drops a
// duplicate READ no resource holds (a class D error, rocev2.md §4.5), and
// the requester's retries end in RETRY_EXC_ERR. Before, softnic read it
// again from memory, which also answered a duplicate READ forged at an
// old WRITE's PSN (TestResponderAdversarialRequests).
func TestReadEvictedResource(t *testing.T) {
	cfg := testbed.DefaultConfig()
	cfg.Device.Caps.MaxRdAtom = 32
	cfg.Faults = &fault.Plan{Seed: 1, Rules: []fault.Rule{{Point: fault.WireTx, Action: fault.Drop, Nth: 1, Match: fault.Match{Node: node(1)}}}}
	w, err := testbed.New(cfg)
	require.NoError(t, err)
	t.Cleanup(w.Close)
	eps, err := w.ConnectRC(testbed.ConnOpts{MaxRdAtomic: 32, MaxDestRdAtomic: 16, Timeout: 6, RetryCnt: 2, SQDepth: 32, CQDepth: 64,
		Access: provider.AccessLocalWrite | provider.AccessRemoteRead})
	require.NoError(t, err)
	req, rsp := eps[0], eps[1]
	wrs := make([]provider.SendWR, 32)
	for i := range wrs {
		wrs[i] = provider.SendWR{WRID: uint64(i), Opcode: provider.WRRDMARead, Flags: provider.SendSignaled,
			SGL: []provider.SGE{req.MR.SGE(uint64(64*i), 64)}, RemoteAddr: rsp.MR.Addr + uint64(64*i), RKey: rsp.MR.RKey}
	}
	_, err = req.QP.PostSend(wrs)
	require.NoError(t, err)
	wcs, err := testbed.Wait(req.SendCQ, 32)
	require.NoError(t, err)
	require.Equal(t, provider.WCRetryExcErr, wcs[0].Status)
	for _, wc := range wcs[1:] {
		require.Equal(t, provider.WCWRFlushErr, wc.Status)
	}
	require.NotZero(t, ctr(w, 1, device.CtrReplayMiss.String()), "the duplicate found no resource: dropped")
	require.Equal(t, uint64(32), ctr(w, 1, device.CtrRxReadRequests.String()), "nothing read twice as a new READ")
}

// TestAtomicEvictedResource: the same for FETCH_ADD. An atomic is never
// executed twice, so a duplicate whose saved result was recycled cannot be
// answered: it is dropped, counted and warned (replay_miss, as rxe drops
// it), and the requester's retries end in RETRY_EXC_ERR, never in silence
// and never with the add done twice.
func TestAtomicEvictedResource(t *testing.T) {
	cfg := testbed.DefaultConfig()
	cfg.Device.Caps.MaxRdAtom = 32
	cfg.Faults = &fault.Plan{Seed: 1, Rules: []fault.Rule{{Point: fault.WireTx, Action: fault.Drop, Nth: 1, Match: fault.Match{Node: node(1)}}}}
	w, err := testbed.New(cfg)
	require.NoError(t, err)
	t.Cleanup(w.Close)
	eps, err := w.ConnectRC(testbed.ConnOpts{MaxRdAtomic: 32, MaxDestRdAtomic: 16, Timeout: 6, RetryCnt: 2,
		Access: provider.AccessLocalWrite | provider.AccessRemoteAtomic})
	require.NoError(t, err)
	req, rsp := eps[0], eps[1]
	binary.LittleEndian.PutUint64(rsp.Buf.Bytes, 0)
	wrs := make([]provider.SendWR, 32)
	for i := range wrs {
		wrs[i] = provider.SendWR{WRID: uint64(i), Opcode: provider.WRAtomicFetchAdd, Flags: provider.SendSignaled,
			SGL: []provider.SGE{req.MR.SGE(uint64(8*i), 8)}, RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey, CompareAdd: 1}
	}
	_, err = req.QP.PostSend(wrs)
	require.NoError(t, err)
	wcs, err := testbed.Wait(req.SendCQ, 32)
	require.NoError(t, err)
	require.Equal(t, provider.WCRetryExcErr, wcs[0].Status)
	for _, wc := range wcs[1:] {
		require.Equal(t, provider.WCWRFlushErr, wc.Status)
	}
	require.NotZero(t, ctr(w, 1, device.CtrReplayMiss.String()))
	require.Equal(t, uint64(32), ctr(w, 1, device.CtrRxAtomicRequests.String()), "no add executed twice")
	require.Equal(t, uint64(32), binary.LittleEndian.Uint64(rsp.Buf.Bytes))
}

// TestReadGapsInTwoReads: 17 READs of four responses each (MTU 1024); the
// first READ loses its last response and the second its second one, so
// the second READ's responses arrive out of order while the first is
// still unanswered. The requester goes back to the first READ at once (one
// re-request covers both) instead of asking for the second's rest alone
// and leaving the first to the timer.
func TestReadGapsInTwoReads(t *testing.T) {
	resp := func(nth uint64) fault.Rule {
		return fault.Rule{Point: fault.WireTx, Action: fault.Drop, Nth: nth, Match: fault.Match{Node: node(1)}}
	}
	w := rdAtomicRun(t, provider.WRRDMARead, 17, 17, 4096, testbed.ConnOpts{MTU: 1024}, 0, resp(4), resp(6))
	require.Zero(t, ctr(w, 0, device.CtrLocalACKTimeoutErr.String()), "recovered without waiting for the timer")
	require.Equal(t, uint64(1), ctr(w, 0, device.CtrImpliedNAKSeqErr.String()), "one re-request covers both gaps")
	require.NotZero(t, ctr(w, 0, device.CtrReadRespOOO.String()))
}

// TestRdAtomicLossyWire: READs of several responses and atomics, more
// posted than max_rd_atomic, on a wire that drops, duplicates, reorders,
// delays and corrupts frames both ways (the faults of softnic perf
// read_bw's lossy-wire run). Every one completes successfully with its
// data, and the responder never refuses the requester's READs as over
// max_dest_rd_atomic. Before the fix a duplicate READ replaced a replay
// queued for an older READ that shared its resource slot, the responder
// counted one READ too many, NAKed the next READ invalid request and both
// QPs ended in error (RETRY_EXC_ERR).
func TestRdAtomicLossyWire(t *testing.T) {
	rule := func(a fault.Action, p float64) fault.Rule {
		r := fault.Rule{Point: fault.WireTx, Action: a, Prob: p}
		if a == fault.Delay {
			r.Delay = 3 * sim.Microsecond
		}
		if a == fault.Corrupt {
			r.Point = fault.WireRx
		}
		return r
	}
	rules := []fault.Rule{rule(fault.Drop, 0.02), rule(fault.Duplicate, 0.02), rule(fault.Reorder, 0.02),
		rule(fault.Corrupt, 0.01), rule(fault.Delay, 0.02)}
	type tc struct {
		name     string
		op       provider.WROpcode
		readSize int
		mtu      int
		seed     uint64
	}
	var cases []tc
	for _, seed := range []uint64{4, 5, 8} {
		cases = append(cases,
			tc{fmt.Sprintf("READ 8 KiB at MTU 4096, seed %d", seed), provider.WRRDMARead, 8192, 4096, seed},
			tc{fmt.Sprintf("READ 3 KiB at MTU 1024, seed %d", seed), provider.WRRDMARead, 3072, 1024, seed},
			tc{fmt.Sprintf("FETCH_ADD, seed %d", seed), provider.WRAtomicFetchAdd, 0, 1024, seed},
			tc{fmt.Sprintf("CMP_SWAP, seed %d", seed), provider.WRAtomicCmpSwp, 0, 1024, seed})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := rdAtomicRunSeed(t, c.seed, c.op, 2000, 128, c.readSize, testbed.ConnOpts{MTU: c.mtu, Timeout: 14}, 0, rules...)
			require.Zero(t, ctr(w, 1, device.CtrRxReadTooMany.String()), "the responder counts what the requester has outstanding")
			require.NotZero(t, ctr(w, 1, device.CtrDuplicateRequest.String()), "the faults hit")
		})
	}
}
