// Package uverbslayout checks the uverbs package's struct layouts and
// constants against the Linux uapi headers (rdma/ib_user_verbs.h,
// rdma/ib_user_ioctl_verbs.h, rdma/rdma_user_ioctl_cmds.h, rdma/mlx5-abi.h,
// rdma/rdma_user_rxe.h from linux-libc-dev) with the C compiler. It is the
// one place cgo is used; without cgo or the headers the test skips and says
// why. Spec: ../../../shared/reference/uverbs.md.
package uverbslayout
