package wqefetch

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/softnic/softnic/mlx5"
	"github.com/stretchr/testify/require"
)

// decodeOne builds one WQE at counter 0, rings its doorbell (a correct
// doorbell whatever the edit did to the ring copy) and returns what the
// sink got.
func decodeOne(t *testing.T, op mlx5.Opcode, ds int, edit func(b []byte)) *rig {
	t.Helper()
	v := newEnv(t, 32)
	db := v.put(0, op, ds, edit)
	binary.BigEndian.PutUint16(db[1:3], 0)
	binary.BigEndian.PutUint32(db[4:8], qpn<<8|uint32(ds))
	require.NoError(t, v.e.Doorbell(0, v.q, db))
	v.eng.Run(0)
	require.Len(t, v.s.got, 1)
	return v
}

// atomicWQE fills ctrl + raddr + atomic + data segments (ds-3 of them).
func atomicWQE(swapAdd, compare uint64, dataLen uint32) func(b []byte) {
	return func(b []byte) {
		mlx5.RaddrSeg(b[16:]).Encode(&mlx5.RaddrFields{RAddr: 0xa000, RKey: 0x77})
		if len(b) >= 48 {
			mlx5.AtomicSeg(b[32:]).Encode(swapAdd, compare)
		}
		for off := 48; off+16 <= len(b); off += 16 {
			mlx5.DataSeg(b[off:]).Encode(&mlx5.DataFields{ByteCount: dataLen, LKey: 0x66, Addr: 0x3000})
		}
	}
}

func TestDecodeAtomics(t *testing.T) {
	cases := []struct {
		name    string
		op      mlx5.Opcode
		ds      int
		edit    func(b []byte)
		want    error // nil: valid
		atomic  AtomicArgs
		sges    int
		length  uint64
		hasAtom bool
	}{
		{"valid CMP_SWAP", mlx5.OpAtomicCS, 4, atomicWQE(0x1111, 0x2222, 8), nil, AtomicArgs{SwapAdd: 0x1111, Compare: 0x2222}, 1, 8, true},
		{"valid FETCH_ADD ignores the stale compare field", mlx5.OpAtomicFA, 4, atomicWQE(5, 0xdeadbeef, 8), nil, AtomicArgs{SwapAdd: 5}, 1, 8, true},
		{"length is the device's check", mlx5.OpAtomicCS, 4, atomicWQE(1, 2, 16), nil, AtomicArgs{SwapAdd: 1, Compare: 2}, 1, 16, true},
		{"CMP_SWAP without atomic segment", mlx5.OpAtomicCS, 2, atomicWQE(1, 2, 8), ErrBadDS, AtomicArgs{}, 0, 0, false},
		{"FETCH_ADD without raddr", mlx5.OpAtomicFA, 1, nil, ErrBadDS, AtomicArgs{}, 0, 0, false},
		{"FETCH_ADD without data segment", mlx5.OpAtomicFA, 3, atomicWQE(1, 0, 8), ErrBadDS, AtomicArgs{}, 0, 0, true},
		{"CMP_SWAP with two data segments", mlx5.OpAtomicCS, 5, atomicWQE(1, 2, 4), ErrBadDS, AtomicArgs{}, 0, 0, true},
		{"inline data on CMP_SWAP", mlx5.OpAtomicCS, 4, func(b []byte) {
			atomicWQE(1, 2, 8)(b)
			mlx5.InlineSeg(b[48:]).SetLen(8)
		}, ErrBadSegment, AtomicArgs{}, 0, 0, true},
		{"inline data on FETCH_ADD", mlx5.OpAtomicFA, 4, func(b []byte) {
			atomicWQE(1, 0, 8)(b)
			mlx5.InlineSeg(b[48:]).SetLen(12)
		}, ErrBadSegment, AtomicArgs{}, 0, 0, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := decodeOne(t, c.op, c.ds, c.edit)
			w := v.s.got[0].w
			if c.want != nil {
				require.Equal(t, StateInvalid, w.State)
				require.True(t, errors.Is(w.Err, c.want), "got %v", w.Err)
				require.Equal(t, uint64(1), v.ctr.Value(CtrWQEInvalid))
				return
			}
			require.Equal(t, StateValid, w.State, "%v", w.Err)
			require.Equal(t, c.hasAtom, w.HasAtomic)
			require.Equal(t, c.atomic, w.Atomic)
			require.True(t, w.HasRaddr)
			require.Equal(t, mlx5.RaddrFields{RAddr: 0xa000, RKey: 0x77}, w.Raddr)
			require.Len(t, w.SGEs, c.sges)
			require.Equal(t, mlx5.DataFields{ByteCount: uint32(c.length), LKey: 0x66, Addr: 0x3000}, w.SGEs[0])
			require.Equal(t, c.length, w.Length)
			require.False(t, w.IsInline)
		})
	}
}

// TestDecodeInlineFlag pins down how a data area whose first byte_count has
// bit 31 (MLX5_INLINE_SEG) set is read. A ConnectX takes it as an inline
// segment: there is no data pointer with byte_count >= 2^31. So a WRITE
// whose single "data segment" has byte_count 0x80000000|n, n <= 12, is a
// well-formed 16-byte inline segment carrying n bytes (its lkey and address
// bytes); with n > 12 it is malformed. Refusing SGEs of 2^31 bytes or more
// is the provider's job at post time.
func TestDecodeInlineFlag(t *testing.T) {
	dataSeg := func(off int, bc uint32) func(b []byte) {
		return func(b []byte) {
			if off == 32 {
				writeWQE(b)
			}
			mlx5.DataSeg(b[off:]).Encode(&mlx5.DataFields{ByteCount: bc, LKey: 0x66, Addr: 0x2000})
		}
	}
	inline := func(off int, payload string) func(b []byte) {
		return func(b []byte) {
			if off == 32 {
				writeWQE(b)
			}
			mlx5.InlineSeg(b[off:]).SetLen(uint32(len(payload)))
			copy(b[off+4:], payload)
		}
	}
	lkeyAddr := []byte{0, 0, 0, 0x66, 0, 0, 0, 0, 0, 0, 0x20, 0x00}
	cases := []struct {
		name   string
		op     mlx5.Opcode
		ds     int
		edit   func(b []byte)
		want   error  // nil: valid
		inl    []byte // valid inline payload (nil: data pointers)
		length uint64
	}{
		// The reported case: the provider meant a data pointer of
		// 0x80000008 bytes; the NIC reads an 8-byte inline segment.
		{"WRITE data segment 0x80000000|8 reads as 8 inline bytes", mlx5.OpRDMAWrite, 3, dataSeg(32, mlx5.InlineFlag|8), nil, lkeyAddr[:8], 8},
		{"WRITE data segment 0x80000000|12 fills the DS exactly", mlx5.OpRDMAWrite, 3, dataSeg(32, mlx5.InlineFlag|12), nil, lkeyAddr, 12},
		{"WRITE data segment 0x80000000|0 is an empty inline segment", mlx5.OpRDMAWrite, 3, dataSeg(32, mlx5.InlineFlag), nil, []byte{}, 0},
		{"WRITE data segment 0x80000000|13 needs more than DS leaves", mlx5.OpRDMAWrite, 3, dataSeg(32, mlx5.InlineFlag|13), ErrBadSegment, nil, 0},
		{"WRITE data segment 0xffffffff", mlx5.OpRDMAWrite, 3, dataSeg(32, 0xffffffff), ErrBadSegment, nil, 0},
		{"SEND data segment 0x80000000|8 reads as inline", mlx5.OpSend, 2, dataSeg(16, mlx5.InlineFlag|8), nil, lkeyAddr[:8], 8},
		{"data pointer of 0x7fffffff bytes is not inline", mlx5.OpRDMAWrite, 3, dataSeg(32, 0x7fffffff), nil, nil, 0x7fffffff},
		{"genuine 28-byte inline WRITE", mlx5.OpRDMAWrite, 4, inline(32, "0123456789abcdefghijklmnopqr"), nil, []byte("0123456789abcdefghijklmnopqr"), 28},
		{"inline padded by a whole spare DS", mlx5.OpRDMAWrite, 4, inline(32, "abcd"), ErrBadSegment, nil, 0},
		{"inline longer than the WQE", mlx5.OpSend, 3, inline(16, "0123456789abcdefghijklmnopqrstuv"), ErrBadSegment, nil, 0},
		{"bit 31 on a second data segment", mlx5.OpSend, 3, func(b []byte) {
			mlx5.DataSeg(b[16:]).Encode(&mlx5.DataFields{ByteCount: 8, LKey: 1, Addr: 2})
			mlx5.DataSeg(b[32:]).Encode(&mlx5.DataFields{ByteCount: mlx5.InlineFlag | 8, LKey: 1, Addr: 2})
		}, ErrBadSegment, nil, 0},
		{"bit 31 on a READ", mlx5.OpRDMARead, 3, dataSeg(32, mlx5.InlineFlag|8), ErrBadSegment, nil, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := decodeOne(t, c.op, c.ds, c.edit)
			w := v.s.got[0].w
			if c.want != nil {
				require.Equal(t, StateInvalid, w.State)
				require.True(t, errors.Is(w.Err, c.want), "got %v", w.Err)
				return
			}
			require.Equal(t, StateValid, w.State, "%v", w.Err)
			require.Equal(t, c.length, w.Length)
			if c.inl != nil {
				require.True(t, w.IsInline)
				require.Equal(t, string(c.inl), string(w.Inline))
				require.Empty(t, w.SGEs)
				return
			}
			require.False(t, w.IsInline)
			require.Len(t, w.SGEs, 1)
			require.Equal(t, uint32(c.length), w.SGEs[0].ByteCount)
		})
	}
}

// TestDecodeMaxDS: a 63-DS WQE spans 16 basic blocks (1024 bytes, more
// than its 1008 meaningful bytes) and must decode, not panic.
func TestDecodeMaxDS(t *testing.T) {
	for _, ds := range []int{60, 61, 62, 63} {
		v := decodeOne(t, mlx5.OpSend, ds, sendFill(ds, 7))
		w := v.s.got[0].w
		require.Equal(t, StateValid, w.State, "DS %d: %v", ds, w.Err)
		require.Equal(t, mlx5.WQEBBs(ds), w.BBs)
		require.Len(t, w.Bytes, ds*16)
		require.Len(t, w.SGEs, ds-1)
		require.Equal(t, uint64((ds-1)*ds/2), w.Length)
	}
}
