//go:build linux

package wire

import (
	"encoding/binary"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// cmsg builds one control message as the kernel lays it out.
func cmsg(level, typ int32, data []byte) []byte {
	b := make([]byte, syscall.CmsgSpace(len(data)))
	l := syscall.CmsgLen(len(data))
	if cmsgLenSize == 8 {
		binary.NativeEndian.PutUint64(b, uint64(l))
	} else {
		binary.NativeEndian.PutUint32(b, uint32(l))
	}
	binary.NativeEndian.PutUint32(b[cmsgLenSize:], uint32(level))
	binary.NativeEndian.PutUint32(b[cmsgLenSize+4:], uint32(typ))
	copy(b[cmsgAlign(syscall.SizeofCmsghdr):], data)
	return b
}

func TestKernelDrops(t *testing.T) {
	drops := binary.NativeEndian.AppendUint32(nil, 1234)
	ovfl := cmsg(syscall.SOL_SOCKET, syscall.SO_RXQ_OVFL, drops)
	tos := cmsg(syscall.IPPROTO_IP, syscall.IP_TOS, []byte{0x10})
	tests := []struct {
		name string
		oob  []byte
		want uint32
		ok   bool
	}{
		{"alone", ovfl, 1234, true},
		{"after another message", append(append([]byte{}, tos...), ovfl...), 1234, true},
		{"unpadded last message", ovfl[:syscall.CmsgLen(4)], 1234, true},
		{"other message only", tos, 0, false},
		{"empty", nil, 0, false},
		{"truncated header", ovfl[:syscall.SizeofCmsghdr-1], 0, false},
		{"length past the buffer", ovfl[:syscall.CmsgLen(4)-1], 0, false},
		{"short data", cmsg(syscall.SOL_SOCKET, syscall.SO_RXQ_OVFL, []byte{1, 2}), 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := kernelDrops(tc.oob)
			require.Equal(t, tc.ok, ok)
			require.Equal(t, tc.want, got)
		})
	}
	require.Zero(t, testing.AllocsPerRun(100, func() { kernelDrops(ovfl) }))
}
