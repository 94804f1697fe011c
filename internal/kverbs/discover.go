package kverbs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/softnic/softnic/uverbs"
)

// ErrNoDevice: no RDMA device (no /sys/class/infiniband_verbs, or no
// uverbs device of the name asked for).
var ErrNoDevice = errors.New("no RDMA device")

// ErrABI: the kernel's uverbs ABI or the driver's is one this package does
// not speak.
var ErrABI = errors.New("unsupported uverbs ABI version")

// Driver is the kernel driver behind an IB device.
type Driver int

// Drivers.
const (
	DriverUnknown Driver = iota
	DriverMLX5           // mlx5_ib (ConnectX)
	DriverRXE            // rdma_rxe (Soft-RoCE)
)

func (d Driver) String() string {
	switch d {
	case DriverMLX5:
		return "mlx5"
	case DriverRXE:
		return "rxe"
	}
	return "unknown"
}

// ID is the driver's enum rdma_driver_id, which every ioctl header carries.
func (d Driver) ID() uverbs.DriverID {
	switch d {
	case DriverMLX5:
		return uverbs.DriverMLX5
	case DriverRXE:
		return uverbs.DriverRXE
	}
	return 0
}

// ABI ranges accepted (uverbs.md §1.3): core 6 (rdma-core takes 3..6, but
// every framing this package builds is the ABI-6 one), mlx5 1, rxe 1..2.
const (
	CoreABI       = 6
	mlx5ABIMin    = 1
	mlx5ABIMax    = 1
	rxeABIMin     = 1
	rxeABIMax     = 2
	defaultSysfs  = "/sys"
	defaultDevDir = "/dev/infiniband"
)

// Device is one uverbs device as sysfs describes it.
type Device struct {
	Name      string // IB device name: rxe0, mlx5_0
	Driver    Driver
	Uverbs    string // uverbs0
	Path      string // /dev/infiniband/uverbs0
	Dev       string // MAJOR:MINOR of the char device
	CoreABI   int    // /sys/class/infiniband_verbs/abi_version
	DriverABI int    // .../uverbsN/abi_version
	NodeType  string // "1: CA"
	NodeGUID  string
	FWVer     string
	Parent    string // the netdev under rxe (its parent attribute)
}

// Root is where discovery looks: Sys (default /sys) and Dev (default
// /dev/infiniband). A test points them at a fake tree.
type Root struct {
	Sys, Dev string
}

func (r Root) sys() string {
	if r.Sys == "" {
		return defaultSysfs
	}
	return r.Sys
}

func (r Root) dev() string {
	if r.Dev == "" {
		return defaultDevDir
	}
	return r.Dev
}

func readTrim(p string) (string, error) {
	b, err := os.ReadFile(p)
	return strings.TrimSpace(string(b)), err
}

// List returns the uverbs devices, sorted by IB name. No
// infiniband_verbs class (no ib_uverbs module, no RDMA hardware) or none
// in it is ErrNoDevice; a core ABI other than 6 is ErrABI.
func (r Root) List() ([]Device, error) {
	base := filepath.Join(r.sys(), "class", "infiniband_verbs")
	abi, err := readTrim(filepath.Join(base, "abi_version"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s missing (ib_uverbs not loaded?)", ErrNoDevice, base)
		}
		return nil, fmt.Errorf("%w: %v", ErrNoDevice, err)
	}
	core, err := strconv.Atoi(abi)
	if err != nil || core != CoreABI {
		return nil, fmt.Errorf("%w: core uverbs ABI %q, need %d", ErrABI, abi, CoreABI)
	}
	ents, err := os.ReadDir(base)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoDevice, err)
	}
	var out []Device
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "uverbs") {
			continue
		}
		d, ok := r.describe(base, e.Name(), core)
		if ok {
			out = append(out, d)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no uverbs devices in %s", ErrNoDevice, base)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// describe reads one uverbsN directory; ok is false for a half-gone entry.
func (r Root) describe(base, uv string, core int) (Device, bool) {
	dir := filepath.Join(base, uv)
	name, err := readTrim(filepath.Join(dir, "ibdev"))
	if err != nil || name == "" {
		return Device{}, false
	}
	d := Device{Name: name, Uverbs: uv, Path: filepath.Join(r.dev(), uv), CoreABI: core}
	d.Dev, _ = readTrim(filepath.Join(dir, "dev"))
	if s, err := readTrim(filepath.Join(dir, "abi_version")); err == nil {
		d.DriverABI, _ = strconv.Atoi(s)
	}
	ib := filepath.Join(r.sys(), "class", "infiniband", name)
	d.NodeType, _ = readTrim(filepath.Join(ib, "node_type"))
	d.NodeGUID, _ = readTrim(filepath.Join(ib, "node_guid"))
	d.FWVer, _ = readTrim(filepath.Join(ib, "fw_ver"))
	d.Parent, _ = readTrim(filepath.Join(ib, "parent"))
	d.Driver = driverOf(ib, name)
	return d, true
}

// driverOf identifies the driver without netlink (uverbs.md §1.2): a PCI
// parent bound to mlx5_core is mlx5, another bound driver is unknown;
// without a device link (rxe registers without a parent device) the name
// prefix decides, weak evidence.
func driverOf(ib, name string) Driver {
	if link, err := os.Readlink(filepath.Join(ib, "device", "driver")); err == nil {
		if strings.HasPrefix(filepath.Base(link), "mlx5") {
			return DriverMLX5
		}
		return DriverUnknown
	}
	switch {
	case strings.HasPrefix(name, "mlx5_"):
		return DriverMLX5
	case strings.HasPrefix(name, "rxe"):
		return DriverRXE
	}
	return DriverUnknown
}

// Find returns the device named name (rxe0, mlx5_0), checking that its
// driver is one this package drives and its driver ABI one it speaks.
func (r Root) Find(name string) (Device, error) {
	ds, err := r.List()
	if err != nil {
		return Device{}, err
	}
	for _, d := range ds {
		if d.Name != name {
			continue
		}
		lo, hi := 0, -1
		switch d.Driver {
		case DriverMLX5:
			lo, hi = mlx5ABIMin, mlx5ABIMax
		case DriverRXE:
			lo, hi = rxeABIMin, rxeABIMax
		}
		if d.DriverABI < lo || d.DriverABI > hi {
			return d, fmt.Errorf("%w: %s (driver %v) has driver ABI %d", ErrABI, name, d.Driver, d.DriverABI)
		}
		return d, nil
	}
	names := make([]string, len(ds))
	for i, d := range ds {
		names[i] = d.Name
	}
	return Device{}, fmt.Errorf("%w: no device %q (have %s)", ErrNoDevice, name, strings.Join(names, ", "))
}

// List is Root{}.List(): the machine's devices.
func List() ([]Device, error) { return Root{}.List() }

// Find is Root{}.Find(name).
func Find(name string) (Device, error) { return Root{}.Find(name) }
