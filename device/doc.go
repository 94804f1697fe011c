// Package device is the emulated ConnectX-style NIC: it assembles the PCIe
// link, BAR0, DMA and WQE-fetch engines from a Spec, owns the PD/MR/CQ/QP
// tables and the QP state machine, serves the uverbs-shaped control plane,
// runs the RC requester and responder over RoCEv2, and writes CQEs. Spec:
// DESIGN.md §1-§5, mlx5.md (host interface), rocev2.md (wire and transport
// rules as Linux rxe implements them).
package device
