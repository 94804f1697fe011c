package bar

// Counter (and warning) names, in one catalogue.
const (
	CtrPcieMmioTlps       = "pcie_mmio_tlps"
	CtrPcieMmioBytes      = "pcie_mmio_bytes"
	CtrBarMisalignedStore = "bar_misaligned_store"
	CtrBarBadWidth        = "bar_bad_width"
	CtrWcLateDrain        = "wc_late_drain"
	CtrWcEvict            = "wc_evict"
	CtrBarUnknownAccess   = "bar_unknown_access"
	CtrBarWoRead          = "bar_wo_read"
	CtrBarRoWrite         = "bar_ro_write"
	CtrBarCmdDbell        = "bar_cmd_dbell"
	CtrBarCqArm           = "bar_cq_arm"
	CtrBarEqDoorbell      = "bar_eq_doorbell"
	CtrBarDoorbell        = "bar_doorbell"
	CtrBfBadDs            = "bf_bad_ds"
	CtrBarBlueflame       = "bar_blueflame"
	CtrBfTorn             = "bf_torn"
)
