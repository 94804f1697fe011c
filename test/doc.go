// Package test holds softnic's end-to-end tests across packages.
//
// Spec: ../shared/DESIGN.md §6 (how we know it is right: the transport
// under loss, reordering, duplication and corruption with a seed, every
// byte delivered exactly once and in order or a correct error; benchmarks
// with 0 allocations on the hot paths), with the rules and sources each
// test holds in docs/transport.md, docs/events.md and docs/faults.md.
package test
