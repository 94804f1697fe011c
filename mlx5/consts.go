package mlx5

// Sizes of the basic units (mlx5.md §4.1).
const (
	WQEBBSize  = 64 // send WQE basic block
	WQEBBShift = 6
	DSSize     = 16 // ctrl-segment DS unit (octoword)
	MaxDS      = 63 // 6-bit DS field
	MaxWQEBBs  = 16 // kernel max WQE: 1024 B
	CQE64Size  = 64
	DBRecSize  = 8
	InvalidKey = 0x100 // MLX5_INVALID_LKEY: RQ scatter-list terminator
)

// UAR page layout (mlx5.md §2.2).
const (
	UARPageSize       = 4096
	UARCQArmOffset    = 0x20  // 64-bit CQ arm doorbell
	UAREQArmOffset    = 0x40  // EQ doorbell, update CI and arm
	UAREQUpdateOffset = 0x48  // EQ doorbell, update CI only
	UARBFRegOffset    = 0x800 // bfreg 0: send doorbell / BlueFlame
	DefaultBFRegSize  = 512   // two alternating 256-B BlueFlame buffers
	DefaultBFBufSize  = 256   // MLX5_DB_BLUEFLAME_BUFFER_SIZE
	BFRegsPerUAR      = 4
)

// Initialization segment offsets in BAR0 (mlx5.md §1.1).
const (
	InitSegFWRev        = 0x000
	InitSegCmdifRevFW   = 0x004
	InitSegCmdqAddrH    = 0x010
	InitSegCmdqAddrLSz  = 0x014
	InitSegCmdDbell     = 0x018
	InitSegInitializing = 0x1FC
	InitSegHealth       = 0x200
	InitSegHealthCount  = 0x1010
	InitSegTimerH       = 0x1000
	InitSegTimerL       = 0x1004
	CmdifRev            = 5          // drivers require command-interface revision 5
	InitializingBit     = 1 << 31    // FW still initializing
	InitSegSize         = 0x2010 + 4 // last register: clr_intx at 0x200C
)

// Opcode is a send-WQE opcode (ctrl segment bits [7:0], mlx5.md §4.4).
type Opcode uint8

// Send WQE opcodes.
const (
	OpNOP          Opcode = 0x00
	OpSendInval    Opcode = 0x01
	OpRDMAWrite    Opcode = 0x08
	OpRDMAWriteImm Opcode = 0x09
	OpSend         Opcode = 0x0a
	OpSendImm      Opcode = 0x0b
	OpTSO          Opcode = 0x0e
	OpRDMARead     Opcode = 0x10
	OpAtomicCS     Opcode = 0x11
	OpAtomicFA     Opcode = 0x12
	OpAtomicMCS    Opcode = 0x14
	OpAtomicMFA    Opcode = 0x15
	OpBindMW       Opcode = 0x18
	OpLocalInval   Opcode = 0x1b
	OpUMR          Opcode = 0x25
)

var opcodeNames = map[Opcode]string{
	OpNOP: "NOP", OpSendInval: "SEND_INVAL", OpRDMAWrite: "RDMA_WRITE", OpRDMAWriteImm: "RDMA_WRITE_IMM",
	OpSend: "SEND", OpSendImm: "SEND_IMM", OpTSO: "TSO", OpRDMARead: "RDMA_READ", OpAtomicCS: "ATOMIC_CS",
	OpAtomicFA: "ATOMIC_FA", OpAtomicMCS: "ATOMIC_MASKED_CS", OpAtomicMFA: "ATOMIC_MASKED_FA",
	OpBindMW: "BIND_MW", OpLocalInval: "LOCAL_INVAL", OpUMR: "UMR",
}

func (o Opcode) String() string {
	if s, ok := opcodeNames[o]; ok {
		return s
	}
	return "OPCODE_0x" + hex8(uint8(o))
}

// fm_ce_se bits (mlx5.md §4.3).
const (
	FenceNone        = 0x00
	FenceInitSmall   = 0x20
	FenceFence       = 0x40
	FenceStrongOrder = 0x60
	FenceSmallAndFen = 0x80
	CEOnErrorOnly    = 0x00
	CEFirstError     = 0x04
	CECQUpdate       = 0x08 // MLX5_WQE_CTRL_CQ_UPDATE: CQE always
	CECQAndEQ        = 0x0C
	CEMask           = 0x0C
	SolicitedEvent   = 0x02
)

// InlineFlag marks an inline data segment's byte count (MLX5_INLINE_SEG).
const InlineFlag = 0x80000000

// CQEOpcode is op_own[7:4] of a CQE (mlx5.md §6.3).
type CQEOpcode uint8

// CQE opcodes.
const (
	CQEReq         CQEOpcode = 0
	CQERespWrImm   CQEOpcode = 1
	CQERespSend    CQEOpcode = 2
	CQERespSendImm CQEOpcode = 3
	CQERespSendInv CQEOpcode = 4
	CQEResizeCQ    CQEOpcode = 5
	CQENoPacket    CQEOpcode = 6
	CQESigErr      CQEOpcode = 12
	CQEReqErr      CQEOpcode = 13
	CQERespErr     CQEOpcode = 14
	CQEInvalid     CQEOpcode = 15
)

var cqeOpNames = [16]string{"REQ", "RESP_WR_IMM", "RESP_SEND", "RESP_SEND_IMM", "RESP_SEND_INV",
	"RESIZE_CQ", "NO_PACKET", "CQE_7", "CQE_8", "CQE_9", "CQE_10", "CQE_11", "SIG_ERR", "REQ_ERR", "RESP_ERR", "INVALID"}

func (o CQEOpcode) String() string {
	if int(o) < len(cqeOpNames) {
		return cqeOpNames[o]
	}
	return "CQE_0x" + hex8(uint8(o))
}

// Syndrome is the error-CQE syndrome byte (mlx5.md §6.4).
type Syndrome uint8

// Error-CQE syndromes.
const (
	SyndLocalLength      Syndrome = 0x01
	SyndLocalQPOp        Syndrome = 0x02
	SyndLocalProt        Syndrome = 0x04
	SyndWRFlush          Syndrome = 0x05
	SyndMWBind           Syndrome = 0x06
	SyndBadResp          Syndrome = 0x10
	SyndLocalAccess      Syndrome = 0x11
	SyndRemoteInvalidReq Syndrome = 0x12
	SyndRemoteAccess     Syndrome = 0x13
	SyndRemoteOp         Syndrome = 0x14
	SyndTransportRetry   Syndrome = 0x15
	SyndRNRRetry         Syndrome = 0x16
	SyndRemoteAbort      Syndrome = 0x22
)

var syndNames = map[Syndrome]string{
	SyndLocalLength: "LOCAL_LENGTH", SyndLocalQPOp: "LOCAL_QP_OP", SyndLocalProt: "LOCAL_PROT",
	SyndWRFlush: "WR_FLUSH", SyndMWBind: "MW_BIND", SyndBadResp: "BAD_RESP", SyndLocalAccess: "LOCAL_ACCESS",
	SyndRemoteInvalidReq: "REMOTE_INVALID_REQ", SyndRemoteAccess: "REMOTE_ACCESS", SyndRemoteOp: "REMOTE_OP",
	SyndTransportRetry: "TRANSPORT_RETRY_EXCEEDED", SyndRNRRetry: "RNR_RETRY_EXCEEDED", SyndRemoteAbort: "REMOTE_ABORT",
}

func (s Syndrome) String() string {
	if n, ok := syndNames[s]; ok {
		return n
	}
	return "SYNDROME_0x" + hex8(uint8(s))
}

// QPState is a QP context state (mlx5.md §7.1).
type QPState uint8

// QP states.
const (
	QPStateRST   QPState = 0
	QPStateINIT  QPState = 1
	QPStateRTR   QPState = 2
	QPStateRTS   QPState = 3
	QPStateSQER  QPState = 4
	QPStateSQD   QPState = 5
	QPStateERR   QPState = 6
	QPStateDrain QPState = 7
)

var qpStateNames = [...]string{"RESET", "INIT", "RTR", "RTS", "SQE", "SQD", "ERR", "SQ_DRAINING"}

func (s QPState) String() string {
	if int(s) < len(qpStateNames) {
		return qpStateNames[s]
	}
	return "STATE_0x" + hex8(uint8(s))
}

// QPType is the QPC service type (st).
type QPType uint8

// QP service types.
const (
	QPTypeRC QPType = 0
	QPTypeUC QPType = 1
	QPTypeUD QPType = 2
)

var qpTypeNames = [...]string{"RC", "UC", "UD"}

func (t QPType) String() string {
	if int(t) < len(qpTypeNames) {
		return qpTypeNames[t]
	}
	return "TYPE_0x" + hex8(uint8(t))
}

// MTU is the IB path-MTU enum (1 = 256 .. 5 = 4096).
type MTU uint8

// Path MTU values.
const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// Bytes is the MTU in bytes, 0 for an invalid code.
func (m MTU) Bytes() int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 128 << m
}

// MTUFromBytes maps 256..4096 to the enum, 0 when n is not a valid MTU.
func MTUFromBytes(n int) MTU {
	for m := MTU256; m <= MTU4096; m++ {
		if m.Bytes() == n {
			return m
		}
	}
	return 0
}

// Access flags (ibv_access_flags values, used in the control ABI).
const (
	AccessLocalWrite   = 1 << 0
	AccessRemoteWrite  = 1 << 1
	AccessRemoteRead   = 1 << 2
	AccessRemoteAtomic = 1 << 3
)

const hexDigits = "0123456789abcdef"

func hex8(v uint8) string { return string([]byte{hexDigits[v>>4], hexDigits[v&0xf]}) }
