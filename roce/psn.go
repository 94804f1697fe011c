package roce

// PSN is a 24-bit packet sequence number. Arithmetic wraps modulo 2^24 and
// comparisons are serial-number comparisons over a 2^23 half space, as rxe's
// psn_compare does (rocev2.md §4.1).
type PSN uint32

// PSNMask keeps the 24 valid bits.
const PSNMask = 0xFFFFFF

// Add returns p+n modulo 2^24; n may be negative.
func (p PSN) Add(n int) PSN { return PSN(uint32(p)+uint32(n)) & PSNMask }

// Next returns p+1 modulo 2^24.
func (p PSN) Next() PSN { return p.Add(1) }

// Diff returns the signed distance p-q in [-2^23, 2^23): positive when p is
// after q.
func (p PSN) Diff(q PSN) int32 { return int32((uint32(p)-uint32(q))<<8) >> 8 }

// Sub returns p-n modulo 2^24.
func (p PSN) Sub(n int) PSN { return p.Add(-n) }

// Before reports whether p comes before q.
func (p PSN) Before(q PSN) bool { return p.Diff(q) < 0 }

// After reports whether p comes after q.
func (p PSN) After(q PSN) bool { return p.Diff(q) > 0 }

// InWindow reports whether p is in [first, first+size) modulo 2^24.
func (p PSN) InWindow(first PSN, size uint32) bool {
	return (uint32(p)-uint32(first))&PSNMask < size
}

// Valid reports whether p fits in 24 bits.
func (p PSN) Valid() bool { return p <= PSNMask }
