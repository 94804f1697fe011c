package uverbs

import (
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestErrorUnwrap(t *testing.T) {
	cases := []struct {
		name  string
		err   error
		is    []error
		isNot []error
		msg   string
	}{
		{"errno_only", CmdCreateQP.Errorf(syscall.EINVAL, "caps above the device limits"),
			[]error{syscall.EINVAL}, []error{syscall.ENOSPC, ErrBadTransition},
			"uverbs: CREATE_QP: invalid argument: caps above the device limits"},
		{"with_sentinel", &Error{Cmd: "MODIFY_QP", Errno: syscall.EINVAL, Err: ErrBadTransition},
			[]error{syscall.EINVAL, ErrBadTransition}, []error{ErrMissingAttr}, "uverbs: MODIFY_QP: invalid argument"},
		{"ioctl_method", &Error{Cmd: "MLX5_IB_METHOD_UAR_OBJ_ALLOC", Errno: syscall.EOPNOTSUPP, Reason: "no write-combining"},
			[]error{syscall.EOPNOTSUPP}, []error{syscall.EINVAL},
			"uverbs: MLX5_IB_METHOD_UAR_OBJ_ALLOC: operation not supported: no write-combining"},
		{"format", truncated("ib_uverbs_create_cq", 32, 4), []error{ErrTruncated, syscall.ENOSPC}, []error{ErrReserved},
			"uverbs: ib_uverbs_create_cq: truncated (need 32 bytes, have 4)"},
		{"format_field", reserved("ib_uverbs_create_cq", "reserved", 28), []error{ErrReserved, syscall.EINVAL}, nil,
			"uverbs: ib_uverbs_create_cq.reserved at offset 28: reserved field not zero"},
		{"transition", CheckTransition(QPTypeUD, QPStateReset, QPStateInit, QPAttrState), []error{ErrMissingAttr, syscall.EINVAL}, nil,
			"uverbs: MODIFY_QP UD RESET->INIT: required QP attribute missing: needs PKEY_INDEX|PORT|QKEY"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, e := range c.is {
				require.ErrorIs(t, c.err, e)
			}
			for _, e := range c.isNot {
				require.False(t, errors.Is(c.err, e), "%v is %v", c.err, e)
			}
			require.Equal(t, c.msg, c.err.Error())
		})
	}
	require.Equal(t, "CMD_99", Command(99).String())
	require.Equal(t, "QPS_9", QPState(9).String())
	require.Equal(t, "QPT_1", QPType(1).String())
	require.Equal(t, 1024, MTU1024.Bytes())
	require.Zero(t, MTU(6).Bytes())
}

func TestErrorOf(t *testing.T) {
	own := CmdAllocPD.Errorf(syscall.EBUSY, "busy")
	require.Same(t, own, ErrorOf("X", fmt.Errorf("wrapped: %w", own)))
	e := ErrorOf("CREATE_CQ", truncated("ib_uverbs_create_cq", 32, 4))
	require.Equal(t, &Error{Cmd: "CREATE_CQ", Errno: syscall.ENOSPC, Reason: "uverbs: ib_uverbs_create_cq: truncated (need 32 bytes, have 4)", Err: ErrTruncated}, e)
	te := &TransitionError{Type: QPTypeRC, Cur: QPStateReset, Next: QPStateRTS, Err: ErrBadTransition}
	e = ErrorOf("MODIFY_QP", te)
	require.Equal(t, syscall.EINVAL, e.Errno)
	require.ErrorIs(t, e, ErrBadTransition)
	e = ErrorOf("ALLOC_PD", fmt.Errorf("send: %w", syscall.EPIPE))
	require.Equal(t, &Error{Cmd: "ALLOC_PD", Errno: syscall.EPIPE, Reason: "send: broken pipe"}, e)
	require.Nil(t, ErrorOf("ALLOC_PD", errors.New("broken")))
}
