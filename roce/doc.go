// Package roce is the RoCEv2 wire format: byte-slice views of the InfiniBand
// transport headers, the opcode table, PSN arithmetic, the ICRC, a
// zero-allocation frame builder and strict parser, and gopacket layers.
//
// It follows /work/shared/reference/rocev2.md (the project's digest of the
// IBTA spec, Annex A17 and Linux rdma_rxe): §1 headers, §2.1 opcodes, §1.3 UDP
// source ports, §3 ICRC. All multi-byte header fields are big-endian; the ICRC
// is stored least-significant byte first.
//
// View types (BTH, RETH, AETH, ...) are []byte aliases in the style of gVisor's
// pkg/tcpip/header: accessors read and write the underlying bytes in place and
// never copy. A view must be at least its header's size; callers check with
// the package's constructors or the parser first.
package roce
