// Package ethport is the emulated NIC's Ethernet port on a real network: it
// owns the port's MAC and IPv4 address, answers ARP who-has for that address
// and resolves peers by ARP (RFC 826; request, retry, cache, static
// neighbours), hands the device only the IPv4/UDP-4791 frames addressed to
// its MAC and IP (RoCEv2, rocev2.md §1.1 and §4.7), and drops and counts
// everything else. Frames from the device go straight to a real transport
// (wire.RealTransport). ARP timers run on the simulation's engine, so the
// port is deterministic under a fake transport.
package ethport
