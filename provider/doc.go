// Package provider is the pure-Go verbs API: a libmlx5-equivalent datapath
// (WQE build, doorbell record, BlueFlame copy, CQ polling) over the mlx5
// control ABI, a pcie.MMIO port and an shm host-memory region. Spec:
// ../shared/reference/mlx5.md §2-§7 (rdma-core providers/mlx5 qp.c, cq.c,
// verbs.c) and the IB-spec QP attribute tables the kernel enforces.
//
// A Context and everything created from it are single-threaded, like
// libmlx5 with MLX5_SINGLE_THREADED=1: no locks are taken on the datapath,
// so one goroutine at a time may use a Context and its objects.
//
// Errors wrap the sentinels of errors.go (test with errors.Is), inside an
// *OpError naming the verb. Objects come only from the verbs that create
// them: a nil one, one destroyed (or of a closed Context), and a zero
// value built by the application (&provider.QP{}) are all refused with
// ErrClosed by every verb that returns an error, and answer zero values
// from those that do not; none panics.
package provider
