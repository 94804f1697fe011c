package main

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The seed generator's check values, as docs/howto-interop.md publishes
// them (test/interop pins the same numbers for the C peer).
func TestFillSeed(t *testing.T) {
	tests := []struct {
		seed  uint32
		first []byte
		crc   uint32
	}{
		{1, []byte{0x21, 0x01, 0xc5, 0x4f, 0xd1, 0xd0, 0x1a, 0xb2}, 0xf6cc87fe},
		{0, []byte{0x19, 0x3e, 0x3a, 0xb5, 0x1f, 0x37, 0xd0, 0xbf}, 0x1d741aea},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprint(tc.seed), func(t *testing.T) {
			b := make([]byte, 4096)
			fillSeed(b, tc.seed)
			require.Equal(t, tc.first, b[:8])
			require.Equal(t, tc.crc, crc32.ChecksumIEEE(b))
		})
	}
}

func TestParseHex(t *testing.T) {
	for in, want := range map[string]uint64{"10": 16, "0x10": 16, "0XfF": 255, "7f0000000000": 0x7f0000000000} {
		got, err := parseHex(in, 64)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "0x", "g", "-1", "1 2"} {
		_, err := parseHex(in, 64)
		require.Error(t, err, in)
	}
	_, err := parseHex("1000000", 24)
	require.Error(t, err, "25 bits")
}

func TestRDMAFlagValidation(t *testing.T) {
	base := func() rdmaOpts {
		return rdmaOpts{mtu: 1024, mrSize: 1 << 20, recvOff: -1, recvDepth: 16, gidIndex: 1, timeout: 16, retryCnt: 6, rnrRetry: 6, waitMS: 1000}
	}
	o := base()
	require.NoError(t, o.validate())
	require.Equal(t, int64(1<<19), o.recvOff, "receive area defaults to the upper half")
	bad := map[string]func(o *rdmaOpts){
		"mtu":          func(o *rdmaOpts) { o.mtu = 1500 },
		"small MR":     func(o *rdmaOpts) { o.mrSize = 4096 },
		"recv depth":   func(o *rdmaOpts) { o.recvDepth = 0 },
		"gid index":    func(o *rdmaOpts) { o.gidIndex = 2 },
		"timeout":      func(o *rdmaOpts) { o.timeout = 32 },
		"retry":        func(o *rdmaOpts) { o.retryCnt = 8 },
		"wait":         func(o *rdmaOpts) { o.waitMS = 0 },
		"recv off":     func(o *rdmaOpts) { o.recvOff = 1 << 20 },
		"psn, no qpn":  func(o *rdmaOpts) { o.remotePSN = "5" },
		"rnr retry -1": func(o *rdmaOpts) { o.rnrRetry = -1 },
	}
	for name, mod := range bad {
		t.Run(name, func(t *testing.T) {
			o := base()
			mod(&o)
			require.Error(t, o.validate())
		})
	}
}

// runRDMAInProcess runs doRDMA with a scripted stdin. The peer named by
// --wire is the discard port on loopback: nothing answers, so commands that
// need the peer time out (after --wait-ms).
func runRDMAInProcess(t *testing.T, script string, extra ...string) (string, string, error) {
	t.Helper()
	o := rdmaOpts{mtu: 1024, mrSize: 1 << 16, recvOff: -1, recvDepth: 4, gidIndex: 1, timeout: 16, retryCnt: 6, rnrRetry: 6, waitMS: 100}
	o.net = netOpts{wire: "udp:127.0.0.1:0,127.0.0.1:9", ip: "192.0.2.1", lead: defaultLead, quiet: true}
	o.net.neigh = neighFlag{{IP: testPeer, MAC: peerMAC}}
	o.remoteIP = testPeer.String()
	for i := 0; i+1 < len(extra); i += 2 {
		switch extra[i] {
		case "remote-qpn":
			o.remoteQPN = extra[i+1]
		case "psn":
			o.psn = extra[i+1]
		case "remote-ip":
			o.remoteIP = extra[i+1]
		case "qp-type":
			o.qpType = extra[i+1]
		case "qkey":
			o.qkey = extra[i+1]
		case "remote-qkey":
			o.remoteQKey = extra[i+1]
		}
	}
	var stdout, stderr bytes.Buffer
	err := doRDMA(o, strings.NewReader(script), &stdout, &stderr)
	return stdout.String(), stderr.String(), err
}

func TestRDMACommandsInProcess(t *testing.T) {
	script := strings.Join([]string{
		"REMOTE 11 2a",
		"mr",
		"sum 0 10",
		"sum fff0 10",
		"sum fff0 11",
		"bogus",
		"write 1000",
		"read 0 0 zz",
		"send 8001 1",
		"",
		"counters",
		"write 7f0000000000 1 100 1",
		"recv 1",
		"fadd 7f0000000008 1 5",
		"quit",
		"sum 0 1", // after quit: never run
	}, "\n")
	out, _, err := runRDMAInProcess(t, script, "psn", "abc")
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 13, "nothing runs after quit; output:\n%s", out)
	require.Equal(t, "LOCAL 000100 000abc 00000000000000000000ffffc0000201", lines[0])
	require.Regexp(t, `^MR 7f[0-9a-f]+ [0-9a-f]+ 10000$`, lines[1])
	require.Equal(t, fmt.Sprintf("SUM 0 10 %08x", crc32.ChecksumIEEE(make([]byte, 16))), lines[2])
	require.Equal(t, fmt.Sprintf("SUM fff0 10 %08x", crc32.ChecksumIEEE(make([]byte, 16))), lines[3])
	require.Equal(t, "ERR range beyond the MR (0x10000 bytes)", lines[4])
	require.Equal(t, "ERR unknown command bogus", lines[5])
	require.Equal(t, "ERR usage: write RADDR RKEY LEN SEED", lines[6])
	require.True(t, strings.HasPrefix(lines[7], "ERR usage: read RADDR RKEY LEN"), lines[7])
	require.Equal(t, "ERR length 0x8001 beyond the send area 0x8000", lines[8])
	// Before any traffic only the receive read-ahead has run (a doorbell-
	// record and a WQE read over PCIe, nothing on the wire); the socket
	// buffer sizes are settings.
	require.Regexp(t, `^COUNTERS dma_read_bytes=20 dma_reads=2 pcie_dma_bytes=108 pcie_dma_tlps=4( real_[rt]x_sockbuf_bytes=\d+)* rq_wqe_prefetch=1$`, lines[9], "nothing on the wire before any traffic")
	// Nobody answers: the WRITE's completion never comes, and the error
	// names what was awaited — the WR by its wr_id: the 4 receives posted
	// at start took 1..4 — and the counters (tx_packets shows the frame
	// left).
	require.Contains(t, lines[10], "ERR timed out after 100ms waiting for the RDMA_WRITE completion of wr_id 5 (counters:")
	require.Contains(t, lines[10], "tx_packets=1")
	require.Contains(t, lines[11], "ERR timed out after 100ms waiting for receive completion 1 of 1")
	require.Contains(t, lines[12], "ERR timed out after 100ms waiting for the FETCH_ADD completion of wr_id 6 (counters:",
		"each WR has its own wr_id")
}

// The fadd and cas commands parse like the others (hex, RKEY 32-bit) and
// refuse what they cannot run before posting anything.
func TestRDMAAtomicCommandParsing(t *testing.T) {
	tests := []struct {
		name, cmd, want string
	}{
		{"fadd too few", "fadd 1 2", "ERR usage: fadd RADDR RKEY ADD"},
		{"fadd too many", "fadd 1 2 3 4", "ERR usage: fadd RADDR RKEY ADD"},
		{"fadd not hex", "fadd 1 2 xyz", `ERR usage: fadd RADDR RKEY ADD ("xyz" is not a 64-bit hex number)`},
		{"fadd 65-bit add", "fadd 1 2 10000000000000000", `ERR usage: fadd RADDR RKEY ADD ("10000000000000000" is not a 64-bit hex number)`},
		{"fadd wide rkey", "fadd 7f0000000000 100000000 1", "ERR RKEY is 32-bit"},
		{"cas too few", "cas 1 2 3", "ERR usage: cas RADDR RKEY COMPARE SWAP"},
		{"cas too many", "cas 1 2 3 4 5", "ERR usage: cas RADDR RKEY COMPARE SWAP"},
		{"cas bad swap", "cas 1 2 3 0xg", `ERR usage: cas RADDR RKEY COMPARE SWAP ("0xg" is not a 64-bit hex number)`},
		{"cas wide rkey", "cas 7f0000000000 0x100000000 1 2", "ERR RKEY is 32-bit"},
	}
	var script []string
	for _, tc := range tests {
		script = append(script, tc.cmd)
	}
	out, _, err := runRDMAInProcess(t, "REMOTE 11 0\n"+strings.Join(script, "\n")+"\n")
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(out), "\n")[1:] // after LOCAL
	require.Len(t, lines, len(tests), "output:\n%s", out)
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { require.Equal(t, tc.want, lines[i]) })
	}
}

func TestRDMARemoteFromFlagsAndErrors(t *testing.T) {
	out, _, err := runRDMAInProcess(t, "sum 0 4\n", "remote-qpn", "11")
	require.NoError(t, err, "--remote-qpn skips the REMOTE line")
	require.Contains(t, out, "SUM 0 4 2144df1c")

	// A GID in the REMOTE line names the peer (here it is the static
	// neighbour), even without --remote-ip.
	out, _, err = runRDMAInProcess(t, "REMOTE 11 0 00000000000000000000ffffc0000202\nmr\n", "remote-ip", "")
	require.NoError(t, err)
	require.Contains(t, out, "MR ")

	for name, script := range map[string]string{
		"no REMOTE":    "",
		"bad REMOTE":   "REMOTE x y\n",
		"not REMOTE":   "mr\n",
		"bad GID":      "REMOTE 11 0 ffff\n",
		"link-local":   "REMOTE 11 0 fe800000000000000000000000000001\n",
		"no peer addr": "REMOTE 11 0\n",
	} {
		t.Run(name, func(t *testing.T) {
			extra := []string{}
			if name == "no peer addr" {
				extra = []string{"remote-ip", ""}
			}
			_, _, err := runRDMAInProcess(t, script, extra...)
			require.Error(t, err)
		})
	}
}

// readLines hands over every line and then the end of input.
func TestReadLines(t *testing.T) {
	ch := readLines(strings.NewReader("a\nb"))
	require.Equal(t, line{text: "a"}, <-ch)
	require.Equal(t, line{text: "b"}, <-ch)
	require.Equal(t, line{err: io.EOF}, <-ch)
}
