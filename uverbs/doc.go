// Package uverbs is the RDMA control ABI as the Linux kernel defines it: the
// ib_uverbs commands with their request and response structs, the mlx5_ib
// and rxe driver data they carry, the IB enums, object handles and errno
// errors, the QP state-transition table, and the two byte framings the
// kernel reads (write() with ib_uverbs_cmd_hdr, and RDMA_VERBS_IOCTL with
// ib_uverbs_ioctl_hdr and attributes). Spec: ../shared/reference/uverbs.md
// (Linux 6.1 include/uapi/rdma: ib_user_verbs.h, rdma_user_ioctl_cmds.h,
// ib_user_ioctl_verbs.h, ib_user_ioctl_cmds.h, mlx5-abi.h,
// mlx5_user_ioctl_cmds.h, rdma_user_rxe.h; the table of ib_modify_qp_is_ok).
//
// Structs are plain Go values with Encode (into a caller's buffer, no
// allocation) and Decode (defensive: short or reserved-bit input is an
// error, never a panic). Their layouts are data in layouts.txt; `go generate`
// writes zz_layouts.go from it, and test/uverbslayout compares every size and
// offset against the uapi headers with the C compiler. Integers are in host
// byte order, as the kernel reads them.
package uverbs

//go:generate go run ./internal/gen .
