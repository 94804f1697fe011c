package bar

import (
	"errors"
	"fmt"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/sim"
)

// FWRev is the firmware version the init segment and health buffer report.
type FWRev struct {
	Major uint16 `json:"major"`
	Minor uint16 `json:"minor"`
	Sub   uint16 `json:"sub"`
}

// Config is BAR0's shape and the device's timings behind it. The host
// CPU's side of MMIO (write combining, store costs, UAR caching) is
// host.Config; a profile file keeps both under device.bar.
//
// New fills zero values of FirstUAR, NumUARs, WCDrain, CoreClock and
// HealthTick with the defaults below. BFRegSize 0 is meaningful (no
// BlueFlame), as is a zero InitDelay; start from DefaultConfig for the
// usual values.
type Config struct {
	FWRev FWRev `json:"fw_rev"`
	// FirstUAR is the index of the first UAR page (BAR0 + index × 4 KiB).
	// The init segment spans BAR0 0x0000-0x2013 (pages 0-2), so FW never
	// hands those out: FirstUAR must be at least 3.
	FirstUAR uint32 `json:"first_uar"`
	// NumUARs is the number of UAR pages.
	NumUARs int `json:"num_uars"`
	// BFRegSize is the bfreg size: 4 bfregs per UAR page from 0x800, each
	// holding two alternating BlueFlame buffers of BFRegSize/2 bytes. 0 = no
	// BlueFlame: 8 doorbell-only registers every 0x100 from 0x800, the way
	// libmlx5 treats non-cached UARs (mlx5.md §2.2).
	BFRegSize int `json:"bf_reg_size"`
	// WCDrain is how long the device waits for the rest of a BlueFlame
	// buffer whose lines did not all arrive before it gives up: the time a
	// partial WC line nobody flushes stays in the CPU before it drains by
	// itself (host.Config.WCDrain, the same number in a profile).
	// Unconfirmed (the SDM only says "may be delayed"): 1 µs by default.
	WCDrain sim.Duration `json:"wc_drain_ps"`
	// InitDelay is the time from Reset until the `initializing` bit clears.
	// Real firmware takes far longer; 10 µs keeps bring-up polls short.
	InitDelay sim.Duration `json:"init_delay_ps"`
	// CoreClock is the device clock the internal timer counts (1 GHz, an
	// assumption close to ConnectX core clocks).
	CoreClock sim.Freq `json:"core_clock_hz"`
	// HealthTick is the period of the FW heartbeat health_counter
	// (assumption: 1 ms, the rate is not published; mlx5's health poll
	// runs every 2 s plus up to 1 s and reports a miss after three polls
	// without change, faults.md §2.9: any tick under the poll keeps the
	// counter moving between polls).
	HealthTick sim.Duration `json:"health_tick_ps"`
}

// Defaults.
const (
	DefaultFirstUAR   = 3
	DefaultNumUARs    = 8 // libmlx5's default 16 bfregs = 8 UARs × 2 regular (mlx5.md §2.3)
	DefaultWCDrain    = sim.Microsecond
	DefaultInitDelay  = 10 * sim.Microsecond
	DefaultCoreClock  = sim.GHz
	DefaultHealthTick = sim.Millisecond
	minFirstUAR       = (mlx5.InitSegSize + mlx5.UARPageSize - 1) / mlx5.UARPageSize
	maxUARs           = 1 << 16
)

// DefaultConfig is a ConnectX-5-like BAR0 (FW 16.35.1012 is a plausible
// ConnectX-5 release, not a measured one) with 512-byte bfregs.
func DefaultConfig() Config {
	return Config{
		FWRev:    FWRev{Major: 16, Minor: 35, Sub: 1012},
		FirstUAR: DefaultFirstUAR, NumUARs: DefaultNumUARs, BFRegSize: mlx5.DefaultBFRegSize,
		WCDrain: DefaultWCDrain, InitDelay: DefaultInitDelay, CoreClock: DefaultCoreClock,
		HealthTick: DefaultHealthTick,
	}
}

func (c Config) withDefaults() Config {
	if c.FirstUAR == 0 {
		c.FirstUAR = DefaultFirstUAR
	}
	if c.NumUARs == 0 {
		c.NumUARs = DefaultNumUARs
	}
	if c.WCDrain == 0 {
		c.WCDrain = DefaultWCDrain
	}
	if c.CoreClock == 0 {
		c.CoreClock = DefaultCoreClock
	}
	if c.HealthTick == 0 {
		c.HealthTick = DefaultHealthTick
	}
	return c
}

// ErrConfig reports an invalid Config (test with errors.Is).
var ErrConfig = errors.New("bar: invalid config")

// Validate checks c after defaults are applied.
func (c Config) Validate() error {
	c = c.withDefaults()
	bad := func(f string, args ...any) error { return fmt.Errorf("%w: "+f, append([]any{ErrConfig}, args...)...) }
	switch {
	case c.FirstUAR < minFirstUAR:
		return bad("first UAR %d overlaps the init segment (minimum %d)", c.FirstUAR, minFirstUAR)
	case c.NumUARs < 0 || c.NumUARs > maxUARs || uint64(c.FirstUAR)+uint64(c.NumUARs) > 1<<32:
		return bad("num UARs %d out of range", c.NumUARs)
	case c.BFRegSize != 0 && c.BFRegSize != 128 && c.BFRegSize != 256 && c.BFRegSize != 512:
		return bad("bf_reg_size %d not 0, 128, 256 or 512 (4 bfregs must fit 0x800..0xfff)", c.BFRegSize)
	case c.WCDrain < 0 || c.InitDelay < 0 || c.HealthTick < 0:
		return bad("negative duration")
	case c.CoreClock < 0:
		return bad("negative core clock")
	}
	return nil
}
