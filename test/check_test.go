package test

import (
	"errors"
	"testing"

	"github.com/softnic/softnic/device"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/testbed"
	"github.com/stretchr/testify/require"
)

// Checked mode (device/check.go): the provider commits each host-protocol
// mistake on purpose (provider.Bugs) and the device names it. The correct
// provider trips nothing under the soak (runSoak turns checked mode on).

type checkCase struct {
	name  string // the violation's name (device.CheckRules)
	rule  string
	conn  testbed.ConnOpts
	cfg   func(*testbed.Config)
	qp    provider.Bugs
	cq    provider.Bugs
	drive func(t *testing.T, w *testbed.World, req, rsp *testbed.Endpoint)
	// only: the mistake must be the only violation reported (once).
	only bool
}

func checkWorld(t *testing.T, c checkCase) (*testbed.World, *testbed.Endpoint, *testbed.Endpoint) {
	t.Helper()
	cfg := testbed.DefaultConfig()
	cfg.Check = true
	if c.cfg != nil {
		c.cfg(&cfg)
	}
	w, err := testbed.New(cfg)
	require.NoError(t, err)
	t.Cleanup(w.Close)
	eps, err := w.ConnectRC(c.conn)
	require.NoError(t, err)
	eps[0].QP.SetBugs(c.qp)
	eps[0].SendCQ.SetBugs(c.cq)
	return w, eps[0], eps[1]
}

// oneWrite posts one signalled 64-byte WRITE and waits for it (or not).
func oneWrite(t *testing.T, _ *testbed.World, req, rsp *testbed.Endpoint) {
	writeWR(t, req, rsp, 1, 0, 64)
	_, _ = testbed.Wait(req.SendCQ, 1)
}

func viaDoorbell(f func(*testing.T, *testbed.World, *testbed.Endpoint, *testbed.Endpoint)) func(*testing.T, *testbed.World, *testbed.Endpoint, *testbed.Endpoint) {
	return func(t *testing.T, w *testbed.World, req, rsp *testbed.Endpoint) {
		req.QP.SetBlueFlame(false)
		f(t, w, req, rsp)
	}
}

// manyWrites posts n unpolled WRITEs with the peer's link down (no ACK,
// no CQE retires anything).
func manyWrites(n int) func(*testing.T, *testbed.World, *testbed.Endpoint, *testbed.Endpoint) {
	return func(t *testing.T, w *testbed.World, req, rsp *testbed.Endpoint) {
		w.Hosts[1].Dev.SetLinkState(false)
		for i := 0; i < n; i++ {
			_, err := req.QP.PostSend([]provider.SendWR{{WRID: uint64(i), Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
				SGL: []provider.SGE{req.MR.SGE(0, 8)}, RemoteAddr: rsp.Buf.Addr, RKey: rsp.MR.RKey}})
			require.NoError(t, err)
		}
	}
}

func inlineWrite(n uint32) func(*testing.T, *testbed.World, *testbed.Endpoint, *testbed.Endpoint) {
	return func(t *testing.T, w *testbed.World, req, rsp *testbed.Endpoint) {
		_, err := req.QP.PostSend([]provider.SendWR{{WRID: 1, Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled | provider.SendInline,
			SGL: []provider.SGE{req.MR.SGE(0, n)}, RemoteAddr: rsp.Buf.Addr, RKey: rsp.MR.RKey}})
		require.NoError(t, err)
		_, _ = testbed.Wait(req.SendCQ, 1)
	}
}

func TestCheckerNamesEachBug(t *testing.T) {
	cases := []checkCase{
		{only: true, name: "doorbell-before-record", rule: "R1", qp: provider.BugRecordAfterDoorbell, drive: viaDoorbell(oneWrite)},
		{only: true, name: "record-mismatch", rule: "R2", qp: provider.BugWrongRecord, drive: viaDoorbell(oneWrite)},
		{only: true, name: "record-without-doorbell", rule: "R3", qp: provider.BugDoorbellFirstWQE, drive: func(t *testing.T, w *testbed.World, req, rsp *testbed.Endpoint) {
			sge := []provider.SGE{req.MR.SGE(0, 8)}
			_, err := req.QP.PostSend([]provider.SendWR{
				{WRID: 1, Opcode: provider.WRRDMAWrite, SGL: sge, RemoteAddr: rsp.Buf.Addr, RKey: rsp.MR.RKey},
				{WRID: 2, Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled, SGL: sge, RemoteAddr: rsp.Buf.Addr, RKey: rsp.MR.RKey}})
			require.NoError(t, err)
			_, _ = testbed.Wait(req.SendCQ, 1)
			w.Settle(1 << 20)
		}},
		{only: true, name: "doorbell-wrong-bfreg", rule: "R3", qp: provider.BugWrongBfreg, drive: viaDoorbell(oneWrite)},
		{name: "bad-ctrl-segment", rule: "R4", qp: provider.BugBadIndex, drive: viaDoorbell(oneWrite)},
		{only: true, name: "inline-over-limit", rule: "R5", qp: provider.BugInlineOverLimit, conn: testbed.ConnOpts{MaxInline: 32, MaxSGE: 8},
			drive: viaDoorbell(inlineWrite(200))},
		{only: true, name: "sq-overrun", rule: "R6", qp: provider.BugSQOverrun, conn: testbed.ConnOpts{SQDepth: 16}, drive: manyWrites(150)},
		{name: "no-signal-in-window", rule: "R7", qp: provider.BugNeverSignal, conn: testbed.ConnOpts{SQDepth: 16}, drive: func(t *testing.T, w *testbed.World, req, rsp *testbed.Endpoint) {
			for i := 0; i < 150; i++ {
				writeWR(t, req, rsp, uint64(i), 0, 8)
				_, _ = req.SendCQ.Poll(make([]provider.WC, 1))
			}
		}},
		{only: true, name: "bad-fm-ce-se", rule: "R8", qp: provider.BugBadFence, drive: oneWrite},
		{only: true, name: "set-ci-past-producer", rule: "R9", cq: provider.BugSetCIPast, drive: func(t *testing.T, w *testbed.World, req, rsp *testbed.Endpoint) {
			oneWrite(t, w, req, rsp)
			oneWrite(t, w, req, rsp)
		}},
		{only: true, name: "cq-overrun", rule: "R9", conn: testbed.ConnOpts{CQDepth: 4}, drive: func(t *testing.T, w *testbed.World, req, rsp *testbed.Endpoint) {
			for i := 0; i < 12; i++ {
				writeWR(t, req, rsp, uint64(i), 0, 8)
			}
			w.Settle(1 << 20)
		}},
		{only: true, name: "arm-bad-sn", rule: "R10", cq: provider.BugArmBadSN, drive: func(t *testing.T, w *testbed.World, req, rsp *testbed.Endpoint) {
			require.NoError(t, req.SendCQ.ReqNotify(false))
			w.Settle(1 << 16)
		}},
		{only: true, name: "arm-bad-ci", rule: "R10", cq: provider.BugSetCIPast, drive: func(t *testing.T, w *testbed.World, req, rsp *testbed.Endpoint) {
			oneWrite(t, w, req, rsp)
			require.NoError(t, req.SendCQ.ReqNotify(false))
			w.Settle(1 << 16)
		}},
		{only: true, name: "arm-before-record", rule: "R10", cq: provider.BugArmNoRecord, drive: func(t *testing.T, w *testbed.World, req, rsp *testbed.Endpoint) {
			oneWrite(t, w, req, rsp)
			require.NoError(t, req.SendCQ.ReqNotify(false))
			w.Settle(1 << 16)
		}},
		{only: true, name: "bf-half-reused", rule: "R11", qp: provider.BugBFReuseHalf, drive: func(t *testing.T, w *testbed.World, req, rsp *testbed.Endpoint) {
			oneWrite(t, w, req, rsp)
			oneWrite(t, w, req, rsp)
		}},
		{only: true, name: "bf-not-whole-lines", rule: "R11", qp: provider.BugBFNoPad, drive: oneWrite},
		{only: true, name: "bf-no-buffer", rule: "R11", qp: provider.BugBFAnyBfreg, cfg: func(c *testbed.Config) { c.Device.Caps.BFReg0NoBlueFlame = true }, drive: oneWrite},
		{only: true, name: "bf-too-long", rule: "R11", qp: provider.BugBFTooLong, conn: testbed.ConnOpts{MaxInline: 400}, drive: inlineWrite(300)},
		{only: true, name: "doorbell-32bit", rule: "R15", qp: provider.Bug32BitDoorbell, cfg: func(c *testbed.Config) { c.Host.UARNonCached = true },
			drive: viaDoorbell(oneWrite)},
	}
	for _, c := range cases {
		t.Run(c.rule+" "+c.name, func(t *testing.T) {
			w, req, rsp := checkWorld(t, c)
			c.drive(t, w, req, rsp)
			chk := w.Hosts[0].Dev.Checker()
			var names []string
			for _, v := range chk.Violations() {
				names = append(names, v.Name)
			}
			require.Contains(t, names, c.name)
			if c.only {
				require.Equal(t, []string{c.name}, names, "one mistake, one report")
			}
			err := chk.Err()
			require.ErrorIs(t, err, device.ErrProtocol)
			var v *device.Violation
			require.True(t, errors.As(err, &v))
			for _, v := range chk.Violations() {
				if v.Name == c.name {
					require.Equal(t, c.rule, v.Rule)
					require.NotEmpty(t, v.Source)
					require.NotEmpty(t, v.Observed)
					require.NotZero(t, w.Hosts[0].Dev.Counters().Get(v.Counter()))
				}
			}
			require.Zero(t, len(w.Hosts[1].Dev.Checker().Violations()), "the peer did nothing wrong")
		})
	}
}

// TestCheckerRawMMIO covers the rules no provider bug reaches: a record
// not zero at creation (R2) and two writers interleaving on one bfreg (R11).
func TestCheckerRawMMIO(t *testing.T) {
	t.Run("R2 record-not-zero", func(t *testing.T) {
		w, req, _ := checkWorld(t, checkCase{})
		h := w.Hosts[0]
		buf, err := h.Ctx.AllocBuffer(4096, 4096)
		require.NoError(t, err)
		buf.Bytes[64] = 7 // the record at +64 is dirty
		_, err = h.Dev.CreateCQ(mlx5.CreateCQCmd{Entries: 8, CQESize: 64, BufAddr: buf.Addr + 1024, DBAddr: buf.Addr + 64, UARIndex: 3})
		require.NoError(t, err)
		require.Equal(t, "record-not-zero", h.Dev.Checker().Violations()[0].Name)
		_ = req
	})
	t.Run("R11 bf-interleaved", func(t *testing.T) {
		w, req, _ := checkWorld(t, checkCase{})
		info := req.QP.SQInfo()
		m := w.Hosts[0].CPU
		line := func(qpn uint32) {
			var b [64]byte
			b[7] = 8 // ds 8: two lines
			b[4], b[5], b[6] = byte(qpn>>16), byte(qpn>>8), byte(qpn)
			for i := 0; i < 64; i += 8 {
				m.Store64(info.BFRegOffset+uint64(i), le64(b[i:]))
			}
			m.Flush()
		}
		line(req.QP.QPN())
		line(req.QP.QPN() + 1)
		w.Settle(1 << 16)
		var names []string
		for _, v := range w.Hosts[0].Dev.Checker().Violations() {
			names = append(names, v.Name)
		}
		require.Contains(t, names, "bf-interleaved")
	})
}

func le64(b []byte) uint64 {
	var v uint64
	for i := 7; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v
}

// TestCheckerCleanProvider: the correct provider, every path (BlueFlame,
// doorbell, post lists, inline, arm), trips nothing.
func TestCheckerCleanProvider(t *testing.T) {
	w, req, rsp := checkWorld(t, checkCase{})
	done := func() { // the clean provider's WRITEs also succeed
		t.Helper()
		wcs, err := testbed.Wait(req.SendCQ, 1)
		require.NoError(t, err)
		require.Equal(t, provider.WCSuccess, wcs[0].Status)
	}
	for i := 0; i < 50; i++ {
		writeWR(t, req, rsp, uint64(i), uint64(i%8)*64, 64)
		if i%7 == 0 {
			require.NoError(t, req.SendCQ.ReqNotify(false))
		}
		if i == 20 {
			sge := []provider.SGE{req.MR.SGE(0, 8)}
			_, err := req.QP.PostSend([]provider.SendWR{
				{WRID: 1000, Opcode: provider.WRRDMAWrite, SGL: sge, RemoteAddr: rsp.Buf.Addr, RKey: rsp.MR.RKey},
				{WRID: 1001, Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled, SGL: sge, RemoteAddr: rsp.Buf.Addr, RKey: rsp.MR.RKey}})
			require.NoError(t, err)
			done()
		}
		done()
	}
	req.QP.SetBlueFlame(false)
	inlineWrite(100)(t, w, req, rsp)
	for _, h := range w.Hosts {
		require.NoError(t, h.Dev.Checker().Err())
	}
}

// TestCheckerRQTerminator: R12 is observed at the responder, when it takes
// a receive WQE whose short SGE list lacks the terminator — read ahead or
// fetched, RQ or SRQ. The clean provider trips nothing.
func TestCheckerRQTerminator(t *testing.T) {
	for _, c := range []struct {
		name   string
		bug    bool
		srq    bool
		expect bool
	}{
		{"RQ without the terminator", true, false, true},
		{"RQ, clean", false, false, false},
		{"SRQ, clean", false, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := testbed.DefaultConfig()
			cfg.Check = true
			w, err := testbed.New(cfg)
			require.NoError(t, err)
			t.Cleanup(w.Close)
			eps, err := w.ConnectRC(testbed.ConnOpts{MaxSGE: 4, SRQ: c.srq})
			require.NoError(t, err)
			req, rsp := eps[0], eps[1]
			if c.bug {
				rsp.QP.SetBugs(provider.BugRecvNoTerminator)
			}
			wr := []provider.RecvWR{{WRID: 9, SGL: []provider.SGE{rsp.MR.SGE(0, 256)}}}
			if c.srq {
				_, err = rsp.SRQ.PostRecv(wr)
			} else {
				_, err = rsp.QP.PostRecv(wr)
			}
			require.NoError(t, err)
			_, err = req.QP.PostSend([]provider.SendWR{{WRID: 1, Opcode: provider.WRSend, Flags: provider.SendSignaled, SGL: []provider.SGE{req.MR.SGE(0, 64)}}})
			require.NoError(t, err)
			_, _ = testbed.Wait(rsp.RecvCQ, 1)
			vs := w.Hosts[1].Dev.Checker().Violations()
			if !c.expect {
				require.Empty(t, vs)
				return
			}
			require.NotEmpty(t, vs)
			require.Equal(t, "R12", vs[0].Rule)
			require.Equal(t, "rq-sge-terminator", vs[0].Name)
			require.Contains(t, vs[0].Observed, "after 1 SGEs")
			require.NotZero(t, w.Hosts[1].Dev.Counters().Get(vs[0].Counter()))
			require.Empty(t, w.Hosts[0].Dev.Checker().Violations(), "the requester did nothing wrong")
		})
	}
}

// TestCheckerQPReset: a QP moved to RESET and connected again starts its
// SQ at counter 0 with a zeroed record (libmlx5 mlx5_init_qp_indices), a
// legal sequence the checker must not flag. It used to keep the old
// incarnation's last CQE, so the new one's first doorbell looked a whole
// counter lap past it: R6 sq-overrun. The rules still apply after the
// reset: a mistake of the new incarnation is named.
func TestCheckerQPReset(t *testing.T) {
	for _, c := range []struct {
		name string
		bf   bool
		bug  provider.Bugs // committed after the reset
		want []string
	}{
		{name: "doorbell", bf: false},
		{name: "blueflame", bf: true},
		{name: "doorbell, then the record after the doorbell", bf: false, bug: provider.BugRecordAfterDoorbell, want: []string{"doorbell-before-record"}},
		{name: "blueflame, then a reused half", bf: true, bug: provider.BugBFReuseHalf, want: []string{"bf-half-reused"}},
		// A record one ahead: on a fresh ring that is record-mismatch at
		// once (the slot past the doorbell holds no WQE). After a reset the
		// slot still holds the old incarnation's WQE of that very index
		// (the counter restarts at 0), which reads as a WQE written and not
		// rung yet: the checker names it when no doorbell has come for it
		// within the grace, as record-without-doorbell (R3).
		{name: "doorbell, then a record one ahead", bf: false, bug: provider.BugWrongRecord, want: []string{"record-without-doorbell"}},
		{name: "blueflame, then a record one ahead", bf: true, bug: provider.BugWrongRecord, want: []string{"record-without-doorbell"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			w, req, rsp := checkWorld(t, checkCase{})
			req.QP.SetBlueFlame(c.bf)
			for i := 0; i < 37; i++ {
				oneWrite(t, w, req, rsp)
			}
			psn := [2]uint32{0x7000, 0x8000}
			eps := [2]*testbed.Endpoint{req, rsp}
			reconnect(t, eps, psn, provider.ConnectAttr{MTU: 1024, Access: provider.AccessLocalWrite | provider.AccessRemoteWrite, SGIDIndex: 1, HopLimit: 64,
				MaxRdAtomic: 1, MaxDestRdAtomic: 1, MinRNRTimer: 12, Timeout: 14, RetryCnt: 7, RNRRetry: 7})
			req.QP.SetBugs(c.bug)
			for i := 0; i < 3; i++ {
				writeWR(t, req, rsp, uint64(100+i), 0, 64)
				_, err := testbed.Wait(req.SendCQ, 1)
				if c.bug == 0 {
					require.NoError(t, err)
				}
			}
			w.Settle(1 << 20) // past the record watch's grace
			var names []string
			for _, v := range w.Hosts[0].Dev.Checker().Violations() {
				names = append(names, v.Name)
			}
			if c.want == nil {
				require.Empty(t, names)
				return
			}
			require.Subset(t, names, c.want)
			require.NotContains(t, names, "sq-overrun")
		})
	}
}

// TestCheckerSharedBfreg: past 16 QPs (8 UARs × 2 regular bfregs) QPs
// share a bfreg, and its halves alternate in post order whichever QP
// posts: libmlx5 keeps bf->offset per bfreg (struct mlx5_bf). The
// provider kept a toggle per QP, so the second QP on a bfreg wrote the
// half the first had just written; and checked mode compared halves per
// QP, so it would have flagged libmlx5's own order (A half 0, B half 1,
// A half 0) and missed the provider's (A half 0, B half 0).
func TestCheckerSharedBfreg(t *testing.T) {
	setup := func(t *testing.T) (*testbed.World, [2]*testbed.Endpoint, [2]*testbed.Endpoint) {
		w, a, aRsp := checkWorld(t, checkCase{})
		var b [2]*testbed.Endpoint
		for range 16 {
			eps, err := w.ConnectRC(testbed.ConnOpts{})
			require.NoError(t, err)
			b = eps
		}
		ia, ib := a.QP.SQInfo(), b[0].QP.SQInfo()
		require.Equal(t, ia.BFRegOffset, ib.BFRegOffset, "the 1st and the 17th QP share a bfreg")
		require.NotZero(t, ia.BFBufSize)
		return w, [2]*testbed.Endpoint{a, aRsp}, b
	}
	t.Run("the provider alternates the bfreg's halves", func(t *testing.T) {
		w, a, b := setup(t)
		for i, ep := range [][2]*testbed.Endpoint{a, b, a, a, b, b, a, b} {
			ep[0].QP.SetBlueFlame(i%3 != 2) // BlueFlame and doorbells alike
			before := ep[0].QP.SQInfo().BFOffset
			oneWrite(t, w, ep[0], ep[1])
			require.NotEqual(t, before, ep[0].QP.SQInfo().BFOffset, "post %d", i)
			require.Equal(t, a[0].QP.SQInfo().BFOffset, b[0].QP.SQInfo().BFOffset, "post %d: one half for the bfreg", i)
		}
		for _, h := range w.Hosts {
			require.NoError(t, h.Dev.Checker().Err())
		}
	})
	t.Run("a half reused by another QP is named", func(t *testing.T) {
		w, a, b := setup(t)
		b[0].QP.SetBlueFlame(false)
		oneWrite(t, w, b[0], b[1]) // b rings half 0; the bfreg's next is 1
		bb := make([]byte, 8)
		require.NoError(t, w.Hosts[0].Mem.Read(b[0].QP.SQInfo().Addr, bb))
		oneWrite(t, w, a[0], a[1]) // a rings half 1, as it should
		// b rings again at half 1 (as a driver with a toggle per QP
		// would): the half a has just written.
		info := b[0].QP.SQInfo()
		w.Hosts[0].CPU.Store64(info.BFRegOffset+uint64(info.BFBufSize), le64(bb))
		w.Hosts[0].CPU.Flush()
		w.Settle(1 << 16)
		err := w.Hosts[0].Dev.Checker().Err()
		require.ErrorContains(t, err, "bf-half-reused")
	})
}
