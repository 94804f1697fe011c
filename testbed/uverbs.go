package testbed

import (
	"os"

	"github.com/softnic/softnic/device"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/uverbsdev"
)

// simSide is what a provider context on an emulated device uses besides
// the uverbs commands: running the simulation, the virtual clock, the hardware counters, and the event and CQ-moderation
// parts of the control plane that the kernel serves through event fds
// and extended commands rather than write() commands. In one process they
// stay direct calls; the daemon will carry them its own way.
type simSide interface {
	mlx5.Progressor
	mlx5.VirtualClock
	provider.CounterSource
	mlx5.EventControl
	mlx5.CQControl
}

// uverbsControl is an mlx5.Control whose commands travel as uverbs bytes
// through a loopback transport (a uverbsdev.Server on the device), with
// the device's simulation side alongside.
type uverbsControl struct {
	*provider.UverbsControl
	simSide
}

// ProgressBlocked is the simulation side's (mlx5.BlockingProgressor),
// Progress where it has none.
func (u uverbsControl) ProgressBlocked() bool {
	if b, ok := u.simSide.(mlx5.BlockingProgressor); ok {
		return b.ProgressBlocked()
	}
	return u.simSide.Progress()
}

// uverbsLoopback opens a uverbs client context on dev, whose neighbour
// table knows the world's addresses, and the control the provider uses.
func uverbsLoopback(dev *device.Device, side simSide) (mlx5.Control, *uverbsdev.Server) {
	d := uverbsdev.NewDevice(dev)
	d.SetNeighbour(neighbour)
	srv := d.NewServer()
	return uverbsControl{UverbsControl: provider.NewUverbsControl(srv), simSide: side}, srv
}

// neighbour resolves the GID of a world's node to its MAC (the kernel's
// neighbour table, which ib_resolve_eth_dmac reads).
func neighbour(gid [16]byte) ([6]byte, bool) {
	for i, ip := range IPs {
		if ip.As16() == gid {
			return MACs[i], true
		}
	}
	return [6]byte{}, false
}

// uverbsFromEnv is SOFTNIC_TESTBED_UVERBS set: every world's providers
// open over uverbs (Config.UverbsControl).
var uverbsFromEnv = os.Getenv("SOFTNIC_TESTBED_UVERBS") != ""
