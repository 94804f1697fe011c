package provider_test

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/provider"
	"github.com/stretchr/testify/require"
)

// udAH is the address handle the UD tests send through: ::ffff:10.0.0.2
// behind 02:00:00:00:00:02, flow label 0x12345 (UDP source port 0xe341).
var udAH = provider.AHAttr{DGID: [16]byte{10: 0xff, 11: 0xff, 12: 10, 15: 2}, DMAC: [6]byte{2, 0, 0, 0, 0, 2}, Port: 1,
	SGIDIndex: 1, TrafficClass: 0x10, HopLimit: 64, FlowLabel: 0x12345}

// newTyped returns an Env whose QP (of type typ, in RTS) replaces the RC one.
func newTyped(t *testing.T, typ provider.QPType, o provider.EnvOpts) *provider.Env {
	t.Helper()
	e := provider.NewEnv(t, o)
	require.NoError(t, e.DropQueues())
	o.Type = typ
	require.NoError(t, e.NewQueues(o))
	provider.ToRTSAs(t, typ, e.QP)
	return e
}

func TestCreateQPTypes(t *testing.T) {
	base := provider.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInline: 256}
	cases := []struct {
		name   string
		typ    provider.QPType
		cap    provider.QPCap
		want   provider.QPCap
		wqebbs int // SQ size
	}{
		// RC/UC: 48 + max(4*16, 4+256 -> 272) = 320 B per WQE (5 WQEBBs);
		// 64 WRs -> 20480 -> 32768 B = 512 WQEBBs, room for 102 WRs;
		// inline room 320 - 48 - 4.
		{"rc", provider.QPTypeRC, base, provider.QPCap{MaxSendWR: 102, MaxRecvWR: 64, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInline: 268}, 512},
		{"uc", provider.QPTypeUC, base, provider.QPCap{MaxSendWR: 102, MaxRecvWR: 64, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInline: 268}, 512},
		// UD: 64 + 272 = 336 -> 384 B; 32768 / 384 = 85 WRs; inline room
		// 384 - 64 - 4.
		{"ud", provider.QPTypeUD, base, provider.QPCap{MaxSendWR: 85, MaxRecvWR: 64, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInline: 316}, 512},
		// UD, no inline: 64 + 16 = 80 -> 128 B; 16 WRs -> 2048 B = 32 WQEBBs.
		{"ud_1sge", provider.QPTypeUD, provider.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1},
			provider.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: 60}, 32},
		// UD, nothing but the datagram segment: one WQEBB per WR, no
		// inline room (libmlx5 would report 2^32-4); the RQ is at least 64 B.
		{"ud_0sge", provider.QPTypeUD, provider.QPCap{MaxSendWR: 8, MaxRecvWR: 1},
			provider.QPCap{MaxSendWR: 8, MaxRecvWR: 4, MaxRecvSGE: 1}, 8},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := provider.NewEnv(t, provider.EnvOpts{})
			qp, err := e.Ctx.CreateQP(e.PD, provider.QPInitAttr{Type: c.typ, SendCQ: e.CQ, RecvCQ: e.CQ, Cap: c.cap})
			require.NoError(t, err)
			require.Equal(t, c.typ, qp.Type())
			require.Equal(t, c.want, qp.Cap())
			require.Equal(t, c.wqebbs, qp.SQInfo().WQEBBs)
			cmd := e.Dev.QPs[qp.QPN()].Cmd
			require.Equal(t, c.typ, cmd.Type)
			require.Equal(t, c.want.MaxInline, cmd.MaxInline)
			require.Zero(t, cmd.SRQN)
			require.Equal(t, provider.QPStateReset, qp.State())
		})
	}
}

func TestCreateQPTypeErrors(t *testing.T) {
	e := provider.NewEnv(t, provider.EnvOpts{})
	other := provider.NewEnv(t, provider.EnvOpts{})
	otherSRQ, err := other.PD.CreateSRQ(provider.SRQInitAttr{MaxWR: 4, MaxSGE: 1})
	require.NoError(t, err)
	dead, err := e.PD.CreateSRQ(provider.SRQInitAttr{MaxWR: 4, MaxSGE: 1})
	require.NoError(t, err)
	require.NoError(t, dead.Destroy())
	cases := []struct {
		name string
		attr provider.QPInitAttr
		want error
	}{
		{"xrc", provider.QPInitAttr{Type: 3, Cap: provider.QPCap{MaxSendWR: 1}}, provider.ErrNotSupported},
		{"raw", provider.QPInitAttr{Type: 9, Cap: provider.QPCap{MaxSendWR: 1}}, provider.ErrNotSupported},
		{"ud_sge", provider.QPInitAttr{Type: provider.QPTypeUD, Cap: provider.QPCap{MaxSendWR: 1, MaxSendSGE: 31}}, provider.ErrInvalidArg},
		{"uc_inline", provider.QPInitAttr{Type: provider.QPTypeUC, Cap: provider.QPCap{MaxSendWR: 1, MaxInline: 913}}, provider.ErrInvalidArg},
		{"srq_destroyed", provider.QPInitAttr{Type: provider.QPTypeUD, SRQ: dead, Cap: provider.QPCap{MaxSendWR: 1}}, provider.ErrInvalidArg},
		{"srq_other_context", provider.QPInitAttr{Type: provider.QPTypeRC, SRQ: otherSRQ, Cap: provider.QPCap{MaxSendWR: 1}}, provider.ErrInvalidArg},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.attr.SendCQ, c.attr.RecvCQ = e.CQ, e.CQ
			n := len(e.Dev.Cmds)
			_, err := e.Ctx.CreateQP(e.PD, c.attr)
			require.ErrorIs(t, err, c.want)
			require.Len(t, e.Dev.Cmds, n, "refused before CREATE_QP")
		})
	}
}

func TestModifyUDUC(t *testing.T) {
	type step struct {
		attr provider.QPAttr
		mask uint32
	}
	udInit := step{provider.QPAttr{QPState: provider.QPStateInit, Port: 1, QKey: 0x1234}, provider.UDInitMask}
	udRTR := step{provider.QPAttr{QPState: provider.QPStateRTR}, provider.UDRTRMask}
	ucI, ucR, _ := provider.RTSAttrs()
	ucInit := step{*ucI, provider.UCInitMask}
	ucRTR := step{*ucR, provider.UCRTRMask}
	const st = mlx5.AttrState
	cases := []struct {
		name string
		typ  provider.QPType
		pre  []step
		last step
		want error // nil: accepted
	}{
		{"ud_init", provider.QPTypeUD, nil, udInit, nil},
		{"ud_init_no_qkey", provider.QPTypeUD, nil, step{udInit.attr, udInit.mask &^ mlx5.AttrQKey}, provider.ErrInvalidAttr},
		{"ud_init_no_port", provider.QPTypeUD, nil, step{udInit.attr, udInit.mask &^ mlx5.AttrPort}, provider.ErrInvalidAttr},
		{"ud_init_access", provider.QPTypeUD, nil, step{udInit.attr, udInit.mask | mlx5.AttrAccessFlags}, provider.ErrInvalidAttr},
		{"ud_init_init_qkey", provider.QPTypeUD, []step{udInit}, step{provider.QPAttr{QPState: provider.QPStateInit, QKey: 7}, st | mlx5.AttrQKey}, nil},
		{"ud_rtr_nothing", provider.QPTypeUD, []step{udInit}, udRTR, nil},
		{"ud_rtr_qkey_pkey", provider.QPTypeUD, []step{udInit}, step{udRTR.attr, st | mlx5.AttrQKey | mlx5.AttrPKeyIndex}, nil},
		{"ud_rtr_av", provider.QPTypeUD, []step{udInit}, step{udRTR.attr, st | mlx5.AttrAV}, provider.ErrInvalidAttr},
		{"ud_rtr_dest_qpn", provider.QPTypeUD, []step{udInit}, step{udRTR.attr, st | mlx5.AttrDestQPN}, provider.ErrInvalidAttr},
		{"ud_rtr_path_mtu", provider.QPTypeUD, []step{udInit}, step{udRTR.attr, st | mlx5.AttrPathMTU}, provider.ErrInvalidAttr},
		{"ud_rts", provider.QPTypeUD, []step{udInit, udRTR}, step{provider.QPAttr{QPState: provider.QPStateRTS, SQPSN: 5}, provider.UDRTSMask}, nil},
		{"ud_rts_no_psn", provider.QPTypeUD, []step{udInit, udRTR}, step{provider.QPAttr{QPState: provider.QPStateRTS}, st}, provider.ErrInvalidAttr},
		{"ud_rts_timeout", provider.QPTypeUD, []step{udInit, udRTR}, step{provider.QPAttr{QPState: provider.QPStateRTS}, provider.UDRTSMask | mlx5.AttrTimeout}, provider.ErrInvalidAttr},
		{"ud_rts_qkey", provider.QPTypeUD, []step{udInit, udRTR}, step{provider.QPAttr{QPState: provider.QPStateRTS, QKey: 9}, provider.UDRTSMask | mlx5.AttrQKey}, nil},
		{"ud_rts_psn_wide", provider.QPTypeUD, []step{udInit, udRTR}, step{provider.QPAttr{QPState: provider.QPStateRTS, SQPSN: 1 << 24}, provider.UDRTSMask}, provider.ErrInvalidAttr},
		{"ud_reset_rtr", provider.QPTypeUD, nil, udRTR, provider.ErrBadTransition},
		{"ud_init_rts", provider.QPTypeUD, []step{udInit}, step{provider.QPAttr{QPState: provider.QPStateRTS, SQPSN: 1}, provider.UDRTSMask}, provider.ErrBadTransition},
		{"ud_err", provider.QPTypeUD, []step{udInit}, step{provider.QPAttr{QPState: provider.QPStateErr}, st}, nil},
		{"uc_init", provider.QPTypeUC, nil, ucInit, nil},
		{"uc_init_no_access", provider.QPTypeUC, nil, step{ucInit.attr, ucInit.mask &^ mlx5.AttrAccessFlags}, provider.ErrInvalidAttr},
		{"uc_init_qkey", provider.QPTypeUC, nil, step{ucInit.attr, ucInit.mask | mlx5.AttrQKey}, provider.ErrInvalidAttr},
		{"uc_rtr", provider.QPTypeUC, []step{ucInit}, ucRTR, nil},
		{"uc_rtr_no_dest_qpn", provider.QPTypeUC, []step{ucInit}, step{ucRTR.attr, ucRTR.mask &^ mlx5.AttrDestQPN}, provider.ErrInvalidAttr},
		{"uc_rtr_no_av", provider.QPTypeUC, []step{ucInit}, step{ucRTR.attr, ucRTR.mask &^ mlx5.AttrAV}, provider.ErrInvalidAttr},
		{"uc_rtr_max_dest_rd_atomic", provider.QPTypeUC, []step{ucInit}, step{ucRTR.attr, ucRTR.mask | mlx5.AttrMaxDestRdAtomic}, provider.ErrInvalidAttr},
		{"uc_rtr_min_rnr_timer", provider.QPTypeUC, []step{ucInit}, step{ucRTR.attr, ucRTR.mask | mlx5.AttrMinRNRTimer}, provider.ErrInvalidAttr},
		{"uc_rtr_access_opt", provider.QPTypeUC, []step{ucInit}, step{ucRTR.attr, ucRTR.mask | mlx5.AttrAccessFlags}, nil},
		{"uc_rts", provider.QPTypeUC, []step{ucInit, ucRTR}, step{provider.QPAttr{QPState: provider.QPStateRTS, SQPSN: 1}, provider.UCRTSMask}, nil},
		{"uc_rts_retry", provider.QPTypeUC, []step{ucInit, ucRTR}, step{provider.QPAttr{QPState: provider.QPStateRTS, SQPSN: 1, RetryCnt: 7}, provider.UCRTSMask | mlx5.AttrRetryCnt}, provider.ErrInvalidAttr},
		{"uc_rts_rd_atomic", provider.QPTypeUC, []step{ucInit, ucRTR}, step{provider.QPAttr{QPState: provider.QPStateRTS, SQPSN: 1}, provider.UCRTSMask | mlx5.AttrMaxQPRdAtomic}, provider.ErrInvalidAttr},
		{"uc_rts_min_rnr_timer", provider.QPTypeUC, []step{ucInit, ucRTR}, step{provider.QPAttr{QPState: provider.QPStateRTS, SQPSN: 1}, provider.UCRTSMask | mlx5.AttrMinRNRTimer}, provider.ErrInvalidAttr},
		{"uc_rts_access", provider.QPTypeUC, []step{ucInit, ucRTR}, step{provider.QPAttr{QPState: provider.QPStateRTS, SQPSN: 1}, provider.UCRTSMask | mlx5.AttrAccessFlags}, nil},
		{"uc_sqe_rts_alt_path", provider.QPTypeUC, nil, step{provider.QPAttr{QPState: provider.QPStateRTS, CurQPState: provider.QPStateSQE}, st | mlx5.AttrCurState | mlx5.AttrAltPath}, provider.ErrInvalidAttr},
		{"uc_sqe_rts", provider.QPTypeUC, nil, step{provider.QPAttr{QPState: provider.QPStateRTS, CurQPState: provider.QPStateSQE}, st | mlx5.AttrCurState | mlx5.AttrAccessFlags}, nil},
		{"ud_sqe_rts_qkey", provider.QPTypeUD, nil, step{provider.QPAttr{QPState: provider.QPStateRTS, CurQPState: provider.QPStateSQE}, st | mlx5.AttrCurState | mlx5.AttrQKey}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := provider.NewEnv(t, provider.EnvOpts{})
			qp, err := e.Ctx.CreateQP(e.PD, provider.QPInitAttr{Type: c.typ, SendCQ: e.CQ, RecvCQ: e.CQ,
				Cap: provider.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
			require.NoError(t, err)
			for i, s := range c.pre {
				require.NoError(t, qp.Modify(&s.attr, s.mask), "step %d", i)
			}
			before := len(e.Dev.Modifies)
			err = qp.Modify(&c.last.attr, c.last.mask)
			if c.want != nil {
				require.ErrorIs(t, err, c.want)
				require.Len(t, e.Dev.Modifies, before, "refused before MODIFY_QP")
				return
			}
			require.NoError(t, err)
			require.Len(t, e.Dev.Modifies, before+1)
			m := e.Dev.Modifies[before]
			require.Equal(t, c.last.mask, m.Mask)
			require.Equal(t, c.last.attr.QPState, m.State)
			require.Equal(t, c.last.attr.QPState, qp.State())
			if c.last.mask&mlx5.AttrQKey != 0 {
				require.Equal(t, c.last.attr.QKey, m.QKey)
			}
		})
	}
}

func TestCreateAH(t *testing.T) {
	good := udAH
	with := func(f func(a *provider.AHAttr)) provider.AHAttr { a := good; f(&a); return a }
	cases := []struct {
		name string
		attr provider.AHAttr
		want error
	}{
		{"good", good, nil},
		{"port_0", with(func(a *provider.AHAttr) { a.Port = 0 }), provider.ErrInvalidArg},
		{"port_2", with(func(a *provider.AHAttr) { a.Port = 2 }), provider.ErrInvalidArg},
		{"flow_label_21_bits", with(func(a *provider.AHAttr) { a.FlowLabel = 1 << 20 }), provider.ErrInvalidArg},
		{"zero_dmac", with(func(a *provider.AHAttr) { a.DMAC = [6]byte{} }), provider.ErrInvalidArg},
		{"zero_dgid", with(func(a *provider.AHAttr) { a.DGID = [16]byte{} }), provider.ErrInvalidArg},
		{"ipv4_zero", with(func(a *provider.AHAttr) { a.DGID = [16]byte{10: 0xff, 11: 0xff} }), provider.ErrInvalidArg},
		{"ipv6_gid", with(func(a *provider.AHAttr) { a.DGID = [16]byte{0: 0xfe, 1: 0x80, 15: 1} }), provider.ErrNotSupported},
		{"multicast_dmac", with(func(a *provider.AHAttr) { a.DMAC = [6]byte{0x01, 0x00, 0x5e, 0, 0, 1} }), nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := provider.NewEnv(t, provider.EnvOpts{})
			n := len(e.Dev.Cmds)
			ah, err := e.PD.CreateAH(c.attr)
			require.Len(t, e.Dev.Cmds, n, "an AH is user space only: no command")
			if c.want != nil {
				require.ErrorIs(t, err, c.want)
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.attr, ah.Attr())
			av := mlx5.DatagramSeg(ah.AV())
			require.Equal(t, mlx5.DatagramFields{RLID: ah.UDPSPort(), RMAC: c.attr.DMAC, TClass: c.attr.TrafficClass,
				HopLimit: c.attr.HopLimit, GRHGIDFL: uint32(c.attr.SGIDIndex)<<20 | c.attr.FlowLabel, RGID: c.attr.DGID}, av.Fields())
			require.Zero(t, av.GRHGIDFL()&(1<<30), "no GRH bit on RoCE")
			require.Error(t, e.PD.Dealloc(), "the AH holds the PD")
			require.NoError(t, ah.Destroy())
			require.ErrorIs(t, ah.Destroy(), provider.ErrClosed)
		})
	}
}

func TestAHUDPSourcePort(t *testing.T) {
	t.Run("from_flow_label", func(t *testing.T) {
		// ibv_flow_label_to_udp_sport: low 14 bits ^ high 6, | 0xC000.
		for _, c := range []struct {
			fl   uint32
			want uint16
		}{{1, 0xc001}, {0x12345, 0xe341}, {0xfffff, 0xffc0}, {0x3fff, 0xffff}, {0x4000, 0xc001}} {
			e := provider.NewEnv(t, provider.EnvOpts{})
			a := udAH
			a.FlowLabel = c.fl
			ah, err := e.PD.CreateAH(a)
			require.NoError(t, err)
			require.Equal(t, c.want, ah.UDPSPort(), "flow label %#x", c.fl)
		}
	})
	t.Run("no_flow_label_deterministic", func(t *testing.T) {
		ports := func() []uint16 {
			e := provider.NewEnv(t, provider.EnvOpts{})
			a := udAH
			a.FlowLabel = 0
			var out []uint16
			for i := 0; i < 16; i++ {
				ah, err := e.PD.CreateAH(a)
				require.NoError(t, err)
				require.GreaterOrEqual(t, ah.UDPSPort(), uint16(0xc000))
				out = append(out, ah.UDPSPort())
			}
			return out
		}
		first := ports()
		require.Equal(t, first, ports(), "the same sequence in every context")
		seen := map[uint16]bool{}
		for _, p := range first {
			seen[p] = true
		}
		require.Greater(t, len(seen), 12, "ports spread: %v", first)
	})
}

// postWQE posts one WR and returns its WQE bytes.
func postWQE(t *testing.T, e *provider.Env, wr provider.SendWR) []byte {
	t.Helper()
	idx := e.QP.SQProducer()
	n, err := e.QP.PostSend([]provider.SendWR{wr})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	w, err := e.QP.WQE(idx)
	require.NoError(t, err)
	return w
}

func TestUDSendWQE(t *testing.T) {
	e := newTyped(t, provider.QPTypeUD, provider.EnvOpts{})
	ah, err := e.PD.CreateAH(udAH)
	require.NoError(t, err)
	copy(e.Buf.Bytes[100:], "hello, ud")
	cases := []struct {
		name   string
		wr     provider.SendWR
		ds     int
		inline []byte
		sges   []provider.SGE
	}{
		{"send_1sge", provider.SendWR{Opcode: provider.WRSend, Flags: provider.SendSignaled, SGL: []provider.SGE{e.MR.SGE(0, 256)}}, 5, nil,
			[]provider.SGE{e.MR.SGE(0, 256)}},
		{"send_imm_inline", provider.SendWR{Opcode: provider.WRSendImm, Flags: provider.SendInline, Imm: 0xabcd,
			SGL: []provider.SGE{e.MR.SGE(100, 9)}}, 5, []byte("hello, ud"), nil},
		{"send_no_data", provider.SendWR{Opcode: provider.WRSend}, 4, nil, nil},
		{"send_zero_len_sge_skipped", provider.SendWR{Opcode: provider.WRSend, SGL: []provider.SGE{e.MR.SGE(0, 0), e.MR.SGE(8, 8)}}, 5, nil,
			[]provider.SGE{e.MR.SGE(8, 8)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			wr := c.wr
			wr.AH, wr.RemoteQPN, wr.RemoteQKey = ah, 0x123456, 0x7654321
			w := postWQE(t, e, wr)
			ctrl := mlx5.CtrlSeg(w)
			require.Equal(t, c.ds, int(ctrl.DS()))
			d := mlx5.DatagramSeg(w[16:64])
			want := mlx5.DatagramSeg(ah.AV()).Fields()
			want.Key, want.DestQPN, want.ExtendedAV = uint64(0x7654321)<<32, 0x123456, true
			require.Equal(t, want, d.Fields())
			if c.inline != nil {
				s := mlx5.InlineSeg(w[64:])
				require.Equal(t, uint32(len(c.inline)), s.Len())
				require.Equal(t, c.inline, []byte(s[4:4+len(c.inline)]))
				require.Equal(t, wr.Imm, ctrl.Imm())
			}
			for i, sge := range c.sges {
				require.Equal(t, mlx5.DataFields{ByteCount: sge.Length, LKey: sge.LKey, Addr: sge.Addr},
					mlx5.DataSeg(w[64+16*i:]).Fields())
			}
		})
	}
}

func TestUDQKeyRule(t *testing.T) {
	cases := []struct {
		name   string
		remote uint32
		qpKey  uint32 // set by RTS->RTS before the post (0: the walk's UDQKey)
		want   uint32
	}{
		{"plain", 0x12345678, 0, 0x12345678},
		{"zero", 0, 0, 0},
		{"largest_plain", 0x7fffffff, 0, 0x7fffffff},
		{"high_bit_only", 0x80000000, 0, provider.UDQKey},
		{"high_bit_and_more", 0xdeadbeef, 0, provider.UDQKey},
		{"qp_key_changed", 0x80000001, 0x0badcafe, 0x0badcafe},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newTyped(t, provider.QPTypeUD, provider.EnvOpts{})
			ah, err := e.PD.CreateAH(udAH)
			require.NoError(t, err)
			if c.qpKey != 0 {
				require.NoError(t, e.QP.Modify(&provider.QPAttr{QPState: provider.QPStateRTS, QKey: c.qpKey}, mlx5.AttrState|mlx5.AttrQKey))
			}
			w := postWQE(t, e, provider.SendWR{Opcode: provider.WRSend, AH: ah, RemoteQPN: 2, RemoteQKey: c.remote})
			require.Equal(t, c.want, mlx5.DatagramSeg(w[16:]).QKey())
			require.Zero(t, binary.BigEndian.Uint32(w[16+4:]), "reserved dword")
		})
	}
}

func TestUDSendRefused(t *testing.T) {
	e := newTyped(t, provider.QPTypeUD, provider.EnvOpts{})
	ah, err := e.PD.CreateAH(udAH)
	require.NoError(t, err)
	dead, err := e.PD.CreateAH(udAH)
	require.NoError(t, err)
	require.NoError(t, dead.Destroy())
	pd2, err := e.Ctx.AllocPD()
	require.NoError(t, err)
	foreign, err := pd2.CreateAH(udAH)
	require.NoError(t, err)
	e2 := newTyped(t, provider.QPTypeUD, provider.EnvOpts{}) // another context: its first PD is PD 1 too
	otherCtx, err := e2.PD.CreateAH(udAH)
	require.NoError(t, err)
	ok := provider.SendWR{Opcode: provider.WRSend, AH: ah, RemoteQPN: 1, SGL: []provider.SGE{e.MR.SGE(0, 8)}}
	with := func(f func(w *provider.SendWR)) provider.SendWR { w := ok; f(&w); return w }
	cases := []struct {
		name string
		wr   provider.SendWR
	}{
		{"rdma_write", with(func(w *provider.SendWR) { w.Opcode = provider.WRRDMAWrite })},
		{"rdma_write_imm", with(func(w *provider.SendWR) { w.Opcode = provider.WRRDMAWriteImm })},
		{"rdma_read", with(func(w *provider.SendWR) { w.Opcode = provider.WRRDMARead })},
		{"cmp_swap", with(func(w *provider.SendWR) { w.Opcode = provider.WRAtomicCmpSwp })},
		{"fetch_add", with(func(w *provider.SendWR) { w.Opcode = provider.WRAtomicFetchAdd })},
		{"no_ah", with(func(w *provider.SendWR) { w.AH = nil })},
		{"destroyed_ah", with(func(w *provider.SendWR) { w.AH = dead })},
		{"ah_of_other_pd", with(func(w *provider.SendWR) { w.AH = foreign })},
		{"ah_of_other_context", with(func(w *provider.SendWR) { w.AH = otherCtx })},
		{"remote_qpn_25_bits", with(func(w *provider.SendWR) { w.RemoteQPN = 1 << 24 })},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := e.QP.SQProducer()
			n, err := e.QP.PostSend([]provider.SendWR{ok, c.wr, ok})
			require.ErrorIs(t, err, provider.ErrInvalidArg)
			var oe *provider.OpError
			require.True(t, errors.As(err, &oe))
			require.Equal(t, 1, oe.Index)
			require.Equal(t, 1, n, "the WR before is posted")
			require.Equal(t, before+2, e.QP.SQProducer(), "ctrl + datagram + data: 80 B, 2 WQEBBs")
			if c.name == "ah_of_other_context" {
				require.ErrorContains(t, err, "address handle of another context")
			}
		})
	}
}

// A UD message larger than the port MTU is posted (libmlx5 does not check);
// the device decides what happens to it.
func TestUDOversizePosted(t *testing.T) {
	e := newTyped(t, provider.QPTypeUD, provider.EnvOpts{})
	ah, err := e.PD.CreateAH(udAH)
	require.NoError(t, err)
	mtu := e.Ctx.Attr().ActiveMTU.Bytes()
	w := postWQE(t, e, provider.SendWR{Opcode: provider.WRSend, AH: ah, RemoteQPN: 1, SGL: []provider.SGE{e.MR.SGE(0, uint32(mtu+1))}})
	require.Equal(t, uint32(mtu+1), mlx5.DataSeg(w[64:]).ByteCount())
}

// A UD WQE in the last WQEBB: ctrl + datagram fill it, the data segment
// (or inline data) continues at the ring start.
func TestUDWrap(t *testing.T) {
	for _, inline := range []bool{false, true} {
		name := "data"
		if inline {
			name = "inline"
		}
		t.Run(name, func(t *testing.T) {
			e := newTyped(t, provider.QPTypeUD, provider.EnvOpts{Progress: true, Cap: provider.QPCap{MaxSendWR: 4, MaxRecvWR: 1,
				MaxSendSGE: 1, MaxInline: 40}})
			ah, err := e.PD.CreateAH(udAH)
			require.NoError(t, err)
			size := e.QP.SQInfo().WQEBBs
			// Fill up to the last WQEBB with one-WQEBB sends, completed as we go.
			wcs := make([]provider.WC, 8)
			for int(e.QP.SQProducer())%size != size-1 {
				postWQE(t, e, provider.SendWR{Opcode: provider.WRSend, Flags: provider.SendSignaled, AH: ah, RemoteQPN: 1})
				_, err := e.CQ.Poll(wcs)
				require.NoError(t, err)
			}
			copy(e.Buf.Bytes[200:], "wrapped payload, 32 bytes long!!")
			wr := provider.SendWR{Opcode: provider.WRSend, Flags: provider.SendSignaled, AH: ah, RemoteQPN: 7,
				SGL: []provider.SGE{e.MR.SGE(200, 32)}}
			if inline {
				wr.Flags |= provider.SendInline
			}
			w := postWQE(t, e, wr)
			ring := e.SQRing(t)
			if inline {
				require.Equal(t, 7, int(mlx5.CtrlSeg(w).DS())) // 1 + 3 + (4+32 -> 48)/16
				require.Equal(t, uint32(32), mlx5.InlineSeg(ring).Len(), "inline header at the ring start")
				require.Equal(t, []byte("wrapped payload, 32 bytes long!!"), ring[4:36])
			} else {
				require.Equal(t, 5, int(mlx5.CtrlSeg(w).DS()))
				require.Equal(t, e.MR.SGE(200, 32).Addr, mlx5.DataSeg(ring).Addr(), "data segment at the ring start")
			}
			require.Equal(t, uint32(7), mlx5.DatagramSeg(ring[(size-1)*64+16:]).DestQPN())
			n, err := e.CQ.Poll(wcs)
			require.NoError(t, err)
			require.Equal(t, 1, n)
			require.Empty(t, e.Dev.QPs[e.QP.QPN()].Errors)
		})
	}
}

func TestUCOpcodes(t *testing.T) {
	cases := []struct {
		op     provider.WROpcode
		mop    mlx5.Opcode
		raddr  bool
		refuse bool
	}{
		{provider.WRSend, mlx5.OpSend, false, false},
		{provider.WRSendImm, mlx5.OpSendImm, false, false},
		{provider.WRRDMAWrite, mlx5.OpRDMAWrite, true, false},
		{provider.WRRDMAWriteImm, mlx5.OpRDMAWriteImm, true, false},
		{provider.WRRDMARead, 0, false, true},
		{provider.WRAtomicCmpSwp, 0, false, true},
		{provider.WRAtomicFetchAdd, 0, false, true},
		{provider.WROpcode(7), 0, false, true},   // LOCAL_INV: not built
		{provider.WRSendWithInv, 0, false, true}, // RC and XRC only
	}
	for _, c := range cases {
		t.Run(c.op.String(), func(t *testing.T) {
			e := newTyped(t, provider.QPTypeUC, provider.EnvOpts{})
			wr := provider.SendWR{Opcode: c.op, Flags: provider.SendSignaled, SGL: []provider.SGE{e.MR.SGE(0, 64)},
				RemoteAddr: 0x1000, RKey: 0x42, Imm: 5}
			if c.refuse {
				n, err := e.QP.PostSend([]provider.SendWR{wr})
				require.ErrorIs(t, err, provider.ErrInvalidArg)
				require.Zero(t, n)
				require.Zero(t, e.QP.SQProducer())
				return
			}
			w := postWQE(t, e, wr)
			require.Equal(t, c.mop, mlx5.CtrlSeg(w).Opcode())
			o := 16
			if c.raddr {
				require.Equal(t, mlx5.RaddrFields{RAddr: 0x1000, RKey: 0x42}, mlx5.RaddrSeg(w[16:]).Fields())
				o += 16
			}
			require.Equal(t, uint32(64), mlx5.DataSeg(w[o:]).ByteCount())
			require.Len(t, w, o+16)
		})
	}
}
