package provider

import (
	"fmt"

	"github.com/softnic/softnic/mlx5"
)

// Peer is what a QP needs to know of the QP at the other end: what an
// out-of-band exchange (ibv_rc_pingpong's, perftest's, a test's) carries.
type Peer struct {
	QPN uint32   // its QP number
	PSN uint32   // its initial send PSN, which is this QP's receive PSN
	GID [16]byte // its RoCEv2 GID (::ffff:a.b.c.d)
	MAC [6]byte  // the next hop's MAC for that GID
}

// ConnectAttr is a QP's side of a connection. Every field is used as
// given; DefaultConnectAttr holds the values ibv_rc_pingpong and perftest
// use. Fields a QP type has no use for are ignored (UD: Peer, MTU and the
// RC timers; UC: the RC timers and read/atomic depths).
type ConnectAttr struct {
	Peer      Peer
	PSN       uint32 // own initial send PSN
	MTU       int    // path MTU in bytes: 256, 512, 1024, 2048 or 4096
	Access    Access // remote access the QP grants (RC, UC)
	PKeyIndex uint16
	QKey      uint32 // UD

	SGIDIndex    uint8
	HopLimit     uint8
	TrafficClass uint8
	FlowLabel    uint32

	MaxRdAtomic     uint8 // READ/atomic requests this QP keeps outstanding (RC)
	MaxDestRdAtomic uint8 // READ/atomic requests it accepts from the peer (RC)
	MinRNRTimer     uint8 // IB RNR timer code (RC)
	Timeout         uint8 // local ACK timeout, 4.096 µs × 2^Timeout (RC)
	RetryCnt        uint8 // RC
	RNRRetry        uint8 // RC; 7 = infinite
}

// DefaultConnectAttr is ibv_rc_pingpong's connection: MTU 1024, timeout
// 14, seven retries, infinite RNR retry, RNR timer 12, one READ each way,
// GID index 1, hop limit 64.
func DefaultConnectAttr() ConnectAttr {
	return ConnectAttr{MTU: 1024, SGIDIndex: 1, HopLimit: 64, MaxRdAtomic: 1, MaxDestRdAtomic: 1,
		MinRNRTimer: 12, Timeout: 14, RetryCnt: 7, RNRRetry: 7}
}

// Connect brings the QP from RESET to RTS (INIT, RTR, RTS) with the
// attributes and masks the IB transition table requires of its type: the
// one way softnic's tests and commands bring a QP up. A QP already in
// INIT — moved there by ToInit so that receives could be posted before the
// peer was known, as ibv_rc_pingpong and perftest do — goes on from INIT
// (a.Access and a.QKey were given then).
func (qp *QP) Connect(a ConnectAttr) error {
	if qp.gone() || qp.state != QPStateInit { // ToInit refuses a nil, destroyed or zero QP
		if err := qp.ToInit(a); err != nil {
			return err
		}
	}
	if err := qp.ToRTR(a); err != nil {
		return err
	}
	return qp.ToRTS(a)
}

// ToInit moves the QP from RESET to INIT: port 1, the P_Key index, and
// the remote access (RC, UC) or the Q_Key (UD).
func (qp *QP) ToInit(a ConnectAttr) error {
	if qp.gone() {
		return wrapStep("INIT", opErr("modify_qp", qp.QPN(), ErrClosed))
	}
	qa := QPAttr{QPState: QPStateInit, PKeyIndex: a.PKeyIndex, Port: 1, AccessFlags: a.Access, QKey: a.QKey}
	mask := uint32(mlx5.AttrState | mlx5.AttrPKeyIndex | mlx5.AttrPort)
	if qp.typ == QPTypeUD {
		mask |= mlx5.AttrQKey
	} else {
		mask |= mlx5.AttrAccessFlags
	}
	return wrapStep("INIT", qp.Modify(&qa, mask))
}

// ToRTR moves the QP from INIT to RTR: the path to the peer (RC, UC), and
// the responder's resources (RC).
func (qp *QP) ToRTR(a ConnectAttr) error {
	if qp.gone() {
		return wrapStep("RTR", opErr("modify_qp", qp.QPN(), ErrClosed))
	}
	qa := QPAttr{QPState: QPStateRTR}
	mask := uint32(mlx5.AttrState)
	if qp.typ != QPTypeUD {
		mtu := mlx5.MTUFromBytes(a.MTU)
		if mtu == 0 {
			return wrapStep("RTR", opErr("modify_qp", qp.QPN(), detail(ErrInvalidArg, "MTU %d is not 256, 512, 1024, 2048 or 4096", a.MTU)))
		}
		qa.PathMTU, qa.DestQPN, qa.RQPSN = mtu, a.Peer.QPN, a.Peer.PSN
		qa.AV = AV{DMAC: a.Peer.MAC, DGID: a.Peer.GID, SGIDIndex: a.SGIDIndex, HopLimit: a.HopLimit,
			TrafficClass: a.TrafficClass, FlowLabel: a.FlowLabel}
		mask |= mlx5.AttrAV | mlx5.AttrPathMTU | mlx5.AttrDestQPN | mlx5.AttrRQPSN
	}
	if qp.typ == QPTypeRC {
		qa.MaxDestRdAtomic, qa.MinRNRTimer = a.MaxDestRdAtomic, a.MinRNRTimer
		mask |= mlx5.AttrMaxDestRdAtomic | mlx5.AttrMinRNRTimer
	}
	return wrapStep("RTR", qp.Modify(&qa, mask))
}

// ToRTS moves the QP from RTR to RTS: its send PSN, and the requester's
// timers and READ depth (RC).
func (qp *QP) ToRTS(a ConnectAttr) error {
	if qp.gone() {
		return wrapStep("RTS", opErr("modify_qp", qp.QPN(), ErrClosed))
	}
	qa := QPAttr{QPState: QPStateRTS, SQPSN: a.PSN}
	mask := uint32(mlx5.AttrState | mlx5.AttrSQPSN)
	if qp.typ == QPTypeRC {
		qa.Timeout, qa.RetryCnt, qa.RNRRetry, qa.MaxRdAtomic = a.Timeout, a.RetryCnt, a.RNRRetry, a.MaxRdAtomic
		mask |= mlx5.AttrTimeout | mlx5.AttrRetryCnt | mlx5.AttrRNRRetry | mlx5.AttrMaxQPRdAtomic
	}
	return wrapStep("RTS", qp.Modify(&qa, mask))
}

// wrapStep says which transition failed, as ibv_rc_pingpong does ("failed
// to modify QP to RTR"); the error still matches the provider's sentinels.
func wrapStep(state string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("failed to modify QP to %s: %w", state, err)
}
