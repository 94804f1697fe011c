//go:build linux

package wire_test

import (
	"bytes"
	"encoding/binary"
	"net"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/internal/tuntap"
	"github.com/softnic/softnic/wire"
)

// requireTAP skips unless TAP devices and network namespaces can be used.
func requireTAP(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("TAP test needs root (CAP_NET_ADMIN)")
	}
	if _, err := os.Stat(tuntap.CloneDevice); err != nil {
		t.Skipf("no %s: %v", tuntap.CloneDevice, err)
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("no ip(8)")
	}
}

// inPrivateNetns moves the calling goroutine's OS thread into a new network
// namespace for the rest of the test, so devices and addresses created there
// never touch the host's. The thread is discarded when the test goroutine
// ends (it stays locked).
func inPrivateNetns(t *testing.T) {
	t.Helper()
	runtime.LockOSThread()
	if err := syscall.Unshare(syscall.CLONE_NEWNET); err != nil {
		t.Skipf("unshare(CLONE_NEWNET): %v", err)
	}
}

// ip runs ip(8) from this (locked) thread, so it acts in its namespace.
func ip(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	require.NoError(t, err, "ip %v: %s", args, out)
}

// TestTAPExchangesFramesWithTheKernel attaches a TAP in a private namespace,
// gives the kernel side 192.0.2.254/24 and asks it who-has that address:
// the request goes in through the TAP and the kernel's reply comes out.
func TestTAPExchangesFramesWithTheKernel(t *testing.T) {
	requireTAP(t)
	inPrivateNetns(t)
	tap, err := wire.OpenTAP("sntest0")
	require.NoError(t, err)
	defer tap.Close()
	require.Equal(t, "sntest0", tap.Name())
	require.Equal(t, "tap:sntest0", tap.String())
	flags, err := tuntap.Flags("sntest0")
	require.NoError(t, err)
	require.NotZero(t, flags&tuntap.FlagUp, "OpenTAP brings the interface up")
	ip(t, "addr", "add", "192.0.2.254/24", "dev", "sntest0")

	ourMAC := []byte{0x02, 0x00, 0xc0, 0x00, 0x02, 0x01}
	req := make([]byte, 42)
	copy(req[0:6], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	copy(req[6:12], ourMAC)
	binary.BigEndian.PutUint16(req[12:], 0x0806)
	a := req[14:]
	binary.BigEndian.PutUint16(a[0:], 1)
	binary.BigEndian.PutUint16(a[2:], 0x0800)
	a[4], a[5] = 6, 4
	binary.BigEndian.PutUint16(a[6:], 1)
	copy(a[8:14], ourMAC)
	copy(a[14:18], net.IPv4(192, 0, 2, 1).To4())
	copy(a[24:28], net.IPv4(192, 0, 2, 254).To4())

	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	require.NoError(t, tap.Send(req))
	for {
		select {
		case f, ok := <-tap.Frames():
			require.True(t, ok)
			// Skip the kernel's own chatter (IPv6 router solicitations, ...).
			if len(f) >= 42 && binary.BigEndian.Uint16(f[12:]) == 0x0806 && binary.BigEndian.Uint16(f[20:]) == 2 {
				require.Equal(t, ourMAC, f[0:6], "reply to our MAC")
				require.True(t, bytes.Equal(f[28:32], net.IPv4(192, 0, 2, 254).To4()), "sender is the kernel's address")
				require.NotZero(t, tap.Stats().TxFrames)
				require.NotZero(t, tap.Stats().RxFrames)
				return
			}
		case <-tick.C:
			require.NoError(t, tap.Send(req)) // the interface may still have been settling
		case <-deadline:
			t.Fatalf("no ARP reply from the kernel; stats %+v", tap.Stats())
		}
	}
}

func TestTAPCloseRemovesTheDevice(t *testing.T) {
	requireTAP(t)
	inPrivateNetns(t)
	tap, err := wire.OpenTAP("sntest1")
	require.NoError(t, err)
	require.NoError(t, tap.Close())
	select {
	case _, ok := <-tap.Frames():
		require.False(t, ok)
	case <-time.After(5 * time.Second):
		t.Fatal("reader did not stop")
	}
	_, err = tuntap.Flags("sntest1")
	require.Error(t, err, "a non-persistent TAP disappears with its last file")
	require.Error(t, tap.Send(make([]byte, 60)))
}

func TestTAPOpenErrors(t *testing.T) {
	_, err := wire.OpenTAP("bad/name")
	require.ErrorIs(t, err, tuntap.ErrBadName)
	_, err = wire.OpenTAP("")
	require.ErrorIs(t, err, tuntap.ErrBadName)
}
