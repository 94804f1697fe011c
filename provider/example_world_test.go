package provider_test

import (
	"fmt"
	"net/netip"
	"os"
	"time"

	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/testbed"
)

// ExampleDeviceEnv names the device the portable Examples run on: unset,
// a testbed world of two emulated NICs; set (rxe0, mlx5_0), two contexts
// on that kernel device, connected to each other through it. test/interop
// runs the Examples in the Soft-RoCE guest with it set to rxe0
// (TestKernelBackend). The other Examples show what only the emulator has
// — the mlx5 WQE and address-vector bytes the provider built, fault
// injection, a cable to pull, CQ moderation and resizing — and run on it
// whatever the variable says.
const exampleDeviceEnv = "SOFTNIC_EXAMPLE_DEVICE"

// exWorld is the pair of hosts of a portable Example.
type exWorld struct {
	Hosts [2]*testbed.Host
	w     *testbed.World // the emulated world, nil on a kernel device
}

// newWorld opens the Example's two hosts.
func newWorld() *exWorld {
	name := os.Getenv(exampleDeviceEnv)
	if name == "" {
		w, err := testbed.New(testbed.DefaultConfig())
		if err != nil {
			panic(err)
		}
		return &exWorld{Hosts: w.Hosts, w: w}
	}
	x := &exWorld{}
	for i := range x.Hosts {
		ctx, err := provider.OpenKernel(name, provider.KernelOptions{MemSize: 8 << 20})
		if err != nil {
			panic(err)
		}
		// GID 1: the RoCEv2 GID of the port's IPv4 address; the kernel
		// resolves its MAC itself.
		pa, err := ctx.QueryPort(1)
		if err != nil || len(pa.GIDs) < 2 {
			panic(fmt.Sprintf("%s: no GID at index 1: %v", name, err))
		}
		x.Hosts[i] = &testbed.Host{Node: i, Ctx: ctx}
		x.Hosts[i].ID.Node = i
		x.Hosts[i].ID.IP = netip.AddrFrom16(pa.GIDs[1].GID).Unmap()
	}
	fmt.Fprintf(os.Stderr, "example: on %s\n", name)
	return x
}

// Close closes both hosts.
func (x *exWorld) Close() {
	if x.w != nil {
		x.w.Close()
		return
	}
	for _, h := range x.Hosts {
		_ = h.Ctx.Close()
	}
}

// connect brings up an RC pair between the two hosts (testbed.Connect).
func (x *exWorld) connect(o testbed.ConnOpts) [2]*testbed.Endpoint {
	eps, err := testbed.Connect(x.Hosts, o)
	if err != nil {
		panic(err)
	}
	return eps
}

// world is a connected RC pair on the Example's hosts.
func world() (*exWorld, [2]*testbed.Endpoint) {
	x := newWorld()
	return x, x.connect(testbed.ConnOpts{MTU: 1024})
}

// waitWC waits for n completions on cq: on the emulator its Poll drives
// the NICs (testbed.Wait, in virtual time); a kernel device runs by
// itself, so the wait is on the wall clock, for at most 10 s.
func waitWC(cq *provider.CQ, n int) ([]provider.WC, error) {
	if os.Getenv(exampleDeviceEnv) == "" {
		return testbed.Wait(cq, n)
	}
	out := make([]provider.WC, 0, n)
	wcs := make([]provider.WC, n)
	for deadline := time.Now().Add(10 * time.Second); len(out) < n; {
		k, err := cq.Poll(wcs[:n-len(out)])
		if err != nil {
			return out, err
		}
		out = append(out, wcs[:k]...)
		if k == 0 && time.Now().After(deadline) {
			return out, fmt.Errorf("%d of %d completions in 10 s", len(out), n)
		}
	}
	return out, nil
}
