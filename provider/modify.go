package provider

import (
	"errors"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/uverbs"
)

// checkTransition checks a MODIFY_QP against the IB table the kernel
// enforces (uverbs.CheckTransition, ib_modify_qp_is_ok), restricted to the
// transitions mlx5_ib has a firmware command for (mlx5.md §7.2): none into
// SQD (no RTS2SQD), and RESET→ERR accepted, which mlx5_ib's optab has (2ERR)
// though the IB table does not list it.
func checkTransition(typ QPType, cur, next QPState, mask uint32) error {
	c, okCur := uverbs.QPStateFromMLX5(cur)
	n, okNext := uverbs.QPStateFromMLX5(next)
	switch {
	case !okCur:
		return detail(ErrInvalidAttr, "current state %v", cur)
	case !okNext:
		return detail(ErrInvalidAttr, "target state %v", next)
	case n == uverbs.QPStateSQD:
		return detail(ErrBadTransition, "%v -> %v", cur, next)
	case c == uverbs.QPStateReset && n == uverbs.QPStateErr:
		if extra := mask &^ mlx5.AttrState; extra != 0 {
			return detail(ErrInvalidAttr, "%v -> %v does not take %s", cur, next, maskString(extra))
		}
		return nil
	}
	t, ok := uverbs.QPTypeFromMLX5(typ)
	if !ok {
		t = uverbs.QPTypeRC
	}
	var te *uverbs.TransitionError
	if err := uverbs.CheckTransition(t, c, n, uverbs.QPAttrMask(mask)); !errors.As(err, &te) {
		return err
	}
	switch {
	case te.Missing != 0:
		return detail(ErrInvalidAttr, "%v -> %v requires %s", cur, next, maskString(uint32(te.Missing)))
	case te.Extra != 0:
		return detail(ErrInvalidAttr, "%v -> %v does not take %s", cur, next, maskString(uint32(te.Extra)))
	}
	return detail(ErrBadTransition, "%v -> %v", cur, next)
}

// maskString names the bits of an attribute mask.
func maskString(m uint32) string { return uverbs.QPAttrMask(m).String() }

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
	if qp.gone() {
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
	if err := checkTransition(qp.typ, cur, next, mask); err != nil {
		return opErr(op, qp.qpn, err)
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
	qp.refreshFast()
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
		bit  uint32
		bad  bool
		why  string // a format; args fill it in (the limits a profile sets say both numbers)
		args []any
	}
	checks := [...]check{
		{mlx5.AttrAccessFlags, a.AccessFlags&^accessKnown != 0, "unknown access flags", nil},
		{mlx5.AttrPort, a.Port == 0, "port 0 (ports start at 1)", nil},
		{mlx5.AttrPathMTU, a.PathMTU.Bytes() == 0, "path MTU is not one of 256..4096 (enum 1..5)", nil},
		{mlx5.AttrPathMTU, dev.ActiveMTU != 0 && a.PathMTU > dev.ActiveMTU, "path MTU %d above the port's active MTU %d", []any{a.PathMTU.Bytes(), dev.ActiveMTU.Bytes()}},
		{mlx5.AttrDestQPN, a.DestQPN > 0xffffff, "dest QPN wider than 24 bits", nil},
		{mlx5.AttrRQPSN, a.RQPSN > 0xffffff, "RQ PSN wider than 24 bits", nil},
		{mlx5.AttrSQPSN, a.SQPSN > 0xffffff, "SQ PSN wider than 24 bits", nil},
		{mlx5.AttrTimeout, a.Timeout > 31, "timeout above 31", nil},
		{mlx5.AttrRetryCnt, a.RetryCnt > 7, "retry count above 7", nil},
		{mlx5.AttrRNRRetry, a.RNRRetry > 7, "RNR retry above 7", nil},
		{mlx5.AttrMinRNRTimer, a.MinRNRTimer > 31, "min RNR timer above 31", nil},
		{mlx5.AttrMaxQPRdAtomic, dev.MaxQPRdAtomic > 0 && int(a.MaxRdAtomic) > dev.MaxQPRdAtomic, "max_rd_atomic %d above the device limit %d", []any{a.MaxRdAtomic, dev.MaxQPRdAtomic}},
		{mlx5.AttrMaxDestRdAtomic, dev.MaxQPRdAtomic > 0 && int(a.MaxDestRdAtomic) > dev.MaxQPRdAtomic, "max_dest_rd_atomic %d above the device limit %d", []any{a.MaxDestRdAtomic, dev.MaxQPRdAtomic}},
		{mlx5.AttrAV, a.AV.FlowLabel > 0xfffff, "flow label wider than 20 bits", nil},
	}
	for _, c := range checks {
		if mask&c.bit != 0 && c.bad {
			return detail(ErrInvalidAttr, c.why, c.args...)
		}
	}
	return nil
}

// resetIndexes is mlx5_init_qp_indices plus the doorbell-record clear done
// on a move to RESET, and the CQ clean that goes with it.
func (qp *QP) resetIndexes() {
	if qp.rx != nil {
		return // the kernel's rings keep their own indices
	}
	qp.sq.curPost, qp.sq.head, qp.sq.tail = 0, 0, 0
	qp.rq.head, qp.rq.tail = 0, 0
	qp.dbr.SetWord(mlx5.DBRRecv, 0)
	qp.dbr.SetWord(mlx5.DBRSend, 0)
	qp.recvCQ.clean(qp.qpn, qp.srq)
	if qp.sendCQ != qp.recvCQ {
		qp.sendCQ.clean(qp.qpn, qp.srq)
	}
}
