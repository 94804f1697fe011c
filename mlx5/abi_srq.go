package mlx5

import "math/bits"

// Shared receive queues (mlx5.md §5) and the async-event vocabulary the
// control plane speaks. An emulated device implements SRQControl and
// EventControl next to Control; a provider type-asserts for them, so a
// backend without them reports "not supported" instead of failing to build.

// SRQ WQE layout: a 16-byte "next" segment (next_wqe_index BE16 @2,
// signature @4), then data segments (mlx5.md §5).
const (
	SRQNextSegSize      = 16
	SRQOffNextWQEIndex  = 2
	SRQOffNextSignature = 4
)

// SRQStride is the WQE stride libmlx5 gives an SRQ of maxSGE scatter
// entries (mlx5_alloc_srq_buf): the next segment and maxSGE data
// segments, at least 32 bytes, rounded up to a power of two. Its WQEs
// then hold SRQStrideSGEs(stride) entries, which may be more than asked
// (31 for 30): libmlx5 asks CREATE_SRQ for that many.
func SRQStride(maxSGE int) int {
	n := max(32, SRQNextSegSize+DataSegSize*max(maxSGE, 0))
	return 1 << bits.Len(uint(n-1))
}

// SRQStrideSGEs is the scatter entries an SRQ WQE of stride bytes holds.
func SRQStrideSGEs(stride int) int { return (stride - SRQNextSegSize) / DataSegSize }

// CreateSRQCmd is CREATE_SRQ with struct mlx5_ib_create_srq's fields.
type CreateSRQCmd struct {
	PDN      uint32
	BufAddr  uint64 // WQECnt WQEs of 1<<WQEShift bytes, linked by next_wqe_index
	DBAddr   uint64 // 8-byte doorbell record: word 0 = BE32 WQE counter (posted)
	WQECnt   int    // power of two
	WQEShift int    // log2 of the stride: next segment + MaxSGE data segments
	Limit    uint32 // srq_limit (0: the limit event is not armed)
}

// CreateSRQResp answers CREATE_SRQ.
type CreateSRQResp struct{ SRQN uint32 }

// ModifySRQ attribute mask bits (enum ibv_srq_attr_mask).
const (
	SRQAttrMaxWR = 1 << 0
	SRQAttrLimit = 1 << 1
)

// ModifySRQCmd is MODIFY_SRQ. mlx5 cannot resize an SRQ: SRQAttrMaxWR is
// refused, as mlx5_ib_modify_srq refuses IB_SRQ_MAX_WR.
type ModifySRQCmd struct {
	SRQN  uint32
	Mask  uint32
	MaxWR int
	Limit uint32
}

// SRQAttr is what QUERY_SRQ returns.
type SRQAttr struct {
	MaxWR  int
	MaxSGE int
	Limit  uint32
}

// SRQControl is the SRQ part of the control plane.
type SRQControl interface {
	CreateSRQ(CreateSRQCmd) (CreateSRQResp, error)
	ModifySRQ(ModifySRQCmd) error
	QuerySRQ(srqn uint32) (SRQAttr, error)
	DestroySRQ(srqn uint32) error
}

// EventType is an asynchronous event, with enum ibv_event_type values.
type EventType uint8

// Asynchronous event types (ibv_event_type, faults.md).
const (
	EventCQErr            EventType = 0
	EventQPFatal          EventType = 1
	EventQPReqErr         EventType = 2
	EventQPAccessErr      EventType = 3
	EventCommEst          EventType = 4
	EventSQDrained        EventType = 5
	EventPathMig          EventType = 6
	EventPathMigErr       EventType = 7
	EventDeviceFatal      EventType = 8
	EventPortActive       EventType = 9
	EventPortErr          EventType = 10
	EventLIDChange        EventType = 11
	EventPKeyChange       EventType = 12
	EventSMChange         EventType = 13
	EventSRQErr           EventType = 14
	EventSRQLimitReached  EventType = 15
	EventQPLastWQEReached EventType = 16
)

// The newer ibv_event_type values (faults.md §1.3; rdma-core verbs.h).
const (
	EventClientReregister  EventType = 17
	EventGIDChange         EventType = 18
	EventWQFatal           EventType = 19
	EventDeviceSpeedChange EventType = 20
)

var eventNames = map[EventType]string{
	EventCQErr: "CQ_ERR", EventQPFatal: "QP_FATAL", EventQPReqErr: "QP_REQ_ERR", EventQPAccessErr: "QP_ACCESS_ERR",
	EventCommEst: "COMM_EST", EventSQDrained: "SQ_DRAINED", EventPathMig: "PATH_MIG", EventPathMigErr: "PATH_MIG_ERR",
	EventDeviceFatal: "DEVICE_FATAL", EventPortActive: "PORT_ACTIVE", EventPortErr: "PORT_ERR", EventLIDChange: "LID_CHANGE",
	EventPKeyChange: "PKEY_CHANGE", EventSMChange: "SM_CHANGE", EventSRQErr: "SRQ_ERR", EventSRQLimitReached: "SRQ_LIMIT_REACHED",
	EventQPLastWQEReached: "QP_LAST_WQE_REACHED",
	EventClientReregister: "CLIENT_REREGISTER", EventGIDChange: "GID_CHANGE", EventWQFatal: "WQ_FATAL", EventDeviceSpeedChange: "DEVICE_SPEED_CHANGE",
}

func (e EventType) String() string {
	if n, ok := eventNames[e]; ok {
		return n
	}
	return "EVENT_" + hex8(uint8(e))
}

// AsyncEvent is one asynchronous event: its type and the number of the
// object it concerns (CQN, QPN, SRQN or port number).
type AsyncEvent struct {
	Type EventType
	Num  uint32
}
