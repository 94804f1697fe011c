package wire

import (
	"errors"
	"fmt"

	"github.com/softnic/softnic/sim"
)

// Per-frame overheads on an IEEE 802.3 link. Frames handed to Port.Send are
// Ethernet frames from the destination MAC up to the last payload byte
// (roce.BuildFrame's output): no preamble, no FCS, no minimum-size padding.
// The link adds those when it computes serialisation time.
const (
	EthHeaderLen = 14 // destination MAC, source MAC, EtherType (no VLAN tag)
	PreambleSFD  = 8  // 7 B preamble + 1 B start-of-frame delimiter
	FCSLen       = 4  // frame check sequence (CRC-32)
	IFG          = 12 // minimum inter-frame gap (96 bit times)
	MinFrame     = 64 // minimum frame including FCS; shorter frames are padded
)

// Defaults for a Spec's zero fields.
const (
	DefaultRate = 100 * sim.Gbps
	// PropagationPerMeter is the signal delay of a cable: ~5 ns/m for both
	// copper DAC and fibre (velocity factor ~0.67).
	PropagationPerMeter = 5 * sim.Nanosecond
	// DefaultCableMeters is the cable the default Propagation assumes: a
	// 2 m direct-attach cable between two NICs, i.e. 10 ns.
	DefaultCableMeters = 2
	DefaultPropagation = DefaultCableMeters * PropagationPerMeter
	// DefaultMTU is the largest IP packet (frame minus the 14-byte Ethernet
	// header) the link carries. A RoCEv2 frame at PMTU 4096 needs at most
	// 40 (IPv6) + 8 (UDP) + 12 (BTH) + 20 (RETH+ImmDt) + 4096 + 4 (ICRC) =
	// 4180 B; 4200 leaves a little room. Real deployments use 9000-byte
	// jumbo frames for PMTU 4096 (rocev2.md §2.3: active MTU = largest IB
	// MTU <= netdev MTU - 80); only the upper bound matters here.
	DefaultMTU = 4200
	// DefaultReorderWindow bounds how long a Reorder fault holds a frame
	// when no later frame comes to release it.
	DefaultReorderWindow = 10 * sim.Microsecond
)

// Spec is a link's configuration; zero fields take the defaults above.
type Spec struct {
	Rate          sim.BitRate  `json:"rate_bps"`          // line rate, e.g. 100e9
	Propagation   sim.Duration `json:"propagation_ps"`    // one-way cable delay
	MTU           int          `json:"mtu"`               // max IP packet, bytes
	ReorderWindow sim.Duration `json:"reorder_window_ps"` // max hold of a Reorder fault
}

// DefaultSpec is a 100 Gb/s link over a 2 m cable with a 4200-byte MTU.
func DefaultSpec() Spec {
	return Spec{Rate: DefaultRate, Propagation: DefaultPropagation, MTU: DefaultMTU, ReorderWindow: DefaultReorderWindow}
}

// ErrBadSpec is wrapped by Spec.Validate's errors.
var ErrBadSpec = errors.New("bad link spec")

// Validate rejects negative values (zero means "default").
func (s Spec) Validate() error {
	switch {
	case s.Rate < 0:
		return fmt.Errorf("wire: %w: rate %v b/s is negative", ErrBadSpec, float64(s.Rate))
	case s.Propagation < 0:
		return fmt.Errorf("wire: %w: propagation %v is negative", ErrBadSpec, s.Propagation)
	case s.MTU < 0:
		return fmt.Errorf("wire: %w: mtu %d is negative", ErrBadSpec, s.MTU)
	case s.ReorderWindow < 0:
		return fmt.Errorf("wire: %w: reorder window %v is negative", ErrBadSpec, s.ReorderWindow)
	}
	return nil
}

// withDefaults fills zero (and, defensively, negative) fields.
func (s Spec) withDefaults() Spec {
	d := DefaultSpec()
	if s.Rate <= 0 {
		s.Rate = d.Rate
	}
	if s.Propagation < 0 {
		s.Propagation = 0
	}
	// A zero Propagation is taken as "default": a link needs a cable. Use
	// 1 ps for a near-zero-latency link.
	if s.Propagation == 0 {
		s.Propagation = d.Propagation
	}
	if s.MTU <= 0 {
		s.MTU = d.MTU
	}
	if s.ReorderWindow <= 0 {
		s.ReorderWindow = d.ReorderWindow
	}
	return s
}

// WireBytes is the number of byte times a frame of n bytes (without FCS)
// occupies on the line: padded to the 64-byte minimum, plus FCS, preamble,
// SFD and the inter-frame gap.
func WireBytes(n int) int {
	if n < MinFrame-FCSLen {
		n = MinFrame - FCSLen
	}
	return n + FCSLen + PreambleSFD + IFG
}

// FrameTime is how long a frame of n bytes (without FCS) keeps the
// transmitter busy at the spec's rate.
func (s Spec) FrameTime(n int) sim.Duration {
	return s.withDefaults().Rate.Serialize(WireBytes(n))
}
