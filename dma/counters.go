package dma

import "github.com/softnic/softnic/trace"

// Counter (and warning) names, in one catalogue.
var (
	CtrDmaRangeError  = trace.NewCounter("dma_range_error")
	CtrDmaTagStall    = trace.NewCounter("dma_tag_stall")
	CtrDmaReads       = trace.NewCounter("dma_reads")
	CtrDmaReadBytes   = trace.NewCounter("dma_read_bytes")
	CtrPcieDmaTlps    = trace.NewCounter("pcie_dma_tlps")
	CtrPcieDmaBytes   = trace.NewCounter("pcie_dma_bytes")
	CtrDmaWrites      = trace.NewCounter("dma_writes")
	CtrDmaWriteBytes  = trace.NewCounter("dma_write_bytes")
	CtrDmaKeyError    = trace.NewCounter("dma_key_error")
	CtrDmaLengthError = trace.NewCounter("dma_length_error")
	CtrDmaBadKey      = trace.NewCounter("dma_bad_key")
	CtrDmaPdMismatch  = trace.NewCounter("dma_pd_mismatch")
	CtrDmaBounds      = trace.NewCounter("dma_bounds")
	CtrDmaAccess      = trace.NewCounter("dma_access")
)
