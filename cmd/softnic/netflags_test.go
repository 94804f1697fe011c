package main

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/wallclock"
	"github.com/softnic/softnic/wire"
)

// Test addresses (TEST-NET-1): they exist only inside these tests.
var (
	testIP   = netip.MustParseAddr("192.0.2.1")
	testPeer = netip.MustParseAddr("192.0.2.2")
	peerMAC  = [6]byte{0x02, 0x00, 0xc0, 0x00, 0x02, 0x02}
)

// newTestNet is the NIC of the flags o on a fake transport.
func newTestNet(t *testing.T, o netOpts) (*wallclock.Net, *wire.MemTransport, *bytes.Buffer) {
	t.Helper()
	if o.ip == "" {
		o.ip = testIP.String()
	}
	if o.lead == 0 {
		o.lead = wallclock.DefaultLead
	}
	tr := wire.NewMemTransport(1024)
	var stderr bytes.Buffer
	cfg, err := o.config(1<<20, &stderr)
	require.NoError(t, err)
	cfg.Transport = tr
	r, err := openNet(o, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { r.Close(); tr.Close() })
	return r, tr, &stderr
}

// Each flag error names its flag.
func TestNetOptsRejectsBadFlags(t *testing.T) {
	tests := []struct {
		name string
		o    netOpts
		err  string
	}{
		{"no IP", netOpts{}, `--ip "": need an IPv4 address`},
		{"IPv6", netOpts{ip: "2001:db8::1"}, "need an IPv4 address"},
		{"bad MAC", netOpts{ip: "192.0.2.1", mac: "02:00"}, "02:00"},
		{"negative lead", netOpts{ip: "192.0.2.1", lead: -time.Second}, "--lead -1s is negative"},
		{"lead past the timers", netOpts{ip: "192.0.2.1", lead: 600 * time.Millisecond}, "--lead 600ms: at most 10ms"},
		{"memory too small", netOpts{ip: "192.0.2.1", memSize: 4096}, "--mem 4096 is smaller than"},
		{"bad profile", netOpts{ip: "192.0.2.1", profile: "no-such-profile"}, "no such profile"},
		{"bad fault plan", netOpts{ip: "192.0.2.1", faults: "/nonexistent/plan.json"}, "--faults: "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.o.config(1<<20, &bytes.Buffer{})
			require.ErrorContains(t, err, tc.err)
		})
	}
	// A multicast MAC passes the flag parser; the port refuses it.
	o := netOpts{ip: "192.0.2.1", mac: "01:00:5e:00:00:01"}
	cfg, err := o.config(1<<20, &bytes.Buffer{})
	if err == nil {
		cfg.Transport = wire.NewMemTransport(1024)
		_, err = openNet(o, cfg)
	}
	require.Error(t, err, "multicast MAC")

	_, err = openRealNet(netOpts{ip: "192.0.2.1"}, 0, &bytes.Buffer{})
	require.ErrorContains(t, err, "--wire is required")
	_, err = openRealNet(netOpts{ip: "192.0.2.1", wire: "udp:nonsense"}, 0, &bytes.Buffer{})
	require.ErrorIs(t, err, wire.ErrBadWireSpec)
}

// The header lines: the profile unless --quiet.
func TestOpenNetPrintsProfile(t *testing.T) {
	_, _, stderr := newTestNet(t, netOpts{})
	require.Contains(t, stderr.String(), "softnic: profile ")
	_, _, stderr = newTestNet(t, netOpts{quiet: true})
	require.Empty(t, stderr.String(), "--quiet")
}
