package mmioring

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The test binary re-executes itself as the producer of a cross-process
// ring: childEnv says what to do, the memfd is fd 3 (cmd.ExtraFiles), its
// size is in sizeEnv.
const (
	childEnv = "SOFTNIC_RING_CHILD" // "count:N:batch", "stream" or "consume"
	sizeEnv  = "SOFTNIC_RING_SIZE"
)

// childMain is the producer process. count: push records 0..N-1 in
// batches of batch and close. stream: push records until the ring fails
// (the parent kills it). consume: pop and check records until killed.
func childMain() int {
	size, err := strconv.Atoi(os.Getenv(sizeEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: size:", err)
		return 2
	}
	mem, err := syscall.Mmap(3, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: mmap:", err)
		return 2
	}
	r, err := Attach(mem)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: attach:", err)
		return 2
	}
	if os.Getenv(childEnv) == "consume" {
		c := r.Consumer()
		var out [16]Record
		for next := uint64(0); ; {
			n, err := c.PopN(out[:], time.Now().Add(10*time.Second))
			if err != nil {
				fmt.Fprintln(os.Stderr, "child: pop:", err)
				return 1
			}
			for j := range n {
				if out[j] != genRecord(next) {
					fmt.Fprintln(os.Stderr, "child: record", next, "out of order")
					return 1
				}
				next++
			}
		}
	}
	p := r.Producer()
	total, batch := ^uint64(0), 8
	if f := strings.Split(os.Getenv(childEnv), ":"); f[0] == "count" && len(f) == 3 {
		total, _ = strconv.ParseUint(f[1], 10, 64)
		batch, _ = strconv.Atoi(f[2])
	}
	recs := make([]Record, max(batch, 1))
	for i := uint64(0); i < total; {
		k := int(min(uint64(len(recs)), total-i))
		for j := range k {
			recs[j] = genRecord(i + uint64(j))
		}
		n, err := p.PushN(recs[:k], time.Now().Add(10*time.Second))
		i += uint64(n)
		if err != nil {
			fmt.Fprintln(os.Stderr, "child: push:", err)
			return 1
		}
	}
	p.Close()
	return 0
}

// crossRing makes a memfd ring and starts the child producer on it.
func crossRing(t testing.TB, slots int, mode string) (*exec.Cmd, *Consumer) {
	cmd, r := crossRingOf(t, slots, mode)
	return cmd, r.Consumer()
}

// crossRingOf is crossRing returning the ring, for either endpoint.
func crossRingOf(t testing.TB, slots int, mode string) (*exec.Cmd, *Ring) {
	t.Helper()
	reg, mem := memfdMem(t, Size(slots))
	if reg.Fd() < 0 {
		t.Skip("no memfd on this host")
	}
	r, err := Init(mem, slots)
	require.NoError(t, err)
	fd, err := syscall.Dup(reg.Fd())
	require.NoError(t, err)
	f := os.NewFile(uintptr(fd), "mmioring")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+mode, sizeEnv+"="+strconv.Itoa(len(mem)))
	cmd.ExtraFiles = []*os.File{f}
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	f.Close()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return cmd, r
}

// waitFor is a killed-peer test's deadline for one call: short once the
// peer is killed (the call must end at it), and 10 s while the peer is
// alive, which a loaded machine may leave unscheduled for longer than the
// short one (a child still starting, or descheduled).
func waitFor(killed bool, short time.Duration) time.Duration {
	if killed {
		return short
	}
	return 10 * time.Second
}

func TestCrossProcess(t *testing.T) {
	t.Run("sequence", func(t *testing.T) {
		const total = 200_000
		cmd, c := crossRing(t, 1024, fmt.Sprintf("count:%d:16", total))
		require.Equal(t, uint64(total), popInOrder(t, c, func(uint64) int { return 64 }))
		require.NoError(t, cmd.Wait())
	})
	t.Run("producer killed", func(t *testing.T) {
		cmd, c := crossRing(t, 1024, "stream")
		var out [64]Record
		next := uint64(0)
		killed := false
		// Until the kill a stall is the loaded machine's (the child not
		// yet started or descheduled), not a dead peer: only the wait
		// for a dead producer is held to the short deadline.
		const deadline = 300 * time.Millisecond
		for {
			if !killed && next >= 100_000 {
				require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
				killed = true
			}
			start := time.Now()
			n, err := c.PopN(out[:], start.Add(waitFor(killed, deadline)))
			if err != nil {
				require.True(t, killed, "error before the kill: %v", err)
				require.ErrorIs(t, err, ErrTimeout, "a dead producer never closed the ring")
				require.Less(t, time.Since(start), deadline+time.Second, "Pop returned within its deadline")
				break
			}
			for j := range n {
				if want := genRecord(next); out[j] != want {
					require.Equal(t, want, out[j], "record %d", next)
				}
				next++
			}
		}
		err := cmd.Wait()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee)
		require.Equal(t, syscall.SIGKILL, ee.Sys().(syscall.WaitStatus).Signal())
		t.Logf("%d records in order before and after the kill", next)
	})
	t.Run("consumer killed", func(t *testing.T) {
		cmd, r := crossRingOf(t, 1024, "consume")
		p := r.Producer()
		var batch [16]Record
		const deadline = 300 * time.Millisecond
		killed := false
		for i := uint64(0); ; {
			if !killed && i >= 100_000 {
				require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
				killed = true
			}
			for j := range batch {
				batch[j] = genRecord(i + uint64(j))
			}
			start := time.Now()
			n, err := p.PushN(batch[:], start.Add(waitFor(killed, deadline)))
			i += uint64(n)
			if err != nil {
				require.True(t, killed, "error before the kill: %v", err)
				require.ErrorIs(t, err, ErrTimeout, "a dead consumer never closed the ring")
				require.Less(t, time.Since(start), deadline+time.Second, "Push returned within its deadline")
				break
			}
		}
		err := cmd.Wait()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee)
		require.Equal(t, syscall.SIGKILL, ee.Sys().(syscall.WaitStatus).Signal(), "the child checked every record it popped")
	})
}
