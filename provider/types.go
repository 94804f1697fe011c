package provider

import (
	"strconv"

	"github.com/softnic/softnic/mlx5"
)

// WROpcode is a send work-request opcode (enum ibv_wr_opcode values).
type WROpcode uint8

// Send opcodes: all on RC QPs; SEND, SEND_WITH_IMM, RDMA_WRITE and
// RDMA_WRITE_WITH_IMM on UC; SEND and SEND_WITH_IMM on UD. LOCAL_INV (7)
// and BIND_MW (8) are ibv opcodes this provider does not build (the model
// has no memory windows or fast-registration MRs).
const (
	WRRDMAWrite      WROpcode = 0
	WRRDMAWriteImm   WROpcode = 1
	WRSend           WROpcode = 2
	WRSendImm        WROpcode = 3
	WRRDMARead       WROpcode = 4
	WRAtomicCmpSwp   WROpcode = 5 // IBV_WR_ATOMIC_CMP_AND_SWP
	WRAtomicFetchAdd WROpcode = 6 // IBV_WR_ATOMIC_FETCH_AND_ADD
	// WRSendWithInv is IBV_WR_SEND_WITH_INV (RC only): a SEND whose last
	// packet asks the responder to invalidate SendWR.InvalidateRKey.
	WRSendWithInv WROpcode = 9
)

var wrOpcodeNames = [...]string{"RDMA_WRITE", "RDMA_WRITE_WITH_IMM", "SEND", "SEND_WITH_IMM", "RDMA_READ",
	"ATOMIC_CMP_AND_SWP", "ATOMIC_FETCH_AND_ADD", WRSendWithInv: "SEND_WITH_INV"}

// String is the opcode's ibv_wr_opcode name without IBV_WR_.
func (o WROpcode) String() string {
	if int(o) < len(wrOpcodeNames) && wrOpcodeNames[o] != "" {
		return wrOpcodeNames[o]
	}
	return "WR_OPCODE_" + strconv.Itoa(int(o))
}

// mlx5Opcode maps a WR opcode to the WQE ctrl opcode (libmlx5
// mlx5_ib_opcode[]); ok is false for opcodes not built here.
func (o WROpcode) mlx5Opcode() (op mlx5.Opcode, ok bool) {
	switch o {
	case WRRDMAWrite:
		return mlx5.OpRDMAWrite, true
	case WRRDMAWriteImm:
		return mlx5.OpRDMAWriteImm, true
	case WRSend:
		return mlx5.OpSend, true
	case WRSendImm:
		return mlx5.OpSendImm, true
	case WRRDMARead:
		return mlx5.OpRDMARead, true
	case WRAtomicCmpSwp:
		return mlx5.OpAtomicCS, true
	case WRAtomicFetchAdd:
		return mlx5.OpAtomicFA, true
	case WRSendWithInv:
		return mlx5.OpSendInval, true
	}
	return 0, false
}

// SendFlags are send work-request flags (enum ibv_send_flags values).
type SendFlags uint32

// Send flags.
const (
	SendFence     SendFlags = 1 << 0
	SendSignaled  SendFlags = 1 << 1
	SendSolicited SendFlags = 1 << 2
	SendInline    SendFlags = 1 << 3

	sendFlagsKnown = SendFence | SendSignaled | SendSolicited | SendInline
)

// SGE is one scatter/gather entry (struct ibv_sge).
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// SendWR is one send work request (struct ibv_send_wr; the list is a slice).
//
// For the atomics (WRAtomicCmpSwp, WRAtomicFetchAdd) RemoteAddr and RKey
// are ibv_send_wr.wr.atomic.remote_addr / rkey: the 8-byte remote word,
// which must be 8-byte aligned in an MR with remote atomic access. SGL is
// the local 8-byte buffer the original remote value is written to; as in
// libmlx5 every non-empty SGE becomes a data segment of byte_count 8
// whatever its Length says. The provider does not check the alignment,
// the access or that there is exactly one 8-byte result buffer: the
// device does, and answers with an error completion.
type SendWR struct {
	WRID   uint64
	Opcode WROpcode
	Flags  SendFlags
	SGL    []SGE
	Imm    uint32 // host order; written big-endian into the ctrl segment
	// InvalidateRKey is ibv_send_wr.invalidate_rkey: the R_Key a
	// SEND_WITH_INV asks the responder to invalidate (written, as libmlx5
	// writes it, big-endian into the ctrl segment's immediate).
	InvalidateRKey uint32
	RemoteAddr     uint64 // RDMA WRITE / READ, atomics
	RKey           uint32 // RDMA WRITE / READ, atomics
	// CompareAdd is wr.atomic.compare_add: the compare value of a
	// compare-and-swap, the value added by a fetch-and-add.
	CompareAdd uint64
	// Swap is wr.atomic.swap: the value a compare-and-swap stores when the
	// remote word equals CompareAdd (unused by fetch-and-add).
	Swap uint64

	// AH, RemoteQPN and RemoteQKey are ibv_send_wr.wr.ud (UD QPs only):
	// the address handle of the destination (an AH of the QP's PD), its
	// QPN (24 bits) and the Q_Key to send. A RemoteQKey with bit 31 set
	// (0x80000000, IB spec C10-15) means "the QP's own Q_Key" (the one
	// set by Modify with mlx5.AttrQKey); see QP.PostSend.
	AH         *AH
	RemoteQPN  uint32
	RemoteQKey uint32
}

// qkeyUseQP is the Q_Key bit that selects the QP's own Q_Key (IB spec
// C10-15; IB_QP_SET_QKEY in the kernel).
const qkeyUseQP = 0x80000000

// RecvWR is one receive work request (struct ibv_recv_wr).
type RecvWR struct {
	WRID uint64
	SGL  []SGE
}

// WCStatus is a work-completion status (enum ibv_wc_status values).
type WCStatus uint8

// Work-completion statuses.
const (
	WCSuccess          WCStatus = 0
	WCLocLenErr        WCStatus = 1
	WCLocQPOpErr       WCStatus = 2
	WCLocEECOpErr      WCStatus = 3
	WCLocProtErr       WCStatus = 4
	WCWRFlushErr       WCStatus = 5
	WCMWBindErr        WCStatus = 6
	WCBadRespErr       WCStatus = 7
	WCLocAccessErr     WCStatus = 8
	WCRemInvReqErr     WCStatus = 9
	WCRemAccessErr     WCStatus = 10
	WCRemOpErr         WCStatus = 11
	WCRetryExcErr      WCStatus = 12
	WCRNRRetryExcErr   WCStatus = 13
	WCLocRDDViolErr    WCStatus = 14
	WCRemInvRdReqErr   WCStatus = 15
	WCRemAbortErr      WCStatus = 16
	WCInvEECNErr       WCStatus = 17
	WCInvEECStateErr   WCStatus = 18
	WCFatalErr         WCStatus = 19
	WCRespTimeoutErr   WCStatus = 20
	WCGeneralErr       WCStatus = 21
	WCTMErr            WCStatus = 22
	WCTMRndvIncomplete WCStatus = 23
)

var wcStatusNames = [...]string{
	"SUCCESS", "LOC_LEN_ERR", "LOC_QP_OP_ERR", "LOC_EEC_OP_ERR", "LOC_PROT_ERR", "WR_FLUSH_ERR",
	"MW_BIND_ERR", "BAD_RESP_ERR", "LOC_ACCESS_ERR", "REM_INV_REQ_ERR", "REM_ACCESS_ERR", "REM_OP_ERR",
	"RETRY_EXC_ERR", "RNR_RETRY_EXC_ERR", "LOC_RDD_VIOL_ERR", "REM_INV_RD_REQ_ERR", "REM_ABORT_ERR",
	"INV_EECN_ERR", "INV_EEC_STATE_ERR", "FATAL_ERR", "RESP_TIMEOUT_ERR", "GENERAL_ERR", "TM_ERR",
	"TM_RNDV_INCOMPLETE",
}

// String is the status's ibv_wc_status name without IBV_WC_.
func (s WCStatus) String() string {
	if int(s) < len(wcStatusNames) {
		return wcStatusNames[s]
	}
	return "WC_STATUS_" + strconv.Itoa(int(s))
}

// wcStatusFromSyndrome maps an error-CQE syndrome to a status exactly as
// libmlx5's mlx5_handle_error_cqe does (mlx5.md §6.4): anything it does not
// list becomes GENERAL_ERR.
func wcStatusFromSyndrome(s mlx5.Syndrome) WCStatus {
	switch s {
	case mlx5.SyndLocalLength:
		return WCLocLenErr
	case mlx5.SyndLocalQPOp:
		return WCLocQPOpErr
	case mlx5.SyndLocalProt:
		return WCLocProtErr
	case mlx5.SyndWRFlush:
		return WCWRFlushErr
	case mlx5.SyndMWBind:
		return WCMWBindErr
	case mlx5.SyndBadResp:
		return WCBadRespErr
	case mlx5.SyndLocalAccess:
		return WCLocAccessErr
	case mlx5.SyndRemoteInvalidReq:
		return WCRemInvReqErr
	case mlx5.SyndRemoteAccess:
		return WCRemAccessErr
	case mlx5.SyndRemoteOp:
		return WCRemOpErr
	case mlx5.SyndTransportRetry:
		return WCRetryExcErr
	case mlx5.SyndRNRRetry:
		return WCRNRRetryExcErr
	case mlx5.SyndRemoteAbort:
		return WCRemAbortErr
	}
	return WCGeneralErr
}

// WCOpcode is a work-completion opcode (enum ibv_wc_opcode values).
type WCOpcode uint8

// Work-completion opcodes.
const (
	WCSend            WCOpcode = 0
	WCRDMAWrite       WCOpcode = 1
	WCRDMARead        WCOpcode = 2
	WCCompSwap        WCOpcode = 3
	WCFetchAdd        WCOpcode = 4
	WCBindMW          WCOpcode = 5
	WCLocalInv        WCOpcode = 6
	WCTSO             WCOpcode = 7
	WCRecv            WCOpcode = 128
	WCRecvRDMAWithImm WCOpcode = 129
)

// String is the opcode's ibv_wc_opcode name without IBV_WC_.
func (o WCOpcode) String() string {
	switch o {
	case WCSend:
		return "SEND"
	case WCRDMAWrite:
		return "RDMA_WRITE"
	case WCRDMARead:
		return "RDMA_READ"
	case WCCompSwap:
		return "COMP_SWAP"
	case WCFetchAdd:
		return "FETCH_ADD"
	case WCBindMW:
		return "BIND_MW"
	case WCLocalInv:
		return "LOCAL_INV"
	case WCTSO:
		return "TSO"
	case WCRecv:
		return "RECV"
	case WCRecvRDMAWithImm:
		return "RECV_RDMA_WITH_IMM"
	}
	return "WC_OPCODE_" + strconv.Itoa(int(o))
}

// WCFlags are work-completion flags (enum ibv_wc_flags values).
type WCFlags uint8

// Work-completion flags.
const (
	WCFlagGRH     WCFlags = 1 << 0
	WCFlagWithImm WCFlags = 1 << 1
	WCFlagWithInv WCFlags = 1 << 3
)

// String lists the set flags by their ibv_wc_flags names without
// IBV_WC_ ("GRH|WITH_IMM"), unknown bits in hex, "0" for none.
func (f WCFlags) String() string {
	if f == 0 {
		return "0"
	}
	s := ""
	add := func(bit WCFlags, name string) {
		if f&bit != 0 {
			if s != "" {
				s += "|"
			}
			s += name
			f &^= bit
		}
	}
	add(WCFlagGRH, "GRH")
	add(WCFlagWithImm, "WITH_IMM")
	add(WCFlagWithInv, "WITH_INV")
	if f != 0 {
		if s != "" {
			s += "|"
		}
		s += "0x" + strconv.FormatUint(uint64(f), 16)
	}
	return s
}

// WC is a work completion (struct ibv_wc, the fields this provider fills).
//
// For successful receives SrcQP, SL, the GRH flag and NetworkHdr come from
// the CQE's flags_rqpn as libmlx5 (and, for NetworkHdr, mlx5_ib) read them.
// A UD receive buffer starts with a 40-byte GRH area (for RoCEv2 over IPv4:
// 20 bytes of zeros, then the IPv4 header) and ByteLen counts it.
type WC struct {
	WRID      uint64
	Status    WCStatus
	Opcode    WCOpcode // for error completions: best effort (ibv leaves it undefined)
	VendorErr uint32
	ByteLen   uint32
	Imm       uint32 // host order (WITH_IMM); the invalidated rkey for WITH_INV
	QPNum     uint32
	SrcQP     uint32 // receives: flags_rqpn[23:0], the sender's QPN on UD
	Flags     WCFlags
	// SL is flags_rqpn[27:24], exactly as libmlx5 fills ibv_wc.sl. On
	// RoCE that nibble carries the L3 header type in its low two bits (so
	// an IPv4 receive reads SL 2); mlx5_ib reports the VLAN PCP instead.
	SL uint8
	// NetworkHdr is the network header a receive arrived with
	// (ib_wc.network_hdr_type as mlx5_ib sets it from flags_rqpn[25:24]);
	// NetHdrNone for send and error completions, and on a kernel rxe
	// device, whose completion (struct ib_uverbs_wc) does not carry it.
	NetworkHdr NetworkHdr
}

// NetworkHdr is the network header type of a received packet, with the
// values of the kernel's enum rdma_network_type.
type NetworkHdr uint8

// Network header types. RDMA_NETWORK_IB (0) is never reported on a RoCE
// port, so 0 stands for "not reported" here.
const (
	NetHdrNone   NetworkHdr = 0 // not a successful receive
	NetHdrRoCEv1 NetworkHdr = 1 // RDMA_NETWORK_ROCE_V1: a GRH (RoCEv1)
	NetHdrIPv4   NetworkHdr = 2 // RDMA_NETWORK_IPV4: RoCEv2 over IPv4
	NetHdrIPv6   NetworkHdr = 3 // RDMA_NETWORK_IPV6: RoCEv2 over IPv6
)

// String is the header type's name: NONE, ROCE_V1, IPV4 or IPV6.
func (h NetworkHdr) String() string {
	switch h {
	case NetHdrNone:
		return "NONE"
	case NetHdrRoCEv1:
		return "ROCE_V1"
	case NetHdrIPv4:
		return "IPV4"
	case NetHdrIPv6:
		return "IPV6"
	}
	return "NETWORK_HDR_" + strconv.Itoa(int(h))
}

// networkHdrFromCQE maps the CQE's RoCE L3 header type to NetworkHdr as
// mlx5_ib's handle_responder does (an unknown value is not reported).
func networkHdrFromCQE(l3 uint8) NetworkHdr {
	switch l3 {
	case mlx5.RoCEL3GRH:
		return NetHdrRoCEv1
	case mlx5.RoCEL3IPv6:
		return NetHdrIPv6
	case mlx5.RoCEL3IPv4:
		return NetHdrIPv4
	}
	return NetHdrNone
}

// Access are memory-region / QP access flags (enum ibv_access_flags values).
type Access uint32

// Access flags.
const (
	AccessLocalWrite   Access = mlx5.AccessLocalWrite
	AccessRemoteWrite  Access = mlx5.AccessRemoteWrite
	AccessRemoteRead   Access = mlx5.AccessRemoteRead
	AccessRemoteAtomic Access = mlx5.AccessRemoteAtomic

	accessKnown = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic
)

// QPType is a QP service type.
type QPType = mlx5.QPType

// QP types.
const (
	QPTypeRC = mlx5.QPTypeRC
	QPTypeUC = mlx5.QPTypeUC
	QPTypeUD = mlx5.QPTypeUD
)

// QPState is a QP state. The values are the mlx5 QPC ones of the control
// ABI (mlx5.md §7.1) — note SQER = 4 and SQD = 5, the reverse of
// enum ibv_qp_state — so always use the named constants.
type QPState = mlx5.QPState

// QP states.
const (
	QPStateReset = mlx5.QPStateRST
	QPStateInit  = mlx5.QPStateINIT
	QPStateRTR   = mlx5.QPStateRTR
	QPStateRTS   = mlx5.QPStateRTS
	QPStateSQE   = mlx5.QPStateSQER
	QPStateSQD   = mlx5.QPStateSQD
	QPStateErr   = mlx5.QPStateERR
)

// AV is a RoCEv2 address vector.
type AV = mlx5.AV

// QPCap are queue capacities (struct ibv_qp_cap).
type QPCap struct {
	MaxSendWR  int
	MaxRecvWR  int
	MaxSendSGE int
	MaxRecvSGE int
	MaxInline  int
}

// QPInitAttr describes a QP to create (struct ibv_qp_init_attr).
type QPInitAttr struct {
	Type   QPType
	SendCQ *CQ
	RecvCQ *CQ
	// SRQ, if set, is the shared receive queue the QP takes its receive
	// buffers from: the QP then has no receive queue of its own
	// (Cap.MaxRecvWR and MaxRecvSGE are ignored and reported as 0) and
	// PostRecv on it is refused.
	SRQ    *SRQ
	Cap    QPCap
	SigAll bool // every send WQE requests a CQE (sq_sig_all)
}

// QPAttr mirrors struct ibv_qp_attr; which fields matter is given by the
// mask (Attr* bits) passed to Modify.
type QPAttr struct {
	QPState         QPState
	CurQPState      QPState
	PathMTU         MTU // enum (MTU1024 ...); MTUFromBytes converts from bytes
	DestQPN         uint32
	RQPSN           uint32
	SQPSN           uint32
	AccessFlags     Access
	PKeyIndex       uint16
	Port            uint8
	QKey            uint32
	AV              AV
	MaxRdAtomic     uint8
	MaxDestRdAtomic uint8
	MinRNRTimer     uint8
	Timeout         uint8
	RetryCnt        uint8
	RNRRetry        uint8
}
