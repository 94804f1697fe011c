//go:build linux

package tuntap

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// CloneDevice is the TUN/TAP clone device.
const CloneDevice = "/dev/net/tun"

// MaxNameLen is the longest interface name the kernel accepts (IFNAMSIZ
// minus the terminating NUL).
const MaxNameLen = unix.IFNAMSIZ - 1

// ErrBadName is wrapped when an interface name is empty, too long or holds
// characters the kernel rejects ('/', ':', white space).
var ErrBadName = errors.New("tuntap: bad interface name")

// CheckName validates an interface name the way the kernel's
// dev_valid_name does.
func CheckName(name string) error {
	switch {
	case name == "" || name == "." || name == "..":
		return fmt.Errorf("%w: %q", ErrBadName, name)
	case len(name) > MaxNameLen:
		return fmt.Errorf("%w: %q is longer than %d bytes", ErrBadName, name, MaxNameLen)
	}
	for _, c := range []byte(name) {
		if c == '/' || c == ':' || c <= ' ' || c == 0x7f {
			return fmt.Errorf("%w: %q contains %q", ErrBadName, name, c)
		}
	}
	return nil
}

// OpenTAP attaches to the TAP interface name, creating a non-persistent one
// when none exists (that needs CAP_NET_ADMIN; a persistent device made with
// `ip tuntap add dev NAME mode tap user U` can be attached by user U). Frames
// read from and written to the returned file are whole Ethernet frames
// without a packet-information header (IFF_NO_PI) and without FCS. The file
// is non-blocking and registered with Go's poller, so Close interrupts a
// pending Read. The name the kernel gave the device is returned as well.
func OpenTAP(name string) (*os.File, string, error) {
	if err := CheckName(name); err != nil {
		return nil, "", err
	}
	fd, err := unix.Open(CloneDevice, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, "", fmt.Errorf("tuntap: open %s: %w", CloneDevice, err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return nil, "", fmt.Errorf("%w: %v", ErrBadName, err)
	}
	ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, "", fmt.Errorf("tuntap: TUNSETIFF %q (IFF_TAP|IFF_NO_PI): %w", name, err)
	}
	// os.NewFile sees the O_NONBLOCK flag and uses the runtime poller.
	return os.NewFile(uintptr(fd), CloneDevice+":"+ifr.Name()), ifr.Name(), nil
}

// Flags returns the interface flags (IFF_UP, IFF_RUNNING, ...) of name.
func Flags(name string) (uint16, error) {
	s, ifr, err := ifreqSocket(name)
	if err != nil {
		return 0, err
	}
	defer unix.Close(s)
	if err := unix.IoctlIfreq(s, unix.SIOCGIFFLAGS, ifr); err != nil {
		return 0, fmt.Errorf("tuntap: SIOCGIFFLAGS %q: %w", name, err)
	}
	return ifr.Uint16(), nil
}

// SetUp sets IFF_UP on name (like `ip link set NAME up`). It does nothing
// when the interface is already up, so an unprivileged user can use a
// device an administrator prepared.
func SetUp(name string) error {
	s, ifr, err := ifreqSocket(name)
	if err != nil {
		return err
	}
	defer unix.Close(s)
	if err := unix.IoctlIfreq(s, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("tuntap: SIOCGIFFLAGS %q: %w", name, err)
	}
	flags := ifr.Uint16()
	if flags&unix.IFF_UP != 0 {
		return nil
	}
	ifr.SetUint16(flags | unix.IFF_UP)
	if err := unix.IoctlIfreq(s, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("tuntap: SIOCSIFFLAGS %q up: %w", name, err)
	}
	return nil
}

// ifreqSocket opens the datagram socket the interface ioctls go through.
func ifreqSocket(name string) (int, *unix.Ifreq, error) {
	if err := CheckName(name); err != nil {
		return -1, nil, err
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return -1, nil, fmt.Errorf("%w: %v", ErrBadName, err)
	}
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, nil, fmt.Errorf("tuntap: socket: %w", err)
	}
	return s, ifr, nil
}

// FlagUp is IFF_UP.
const FlagUp = unix.IFF_UP

// FlagRunning is IFF_RUNNING: the interface is operational (carrier on and
// the kernel's link-watch work has activated its queueing discipline).
const FlagRunning = unix.IFF_RUNNING
