package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSmallMaxInlineProfile: on a profile whose device.caps.max_inline is
// below what the tools used to ask unconditionally (256 B for perf's and
// stat's QPs, 512 B for the walk's), every command still creates its QPs:
// perf asks max_inline_data 0 unless -I says otherwise (perftest's bandwidth
// tests do), stat asks 0, trace asks the device's maximum, and an inline
// request over it is a usage error naming the limit.
func TestSmallMaxInlineProfile(t *testing.T) {
	prof := editedProfile(t, `"max_inline": 512`, `"max_inline": 64`)

	for _, c := range []struct {
		name string
		args []string
		code int
		want string // in stdout (code 0) or stderr
	}{
		{"trace", []string{"trace"}, 0, "total post → CQE"},
		{"trace inline", []string{"trace", "--inline", "--size", "64"}, 0, "total post → CQE"},
		{"trace inline over the device", []string{"trace", "--inline", "--size", "128"}, 2, "max inline data is 64 bytes"},
		{"trace send", []string{"trace", "--op", "send"}, 0, "total post → CQE"},
		{"perf write_bw", []string{"perf", "write_bw", "-n", "20"}, 0, " Max inline data : 0[B]"},
		{"perf send_bw", []string{"perf", "send_bw", "-n", "20"}, 0, " Max inline data : 0[B]"},
		{"perf read_bw -I 0", []string{"perf", "read_bw", "-n", "20", "-I", "0"}, 0, "RDMA_Read BW Test"},
		{"perf write_bw -I 32", []string{"perf", "write_bw", "-n", "20", "-I", "32", "-s", "16"}, 0, " Max inline data : 32[B]"},
		{"perf write_lat cut to the device", []string{"perf", "write_lat", "-n", "20"}, 0, " Max inline data : 64[B]"},
		{"perf send_bw -I over the device", []string{"perf", "send_bw", "-n", "20", "-I", "128"}, 2, "max inline data is 64 bytes"},
		{"stat", []string{"stat", "-n", "10"}, 0, "rx_write_requests 10"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(append(c.args, "--profile", prof), &out, &errb)
			require.Equal(t, c.code, code, "stdout:\n%s\nstderr:\n%s", out.String(), errb.String())
			if c.code == 0 {
				require.Contains(t, out.String(), c.want)
			} else {
				require.Contains(t, errb.String(), c.want)
			}
		})
	}
}

// TestPerfOneSGE: perf's QPs ask one SGE, as perftest's do (MAX_SEND_SGE
// 1): with four, a 64 B WRITE WQE took two WQEBBs and `write_bw -t 128` on
// a device with max_qp_wr 255 failed in create_qp (256 WQEBBs).
func TestPerfOneSGE(t *testing.T) {
	prof := editedProfile(t, `"max_qp_wr": 32768`, `"max_qp_wr": 255`)
	for _, test := range []string{"write_bw", "read_bw"} {
		out, errs, code := runPerfCmd(t, test, "-n", "300", "-t", "128", "--profile", prof)
		require.Equal(t, 0, code, "%s: %s", test, errs)
		require.Contains(t, out, " TX depth        : 128")
	}
	// A receive queue deeper than the device's is still refused, with the limit.
	_, errs, code := runPerfCmd(t, "send_bw", "-n", "300", "--profile", prof)
	require.NotEqual(t, 0, code)
	require.Contains(t, errs, "max_recv_wr 300 > device 255")
}

// editedProfile writes the built-in default profile with old replaced by
// new (which must be in it) to a temporary file and returns its path.
func editedProfile(t *testing.T, old, new string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "profile", "data", "cx5-gen3x16.json"))
	require.NoError(t, err)
	edited := strings.Replace(string(raw), old, new, 1)
	require.NotEqual(t, string(raw), edited, "the built-in profile has %s", old)
	prof := filepath.Join(t.TempDir(), "edited.json")
	require.NoError(t, os.WriteFile(prof, []byte(edited), 0o644))
	return prof
}
