package dma

// Counter (and warning) names, in one catalogue.
const (
	CtrDmaRangeError  = "dma_range_error"
	CtrDmaTagStall    = "dma_tag_stall"
	CtrDmaReads       = "dma_reads"
	CtrDmaReadBytes   = "dma_read_bytes"
	CtrPcieDmaTlps    = "pcie_dma_tlps"
	CtrPcieDmaBytes   = "pcie_dma_bytes"
	CtrDmaWrites      = "dma_writes"
	CtrDmaWriteBytes  = "dma_write_bytes"
	CtrDmaKeyError    = "dma_key_error"
	CtrDmaLengthError = "dma_length_error"
	CtrDmaBadKey      = "dma_bad_key"
	CtrDmaPdMismatch  = "dma_pd_mismatch"
	CtrDmaBounds      = "dma_bounds"
	CtrDmaAccess      = "dma_access"
)
