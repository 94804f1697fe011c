package uverbs

import (
	"syscall"

	"github.com/softnic/softnic/mlx5"
)

// PerType is one attribute mask for each QP type the table covers.
type PerType struct{ RC, UC, UD QPAttrMask }

func (p PerType) of(t QPType) QPAttrMask {
	switch t {
	case QPTypeUC:
		return p.UC
	case QPTypeUD:
		return p.UD
	}
	return p.RC
}

// Transition is one allowed QP state change: the attributes it requires and
// those it also accepts, per QP type (QP_STATE itself is always accepted).
type Transition struct{ Req, Opt PerType }

// Attribute sets that recur in the table.
const (
	initRCUC = QPAttrPKeyIndex | QPAttrPort | QPAttrAccessFlags
	initUD   = QPAttrPKeyIndex | QPAttrPort | QPAttrQKey
	rtsOptRC = QPAttrCurState | QPAttrAltPath | QPAttrAccessFlags | QPAttrMinRNRTimer | QPAttrPathMigState
	rtsOptUC = QPAttrCurState | QPAttrAltPath | QPAttrAccessFlags | QPAttrPathMigState
	rtsOptUD = QPAttrCurState | QPAttrQKey
)

// transitions is the IB specification's QP state table for RC, UC and UD
// as the Linux kernel encodes it (qp_state_table in
// drivers/infiniband/core/verbs.c, checked by ib_modify_qp_is_ok, which
// mlx5_ib and rxe call before touching the QP; mlx5.md §7.3). A pair that
// is missing is not a transition. It is the one copy of these facts: the
// provider checks a MODIFY_QP against it before sending, the device
// before executing. LookupTransition reads it.
var transitions = map[[2]QPState]Transition{
	{QPStateReset, QPStateReset}: {},
	{QPStateReset, QPStateInit}:  {Req: PerType{RC: initRCUC, UC: initRCUC, UD: initUD}},

	{QPStateInit, QPStateReset}: {},
	{QPStateInit, QPStateErr}:   {},
	{QPStateInit, QPStateInit}:  {Opt: PerType{RC: initRCUC, UC: initRCUC, UD: initUD}},
	{QPStateInit, QPStateRTR}: {
		Req: PerType{
			RC: QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN | QPAttrMaxDestRdAtomic | QPAttrMinRNRTimer,
			UC: QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN,
		},
		Opt: PerType{
			RC: QPAttrAltPath | QPAttrAccessFlags | QPAttrPKeyIndex,
			UC: QPAttrAltPath | QPAttrAccessFlags | QPAttrPKeyIndex,
			UD: QPAttrPKeyIndex | QPAttrQKey,
		},
	},

	{QPStateRTR, QPStateReset}: {},
	{QPStateRTR, QPStateErr}:   {},
	{QPStateRTR, QPStateRTS}: {
		Req: PerType{RC: QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrSQPSN | QPAttrMaxQPRdAtomic, UC: QPAttrSQPSN, UD: QPAttrSQPSN},
		Opt: PerType{RC: rtsOptRC, UC: rtsOptUC, UD: rtsOptUD},
	},

	{QPStateRTS, QPStateReset}: {},
	{QPStateRTS, QPStateErr}:   {},
	{QPStateRTS, QPStateRTS}:   {Opt: PerType{RC: rtsOptRC, UC: rtsOptUC, UD: rtsOptUD}},
	{QPStateRTS, QPStateSQD}:   {Opt: PerType{RC: QPAttrEnSQDAsyncNotify, UC: QPAttrEnSQDAsyncNotify, UD: QPAttrEnSQDAsyncNotify}},

	{QPStateSQD, QPStateReset}: {},
	{QPStateSQD, QPStateErr}:   {},
	{QPStateSQD, QPStateRTS}:   {Opt: PerType{RC: rtsOptRC, UC: rtsOptUC, UD: rtsOptUD}},
	{QPStateSQD, QPStateSQD}: {Opt: PerType{
		RC: QPAttrPort | QPAttrAV | QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrMaxQPRdAtomic |
			QPAttrMaxDestRdAtomic | QPAttrAltPath | QPAttrAccessFlags | QPAttrPKeyIndex | QPAttrMinRNRTimer | QPAttrPathMigState,
		UC: QPAttrAV | QPAttrAltPath | QPAttrAccessFlags | QPAttrPKeyIndex | QPAttrPathMigState,
		UD: QPAttrPKeyIndex | QPAttrQKey,
	}},

	{QPStateSQE, QPStateReset}: {},
	{QPStateSQE, QPStateErr}:   {},
	// RC never enters SQE (a send error moves it to ERR): the kernel lists
	// the transition with no attributes for RC.
	{QPStateSQE, QPStateRTS}: {Opt: PerType{UC: QPAttrCurState | QPAttrAccessFlags, UD: rtsOptUD}},

	{QPStateErr, QPStateReset}: {},
	{QPStateErr, QPStateErr}:   {},
}

// LookupTransition returns the table's entry for cur -> next, and false if
// the pair is not a transition.
func LookupTransition(cur, next QPState) (Transition, bool) {
	tr, ok := transitions[[2]QPState{cur, next}]
	return tr, ok
}

// TransitionError is a MODIFY_QP the table refuses. Err is ErrBadTransition
// (not in the table), ErrMissingAttr (Missing names the bits) or
// ErrExtraAttr (Extra names them), or ErrBadValue for a type or state
// outside the table. It unwraps to Err and to syscall.EINVAL, which the
// kernel returns.
type TransitionError struct {
	Type           QPType
	Cur, Next      QPState
	Missing, Extra QPAttrMask
	Err            error
}

func (e *TransitionError) Error() string {
	s := "uverbs: MODIFY_QP " + e.Type.String() + " " + e.Cur.String() + "->" + e.Next.String() + ": " + e.Err.Error()
	switch {
	case e.Missing != 0:
		s += ": needs " + e.Missing.String()
	case e.Extra != 0:
		s += ": does not take " + e.Extra.String()
	}
	return s
}

// Unwrap returns the sentinel and EINVAL.
func (e *TransitionError) Unwrap() []error { return []error{e.Err, syscall.EINVAL} }

// CheckTransition reports whether a MODIFY_QP of a QP of type t from cur
// with attribute mask (next is the target: the mask's QP_STATE value, or cur
// without QP_STATE) is allowed, as ib_modify_qp_is_ok decides: the pair must
// be in the table, the mask must hold every required attribute of the
// type and nothing beyond the required, the optional and QP_STATE. (The
// kernel's separate rule that CUR_STATE is only given from RTR, RTS, SQD or
// SQE follows from the table: only transitions from those states list it.)
// It returns nil or a *TransitionError.
func CheckTransition(t QPType, cur, next QPState, mask QPAttrMask) error {
	if (t != QPTypeRC && t != QPTypeUC && t != QPTypeUD) || cur > QPStateErr || next > QPStateErr {
		return &TransitionError{Type: t, Cur: cur, Next: next, Err: ErrBadValue}
	}
	tr, ok := transitions[[2]QPState{cur, next}]
	if !ok {
		return &TransitionError{Type: t, Cur: cur, Next: next, Err: ErrBadTransition}
	}
	req, opt := tr.Req.of(t), tr.Opt.of(t)
	if miss := req &^ mask; miss != 0 {
		return &TransitionError{Type: t, Cur: cur, Next: next, Missing: miss, Err: ErrMissingAttr}
	}
	if extra := mask &^ (req | opt | QPAttrState); extra != 0 {
		return &TransitionError{Type: t, Cur: cur, Next: next, Extra: extra, Err: ErrExtraAttr}
	}
	return nil
}

// ---------------------------------------------------------------- the mlx5 boundary

// The mlx5 package speaks firmware terms: QPC states (SQER 4, SQD 5) and
// service types (RC 0, UC 1, UD 2). Its MODIFY_QP attribute bits
// (mlx5.Attr*) already use the ibv_qp_attr_mask numbering, so
// QPAttrMask(m) converts them (TestMLX5AttrBits holds that).

// QPStateFromMLX5 maps a QPC state to the IB state; false for a QPC-only
// state (SQ_DRAINING, SUSPENDED).
func QPStateFromMLX5(s mlx5.QPState) (QPState, bool) {
	switch s {
	case mlx5.QPStateRST:
		return QPStateReset, true
	case mlx5.QPStateINIT:
		return QPStateInit, true
	case mlx5.QPStateRTR:
		return QPStateRTR, true
	case mlx5.QPStateRTS:
		return QPStateRTS, true
	case mlx5.QPStateSQER:
		return QPStateSQE, true
	case mlx5.QPStateSQD:
		return QPStateSQD, true
	case mlx5.QPStateERR:
		return QPStateErr, true
	}
	return 0, false
}

// MLX5 maps an IB state to the QPC state; false outside RESET..ERR.
func (s QPState) MLX5() (mlx5.QPState, bool) {
	for _, m := range [...]mlx5.QPState{mlx5.QPStateRST, mlx5.QPStateINIT, mlx5.QPStateRTR, mlx5.QPStateRTS,
		mlx5.QPStateSQER, mlx5.QPStateSQD, mlx5.QPStateERR} {
		if v, _ := QPStateFromMLX5(m); v == s {
			return m, true
		}
	}
	return 0, false
}

// QPTypeFromMLX5 maps a QPC service type to the IB QP type; false for
// types uverbs does not model.
func QPTypeFromMLX5(t mlx5.QPType) (QPType, bool) {
	switch t {
	case mlx5.QPTypeRC:
		return QPTypeRC, true
	case mlx5.QPTypeUC:
		return QPTypeUC, true
	case mlx5.QPTypeUD:
		return QPTypeUD, true
	}
	return 0, false
}

// MLX5 maps an IB QP type to the QPC service type; false for other types.
func (t QPType) MLX5() (mlx5.QPType, bool) {
	switch t {
	case QPTypeRC:
		return mlx5.QPTypeRC, true
	case QPTypeUC:
		return mlx5.QPTypeUC, true
	case QPTypeUD:
		return mlx5.QPTypeUD, true
	}
	return 0, false
}
