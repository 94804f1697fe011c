//go:build !linux

package tuntap

import (
	"errors"
	"os"
)

// CloneDevice is the TUN/TAP clone device (Linux only).
const CloneDevice = "/dev/net/tun"

// MaxNameLen is the longest interface name.
const MaxNameLen = 15

// FlagUp is IFF_UP.
const FlagUp = 1

// ErrBadName is wrapped when an interface name is not valid.
var ErrBadName = errors.New("tuntap: bad interface name")

// ErrUnsupported is returned on systems without Linux TAP devices.
var ErrUnsupported = errors.New("tuntap: TAP devices need Linux")

// CheckName validates an interface name.
func CheckName(name string) error {
	if name == "" || len(name) > MaxNameLen {
		return ErrBadName
	}
	return nil
}

// OpenTAP is not supported here.
func OpenTAP(name string) (*os.File, string, error) { return nil, "", ErrUnsupported }

// Flags is not supported here.
func Flags(name string) (uint16, error) { return 0, ErrUnsupported }

// SetUp is not supported here.
func SetUp(name string) error { return ErrUnsupported }

// FlagRunning is IFF_RUNNING.
const FlagRunning = 0x40
