package serve_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/serve"
	"github.com/softnic/softnic/testbed"
	"github.com/softnic/softnic/trace"
	"github.com/stretchr/testify/require"
)

// allOps grants every remote access, atomics included.
var allOps = testbed.ConnOpts{Access: provider.AccessLocalWrite | provider.AccessRemoteWrite | provider.AccessRemoteRead | provider.AccessRemoteAtomic}

// childEnv selects a child role when the test binary re-runs itself.
const childEnv = "SOFTNIC_SERVE_CHILD"

func TestMain(m *testing.M) {
	if role := os.Getenv(childEnv); role != "" {
		os.Exit(childMain(role))
	}
	os.Exit(m.Run())
}

// startDaemon runs a daemon of n devices on a socket in a temporary
// directory, closed at cleanup.
func startDaemon(t testing.TB, n int, rec *trace.Recorder) (*serve.Daemon, string, *syncBuffer) {
	t.Helper()
	log := &syncBuffer{}
	d, sock := startDaemonCfg(t, serve.Config{Devices: n, Log: log, Trace: rec})
	return d, sock, log
}

// child runs this test binary as a child in role with the daemon's socket.
func child(t testing.TB, role, sock string, extra ...string) *exec.Cmd {
	t.Helper()
	// Neither tests nor benchmarks: the child runs childMain only.
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+role, provider.SocketEnv+"="+sock)
	cmd.Env = append(cmd.Env, extra...)
	return cmd
}

// childMain is a child process: it prints "ok ..." lines or "FAIL ..." and
// exits non-zero.
func childMain(role string) int {
	fail := func(format string, args ...any) int {
		fmt.Printf("FAIL "+format+"\n", args...)
		return 1
	}
	if f := qaRoles[role]; f != nil {
		if err := f(); err != nil {
			return fail("%v", err)
		}
		return 0
	}
	switch role {
	case "ops":
		eps, closeAll, err := dialPair(provider.DialOptions{}, allOps)
		if err != nil {
			return fail("connect: %v", err)
		}
		defer closeAll()
		for _, o := range ops {
			if err := runOp(eps, o, time.Now().Add(10*time.Second)); err != nil {
				return fail("%s: %v", o.name, err)
			}
			fmt.Printf("ok %s\n", o.name)
		}
		return 0
	case "trace":
		if err := traceChild(os.Stdout); err != nil {
			return fail("%v", err)
		}
		return 0
	case "peer":
		if err := peerChild(os.Stdin); err != nil {
			return fail("%v", err)
		}
		return 0
	case "bench":
		if err := benchChild(); err != nil {
			return fail("%v", err)
		}
		return 0
	case "hold":
		// Attach, open objects, announce, and wait to be killed.
		eps, _, err := dialPair(provider.DialOptions{}, allOps)
		if err != nil {
			return fail("connect: %v", err)
		}
		_ = eps
		fmt.Println("ready")
		time.Sleep(time.Minute)
		return 0
	}
	return fail("unknown role %q", role)
}

// dialPair dials softnic0 and softnic1 and connects an RC QP on each to
// the other, the testbed's way.
func dialPair(o provider.DialOptions, co testbed.ConnOpts) ([2]*testbed.Endpoint, func(), error) {
	return dialDevices(o, co, 0, 1)
}

// dialDevices dials softnic<a> and softnic<b> and connects them.
func dialDevices(o provider.DialOptions, co testbed.ConnOpts, a, b int) ([2]*testbed.Endpoint, func(), error) {
	var hosts [2]*testbed.Host
	closeAll := func() {
		for _, h := range hosts {
			if h != nil {
				h.Ctx.Close()
			}
		}
	}
	for i, n := range []int{a, b} {
		ctx, err := provider.Dial(fmt.Sprintf("softnic%d", n), o)
		if err != nil {
			closeAll()
			return [2]*testbed.Endpoint{}, nil, err
		}
		hosts[i] = &testbed.Host{Node: n, Ctx: ctx, ID: serve.Identity(n)}
	}
	eps, err := testbed.Connect(hosts, co)
	if err != nil {
		closeAll()
		return eps, nil, err
	}
	return eps, closeAll, nil
}

// TestCrossProcessOps: every RC operation between two devices of the
// daemon, driven by a client in another process.
func TestCrossProcessOps(t *testing.T) {
	d, sock, log := startDaemon(t, 2, nil)
	out, err := child(t, "ops", sock).CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, o := range ops {
		require.Contains(t, string(out), "ok "+o.name+"\n")
	}
	// teardown frees the slot, then logs: wait for both.
	require.Eventually(t, func() bool { return d.Clients() == 0 && strings.Contains(log.String(), "detach softnic1") },
		5*time.Second, 10*time.Millisecond, "the daemon tears the client down: %s", log)
	require.Contains(t, log.String(), "attach softnic0")
}

// TestInProcessOps: the same suite with the client in the daemon's own
// process (still through socket, ring and memfd).
func TestInProcessOps(t *testing.T) {
	_, sock, _ := startDaemon(t, 2, nil)
	eps, closeAll, err := dialPair(provider.DialOptions{Socket: sock}, allOps)
	require.NoError(t, err)
	defer closeAll()
	for _, o := range ops {
		t.Run(o.name, func(t *testing.T) {
			require.NoError(t, runOp(eps, o, time.Now().Add(10*time.Second)))
		})
	}
}

// TestClientKilled: a client killed with SIGKILL while it has QPs open is
// torn down: its objects destroyed, its slot free again, other clients
// unaffected; a peer of its QP sees retry-exceeded, as on hardware.
func TestClientKilled(t *testing.T) {
	d, sock, log := startDaemon(t, 4, nil)
	// The survivor: a client in this process on softnic2/3? No: its peer
	// must be one of the victim's devices, so the victim takes softnic0
	// only and this process softnic1.
	victim := child(t, "hold", sock)
	stdout, err := victim.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, victim.Start())
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "ready\n", line)
	require.Equal(t, 2, d.Clients())

	// An unrelated client on softnic2/softnic3 keeps working throughout.
	other, closeOther, err := dialPairOn(sock, 2, 3)
	require.NoError(t, err)
	defer closeOther()

	require.NoError(t, victim.Process.Kill())
	victim.Wait()
	require.Eventually(t, func() bool { return d.Clients() == 2 }, 5*time.Second, 10*time.Millisecond)
	// The teardown logs after it lets the world go (and after Clients
	// has dropped the client): wait for both detach lines.
	require.Eventually(t, func() bool {
		l := log.String()
		return strings.Contains(l, "detach softnic0") && strings.Contains(l, "detach softnic1")
	}, 5*time.Second, 10*time.Millisecond)
	require.Regexp(t, `detach softnic0: pid \d+: closed; destroyed 1 QP, 2 CQ, 1 MR, 1 PD \(the world held [0-9.]+[µm]?s\)`, log.String())
	for _, l := range strings.Split(log.String(), "\n") {
		if strings.Contains(l, "detach") {
			t.Log(l) // the cost to the others: how long the teardown held the world
		}
	}

	for _, o := range ops {
		require.NoError(t, runOp(other, o, time.Now().Add(10*time.Second)), o.name)
	}
	// The slot is free again.
	ctx, err := provider.Dial("softnic0", provider.DialOptions{Socket: sock})
	require.NoError(t, err)
	require.NoError(t, ctx.Close())
}

// dialPairOn dials softnic<a> and softnic<b> on sock and connects them.
func dialPairOn(sock string, a, b int) ([2]*testbed.Endpoint, func(), error) {
	return dialDevices(provider.DialOptions{Socket: sock}, allOps, a, b)
}

// TestDaemonKilled: when the daemon goes away every provider call returns
// an error within the dial timeout; nothing hangs.
func TestDaemonKilled(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "softnic.sock")
	d, err := serve.New(serve.Config{Socket: sock, Devices: 2})
	require.NoError(t, err)
	go d.Serve()
	eps, closeAll, err := dialPair(provider.DialOptions{Socket: sock, Timeout: 500 * time.Millisecond}, allOps)
	require.NoError(t, err)
	defer closeAll()
	require.NoError(t, runOp(eps, ops[0], time.Now().Add(10*time.Second)))
	require.NoError(t, d.Close())

	start := time.Now()
	_, err = eps[0].QP.PostSend([]provider.SendWR{{Opcode: provider.WRSend, SGL: []provider.SGE{eps[0].MR.SGE(0, 8)}}})
	if err == nil { // the post may go into the ring unseen; the poll must fail
		_, err = eps[0].SendCQ.Poll(make([]provider.WC, 1))
	}
	require.ErrorIs(t, err, provider.ErrDeviceGone)
	_, err = eps[1].Host.Ctx.AllocPD()
	require.ErrorIs(t, err, provider.ErrDeviceGone)
	_, err = eps[0].Host.Ctx.Counters()
	require.ErrorIs(t, err, provider.ErrDeviceGone, "no empty set of counters from a dead daemon")
	require.Less(t, time.Since(start), 3*time.Second)
	// Closing fails to destroy the QP (the daemon is gone), and the QP
	// left behind posts nothing afterwards.
	require.Error(t, eps[0].Host.Ctx.Close())
	_, err = eps[0].QP.PostSend([]provider.SendWR{{Opcode: provider.WRSend, SGL: []provider.SGE{eps[0].MR.SGE(0, 8)}}})
	require.Error(t, err)
	require.NotErrorIs(t, err, provider.ErrDeviceGone, "refused as a dead QP, before any talk to the device")
}

// TestRefusals: ATTACHes the daemon refuses, each with its errno and a
// log line; the daemon keeps serving.
func TestRefusals(t *testing.T) {
	_, sock, log := startDaemon(t, 2, nil)
	ctx, err := provider.Dial("softnic0", provider.DialOptions{Socket: sock})
	require.NoError(t, err)
	defer ctx.Close()
	for _, tc := range []struct {
		name     string
		dev      string
		errno    syscall.Errno
		sentinel error
		logged   string
	}{
		{"busy", "softnic0", syscall.EBUSY, provider.ErrBusy, "softnic0 is attached by pid"},
		{"unknown device", "softnic7", syscall.ENODEV, provider.ErrNoDevice, `no device "softnic7"`},
		{"rxe name", "rxe0", syscall.ENODEV, provider.ErrNoDevice, `no device "rxe0"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := provider.Dial(tc.dev, provider.DialOptions{Socket: sock})
			require.Error(t, err)
			require.True(t, errors.Is(err, tc.errno), "%v", err)
			require.ErrorIs(t, err, tc.sentinel)
			require.Contains(t, log.String(), tc.logged)
		})
	}
	_, err = provider.Dial("softnic0", provider.DialOptions{Socket: filepath.Join(t.TempDir(), "none")})
	require.ErrorIs(t, err, provider.ErrDeviceGone)
	require.ErrorContains(t, err, "no softnic daemon answers on")
	t.Setenv(provider.SocketEnv, "")
	_, err = provider.Dial("softnic0", provider.DialOptions{})
	require.ErrorIs(t, err, provider.ErrInvalidArg, "no socket given and none in the environment")
	other, err := provider.Dial("softnic1", provider.DialOptions{Socket: sock})
	require.NoError(t, err, "the daemon still serves")
	require.NoError(t, other.Close())
}
