// Package pcie is softnic's PCIe transaction-layer and link timing model:
// posted writes (MWr), non-posted reads (MRd) and their completions (CplD),
// split by MPS / MRRS / RCB and 4 KiB boundaries, serialised per direction at
// the link's TLP-layer rate, plus the MMIO port the provider drives.
//
// Spec: the pcie-bench model (Neugebauer et al., SIGCOMM'18; model/pcie.py and
// model/mem_bw.py) as restated in ../shared/reference/timing.md §1, its
// Gen3 x8 check values (§1.3, §7) and the measured NFP-6000 DMA read latency
// (§2.1) for calibration; Kalia et al. ATC'16 byte accounting (§3.1).
package pcie
