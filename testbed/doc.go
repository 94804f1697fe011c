// Package testbed assembles deterministic softnic worlds for the command
// line and the end-to-end tests: one virtual clock, two hosts (shared-memory
// regions) each with an emulated NIC, a point-to-point Ethernet link between
// them, and a pure-Go provider context on each host, plus helpers to bring an
// RC QP pair to RTS the way ibv_rc_pingpong does (DESIGN.md §2, §4).
package testbed
