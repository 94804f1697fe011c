package trace

import (
	"bufio"
	"io"
	"slices"
	"strconv"

	"github.com/softnic/softnic/sim"
)

// appendFixed appends v/scale as a decimal with exactly decimals fraction
// digits, computed from the integer (no float rounding): with scale 1000
// and 3 decimals, 1234567 ps is "1234.567" ns. scale must be 10^decimals.
func appendFixed(b []byte, v int64, scale int64, decimals int) []byte {
	u := uint64(v)
	if v < 0 {
		b = append(b, '-')
		u = uint64(-v) // correct for MinInt64 too: two's complement
	}
	b = strconv.AppendUint(b, u/uint64(scale), 10)
	if decimals == 0 {
		return b
	}
	b = append(b, '.')
	frac := strconv.AppendUint(nil, u%uint64(scale), 10)
	for i := len(frac); i < decimals; i++ {
		b = append(b, '0')
	}
	return append(b, frac...)
}

// psToNS formats a picosecond count as nanoseconds with 3 decimals.
func psToNS(ps int64) string { return string(appendFixed(nil, ps, 1000, 3)) }

// timeline returns the indexes of events sorted for display: by start
// time, longer (enclosing) events first, then recording order.
func timeline(events []Event) []int {
	idx := make([]int, len(events))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		ea, eb := &events[a], &events[b]
		if ea.Start != eb.Start {
			return cmpTime(ea.Start, eb.Start)
		}
		return cmpTime(eb.End, ea.End)
	})
	return idx
}

func cmpTime(a, b sim.Time) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// WriteText writes events as a readable timeline, one line per event,
// sorted by start time (enclosing stages before the stages they contain):
//
//	lvl   node component name                     start_ns         end_ns       dur_ns   bytes  tlps      qpn   flow detail
//	         0 dma       dma_read                  100.000        600.000      500.000    2048     8 0x000012      7
//	WARN     1 roce      roce_bad_psn             1010.000       1010.000        0.000       -     -        -      - psn 0x000005
//
// Times are nanoseconds with picosecond precision (3 decimals, exact). A
// zero bytes/TLPs/QPN/flow prints as "-". Output depends only on events.
func WriteText(w io.Writer, events []Event) error {
	bw := bufio.NewWriter(w)
	line := textRow(nil, "lvl ", "node", "component", "name", "start_ns", "end_ns", "dur_ns", "bytes", "tlps", "qpn", "flow")
	bw.Write(append(line, " detail\n"...))
	for _, i := range timeline(events) {
		ev := &events[i]
		lvl := "    "
		if ev.Level == Warn {
			lvl = "WARN"
		}
		q, f := "-", "-"
		if ev.QPN != 0 {
			q = qpnHex(ev.QPN)
		}
		if ev.Flow != 0 {
			f = strconv.FormatUint(ev.Flow, 10)
		}
		line = textRow(line[:0], lvl, strconv.Itoa(ev.Node), ev.Component, ev.Name,
			psToNS(int64(ev.Start)), psToNS(int64(ev.End)), psToNS(int64(ev.End-ev.Start)),
			dashZero(int64(ev.Bytes)), dashZero(int64(ev.TLPs)), q, f)
		if ev.Detail != "" {
			line = append(line, ' ')
			line = appendOneLine(line, ev.Detail)
		}
		line = append(line, '\n')
		bw.Write(line)
	}
	return bw.Flush()
}

// textRow appends the fixed columns of one timeline line (or the header).
func textRow(b []byte, lvl, node, comp, name, start, end, dur, bytes, tlps, qpn, flow string) []byte {
	b = append(b, lvl...)
	b = padLeft(b, node, 6)
	b = append(b, ' ')
	b = padRight(b, comp, 9)
	b = append(b, ' ')
	b = padRight(b, name, 18)
	b = padLeft(b, start, 15)
	b = padLeft(b, end, 15)
	b = padLeft(b, dur, 13)
	b = padLeft(b, bytes, 8)
	b = padLeft(b, tlps, 6)
	b = padLeft(b, qpn, 9)
	return padLeft(b, flow, 7)
}

// qpnHex formats a 24-bit QPN as 0x plus 6 hex digits.
func qpnHex(q uint32) string {
	s := strconv.FormatUint(uint64(q), 16)
	for len(s) < 6 {
		s = "0" + s
	}
	return "0x" + s
}

func dashZero(v int64) string {
	if v == 0 {
		return "-"
	}
	return strconv.FormatInt(v, 10)
}

// padLeft right-aligns s in a field of width; a value that does not fit
// gets one separating space and widens its line.
func padLeft(b []byte, s string, width int) []byte {
	for i := len(s); i < width; i++ {
		b = append(b, ' ')
	}
	if len(s) >= width {
		b = append(b, ' ')
	}
	return append(b, s...)
}

func padRight(b []byte, s string, width int) []byte {
	b = append(b, s...)
	for i := len(s); i < width; i++ {
		b = append(b, ' ')
	}
	return b
}

// appendOneLine appends s with newlines and tabs shown as \n and \t so
// every event stays on one line.
func appendOneLine(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\n':
			b = append(b, `\n`...)
		case '\r':
			b = append(b, `\r`...)
		case '\t':
			b = append(b, `\t`...)
		default:
			b = append(b, c)
		}
	}
	return b
}
