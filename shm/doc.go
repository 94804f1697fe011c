// Package shm is host memory for softnic: a bounds-checked region backed by
// memfd + mmap (anonymous mmap as a fallback) in which every ring, doorbell
// record, CQ buffer and registered buffer lives (DESIGN.md §1; timing.md §9.4:
// device-visible memory never comes from the Go heap). Addresses are IOVAs:
// byte 0 of the region is at Base().
package shm
