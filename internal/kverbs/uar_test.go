package kverbs

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestUARStores(t *testing.T) {
	const base = 5 * 4096
	line := make([]byte, 128)
	for i := range line {
		line[i] = byte(i)
	}
	cases := []struct {
		name    string
		do      func(u *UAR)
		off     int
		want    []byte
		dropped uint64
	}{
		{"Store64 at the doorbell", func(u *UAR) { u.Store64(base+0x800, 0x0807060504030201) }, 0x800, []byte{1, 2, 3, 4, 5, 6, 7, 8}, 0},
		{"Store32", func(u *UAR) { u.Store32(base+0x20, 0xddccbbaa) }, 0x20, []byte{0xaa, 0xbb, 0xcc, 0xdd}, 0},
		{"BlueFlame copy of two lines", func(u *UAR) { u.StoreLines(base+0x900, line[:64], line[64:]) }, 0x900, line, 0},
		{"below the page", func(u *UAR) { u.Store64(base-8, 1) }, 0, make([]byte, 8), 1},
		{"past the page", func(u *UAR) { u.Store64(base+4096, 1) }, 4088, make([]byte, 8), 1},
		{"straddling the end", func(u *UAR) { u.Store64(base+4092, 1) }, 4088, make([]byte, 8), 1},
		{"misaligned", func(u *UAR) { u.Store64(base+0x801, 1) }, 0x800, make([]byte, 16), 1},
		{"lines past the page", func(u *UAR) { u.StoreLines(base+4032, line[:64], line[64:]) }, 4032, line[:64], 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mem := make([]byte, 4096)
			u := NewUAR(mem, base)
			c.do(u)
			u.Flush()
			require.Equal(t, c.want, mem[c.off:c.off+len(c.want)])
			require.Equal(t, c.dropped, u.Dropped())
			require.Zero(t, u.Load32(base), "write-only")
		})
	}
}

func TestUARCovers(t *testing.T) {
	const base = 5 * 4096
	u := NewUAR(make([]byte, 4096), base)
	for _, c := range []struct {
		name string
		off  uint64
		n    int
		want bool
	}{
		{"whole page", base, 4096, true},
		{"both BlueFlame buffers", base + 0x800, 512, true},
		{"last byte", base + 4095, 1, true},
		{"empty at the end", base + 4096, 0, true},
		{"one past the end", base + 4095, 2, false},
		{"below", base - 8, 8, false},
		{"past", base + 4096, 8, false},
		{"negative length", base, -1, false},
		{"wrapping offset", ^uint64(0) - 3, 8, false},
	} {
		t.Run(c.name, func(t *testing.T) { require.Equal(t, c.want, u.Covers(c.off, c.n)) })
	}
}
