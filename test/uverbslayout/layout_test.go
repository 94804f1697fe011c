package uverbslayout

import (
	"fmt"
	"strings"
	"testing"

	"github.com/softnic/softnic/uverbs"
)

// TestLayouts compares every struct of uverbs/layouts.txt with the uapi
// headers: sizeof each struct, offsetof and sizeof each member. It logs the
// whole table (struct, size, member offsets Go vs C) for the record.
func TestLayouts(t *testing.T) {
	cs := CLayouts()
	if cs == nil {
		why, _ := Missing()
		t.Skip("no C layouts: " + why)
	}
	type key struct{ s, m string }
	c := map[key]Member{}
	for _, r := range cs {
		c[key{r.Struct, r.Member}] = r
	}
	var tab strings.Builder
	fmt.Fprintf(&tab, "%-32s %9s  %s\n", "struct", "size Go/C", "members: offset Go/C (a mismatch is marked !)")
	for _, l := range uverbs.Layouts() {
		t.Run(l.C, func(t *testing.T) {
			z, ok := c[key{l.C, ""}]
			if !ok {
				t.Fatalf("%s missing from the C table (regenerate: go generate ./uverbs)", l.C)
			}
			if z.Width != l.Size {
				t.Errorf("sizeof(struct %s) = %d in C, %d in Go", l.C, z.Width, l.Size)
			}
			var row []string
			for _, m := range l.Members {
				cm, ok := c[key{l.C, m.C}]
				if !ok {
					t.Errorf("%s.%s missing from the C table", l.C, m.C)
					continue
				}
				mark := ""
				if cm.Offset != m.Offset || cm.Width != m.Width {
					mark = "!"
					t.Errorf("%s.%s: C offset %d width %d, Go offset %d width %d", l.C, m.C, cm.Offset, cm.Width, m.Offset, m.Width)
				}
				if cm.Offset == m.Offset {
					row = append(row, fmt.Sprintf("%s %d%s", m.C, m.Offset, mark))
				} else {
					row = append(row, fmt.Sprintf("%s %d/%d%s", m.C, m.Offset, cm.Offset, mark))
				}
			}
			fmt.Fprintf(&tab, "%-32s %4d/%-4d  %s\n", l.C, l.Size, z.Width, strings.Join(row, ", "))
		})
	}
	t.Logf("layout table (offsets written once when Go and C agree):\n%s", tab.String())
}

// TestConstants compares the command numbers, ioctl ids, flags and IB enum
// values of package uverbs with the C headers (uapi, plus libibverbs'
// verbs.h for the enums the kernel keeps out of uapi).
func TestConstants(t *testing.T) {
	cv := CValues()
	if cv == nil {
		_, why := Missing()
		t.Skip("no C values: " + why)
	}
	cases := []struct {
		name string
		go_  uint64
	}{
		{"RDMA_VERBS_IOCTL", uverbs.RDMAVerbsIoctl},
		{"IB_USER_VERBS_CMD_GET_CONTEXT", uint64(uverbs.CmdGetContext)},
		{"IB_USER_VERBS_CMD_QUERY_DEVICE", uint64(uverbs.CmdQueryDevice)},
		{"IB_USER_VERBS_CMD_QUERY_PORT", uint64(uverbs.CmdQueryPort)},
		{"IB_USER_VERBS_CMD_ALLOC_PD", uint64(uverbs.CmdAllocPD)},
		{"IB_USER_VERBS_CMD_DEALLOC_PD", uint64(uverbs.CmdDeallocPD)},
		{"IB_USER_VERBS_CMD_CREATE_AH", uint64(uverbs.CmdCreateAH)},
		{"IB_USER_VERBS_CMD_DESTROY_AH", uint64(uverbs.CmdDestroyAH)},
		{"IB_USER_VERBS_CMD_REG_MR", uint64(uverbs.CmdRegMR)},
		{"IB_USER_VERBS_CMD_DEREG_MR", uint64(uverbs.CmdDeregMR)},
		{"IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL", uint64(uverbs.CmdCreateCompChannel)},
		{"IB_USER_VERBS_CMD_CREATE_CQ", uint64(uverbs.CmdCreateCQ)},
		{"IB_USER_VERBS_CMD_RESIZE_CQ", uint64(uverbs.CmdResizeCQ)},
		{"IB_USER_VERBS_CMD_DESTROY_CQ", uint64(uverbs.CmdDestroyCQ)},
		{"IB_USER_VERBS_CMD_POLL_CQ", uint64(uverbs.CmdPollCQ)},
		{"IB_USER_VERBS_CMD_REQ_NOTIFY_CQ", uint64(uverbs.CmdReqNotifyCQ)},
		{"IB_USER_VERBS_CMD_CREATE_QP", uint64(uverbs.CmdCreateQP)},
		{"IB_USER_VERBS_CMD_QUERY_QP", uint64(uverbs.CmdQueryQP)},
		{"IB_USER_VERBS_CMD_MODIFY_QP", uint64(uverbs.CmdModifyQP)},
		{"IB_USER_VERBS_CMD_DESTROY_QP", uint64(uverbs.CmdDestroyQP)},
		{"IB_USER_VERBS_CMD_POST_SEND", uint64(uverbs.CmdPostSend)},
		{"IB_USER_VERBS_CMD_POST_RECV", uint64(uverbs.CmdPostRecv)},
		{"IB_USER_VERBS_CMD_CREATE_SRQ", uint64(uverbs.CmdCreateSRQ)},
		{"IB_USER_VERBS_CMD_MODIFY_SRQ", uint64(uverbs.CmdModifySRQ)},
		{"IB_USER_VERBS_CMD_QUERY_SRQ", uint64(uverbs.CmdQuerySRQ)},
		{"IB_USER_VERBS_CMD_DESTROY_SRQ", uint64(uverbs.CmdDestroySRQ)},
		{"IB_USER_VERBS_CMD_POST_SRQ_RECV", uint64(uverbs.CmdPostSRQRecv)},
		{"IB_USER_VERBS_EX_CMD_QUERY_DEVICE", uint64(uverbs.ExCmdQueryDevice)},
		{"IB_USER_VERBS_EX_CMD_CREATE_CQ", uint64(uverbs.ExCmdCreateCQ)},
		{"IB_USER_VERBS_EX_CMD_CREATE_QP", uint64(uverbs.ExCmdCreateQP)},
		{"IB_USER_VERBS_EX_CMD_MODIFY_QP", uint64(uverbs.ExCmdModifyQP)},
		{"IB_USER_VERBS_CMD_FLAG_EXTENDED", uverbs.CmdFlagExtended},
		{"IB_USER_VERBS_CMD_COMMAND_MASK", uverbs.CmdCommandMask},
		{"UVERBS_ATTR_F_MANDATORY", uverbs.AttrFMandatory},
		{"UVERBS_ATTR_F_VALID_OUTPUT", uverbs.AttrFValidOutput},
		{"UVERBS_ID_NS_SHIFT", uverbs.IDNSShift},
		{"UVERBS_OBJECT_DEVICE", uint64(uverbs.ObjectDevice)},
		{"UVERBS_OBJECT_PD", uint64(uverbs.ObjectPD)},
		{"UVERBS_OBJECT_COMP_CHANNEL", uint64(uverbs.ObjectCompChannel)},
		{"UVERBS_OBJECT_CQ", uint64(uverbs.ObjectCQ)},
		{"UVERBS_OBJECT_QP", uint64(uverbs.ObjectQP)},
		{"UVERBS_OBJECT_SRQ", uint64(uverbs.ObjectSRQ)},
		{"UVERBS_OBJECT_AH", uint64(uverbs.ObjectAH)},
		{"UVERBS_OBJECT_MR", uint64(uverbs.ObjectMR)},
		{"UVERBS_OBJECT_ASYNC_EVENT", uint64(uverbs.ObjectAsyncEvent)},
		{"UVERBS_METHOD_INVOKE_WRITE", uint64(uverbs.MethodInvokeWrite)},
		{"UVERBS_METHOD_INFO_HANDLES", uint64(uverbs.MethodInfoHandles)},
		{"UVERBS_METHOD_QUERY_PORT", uint64(uverbs.MethodQueryPort)},
		{"UVERBS_METHOD_GET_CONTEXT", uint64(uverbs.MethodGetContext)},
		{"UVERBS_METHOD_QUERY_CONTEXT", uint64(uverbs.MethodQueryContext)},
		{"UVERBS_METHOD_QUERY_GID_TABLE", uint64(uverbs.MethodQueryGIDTable)},
		{"UVERBS_METHOD_QUERY_GID_ENTRY", uint64(uverbs.MethodQueryGIDEntry)},
		{"UVERBS_ATTR_CORE_IN", uint64(uverbs.AttrCoreIn)},
		{"UVERBS_ATTR_CORE_OUT", uint64(uverbs.AttrCoreOut)},
		{"UVERBS_ATTR_WRITE_CMD", uint64(uverbs.AttrWriteCmd)},
		{"UVERBS_ATTR_UHW_IN", uint64(uverbs.AttrUHWIn)},
		{"UVERBS_ATTR_UHW_OUT", uint64(uverbs.AttrUHWOut)},
		{"UVERBS_ATTR_GET_CONTEXT_NUM_COMP_VECTORS", uint64(uverbs.AttrGetContextNumCompVectors)},
		{"UVERBS_ATTR_GET_CONTEXT_CORE_SUPPORT", uint64(uverbs.AttrGetContextCoreSupport)},
		{"UVERBS_ATTR_QUERY_PORT_PORT_NUM", uint64(uverbs.AttrQueryPortPortNum)},
		{"UVERBS_ATTR_QUERY_PORT_RESP", uint64(uverbs.AttrQueryPortResp)},
		{"UVERBS_ATTR_QUERY_GID_ENTRY_PORT", uint64(uverbs.AttrQueryGIDEntryPort)},
		{"UVERBS_ATTR_QUERY_GID_ENTRY_GID_INDEX", uint64(uverbs.AttrQueryGIDEntryGIDIndex)},
		{"UVERBS_ATTR_QUERY_GID_ENTRY_FLAGS", uint64(uverbs.AttrQueryGIDEntryFlags)},
		{"UVERBS_ATTR_QUERY_GID_ENTRY_RESP_ENTRY", uint64(uverbs.AttrQueryGIDEntryRespEntry)},
		{"IB_UVERBS_GID_TYPE_ROCE_V2", uint64(uverbs.GIDTypeRoCEv2)},
		{"UVERBS_METHOD_CQ_CREATE", uint64(uverbs.MethodCQCreate)},
		{"UVERBS_METHOD_CQ_DESTROY", uint64(uverbs.MethodCQDestroy)},
		{"UVERBS_ATTR_CREATE_CQ_HANDLE", uint64(uverbs.AttrCreateCQHandle)},
		{"UVERBS_ATTR_CREATE_CQ_CQE", uint64(uverbs.AttrCreateCQCQE)},
		{"UVERBS_ATTR_CREATE_CQ_USER_HANDLE", uint64(uverbs.AttrCreateCQUserHandle)},
		{"UVERBS_ATTR_CREATE_CQ_COMP_CHANNEL", uint64(uverbs.AttrCreateCQCompChannel)},
		{"UVERBS_ATTR_CREATE_CQ_COMP_VECTOR", uint64(uverbs.AttrCreateCQCompVector)},
		{"UVERBS_ATTR_CREATE_CQ_FLAGS", uint64(uverbs.AttrCreateCQFlags)},
		{"UVERBS_ATTR_CREATE_CQ_RESP_CQE", uint64(uverbs.AttrCreateCQRespCQE)},
		{"UVERBS_ATTR_CREATE_CQ_EVENT_FD", uint64(uverbs.AttrCreateCQEventFD)},
		{"UVERBS_ATTR_DESTROY_CQ_HANDLE", uint64(uverbs.AttrDestroyCQHandle)},
		{"UVERBS_ATTR_DESTROY_CQ_RESP", uint64(uverbs.AttrDestroyCQResp)},
		{"UVERBS_METHOD_QP_CREATE", uint64(uverbs.MethodQPCreate)},
		{"UVERBS_METHOD_QP_DESTROY", uint64(uverbs.MethodQPDestroy)},
		{"UVERBS_ATTR_CREATE_QP_HANDLE", uint64(uverbs.AttrCreateQPHandle)},
		{"UVERBS_ATTR_CREATE_QP_XRCD_HANDLE", uint64(uverbs.AttrCreateQPXRCDHandle)},
		{"UVERBS_ATTR_CREATE_QP_PD_HANDLE", uint64(uverbs.AttrCreateQPPDHandle)},
		{"UVERBS_ATTR_CREATE_QP_SRQ_HANDLE", uint64(uverbs.AttrCreateQPSRQHandle)},
		{"UVERBS_ATTR_CREATE_QP_SEND_CQ_HANDLE", uint64(uverbs.AttrCreateQPSendCQHandle)},
		{"UVERBS_ATTR_CREATE_QP_RECV_CQ_HANDLE", uint64(uverbs.AttrCreateQPRecvCQHandle)},
		{"UVERBS_ATTR_CREATE_QP_IND_TABLE_HANDLE", uint64(uverbs.AttrCreateQPIndTableHandle)},
		{"UVERBS_ATTR_CREATE_QP_USER_HANDLE", uint64(uverbs.AttrCreateQPUserHandle)},
		{"UVERBS_ATTR_CREATE_QP_CAP", uint64(uverbs.AttrCreateQPCap)},
		{"UVERBS_ATTR_CREATE_QP_TYPE", uint64(uverbs.AttrCreateQPType)},
		{"UVERBS_ATTR_CREATE_QP_FLAGS", uint64(uverbs.AttrCreateQPFlags)},
		{"UVERBS_ATTR_CREATE_QP_SOURCE_QPN", uint64(uverbs.AttrCreateQPSourceQPN)},
		{"UVERBS_ATTR_CREATE_QP_EVENT_FD", uint64(uverbs.AttrCreateQPEventFD)},
		{"UVERBS_ATTR_CREATE_QP_RESP_CAP", uint64(uverbs.AttrCreateQPRespCap)},
		{"UVERBS_ATTR_CREATE_QP_RESP_QP_NUM", uint64(uverbs.AttrCreateQPRespQPNum)},
		{"UVERBS_ATTR_DESTROY_QP_HANDLE", uint64(uverbs.AttrDestroyQPHandle)},
		{"UVERBS_ATTR_DESTROY_QP_RESP", uint64(uverbs.AttrDestroyQPResp)},
		{"UVERBS_METHOD_SRQ_CREATE", uint64(uverbs.MethodSRQCreate)},
		{"UVERBS_METHOD_SRQ_DESTROY", uint64(uverbs.MethodSRQDestroy)},
		{"UVERBS_ATTR_DESTROY_SRQ_HANDLE", uint64(uverbs.AttrDestroySRQHandle)},
		{"UVERBS_ATTR_DESTROY_SRQ_RESP", uint64(uverbs.AttrDestroySRQResp)},
		{"UVERBS_METHOD_PD_DESTROY", uint64(uverbs.MethodPDDestroy)},
		{"UVERBS_ATTR_DESTROY_PD_HANDLE", uint64(uverbs.AttrDestroyPDHandle)},
		{"UVERBS_METHOD_AH_DESTROY", uint64(uverbs.MethodAHDestroy)},
		{"UVERBS_ATTR_DESTROY_AH_HANDLE", uint64(uverbs.AttrDestroyAHHandle)},
		{"UVERBS_METHOD_MR_DESTROY", uint64(uverbs.MethodMRDestroy)},
		{"UVERBS_ATTR_DESTROY_MR_HANDLE", uint64(uverbs.AttrDestroyMRHandle)},
		{"UVERBS_METHOD_ASYNC_EVENT_ALLOC", uint64(uverbs.MethodAsyncEventAlloc)},
		{"UVERBS_ATTR_ASYNC_EVENT_ALLOC_FD_HANDLE", uint64(uverbs.AttrAsyncEventAllocFDHandle)},
		{"MLX5_IB_OBJECT_UAR", uint64(uverbs.MLX5ObjectUAR)},
		{"MLX5_IB_METHOD_UAR_OBJ_ALLOC", uint64(uverbs.MLX5MethodUARObjAlloc)},
		{"MLX5_IB_METHOD_UAR_OBJ_DESTROY", uint64(uverbs.MLX5MethodUARObjDestroy)},
		{"MLX5_IB_ATTR_UAR_OBJ_ALLOC_HANDLE", uint64(uverbs.MLX5AttrUARObjAllocHandle)},
		{"MLX5_IB_ATTR_UAR_OBJ_ALLOC_TYPE", uint64(uverbs.MLX5AttrUARObjAllocType)},
		{"MLX5_IB_ATTR_UAR_OBJ_ALLOC_MMAP_OFFSET", uint64(uverbs.MLX5AttrUARObjAllocMmapOffset)},
		{"MLX5_IB_ATTR_UAR_OBJ_ALLOC_MMAP_LENGTH", uint64(uverbs.MLX5AttrUARObjAllocMmapLength)},
		{"MLX5_IB_ATTR_UAR_OBJ_ALLOC_PAGE_ID", uint64(uverbs.MLX5AttrUARObjAllocPageID)},
		{"MLX5_IB_ATTR_UAR_OBJ_DESTROY_HANDLE", uint64(uverbs.MLX5AttrUARObjDestroyHandle)},
		{"MLX5_IB_UAPI_UAR_ALLOC_TYPE_BF", uint64(uverbs.MLX5UARTypeBF)},
		{"MLX5_IB_UAPI_UAR_ALLOC_TYPE_NC", uint64(uverbs.MLX5UARTypeNC)},
		{"MLX5_IB_UVERBS_ABI_VERSION", uverbs.MLX5ABIVersion},
		{"MLX5_LIB_CAP_4K_UAR", uverbs.MLX5LibCap4KUAR},
		{"MLX5_LIB_CAP_DYN_UAR", uverbs.MLX5LibCapDynUAR},
		{"MLX5_IB_ALLOC_UCTX_DEVX", uverbs.MLX5AllocUctxDevX},
		{"MLX5_IB_CREATE_CQ_FLAGS_CQE_128B_PAD", uverbs.MLX5CreateCQFlagCQE128BPad},
		{"MLX5_IB_CREATE_CQ_FLAGS_UAR_PAGE_INDEX", uverbs.MLX5CreateCQFlagUARPageIndex},
		{"MLX5_IB_CREATE_CQ_FLAGS_REAL_TIME_TS", uverbs.MLX5CreateCQFlagRealTimeTS},
		{"MLX5_QP_FLAG_SIGNATURE", uverbs.MLX5QPFlagSignature},
		{"MLX5_QP_FLAG_SCATTER_CQE", uverbs.MLX5QPFlagScatterCQE},
		{"MLX5_QP_FLAG_BFREG_INDEX", uverbs.MLX5QPFlagBFRegIndex},
		{"MLX5_QP_FLAG_UAR_PAGE_INDEX", uverbs.MLX5QPFlagUARPageIndex},
		{"MLX5_SRQ_FLAG_SIGNATURE", uverbs.MLX5SRQFlagSignature},
		{"RDMA_DRIVER_MLX5", uint64(uverbs.DriverMLX5)},
		{"RDMA_DRIVER_RXE", uint64(uverbs.DriverRXE)},
		{"IB_UVERBS_ACCESS_LOCAL_WRITE", uint64(uverbs.AccessLocalWrite)},
		{"IB_UVERBS_ACCESS_REMOTE_WRITE", uint64(uverbs.AccessRemoteWrite)},
		{"IB_UVERBS_ACCESS_REMOTE_READ", uint64(uverbs.AccessRemoteRead)},
		{"IB_UVERBS_ACCESS_REMOTE_ATOMIC", uint64(uverbs.AccessRemoteAtomic)},
		{"IB_UVERBS_ACCESS_MW_BIND", uint64(uverbs.AccessMWBind)},
		{"IB_UVERBS_ACCESS_ZERO_BASED", uint64(uverbs.AccessZeroBased)},
		{"IB_UVERBS_ACCESS_ON_DEMAND", uint64(uverbs.AccessOnDemand)},
		{"IB_UVERBS_ACCESS_HUGETLB", uint64(uverbs.AccessHugeTLB)},
		{"IB_UVERBS_ACCESS_RELAXED_ORDERING", uint64(uverbs.AccessRelaxedOrdering)},
		{"IBV_QPT_RC", uint64(uverbs.QPTypeRC)},
		{"IBV_QPT_UC", uint64(uverbs.QPTypeUC)},
		{"IBV_QPT_UD", uint64(uverbs.QPTypeUD)},
		{"IBV_QPT_RAW_PACKET", uint64(uverbs.QPTypeRawPacket)},
		{"IBV_QPT_XRC_SEND", uint64(uverbs.QPTypeXRCIni)},
		{"IBV_QPT_XRC_RECV", uint64(uverbs.QPTypeXRCTgt)},
		{"IBV_QPT_DRIVER", uint64(uverbs.QPTypeDriver)},
		{"IBV_QPS_RESET", uint64(uverbs.QPStateReset)},
		{"IBV_QPS_INIT", uint64(uverbs.QPStateInit)},
		{"IBV_QPS_RTR", uint64(uverbs.QPStateRTR)},
		{"IBV_QPS_RTS", uint64(uverbs.QPStateRTS)},
		{"IBV_QPS_SQD", uint64(uverbs.QPStateSQD)},
		{"IBV_QPS_SQE", uint64(uverbs.QPStateSQE)},
		{"IBV_QPS_ERR", uint64(uverbs.QPStateErr)},
		{"IBV_MTU_256", uint64(uverbs.MTU256)},
		{"IBV_MTU_512", uint64(uverbs.MTU512)},
		{"IBV_MTU_1024", uint64(uverbs.MTU1024)},
		{"IBV_MTU_2048", uint64(uverbs.MTU2048)},
		{"IBV_MTU_4096", uint64(uverbs.MTU4096)},
		{"IBV_QP_STATE", uint64(uverbs.QPAttrState)},
		{"IBV_QP_CUR_STATE", uint64(uverbs.QPAttrCurState)},
		{"IBV_QP_EN_SQD_ASYNC_NOTIFY", uint64(uverbs.QPAttrEnSQDAsyncNotify)},
		{"IBV_QP_ACCESS_FLAGS", uint64(uverbs.QPAttrAccessFlags)},
		{"IBV_QP_PKEY_INDEX", uint64(uverbs.QPAttrPKeyIndex)},
		{"IBV_QP_PORT", uint64(uverbs.QPAttrPort)},
		{"IBV_QP_QKEY", uint64(uverbs.QPAttrQKey)},
		{"IBV_QP_AV", uint64(uverbs.QPAttrAV)},
		{"IBV_QP_PATH_MTU", uint64(uverbs.QPAttrPathMTU)},
		{"IBV_QP_TIMEOUT", uint64(uverbs.QPAttrTimeout)},
		{"IBV_QP_RETRY_CNT", uint64(uverbs.QPAttrRetryCnt)},
		{"IBV_QP_RNR_RETRY", uint64(uverbs.QPAttrRNRRetry)},
		{"IBV_QP_RQ_PSN", uint64(uverbs.QPAttrRQPSN)},
		{"IBV_QP_MAX_QP_RD_ATOMIC", uint64(uverbs.QPAttrMaxQPRdAtomic)},
		{"IBV_QP_ALT_PATH", uint64(uverbs.QPAttrAltPath)},
		{"IBV_QP_MIN_RNR_TIMER", uint64(uverbs.QPAttrMinRNRTimer)},
		{"IBV_QP_SQ_PSN", uint64(uverbs.QPAttrSQPSN)},
		{"IBV_QP_MAX_DEST_RD_ATOMIC", uint64(uverbs.QPAttrMaxDestRdAtomic)},
		{"IBV_QP_PATH_MIG_STATE", uint64(uverbs.QPAttrPathMigState)},
		{"IBV_QP_CAP", uint64(uverbs.QPAttrCap)},
		{"IBV_QP_DEST_QPN", uint64(uverbs.QPAttrDestQPN)},
		{"IBV_QP_RATE_LIMIT", uint64(uverbs.QPAttrRateLimit)},
		{"IBV_SRQ_MAX_WR", uint64(uverbs.SRQAttrMaxWR)},
		{"IBV_SRQ_LIMIT", uint64(uverbs.SRQAttrLimit)},
		{"IBV_PORT_NOP", uint64(uverbs.PortNop)},
		{"IBV_PORT_DOWN", uint64(uverbs.PortDown)},
		{"IBV_PORT_INIT", uint64(uverbs.PortInit)},
		{"IBV_PORT_ARMED", uint64(uverbs.PortArmed)},
		{"IBV_PORT_ACTIVE", uint64(uverbs.PortActive)},
		{"IBV_PORT_ACTIVE_DEFER", uint64(uverbs.PortActiveDefer)},
		{"sizeof(struct ibv_send_wr)", uverbs.RXEDoorbellWQESize},
		{"IB_UVERBS_WR_RDMA_WRITE", uint64(uverbs.WRRDMAWrite)},
		{"IB_UVERBS_WR_RDMA_WRITE_WITH_IMM", uint64(uverbs.WRRDMAWriteWithImm)},
		{"IB_UVERBS_WR_SEND", uint64(uverbs.WRSend)},
		{"IB_UVERBS_WR_SEND_WITH_IMM", uint64(uverbs.WRSendWithImm)},
		{"IB_UVERBS_WR_RDMA_READ", uint64(uverbs.WRRDMARead)},
		{"IB_UVERBS_WR_ATOMIC_CMP_AND_SWP", uint64(uverbs.WRAtomicCmpAndSwp)},
		{"IB_UVERBS_WR_ATOMIC_FETCH_AND_ADD", uint64(uverbs.WRAtomicFetchAndAdd)},
		{"IB_UVERBS_WR_LOCAL_INV", uint64(uverbs.WRLocalInv)},
		{"IB_UVERBS_WR_BIND_MW", uint64(uverbs.WRBindMW)},
		{"IB_UVERBS_WR_SEND_WITH_INV", uint64(uverbs.WRSendWithInv)},
		{"IB_UVERBS_WC_SEND", uint64(uverbs.WCSend)},
		{"IB_UVERBS_WC_RDMA_WRITE", uint64(uverbs.WCRDMAWrite)},
		{"IB_UVERBS_WC_RDMA_READ", uint64(uverbs.WCRDMARead)},
		{"IB_UVERBS_WC_COMP_SWAP", uint64(uverbs.WCCompSwap)},
		{"IB_UVERBS_WC_FETCH_ADD", uint64(uverbs.WCFetchAdd)},
		{"IB_UVERBS_WC_BIND_MW", uint64(uverbs.WCBindMW)},
		{"IB_UVERBS_WC_LOCAL_INV", uint64(uverbs.WCLocalInv)},
		{"IB_UVERBS_WC_TSO", uint64(uverbs.WCTSO)},
		{"IBV_WC_RECV", uint64(uverbs.WCRecv)},
		{"IBV_WC_RECV_RDMA_WITH_IMM", uint64(uverbs.WCRecvRDMAWithImm)},
		{"IBV_SEND_FENCE", uverbs.SendFence},
		{"IBV_SEND_SIGNALED", uverbs.SendSignaled},
		{"IBV_SEND_SOLICITED", uverbs.SendSolicited},
		{"IBV_SEND_INLINE", uverbs.SendInline},
		{"IBV_WC_WITH_IMM", uverbs.WCFlagWithImm},
		{"IBV_WC_GRH", uverbs.WCFlagGRH},
	}
	seen := map[string]bool{}
	for _, c := range cases {
		seen[c.name] = true
		t.Run(c.name, func(t *testing.T) {
			v, ok := cv[c.name]
			if !ok {
				t.Fatalf("%s is not in the C table of cgo.go", c.name)
			}
			if v != c.go_ {
				t.Errorf("%s = %#x in C, %#x in Go", c.name, v, c.go_)
			}
		})
	}
	for n := range cv {
		if !seen[n] {
			t.Errorf("C constant %s has no Go counterpart in this test", n)
		}
	}
	if got := uverbs.IOWR(uverbs.RDMAIoctlMagic, 1, uverbs.IoctlHdrSize); uint64(got) != cv["RDMA_VERBS_IOCTL"] {
		t.Errorf("IOWR(0x1b, 1, 24) = %#x, C RDMA_VERBS_IOCTL = %#x", got, cv["RDMA_VERBS_IOCTL"])
	}
}
