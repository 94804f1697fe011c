package shm

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRegionAllocReadWrite(t *testing.T) {
	r, err := New("test", 10000, 0x10000000)
	require.NoError(t, err)
	defer r.Close()
	require.Equal(t, 12288, r.Size())
	require.Equal(t, uint64(0x10000000), r.Base())

	a, err := r.Alloc(100, 64)
	require.NoError(t, err)
	require.Zero(t, a%64)
	b, err := r.Alloc(4096, 4096)
	require.NoError(t, err)
	require.Zero(t, b%4096)
	require.NoError(t, r.Write(a, []byte("hello")))
	got := make([]byte, 5)
	require.NoError(t, r.Read(a, got))
	require.Equal(t, "hello", string(got))

	s, err := r.Slice(b, 4096)
	require.NoError(t, err)
	s[0] = 7
	require.Equal(t, byte(7), r.Bytes()[b-r.Base()])

	require.NoError(t, r.Free(a))
	require.NoError(t, r.Free(b))
	require.Zero(t, r.InUse())
	require.ErrorIs(t, r.Free(a), ErrBadArg)
	c, err := r.Alloc(12288, 8)
	require.NoError(t, err, "frees coalesce back into one span")
	require.Equal(t, r.Base(), c)
}

func TestRegionBounds(t *testing.T) {
	r, err := New("test", 4096, 0x1000)
	require.NoError(t, err)
	defer r.Close()
	cases := []struct {
		name string
		addr uint64
		n    int
	}{
		{"below", 0xfff, 1},
		{"past end", 0x2000, 1},
		{"straddles end", 0x1ff0, 32},
		{"huge length", 0x1000, 1 << 40},
		{"wraps", ^uint64(0) - 3, 8},
		{"negative", 0x1000, -1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := r.Slice(c.addr, c.n)
			require.True(t, errors.Is(err, ErrOutOfRange), "%v", err)
			if c.n >= 0 && c.n < 1<<20 {
				require.ErrorIs(t, r.Read(c.addr, make([]byte, c.n)), ErrOutOfRange)
				require.ErrorIs(t, r.Write(c.addr, make([]byte, c.n)), ErrOutOfRange)
			}
		})
	}
	_, err = r.Alloc(8192, 8)
	require.ErrorIs(t, err, ErrNoSpace)
	_, err = r.Alloc(8, 3)
	require.ErrorIs(t, err, ErrBadArg)
}

func TestRegionNaturalBase(t *testing.T) {
	r, err := New("test", 4096, 0)
	require.NoError(t, err)
	defer r.Close()
	require.Equal(t, uint64(uintptrOf(r.Bytes())), r.Base())
	require.GreaterOrEqual(t, r.Fd(), 0, "memfd should be available on Linux")
}

func TestAllocTop(t *testing.T) {
	r, err := New("alloctop", 1<<20, 0x100000)
	require.NoError(t, err)
	defer r.Close()
	top, err := r.AllocTop(16<<10, 4096)
	require.NoError(t, err)
	require.Equal(t, uint64(0x100000+1<<20-16<<10), top, "at the very top")
	low, err := r.Alloc(4096, 4096)
	require.NoError(t, err)
	require.Equal(t, uint64(0x100000), low, "the bottom is untouched")
	odd, err := r.AllocTop(100, 64)
	require.NoError(t, err)
	require.Zero(t, odd%64)
	require.Less(t, odd, top)
	_, err = r.AllocTop(2<<20, 8)
	require.ErrorIs(t, err, ErrNoSpace)
	_, err = r.AllocTop(8, 3)
	require.ErrorIs(t, err, ErrBadArg)
	require.NoError(t, r.Free(top))
}

// TestAllocHugeSizes asks Alloc and AllocTop for sizes near the largest
// int: rounding them up to 8 must not wrap negative (a negative size fits
// every span, and carving it panicked); each is refused with ErrNoSpace.
func TestAllocHugeSizes(t *testing.T) {
	r, err := New("test", 4096, 0x1000)
	require.NoError(t, err)
	defer r.Close()
	const maxInt = int(^uint(0) >> 1)
	cases := []struct {
		name string
		size int
	}{
		{"max_int", maxInt},
		{"max_int_minus_6", maxInt - 6},
		{"max_int_minus_7", maxInt - 7},
		{"max_int_minus_8", maxInt - 8},
		{"2^62", 1 << 62},
		{"region_plus_1", 4097},
	}
	for _, c := range cases {
		for _, f := range []struct {
			name  string
			alloc func(int, int) (uint64, error)
		}{{"alloc", r.Alloc}, {"alloc_top", r.AllocTop}} {
			t.Run(c.name+"/"+f.name, func(t *testing.T) {
				_, err := f.alloc(c.size, 8)
				require.ErrorIs(t, err, ErrNoSpace)
				require.Zero(t, r.InUse())
			})
		}
	}
}

// TestNewBadSizes: sizes New cannot map are ErrBadArg, including those
// whose rounding up to 4 KiB would wrap negative (which reached mmap as a
// negative length).
func TestNewBadSizes(t *testing.T) {
	const maxInt = int(^uint(0) >> 1)
	cases := []struct {
		name string
		size int
	}{
		{"zero", 0},
		{"negative", -1},
		{"max_int", maxInt},
		{"max_int_minus_4094", maxInt - 4094}, // the smallest size whose rounding wraps
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := New("test", c.size, 0x1000)
			if err == nil {
				r.Close()
			}
			require.ErrorIs(t, err, ErrBadArg)
		})
	}
}
