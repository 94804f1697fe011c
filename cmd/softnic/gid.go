package main

import (
	"encoding/hex"
	"fmt"
	"net/netip"

	"github.com/softnic/softnic/profile"
)

// gidHex formats a GID as 32 hex digits in raw byte order (the wire format
// of ibv_rc_pingpong's handshake and of the LOCAL line).
func gidHex(g [16]byte) string { return fmt.Sprintf("%x", g[:]) }

// parseGIDHex parses 32 hex digits in raw byte order.
func parseGIDHex(s string) ([16]byte, error) {
	var g [16]byte
	if len(s) != 32 {
		return g, fmt.Errorf("GID %q: want 32 hex digits", s)
	}
	if _, err := hex.Decode(g[:], []byte(s)); err != nil {
		return [16]byte{}, fmt.Errorf("GID %q: %w", s, err)
	}
	return g, nil
}

// gidIPv4 returns the IPv4 address of an IPv4-mapped RoCEv2 GID.
func gidIPv4(g [16]byte) (netip.Addr, bool) {
	a := netip.AddrFrom16(g)
	if !a.Is4In6() {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

func macString(m [6]byte) string {
	return fmt.Sprintf("%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5])
}

// profileLabel names a profile for a run's header: its name, and what it
// models when it says.
func profileLabel(p profile.Profile) string {
	if p.Description == "" {
		return p.Name
	}
	return p.Name + " (" + p.Description + ")"
}
