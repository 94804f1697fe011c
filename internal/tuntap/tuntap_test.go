//go:build linux

package tuntap_test

import (
	"os"
	"runtime"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/internal/tuntap"
)

func TestCheckName(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"tap0", true},
		{"softnic-tap-01", true},
		{"a234567890abcde", true}, // 15 bytes: the limit
		{"a234567890abcdef", false},
		{"", false},
		{".", false},
		{"..", false},
		{"a/b", false},
		{"a:b", false},
		{"a b", false},
		{"a\tb", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tuntap.CheckName(tc.name)
			if tc.ok {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, tuntap.ErrBadName)
			}
		})
	}
}

// TestOpenTAP creates a TAP in a private network namespace (root only),
// brings it up and sees the flags change; closing it removes it.
func TestOpenTAP(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_NET_ADMIN)")
	}
	if _, err := os.Stat(tuntap.CloneDevice); err != nil {
		t.Skipf("no %s", tuntap.CloneDevice)
	}
	runtime.LockOSThread() // the thread is discarded with the test goroutine
	if err := syscall.Unshare(syscall.CLONE_NEWNET); err != nil {
		t.Skipf("unshare: %v", err)
	}
	f, name, err := tuntap.OpenTAP("tuntest0")
	require.NoError(t, err)
	require.Equal(t, "tuntest0", name)
	fl, err := tuntap.Flags(name)
	require.NoError(t, err)
	require.Zero(t, fl&tuntap.FlagUp, "a new TAP is down")
	require.NoError(t, tuntap.SetUp(name))
	require.NoError(t, tuntap.SetUp(name), "idempotent")
	fl, err = tuntap.Flags(name)
	require.NoError(t, err)
	require.NotZero(t, fl&tuntap.FlagUp)
	require.NoError(t, f.Close())
	_, err = tuntap.Flags(name)
	require.Error(t, err, "gone with its file")
	require.Error(t, tuntap.SetUp("nosuchif0"))
	_, _, err = tuntap.OpenTAP("bad/name")
	require.ErrorIs(t, err, tuntap.ErrBadName)
}
