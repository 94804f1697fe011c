package main

import (
	"bytes"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Mode 2 against itself: two softnic perf processes' worth of NICs on UDP
// loopback, one server and one client, speaking perftest's exchange. (The
// same runs against stock perftest are test/interop's perftest test.)
func TestPerfWireLoopback(t *testing.T) {
	if testing.Short() {
		t.Skip("real sockets")
	}
	cases := []struct {
		name, test string
		extra      []string
	}{
		{"write_lat", "write_lat", nil}, {"send_lat", "send_lat", nil}, {"read_lat", "read_lat", nil},
		{"write_bw", "write_bw", nil}, {"send_bw", "send_bw", nil},
		// -e: both sides sleep on their completion channels.
		{"send_lat -e", "send_lat", []string{"-e"}}, {"read_lat -e", "read_lat", []string{"-e"}},
		{"send_bw -e", "send_bw", []string{"-e"}},
		{"write_bw --tclass", "write_bw", []string{"--tclass", "0x68"}},
		// -b: both sides send; each prints the summed row.
		{"write_bw -b", "write_bw", []string{"-b"}}, {"read_bw -b", "read_bw", []string{"-b"}},
		{"send_bw -b", "send_bw", []string{"-b"}}, {"atomic_bw -b", "atomic_bw", []string{"-b", "-s", "8"}},
		{"send_bw -b -a", "send_bw", []string{"-b", "-a"}},
		{"write_lat --latency_gap", "write_lat", []string{"--latency_gap", "3"}},
	}
	for _, c := range cases {
		test := c.test
		t.Run(c.name, func(t *testing.T) {
			common := append([]string{"perf", test, "-n", "20", "-s", "64", "-p", strconv.Itoa(freeTCPPort(t)), "--quiet", "--timeout", "10s", "--no-progress"}, c.extra...)
			sr, cr := runWirePair(t, common, nil, nil)
			if sr.code != 0 || cr.code != 0 {
				t.Fatalf("server exit %d: %s\nclient exit %d: %s", sr.code, sr.err, cr.code, cr.err)
			}
			size, n := "64", 1
			if test == "atomic_bw" {
				size = "8"
			}
			if slices.Contains(c.extra, "-a") {
				size, n = "2", 23
			}
			rows := tableRows(t, cr.out)
			if len(rows) != n || rows[0][0] != size || rows[0][1] != "20" {
				t.Errorf("client rows %q\n%s", rows, cr.out)
			}
			if test != "read_lat" {
				srows := tableRows(t, sr.out)
				if len(srows) != n || srows[0][0] != size {
					t.Errorf("server rows %q\n%s", srows, sr.out)
				}
				// -b: each side prints its own report plus the peer's,
				// the same two numbers: the same row.
				if slices.Contains(c.extra, "-b") && !slices.Equal(rows[0], srows[0]) {
					t.Errorf("bidirectional rows differ: client %q, server %q", rows[0], srows[0])
				}
			}
		})
	}
}

// TestPerfWireOuts: --outs applies on a real wire too (it used to be
// mode 1 only): each side announces its --outs (fitted to the device's
// max_qp_rd_atom, with perftest's warning above it) as out_reads in the
// exchange, and the header says so, on both sides' address lines.
func TestPerfWireOuts(t *testing.T) {
	if testing.Short() {
		t.Skip("real sockets")
	}
	for _, c := range []struct {
		name           string
		test           string
		server, client []string
		sOut, cOut     string // the OUT fields announced
		cHeader        string
		cWarned        bool
	}{
		{"read_bw 4 and 2", "read_bw", []string{"--outs", "4"}, []string{"-o", "2"}, "0x04", "0x02", " Outstand reads  : 2\n", false},
		{"read_lat above max", "read_lat", nil, []string{"--outs", "40"}, "0x10", "0x10", " Outstand reads  : 16\n", true},
		{"read_bw default", "read_bw", nil, nil, "0x10", "0x10", " Outstand reads  : 16\n", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			common := []string{"perf", c.test, "-n", "20", "-s", "64", "-p", strconv.Itoa(freeTCPPort(t)), "--quiet", "--timeout", "10s", "--no-progress"}
			sr, cr := runWirePair(t, common, c.server, c.client)
			if sr.code != 0 || cr.code != 0 {
				t.Fatalf("server exit %d: %s\nclient exit %d: %s", sr.code, sr.err, cr.code, cr.err)
			}
			out := cr.out
			if !strings.Contains(out, c.cHeader) {
				t.Errorf("client header lacks %q:\n%s", c.cHeader, out)
			}
			if !strings.Contains(out, " local address: ") || !strings.Contains(out, "OUT "+c.cOut+" RKey") {
				t.Errorf("client's local address line lacks OUT %s:\n%s", c.cOut, out)
			}
			if i := strings.Index(out, " remote address: "); i < 0 || !strings.Contains(out[i:], "OUT "+c.sOut+" RKey") {
				t.Errorf("client's remote address line lacks the server's OUT %s:\n%s", c.sOut, out)
			}
			if got := strings.Contains(cr.err, "Number of outstanding reads is above max = 16"); got != c.cWarned {
				t.Errorf("warned %v, want %v: %s", got, c.cWarned, cr.err)
			}
		})
	}
}

// wireRun is one side's exit code, stdout and stderr.
type wireRun struct {
	code     int
	out, err string
}

// runWirePair runs a server and a client of the same command against each
// other over UDP loopback (server 192.0.2.1, client 192.0.2.2, which also
// names the server's TCP host 127.0.0.1): common, then each side's own
// arguments, then its --wire and --ip. The server runs in a goroutine; the
// client's return waits for it.
func runWirePair(t *testing.T, common, server, client []string) (s, c wireRun) {
	t.Helper()
	a, b := freeUDPPort(t), freeUDPPort(t)
	side := func(own []string, from, to int, ip string, rest ...string) wireRun {
		var out, errb bytes.Buffer
		args := append(append(append([]string{}, common...), own...), "--wire", fmt.Sprintf("udp:127.0.0.1:%d,127.0.0.1:%d", from, to), "--ip", ip)
		code := run(append(args, rest...), &out, &errb)
		return wireRun{code, out.String(), errb.String()}
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s = side(server, a, b, "192.0.2.1")
	}()
	c = side(client, b, a, "192.0.2.2", "127.0.0.1")
	wg.Wait()
	return s, c
}

// TestPerfWireExchangeOrder: the client's TCP messages, in order and by
// size, are those stock perftest 4.5-0.17 exchanges in that test's main
// (write_bw.c, send_bw.c), seen through a proxy between two softnic perf
// processes' worth of NICs. Two softnic sides that agree with each other
// but not with perftest pass TestPerfWireLoopback; here they do not: a
// bidirectional write_bw once had a barrier after the run that perftest
// only has in its -a loop, so stock perftest read softnic's keys as its
// report.
func TestPerfWireExchangeOrder(t *testing.T) {
	if testing.Short() {
		t.Skip("real sockets")
	}
	// The messages (perftest_exchange.go): the preamble (version, cycle
	// buffer, cache line, MTU), keys, the report's five fields, "done".
	preamble := []int{16, 4, 4, 2}
	keys := func(n int) []int { return slices.Repeat([]int{ptKeyMsgGID}, n) }
	report := slices.Repeat([]int{8}, 5)
	closing := []int{ptKeyMsgGID, len(ptDone)}
	seq := func(parts ...[]int) []int { return slices.Concat(parts...) }
	for _, c := range []struct {
		name  string
		test  string
		extra []string
		want  []int
	}{
		// ctx_hand_shake per QP, ctx_connect, the per-QP round that
		// prints the remote address, the one after RTR; the client's
		// end: one more, its report; ctx_close_connection.
		{"write_bw", "write_bw", nil, seq(preamble, keys(3), keys(1), report, closing)},
		// -b: the barrier before run_iter_bw, then the reports cross at
		// once (no barrier after the run: RUN_REGULAR has none).
		{"write_bw -b", "write_bw", []string{"-b"}, seq(preamble, keys(3), keys(1), report, closing)},
		{"read_bw -b", "read_bw", []string{"-b"}, seq(preamble, keys(3), keys(1), report, closing)},
		{"atomic_bw -b", "atomic_bw", []string{"-b", "-s", "8"}, seq(preamble, keys(3), keys(1), report, closing)},
		// send_bw: the QP round, the barrier after ctx_connect, the
		// print round, the barrier after the receives are posted; no
		// report one way, the reports with -b.
		{"send_bw", "send_bw", nil, seq(preamble, keys(3), keys(1), closing)},
		{"send_bw -b", "send_bw", []string{"-b"}, seq(preamble, keys(3), keys(1), report, closing)},
		// -a -b: write_bw's RUN_ALL loop has a barrier before and after
		// each size's run (its version is 4.6 or later), then the
		// reports; send_bw's a barrier after each size.
		{"write_bw -b -a", "write_bw", []string{"-b", "-a", "-n", "5"},
			seq(preamble, keys(3), slices.Repeat(seq(keys(2), report), 23), closing)},
		{"send_bw -b -a", "send_bw", []string{"-b", "-a", "-n", "5"},
			seq(preamble, keys(3), slices.Repeat(seq(keys(1), report, keys(1)), 23), closing)},
	} {
		t.Run(c.name, func(t *testing.T) {
			px := startPTProxy(t)
			srvPort := px.srvPort
			common := append([]string{"perf", c.test, "-n", "20", "-s", "64", "--quiet", "--timeout", "10s", "--no-progress"}, c.extra...)
			sr, cr := runWirePair(t, common, []string{"-p", strconv.Itoa(srvPort)}, []string{"-p", strconv.Itoa(px.port)})
			if sr.code != 0 || cr.code != 0 {
				t.Fatalf("server exit %d: %s\nclient exit %d: %s", sr.code, sr.err, cr.code, cr.err)
			}
			if got := px.clientTurns(); !slices.Equal(got, c.want) {
				t.Errorf("the client's messages by size:\n got %v\nwant %v", got, c.want)
			}
		})
	}
}

// ptProxy forwards one TCP connection to a server port and records the
// bytes of each direction as they pass.
type ptProxy struct {
	port    int // where the client connects
	srvPort int // where the server listens
	mu      sync.Mutex
	log     []ptChunk
	done    chan struct{}
}

type ptChunk struct {
	fromClient bool
	n          int
}

// startPTProxy listens on a free port and, for the one client that
// connects, dials 127.0.0.1:srvPort (until the server listens). The
// server's port is picked while the proxy's listener is open, so the two
// differ.
func startPTProxy(t *testing.T) *ptProxy {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	px := &ptProxy{port: ln.Addr().(*net.TCPAddr).Port, done: make(chan struct{})}
	px.srvPort = freeTCPPort(t)
	srvPort := px.srvPort
	t.Cleanup(func() { ln.Close(); <-px.done })
	go func() {
		defer close(px.done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		var s net.Conn
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if s, err = net.Dial("tcp4", fmt.Sprintf("127.0.0.1:%d", srvPort)); err == nil || time.Now().After(deadline) {
				break
			}
		}
		if err != nil {
			return
		}
		defer s.Close()
		var wg sync.WaitGroup
		pipe := func(dst, src net.Conn, fromClient bool) {
			defer wg.Done()
			b := make([]byte, 4096)
			for {
				n, err := src.Read(b)
				if n > 0 {
					// Recorded before it is forwarded: the reply it
					// causes is recorded after it.
					px.mu.Lock()
					px.log = append(px.log, ptChunk{fromClient, n})
					px.mu.Unlock()
					if _, werr := dst.Write(b[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					if tc, ok := dst.(*net.TCPConn); ok {
						_ = tc.CloseWrite()
					}
					return
				}
			}
		}
		wg.Add(2)
		go pipe(s, c, true)
		go pipe(c, s, false)
		wg.Wait()
	}()
	return px
}

// clientTurns are the client's messages: its bytes between two replies of
// the server. The exchange is lock-step (the client writes a message, then
// reads the server's), so each turn is one message.
func (px *ptProxy) clientTurns() []int {
	px.mu.Lock()
	defer px.mu.Unlock()
	var turns []int
	prevClient := false
	for _, c := range px.log {
		if !c.fromClient {
			prevClient = false
			continue
		}
		if prevClient {
			turns[len(turns)-1] += c.n
		} else {
			turns = append(turns, c.n)
		}
		prevClient = true
	}
	return turns
}
