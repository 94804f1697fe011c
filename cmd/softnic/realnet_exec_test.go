package main

// End-to-end tests of the real-network commands: softnic processes talking
// RC over udp: on loopback and over tap: between two network namespaces,
// every frame captured and checked (ICRC by roce.ParseFrame, dissection by
// tshark when it is installed). Only 127.0.0.1 and addresses inside
// namespaces these tests create (TEST-NET-1, 192.0.2.0/24) are used.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ethport"
	"github.com/softnic/softnic/internal/freeport"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/trace"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
	binDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// softnicBin builds the command once per test binary.
func softnicBin(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "softnic-bin-"); binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "softnic")
		gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
		out, err := exec.Command(gobin, "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	require.NoError(t, binErr)
	return binPath
}

func freeUDPPort(t *testing.T) int {
	t.Helper()
	p, err := freeport.UDP()
	require.NoError(t, err)
	return p
}

func freeTCPPort(t *testing.T) int {
	t.Helper()
	p, err := freeport.TCP()
	require.NoError(t, err)
	return p
}

// proc is a running softnic process driven through its stdin/stdout.
type proc struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	stderr bytes.Buffer
	mu     sync.Mutex
	log    strings.Builder
}

func startProc(t *testing.T, ctx context.Context, name string, argv ...string) *proc {
	t.Helper()
	p := &proc{name: name, lines: make(chan string, 1024)}
	p.cmd = exec.CommandContext(ctx, argv[0], argv[1:]...)
	var err error
	p.stdin, err = p.cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := p.cmd.StdoutPipe()
	require.NoError(t, err)
	p.cmd.Stderr = &p.stderr
	require.NoError(t, p.cmd.Start())
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.note("< " + sc.Text())
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	t.Cleanup(func() {
		p.stdin.Close()
		done := make(chan struct{})
		go func() { p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			p.cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("%s transcript:\n%s\n%s stderr:\n%s", p.name, p.transcript(), p.name, p.stderr.String())
		}
	})
	return p
}

func (p *proc) note(s string) {
	p.mu.Lock()
	p.log.WriteString(s + "\n")
	p.mu.Unlock()
}

func (p *proc) transcript() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

func (p *proc) send(t *testing.T, format string, args ...any) {
	t.Helper()
	l := fmt.Sprintf(format, args...)
	p.note("> " + l)
	_, err := io.WriteString(p.stdin, l+"\n")
	require.NoError(t, err)
}

// expect returns the fields of the next output line, which must start with
// word.
func (p *proc) expect(t *testing.T, word string) []string {
	t.Helper()
	select {
	case l, ok := <-p.lines:
		require.True(t, ok, "%s ended while waiting for %s", p.name, word)
		f := strings.Fields(l)
		require.NotEmpty(t, f, "%s: empty line", p.name)
		require.Equal(t, word, f[0], "%s: %q", p.name, l)
		return f
	case <-time.After(15 * time.Second):
		t.Fatalf("%s: no %s line within 15 s", p.name, word)
	}
	return nil
}

func (p *proc) wait(t *testing.T) {
	t.Helper()
	p.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		require.NoError(t, err, "%s exit; stderr:\n%s", p.name, p.stderr.String())
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not exit", p.name)
	}
}

func hexArg(t *testing.T, f []string, i int) uint64 {
	t.Helper()
	require.Greater(t, len(f), i, "%v", f)
	v, err := strconv.ParseUint(f[i], 16, 64)
	require.NoError(t, err, "%v", f)
	return v
}

// decArg parses a size field of a reply: decimal.
func decArg(t *testing.T, f []string, i int) uint64 {
	t.Helper()
	require.Greater(t, len(f), i, "%v", f)
	v, err := strconv.ParseUint(f[i], 10, 64)
	require.NoError(t, err, "%v", f)
	return v
}

// rdmaSide is one `softnic rdma` endpoint in an exchange.
type rdmaSide struct {
	*proc
	qpn, psn uint64
	addr     uint64
	rkey     uint64
	size     uint64
}

func seedCRC(seed uint32, n int) string {
	b := make([]byte, n)
	fillSeed(b, seed)
	return fmt.Sprintf("%08x", crc32.ChecksumIEEE(b))
}

// wantWC reads a `WC <wr_id> <status> <opcode> <byte_len> <imm>` line.
func (s *rdmaSide) wantWC(t *testing.T, opcode string, byteLen int) {
	t.Helper()
	f := s.expect(t, "WC")
	require.Len(t, f, 6, "%v", f)
	hexArg(t, f, 1) // the wr_id
	require.Equal(t, "SUCCESS", f[2], "%s: %v", s.name, f)
	require.Equal(t, opcode, f[3], "%s: %v", s.name, f)
	if byteLen >= 0 {
		require.Equal(t, strconv.Itoa(byteLen), f[4], "%s: %v", s.name, f)
	}
}

func (s *rdmaSide) wantSum(t *testing.T, off uint64, n int, seed uint32) {
	t.Helper()
	s.send(t, "sum %d %d", off, n)
	f := s.expect(t, "SUM")
	require.Equal(t, []string{"SUM", fmt.Sprint(off), fmt.Sprint(n), seedCRC(seed, n)}, f,
		"%s: MR[%#x, +%d) should hold seed %#x", s.name, off, n, seed)
}

// exerciseRDMA connects two `softnic rdma` processes through the REMOTE
// lines and checks WRITE, READ and SEND/RECV in both directions at sizes
// below, at and above the path MTU (1024), data verified by crc32.
func exerciseRDMA(t *testing.T, a, b *rdmaSide) {
	for _, s := range []*rdmaSide{a, b} {
		f := s.expect(t, "LOCAL")
		require.Len(t, f, 4)
		require.Len(t, f[3], 32, "GID as 32 hex digits")
		s.qpn, s.psn = hexArg(t, f, 1), hexArg(t, f, 2)
	}
	a.send(t, "REMOTE %x %x", b.qpn, b.psn)
	b.send(t, "REMOTE %x %x", a.qpn, a.psn)
	for _, s := range []*rdmaSide{a, b} {
		s.send(t, "mr")
		f := s.expect(t, "MR")
		s.addr, s.rkey, s.size = hexArg(t, f, 1), hexArg(t, f, 2), decArg(t, f, 3)
		require.Equal(t, uint64(0x100000), s.size, "%s: the MR's length, decimal", s.name)
	}
	const writeOff, recvOff = 0x10000, 0x80000 // recvOff: --mr-size 0x100000 / 2
	seed := uint32(0x40)
	for _, n := range []int{64, 1024, 5000} {
		for _, dir := range [][2]*rdmaSide{{a, b}, {b, a}} {
			req, rsp := dir[0], dir[1]
			seed++
			// RDMA WRITE into the responder's MR.
			req.send(t, "write %x %x %d %d", rsp.addr+writeOff, rsp.rkey, n, seed)
			req.wantWC(t, "RDMA_WRITE", -1)
			req.wantSum(t, 0, n, seed)
			rsp.wantSum(t, writeOff, n, seed)
			// RDMA READ it back over a local buffer overwritten by a SEND's
			// fill (the requester's MR[0,n) holds seed+1000 bytes first).
			rsp.send(t, "recv 1")
			req.send(t, "send %d %d", n, seed+1000)
			req.wantWC(t, "SEND", -1)
			rsp.wantWC(t, "RECV", n)
			rsp.wantSum(t, recvOff, n, seed+1000)
			req.send(t, "read %x %x %d", rsp.addr+writeOff, rsp.rkey, n)
			req.wantWC(t, "RDMA_READ", n)
			req.wantSum(t, 0, n, seed)
		}
	}
	for _, s := range []*rdmaSide{a, b} {
		s.send(t, "counters")
		f := s.expect(t, "COUNTERS")
		require.NotContains(t, strings.Join(f, " "), "drop_bad_icrc", "%s", s.name)
		s.send(t, "quit")
		s.wait(t)
	}
}

// checkCapture parses every RoCE frame of a capture (roce.ParseFrame checks
// lengths and the ICRC) and returns how many RoCE and ARP frames it holds.
// (It assumes IPv4 headers without options, which is all softnic sends.)
func checkCapture(t *testing.T, path string) (nroce, narp int) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	r, err := trace.NewPcapReader(f)
	require.NoError(t, err)
	var pkt roce.Packet
	for i := 1; ; i++ {
		fr, err := r.ReadFrame()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		d := fr.Data
		if len(d) >= 14 && d[12] == 0x08 && d[13] == 0x06 {
			narp++
			continue
		}
		// Anything else that is not IPv4/UDP to 4791 is the host's own
		// chatter on a TAP (IPv6 neighbour discovery, MLD, IGMP).
		if len(d) < 38 || d[12] != 0x08 || d[13] != 0x00 || d[23] != 17 || int(d[36])<<8|int(d[37]) != roce.UDPPort {
			continue
		}
		require.NoError(t, roce.ParseFrame(fr.Data, &pkt), "%s frame %d", path, i)
		require.True(t, pkt.ICRCOK)
		nroce++
	}
	return nroce, narp
}

// tsharkDecodes checks that tshark dissects every RoCE frame as InfiniBand
// (RRoCE on UDP 4791) and finds nothing malformed; it skips quietly when
// tshark is not installed.
func tsharkDecodes(t *testing.T, path string, nroce int) {
	t.Helper()
	ts, err := exec.LookPath("tshark")
	if err != nil {
		t.Log("tshark not installed: dissection not checked")
		return
	}
	out, err := exec.Command(ts, "-n", "-r", path, "-Y", "infiniband", "-T", "fields", "-e", "infiniband.bth.opcode").Output()
	require.NoError(t, err)
	ops := strings.Fields(string(out))
	require.Len(t, ops, nroce, "tshark dissects every RoCE frame of %s", path)
	out, err = exec.Command(ts, "-n", "-r", path, "-Y", "_ws.malformed || _ws.expert.severity >= error").Output()
	require.NoError(t, err)
	require.Empty(t, strings.TrimSpace(string(out)), "tshark finds malformed frames in %s", path)
}

// TestRDMAOverUDP: two softnic rdma processes on loopback resolve each other
// by ARP and exchange WRITE/READ/SEND both ways.
func TestRDMAOverUDP(t *testing.T) {
	bin := softnicBin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	pa, pb := freeUDPPort(t), freeUDPPort(t)
	common := []string{"rdma", "--mr-size", "0x100000", "--wait-ms", "10000"}
	argv := func(listen, peer int, ip, rip, pcap string) []string {
		return append(append([]string{bin}, common...), "--wire", fmt.Sprintf("udp:127.0.0.1:%d,127.0.0.1:%d", listen, peer),
			"--ip", ip, "--remote-ip", rip, "--pcap", pcap)
	}
	capA, capB := filepath.Join(dir, "a.pcap"), filepath.Join(dir, "b.pcap")
	a := &rdmaSide{proc: startProc(t, ctx, "A", argv(pa, pb, "192.0.2.1", "192.0.2.2", capA)...)}
	b := &rdmaSide{proc: startProc(t, ctx, "B", argv(pb, pa, "192.0.2.2", "192.0.2.1", capB)...)}
	exerciseRDMA(t, a, b)
	for _, c := range []string{capA, capB} {
		nroce, narp := checkCapture(t, c)
		require.Greater(t, nroce, 50, c)
		require.GreaterOrEqual(t, narp, 2, "%s: peers were resolved by ARP", c)
		tsharkDecodes(t, c, nroce)
	}
}

// requireNetns skips unless network namespaces, TAP devices and bridges can
// be used (root with ip(8) and /dev/net/tun; CI runs as root).
func requireNetns(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces and TAP devices")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip(8)")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skip("needs /dev/net/tun")
	}
}

func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	require.NoError(t, err, "ip %s: %s", strings.Join(args, " "), out)
}

// TestRDMAOverTAP: the same exchange with each softnic in its own network
// namespace, on a TAP device enslaved to a bridge there; the two bridges are
// joined by a veth pair. Real RoCEv2 frames cross the kernel's bridges.
func TestRDMAOverTAP(t *testing.T) {
	requireNetns(t)
	bin := softnicBin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tag := strconv.Itoa(os.Getpid())
	ns := [2]string{"snA" + tag, "snB" + tag}
	for i, n := range ns {
		if err := exec.Command("ip", "netns", "add", n).Run(); err != nil {
			t.Skipf("cannot create network namespaces: %v", err)
		}
		t.Cleanup(func() { exec.Command("ip", "netns", "del", n).Run() })
		ipCmd(t, "-n", n, "link", "add", "br0", "type", "bridge")
		ipCmd(t, "-n", n, "tuntap", "add", "dev", "tap0", "mode", "tap")
		ipCmd(t, "-n", n, "link", "set", "tap0", "master", "br0")
		if i == 1 {
			ipCmd(t, "-n", ns[0], "link", "add", "veth0", "type", "veth", "peer", "name", "veth1", "netns", ns[1])
		}
	}
	for i, n := range ns {
		veth := fmt.Sprintf("veth%d", i)
		ipCmd(t, "-n", n, "link", "set", veth, "master", "br0")
		for _, l := range []string{"br0", veth, "tap0", "lo"} {
			ipCmd(t, "-n", n, "link", "set", l, "up")
		}
	}
	// A new link drops what it is given to send until the kernel's link
	// watch has activated it (up to a second after carrier): wait for the
	// veths to be operational. softnic itself waits for its TAP
	// (wire.OpenTAP).
	for i, n := range ns {
		veth := fmt.Sprintf("veth%d", i)
		require.Eventually(t, func() bool {
			out, err := exec.Command("ip", "-n", n, "-o", "link", "show", veth).Output()
			return err == nil && strings.Contains(string(out), "state UP")
		}, 5*time.Second, 10*time.Millisecond, "%s in %s never came up", veth, n)
	}
	dir := t.TempDir()
	argv := func(n, ip, rip, pcap string) []string {
		return []string{"ip", "netns", "exec", n, bin, "rdma", "--mr-size", "0x100000", "--wait-ms", "10000",
			"--wire", "tap:tap0", "--ip", ip, "--remote-ip", rip, "--pcap", pcap}
	}
	capA, capB := filepath.Join(dir, "a.pcap"), filepath.Join(dir, "b.pcap")
	a := &rdmaSide{proc: startProc(t, ctx, "A", argv(ns[0], "192.0.2.1", "192.0.2.2", capA)...)}
	b := &rdmaSide{proc: startProc(t, ctx, "B", argv(ns[1], "192.0.2.2", "192.0.2.1", capB)...)}
	exerciseRDMA(t, a, b)
	for _, c := range []string{capA, capB} {
		nroce, narp := checkCapture(t, c)
		require.Greater(t, nroce, 50, c)
		require.GreaterOrEqual(t, narp, 2, c)
		tsharkDecodes(t, c, nroce)
	}
}

// counterMap parses a COUNTERS line.
func counterMap(t *testing.T, f []string) map[string]uint64 {
	t.Helper()
	m := map[string]uint64{}
	for _, kv := range f[1:] {
		k, v, ok := strings.Cut(kv, "=")
		require.True(t, ok, kv)
		n, err := strconv.ParseUint(v, 10, 64)
		require.NoError(t, err, kv)
		m[k] = n
	}
	return m
}

// TestRDMAFaultsOverUDP: softnic rdma with --faults loses frames at its
// real wire; RC retransmission delivers the data all the same, and the
// counters name the rule that fired and the recovery.
func TestRDMAFaultsOverUDP(t *testing.T) {
	bin := softnicBin(t)
	tests := []struct {
		name   string
		planA  string
		wantA  []string // counters of A that must be non-zero
		wantB  []string // counters of B that must be non-zero
		timeoA string   // A's --timeout exponent
	}{
		{name: "A drops its WRITE MIDDLE (NAK, go back N)",
			planA: `{"seed": 1, "rules": [{"point": "wire.tx", "action": "drop", "nth": 1, "match": {"opcode": "RC_RDMA_WRITE_MIDDLE"}}]}`,
			wantA: []string{"fault_rule0_fired", "packet_seq_err", "retransmitted_pkts"}, wantB: []string{"out_of_sequence"}},
		{name: "A loses an ACK on receive (local ACK timeout)",
			planA:  `{"seed": 1, "rules": [{"point": "wire.rx", "action": "drop", "nth": 1, "match": {"opcode": "RC_ACKNOWLEDGE"}}]}`,
			wantA:  []string{"fault_rule0_fired", "local_ack_timeout_err", "retransmitted_pkts"},
			wantB:  []string{"duplicate_request"},
			timeoA: "10"},
		{name: "A loses a READ response on receive",
			planA:  `{"seed": 1, "rules": [{"point": "wire.rx", "action": "drop", "nth": 1, "match": {"opcode": "RC_RDMA_READ_RESPONSE_MIDDLE"}}]}`,
			wantA:  []string{"fault_rule0_fired"},
			timeoA: "10"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			dir := t.TempDir()
			plan := filepath.Join(dir, "plan.json")
			require.NoError(t, os.WriteFile(plan, []byte(tc.planA), 0o644))
			pa, pb := freeUDPPort(t), freeUDPPort(t)
			argv := func(listen, peer int, ip, rip string, extra ...string) []string {
				return append([]string{bin, "rdma", "--mr-size", "0x100000", "--wait-ms", "10000",
					"--wire", fmt.Sprintf("udp:127.0.0.1:%d,127.0.0.1:%d", listen, peer), "--ip", ip, "--remote-ip", rip}, extra...)
			}
			extraA := []string{"--faults", plan}
			if tc.timeoA != "" {
				extraA = append(extraA, "--timeout", tc.timeoA)
			}
			a := &rdmaSide{proc: startProc(t, ctx, "A", argv(pa, pb, "192.0.2.1", "192.0.2.2", extraA...)...)}
			b := &rdmaSide{proc: startProc(t, ctx, "B", argv(pb, pa, "192.0.2.2", "192.0.2.1")...)}
			for _, s := range []*rdmaSide{a, b} {
				f := s.expect(t, "LOCAL")
				s.qpn, s.psn = hexArg(t, f, 1), hexArg(t, f, 2)
			}
			a.send(t, "REMOTE %x %x", b.qpn, b.psn)
			b.send(t, "REMOTE %x %x", a.qpn, a.psn)
			b.send(t, "mr")
			f := b.expect(t, "MR")
			b.addr, b.rkey = hexArg(t, f, 1), hexArg(t, f, 2)
			const n, off, off2 = 5000, 0x10000, 0x20000
			for _, seed := range []uint32{0x51, 0x52} {
				a.send(t, "write %x %x %d %d", b.addr+off, b.rkey, n, seed)
				a.wantWC(t, "RDMA_WRITE", -1)
				b.wantSum(t, off, n, seed)
				// Overwrite A's MR[0,n) (the source of a WRITE elsewhere):
				// the READ must bring the first bytes back.
				a.send(t, "write %x %x %d %d", b.addr+off2, b.rkey, n, seed+100)
				a.wantWC(t, "RDMA_WRITE", -1)
				a.send(t, "read %x %x %d", b.addr+off, b.rkey, n)
				a.wantWC(t, "RDMA_READ", n)
				a.wantSum(t, 0, n, seed)
			}
			for _, c := range []struct {
				s    *rdmaSide
				want []string
			}{{a, tc.wantA}, {b, tc.wantB}} {
				c.s.send(t, "counters")
				m := counterMap(t, c.s.expect(t, "COUNTERS"))
				for _, name := range c.want {
					require.NotZero(t, m[name], "%s: counter %s in %v", c.s.name, name, m)
				}
			}
			for _, s := range []*rdmaSide{a, b} {
				s.send(t, "quit")
				s.wait(t)
			}
			require.Contains(t, a.stderr.String(), "softnic: fault plan "+plan+": rule 0: ")
		})
	}
}

var (
	ppLocalRe  = regexp.MustCompile(`^  local address:  LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID ::ffff:192\.0\.2\.[12]$`)
	ppRemoteRe = regexp.MustCompile(`^  remote address: LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID ::ffff:192\.0\.2\.[12]$`)
	ppBytesRe  = regexp.MustCompile(`^(\d+) bytes in \d+\.\d\d seconds = \d+\.\d\d Mbit/sec$`)
	ppItersRe  = regexp.MustCompile(`^(\d+) iters in \d+\.\d\d seconds = \d+\.\d\d usec/iter$`)
)

// TestRCPingpongOverUDP: softnic rc_pingpong as server and as client, with
// the TCP handshake of ibv_rc_pingpong, at a size above the MTU and one
// small enough to go inline; the server's peer is a static neighbour, the
// client resolves by ARP.
func TestRCPingpongOverUDP(t *testing.T) {
	bin := softnicBin(t)
	for _, tc := range []struct {
		name        string
		size, iters int
		clientFirst bool   // the client retries until the server listens
		faults      string // the client's --faults plan
	}{
		{"4096", 4096, 100, false, ""},
		{"16", 16, 200, true, ""},
		// The client loses one of its SEND MIDDLE packets at its wire: the
		// server NAKs the sequence error, the client goes back N.
		{"4096 with a lost frame", 4096, 50, false, `{"seed": 1, "rules": [{"point": "wire.tx", "action": "drop",
			"nth": 5, "match": {"opcode": "RC_SEND_MIDDLE"}}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			dir := t.TempDir()
			pa, pb, tcp := freeUDPPort(t), freeUDPPort(t), freeTCPPort(t)
			common := []string{"-g", "1", "-p", strconv.Itoa(tcp), "-s", strconv.Itoa(tc.size), "-n", strconv.Itoa(tc.iters)}
			srvCap, cliCap := filepath.Join(dir, "srv.pcap"), filepath.Join(dir, "cli.pcap")
			startSrv := func() *proc {
				return startProc(t, ctx, "server", append(append([]string{bin, "rc_pingpong"}, common...),
					"--wire", fmt.Sprintf("udp:127.0.0.1:%d,127.0.0.1:%d", pa, pb), "--ip", "192.0.2.1",
					"--neigh", "192.0.2.2="+macString(ethport.DefaultMAC(netip.MustParseAddr("192.0.2.2"))), "--pcap", srvCap)...)
			}
			cliArgs := []string{"--wire", fmt.Sprintf("udp:127.0.0.1:%d,127.0.0.1:%d", pb, pa), "--ip", "192.0.2.2", "--pcap", cliCap}
			if tc.faults != "" {
				plan := filepath.Join(dir, "faults.json")
				require.NoError(t, os.WriteFile(plan, []byte(tc.faults), 0o644))
				cliArgs = append(cliArgs, "--faults", plan)
			}
			startCli := func() *proc {
				return startProc(t, ctx, "client", append(append([]string{bin, "rc_pingpong", "127.0.0.1"}, common...), cliArgs...)...)
			}
			var srv, cli *proc
			if tc.clientFirst {
				cli = startCli()
				time.Sleep(300 * time.Millisecond)
				srv = startSrv()
			} else {
				srv = startSrv()
				cli = startCli()
			}
			for _, p := range []*proc{srv, cli} {
				var out []string
				for l := range p.lines {
					out = append(out, l)
				}
				p.wait(t)
				require.Len(t, out, 4, "%s output: %q", p.name, out)
				require.Regexp(t, ppLocalRe, out[0])
				require.Regexp(t, ppRemoteRe, out[1])
				m := ppBytesRe.FindStringSubmatch(out[2])
				require.NotNil(t, m, out[2])
				require.Equal(t, strconv.Itoa(tc.size*tc.iters*2), m[1])
				m = ppItersRe.FindStringSubmatch(out[3])
				require.NotNil(t, m, out[3])
				require.Equal(t, strconv.Itoa(tc.iters), m[1])
			}
			nroce, narp := checkCapture(t, cliCap)
			pkts := (tc.size + 1023) / 1024
			require.GreaterOrEqual(t, nroce, 2*tc.iters*(pkts+1), "each message and its ACK, both ways")
			require.Equal(t, 2, narp, "the client resolved the server (request + reply)")
			n2, narp2 := checkCapture(t, srvCap)
			if tc.faults == "" {
				require.Equal(t, nroce, n2, "both ends saw the same RoCE frames")
			} else {
				// The client's capture (taken at its port, above the fault)
				// has the lost frame; the server never saw it.
				require.Equal(t, nroce, n2+1, "exactly one frame lost on the way")
				require.Contains(t, cli.stderr.String(), "softnic: fault plan ", "the plan is explained on stderr")
			}
			require.Equal(t, 2, narp2)
			tsharkDecodes(t, cliCap, nroce)
		})
	}
}

// TestRDMA64MiBOverUDP: two `softnic rdma` processes on loopback move
// 64 MiB each way by WRITE and by READ (65536 frames per transfer at MTU
// 1024), checked with crc32 sums on both sides. Frames the socket loses
// under the burst are recovered by the transport.
func TestRDMA64MiBOverUDP(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 256 MiB over loopback UDP")
	}
	bin := softnicBin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const size = 64 << 20
	pa, pb := freeUDPPort(t), freeUDPPort(t)
	argv := func(listen, peer int, ip, rip string) []string {
		return []string{bin, "rdma", "--mr-size", fmt.Sprintf("%#x", 256<<20), "--recv-off", fmt.Sprint(192 << 20),
			"--wait-ms", "120000", "--wire", fmt.Sprintf("udp:127.0.0.1:%d,127.0.0.1:%d", listen, peer),
			"--ip", ip, "--remote-ip", rip}
	}
	a := &rdmaSide{proc: startProc(t, ctx, "A", argv(pa, pb, "192.0.2.1", "192.0.2.2")...)}
	b := &rdmaSide{proc: startProc(t, ctx, "B", argv(pb, pa, "192.0.2.2", "192.0.2.1")...)}
	for _, s := range []*rdmaSide{a, b} {
		f := s.expect(t, "LOCAL")
		s.qpn, s.psn = hexArg(t, f, 1), hexArg(t, f, 2)
	}
	a.send(t, "REMOTE %x %x", b.qpn, b.psn)
	b.send(t, "REMOTE %x %x", a.qpn, a.psn)
	for _, s := range []*rdmaSide{a, b} {
		s.send(t, "mr")
		f := s.expect(t, "MR")
		s.addr, s.rkey = hexArg(t, f, 1), hexArg(t, f, 2)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, s := range []*rdmaSide{a, b} {
			fmt.Fprintln(s.stdin, "counters")
			select {
			case l := <-s.lines:
				t.Logf("%s: %s", s.name, l)
			case <-time.After(5 * time.Second):
				// Not answering: ask the Go runtime where it is.
				_ = s.cmd.Process.Signal(syscall.SIGQUIT)
				time.Sleep(time.Second)
				t.Logf("%s did not answer; its goroutines:\n%s", s.name, s.stderr.String())
			}
		}
	})
	step := func(what string, f func()) {
		start := time.Now()
		f()
		d := time.Since(start)
		t.Logf("%s: 64 MiB in %v (%.0f MB/s)", what, d.Round(time.Millisecond), float64(size)/d.Seconds()/1e6)
	}
	step("WRITE A→B", func() {
		a.send(t, "write %x %x %d %d", b.addr+64<<20, b.rkey, size, 0x11)
		a.wantWC(t, "RDMA_WRITE", -1)
	})
	b.wantSum(t, 64<<20, size, 0x11)
	step("WRITE B→A", func() {
		b.send(t, "write %x %x %d %d", a.addr+64<<20, a.rkey, size, 0x22)
		b.wantWC(t, "RDMA_WRITE", -1)
	})
	a.wantSum(t, 64<<20, size, 0x22)
	step("READ A←B", func() { // B's MR[0,64M) holds seed 0x22, A's seed 0x11
		a.send(t, "read %x %x %d", b.addr, b.rkey, size)
		a.wantWC(t, "RDMA_READ", size)
	})
	a.wantSum(t, 0, size, 0x22)
	a.send(t, "write %x %x %d %d", b.addr+128<<20, b.rkey, size, 0x33) // A's MR[0,64M) := seed 0x33
	a.wantWC(t, "RDMA_WRITE", -1)
	step("READ B←A", func() {
		b.send(t, "read %x %x %d", a.addr, a.rkey, size)
		b.wantWC(t, "RDMA_READ", size)
	})
	b.wantSum(t, 0, size, 0x33)
	for _, s := range []*rdmaSide{a, b} {
		s.send(t, "counters")
		f := s.expect(t, "COUNTERS")
		t.Logf("%s: %s", s.name, strings.Join(f[1:], " "))
	}
}
