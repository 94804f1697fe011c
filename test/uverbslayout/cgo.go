//go:build cgo

package uverbslayout

/*
#include <stddef.h>

struct member_layout { const char *s, *m; long off, width; };
struct named_value { const char *name; unsigned long long v; };

#if __has_include(<rdma/ib_user_verbs.h>) && __has_include(<rdma/ib_user_ioctl_verbs.h>) && \
	__has_include(<rdma/ib_user_ioctl_cmds.h>) && __has_include(<rdma/rdma_user_ioctl_cmds.h>) && \
	__has_include(<rdma/mlx5-abi.h>) && __has_include(<rdma/mlx5_user_ioctl_cmds.h>) && \
	__has_include(<rdma/mlx5_user_ioctl_verbs.h>) && __has_include(<rdma/rdma_user_rxe.h>)
#define HAVE_UAPI 1
#include <rdma/ib_user_verbs.h>
#include <rdma/ib_user_ioctl_verbs.h>
#include <rdma/ib_user_ioctl_cmds.h>
#include <rdma/rdma_user_ioctl_cmds.h>
#include <rdma/mlx5-abi.h>
#include <rdma/mlx5_user_ioctl_cmds.h>
#include <rdma/mlx5_user_ioctl_verbs.h>
#include <rdma/rdma_user_rxe.h>
#include "zz_ctable.h"
#else
#define HAVE_UAPI 0
static const struct member_layout c_layouts[1];
static const int c_layouts_len = 0;
#endif

// libibverbs' verbs.h carries the enums the kernel keeps out of uapi (QP
// types and states, MTU, the attribute-mask bits).
#if HAVE_UAPI && __has_include(<infiniband/verbs.h>)
#define HAVE_VERBS 1
#include <infiniband/verbs.h>
#else
#define HAVE_VERBS 0
#endif


#define V(x) { #x, (unsigned long long)(x) }

// The constants the uverbs package mirrors: the C side of TestConstants.
#if HAVE_VERBS
static const struct named_value c_values[] = {
	V(RDMA_VERBS_IOCTL),
	V(IB_USER_VERBS_CMD_GET_CONTEXT), V(IB_USER_VERBS_CMD_QUERY_DEVICE), V(IB_USER_VERBS_CMD_QUERY_PORT),
	V(IB_USER_VERBS_CMD_ALLOC_PD), V(IB_USER_VERBS_CMD_DEALLOC_PD), V(IB_USER_VERBS_CMD_CREATE_AH),
	V(IB_USER_VERBS_CMD_DESTROY_AH), V(IB_USER_VERBS_CMD_REG_MR), V(IB_USER_VERBS_CMD_DEREG_MR),
	V(IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL), V(IB_USER_VERBS_CMD_CREATE_CQ), V(IB_USER_VERBS_CMD_RESIZE_CQ),
	V(IB_USER_VERBS_CMD_DESTROY_CQ), V(IB_USER_VERBS_CMD_POLL_CQ), V(IB_USER_VERBS_CMD_REQ_NOTIFY_CQ),
	V(IB_USER_VERBS_CMD_CREATE_QP), V(IB_USER_VERBS_CMD_QUERY_QP), V(IB_USER_VERBS_CMD_MODIFY_QP),
	V(IB_USER_VERBS_CMD_DESTROY_QP), V(IB_USER_VERBS_CMD_POST_SEND), V(IB_USER_VERBS_CMD_POST_RECV),
	V(IB_USER_VERBS_CMD_CREATE_SRQ), V(IB_USER_VERBS_CMD_MODIFY_SRQ), V(IB_USER_VERBS_CMD_QUERY_SRQ),
	V(IB_USER_VERBS_CMD_DESTROY_SRQ), V(IB_USER_VERBS_CMD_POST_SRQ_RECV),
	V(IB_USER_VERBS_EX_CMD_QUERY_DEVICE), V(IB_USER_VERBS_EX_CMD_CREATE_CQ), V(IB_USER_VERBS_EX_CMD_CREATE_QP),
	V(IB_USER_VERBS_EX_CMD_MODIFY_QP),
	V(IB_USER_VERBS_CMD_FLAG_EXTENDED), V(IB_USER_VERBS_CMD_COMMAND_MASK),
	V(UVERBS_ATTR_F_MANDATORY), V(UVERBS_ATTR_F_VALID_OUTPUT), V(UVERBS_ID_NS_SHIFT),
	V(UVERBS_OBJECT_DEVICE), V(UVERBS_OBJECT_PD), V(UVERBS_OBJECT_COMP_CHANNEL), V(UVERBS_OBJECT_CQ),
	V(UVERBS_OBJECT_QP), V(UVERBS_OBJECT_SRQ), V(UVERBS_OBJECT_AH), V(UVERBS_OBJECT_MR),
	V(UVERBS_OBJECT_ASYNC_EVENT),
	V(UVERBS_METHOD_INVOKE_WRITE), V(UVERBS_METHOD_INFO_HANDLES), V(UVERBS_METHOD_QUERY_PORT),
	V(UVERBS_METHOD_GET_CONTEXT), V(UVERBS_METHOD_QUERY_CONTEXT), V(UVERBS_METHOD_QUERY_GID_TABLE),
	V(UVERBS_METHOD_QUERY_GID_ENTRY),
	V(UVERBS_ATTR_CORE_IN), V(UVERBS_ATTR_CORE_OUT), V(UVERBS_ATTR_WRITE_CMD), V(UVERBS_ATTR_UHW_IN),
	V(UVERBS_ATTR_UHW_OUT),
	V(UVERBS_ATTR_GET_CONTEXT_NUM_COMP_VECTORS), V(UVERBS_ATTR_GET_CONTEXT_CORE_SUPPORT),
	V(UVERBS_ATTR_QUERY_PORT_PORT_NUM), V(UVERBS_ATTR_QUERY_PORT_RESP),
	V(UVERBS_ATTR_QUERY_GID_ENTRY_PORT), V(UVERBS_ATTR_QUERY_GID_ENTRY_GID_INDEX), V(UVERBS_ATTR_QUERY_GID_ENTRY_FLAGS),
	V(UVERBS_ATTR_QUERY_GID_ENTRY_RESP_ENTRY), V(IB_UVERBS_GID_TYPE_ROCE_V2),
	V(UVERBS_METHOD_CQ_CREATE), V(UVERBS_METHOD_CQ_DESTROY),
	V(UVERBS_ATTR_CREATE_CQ_HANDLE), V(UVERBS_ATTR_CREATE_CQ_CQE), V(UVERBS_ATTR_CREATE_CQ_USER_HANDLE),
	V(UVERBS_ATTR_CREATE_CQ_COMP_CHANNEL), V(UVERBS_ATTR_CREATE_CQ_COMP_VECTOR), V(UVERBS_ATTR_CREATE_CQ_FLAGS),
	V(UVERBS_ATTR_CREATE_CQ_RESP_CQE), V(UVERBS_ATTR_CREATE_CQ_EVENT_FD),
	V(UVERBS_ATTR_DESTROY_CQ_HANDLE), V(UVERBS_ATTR_DESTROY_CQ_RESP),
	V(UVERBS_METHOD_QP_CREATE), V(UVERBS_METHOD_QP_DESTROY),
	V(UVERBS_ATTR_CREATE_QP_HANDLE), V(UVERBS_ATTR_CREATE_QP_XRCD_HANDLE), V(UVERBS_ATTR_CREATE_QP_PD_HANDLE),
	V(UVERBS_ATTR_CREATE_QP_SRQ_HANDLE), V(UVERBS_ATTR_CREATE_QP_SEND_CQ_HANDLE),
	V(UVERBS_ATTR_CREATE_QP_RECV_CQ_HANDLE), V(UVERBS_ATTR_CREATE_QP_IND_TABLE_HANDLE),
	V(UVERBS_ATTR_CREATE_QP_USER_HANDLE), V(UVERBS_ATTR_CREATE_QP_CAP), V(UVERBS_ATTR_CREATE_QP_TYPE),
	V(UVERBS_ATTR_CREATE_QP_FLAGS), V(UVERBS_ATTR_CREATE_QP_SOURCE_QPN), V(UVERBS_ATTR_CREATE_QP_EVENT_FD),
	V(UVERBS_ATTR_CREATE_QP_RESP_CAP), V(UVERBS_ATTR_CREATE_QP_RESP_QP_NUM),
	V(UVERBS_ATTR_DESTROY_QP_HANDLE), V(UVERBS_ATTR_DESTROY_QP_RESP),
	V(UVERBS_METHOD_SRQ_CREATE), V(UVERBS_METHOD_SRQ_DESTROY),
	V(UVERBS_ATTR_DESTROY_SRQ_HANDLE), V(UVERBS_ATTR_DESTROY_SRQ_RESP),
	V(UVERBS_METHOD_PD_DESTROY), V(UVERBS_ATTR_DESTROY_PD_HANDLE),
	V(UVERBS_METHOD_AH_DESTROY), V(UVERBS_ATTR_DESTROY_AH_HANDLE),
	V(UVERBS_METHOD_MR_DESTROY), V(UVERBS_ATTR_DESTROY_MR_HANDLE),
	V(UVERBS_METHOD_ASYNC_EVENT_ALLOC), V(UVERBS_ATTR_ASYNC_EVENT_ALLOC_FD_HANDLE),
	V(MLX5_IB_OBJECT_UAR), V(MLX5_IB_METHOD_UAR_OBJ_ALLOC), V(MLX5_IB_METHOD_UAR_OBJ_DESTROY),
	V(MLX5_IB_ATTR_UAR_OBJ_ALLOC_HANDLE), V(MLX5_IB_ATTR_UAR_OBJ_ALLOC_TYPE),
	V(MLX5_IB_ATTR_UAR_OBJ_ALLOC_MMAP_OFFSET), V(MLX5_IB_ATTR_UAR_OBJ_ALLOC_MMAP_LENGTH),
	V(MLX5_IB_ATTR_UAR_OBJ_ALLOC_PAGE_ID), V(MLX5_IB_ATTR_UAR_OBJ_DESTROY_HANDLE),
	V(MLX5_IB_UAPI_UAR_ALLOC_TYPE_BF), V(MLX5_IB_UAPI_UAR_ALLOC_TYPE_NC),
	V(MLX5_IB_UVERBS_ABI_VERSION), V(MLX5_LIB_CAP_4K_UAR), V(MLX5_LIB_CAP_DYN_UAR), V(MLX5_IB_ALLOC_UCTX_DEVX),
	V(MLX5_IB_CREATE_CQ_FLAGS_CQE_128B_PAD), V(MLX5_IB_CREATE_CQ_FLAGS_UAR_PAGE_INDEX),
	V(MLX5_IB_CREATE_CQ_FLAGS_REAL_TIME_TS),
	V(MLX5_QP_FLAG_SIGNATURE), V(MLX5_QP_FLAG_SCATTER_CQE), V(MLX5_QP_FLAG_BFREG_INDEX),
	V(MLX5_QP_FLAG_UAR_PAGE_INDEX), V(MLX5_SRQ_FLAG_SIGNATURE),
	V(RDMA_DRIVER_MLX5), V(RDMA_DRIVER_RXE),
	V(IB_UVERBS_ACCESS_LOCAL_WRITE), V(IB_UVERBS_ACCESS_REMOTE_WRITE), V(IB_UVERBS_ACCESS_REMOTE_READ),
	V(IB_UVERBS_ACCESS_REMOTE_ATOMIC), V(IB_UVERBS_ACCESS_MW_BIND), V(IB_UVERBS_ACCESS_ZERO_BASED),
	V(IB_UVERBS_ACCESS_ON_DEMAND), V(IB_UVERBS_ACCESS_HUGETLB), V(IB_UVERBS_ACCESS_RELAXED_ORDERING),
	V(IBV_QPT_RC), V(IBV_QPT_UC), V(IBV_QPT_UD), V(IBV_QPT_RAW_PACKET), V(IBV_QPT_XRC_SEND),
	V(IBV_QPT_XRC_RECV), V(IBV_QPT_DRIVER),
	V(IBV_QPS_RESET), V(IBV_QPS_INIT), V(IBV_QPS_RTR), V(IBV_QPS_RTS), V(IBV_QPS_SQD), V(IBV_QPS_SQE),
	V(IBV_QPS_ERR),
	V(IBV_MTU_256), V(IBV_MTU_512), V(IBV_MTU_1024), V(IBV_MTU_2048), V(IBV_MTU_4096),
	V(IBV_QP_STATE), V(IBV_QP_CUR_STATE), V(IBV_QP_EN_SQD_ASYNC_NOTIFY), V(IBV_QP_ACCESS_FLAGS),
	V(IBV_QP_PKEY_INDEX), V(IBV_QP_PORT), V(IBV_QP_QKEY), V(IBV_QP_AV), V(IBV_QP_PATH_MTU), V(IBV_QP_TIMEOUT),
	V(IBV_QP_RETRY_CNT), V(IBV_QP_RNR_RETRY), V(IBV_QP_RQ_PSN), V(IBV_QP_MAX_QP_RD_ATOMIC), V(IBV_QP_ALT_PATH),
	V(IBV_QP_MIN_RNR_TIMER), V(IBV_QP_SQ_PSN), V(IBV_QP_MAX_DEST_RD_ATOMIC), V(IBV_QP_PATH_MIG_STATE),
	V(IBV_QP_CAP), V(IBV_QP_DEST_QPN), V(IBV_QP_RATE_LIMIT),
	V(IBV_SRQ_MAX_WR), V(IBV_SRQ_LIMIT),
	V(IBV_PORT_NOP), V(IBV_PORT_DOWN), V(IBV_PORT_INIT), V(IBV_PORT_ARMED), V(IBV_PORT_ACTIVE),
	V(IBV_PORT_ACTIVE_DEFER),
	V(sizeof(struct ibv_send_wr)),
	V(IB_UVERBS_WR_RDMA_WRITE), V(IB_UVERBS_WR_RDMA_WRITE_WITH_IMM), V(IB_UVERBS_WR_SEND), V(IB_UVERBS_WR_SEND_WITH_IMM),
	V(IB_UVERBS_WR_RDMA_READ), V(IB_UVERBS_WR_ATOMIC_CMP_AND_SWP), V(IB_UVERBS_WR_ATOMIC_FETCH_AND_ADD),
	V(IB_UVERBS_WR_LOCAL_INV), V(IB_UVERBS_WR_BIND_MW), V(IB_UVERBS_WR_SEND_WITH_INV),
	V(IB_UVERBS_WC_SEND), V(IB_UVERBS_WC_RDMA_WRITE), V(IB_UVERBS_WC_RDMA_READ), V(IB_UVERBS_WC_COMP_SWAP),
	V(IB_UVERBS_WC_FETCH_ADD), V(IB_UVERBS_WC_BIND_MW), V(IB_UVERBS_WC_LOCAL_INV), V(IB_UVERBS_WC_TSO),
	V(IBV_WC_RECV), V(IBV_WC_RECV_RDMA_WITH_IMM),
	V(IBV_SEND_FENCE), V(IBV_SEND_SIGNALED), V(IBV_SEND_SOLICITED), V(IBV_SEND_INLINE),
	V(IBV_WC_WITH_IMM), V(IBV_WC_GRH),
};
static const int c_values_len = sizeof(c_values) / sizeof(c_values[0]);
#else
static const struct named_value c_values[1];
static const int c_values_len = 0;
#endif
static int have_uapi(void) { return HAVE_UAPI; }
static int have_verbs(void) { return HAVE_VERBS; }
static int n_layouts(void) { return c_layouts_len; }
static const struct member_layout *layout_at(int i) { return &c_layouts[i]; }
static int n_values(void) { return c_values_len; }
static const struct named_value *value_at(int i) { return &c_values[i]; }
*/
import "C"

// Member is one row of the C side of the layout table: a struct's size
// (Member empty) or one member's offset and width, as gcc lays it out.
type Member struct {
	Struct, Member string
	Offset, Width  int
}

// CLayouts is every row of zz_ctable.go's table, computed by the C compiler.
func CLayouts() []Member {
	n := int(C.n_layouts())
	if n == 0 {
		return nil
	}
	out := make([]Member, n)
	for i := range out {
		r := C.layout_at(C.int(i))
		out[i] = Member{C.GoString(r.s), C.GoString(r.m), int(r.off), int(r.width)}
	}
	return out
}

// CValues is every named constant of the table above, as C evaluates it.
func CValues() map[string]uint64 {
	n := int(C.n_values())
	if n == 0 {
		return nil
	}
	out := make(map[string]uint64, n)
	for i := 0; i < n; i++ {
		r := C.value_at(C.int(i))
		out[C.GoString(r.name)] = uint64(r.v)
	}
	return out
}

// Missing says why the C side is empty ("" when it is not): no uapi
// headers (linux-libc-dev), or no libibverbs verbs.h (libibverbs-dev) for
// the enum values.
func Missing() (layouts, values string) {
	if C.have_uapi() == 0 {
		layouts = "the uapi headers rdma/*.h are missing (apt-get install linux-libc-dev)"
	}
	if C.have_verbs() == 0 {
		values = "infiniband/verbs.h or the uapi headers are missing (apt-get install linux-libc-dev libibverbs-dev)"
	}
	return
}
