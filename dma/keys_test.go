package dma

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/shm"
)

const (
	allAccess = mlx5.AccessLocalWrite | mlx5.AccessRemoteWrite | mlx5.AccessRemoteRead | mlx5.AccessRemoteAtomic
)

func testKeys(t *testing.T) *Keys {
	k := NewKeys()
	require.NoError(t, k.Add(MR{Key: 0x1234, PDN: 1, Addr: 0x10000, Length: 0x1000, HCAVA: 0x7f0000000000, Access: allAccess}))
	require.NoError(t, k.Add(MR{Key: 0x2200, PDN: 1, Addr: 0x20000, Length: 0x100, HCAVA: 0x20000})) // local read only
	require.NoError(t, k.Add(MR{Key: 0x3300, PDN: 1, Addr: ^uint64(0) - 0xff, Length: 0x100, HCAVA: ^uint64(0) - 0xff, Access: allAccess}))
	return k
}

func TestKeyCheck(t *testing.T) {
	k := testKeys(t)
	tests := []struct {
		name     string
		key, pdn uint32
		va, n    uint64
		need     Access
		wantAddr uint64
		wantErr  error
	}{
		{"local read whole MR", 0x1234, 1, 0x10000, 0x1000, LocalRead, 0x10000, nil},
		{"local write inside", 0x1234, 1, 0x10800, 16, LocalWrite, 0x10800, nil},
		{"remote write by HCAVA", 0x1234, 1, 0x7f0000000100, 64, RemoteWrite, 0x10100, nil},
		{"remote read last byte", 0x1234, 1, 0x7f0000000fff, 1, RemoteRead, 0x10fff, nil},
		{"remote atomic", 0x1234, 1, 0x7f0000000008, 8, RemoteAtomic, 0x10008, nil},
		{"local read of a read-only MR", 0x2200, 1, 0x20000, 0x100, LocalRead, 0x20000, nil},
		{"MR at the top of the address space", 0x3300, 1, ^uint64(0) - 0xff, 0x100, LocalRead, ^uint64(0) - 0xff, nil},
		{"zero length skips every check", 0x9999, 7, 0, 0, RemoteWrite, 0, nil},
		{"bad key", 0x9999, 1, 0x10000, 1, LocalRead, 0, ErrBadKey},
		{"wrong PD", 0x1234, 2, 0x10000, 1, LocalRead, 0, ErrPDMismatch},
		{"below the MR", 0x1234, 1, 0xffff, 2, LocalRead, 0, ErrBounds},
		{"one past the end", 0x1234, 1, 0x10000, 0x1001, LocalRead, 0, ErrBounds},
		{"start past the end", 0x1234, 1, 0x11001, 1, LocalRead, 0, ErrBounds},
		{"va+n wraps around", 0x1234, 1, 0x10010, ^uint64(0) - 8, LocalRead, 0, ErrBounds},
		{"top MR: va+n wraps", 0x3300, 1, ^uint64(0) - 0x10, 0x20, LocalRead, 0, ErrBounds},
		{"remote access uses HCAVA, not Addr", 0x1234, 1, 0x10000, 8, RemoteRead, 0, ErrBounds},
		{"local access uses Addr, not HCAVA", 0x1234, 1, 0x7f0000000000, 8, LocalRead, 0, ErrBounds},
		{"missing local write", 0x2200, 1, 0x20000, 8, LocalWrite, 0, ErrAccess},
		{"missing remote read", 0x2200, 1, 0x20000, 8, RemoteRead, 0, ErrAccess},
		{"missing remote write", 0x2200, 1, 0x20000, 8, RemoteWrite, 0, ErrAccess},
		{"missing remote atomic", 0x2200, 1, 0x20000, 8, RemoteAtomic, 0, ErrAccess},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			addr, err := k.Check(tc.key, tc.pdn, tc.va, tc.n, tc.need)
			if tc.wantErr == nil {
				require.NoError(t, err)
				require.Equal(t, tc.wantAddr, addr)
				return
			}
			require.ErrorIs(t, err, tc.wantErr)
			var ke *KeyError
			require.ErrorAs(t, err, &ke)
			require.Equal(t, KeyError{Key: tc.key, VA: tc.va, Len: tc.n, Need: tc.need, Err: tc.wantErr}, *ke)
			require.Contains(t, err.Error(), tc.need.String())
		})
	}
}

func TestKeysAddRemove(t *testing.T) {
	k := testKeys(t)
	tests := []struct {
		name string
		mr   MR
		want error
	}{
		{"duplicate", MR{Key: 0x1234, Length: 1}, ErrKeyExists},
		{"terminator key", MR{Key: mlx5.InvalidKey, Length: 1}, ErrBadMR},
		{"Addr range wraps", MR{Key: 0x5500, Addr: ^uint64(0), Length: 2}, ErrBadMR},
		{"HCAVA range wraps", MR{Key: 0x5500, Addr: 0, HCAVA: ^uint64(0) - 1, Length: 4}, ErrBadMR},
		{"remote write without local write", MR{Key: 0x5500, Length: 1, Access: mlx5.AccessRemoteWrite}, ErrBadMR},
		{"atomic without local write", MR{Key: 0x5500, Length: 1, Access: mlx5.AccessRemoteAtomic}, ErrBadMR},
		{"remote read alone is fine", MR{Key: 0x5500, Length: 1, Access: mlx5.AccessRemoteRead}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := k.Add(tc.mr)
			if tc.want == nil {
				require.NoError(t, err)
				require.NoError(t, k.Remove(tc.mr.Key))
				return
			}
			require.ErrorIs(t, err, tc.want)
		})
	}
	require.Equal(t, 3, k.Len())
	mr, ok := k.Lookup(0x1234)
	require.True(t, ok)
	require.Equal(t, uint64(0x10000), mr.Addr)
	require.NoError(t, k.Remove(0x1234))
	_, ok = k.Lookup(0x1234)
	require.False(t, ok)
	require.ErrorIs(t, k.Remove(0x1234), ErrBadKey)
	_, err := k.Check(0x1234, 1, 0x10000, 1, LocalRead)
	require.ErrorIs(t, err, ErrBadKey)
}

func TestSyndrome(t *testing.T) {
	local := func(e error) error { return &KeyError{Key: 1, Need: LocalWrite, Err: e} }
	remote := func(e error) error { return &KeyError{Key: 1, Need: RemoteWrite, Err: e} }
	tests := []struct {
		name   string
		err    error
		want   mlx5.Syndrome
		remote bool
	}{
		{"nil", nil, 0, false},
		{"local bad key", local(ErrBadKey), mlx5.SyndLocalProt, false},
		{"local PD", local(ErrPDMismatch), mlx5.SyndLocalProt, false},
		{"local bounds", local(ErrBounds), mlx5.SyndLocalProt, false},
		{"local access", local(ErrAccess), mlx5.SyndLocalProt, false},
		{"remote bad key", remote(ErrBadKey), mlx5.SyndRemoteAccess, true},
		{"remote access", remote(ErrAccess), mlx5.SyndRemoteAccess, true},
		{"length", &LengthError{Need: 10, Have: 5}, mlx5.SyndLocalLength, false},
		{"host memory", &shm.RangeError{Op: "read"}, mlx5.SyndLocalProt, false},
		{"wrapped", errors.Join(errors.New("ctx"), remote(ErrBounds)), mlx5.SyndRemoteAccess, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, Syndrome(tc.err))
			require.Equal(t, tc.remote, IsRemote(tc.err))
		})
	}
	require.Equal(t, "access(9)", Access(9).String())
	require.Contains(t, (&LengthError{Need: 10, Have: 5}).Error(), "10 bytes do not fit 5")
}

// TestKeysInvalidate: a remote invalidate succeeds only on a key
// registered with RemoteInvalidate, in the QP's PD; afterwards every check
// of the key fails with ErrInvalidated, a second invalidate finds no key,
// and the key can still be removed.
func TestKeysInvalidate(t *testing.T) {
	cases := []struct {
		name string
		key  uint32
		pdn  uint32
		want error // nil: invalidated
	}{
		{name: "ordinary MR", key: 0x1234, pdn: 1, want: ErrNotInvalidatable},
		{name: "unknown key", key: 0x9900, pdn: 1, want: ErrBadKey},
		{name: "invalidatable, other PD", key: 0x4400, pdn: 2, want: ErrPDMismatch},
		{name: "invalidatable", key: 0x4400, pdn: 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			k := testKeys(t)
			require.NoError(t, k.Add(MR{Key: 0x4400, PDN: 1, Addr: 0x40000, Length: 0x100, HCAVA: 0x40000, Access: allAccess, RemoteInvalidate: true}))
			err := k.Invalidate(c.key, c.pdn)
			if c.want != nil {
				require.ErrorIs(t, err, c.want)
				if _, ok := k.Lookup(c.key); ok {
					_, err := k.Check(c.key, 1, 0x40000, 8, RemoteWrite)
					if c.key == 0x1234 {
						_, err = k.Check(c.key, 1, 0x7f0000000000, 8, RemoteWrite)
					}
					require.NoError(t, err, "a refused invalidate leaves the key valid")
				}
				return
			}
			require.NoError(t, err)
			for _, need := range []Access{RemoteWrite, RemoteRead, LocalWrite} {
				_, err := k.Check(c.key, c.pdn, 0x40000, 8, need)
				require.ErrorIs(t, err, ErrInvalidated, need.String())
			}
			require.ErrorIs(t, k.Invalidate(c.key, c.pdn), ErrBadKey, "already invalidated")
			require.NoError(t, k.Remove(c.key), "an invalidated key is still deregistered")
		})
	}
}
