// Package wire is the Ethernet link between NIC ports: per-direction
// serialisation at the link rate (with preamble, FCS, minimum frame and
// inter-frame gap counted), propagation delay, delivery to the peer port
// (or back to the same port on a loopback) as ordered engine events, fault
// hooks at fault.WireTx and fault.WireRx (matched on the frame's BTH: see
// FrameEvent), and taps for pcap capture (DESIGN.md §2 step 8, §3; IEEE
// 802.3 clause 3/4 frame format and IFG). Real transports (UDP, TAP) carry
// frames to and from the world outside; FaultyTransport applies the same
// fault plan at a real port.
package wire
