// Package interop proves softnic's RoCEv2 against Linux Soft-RoCE (rdma_rxe)
// running in a qemu guest built from Debian packages (guest/build.sh), as
// shared/reference/rxe-peer.md and rocev2.md §8 describe; it runs only with
// SOFTNIC_INTEROP=1 (docs/howto-interop.md).
package interop
