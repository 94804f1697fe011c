// Package sim is softnic's deterministic virtual clock: integer picosecond
// time, frequencies, and a single-threaded discrete-event engine whose ties
// are broken by schedule order (DESIGN.md §4; Akita-style ps time and Freq).
package sim
