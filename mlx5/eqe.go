package mlx5

import "encoding/binary"

// EQE is a 64-byte event queue entry (struct mlx5_eqe, mlx5.md §6.8):
//
//	0x01 type         0x03 sub_type       0x20 data[28]
//	0x3E signature    0x3F owner (bit 0)
//
// The 28 data bytes depend on the type:
//
//	completion (COMP):           cqn        @0x38 [23:0]   (data dword 6)
//	QP / SRQ events:             queue type @0x34, number @0x38 [23:0]
//	CQ error:                    cqn        @0x20 [23:0],  syndrome @0x2B
//	port change:                 port       @0x28 [7:4]
//
// The completion and QP/SRQ offsets are the ones mlx5.md §6.8 states; the
// CQ-error and port-change offsets are those of struct mlx5_eqe_cq_err and
// struct mlx5_eqe_port_state in the kernel's include/linux/mlx5/device.h
// (K-dev), which mlx5.md does not tabulate (assumed to be the same on
// every ConnectX generation).
type EQE []byte

// EQE geometry and offsets.
const (
	EQESize             = 64
	EQEOffType          = 0x01
	EQEOffSubType       = 0x03
	EQEOffData          = 0x20
	EQEOffCQErrCQN      = 0x20 // CQ error: cqn (BE32, [23:0])
	EQEOffCQErrSyndrome = 0x2B // CQ error: syndrome
	EQEOffPort          = 0x28 // port change: port number in [7:4]
	EQEOffQueueType     = 0x34 // QP/SRQ event: resource type (data + 0x14)
	EQEOffQPSRQNum      = 0x38 // QP/SRQ event: QPN or SRQN (data + 0x18, [23:0])
	EQEOffCompCQN       = 0x38 // completion: cqn (data dword 6, [23:0])
	EQEOffSignature     = 0x3E
	EQEOffOwner         = 0x3F

	// EQEOwnerInit is the owner value software writes into every EQE of a
	// new EQ (MLX5_EQE_OWNER_INIT_VAL): with the CQ rule of mlx5.md §6.6 an
	// entry belongs to software when its owner bit equals (ci / nent) & 1,
	// so initialised entries are hardware-owned on the first lap.
	EQEOwnerInit = 1
)

// EQEType is the EQE type byte (enum mlx5_event, mlx5.md §6.8).
type EQEType uint8

// EQE types.
const (
	EQEComp            EQEType = 0x00
	EQEPathMig         EQEType = 0x01
	EQECommEst         EQEType = 0x02
	EQESQDrained       EQEType = 0x03
	EQECQError         EQEType = 0x04
	EQEWQCatasError    EQEType = 0x05
	EQEPathMigFailed   EQEType = 0x07
	EQEInternalError   EQEType = 0x08
	EQEPortChange      EQEType = 0x09
	EQECmd             EQEType = 0x0a
	EQEPageRequest     EQEType = 0x0b
	EQEPageFault       EQEType = 0x0c
	EQEWQInvalReqError EQEType = 0x10
	EQEWQAccessError   EQEType = 0x11
	EQESRQCatasError   EQEType = 0x12
	EQESRQLastWQE      EQEType = 0x13
	EQESRQRQLimit      EQEType = 0x14
)

var eqeTypeNames = map[EQEType]string{
	EQEComp: "COMP", EQEPathMig: "PATH_MIG", EQECommEst: "COMM_EST", EQESQDrained: "SQ_DRAINED",
	EQECQError: "CQ_ERROR", EQEWQCatasError: "WQ_CATAS_ERROR", EQEPathMigFailed: "PATH_MIG_FAILED",
	EQEInternalError: "INTERNAL_ERROR", EQEPortChange: "PORT_CHANGE", EQECmd: "CMD", EQEPageRequest: "PAGE_REQUEST",
	EQEPageFault: "PAGE_FAULT", EQEWQInvalReqError: "WQ_INVAL_REQ_ERROR", EQEWQAccessError: "WQ_ACCESS_ERROR",
	EQESRQCatasError: "SRQ_CATAS_ERROR", EQESRQLastWQE: "SRQ_LAST_WQE", EQESRQRQLimit: "SRQ_RQ_LIMIT",
}

func (t EQEType) String() string {
	if n, ok := eqeTypeNames[t]; ok {
		return n
	}
	return "EQE_0x" + hex8(uint8(t))
}

// Port-change sub-types (enum mlx5_port_sub_type, faults.md §1.3).
const (
	PortChangeDown        = 1
	PortChangeActive      = 4
	PortChangeInitialized = 5
	PortChangeLID         = 6
	PortChangePKey        = 7
	PortChangeGUID        = 8
	PortChangeClientRereg = 9
)

// Resource types of a QP/SRQ event's queue-type byte
// (MLX5_EVENT_QUEUE_TYPE_*). SRQ events carry the SRQN with type 0: the
// kernel's SRQ handler reads only the number (unconfirmed what firmware
// puts there).
const (
	EventQueueQP  = 0
	EventQueueRQ  = 1
	EventQueueSQ  = 2
	EventQueueDCT = 6
)

// CQ error syndromes (the CQ-error EQE's syndrome byte). Assumed values:
// the PRM body is not among the sources (faults.md §5 item 2); 0x01 is
// taken as "CQ overrun", 0x02 as "CQ access violation".
const (
	CQErrOverrun         = 0x01
	CQErrAccessViolation = 0x02
)

// EQ / CQ notification states in the EQC and CQC (mlx5.md §6.7).
const (
	EQStateArmed       = 0x9
	EQStateFired       = 0xA
	EQStateAlwaysArmed = 0xB
)

// EQEFields are the fields softnic writes and the event dispatcher reads.
// Only the fields the type carries are encoded (CQN for COMP and
// CQ_ERROR, Syndrome for CQ_ERROR, QueueType/Num for QP and SRQ events,
// Port for PORT_CHANGE); the rest of the data bytes are zero.
type EQEFields struct {
	Type      EQEType
	SubType   uint8
	Owner     bool
	Signature uint8
	CQN       uint32 // COMP, CQ_ERROR
	Syndrome  uint8  // CQ_ERROR
	QueueType uint8  // QP / SRQ events
	Num       uint32 // QP / SRQ events: QPN or SRQN
	Port      uint8  // PORT_CHANGE (1..15)
}

// EQEKind is how the data bytes of an EQE type are laid out.
type EQEKind uint8

// EQE data layouts.
const (
	EQEKindNone  EQEKind = iota // nothing decoded
	EQEKindComp                 // cqn @0x38
	EQEKindQPSRQ                // queue type @0x34, number @0x38
	EQEKindCQErr                // cqn @0x20, syndrome @0x2B
	EQEKindPort                 // port @0x28 [7:4]
)

// Kind is the data layout of EQE type t.
func (t EQEType) Kind() EQEKind {
	switch t {
	case EQEComp:
		return EQEKindComp
	case EQEPathMig, EQECommEst, EQESQDrained, EQEWQCatasError, EQEPathMigFailed, EQEWQInvalReqError,
		EQEWQAccessError, EQESRQCatasError, EQESRQLastWQE, EQESRQRQLimit:
		return EQEKindQPSRQ
	case EQECQError:
		return EQEKindCQErr
	case EQEPortChange:
		return EQEKindPort
	}
	return EQEKindNone
}

// Type is the event type.
func (e EQE) Type() EQEType { return EQEType(e[EQEOffType]) }

// SubType is the sub-type (port change: PortChange*).
func (e EQE) SubType() uint8 { return e[EQEOffSubType] }

// Owner is owner bit 0.
func (e EQE) Owner() bool { return e[EQEOffOwner]&1 != 0 }

// CompCQN is the CQ number of a completion EQE.
func (e EQE) CompCQN() uint32 { return binary.BigEndian.Uint32(e[EQEOffCompCQN:]) & 0xffffff }

// QPSRQNum is the QPN or SRQN of a QP/SRQ event.
func (e EQE) QPSRQNum() uint32 { return binary.BigEndian.Uint32(e[EQEOffQPSRQNum:]) & 0xffffff }

// Fields decodes the EQE by its type's layout.
func (e EQE) Fields() EQEFields {
	_ = e[EQESize-1]
	f := EQEFields{Type: e.Type(), SubType: e.SubType(), Owner: e.Owner(), Signature: e[EQEOffSignature]}
	switch f.Type.Kind() {
	case EQEKindComp:
		f.CQN = e.CompCQN()
	case EQEKindQPSRQ:
		f.QueueType, f.Num = e[EQEOffQueueType], e.QPSRQNum()
	case EQEKindCQErr:
		f.CQN = binary.BigEndian.Uint32(e[EQEOffCQErrCQN:]) & 0xffffff
		f.Syndrome = e[EQEOffCQErrSyndrome]
	case EQEKindPort:
		f.Port = e[EQEOffPort] >> 4
	}
	return f
}

// Encode writes a whole EQE: every byte of e[:64] is written, the owner
// byte last, so that a reader that checks ownership first never sees a
// half-written entry.
func (e EQE) Encode(f *EQEFields) {
	_ = e[EQESize-1]
	clear(e[:EQEOffOwner])
	e[EQEOffType] = uint8(f.Type)
	e[EQEOffSubType] = f.SubType
	e[EQEOffSignature] = f.Signature
	switch f.Type.Kind() {
	case EQEKindComp:
		binary.BigEndian.PutUint32(e[EQEOffCompCQN:], f.CQN&0xffffff)
	case EQEKindQPSRQ:
		e[EQEOffQueueType] = f.QueueType
		binary.BigEndian.PutUint32(e[EQEOffQPSRQNum:], f.Num&0xffffff)
	case EQEKindCQErr:
		binary.BigEndian.PutUint32(e[EQEOffCQErrCQN:], f.CQN&0xffffff)
		e[EQEOffCQErrSyndrome] = f.Syndrome
	case EQEKindPort:
		e[EQEOffPort] = f.Port << 4
	}
	var own uint8
	if f.Owner {
		own = 1
	}
	e[EQEOffOwner] = own
}

// EQEOwnedBySW reports whether the EQE at consumer index ci of an EQ with
// nent entries (a power of two) belongs to software: the CQ rule without
// the opcode check (mlx5.md §6.6, kernel next_eqe_sw).
func EQEOwnedBySW(e EQE, ci, nent uint32) bool { return e.Owner() == (ci&nent != 0) }

// EQEOwnerBit is the owner value the device writes for producer index pi.
func EQEOwnerBit(pi, nent uint32) bool { return pi&nent != 0 }

// EQDoorbell is the 32-bit value written to UAR+0x40 (update CI and arm)
// or UAR+0x48 (update CI only): eqn<<24 | ci[23:0] (mlx5.md §2.2).
func EQDoorbell(eqn uint8, ci uint32) uint32 { return uint32(eqn)<<24 | ci&0xffffff }

// ParseEQDoorbell decodes an EQ doorbell's 4 big-endian bytes.
func ParseEQDoorbell(b []byte) (eqn uint8, ci uint32) {
	w := binary.BigEndian.Uint32(b)
	return uint8(w >> 24), w & 0xffffff
}

// The mapping between verbs asynchronous events and EQEs (faults.md §1.3:
// mlx5_ib_handle_qp_event, mlx5_ib_cq_event, mlx5_ib_srq_event,
// handle_port_change). DEVICE_FATAL has no EQE in mlx5 (it is found by
// health polling); softnic raises it as INTERNAL_ERROR.
var eventEQE = map[EventType]eqeKey{
	EventCQErr:            {EQECQError, 0},
	EventQPFatal:          {EQEWQCatasError, 0},
	EventQPReqErr:         {EQEWQInvalReqError, 0},
	EventQPAccessErr:      {EQEWQAccessError, 0},
	EventCommEst:          {EQECommEst, 0},
	EventSQDrained:        {EQESQDrained, 0},
	EventPathMig:          {EQEPathMig, 0},
	EventPathMigErr:       {EQEPathMigFailed, 0},
	EventDeviceFatal:      {EQEInternalError, 0},
	EventPortActive:       {EQEPortChange, PortChangeActive},
	EventPortErr:          {EQEPortChange, PortChangeDown},
	EventLIDChange:        {EQEPortChange, PortChangeLID},
	EventPKeyChange:       {EQEPortChange, PortChangePKey},
	EventGIDChange:        {EQEPortChange, PortChangeGUID},
	EventClientReregister: {EQEPortChange, PortChangeClientRereg},
	EventSRQErr:           {EQESRQCatasError, 0},
	EventSRQLimitReached:  {EQESRQRQLimit, 0},
	EventQPLastWQEReached: {EQESRQLastWQE, 0},
}

// EQEForEvent is the EQE type and sub-type that carries verbs event ev.
func EQEForEvent(ev EventType) (t EQEType, sub uint8, ok bool) {
	m, ok := eventEQE[ev]
	return m.t, m.sub, ok
}

// EventForEQE is the verbs event an EQE of type t and sub-type sub is
// delivered as; ok is false for EQEs that are not verbs events
// (completions, commands, page requests, unknown types and sub-types).
// It is eventEQE read backwards: the sub-type matters only for port
// changes, and port change INITIALIZED is reported as PORT_ERR, as
// mlx5_ib does.
func EventForEQE(t EQEType, sub uint8) (EventType, bool) {
	switch {
	case t != EQEPortChange:
		sub = 0
	case sub == PortChangeInitialized:
		return EventPortErr, true
	}
	ev, ok := eqeEvent[eqeKey{t, sub}]
	return ev, ok
}

// eqeKey is an EQE type and sub-type.
type eqeKey struct {
	t   EQEType
	sub uint8
}

// eqeEvent is eventEQE inverted (each EQE type and sub-type carries one
// event).
var eqeEvent = func() map[eqeKey]EventType {
	m := make(map[eqeKey]EventType, len(eventEQE))
	for ev, e := range eventEQE {
		m[e] = ev
	}
	return m
}()
