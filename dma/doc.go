// Package dma is the device's DMA engine: tagged reads and posted writes
// against host memory (a shm.Region), timed by the pcie link model with an
// outstanding-read-tag limit, plus memory-key (lkey/rkey) translation and
// protection checks and the SGE gather/scatter built on them.
//
// Spec: ../shared/DESIGN.md §2 steps 6 and 9, §3; ../shared/reference/mlx5.md
// §8 (memory keys) and §6.4 (error syndromes); timing.md §1-§2 for timing.
package dma
