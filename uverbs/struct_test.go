package uverbs

import (
	"errors"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every byte of every struct belongs to exactly one member, so no field
// can be forgotten by Encode or overlap another.
func TestLayoutsCoverEveryByte(t *testing.T) {
	require.Len(t, registry, len(layouts))
	for i, l := range layouts {
		t.Run(l.C, func(t *testing.T) {
			owner := make([]string, l.Size)
			for _, m := range l.Members {
				for b := m.Offset; b < m.Offset+m.Width; b++ {
					require.Empty(t, owner[b], "byte %d of %s in both %s and %s", b, l.C, owner[b], m.C)
					owner[b] = m.C
				}
			}
			for b, o := range owner {
				require.NotEmpty(t, o, "byte %d of %s belongs to no member", b, l.C)
			}
			require.Equal(t, l.Size, registry[i]().Size())
		})
	}
}

// fill writes a distinct non-zero value into every non-reserved byte of a
// struct's encoding, and zero into reserved and padding bytes.
func fill(l Layout) []byte {
	b := make([]byte, l.Size)
	for _, m := range l.Members {
		if strings.HasPrefix(m.Kind, "rsv") || strings.HasPrefix(m.Kind, "pad") {
			continue
		}
		if strings.HasPrefix(m.Kind, "st:") {
			for _, n := range layouts {
				if n.Go == m.Kind[3:] {
					copy(b[m.Offset:], fill(n))
				}
			}
			continue
		}
		for k := 0; k < m.Width; k++ {
			b[m.Offset+k] = byte(m.Offset + k + 1)
		}
	}
	return b
}

// Decode then Encode gives the same bytes back, for every struct, with a
// value in every byte: a wrong offset or width in the generated code shows.
func TestRoundTrip(t *testing.T) {
	for i, l := range layouts {
		t.Run(l.C, func(t *testing.T) {
			in := fill(l)
			s := registry[i]()
			require.NoError(t, s.Decode(in))
			out := make([]byte, l.Size+3)
			n, err := s.Encode(out)
			require.NoError(t, err)
			require.Equal(t, l.Size, n)
			require.Equal(t, in, out[:n])
			require.Equal(t, []byte{0, 0, 0}, out[n:], "Encode wrote past Size")
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	cases := []struct {
		name  string
		s     Struct
		in    []byte
		want  error
		errno syscall.Errno
	}{
		{"empty", new(CreateCQ), nil, ErrTruncated, syscall.ENOSPC},
		{"one_short", new(CreateCQ), make([]byte, CreateCQSize-1), ErrTruncated, syscall.ENOSPC},
		{"reserved", new(CreateCQ), append(make([]byte, 28), 0, 0, 1, 0), ErrReserved, syscall.EINVAL},
		{"nested_reserved", new(ModifyQP), func() []byte { b := make([]byte, ModifyQPSize); b[32+22] = 1; return b }(), ErrReserved, syscall.EINVAL},
		{"mlx5_reserved", new(MLX5AllocUcontextReqV2), func() []byte { b := make([]byte, 32); b[17] = 1; return b }(), ErrReserved, syscall.EINVAL},
		{"ok_longer", new(CreateCQ), make([]byte, 100), nil, 0},
		{"pad_ignored", new(RXECreateCQResp), func() []byte { b := make([]byte, 16); b[12] = 0xff; return b }(), nil, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.s.Decode(c.in)
			if c.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, c.want)
			require.ErrorIs(t, err, c.errno)
			var fe *FormatError
			require.True(t, errors.As(err, &fe))
		})
	}
	var nested *FormatError
	b := make([]byte, ModifyQPSize)
	b[32+22] = 1
	require.True(t, errors.As(new(ModifyQP).Decode(b), &nested))
	require.Equal(t, 54, nested.Offset, "offset of alt_dest.reserved within ib_uverbs_modify_qp")
}

func TestEncodeShortBuffer(t *testing.T) {
	for i, l := range layouts {
		n, err := registry[i]().Encode(make([]byte, l.Size-1))
		require.Zero(t, n)
		require.ErrorIs(t, err, ErrShortBuffer, l.C)
	}
}

func TestEncodeAllocs(t *testing.T) {
	b := make([]byte, 64)
	q := MLX5CreateQP{BufAddr: 0x1000, DBAddr: 0x2000, SQWQECount: 64, RQWQECount: 16, RQWQEShift: 4}
	var d MLX5CreateQP
	require.Zero(t, testing.AllocsPerRun(100, func() {
		_, _ = q.Encode(b)
		_ = d.Decode(b)
	}))
	require.Equal(t, q, d)
}
