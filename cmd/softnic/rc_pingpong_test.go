package main

import (
	"bytes"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/softnic/softnic/provider"
	"github.com/stretchr/testify/require"
)

func TestPingpongHandshakeMessage(t *testing.T) {
	d := ppDest{lid: 0, qpn: 0x11, psn: 0xabcdef, gid: netip.MustParseAddr("::ffff:192.0.2.1").As16()}
	msg := d.encode()
	// 52 bytes: what rdma-core's "%04x:%06x:%06x:%s" + NUL makes, the GID in
	// raw byte order (gid_to_wire_gid prints each 32-bit word big-endian).
	require.Len(t, msg, 52)
	require.Equal(t, "0000:000011:abcdef:00000000000000000000ffffc0000201\x00", string(msg))
	got, err := parsePPDest(msg)
	require.NoError(t, err)
	require.Equal(t, d, got)
	require.Equal(t, "  local address:  LID 0x0000, QPN 0x000011, PSN 0xabcdef, GID ::ffff:192.0.2.1", d.String("local address: "))
	require.Equal(t, "  remote address: LID 0x0000, QPN 0x000000, PSN 0x000000, GID ::", ppDest{}.String("remote address:"),
		"a peer without -g sends a zero GID, printed as inet_ntop does")

	bad := []string{
		"0000:000011:abcdef", // no GID
		"0000:000011:abcdef:00000000000000000000ffffc00002",    // short GID
		"0000:xyz:abcdef:00000000000000000000ffffc0000201",     // bad QPN
		"0000:000011:abcdef:0000000000000000000gffffc0000201",  // bad hex digit
		"0000:000011:abcdef:00000000000000000000ffffc0000201:", // extra field
	}
	for _, b := range bad {
		_, err := parsePPDest(append([]byte(b), 0))
		require.Error(t, err, "%q", b)
	}
}

func TestPingpongArgs(t *testing.T) {
	o, err := parsePingpongArgs([]string{"--wire", "udp:127.0.0.1:1,127.0.0.1:2", "--ip", "192.0.2.1", "-g", "1", "-s", "64"}, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, "", o.host, "no host: server")
	require.Equal(t, 18515, o.port)
	require.Equal(t, 64, o.size)
	require.Equal(t, 1000, o.iters)
	require.Equal(t, 500, o.rxDepth)
	require.Equal(t, 1024, o.mtu)
	require.Equal(t, 1, o.gidIdx)
	require.NoError(t, o.validate())

	// getopt permutes: the host may come before the flags.
	o, err = parsePingpongArgs([]string{"192.0.2.200", "-n", "5", "--port", "20000", "--gid-idx", "0"}, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, "192.0.2.200", o.host)
	require.Equal(t, 5, o.iters)
	require.Equal(t, 20000, o.port)
	require.Equal(t, 0, o.gidIdx)

	_, err = parsePingpongArgs([]string{"a", "b"}, &bytes.Buffer{})
	require.ErrorContains(t, err, "more than one host")

	invalid := map[string][]string{
		"odp":       {"-o"},
		"ts":        {"-t"},
		"iodp":      {"-O"},
		"prefetch":  {"--prefetch"},
		"dm":        {"-j"},
		"new_send":  {"--new_send"},
		"mtu":       {"-m", "1500"},
		"gid index": {"-g", "3"},
		"ib port":   {"-i", "2"},
		"size":      {"-s", "0"},
		"rx depth":  {"-r", "0"},
		"iters":     {"-n", "0"},
		"port":      {"-p", "70000"},
	}
	for name, args := range invalid {
		t.Run(name, func(t *testing.T) {
			o, err := parsePingpongArgs(args, &bytes.Buffer{})
			require.NoError(t, err)
			require.Error(t, o.validate())
		})
	}
	var stderr bytes.Buffer
	require.Equal(t, 2, runRCPingpong([]string{"-o"}, &bytes.Buffer{}, &stderr))
	require.Contains(t, stderr.String(), "not supported")
}

func TestGIDHex(t *testing.T) {
	g := netip.MustParseAddr("::ffff:192.0.2.1").As16()
	require.Equal(t, "00000000000000000000ffffc0000201", gidHex(g))
	back, err := parseGIDHex("00000000000000000000FFFFC0000201")
	require.NoError(t, err)
	require.Equal(t, g, back)
	ip, ok := gidIPv4(back)
	require.True(t, ok)
	require.Equal(t, netip.MustParseAddr("192.0.2.1"), ip)
	_, ok = gidIPv4(netip.MustParseAddr("fe80::1").As16())
	require.False(t, ok, "a link-local GID is not RoCEv2/IPv4")
	_, err = parseGIDHex("00")
	require.Error(t, err)
}

// TestPingpongNICFlagsRefused: the flags that describe a NIC of this
// process (address, memory, pacing, capture, profile, faults, checked
// mode) are refused for a daemon's device and for a kernel device, which
// have NICs of their own; before, --mem and --lead went unused without a
// word.
func TestPingpongNICFlagsRefused(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		want string // "" for no error
	}{
		{"socket_mem", []string{"-d", "softnic0", "--socket", "/tmp/x.sock", "--mem", "4095"}, "--mem describes a NIC on a wire"},
		{"socket_lead", []string{"--socket", "/tmp/x.sock", "--lead", "5ms"}, "--lead describes a NIC on a wire"},
		{"socket_several", []string{"--socket", "/tmp/x.sock", "--ip", "192.0.2.1", "--profile", "cx6-gen4x16", "--check"},
			"--ip, --check, --profile describe"},
		{"socket_quiet", []string{"--socket", "/tmp/x.sock", "--quiet"}, ""},
		{"kernel_mem", []string{"-d", "rxe0", "--mem", "1048576"}, "--mem describes a NIC that softnic emulates: -d rxe0 is a kernel device"},
		{"kernel_faults", []string{"-d", "mlx5_0", "--faults", "plan.json"}, "--faults describes a NIC"},
		{"kernel_plain", []string{"-d", "rxe0"}, ""},
		{"wire_all", []string{"--wire", "udp:127.0.0.1:1,127.0.0.1:2", "--ip", "192.0.2.1", "--mem", "4194304", "--lead", "1ms"}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(provider.SocketEnv, "")
			o, err := parsePingpongArgs(c.args, &bytes.Buffer{})
			require.NoError(t, err)
			err = o.validate()
			if c.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, c.want)
		})
	}
	var stderr bytes.Buffer
	require.Equal(t, 2, runRCPingpong([]string{"--socket", "/tmp/x.sock", "--mem", "4095"}, &bytes.Buffer{}, &stderr))
	require.Contains(t, stderr.String(), "sizes its host memory from -s")
}

// TestPingpongSocketEnv: $SOFTNIC_SOCKET stands in for --socket for a
// device of the daemon, never for a kernel device (rxe0 would be refused
// as a kernel device given a socket) nor beside --wire.
func TestPingpongSocketEnv(t *testing.T) {
	t.Setenv(provider.SocketEnv, "/tmp/softnic-test.sock")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-d", "softnic1"}, "/tmp/softnic-test.sock"},
		{[]string{"-d", "rxe0"}, ""},
		{[]string{"-d", "mlx5_0"}, ""},
		{[]string{"--wire", "udp:127.0.0.1:1,127.0.0.1:2", "--ip", "192.0.2.1"}, ""},
	} {
		o, err := parsePingpongArgs(c.args, &bytes.Buffer{})
		require.NoError(t, err, "%v", c.args)
		require.Equal(t, c.want, o.socket, "%v", c.args)
		if c.want == "" && o.net.wire == "" {
			require.NoError(t, o.validate(), "%v: a kernel device with the variable set", c.args)
		}
	}
}

// TestPingpongNoDeviceNamesTheWays: rc_pingpong with no wire, no socket
// and no kernel device names all three ways to give it one (its usage
// lists them), not --wire alone.
func TestPingpongNoDeviceNamesTheWays(t *testing.T) {
	t.Setenv(provider.SocketEnv, "")
	var stdout, stderr bytes.Buffer
	require.NotEqual(t, 0, run([]string{"rc_pingpong", "-g", "1"}, &stdout, &stderr))
	for _, w := range []string{"--wire", "--socket", "-d rxe0"} {
		require.Contains(t, stderr.String(), w)
	}
}

// TestPingpongChk: -c is ibv_rc_pingpong's --chk (it used to be refused):
// the client marks the first byte of each page of its buffer before it
// sends, the server checks the marks in what it received after the run
// and prints "invalid data in page N" for each page without one (and,
// unlike ibv_rc_pingpong, then fails). A client without -c sends its
// unmarked 0x7b buffer, so a checking server finds every page invalid.
func TestPingpongChk(t *testing.T) {
	if testing.Short() {
		t.Skip("real sockets")
	}
	size := 2*ppPage + 100 // three pages, the last one partly
	for _, c := range []struct {
		name           string
		server, client []string
		sCode          int
		invalid        []string
	}{
		{"both check", []string{"-c"}, []string{"--chk"}, 0, nil},
		{"client marks only", nil, []string{"-c"}, 0, nil},
		{"server checks an unmarked buffer", []string{"-c"}, nil, 1,
			[]string{"invalid data in page 0\n", "invalid data in page 1\n", "invalid data in page 2\n"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			common := []string{"rc_pingpong", "-g", "1", "-n", "5", "-s", strconv.Itoa(size), "-p", strconv.Itoa(freeTCPPort(t)), "--quiet", "--timeout", "10s"}
			sr, cr := runWirePair(t, common, c.server, c.client)
			if cr.code != 0 || sr.code != c.sCode {
				t.Fatalf("server exit %d (want %d): %s%s\nclient exit %d: %s", sr.code, c.sCode, sr.out, sr.err, cr.code, cr.err)
			}
			if got := strings.Count(sr.out, "invalid data in page"); got != len(c.invalid) {
				t.Errorf("%d invalid pages reported, want %d:\n%s", got, len(c.invalid), sr.out)
			}
			for _, l := range c.invalid {
				if !strings.Contains(sr.out, l) {
					t.Errorf("server output lacks %q:\n%s", l, sr.out)
				}
			}
			if c.sCode != 0 && !strings.Contains(sr.err, "-c: the received buffer is invalid in 3 of 3 pages") {
				t.Errorf("server's error: %s", sr.err)
			}
			if strings.Contains(cr.out, "invalid data") {
				t.Errorf("the client checked:\n%s", cr.out)
			}
		})
	}
}
