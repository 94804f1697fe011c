package mlx5

// The control interface between provider and device (DESIGN.md §1, §7): the
// commands rdma-core's libmlx5 issues through /dev/infiniband/uverbsN, with
// the mlx5 driver data folded in (buffer and doorbell-record addresses, UAR
// and bfreg indexes, queue sizes). An emulated device serves them in-process
// (or, later, over a socket); a real-hardware backend turns the same structs
// into ib_uverbs_cmd_hdr + core + mlx5 driver bytes.

// QP attribute mask bits (enum ibv_qp_attr_mask).
const (
	AttrState           = 1 << 0
	AttrCurState        = 1 << 1
	AttrAccessFlags     = 1 << 3
	AttrPKeyIndex       = 1 << 4
	AttrPort            = 1 << 5
	AttrQKey            = 1 << 6
	AttrAV              = 1 << 7
	AttrPathMTU         = 1 << 8
	AttrTimeout         = 1 << 9
	AttrRetryCnt        = 1 << 10
	AttrRNRRetry        = 1 << 11
	AttrRQPSN           = 1 << 12
	AttrMaxQPRdAtomic   = 1 << 13
	AttrAltPath         = 1 << 14
	AttrMinRNRTimer     = 1 << 15
	AttrSQPSN           = 1 << 16
	AttrMaxDestRdAtomic = 1 << 17
	AttrPathMigState    = 1 << 18
	AttrCap             = 1 << 19
	AttrDestQPN         = 1 << 20
)

// DeviceAttr is what QUERY_DEVICE / QUERY_PORT / GET_CONTEXT report.
type DeviceAttr struct {
	FWVersion    string
	VendorID     uint32
	VendorPartID uint32
	HWVer        uint32
	MaxCQ        int
	MaxQP        int
	MaxQPWR      int // max WQEs per queue
	MaxSGE       int
	// MaxSRQSGE is max_srq_sge: an SRQ's receive WQE has no send
	// segments, so it may hold more than MaxSGE (mlx5_ib: max_rq_sg - 1,
	// 31 on a ConnectX-5; rxe: 27). 0: not reported (taken as MaxSGE).
	MaxSRQSGE     int
	MaxCQE        int
	MaxMR         int
	MaxPD         int
	MaxMRSize     uint64
	MaxInline     int
	MaxSQDescSz   int // bytes of one send WQE (MaxWQEBBs*64)
	MaxQPRdAtomic int
	BFRegSize     int // bfreg size (two alternating BF buffers); 0 = no BlueFlame
	BFBufSize     int // one BlueFlame buffer (BFRegSize/2)
	NumUARs       int
	ActiveMTU     MTU
	MAC           [6]byte
	GID           [16]byte // RoCEv2 GID: ::ffff:a.b.c.d
	CQEVersion    int
}

// ContextResp answers GET_CONTEXT (alloc_ucontext): the UAR pages and
// bfregs this context may use.
type ContextResp struct {
	UARIndex   uint32 // first UAR page index (BAR0 + index*4 KiB)
	NumUARs    int
	TotBFRegs  int
	BFRegSize  int
	CQEVersion int
}

// PDResp answers ALLOC_PD.
type PDResp struct{ PDN uint32 }

// RegMRCmd is REG_MR: start/length in host (IO) virtual addresses, hca_va
// the address remote peers use, access flags (Access*).
type RegMRCmd struct {
	PDN    uint32
	Addr   uint64
	Length uint64
	HCAVA  uint64
	Access uint32
}

// RegMRResp answers REG_MR.
type RegMRResp struct {
	LKey, RKey uint32
}

// CreateCQCmd is CREATE_CQ with struct mlx5_ib_create_cq's fields.
type CreateCQCmd struct {
	Entries  int    // power of two
	CQESize  int    // 64 (128 not modelled)
	BufAddr  uint64 // entries*CQESize bytes, each op_own pre-set to 0xF0 by the provider
	DBAddr   uint64 // 8-byte CQ doorbell record
	UARIndex uint32 // UAR page for the arm doorbell
	// OverrunIgnore is cqc.oi: a full CQ is written over instead of going
	// to error (DPDK's clock-queue CQ, faults.md §2.6).
	OverrunIgnore bool
}

// CreateCQResp answers CREATE_CQ.
type CreateCQResp struct{ CQN uint32 }

// CreateQPCmd is CREATE_QP with struct mlx5_ib_create_qp's fields. The
// buffer holds the RQ at offset 0 and the SQ right after it.
type CreateQPCmd struct {
	Type       QPType
	PDN        uint32
	SendCQN    uint32
	RecvCQN    uint32
	BufAddr    uint64
	DBAddr     uint64 // 8-byte QP doorbell record
	SQWQECnt   int    // SQ size in WQEBBs (power of two)
	RQWQECnt   int    // RQ size in WQEs (power of two, may be 0)
	RQWQEShift int    // log2 of the RQ stride in bytes
	MaxInline  int
	SigAll     bool
	SRQN       uint32 // receives come from this SRQ (0: the QP's own RQ)
	// UIdx is the QP's user index (mlx5_ib_create_qp.uidx with CQE
	// version 1): every CQE of the QP carries it in srqn_uidx[23:0],
	// where libmlx5 looks its QP up (mlx5_find_uidx). 0 for a provider
	// that finds QPs by QPN.
	UIdx         uint32
	BFRegIndex   int // requested bfreg (-1: let the device choose)
	UARIndexHint uint32
}

// CreateQPResp answers CREATE_QP.
type CreateQPResp struct {
	QPN        uint32
	BFRegIndex int
	// BFRegOffset is the BAR0 offset of the QP's bfreg (UAR page base +
	// 0x800 + n*BFRegSize); doorbells and BlueFlame copies go there.
	BFRegOffset uint64
	// BFBufSize is the size of one BlueFlame buffer (0: doorbell only).
	BFBufSize int
	// MaxInline is the max_inline_data the device granted for the
	// CreateQPCmd.MaxInline asked (the kernel's create_qp answer), when
	// HasMaxInline: a control path that cannot report a device-wide
	// inline limit (uverbs) reports this one.
	MaxInline    int
	HasMaxInline bool
}

// AV is a RoCEv2 address vector.
type AV struct {
	DMAC         [6]byte
	DGID         [16]byte // ::ffff:a.b.c.d for IPv4
	SGIDIndex    uint8
	HopLimit     uint8
	TrafficClass uint8
	FlowLabel    uint32
	UDPSPort     uint16 // 0: derive from the QPNs as rxe does
}

// ModifyQPCmd is MODIFY_QP with an ibv_qp_attr_mask (Attr*).
type ModifyQPCmd struct {
	QPN             uint32
	Mask            uint32
	State           QPState
	CurState        QPState
	AccessFlags     uint32
	PKeyIndex       uint16
	Port            uint8
	QKey            uint32
	AV              AV
	PathMTU         MTU
	Timeout         uint8
	RetryCnt        uint8
	RNRRetry        uint8
	RQPSN           uint32
	SQPSN           uint32
	MaxQPRdAtomic   uint8
	MaxDestRdAtomic uint8
	MinRNRTimer     uint8
	DestQPN         uint32
}

// QPAttr is what QUERY_QP returns: the attributes a ConnectX's QUERY_QP
// gives back (its QP context) and mlx5_ib passes on in
// ib_uverbs_query_qp_resp. A field the QP was never given is zero.
type QPAttr struct {
	State   QPState
	PathMTU MTU
	DestQPN uint32
	SQPSN   uint32
	RQPSN   uint32

	// AccessFlags holds the remote access bits only (Access*): the QP
	// context keeps RRE, RWE and RAE, and mlx5_ib's
	// to_ib_qp_access_flags turns back only those three.
	AccessFlags     uint32
	QKey            uint32 // UD
	PKeyIndex       uint16
	Port            uint8
	AV              AV   // the primary path (RC and UC, once RTR gave it)
	HasAV           bool // AV was given: the path is global (a GRH), is_global
	MaxRdAtomic     uint8
	MaxDestRdAtomic uint8
	MinRNRTimer     uint8
	Timeout         uint8
	RetryCnt        uint8
	RNRRetry        uint8
	SigAll          bool // every send WR signalled (sq_sig_all)

	// The receive queue as the QP was created with it: its WQEs and the
	// data segments one WQE holds (stride / 16). Both are zero on an SRQ.
	// The send side is not here: mlx5_ib answers 0 for a user QP's
	// max_send_wr and max_send_sge (the provider owns those), and the
	// max_inline_data it gives is the provider's business too.
	MaxRecvWR  uint32
	MaxRecvSGE uint32
}

// Control is the device's control plane as the provider sees it.
type Control interface {
	QueryDevice() (DeviceAttr, error)
	GetContext() (ContextResp, error)
	AllocPD() (PDResp, error)
	DeallocPD(pdn uint32) error
	RegMR(RegMRCmd) (RegMRResp, error)
	DeregMR(lkey uint32) error
	CreateCQ(CreateCQCmd) (CreateCQResp, error)
	DestroyCQ(cqn uint32) error
	CreateQP(CreateQPCmd) (CreateQPResp, error)
	ModifyQP(ModifyQPCmd) error
	QueryQP(qpn uint32) (QPAttr, error)
	DestroyQP(qpn uint32) error
}

// Progressor is implemented by emulated devices: Progress runs the device
// until the next event that could change host-visible memory and reports
// false when nothing is scheduled (so a poll loop on an empty CQ would spin
// forever). Real hardware progresses by itself and does not implement it.
type Progressor interface {
	Progress() bool
}

// BlockingProgressor is implemented by emulated devices whose Progress
// may run nothing (false) while events are still scheduled, because
// another actor must act before them: a host of a co-simulated world
// (testbed's host clocks) whose clock is behind the next event.
// ProgressBlocked is Progress for a caller blocked in a wait (an event
// channel's GetCQEvent, GetAsyncEvent) rather than polling: the caller's
// program does nothing until the wait ends, so nothing it holds back can
// act before then, and ProgressBlocked runs the next event anyway. It
// reports false only when nothing is scheduled (the device is idle), as
// Progress does without co-simulation.
type BlockingProgressor interface {
	ProgressBlocked() bool
}

// CmdStatus is a command status (mlx5.md §1.3); it is an error so that
// control errors can be tested with errors.Is.
type CmdStatus uint8

// Command statuses.
const (
	StatusOK              CmdStatus = 0x00
	StatusInternalErr     CmdStatus = 0x01
	StatusBadOp           CmdStatus = 0x02
	StatusBadParam        CmdStatus = 0x03
	StatusBadSysState     CmdStatus = 0x04
	StatusBadResource     CmdStatus = 0x05
	StatusResourceBusy    CmdStatus = 0x06
	StatusExceedLim       CmdStatus = 0x08
	StatusBadResState     CmdStatus = 0x09
	StatusBadIndex        CmdStatus = 0x0a
	StatusNoResources     CmdStatus = 0x0f
	StatusBadQPState      CmdStatus = 0x10
	StatusBadPkt          CmdStatus = 0x30
	StatusBadSize         CmdStatus = 0x40
	StatusBadInputLength  CmdStatus = 0x50
	StatusBadOutputLength CmdStatus = 0x51
)

var statusNames = map[CmdStatus]string{
	StatusOK: "ok", StatusInternalErr: "internal error", StatusBadOp: "bad operation", StatusBadParam: "bad parameter",
	StatusBadSysState: "bad system state", StatusBadResource: "bad resource", StatusResourceBusy: "resource busy",
	StatusExceedLim: "exceeds limit", StatusBadResState: "bad resource state", StatusBadIndex: "bad index",
	StatusNoResources: "no resources", StatusBadQPState: "bad QP state", StatusBadPkt: "bad packet",
	StatusBadSize: "bad size", StatusBadInputLength: "bad input length", StatusBadOutputLength: "bad output length",
}

func (s CmdStatus) Error() string {
	if n, ok := statusNames[s]; ok {
		return "mlx5 command status: " + n
	}
	return "mlx5 command status 0x" + hex8(uint8(s))
}

// CmdError is a failed control command: the command, the status and a
// reason the device gives (what exactly was wrong).
type CmdError struct {
	Cmd    string
	Status CmdStatus
	Reason string
}

func (e *CmdError) Error() string { return e.Cmd + ": " + e.Status.Error() + ": " + e.Reason }

// Unwrap lets errors.Is(err, mlx5.StatusBadParam) work.
func (e *CmdError) Unwrap() error { return e.Status }
