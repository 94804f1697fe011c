package main

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/wallclock"
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

// Numbers (docs/cli.md): identifiers are hex, sizes, counts, offsets and
// seeds decimal; 0x makes any field hex, a leading 0 is not octal.
func TestParseNum(t *testing.T) {
	tests := []struct {
		in   string
		hex  bool
		bits int
		want uint64
		err  string
	}{
		// decimal fields: LEN, SEED, N, OFF, ADD, COMPARE, SWAP
		{in: "10", want: 10},
		{in: "0x10", want: 16},
		{in: "0X1f", want: 31},
		{in: "010", want: 10},
		{in: "0", want: 0},
		{in: "4096", want: 4096},
		{in: "18446744073709551615", want: 1<<64 - 1},
		{in: "0xffffffffffffffff", want: 1<<64 - 1},
		{in: "-1", err: `"-1" is not a 64-bit decimal number`},
		{in: "+1", err: "not a 64-bit decimal number"},
		{in: "1x", err: `"1x" is not a 64-bit decimal number`},
		{in: "", err: `"" is not a 64-bit decimal number`},
		{in: "0x", err: `"0x" is not a 64-bit hex number`},
		{in: "ff", err: "not a 64-bit decimal number"},
		{in: "1_000", err: "not a 64-bit decimal number"},
		{in: "0b1", err: "not a 64-bit decimal number"},
		{in: "0o7", err: "not a 64-bit decimal number"},
		{in: " 1", err: "not a 64-bit decimal number"},
		{in: "18446744073709551616", err: `"18446744073709551616" does not fit in 64 bits`},
		{in: "0x10000000000000000", err: "does not fit in 64 bits"},
		{in: "4294967296", bits: 32, err: "does not fit in 32 bits"},
		{in: "4294967295", bits: 32, want: 1<<32 - 1},
		// hex fields: RADDR, RKEY, QKEY, QPN, PSN
		{in: "10", hex: true, want: 16},
		{in: "0x10", hex: true, want: 16},
		{in: "010", hex: true, want: 16},
		{in: "0XfF", hex: true, want: 255},
		{in: "7f0000000000", hex: true, want: 0x7f0000000000},
		{in: "", hex: true, err: `"" is not a 64-bit hex number`},
		{in: "0x", hex: true, err: "not a 64-bit hex number"},
		{in: "g", hex: true, err: "not a 64-bit hex number"},
		{in: "-1", hex: true, err: "not a 64-bit hex number"},
		{in: "1 2", hex: true, err: "not a 64-bit hex number"},
		{in: "0x0x1", hex: true, err: "not a 64-bit hex number"},
		{in: "1000000", hex: true, bits: 24, err: `"1000000" does not fit in 24 bits`},
		{in: "10000000000000000", hex: true, err: "does not fit in 64 bits"},
	}
	for _, tc := range tests {
		kind := "dec"
		if tc.hex {
			kind = "hex"
		}
		t.Run(kind+"/"+tc.in, func(t *testing.T) {
			bits := tc.bits
			if bits == 0 {
				bits = 64
			}
			got, err := parseNum(tc.in, tc.hex, bits)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

// The flags follow the same rule: sizes and counts decimal (0x accepted,
// no octal), identifiers hex.
func TestRDMANumberFlags(t *testing.T) {
	var u uint64
	var n int
	var i int64 = -1
	f := sizeFlagI64(&i, "mr-size/2")
	require.Equal(t, "mr-size/2", f.String(), "not given")
	for _, tc := range []struct {
		flag *decFlag
		in   string
		get  func() string
		want string
	}{
		{sizeFlagU64(&u), "010", func() string { return fmt.Sprint(u) }, "10"},
		{sizeFlagU64(&u), "0x100000", func() string { return fmt.Sprint(u) }, "1048576"},
		{sizeFlagInt(&n), "0100", func() string { return fmt.Sprint(n) }, "100"},
		{sizeFlagInt(&n), "0x10", func() string { return fmt.Sprint(n) }, "16"},
		{f, "08", func() string { return fmt.Sprint(i) }, "8"},
		{f, "0x8000", func() string { return fmt.Sprint(i) }, "32768"},
	} {
		require.NoError(t, tc.flag.Set(tc.in), tc.in)
		require.Equal(t, tc.want, tc.get(), tc.in)
		require.Equal(t, tc.want, tc.flag.String())
	}
	for _, in := range []string{"-1", "1k", "", "1e3", "0b10"} {
		require.Error(t, sizeFlagU64(&u).Set(in), in)
		require.Error(t, sizeFlagInt(&n).Set(in), in)
		require.Error(t, f.Set(in), in)
	}
	require.Error(t, sizeFlagI64(&i, "").Set("9223372036854775808"), "beyond int64")

	// Through the command line: a leading 0 is decimal, not octal (the flag
	// package's own integers would read --mr-size 0100 as 64), and
	// --recv-off 0x... is hex. (Each run fails before it reads stdin.)
	var out, errb strings.Builder
	args := []string{"rdma", "--wire", "udp:127.0.0.1:0,127.0.0.1:9", "--ip", "192.0.2.1"}
	require.Equal(t, 2, run(append(args, "--mr-size", "0100"), &out, &errb))
	require.Contains(t, errb.String(), "--mr-size 100 out of range 8192..1 GiB")
	errb.Reset()
	require.Equal(t, 2, run(append(args, "--mr-size", "0x10000", "--recv-off", "0x10000"), &out, &errb))
	require.Contains(t, errb.String(), "--recv-off 65536 must lie inside the MR (65536 bytes)")
	errb.Reset()
	require.Equal(t, 2, run(append(args, "--recv-depth", "-1"), &out, &errb))
	require.Contains(t, errb.String(), `invalid value "-1" for flag -recv-depth`)
	errb.Reset()
	require.Equal(t, 2, run(append(args, "--psn", "1x"), &out, &errb))
	require.Contains(t, errb.String(), `--psn: "1x" is not a 24-bit hex number`)
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

// TestRDMAWideIdentifiers: QPNs and PSNs are 24 bits; a wider --psn,
// --remote-qpn or --remote-psn is refused before the device starts (no
// LOCAL line), never truncated (--psn 0x1000000 printed PSN 000000).
func TestRDMAWideIdentifiers(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		err  string
	}{
		{"own PSN", []string{"--psn", "0x1000000"}, `--psn: "0x1000000" does not fit in 24 bits`},
		{"own PSN, 32 bits", []string{"--psn", "ffffffff"}, `--psn: "ffffffff" does not fit in 24 bits`},
		{"remote QPN", []string{"--remote-qpn", "0x1000000"}, `--remote-qpn: "0x1000000" does not fit in 24 bits`},
		{"remote PSN", []string{"--remote-qpn", "5", "--remote-psn", "0x1000000"}, `--remote-psn: "0x1000000" does not fit in 24 bits`},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out, errb strings.Builder
			args := append([]string{"rdma", "--wire", "udp:127.0.0.1:0,127.0.0.1:9", "--ip", "192.0.2.1", "--remote-ip", "192.0.2.2"}, c.args...)
			require.Equal(t, 2, run(args, &out, &errb))
			require.Contains(t, errb.String(), c.err)
			require.NotContains(t, out.String(), "LOCAL", "refused before the device starts")
		})
	}
	for _, c := range []struct{ name, v string }{{"24 bits", "ffffff"}, {"0x", "0xffffff"}} {
		t.Run("accepted/"+c.name, func(t *testing.T) {
			o := rdmaOpts{mtu: 1024, mrSize: 1 << 20, recvOff: -1, recvDepth: 16, gidIndex: 1, timeout: 16, retryCnt: 6, rnrRetry: 6, waitMS: 1000,
				psn: c.v, remoteQPN: c.v, remotePSN: c.v}
			require.NoError(t, o.validate())
		})
	}
}

// runRDMAInProcess runs doRDMA with a scripted stdin. The peer named by
// --wire is the discard port on loopback: nothing answers, so commands that
// need the peer time out (after --wait-ms).
func runRDMAInProcess(t *testing.T, script string, extra ...string) (string, string, error) {
	t.Helper()
	o := rdmaOpts{mtu: 1024, mrSize: 1 << 16, recvOff: -1, recvDepth: 4, gidIndex: 1, timeout: 16, retryCnt: 6, rnrRetry: 6, waitMS: 100}
	o.net = netOpts{wire: "udp:127.0.0.1:0,127.0.0.1:9", ip: "192.0.2.1", lead: wallclock.DefaultLead, quiet: true}
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
		case "faults":
			o.net.faults = extra[i+1]
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
		"sum 0 16",
		"sum 65520 0x10",
		"sum 65520 17",
		"bogus",
		"write 1000",
		"read 0 0 zz",
		"send 32769 1",
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
	require.Regexp(t, `^MR 7f[0-9a-f]+ [0-9a-f]+ 65536$`, lines[1], "the MR's length in decimal")
	require.Equal(t, fmt.Sprintf("SUM 0 16 %08x", crc32.ChecksumIEEE(make([]byte, 16))), lines[2])
	require.Equal(t, fmt.Sprintf("SUM 65520 16 %08x", crc32.ChecksumIEEE(make([]byte, 16))), lines[3], "echoed in decimal")
	require.Equal(t, "ERR range beyond the MR (65536 bytes)", lines[4])
	require.Equal(t, "ERR unknown command bogus", lines[5])
	require.Equal(t, "ERR usage: write RADDR RKEY LEN SEED", lines[6])
	require.True(t, strings.HasPrefix(lines[7], "ERR usage: read RADDR RKEY LEN"), lines[7])
	require.Equal(t, "ERR length 32769 beyond the send area 32768", lines[8])
	// Before any traffic only the receive read-ahead has run (a doorbell-
	// record read and one read of the 4 WQEs posted, 16 B each, over PCIe;
	// nothing on the wire); the socket buffer sizes are settings.
	require.Regexp(t, `^COUNTERS dma_read_bytes=68 dma_reads=2 pcie_dma_bytes=156 pcie_dma_tlps=4( real_[rt]x_sockbuf_bytes=\d+)* rq_wqe_prefetch=1$`, lines[9], "nothing on the wire before any traffic")
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

// The fadd and cas commands parse like the others (RADDR and RKEY hex,
// RKEY 32-bit; the operands decimal, or hex with 0x) and
// refuse what they cannot run before posting anything.
func TestRDMAAtomicCommandParsing(t *testing.T) {
	tests := []struct {
		name, cmd, want string
	}{
		{"fadd too few", "fadd 1 2", "ERR usage: fadd RADDR RKEY ADD"},
		{"fadd too many", "fadd 1 2 3 4", "ERR usage: fadd RADDR RKEY ADD"},
		{"fadd not a number", "fadd 1 2 xyz", `ERR usage: fadd RADDR RKEY ADD ("xyz" is not a 64-bit decimal number)`},
		{"fadd hex add without 0x", "fadd 1 2 ff", `ERR usage: fadd RADDR RKEY ADD ("ff" is not a 64-bit decimal number)`},
		{"fadd 65-bit add", "fadd 1 2 18446744073709551616", `ERR usage: fadd RADDR RKEY ADD ("18446744073709551616" does not fit in 64 bits)`},
		{"fadd 65-bit hex add", "fadd 1 2 0x10000000000000000", `ERR usage: fadd RADDR RKEY ADD ("0x10000000000000000" does not fit in 64 bits)`},
		{"fadd raddr not hex", "fadd 1g 2 3", `ERR usage: fadd RADDR RKEY ADD ("1g" is not a 64-bit hex number)`},
		{"fadd wide rkey", "fadd 7f0000000000 100000000 1", "ERR RKEY is 32-bit"},
		{"cas too few", "cas 1 2 3", "ERR usage: cas RADDR RKEY COMPARE SWAP"},
		{"cas too many", "cas 1 2 3 4 5", "ERR usage: cas RADDR RKEY COMPARE SWAP"},
		{"cas bad swap", "cas 1 2 3 0xg", `ERR usage: cas RADDR RKEY COMPARE SWAP ("0xg" is not a 64-bit hex number)`},
		{"cas negative compare", "cas 1 2 -1 0", `ERR usage: cas RADDR RKEY COMPARE SWAP ("-1" is not a 64-bit decimal number)`},
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

// A line longer than maxLine is refused with an ERR and skipped; the
// endpoint reads on (it used to end, "reading stdin: bufio.Scanner:
// token too long", taking the connection down with it).
func TestRDMALongLine(t *testing.T) {
	long := strings.Repeat("a", maxLine+1)
	tests := []struct {
		name, script string
		want         []string // after LOCAL
		err          string
	}{
		{name: "a command", script: "REMOTE 11 2a\n" + long + "\nsum 0 4\n",
			want: []string{fmt.Sprintf("ERR line of %d bytes: at most %d", maxLine+1, maxLine), "SUM 0 4 2144df1c"}},
		{name: "the last line, unterminated", script: "REMOTE 11 2a\nsum 0 4\n" + long,
			want: []string{"SUM 0 4 2144df1c", fmt.Sprintf("ERR line of %d bytes: at most %d", maxLine+1, maxLine)}},
		{name: "CRLF at the limit", script: "REMOTE 11 2a\n" + strings.Repeat(" ", maxLine-7) + "sum 0 4\r\n",
			want: []string{"SUM 0 4 2144df1c"}},
		{name: "the REMOTE line", script: "REMOTE 11 2a " + long + "\nsum 0 4\n",
			err: fmt.Sprintf("the REMOTE line: line of %d bytes: at most %d", maxLine+14, maxLine)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := runRDMAInProcess(t, tc.script)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			require.Equal(t, tc.want, lines[1:])
		})
	}
}

// TestRDMANamesRulesThatNeverFired: at the end of a run, softnic rdma
// (and rc_pingpong and perf on a wire) says which rules of its --faults
// plan never fired and how many events each matched, as perf and stat
// do in simulation. A rule for a QP the run does not have left a run on
// a real wire looking clean, as if no plan had been given.
func TestRDMANamesRulesThatNeverFired(t *testing.T) {
	plan := writePlan(t, "plan.json", `{"rules":[
		{"point":"wire.tx","action":"drop","match":{"qpn":"0x999"}},
		{"point":"wire.tx","action":"drop"}]}`)
	_, stderr, err := runRDMAInProcess(t, "REMOTE 11 2a\nwrite 7f0000000000 1 100 1\n", "faults", plan)
	require.NoError(t, err)
	require.Contains(t, stderr, "softnic rdma: fault rule 0 (wire.tx drop always qpn=0x999) never fired: it matched 0 events")
	require.NotContains(t, stderr, "fault rule 1 (", "rule 1 dropped the WRITE's frames")
	require.Contains(t, stderr, "fault_rule1_fired=")
}
