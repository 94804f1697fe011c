// Package wqefetch is the per-send-queue WQE fetch engine: on a doorbell it
// DMA-reads the new WQEBBs from the host SQ ring (wrap included, as few reads
// as possible), on a complete BlueFlame write it takes the WQE from the BF
// buffer and skips the fetch, then validates each control segment and moves
// every WQE through explicit lifecycle states. Spec: mlx5.md §4.1-4.9 and
// DESIGN.md §2 step 5.
package wqefetch
