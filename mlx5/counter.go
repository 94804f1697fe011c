package mlx5

// WQECounter is a wrap-safe 16-bit WQE/WQEBB counter, in the style of gVisor's
// seqnum: comparisons look at the signed distance, so they survive wrap.
type WQECounter uint16

// Add returns c+n mod 2^16.
func (c WQECounter) Add(n int) WQECounter { return c + WQECounter(n) }

// Dist is the number of steps from c forward to d (0..65535).
func (c WQECounter) Dist(d WQECounter) int { return int(uint16(d - c)) }

// Diff is the signed distance d-c in -32768..32767.
func (c WQECounter) Diff(d WQECounter) int { return int(int16(d - c)) }

// Before reports whether c comes before d.
func (c WQECounter) Before(d WQECounter) bool { return c.Diff(d) > 0 }

// InRange reports whether c is in [lo, lo+n).
func (c WQECounter) InRange(lo WQECounter, n int) bool { return lo.Dist(c) < n }
