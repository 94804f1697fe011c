package interop

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// buildSoftnic compiles cmd/softnic into dir.
func buildSoftnic(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "softnic")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/softnic/softnic/cmd/softnic")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build softnic: %w\n%s", err, out)
	}
	return bin, nil
}

// softnicHas reports whether the softnic binary has a subcommand.
func softnicHas(bin, sub string) bool {
	out, _ := exec.Command(bin, "help").CombinedOutput()
	for line := range strings.SplitSeq(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == sub {
			return true
		}
	}
	return false
}

// wireArgs are the flags that put a softnic port on the guest's UDP link.
func wireArgs(g *guest, pcap string) []string {
	return []string{
		"--wire", fmt.Sprintf("udp:127.0.0.1:%d,127.0.0.1:%d", g.peerUDP, g.guestUDP),
		"--ip", softnicIP, "--mac", softnicMAC,
		"--pcap", pcap,
	}
}

// syncBuffer is a bytes.Buffer safe for a process's writer goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// proc is a softnic process.
type proc struct {
	cmd    *exec.Cmd
	stdout syncBuffer
	stderr syncBuffer
	done   chan struct{}
	err    error
}

// startProc starts bin with args; stdout goes to out if given (else into
// p.stdout).
func startProc(bin string, args []string, stdin io.Reader, out io.Writer) (*proc, error) {
	p := &proc{cmd: exec.Command(bin, args...), done: make(chan struct{})}
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p.cmd.Stdin = stdin
	p.cmd.Stdout = &p.stdout
	if out != nil {
		p.cmd.Stdout = io.MultiWriter(&p.stdout, out)
	}
	p.cmd.Stderr = &p.stderr
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	return p, nil
}

// wait waits for the process; after timeout it is killed.
func (p *proc) wait(timeout time.Duration) error {
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s killed after %v", filepath.Base(p.cmd.Path), timeout)
	}
}

// rdmaProc is `softnic rdma` driven through its line protocol.
type rdmaProc struct {
	*proc
	stdin io.WriteCloser
	side  *side
}

func startRdma(bin string, args []string) (*rdmaProc, error) {
	pr, pw := io.Pipe()
	inR, inW := io.Pipe()
	p, err := startProc(bin, append([]string{"rdma"}, args...), inR, pw)
	if err != nil {
		return nil, err
	}
	go func() { <-p.done; pw.Close(); inR.Close() }()
	s := &side{name: "softnic", p: newLinePeer("softnic rdma", pr, inW)}
	return &rdmaProc{proc: p, stdin: inW, side: s}, nil
}

// stop sends quit and waits for the process to end.
func (r *rdmaProc) stop() error {
	_ = r.side.p.quit()
	_ = r.stdin.Close()
	return r.wait(opTimeout)
}

// decodePcap runs `softnic decode` on a capture: every RoCEv2 frame with its
// ICRC verdict. ok is false when a frame was malformed or had a bad ICRC.
func decodePcap(bin, pcap string) (text string, ok bool) {
	if _, err := os.Stat(pcap); err != nil {
		return "(no capture: " + err.Error() + ")", false
	}
	out, err := exec.Command(bin, "decode", pcap).CombinedOutput()
	return string(out), err == nil
}

// tailLines keeps the last n lines of s.
func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) <= n {
		return strings.Join(lines, "\n")
	}
	return fmt.Sprintf("(… %d lines before)\n", len(lines)-n) + strings.Join(lines[len(lines)-n:], "\n")
}

// tcpListening reports whether something on this host listens on TCP port.
func tcpListening(port int) bool {
	want := fmt.Sprintf(":%04X", port)
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			// sl local_address rem_address st ...; st 0A = LISTEN
			if len(fields) > 3 && strings.HasSuffix(fields[1], want) && fields[3] == "0A" {
				fh.Close()
				return true
			}
		}
		fh.Close()
	}
	return false
}

// counterSet is a set of named counters ("name value" lines).
type counterSet map[string]int64

func parseCounters(text string) counterSet {
	c := counterSet{}
	for line := range strings.SplitSeq(text, "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		if v, err := strconv.ParseInt(f[1], 10, 64); err == nil {
			c[f[0]] = v
		}
	}
	return c
}

// delta lists the counters that changed from before to c, sorted by name.
func (c counterSet) delta(before counterSet) string {
	var names []string
	for k := range c {
		if c[k] != before[k] {
			names = append(names, k)
		}
	}
	if len(names) == 0 {
		return "(no change)"
	}
	slices.Sort(names)
	var b strings.Builder
	for _, k := range names {
		fmt.Fprintf(&b, "%s +%d\n", k, c[k]-before[k])
	}
	return strings.TrimRight(b.String(), "\n")
}

// trafficCounters are the rxe0 counters every exchange moves; the rest
// (sequence errors, duplicates, retries, RNR) say something went wrong.
var trafficCounters = map[string]bool{"rcvd_pkts": true, "sent_pkts": true, "rdma_sends": true, "rdma_recvs": true}

// unusual is delta restricted to the counters outside trafficCounters, on
// one line ("" when none moved).
func (c counterSet) unusual(before counterSet) string {
	var parts []string
	for _, line := range strings.Split(c.delta(before), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && !trafficCounters[f[0]] && line != "(no change)" {
			parts = append(parts, f[0]+" "+f[1])
		}
	}
	return strings.Join(parts, ", ")
}

// pcapFrames counts the records of a classic pcap file written so far (a
// record still being written is not counted).
func pcapFrames(path string) int {
	b, err := os.ReadFile(path)
	if err != nil || len(b) < 24 {
		return 0
	}
	var order binary.ByteOrder = binary.LittleEndian
	switch binary.LittleEndian.Uint32(b) {
	case 0xa1b2c3d4, 0xa1b23c4d:
	default:
		order = binary.BigEndian
	}
	n := 0
	for off := 24; off+16 <= len(b); n++ {
		incl := int(order.Uint32(b[off+8:]))
		if off+16+incl > len(b) {
			break
		}
		off += 16 + incl
	}
	return n
}

// decodeFrames is `softnic decode` restricted to frames from..to (1-based,
// inclusive), with a count of how many there were.
func decodeFrames(bin, pcap string, from, to int) string {
	text, _ := decodePcap(bin, pcap)
	var keep []string
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], "#") {
			continue
		}
		if n, err := strconv.Atoi(f[0][1:]); err == nil && n >= from && n <= to {
			keep = append(keep, line)
		}
	}
	if len(keep) == 0 {
		return fmt.Sprintf("(no RoCE frames among #%d..#%d)", from, to)
	}
	return strings.Join(keep, "\n")
}

// tsharkCheck has Wireshark's dissector read a capture: every UDP 4791
// frame must decode as InfiniBand (RRoCE) with its BTH. (Its _ws.malformed
// flag is no use here: tshark 4.0's heuristic sub-dissectors trip over
// random payload bytes, on rxe's frames as on softnic's.) ran is false when
// tshark is not installed.
func tsharkCheck(pcap string) (ran bool, err error) {
	if _, err := exec.LookPath("tshark"); err != nil {
		return false, nil
	}
	out, err := exec.Command("tshark", "-n", "-r", pcap, "-Y", "udp.dstport == 4791 && !infiniband.bth",
		"-T", "fields", "-e", "frame.number").Output()
	if err != nil {
		return true, fmt.Errorf("tshark -r %s: %w", pcap, err)
	}
	if bad := strings.Fields(string(out)); len(bad) > 0 {
		return true, fmt.Errorf("tshark: frames %s of %s do not dissect as RRoCE", strings.Join(bad, ","), filepath.Base(pcap))
	}
	return true, nil
}
