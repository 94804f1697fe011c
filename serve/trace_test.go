package serve_test

import (
	"bufio"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/softnic/softnic/host"
	"github.com/softnic/softnic/pcie"
	"github.com/softnic/softnic/profile"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/testbed"
	"github.com/softnic/softnic/trace"
	"github.com/stretchr/testify/require"
)

// hostEvent reports whether the host CPU (not the device) records ev: the
// provider's stages and the CPU side of MMIO.
func hostEvent(ev *trace.Event) bool {
	switch {
	case ev.Component == "provider":
		return true
	case ev.Component == "bar":
		switch ev.Name {
		case "bf_mmio", "doorbell_mmio", "wc_flush", host.CtrWcLateDrain.String(), host.CtrWcEvict.String(),
			host.CtrBarMisalignedStore.String():
			return true
		}
	}
	return false
}

// lines renders the events of one side (host or device) one per line,
// every field.
func lines(evs []trace.Event, hostSide bool) []string {
	var out []string
	for i := range evs {
		if hostEvent(&evs[i]) == hostSide {
			out = append(out, fmt.Sprintf("%+v", evs[i]))
		}
	}
	return out
}

// traceWorkload is the workload both runs perform: connect, then every op.
func traceWorkload(eps [2]*testbed.Endpoint) error {
	for _, o := range ops {
		if err := runOp(eps, o, time.Now().Add(10*time.Second)); err != nil {
			return fmt.Errorf("%s: %w", o.name, err)
		}
	}
	return nil
}

// traceChild dials both devices with host CPUs recording into one
// recorder, runs the workload and prints the host events, one per line.
func traceChild(w io.Writer) error {
	rec := trace.NewRecorder()
	p := profile.Default()
	hc := p.Host()
	o := provider.DialOptions{Host: &hc, Clock: provider.NewHostClock(), NewCPU: func(clk host.Clock, node int, port pcie.BARPort, cfg host.Config) *host.CPU {
		return host.New(clk, rec, nil, node, port, cfg)
	}}
	eps, closeAll, err := dialPair(o, allOps)
	if err != nil {
		return err
	}
	defer closeAll()
	if err := traceWorkload(eps); err != nil {
		return err
	}
	for _, l := range lines(rec.Events(), true) {
		fmt.Fprintln(w, "ev", l)
	}
	return nil
}

// TestSameTraceAcrossProcesses: one workload gives the same trace in one
// process (testbed) and across two (a client process and the daemon): the
// daemon's events are the one-process run's device events, the client's
// its host events, both field for field and in order.
func TestSameTraceAcrossProcesses(t *testing.T) {
	p := profile.Default()
	w, err := testbed.New(testbed.Config{Device: p.Device, Wire: p.Wire, Host: p.Host(), Trace: true})
	require.NoError(t, err)
	defer w.Close()
	eps, err := w.ConnectRC(allOps)
	require.NoError(t, err)
	require.NoError(t, traceWorkload(eps))
	one := w.Rec.Events()
	wantDev, wantHost := lines(one, false), lines(one, true)
	require.Greater(t, len(wantDev), 100)
	require.Greater(t, len(wantHost), 20)

	rec := trace.NewRecorder()
	d, sock, _ := startDaemon(t, 2, rec)
	cmd := child(t, "trace", sock)
	out, err := cmd.Output()
	require.NoError(t, err, "%s", out)
	var gotHost []string
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if l, ok := strings.CutPrefix(sc.Text(), "ev "); ok {
			gotHost = append(gotHost, l)
		}
	}
	require.Equal(t, wantHost, gotHost, "host events")
	// The recorder is the daemon's until the child's teardown is over
	// (Clients takes the daemon's lock, which every engine touch holds).
	require.Eventually(t, func() bool { return d.Clients() == 0 }, 5*time.Second, 10*time.Millisecond)
	gotDev := lines(rec.Events(), false)
	require.Equal(t, wantDev, gotDev[:min(len(gotDev), len(wantDev))], "device events")
	t.Logf("%d device events and %d host events identical in one process and across two", len(wantDev), len(wantHost))
}
