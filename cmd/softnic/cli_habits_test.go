package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
	"github.com/stretchr/testify/require"
)

// TestTraceStdoutOutputs: --pcap - and --chrome-trace - write to stdout
// and move the text to stderr; two outputs on stdout are refused.
func TestTraceStdoutOutputs(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		code    int
		check   func(t *testing.T, stdout []byte)
		errText string
	}{
		{"pcap to stdout", []string{"trace", "--pcap", "-"}, 0, func(t *testing.T, out []byte) {
			r, err := pcapgo.NewReader(bytes.NewReader(out))
			require.NoError(t, err, "stdout is a pcap file")
			_, _, err = r.ReadPacketData()
			require.NoError(t, err)
		}, "total post → CQE"},
		{"chrome trace to stdout", []string{"trace", "--chrome-trace", "-"}, 0, func(t *testing.T, out []byte) {
			var v any
			require.NoError(t, json.Unmarshal(out, &v), "stdout is JSON only")
		}, "total post → CQE"},
		{"pcap and json refused", []string{"trace", "--pcap", "-", "--json"}, 2, nil, "all write to stdout"},
		{"chrome and html refused", []string{"trace", "--chrome-trace", "-", "--html", "-"}, 2, nil, "all write to stdout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			require.Equal(t, tc.code, run(tc.args, &stdout, &stderr), stderr.String())
			require.Contains(t, stderr.String(), tc.errText)
			if tc.check != nil {
				require.NotContains(t, stdout.String(), "total post", "no text in the binary output")
				tc.check(t, stdout.Bytes())
			}
		})
	}
}

type failWriter struct{ after int }

func (f *failWriter) Write(p []byte) (int, error) {
	if f.after <= 0 {
		return 0, errors.New("no space left on device")
	}
	f.after--
	return len(p), nil
}

// TestStdoutWriteErrors: a command whose stdout fails exits non-zero.
func TestStdoutWriteErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		after int // writes that succeed first
	}{
		{"trace text", []string{"trace"}, 0},
		{"trace text fails late", []string{"trace"}, 5},
		{"trace json", []string{"trace", "--json"}, 0},
		{"trace pcap to stdout", []string{"trace", "--pcap", "-"}, 1},
		{"version", []string{"version"}, 0},
		// (softnic --help is no case: the usage goes to stderr.)
		{"profiles", []string{"profiles"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			code := run(tc.args, &failWriter{after: tc.after}, &stderr)
			require.NotEqual(t, 0, code)
			require.Contains(t, stderr.String(), "no space left on device")
		})
	}
}

// TestStdoutDevFull runs the built binary with stdout on /dev/full.
func TestStdoutDevFull(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/dev/full is Linux")
	}
	bin := softnicBin(t)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"trace", []string{"trace"}},
		{"trace json", []string{"trace", "--json"}},
		{"trace pcap to stdout", []string{"trace", "--pcap", "-"}},
		{"version", []string{"--version"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
			if err != nil {
				t.Skip(err)
			}
			defer full.Close()
			cmd := exec.Command(bin, tc.args...)
			var stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = full, &stderr
			err = cmd.Run()
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee, stderr.String())
			require.NotEqual(t, 0, ee.ExitCode())
			require.Contains(t, stderr.String(), "writing standard output")
		})
	}
}

// TestVersionAndHelp: --version and version print a line; every
// subcommand's --help exits 0.
func TestVersionAndHelp(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		version bool
	}{
		{"--version", []string{"--version"}, true},
		{"version", []string{"version"}, true},
		{"help", []string{"--help"}, false},
		{"-h", []string{"-h"}, false},
		{"help word", []string{"help"}, false},
		{"trace --help", []string{"trace", "--help"}, false},
		{"decode --help", []string{"decode", "--help"}, false},
		{"rdma --help", []string{"rdma", "--help"}, false},
		{"rc_pingpong --help", []string{"rc_pingpong", "--help"}, false},
		{"faults --help", []string{"faults", "--help"}, false},
		{"view --help", []string{"view", "--help"}, false},
		{"view -h", []string{"view", "-h"}, false},
		{"version --help", []string{"version", "--help"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			require.Equal(t, 0, run(tc.args, &stdout, &stderr), stderr.String())
			if tc.version {
				require.Regexp(t, `^softnic (devel( [0-9a-f]+(-dirty)?)?|v\S+)\n$`, stdout.String())
				return
			}
			// Asked-for usage is the output: on stdout, the top
			// level's as every command's (it used to go to stderr).
			require.Empty(t, stderr.String(), "usage goes to stdout")
			require.Contains(t, strings.ToLower(stdout.String()), "usage")
		})
	}
	for name := range commands {
		if name == "version" {
			continue // prints the version for any arguments (above)
		}
		for _, h := range []string{"--help", "-h"} {
			var stdout, stderr bytes.Buffer
			require.Equal(t, 0, run([]string{name, h}, &stdout, &stderr), "%s %s: %s", name, h, stderr.String())
			require.Empty(t, stderr.String(), "%s %s: usage goes to stdout", name, h)
			require.Contains(t, strings.ToLower(stdout.String()), "usage", "%s %s", name, h)
			// softnic help CMD is CMD --help.
			var hout, herr bytes.Buffer
			require.Equal(t, 0, run([]string{"help", name}, &hout, &herr), "help %s: %s", name, herr.String())
			require.Equal(t, stdout.String(), hout.String(), "help %s", name)
		}
	}
	// help of a command that does not exist, or of two, is bad usage
	// (it printed the general usage and exited 0).
	for _, args := range [][]string{{"help", "bogus"}, {"help", "perf", "trace"}} {
		var stdout, stderr bytes.Buffer
		require.Equal(t, 2, run(args, &stdout, &stderr), "%q", args)
		require.Empty(t, stdout.String(), "%q", args)
		require.Contains(t, stderr.String(), "softnic help: ", "%q", args)
	}
	// No command at all is bad usage: the usage on stderr, exit 2.
	var stdout, stderr bytes.Buffer
	require.Equal(t, 2, run(nil, &stdout, &stderr))
	require.Empty(t, stdout.String())
	require.Contains(t, stderr.String(), "usage: softnic <command>")
}

// TestHelpNamesTheArguments: every command's --help starts with its own
// usage line, positional arguments included (softnic trace [OP], softnic
// view WALK.json), not the flag package's bare "Usage of NAME:".
func TestHelpNamesTheArguments(t *testing.T) {
	for name := range commands {
		if name == "version" {
			continue
		}
		var stdout, stderr bytes.Buffer
		require.Equal(t, 0, run([]string{name, "--help"}, &stdout, &stderr))
		head := strings.Join(strings.SplitN(stdout.String(), "\n", 3)[:2], "\n")
		require.Regexp(t, `^usage:`, head, "%s --help", name)
		require.Contains(t, head, "softnic "+name, "%s --help", name)
	}
	var stdout, stderr bytes.Buffer
	run([]string{"trace", "--help"}, &stdout, &stderr)
	require.Contains(t, stdout.String(), "softnic trace [OP]")
	stdout.Reset()
	run([]string{"view", "--help"}, &stdout, &stderr)
	require.Contains(t, stdout.String(), "softnic view WALK.json")
	// The top level's list: one column of names, one of summaries.
	stdout.Reset()
	run([]string{"--help"}, &stdout, &stderr)
	col := -1
	for name, c := range commands {
		line := regexp.MustCompile(`(?m)^  ` + name + ` +` + regexp.QuoteMeta(c.summary) + `$`).FindString(stdout.String())
		require.NotEmpty(t, line, "%s in softnic --help", name)
		at := strings.Index(line, c.summary)
		require.Greater(t, at, len("  "+name+" "), "%s: the summary needs a space of its own", name)
		if col >= 0 {
			require.Equal(t, col, at, "%s: summaries start in one column", name)
		}
		col = at
	}
}

// captureFiles writes the frames of one trace as pcap and as pcapng.
func captureFiles(t *testing.T) (pcapFile, ngFile string) {
	dir := t.TempDir()
	pcapFile = filepath.Join(dir, "walk.pcap")
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, run([]string{"trace", "--size", "3000", "--pcap", pcapFile}, &stdout, &stderr), stderr.String())
	f, err := os.Open(pcapFile)
	require.NoError(t, err)
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	require.NoError(t, err)
	var ng bytes.Buffer
	w, err := pcapgo.NewNgWriter(&ng, layers.LinkTypeEthernet)
	require.NoError(t, err)
	n := 0
	for {
		data, ci, err := r.ReadPacketData()
		if err != nil {
			break
		}
		ci.InterfaceIndex = 0
		require.NoError(t, w.WritePacket(gopacket.CaptureInfo{Timestamp: ci.Timestamp, CaptureLength: len(data), Length: ci.Length}, data))
		n++
	}
	require.Greater(t, n, 2)
	require.NoError(t, w.Flush())
	ngFile = filepath.Join(dir, "walk.pcapng")
	require.NoError(t, os.WriteFile(ngFile, ng.Bytes(), 0o644))
	return pcapFile, ngFile
}

// TestDecodeTruncated: a capture cut inside a record or block is reported,
// not decoded as complete.
func TestDecodeTruncated(t *testing.T) {
	pcapFile, ngFile := captureFiles(t)
	pcapBytes, err := os.ReadFile(pcapFile)
	require.NoError(t, err)
	ngBytes, err := os.ReadFile(ngFile)
	require.NoError(t, err)
	dir := t.TempDir()
	for _, tc := range []struct {
		name      string
		data      []byte
		truncated bool
	}{
		{"pcap complete", pcapBytes, false},
		{"pcap cut in a record's data", pcapBytes[:len(pcapBytes)-7], true},
		{"pcap cut after the first record header", pcapBytes[:24+16], true},
		{"pcap cut in a record header", pcapBytes[:24+9], true},
		{"pcapng complete", ngBytes, false},
		{"pcapng cut in the middle of a block", ngBytes[:len(ngBytes)/2+3], true},
		{"pcapng cut in the last block's trailer", ngBytes[:len(ngBytes)-2], true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := filepath.Join(dir, "c")
			require.NoError(t, os.WriteFile(f, tc.data, 0o644))
			var stdout, stderr bytes.Buffer
			code := run([]string{"decode", f}, &stdout, &stderr)
			if !tc.truncated {
				require.Equal(t, 0, code, stderr.String())
				require.NotContains(t, stdout.String(), "TRUNCATED")
				return
			}
			require.NotEqual(t, 0, code)
			require.Contains(t, stderr.String(), "capture truncated")
			require.Contains(t, stdout.String(), "TRUNCATED")
		})
	}
}

// TestDecodeMalformed: a pcapng packet block whose captured length
// overruns the block is reported after the frames before it, exit 2, even
// when the blocks after it make the file end on a boundary.
func TestDecodeMalformed(t *testing.T) {
	_, ngFile := captureFiles(t)
	in, err := os.ReadFile(ngFile)
	require.NoError(t, err)
	var epbs []int // little-endian section: type 6 is a packet block
	for off := 0; off+8 <= len(in); off += int(binary.LittleEndian.Uint32(in[off+4:])) {
		if binary.LittleEndian.Uint32(in[off:]) == 6 {
			epbs = append(epbs, off)
		}
	}
	require.Greater(t, len(epbs), 2)
	binary.LittleEndian.PutUint32(in[epbs[1]+20:], 5000)
	f := filepath.Join(t.TempDir(), "bad.pcapng")
	require.NoError(t, os.WriteFile(f, in, 0o644))
	var stdout, stderr bytes.Buffer
	require.Equal(t, 2, run([]string{"decode", f}, &stdout, &stderr))
	require.Contains(t, stdout.String(), "1 frames")
	require.Contains(t, stdout.String(), "MALFORMED")
	require.Contains(t, stderr.String(), "captures 5000 bytes")
}

// TestPingpongServerReply: the client reads the server's address, or the
// reason the server refused it.
func TestPingpongServerReply(t *testing.T) {
	addr := ppDest{qpn: 0x11, psn: 0x22}.encode()
	for _, tc := range []struct {
		name    string
		sent    []byte
		refused string // "" when the reply is an address
	}{
		{"address", addr, ""},
		{"gid index refusal", refusalMsg(ppRefusedGID), "GID index mismatch"},
		{"other refusal", refusalMsg("failed to modify QP to RTR: no route"), "failed to modify QP to RTR"},
		{"long refusal is cut", refusalMsg(string(bytes.Repeat([]byte("x"), 200))), "xxxx"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Less(t, len(tc.sent), ppMsgLen+1)
			if tc.refused != "" {
				require.Less(t, len(tc.sent), ppMsgLen, "ibv_rc_pingpong sees a short read")
			}
			a, b := net.Pipe()
			go func() { a.Write(tc.sent); a.Close() }()
			got, err := readServerReply(b, time.Second)
			if tc.refused == "" {
				require.NoError(t, err)
				require.Equal(t, addr, got)
				return
			}
			require.ErrorIs(t, err, errRefused)
			require.ErrorContains(t, err, tc.refused)
		})
	}
}

// TestPingpongServerTimeoutAndRefusal runs the built binary: a server no
// client reaches gives up after --timeout; a client without -g facing a
// server with -g 1 is told why it was refused.
func TestPingpongServerTimeoutAndRefusal(t *testing.T) {
	bin := softnicBin(t)
	for _, tc := range []struct {
		name      string
		client    bool
		srvArgs   []string
		cliArgs   []string
		srvErr    string
		clientErr string
	}{
		{"server timeout", false, []string{"-g", "1"}, nil, "no client connected", ""},
		{"gid index mismatch", true, []string{"-g", "1"}, nil, "not an IPv4-mapped RoCEv2 GID", "GID index mismatch"},
		{"server without gid", true, nil, []string{"-g", "1"}, "the client refused the connection: GID index mismatch", "told the server"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			pa, pb, tcp := freeUDPPort(t), freeUDPPort(t), freeTCPPort(t)
			// The server's --timeout (5 s) is longer than the test allows
			// it when the client is there: it must hear of the refusal.
			srvTimeout, limit := "1s", 15*time.Second
			if tc.client {
				srvTimeout, limit = "5s", 4*time.Second
			}
			srv := exec.CommandContext(ctx, bin, append([]string{"rc_pingpong", "-p", strconv.Itoa(tcp), "--timeout", srvTimeout,
				"--wire", fmt.Sprintf("udp:127.0.0.1:%d,127.0.0.1:%d", pa, pb), "--ip", "192.0.2.1"}, tc.srvArgs...)...)
			var srvErr bytes.Buffer
			srv.Stderr = &srvErr
			start := time.Now()
			require.NoError(t, srv.Start())
			var cliErr bytes.Buffer
			var cliRun error
			if tc.client {
				cli := exec.CommandContext(ctx, bin, append([]string{"rc_pingpong", "127.0.0.1", "-p", strconv.Itoa(tcp), "--timeout", "3s",
					"--wire", fmt.Sprintf("udp:127.0.0.1:%d,127.0.0.1:%d", pb, pa), "--ip", "192.0.2.2"}, tc.cliArgs...)...)
				cli.Stderr = &cliErr
				cliRun = cli.Run()
			}
			err := srv.Wait()
			require.Error(t, err, "server exits non-zero")
			require.Less(t, time.Since(start), limit)
			require.Contains(t, srvErr.String(), tc.srvErr)
			if tc.client {
				require.Error(t, cliRun, "client exits non-zero")
				require.Contains(t, cliErr.String(), tc.clientErr)
			}
		})
	}
}

// TestExtraArgumentPrintsUsage: a positional argument a command does not
// take is one line naming it, then the command's usage, on stderr, exit 2
// (docs/cli.md); stat, devinfo, calibrate, serve, trace and rdma printed
// the line alone.
func TestExtraArgumentPrintsUsage(t *testing.T) {
	for _, args := range [][]string{
		{"stat", "extra"}, {"devinfo", "extra"}, {"calibrate", "extra"},
		{"serve", "--socket", filepath.Join(t.TempDir(), "s"), "extra"},
		{"trace", "write", "extra"}, {"rdma", "--wire", "udp:127.0.0.1:1,127.0.0.1:2", "extra"},
	} {
		t.Run(args[0], func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			require.Equal(t, 2, run(args, &stdout, &stderr))
			require.Empty(t, stdout.String())
			lines := strings.SplitN(stderr.String(), "\n", 2)
			require.Equal(t, `softnic `+args[0]+`: unexpected argument "extra"`, lines[0])
			require.True(t, strings.HasPrefix(lines[1], "usage: softnic "+args[0]), "%q", stderr.String())
		})
	}
}
