package host

import "github.com/softnic/softnic/trace"

// Counter (and warning) names of the CPU side, in the one catalogue (the
// names are those BAR0 counted before the host CPU had its own package).
var (
	CtrBarMisalignedStore = trace.NewCounter("bar_misaligned_store") // a store not naturally aligned: dropped
	CtrWcLateDrain        = trace.NewCounter("wc_late_drain")        // a WC line that drained by itself, without a fence
	CtrWcEvict            = trace.NewCounter("wc_evict")             // a WC line evicted because all lines were busy
	CtrFaultWCLine        = trace.NewCounter("fault_wc_line")        // a WC line a fault rule dropped, tore, delayed, reordered, duplicated or corrupted
)
