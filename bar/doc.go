// Package bar is the device's BAR0: the mlx5 initialization segment and the
// UAR pages (CQ arm, EQ doorbells, bfregs with their two BlueFlame buffers)
// as one register table with one dispatch function, behind the device end
// of MMIO (pcie.BARPort): posted writes cross the link and are dispatched
// when they arrive, reads sample a register at the MRd's arrival. The
// CPU's write-combining buffer that turns the provider's stores into those
// posted writes is package host.
//
// Spec: ../shared/reference/mlx5.md §1.1-1.2 (init segment, health buffer),
// §2.2 (UAR page layout), §4.8 (libmlx5 doorbell / BlueFlame sequence),
// §4.9 (device behaviour, inferred); ../shared/DESIGN.md §2 steps 3-4.
package bar
