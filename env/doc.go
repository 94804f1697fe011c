// Package env is the one environment every engine of the device model gets
// (engine, recorder, counters, node), after SimBricks'
// device/runtime contract: a device reacts to MMIO, DMA completions,
// received frames and timers; the runtime offers scheduling, cancelling and
// the current time (../shared/DESIGN.md §3, §4).
package env
