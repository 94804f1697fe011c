package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/wallclock"
)

// kernelNet is a kernel RDMA device for rc_pingpong: the kernel resolves
// the peer's MAC inside modify_qp, and nothing needs driving while the
// program waits (ctxNet).
type kernelNet struct {
	ctxNet
	name string
	gid  [16]byte
}

func openKernelNet(name string, gidIdx, mem int) (*kernelNet, error) {
	ctx, err := provider.OpenKernel(name, provider.KernelOptions{MemSize: mem})
	if err != nil {
		return nil, fmt.Errorf("couldn't open %s: %w", name, err)
	}
	k := &kernelNet{ctxNet: ctxNet{ctx: ctx, spins: 1000, nap: 10 * time.Microsecond}, name: name}
	if gidIdx >= 0 {
		p, err := ctx.QueryPort(1)
		if err != nil || gidIdx >= len(p.GIDs) {
			_ = ctx.Close()
			return nil, fmt.Errorf("can't read sgid of index %d: %v", gidIdx, err)
		}
		k.gid = p.GIDs[gidIdx].GID
	}
	return k, nil
}

func (k *kernelNet) GID() [16]byte { return k.gid }

// PollCQ polls until a completion or the timeout (0: none), as
// wallclock.Net.PollCQ does for the emulated NIC.
func (k *kernelNet) PollCQ(cq *provider.CQ, wcs []provider.WC, timeout time.Duration, what func() string) (int, error) {
	return k.pollCQ(cq, wcs, timeout, what, k.CounterLine)
}

// CounterLine is the device's port counters from sysfs (hw_counters).
func (k *kernelNet) CounterLine() string {
	dir := "/sys/class/infiniband/" + k.name + "/ports/1/hw_counters"
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "(no hw_counters: " + err.Error() + ")"
	}
	var parts []string
	for _, e := range ents {
		b, err := os.ReadFile(dir + "/" + e.Name())
		if v := strings.TrimSpace(string(b)); err == nil && v != "0" {
			parts = append(parts, e.Name()+"="+v)
		}
	}
	return strings.Join(parts, " ")
}

// perfNet is what softnic perf's real-network mode needs beyond
// rc_pingpong's: the scheduler's wait, the port's active MTU and a name
// for the report.
type perfNet interface {
	ppRuntime
	Advance() error
	ActiveMTU() int
	ProfileName() string
}

// wallNet is the emulated NIC on a wire as a perfNet.
type wallNet struct{ *wallclock.Net }

func (w wallNet) ActiveMTU() int      { return w.Device().Spec().Caps.ActiveMTU }
func (w wallNet) ProfileName() string { return w.Profile().Name }

// openPerfNet opens softnic perf's device: -d chooses the backend as for
// rc_pingpong (openPPRuntime).
func openPerfNet(o perfOpts, mem int, stderr io.Writer) (perfNet, error) {
	if kernelDevice(o.dev) {
		return openKernelNet(o.dev, o.gidIdx, mem)
	}
	n, err := openRealNet(o.net, mem, stderr)
	if err != nil {
		return nil, err
	}
	return wallNet{n}, nil
}

// Advance: a kernel device moves by itself; the scheduler only yields
// (it busy-polls, as perftest does: a sleep would add its granularity to
// every latency sample).
func (k *kernelNet) Advance() error { runtime.Gosched(); return nil }

// ActiveMTU is the port's active MTU in bytes.
func (k *kernelNet) ActiveMTU() int { return k.ctx.Attr().ActiveMTU.Bytes() }

// ProfileName names the device in perf's report.
func (k *kernelNet) ProfileName() string { return "kernel " + k.name }
