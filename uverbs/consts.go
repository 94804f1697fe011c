package uverbs

import (
	"strconv"

	"github.com/softnic/softnic/mlx5"
)

// Command is an ib_uverbs write command number (enum ib_uverbs_write_cmds,
// uverbs.md §3.2). Extended commands use the same numbers with
// CmdFlagExtended set in the header.
type Command uint32

// Write commands.
const (
	CmdGetContext        Command = 0
	CmdQueryDevice       Command = 1
	CmdQueryPort         Command = 2
	CmdAllocPD           Command = 3
	CmdDeallocPD         Command = 4
	CmdCreateAH          Command = 5
	CmdDestroyAH         Command = 8
	CmdRegMR             Command = 9
	CmdDeregMR           Command = 13
	CmdCreateCompChannel Command = 17
	CmdCreateCQ          Command = 18
	CmdResizeCQ          Command = 19
	CmdDestroyCQ         Command = 20
	CmdPollCQ            Command = 21
	CmdReqNotifyCQ       Command = 23
	CmdCreateQP          Command = 24
	CmdQueryQP           Command = 25
	CmdModifyQP          Command = 26
	CmdDestroyQP         Command = 27
	CmdPostSend          Command = 28
	CmdPostRecv          Command = 29
	CmdCreateSRQ         Command = 32
	CmdModifySRQ         Command = 33
	CmdQuerySRQ          Command = 34
	CmdDestroySRQ        Command = 35
	CmdPostSRQRecv       Command = 36
)

// Extended command numbers (enum ib_uverbs_ex_write_cmds); they travel with
// CmdFlagExtended and an ib_uverbs_ex_cmd_hdr.
const (
	ExCmdQueryDevice Command = 1
	ExCmdCreateCQ    Command = 18
	ExCmdCreateQP    Command = 24
	ExCmdModifyQP    Command = 26
)

// ExCreateQPMaskIndTable is IB_UVERBS_CREATE_QP_MASK_IND_TABLE, the one
// ib_uverbs_ex_create_qp comp_mask bit (IB_UVERBS_CREATE_QP_SUP_COMP_MASK).
const ExCreateQPMaskIndTable = 1 << 0

// Header bits of ib_uverbs_cmd_hdr.command.
const (
	CmdFlagExtended = 0x80000000 // IB_USER_VERBS_CMD_FLAG_EXTENDED
	CmdCommandMask  = 0xff       // IB_USER_VERBS_CMD_COMMAND_MASK
)

var cmdNames = map[Command]string{
	CmdGetContext: "GET_CONTEXT", CmdQueryDevice: "QUERY_DEVICE", CmdQueryPort: "QUERY_PORT",
	CmdAllocPD: "ALLOC_PD", CmdDeallocPD: "DEALLOC_PD", CmdCreateAH: "CREATE_AH", CmdDestroyAH: "DESTROY_AH",
	CmdRegMR: "REG_MR", CmdDeregMR: "DEREG_MR", CmdCreateCompChannel: "CREATE_COMP_CHANNEL",
	CmdCreateCQ: "CREATE_CQ", CmdResizeCQ: "RESIZE_CQ", CmdDestroyCQ: "DESTROY_CQ", CmdPollCQ: "POLL_CQ",
	CmdReqNotifyCQ: "REQ_NOTIFY_CQ", CmdCreateQP: "CREATE_QP", CmdQueryQP: "QUERY_QP", CmdModifyQP: "MODIFY_QP",
	CmdDestroyQP: "DESTROY_QP", CmdPostSend: "POST_SEND", CmdPostRecv: "POST_RECV", CmdCreateSRQ: "CREATE_SRQ",
	CmdModifySRQ: "MODIFY_SRQ", CmdQuerySRQ: "QUERY_SRQ", CmdDestroySRQ: "DESTROY_SRQ", CmdPostSRQRecv: "POST_SRQ_RECV",
}

func (c Command) String() string {
	if n, ok := cmdNames[c]; ok {
		return n
	}
	return "CMD_" + strconv.Itoa(int(c))
}

// DriverID is enum rdma_driver_id: the value every ioctl header carries.
type DriverID uint32

// Driver IDs (uverbs.md §1.2).
const (
	DriverUnknown DriverID = 0
	DriverMLX5    DriverID = 1
	DriverRXE     DriverID = 14
)

// ABI versions the kernel reports in sysfs (uverbs.md §1.3).
const (
	CoreABIVersion = 6
	MLX5ABIVersion = 1 // MLX5_IB_UVERBS_ABI_VERSION
	RXEABIVersion  = 2 // RXE_UVERBS_ABI_VERSION
)

// Handle is a uverbs object handle: what the kernel returns for a PD, CQ,
// QP, SRQ, MR or AH and what later commands name it by. It is per context,
// not a hardware number (a PD handle is not a PDN, a QP handle not a QPN).
type Handle = uint32

// NoCompChannel is CREATE_CQ's comp_channel for "no completion channel".
const NoCompChannel int32 = -1

// ---------------------------------------------------------------- ioctl ids

// RDMAVerbsIoctl is the ioctl request number, _IOWR(0x1b, 1, struct
// ib_uverbs_ioctl_hdr): direction read|write (3) in bits 30-31, the
// 24-byte header size in bits 16-29, type 0x1b in bits 8-15, nr 1.
const RDMAVerbsIoctl = iocRead | iocWrite<<iocDirShift | IoctlHdrSize<<iocSizeShift | RDMAIoctlMagic<<iocTypeShift | 1<<iocNRShift

// RDMAIoctlMagic is RDMA_IOCTL_MAGIC.
const RDMAIoctlMagic = 0x1b

// The asm-generic _IOC encoding (x86, arm64, riscv).
const (
	iocNRShift   = 0
	iocTypeShift = 8
	iocSizeShift = 16
	iocDirShift  = 30
	iocWrite     = 1
	iocRead      = 2 << iocDirShift
)

// IOWR computes _IOWR(typ, nr, size) as asm-generic/ioctl.h does.
func IOWR(typ, nr, size uint32) uint32 {
	return (iocRead | iocWrite<<iocDirShift) | size<<iocSizeShift | typ<<iocTypeShift | nr<<iocNRShift
}

// Attribute flags (UVERBS_ATTR_F_*).
const (
	AttrFMandatory   = 1 << 0
	AttrFValidOutput = 1 << 1 // set by the kernel in the caller's attribute
)

// ObjectID is enum uverbs_default_objects, or a driver object (>= 1<<12).
type ObjectID uint16

// MethodID is a method of an object.
type MethodID uint16

// AttrID is an attribute of a method.
type AttrID uint16

// IDNSShift is UVERBS_ID_NS_SHIFT: driver-namespace ids start at 1<<12.
const IDNSShift = 12

// Core objects.
const (
	ObjectDevice      ObjectID = 0
	ObjectPD          ObjectID = 1
	ObjectCompChannel ObjectID = 2
	ObjectCQ          ObjectID = 3
	ObjectQP          ObjectID = 4
	ObjectSRQ         ObjectID = 5
	ObjectAH          ObjectID = 6
	ObjectMR          ObjectID = 7
	ObjectAsyncEvent  ObjectID = 16
)

// Methods of ObjectDevice and their attributes.
const (
	MethodInvokeWrite   MethodID = 0
	MethodInfoHandles   MethodID = 1
	MethodQueryPort     MethodID = 2
	MethodGetContext    MethodID = 3
	MethodQueryContext  MethodID = 4
	MethodQueryGIDTable MethodID = 5
	MethodQueryGIDEntry MethodID = 6

	// INVOKE_WRITE carries a write command: its core struct (without the
	// 8-byte header) in CORE_IN, its response buffer in CORE_OUT, and the
	// driver data in UHW_IN/UHW_OUT.
	AttrCoreIn   AttrID = 0
	AttrCoreOut  AttrID = 1
	AttrWriteCmd AttrID = 2
	AttrUHWIn    AttrID = 1 << IDNSShift // UVERBS_ATTR_UHW_IN
	AttrUHWOut   AttrID = AttrUHWIn + 1

	AttrGetContextNumCompVectors AttrID = 0
	AttrGetContextCoreSupport    AttrID = 1
	AttrQueryPortPortNum         AttrID = 0
	AttrQueryPortResp            AttrID = 1
	AttrQueryGIDEntryPort        AttrID = 0
	AttrQueryGIDEntryGIDIndex    AttrID = 1
	AttrQueryGIDEntryFlags       AttrID = 2
	AttrQueryGIDEntryRespEntry   AttrID = 3
)

// GIDTypeRoCEv2 is IB_UVERBS_GID_TYPE_ROCE_V2, GIDEntry.GIDType of a RoCE
// v2 GID.
const GIDTypeRoCEv2 = 2

// Methods of the CQ, QP and SRQ objects and their attributes.
const (
	MethodCQCreate  MethodID = 0
	MethodCQDestroy MethodID = 1

	AttrCreateCQHandle      AttrID = 0
	AttrCreateCQCQE         AttrID = 1
	AttrCreateCQUserHandle  AttrID = 2
	AttrCreateCQCompChannel AttrID = 3
	AttrCreateCQCompVector  AttrID = 4
	AttrCreateCQFlags       AttrID = 5
	AttrCreateCQRespCQE     AttrID = 6
	AttrCreateCQEventFD     AttrID = 7
	AttrDestroyCQHandle     AttrID = 0
	AttrDestroyCQResp       AttrID = 1

	MethodQPCreate  MethodID = 0
	MethodQPDestroy MethodID = 1

	AttrCreateQPHandle         AttrID = 0
	AttrCreateQPXRCDHandle     AttrID = 1
	AttrCreateQPPDHandle       AttrID = 2
	AttrCreateQPSRQHandle      AttrID = 3
	AttrCreateQPSendCQHandle   AttrID = 4
	AttrCreateQPRecvCQHandle   AttrID = 5
	AttrCreateQPIndTableHandle AttrID = 6
	AttrCreateQPUserHandle     AttrID = 7
	AttrCreateQPCap            AttrID = 8
	AttrCreateQPType           AttrID = 9
	AttrCreateQPFlags          AttrID = 10
	AttrCreateQPSourceQPN      AttrID = 11
	AttrCreateQPEventFD        AttrID = 12
	AttrCreateQPRespCap        AttrID = 13
	AttrCreateQPRespQPNum      AttrID = 14
	AttrDestroyQPHandle        AttrID = 0
	AttrDestroyQPResp          AttrID = 1

	MethodSRQCreate      MethodID = 0
	MethodSRQDestroy     MethodID = 1
	AttrDestroySRQHandle AttrID   = 0
	AttrDestroySRQResp   AttrID   = 1
)

// Destroy methods of PD, AH and MR, and the async-event fd.
const (
	MethodPDDestroy     MethodID = 0
	AttrDestroyPDHandle AttrID   = 0
	MethodAHDestroy     MethodID = 0
	AttrDestroyAHHandle AttrID   = 0
	MethodMRDestroy     MethodID = 1
	AttrDestroyMRHandle AttrID   = 0

	MethodAsyncEventAlloc       MethodID = 0
	AttrAsyncEventAllocFDHandle AttrID   = 0
)

// mlx5 driver objects (mlx5_user_ioctl_cmds.h): the dynamic UAR, allocated
// by ioctl when GET_CONTEXT asked for MLX5LibCapDynUAR (uverbs.md §4.4).
const (
	MLX5ObjectUAR ObjectID = 1<<IDNSShift + 8 // MLX5_IB_OBJECT_UAR

	MLX5MethodUARObjAlloc   MethodID = 1 << IDNSShift // MLX5_IB_METHOD_UAR_OBJ_ALLOC
	MLX5MethodUARObjDestroy MethodID = 1<<IDNSShift + 1

	MLX5AttrUARObjAllocHandle     AttrID = 1 << IDNSShift // IDR new
	MLX5AttrUARObjAllocType       AttrID = 1<<IDNSShift + 1
	MLX5AttrUARObjAllocMmapOffset AttrID = 1<<IDNSShift + 2 // u64 out
	MLX5AttrUARObjAllocMmapLength AttrID = 1<<IDNSShift + 3 // u32 out
	MLX5AttrUARObjAllocPageID     AttrID = 1<<IDNSShift + 4 // u32 out
	MLX5AttrUARObjDestroyHandle   AttrID = 1 << IDNSShift
)

// MLX5UARType is enum mlx5_ib_uapi_uar_alloc_type.
type MLX5UARType uint8

// UAR types: BlueFlame (mapped write-combining) or non-cached.
const (
	MLX5UARTypeBF MLX5UARType = 0
	MLX5UARTypeNC MLX5UARType = 1
)

// mlx5 driver-data flags (mlx5-abi.h).
const (
	MLX5LibCap4KUAR   = 1 << 0 // mlx5_lib_caps
	MLX5LibCapDynUAR  = 1 << 1
	MLX5AllocUctxDevX = 1 << 0 // mlx5_ib_alloc_uctx_v2_flags

	MLX5CreateCQFlagCQE128BPad   = 1 << 0
	MLX5CreateCQFlagUARPageIndex = 1 << 1
	MLX5CreateCQFlagRealTimeTS   = 1 << 2

	MLX5QPFlagSignature    = 1 << 0
	MLX5QPFlagScatterCQE   = 1 << 1
	MLX5QPFlagBFRegIndex   = 1 << 3
	MLX5QPFlagUARPageIndex = 1 << 10

	MLX5SRQFlagSignature = 1 << 0
)

// ---------------------------------------------------------------- IB enums

// QPType is enum ib_qp_type / ibv_qp_type (not the mlx5 QPC "st").
type QPType uint8

// QP types.
const (
	QPTypeRC        QPType = 2
	QPTypeUC        QPType = 3
	QPTypeUD        QPType = 4
	QPTypeRawPacket QPType = 8
	QPTypeXRCIni    QPType = 9
	QPTypeXRCTgt    QPType = 10
	QPTypeDriver    QPType = 0xff
)

func (t QPType) String() string {
	switch t {
	case QPTypeRC:
		return "RC"
	case QPTypeUC:
		return "UC"
	case QPTypeUD:
		return "UD"
	case QPTypeRawPacket:
		return "RAW_PACKET"
	case QPTypeXRCIni:
		return "XRC_INI"
	case QPTypeXRCTgt:
		return "XRC_TGT"
	case QPTypeDriver:
		return "DRIVER"
	}
	return "QPT_" + strconv.Itoa(int(t))
}

// QPState is enum ib_qp_state / ibv_qp_state (SQD 4 and SQE 5, the other
// way round from the mlx5 QPC).
type QPState uint8

// QP states.
const (
	QPStateReset QPState = 0
	QPStateInit  QPState = 1
	QPStateRTR   QPState = 2
	QPStateRTS   QPState = 3
	QPStateSQD   QPState = 4
	QPStateSQE   QPState = 5
	QPStateErr   QPState = 6
)

var stateNames = [...]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}

func (s QPState) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "QPS_" + strconv.Itoa(int(s))
}

// MTU is enum ib_mtu / ibv_mtu: the same IB path-MTU code the mlx5 QPC
// carries, so one type (and one Bytes).
type MTU = mlx5.MTU

// Path MTUs.
const (
	MTU256  = mlx5.MTU256
	MTU512  = mlx5.MTU512
	MTU1024 = mlx5.MTU1024
	MTU2048 = mlx5.MTU2048
	MTU4096 = mlx5.MTU4096
)

// PortState is enum ib_port_state / ibv_port_state.
type PortState uint8

// Port states.
const (
	PortNop         PortState = 0
	PortDown        PortState = 1
	PortInit        PortState = 2
	PortArmed       PortState = 3
	PortActive      PortState = 4
	PortActiveDefer PortState = 5
)

// Access is enum ib_uverbs_access_flags: MR and QP access rights.
type Access uint32

// Access flags.
const (
	AccessLocalWrite      Access = 1 << 0
	AccessRemoteWrite     Access = 1 << 1
	AccessRemoteRead      Access = 1 << 2
	AccessRemoteAtomic    Access = 1 << 3
	AccessMWBind          Access = 1 << 4
	AccessZeroBased       Access = 1 << 5
	AccessOnDemand        Access = 1 << 6
	AccessHugeTLB         Access = 1 << 7
	AccessRelaxedOrdering Access = 1 << 20 // the first optional flag
)

// QPAttrMask is enum ib_qp_attr_mask / ibv_qp_attr_mask: which attributes
// a MODIFY_QP or QUERY_QP names.
type QPAttrMask uint32

// QP attribute mask bits.
const (
	QPAttrState            QPAttrMask = 1 << 0
	QPAttrCurState         QPAttrMask = 1 << 1
	QPAttrEnSQDAsyncNotify QPAttrMask = 1 << 2
	QPAttrAccessFlags      QPAttrMask = 1 << 3
	QPAttrPKeyIndex        QPAttrMask = 1 << 4
	QPAttrPort             QPAttrMask = 1 << 5
	QPAttrQKey             QPAttrMask = 1 << 6
	QPAttrAV               QPAttrMask = 1 << 7
	QPAttrPathMTU          QPAttrMask = 1 << 8
	QPAttrTimeout          QPAttrMask = 1 << 9
	QPAttrRetryCnt         QPAttrMask = 1 << 10
	QPAttrRNRRetry         QPAttrMask = 1 << 11
	QPAttrRQPSN            QPAttrMask = 1 << 12
	QPAttrMaxQPRdAtomic    QPAttrMask = 1 << 13
	QPAttrAltPath          QPAttrMask = 1 << 14
	QPAttrMinRNRTimer      QPAttrMask = 1 << 15
	QPAttrSQPSN            QPAttrMask = 1 << 16
	QPAttrMaxDestRdAtomic  QPAttrMask = 1 << 17
	QPAttrPathMigState     QPAttrMask = 1 << 18
	QPAttrCap              QPAttrMask = 1 << 19
	QPAttrDestQPN          QPAttrMask = 1 << 20
	QPAttrRateLimit        QPAttrMask = 1 << 25
)

var attrMaskNames = [...]string{
	0: "STATE", 1: "CUR_STATE", 2: "EN_SQD_ASYNC_NOTIFY", 3: "ACCESS_FLAGS", 4: "PKEY_INDEX", 5: "PORT",
	6: "QKEY", 7: "AV", 8: "PATH_MTU", 9: "TIMEOUT", 10: "RETRY_CNT", 11: "RNR_RETRY", 12: "RQ_PSN",
	13: "MAX_QP_RD_ATOMIC", 14: "ALT_PATH", 15: "MIN_RNR_TIMER", 16: "SQ_PSN", 17: "MAX_DEST_RD_ATOMIC",
	18: "PATH_MIG_STATE", 19: "CAP", 20: "DEST_QPN", 25: "RATE_LIMIT",
}

// String names the bits, "STATE|PKEY_INDEX|..." ("0" for none).
func (m QPAttrMask) String() string {
	if m == 0 {
		return "0"
	}
	s := ""
	for b := 0; b < 32; b++ {
		if m&(1<<b) == 0 {
			continue
		}
		if s != "" {
			s += "|"
		}
		if b < len(attrMaskNames) && attrMaskNames[b] != "" {
			s += attrMaskNames[b]
		} else {
			s += "BIT" + strconv.Itoa(b)
		}
	}
	return s
}

// SRQAttrMask is enum ib_srq_attr_mask (MODIFY_SRQ).
type SRQAttrMask uint32

// SRQ attribute mask bits.
const (
	SRQAttrMaxWR SRQAttrMask = 1 << 0
	SRQAttrLimit SRQAttrMask = 1 << 1
)

// WROpcode is enum ib_uverbs_wr_opcode: ib_uverbs_send_wr.opcode, and what
// an rxe send WQE carries.
type WROpcode uint32

// Work-request opcodes.
const (
	WRRDMAWrite         WROpcode = 0
	WRRDMAWriteWithImm  WROpcode = 1
	WRSend              WROpcode = 2
	WRSendWithImm       WROpcode = 3
	WRRDMARead          WROpcode = 4
	WRAtomicCmpAndSwp   WROpcode = 5
	WRAtomicFetchAndAdd WROpcode = 6
	WRLocalInv          WROpcode = 7
	WRBindMW            WROpcode = 8
	WRSendWithInv       WROpcode = 9
)

// WCOpcode is ib_uverbs_wc.opcode: enum ib_uverbs_wc_opcode for sends and
// ibv_wc_opcode's receive values (bit 7 set).
type WCOpcode uint32

// Completion opcodes.
const (
	WCSend            WCOpcode = 0
	WCRDMAWrite       WCOpcode = 1
	WCRDMARead        WCOpcode = 2
	WCCompSwap        WCOpcode = 3
	WCFetchAdd        WCOpcode = 4
	WCBindMW          WCOpcode = 5
	WCLocalInv        WCOpcode = 6
	WCTSO             WCOpcode = 7
	WCRecv            WCOpcode = 1 << 7
	WCRecvRDMAWithImm WCOpcode = WCRecv + 1
)

// Send flags (ibv_send_flags) and completion flags (ibv_wc_flags).
const (
	SendFence     = 1 << 0
	SendSignaled  = 1 << 1
	SendSolicited = 1 << 2
	SendInline    = 1 << 3

	WCFlagGRH     = 1 << 0
	WCFlagWithImm = 1 << 1
)
