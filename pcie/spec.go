package pcie

import (
	"errors"
	"fmt"

	"github.com/softnic/softnic/sim"
)

// Spec describes one PCIe link and the host behind it: generation, width,
// the transaction-layer size limits, per-TLP wire overheads and the latency
// terms the link model adds. It is a value (Akita style): a Link copies it at
// construction, and the With* methods return modified copies.
//
// Byte overheads follow pcie-bench (timing.md §1.1): per TLP 8 B of framing +
// DLL (2 B start/end framing, 2 B sequence number, 4 B LCRC), a 4 B common
// header, then 12 B (MWr/MRd, 64-bit address) or 8 B (CplD). Kalia et al.
// count 26 B / 22 B instead (timing.md §1.1; the 2 B gap is unresolved), so
// the header sizes are parameters.
type Spec struct {
	// Name labels the profile in traces and tables.
	Name string `json:"name,omitempty"`
	// Gen is the PCIe generation, 1..6 (2.5 .. 64 GT/s per lane).
	Gen int `json:"gen"`
	// Lanes is the link width: 1, 2, 4, 8, 16 or 32.
	Lanes int `json:"lanes"`
	// MPS is the Maximum Payload Size (128..4096, a power of two): the
	// largest MWr or CplD payload.
	MPS int `json:"mps"`
	// MRRS is the Maximum Read Request Size (128..4096, a power of two).
	MRRS int `json:"mrrs"`
	// RCB is the Read Completion Boundary (64, 128, 256 or 512): completions
	// for one request may only be split at RCB-aligned addresses.
	RCB int `json:"rcb"`
	// RCBChunks makes the completer return every completion in RCB-sized
	// pieces (seen on several older chipsets) instead of up to MPS.
	RCBChunks bool `json:"rcb_chunks"`

	// HdrMWr, HdrMRd and HdrCplD are the wire bytes a TLP of each kind costs
	// beyond its payload (framing + DLL + TLP header [+ ECRC]).
	HdrMWr  int `json:"hdr_mwr"`
	HdrMRd  int `json:"hdr_mrd"`
	HdrCplD int `json:"hdr_cpld"`

	// AckLimit and FCGuide override the spec tables (bytes of TLP traffic
	// per Ack DLLP / per flow-control update DLLP); 0 = the table value for
	// Gen, Lanes and MPS (PCIe Base Spec 5.0 tables 3-7..3-9, 2-46..2-48 as
	// transcribed by pcie-bench).
	AckLimit int `json:"ack_limit,omitempty"`
	FCGuide  int `json:"fc_guide,omitempty"`

	// FlightLatency is the one-way time of a TLP after its last bit is
	// serialised until it is usable at the other end: PHY, controller and
	// root-complex/device pipeline delays.
	FlightLatency sim.Duration `json:"flight_latency_ps"`
	// HostReadLatency is the time from an MRd reaching the root complex to
	// its first completion being ready to send (root complex + memory/LLC).
	HostReadLatency sim.Duration `json:"host_read_latency_ps"`
	// HostReadPerLine is the extra host-side time per 64 B host cache line a
	// read touches; it streams a read's completions (see Link.DeviceRead).
	HostReadPerLine sim.Duration `json:"host_read_per_line_ps"`
}

// Sizes from pcie-bench model/pcie.py (timing.md §1.1).
const (
	dllpSize      = 8    // Ack and UpdateFC DLLP incl. framing
	skipLength    = 4    // SKP ordered set, bytes per lane
	skipInterval  = 1538 // one SKP ordered set per this many bytes
	cacheLine     = 64   // host cache line (the per-line host read cost)
	boundary4K    = 4096 // no TLP may cross a 4 KiB address boundary
	framingDLL    = 8    // 2 B framing + 2 B sequence + 4 B LCRC
	tlpCommonHdr  = 4
	addr64Hdr     = 12 // MWr/MRd header after the common DW, 64-bit address
	cplDHdr       = 8  // CplD header after the common DW
	defaultHdrMWr = framingDLL + tlpCommonHdr + addr64Hdr
	defaultHdrMRd = framingDLL + tlpCommonHdr + addr64Hdr
	defaultHdrCpl = framingDLL + tlpCommonHdr + cplDHdr
)

// Calibrated latency terms shared by the profiles (timing.md §2.1: Xeon
// E5-2620 v3, NFP-6000 on Gen3 x8, LLC-warm, one outstanding read; median
// 546 ns at 64 B and 1133 ns at 2048 B, fit 546 ns + 0.296 ns/B × (S − 64)).
//
// A single read's latency in this model (MPS 256, MRRS 512, aligned) is
//
//	ser(HdrMRd) + F + HostReadLatency + lines(S)×HostReadPerLine + ser(last CplD) + F
//
// where ser() is serialisation at R_tlp (57.88 Gb/s, 0.1382 ns/B). Link
// serialisation alone would give a slope of ~0.149 ns/B (CplD overhead
// included), half the measured 0.296 ns/B: one outstanding read is limited on
// the host/device side, not by the link (timing.md §2.1, Little's law). The
// remainder is charged per 64 B line touched, which also gives the
// cache-line saw-tooth of §2.2, and streams within one read only, so many
// reads in flight still reach the link bound of §1.3.
//
//	2048 B − 64 B: 31 lines × L + ser(276 B) − ser(84 B) = 587 ns ⇒ L = 18.08 ns
//	64 B: ser(24 B) + 2F + HRL + L + ser(84 B) = 546 ns ⇒ 2F + HRL = 513.0 ns
//
// The split between flight and host latency is not measured anywhere we can
// cite: we assume F = 100 ns one way (PHY + controller on each side), which
// leaves HRL = 313 ns for root complex, LLC and the NIC's own DMA engine. It
// only matters for MMIO (which pays F once) versus DMA (which pays 2F + HRL).
// Gen4/Gen5 profiles reuse these host terms: no cited measurement (unconfirmed).
const (
	calFlight      = 100 * sim.Nanosecond
	calHostRead    = 313 * sim.Nanosecond
	calHostPerLine = 18080 * sim.Picosecond
)

// Gen3x8 is the pcie-bench reference link (timing.md §1.3 "Gen3 x8" row,
// §7 check 1) with the host latencies calibrated against §2.1.
func Gen3x8() Spec { return baseSpec("gen3x8", 3, 8) }

// Gen3x16 is a ConnectX-4/5-class slot (timing.md §1.3 "Gen3 x16"; Kalia's
// arithmetic in §3.1 uses this width).
func Gen3x16() Spec { return baseSpec("gen3x16", 3, 16) }

// Gen4x16 is a ConnectX-6-class slot (timing.md §1.3 "Gen4 x16").
func Gen4x16() Spec { return baseSpec("gen4x16", 4, 16) }

// Gen5x16 is a ConnectX-7-class slot (timing.md §1.3 "Gen5 x16").
func Gen5x16() Spec { return baseSpec("gen5x16", 5, 16) }

// baseSpec is the common profile: 64-bit addressing, no ECRC, MPS 256,
// MRRS 512, RCB 64 (timing.md §1.3 table assumptions).
func baseSpec(name string, gen, lanes int) Spec {
	return Spec{
		Name: name, Gen: gen, Lanes: lanes,
		MPS: 256, MRRS: 512, RCB: 64,
		HdrMWr: defaultHdrMWr, HdrMRd: defaultHdrMRd, HdrCplD: defaultHdrCpl,
		FlightLatency: calFlight, HostReadLatency: calHostRead, HostReadPerLine: calHostPerLine,
	}
}

// WithMPS returns a copy with the given Maximum Payload Size.
func (s Spec) WithMPS(n int) Spec { s.MPS = n; return s }

// WithMRRS returns a copy with the given Maximum Read Request Size.
func (s Spec) WithMRRS(n int) Spec { s.MRRS = n; return s }

// WithRCB returns a copy with the given completion boundary and chunking.
func (s Spec) WithRCB(rcb int, chunks bool) Spec { s.RCB, s.RCBChunks = rcb, chunks; return s }

// WithHeaders returns a copy with the given per-TLP wire overheads.
func (s Spec) WithHeaders(mwr, mrd, cpld int) Spec {
	s.HdrMWr, s.HdrMRd, s.HdrCplD = mwr, mrd, cpld
	return s
}

// WithLatency returns a copy with the given latency terms.
func (s Spec) WithLatency(flight, hostRead, hostPerLine sim.Duration) Spec {
	s.FlightLatency, s.HostReadLatency, s.HostReadPerLine = flight, hostRead, hostPerLine
	return s
}

// MaxTLPOverhead bounds HdrMWr, HdrMRd and HdrCplD: a 4DW header (16 B),
// framing (2 B; 4 B at Gen3+ with STP), the sequence number (2 B), LCRC
// (4 B) and ECRC (4 B) come to at most 30 B; twice that is room for a
// calibration's own accounting.
const MaxTLPOverhead = 64

// ErrSpec reports an invalid Spec (test with errors.Is).
var ErrSpec = errors.New("pcie: invalid spec")

// Validate checks every field against the ranges the PCIe spec allows.
func (s Spec) Validate() error {
	bad := func(f string, args ...any) error { return fmt.Errorf("%w: "+f, append([]any{ErrSpec}, args...)...) }
	switch {
	case s.Gen < 1 || s.Gen > 6:
		return bad("gen %d not in 1..6", s.Gen)
	case laneIndex(s.Lanes) < 0:
		return bad("lanes %d not one of 1, 2, 4, 8, 16, 32", s.Lanes)
	case mpsIndex(s.MPS) < 0:
		return bad("mps %d not a power of two in 128..4096", s.MPS)
	case mpsIndex(s.MRRS) < 0:
		return bad("mrrs %d not a power of two in 128..4096", s.MRRS)
	case s.RCB != 64 && s.RCB != 128 && s.RCB != 256 && s.RCB != 512:
		return bad("rcb %d not one of 64, 128, 256, 512", s.RCB)
	case s.RCB > s.MPS:
		return bad("rcb %d larger than mps %d", s.RCB, s.MPS)
	case s.HdrMWr <= 0 || s.HdrMRd <= 0 || s.HdrCplD <= 0:
		return bad("tlp overheads must be positive (mwr %d, mrd %d, cpld %d)", s.HdrMWr, s.HdrMRd, s.HdrCplD)
	case s.HdrMWr > MaxTLPOverhead || s.HdrMRd > MaxTLPOverhead || s.HdrCplD > MaxTLPOverhead:
		// A larger one is a typo (bits, or the payload added in), and
		// a huge one wraps a TLP's serialisation time.
		return bad("tlp overheads over %d bytes (mwr %d, mrd %d, cpld %d): a TLP's header, framing, sequence number, LCRC and ECRC take at most 30",
			MaxTLPOverhead, s.HdrMWr, s.HdrMRd, s.HdrCplD)
	case s.AckLimit < 0 || s.FCGuide < 0:
		return bad("ack limit %d / fc guide %d negative", s.AckLimit, s.FCGuide)
	case s.FlightLatency < 0 || s.HostReadLatency < 0 || s.HostReadPerLine < 0:
		return bad("negative latency")
	}
	return nil
}

// gtPerLane is the transfer rate in GT/s per lane for Gen1..Gen6.
var gtPerLane = [...]float64{2.5, 5, 8, 16, 32, 64}

// encoding is the line-code efficiency: 8b/10b for Gen1-2, 128b/130b for
// Gen3-5, and pcie-bench's 242/256 flit-mode approximation for Gen6.
func encoding(gen int) float64 {
	switch {
	case gen <= 2:
		return 8.0 / 10.0
	case gen <= 5:
		return 128.0 / 130.0
	default:
		return 242.0 / 256.0
	}
}

var laneWidths = [...]int{1, 2, 4, 8, 16, 32}

func laneIndex(l int) int {
	for i, w := range laneWidths {
		if w == l {
			return i
		}
	}
	return -1
}

// mpsIndex maps 128..4096 to 0..5.
func mpsIndex(n int) int {
	for i, v := 0, 128; v <= 4096; i, v = i+1, v*2 {
		if n == v {
			return i
		}
	}
	return -1
}

// Ack-limit and FC-update-guide tables, bytes, indexed [lanes][MPS 128..4096]
// (PCIe Base Spec 5.0 tables 3-7..3-9 and 2-46..2-48 via pcie-bench). Gen3
// and later share one table; pcie-bench copies Gen5 for Gen6 (a guess there).
type dllpTable [6][6]int

var fcGen1 = dllpTable{
	{237, 416, 559, 1071, 2095, 4143},
	{128, 217, 289, 545, 1057, 2081},
	{73, 118, 154, 282, 538, 1050},
	{67, 107, 86, 150, 278, 534},
	{48, 72, 86, 150, 278, 534},
	{33, 45, 52, 84, 248, 276},
}

var ackGen1 = dllpTable{
	{237, 416, 559, 1071, 2095, 4143},
	{128, 217, 289, 545, 1057, 2081},
	{73, 118, 154, 282, 538, 1050},
	{67, 107, 86, 150, 278, 534},
	{48, 72, 86, 150, 278, 534},
	{33, 45, 52, 84, 148, 276},
}

var fcGen2 = dllpTable{
	{288, 467, 610, 1122, 2146, 4194},
	{179, 268, 340, 596, 1108, 2132},
	{124, 169, 205, 333, 589, 1101},
	{118, 158, 137, 201, 329, 585},
	{99, 123, 137, 201, 329, 585},
	{84, 96, 103, 135, 199, 327},
}

var ackGen2 = dllpTable{
	{288, 467, 610, 1122, 2146, 4194},
	{179, 268, 340, 596, 1108, 2132},
	{124, 169, 205, 333, 589, 1101},
	{118, 158, 137, 201, 329, 585},
	{99, 123, 137, 201, 329, 585},
	{84, 96, 103, 135, 199, 237},
}

// gen3Plus is both the Ack and the FC table for Gen3 and later.
var gen3Plus = dllpTable{
	{333, 512, 655, 1167, 2191, 4239},
	{224, 313, 385, 641, 1153, 2177},
	{169, 214, 250, 378, 634, 1146},
	{163, 203, 182, 246, 374, 630},
	{144, 168, 182, 246, 374, 630},
	{129, 141, 148, 180, 244, 372},
}

// at is the entry for a width and MPS, 0 when either is not in the table
// (an invalid Spec; Validate reports it).
func (t *dllpTable) at(lanes, mps int) int {
	l, m := laneIndex(lanes), mpsIndex(mps)
	if l < 0 || m < 0 {
		return 0
	}
	return t[l][m]
}

func tableFor(gen int, ack bool) *dllpTable {
	switch {
	case gen == 1 && ack:
		return &ackGen1
	case gen == 1:
		return &fcGen1
	case gen == 2 && ack:
		return &ackGen2
	case gen == 2:
		return &fcGen2
	default:
		return &gen3Plus
	}
}

// AckLimitBytes is the TLP traffic per Ack DLLP (the override, or the table).
func (s Spec) AckLimitBytes() int {
	if s.AckLimit > 0 {
		return s.AckLimit
	}
	return tableFor(s.Gen, true).at(s.Lanes, s.MPS)
}

// FCGuideBytes is the TLP traffic per UpdateFC DLLP (the override, or the table).
func (s Spec) FCGuideBytes() int {
	if s.FCGuide > 0 {
		return s.FCGuide
	}
	return tableFor(s.Gen, false).at(s.Lanes, s.MPS)
}

// RawGbps is R_raw = GT/s × encoding × lanes, in Gb/s (timing.md §1.2).
// It is 0 for a generation outside 1..6.
func (s Spec) RawGbps() float64 {
	if s.Gen < 1 || s.Gen > len(gtPerLane) {
		return 0
	}
	return gtPerLane[s.Gen-1] * encoding(s.Gen) * float64(s.Lanes)
}

// TLPGbps is R_tlp, the bandwidth left for TLPs after Ack and UpdateFC DLLPs
// and SKP ordered sets (timing.md §1.2):
//
//	R_tlp = R_raw × (1 − 8/AckLimit − 8/FCGuide − 4/1538)
//
// It is 0 for a Spec outside the tables (Validate says why).
func (s Spec) TLPGbps() float64 {
	ack, fc := s.AckLimitBytes(), s.FCGuideBytes()
	if ack <= 0 || fc <= 0 {
		return 0
	}
	over := float64(dllpSize)/float64(ack) + float64(dllpSize)/float64(fc) + float64(skipLength)/float64(skipInterval)
	return s.RawGbps() * (1 - over)
}

// TLPRate is R_tlp as a sim.BitRate: the rate at which Link serialises TLP
// bytes in each direction.
func (s Spec) TLPRate() sim.BitRate { return sim.BitRate(s.TLPGbps()) * sim.Gbps }

func ceilDiv(a, b int) int {
	if b <= 0 {
		return 0 // invalid Spec: no TLP count rather than a panic
	}
	return (a + b - 1) / b
}

// WriteWire is the wire cost of an S-byte posted write as pcie-bench counts
// it (aligned, ceil(S/MPS) MWr TLPs).
func (s Spec) WriteWire(size int) (tlps, bytes int) {
	tlps = ceilDiv(size, s.MPS)
	return tlps, size + tlps*s.HdrMWr
}

// ReadWire is the wire cost of an S-byte read: requests (device → host) and
// completions (host → device), aligned, completions by MPS or, with
// RCBChunks, by RCB.
func (s Spec) ReadWire(size int) (reqTLPs, reqBytes, cplTLPs, cplBytes int) {
	reqTLPs = ceilDiv(size, s.MRRS)
	chunk := s.MPS
	if s.RCBChunks {
		chunk = s.RCB
	}
	cplTLPs = ceilDiv(size, chunk)
	return reqTLPs, reqTLPs * s.HdrMRd, cplTLPs, size + cplTLPs*s.HdrCplD
}

// WriteGoodput is the payload bandwidth (Gb/s) of back-to-back S-byte DMA
// writes: R_tlp × S / wire.
func (s Spec) WriteGoodput(size int) float64 {
	_, wire := s.WriteWire(size)
	return s.TLPGbps() * float64(size) / float64(wire)
}

// WriteTPS is the rate of back-to-back S-byte DMA writes, per second.
func (s Spec) WriteTPS(size int) float64 {
	_, wire := s.WriteWire(size)
	return s.TLPGbps() * 1e9 / 8 / float64(wire)
}

// ReadTPS is the rate of back-to-back S-byte DMA reads, per second: the
// binding direction of min(R_tlp / cpl bytes, R_tlp / request bytes).
func (s Spec) ReadTPS(size int) float64 {
	_, req, _, cpl := s.ReadWire(size)
	bps := s.TLPGbps() * 1e9 / 8
	return min(bps/float64(cpl), bps/float64(req))
}

// ReadGoodput is the payload bandwidth (Gb/s) of back-to-back S-byte DMA
// reads: ReadTPS × S.
func (s Spec) ReadGoodput(size int) float64 { return s.ReadTPS(size) * float64(size) * 8 / 1e9 }

// ReadWriteGoodput is the payload bandwidth per direction (Gb/s) of
// concurrent S-byte reads and S-byte writes in equal numbers: each pair puts
// the write and the read request on the upstream direction and the
// completions downstream; the busier direction binds (timing.md §1.2).
func (s Spec) ReadWriteGoodput(size int) float64 {
	_, wr := s.WriteWire(size)
	_, req, _, cpl := s.ReadWire(size)
	bps := s.TLPGbps() * 1e9 / 8
	pairs := min(bps/float64(wr+req), bps/float64(cpl))
	return pairs * float64(size) * 8 / 1e9
}

// KaliaMMIOLineRate is Kalia et al.'s write-combined MMIO rate: lines of
// `line` bytes per second at lanes × P_bw / (line + HdrMWr), with P_bw the
// per-lane raw rate (timing.md §3.1; no DLLP accounting, as in the paper).
func (s Spec) KaliaMMIOLineRate(line int) float64 {
	return s.RawGbps() * 1e9 / 8 / float64(line+s.HdrMWr)
}

// KaliaDMAReadRate is Kalia et al.'s useful DMA-read bandwidth in bytes per
// second: lanes × P_bw × C / (C + HdrCplD) for completions of C bytes.
func (s Spec) KaliaDMAReadRate(cpl int) float64 {
	return s.RawGbps() * 1e9 / 8 * float64(cpl) / float64(cpl+s.HdrCplD)
}
