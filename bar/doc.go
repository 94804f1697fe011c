// Package bar is the device's BAR0: the mlx5 initialization segment and the
// UAR pages (CQ arm, EQ doorbells, bfregs with their two BlueFlame buffers)
// as one register table with one dispatch function, and the CPU's
// write-combining buffer that turns the provider's MMIO stores into the
// posted-write TLPs the device sees.
//
// Spec: ../shared/reference/mlx5.md §1.1-1.2 (init segment, health buffer),
// §2.2 (UAR page layout), §4.8 (libmlx5 doorbell / BlueFlame sequence),
// §4.9 (device behaviour, inferred); ../shared/DESIGN.md §2 steps 2-4;
// write-combining rules per the Intel SDM vol. 3 §11.3.1 (as summarised in
// timing.md §5.1 and §9.4).
package bar
