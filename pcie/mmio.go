package pcie

// MMIO is the provider's window onto the device's BAR0: the CPU stores a
// driver makes to a mapped UAR / BlueFlame page. It is the only datapath
// port from provider to device besides host memory (DESIGN.md §1). In
// process it is a direct call into the emulated BAR; across processes a
// record in a shared ring; on real hardware a store to the mmapped page.
//
// Values are memory images: v holds the bytes exactly as a little-endian
// (x86) CPU would store them, so the device recovers the bytes with
// binary.LittleEndian.PutUint64. A doorbell whose bytes are two big-endian
// dwords is therefore stored as binary.LittleEndian.Uint64(bytes).
type MMIO interface {
	// Store64 is one 64-bit store at BAR0 offset off (8-byte aligned).
	Store64(off uint64, v uint64)
	// Store32 is one 32-bit store at BAR0 offset off (4-byte aligned).
	Store32(off uint64, v uint32)
	// Load32 is one 32-bit uncached read at BAR0 offset off.
	Load32(off uint64) uint32
	// Flush drains the CPU's write-combining buffers to the device
	// (x86 sfence; mmio_flush_writes / mmio_wc_start in rdma-core).
	Flush()
}

// LineStorer is an MMIO port that also takes a whole BlueFlame copy in
// one call. StoreLines(off, a, b) must have exactly the effect of Flush,
// then Store64(off+8*i, little-endian word i) for every 8-byte word of a
// and then of b (the WQE's bytes; b is the part after the ring wrap, often
// empty), in ascending order, then Flush: mmio_wc_start, mlx5_bf_copy and
// mmio_flush_writes. off is 64-byte aligned; len(a) and len(b) are
// multiples of 64. A provider uses it when its port has it, and the
// separate calls otherwise.
type LineStorer interface {
	StoreLines(off uint64, a, b []byte)
}
