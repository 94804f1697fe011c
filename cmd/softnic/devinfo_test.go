package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/device"
	"github.com/softnic/softnic/profile"
)

// runCLI runs one softnic command line in process.
func runCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return out.String(), errb.String(), code
}

func field(t *testing.T, out, name string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^\t+` + regexp.QuoteMeta(name) + `:\t+(.*)$`).FindStringSubmatch(out)
	require.NotNil(t, m, "no %s line in\n%s", name, out)
	return m[1]
}

func TestDevinfo(t *testing.T) {
	out, _, code := runCLI(t, "devinfo")
	require.Equal(t, 0, code)
	require.Contains(t, out, "hca_id:\tsoftnic0\n")
	require.Contains(t, out, "hca_id:\tsoftnic1\n")
	require.Equal(t, "InfiniBand (0)", field(t, out, "transport"))
	require.Equal(t, "16.35.1012", field(t, out, "fw_ver"))
	require.Equal(t, "0x02c9", field(t, out, "vendor_id"))
	require.Equal(t, "4119", field(t, out, "vendor_part_id"))
	require.Equal(t, "PORT_ACTIVE (4)", field(t, out, "state"))
	require.Equal(t, "4096 (5)", field(t, out, "active_mtu"))
	require.Equal(t, "Ethernet", field(t, out, "link_layer"))
	require.NotContains(t, out, "max_qp_wr", "caps only with -v")

	// -v: the caps are the profile's caps, which the device enforces.
	for _, name := range profile.Names() {
		t.Run(name, func(t *testing.T) {
			p, _ := profile.Get(name)
			out, _, code := runCLI(t, "devinfo", "-v", "-d", "softnic1", "--profile", name)
			require.Equal(t, 0, code)
			require.NotContains(t, out, "softnic0")
			c := p.Device.Caps
			require.Equal(t, fmt.Sprint(c.MaxQP), field(t, out, "max_qp"))
			require.Equal(t, fmt.Sprint(c.MaxQPWR), field(t, out, "max_qp_wr"))
			require.Equal(t, fmt.Sprint(c.MaxSGE), field(t, out, "max_sge"))
			require.Equal(t, fmt.Sprint(c.MaxCQ), field(t, out, "max_cq"))
			require.Equal(t, fmt.Sprint(c.MaxCQE), field(t, out, "max_cqe"))
			require.Equal(t, fmt.Sprintf("0x%x", c.MaxMsgSize), field(t, out, "max_mr_size"))
			require.Equal(t, fmt.Sprint(c.MaxInline), field(t, out, "max_inline_data"))
			require.Equal(t, fmt.Sprint(c.MaxRdAtom), field(t, out, "max_qp_rd_atom"))
			require.Equal(t, "ATOMIC_HCA (1)", field(t, out, "atomic_cap"))
			require.Equal(t, fmt.Sprint(c.VendorPartID), field(t, out, "vendor_part_id"))
			require.Equal(t, "0000:0000:0000:0000:0000:ffff:c000:0202, RoCE v2", field(t, out, "GID[  0]"))
			require.Equal(t, "0000:0000:0000:0000:0000:ffff:c000:0202, RoCE v2", field(t, out, "GID[  1]"), "index 1 is the GID too: modify_qp takes sgid 0 and 1")
			require.Equal(t, "2", field(t, out, "gid_tbl_len"))
			speed := map[string]string{"cx5-gen3x16": "25.0 Gbps (32)", "cx6-gen4x16": "50.0 Gbps (64)", "cx7-gen5x16": "100.0 Gbps (128)", "pciebench-gen3x8": "14.0 Gbps (16)"}[name]
			require.Equal(t, speed, field(t, out, "active_speed"))
		})
	}

	out, _, code = runCLI(t, "devinfo", "-l")
	require.Equal(t, 0, code)
	require.Equal(t, "2 HCAs found:\n\tsoftnic0\n\tsoftnic1\n", out)
	_, errOut, code := runCLI(t, "devinfo", "-d", "mlx5_9")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "IB device 'mlx5_9' wasn't found")
	_, _, code = runCLI(t, "devinfo", "--help")
	require.Equal(t, 0, code)
	// A --profile of no profile and no file is a bad flag value: exit 2
	// (docs/cli.md), as for every command; it was 1.
	_, errOut, code = runCLI(t, "devinfo", "--profile", "nope")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "no such profile")
}

func TestStat(t *testing.T) {
	out, _, code := runCLI(t, "stat", "--op", "write", "-n", "5", "--size", "4096", "--mtu", "1024")
	require.Equal(t, 0, code)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2)
	require.True(t, strings.HasPrefix(lines[0], "link softnic0/1 rx_write_requests 0 "), lines[0])
	require.Contains(t, lines[0], " sent_pkts 20 ")
	require.True(t, strings.HasPrefix(lines[1], "link softnic1/1 rx_write_requests 5 "), lines[1])
	require.NotContains(t, out, "doorbells", "softnic's own counters only with --all")

	// More SENDs than the receive queue holds: the responder polls each
	// receive, so its slots come back (200 > the RQ's 64).
	out, _, code = runCLI(t, "stat", "--op", "send", "-n", "200")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, " rcvd_pkts 200")

	// A lost WRITE packet shows where the Linux counters show it.
	plan := writePlan(t, "drop.json", dropMiddle)
	out, _, code = runCLI(t, "stat", "--op", "write", "-n", "2", "--size", "4096", "--faults", plan, "--json", "--all")
	require.Equal(t, 0, code)
	// rdma -j statistic show (iproute2 rdma/stat.c): one line, an array
	// of one flat object per port, "ifname" and "port" first, then each
	// counter by its name in the kernel's order.
	require.True(t, strings.HasPrefix(out, `[{"ifname":"softnic0","port":1,"rx_write_requests":`), out)
	require.Equal(t, 1, strings.Count(strings.TrimSpace(out), "\n")+1, "one line")
	var links []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &links))
	require.Len(t, links, 2)
	counter := func(l int, name string) uint64 { // absent: 0 (--all omits its zero counters)
		if _, ok := links[l][name]; !ok {
			return 0
		}
		v, ok := links[l][name].(float64)
		require.True(t, ok, "link %d: %s is %T, want a number", l, name, links[l][name])
		return uint64(v)
	}
	for _, name := range device.LinuxHWCounters {
		_, ok := links[0][name]
		require.True(t, ok, "%s is a key of the link's object", name)
	}
	require.Equal(t, "softnic1", links[1]["ifname"])
	require.Positive(t, counter(0, "packet_seq_err")+counter(0, "local_ack_timeout_err"), "%v", links[0])
	require.Positive(t, counter(1, "out_of_sequence"), "%v", links[1])
	require.Positive(t, counter(0, "doorbells")+counter(0, "blueflame_writes"), "--all adds softnic's counters")

	for _, bad := range [][]string{{"--op", "cas"}, {"-n", "-1"}, {"extra"}} {
		_, _, code := runCLI(t, append([]string{"stat"}, bad...)...)
		require.NotEqual(t, 0, code, "%v", bad)
	}
	_, _, code = runCLI(t, "stat", "--help")
	require.Equal(t, 0, code)
}

// TestStatRefusesBadUsage: bad usage is refused before any device runs,
// exit 2 with the reason: -n has perf's bound (2^24; 99999999999 ran for a
// day), the MTU message names the five MTUs as perf's and trace's do.
func TestStatRefusesBadUsage(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"-n past 2^24", []string{"-n", "99999999999"}, "-n 99999999999 out of range 0..16777216 operations"},
		{"-n one past 2^24", []string{"-n", "16777217"}, "out of range 0..16777216"},
		{"-n negative", []string{"-n", "-1"}, "invalid value"},
		{"MTU not one of the five", []string{"--mtu", "300"}, "--mtu 300 is not one of 256, 512, 1024, 2048, 4096"},
		{"MTU zero", []string{"--mtu", "0"}, "--mtu 0 is not one of 256, 512, 1024, 2048, 4096"},
		{"unknown op", []string{"--op", "cas"}, `--op "cas": want write, read or send`},
		{"size too large", []string{"--size", "2147483648"}, "--size 2147483648 out of range"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, errOut, code := runCLI(t, append([]string{"stat"}, c.args...)...)
			require.Equal(t, 2, code, errOut)
			require.Contains(t, errOut, c.want)
		})
	}
}

func TestProfilesCommand(t *testing.T) {
	out, _, code := runCLI(t, "profiles")
	require.Equal(t, 0, code)
	for _, n := range profile.Names() {
		require.Contains(t, out, n)
	}
	require.Contains(t, out, "113.70 Gb/s")
	out, _, code = runCLI(t, "profiles", "cx7-gen5x16")
	require.Equal(t, 0, code)
	require.Regexp(t, `device.pcie.gen +5 +ConnectX-7`, out)
	bad := writePlan(t, "bad.json", `{"pcie":{"lanes":0}}`)
	_, errOut, code := runCLI(t, "profiles", bad)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "field device.pcie.lanes")
	_, errOut, code = runCLI(t, "trace", "--profile", bad)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "field device.pcie.lanes", "no panic: a field error")
}

// A message of a million packets outlasts testbed.Wait's three polls of
// the provider's progress budget with every packet still on its way: stat
// waits while the simulation has work, so the message completes (260 MiB
// at MTU 256 is the 1014 MiB at MTU 1024 that used to stop "idle").
func TestStatLongMessage(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		rx   string
	}{
		{"write of 1064960 packets", []string{"--op", "write", "--size", "272629760", "--mtu", "256"}, "link softnic1/1 rx_write_requests 1 "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := runCLI(t, append([]string{"stat", "-n", "1"}, tc.args...)...)
			require.Equal(t, 0, code, errOut)
			require.Contains(t, out, tc.rx)
			require.Contains(t, out, " rcvd_pkts 1064960")
		})
	}
}
