// Package host is the host CPU model in front of a device's BAR0: the
// write-combining buffer, the cost of MMIO stores and of the provider's own
// work, and the host clock they are charged to.
//
// A CPU implements pcie.MMIO (and pcie.LineStorer) for the provider and
// emits timestamped posted writes and reads to the device's pcie.BARPort;
// the device side (register table, BlueFlame assembly, the link) is package
// bar. Write combining follows the Intel SDM vol. 3 §11.3.1 (WC memory
// type: stores merge into 64-byte line buffers that leave on a fence, when
// full, on eviction, or by themselves after an unspecified delay; any
// uncached access drains them first), as summarised in
// ../shared/reference/timing.md §5.1 and §9.4; the provider-side sequence is
// libmlx5's (mlx5.md §4.8). DESIGN.md §1, §3 (host side) and §4 (time).
package host
