package bar

import "github.com/softnic/softnic/trace"

// Counter (and warning) names, in one catalogue.
var (
	CtrPcieMmioTlps     = trace.NewCounter("pcie_mmio_tlps")
	CtrPcieMmioBytes    = trace.NewCounter("pcie_mmio_bytes")
	CtrBarBadWidth      = trace.NewCounter("bar_bad_width")
	CtrBarUnknownAccess = trace.NewCounter("bar_unknown_access")
	CtrBarWoRead        = trace.NewCounter("bar_wo_read")
	CtrBarRoWrite       = trace.NewCounter("bar_ro_write")
	CtrBarCmdDbell      = trace.NewCounter("bar_cmd_dbell")
	CtrBarCqArm         = trace.NewCounter("bar_cq_arm")
	CtrBarEqDoorbell    = trace.NewCounter("bar_eq_doorbell")
	CtrBarDoorbell      = trace.NewCounter("bar_doorbell")
	CtrBfBadDs          = trace.NewCounter("bf_bad_ds")
	CtrBarBlueflame     = trace.NewCounter("bar_blueflame")
	CtrBfTorn           = trace.NewCounter("bf_torn")
)
