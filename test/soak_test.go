package test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/softnic/softnic/device"
	"github.com/softnic/softnic/fault"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/testbed"
	"github.com/stretchr/testify/require"
)

// The soak: mixed RC traffic over four QP pairs on a lossy, duplicating,
// reordering, corrupting, delaying wire. Every operation must complete
// successfully, remote memory must equal the expected image byte for
// byte, READs must return what the image held when they were posted, and
// every atomic must run exactly once. Deterministic for a seed.
//
//	SOFTNIC_SOAK_MESSAGES=1000000 SOFTNIC_SOAK_SEED=7 go test -run TestSoak -timeout 60m ./test
//
// SOFTNIC_SOAK_TRACE=1 records the run and logs the device warnings when it
// fails.
const (
	soakPairs    = 4
	soakDepth    = 16       // SQ depth: WRs in flight per pair
	soakSlot     = 64 << 10 // largest message
	soakRecvs    = 32       // receives kept posted per pair
	soakWords    = 8        // atomic words per pair
	soakWriteLen = 256 << 10
	// Local buffer: [0,16 slots) sources, then 16 READ destinations, then 16 atomic results.
	soakLocalSize = 2*soakDepth*soakSlot + 4096
	// Remote buffer: the WRITE/READ region, the receive buffers, the atomic words.
	soakRecvBase  = soakWriteLen
	soakWordBase  = soakRecvBase + soakRecvs*soakSlot
	soakRemoteSze = soakWordBase + 4096
)

type soakOp struct {
	wr     provider.SendWR
	expect []byte // READ: the image at post time; SEND: the payload
	orig   uint64 // atomics: the value they must return
}

type soakPair struct {
	req, rsp       *testbed.Endpoint
	image          []byte // expected remote WRITE region
	words          [soakWords]uint64
	ops            []soakOp // ring of soakDepth, by WR sequence
	posted, done   int      // WR sequence numbers
	sends          [][]byte // SEND payloads in flight, in order
	recvPosted     int
	recvDone       int
	rng            *rand.Rand
	atomics, nsend int
}

type soakStats struct {
	msgs, bytes                 int
	byOp                        [7]int
	lists                       int
	timeouts, retrans, naks     uint64
	seqNAKs, rnrNAKs, dupReqs   uint64
	impliedNAK, replays, faults uint64
}

func soakMessages(t *testing.T) int {
	if v := os.Getenv("SOFTNIC_SOAK_MESSAGES"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, "SOFTNIC_SOAK_MESSAGES")
		return n
	}
	if testing.Short() {
		return 10000
	}
	return 100000
}

func TestSoak(t *testing.T) {
	total := soakMessages(t)
	seed := uint64(0x50a4)
	if v := os.Getenv("SOFTNIC_SOAK_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 0, 64)
		require.NoError(t, err, "SOFTNIC_SOAK_SEED")
		seed = n
	}
	st, w := runSoak(t, seed, total)
	t.Logf("soak: %d messages (%d bytes; SEND %d, WRITE %d, READ %d, CMP_SWAP %d, FETCH_ADD %d; %d post lists) in %v virtual",
		st.msgs, st.bytes, st.byOp[provider.WRSend], st.byOp[provider.WRRDMAWrite], st.byOp[provider.WRRDMARead],
		st.byOp[provider.WRAtomicCmpSwp], st.byOp[provider.WRAtomicFetchAdd], st.lists, w)
	t.Logf("soak: retransmitted packets %d, ACK timeouts %d, NAKs sent %d (PSN-sequence NAKs received %d), RNR NAKs %d, duplicate requests %d, implied NAKs %d, READ/atomic replays %d, wire faults %d",
		st.retrans, st.timeouts, st.naks, st.seqNAKs, st.rnrNAKs, st.dupReqs, st.impliedNAK, st.replays, st.faults)
}

// TestSoakDeterministic: the same seed gives the same run, counter for
// counter and to the picosecond.
func TestSoakDeterministic(t *testing.T) {
	a, ta := runSoak(t, 7, 3000)
	b, tb := runSoak(t, 7, 3000)
	require.Equal(t, a, b)
	require.Equal(t, ta, tb)
}

func runSoak(t *testing.T, seed uint64, total int) (soakStats, sim.Duration) {
	t.Helper()
	cfg := testbed.DefaultConfig()
	cfg.MemSize = 64 << 20
	cfg.Trace = os.Getenv("SOFTNIC_SOAK_TRACE") != ""
	cfg.Check = true // the correct provider breaks no host-protocol rule (device/check.go)
	rule := func(a fault.Action, p float64) fault.Rule {
		r := fault.Rule{Point: fault.WireTx, Action: a, Prob: p, Byte: -1}
		if a == fault.Delay {
			r.Delay = 30 * sim.Microsecond
		}
		return r
	}
	cfg.Faults = &fault.Plan{Seed: seed, Rules: []fault.Rule{
		rule(fault.Drop, 0.05), rule(fault.Duplicate, 0.01), rule(fault.Reorder, 0.01),
		rule(fault.Corrupt, 0.005), rule(fault.Delay, 0.01)}}
	w, err := testbed.New(cfg)
	require.NoError(t, err)
	defer w.Close()
	rng := rand.New(rand.NewPCG(seed, 0x50a4))
	all := provider.AccessLocalWrite | provider.AccessRemoteWrite | provider.AccessRemoteRead | provider.AccessRemoteAtomic
	mtus := []int{1024, 4096, 256, 2048}
	pairs := make([]*soakPair, soakPairs)
	for i := range pairs {
		eps, err := w.ConnectRC(testbed.ConnOpts{MTU: mtus[i], BufSize: soakRemoteSze + soakLocalSize, SQDepth: soakDepth,
			RQDepth: soakRecvs, MaxSGE: 2, CQDepth: 256, Access: all, Timeout: 6, MinRNR: 1,
			PSN: [2]uint32{0xfffff0 - uint32(i)*1000, 0x10}}) // PSNs wrap early
		require.NoError(t, err)
		p := &soakPair{req: eps[0], rsp: eps[1], image: make([]byte, soakWriteLen), ops: make([]soakOp, soakDepth),
			rng: rand.New(rand.NewPCG(seed, uint64(i)))}
		fillRand(p.rng, p.image)
		copy(p.rsp.Buf.Bytes[:soakWriteLen], p.image)
		for k := range p.words {
			p.words[k] = p.rng.Uint64()
			binary.LittleEndian.PutUint64(p.rsp.Buf.Bytes[soakWordBase+8*k:], p.words[k])
		}
		for p.recvPosted < soakRecvs {
			p.postRecv(t)
		}
		pairs[i] = p
	}
	var st soakStats
	start := w.Eng.Now()
	wall := time.Now()
	wcs := make([]provider.WC, 32)
	idle := 0
	// Until every WR posted has completed, not only total of them: the
	// expected image holds each WRITE from when it is posted, so one
	// still in flight at the end compared as a WRITE that never landed.
	outstanding := func() bool {
		for _, p := range pairs {
			if p.done < p.posted {
				return true
			}
		}
		return false
	}
	for st.msgs < total || outstanding() {
		progress := false
		for _, p := range pairs {
			// Post: one WR at a time or a list, as slots free up.
			for free := soakDepth - (p.posted - p.done); free > 0 && p.posted < total/soakPairs+1; {
				n := 1
				if rng.IntN(4) == 0 {
					n = 1 + rng.IntN(free)
					st.lists++
				}
				n = min(n, free)
				wrs := make([]provider.SendWR, n)
				for j := range wrs {
					wrs[j] = p.next(&st, j == n-1)
				}
				k, err := p.req.QP.PostSend(wrs)
				require.NoError(t, err)
				require.Equal(t, n, k)
				free -= n
			}
			n, err := p.req.SendCQ.Poll(wcs)
			require.NoError(t, err)
			for _, wc := range wcs[:n] {
				if wc.Status != provider.WCSuccess {
					soakDump(t, w)
				}
				require.Equal(t, provider.WCSuccess, wc.Status, "WR %d (%v) on QP %#x", wc.WRID, p.ops[wc.WRID%soakDepth].wr.Opcode, wc.QPNum)
				for p.done <= int(wc.WRID) {
					p.check(t, p.done)
					p.done++
					st.msgs++
				}
				progress = true
			}
			n, err = p.rsp.RecvCQ.Poll(wcs)
			require.NoError(t, err)
			for _, wc := range wcs[:n] {
				require.Equal(t, provider.WCSuccess, wc.Status)
				require.NotEmpty(t, p.sends, "a receive completed with no SEND in flight")
				slot := int(wc.WRID) % soakRecvs
				got := p.rsp.Buf.Bytes[soakRecvBase+slot*soakSlot:][:wc.ByteLen]
				require.True(t, bytes.Equal(p.sends[0], got), "SEND %d payload (%d bytes)", p.recvDone, len(p.sends[0]))
				p.sends = p.sends[1:]
				p.recvDone++
				p.postRecv(t)
				progress = true
			}
		}
		if progress {
			idle = 0
		} else if idle++; idle > 1000 {
			soakDump(t, w)
			for _, p := range pairs {
				t.Logf("pair QP %#x: posted %d done %d, sends in flight %d, recvs %d/%d, state %v, outstanding %+v; peer outstanding %+v",
					p.req.QP.QPN(), p.posted, p.done, len(p.sends), p.recvDone, p.recvPosted, qpState(t, p.req.QP),
					w.Hosts[0].Dev.Outstanding(p.req.QP.QPN()), w.Hosts[1].Dev.Outstanding(p.rsp.QP.QPN()))
			}
			t.Fatalf("soak stalled after %d messages (engine: %d pending, now %v): %+v", st.msgs, w.Eng.Pending(), w.Eng.Now(), w.Hosts[0].Dev.HWCounters())
		}
	}
	for _, p := range pairs {
		require.Equal(t, p.image, p.rsp.Buf.Bytes[:soakWriteLen], "remote image of QP %#x", p.req.QP.QPN())
		for k := range p.words {
			require.Equal(t, p.words[k], binary.LittleEndian.Uint64(p.rsp.Buf.Bytes[soakWordBase+8*k:]), "atomic word %d", k)
		}
		require.Equal(t, provider.QPStateRTS, qpState(t, p.req.QP))
	}
	for i := 0; i < 2; i++ {
		c := w.Hosts[i].Dev.Counters()
		st.timeouts += c.Value(device.CtrLocalACKTimeoutErr)
		st.retrans += c.Value(device.CtrRetransmittedPkts)
		st.naks += c.Value(device.CtrNAKsSent)
		st.seqNAKs += c.Value(device.CtrPacketSeqErr)
		st.rnrNAKs += c.Value(device.CtrRNRNAKsSent)
		st.dupReqs += c.Value(device.CtrDuplicateRequest)
		st.impliedNAK += c.Value(device.CtrImpliedNAKSeqErr)
		st.replays += c.Value(device.CtrReplayRead) + c.Value(device.CtrReplayAtomic)
	}
	// Atomics ran exactly once: the responders executed as many as were posted.
	var atomics uint64
	for _, p := range pairs {
		atomics += uint64(p.atomics)
	}
	require.Equal(t, atomics, w.Hosts[1].Dev.Counters().Value(device.CtrRxAtomicRequests), "each atomic executed exactly once")
	for _, h := range w.Hosts {
		if h.Dev.Checker().Err() != nil {
			soakDump(t, w)
		}
		require.NoError(t, h.Dev.Checker().Err(), "checked mode under the soak")
	}
	for _, s := range []string{"wire_fault_drop", "wire_fault_duplicate", "wire_fault_reorder", "wire_fault_corrupt", "wire_fault_delay"} {
		st.faults += w.Wire.Get(s)
	}
	if testing.Verbose() {
		fmt.Printf("soak seed %#x: %d messages in %v wall\n", seed, st.msgs, time.Since(wall).Round(time.Millisecond))
	}
	return st, w.Eng.Now().Sub(start)
}

// soakDump logs the transport warnings of a traced run
// (SOFTNIC_SOAK_TRACE=1), the wire's own left out.
func soakDump(t *testing.T, w *testbed.World) {
	if w.Rec == nil {
		return
	}
	for _, e := range w.Rec.Warnings() {
		if e.Component != "wire" && e.Name != device.CtrRxDropBadICRC.String() {
			t.Log(e.Node, e.Start, e.Name, e.Detail)
		}
	}
}

func fillRand(rng *rand.Rand, b []byte) {
	for i := 0; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], rng.Uint64())
	}
}

func (p *soakPair) size() int {
	switch r := p.rng.IntN(20); {
	case r < 10:
		return p.rng.IntN(257)
	case r < 17:
		return p.rng.IntN(4097)
	default:
		return p.rng.IntN(soakSlot + 1)
	}
}

func (p *soakPair) postRecv(t *testing.T) {
	slot := p.recvPosted % soakRecvs
	_, err := p.rsp.QP.PostRecv([]provider.RecvWR{{WRID: uint64(p.recvPosted),
		SGL: []provider.SGE{p.rsp.MR.SGE(uint64(soakRecvBase+slot*soakSlot), soakSlot)}}})
	require.NoError(t, err)
	p.recvPosted++
}

// next builds WR number p.posted and applies it to the expected image.
func (p *soakPair) next(st *soakStats, signaled bool) provider.SendWR {
	seq := p.posted
	p.posted++
	slot := seq % soakDepth
	op := &p.ops[slot]
	*op = soakOp{}
	local := p.req.Buf.Bytes
	srcOff := uint64(slot * soakSlot)
	dstOff := uint64((soakDepth + slot) * soakSlot)
	resOff := uint64(2*soakDepth*soakSlot + 8*slot)
	wr := provider.SendWR{WRID: uint64(seq), RKey: p.rsp.MR.RKey}
	if signaled || p.rng.IntN(2) == 0 {
		wr.Flags = provider.SendSignaled
	}
	kinds := []provider.WROpcode{provider.WRRDMAWrite, provider.WRRDMAWrite, provider.WRRDMARead, provider.WRSend,
		provider.WRSend, provider.WRAtomicFetchAdd, provider.WRAtomicCmpSwp}
	wr.Opcode = kinds[p.rng.IntN(len(kinds))]
	if wr.Opcode == provider.WRSend && len(p.sends) >= soakRecvs {
		wr.Opcode = provider.WRRDMAWrite // keep SENDs within the receives posted
	}
	st.byOp[wr.Opcode]++
	switch wr.Opcode {
	case provider.WRRDMAWrite, provider.WRSend:
		n := p.size()
		fillRand(p.rng, local[srcOff:srcOff+uint64(n)+7]) // whole words up to n rounded up: never into the next slot
		if n > 0 {
			wr.SGL = []provider.SGE{p.req.MR.SGE(srcOff, uint32(n))}
		}
		st.bytes += n
		if wr.Opcode == provider.WRSend {
			payload := append([]byte(nil), local[srcOff:srcOff+uint64(n)]...)
			p.sends = append(p.sends, payload)
			break
		}
		off := p.rng.IntN(soakWriteLen - n + 1)
		wr.RemoteAddr = p.rsp.MR.Addr + uint64(off)
		copy(p.image[off:], local[srcOff:srcOff+uint64(n)])
		// A WRITE may overtake an earlier READ at the responder (a
		// retried READ reads memory again): fence it behind READs still
		// outstanding, as an application must (IB ordering rules).
		for s := p.done; s < seq; s++ {
			if p.ops[s%soakDepth].wr.Opcode == provider.WRRDMARead {
				wr.Flags |= provider.SendFence
				break
			}
		}
	case provider.WRRDMARead:
		n := p.size()
		off := p.rng.IntN(soakWriteLen - n + 1)
		wr.RemoteAddr = p.rsp.MR.Addr + uint64(off)
		if n > 0 {
			wr.SGL = []provider.SGE{p.req.MR.SGE(dstOff, uint32(n))}
		}
		op.expect = append([]byte(nil), p.image[off:off+n]...)
		st.bytes += n
	case provider.WRAtomicFetchAdd, provider.WRAtomicCmpSwp:
		k := p.rng.IntN(soakWords)
		wr.RemoteAddr = p.rsp.MR.Addr + uint64(soakWordBase+8*k)
		wr.SGL = []provider.SGE{p.req.MR.SGE(resOff, 8)}
		op.orig = p.words[k]
		if wr.Opcode == provider.WRAtomicFetchAdd {
			wr.CompareAdd = p.rng.Uint64()
			p.words[k] += wr.CompareAdd
		} else {
			wr.CompareAdd, wr.Swap = p.words[k], p.rng.Uint64()
			if p.rng.IntN(4) == 0 {
				wr.CompareAdd++ // a compare that fails
			} else {
				p.words[k] = wr.Swap
			}
		}
		p.atomics++
		st.bytes += 8
	}
	op.wr = wr
	return wr
}

// check verifies the local effects of WR seq once it has completed.
func (p *soakPair) check(t *testing.T, seq int) {
	t.Helper()
	op := &p.ops[seq%soakDepth]
	slot := seq % soakDepth
	local := p.req.Buf.Bytes
	switch op.wr.Opcode {
	case provider.WRRDMARead:
		got := local[(soakDepth+slot)*soakSlot:][:len(op.expect)]
		if !bytes.Equal(op.expect, got) {
			t.Fatalf("READ %d (%d bytes at %#x) returned other bytes", seq, len(op.expect), op.wr.RemoteAddr)
		}
	case provider.WRAtomicFetchAdd, provider.WRAtomicCmpSwp:
		got := binary.LittleEndian.Uint64(local[2*soakDepth*soakSlot+8*slot:])
		require.Equal(t, op.orig, got, "%v %d: original value", op.wr.Opcode, seq)
	}
}
