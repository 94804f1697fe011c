package interop

import (
	"hash/crc32"
	"testing"

	"github.com/stretchr/testify/require"
)

// seedBytes is the data generator of docs/howto-interop.md ("Seed
// generator"), shared by softnic rdma and verbs_peer.c: xorshift32 from SEED
// (0 stands for 0x9E3779B9), one byte (the low 8 bits) per step.
func seedBytes(seed uint32, n int) []byte {
	s := seed
	if s == 0 {
		s = 0x9E3779B9
	}
	b := make([]byte, n)
	for i := range b {
		s ^= s << 13
		s ^= s >> 17
		s ^= s << 5
		b[i] = byte(s)
	}
	return b
}

// seedCRC is the zlib crc32 that `sum` prints for n bytes from seed.
func seedCRC(seed uint32, n int) uint32 { return crc32.ChecksumIEEE(seedBytes(seed, n)) }

// TestSeedGenerator pins the check values docs/howto-interop.md publishes, so
// a change to either the document or the generator is caught.
func TestSeedGenerator(t *testing.T) {
	tests := []struct {
		name  string
		seed  uint32
		first []byte
		crc   uint32 // of the first 4096 bytes
	}{
		{"seed 1", 1, []byte{0x21, 0x01, 0xc5, 0x4f, 0xd1, 0xd0, 0x1a, 0xb2}, 0xf6cc87fe},
		{"seed 0 means 0x9E3779B9", 0, []byte{0x19, 0x3e, 0x3a, 0xb5, 0x1f, 0x37, 0xd0, 0xbf}, 0x1d741aea},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.first, seedBytes(tc.seed, 8))
			require.Equal(t, tc.crc, seedCRC(tc.seed, 4096))
		})
	}
	require.Equal(t, seedBytes(0x9E3779B9, 64), seedBytes(0, 64))
	require.Empty(t, seedBytes(7, 0))
}
