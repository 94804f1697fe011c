package serve_test

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softnic/softnic/profile"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/testbed"
	"github.com/stretchr/testify/require"
)

// writeLoop posts n signalled 64 B RDMA WRITEs, one at a time, each
// followed by polling its CQE: the whole post→CQE walk per op.
func writeLoop(eps [2]*testbed.Endpoint, n int) error {
	wr := []provider.SendWR{{Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
		SGL: []provider.SGE{eps[0].MR.SGE(0, 64)}, RemoteAddr: eps[1].Buf.Addr, RKey: eps[1].MR.RKey}}
	wcs := make([]provider.WC, 1)
	for i := 0; i < n; i++ {
		if _, err := eps[0].QP.PostSend(wr); err != nil {
			return err
		}
		for k := 0; k == 0; {
			var err error
			if k, err = eps[0].SendCQ.Poll(wcs); err != nil {
				return err
			}
		}
		if wcs[0].Status != provider.WCSuccess {
			return fmt.Errorf("completion %v", wcs[0].Status)
		}
	}
	return nil
}

func benchWrites(b *testing.B, eps [2]*testbed.Endpoint) {
	b.ReportAllocs()
	b.ResetTimer()
	if err := writeLoop(eps, b.N); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

// benchChild is the "bench" child: it dials softnic0 and softnic1, says
// "ready", and on each line "N" from stdin runs N writes and answers
// "done ALLOCS" (heap allocations of the loop).
func benchChild() error {
	eps, closeAll, err := dialPair(provider.DialOptions{Clock: provider.NewHostClock(), Timeout: 5 * time.Second}, allOps)
	if err != nil {
		return err
	}
	defer closeAll()
	if err := writeLoop(eps, 100); err != nil { // warm up
		return err
	}
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	var ms runtime.MemStats
	for in.Scan() {
		n, err := strconv.Atoi(in.Text())
		if err != nil {
			return err
		}
		runtime.ReadMemStats(&ms)
		before := ms.Mallocs
		if err := writeLoop(eps, n); err != nil {
			return err
		}
		runtime.ReadMemStats(&ms)
		fmt.Printf("done %d\n", ms.Mallocs-before)
	}
	return nil
}

// BenchmarkPostCQE: the same post→CQE loop on a one-process world, on a
// daemon's devices with the client in the daemon's process (socket, ring
// and memfd between provider and device, one scheduler), and with the
// client in a process of its own (the cost a real application pays: its
// allocations are the child's, reported as child-allocs/op). Run side by
// side: go test -run '^$' -bench PostCQE ./serve
func BenchmarkPostCQE(b *testing.B) {
	b.Run("in-process", func(b *testing.B) {
		p := profile.Default()
		w, err := testbed.New(testbed.Config{Device: p.Device, Wire: p.Wire, Host: p.Host()})
		require.NoError(b, err)
		defer w.Close()
		eps, err := w.ConnectRC(allOps)
		require.NoError(b, err)
		benchWrites(b, eps)
	})
	b.Run("daemon", func(b *testing.B) {
		_, sock, _ := startDaemon(b, 2, nil)
		eps, closeAll, err := dialPair(provider.DialOptions{Socket: sock, Clock: provider.NewHostClock(), Timeout: 5 * time.Second}, allOps)
		require.NoError(b, err)
		defer closeAll()
		benchWrites(b, eps)
	})
	b.Run("daemon-process", func(b *testing.B) {
		_, sock, _ := startDaemon(b, 2, nil)
		cmd := child(b, "bench", sock)
		stdin, err := cmd.StdinPipe()
		require.NoError(b, err)
		stdout, err := cmd.StdoutPipe()
		require.NoError(b, err)
		require.NoError(b, cmd.Start())
		defer func() { stdin.Close(); cmd.Wait() }()
		out := bufio.NewScanner(stdout)
		line := func() string {
			if !out.Scan() {
				b.Fatalf("the bench child stopped: %v", out.Err())
			}
			if l := out.Text(); !strings.HasPrefix(l, "FAIL") {
				return l
			}
			b.Fatal(out.Text())
			return ""
		}
		require.Equal(b, "ready", line())
		b.ResetTimer()
		fmt.Fprintf(stdin, "%d\n", b.N)
		done := line()
		b.StopTimer()
		allocs, err := strconv.ParseUint(strings.TrimPrefix(done, "done "), 10, 64)
		require.NoError(b, err, done)
		b.ReportMetric(float64(allocs)/float64(b.N), "child-allocs/op")
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
	})
}
