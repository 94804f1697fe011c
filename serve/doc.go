// Package serve is the softnic daemon (softnic serve): emulated NICs in
// their own process, which client processes attach to as applications
// attach to a ConnectX (DESIGN.md §1, §7; docs/daemon.md).
//
// A client (provider.Dial) connects to a unix SOCK_SEQPACKET socket and
// attaches to a device by name with the memfds of its host memory and of
// its MMIO ring (package attach). The daemon maps both (shm.Map: sealed
// memfds only), builds the device in front of that memory, so that its
// DMA engine reaches the client's memory and nothing else, and serves:
//
//   - control: uverbs command bytes, handled by a uverbsdev.Server of its
//     own (handles are per client);
//   - MMIO: the records of the client's ring (mmioring), applied to the
//     device's BAR port in ring order at the host time each carries, and
//     the ring's calls (run to my time, step, read a register);
//   - the event and CQ-moderation side (attach.SimOp).
//
// One engine runs every device, so that devices cabled back to back share
// a clock; a mutex serialises the goroutines that drive it (one per client
// socket, one per client ring). A client that dies is torn down: its QPs
// flushed and destroyed, its MRs revoked, its memory unmapped (replaced by
// zero pages, shm.Region.Revoke, so DMA still in flight cannot fault), its
// device slot freed; its peers see what a peer of a dead host sees. Bad
// input from a client (a malformed message, record or command) costs an
// errno or a counted drop, never the daemon.
package serve
