package device_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/softnic/softnic/fault"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/testbed"
	"github.com/softnic/softnic/trace"
	"github.com/stretchr/testify/require"
)

// TestRCChurn is TestUDParkChurn for connected QPs: three RC pairs and a
// UC pair (the odd ones sending from host 1) carry WRITEs, READs, SENDs
// and atomics of up to 256 KiB while the test moves QPs to ERR, resets
// and reconnects pairs with fresh PSNs, destroys and recreates them,
// flaps the link, lets the wire drop, duplicate and reorder frames, and
// in some runs makes a device fatal at the end. Each incarnation's WRs
// complete at most once, in posting order, on its own QP's CQs and never
// after the incarnation was reset or destroyed; a live incarnation's all
// complete once its QP goes to ERR at the end (or the driver flushes them
// after a fatal error); a successful READ returns the remote bytes, an atomic the remote word's
// old value, a WRITE leaves its bytes at the target and a received SEND
// is the one sent; the engine goes idle; a seed gives one trace. READs
// read a region nobody writes, and every WRITE, atomic and receive has
// its own bytes, so no fence is needed to know what they must see. It
// found a UC receive WQE kept across RESET (ba215ca), doorbells landing
// after the MODIFY_QP issued behind them (4ebaf1a) and the receive of a
// message in progress lost at device fatal (9925116).
func TestRCChurn(t *testing.T) {
	for seed := rcChurnFirst; seed < rcChurnSeeds; seed++ {
		a := rcChurn(t, uint64(seed))
		if seed < 2 {
			require.True(t, bytes.Equal(a, rcChurn(t, uint64(seed))), "seed %d: two runs, two traces", seed)
		}
	}
}

// By hand: more seeds (rcChurnFirst..rcChurnSeeds), or a log of each
// step and of the completions by opcode and status (rcChurnDebug).
var (
	rcChurnDebug = false
	rcChurnSeeds = 40
	rcChurnFirst = 0
)

const (
	rcChurnPairs  = 4 // pair 3 is UC
	rcChurnBuf    = 4 << 20
	rcChurnStatic = 512 << 10 // the READ source: never written
	rcChurnRecv   = 16 << 10  // receive buffers; SENDs are no larger
)

// rcChurnQueue is one work queue of one incarnation of a QP.
type rcChurnQueue struct {
	posted []uint64
	next   int
}

type rcChurnWR struct {
	op       provider.WROpcode
	loc, rem uint64 // offsets into the local and remote buffers
	n        int
	orig     uint64 // atomics: the remote word before
}

type rcChurnSide struct {
	ep     *testbed.Endpoint
	inc    int
	sq, rq *rcChurnQueue
	alloc  uint64 // bump allocator in ep.Buf above rcChurnStatic
	dead   bool   // its device went fatal
}

type rcChurnPair struct {
	idx  int
	typ  provider.QPType
	s    [2]*rcChurnSide
	req  int // the side that posts sends
	psn  uint32
	recv int // receives outstanding at the responder
}

func rcChurnFill(b []byte, id uint64) {
	for i := range b {
		b[i] = byte(id*31 + uint64(i)*7 + uint64(i>>8))
	}
}

func rcChurnStaticByte(pair, i int) byte { return byte(i*13 + i>>9 + pair) }

func rcChurn(t *testing.T, seed uint64) []byte {
	rng := seed*0x9e3779b97f4a7c15 + 1
	rnd := func(n int) int {
		rng ^= rng << 13
		rng ^= rng >> 7
		rng ^= rng << 17
		return int(rng % uint64(n))
	}
	cfg := testbed.DefaultConfig()
	cfg.Trace = true
	cfg.MemSize = 64 << 20
	if seed%3 != 0 {
		p := 0.02 * float64(1+seed%4)
		cfg.Faults = &fault.Plan{Seed: seed, Rules: []fault.Rule{
			{Point: fault.WireTx, Action: fault.Drop, Prob: p, Byte: -1},
			{Point: fault.WireTx, Action: fault.Duplicate, Prob: p, Byte: -1},
			{Point: fault.WireTx, Action: fault.Reorder, Prob: p, Byte: -1},
		}}
		if seed%3 == 2 {
			cfg.Faults.Rules = append(cfg.Faults.Rules, fault.Rule{Point: fault.WireTx, Action: fault.Corrupt, Prob: p, Byte: -1},
				fault.Rule{Point: fault.WireTx, Action: fault.Delay, Prob: p, Byte: -1, Delay: 30 * sim.Microsecond})
		}
	}
	w, err := testbed.New(cfg)
	require.NoError(t, err)
	defer w.Close()
	access := provider.AccessLocalWrite | provider.AccessRemoteWrite | provider.AccessRemoteRead | provider.AccessRemoteAtomic
	opts := testbed.ConnOpts{BufSize: rcChurnBuf, SQDepth: 32, RQDepth: 32, CQDepth: 1024, SigAll: true, Access: access,
		MinRNR: 1, RNRRetry: 3, Timeout: 10, RetryCnt: 3, MaxRdAtomic: 4, MaxDestRdAtomic: 4}
	wrs := map[uint64]rcChurnWR{}
	stats := map[string]int{}
	var pairs [rcChurnPairs]*rcChurnPair
	for i := range pairs {
		o := opts
		if i == rcChurnPairs-1 {
			o.Type = provider.QPTypeUC
			o.Access = provider.AccessLocalWrite | provider.AccessRemoteWrite
		}
		eps, err := w.ConnectRC(o)
		require.NoError(t, err)
		p := &rcChurnPair{idx: i, typ: o.Type, req: i % 2, psn: 0x100}
		if p.typ == 0 {
			p.typ = provider.QPTypeRC
		}
		for s := range 2 {
			p.s[s] = &rcChurnSide{ep: eps[s], sq: &rcChurnQueue{}, rq: &rcChurnQueue{}, alloc: rcChurnStatic}
			b := eps[s].Buf.Bytes[:rcChurnStatic]
			for j := range b {
				b[j] = rcChurnStaticByte(i, j)
			}
		}
		pairs[i] = p
	}
	w.Settle(0)

	// id is the WRID: pair, side, receive, incarnation, sequence.
	seq := uint64(0)
	id := func(p *rcChurnPair, s int, recv bool) uint64 {
		seq++
		r := uint64(0)
		if recv {
			r = 1
		}
		return uint64(p.idx)<<56 | uint64(s)<<55 | r<<54 | uint64(p.s[s].inc&0x3fffff)<<32 | seq
	}
	take := func(sd *rcChurnSide, n int) (uint64, bool) {
		off := (sd.alloc + 7) &^ 7
		if off+uint64(n) > rcChurnBuf {
			return 0, false
		}
		sd.alloc = off + uint64(n)
		return off, true
	}
	attr := func(p *rcChurnPair, s int, psn [2]uint32) provider.ConnectAttr {
		a := provider.ConnectAttr{PSN: psn[s], MTU: 1024, Access: access, SGIDIndex: 1, HopLimit: 64,
			MaxRdAtomic: 4, MaxDestRdAtomic: 4, MinRNRTimer: 1, Timeout: 10, RetryCnt: 3, RNRRetry: 3}
		if p.typ == provider.QPTypeUC {
			a.Access = provider.AccessLocalWrite | provider.AccessRemoteWrite
		}
		peer := p.s[1-s].ep
		a.Peer = provider.Peer{QPN: peer.QP.QPN(), PSN: psn[1-s], GID: peer.Host.ID.IP.As16(), MAC: peer.Host.ID.MAC}
		return a
	}
	newInc := func(sd *rcChurnSide) {
		sd.inc++
		sd.sq, sd.rq = &rcChurnQueue{}, &rcChurnQueue{}
	}
	// connect brings both QPs of p (in RESET) to RTS with fresh PSNs.
	connect := func(p *rcChurnPair) {
		p.psn += 0x10000 + uint32(rnd(0x1000))
		psn := [2]uint32{p.psn & 0xffffff, (p.psn + 0x800000 + uint32(rnd(0x1000))) & 0xffffff}
		for s := range 2 {
			require.NoError(t, p.s[s].ep.QP.ToInit(attr(p, s, psn)))
			require.NoError(t, p.s[s].ep.QP.ToRTR(attr(p, s, psn)))
		}
		for s := range 2 {
			require.NoError(t, p.s[s].ep.QP.ToRTS(attr(p, s, psn)))
		}
		p.recv = 0
	}

	check := func(p *rcChurnPair, s int, recv bool, wc provider.WC) {
		sd := p.s[s]
		what := fmt.Sprintf("seed %d pair %d side %d recv %v WRID %#x status %v", seed, p.idx, s, recv, wc.WRID, wc.Status)
		require.Equal(t, uint64(p.idx), wc.WRID>>56, what)
		require.Equal(t, uint64(s), wc.WRID>>55&1, what)
		require.Equal(t, recv, wc.WRID>>54&1 == 1, what)
		require.Equal(t, uint64(sd.inc&0x3fffff), wc.WRID>>32&0x3fffff, "%s: a CQE of another incarnation (now %d)", what, sd.inc)
		require.Equal(t, sd.ep.QP.QPN(), wc.QPNum, what)
		q := sd.sq
		if recv {
			q = sd.rq
		}
		require.Less(t, q.next, len(q.posted), "%s: a completion of nothing posted", what)
		require.Equal(t, q.posted[q.next], wc.WRID, "%s: completions in posting order", what)
		q.next++
		stats[fmt.Sprintf("%v/%v/%d", wrs[wc.WRID].op, wc.Status, wrs[wc.WRID].n>>16)]++
		if recv {
			p.recv--
		}
		if wc.Status != provider.WCSuccess {
			ok := []provider.WCStatus{provider.WCWRFlushErr, provider.WCRetryExcErr, provider.WCRNRRetryExcErr, provider.WCRemInvReqErr, provider.WCRemOpErr}
			require.Contains(t, ok, wc.Status, what)
			return
		}
		loc := sd.ep.Buf.Bytes
		if recv {
			require.GreaterOrEqual(t, wc.ByteLen, uint32(8), what)
			b := loc[wrs[wc.WRID].loc:][:wc.ByteLen]
			sid := binary.LittleEndian.Uint64(b)
			swr, ok := wrs[sid]
			require.True(t, ok, "%s: received SEND %#x", what, sid)
			require.Equal(t, swr.n, int(wc.ByteLen), what)
			want := make([]byte, wc.ByteLen)
			rcChurnFill(want, sid)
			binary.LittleEndian.PutUint64(want, sid)
			require.True(t, bytes.Equal(want, b), "%s: SEND %#x's bytes", what, sid)
			return
		}
		wr := wrs[wc.WRID]
		rem := p.s[1-s].ep.Buf.Bytes
		switch wr.op {
		case provider.WRRDMARead:
			require.True(t, bytes.Equal(rem[wr.rem:][:wr.n], loc[wr.loc:][:wr.n]), "%s: READ of %d bytes at %#x", what, wr.n, wr.rem)
		case provider.WRRDMAWrite:
			if p.typ == provider.QPTypeRC {
				require.True(t, bytes.Equal(rem[wr.rem:][:wr.n], loc[wr.loc:][:wr.n]), "%s: WRITE of %d bytes at %#x", what, wr.n, wr.rem)
			}
		case provider.WRAtomicFetchAdd, provider.WRAtomicCmpSwp:
			require.Equal(t, wr.orig, binary.BigEndian.Uint64(loc[wr.loc:]), what)
		}
	}
	pollAll := func() {
		wcs := make([]provider.WC, 64)
		for _, p := range pairs {
			for s, sd := range p.s {
				for i, cq := range []*provider.CQ{sd.ep.SendCQ, sd.ep.RecvCQ} {
					for {
						n, err := cq.Poll(wcs)
						require.NoError(t, err, "seed %d pair %d side %d (QPN %#x) recv CQ %v", seed, p.idx, s, sd.ep.QP.QPN(), i == 1)
						if n == 0 {
							break
						}
						for _, wc := range wcs[:n] {
							check(p, s, i == 1, wc)
						}
					}
				}
			}
		}
	}
	post := func(p *rcChurnPair) {
		rs, ss := p.s[1-p.req], p.s[p.req]
		for p.recv < 8 {
			off, ok := take(rs, rcChurnRecv)
			if !ok {
				break
			}
			wid := id(p, 1-p.req, true)
			if _, err := rs.ep.QP.PostRecv([]provider.RecvWR{{WRID: wid, SGL: []provider.SGE{rs.ep.MR.SGE(off, rcChurnRecv)}}}); err != nil {
				break
			}
			wrs[wid] = rcChurnWR{loc: off}
			rs.rq.posted = append(rs.rq.posted, wid)
			p.recv++
		}
		for range 1 + rnd(4) {
			ops := []provider.WROpcode{provider.WRRDMAWrite, provider.WRRDMARead, provider.WRSend, provider.WRAtomicFetchAdd, provider.WRAtomicCmpSwp}
			op := ops[rnd(len(ops))]
			if p.typ == provider.QPTypeUC && op != provider.WRSend {
				op = provider.WRRDMAWrite
			}
			n := 1 + rnd(4096)
			if rnd(4) == 0 {
				n = 1 + rnd(256<<10)
			}
			wid := id(p, p.req, false)
			wr := provider.SendWR{WRID: wid, Opcode: op, RKey: rs.ep.MR.RKey}
			rec := rcChurnWR{op: op, n: n}
			switch op {
			case provider.WRSend:
				n = 8 + rnd(rcChurnRecv-8)
				rec.n = n
				off, ok := take(ss, n)
				if !ok {
					return
				}
				b := ss.ep.Buf.Bytes[off:][:n]
				rcChurnFill(b, wid)
				binary.LittleEndian.PutUint64(b, wid)
				rec.loc = off
				wr.SGL = []provider.SGE{ss.ep.MR.SGE(off, uint32(n))}
			case provider.WRRDMAWrite:
				off, ok := take(ss, n)
				roff, ok2 := take(rs, n)
				if !ok || !ok2 {
					return
				}
				rcChurnFill(ss.ep.Buf.Bytes[off:][:n], wid)
				rec.loc, rec.rem = off, roff
				wr.SGL = []provider.SGE{ss.ep.MR.SGE(off, uint32(n))}
				wr.RemoteAddr = rs.ep.MR.Addr + roff
			case provider.WRRDMARead:
				n = min(n, rcChurnStatic)
				rec.n = n
				off, ok := take(ss, n)
				if !ok {
					return
				}
				rec.loc, rec.rem = off, uint64(rnd(rcChurnStatic-n+1))
				wr.SGL = []provider.SGE{ss.ep.MR.SGE(off, uint32(n))}
				wr.RemoteAddr = rs.ep.MR.Addr + rec.rem
			default:
				off, ok := take(ss, 8)
				roff, ok2 := take(rs, 8)
				if !ok || !ok2 {
					return
				}
				rec.n, rec.loc, rec.rem, rec.orig = 8, off, roff, wid*0x9e3779b97f4a7c15
				binary.BigEndian.PutUint64(rs.ep.Buf.Bytes[roff:], rec.orig)
				wr.SGL = []provider.SGE{ss.ep.MR.SGE(off, 8)}
				wr.RemoteAddr = rs.ep.MR.Addr + roff
				wr.CompareAdd = 1
				if op == provider.WRAtomicCmpSwp {
					wr.CompareAdd, wr.Swap = rec.orig, ^rec.orig
				}
			}
			if k, err := ss.ep.QP.PostSend([]provider.SendWR{wr}); err != nil || k != 1 {
				return
			}
			wrs[wid] = rec
			ss.sq.posted = append(ss.sq.posted, wid)
		}
	}
	linkUp := true
	for step := range 150 {
		p := pairs[rnd(rcChurnPairs)]
		k := rnd(20)
		if rcChurnDebug {
			t.Logf("seed %d step %d pair %d (QPNs %#x %#x) action %d at %v", seed, step, p.idx, p.s[0].ep.QP.QPN(), p.s[1].ep.QP.QPN(), k, w.Eng.Now())
		}
		switch {
		case k < 12:
			post(p)
		case k < 14: // one side to ERR
			s := rnd(2)
			require.NoError(t, p.s[s].ep.QP.Modify(&provider.QPAttr{QPState: provider.QPStateErr}, mlx5.AttrState))
		case k < 17: // reset and reconnect both sides with fresh PSNs
			for _, sd := range p.s {
				require.NoError(t, sd.ep.QP.Modify(&provider.QPAttr{QPState: provider.QPStateReset}, mlx5.AttrState))
				newInc(sd)
			}
			connect(p)
		case k < 18: // destroy and recreate both QPs
			for _, sd := range p.s {
				e := sd.ep
				require.NoError(t, e.QP.Destroy())
				qp, err := e.Host.Ctx.CreateQP(e.PD, provider.QPInitAttr{Type: p.typ, SendCQ: e.SendCQ, RecvCQ: e.RecvCQ, SigAll: true,
					Cap: provider.QPCap{MaxSendWR: 32, MaxRecvWR: 32, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInline: 256}})
				require.NoError(t, err)
				e.QP = qp
				newInc(sd)
			}
			connect(p)
		default:
			linkUp = !linkUp
			w.SetLink(linkUp)
		}
		w.Settle(rnd(200) + rnd(2)*rnd(6000))
		if rnd(3) == 0 {
			pollAll()
		}
	}
	w.SetLink(true)
	const limit = 20_000_000
	require.Less(t, w.Settle(limit), limit, "seed %d: the device went quiet", seed)
	pollAll()
	if seed%5 == 4 {
		dev := w.Hosts[int(seed/5)%2].Dev
		dev.EnterFatal(w.Eng.Now(), 1, "test")
		require.Less(t, w.Settle(limit), limit, "seed %d: quiet after the fatal error", seed)
		for _, p := range pairs {
			for _, sd := range p.s {
				if sd.ep.Host.Dev == dev {
					sd.dead = true
				}
			}
		}
	}
	for _, p := range pairs {
		for _, sd := range p.s {
			if !sd.dead {
				require.NoError(t, sd.ep.QP.Modify(&provider.QPAttr{QPState: provider.QPStateErr}, mlx5.AttrState))
			}
		}
	}
	require.Less(t, w.Settle(limit), limit, "seed %d: quiet after ERR", seed)
	pollAll()
	for _, p := range pairs {
		for s, sd := range p.s {
			// A dead device's QPs were flushed by the kernel (swFlush).
			require.Equal(t, len(sd.sq.posted), sd.sq.next, "seed %d pair %d side %d: every send completed", seed, p.idx, s)
			require.Equal(t, len(sd.rq.posted), sd.rq.next, "seed %d pair %d side %d: every receive completed", seed, p.idx, s)
		}
	}
	if rcChurnDebug {
		t.Logf("seed %d: %v", seed, stats)
	}
	var b bytes.Buffer
	require.NoError(t, trace.WriteChrome(&b, w.Rec.Events()))
	return b.Bytes()
}
