package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"

	"github.com/softnic/softnic/profile"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/testbed"
)

func init() {
	register("devinfo", "print the emulated devices' attributes, as ibv_devinfo does", runDevinfo)
}

const devinfoHelp = `usage: softnic devinfo [-v] [-d DEVICE] [-i PORT] [-l] [--profile NAME|FILE]

Prints the emulated NICs of the default world (softnic0 and softnic1, back
to back) in ibv_devinfo's shape: what QUERY_DEVICE, QUERY_PORT and the GID
table report. -d with a kernel device (rxe0, mlx5_0) prints that device,
as its kernel driver answers through /dev/infiniband/uverbsN. The caps shown are the ones the device enforces (one source:
the profile's caps). -v adds the device caps and the port's details.

Flags:
`

func runDevinfo(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("devinfo", flag.ContinueOnError)
	verbose := fs.Bool("v", false, "print all the attributes (ibv_devinfo -v)")
	fs.BoolVar(verbose, "verbose", false, "same as -v")
	dev := fs.String("d", "", "only this device (softnic0, softnic1)")
	fs.StringVar(dev, "ib-dev", "", "same as -d")
	var port int
	intVar(fs, &port, "i", 0, "only this port (1)")
	intVar(fs, &port, "ib-port", 0, "same as -i")
	list := fs.Bool("l", false, "only list the device names")
	fs.BoolVar(list, "list", false, "same as -l")
	prof := fs.String("profile", "", "device profile: a name (see softnic profiles) or a JSON file (default "+profile.DefaultName+")")
	pos, code, ok := parseCommand(fs, devinfoHelp, args, stdout, stderr)
	if !ok {
		return code
	}
	if !noArgs("devinfo", fs, devinfoHelp, pos, stderr) {
		return 2
	}
	if port <= 0 && (flagGiven(fs, "i") || flagGiven(fs, "ib-port")) {
		// ibv_devinfo refuses -i 0 (its ports count from 1) with its
		// usage; 0 is only the default, every port.
		fmt.Fprintf(stderr, "softnic devinfo: -i %d: ports count from 1\n", port)
		return 2
	}
	p, err := loadProfile(*prof)
	if err != nil {
		fmt.Fprintln(stderr, "softnic devinfo:", err)
		return exitCode(err)
	}
	// The devices to show: a kernel one (rxe0, mlx5_0: the kernel's answers
	// through /dev/infiniband), or the two emulated ones.
	var ctxs []*provider.Context
	if kernelDevice(*dev) {
		ctx, err := provider.OpenKernel(*dev, provider.KernelOptions{MemSize: 1 << 20})
		if err != nil {
			if errors.Is(err, provider.ErrNoDevice) {
				fmt.Fprintf(stderr, "softnic devinfo: IB device '%s' wasn't found (have %s): %v\n", *dev, strings.Join(emulatedDevices(false), ", "), err)
			} else {
				fmt.Fprintln(stderr, "softnic devinfo:", err)
			}
			return 1
		}
		defer ctx.Close()
		ctxs = []*provider.Context{ctx}
	} else {
		cfg := testbed.DefaultConfig()
		cfg.Device, cfg.Host, cfg.Wire = p.Device, p.Host(), p.Wire
		w, err := testbed.New(cfg)
		if err != nil {
			fmt.Fprintln(stderr, "softnic devinfo:", err)
			return 1
		}
		defer w.Close()
		for _, h := range w.Hosts {
			ctxs = append(ctxs, h.Ctx)
		}
	}
	if *list {
		fmt.Fprintf(stdout, "%d HCAs found:\n", len(ctxs))
		for _, c := range ctxs {
			fmt.Fprintf(stdout, "\t%s\n", c.Name())
		}
		return 0
	}
	found := false
	for i, c := range ctxs {
		if *dev != "" && c.Name() != *dev {
			continue
		}
		found = true
		if i > 0 && *dev == "" {
			fmt.Fprintln(stdout)
		}
		if err := printDevinfo(stdout, c, p, *verbose, port); err != nil {
			fmt.Fprintln(stderr, "softnic devinfo:", err)
			return 1
		}
	}
	if !found {
		fmt.Fprintln(stderr, "softnic devinfo:", deviceNotFound(*dev, emulatedDevices(false)))
		return 1
	}
	return 0
}

// emulatedDevices is the names of the emulated NICs a command runs: the
// testbed's two back to back, or the one on a real wire.
func emulatedDevices(onWire bool) []string {
	if onWire {
		return []string{"softnic0"}
	}
	return []string{"softnic0", "softnic1"}
}

// checkEmulatedDevice refuses a -d that names no emulated NIC (softnic7),
// as ibv_devinfo and perftest refuse an unknown device. Empty (the
// default) and kernel names (rxe0: their own backend) pass.
func checkEmulatedDevice(name string, onWire bool) error {
	if name == "" || kernelDevice(name) {
		return nil
	}
	have := emulatedDevices(onWire)
	if !slices.Contains(have, name) {
		return deviceNotFound(name, have)
	}
	return nil
}

// deviceNotFound is ibv_devinfo's refusal of a device name.
func deviceNotFound(name string, have []string) error {
	return fmt.Errorf("IB device '%s' wasn't found (have %s)", name, strings.Join(have, ", "))
}

// kernelDevice reports whether a device name names a kernel device (rxe0,
// mlx5_0) rather than an emulated softnic<n>: the device name chooses
// the backend.
func kernelDevice(name string) bool { return name != "" && !strings.HasPrefix(name, "softnic") }

// ibSpeed maps a lane rate to ibv_devinfo's active_speed text and enum.
func ibSpeed(laneGbps float64) string {
	for _, s := range []struct {
		g    float64
		name string
		enum int
	}{{2.5, "2.5 Gbps", 1}, {5, "5.0 Gbps", 2}, {10, "10.0 Gbps", 4}, {14, "14.0 Gbps", 16}, {25, "25.0 Gbps", 32}, {50, "50.0 Gbps", 64}, {100, "100.0 Gbps", 128}} {
		if laneGbps <= s.g+0.01 {
			return fmt.Sprintf("%s (%d)", s.name, s.enum)
		}
	}
	return "200.0 Gbps (256)"
}

// eui64 is the node GUID derived from the port MAC (EUI-64, as rxe does).
func eui64(mac [6]byte) string {
	return fmt.Sprintf("%02x%02x:%02xff:fe%02x:%02x%02x", mac[0]^0x02, mac[1], mac[2], mac[3], mac[4], mac[5])
}

// gidString is ibv_devinfo's GID: eight groups of four hex digits.
func gidString(g [16]byte) string { return netip.AddrFrom16(g).StringExpanded() }

func printDevinfo(w io.Writer, ctx *provider.Context, p profile.Profile, verbose bool, onlyPort int) error {
	a := ctx.Attr()
	guid := eui64(a.MAC)
	fmt.Fprintf(w, "hca_id:\t%s\n", ctx.Name())
	fmt.Fprintf(w, "\ttransport:\t\t\tInfiniBand (0)\n")
	fmt.Fprintf(w, "\tfw_ver:\t\t\t\t%s\n", a.FWVersion)
	fmt.Fprintf(w, "\tnode_guid:\t\t\t%s\n", guid)
	fmt.Fprintf(w, "\tsys_image_guid:\t\t\t%s\n", guid)
	fmt.Fprintf(w, "\tvendor_id:\t\t\t0x%04x\n", a.VendorID)
	fmt.Fprintf(w, "\tvendor_part_id:\t\t\t%d\n", a.VendorPartID)
	fmt.Fprintf(w, "\thw_ver:\t\t\t\t0x%x\n", a.HWVer)
	board := "SOFTNIC_" + strings.ToUpper(strings.ReplaceAll(p.Name, "-", "_"))
	speed := ibSpeed(float64(p.Wire.Rate) / 4e9)
	_, kern := ctx.Kernel()
	if kern {
		board, speed = "N/A", "N/A (not in QUERY_PORT's answer here)"
	}
	fmt.Fprintf(w, "\tboard_id:\t\t\t%s\n", board)
	fmt.Fprintf(w, "\tphys_port_cnt:\t\t\t1\n")
	if verbose {
		rows := []struct {
			k string
			v any
		}{
			{"max_mr_size", fmt.Sprintf("0x%x", a.MaxMRSize)},
			{"page_size_cap", "0x1000"},
			{"max_qp", a.MaxQP},
			{"max_qp_wr", a.MaxQPWR},
			{"device_cap_flags", "0x00001000\n\t\t\t\t\tRC_RNR_NAK_GEN"},
			{"max_sge", a.MaxSGE},
			{"max_sge_rd", a.MaxSGE},
			{"max_cq", a.MaxCQ},
			{"max_cqe", a.MaxCQE},
			{"max_mr", a.MaxMR},
			{"max_pd", a.MaxPD},
			{"max_qp_rd_atom", a.MaxQPRdAtomic},
			{"max_ee_rd_atom", 0},
			{"max_res_rd_atom", a.MaxQPRdAtomic * a.MaxQP},
			{"max_qp_init_rd_atom", a.MaxQPRdAtomic},
			{"max_ee_init_rd_atom", 0},
			{"atomic_cap", "ATOMIC_HCA (1)"},
			{"max_ee", 0},
			{"max_rdd", 0},
			{"max_mw", 0},
			{"max_raw_ipv6_qp", 0},
			{"max_raw_ethy_qp", 0},
			{"max_mcast_grp", 0},
			{"max_mcast_qp_attach", 0},
			{"max_total_mcast_qp_attach", 0},
			{"max_ah", a.MaxQP},
			{"max_srq", a.MaxQP},
			{"max_srq_wr", a.MaxQPWR - 1},
			{"max_srq_sge", a.MaxSRQSGE},
			{"max_pkeys", 1},
			{"local_ca_ack_delay", 16},
			{"max_inline_data", a.MaxInline},
		}
		for _, r := range rows {
			tabs := "\t\t\t"
			if n := len(r.k) + 1; n >= 24 {
				tabs = "\t"
			} else if n >= 16 {
				tabs = "\t\t"
			}
			fmt.Fprintf(w, "\t%s:%s%v\n", r.k, tabs, r.v)
		}
	}
	if onlyPort != 0 && onlyPort != 1 {
		return fmt.Errorf("port %d: the device has port 1", onlyPort)
	}
	pa, err := ctx.QueryPort(1)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\t\tport:\t1\n")
	fmt.Fprintf(w, "\t\t\tstate:\t\t\t%v (%d)\n", pa.State, pa.State)
	fmt.Fprintf(w, "\t\t\tmax_mtu:\t\t%d (%d)\n", pa.MaxMTU, ibvMTU(pa.MaxMTU))
	fmt.Fprintf(w, "\t\t\tactive_mtu:\t\t%d (%d)\n", pa.ActiveMTU, ibvMTU(pa.ActiveMTU))
	fmt.Fprintf(w, "\t\t\tsm_lid:\t\t\t0\n")
	fmt.Fprintf(w, "\t\t\tport_lid:\t\t0\n")
	fmt.Fprintf(w, "\t\t\tport_lmc:\t\t0x00\n")
	fmt.Fprintf(w, "\t\t\tlink_layer:\t\t%s\n", pa.LinkLayer)
	if verbose {
		phys := "LINK_UP (5)"
		if pa.PhysState != 5 {
			phys = "DISABLED (3)"
		}
		fmt.Fprintf(w, "\t\t\tmax_msg_sz:\t\t0x%x\n", pa.MaxMsgSize)
		fmt.Fprintf(w, "\t\t\tport_cap_flags:\t\t0x04010000\n")
		fmt.Fprintf(w, "\t\t\tport_cap_flags2:\t0x0000\n")
		fmt.Fprintf(w, "\t\t\tmax_vl_num:\t\tinvalid value (0)\n")
		fmt.Fprintf(w, "\t\t\tbad_pkey_cntr:\t\t0x0\n")
		fmt.Fprintf(w, "\t\t\tqkey_viol_cntr:\t\t0x0\n")
		fmt.Fprintf(w, "\t\t\tsm_sl:\t\t\t0\n")
		fmt.Fprintf(w, "\t\t\tpkey_tbl_len:\t\t1\n")
		fmt.Fprintf(w, "\t\t\tgid_tbl_len:\t\t%d\n", len(pa.GIDs))
		fmt.Fprintf(w, "\t\t\tsubnet_timeout:\t\t0\n")
		fmt.Fprintf(w, "\t\t\tinit_type_reply:\t0\n")
		fmt.Fprintf(w, "\t\t\tactive_width:\t\t4X (2)\n")
		fmt.Fprintf(w, "\t\t\tactive_speed:\t\t%s\n", speed)
		fmt.Fprintf(w, "\t\t\tphys_state:\t\t%s\n", phys)
		for _, g := range pa.GIDs {
			if kern && g.GID == ([16]byte{}) {
				continue // an unused slot of the kernel's table
			}
			fmt.Fprintf(w, "\t\t\tGID[%3d]:\t\t%s, %s\n", g.Index, gidString(g.GID), g.Type)
		}
	}
	fmt.Fprintln(w)
	return nil
}
