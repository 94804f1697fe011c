// Package fault is softnic's seeded, deterministic fault injection: a Plan of
// rules (loaded from JSON) names a hook point (wire.tx, pcie.tlp, dma.read,
// ...), an action (drop, corrupt, duplicate, delay, reorder, tear), a
// trigger (the n-th event, every k-th, or a probability) and a Match (node,
// QP, and for frames the BTH opcode and PSN), and an Injector built from it
// answers each component's Decide(point, Event) call at that hook point
// (DESIGN.md §7 "Fault plans"; §6 "loss, reordering, duplication and
// corruption on the wire with a seed"). Load reads a plan file; Explain
// says in words what a plan does. docs/faults.md is the user's guide.
//
// Determinism: each hook point has its own event counter and its own PCG
// stream seeded from the plan's Seed and the point's name, so the decisions
// at one point depend only on the plan's rules for that point and the
// sequence of events there, never on wall-clock time or on other points.
package fault
