package uverbs

import (
	"syscall"

	"github.com/softnic/softnic/mlx5"
)

// StatusErrno is the errno the kernel returns for a failed mlx5 command
// status (mlx5_core's cmd_status_to_err), with one softnic choice: the
// device answers "no resources" when an object table is full, which the
// kernel meets as its own allocation failing, so NO_RESOURCES is ENOMEM
// here (mlx5_core: EAGAIN).
//
//	status                          errno
//	OK                              0
//	INTERNAL_ERR, BAD_SYS_STATE     EIO
//	BAD_INPUT_LEN, BAD_OUTPUT_LEN   EIO
//	BAD_OP, BAD_PARAM, BAD_RES      EINVAL
//	BAD_RES_STATE, BAD_INDEX        EINVAL
//	BAD_QP_STATE, BAD_PKT, BAD_SIZE EINVAL
//	RESOURCE_BUSY                   EBUSY
//	EXCEED_LIM, NO_RESOURCES        ENOMEM
func StatusErrno(s mlx5.CmdStatus) syscall.Errno {
	switch s {
	case mlx5.StatusOK:
		return 0
	case mlx5.StatusResourceBusy:
		return syscall.EBUSY
	case mlx5.StatusExceedLim, mlx5.StatusNoResources:
		return syscall.ENOMEM
	case mlx5.StatusInternalErr, mlx5.StatusBadSysState, mlx5.StatusBadInputLength, mlx5.StatusBadOutputLength:
		return syscall.EIO
	}
	return syscall.EINVAL
}
