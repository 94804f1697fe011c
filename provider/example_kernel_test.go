package provider_test

import (
	"errors"
	"fmt"

	"github.com/softnic/softnic/provider"
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
