package main

import (
	"bufio"
	"os/exec"
	"path/filepath"
	"strings"
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
	sock := filepath.Join(t.TempDir(), "s.sock")
	cmd := exec.Command(softnicBin(t), "serve", "--socket", sock, "--devices", "2")
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer cmd.Process.Kill()
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
	require.Contains(t, next(), "2 devices (softnic0, softnic1)")

	ctx, err := provider.Dial("softnic0", provider.DialOptions{Socket: sock})
	require.NoError(t, err)
	require.Contains(t, next(), "attach softnic0")
	_, err = provider.Dial("softnic0", provider.DialOptions{Socket: sock})
	require.ErrorIs(t, err, syscall.EBUSY)
	require.Contains(t, next(), "refused")
	pd, err := ctx.AllocPD()
	require.NoError(t, err)
	_ = pd
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
