package provider_test

import (
	"errors"
	"fmt"

	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/testbed"
)

// A kernel device (rxe0, mlx5_0) is opened by name; one that is not there
// is ErrNoDevice, on a machine without /dev/infiniband too.
func ExampleOpenKernel() {
	ctx, err := provider.OpenKernel("rxe_absent9", provider.KernelOptions{})
	fmt.Println(ctx == nil, errors.Is(err, provider.ErrNoDevice))
	// Output: true true
}

// The device name chooses the backend: softnic<n> is the emulated NIC
// behind softnic serve, anything else a kernel device.
func ExampleOpenDevice() {
	_, err := provider.OpenDevice("mlx5_absent9", provider.DialOptions{})
	fmt.Println(errors.Is(err, provider.ErrNoDevice))
	_, err = provider.OpenDevice("softnic0", provider.DialOptions{Socket: "/nonexistent/softnic.sock"})
	fmt.Println(errors.Is(err, provider.ErrNoDevice), err != nil)
	// Output:
	// true
	// false true
}

// Ready says whether Poll would find a completion, without taking it
// (on emulated NICs, whose time stands still until Settle runs them).
func ExampleCQ_Ready() {
	w, err := testbed.New(testbed.DefaultConfig())
	if err != nil {
		panic(err)
	}
	defer w.Close()
	eps, err := w.ConnectRC(testbed.ConnOpts{MTU: 1024})
	if err != nil {
		panic(err)
	}
	a, b := eps[0], eps[1]
	_, _ = b.QP.PostRecv([]provider.RecvWR{{WRID: 1, SGL: []provider.SGE{b.MR.SGE(0, 64)}}})
	_, _ = a.QP.PostSend([]provider.SendWR{{WRID: 2, Opcode: provider.WRSend, Flags: provider.SendSignaled, SGL: []provider.SGE{a.MR.SGE(0, 64)}}})
	fmt.Println(a.SendCQ.Ready())
	w.Settle(0)
	fmt.Println(a.SendCQ.Ready(), b.RecvCQ.Ready())
	wc := make([]provider.WC, 1)
	n, _ := a.SendCQ.Poll(wc)
	fmt.Println(n, a.SendCQ.Ready())
	// Output:
	// false
	// true true
	// 1 false
}
