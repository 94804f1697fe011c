// Package fault is softnic's seeded, deterministic fault injection: a Plan of
// rules (loaded from JSON) names a hook point (wire.tx, pcie.tlp, dma.read,
// ...), an action (drop, corrupt, duplicate, delay, reorder, tear) and a
// trigger (the n-th event, every k-th, or a probability), and an Injector
// built from it answers each component's Decide call at that hook point
// (DESIGN.md §7 "Fault plans"; §6 "loss, reordering, duplication and
// corruption on the wire with a seed").
//
// Determinism: each hook point has its own event counter and its own PCG
// stream seeded from the plan's Seed and the point's name, so the decisions
// at one point depend only on the plan's rules for that point and the
// sequence of events there, never on wall-clock time or on other points.
package fault
