package provider_test

import (
	"errors"
	"testing"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/shm"
	"github.com/stretchr/testify/require"
)

func TestModifyTransitions(t *testing.T) {
	init, rtr, rts := provider.RTSAttrs()
	type step struct {
		attr *provider.QPAttr
		mask uint32
		want error // nil: success
	}
	st := func(s provider.QPState) *provider.QPAttr { return &provider.QPAttr{QPState: s} }
	const S = mlx5.AttrState
	cases := []struct {
		name  string
		steps []step
		final provider.QPState
	}{
		{"to_rts", []step{{init, provider.InitMask, nil}, {rtr, provider.RTRMask, nil}, {rts, provider.RTSMask, nil}}, provider.QPStateRTS},
		{"rts_to_rts_opt", []step{{init, provider.InitMask, nil}, {rtr, provider.RTRMask, nil}, {rts, provider.RTSMask, nil},
			{&provider.QPAttr{QPState: provider.QPStateRTS, MinRNRTimer: 3}, S | mlx5.AttrMinRNRTimer, nil}}, provider.QPStateRTS},
		{"init_to_init", []step{{init, provider.InitMask, nil}, {st(provider.QPStateInit), S | mlx5.AttrAccessFlags, nil}}, provider.QPStateInit},
		{"rst_to_rst", []step{{st(provider.QPStateReset), S, nil}}, provider.QPStateReset},
		{"rst_to_err_to_rst", []step{{st(provider.QPStateErr), S, nil}, {st(provider.QPStateReset), S, nil}}, provider.QPStateReset},
		{"any_to_err", []step{{init, provider.InitMask, nil}, {rtr, provider.RTRMask, nil}, {st(provider.QPStateErr), S, nil}}, provider.QPStateErr},
		{"rst_to_rtr", []step{{rtr, provider.RTRMask, provider.ErrBadTransition}}, provider.QPStateReset},
		{"rst_to_rts", []step{{rts, provider.RTSMask, provider.ErrBadTransition}}, provider.QPStateReset},
		{"init_to_rts", []step{{init, provider.InitMask, nil}, {rts, provider.RTSMask, provider.ErrBadTransition}}, provider.QPStateInit},
		{"rts_to_sqd", []step{{init, provider.InitMask, nil}, {rtr, provider.RTRMask, nil}, {rts, provider.RTSMask, nil},
			{st(provider.QPStateSQD), S, provider.ErrBadTransition}}, provider.QPStateRTS},
		{"err_to_rts", []step{{st(provider.QPStateErr), S, nil}, {rts, provider.RTSMask, provider.ErrBadTransition}}, provider.QPStateErr},
		{"rtr_no_state_is_rtr_to_rtr", []step{{init, provider.InitMask, nil}, {rtr, provider.RTRMask, nil},
			{&provider.QPAttr{}, mlx5.AttrMinRNRTimer, provider.ErrBadTransition}}, provider.QPStateRTR},
		{"init_missing_port", []step{{init, provider.InitMask &^ mlx5.AttrPort, provider.ErrInvalidAttr}}, provider.QPStateReset},
		{"init_extra_path_mtu", []step{{init, provider.InitMask | mlx5.AttrPathMTU, provider.ErrInvalidAttr}}, provider.QPStateReset},
		{"rtr_missing_av", []step{{init, provider.InitMask, nil}, {rtr, provider.RTRMask &^ mlx5.AttrAV, provider.ErrInvalidAttr}}, provider.QPStateInit},
		{"rtr_missing_min_rnr", []step{{init, provider.InitMask, nil}, {rtr, provider.RTRMask &^ mlx5.AttrMinRNRTimer, provider.ErrInvalidAttr}}, provider.QPStateInit},
		{"rts_missing_sq_psn", []step{{init, provider.InitMask, nil}, {rtr, provider.RTRMask, nil},
			{rts, provider.RTSMask &^ mlx5.AttrSQPSN, provider.ErrInvalidAttr}}, provider.QPStateRTR},
		{"err_with_attrs", []step{{&provider.QPAttr{QPState: provider.QPStateErr, Port: 1}, S | mlx5.AttrPort, provider.ErrInvalidAttr}}, provider.QPStateReset},
		{"bad_target_state", []step{{st(42), S, provider.ErrInvalidAttr}}, provider.QPStateReset},
		{"nil_attr", []step{{nil, S, provider.ErrInvalidArg}}, provider.QPStateReset},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := provider.NewEnv(t, provider.EnvOpts{})
			for i, s := range c.steps {
				err := e.QP.Modify(s.attr, s.mask)
				if s.want == nil {
					require.NoError(t, err, "step %d", i)
				} else {
					require.ErrorIs(t, err, s.want, "step %d", i)
				}
			}
			require.Equal(t, c.final, e.QP.State())
		})
	}
}

func TestModifyValues(t *testing.T) {
	cases := []struct {
		name  string
		mod   func(rtr, rts *provider.QPAttr)
		setup func(d *provider.FakeDev)
		msg   string // the reason names both numbers where a limit was crossed
	}{
		{"mtu_enum_0", func(r, s *provider.QPAttr) { r.PathMTU = 0 }, nil, ""},
		{"mtu_bytes_not_enum", func(r, s *provider.QPAttr) { r.PathMTU = 7 }, nil, ""},
		{"mtu_above_active", func(r, s *provider.QPAttr) { r.PathMTU = mlx5.MTU1024 }, func(d *provider.FakeDev) { d.Attr.ActiveMTU = mlx5.MTU256 },
			"path MTU 1024 above the port's active MTU 256"},
		{"dest_qpn_25_bits", func(r, s *provider.QPAttr) { r.DestQPN = 1 << 24 }, nil, ""},
		{"rq_psn_25_bits", func(r, s *provider.QPAttr) { r.RQPSN = 1 << 24 }, nil, ""},
		{"min_rnr_32", func(r, s *provider.QPAttr) { r.MinRNRTimer = 32 }, nil, ""},
		{"dest_rd_atomic_too_many", func(r, s *provider.QPAttr) { r.MaxDestRdAtomic = 17 }, nil, "max_dest_rd_atomic 17 above the device limit 16"},
		{"flow_label_21_bits", func(r, s *provider.QPAttr) { r.AV.FlowLabel = 1 << 20 }, nil, ""},
		{"retry_8", func(r, s *provider.QPAttr) { s.RetryCnt = 8 }, nil, ""},
		{"rnr_retry_8", func(r, s *provider.QPAttr) { s.RNRRetry = 8 }, nil, ""},
		{"timeout_32", func(r, s *provider.QPAttr) { s.Timeout = 32 }, nil, ""},
		{"sq_psn_25_bits", func(r, s *provider.QPAttr) { s.SQPSN = 1 << 24 }, nil, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := provider.NewEnv(t, provider.EnvOpts{Setup: c.setup})
			init, rtr, rts := provider.RTSAttrs()
			c.mod(rtr, rts)
			require.NoError(t, e.QP.Modify(init, provider.InitMask))
			err := e.QP.Modify(rtr, provider.RTRMask)
			if err == nil {
				err = e.QP.Modify(rts, provider.RTSMask)
			}
			require.ErrorIs(t, err, provider.ErrInvalidAttr)
			if c.msg != "" {
				require.ErrorContains(t, err, c.msg)
			}
			n := len(e.Dev.Modifies)
			require.NotEqual(t, provider.QPStateRTS, e.QP.State())
			require.Len(t, e.Dev.Modifies, n, "nothing sent for a locally rejected modify")
		})
	}
	t.Run("port_0", func(t *testing.T) {
		e := provider.NewEnv(t, provider.EnvOpts{})
		init, _, _ := provider.RTSAttrs()
		init.Port = 0
		require.ErrorIs(t, e.QP.Modify(init, provider.InitMask), provider.ErrInvalidAttr)
		require.Empty(t, e.Dev.Modifies)
	})
}

func TestModifyCommandFields(t *testing.T) {
	e := provider.NewEnv(t, provider.EnvOpts{})
	provider.ToRTS(t, e.QP)
	require.Len(t, e.Dev.Modifies, 3)
	_, rtr, rts := provider.RTSAttrs()
	m := e.Dev.Modifies[1]
	require.Equal(t, mlx5.ModifyQPCmd{QPN: e.QP.QPN(), Mask: provider.RTRMask, State: mlx5.QPStateRTR, CurState: mlx5.QPStateINIT,
		AV: rtr.AV, PathMTU: mlx5.MTU1024, RQPSN: 0x100, MaxDestRdAtomic: 4, MinRNRTimer: 12, DestQPN: 0x200}, m)
	m = e.Dev.Modifies[2]
	require.Equal(t, mlx5.ModifyQPCmd{QPN: e.QP.QPN(), Mask: provider.RTSMask, State: mlx5.QPStateRTS, CurState: mlx5.QPStateRTR,
		Timeout: rts.Timeout, RetryCnt: 7, RNRRetry: 7, SQPSN: 0x300, MaxQPRdAtomic: 4}, m)
}

func TestModifyToResetClears(t *testing.T) {
	e := provider.NewEnv(t, provider.EnvOpts{})
	provider.ToRTS(t, e.QP)
	idx := e.QP.SQProducer()
	_, err := e.QP.PostSend([]provider.SendWR{send(e, 1, provider.SendSignaled), send(e, 2, 0)})
	require.NoError(t, err)
	_, err = e.QP.PostRecv([]provider.RecvWR{{WRID: 3}})
	require.NoError(t, err)
	require.NoError(t, e.Dev.WriteCQE(e.CQ.CQN(), reqCQE(e, idx, mlx5.OpSend)))
	require.NotZero(t, e.DBR(t).Word(mlx5.DBRSend))
	require.NotZero(t, e.DBR(t).Word(mlx5.DBRRecv))

	require.NoError(t, e.QP.Modify(&provider.QPAttr{QPState: provider.QPStateReset}, mlx5.AttrState))
	require.Zero(t, e.DBR(t).Word(mlx5.DBRSend))
	require.Zero(t, e.DBR(t).Word(mlx5.DBRRecv))
	require.Zero(t, e.QP.SQProducer())
	var wc [2]provider.WC
	n, err := e.CQ.Poll(wc[:])
	require.NoError(t, err)
	require.Zero(t, n, "the QP's pending CQE was cleaned from the CQ")
	_, err = e.QP.PostSend([]provider.SendWR{send(e, 1, 0)})
	require.ErrorIs(t, err, provider.ErrBadState)

	provider.ToRTS(t, e.QP)
	_, err = e.QP.PostSend([]provider.SendWR{send(e, 7, provider.SendSignaled)})
	require.NoError(t, err)
	w, err := e.QP.WQE(0)
	require.NoError(t, err)
	require.Equal(t, uint16(0), mlx5.CtrlSeg(w).WQEIndex(), "indexes restart at 0")
}

func TestPostSendCallerErrors(t *testing.T) {
	cases := []struct {
		name string
		wr   func(e *provider.Env) provider.SendWR
		want []error
	}{
		{"bad_opcode", func(e *provider.Env) provider.SendWR { return provider.SendWR{Opcode: 7} }, []error{provider.ErrInvalidArg}}, // LOCAL_INV
		{"opcode_255", func(e *provider.Env) provider.SendWR { return provider.SendWR{Opcode: 255} }, []error{provider.ErrInvalidArg}},
		{"unknown_flag", func(e *provider.Env) provider.SendWR { return provider.SendWR{Opcode: provider.WRSend, Flags: 1 << 7} },
			[]error{provider.ErrInvalidArg}},
		{"too_many_sges", func(e *provider.Env) provider.SendWR {
			return provider.SendWR{Opcode: provider.WRSend, SGL: make([]provider.SGE, 5)}
		}, []error{provider.ErrTooManySGE}},
		{"inline_too_big", func(e *provider.Env) provider.SendWR {
			return provider.SendWR{Opcode: provider.WRSend, Flags: provider.SendInline, SGL: []provider.SGE{e.MR.SGE(0, 4096)}}
		}, []error{provider.ErrInlineTooBig}},
		{"inline_total_too_big", func(e *provider.Env) provider.SendWR {
			return provider.SendWR{Opcode: provider.WRSend, Flags: provider.SendInline,
				SGL: []provider.SGE{e.MR.SGE(0, 200), e.MR.SGE(0, 200)}}
		}, []error{provider.ErrInlineTooBig}},
		{"inline_huge_lengths", func(e *provider.Env) provider.SendWR {
			return provider.SendWR{Opcode: provider.WRSend, Flags: provider.SendInline,
				SGL: []provider.SGE{{Length: 1 << 30}, {Length: 1 << 30}}}
		}, []error{provider.ErrInlineTooBig}},
		// Bit 31 of a data segment's byte_count is the inline flag: such an
		// SGE would read as inline data at the device.
		{"sge_len_2_31", func(e *provider.Env) provider.SendWR {
			return provider.SendWR{Opcode: provider.WRRDMAWrite, SGL: []provider.SGE{e.MR.SGE(0, 8), {Addr: e.Buf.Addr, Length: 1 << 31, LKey: e.MR.LKey}}}
		}, []error{provider.ErrInvalidArg, provider.ErrLocalLength}},
		{"sge_len_ffffffff", func(e *provider.Env) provider.SendWR {
			return provider.SendWR{Opcode: provider.WRSend, SGL: []provider.SGE{{Addr: e.Buf.Addr, Length: 0xffffffff, LKey: e.MR.LKey}}}
		}, []error{provider.ErrInvalidArg, provider.ErrLocalLength}},
		{"inline_sge_len_2_31", func(e *provider.Env) provider.SendWR {
			return provider.SendWR{Opcode: provider.WRSend, Flags: provider.SendInline, SGL: []provider.SGE{{Length: 1 << 31}}}
		}, []error{provider.ErrInvalidArg, provider.ErrLocalLength}},
		{"read_sge_len_2_31", func(e *provider.Env) provider.SendWR {
			return provider.SendWR{Opcode: provider.WRRDMARead, SGL: []provider.SGE{{Addr: e.Buf.Addr, Length: 1 << 31, LKey: e.MR.LKey}}}
		}, []error{provider.ErrInvalidArg, provider.ErrLocalLength}},
		// Two SGEs just under 2^31 each: 2^32-2 bytes, over the 2^31 max message.
		{"message_too_big", func(e *provider.Env) provider.SendWR {
			return provider.SendWR{Opcode: provider.WRRDMAWrite, SGL: []provider.SGE{
				{Addr: e.Buf.Addr, Length: 1<<31 - 1, LKey: e.MR.LKey}, {Addr: e.Buf.Addr, Length: 1<<31 - 1, LKey: e.MR.LKey}}}
		}, []error{provider.ErrInvalidArg, provider.ErrLocalLength}},
		{"inline_cmp_swap", func(e *provider.Env) provider.SendWR {
			return provider.SendWR{Opcode: provider.WRAtomicCmpSwp, Flags: provider.SendInline, SGL: []provider.SGE{e.MR.SGE(0, 8)}}
		}, []error{provider.ErrInvalidArg}},
		{"inline_fetch_add", func(e *provider.Env) provider.SendWR {
			return provider.SendWR{Opcode: provider.WRAtomicFetchAdd, Flags: provider.SendInline, SGL: []provider.SGE{e.MR.SGE(0, 8)}}
		}, []error{provider.ErrInvalidArg}},
		{"atomic_too_many_sges", func(e *provider.Env) provider.SendWR {
			return provider.SendWR{Opcode: provider.WRAtomicFetchAdd, SGL: make([]provider.SGE, 5)}
		}, []error{provider.ErrTooManySGE}},
		{"inline_nil_source", func(e *provider.Env) provider.SendWR {
			return provider.SendWR{Opcode: provider.WRSend, Flags: provider.SendInline, SGL: []provider.SGE{{Addr: 0, Length: 8}}}
		}, []error{provider.ErrInvalidArg, provider.ErrOutOfRange}},
		{"inline_past_region_end", func(e *provider.Env) provider.SendWR {
			end := e.Mem.Base() + uint64(e.Mem.Size())
			return provider.SendWR{Opcode: provider.WRSend, Flags: provider.SendInline, SGL: []provider.SGE{{Addr: end - 4, Length: 8}}}
		}, []error{provider.ErrInvalidArg, provider.ErrOutOfRange}},
		{"inline_read", func(e *provider.Env) provider.SendWR {
			return provider.SendWR{Opcode: provider.WRRDMARead, Flags: provider.SendInline, SGL: []provider.SGE{e.MR.SGE(0, 8)}}
		}, []error{provider.ErrInvalidArg}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := provider.NewEnv(t, provider.EnvOpts{})
			provider.ToRTS(t, e.QP)
			e.Dev.Ops = nil
			// Two good WRs, then the bad one, then a good one: the first two
			// are posted and rung (one doorbell for the list), the rest not.
			wrs := []provider.SendWR{send(e, 1, 0), send(e, 2, 0), c.wr(e), send(e, 4, 0)}
			bad, err := e.QP.PostSend(wrs)
			for _, w := range c.want {
				require.ErrorIs(t, err, w)
			}
			var oe *provider.OpError
			require.ErrorAs(t, err, &oe)
			require.Equal(t, provider.OpError{Op: "post_send", QPN: e.QP.QPN(), Index: 2, Err: oe.Err}, *oe)
			require.Equal(t, 2, bad)
			require.Equal(t, uint16(2), e.QP.SQProducer())
			require.Equal(t, uint32(2), e.DBR(t).Word(mlx5.DBRSend))
			require.Len(t, e.Dev.Ops, 3, "flush, one doorbell, flush")

			// Alone, nothing is posted and nothing rung.
			e.Dev.Ops = nil
			bad, err = e.QP.PostSend([]provider.SendWR{c.wr(e)})
			require.Error(t, err)
			require.Zero(t, bad)
			require.Empty(t, e.Dev.Ops)
			require.Equal(t, uint16(2), e.QP.SQProducer())
		})
	}
}

func TestPostStateErrors(t *testing.T) {
	e := provider.NewEnv(t, provider.EnvOpts{})
	init, rtr, rts := provider.RTSAttrs()
	check := func(want error) {
		t.Helper()
		bad, err := e.QP.PostSend([]provider.SendWR{send(e, 1, 0)})
		if want == nil {
			require.NoError(t, err)
			require.Equal(t, 1, bad)
			return
		}
		require.ErrorIs(t, err, want)
		require.Zero(t, bad)
	}
	check(provider.ErrBadState) // RESET
	bad, err := e.QP.PostRecv([]provider.RecvWR{{WRID: 1}})
	require.ErrorIs(t, err, provider.ErrBadState)
	require.Zero(t, bad)
	require.NoError(t, e.QP.Modify(init, provider.InitMask))
	check(provider.ErrBadState) // INIT
	_, err = e.QP.PostRecv([]provider.RecvWR{{WRID: 1}})
	require.NoError(t, err, "receives may be posted from INIT")
	require.NoError(t, e.QP.Modify(rtr, provider.RTRMask))
	check(provider.ErrBadState) // RTR
	require.NoError(t, e.QP.Modify(rts, provider.RTSMask))
	check(nil)
	require.NoError(t, e.QP.Modify(&provider.QPAttr{QPState: provider.QPStateErr}, mlx5.AttrState))
	check(nil) // ERR: posted, the device flushes it

	bad, err = e.QP.PostSend(nil)
	require.NoError(t, err)
	require.Zero(t, bad)

	require.NoError(t, e.QP.Destroy())
	check(provider.ErrClosed)
	_, err = e.QP.PostRecv([]provider.RecvWR{{}})
	require.ErrorIs(t, err, provider.ErrClosed)
	require.ErrorIs(t, e.QP.Modify(init, provider.InitMask), provider.ErrClosed)
	_, err = e.QP.WQE(0)
	require.ErrorIs(t, err, provider.ErrClosed)
	require.ErrorIs(t, e.QP.Destroy(), provider.ErrClosed)
}

func TestPostRecvErrors(t *testing.T) {
	e := provider.NewEnv(t, provider.EnvOpts{Cap: provider.QPCap{MaxSendWR: 1, MaxSendSGE: 1}})
	provider.ToRTS(t, e.QP)
	_, err := e.QP.PostRecv([]provider.RecvWR{{WRID: 1}})
	require.ErrorIs(t, err, provider.ErrQueueFull, "QP without an RQ")

	e2 := provider.NewEnv(t, provider.EnvOpts{})
	provider.ToRTS(t, e2.QP)
	bad, err := e2.QP.PostRecv([]provider.RecvWR{{}, {SGL: make([]provider.SGE, 5)}})
	require.ErrorIs(t, err, provider.ErrTooManySGE)
	require.Equal(t, 1, bad)
	require.Equal(t, uint32(1), e2.DBR(t).Word(mlx5.DBRRecv))
}

func TestWQEIntrospectionErrors(t *testing.T) {
	e := provider.NewEnv(t, provider.EnvOpts{})
	provider.ToRTS(t, e.QP)
	_, err := e.QP.WQE(0)
	require.ErrorIs(t, err, provider.ErrInvalidArg, "nothing posted yet")
	sgl := []provider.SGE{e.MR.SGE(0, 1), e.MR.SGE(0, 2), e.MR.SGE(0, 3), e.MR.SGE(0, 4)}
	_, err = e.QP.PostSend([]provider.SendWR{{Opcode: provider.WRSend, SGL: sgl}}) // 5 DS: 2 WQEBBs
	require.NoError(t, err)
	_, err = e.QP.WQE(1)
	require.ErrorIs(t, err, provider.ErrInvalidArg, "second WQEBB of a WQE")
	_, err = e.QP.WQE(2)
	require.ErrorIs(t, err, provider.ErrInvalidArg, "not posted")
	w, err := e.QP.WQE(0)
	require.NoError(t, err)
	require.Len(t, w, 80)
}

func TestControlErrorsWrap(t *testing.T) {
	badParam := &mlx5.CmdError{Cmd: "X", Status: mlx5.StatusBadParam, Reason: "test"}
	cases := []struct {
		cmd string
		run func(e *provider.Env) error
	}{
		{"alloc_pd", func(e *provider.Env) error { _, err := e.Ctx.AllocPD(); return err }},
		{"reg_mr", func(e *provider.Env) error { _, err := e.PD.RegMR(e.Buf.Addr, 64, 0); return err }},
		{"create_cq", func(e *provider.Env) error { _, err := e.Ctx.CreateCQ(4); return err }},
		{"create_qp", func(e *provider.Env) error {
			_, err := e.Ctx.CreateQP(e.PD, provider.QPInitAttr{Type: provider.QPTypeRC, SendCQ: e.CQ, RecvCQ: e.CQ,
				Cap: provider.QPCap{MaxSendWR: 1, MaxSendSGE: 1}})
			return err
		}},
		{"modify_qp", func(e *provider.Env) error { i, _, _ := provider.RTSAttrs(); return e.QP.Modify(i, provider.InitMask) }},
		{"query_qp", func(e *provider.Env) error { _, err := e.QP.QueryState(); return err }},
		{"destroy_qp", func(e *provider.Env) error { return e.QP.Destroy() }},
		{"dereg_mr", func(e *provider.Env) error { return e.MR.Dereg() }},
	}
	for _, c := range cases {
		t.Run(c.cmd, func(t *testing.T) {
			e := provider.NewEnv(t, provider.EnvOpts{})
			inUse := e.Mem.InUse()
			e.Dev.Fail[c.cmd] = badParam
			err := c.run(e)
			require.ErrorIs(t, err, mlx5.StatusBadParam)
			var ce *mlx5.CmdError
			require.ErrorAs(t, err, &ce)
			var oe *provider.OpError
			require.ErrorAs(t, err, &oe)
			require.Equal(t, c.cmd, oe.Op)
			require.Equal(t, inUse, e.Mem.InUse(), "no host memory leaked on failure")
		})
	}
}

func TestOpenErrors(t *testing.T) {
	mem, err := shm.New("open-test", 1<<20, provider.EnvBase)
	require.NoError(t, err)
	defer mem.Close()
	dev := provider.NewFakeDev(mem)
	cases := []struct {
		name string
		d    provider.Device
		pre  func()
		want error
	}{
		{"no_control", provider.Device{MMIO: dev, Mem: mem}, nil, provider.ErrInvalidArg},
		{"no_mmio", provider.Device{Control: dev, Mem: mem}, nil, provider.ErrInvalidArg},
		{"no_mem", provider.Device{Control: dev, MMIO: dev}, nil, provider.ErrInvalidArg},
		{"get_context_fails", provider.Device{Control: dev, MMIO: dev, Mem: mem},
			func() { dev.Fail["get_context"] = mlx5.StatusInternalErr }, mlx5.StatusInternalErr},
		{"query_fails", provider.Device{Control: dev, MMIO: dev, Mem: mem},
			func() { dev.Fail["query_device"] = mlx5.StatusBadSysState }, mlx5.StatusBadSysState},
		{"no_queues", provider.Device{Control: dev, MMIO: dev, Mem: mem}, func() { dev.Attr.MaxQPWR = 0 }, provider.ErrNotSupported},
		{"odd_bf_size", provider.Device{Control: dev, MMIO: dev, Mem: mem}, func() { dev.Attr.BFBufSize = 100 }, provider.ErrNotSupported},
		{"tiny_wqe", provider.Device{Control: dev, MMIO: dev, Mem: mem}, func() { dev.Attr.MaxSQDescSz = 32 }, provider.ErrNotSupported},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			saved := dev.Attr
			defer func() { dev.Attr = saved }()
			if c.pre != nil {
				c.pre()
			}
			_, err := provider.Open(c.d)
			require.ErrorIs(t, err, c.want)
		})
	}
}

func TestResourceErrors(t *testing.T) {
	e := provider.NewEnv(t, provider.EnvOpts{})
	rc := func(cap provider.QPCap) provider.QPInitAttr {
		return provider.QPInitAttr{Type: provider.QPTypeRC, SendCQ: e.CQ, RecvCQ: e.CQ, Cap: cap}
	}
	base := provider.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}
	with := func(f func(*provider.QPCap)) provider.QPCap { c := base; f(&c); return c }
	cases := []struct {
		name string
		run  func() error
		want error
	}{
		{"buffer_zero", func() error { _, err := e.Ctx.AllocBuffer(0, 8); return err }, provider.ErrInvalidArg},
		{"buffer_align", func() error { _, err := e.Ctx.AllocBuffer(8, 3); return err }, provider.ErrInvalidArg},
		{"buffer_huge", func() error { _, err := e.Ctx.AllocBuffer(1<<30, 8); return err }, provider.ErrNoMemory},
		{"free_unknown", func() error { return e.Ctx.FreeBuffer(provider.Buffer{Addr: 12}) }, provider.ErrInvalidArg},
		{"mr_outside", func() error { _, err := e.PD.RegMR(0x1000, 64, 0); return err }, provider.ErrOutOfRange},
		{"mr_past_end", func() error {
			_, err := e.PD.RegMR(e.Mem.Base()+uint64(e.Mem.Size())-8, 16, 0)
			return err
		}, provider.ErrOutOfRange},
		{"mr_wrapping_length", func() error { _, err := e.PD.RegMR(e.Buf.Addr, ^uint64(0), 0); return err }, provider.ErrOutOfRange},
		{"mr_zero", func() error { _, err := e.PD.RegMR(e.Buf.Addr, 0, 0); return err }, provider.ErrInvalidArg},
		{"mr_access_bits", func() error { _, err := e.PD.RegMR(e.Buf.Addr, 8, 1<<9); return err }, provider.ErrInvalidArg},
		{"mr_remote_write_no_local", func() error { _, err := e.PD.RegMR(e.Buf.Addr, 8, provider.AccessRemoteWrite); return err }, provider.ErrInvalidArg},
		{"cq_zero", func() error { _, err := e.Ctx.CreateCQ(0); return err }, provider.ErrInvalidArg},
		{"cq_too_big", func() error { _, err := e.Ctx.CreateCQ(1 << 23); return err }, provider.ErrInvalidArg},
		{"qp_xrc", func() error {
			a := rc(base)
			a.Type = 3 // XRC: not built by this provider
			_, err := e.Ctx.CreateQP(e.PD, a)
			return err
		}, provider.ErrNotSupported},
		{"qp_nil_pd", func() error { _, err := e.Ctx.CreateQP(nil, rc(base)); return err }, provider.ErrInvalidArg},
		{"qp_nil_cq", func() error {
			a := rc(base)
			a.RecvCQ = nil
			_, err := e.Ctx.CreateQP(e.PD, a)
			return err
		}, provider.ErrInvalidArg},
		{"qp_sge", func() error {
			_, err := e.Ctx.CreateQP(e.PD, rc(with(func(c *provider.QPCap) { c.MaxSendSGE = 31 })))
			return err
		}, provider.ErrInvalidArg},
		{"qp_rsge", func() error {
			_, err := e.Ctx.CreateQP(e.PD, rc(with(func(c *provider.QPCap) { c.MaxRecvSGE = 31 })))
			return err
		}, provider.ErrInvalidArg},
		{"qp_inline", func() error {
			_, err := e.Ctx.CreateQP(e.PD, rc(with(func(c *provider.QPCap) { c.MaxInline = 913 })))
			return err
		}, provider.ErrInvalidArg},
		{"qp_wr", func() error {
			_, err := e.Ctx.CreateQP(e.PD, rc(with(func(c *provider.QPCap) { c.MaxSendWR = 1 << 16 })))
			return err
		}, provider.ErrInvalidArg},
		{"qp_wqebbs", func() error {
			_, err := e.Ctx.CreateQP(e.PD, rc(with(func(c *provider.QPCap) { c.MaxSendWR, c.MaxSendSGE = 1<<15, 4 })))
			return err
		}, provider.ErrInvalidArg},
		{"qp_negative", func() error {
			_, err := e.Ctx.CreateQP(e.PD, rc(with(func(c *provider.QPCap) { c.MaxRecvWR = -1 })))
			return err
		}, provider.ErrInvalidArg},
		{"pd_busy", func() error { return e.PD.Dealloc() }, provider.ErrBusy},
		{"cq_busy", func() error { return e.CQ.Destroy() }, provider.ErrBusy},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.ErrorIs(t, c.run(), c.want)
		})
	}
}

func TestCloseTearsDown(t *testing.T) {
	e := provider.NewEnv(t, provider.EnvOpts{})
	provider.ToRTS(t, e.QP)
	require.NoError(t, e.Ctx.Close())
	require.Empty(t, e.Dev.QPs)
	require.Empty(t, e.Dev.CQs)
	tail := e.Dev.Cmds[len(e.Dev.Cmds)-4:]
	require.Equal(t, []string{"destroy_qp", "destroy_cq", "dereg_mr", "dealloc_pd"}, tail)
	require.ErrorIs(t, e.Ctx.Close(), provider.ErrClosed)
	_, err := e.Ctx.AllocPD()
	require.ErrorIs(t, err, provider.ErrClosed)
	_, err = e.Ctx.CreateCQ(1)
	require.ErrorIs(t, err, provider.ErrClosed)
	_, err = e.Ctx.AllocBuffer(8, 8)
	require.ErrorIs(t, err, provider.ErrClosed)
	require.True(t, errors.Is(e.MR.Dereg(), provider.ErrClosed))
}

func TestEnumStrings(t *testing.T) {
	require.Equal(t, "REM_ACCESS_ERR", provider.WCRemAccessErr.String())
	require.Equal(t, "GENERAL_ERR", provider.WCGeneralErr.String())
	require.Equal(t, "WC_STATUS_99", provider.WCStatus(99).String())
	require.Equal(t, "RECV_RDMA_WITH_IMM", provider.WCRecvRDMAWithImm.String())
	require.Equal(t, "WC_OPCODE_50", provider.WCOpcode(50).String())
	require.Equal(t, "RDMA_WRITE_WITH_IMM", provider.WRRDMAWriteImm.String())
	require.Equal(t, "SEND_WITH_INV", provider.WROpcode(9).String())
	require.Equal(t, "WR_OPCODE_8", provider.WROpcode(8).String())
	require.Equal(t, "WR_OPCODE_10", provider.WROpcode(10).String())
	require.Equal(t, "ATOMIC_CMP_AND_SWP", provider.WRAtomicCmpSwp.String())
	require.Equal(t, "ATOMIC_FETCH_AND_ADD", provider.WRAtomicFetchAdd.String())
	require.Equal(t, provider.WROpcode(5), provider.WRAtomicCmpSwp, "IBV_WR_ATOMIC_CMP_AND_SWP")
	require.Equal(t, provider.WROpcode(6), provider.WRAtomicFetchAdd, "IBV_WR_ATOMIC_FETCH_AND_ADD")
	require.Equal(t, "WR_OPCODE_7", provider.WROpcode(7).String())
	require.Equal(t, "GRH|WITH_IMM|0x80", (provider.WCFlagGRH | provider.WCFlagWithImm | 0x80).String())
	require.Equal(t, "0", provider.WCFlags(0).String())
}

// windowMMIO is a FakeDev port that knows its window (as the UAR mapped
// from a kernel device does): BAR0 offsets [lo, hi).
type windowMMIO struct {
	*provider.FakeDev
	lo, hi uint64
}

func (w windowMMIO) Covers(off uint64, n int) bool {
	return off >= w.lo && off <= w.hi && w.hi-off >= uint64(n)
}

// TestCreateQPBFRegOutsideWindow: a bfreg the port cannot store to (its
// doorbells would be dropped) refuses the QP and gives everything back;
// one inside the window is taken.
func TestCreateQPBFRegOutsideWindow(t *testing.T) {
	uar := uint64(1) * mlx5.UARPageSize // NewFakeDev's context UAR
	for _, c := range []struct {
		name   string
		lo, hi uint64
		bfSize int
		want   error
	}{
		{"inside", uar, uar + mlx5.UARPageSize, mlx5.DefaultBFBufSize, nil},
		{"page_below", 0, mlx5.UARPageSize, mlx5.DefaultBFBufSize, provider.ErrNotSupported},
		{"second_buffer_past_the_end", uar, uar + mlx5.UARBFRegOffset + mlx5.DefaultBFBufSize, mlx5.DefaultBFBufSize, provider.ErrNotSupported},
		{"doorbell_only_fits", uar, uar + mlx5.UARBFRegOffset + 8, 0, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			mem, err := shm.New("bfreg-window", 1<<20, provider.EnvBase)
			require.NoError(t, err)
			defer mem.Close()
			dev := provider.NewFakeDev(mem)
			dev.BFBufSize = c.bfSize
			ctx, err := provider.Open(provider.Device{Name: "fake0", Control: dev, MMIO: windowMMIO{dev, c.lo, c.hi}, Mem: mem})
			require.NoError(t, err)
			defer ctx.Close()
			pd, err := ctx.AllocPD()
			require.NoError(t, err)
			cq, err := ctx.CreateCQ(16)
			require.NoError(t, err)
			inUse := mem.InUse()
			qp, err := ctx.CreateQP(pd, provider.QPInitAttr{Type: provider.QPTypeRC, SendCQ: cq, RecvCQ: cq,
				Cap: provider.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
			if c.want == nil {
				require.NoError(t, err)
				require.NoError(t, qp.Destroy())
				return
			}
			require.ErrorIs(t, err, c.want)
			require.ErrorContains(t, err, "outside the mapped UAR")
			require.Empty(t, dev.QPs, "the refused QP was destroyed at the device")
			require.Equal(t, inUse, mem.InUse(), "its buffers were freed")
		})
	}
}

// TestClosedContextQPRefusesPosts: a QP whose destroy failed at Close is
// left behind dead, and PostSend refuses it on the one-WR fast path too
// (the fast flag is recomputed with the dead one).
func TestClosedContextQPRefusesPosts(t *testing.T) {
	e := provider.NewEnv(t, provider.EnvOpts{})
	init, rtr, rts := provider.RTSAttrs()
	require.NoError(t, e.QP.Modify(init, provider.InitMask))
	require.NoError(t, e.QP.Modify(rtr, provider.RTRMask))
	require.NoError(t, e.QP.Modify(rts, provider.RTSMask))
	e.Dev.Fail["destroy_qp"] = mlx5.StatusInternalErr
	require.Error(t, e.Ctx.Close())
	n, err := e.QP.PostSend([]provider.SendWR{{Opcode: provider.WRRDMAWrite, SGL: []provider.SGE{e.MR.SGE(0, 8)}, RemoteAddr: 0x1000, RKey: 1}})
	require.ErrorIs(t, err, provider.ErrClosed)
	require.Zero(t, n)
}
