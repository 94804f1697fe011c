package host

import (
	"errors"
	"fmt"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/sim"
)

// Layout is the part of BAR0's shape the CPU needs: which pages are UAR
// pages (write-combined unless Config.UARNonCached) and where their bfregs'
// buffers lie, so that it can tell the doorbell / BlueFlame post a store
// belongs to (the bf_mmio / doorbell_mmio stages and the labels of the
// writes it emits). It must match the device's bar.Config fields of the
// same names; testbed.NewCPU copies them from the device.
type Layout struct {
	FirstUAR  uint32 // index of the first UAR page (BAR0 + index × 4 KiB)
	NumUARs   int    // number of UAR pages
	BFRegSize int    // bfreg size (0 = no BlueFlame: 8 doorbell slots every 0x100 from 0x800)
}

// Config is the host CPU: its write-combining buffer, the cost of MMIO
// stores and of the provider work it does, and the BAR layout it stores to.
//
// New fills zero values of FirstUAR, NumUARs, WCLines and WCDrain with the
// defaults below; zero costs are meaningful. Start from DefaultConfig for
// the usual values. A profile file keeps these numbers where they have
// always stood: the WC and store fields under device.bar, the work costs
// under device.host (profile.Profile.Host).
type Config struct {
	Layout
	// UARNonCached maps UAR pages uncached (MLX5_SHUT_UP_BF=1): every
	// store is its own TLP, no write combining.
	UARNonCached bool
	// WCLines is the number of write-combining buffers. Assumption: 10
	// line fill buffers as on recent Intel cores; no source gives the
	// number a WC store stream really gets.
	WCLines int
	// WCDrain is how long a partial WC line nobody flushes stays in the
	// CPU before it drains by itself. Unconfirmed (the SDM only says "may
	// be delayed"): 1 µs by default, the device's BlueFlame give-up time.
	WCDrain sim.Duration
	// StoreCost is the CPU time of one write-combined MMIO store.
	// Assumption: 1 ns (the store only fills a buffer).
	StoreCost sim.Duration
	// UCStoreCost is the CPU time of one uncached store and of the time a
	// UC access holds the CPU beyond its own TLP: UC stores go out one TLP
	// each, 50-300 ns apart (timing.md §5.1); 50 ns by default.
	UCStoreCost sim.Duration

	// Provider work (Work), so that a trace shows the whole walk
	// (assumptions: a few-GHz core, L1-resident rings).
	WQEBuild  sim.Duration // building one WQE
	PerWQEBB  sim.Duration // extra per 64-byte basic block of it
	DBRUpdate sim.Duration // doorbell-record store + barrier
	PollCQE   sim.Duration // reading one CQE after the owner flip
}

// Defaults.
const (
	DefaultFirstUAR  = 3
	DefaultNumUARs   = 8 // libmlx5's default 16 bfregs = 8 UARs × 2 regular (mlx5.md §2.3)
	DefaultWCLines   = 10
	DefaultWCDrain   = sim.Microsecond
	DefaultStoreCost = sim.Nanosecond
	DefaultUCCost    = 50 * sim.Nanosecond
)

// DefaultConfig is the default profile's host: a Xeon-class core in front
// of a ConnectX-5-like BAR0 with 512-byte bfregs.
func DefaultConfig() Config {
	return Config{
		Layout:  Layout{FirstUAR: DefaultFirstUAR, NumUARs: DefaultNumUARs, BFRegSize: mlx5.DefaultBFRegSize},
		WCLines: DefaultWCLines, WCDrain: DefaultWCDrain, StoreCost: DefaultStoreCost, UCStoreCost: DefaultUCCost,
		WQEBuild: sim.NS(15), PerWQEBB: sim.NS(3), DBRUpdate: sim.NS(2), PollCQE: sim.NS(10),
	}
}

func (c Config) withDefaults() Config {
	if c.FirstUAR == 0 {
		c.FirstUAR = DefaultFirstUAR
	}
	if c.NumUARs == 0 {
		c.NumUARs = DefaultNumUARs
	}
	if c.WCLines == 0 {
		c.WCLines = DefaultWCLines
	}
	if c.WCDrain == 0 {
		c.WCDrain = DefaultWCDrain
	}
	return c
}

// ErrConfig reports an invalid Config (test with errors.Is).
var ErrConfig = errors.New("host: invalid config")

// Validate checks c after defaults are applied.
func (c Config) Validate() error {
	c = c.withDefaults()
	bad := func(f string, args ...any) error { return fmt.Errorf("%w: "+f, append([]any{ErrConfig}, args...)...) }
	switch {
	case c.NumUARs < 0 || c.NumUARs > 1<<16 || uint64(c.FirstUAR)+uint64(c.NumUARs) > 1<<32:
		return bad("num UARs %d out of range", c.NumUARs)
	case c.BFRegSize != 0 && c.BFRegSize != 128 && c.BFRegSize != 256 && c.BFRegSize != 512:
		return bad("bf_reg_size %d not 0, 128, 256 or 512 (4 bfregs must fit 0x800..0xfff)", c.BFRegSize)
	case c.WCLines < 1 || c.WCLines > 64:
		return bad("wc lines %d not in 1..64", c.WCLines)
	case c.WCDrain < 0 || c.StoreCost < 0 || c.UCStoreCost < 0 || c.WQEBuild < 0 || c.PerWQEBB < 0 || c.DBRUpdate < 0 || c.PollCQE < 0:
		return bad("negative duration")
	}
	return nil
}
