// Package conformance is the provider's conformance suite: every verb,
// every opcode and every error class a backend can produce, run against
// each backend present — the emulated NIC (testbed) always, and a kernel
// device when SOFTNIC_KDEV names one (rxe0 in the interop guest, which
// runs this package's statically linked test binary). Spec: the IB spec's
// verbs chapter as libibverbs implements it (rdma-core 44 verbs.h) and
// ../shared/reference/uverbs.md for the kernel backend.
package conformance
