package provider

import (
	"strconv"

	"github.com/softnic/softnic/mlx5"
)

// transition is one allowed state change: the attributes it requires and
// those it also accepts (the IB spec table the kernel enforces in
// ib_modify_qp_is_ok, qp_state_table in drivers/infiniband/core/verbs.c,
// mlx5.md §7.3, restricted to the transitions mlx5_ib has a firmware
// command for, §7.2). There is one table per QP type.
type transition struct {
	req, opt uint32
}

const (
	rtsOpt = mlx5.AttrCurState | mlx5.AttrAltPath | mlx5.AttrAccessFlags | mlx5.AttrMinRNRTimer | mlx5.AttrPathMigState
)

// rcTransitions[from][to] for RC QPs; a missing entry is not allowed.
var rcTransitions = map[QPState]map[QPState]transition{
	QPStateReset: {
		QPStateReset: {},
		QPStateInit:  {req: mlx5.AttrPKeyIndex | mlx5.AttrPort | mlx5.AttrAccessFlags},
		QPStateErr:   {},
	},
	QPStateInit: {
		QPStateReset: {},
		QPStateInit:  {opt: mlx5.AttrPKeyIndex | mlx5.AttrPort | mlx5.AttrAccessFlags},
		QPStateRTR: {
			req: mlx5.AttrAV | mlx5.AttrPathMTU | mlx5.AttrDestQPN | mlx5.AttrRQPSN | mlx5.AttrMaxDestRdAtomic | mlx5.AttrMinRNRTimer,
			opt: mlx5.AttrAltPath | mlx5.AttrAccessFlags | mlx5.AttrPKeyIndex,
		},
		QPStateErr: {},
	},
	QPStateRTR: {
		QPStateReset: {},
		QPStateRTS: {
			req: mlx5.AttrTimeout | mlx5.AttrRetryCnt | mlx5.AttrRNRRetry | mlx5.AttrSQPSN | mlx5.AttrMaxQPRdAtomic,
			opt: rtsOpt,
		},
		QPStateErr: {},
	},
	QPStateRTS: {
		QPStateReset: {},
		QPStateRTS:   {opt: rtsOpt},
		QPStateErr:   {},
	},
	QPStateSQD: {
		QPStateReset: {},
		QPStateRTS:   {opt: rtsOpt},
		QPStateErr:   {},
	},
	// SQE→RTS exists in mlx5_ib (SQERR2RTS) but the IB table lists no
	// optional attributes for RC there.
	QPStateSQE: {
		QPStateReset: {},
		QPStateRTS:   {},
		QPStateErr:   {},
	},
	QPStateErr: {
		QPStateReset: {},
		QPStateErr:   {},
	},
}

// ucTransitions[from][to] for UC QPs: no atomics, no retries, no RNR: an
// RC table without MAX_DEST_RD_ATOMIC, MIN_RNR_TIMER, TIMEOUT, RETRY_CNT,
// RNR_RETRY and MAX_QP_RD_ATOMIC.
var ucTransitions = map[QPState]map[QPState]transition{
	QPStateReset: {
		QPStateReset: {},
		QPStateInit:  {req: mlx5.AttrPKeyIndex | mlx5.AttrPort | mlx5.AttrAccessFlags},
		QPStateErr:   {},
	},
	QPStateInit: {
		QPStateReset: {},
		QPStateInit:  {opt: mlx5.AttrPKeyIndex | mlx5.AttrPort | mlx5.AttrAccessFlags},
		QPStateRTR: {
			req: mlx5.AttrAV | mlx5.AttrPathMTU | mlx5.AttrDestQPN | mlx5.AttrRQPSN,
			opt: mlx5.AttrAltPath | mlx5.AttrAccessFlags | mlx5.AttrPKeyIndex,
		},
		QPStateErr: {},
	},
	QPStateRTR: {
		QPStateReset: {},
		QPStateRTS:   {req: mlx5.AttrSQPSN, opt: ucRTSOpt},
		QPStateErr:   {},
	},
	QPStateRTS: {
		QPStateReset: {},
		QPStateRTS:   {opt: ucRTSOpt},
		QPStateErr:   {},
	},
	QPStateSQD: {
		QPStateReset: {},
		QPStateRTS:   {opt: ucRTSOpt},
		QPStateErr:   {},
	},
	QPStateSQE: {
		QPStateReset: {},
		QPStateRTS:   {opt: mlx5.AttrCurState | mlx5.AttrAccessFlags},
		QPStateErr:   {},
	},
	QPStateErr: {
		QPStateReset: {},
		QPStateErr:   {},
	},
}

const ucRTSOpt = mlx5.AttrCurState | mlx5.AttrAltPath | mlx5.AttrAccessFlags | mlx5.AttrPathMigState

// udTransitions[from][to] for UD QPs: a Q_Key instead of access flags, no
// address vector or path (each send names its AH), only an SQ PSN to
// reach RTS.
var udTransitions = map[QPState]map[QPState]transition{
	QPStateReset: {
		QPStateReset: {},
		QPStateInit:  {req: mlx5.AttrPKeyIndex | mlx5.AttrPort | mlx5.AttrQKey},
		QPStateErr:   {},
	},
	QPStateInit: {
		QPStateReset: {},
		QPStateInit:  {opt: mlx5.AttrPKeyIndex | mlx5.AttrPort | mlx5.AttrQKey},
		QPStateRTR:   {opt: mlx5.AttrPKeyIndex | mlx5.AttrQKey},
		QPStateErr:   {},
	},
	QPStateRTR: {
		QPStateReset: {},
		QPStateRTS:   {req: mlx5.AttrSQPSN, opt: udRTSOpt},
		QPStateErr:   {},
	},
	QPStateRTS: {
		QPStateReset: {},
		QPStateRTS:   {opt: udRTSOpt},
		QPStateErr:   {},
	},
	QPStateSQD: {
		QPStateReset: {},
		QPStateRTS:   {opt: udRTSOpt},
		QPStateErr:   {},
	},
	QPStateSQE: {
		QPStateReset: {},
		QPStateRTS:   {opt: udRTSOpt},
		QPStateErr:   {},
	},
	QPStateErr: {
		QPStateReset: {},
		QPStateErr:   {},
	},
}

const udRTSOpt = mlx5.AttrCurState | mlx5.AttrQKey

// transitions is the table for the QP's type.
func (qp *QP) transitions() map[QPState]map[QPState]transition {
	switch qp.typ {
	case QPTypeUC:
		return ucTransitions
	case QPTypeUD:
		return udTransitions
	}
	return rcTransitions
}

var attrNames = [...]string{
	0: "STATE", 1: "CUR_STATE", 2: "EN_SQD_ASYNC_NOTIFY", 3: "ACCESS_FLAGS", 4: "PKEY_INDEX", 5: "PORT",
	6: "QKEY", 7: "AV", 8: "PATH_MTU", 9: "TIMEOUT", 10: "RETRY_CNT", 11: "RNR_RETRY", 12: "RQ_PSN",
	13: "MAX_QP_RD_ATOMIC", 14: "ALT_PATH", 15: "MIN_RNR_TIMER", 16: "SQ_PSN", 17: "MAX_DEST_RD_ATOMIC",
	18: "PATH_MIG_STATE", 19: "CAP", 20: "DEST_QPN",
}

// maskString names the bits of an attribute mask.
func maskString(m uint32) string {
	s := ""
	for b := 0; b < 32; b++ {
		if m&(1<<b) == 0 {
			continue
		}
		if s != "" {
			s += "|"
		}
		if b < len(attrNames) && attrNames[b] != "" {
			s += attrNames[b]
		} else {
			s += "BIT" + strconv.Itoa(b)
		}
	}
	return s
}

// Modify changes QP attributes and state (ibv_modify_qp). mask is a set of
// mlx5.Attr* bits. The transition and the attribute set are checked
// locally first against the QP type's table (ErrBadTransition,
// ErrInvalidAttr), then MODIFY_QP is sent. A UD QP needs PKEY_INDEX, PORT
// and QKEY for RESET→INIT, nothing for INIT→RTR and SQ_PSN for RTR→RTS; a
// UC QP needs PKEY_INDEX, PORT and ACCESS_FLAGS, then AV, PATH_MTU,
// DEST_QPN and RQ_PSN, then SQ_PSN, and takes none of RC's atomic, retry
// or RNR attributes.
// Moving to RESET clears the software queue indexes and both doorbell
// record words and removes the QP's unpolled CQEs, as libmlx5 does.
func (qp *QP) Modify(attr *QPAttr, mask uint32) error {
	const op = "modify_qp"
	if qp == nil || qp.dead {
		return opErr(op, 0, ErrClosed)
	}
	if attr == nil {
		return opErr(op, qp.qpn, detail(ErrInvalidArg, "nil attributes"))
	}
	cur := qp.state
	if mask&mlx5.AttrCurState != 0 {
		cur = attr.CurQPState
	}
	next := cur
	if mask&mlx5.AttrState != 0 {
		next = attr.QPState
	}
	table := qp.transitions()
	from, ok := table[cur]
	if !ok {
		return opErr(op, qp.qpn, detail(ErrInvalidAttr, "current state %v", cur))
	}
	if _, ok := table[next]; !ok {
		return opErr(op, qp.qpn, detail(ErrInvalidAttr, "target state %v", next))
	}
	t, ok := from[next]
	if !ok {
		return opErr(op, qp.qpn, detail(ErrBadTransition, "%v -> %v", cur, next))
	}
	if missing := t.req &^ mask; missing != 0 {
		return opErr(op, qp.qpn, detail(ErrInvalidAttr, "%v -> %v requires %s", cur, next, maskString(missing)))
	}
	if extra := mask &^ (t.req | t.opt | mlx5.AttrState); extra != 0 {
		return opErr(op, qp.qpn, detail(ErrInvalidAttr, "%v -> %v does not take %s", cur, next, maskString(extra)))
	}
	if err := qp.checkValues(attr, mask); err != nil {
		return opErr(op, qp.qpn, err)
	}
	cmd := mlx5.ModifyQPCmd{
		QPN: qp.qpn, Mask: mask, State: next, CurState: cur, AccessFlags: uint32(attr.AccessFlags),
		PKeyIndex: attr.PKeyIndex, Port: attr.Port, QKey: attr.QKey, AV: attr.AV, PathMTU: attr.PathMTU,
		Timeout: attr.Timeout, RetryCnt: attr.RetryCnt, RNRRetry: attr.RNRRetry, RQPSN: attr.RQPSN,
		SQPSN: attr.SQPSN, MaxQPRdAtomic: attr.MaxRdAtomic, MaxDestRdAtomic: attr.MaxDestRdAtomic,
		MinRNRTimer: attr.MinRNRTimer, DestQPN: attr.DestQPN,
	}
	if err := qp.ctx.ctl.ModifyQP(cmd); err != nil {
		return opErr(op, qp.qpn, err)
	}
	qp.state = next
	if mask&mlx5.AttrQKey != 0 {
		qp.qkey = attr.QKey
	}
	if next == QPStateReset && cur != QPStateReset {
		qp.resetIndexes()
	}
	return nil
}

// checkValues range-checks the attributes the mask selects.
func (qp *QP) checkValues(a *QPAttr, mask uint32) error {
	dev := &qp.ctx.attr
	type check struct {
		bit uint32
		bad bool
		why string
	}
	checks := [...]check{
		{mlx5.AttrAccessFlags, a.AccessFlags&^accessKnown != 0, "unknown access flags"},
		{mlx5.AttrPort, a.Port == 0, "port 0 (ports start at 1)"},
		{mlx5.AttrPathMTU, a.PathMTU.Bytes() == 0, "path MTU is not one of 256..4096 (enum 1..5)"},
		{mlx5.AttrPathMTU, dev.ActiveMTU != 0 && a.PathMTU > dev.ActiveMTU, "path MTU above the port's active MTU"},
		{mlx5.AttrDestQPN, a.DestQPN > 0xffffff, "dest QPN wider than 24 bits"},
		{mlx5.AttrRQPSN, a.RQPSN > 0xffffff, "RQ PSN wider than 24 bits"},
		{mlx5.AttrSQPSN, a.SQPSN > 0xffffff, "SQ PSN wider than 24 bits"},
		{mlx5.AttrTimeout, a.Timeout > 31, "timeout above 31"},
		{mlx5.AttrRetryCnt, a.RetryCnt > 7, "retry count above 7"},
		{mlx5.AttrRNRRetry, a.RNRRetry > 7, "RNR retry above 7"},
		{mlx5.AttrMinRNRTimer, a.MinRNRTimer > 31, "min RNR timer above 31"},
		{mlx5.AttrMaxQPRdAtomic, dev.MaxQPRdAtomic > 0 && int(a.MaxRdAtomic) > dev.MaxQPRdAtomic, "max_rd_atomic above the device limit"},
		{mlx5.AttrMaxDestRdAtomic, dev.MaxQPRdAtomic > 0 && int(a.MaxDestRdAtomic) > dev.MaxQPRdAtomic, "max_dest_rd_atomic above the device limit"},
		{mlx5.AttrAV, a.AV.FlowLabel > 0xfffff, "flow label wider than 20 bits"},
	}
	for _, c := range checks {
		if mask&c.bit != 0 && c.bad {
			return detail(ErrInvalidAttr, "%s", c.why)
		}
	}
	return nil
}

// resetIndexes is mlx5_init_qp_indices plus the doorbell-record clear done
// on a move to RESET, and the CQ clean that goes with it.
func (qp *QP) resetIndexes() {
	qp.sq.curPost, qp.sq.head, qp.sq.tail = 0, 0, 0
	qp.rq.head, qp.rq.tail = 0, 0
	qp.dbr.SetWord(mlx5.DBRRecv, 0)
	qp.dbr.SetWord(mlx5.DBRSend, 0)
	qp.recvCQ.clean(qp.qpn, qp.srq)
	if qp.sendCQ != qp.recvCQ {
		qp.sendCQ.clean(qp.qpn, qp.srq)
	}
}
