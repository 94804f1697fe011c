package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/softnic/softnic/profile"
	"github.com/softnic/softnic/serve"
)

func init() {
	register("serve", "run emulated NICs in a daemon that client processes attach to", runServe)
}

const serveHelp = `usage: softnic serve --socket PATH [--devices N] [--profile P]

Runs N emulated NICs (softnic0 .. softnic<N-1>) in this process. Devices
are cabled back to back in pairs (0-1, 2-3, ...; an odd last one to
itself). A client process attaches to one with provider.Dial (or
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
	intVar(fs, &devices, "devices", 2, "number of emulated NICs")
	prof := fs.String("profile", "", "device profile: a name (see softnic profiles) or a JSON file (default "+profile.DefaultName+")")
	pos, code, ok := parseCommand(fs, serveHelp, args, stderr)
	if !ok {
		return code
	}
	if !noArgs("serve", pos, stderr) {
		return 2
	}
	if *socket == "" {
		fmt.Fprintln(stderr, "softnic serve: --socket is required")
		return 2
	}
	p, err := profile.Load(*prof)
	if err != nil {
		fmt.Fprintf(stderr, "softnic serve: %v\n", err)
		return 2
	}
	d, err := serve.New(serve.Config{Socket: *socket, Devices: devices, Profile: p, Log: stderr})
	if err != nil {
		fmt.Fprintf(stderr, "softnic serve: %v\n", err)
		return 1
	}
	fmt.Fprintf(stderr, "softnic serve: %d devices (%s) on %s, profile %s\n", devices, strings.Join(d.Names(), ", "), *socket, p.Name)
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
