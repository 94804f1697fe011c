package main

import (
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/softnic/softnic/profile"
	"github.com/softnic/softnic/serve"
	"github.com/softnic/softnic/wallclock"
	"github.com/softnic/softnic/wire"
)

func init() {
	register("serve", "run emulated NICs in a daemon that client processes attach to", runServe)
}

const serveHelp = `usage: softnic serve --socket PATH [--devices N] [--profile P] [--clock sim|wall] [--wire SPEC [--ip A.B.C.D]]...

Runs N emulated NICs (softnic0 .. softnic<N-1>) in this process. The k-th
--wire (udp:LISTEN,PEER or tap:NAME, as softnic rdma --wire) puts device
k-1 on that real network, with the k-th --ip as its address (default
192.0.2.<k>); the devices after the last wire are cabled back to back in
pairs (an odd last one to itself). --clock sim (the default without wires)
moves virtual time only when a client asks, so one client's trace is that
of one process; --clock wall (implied by any wire) runs it against the
wall clock, for peers on real wires and programs that do not poll.

A client process attaches to one with provider.Dial (or
softnic rc_pingpong -d softnic0 --socket PATH): its host memory and MMIO
ring are memfds it passes over the socket, control is uverbs bytes
(docs/daemon.md). One line is logged per attach, detach and refusal.
SIGINT or SIGTERM stops the daemon: every client is detached as if it had
died, and the socket file is removed.

`

func runServe(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	socket := fs.String("socket", os.Getenv("SOFTNIC_SOCKET"), "unix socket path to listen on (default $SOFTNIC_SOCKET)")
	var devices int
	intVar(fs, &devices, "devices", 2, fmt.Sprintf("number of emulated NICs (1 to %d)", serve.MaxDevices))
	prof := fs.String("profile", "", "device profile: a name (see softnic profiles) or a JSON file (default "+profile.DefaultName+")")
	var wires, ips stringsFlag
	var neigh neighFlag
	fs.Var(&wires, "wire", "put the next device on this real network: udp:LISTEN,PEER or tap:NAME (repeatable)")
	fs.Var(&ips, "ip", "IPv4 address of the device on the matching --wire (repeatable, in order)")
	fs.Var(&neigh, "neigh", "static neighbour IP=MAC on every wire (repeatable); others are resolved by ARP")
	clock := fs.String("clock", "", "time policy: sim (default without --wire) or wall (free-running; implied by --wire)")
	lead := new(time.Duration)
	durationVar(fs, lead, "lead", wallclock.DefaultLead, "with --clock wall: how far virtual time may run ahead of the wall clock (at most 10ms)")
	pos, code, ok := parseCommand(fs, serveHelp, args, stdout, stderr)
	if !ok {
		return code
	}
	if !noArgs("serve", fs, serveHelp, pos, stderr) {
		return 2
	}
	if *socket == "" {
		fmt.Fprintln(stderr, "softnic serve: --socket is required")
		return 2
	}
	if len(*socket) > serve.MaxSocketPath {
		fmt.Fprintf(stderr, "softnic serve: --socket: a path of %d bytes (a unix socket's holds at most %d)\n", len(*socket), serve.MaxSocketPath)
		return 2
	}
	if devices < 1 || devices > serve.MaxDevices {
		// serve.Config reads 0 devices as its default 2: an explicit
		// --devices 0 is refused here rather than served as 2.
		fmt.Fprintf(stderr, "softnic serve: --devices %d (want 1 to %d)\n", devices, serve.MaxDevices)
		return 2
	}
	p, err := profile.Load(*prof)
	if err != nil {
		fmt.Fprintf(stderr, "softnic serve: %v\n", err)
		return 2
	}
	if *lead <= 0 {
		// serve.Config reads a zero lead as the default: say so rather than
		// run with 100 µs when 0 was asked for.
		fmt.Fprintf(stderr, "softnic serve: --lead %v: need a positive duration (default %v)\n", *lead, wallclock.DefaultLead)
		return 2
	}
	if *lead > wallclock.MaxLead {
		fmt.Fprintf(stderr, "softnic serve: --lead %v: at most %v (timers due within the lead fire at once: ACK timeouts before any ACK, ARP retries before any reply)\n", *lead, wallclock.MaxLead)
		return 2
	}
	cfg := serve.Config{Socket: *socket, Devices: devices, Profile: p, Log: stderr, Lead: *lead}
	if *clock != "" {
		if cfg.Clock, err = serve.ParseClock(*clock); err != nil {
			fmt.Fprintf(stderr, "softnic serve: --clock: %v\n", err)
			return 2
		}
		if cfg.Clock == serve.ClockSim && len(wires) > 0 {
			fmt.Fprintln(stderr, "softnic serve: --clock sim cannot pace devices on real wires: use --clock wall (the default with --wire)")
			return 2
		}
	}
	if len(ips) > len(wires) {
		fmt.Fprintf(stderr, "softnic serve: %d --ip for %d --wire\n", len(ips), len(wires))
		return 2
	}
	for k, w := range wires {
		if _, err := wire.ParseWireSpec(w); err != nil {
			fmt.Fprintf(stderr, "softnic serve: --wire %s: %v\n", w, err)
			return 2
		}
		sw := serve.Wire{Spec: w, IP: serve.Identity(k).IP, Neighbors: neigh}
		if k < len(ips) {
			ip, err := netip.ParseAddr(ips[k])
			if err != nil || !ip.Is4() {
				fmt.Fprintf(stderr, "softnic serve: --ip %q: need an IPv4 address\n", ips[k])
				return 2
			}
			sw.IP = ip
		}
		cfg.Wires = append(cfg.Wires, sw)
	}
	if devices < len(wires) && flagGiven(fs, "devices") {
		fmt.Fprintf(stderr, "softnic serve: --devices %d but %d --wire: each wire puts one device on it\n", devices, len(wires))
		return 2
	}
	if devices < len(wires) {
		cfg.Devices = len(wires)
		devices = len(wires)
	}
	d, err := serve.New(cfg)
	if err != nil {
		// The package's errors start "serve: ", which this prefix says.
		fmt.Fprintf(stderr, "softnic serve: %s\n", strings.TrimPrefix(err.Error(), "serve: "))
		return 1
	}
	fmt.Fprintf(stderr, "softnic serve: %d devices (%s) on %s, profile %s, clock %v\n", devices, strings.Join(d.Names(), ", "), *socket, p.Name, d.Clock())
	for k, w := range cfg.Wires {
		id := d.Ident(k)
		fmt.Fprintf(stderr, "softnic serve: softnic%d on %s as %v (%s)\n", k, w.Spec, id.IP, macString(id.MAC))
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)
	done := make(chan error, 1)
	go func() { done <- d.Serve() }()
	select {
	case s := <-sig:
		fmt.Fprintf(stderr, "softnic serve: %v: stopping\n", s)
		d.Close()
		<-done
		c := d.Counters()
		fmt.Fprintf(stderr, "softnic serve: stopped after %d attaches, %d detaches, %d refusals\n", c.Attaches, c.Detaches, c.Refusals)
		return 0
	case err := <-done:
		d.Close()
		if err != nil {
			fmt.Fprintf(stderr, "softnic serve: %v\n", err)
			return 1
		}
		return 0
	}
}

// stringsFlag collects a repeated string flag.
type stringsFlag []string

func (s *stringsFlag) String() string { return strings.Join(*s, ",") }

func (s *stringsFlag) Set(v string) error {
	*s = append(*s, v)
	return nil
}
