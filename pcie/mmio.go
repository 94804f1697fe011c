package pcie

import "github.com/softnic/softnic/sim"

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

// BARPort is the device end of BAR0: what leaves the host's root complex.
// The host CPU model (package host) turns the provider's MMIO calls into
// these; the device (package bar) implements them. In one process it is a
// direct call; across processes a record in a ring.
type BARPort interface {
	// PostedWrite is one MWr of p (1..64 bytes, inside one 64-byte line)
	// at BAR0 offset off, leaving the CPU at host time t. p is valid only
	// during the call.
	PostedWrite(t sim.Time, off uint64, p []byte)
	// Read32 is a 4-byte MRd issued at host time t: the device runs up to
	// the request's arrival (earlier posted writes land first), samples
	// the register, and returns its memory image (little-endian load of
	// the big-endian register) and the time the completion is back at the
	// CPU.
	Read32(t sim.Time, off uint64) (v uint32, done sim.Time)
}

// FlowPort is a BARPort that also takes what the host knows of a posted
// write beyond its bytes: the QP and flow (qpn<<16 | WQE index, as
// trace.Event.Flow) of the doorbell or BlueFlame post it belongs to, as the
// CPU tracked its stores. The labels name the write in the trace and in
// fault rules (fault.PCIeTLP matches on QPN); the device never acts on
// them otherwise. A host uses PostedWriteFlow when its port has it;
// PostedWrite is the same with both labels zero.
type FlowPort interface {
	BARPort
	PostedWriteFlow(t sim.Time, off uint64, p []byte, qpn uint32, flow uint64)
}
