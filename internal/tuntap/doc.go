// Package tuntap is the operating-system plumbing for Linux TAP devices:
// attaching to (or creating) a TAP interface through /dev/net/tun with the
// TUNSETIFF ioctl (IFF_TAP|IFF_NO_PI, Documentation/networking/tuntap.rst)
// and bringing an interface up with SIOCGIFFLAGS/SIOCSIFFLAGS (netdevice(7)).
// It is the only place outside shm that talks to the kernel through
// golang.org/x/sys; package wire builds its tap: transport on it.
package tuntap
