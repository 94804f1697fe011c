// Package calibrate measures softnic's model against the published anchors
// of ../shared/reference/timing.md — the PCIe equations (pcie-bench), DMA
// read latency against size, Kalia et al.'s MMIO and DMA-read rates, the
// BlueFlame-vs-doorbell-batching bounds, the perftest 2 B RC half round
// trip and the BlueFlame saving — for every profile, and renders
// docs/calibration.md (softnic calibrate).
package calibrate
