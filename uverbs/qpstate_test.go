package uverbs

import (
	"syscall"
	"testing"

	"github.com/softnic/softnic/mlx5"
	"github.com/stretchr/testify/require"
)

func TestCheckTransition(t *testing.T) {
	const S = QPAttrState
	rcRTR := QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN | QPAttrMaxDestRdAtomic | QPAttrMinRNRTimer
	rcRTS := QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrSQPSN | QPAttrMaxQPRdAtomic
	cases := []struct {
		name      string
		typ       QPType
		cur, next QPState
		mask      QPAttrMask
		want      error
		missing   QPAttrMask
		extra     QPAttrMask
	}{
		{"rc_init", QPTypeRC, QPStateReset, QPStateInit, S | QPAttrPKeyIndex | QPAttrPort | QPAttrAccessFlags, nil, 0, 0},
		{"rc_init_no_port", QPTypeRC, QPStateReset, QPStateInit, S | QPAttrPKeyIndex | QPAttrAccessFlags, ErrMissingAttr, QPAttrPort, 0},
		{"rc_init_qkey", QPTypeRC, QPStateReset, QPStateInit, S | QPAttrPKeyIndex | QPAttrPort | QPAttrAccessFlags | QPAttrQKey, ErrExtraAttr, 0, QPAttrQKey},
		{"ud_init", QPTypeUD, QPStateReset, QPStateInit, S | QPAttrPKeyIndex | QPAttrPort | QPAttrQKey, nil, 0, 0},
		{"ud_init_access", QPTypeUD, QPStateReset, QPStateInit, S | QPAttrPKeyIndex | QPAttrPort | QPAttrQKey | QPAttrAccessFlags, ErrExtraAttr, 0, QPAttrAccessFlags},
		{"rc_rtr", QPTypeRC, QPStateInit, QPStateRTR, S | rcRTR, nil, 0, 0},
		{"rc_rtr_no_min_rnr", QPTypeRC, QPStateInit, QPStateRTR, S | rcRTR&^QPAttrMinRNRTimer, ErrMissingAttr, QPAttrMinRNRTimer, 0},
		{"uc_rtr_min_rnr", QPTypeUC, QPStateInit, QPStateRTR, S | rcRTR&^QPAttrMaxDestRdAtomic, ErrExtraAttr, 0, QPAttrMinRNRTimer},
		{"ud_rtr_nothing", QPTypeUD, QPStateInit, QPStateRTR, S, nil, 0, 0},
		{"rc_rts", QPTypeRC, QPStateRTR, QPStateRTS, S | rcRTS | QPAttrCurState, nil, 0, 0},
		{"uc_rts_retry", QPTypeUC, QPStateRTR, QPStateRTS, S | QPAttrSQPSN | QPAttrRetryCnt, ErrExtraAttr, 0, QPAttrRetryCnt},
		{"rts_rts_no_state", QPTypeRC, QPStateRTS, QPStateRTS, QPAttrMinRNRTimer, nil, 0, 0},
		{"rtr_rtr", QPTypeRC, QPStateRTR, QPStateRTR, QPAttrMinRNRTimer, ErrBadTransition, 0, 0},
		{"reset_err", QPTypeRC, QPStateReset, QPStateErr, S, ErrBadTransition, 0, 0}, // the IB table has no RESET->ERR
		{"reset_rtr", QPTypeRC, QPStateReset, QPStateRTR, S | rcRTR, ErrBadTransition, 0, 0},
		{"any_err", QPTypeUD, QPStateRTS, QPStateErr, S, nil, 0, 0},
		{"err_with_port", QPTypeRC, QPStateRTS, QPStateErr, S | QPAttrPort, ErrExtraAttr, 0, QPAttrPort},
		{"err_cur_state", QPTypeRC, QPStateInit, QPStateErr, S | QPAttrCurState, ErrExtraAttr, 0, QPAttrCurState},
		{"rts_sqd_notify", QPTypeRC, QPStateRTS, QPStateSQD, S | QPAttrEnSQDAsyncNotify, nil, 0, 0},
		{"sqd_sqd_rc_av", QPTypeRC, QPStateSQD, QPStateSQD, S | QPAttrAV | QPAttrTimeout, nil, 0, 0},
		{"sqd_sqd_ud_av", QPTypeUD, QPStateSQD, QPStateSQD, S | QPAttrAV, ErrExtraAttr, 0, QPAttrAV},
		{"uc_sqe_rts", QPTypeUC, QPStateSQE, QPStateRTS, S | QPAttrCurState | QPAttrAccessFlags, nil, 0, 0},
		{"uc_sqe_rts_alt", QPTypeUC, QPStateSQE, QPStateRTS, S | QPAttrAltPath, ErrExtraAttr, 0, QPAttrAltPath},
		{"rc_sqe_rts_bare", QPTypeRC, QPStateSQE, QPStateRTS, S, nil, 0, 0},
		{"rc_sqe_rts_cur", QPTypeRC, QPStateSQE, QPStateRTS, S | QPAttrCurState, ErrExtraAttr, 0, QPAttrCurState},
		{"bad_type", QPTypeRawPacket, QPStateReset, QPStateInit, S | QPAttrPort, ErrBadValue, 0, 0},
		{"bad_state", QPTypeRC, 7, QPStateErr, S, ErrBadValue, 0, 0},
		{"bad_next", QPTypeRC, QPStateRTS, 42, S, ErrBadValue, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := CheckTransition(c.typ, c.cur, c.next, c.mask)
			if c.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, c.want)
			require.ErrorIs(t, err, syscall.EINVAL)
			te := err.(*TransitionError)
			require.Equal(t, c.missing, te.Missing)
			require.Equal(t, c.extra, te.Extra)
			require.NotEmpty(t, te.Error())
		})
	}
}

// The kernel refuses CUR_STATE unless the QP is in RTR, RTS, SQD or SQE;
// the table alone implies it, for every type and pair.
func TestCurStateOnlyFromRTRtoSQE(t *testing.T) {
	for cur := QPStateReset; cur <= QPStateErr; cur++ {
		for next := QPStateReset; next <= QPStateErr; next++ {
			for _, typ := range []QPType{QPTypeRC, QPTypeUC, QPTypeUD} {
				tr, ok := LookupTransition(cur, next)
				if !ok {
					continue
				}
				if (tr.Opt.of(typ)|tr.Req.of(typ))&QPAttrCurState != 0 {
					require.Contains(t, []QPState{QPStateRTR, QPStateRTS, QPStateSQD, QPStateSQE}, cur, "%v %v->%v", typ, cur, next)
				}
			}
		}
	}
}

func TestMLX5Mapping(t *testing.T) {
	for s := QPStateReset; s <= QPStateErr; s++ {
		m, ok := s.MLX5()
		require.True(t, ok)
		back, ok := QPStateFromMLX5(m)
		require.True(t, ok)
		require.Equal(t, s, back)
	}
	require.Equal(t, mlx5.QPStateSQER, func() mlx5.QPState { m, _ := QPStateSQE.MLX5(); return m }())
	_, ok := QPStateFromMLX5(mlx5.QPStateDrain)
	require.False(t, ok)
	_, ok = QPState(9).MLX5()
	require.False(t, ok)
	for _, typ := range []QPType{QPTypeRC, QPTypeUC, QPTypeUD} {
		m, ok := typ.MLX5()
		require.True(t, ok)
		back, _ := QPTypeFromMLX5(m)
		require.Equal(t, typ, back)
	}
	_, ok = QPTypeXRCIni.MLX5()
	require.False(t, ok)
	_, ok = QPTypeFromMLX5(7)
	require.False(t, ok)
}

// mlx5.Attr* already number the bits as ibv_qp_attr_mask does, so a mask
// crosses the boundary unchanged.
func TestMLX5AttrBits(t *testing.T) {
	pairs := []struct {
		m uint32
		u QPAttrMask
	}{
		{mlx5.AttrState, QPAttrState}, {mlx5.AttrCurState, QPAttrCurState}, {mlx5.AttrAccessFlags, QPAttrAccessFlags},
		{mlx5.AttrPKeyIndex, QPAttrPKeyIndex}, {mlx5.AttrPort, QPAttrPort}, {mlx5.AttrQKey, QPAttrQKey},
		{mlx5.AttrAV, QPAttrAV}, {mlx5.AttrPathMTU, QPAttrPathMTU}, {mlx5.AttrTimeout, QPAttrTimeout},
		{mlx5.AttrRetryCnt, QPAttrRetryCnt}, {mlx5.AttrRNRRetry, QPAttrRNRRetry}, {mlx5.AttrRQPSN, QPAttrRQPSN},
		{mlx5.AttrMaxQPRdAtomic, QPAttrMaxQPRdAtomic}, {mlx5.AttrAltPath, QPAttrAltPath},
		{mlx5.AttrMinRNRTimer, QPAttrMinRNRTimer}, {mlx5.AttrSQPSN, QPAttrSQPSN},
		{mlx5.AttrMaxDestRdAtomic, QPAttrMaxDestRdAtomic}, {mlx5.AttrPathMigState, QPAttrPathMigState},
		{mlx5.AttrCap, QPAttrCap}, {mlx5.AttrDestQPN, QPAttrDestQPN},
	}
	for _, p := range pairs {
		require.Equal(t, p.u, QPAttrMask(p.m), p.u.String())
	}
	require.Equal(t, "STATE|PORT|RATE_LIMIT|BIT30", (QPAttrState | QPAttrPort | QPAttrRateLimit | 1<<30).String())
}
