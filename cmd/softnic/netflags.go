package main

// The flags of the real-network commands (`softnic rdma`, `softnic
// rc_pingpong`, `softnic perf --wire`) and the wallclock.Config they make.
// The NIC on the wire and the loop that paces it against the wall clock
// are package wallclock's (its doc.go holds the time policy).

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"time"

	"github.com/softnic/softnic/ethport"
	"github.com/softnic/softnic/fault"
	"github.com/softnic/softnic/profile"
	"github.com/softnic/softnic/wallclock"
	"github.com/softnic/softnic/wire"
)

// neighFlag collects repeated --neigh IP=MAC flags.
type neighFlag []ethport.Neighbor

func (n *neighFlag) String() string {
	s := make([]string, len(*n))
	for i, e := range *n {
		s[i] = fmt.Sprintf("%v=%s", e.IP, macString(e.MAC))
	}
	return strings.Join(s, ",")
}

func (n *neighFlag) Set(v string) error {
	e, err := ethport.ParseNeighbor(v)
	if err != nil {
		return err
	}
	*n = append(*n, e)
	return nil
}

// netOpts are the flags every real-network command shares.
type netOpts struct {
	wire    string
	ip      string
	mac     string
	neigh   neighFlag
	pcap    string
	lead    time.Duration
	memSize int
	quiet   bool
	faults  string
	check   bool
	profile string
	// stdinCommands: the command reads its input from stdin (rdma), so
	// --faults - is refused.
	stdinCommands bool
}

// wireOnly names the flags given on fs that describe a NIC on a real
// wire (its address, neighbours, capture, pacing, memory): with no wire
// they would go unused.
func (o *netOpts) wireOnly(fs *flag.FlagSet) []string {
	var given []string
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "ip", "mac", "neigh", "pcap", "lead", "mem":
			given = append(given, "--"+f.Name)
		}
	})
	return given
}

// flagsDescribe is the flags named, then "describes" or "describe" to
// agree with how many there are.
func flagsDescribe(flags []string) string {
	if len(flags) == 1 {
		return flags[0] + " describes"
	}
	return strings.Join(flags, ", ") + " describe"
}

// nicOnly names the flags given on fs that describe the emulated NIC
// itself (its wire settings above, and its profile, fault plan and checked
// mode): a command that attaches to a daemon's device or drives a kernel
// device has no NIC of its own for them to describe.
func (o *netOpts) nicOnly(fs *flag.FlagSet) []string {
	given := o.wireOnly(fs)
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "faults", "check", "profile":
			given = append(given, "--"+f.Name)
		}
	})
	return given
}

func (o *netOpts) register(fs *flag.FlagSet) {
	fs.StringVar(&o.wire, "wire", "", "real transport: udp:LISTEN,PEER (one frame per datagram, as qemu -netdev socket,udp=) or tap:NAME")
	fs.StringVar(&o.ip, "ip", "", "IPv4 address of the emulated port (its RoCEv2 GID is ::ffff:IP)")
	fs.StringVar(&o.mac, "mac", "", "MAC address of the emulated port (default 02:00 followed by the IPv4 bytes)")
	fs.Var(&o.neigh, "neigh", "static neighbour IP=MAC (repeatable); other peers are resolved by ARP")
	fs.StringVar(&o.pcap, "pcap", "", "write every frame sent and received on the wire to this pcap file")
	durationVar(fs, &o.lead, "lead", wallclock.DefaultLead, "how far virtual time may run ahead of the wall clock (at most 10ms)")
	intVar(fs, &o.memSize, "mem", 0, "host memory in bytes (default: enough for the buffers)")
	fs.BoolVar(&o.quiet, "quiet", false, "do not echo device and port warnings to stderr")
	fs.StringVar(&o.profile, "profile", "", "device profile: a name (see softnic profiles) or a JSON file (default "+profile.DefaultName+")")
	fs.StringVar(&o.faults, "faults", "", "fault plan JSON applied where the port meets the real wire (wire.tx: frames sent, wire.rx: frames received) and at every device hook point (see softnic faults --explain)")
	fs.BoolVar(&o.check, "check", false, "checked mode: report each mlx5 host-protocol violation the device observes (rules R1-R15, docs/faults.md) on stderr")
}

// reportUnfiredRules says on stderr, at the end of a run on a real wire,
// which event rules of its NIC's fault plan never fired (reportNeverFired),
// as perf and stat do in simulation. rt without a plan (or a daemon's NIC,
// whose plan is the daemon's) says nothing.
func reportUnfiredRules(stderr io.Writer, cmd string, rt any) {
	if n, ok := rt.(interface{ Faults() *fault.Injector }); ok {
		reportNeverFired(stderr, cmd, n.Faults())
	}
}

// openRealNet builds the NIC of the flags on its wire. memNeed is the
// memory the command's buffers need (rings and doorbells come on top).
func openRealNet(o netOpts, memNeed int, stderr io.Writer) (*wallclock.Net, error) {
	if o.wire == "" {
		return nil, usageError{errors.New("--wire is required (udp:LISTEN,PEER or tap:NAME)")}
	}
	if _, err := wire.ParseWireSpec(o.wire); err != nil {
		return nil, usageError{err}
	}
	cfg, err := o.config(memNeed, stderr)
	if err != nil {
		return nil, err
	}
	return openNet(o, cfg)
}

// config checks the flags and turns them into the NIC's configuration
// (the wire is o.wire; a caller may give an open transport instead).
func (o *netOpts) config(memNeed int, stderr io.Writer) (wallclock.Config, error) {
	ip, mac, err := o.identity()
	if err != nil {
		return wallclock.Config{}, usageError{err}
	}
	if o.pcap == "-" {
		// The pcap would share stdout with the command's own output
		// (the line protocol, the tables, the ping-pong's lines).
		return wallclock.Config{}, usageError{errors.New("--pcap -: stdout carries the command's output; give --pcap a file")}
	}
	if o.faults == "-" && o.stdinCommands {
		// rdma reads its commands from stdin: a plan there would swallow
		// them, or wait for an end of input that never comes.
		return wallclock.Config{}, usageError{errors.New("--faults -: stdin carries the command's input; give --faults a file")}
	}
	plan, err := loadFaults(o.faults)
	if err != nil {
		return wallclock.Config{}, err
	}
	if o.lead < 0 {
		return wallclock.Config{}, usageError{fmt.Errorf("--lead %v is negative", o.lead)}
	}
	if o.lead > wallclock.MaxLead {
		return wallclock.Config{}, usageError{fmt.Errorf("--lead %v: at most %v (timers due within the lead fire at once: ACK timeouts before any ACK, ARP retries before any reply)", o.lead, wallclock.MaxLead)}
	}
	memSize := o.memSize
	if memSize == 0 {
		memSize = memNeed + 16<<20
	}
	if memSize < memNeed {
		return wallclock.Config{}, usageError{fmt.Errorf("--mem %d is smaller than the %d bytes the buffers need", memSize, memNeed)}
	}
	prof, err := loadProfile(o.profile)
	if err != nil {
		return wallclock.Config{}, err
	}
	return wallclock.Config{Wire: o.wire, IP: ip, MAC: mac, Neighbors: o.neigh, Profile: prof, Lead: o.lead,
		Faults: plan, Check: o.check, Pcap: o.pcap, MemNeed: memNeed, Mem: memSize, Stderr: stderr, Quiet: o.quiet}, nil
}

// openNet opens the NIC of cfg and prints its header lines: the profile
// (unless --quiet) and the fault plan, rule by rule.
func openNet(o netOpts, cfg wallclock.Config) (*wallclock.Net, error) {
	n, err := wallclock.Open(cfg)
	if err != nil {
		return nil, err
	}
	if !o.quiet {
		fmt.Fprintf(cfg.Stderr, "softnic: profile %s\n", profileLabel(n.Profile()))
	}
	if cfg.Faults != nil {
		for _, l := range strings.Split(strings.TrimRight(cfg.Faults.Explain(), "\n"), "\n") {
			fmt.Fprintf(cfg.Stderr, "softnic: fault plan %s: %s\n", o.faults, l)
		}
	}
	return n, nil
}

// identity is the port's IPv4 address and MAC from --ip and --mac.
func (o *netOpts) identity() (netip.Addr, [6]byte, error) {
	ip, err := netip.ParseAddr(o.ip)
	if err != nil || !ip.Is4() {
		return ip, [6]byte{}, fmt.Errorf("--ip %q: need an IPv4 address", o.ip)
	}
	mac := ethport.DefaultMAC(ip)
	if o.mac != "" {
		if mac, err = ethport.ParseMAC(o.mac); err != nil {
			return ip, mac, err
		}
	}
	return ip, mac, nil
}
