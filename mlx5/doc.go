// Package mlx5 holds byte-slice views and Fields structs for the ConnectX
// (mlx5) host interface formats: WQE segments, CQE64, doorbell records,
// UAR/BlueFlame offsets, opcodes and syndromes, plus the uverbs-shaped control
// commands. It has no behaviour. Spec: ../shared/reference/mlx5.md (rdma-core
// mlx5dv.h and the kernel's include/linux/mlx5 headers); all fields are
// big-endian in memory.
package mlx5
