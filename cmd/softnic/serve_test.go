package main

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/softnic/softnic/provider"
	"github.com/stretchr/testify/require"
)

// TestServeCommand: softnic serve comes up, logs an attach and a detach,
// refuses a second attach of a busy device, and stops cleanly on SIGTERM,
// removing its socket.
func TestServeCommand(t *testing.T) {
	sock, cmd, lines, next := startServe(t, "--devices", "2")
	require.Contains(t, next(), "2 devices (softnic0, softnic1)")

	ctx, err := provider.Dial("softnic0", provider.DialOptions{Socket: sock})
	require.NoError(t, err)
	require.Contains(t, next(), "attach softnic0")
	_, err = provider.Dial("softnic0", provider.DialOptions{Socket: sock})
	require.ErrorIs(t, err, syscall.EBUSY)
	require.Contains(t, next(), "refused")
	_, err = ctx.AllocPD()
	require.NoError(t, err)
	require.NoError(t, ctx.Close())
	require.Contains(t, next(), "detach softnic0")

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	var rest []string
	for l := range lines {
		rest = append(rest, l)
	}
	require.NoError(t, cmd.Wait())
	require.Contains(t, strings.Join(rest, "\n"), "stopped after 1 attaches, 1 detaches, 1 refusals")
	require.NoFileExists(t, sock)
}

// TestServeSIGTERMWithClients: SIGTERM while a client is attached with
// objects open and another connection has not sent ATTACH: softnic serve
// tears the client down, exits 0 within a second and removes its socket;
// the client's next call fails with ErrDeviceGone, not a hang.
func TestServeSIGTERMWithClients(t *testing.T) {
	sock, cmd, lines, next := startServe(t, "--devices", "2")
	require.Contains(t, next(), "2 devices")
	ctx, err := provider.Dial("softnic0", provider.DialOptions{Socket: sock})
	require.NoError(t, err)
	pd, err := ctx.AllocPD()
	require.NoError(t, err)
	_, err = ctx.CreateCQ(16)
	require.NoError(t, err)
	_, err = pd.RegMR(ctx.Mem().Base(), 4096, provider.AccessLocalWrite)
	require.NoError(t, err)
	require.Contains(t, next(), "attach softnic0")
	silent, err := net.Dial("unixpacket", sock)
	require.NoError(t, err)
	defer silent.Close()

	start := time.Now()
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	var rest []string
	for l := range lines {
		rest = append(rest, l)
	}
	require.NoError(t, cmd.Wait())
	require.Less(t, time.Since(start), 2*time.Second, "%s", strings.Join(rest, "\n"))
	log := strings.Join(rest, "\n")
	require.Contains(t, log, "detach softnic0")
	require.Contains(t, log, "destroyed 1 CQ, 1 MR, 1 PD")
	require.NoFileExists(t, sock)
	_, err = ctx.AllocPD()
	require.ErrorIs(t, err, provider.ErrDeviceGone)
	require.ErrorIs(t, ctx.Close(), provider.ErrDeviceGone)
}

// startServe runs softnic serve on a fresh socket with args and returns
// the socket, the process, its stderr lines and a reader of the next line
// that fails the test after 10 s without one.
func startServe(t *testing.T, args ...string) (string, *exec.Cmd, <-chan string, func() string) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "s.sock")
	cmd := exec.Command(softnicBin(t), append([]string{"serve", "--socket", sock}, args...)...)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	next := func() string {
		select {
		case l := <-lines:
			return l
		case <-time.After(10 * time.Second):
			t.Fatal("no log line from softnic serve")
		}
		return ""
	}
	return sock, cmd, lines, next
}

// lockedBuf is a bytes.Buffer that a process writes while the test reads.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// ppProc is one softnic rc_pingpong process.
type ppProc struct {
	cmd *exec.Cmd
	out lockedBuf
}

func startPingpong(t *testing.T, args ...string) *ppProc {
	t.Helper()
	p := &ppProc{cmd: exec.Command(softnicBin(t), append([]string{"rc_pingpong"}, args...)...)}
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	require.NoError(t, p.cmd.Start())
	t.Cleanup(func() { p.cmd.Process.Kill() })
	return p
}

// wait waits for the process to exit within d and returns its exit code.
func (p *ppProc) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case <-done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(d):
		p.cmd.Process.Kill()
		<-done
		t.Fatalf("rc_pingpong still running after %v:\n%s", d, p.out.String())
		return -1
	}
}

// TestRCPingpongThroughDaemon is issue 9's cross-process example: two
// softnic rc_pingpong processes on softnic0 and softnic1 of one softnic
// serve exchange SEND/RECV with ibv_rc_pingpong's handshake and print its
// summary lines; the daemon logs both attaches and detaches.
func TestRCPingpongThroughDaemon(t *testing.T) {
	for _, mode := range []string{"poll", "events", "wall-clock"} {
		t.Run(mode, func(t *testing.T) { pingpongThroughDaemon(t, mode == "events", mode == "wall-clock") })
	}
}

// pingpongThroughDaemon is one run, polling or (-e, both sides) sleeping
// on CQ events, on a daemon in virtual time or free-running (--clock
// wall).
func pingpongThroughDaemon(t *testing.T, events, wall bool) {
	args := []string{"--devices", "2"}
	if wall {
		args = append(args, "--clock", "wall")
	}
	sock, _, _, next := startServe(t, args...)
	require.Contains(t, next(), "2 devices")
	port := strconv.Itoa(freeTCPPort(t))
	common := []string{"--socket", sock, "-g", "1", "-p", port, "-n", "200", "-s", "4096", "--timeout", "20s"}
	if events {
		common = append(common, "-e")
	}
	srv := startPingpong(t, append([]string{"-d", "softnic0"}, common...)...)
	require.Contains(t, next(), "attach softnic0")
	cli := startPingpong(t, append([]string{"-d", "softnic1", "127.0.0.1"}, common...)...)
	require.Contains(t, next(), "attach softnic1")
	require.Equal(t, 0, cli.wait(t, 60*time.Second), cli.out.String())
	require.Equal(t, 0, srv.wait(t, 60*time.Second), srv.out.String())
	for i, p := range []*ppProc{srv, cli} {
		out := p.out.String()
		mine, peer := "192.0.2.1", "192.0.2.2"
		if i == 1 {
			mine, peer = peer, mine
		}
		require.Regexp(t, `(?m)^  local address:  LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID ::ffff:`+regexp.QuoteMeta(mine)+`$`, out)
		require.Regexp(t, `(?m)^  remote address: LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID ::ffff:`+regexp.QuoteMeta(peer)+`$`, out)
		require.Regexp(t, `(?m)^1638400 bytes in \d+\.\d\d seconds = \d+\.\d\d Mbit/sec$`, out)
		require.Regexp(t, `(?m)^200 iters in \d+\.\d\d seconds = \d+\.\d\d usec/iter$`, out)
	}
	log := next() + "\n" + next()
	require.Contains(t, log, "detach softnic0")
	require.Contains(t, log, "detach softnic1")
}

// TestRCPingpongDaemonFaults: a busy device is refused with the daemon's
// EBUSY, a missing daemon is a clean error, and when the daemon dies mid
// run both sides fail with an error rather than hang.
func TestRCPingpongDaemonFaults(t *testing.T) {
	sock, serveCmd, _, next := startServe(t, "--devices", "2")
	require.Contains(t, next(), "2 devices")
	port := strconv.Itoa(freeTCPPort(t))

	t.Run("no_daemon", func(t *testing.T) {
		p := startPingpong(t, "-d", "softnic0", "--socket", filepath.Join(t.TempDir(), "none.sock"), "-g", "1", "-p", port)
		require.Equal(t, 1, p.wait(t, 10*time.Second))
		require.Contains(t, p.out.String(), "couldn't attach to softnic0")
	})
	t.Run("wire_and_socket", func(t *testing.T) {
		p := startPingpong(t, "-d", "softnic0", "--socket", sock, "--wire", "udp:127.0.0.1:1,127.0.0.1:2", "-g", "1")
		require.Equal(t, 2, p.wait(t, 10*time.Second))
		require.Contains(t, p.out.String(), "exclude each other")
	})

	// A server that runs for ever (-n huge), its client, then the daemon
	// killed under them.
	common := []string{"--socket", sock, "-g", "1", "-p", port, "-n", "100000000", "--timeout", "30s"}
	srv := startPingpong(t, append([]string{"-d", "softnic0"}, common...)...)
	require.Contains(t, next(), "attach softnic0")
	busy := startPingpong(t, "-d", "softnic0", "--socket", sock, "-g", "1", "-p", strconv.Itoa(freeTCPPort(t)))
	require.Equal(t, 1, busy.wait(t, 10*time.Second))
	require.Contains(t, busy.out.String(), "device or resource busy")
	cli := startPingpong(t, append([]string{"-d", "softnic1", "127.0.0.1"}, common...)...)
	for end := time.Now().Add(20 * time.Second); !strings.Contains(cli.out.String(), "remote address"); time.Sleep(20 * time.Millisecond) {
		require.True(t, time.Now().Before(end), "no handshake:\n%s\n%s", srv.out.String(), cli.out.String())
	}
	time.Sleep(200 * time.Millisecond) // mid run
	require.NoError(t, serveCmd.Process.Kill())
	for _, p := range []*ppProc{srv, cli} {
		require.Equal(t, 1, p.wait(t, 10*time.Second), p.out.String())
		require.Contains(t, p.out.String(), "device gone", p.out.String())
	}
}

// TestServeOnWire: softnic serve --wire puts softnic0 on a UDP wire; a
// standalone softnic rc_pingpong --wire (its own NIC, paced by package
// wallclock) is the server, a client of the daemon's device the client.
// The daemon resolves the server's MAC by ARP inside modify_qp.
func TestServeOnWire(t *testing.T) {
	a, b := freeUDPPort(t), freeUDPPort(t)
	sock, _, _, next := startServe(t, "--devices", "1",
		"--wire", fmt.Sprintf("udp:127.0.0.1:%d,127.0.0.1:%d", a, b), "--ip", "192.0.2.10")
	require.Contains(t, next(), "clock wall")
	require.Contains(t, next(), "softnic0 on udp:127.0.0.1:")
	port := strconv.Itoa(freeTCPPort(t))
	common := []string{"-g", "1", "-p", port, "-n", "100", "-s", "1024", "--timeout", "20s"}
	srv := startPingpong(t, append([]string{"--wire", fmt.Sprintf("udp:127.0.0.1:%d,127.0.0.1:%d", b, a), "--ip", "192.0.2.20", "--quiet"}, common...)...)
	cli := startPingpong(t, append([]string{"-d", "softnic0", "--socket", sock, "127.0.0.1"}, common...)...)
	require.Equal(t, 0, cli.wait(t, 60*time.Second), "client:\n%s\nserver:\n%s", cli.out.String(), srv.out.String())
	require.Equal(t, 0, srv.wait(t, 60*time.Second), srv.out.String())
	require.Contains(t, cli.out.String(), "GID ::ffff:192.0.2.10")
	require.Contains(t, cli.out.String(), "remote address: LID 0x0000")
	require.Regexp(t, `(?m)^100 iters in \d+\.\d\d seconds`, cli.out.String())
	require.Regexp(t, `(?m)^100 iters in \d+\.\d\d seconds`, srv.out.String())
}

func TestServeFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"bad_clock", []string{"--clock", "lunar"}, "want sim or wall"},
		{"sim_with_wire", []string{"--clock", "sim", "--wire", "udp:127.0.0.1:1,127.0.0.1:2"}, "cannot pace"},
		{"ip_without_wire", []string{"--ip", "192.0.2.1"}, "1 --ip for 0 --wire"},
		{"bad_wire", []string{"--wire", "pigeon:1"}, "--wire pigeon:1"},
		{"bad_ip", []string{"--wire", "udp:127.0.0.1:1,127.0.0.1:2", "--ip", "::1"}, "need an IPv4 address"},
		{"zero_lead", []string{"--clock", "wall", "--lead", "0"}, "--lead 0s: need a positive duration"},
		{"negative_lead", []string{"--clock", "wall", "--lead", "-1ms"}, "--lead -1ms: need a positive duration"},
		{"lead_past_the_timers", []string{"--clock", "wall", "--lead", "1s"}, "--lead 1s: at most 10ms"},
		{"zero_devices", []string{"--devices", "0"}, "--devices 0 (want 1 to 64)"},
		{"too_many_devices", []string{"--devices", "100000"}, "--devices 100000 (want 1 to 64)"},
		{"one_past_max_devices", []string{"--devices", "65"}, "--devices 65 (want 1 to 64)"},
		{"socket_too_long", []string{"--socket", "/tmp/" + strings.Repeat("x", 120)}, "a path of 125 bytes (a unix socket's holds at most 107)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := runServe(append([]string{"--socket", filepath.Join(t.TempDir(), "s")}, tc.args...), &out, &errb)
			require.Equal(t, 2, code, errb.String())
			require.Contains(t, errb.String(), tc.want)
		})
	}
}

// TestServeSocketNotASocket: a path that holds another kind of file is
// refused in words, under one "softnic serve:" prefix (the package's own
// "serve:" is not repeated), and the file is left alone.
func TestServeSocketNotASocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "plain")
	require.NoError(t, os.WriteFile(path, []byte("keep"), 0o644))
	var out, errb bytes.Buffer
	require.Equal(t, 1, runServe([]string{"--socket", path}, &out, &errb))
	require.Equal(t, "softnic serve: "+path+" exists and is not a socket (a regular file)\n", errb.String())
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "keep", string(b))
}

// TestRCPingpongDaemonStopped: a daemon stopped (SIGTERM) under a
// polling ping-pong flushes the clients' QPs as it detaches them; each
// client's last line, the error it exits with, names the device gone,
// not only the flush status of the completion it was polling for.
func TestRCPingpongDaemonStopped(t *testing.T) {
	sock, serveCmd, _, next := startServe(t, "--devices", "2")
	require.Contains(t, next(), "2 devices")
	port := strconv.Itoa(freeTCPPort(t))
	common := []string{"--socket", sock, "-g", "1", "-p", port, "-n", "100000000", "--timeout", "30s"}
	srv := startPingpong(t, append([]string{"-d", "softnic0"}, common...)...)
	require.Contains(t, next(), "attach softnic0")
	cli := startPingpong(t, append([]string{"-d", "softnic1", "127.0.0.1"}, common...)...)
	for end := time.Now().Add(20 * time.Second); !strings.Contains(cli.out.String(), "remote address"); time.Sleep(20 * time.Millisecond) {
		require.True(t, time.Now().Before(end), "no handshake:\n%s\n%s", srv.out.String(), cli.out.String())
	}
	time.Sleep(200 * time.Millisecond) // mid run
	require.NoError(t, serveCmd.Process.Signal(syscall.SIGTERM))
	for _, p := range []*ppProc{srv, cli} {
		require.Equal(t, 1, p.wait(t, 10*time.Second), p.out.String())
		lines := strings.Split(strings.TrimSpace(p.out.String()), "\n")
		require.Contains(t, lines[len(lines)-1], "device gone", p.out.String())
	}
}
