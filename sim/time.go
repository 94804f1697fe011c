package sim

import (
	"fmt"
	"math"
)

// Time is an instant on the virtual clock, in picoseconds since the start of
// the simulation. It never comes from the wall clock.
type Time int64

// Duration is a span of virtual time in picoseconds.
type Duration int64

// Units of virtual time.
const (
	Picosecond  Duration = 1
	Nanosecond           = 1000 * Picosecond
	Microsecond          = 1000 * Nanosecond
	Millisecond          = 1000 * Microsecond
	Second               = 1000 * Millisecond
)

// Never is a time later than any event.
const Never Time = math.MaxInt64

// Add returns t+d.
func (t Time) Add(d Duration) Time { return t + Time(d) }

// AddSat returns t+d, saturating at Never (or, for a negative d, at the
// earliest Time) where t+d would wrap around int64. The fault hooks use it
// for the times a fault plan adds to the clock (a delay, a timed rule's
// at_ps and for_ps), which are bounded when a plan is parsed but may come
// from a plan built in Go.
func (t Time) AddSat(d Duration) Time {
	s := t + Time(d)
	switch {
	case d > 0 && s < t:
		return Never
	case d < 0 && s > t:
		return math.MinInt64
	}
	return s
}

// Sub returns t-u.
func (t Time) Sub(u Time) Duration { return Duration(t - u) }

// NS returns t in (fractional) nanoseconds.
func (t Time) NS() float64 { return float64(t) / 1000 }

// String prints t in nanoseconds with picosecond precision.
func (t Time) String() string { return fmt.Sprintf("%.3fns", t.NS()) }

// NS returns d in (fractional) nanoseconds.
func (d Duration) NS() float64 { return float64(d) / 1000 }

// String prints d in nanoseconds with picosecond precision.
func (d Duration) String() string { return fmt.Sprintf("%.3fns", d.NS()) }

// NS converts a nanosecond count to a Duration (fractions rounded to ps).
func NS(ns float64) Duration { return Duration(math.Round(ns * 1000)) }

// Freq is a clock frequency in hertz.
type Freq float64

// Common frequency units.
const (
	Hz  Freq = 1
	KHz      = 1e3 * Hz
	MHz      = 1e6 * Hz
	GHz      = 1e9 * Hz
)

// Period is the length of one cycle, rounded to the picosecond.
func (f Freq) Period() Duration {
	if f <= 0 {
		return 0
	}
	return Duration(math.Round(1e12 / float64(f)))
}

// Cycles is the duration of n cycles at f.
func (f Freq) Cycles(n int64) Duration {
	if f <= 0 {
		return 0
	}
	return Duration(math.Round(float64(n) * 1e12 / float64(f)))
}

// BitRate is a serial data rate in bits per second.
type BitRate float64

// Common bit rates.
const (
	Mbps BitRate = 1e6
	Gbps BitRate = 1e9
)

// Serializer is BitRate.Serialize for one rate, precomputed: where the rate
// divides 8e12 (a whole number of picoseconds a byte, as every Ethernet
// and PCIe rate of the profiles does) a transfer of fewer than 2^25 bytes
// is a multiplication, else the float computation. Both give exactly the
// same result: float64(n)*8e12 is exact below 2^25 bytes (8e12 is 2^15
// times 5^12, 28 bits of mantissa), the quotient of an exact product by a
// divisor of it is exact, and so is its ceiling (TestSerializerMatches).
type Serializer struct {
	Rate      BitRate
	psPerByte int64 // 0: no whole number of picoseconds a byte
	maxN      int   // the multiplication's bound: below 2^25 and without overflow
}

// NewSerializer precomputes r's serialization.
func NewSerializer(r BitRate) Serializer {
	s := Serializer{Rate: r}
	if r >= 1 && r <= 8e12 && float64(r) == math.Trunc(float64(r)) {
		if q := int64(8e12) / int64(r); q*int64(r) == int64(8e12) {
			s.psPerByte, s.maxN = q, int(min(1<<25, math.MaxInt64/q))
		}
	}
	return s
}

// Serialize is Rate.Serialize(n).
func (s Serializer) Serialize(n int) Duration {
	if n > 0 && n < s.maxN {
		return Duration(int64(n) * s.psPerByte)
	}
	return s.Rate.Serialize(n)
}

// Serialize is the time needed to move n bytes at rate r, rounded up to the
// picosecond (so that back-to-back transfers never overlap).
func (r BitRate) Serialize(n int) Duration {
	if r <= 0 || n <= 0 {
		return 0
	}
	return Duration(math.Ceil(float64(n) * 8 * 1e12 / float64(r)))
}
