package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/softnic/softnic/device"
	"github.com/softnic/softnic/profile"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/testbed"
)

func init() {
	register("stat", "run a workload on two emulated NICs and print their counters, as rdma statistic show does", runStat)
}

const statHelp = `usage: softnic stat [--op write|read|send] [--size N] [-n N] [--mtu N]
                   [--faults FILE] [--profile NAME|FILE] [--all] [--json]

Runs N operations of --op one after the other from softnic0 to softnic1
(back to back, virtual time) and prints each device's counters in the
shape of 'rdma statistic show': one line per port, "link DEV/1" then name
value pairs. The names are the Linux mlx5/rxe hw_counters; --all adds
softnic's own counters (every non-zero one). -n 0 prints the counters of
an idle pair; -n is at most 16777216 (2^24, as perf's).

Flags:
`

func runStat(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("stat", flag.ContinueOnError)
	op := fs.String("op", "write", "operation: write, read or send")
	var size, n, mtu int
	intVar(fs, &size, "size", 64, "bytes per operation")
	intVar(fs, &n, "n", 100, "number of operations")
	intVar(fs, &mtu, "mtu", 1024, "path MTU: 256, 512, 1024, 2048 or 4096")
	faults := fs.String("faults", "", "fault plan JSON (see softnic faults --explain)")
	prof := fs.String("profile", "", "device profile: a name (see softnic profiles) or a JSON file (default "+profile.DefaultName+")")
	all := fs.Bool("all", false, "also print softnic's own counters (non-zero)")
	asJSON := fs.Bool("json", false, "print JSON, as rdma -j statistic show")
	pos, code, ok := parseCommand(fs, statHelp, args, stdout, stderr)
	if !ok {
		return code
	}
	if !noArgs("stat", fs, statHelp, pos, stderr) {
		return 2
	}
	if err := checkStatArgs(*op, size, n, mtu); err != nil {
		fmt.Fprintln(stderr, "softnic stat:", err)
		return 2
	}
	if err := doStat(stdout, stderr, *op, size, n, mtu, flagGiven(fs, "mtu"), *faults, *prof, *all, *asJSON); err != nil {
		fmt.Fprintln(stderr, "softnic stat:", err)
		if errors.As(err, new(usageError)) {
			return 2
		}
		return 1
	}
	return 0
}

// statOps are stat's operations and the work requests they post.
var statOps = map[string]provider.WROpcode{"write": provider.WRRDMAWrite, "read": provider.WRRDMARead, "send": provider.WRSend}

// checkStatArgs refuses bad usage before any device is built (exit 2):
// an unknown --op, a size or count out of range (-n at most maxIters, as
// perf's), an MTU that is not one of the five.
func checkStatArgs(op string, size, n, mtu int) error {
	_, known := statOps[op]
	switch {
	case !known:
		return fmt.Errorf("--op %q: want write, read or send", op)
	case size < 0 || size > 1<<30:
		return fmt.Errorf("--size %d out of range 0..%d", size, 1<<30)
	case n < 0 || n > maxIters:
		return fmt.Errorf("-n %d out of range 0..%d operations", n, maxIters)
	case !validMTU(mtu):
		return mtuError("--mtu", mtu)
	}
	return nil
}

// doStat runs the workload; mtuSet says --mtu was given (otherwise the
// default 1024 is cut to a smaller active MTU of the profile).
func doStat(w, stderr io.Writer, op string, size, n, mtu int, mtuSet bool, faults, prof string, all, asJSON bool) error {
	wop := statOps[op] // runStat has checked the arguments (checkStatArgs)
	p, err := loadProfile(prof)
	if err != nil {
		return err
	}
	if err := checkGivenMTU(mtu, mtuSet, p.Device.Caps.ActiveMTU); err != nil {
		return usageError{err}
	}
	mtu = pathMTU(mtu, mtuSet, p.Device.Caps.ActiveMTU)
	cfg := testbed.DefaultConfig()
	cfg.Device, cfg.Host, cfg.Wire = p.Device, p.Host(), p.Wire
	if cfg.Faults, err = loadFaults(faults); err != nil {
		return err
	}
	// at_ps counts from the first post (armed below), as in trace and perf.
	cfg.DeferTimedFaults = true
	if need := 2*size + (8 << 20); need > cfg.MemSize {
		cfg.MemSize = need
	}
	world, err := testbed.New(cfg)
	if err != nil {
		return err
	}
	defer world.Close()
	eps, err := world.ConnectRC(testbed.ConnOpts{MTU: mtu, BufSize: max(size, 64), MaxInline: testbed.NoInline})
	if err != nil {
		return err
	}
	req, rsp := eps[0], eps[1]
	origin := world.ArmTimedFaults()
	var failed error
	for i := 0; i < n && failed == nil; i++ {
		if wop == provider.WRSend {
			if _, err := rsp.QP.PostRecv([]provider.RecvWR{{WRID: uint64(i), SGL: []provider.SGE{rsp.MR.SGE(0, uint32(max(size, 1)))}}}); err != nil {
				failed = err
				break
			}
		}
		wr := provider.SendWR{WRID: uint64(i), Opcode: wop, Flags: provider.SendSignaled, SGL: []provider.SGE{req.MR.SGE(0, uint32(size))}}
		if wop != provider.WRSend {
			wr.RemoteAddr, wr.RKey = rsp.MR.Addr, rsp.MR.RKey
		}
		if _, err := req.QP.PostSend([]provider.SendWR{wr}); err != nil {
			failed = err
			break
		}
		wcs, err := waitWalk(world, req.SendCQ, 1, walkPackets(size, mtu, 1))
		if err != nil {
			failed = err
		} else if wcs[0].Status != provider.WCSuccess {
			failed = fmt.Errorf("%s %d completed with %v", op, i, wcs[0].Status)
		}
		if wop == provider.WRSend && failed == nil {
			// The responder takes its receive completion, as an
			// application does: only a polled CQE frees its RQ slot.
			rwcs, err := waitWalk(world, rsp.RecvCQ, 1, walkPackets(size, mtu, 1))
			if err != nil {
				failed = err
			} else if rwcs[0].Status != provider.WCSuccess {
				failed = fmt.Errorf("%s %d: receive completed with %v", op, i, rwcs[0].Status)
			}
		}
	}
	// The workload's natural end: a timed rule due later does not fire,
	// and stderr says so (as perf does).
	reportNotFired(stderr, "stat", world, origin)
	type link struct {
		Ifname   string
		Port     int
		Counters map[string]uint64
		order    []string
	}
	var links []link
	for _, h := range world.Hosts {
		c := h.Dev.HWCounters()
		l := link{Ifname: h.Ctx.Name(), Port: 1, Counters: map[string]uint64{}}
		for _, name := range device.LinuxHWCounters {
			l.Counters[name] = c[name]
			l.order = append(l.order, name)
		}
		if all {
			var own []string
			for name, v := range c {
				if _, linux := l.Counters[name]; !linux && v != 0 {
					own = append(own, name)
				}
			}
			sort.Strings(own)
			for _, name := range own {
				l.Counters[name] = c[name]
				l.order = append(l.order, name)
			}
		}
		links = append(links, l)
	}
	if asJSON {
		// As rdma -j statistic show prints it (iproute2 rdma/stat.c):
		// one line, one flat object per port, "ifname" and "port" then
		// every counter under its own name, in the order of the text.
		var b strings.Builder
		b.WriteByte('[')
		for i, l := range links {
			if i > 0 {
				b.WriteByte(',')
			}
			name, _ := json.Marshal(l.Ifname)
			fmt.Fprintf(&b, `{"ifname":%s,"port":%d`, name, l.Port)
			for _, c := range l.order {
				key, _ := json.Marshal(c)
				fmt.Fprintf(&b, ",%s:%d", key, l.Counters[c])
			}
			b.WriteByte('}')
		}
		b.WriteByte(']')
		fmt.Fprintln(w, b.String())
	} else {
		for _, l := range links {
			var b strings.Builder
			fmt.Fprintf(&b, "link %s/%d", l.Ifname, l.Port)
			for _, name := range l.order {
				fmt.Fprintf(&b, " %s %d", name, l.Counters[name])
			}
			fmt.Fprintln(w, b.String())
		}
	}
	if failed != nil {
		return fmt.Errorf("the workload stopped: %w (counters above are as it left them)", failed)
	}
	return nil
}
