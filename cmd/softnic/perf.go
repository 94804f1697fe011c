package main

// `softnic perf`: perftest's tests, flags and tables (shared/reference/
// perftest.md). Two modes:
//   - in one process (default): two emulated NICs back to back in virtual
//     time; the figures are the model's and deterministic for a profile,
//     a workload and a fault plan (perf_sim.go);
//   - on a real wire (--wire): one emulated NIC whose peer is stock
//     perftest on another RoCE stack, with perftest's out-of-band TCP
//     exchange, as server (no host argument) or client (perf_wire.go).
// The loops of both modes are the same state machines (perf_loops.go),
// stepped by the engine in mode 1 and by the real-time driver in mode 2.

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

func init() {
	register("perf", "perftest's tests (write_lat, send_bw, ...): two emulated NICs in virtual time, or against stock perftest (--wire)", runPerf)
}

// perfVerb is perftest's VerbType.
type perfVerb int

const (
	verbSend perfVerb = iota
	verbWrite
	verbRead
	verbAtomic
)

// perftest's names of the verbs (the title line).
var verbTitle = [...]string{"Send", "RDMA_Write", "RDMA_Read", "Atomic"}

// perfTest is one of the eight tests.
type perfTest struct {
	name string
	verb perfVerb
	bw   bool
}

var perfTests = []perfTest{
	{"send_lat", verbSend, false}, {"write_lat", verbWrite, false}, {"read_lat", verbRead, false}, {"atomic_lat", verbAtomic, false},
	{"send_bw", verbSend, true}, {"write_bw", verbWrite, true}, {"read_bw", verbRead, true}, {"atomic_bw", verbAtomic, true},
}

// lookupPerfTest finds a test by its name or its perftest binary's name
// (ib_write_lat).
func lookupPerfTest(word string) (perfTest, bool) {
	w := strings.TrimPrefix(word, "ib_")
	for _, t := range perfTests {
		if t.name == w {
			return t, true
		}
	}
	return perfTest{}, false
}

func perfTestNames() string {
	n := make([]string, len(perfTests))
	for i, t := range perfTests {
		n[i] = t.name
	}
	return strings.Join(n, ", ")
}

// rttDivisor is what perftest divides a ping-pong interval by.
func (t perfTest) rttDivisor() int {
	if t.verb == verbRead || t.verb == verbAtomic {
		return 1
	}
	return 2
}

const perfHelp = `usage:
  softnic perf <test> [flags]                      two emulated NICs in one process, virtual time
  softnic perf <test> --wire SPEC --ip A.B.C.D [flags]          server: wait for a perftest client
  softnic perf <test> --wire SPEC --ip A.B.C.D [flags] <host>   client of a perftest server at <host>

Tests: send_lat, write_lat, read_lat, atomic_lat, send_bw, write_bw,
read_bw, atomic_bw (ib_write_lat and the other perftest binary names are
accepted too).

perftest's flags and tables. Latency tables are in µs: half the round trip
for send and write (ping-pong), the full round trip for read and atomic; the
two largest samples are left out, typical is the median. Bandwidth tables
give BW peak, BW average (MiB/s = 2^20 bytes/s, or Gb/s with
--report_gbits) and MsgRate (Mpps).

In one process the figures are the model's: virtual time of the profile
(--profile), deterministic for a profile, workload and fault plan. With
--wire the peer is stock perftest on another RoCE stack (Linux rxe, say):
the out-of-band exchange is perftest's (TCP port -p, default 18515), so
either side may be perftest; times are then wall-clock.

Sizes and counts are decimal (0x accepted); identifiers in the tables are hex.

-b (bandwidth tests) runs both directions at once; the row is the sum of
both sides' reports, as perftest's (on a wire both sides need -b: perftest
does not exchange it). -e sleeps on a completion channel instead of polling
(not the write tests). -H/-U print the latency samples. --tclass sets the
IPv4 ToS of every frame; -S is accepted and changes nothing (on RoCE the SL
is the VLAN priority, which softnic does not model); -T is rdma_cm's, as in
perftest. Refused, with the reason: -R/-z (rdma_cm), --cpu_util,
--run_infinitely (in one process the clock is virtual and the run could not
end; timed runs on a wire are not written) and -g (the NIC has no multicast
groups).

Flags:
`

// perfOpts are the command's options.
type perfOpts struct {
	test       perfTest
	host       string
	size       int
	sizeSet    bool
	all        bool
	iters      int
	itersSet   bool
	depthSet   [2]bool // -t, -r given
	txDepth    int
	rxDepth    int
	qps        int
	postList   int
	inline     int
	inlineSet  bool // -I given; else perftest's default for the test
	cqMod      int
	cqModSet   bool
	conn       string
	mtu        int // 0: the port's active MTU
	duration   int // seconds; 0: iterations
	cpuFreqF   bool
	gbits      bool
	output     string // "", bandwidth, latency
	outs       int    // outstanding READs/atomics per QP (max_rd_atomic); 0: the device's max_qp_rd_atom
	dev        string
	port       int
	ibPort     int
	gidIdx     int
	atomic     string
	noPeak     bool
	peakOff    bool // resolve turned the peak off, as perftest does, and says so
	json       bool
	timeout    time.Duration
	net        netOpts
	noProgress bool
	qpTimeout  int

	perfExtra          // perf_flags.go
	wireFlags []string // the real-network flags given (netOpts.wireOnly)

	// Tests only: check in write_lat that the whole message is there
	// once its last byte is (the device wrote the last byte last).
	verifyLastByte bool
}

// perfFlags builds the flag set: perftest's short and long spellings.
func perfFlags(o *perfOpts, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("perf", flag.ContinueOnError)
	fs.SetOutput(stderr)
	num := func(p *int, def int, usage string, names ...string) {
		for _, n := range names {
			intVar(fs, p, n, def, usage)
		}
	}
	boolean := func(p *bool, usage string, names ...string) {
		for _, n := range names {
			fs.BoolVar(p, n, false, usage)
		}
	}
	str := func(p *string, def, usage string, names ...string) {
		for _, n := range names {
			fs.StringVar(p, n, def, usage)
		}
	}
	num(&o.size, 0, "size of message to exchange (default 2 for latency, 65536 for bandwidth, 8 for atomic)", "s", "size")
	boolean(&o.all, "run sizes from 2 till 2^23", "a", "all")
	num(&o.iters, 0, "number of exchanges (default 1000; 5000 for write_bw and read_bw)", "n", "iters")
	num(&o.txDepth, 0, "size of tx queue (default 1 for latency, 128 for bandwidth)", "t", "tx-depth")
	num(&o.rxDepth, 0, "rx queue size (send tests; default 512, at most the iterations)", "r", "rx-depth")
	num(&o.qps, 1, "number of QPs (bandwidth tests)", "q", "qp")
	num(&o.postList, 1, "post a list of this many WRs per post call", "l", "post_list")
	num(&o.inline, 0, "max size of message to be sent inline (default 220 write_lat, 236 send_lat (188 on UD), 0 otherwise)", "I", "inline_size")
	num(&o.cqMod, 100, "generate a CQE every this many sends (bandwidth tests)", "Q", "cq-mod")
	str(&o.conn, "RC", "connection type RC, UC or UD", "c", "connection")
	num(&o.mtu, 0, "MTU size: 256 - 4096 (default: the port's active MTU)", "m", "mtu")
	num(&o.duration, 0, "run the test for this many seconds (virtual seconds in one process)", "D", "duration")
	boolean(&o.cpuFreqF, "do not fail even if the CPU frequency is not maximal (accepted; softnic has no CPU frequency)", "F", "CPU-freq")
	boolean(&o.gbits, "report the bandwidth in Gb/s instead of MiB/s", "report_gbits")
	// perftest's -o is --outs, the outstanding READs/atomics; --output
	// has no short form there. softnic took -o for --output before it
	// had --outs, so -o with a number is --outs and with a word --output.
	str(&o.output, "", "print only this number: bandwidth (BW average) or latency (t_avg)", "output")
	num(&o.outs, 0, "outstanding READs/atomics per QP (max_rd_atomic; default and at most the device's max_qp_rd_atom)", "outs")
	fs.Var(outsOrOutput{&o.outs, &o.output}, "o", "outstanding READs/atomics (a number, as perftest's --outs), or bandwidth/latency (--output)")
	str(&o.dev, "", "use this IB device: softnic0 is the emulated NIC, a kernel device (rxe0, mlx5_0) runs against a perftest peer through /dev/infiniband", "d", "ib-dev")
	num(&o.port, 18515, "TCP port of the out-of-band exchange (--wire)", "p", "port")
	num(&o.ibPort, 1, "port of the IB device (only 1)", "i", "ib-port")
	num(&o.gidIdx, 1, "source GID index (0 and 1: the IPv4-mapped RoCEv2 GID)", "x", "gid-index")
	str(&o.atomic, "FETCH_AND_ADD", "type of atomic operation: CMP_AND_SWAP or FETCH_AND_ADD", "A", "atomic_type")
	boolean(&o.noPeak, "do not compute the peak bandwidth", "N", "noPeak")
	num(&o.qpTimeout, 14, "QP timeout: 4.096 µs × 2^N", "u", "qp-timeout")
	fs.BoolVar(&o.json, "json", false, "print the run as JSON instead of tables")
	durationVar(fs, &o.timeout, "timeout", 20*time.Second, "give up when the peer or a completion keeps us waiting this long (--wire); in one process, when no completion lands for this long in virtual time (with -D: this long past the deadline)")
	fs.BoolVar(&o.noProgress, "no-progress", false, "no progress bar on stderr")
	// --wire, --ip and the rest of the real-network flags; --faults and
	// --profile are theirs, and in one process apply to the simulation.
	o.net.register(fs)
	registerPerfExtra(fs, &o.perfExtra)
	return fs
}

// errEmptyHost refuses a host argument of "" (an unset "$HOST" in a
// script): taken as no host, it made the command a server that waited for
// a client instead of a client that said what was wrong.
var errEmptyHost = errors.New(`an empty host argument: name the server to connect to, or give none to be the server`)

// parsePerfArgs parses flags and positional words (the test, then the
// host), which may come in any order (getopt permutes).
func parsePerfArgs(args []string, stderr io.Writer) (perfOpts, error) {
	var o perfOpts
	fs := perfFlags(&o, stderr)
	quietFlags(fs)
	words, err := parseInterspersed(fs, args)
	if err != nil {
		return o, asHelp(fs, perfHelp, err)
	}
	o.wireFlags = o.net.wireOnly(fs)
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "s", "size":
			o.sizeSet = true
		case "n", "iters":
			o.itersSet = true
		case "Q", "cq-mod":
			o.cqModSet = true
		case "I", "inline_size":
			o.inlineSet = true
		case "t", "tx-depth":
			o.depthSet[0] = true
		case "r", "rx-depth":
			o.depthSet[1] = true
		}
	})
	// 0 is the flags' "unset" (the test's default); given, it is out of
	// range, as perftest's CHECK_VALUE_IN_RANGE refuses it.
	if o.depthSet[0] && o.txDepth == 0 {
		return o, fmt.Errorf("-t 0 out of range 1..16384")
	}
	if o.depthSet[1] && o.rxDepth == 0 {
		return o, fmt.Errorf("-r 0 out of range 1..16384")
	}
	switch len(words) {
	case 0:
		return o, fmt.Errorf("which test? (%s)", perfTestNames())
	case 1, 2:
		t, ok := lookupPerfTest(words[0])
		if !ok {
			return o, fmt.Errorf("unknown test %q (%s)", words[0], perfTestNames())
		}
		o.test = t
		if len(words) == 2 {
			if words[1] == "" {
				return o, errEmptyHost
			}
			o.host = words[1]
		}
	default:
		return o, fmt.Errorf("unexpected argument %q (want a test and at most one host)", words[2])
	}
	return o, o.resolve()
}

// resolve applies perftest's defaults and dependencies and validates.
func (o *perfOpts) resolve() error {
	t := o.test
	wire := o.net.wire != "" || kernelDevice(o.dev) // a kernel device is on a real network too
	if !o.sizeSet {
		switch {
		case t.verb == verbAtomic:
			o.size = 8
		case t.bw:
			o.size = 65536
		default:
			o.size = 2
		}
	}
	if !o.itersSet {
		o.iters = 1000
		if t.bw && (t.verb == verbWrite || t.verb == verbRead) {
			o.iters = 5000
		}
	}
	if o.txDepth == 0 {
		o.txDepth = 1
		if t.bw {
			o.txDepth = 128
		}
	}
	conn := strings.ToUpper(o.conn)
	switch conn {
	case "RC", "UC", "UD":
		o.conn = conn
	default:
		return fmt.Errorf("-c %q: connection type is RC, UC or UD", o.conn)
	}
	switch {
	case o.conn == "UD" && t.verb != verbSend:
		return fmt.Errorf("-c UD: only the send tests run on UD QPs")
	case o.conn == "UC" && (t.verb == verbRead || t.verb == verbAtomic):
		return fmt.Errorf("-c UC: UC QPs have no RDMA READ or atomics")
	}
	switch o.output {
	case "", "bandwidth", "latency":
	default:
		return fmt.Errorf("-o %q: want a number of outstanding reads, or bandwidth or latency", o.output)
	}
	if (o.output == "bandwidth" && !t.bw) || (o.output == "latency" && t.bw) {
		return fmt.Errorf("-o %s does not fit %s", o.output, t.name)
	}
	switch strings.ToUpper(o.atomic) {
	case "FETCH_AND_ADD", "CMP_AND_SWAP":
		o.atomic = strings.ToUpper(o.atomic)
	default:
		return fmt.Errorf("-A %q: want CMP_AND_SWAP or FETCH_AND_ADD", o.atomic)
	}
	switch {
	case t.verb == verbAtomic && o.size != 8:
		return errors.New("message size cannot be changed for atomic tests (8 bytes)")
	case o.all && t.verb == verbAtomic:
		return errors.New("-a does not apply to atomic tests")
	case o.size < 1 || o.size > 8<<20:
		return fmt.Errorf("-s %d out of range 1..8388608", o.size)
	case o.iters < 5:
		return fmt.Errorf("-n %d: at least 5 iterations", o.iters)
	case o.iters > maxIters:
		return fmt.Errorf("-n %d: at most %d iterations", o.iters, maxIters)
	case o.txDepth < 1 || o.txDepth > 16384:
		return fmt.Errorf("-t %d out of range 1..16384", o.txDepth)
	case o.rxDepth < 0 || o.rxDepth > 16384: // perftest's MAX_RX; 0: the default, set below
		return fmt.Errorf("-r %d out of range 1..16384", o.rxDepth)
	case o.qps < 1 || o.qps > 64:
		return fmt.Errorf("-q %d out of range 1..64", o.qps)
	case o.qps > 1 && !t.bw:
		return errors.New("-q: latency tests run one QP")
	case o.qps > 1 && wire:
		return errors.New("-q: one QP on a real wire (for now)")
	case len(o.wireFlags) > 0 && o.net.wire == "":
		// In one process the two NICs are cabled back to back; a kernel
		// device (-d rxe0) has its own address and port.
		return fmt.Errorf("%s the emulated NIC on a real wire: give --wire (in one process the NICs are back to back)", flagsDescribe(o.wireFlags))
	case o.postList < 1 || o.postList > 1024:
		return fmt.Errorf("--post_list %d out of range 1..1024", o.postList)
	case o.postList > 1 && !t.bw:
		return errors.New("--post_list is for bandwidth tests")
	case o.inline > 912:
		return fmt.Errorf("-I %d out of range 0..912", o.inline)
	case o.cqMod < 1 || o.cqMod > 16384:
		return fmt.Errorf("--cq-mod %d out of range 1..16384", o.cqMod)
	case o.mtu != 0 && !validMTU(o.mtu):
		return mtuError("-m", o.mtu)
	case o.duration < 0 || o.duration > 3600:
		return fmt.Errorf("-D %d out of range 0..3600 seconds", o.duration)
	case o.duration > 0 && (o.all || o.itersSet):
		return errors.New("-D runs for a time: not with -a or -n")
	case o.duration > 0 && wire:
		return errors.New("-D: timed runs in one process only (for now)")
	case o.port <= 0 || o.port > 65535:
		return fmt.Errorf("-p %d is not a TCP port", o.port)
	case o.ibPort != 1:
		return fmt.Errorf("-i %d: the emulated NIC has port 1 only", o.ibPort)
	case o.gidIdx < 0 || o.gidIdx > 1:
		return fmt.Errorf("-x %d: softnic's GID table has 0 and 1 (the IPv4-mapped GID)", o.gidIdx)
	case o.timeout <= 0:
		return fmt.Errorf("--timeout %v must be positive", o.timeout)
	case o.host != "" && !wire:
		return fmt.Errorf("a host (%q) needs --wire: in one process both NICs are here", o.host)
	case o.qpTimeout < 0 || o.qpTimeout > 31:
		return fmt.Errorf("-u %d out of range 0..31", o.qpTimeout)
	}
	if err := checkEmulatedDevice(o.dev, o.net.wire != ""); err != nil {
		return err
	}
	if err := o.resolveExtra(wire); err != nil {
		return err
	}
	// perftest's force_dependecies: a bandwidth test of more than 20,000
	// iterations, or a timed one, does not search for the peak (the search
	// is quadratic in the iterations) and warns that it does not.
	if t.bw && !o.noPeak && (o.duration > 0 || o.iters > maxPeakIters) {
		o.noPeak, o.peakOff = true, true
	}
	// perftest's force_dependecies: depths at most the iterations, CQ
	// moderation at most the TX depth, off for large messages unless asked.
	if o.duration == 0 {
		o.txDepth = min(o.txDepth, o.iters)
	}
	if o.rxDepth == 0 {
		o.rxDepth = 512
	}
	if t.verb == verbSend && o.duration == 0 {
		o.rxDepth = min(o.rxDepth, o.iters)
	}
	if o.postList > 1 {
		if o.duration == 0 && o.iters%o.postList != 0 {
			return fmt.Errorf("-n %d must be a multiple of --post_list %d", o.iters, o.postList)
		}
		if !o.cqModSet {
			o.cqMod = o.postList
		} else if o.cqMod != o.postList {
			return fmt.Errorf("--cq-mod %d: with --post_list the CQ moderation is the list (%d)", o.cqMod, o.postList)
		}
	}
	if o.size > 8192 && o.conn != "UD" && !o.all && !o.cqModSet && o.postList == 1 {
		o.cqMod = 1
	}
	if !t.bw {
		o.cqMod = 1
	}
	o.cqMod = min(o.cqMod, o.txDepth)
	if o.postList > o.txDepth {
		return fmt.Errorf("--post_list %d is larger than -t %d", o.postList, o.txDepth)
	}
	if !o.inlineSet {
		if !t.bw {
			switch {
			case t.verb == verbWrite:
				o.inline = 220
			case t.verb == verbSend && o.conn == "UD":
				o.inline = 188
			case t.verb == verbSend:
				o.inline = 236
			}
		}
	}
	if t.verb == verbRead || t.verb == verbAtomic {
		o.inline = 0
	}
	return nil
}

// sizes is the message sizes of the run: -s, or 2..2^23 with -a (up to the
// MTU on UD).
func (o *perfOpts) sizes() []int {
	if !o.all {
		return []int{o.size}
	}
	var s []int
	for i := 1; i < 24; i++ {
		if o.conn == "UD" && 1<<i > o.mtuBytes(4096) {
			break
		}
		s = append(s, 1<<i)
	}
	return s
}

// mtuBytes is -m, or active when -m was not given.
func (o *perfOpts) mtuBytes(active int) int {
	if o.mtu != 0 {
		return min(o.mtu, active)
	}
	return active
}

// maxPeakIters is the most iterations for which a bandwidth test searches
// for its peak (perftest's force_dependecies).
const maxPeakIters = 20000

// peakOffWarning is perftest's line when it does not measure the peak.
const peakOffWarning = " WARNING: BW peak won't be measured in this run."

func runPerf(args []string, stdout, stderr io.Writer) int {
	o, err := parsePerfArgs(args, stderr)
	if err != nil {
		var h helpError
		if errors.As(err, &h) {
			h.usage(stdout)
			return 0
		}
		fmt.Fprintln(stderr, "softnic perf:", err)
		return 2
	}
	if o.peakOff {
		// perftest prints it first, on stdout; JSON keeps stdout its own.
		w := stdout
		if o.json {
			w = stderr
		}
		fmt.Fprintln(w, peakOffWarning)
	}
	if o.net.wire != "" || kernelDevice(o.dev) {
		err = perfWire(o, stdout, stderr)
	} else {
		err = perfSim(o, stdout, stderr)
	}
	if err != nil {
		fmt.Fprintln(stderr, "softnic perf:", err)
		if errors.As(err, new(usageError)) {
			return 2
		}
		return 1
	}
	return 0
}

// fitInline refuses an -I the device cannot take: perftest's range
// (0..912) passes the flag check, but a QP's max_inline_data is at most
// the device's (the profile's device.caps.max_inline, 512 on the built-in
// ones; a kernel device's QUERY_DEVICE), and create_qp would fail. A
// default (-I not given) is cut to the device's maximum instead.
func (o *perfOpts) fitInline(devMax int, where string) error {
	switch {
	case o.inline <= devMax:
	case !o.inlineSet:
		o.inline = devMax
	default:
		return usageError{fmt.Errorf("-I %d: the device's max inline data is %d bytes (%s)", o.inline, devMax, where)}
	}
	return nil
}

// outsOrOutput is -o: a number is perftest's --outs, a word --output.
type outsOrOutput struct {
	outs   *int
	output *string
}

func (v outsOrOutput) String() string {
	if v.output == nil || v.outs == nil {
		return ""
	}
	if *v.output != "" {
		return *v.output
	}
	if *v.outs != 0 {
		return strconv.Itoa(*v.outs)
	}
	return ""
}

func (v outsOrOutput) Set(s string) error {
	if n, err := strconv.ParseInt(s, 0, 32); err == nil {
		*v.outs = int(n)
		return nil
	}
	*v.output = s
	return nil
}

// fitOuts is perftest's ctx_set_out_reads: 0 or less takes the device's
// max_qp_rd_atom, more is cut to it with perftest's two lines on stderr.
func (o *perfOpts) fitOuts(devMax int, stderr io.Writer) {
	switch {
	case o.outs > devMax:
		fmt.Fprintf(stderr, " Number of outstanding reads is above max = %d\n Changing to that max value\n", devMax)
		o.outs = devMax
	case o.outs <= 0:
		o.outs = devMax
	}
}
