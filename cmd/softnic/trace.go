package main

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/softnic/softnic/device"
	"github.com/softnic/softnic/fault"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/profile"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/testbed"
	"github.com/softnic/softnic/trace"
)

func init() {
	register("trace", "trace one post_send end to end through two emulated NICs", runTrace)
}

type traceOpts struct {
	op, profile, pcap, chrome, faults string
	html                              string
	size, mtu, batch                  int
	mtuSet                            bool // --mtu given: else the default is cut to a smaller active MTU
	inline, noBF, json, hex, counters bool
	srq, events                       bool
	explain                           bool
	check                             bool // checked mode (device.EnableCheck)
	// noCompare: do not run the walk the other way for the closing line
	// (set on that second run).
	noCompare bool
	// pathOnly: print only the path and total_ns as JSON (the closing
	// line's run the other way, which needs nothing else of the walk).
	pathOnly bool
}

// stageJSON is one line of the walk in --json output: the stage as the
// HTML view reads it (trace.WalkStage) and the bytes it handled.
type stageJSON struct {
	trace.WalkStage
	// FrameHex is the RoCE frame a packetize, ack or wire stage built or
	// sent, as the link tap captured it (matched by node and PSN).
	FrameHex string `json:"frame_hex,omitempty"`
	// TLPAddr is the address of the stage's (first) TLP: the BAR0 offset of
	// an MMIO write, the host IOVA of a DMA.
	TLPAddr *uint64 `json:"tlp_addr,omitempty"`
}

// wqeJSON describes one posted WQE in --json output.
type wqeJSON struct {
	WQEHex   string `json:"wqe_hex"`
	Opcode   uint8  `json:"opcode"`
	WQEIndex uint16 `json:"wqe_index"`
	QPN      uint32 `json:"qpn"`
	DS       uint8  `json:"ds"`
	FMCESE   uint8  `json:"fm_ce_se"`
	RAddr    uint64 `json:"raddr"`
	RKey     uint32 `json:"rkey"`
	LKey     uint32 `json:"lkey"`
	LAddr    uint64 `json:"laddr"`
	Length   uint32 `json:"length"`
	// DestQPN and QKey (UD) are the datagram segment's destination QPN
	// and Q_Key.
	DestQPN uint32 `json:"dest_qpn,omitempty"`
	QKey    uint32 `json:"qkey,omitempty"`
}

type traceJSON struct {
	Profile  string            `json:"profile"`
	Op       string            `json:"op"`
	Size     int               `json:"size"`
	MTU      int               `json:"mtu"`
	Path     string            `json:"path"`
	Batch    int               `json:"batch"`
	Stages   []stageJSON       `json:"stages"`
	TotalNS  float64           `json:"total_ns"`
	WQEs     []wqeJSON         `json:"wqes"`
	Warnings []stageJSON       `json:"warnings"`
	Counters map[string]uint64 `json:"counters"`
	DataOK   bool              `json:"data_ok"`
	// AllCounters (with --counters): every non-zero counter by owner,
	// "node0", "node1" (the devices) and "wire" (the link).
	AllCounters map[string]map[string]uint64 `json:"all_counters,omitempty"`
	// Faults (with --faults): the plan in words.
	Faults string `json:"faults,omitempty"`
	// QPType is the QP type of both endpoints: RC, UC or UD.
	QPType string `json:"qp_type"`
	// SRQ (with --srq): the responder's receives came from a shared
	// receive queue.
	SRQ bool `json:"srq,omitempty"`
	// Recv are the responder's receive completions (operations that
	// consume a receive).
	Recv []recvJSON `json:"recv,omitempty"`
	// GRHHex (UD) is the GRH area of the first receive buffer: 20 zero
	// bytes, then the IPv4 header of the packet.
	GRHHex string `json:"grh_hex,omitempty"`
	// Events (with --events): each armed CQ's walk from the arm to the
	// completion event.
	Events []eventJSON `json:"events,omitempty"`
	// Problems lists what failed verification (empty when data_ok), and
	// checked mode's finding if it found anything.
	Problems []string `json:"problems,omitempty"`
	// Violations (with --check): each host-protocol violation checked
	// mode observed, its time from the post.
	Violations []violationJSON `json:"violations,omitempty"`
	// CQEHex are the requester's CQEs, one per WQE.
	CQEHex []string `json:"cqe_hex,omitempty"`
	// DBRHex is the requester's doorbell record DBR[1] (the SQ send
	// counter, big endian) after the post.
	DBRHex string `json:"dbr_hex,omitempty"`
	// DroppedEvents is how many events of the walk the recorder did not
	// keep (its first ones): the stages are then the walk's tail and the
	// path is "unknown". Zero, and absent, when the walk is whole.
	DroppedEvents uint64 `json:"dropped_events,omitempty"`
	// Error (a walk that failed: no CQE, or an error CQE) is how it ended,
	// the command's error; Completions are the requester's completions
	// that came. Both absent on a walk that completed.
	Error       string           `json:"error,omitempty"`
	Completions []completionJSON `json:"completions,omitempty"`
	// FaultRules (with --faults): each rule of the plan, in plan order,
	// with how many events it matched and how often it fired, so that a
	// script sees a rule that never fired (the warnings show only those
	// that did).
	FaultRules []faultRuleJSON `json:"fault_rules,omitempty"`
}

// faultRuleJSON is one fault rule's count over the walk (connection
// setup included).
type faultRuleJSON struct {
	Rule    int    `json:"rule"`
	Desc    string `json:"desc"`
	Matched uint64 `json:"matched"`
	Fired   uint64 `json:"fired"`
	// FiredInSetup is how many of Fired came in the connection setup,
	// before the post: not in the walk's stages.
	FiredInSetup uint64 `json:"fired_in_setup,omitempty"`
	// EndedFirst: a timed rule that did not fire because the walk ended
	// before its time.
	EndedFirst bool `json:"ended_first,omitempty"`
}

// faultRules is the fault_rules list of a walk under a plan (nil without
// one).
func faultRules(w *testbed.World, setup []fault.Stat, notFired []fault.Scheduled) []faultRuleJSON {
	var out []faultRuleJSON
	for i, s := range w.Injector.Fired() {
		r := faultRuleJSON{Rule: s.Rule, Desc: s.Desc, Matched: s.Matched, Fired: s.Fired}
		if i < len(setup) {
			r.FiredInSetup = setup[i].Fired
		}
		for _, n := range notFired {
			r.EndedFirst = r.EndedFirst || n.Rule == s.Rule
		}
		out = append(out, r)
	}
	return out
}

// completionJSON is one requester work completion of a failed walk.
type completionJSON struct {
	WRID      uint64 `json:"wr_id"`
	Status    string `json:"status"`
	VendorErr uint32 `json:"vendor_err,omitempty"`
}

// traceRecorderCap is the capacity of the recorder of a trace walk: 0
// keeps every event of it (the command makes one walk, so its memory is
// the walk's: the range checks bound the packets). The tests shrink it to
// see what a walk that lost events prints.
var traceRecorderCap = 0

// pathUnknown is the path of a walk whose first events were dropped: the
// stage that tells BlueFlame from the doorbell may be among them.
const pathUnknown = "unknown"

// recvJSON is one receive completion at the responder.
type recvJSON struct {
	WRID       uint64 `json:"wr_id"`
	Status     string `json:"status"`
	Opcode     string `json:"opcode"`
	ByteLen    uint32 `json:"byte_len"`
	SrcQP      uint32 `json:"src_qp"`
	GRH        bool   `json:"grh"`
	NetworkHdr string `json:"network_hdr"`
	Imm        uint32 `json:"imm,omitempty"`
}

// eventJSON is one armed CQ's completion event (--events): when the arm
// was rung, when the EQE was written and when the event reached the
// channel, relative to the post like the stages.
type eventJSON struct {
	Node      int     `json:"node"`
	CQN       uint32  `json:"cqn"`
	ArmNS     float64 `json:"arm_ns"`
	EQENS     float64 `json:"eqe_ns"`
	EventNS   float64 `json:"event_ns"`
	LatencyNS float64 `json:"arm_to_event_ns"`
	// ReqNotifyNS is when the provider's ReqNotify began (before the arm
	// doorbell reached the device), MSIXNS when the interrupt was sent.
	ReqNotifyNS *float64 `json:"req_notify_ns,omitempty"`
	MSIXNS      *float64 `json:"msix_ns,omitempty"`
}

// traceOp is what an --op names: a WR opcode on a QP type.
type traceOp struct {
	wr  provider.WROpcode
	typ provider.QPType
}

var traceOps = map[string]traceOp{
	"send": {provider.WRSend, provider.QPTypeRC}, "send_imm": {provider.WRSendImm, provider.QPTypeRC},
	"write": {provider.WRRDMAWrite, provider.QPTypeRC}, "write_imm": {provider.WRRDMAWriteImm, provider.QPTypeRC},
	"read":    {provider.WRRDMARead, provider.QPTypeRC},
	"ud_send": {provider.WRSend, provider.QPTypeUD}, "ud_send_imm": {provider.WRSendImm, provider.QPTypeUD},
	"uc_send": {provider.WRSend, provider.QPTypeUC}, "uc_send_imm": {provider.WRSendImm, provider.QPTypeUC},
	"uc_write": {provider.WRRDMAWrite, provider.QPTypeUC}, "uc_write_imm": {provider.WRRDMAWriteImm, provider.QPTypeUC},
}

// traceOpNames is the --op list for the help.
const traceOpNames = "send|send_imm|write|write_imm|read (RC), uc_send|uc_send_imm|uc_write|uc_write_imm (UC), ud_send|ud_send_imm (UD)"

// traceHelp is the usage text of softnic trace, before the flags.
const traceHelp = `usage: softnic trace [OP] [flags]

Posts one WR (or a list, --batch) on an RC, UC or UD QP between two
emulated NICs back to back and prints the walk of that post_send: one line
per stage with its component, node, virtual start and end time in ns,
bytes and PCIe TLPs, then the total post -> CQE latency. OP is the
operation, as a word of its own or as --op (write, the default; see --op).
Sizes and counts are decimal (0x accepted).

Flags:
`

func runTrace(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("trace", flag.ContinueOnError)

	var o traceOpts
	fs.StringVar(&o.op, "op", "write", "operation: "+traceOpNames)
	intVar(fs, &o.size, "size", 64, "message size in bytes (at most 1 GiB with --batch; a walk of at most 524288 packets, 65536 with --json or --html)")
	intVar(fs, &o.mtu, "mtu", 1024, "path MTU (256..4096)")
	intVar(fs, &o.batch, "batch", 1, "post a list of N WQEs with one doorbell")
	fs.BoolVar(&o.inline, "inline", false, "send the payload inline in the WQE")
	fs.BoolVar(&o.noBF, "no-bf", false, "ring the 8-byte doorbell instead of BlueFlame")
	fs.BoolVar(&o.json, "json", false, "print the walk as one JSON object")
	fs.BoolVar(&o.hex, "hexdump", false, "print each WQE and CQE, the doorbell record and the doorbell / BlueFlame bytes as annotated hex")
	fs.BoolVar(&o.explain, "explain", false, "add one sentence per stage saying what happens in it")
	fs.StringVar(&o.pcap, "pcap", "", "write every wire frame to this pcap file (- for stdout: the text table then goes to stderr)")
	fs.StringVar(&o.chrome, "chrome-trace", "", "write Chrome trace JSON (opens in Perfetto) to this file (- for stdout: the text table then goes to stderr)")
	fs.StringVar(&o.profile, "profile", "", "device profile: a name (see softnic profiles) or a JSON file (default "+profile.DefaultName+")")
	fs.StringVar(&o.faults, "faults", "", "fault plan JSON applied to the simulated wire and every device hook point (see softnic faults --explain); the walk then lists each fault and its consequences")
	fs.BoolVar(&o.check, "check", false, "checked mode: report each mlx5 host-protocol violation the device observes (rules R1-R15, docs/faults.md)")
	fs.BoolVar(&o.counters, "counters", false, "after the walk, print every non-zero counter of both devices and the wire")
	fs.BoolVar(&o.srq, "srq", false, "the responder's receives come from a shared receive queue")
	fs.StringVar(&o.html, "html", "", "write the walk as one self-contained HTML page to this file (- for stdout)")
	fs.BoolVar(&o.events, "events", false, "arm the CQs before posting and take the completion events: the walk shows cq_arm → eqe_write → event")
	pos, code, ok := parseCommand(fs, traceHelp, args, stdout, stderr)
	if !ok {
		return code
	}
	// The operation may also be a word of its own, before or among the
	// flags: softnic trace ud_send --srq. Only the first word can be it,
	// so a word after it is the unexpected one (trace write read names
	// "read").
	o.mtuSet = flagGiven(fs, "mtu")
	if len(pos) > 0 {
		if _, ok := traceOps[pos[0]]; ok {
			if flagGiven(fs, "op") && o.op != pos[0] {
				fmt.Fprintf(stderr, "softnic trace: operation %q and --op %q disagree\n", pos[0], o.op)
				return 2
			}
			o.op, pos = pos[0], pos[1:]
		}
	}
	if len(pos) > 0 {
		unexpectedArg("trace", fs, traceHelp, pos[0], stderr)
		return 2
	}
	if err := checkStdoutOutputs(o); err != nil {
		fmt.Fprintln(stderr, "softnic trace:", err)
		return 2
	}
	if err := checkSameFileOutputs(o); err != nil {
		fmt.Fprintln(stderr, "softnic trace:", err)
		return 2
	}
	if err := doTrace(o, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "softnic trace:", err)
		if errors.As(err, new(usageError)) {
			return 2
		}
		return 1
	}
	return 0
}

// parseInterspersed parses flags wherever they are among the arguments
// (Go's flag package stops at the first non-flag) and returns the other
// arguments in order; "--" ends the flags.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if len(args) > 0 && len(rest) < len(args) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil // everything after "--" is positional
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// checkStdoutOutputs refuses two outputs on stdout at once: --pcap -,
// --chrome-trace -, --html - and --json each want all of it.
func checkStdoutOutputs(o traceOpts) error {
	var on []string
	for _, f := range []struct {
		name string
		set  bool
	}{{"--pcap -", o.pcap == "-"}, {"--chrome-trace -", o.chrome == "-"}, {"--html -", o.html == "-"}, {"--json", o.json}} {
		if f.set {
			on = append(on, f.name)
		}
	}
	if len(on) > 1 {
		return fmt.Errorf("%s all write to stdout: send all but one to a file", strings.Join(on, " and "))
	}
	return nil
}

// checkSameFileOutputs refuses two output-file flags naming the same file
// (--pcap same.x --html same.x): the second would overwrite the first. The
// names are compared cleaned, and as files (os.SameFile: a link, or another
// spelling of an existing file).
func checkSameFileOutputs(o traceOpts) error {
	type output struct{ flag, name string }
	var outs []output
	for _, f := range []output{{"--pcap", o.pcap}, {"--chrome-trace", o.chrome}, {"--html", o.html}} {
		if f.name != "" && f.name != "-" {
			outs = append(outs, f)
		}
	}
	for i, a := range outs {
		for _, b := range outs[i+1:] {
			if sameOutputFile(a.name, b.name) {
				return fmt.Errorf("%s %s and %s %s are the same file: one would overwrite the other; give each its own file", a.flag, a.name, b.flag, b.name)
			}
		}
	}
	return nil
}

// sameOutputFile reports whether the output names a and b are one file
// that the second would overwrite (the null device takes any number).
func sameOutputFile(a, b string) bool {
	fa, errA := os.Stat(a)
	if errA == nil {
		if null, err := os.Stat(os.DevNull); err == nil && os.SameFile(fa, null) {
			return false
		}
	}
	if filepath.Clean(a) == filepath.Clean(b) {
		return true
	}
	fb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(fa, fb)
}

// The limits of one walk, checked before anything is allocated. Each node's
// host memory holds the walk's buffers (the message times --batch), and the
// walk keeps every event of its packets (about 8 a packet, a few hundred
// bytes each with what the outputs build from them): a text walk of
// 2^19 packets (512 MiB at MTU 1024) takes about 7 GB and a minute. --json
// and --html also carry each packet's frame bytes (about 40 KB of memory a
// packet), so they stop at 2^16 packets (64 MiB at MTU 1024).
// Under a fault plan a walk is no longer bounded by its packets: every
// drop, duplicate or NAK resends some, and with rnr_retry 7 or a plan that
// drops every retry the walk runs until its wait's timer. The recorder then
// keeps the walk's last walkEventCap events (a clean walk records about 24
// a packet at MTU 4096, so a walk whose faults cost little is kept whole)
// and --json and --html keep the bytes of at most walkFrameCap frames.
func walkEventCap(packets int) int { return min(32*packets+1<<16, 1<<22) }

// A clean walk sends at most about 2 frames a packet (data and ACK, or a
// READ's request and responses).
func walkFrameCap(packets int) int { return min(8*packets+4096, 4*maxTraceJSONPackets+4096) }

const (
	maxTraceBytes       = 1 << 30
	maxTracePackets     = 1 << 19
	maxTraceJSONPackets = 1 << 16
)

// checkWalkSize refuses a walk too large to keep whole, naming the limit
// and why.
func checkWalkSize(o traceOpts) error {
	if total := o.size * o.batch; total > maxTraceBytes {
		return fmt.Errorf("--size %d x --batch %d is %d bytes: a walk's buffers live in each node's host memory, at most %d bytes (1 GiB) in all", o.size, o.batch, total, maxTraceBytes)
	}
	if o.pathOnly {
		return nil // the closing line's run of a walk already checked
	}
	limit, what := maxTracePackets, "a walk keeps every event of its packets (about 8 a packet)"
	if o.json || o.html != "" {
		limit, what = maxTraceJSONPackets, "--json and --html keep every event and every frame's bytes of the walk"
	}
	if p := walkPackets(o.size, o.mtu, o.batch); p > limit {
		return fmt.Errorf("--size %d x --batch %d is %d packets at MTU %d: %s in memory, at most %d packets (%d MiB at MTU %d)",
			o.size, o.batch, p, o.mtu, what, limit, limit*o.mtu>>20, o.mtu)
	}
	return nil
}

// doTrace runs the walk. The human text (the table and what follows it)
// goes to stdout, or to stderr when --pcap - or --chrome-trace - puts a
// capture or a trace file there.
func doTrace(o traceOpts, stdout, stderr io.Writer) (err error) {
	text := stdout
	if o.pcap == "-" || o.chrome == "-" {
		text = stderr
	}
	spec, ok := traceOps[o.op]
	if !ok {
		return usageError{fmt.Errorf("unknown --op %q (%s)", o.op, traceOpNames)}
	}
	wrOp, ud := spec.wr, spec.typ == provider.QPTypeUD
	if o.size < 0 || o.size > maxTraceBytes {
		return usageError{fmt.Errorf("--size %d out of range 0..%d", o.size, maxTraceBytes)}
	}
	if o.batch < 1 || o.batch > 256 {
		return usageError{fmt.Errorf("--batch %d out of range 1..256", o.batch)}
	}
	if !validMTU(o.mtu) {
		return usageError{mtuError("--mtu", o.mtu)}
	}
	if ud && o.size > o.mtu {
		return usageError{fmt.Errorf("--size %d: a UD SEND is one packet, at most the MTU (--mtu %d)", o.size, o.mtu)}
	}
	if o.inline && wrOp == provider.WRRDMARead {
		return usageError{fmt.Errorf("--inline: an RDMA READ carries no inline data (only SEND and RDMA WRITE do)")}
	}
	if err := checkWalkSize(o); err != nil {
		return usageError{err}
	}
	cfg := testbed.DefaultConfig()
	prof, err := loadProfile(o.profile)
	if err != nil {
		return err // a bad profile file: bad input, exit 1 as softnic profiles FILE; no such profile: exit 2
	}
	if err := checkGivenMTU(o.mtu, o.mtuSet, prof.Device.Caps.ActiveMTU); err != nil {
		return usageError{err}
	}
	if m := pathMTU(o.mtu, o.mtuSet, prof.Device.Caps.ActiveMTU); m != o.mtu {
		// The checks above ran at the larger MTU: the two that depend
		// on it run again.
		o.mtu = m
		if ud && o.size > o.mtu {
			return usageError{fmt.Errorf("--size %d: a UD SEND is one packet, at most the MTU (the profile's active MTU %d)", o.size, o.mtu)}
		}
		if err := checkWalkSize(o); err != nil {
			return usageError{err}
		}
	}
	cfg.Device, cfg.Host, cfg.Wire = prof.Device, prof.Host(), prof.Wire
	if cfg.Faults, err = loadFaults(o.faults); err != nil {
		return err
	}
	cfg.Trace = true
	cfg.Check = o.check
	// at_ps counts from the post (where the stage times start), not from
	// the start of the simulation: the settle after connection setup
	// must not run the clock to a timed rule.
	cfg.DeferTimedFaults = true
	// Each receive buffer at the responder: the message, after the GRH
	// area on UD.
	grh := 0
	if ud {
		grh = grhArea
	}
	slot := o.size + grh
	if need := 2*slot*o.batch + (8 << 20); need > cfg.MemSize {
		cfg.MemSize = need
	}
	w, err := testbed.New(cfg)
	if err != nil {
		return err
	}
	defer w.Close()
	// The library's recorder is a bounded ring (long runs keep their
	// tail); the walk keeps all of itself, bounded by its packets (the
	// range checks above), unless a fault plan makes it resend them: then
	// it keeps its last walkEventCap events.
	recCap := traceRecorderCap
	if recCap == 0 && cfg.Faults != nil {
		recCap = walkEventCap(walkPackets(o.size, o.mtu, o.batch))
	}
	w.Rec.SetCapacity(recCap)
	// Every frame of the walk, for the stages that built or sent it in
	// --json and --html (the text shows no frame: a long walk's frames are
	// as large as its message).
	frames := newFrameLog(walkFrameCap(walkPackets(o.size, o.mtu, o.batch)))
	if (o.json || o.html != "") && !o.pathOnly {
		w.Link.AddTap(func(t sim.Time, f []byte) {
			var p roce.Packet
			if err := roce.ParseFrame(f, &p); err == nil || p.BTH != nil {
				frames.add(capturedFrame{src: p.SrcIP, psn: uint32(p.BTH.PSN()), frame: append([]byte(nil), f...)})
			}
		})
	}
	bufSize := slot*o.batch + 4096
	// The walk's QPs ask 512 B of inline data, or the device's maximum
	// where a profile gives less (device.caps.max_inline).
	maxInline := min(512, prof.Device.Caps.MaxInline)
	var treq, trsp *traceEP
	if spec.typ != provider.QPTypeRC || o.srq || o.events {
		eps, err := connectTrace(w, traceConn{typ: spec.typ, srq: o.srq, events: o.events, mtu: o.mtu, bufSize: bufSize,
			sqDepth: o.batch + 8, rqDepth: o.batch + 8, maxInline: maxInline})
		if err != nil {
			return err
		}
		treq, trsp = eps[0], eps[1]
	} else {
		eps, err := w.ConnectRC(testbed.ConnOpts{MTU: o.mtu, BufSize: bufSize, SQDepth: o.batch + 8, RQDepth: o.batch + 8, MaxInline: cmp.Or(maxInline, testbed.NoInline)})
		if err != nil {
			return err
		}
		treq, trsp = &traceEP{Endpoint: eps[0]}, &traceEP{Endpoint: eps[1]}
	}
	req, rsp := treq.Endpoint, trsp.Endpoint
	if m := req.QP.Cap().MaxInline; o.inline && o.size > m {
		return usageError{fmt.Errorf("--inline --size %d: the QP's max inline data is %d bytes", o.size, m)}
	}
	// pcapErr is the first failure writing the capture: the walk goes on,
	// the command fails at the end.
	var pcapErr error
	// The capture is created after the last usage check (the QP's max
	// inline data), so a refused walk leaves the file it names alone.
	// The capture's clock is the walk's: its frames are stamped from the
	// post, as every stage is, so a frame's time is its wire stage's start
	// (they were stamped from the start of the simulation, 10 µs of setup
	// earlier). The setup sends no frame; one would be stamped 0.
	var posted bool
	var postAt sim.Time
	if o.pcap != "" {
		var pcapOut io.Writer = stdout
		if o.pcap != "-" {
			f, err := os.Create(o.pcap)
			if err != nil {
				return err
			}
			defer func() {
				if cerr := f.Close(); err == nil && cerr != nil {
					err = cerr
				}
			}()
			pcapOut = f
		}
		pw, err := trace.NewPcapWriter(pcapOut)
		if err != nil {
			return err
		}
		// In time order: the tap sees a frame when it is queued, with
		// the time its transmission starts.
		po := trace.NewPcapOrder(pw)
		w.Link.AddTap(func(t sim.Time, f []byte) {
			if pcapErr == nil {
				at, now := sim.Time(0), sim.Time(0)
				if posted {
					at, now = t-postAt, max(w.Eng.Now()-postAt, 0)
				}
				pcapErr = po.WriteFrame(now, at, f)
			}
		})
		defer func() {
			if pcapErr == nil {
				pcapErr = po.Flush()
			}
			if err == nil && pcapErr != nil {
				err = fmt.Errorf("writing the capture: %w", pcapErr)
			}
		}()
	}
	fill(req.Buf.Bytes[:o.size*o.batch], 1)
	fill(rsp.Buf.Bytes[:slot*o.batch], 101)
	consumesRecv := wrOp == provider.WRSend || wrOp == provider.WRSendImm || wrOp == provider.WRRDMAWriteImm
	if consumesRecv {
		rwrs := make([]provider.RecvWR, o.batch)
		for i := range rwrs {
			rwrs[i] = provider.RecvWR{WRID: uint64(1000 + i), SGL: []provider.SGE{rsp.MR.SGE(uint64(i*slot), uint32(slot))}}
		}
		if err := trsp.postRecv(rwrs); err != nil {
			return err
		}
	}
	w.Settle(0)
	// A rule the connection setup already set off (the receive queue's
	// first record read, say) is not in the walk's records: the fault
	// section names it rather than saying none fired.
	setupFired := w.Injector.Fired()
	w.Rec.Reset()
	req.QP.SetBlueFlame(!o.noBF)
	var armed []armedCQ
	if o.events {
		// Arm before the post, as an application that sleeps on the
		// channel does: the requester's send CQ, and the responder's
		// receive CQ when a receive completes there.
		if armed, err = armCQs(treq, trsp, consumesRecv); err != nil {
			return err
		}
	}
	wrs := make([]provider.SendWR, o.batch)
	for i := range wrs {
		wr := provider.SendWR{WRID: uint64(i + 1), Opcode: wrOp, Flags: provider.SendSignaled, Imm: 0x1234abcd,
			RemoteAddr: rsp.MR.Addr + uint64(i*o.size), RKey: rsp.MR.RKey}
		if ud {
			wr.RemoteAddr, wr.RKey = 0, 0
			wr.AH, wr.RemoteQPN, wr.RemoteQKey = treq.AH, rsp.QP.QPN(), traceQKey
		}
		if o.size > 0 {
			wr.SGL = []provider.SGE{req.MR.SGE(uint64(i*o.size), uint32(o.size))}
		}
		if o.inline {
			wr.Flags |= provider.SendInline
		}
		wrs[i] = wr
	}
	first := req.QP.SQProducer()
	// Where the post's MMIO goes: the current BlueFlame buffer of the bfreg.
	sqInfo := req.QP.SQInfo()
	mmioAddr := sqInfo.BFRegOffset + uint64(sqInfo.BFOffset)
	cqRing := req.SendCQ.Info().RingAddr
	// Stage times count from the post (an arm before it is negative).
	t0 := w.ArmTimedFaults()
	posted, postAt = true, t0
	if _, err := req.QP.PostSend(wrs); err != nil {
		return err
	}
	// walkErr is how a walk that failed ended (no CQE, an error CQE): the
	// walk is still written in every format asked for, with it, and the
	// command fails with it.
	var walkErr error
	wcs, err := waitWalk(w, req.SendCQ, o.batch, walkPackets(o.size, o.mtu, o.batch))
	if err != nil {
		walkErr = fmt.Errorf("waiting for the requester CQE: %w", err)
	}
	total := w.Eng.Now().Sub(t0)
	for _, wc := range wcs {
		if wc.Status != provider.WCSuccess && walkErr == nil {
			walkErr = fmt.Errorf("WR %d completed with %v", wc.WRID, wc.Status)
		}
	}
	var rwcs []provider.WC
	if consumesRecv && walkErr == nil {
		if rwcs, err = waitWalk(w, rsp.RecvCQ, o.batch, walkPackets(o.size, o.mtu, o.batch)); err != nil {
			walkErr = fmt.Errorf("waiting for the responder CQE: %w", err)
		}
	}
	if walkErr == nil {
		walkErr = takeEvents(w, armed)
	}
	// The walk's natural end: a timed rule due later does not fire.
	notFired := w.EndTimedFaults()
	if walkErr != nil && !o.json && o.html != "-" {
		// The text of a failed walk, when stdout is not taken by --json or
		// --html -: with a fault plan or checked mode every stage and
		// warning and what the faults did, and the counters if asked.
		if cfg.Faults != nil || o.check {
			faultFailure(text, w, t0, wcs, o.check, notFired, setupFired) // a lost CQE or a CQ in error: show why
		}
		if o.counters {
			// What went wrong is in the counters (a fault plan that
			// outlasts the retries, say): show them anyway.
			fmt.Fprintln(text, "counters (non-zero):")
			writeCounterLines(text, worldCounters(w))
		}
	}
	if o.pathOnly {
		if walkErr != nil {
			return walkErr
		}
		return json.NewEncoder(stdout).Encode(traceJSON{Path: walkPath(w.Rec.Events()), TotalNS: total.NS()})
	}
	n := o.size * o.batch
	var problems []string
	if walkErr != nil {
		problems = []string{walkErr.Error()}
	} else {
		problems = verifyTrace(o, spec, req, rsp, rwcs, slot, grh)
	}
	dataOK := len(problems) == 0
	// Checked mode's findings are a problem of the run (in the text, the
	// JSON and the exit status' PROBLEM lines), not of the data.
	var violations []*device.Violation
	var checkErr error // the exit status of a walk checked mode found violations in: 1, as a checker's
	if o.check {
		if violations = checkViolations(w, t0); len(violations) > 0 {
			problems = append(problems, "checked mode found host-protocol violations")
			checkErr = fmt.Errorf("checked mode found %d host-protocol violation(s)", len(violations))
		}
	}

	// The flows run across both nodes (the peer's stages, the wire) and
	// into the stages a post list shares (LinkFlows works on a copy).
	events := trace.LinkFlows(w.Rec.Events())
	dropped := w.Rec.Dropped()
	if dropped > 0 {
		events = append(events, droppedWarning(dropped, w.Rec.Capacity(), t0))
	}
	if frames.dropped > 0 {
		events = append(events, trace.Event{Name: "frames_dropped", Component: "trace", Start: t0, End: t0, PSN: trace.NoPSN, Level: trace.Warn,
			Detail: fmt.Sprintf("the walk sent %d frames, more than it keeps the bytes of (%d): the first %d show no frame_hex",
				frames.dropped+len(frames.frames), frames.max, frames.dropped)})
	}
	if walkErr != nil {
		// The outcome, at the last thing the walk did, for the outputs
		// that carry no error of their own (the Chrome trace).
		end := t0
		for _, e := range events {
			end = max(end, e.End)
		}
		if len(wcs) == 0 {
			// No requester CQE to time: the walk's total is how long it
			// ran, to its last event. With one (an error CQE, or a
			// send completed but no receive), total stays post → CQE.
			total = end.Sub(t0)
		}
		events = append(events, trace.Event{Name: "walk_failed", Component: "trace", Start: end, End: end, PSN: trace.NoPSN, Level: trace.Warn,
			Detail: "the walk failed: " + walkErr.Error()})
	}
	sort.SliceStable(events, func(i, j int) bool {
		if events[i].Start != events[j].Start {
			return events[i].Start < events[j].Start
		}
		return stageRank(events[i].Name) < stageRank(events[j].Name)
	})
	stages, warns := []stageJSON{}, []stageJSON{} // lists in the JSON even when empty
	nCQE := 0
	for _, e := range events {
		if e.Component == "dma" && (e.Name == "dma_read" || e.Name == "dma_write") {
			continue // the DMA engine's own record of a transfer a named stage already shows
		}
		s := stageJSON{WalkStage: trace.WalkStage{Name: e.Name, Component: e.Component, Node: e.Node, StartNS: e.Start.Sub(t0).NS(), EndNS: e.End.Sub(t0).NS(),
			Bytes: e.Bytes, TLPs: e.TLPs, Detail: e.Detail, QPN: e.QPN, Flow: e.Flow, Flows: e.Flows}}
		if e.PSN >= 0 {
			p := uint32(e.PSN)
			s.PSN = &p
			if (e.Name == "packetize" || e.Name == "ack" || e.Name == "wire") && e.Node >= 0 && e.Node < len(testbed.IPs) {
				if f := frames.frameFor(e.Name, testbed.IPs[e.Node], p); f != nil {
					s.FrameHex = hex.EncodeToString(f)
				}
			}
		}
		if e.Node == 0 && e.Level != trace.Warn {
			addr, ok := uint64(0), true
			switch e.Name {
			case "pcie_tlp":
				addr = mmioAddr
			case "wqe_fetch":
				addr = sqInfo.Addr + uint64(first)%uint64(max(sqInfo.WQEBBs, 1))*64
			case "cqe_write":
				addr = cqRing + uint64(nCQE%max(req.SendCQ.Info().Entries, 1))*64
				nCQE++
			default:
				ok = false
			}
			if ok {
				s.TLPAddr = &addr
			}
		}
		if e.Level == trace.Warn {
			warns = append(warns, s)
		} else {
			stages = append(stages, s)
		}
	}
	evs := eventLatencies(armed, stages)
	if o.events && len(evs) < len(armed) && walkErr == nil {
		problems = append(problems, fmt.Sprintf("%d CQs armed, %d arm → EQE → event walks in the trace", len(armed), len(evs)))
		dataOK = false
	}
	var wqes []wqeJSON
	idx := first
	for i := 0; i < o.batch; i++ {
		b, err := req.QP.WQE(idx)
		if err != nil {
			return err
		}
		wqes = append(wqes, describeWQE(b, ud))
		idx += uint16(mlx5.WQEBBs(int(mlx5.CtrlSeg(b).DS())))
	}
	if o.chrome != "" {
		// Time zero is the post, as in the table.
		cev := append([]trace.Event(nil), events...)
		for i := range cev {
			cev[i].Start, cev[i].End = sim.Time(cev[i].Start.Sub(t0)), sim.Time(cev[i].End.Sub(t0))
		}
		if o.chrome == "-" {
			if err := trace.WriteChrome(stdout, cev); err != nil {
				return err
			}
		} else if err := writeChromeFile(o.chrome, cev); err != nil {
			return err
		}
	}
	// When the first events were dropped the bf_mmio may have been among
	// them (below).
	path := walkPath(events)
	pathWhy := ""
	switch {
	case dropped > 0:
		path, pathWhy = pathUnknown, fmt.Sprintf("the first %d events of the walk were dropped", dropped)
	case path == "doorbell":
		pathWhy = doorbellReason(o, req.QP.SQInfo().BFBufSize, wqes)
	}
	var all map[string]map[string]uint64
	if o.counters {
		all = worldCounters(w)
	}
	explained := ""
	if cfg.Faults != nil {
		explained = cfg.Faults.Explain()
	}
	var recvs []recvJSON
	for _, wc := range rwcs {
		recvs = append(recvs, recvJSON{WRID: wc.WRID, Status: wc.Status.String(), Opcode: wc.Opcode.String(), ByteLen: wc.ByteLen,
			SrcQP: wc.SrcQP, GRH: wc.Flags&provider.WCFlagGRH != 0, NetworkHdr: wc.NetworkHdr.String(), Imm: wc.Imm})
	}
	grhHex := ""
	if ud && consumesRecv {
		grhHex = hex.EncodeToString(rsp.Buf.Bytes[:grhArea])
	}
	// A walk whose data differ fails in every form: the text, --json and
	// --html - (a script reading only the exit status must see it).
	var mismatchErr error
	if !dataOK && walkErr == nil {
		mismatchErr = errMismatch
	}
	if o.json || o.html != "" {
		ctr := w.Hosts[0].Dev.Counters().Snapshot()
		for k, v := range w.Hosts[1].Dev.Counters().Snapshot() {
			ctr["peer."+k] = v
		}
		out := traceJSON{Profile: cfg.Device.Name, Op: o.op, Size: o.size, MTU: o.mtu, Path: path, Batch: o.batch,
			Stages: stages, TotalNS: total.NS(), WQEs: wqes, Warnings: warns, Counters: ctr, DataOK: dataOK,
			AllCounters: all, Faults: explained, QPType: qpTypeName(spec.typ), SRQ: o.srq, Recv: recvs, GRHHex: grhHex,
			Events: evs, Problems: problems, DroppedEvents: dropped, Violations: violationsJSON(violations),
			FaultRules: faultRules(w, setupFired, notFired)}
		nCQEs := o.batch
		if walkErr != nil {
			// The CQEs that came, an error CQE among them.
			nCQEs = min(len(wcs), o.batch)
			out.Error = walkErr.Error()
			for _, wc := range wcs {
				out.Completions = append(out.Completions, completionJSON{WRID: wc.WRID, Status: wc.Status.String(), VendorErr: wc.VendorErr})
			}
		}
		for i := 0; i < nCQEs; i++ {
			out.CQEHex = append(out.CQEHex, hex.EncodeToString(req.SendCQ.CQE(uint32(i))))
		}
		var dbr [4]byte
		if w.Hosts[0].Mem.Read(req.QP.SQInfo().DBRAddr+4*mlx5.DBRSend, dbr[:]) == nil {
			out.DBRHex = hex.EncodeToString(dbr[:])
		}
		if o.html != "" {
			if err := writeWalkHTML(o.html, stdout, out); err != nil {
				return err
			}
		}
		if o.json {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			if err := enc.Encode(out); err != nil {
				return err
			}
			return cmp.Or(walkErr, mismatchErr, checkErr)
		}
		if o.html == "-" {
			return cmp.Or(walkErr, mismatchErr, checkErr)
		}
	}
	if walkErr != nil {
		return walkErr // its text is above
	}
	pathDesc := path + " path"
	if pathWhy != "" {
		pathDesc += " (" + pathWhy + ")"
	}
	fmt.Fprintf(text, "softnic trace: %s %d B x%d, %s, MTU %d, profile %s%s\n", strings.ToUpper(o.op), o.size, o.batch, pathDesc, o.mtu,
		cfg.Device.Name, traceVariant(spec, trsp, o.events))
	if explained != "" {
		fmt.Fprintf(text, "fault plan %s:\n", o.faults)
		for _, l := range strings.Split(strings.TrimRight(explained, "\n"), "\n") {
			fmt.Fprintf(text, "  %s\n", l)
		}
	}
	// The stage column fits the walk's longest name (doorbell_decode).
	nameW := 14
	for _, s := range stages {
		nameW = max(nameW, len(s.Name))
	}
	fmt.Fprintf(text, "%3s  %-*s %-9s %4s %12s %12s %10s %7s %5s\n", "#", nameW, "stage", "component", "node", "start_ns", "end_ns", "dur_ns", "bytes", "tlps")
	for i, s := range stages {
		fmt.Fprintf(text, "%3d  %-*s %-9s %4d %12.3f %12.3f %10.3f %7d %5d\n", i+1, nameW, s.Name, s.Component, s.Node, s.StartNS, s.EndNS, s.EndNS-s.StartNS, s.Bytes, s.TLPs)
		if o.explain {
			if d, ok := trace.Stages[s.Name]; ok {
				fmt.Fprintf(text, "     %s\n", d.Summary)
			}
		}
	}
	for _, s := range warns {
		fmt.Fprintf(text, "WARN %s %s node %d @%.3f ns: %s\n", s.Component, s.Name, s.Node, s.StartNS, s.Detail)
	}
	if cfg.Faults != nil {
		faultSection(text, w, t0, wcs, notFired, setupFired)
	}
	if o.check {
		checkSection(text, violations)
	}
	if spec.typ != provider.QPTypeRC || o.srq || o.events {
		for _, r := range recvs {
			fmt.Fprintf(text, "responder receive wr_id %d: %s %s byte_len %d", r.WRID, r.Status, r.Opcode, r.ByteLen)
			if ud {
				fmt.Fprintf(text, " (%d-byte GRH area + %d payload), src_qp %#06x, wc_flags %v, network header %s", grhArea, o.size, r.SrcQP, rwcsFlags(rwcs, r.WRID), r.NetworkHdr)
			}
			fmt.Fprintln(text)
		}
		if grhHex != "" {
			fmt.Fprintf(text, "receive buffer of wr_id %d (GRH area, then the payload):\n%s", rwcs[0].WRID, describeGRH(rsp.Buf.Bytes[:slot], o.size))
		}
	}
	for _, p := range problems {
		fmt.Fprintf(text, "PROBLEM %s\n", p)
	}
	verdict := "data verified"
	if !dataOK {
		verdict = "DATA MISMATCH"
	}
	if walkErr != nil && len(wcs) == 0 {
		fmt.Fprintf(text, "no requester CQE: the walk's last event ended %.3f ns after the post (%s, %d bytes)\n", total.NS(), verdict, n)
	} else {
		fmt.Fprintf(text, "total post → CQE: %.3f ns (%s, %d bytes)\n", total.NS(), verdict, n)
	}
	if dropped > 0 {
		fmt.Fprintf(text, "DROPPED %d events: the recorder kept the last %d, the stages above are the walk's tail\n", dropped, w.Rec.Capacity())
	} else if !o.noCompare {
		if l := comparePath(o, path, pathWhy, total, walkFetched(events)); l != "" {
			fmt.Fprintln(text, l)
		}
	}
	for _, e := range evs {
		walk := ""
		if e.ReqNotifyNS != nil {
			walk = fmt.Sprintf("req_notify @%.3f ns → ", *e.ReqNotifyNS)
		}
		walk += fmt.Sprintf("cq_arm @%.3f ns → eqe_write @%.3f ns", e.ArmNS, e.EQENS)
		if e.MSIXNS != nil {
			walk += fmt.Sprintf(" → msix @%.3f ns", *e.MSIXNS)
		}
		fmt.Fprintf(text, "arm → event, node %d CQ %#x: %.3f ns (%s → event done @%.3f ns)\n",
			e.Node, e.CQN, e.LatencyNS, walk, e.EventNS)
	}
	if o.hex {
		for i, b := range wqes {
			raw, _ := hex.DecodeString(b.WQEHex)
			fmt.Fprintf(text, "\nWQE %d (wqe_index %d):\n%s", i, b.WQEIndex, annotateWQE(raw, ud))
		}
		for i := 0; i < o.batch; i++ {
			fmt.Fprintf(text, "\nrequester CQE %d:\n%s", i, annotateCQE(req.SendCQ.CQE(uint32(i))))
		}
		var last []byte
		if len(wqes) > 0 {
			last, _ = hex.DecodeString(wqes[len(wqes)-1].WQEHex)
		}
		var dbr [4]byte
		_ = w.Hosts[0].Mem.Read(req.QP.SQInfo().DBRAddr+4*mlx5.DBRSend, dbr[:])
		fmt.Fprintf(text, "\n%s", annotateDoorbell(dbr, path, last))
	}
	if all != nil {
		fmt.Fprintln(text, "\ncounters (non-zero):")
		writeCounterLines(text, all)
	}
	return cmp.Or(mismatchErr, checkErr)
}

// errMismatch is the walk's error when the responder's bytes (or its
// receive completions) are not what the requester sent.
var errMismatch = errors.New("data mismatch between requester and responder buffers")

// traceVariant is what the header adds for a walk that is not plain RC:
// the QP type, where receives come from, whether the CQs were armed.
func traceVariant(spec traceOp, rsp *traceEP, events bool) string {
	s := ""
	if spec.typ != provider.QPTypeRC {
		s += ", " + qpTypeName(spec.typ) + " QPs"
		if spec.typ == provider.QPTypeUD {
			s += fmt.Sprintf(" (Q_Key %#x)", traceQKey)
		} else {
			s += " (no ACKs)"
		}
	}
	if rsp.SRQ != nil {
		s += fmt.Sprintf(", responder receives from SRQ %#x", rsp.SRQ.SRQN())
	}
	if events {
		s += ", CQs armed (completion events)"
	}
	return s
}

// verifyTrace compares what arrived with what was sent: the payload of each
// WR (after the GRH area on UD), the GRH area itself, and the responder's
// receive completions (status, byte_len of a SEND with the GRH area counted,
// immediate, and on UD the GRH flag and the sender's QPN). It returns what
// is wrong.
func verifyTrace(o traceOpts, spec traceOp, req, rsp *testbed.Endpoint, rwcs []provider.WC, slot, grh int) []string {
	var problems []string
	for i := 0; i < o.batch; i++ {
		src := req.Buf.Bytes[i*o.size : (i+1)*o.size]
		dst := rsp.Buf.Bytes[i*slot+grh : i*slot+grh+o.size]
		if !bytes.Equal(src, dst) {
			problems = append(problems, fmt.Sprintf("WR %d: the %d bytes at the responder differ from the requester's", i+1, o.size))
		}
		if spec.typ == provider.QPTypeUD {
			if p := checkGRHArea(rsp.Buf.Bytes[i*slot:i*slot+grhArea], testbed.IPs[0], testbed.IPs[1]); p != "" {
				problems = append(problems, fmt.Sprintf("receive %d: %s", i+1, p))
			}
		}
	}
	send := spec.wr == provider.WRSend || spec.wr == provider.WRSendImm
	imm := spec.wr == provider.WRSendImm || spec.wr == provider.WRRDMAWriteImm
	for i, wc := range rwcs {
		switch {
		case wc.Status != provider.WCSuccess:
			problems = append(problems, fmt.Sprintf("receive %d completed with %v", i+1, wc.Status))
		case send && wc.ByteLen != uint32(o.size+grh):
			problems = append(problems, fmt.Sprintf("receive %d: byte_len %d, want %d", i+1, wc.ByteLen, o.size+grh))
		case imm && (wc.Flags&provider.WCFlagWithImm == 0 || wc.Imm != 0x1234abcd):
			problems = append(problems, fmt.Sprintf("receive %d: immediate %#x (flags %v), want 0x1234abcd", i+1, wc.Imm, wc.Flags))
		case spec.typ == provider.QPTypeUD && (wc.Flags&provider.WCFlagGRH == 0 || wc.SrcQP != req.QP.QPN()):
			problems = append(problems, fmt.Sprintf("receive %d: flags %v src_qp %#x, want GRH and src_qp %#x", i+1, wc.Flags, wc.SrcQP, req.QP.QPN()))
		}
	}
	return problems
}

// worldCounters is every non-zero counter of the world by owner: "node0"
// and "node1" (each device's hw counters: its engines and transport) and
// "wire" (the link, fault actions included).
func worldCounters(w *testbed.World) map[string]map[string]uint64 {
	nonZero := func(m map[string]uint64) map[string]uint64 {
		out := map[string]uint64{}
		for k, v := range m {
			if v != 0 {
				out[k] = v
			}
		}
		return out
	}
	all := map[string]map[string]uint64{"wire": nonZero(w.Wire.Snapshot())}
	for i, h := range w.Hosts {
		if h != nil && (i == 0 || h != w.Hosts[0]) {
			all[fmt.Sprintf("node%d", h.Node)] = nonZero(h.Dev.HWCounters())
		}
	}
	return all
}

// writeCounterLines prints "<owner> <name> <value>" lines, sorted by owner
// then name.
func writeCounterLines(out io.Writer, all map[string]map[string]uint64) {
	owners := make([]string, 0, len(all))
	for o := range all {
		owners = append(owners, o)
	}
	sort.Strings(owners)
	for _, o := range owners {
		names := make([]string, 0, len(all[o]))
		for n := range all[o] {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			fmt.Fprintf(out, "%s %s %d\n", o, n, all[o][n])
		}
	}
}

// fill writes a deterministic pattern.
func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i*7) + byte(i>>8)
	}
}

func describeWQE(b []byte, ud bool) wqeJSON {
	c := mlx5.CtrlSeg(b)
	j := wqeJSON{WQEHex: hex.EncodeToString(b), Opcode: uint8(c.Opcode()), WQEIndex: c.WQEIndex(), QPN: c.QPN(), DS: c.DS(), FMCESE: c.FMCESE()}
	segs := b[mlx5.CtrlSegSize:]
	if ud && len(segs) >= mlx5.DatagramSegSize {
		d := mlx5.DatagramSeg(segs)
		j.DestQPN, j.QKey = d.DestQPN(), d.QKey()
		segs = segs[mlx5.DatagramSegSize:]
	}
	switch c.Opcode() {
	case mlx5.OpRDMAWrite, mlx5.OpRDMAWriteImm, mlx5.OpRDMARead:
		if len(segs) >= mlx5.RaddrSegSize {
			r := mlx5.RaddrSeg(segs)
			j.RAddr, j.RKey = r.RAddr(), r.RKey()
			segs = segs[mlx5.RaddrSegSize:]
		}
	}
	if len(segs) >= mlx5.DataSegSize && !mlx5.IsInline(mlx5.DataSeg(segs).ByteCount()) {
		d := mlx5.DataSeg(segs)
		j.LKey, j.LAddr, j.Length = d.LKey(), d.Addr(), d.ByteCount()
	}
	return j
}

func hexLine(b []byte) string {
	var s strings.Builder
	for i, x := range b {
		if i > 0 && i%4 == 0 {
			s.WriteByte(' ')
		}
		fmt.Fprintf(&s, "%02x", x)
	}
	return s.String()
}

func annotateWQE(b []byte, ud bool) string {
	var s strings.Builder
	c := mlx5.CtrlSeg(b)
	f := c.Fields()
	fmt.Fprintf(&s, "  ctrl   %s  opcode %v(%#x) wqe_index %d qpn %#x ds %d fm_ce_se %#02x imm %#x\n",
		hexLine(b[:16]), f.Opcode, uint8(f.Opcode), f.WQEIndex, f.QPN, f.DS, f.FMCESE, f.Imm)
	segs := b[16:]
	if ud && len(segs) >= mlx5.DatagramSegSize {
		d := mlx5.DatagramSeg(segs)
		fmt.Fprintf(&s, "  dgram  %s  qkey %#x dest_qpn %#x udp_sport %#x\n", hexLine(segs[:16]), d.QKey(), d.DestQPN(), d.RLID())
		fmt.Fprintf(&s, "         %s  rmac %s tclass %d hop_limit %d sgid_index %d flow_label %#x\n", hexLine(segs[16:32]),
			macString(d.RMAC()), d.TClass(), d.HopLimit(), d.SGIDIndex(), d.FlowLabel())
		g := d.RGID()
		fmt.Fprintf(&s, "         %s  rgid %v\n", hexLine(segs[32:48]), netip.AddrFrom16(g))
		segs = segs[mlx5.DatagramSegSize:]
	}
	if (f.Opcode == mlx5.OpRDMAWrite || f.Opcode == mlx5.OpRDMAWriteImm || f.Opcode == mlx5.OpRDMARead) && len(segs) >= mlx5.RaddrSegSize {
		r := mlx5.RaddrSeg(segs)
		fmt.Fprintf(&s, "  raddr  %s  raddr %#x rkey %#x\n", hexLine(segs[:16]), r.RAddr(), r.RKey())
		segs = segs[16:]
	}
	for len(segs) >= 16 {
		h := mlx5.DataSeg(segs).ByteCount()
		if mlx5.IsInline(h) {
			n := int(mlx5.InlineSeg(segs).Len())
			sz := mlx5.InlineSegSize(n)
			if sz > len(segs) {
				sz = len(segs)
			}
			fmt.Fprintf(&s, "  inline %s  %d bytes inline\n", hexLine(segs[:4]), n)
			for off := 4; off < sz; off += 16 {
				end := min(off+16, sz)
				fmt.Fprintf(&s, "         %s\n", hexLine(segs[off:end]))
			}
			segs = segs[sz:]
			continue
		}
		d := mlx5.DataSeg(segs)
		fmt.Fprintf(&s, "  data   %s  byte_count %d lkey %#x addr %#x\n", hexLine(segs[:16]), d.ByteCount(), d.LKey(), d.Addr())
		segs = segs[16:]
	}
	return s.String()
}

func annotateCQE(b []byte) string {
	var s strings.Builder
	c := mlx5.CQE64(b)
	for off := 0; off < 64; off += 16 {
		fmt.Fprintf(&s, "  +%02x  %s\n", off, hexLine(b[off:off+16]))
	}
	f := c.Fields()
	fmt.Fprintf(&s, "  op_own %#02x: opcode %v owner %v se %v; wqe_counter %d qpn %#x wqe_opcode %#x byte_cnt %d",
		c.OpOwn(), f.Opcode, f.Owner, f.SE, f.WQECounter, f.QPN, f.WQEOpcode, f.ByteCnt)
	if c.IsError() {
		fmt.Fprintf(&s, " syndrome %v vendor %#x", f.Syndrome, f.VendorErrSynd)
	}
	s.WriteByte('\n')
	return s.String()
}

// walkOrder is the order of the stages of one post_send (DESIGN.md §2); it
// breaks ties between stages that start at the same instant.
var walkOrder = []string{"req_notify", "cq_arm", "wqe_build", "dbr_update", "bf_mmio", "doorbell_mmio", "wc_flush", "pcie_tlp", "doorbell_decode", "bf_decode", "wqe_fetch", "wqe_parse",
	"rq_wqe_fetch", "srq_wqe_fetch", "payload_dma", "packetize", "wire", "responder", "ack", "ack_rx", "cqe_build", "cqe_write", "eqe_write", "msix",
	"event", "get_cq_event", "poll"}

func stageRank(name string) int {
	for i, n := range walkOrder {
		if n == name {
			return i
		}
	}
	return len(walkOrder)
}

// doorbellReason says why a walk went by the doorbell rather than
// BlueFlame (the provider's rule: one WQE, BlueFlame on, a buffer, more
// than the ctrl segment, and no larger than the buffer).
func doorbellReason(o traceOpts, bfBuf int, wqes []wqeJSON) string {
	switch {
	case o.noBF:
		return "--no-bf"
	case o.batch > 1:
		return fmt.Sprintf("a post list of %d WQEs rings one doorbell", o.batch)
	case bfBuf == 0:
		return "the profile has no BlueFlame buffer, bf_reg_size 0"
	case len(wqes) == 0:
		return ""
	}
	size := int(wqes[0].DS) * mlx5.DSSize
	switch {
	case size > bfBuf:
		return fmt.Sprintf("WQE of %d B larger than the %d-B BlueFlame buffer", size, bfBuf)
	case wqes[0].DS <= 1:
		return "a ctrl-only WQE goes by the doorbell"
	}
	return ""
}

// comparePath runs the same walk the other way in-process (BlueFlame off
// for a BlueFlame walk, on for a --no-bf walk) and says what the path
// saved or cost. Both runs are deterministic, so the line is too. fetched
// says the device fetched the WQE by DMA in this walk: on the BlueFlame
// path it did not use the copy (an uncached UAR tears it into 8-byte
// stores; a fault can drop a line), and the line says so.
func comparePath(o traceOpts, path, why string, total sim.Duration, fetched bool) string {
	if path == "doorbell" && !o.noBF {
		return "doorbell: BlueFlame does not apply here (" + why + ")"
	}
	alt := o
	alt.noBF, alt.noCompare, alt.json, alt.pathOnly = !o.noBF, true, true, true
	alt.html = ""
	alt.pcap, alt.chrome, alt.hex, alt.counters, alt.explain = "", "", false, false, false
	alt.html = ""
	var buf bytes.Buffer
	if err := doTrace(alt, &buf, io.Discard); err != nil {
		return ""
	}
	var j traceJSON
	if json.Unmarshal(buf.Bytes(), &j) != nil {
		return ""
	}
	diff := total.NS() - j.TotalNS
	switch {
	case path == "blueflame" && fetched:
		return fmt.Sprintf("BlueFlame: the device did not use the copy and fetched the WQE by DMA, see the warnings (%+.3f ns against the doorbell path, %.3f ns)", diff, j.TotalNS)
	case path == "blueflame":
		return fmt.Sprintf("BlueFlame: no WQE fetch (%+.3f ns against the doorbell path, %.3f ns)", diff, j.TotalNS)
	}
	if j.Path != "blueflame" {
		return "doorbell: BlueFlame would not apply either"
	}
	return fmt.Sprintf("doorbell: WQE fetched by DMA (%+.3f ns against the BlueFlame path, %.3f ns)", diff, j.TotalNS)
}

// annotateDoorbell shows what the provider wrote to ring the device: the
// doorbell record's send counter (DBR[1], big endian) and either the
// 8-byte doorbell (the first 8 bytes of the last WQE's ctrl segment) or
// the BlueFlame lines (the WQE in 64-byte stores, zero padded).
func annotateDoorbell(dbr [4]byte, path string, wqe []byte) string {
	var s strings.Builder
	fmt.Fprintf(&s, "doorbell record DBR[1] (SQ send counter, BE):\n  %s  sq cur_post %d\n", hexLine(dbr[:]), binary.BigEndian.Uint32(dbr[:])&0xffff)
	if len(wqe) < 8 {
		return s.String()
	}
	if path == pathUnknown {
		s.WriteString("doorbell or BlueFlame stores: not known, the walk's first events were dropped\n")
		return s.String()
	}
	c := mlx5.CtrlSeg(wqe)
	if path == "blueflame" {
		n := (len(wqe) + 63) / 64 * 64
		line := make([]byte, n)
		copy(line, wqe)
		fmt.Fprintf(&s, "BlueFlame stores (%d-byte line%s to the BF buffer):\n", 64, plural(n/64))
		for off := 0; off < n; off += 16 {
			note := ""
			if off%64 == 0 {
				note = fmt.Sprintf("  line %d", off/64)
			}
			fmt.Fprintf(&s, "  +%02x  %s%s\n", off, hexLine(line[off:off+16]), note)
		}
		return s.String()
	}
	fmt.Fprintf(&s, "doorbell (8 bytes to UAR+0x800):\n  %s  opcode %v wqe_index %d qpn %#x ds %d\n", hexLine(wqe[:8]), c.Opcode(), c.WQEIndex(), c.QPN(), c.DS())
	return s.String()
}

// droppedWarning is the warning a walk that lost events carries in every
// output (the text's WARN lines, --json's warnings, the Chrome trace): how
// many, at the post.
func droppedWarning(dropped uint64, kept int, t0 sim.Time) trace.Event {
	return trace.Event{Name: "events_dropped", Component: "trace", Start: t0, End: t0, PSN: trace.NoPSN, Level: trace.Warn,
		Detail: fmt.Sprintf("the recorder dropped the first %d events of the walk (it keeps %d): the stages are its tail", dropped, kept)}
}

func writeChromeFile(name string, cev []trace.Event) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if err := trace.WriteChrome(f, cev); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// walkFetched reports whether the requester's device fetched a WQE by
// DMA in the walk (a wqe_fetch stage on node 0).
func walkFetched(events []trace.Event) bool {
	for _, e := range events {
		if e.Node == 0 && e.Name == "wqe_fetch" {
			return true
		}
	}
	return false
}

// walkPath is the path a walk took, from what happened: "blueflame" when
// the requester (node 0) has a bf_mmio stage, else "doorbell".
func walkPath(events []trace.Event) string {
	for _, e := range events {
		if e.Node == 0 && e.Name == "bf_mmio" {
			return "blueflame"
		}
	}
	return "doorbell"
}
