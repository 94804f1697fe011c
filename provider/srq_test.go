package provider_test

import (
	"errors"
	"testing"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/provider"
	"github.com/stretchr/testify/require"
)

func TestCreateSRQ(t *testing.T) {
	cases := []struct {
		name                 string
		attr                 provider.SRQInitAttr
		wqes, stride, maxSGE int
	}{
		// cnt = roundup_pow2(max_wr + 1); stride = roundup_pow2(max(32, 16 + 16*max_sge)).
		{"1x0", provider.SRQInitAttr{MaxWR: 1}, 2, 32, 1},
		{"1x1", provider.SRQInitAttr{MaxWR: 1, MaxSGE: 1}, 2, 32, 1},
		{"3x2", provider.SRQInitAttr{MaxWR: 3, MaxSGE: 2}, 4, 64, 3},
		{"4x3", provider.SRQInitAttr{MaxWR: 4, MaxSGE: 3}, 8, 64, 3},
		{"7x4", provider.SRQInitAttr{MaxWR: 7, MaxSGE: 4}, 8, 128, 7},
		{"100x30", provider.SRQInitAttr{MaxWR: 100, MaxSGE: 30, SRQLimit: 10}, 128, 512, 31},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := provider.NewEnv(t, provider.EnvOpts{})
			srq, err := e.PD.CreateSRQ(c.attr)
			require.NoError(t, err)
			info := srq.Info()
			require.Equal(t, c.wqes, info.WQEs)
			require.Equal(t, c.stride, info.Stride)
			require.Equal(t, c.wqes-1, srq.MaxWR())
			require.Equal(t, c.maxSGE, srq.MaxSGE())
			require.Equal(t, uint16(0), info.Head)
			require.Equal(t, uint16(c.wqes-1), info.Tail)
			fs := e.Dev.SRQs[srq.SRQN()]
			require.NotNil(t, fs)
			require.Equal(t, mlx5.CreateSRQCmd{PDN: e.PD.PDN(), BufAddr: info.Addr, DBAddr: info.DBRAddr, WQECnt: c.wqes,
				WQEShift: log2(c.stride), Limit: c.attr.SRQLimit}, fs.Cmd)
			// mlx5_alloc_srq_buf: WQE i links to i+1 (the last one is the tail).
			for i := 0; i < c.wqes-1; i++ {
				w, err := srq.WQE(i)
				require.NoError(t, err)
				require.Equal(t, uint16(i+1), mlx5.SRQNextSeg(w).NextWQEIndex(), "WQE %d", i)
			}
			dbr, err := e.Mem.Slice(info.DBRAddr, 8)
			require.NoError(t, err)
			require.Zero(t, mlx5.DBRec(dbr).Word(mlx5.DBRRecv))
			a, err := srq.Query()
			require.NoError(t, err)
			require.Equal(t, provider.SRQAttr{MaxWR: c.wqes - 1, MaxSGE: c.maxSGE, SRQLimit: c.attr.SRQLimit}, a)
		})
	}
}

func log2(n int) int {
	s := 0
	for 1<<s < n {
		s++
	}
	return s
}

func TestCreateSRQErrors(t *testing.T) {
	cases := []struct {
		name string
		opts provider.EnvOpts
		attr provider.SRQInitAttr
		want error
	}{
		{"no_srq_control", provider.EnvOpts{NoSRQ: true}, provider.SRQInitAttr{MaxWR: 4}, provider.ErrNotSupported},
		{"max_wr_0", provider.EnvOpts{}, provider.SRQInitAttr{MaxWR: 0}, provider.ErrInvalidArg},
		{"max_wr_negative", provider.EnvOpts{}, provider.SRQInitAttr{MaxWR: -1}, provider.ErrInvalidArg},
		{"max_wr_device", provider.EnvOpts{}, provider.SRQInitAttr{MaxWR: 1 << 15}, provider.ErrInvalidArg},
		{"max_sge", provider.EnvOpts{}, provider.SRQInitAttr{MaxWR: 4, MaxSGE: 31}, provider.ErrInvalidArg},
		{"max_sge_negative", provider.EnvOpts{}, provider.SRQInitAttr{MaxWR: 4, MaxSGE: -1}, provider.ErrInvalidArg},
		{"limit_above_max_wr", provider.EnvOpts{}, provider.SRQInitAttr{MaxWR: 4, SRQLimit: 8}, provider.ErrInvalidArg},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := provider.NewEnv(t, c.opts)
			inUse := e.Mem.InUse()
			_, err := e.PD.CreateSRQ(c.attr)
			require.ErrorIs(t, err, c.want)
			require.NotContains(t, e.Dev.Cmds, "create_srq")
			require.Equal(t, inUse, e.Mem.InUse())
		})
	}
	t.Run("device_refuses", func(t *testing.T) {
		e := provider.NewEnv(t, provider.EnvOpts{})
		inUse := e.Mem.InUse()
		e.Dev.Fail["create_srq"] = &mlx5.CmdError{Cmd: "CREATE_SRQ", Status: mlx5.StatusNoResources}
		_, err := e.PD.CreateSRQ(provider.SRQInitAttr{MaxWR: 4})
		require.ErrorIs(t, err, mlx5.StatusNoResources)
		require.Equal(t, inUse, e.Mem.InUse(), "buffer and doorbell record freed")
	})
	t.Run("closed_pd", func(t *testing.T) {
		e := provider.NewEnv(t, provider.EnvOpts{})
		pd, err := e.Ctx.AllocPD()
		require.NoError(t, err)
		require.NoError(t, pd.Dealloc())
		_, err = pd.CreateSRQ(provider.SRQInitAttr{MaxWR: 4})
		require.ErrorIs(t, err, provider.ErrClosed)
	})
}

// srqEnv is an Env whose QP (of type typ, in RTS) receives from an SRQ.
func srqEnv(t *testing.T, typ provider.QPType, attr provider.SRQInitAttr) (*provider.Env, *provider.SRQ) {
	t.Helper()
	e := provider.NewEnv(t, provider.EnvOpts{})
	srq, err := e.PD.CreateSRQ(attr)
	require.NoError(t, err)
	require.NoError(t, e.DropQueues())
	require.NoError(t, e.NewQueues(provider.EnvOpts{Type: typ, SRQ: srq}))
	provider.ToRTSAs(t, typ, e.QP)
	return e, srq
}

func TestQPOnSRQ(t *testing.T) {
	for _, typ := range []provider.QPType{provider.QPTypeRC, provider.QPTypeUC, provider.QPTypeUD} {
		t.Run(map[provider.QPType]string{0: "rc", 1: "uc", 2: "ud"}[typ], func(t *testing.T) {
			e, srq := srqEnv(t, typ, provider.SRQInitAttr{MaxWR: 8, MaxSGE: 1})
			cmd := e.Dev.QPs[e.QP.QPN()].Cmd
			require.Equal(t, srq.SRQN(), cmd.SRQN)
			require.Zero(t, cmd.RQWQECnt, "no RQ of its own")
			require.Zero(t, e.QP.Cap().MaxRecvWR)
			require.Zero(t, e.QP.Cap().MaxRecvSGE)
			require.Same(t, srq, e.QP.SRQ())
			// PostRecv on the QP is refused; an empty list is a no-op.
			n, err := e.QP.PostRecv([]provider.RecvWR{{WRID: 1, SGL: []provider.SGE{e.MR.SGE(0, 64)}}})
			require.ErrorIs(t, err, provider.ErrInvalidArg)
			require.Zero(t, n)
			n, err = e.QP.PostRecv(nil)
			require.NoError(t, err)
			require.Zero(t, n)
			// The SRQ is busy while the QP uses it; so is the PD.
			require.ErrorIs(t, srq.Destroy(), provider.ErrBusy)
			require.ErrorIs(t, e.PD.Dealloc(), provider.ErrBusy)
			require.NoError(t, e.QP.Destroy())
			require.NoError(t, srq.Destroy())
			require.ErrorIs(t, srq.Destroy(), provider.ErrClosed)
			_, err = srq.PostRecv([]provider.RecvWR{{WRID: 1}})
			require.ErrorIs(t, err, provider.ErrClosed)
			_, err = srq.Query()
			require.ErrorIs(t, err, provider.ErrClosed)
		})
	}
}

// srqPost posts one receive whose WRID is 1000+slot it lands in.
func srqPost(t *testing.T, e *provider.Env, srq *provider.SRQ) uint16 {
	t.Helper()
	slot := srq.Info().Head
	n, err := srq.PostRecv([]provider.RecvWR{{WRID: 1000 + uint64(slot), SGL: []provider.SGE{e.MR.SGE(uint64(slot)*64, 64)}}})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	return slot
}

// complete writes a responder CQE naming SRQ slot (as when several QPs on
// the SRQ complete out of order) and polls it.
func complete(t *testing.T, e *provider.Env, srq *provider.SRQ, slot uint16) {
	t.Helper()
	require.NoError(t, e.Dev.WriteCQE(e.CQ.CQN(), mlx5.CQEFields{Opcode: mlx5.CQERespSend, QPN: e.QP.QPN(), SRQN: srq.SRQN(),
		WQECounter: slot, ByteCnt: 10}))
	var wc [1]provider.WC
	n, err := e.CQ.Poll(wc[:])
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, 1000+uint64(slot), wc[0].WRID)
	require.Equal(t, provider.WCSuccess, wc[0].Status)
}

func TestSRQFreeListOrder(t *testing.T) {
	e, srq := srqEnv(t, provider.QPTypeUD, provider.SRQInitAttr{MaxWR: 7, MaxSGE: 1})
	// Fill: slots 0..6 in order, 7 is the spare tail.
	for want := uint16(0); want < 7; want++ {
		require.Equal(t, want, srqPost(t, e, srq))
	}
	n, err := srq.PostRecv([]provider.RecvWR{{WRID: 99}})
	require.ErrorIs(t, err, provider.ErrQueueFull)
	require.Zero(t, n)
	require.Equal(t, 7, srq.Outstanding())
	// Complete out of order: each freed WQE is linked after the tail.
	for _, s := range []uint16{4, 1, 6} {
		complete(t, e, srq, s)
		require.Equal(t, s, srq.Info().Tail)
	}
	// New posts take the old spare (7) first, then the freed WQEs in the
	// order they were freed; the last one freed (6) becomes the spare.
	for _, want := range []uint16{7, 4, 1} {
		require.Equal(t, want, srqPost(t, e, srq))
	}
	_, err = srq.PostRecv([]provider.RecvWR{{WRID: 99}})
	require.ErrorIs(t, err, provider.ErrQueueFull)
	// A CQE naming a WQE that is not posted (the spare) is malformed.
	require.NoError(t, e.Dev.WriteCQE(e.CQ.CQN(), mlx5.CQEFields{Opcode: mlx5.CQERespSend, QPN: e.QP.QPN(), WQECounter: 6}))
	var wc [1]provider.WC
	_, err = e.CQ.Poll(wc[:])
	require.ErrorIs(t, err, provider.ErrBadCQE)
	require.NoError(t, e.Dev.WriteCQE(e.CQ.CQN(), mlx5.CQEFields{Opcode: mlx5.CQERespSend, QPN: e.QP.QPN(), WQECounter: 200}))
	_, err = e.CQ.Poll(wc[:])
	require.ErrorIs(t, err, provider.ErrBadCQE)
}

// The device follows next_wqe_index from WQE 0; the provider frees at the
// tail. Round after round, across the ring's end and the doorbell
// record's 16-bit counter, every receive the device takes is the one the
// provider posted, in posting order.
func TestSRQDeviceFollowsLinks(t *testing.T) {
	e, srq := srqEnv(t, provider.QPTypeRC, provider.SRQInitAttr{MaxWR: 3, MaxSGE: 2})
	dbr, err := e.Mem.Slice(srq.Info().DBRAddr, 8)
	require.NoError(t, err)
	var (
		posted  []uint64 // WRIDs in posting order, not yet taken
		wrid    uint64
		total   int
		wc      [4]provider.WC
		maxSeen int
	)
	for round := 0; total < 70000; round++ {
		// Post up to the SRQ's capacity, in batches of 1..3.
		for srq.Outstanding() < srq.MaxWR() {
			k := min(1+round%3, srq.MaxWR()-srq.Outstanding())
			wrs := make([]provider.RecvWR, k)
			for i := range wrs {
				wrid++
				wrs[i] = provider.RecvWR{WRID: wrid, SGL: []provider.SGE{e.MR.SGE(wrid%64*64, 64)}}
				posted = append(posted, wrid)
			}
			n, err := srq.PostRecv(wrs)
			require.NoError(t, err)
			require.Equal(t, k, n)
		}
		require.Equal(t, uint32(srq.Info().Counter), mlx5.DBRec(dbr).Word(mlx5.DBRRecv))
		// The device takes 1..3 of them.
		take := 1 + round%srq.MaxWR()
		for i := 0; i < take; i++ {
			require.NoError(t, e.Dev.Deliver(e.QP.QPN(), mlx5.CQERespSend, 64, 0, 0))
		}
		n, err := e.CQ.Poll(wc[:])
		require.NoError(t, err)
		require.Equal(t, take, n)
		for i := 0; i < n; i++ {
			require.Equal(t, posted[0], wc[i].WRID, "round %d", round)
			posted = posted[1:]
		}
		total += n
		maxSeen = max(maxSeen, int(srq.Info().Head))
	}
	require.Equal(t, srq.Info().WQEs-1, maxSeen, "every slot used")
	require.Less(t, int(srq.Info().Counter), total, "the 16-bit counter wrapped")
}

func TestSRQPostRecvErrors(t *testing.T) {
	e := provider.NewEnv(t, provider.EnvOpts{})
	srq, err := e.PD.CreateSRQ(provider.SRQInitAttr{MaxWR: 4, MaxSGE: 1})
	require.NoError(t, err)
	ok := provider.RecvWR{WRID: 1, SGL: []provider.SGE{e.MR.SGE(0, 64)}}
	cases := []struct {
		name string
		wr   provider.RecvWR
		want error
	}{
		{"too_many_sge", provider.RecvWR{SGL: []provider.SGE{e.MR.SGE(0, 1), e.MR.SGE(1, 1)}}, provider.ErrTooManySGE},
		{"length_2_31", provider.RecvWR{SGL: []provider.SGE{{Addr: e.Buf.Addr, Length: 1 << 31, LKey: e.MR.LKey}}}, provider.ErrLocalLength},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := srq.Info()
			n, err := srq.PostRecv([]provider.RecvWR{ok, c.wr, ok})
			require.ErrorIs(t, err, c.want)
			var oe *provider.OpError
			require.True(t, errors.As(err, &oe))
			require.Equal(t, 1, oe.Index)
			require.Equal(t, 1, n)
			require.Equal(t, before.Counter+1, srq.Info().Counter)
		})
	}
	t.Run("zero_length_sge_kept", func(t *testing.T) {
		// mlx5_post_srq_recv writes every SGE, zero-length ones too.
		s, err := e.PD.CreateSRQ(provider.SRQInitAttr{MaxWR: 2, MaxSGE: 3})
		require.NoError(t, err)
		_, err = s.PostRecv([]provider.RecvWR{{WRID: 1, SGL: []provider.SGE{e.MR.SGE(0, 0), e.MR.SGE(8, 8)}}})
		require.NoError(t, err)
		w, err := s.WQE(0)
		require.NoError(t, err)
		require.Equal(t, mlx5.DataFields{LKey: e.MR.LKey, Addr: e.MR.Addr}, mlx5.DataSeg(w[16:]).Fields())
		require.Equal(t, mlx5.DataFields{ByteCount: 8, LKey: e.MR.LKey, Addr: e.MR.Addr + 8}, mlx5.DataSeg(w[32:]).Fields())
		require.Equal(t, mlx5.DataFields{LKey: mlx5.InvalidKey}, mlx5.DataSeg(w[48:]).Fields())
	})
}

func TestSRQModify(t *testing.T) {
	cases := []struct {
		name string
		attr provider.SRQAttr
		mask uint32
		want error
	}{
		{"limit", provider.SRQAttr{SRQLimit: 3}, provider.SRQAttrLimit, nil},
		{"limit_max_wr", provider.SRQAttr{SRQLimit: 7}, provider.SRQAttrLimit, nil},
		{"limit_0_disarms", provider.SRQAttr{}, provider.SRQAttrLimit, nil},
		{"limit_above_max_wr", provider.SRQAttr{SRQLimit: 8}, provider.SRQAttrLimit, provider.ErrInvalidArg},
		{"resize", provider.SRQAttr{MaxWR: 100}, provider.SRQAttrMaxWR, provider.ErrInvalidArg},
		{"resize_and_limit", provider.SRQAttr{MaxWR: 100, SRQLimit: 1}, provider.SRQAttrMaxWR | provider.SRQAttrLimit, provider.ErrInvalidArg},
		{"unknown_mask", provider.SRQAttr{}, 1 << 2, provider.ErrInvalidArg},
		{"empty_mask", provider.SRQAttr{}, 0, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := provider.NewEnv(t, provider.EnvOpts{})
			srq, err := e.PD.CreateSRQ(provider.SRQInitAttr{MaxWR: 7, MaxSGE: 1})
			require.NoError(t, err)
			err = srq.Modify(c.attr, c.mask)
			if c.want != nil {
				require.ErrorIs(t, err, c.want)
				require.Empty(t, e.Dev.SRQMods, "refused before MODIFY_SRQ")
				return
			}
			require.NoError(t, err)
			require.Equal(t, []mlx5.ModifySRQCmd{{SRQN: srq.SRQN(), Mask: c.mask, MaxWR: c.attr.MaxWR, Limit: c.attr.SRQLimit}}, e.Dev.SRQMods)
			a, err := srq.Query()
			require.NoError(t, err)
			if c.mask&provider.SRQAttrLimit != 0 {
				require.Equal(t, c.attr.SRQLimit, a.SRQLimit)
			}
		})
	}
}

// Destroying (or resetting) a QP on an SRQ removes its unpolled CQEs and
// gives the SRQ WQEs its receive CQEs name back to the SRQ.
func TestSRQCleanOnDestroy(t *testing.T) {
	for _, reset := range []bool{false, true} {
		name := "destroy"
		if reset {
			name = "reset"
		}
		t.Run(name, func(t *testing.T) {
			e, srq := srqEnv(t, provider.QPTypeUD, provider.SRQInitAttr{MaxWR: 7, MaxSGE: 1})
			for i := 0; i < 5; i++ {
				srqPost(t, e, srq)
			}
			for i := 0; i < 3; i++ {
				require.NoError(t, e.Dev.Deliver(e.QP.QPN(), mlx5.CQERespSend, 1, 0, 0))
			}
			require.Equal(t, 5, srq.Outstanding())
			if reset {
				require.NoError(t, e.QP.Modify(&provider.QPAttr{QPState: provider.QPStateReset}, mlx5.AttrState))
			} else {
				require.NoError(t, e.QP.Destroy())
			}
			require.Equal(t, 2, srq.Outstanding(), "the 3 completed WQEs were freed")
			require.Equal(t, uint32(3), e.CQ.ConsumerIndex())
		})
	}
}

func TestRecvWCFields(t *testing.T) {
	cases := []struct {
		name      string
		flagsRQPN uint32
		op        mlx5.CQEOpcode
		srcQP     uint32
		sl        uint8
		grh       bool
		hdr       provider.NetworkHdr
	}{
		{"ipv4_grh", 1<<28 | 2<<24 | 0xabc, mlx5.CQERespSend, 0xabc, 2, true, provider.NetHdrIPv4},
		{"ipv4_no_grh", 2<<24 | 0x123456, mlx5.CQERespSend, 0x123456, 2, false, provider.NetHdrIPv4},
		{"ipv6_grh3", 3<<28 | 1<<24 | 0xffffff, mlx5.CQERespSendImm, 0xffffff, 1, true, provider.NetHdrIPv6},
		{"roce_v1", 2<<28 | 0<<24 | 1, mlx5.CQERespSend, 1, 0, true, provider.NetHdrRoCEv1},
		{"l3_reserved", 3 << 24, mlx5.CQERespSend, 0, 3, false, provider.NetHdrNone},
		{"write_imm", 2 << 24, mlx5.CQERespWrImm, 0, 2, false, provider.NetHdrIPv4},
		{"high_bits_ignored", 0xc0000000 | 2<<24 | 5, mlx5.CQERespSend, 5, 2, false, provider.NetHdrIPv4},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, srq := srqEnv(t, provider.QPTypeUD, provider.SRQInitAttr{MaxWR: 3, MaxSGE: 1})
			slot := srqPost(t, e, srq)
			require.NoError(t, e.Dev.Deliver(e.QP.QPN(), c.op, 140, 0, c.flagsRQPN))
			var wc [1]provider.WC
			n, err := e.CQ.Poll(wc[:])
			require.NoError(t, err)
			require.Equal(t, 1, n)
			w := wc[0]
			require.Equal(t, 1000+uint64(slot), w.WRID)
			require.Equal(t, c.srcQP, w.SrcQP)
			require.Equal(t, c.sl, w.SL)
			require.Equal(t, c.grh, w.Flags&provider.WCFlagGRH != 0)
			require.Equal(t, c.hdr, w.NetworkHdr)
			require.Equal(t, uint32(140), w.ByteLen)
		})
	}
	t.Run("requester_and_errors_report_none", func(t *testing.T) {
		e, srq := srqEnv(t, provider.QPTypeUD, provider.SRQInitAttr{MaxWR: 3, MaxSGE: 1})
		slot := srqPost(t, e, srq)
		require.NoError(t, e.Dev.WriteCQE(e.CQ.CQN(), mlx5.CQEFields{Opcode: mlx5.CQERespErr, QPN: e.QP.QPN(),
			WQECounter: slot, Syndrome: mlx5.SyndLocalLength, FlagsRQPN: 1<<28 | 2<<24 | 9}))
		var wc [1]provider.WC
		n, err := e.CQ.Poll(wc[:])
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, provider.WC{WRID: 1000 + uint64(slot), Status: provider.WCLocLenErr, Opcode: provider.WCRecv,
			QPNum: e.QP.QPN()}, wc[0])
		require.Zero(t, srq.Outstanding(), "an error completion frees the SRQ WQE too")
	})
}

func TestCloseTearsDownSRQAndAH(t *testing.T) {
	e, srq := srqEnv(t, provider.QPTypeUD, provider.SRQInitAttr{MaxWR: 3, MaxSGE: 1})
	ah, err := e.PD.CreateAH(udAH)
	require.NoError(t, err)
	require.NoError(t, e.Ctx.Close())
	require.ErrorIs(t, srq.Destroy(), provider.ErrClosed)
	require.ErrorIs(t, ah.Destroy(), provider.ErrClosed)
	require.Empty(t, e.Dev.SRQs)
	require.Contains(t, e.Dev.Cmds, "destroy_srq")
}

func TestNetworkHdrString(t *testing.T) {
	for h, want := range map[provider.NetworkHdr]string{provider.NetHdrNone: "NONE", provider.NetHdrRoCEv1: "ROCE_V1",
		provider.NetHdrIPv4: "IPV4", provider.NetHdrIPv6: "IPV6", 9: "NETWORK_HDR_9"} {
		require.Equal(t, want, h.String())
	}
}
