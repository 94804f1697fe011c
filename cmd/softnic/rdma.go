package main

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/wallclock"
)

func init() {
	register("rdma", "scriptable RC, UC or UD endpoint on a real network (udp:/tap:): commands on stdin", runRDMA)
}

const rdmaHelp = `usage: softnic rdma --wire SPEC --ip A.B.C.D [flags]

One emulated NIC with one QP (--qp-type rc, uc or ud) and one MR on a real
network, driven by a line protocol on stdin/stdout (the same as
test/interop's verbs_peer, see docs/howto-interop.md).
Numbers: identifiers (RADDR, RKEY, QKEY, QPN, PSN, GID, wr_id, imm, addresses)
are hex; LEN, SEED, N, OFF, ADD, COMPARE, SWAP and byte counts are decimal, as
in rdma-core and perftest. A 0x prefix makes a number hex in any field (a
leading 0 is not octal). The same holds for the flags: --psn, --remote-qpn,
--remote-psn, --qkey and --remote-qkey are hex, the others decimal. A QPN
and a PSN are 24 bits (at most ffffff), in the flags and in the REMOTE line;
a wider one is refused, never truncated.

Start: prints   LOCAL <qpn> <psn> <gid>     (%06x %06x, GID as 32 hex digits)
                LOCAL <qpn> <psn> <gid> <qkey>        (UD: its Q_Key, %08x)
  then, unless --remote-qpn is given, reads one stdin line
                REMOTE <qpn> <psn> [<gid>]  (the GID, if given, names the
                                             peer's IPv4 as ::ffff:A.B.C.D;
                                             else --remote-ip does)
                REMOTE <qpn> <psn> [<gid> [<qkey>]]   (UD: the peer's Q_Key,
                                             default --remote-qkey, else own)
  resolves the peer's MAC (--neigh, or ARP) and brings the QP to RTS (UD:
  and creates the address handle of the peer).
Commands, one per line:
  write RADDR RKEY LEN SEED   fill MR[0,LEN) from SEED, RDMA WRITE it to RADDR (RC, UC)
  read RADDR RKEY LEN         RDMA READ LEN bytes from RADDR into MR[0,LEN) (RC)
  send LEN SEED               fill MR[0,LEN) from SEED, SEND it
  send LEN SEED [QKEY]        (UD: through the AH to the REMOTE QPN, with the
                               REMOTE Q_Key or QKEY in the DETH)
  fadd RADDR RKEY ADD         8-byte FETCH_ADD at RADDR, the original value into MR[0,8) (RC)
  cas RADDR RKEY COMPARE SWAP 8-byte CMP_SWAP at RADDR, the original value into MR[0,8) (RC)
                              (both: a WC line, then on success
                               ORIG 0x<16 hex digits>, MR[0,8) as a little-endian uint64)
  recv N                      wait for N receive completions
  sum OFF LEN                 -> SUM <off> <len> <crc>  (zlib crc32 of MR[OFF,OFF+LEN), %08x;
                                 off and len decimal)
  dump OFF LEN                -> DUMP <off> <len> <hex bytes>  (MR[OFF,OFF+LEN), LEN <= 4096,
                                 "-" for none: a UD receive's GRH area, say)
  mr                          -> MR <addr> <rkey> <len>  (addr and rkey hex, len decimal)
  counters                    -> COUNTERS name=value ...  (non-zero only: the device's hw
                                 counters, port, transport, and with --faults
                                 fault_ruleN_matched / fault_ruleN_fired)
  quit                        (or end of input)
Every work completion prints   WC <wr_id> <status> <opcode> <byte_len> <imm>
  (byte_len decimal, wr_id and imm hex); on a UD QP a receive completion adds
  the sender's QPN and the GRH flag:
                               WC <wr_id> <status> RECV <byte_len> <imm> src_qp=<%06x> grh=<0|1>
  (byte_len counts the 40-byte GRH area: 20 zero bytes, then the IPv4 header
  of the packet; the payload follows at recv-off + 40). A command the QP
  type has no operation for prints ERR <cmd> is not supported on a <type> QP
  (UD: write, read, fadd, cas; UC: read, fadd, cas). Each posted WR has its own wr_id (a
  counter); a command waits for its own. A completion of an earlier command's
  WR (one that timed out) prints LATE WC <wr_id> ...; a timeout prints
  ERR timed out ... wr_id <wr_id> ...; a command that cannot run, ERR <reason>;
  a line over 1 MiB, ERR line of <n> bytes: at most 1048576 (the next runs).
Seed generator: state = SEED (0 means 0x9E3779B9); per byte: state ^= state<<13;
  state ^= state>>17; state ^= state<<5 (uint32); byte = state & 0xff.
Receives: --recv-depth receive WQEs, each covering MR[recv-off, mr-size), are
  posted before the QP connects; each is re-posted once its completion has been
  printed, so every SEND lands at recv-off. write/read/send use MR[0, recv-off).

Flags:
`

type rdmaOpts struct {
	net        netOpts
	qpType     string // rc, uc or ud
	qkey       string // own Q_Key (UD), hex
	remoteQKey string // the peer's (UD, with --remote-qpn), hex
	remoteIP   string
	remoteQPN  string
	remotePSN  string
	psn        string
	gidIndex   int
	mtu        int
	mrSize     uint64
	recvOff    int64
	recvDepth  int
	timeout    int
	retryCnt   int
	rnrRetry   int
	waitMS     int
}

func runRDMA(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rdma", flag.ContinueOnError)
	var o rdmaOpts
	o.net.register(fs)
	o.net.stdinCommands = true
	fs.StringVar(&o.remoteIP, "remote-ip", "", "peer IPv4 address (its GID is ::ffff:A.B.C.D); a GID in the REMOTE line overrides it")
	fs.StringVar(&o.remoteQPN, "remote-qpn", "", "peer QPN in hex (skips the REMOTE line)")
	fs.StringVar(&o.remotePSN, "remote-psn", "", "peer initial PSN in hex (with --remote-qpn; default 0)")
	fs.StringVar(&o.psn, "psn", "", "own initial PSN in hex (default random)")
	intVar(fs, &o.gidIndex, "gid-index", 1, "local GID index (0 and 1 both name the IPv4-mapped GID)")
	intVar(fs, &o.mtu, "mtu", 1024, "path MTU of an RC or UC QP: 256, 512, 1024, 2048 or 4096 (a UD QP sends one packet of at most the port's active MTU, whatever this says)")
	o.mrSize = 1 << 20
	fs.Var(sizeFlagU64(&o.mrSize), "mr-size", "MR size in bytes")
	o.recvOff = -1
	fs.Var(sizeFlagI64(&o.recvOff, "mr-size/2"), "recv-off", "offset of the receive area in the MR, in bytes")
	intVar(fs, &o.recvDepth, "recv-depth", 16, "receives kept posted")
	intVar(fs, &o.timeout, "timeout", 16, "QP local ACK timeout exponent (4.096 µs × 2^N)")
	intVar(fs, &o.retryCnt, "retry-cnt", 6, "QP retry count")
	intVar(fs, &o.rnrRetry, "rnr-retry", 6, "QP RNR retry count (7 = infinite)")
	intVar(fs, &o.waitMS, "wait-ms", 20000, "how long a command waits for its completions, in ms")
	fs.StringVar(&o.qpType, "qp-type", "rc", "QP type: rc, uc or ud")
	fs.StringVar(&o.qkey, "qkey", fmt.Sprintf("%x", defaultQKey), "own Q_Key in hex (UD)")
	fs.StringVar(&o.remoteQKey, "remote-qkey", "", "the peer's Q_Key in hex (UD, with --remote-qpn; default: own)")
	quietFlags(fs)
	if err := fs.Parse(args); err != nil {
		return flagFailed(fs, rdmaHelp, err, stdout, stderr)
	}
	if fs.NArg() > 0 {
		unexpectedArg("rdma", fs, rdmaHelp, fs.Arg(0), stderr)
		return 2
	}
	if err := doRDMA(o, stdin, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "softnic rdma:", err)
		fmt.Fprintln(stdout, "ERR fatal:", err)
		if errors.As(err, new(usageError)) {
			return 2 // a bad flag value, found before the NIC started
		}
		return 1
	}
	return 0
}

// rdmaEP is the one endpoint of `softnic rdma`.
type rdmaEP struct {
	o      rdmaOpts
	typ    provider.QPType
	qkey   uint32       // own Q_Key (UD)
	ah     *provider.AH // UD: the peer
	peer   remoteInfo   // UD: where sends go
	rt     *wallclock.Net
	out    io.Writer
	stderr io.Writer // diagnostics beside the protocol on out
	pd     *provider.PD
	scq    *provider.CQ
	rcq    *provider.CQ
	qp     *provider.QP
	buf    provider.Buffer
	mr     *provider.MR
	psn    uint32
	wait   time.Duration
	nextID uint64            // the last wr_id given out (send and receive WRs alike)
	posted map[uint64]string // WRs not completed yet: wr_id -> the opcode it completes with (ibv name)
}

// line is one line read from stdin by the reader goroutine.
type line struct {
	text string
	long int   // a line longer than maxLine: its length (text is empty)
	err  error // io.EOF at the end
}

// maxLine is the longest stdin line read, in bytes (without its end).
const maxLine = 1 << 20

// tooLong is the refusal of a line longer than maxLine.
func (l line) tooLong() error {
	return fmt.Errorf("line of %d bytes: at most %d", l.long, maxLine)
}

// readLines feeds stdin's lines to a channel; the last message carries the
// error that ended the input. A line longer than maxLine is read to its
// end and handed over as its length only, so that the commands after it
// still run.
func readLines(r io.Reader) <-chan line {
	ch := make(chan line, 16)
	go func() {
		br := bufio.NewReaderSize(r, 64<<10)
		for {
			var text []byte
			n := 0
			var err error
			for more := true; more; {
				var frag []byte
				if frag, more, err = br.ReadLine(); err != nil {
					break
				}
				if n += len(frag); n <= maxLine {
					text = append(text, frag...)
				}
			}
			if err == nil || n > 0 {
				if n > maxLine {
					ch <- line{long: n}
				} else {
					ch <- line{text: string(text)}
				}
			}
			if err != nil {
				ch <- line{err: err}
				return
			}
		}
	}()
	return ch
}

// Numbers in the protocol and in the flags (docs/cli.md): identifiers —
// QPN, PSN, Q_Key, RKEY, addresses, wr_id, imm — are hex; sizes, counts,
// offsets, seeds and atomic operands are decimal, as in rdma-core and
// perftest. A 0x prefix makes a number hex in any field; a leading 0 is
// not octal.

// parseNum parses a number of at most bits bits: hex if hex is set or s
// has a 0x prefix, else decimal.
func parseNum(s string, hex bool, bits int) (uint64, error) {
	kind, base := "decimal", 10
	if hex {
		kind, base = "hex", 16
	}
	t := s
	if len(t) >= 2 && t[0] == '0' && (t[1] == 'x' || t[1] == 'X') {
		t, kind, base = t[2:], "hex", 16
	}
	// With an explicit base ParseUint takes no sign, prefix or underscore.
	v, err := strconv.ParseUint(t, base, bits)
	if errors.Is(err, strconv.ErrRange) {
		return 0, fmt.Errorf("%q does not fit in %d bits", s, bits)
	}
	if err != nil || t == "" {
		return 0, fmt.Errorf("%q is not a %d-bit %s number", s, bits, kind)
	}
	return v, nil
}

// parseHex parses an identifier: hex, with an optional 0x.
func parseHex(s string, bits int) (uint64, error) { return parseNum(s, true, bits) }

// parseDec parses a size, count, offset or seed: decimal, or hex after 0x.
func parseDec(s string, bits int) (uint64, error) { return parseNum(s, false, bits) }

// decFlag is a flag holding a size or count (parseDec) in one of u, n or
// i; i's negative values mean "not given" and print as unset.
type decFlag struct {
	u     *uint64
	n     *int
	i     *int64
	bits  int
	unset string
}

func sizeFlagU64(p *uint64) *decFlag              { return &decFlag{u: p, bits: 64} }
func sizeFlagInt(p *int) *decFlag                 { return &decFlag{n: p, bits: strconv.IntSize - 1} }
func sizeFlagI64(p *int64, unset string) *decFlag { return &decFlag{i: p, bits: 63, unset: unset} }

func (f *decFlag) String() string {
	switch {
	case f == nil:
		return "0"
	case f.u != nil:
		return strconv.FormatUint(*f.u, 10)
	case f.n != nil:
		return strconv.Itoa(*f.n)
	case f.i != nil && *f.i < 0:
		return f.unset
	case f.i != nil:
		return strconv.FormatInt(*f.i, 10)
	}
	return "0" // the flag package's zero value: a default of 0 goes unmentioned
}

func (f *decFlag) Set(s string) error {
	v, err := parseDec(s, f.bits)
	if err != nil {
		return err
	}
	switch {
	case f.u != nil:
		*f.u = v
	case f.n != nil:
		*f.n = int(v)
	default:
		*f.i = int64(v)
	}
	return nil
}

// defaultQKey is a UD QP's Q_Key unless --qkey says otherwise
// (ibv_ud_pingpong's).
const defaultQKey = 0x11111111

// qpTypes are the --qp-type values.
var qpTypes = map[string]provider.QPType{"rc": provider.QPTypeRC, "uc": provider.QPTypeUC, "ud": provider.QPTypeUD}

// qpTypeName is the name the protocol's refusals use (RC, UC, UD).
func qpTypeName(t provider.QPType) string {
	for k, v := range qpTypes {
		if v == t {
			return strings.ToUpper(k)
		}
	}
	return fmt.Sprint(t)
}

// parsed returns the QP type and the own Q_Key of the flags (and checks
// --remote-qkey).
func (o *rdmaOpts) parsed() (typ provider.QPType, qkey uint32, err error) {
	typ, ok := provider.QPTypeRC, true
	if o.qpType != "" {
		typ, ok = qpTypes[strings.ToLower(o.qpType)]
	}
	if !ok {
		return typ, 0, fmt.Errorf("--qp-type %q: want rc, uc or ud", o.qpType)
	}
	q := uint64(defaultQKey)
	if o.qkey != "" {
		var err error
		if q, err = parseHex(o.qkey, 32); err != nil {
			return typ, 0, fmt.Errorf("--qkey: %w", err)
		}
	}
	if o.remoteQKey != "" {
		if _, err := parseHex(o.remoteQKey, 32); err != nil {
			return typ, 0, fmt.Errorf("--remote-qkey: %w", err)
		}
	}
	return typ, uint32(q), nil
}

func (o *rdmaOpts) validate() error {
	if _, _, err := o.parsed(); err != nil {
		return err
	}
	switch {
	case !validMTU(o.mtu):
		return mtuError("--mtu", o.mtu)
	case o.mrSize < 8192 || o.mrSize > 1<<30:
		return fmt.Errorf("--mr-size %d out of range 8192..1 GiB", o.mrSize)
	case o.recvDepth < 1 || o.recvDepth > 4096:
		return fmt.Errorf("--recv-depth %d out of range 1..4096", o.recvDepth)
	case o.gidIndex != 0 && o.gidIndex != 1:
		return fmt.Errorf("--gid-index %d: softnic's GID table has the IPv4-mapped GID at 0 and 1 only", o.gidIndex)
	case o.timeout < 0 || o.timeout > 31:
		return fmt.Errorf("--timeout %d out of range 0..31", o.timeout)
	case o.retryCnt < 0 || o.retryCnt > 7 || o.rnrRetry < 0 || o.rnrRetry > 7:
		return fmt.Errorf("--retry-cnt %d / --rnr-retry %d out of range 0..7", o.retryCnt, o.rnrRetry)
	case o.waitMS <= 0:
		return fmt.Errorf("--wait-ms %d must be positive", o.waitMS)
	}
	if o.recvOff < 0 {
		o.recvOff = int64(o.mrSize / 2)
	}
	if uint64(o.recvOff) >= o.mrSize {
		return fmt.Errorf("--recv-off %d must lie inside the MR (%d bytes)", o.recvOff, o.mrSize)
	}
	if o.remotePSN != "" && o.remoteQPN == "" {
		return errors.New("--remote-psn needs --remote-qpn")
	}
	// QPNs and PSNs are 24 bits (IBTA BTH): refused here, before the
	// device starts, rather than truncated (or found wrong after LOCAL).
	for _, f := range []struct{ name, v string }{{"--psn", o.psn}, {"--remote-qpn", o.remoteQPN}, {"--remote-psn", o.remotePSN}} {
		if f.v == "" {
			continue
		}
		v, err := parseHex(f.v, 24)
		if err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
		if f.name == "--remote-qpn" && v == 0 {
			// QP0 is the subnet management QP, which RoCE has not; the
			// device refuses it as a destination at RTR (after LOCAL).
			return errors.New("--remote-qpn 0: QPN 0 is reserved (the SMI QP), no peer QP has it")
		}
	}
	return nil
}

func doRDMA(o rdmaOpts, stdin io.Reader, stdout, stderr io.Writer) error {
	if err := o.validate(); err != nil {
		return usageError{err}
	}
	var psn uint32
	if o.psn != "" {
		v, err := parseHex(o.psn, 24)
		if err != nil {
			return fmt.Errorf("--psn: %w", err)
		}
		psn = uint32(v)
	} else {
		psn = rand.Uint32() & 0xffffff
	}
	rt, err := openRealNet(o.net, int(o.mrSize)+(1<<20), stderr)
	if err != nil {
		return err
	}
	defer rt.Close()
	defer reportUnfiredRules(stderr, "rdma", rt)
	defer func() { fmt.Fprintln(stderr, "softnic rdma: counters:", rt.CounterLine()) }()
	typ, qkey, _ := o.parsed()
	ep := &rdmaEP{o: o, typ: typ, qkey: qkey, rt: rt, out: stdout, stderr: stderr, psn: psn, wait: time.Duration(o.waitMS) * time.Millisecond,
		posted: map[uint64]string{}}
	if err := ep.setup(); err != nil {
		return err
	}
	g := rt.GID()
	if typ == provider.QPTypeUD {
		fmt.Fprintf(stdout, "LOCAL %06x %06x %s %08x\n", ep.qp.QPN(), psn, gidHex(g), qkey)
	} else {
		fmt.Fprintf(stdout, "LOCAL %06x %06x %s\n", ep.qp.QPN(), psn, gidHex(g))
	}

	lines := readLines(stdin)
	peer, err := ep.remote(lines)
	if err != nil {
		return err
	}
	if err := ep.connect(peer); err != nil {
		return err
	}
	for {
		l, err := wallclock.Await(rt, lines, 0, "a command on stdin")
		if err != nil {
			return err
		}
		if l.err != nil {
			if !errors.Is(l.err, io.EOF) {
				return fmt.Errorf("reading stdin: %w", l.err)
			}
			return nil
		}
		if l.long > 0 {
			fmt.Fprintln(stdout, "ERR", l.tooLong())
			continue
		}
		if quit := ep.command(strings.Fields(l.text)); quit {
			return nil
		}
	}
}

// setup creates the PD, MR, CQs and QP, moves the QP to INIT and posts the
// receives.
func (ep *rdmaEP) setup() error {
	ctx := ep.rt.Context()
	var err error
	if ep.pd, err = ctx.AllocPD(); err != nil {
		return err
	}
	if ep.buf, err = ctx.AllocBuffer(int(ep.o.mrSize), 4096); err != nil {
		return err
	}
	access := provider.AccessLocalWrite | provider.AccessRemoteWrite | provider.AccessRemoteRead | provider.AccessRemoteAtomic
	if ep.mr, err = ep.pd.RegMR(ep.buf.Addr, ep.o.mrSize, access); err != nil {
		return err
	}
	if ep.scq, err = ctx.CreateCQ(128); err != nil {
		return err
	}
	if ep.rcq, err = ctx.CreateCQ(2*ep.o.recvDepth + 64); err != nil {
		return err
	}
	ep.qp, err = ctx.CreateQP(ep.pd, provider.QPInitAttr{Type: ep.typ, SendCQ: ep.scq, RecvCQ: ep.rcq,
		Cap: provider.QPCap{MaxSendWR: 64, MaxRecvWR: ep.o.recvDepth, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return err
	}
	// What each QP type takes to INIT (the IB transition table): RC the
	// access for remote write, read and atomics; UC remote write only; UD
	// a Q_Key.
	if ep.typ == provider.QPTypeUC {
		access = provider.AccessLocalWrite | provider.AccessRemoteWrite
	}
	if err := ep.qp.ToInit(provider.ConnectAttr{Access: access, QKey: ep.qkey}); err != nil {
		return err
	}
	for i := 0; i < ep.o.recvDepth; i++ {
		if err := ep.postRecv(); err != nil {
			return err
		}
	}
	return nil
}

// newWRID gives out the next wr_id for a WR that completes with opcode op.
func (ep *rdmaEP) newWRID(op provider.WCOpcode) uint64 {
	ep.nextID++
	ep.posted[ep.nextID] = op.String()
	return ep.nextID
}

// postRecv posts one receive covering the receive area.
func (ep *rdmaEP) postRecv() error {
	off := uint64(ep.o.recvOff)
	id := ep.newWRID(provider.WCRecv)
	_, err := ep.qp.PostRecv([]provider.RecvWR{{WRID: id, SGL: []provider.SGE{ep.mr.SGE(off, uint32(ep.o.mrSize-off))}}})
	if err != nil {
		delete(ep.posted, id)
	}
	return err
}

// remoteInfo is the peer as the flags or the REMOTE line give it.
type remoteInfo struct {
	qpn, psn uint32
	ip       netip.Addr
	qkey     uint32 // UD: the Q_Key its sends carry
}

// remote returns the peer's QPN, PSN, IPv4 address and (UD) Q_Key from the
// flags or the REMOTE line.
func (ep *rdmaEP) remote(lines <-chan line) (remoteInfo, error) {
	r := remoteInfo{qkey: ep.qkey}
	ud := ep.typ == provider.QPTypeUD
	var err error
	if ep.o.remoteIP != "" {
		if r.ip, err = netip.ParseAddr(ep.o.remoteIP); err != nil || !r.ip.Is4() {
			return r, fmt.Errorf("--remote-ip %q: need an IPv4 address", ep.o.remoteIP)
		}
	}
	if ep.o.remoteQKey != "" {
		v, err := parseHex(ep.o.remoteQKey, 32)
		if err != nil {
			return r, fmt.Errorf("--remote-qkey: %w", err)
		}
		r.qkey = uint32(v)
	}
	if ep.o.remoteQPN != "" {
		v, err := parseHex(ep.o.remoteQPN, 24)
		if err != nil {
			return r, fmt.Errorf("--remote-qpn: %w", err)
		}
		r.qpn = uint32(v)
		if ep.o.remotePSN != "" {
			if v, err = parseHex(ep.o.remotePSN, 24); err != nil {
				return r, fmt.Errorf("--remote-psn: %w", err)
			}
			r.psn = uint32(v)
		}
	} else {
		l, err := wallclock.Await(ep.rt, lines, 0, "the REMOTE line on stdin")
		if err != nil {
			return r, err
		}
		if l.err != nil {
			return r, fmt.Errorf("no REMOTE line on stdin: %w", l.err)
		}
		if l.long > 0 {
			return r, fmt.Errorf("the REMOTE line: %w", l.tooLong())
		}
		if err := r.parseLine(l.text, ud); err != nil {
			return r, err
		}
	}
	if !r.ip.IsValid() {
		return r, errors.New("the peer's address is unknown: give --remote-ip or a GID in the REMOTE line")
	}
	return r, nil
}

// parseLine parses REMOTE <qpn> <psn> [<gid>] (UD: [<gid> [<qkey>]]) into
// r; what the line leaves out keeps its value.
func (r *remoteInfo) parseLine(text string, ud bool) error {
	f := strings.Fields(text)
	maxFields := 4
	want := "REMOTE <qpn> <psn> [<gid>]"
	if ud {
		maxFields, want = 5, "REMOTE <qpn> <psn> [<gid> [<qkey>]]"
	}
	if len(f) < 3 || len(f) > maxFields || f[0] != "REMOTE" {
		return fmt.Errorf("expected %s, got %q", want, text)
	}
	// QPN and PSN are 24 bits: a wider one is refused, not truncated
	// (REMOTE 1000000 10 became QPN 0 and a misleading modify_qp error).
	q, err := parseHex(f[1], 24)
	if err != nil {
		return fmt.Errorf("REMOTE line %q: QPN: %w", text, err)
	}
	p, err := parseHex(f[2], 24)
	if err != nil {
		return fmt.Errorf("REMOTE line %q: PSN: %w", text, err)
	}
	r.qpn, r.psn = uint32(q), uint32(p)
	if len(f) >= 4 {
		g, err := parseGIDHex(f[3])
		if err != nil {
			return fmt.Errorf("REMOTE line: %w", err)
		}
		a, ok := gidIPv4(g)
		if !ok {
			return fmt.Errorf("REMOTE line: GID %s is not an IPv4-mapped RoCEv2 GID", f[3])
		}
		r.ip = a
	}
	if len(f) == 5 {
		k, err := parseHex(f[4], 32)
		if err != nil {
			return fmt.Errorf("REMOTE line: Q_Key: %w", err)
		}
		r.qkey = uint32(k)
	}
	return nil
}

// connect resolves the peer's MAC and brings the QP to RTR and RTS; for UD
// it creates the address handle sends go through instead of connecting.
func (ep *rdmaEP) connect(r remoteInfo) error {
	mac, err := ep.rt.Resolve(r.ip)
	if err != nil {
		return err
	}
	a := provider.ConnectAttr{Peer: provider.Peer{QPN: r.qpn, PSN: r.psn, GID: r.ip.As16(), MAC: mac},
		PSN: ep.psn, MTU: ep.o.mtu, SGIDIndex: uint8(ep.o.gidIndex), HopLimit: 64,
		MaxRdAtomic: 16, MaxDestRdAtomic: 16, MinRNRTimer: 12,
		Timeout: uint8(ep.o.timeout), RetryCnt: uint8(ep.o.retryCnt), RNRRetry: uint8(ep.o.rnrRetry)}
	if err := ep.qp.Connect(a); err != nil { // on from INIT (setup), where the receives were posted
		return err
	}
	if ep.typ == provider.QPTypeUD {
		// No connection: sends go through an address handle to the peer.
		ep.ah, err = ep.pd.CreateAH(provider.AHAttr{DGID: r.ip.As16(), DMAC: mac, Port: 1,
			SGIDIndex: uint8(ep.o.gidIndex), HopLimit: 64})
		ep.peer = r
		return err
	}
	return nil
}

// supports reports whether the QP type has an operation for cmd; if not,
// it prints the refusal (the same words as verbs_peer).
func (ep *rdmaEP) supports(cmd string) bool {
	ok := true
	switch cmd {
	case "write":
		ok = ep.typ != provider.QPTypeUD
	case "read", "fadd", "cas":
		ok = ep.typ == provider.QPTypeRC
	}
	if !ok {
		fmt.Fprintf(ep.out, "ERR %s is not supported on a %s QP\n", cmd, qpTypeName(ep.typ))
	}
	return ok
}

// command runs one stdin command; it reports whether to quit.
func (ep *rdmaEP) command(f []string) bool {
	if len(f) == 0 {
		return false
	}
	out := ep.out
	// nums parses the arguments; kinds has one letter per argument: h an
	// identifier (hex), d a size, count, offset, seed or operand
	// (decimal).
	nums := func(kinds, usage string) ([]uint64, bool) {
		if len(f) != len(kinds)+1 {
			fmt.Fprintln(out, "ERR usage:", usage)
			return nil, false
		}
		v := make([]uint64, len(kinds))
		for i := range v {
			n, err := parseNum(f[i+1], kinds[i] == 'h', 64)
			if err != nil {
				fmt.Fprintf(out, "ERR usage: %s (%v)\n", usage, err)
				return nil, false
			}
			v[i] = n
		}
		return v, true
	}
	switch f[0] {
	case "write", "read", "fadd", "cas":
		if !ep.supports(f[0]) {
			return false
		}
	}
	switch f[0] {
	case "write":
		if v, ok := nums("hhdd", "write RADDR RKEY LEN SEED"); ok {
			ep.rdma(provider.WRRDMAWrite, v[0], v[1], v[2], v[3])
		}
	case "read":
		if v, ok := nums("hhd", "read RADDR RKEY LEN"); ok {
			ep.rdma(provider.WRRDMARead, v[0], v[1], v[2], 0)
		}
	case "send":
		if ep.typ == provider.QPTypeUD {
			if len(f) == 4 {
				if v, ok := nums("ddh", "send LEN SEED [QKEY]"); ok {
					ep.sendUD(v[0], v[1], v[2])
				}
			} else if v, ok := nums("dd", "send LEN SEED [QKEY]"); ok {
				ep.sendUD(v[0], v[1], uint64(ep.peer.qkey))
			}
		} else if v, ok := nums("dd", "send LEN SEED"); ok {
			ep.rdma(provider.WRSend, 0, 0, v[0], v[1])
		}
	case "fadd":
		if v, ok := nums("hhd", "fadd RADDR RKEY ADD"); ok {
			ep.atomic(false, v[0], v[1], v[2], 0)
		}
	case "cas":
		if v, ok := nums("hhdd", "cas RADDR RKEY COMPARE SWAP"); ok {
			ep.atomic(true, v[0], v[1], v[2], v[3])
		}
	case "recv":
		if v, ok := nums("d", "recv N"); ok {
			ep.recv(v[0])
		}
	case "sum":
		if v, ok := nums("dd", "sum OFF LEN"); ok {
			ep.sum(v[0], v[1])
		}
	case "dump":
		if v, ok := nums("dd", "dump OFF LEN"); ok {
			ep.dump(v[0], v[1])
		}
	case "mr":
		fmt.Fprintf(out, "MR %x %x %d\n", ep.mr.Addr, ep.mr.RKey, ep.mr.Length)
	case "counters":
		fmt.Fprintln(out, strings.TrimSpace("COUNTERS "+ep.rt.CounterLine()))
	case "quit":
		return true
	default:
		fmt.Fprintln(out, "ERR unknown command", f[0])
	}
	return false
}

// fillSeed writes the seed generator's bytes (docs/howto-interop.md).
func fillSeed(p []byte, seed uint32) {
	s := seed
	if s == 0 {
		s = 0x9E3779B9
	}
	for i := range p {
		s ^= s << 13
		s ^= s >> 17
		s ^= s << 5
		p[i] = byte(s)
	}
}

// wcOpcodeOf is the completion opcode of a send WR opcode.
func wcOpcodeOf(op provider.WROpcode) provider.WCOpcode {
	switch op {
	case provider.WRRDMAWrite, provider.WRRDMAWriteImm:
		return provider.WCRDMAWrite
	case provider.WRRDMARead:
		return provider.WCRDMARead
	case provider.WRAtomicCmpSwp:
		return provider.WCCompSwap
	case provider.WRAtomicFetchAdd:
		return provider.WCFetchAdd
	}
	return provider.WCSend
}

// rdma posts one signalled WRITE, READ or SEND from MR[0, n) and prints its
// completion.
func (ep *rdmaEP) rdma(op provider.WROpcode, raddr, rkey, n, seed uint64) {
	ep.post(provider.SendWR{Opcode: op, RemoteAddr: raddr, RKey: uint32(rkey)}, rkey, n, seed)
}

// sendUD posts one signalled UD SEND of MR[0, n) through the AH to the
// peer's QPN with Q_Key qkey, and prints its completion.
func (ep *rdmaEP) sendUD(n, seed, qkey uint64) {
	if qkey > 0xffffffff {
		fmt.Fprintln(ep.out, "ERR QKEY is 32-bit")
		return
	}
	ep.post(provider.SendWR{Opcode: provider.WRSend, AH: ep.ah, RemoteQPN: ep.peer.qpn, RemoteQKey: uint32(qkey)}, 0, n, seed)
}

// post fills MR[0, n) from seed (unless wr is a READ), points wr at it and
// posts it (postAndWait).
func (ep *rdmaEP) post(wr provider.SendWR, rkey, n, seed uint64) {
	op := wr.Opcode
	if n > uint64(ep.o.recvOff) {
		fmt.Fprintf(ep.out, "ERR length %d beyond the send area %d\n", n, ep.o.recvOff)
		return
	}
	if rkey > 0xffffffff || seed > 0xffffffff {
		fmt.Fprintln(ep.out, "ERR RKEY and SEED are 32-bit")
		return
	}
	if op != provider.WRRDMARead {
		fillSeed(ep.buf.Bytes[:n], uint32(seed))
	}
	if n > 0 {
		wr.SGL = []provider.SGE{ep.mr.SGE(0, uint32(n))}
	}
	ep.postAndWait(wr)
}

// atomic posts one 8-byte CMP_SWAP (cas) or FETCH_ADD whose result buffer
// is MR[0,8), prints its completion and, if it succeeded, the original
// remote value.
//
// Byte order: the responder returns the original value big-endian in the
// AtomicAckETH (IBTA, rocev2.md); the requesting HCA stores it into the
// local buffer as a uint64 in host order (Linux rxe: atmack_orig() is
// be64_to_cpu, then the u64 is copied into the SGE, rxe_comp.c do_atomic;
// the responder likewise operates on the target as a host-order uint64,
// rxe_resp.c). softnic emulates an x86 host, so MR[0,8) is read as a
// little-endian uint64, and so is the remote target — `write` of 8 seeded
// bytes there seeds the value binary.LittleEndian.Uint64(bytes).
func (ep *rdmaEP) atomic(cas bool, raddr, rkey, cmpAdd, swap uint64) {
	if rkey > 0xffffffff {
		fmt.Fprintln(ep.out, "ERR RKEY is 32-bit")
		return
	}
	if ep.o.recvOff < 8 {
		fmt.Fprintf(ep.out, "ERR the result buffer MR[0,8) overlaps the receive area at %d\n", ep.o.recvOff)
		return
	}
	wr := provider.SendWR{Opcode: provider.WRAtomicFetchAdd, RemoteAddr: raddr, RKey: uint32(rkey), CompareAdd: cmpAdd,
		SGL: []provider.SGE{ep.mr.SGE(0, 8)}}
	if cas {
		wr.Opcode, wr.Swap = provider.WRAtomicCmpSwp, swap
	}
	if wc, ok := ep.postAndWait(wr); ok && wc.Status == provider.WCSuccess {
		fmt.Fprintf(ep.out, "ORIG 0x%016x\n", binary.LittleEndian.Uint64(ep.buf.Bytes[:8]))
	}
}

// postAndWait gives wr a fresh wr_id, posts it signalled and waits for ITS
// completion, which it prints; completions of earlier WRs that arrive
// meanwhile (their command timed out) are printed as LATE lines. ok is
// false when nothing was posted or the wait gave up (an ERR line says why).
func (ep *rdmaEP) postAndWait(wr provider.SendWR) (provider.WC, bool) {
	op := wcOpcodeOf(wr.Opcode)
	wr.WRID = ep.newWRID(op)
	wr.Flags |= provider.SendSignaled
	ep.rt.Sync()
	if _, err := ep.qp.PostSend([]provider.SendWR{wr}); err != nil {
		delete(ep.posted, wr.WRID)
		fmt.Fprintln(ep.out, "ERR post_send", err)
		return provider.WC{}, false
	}
	start := time.Now()
	var wcs [1]provider.WC
	what := func() string { return fmt.Sprintf("the %s completion of wr_id %x", op, wr.WRID) }
	for {
		if _, err := ep.rt.PollCQSince(ep.scq, wcs[:], start, ep.wait, what); err != nil {
			fmt.Fprintln(ep.out, "ERR", err)
			return provider.WC{}, false
		}
		if wcs[0].WRID != wr.WRID {
			ep.printWC("LATE ", &wcs[0])
			continue
		}
		ep.printWC("", &wcs[0])
		return wcs[0], true
	}
}

// drainLate prints, as LATE lines, the send completions already waiting
// (after at most one pump of the network).
func (ep *rdmaEP) drainLate() error {
	var wcs [4]provider.WC
	for {
		n, err := ep.rt.PollNow(ep.scq, wcs[:])
		if err != nil || n == 0 {
			return err
		}
		for i := range wcs[:n] {
			ep.printWC("LATE ", &wcs[i])
		}
	}
}

// recv waits for n receive completions, printing and re-posting each. Send
// completions of earlier commands that arrive meanwhile print as LATE.
func (ep *rdmaEP) recv(n uint64) {
	var wcs [1]provider.WC
	start := time.Now()
	for i := uint64(0); i < n; {
		if err := ep.drainLate(); err != nil {
			fmt.Fprintln(ep.out, "ERR poll_cq", err)
			return
		}
		what := func() string { return fmt.Sprintf("receive completion %d of %d", i+1, n) }
		got, err := ep.rt.PollOnce(ep.rcq, wcs[:], start, ep.wait, what)
		if err != nil {
			fmt.Fprintln(ep.out, "ERR", err)
			return
		}
		if got == 0 {
			continue
		}
		i++
		ep.printWC("", &wcs[0])
		if wcs[0].Status == provider.WCSuccess {
			if err := ep.postRecv(); err != nil {
				fmt.Fprintln(ep.stderr, "softnic rdma: re-posting a receive failed:", err)
			}
		}
	}
}

// printWC prints one completion (prefix "" or "LATE ") and forgets its WR.
// An error completion's opcode is not defined by verbs: the opcode printed
// is the one the WR was posted with, as verbs_peer does.
func (ep *rdmaEP) printWC(prefix string, wc *provider.WC) {
	imm := uint32(0)
	if wc.Flags&provider.WCFlagWithImm != 0 {
		imm = wc.Imm
	}
	op := wc.Opcode.String()
	posted, known := ep.posted[wc.WRID]
	if known && wc.Status != provider.WCSuccess {
		op = posted
	}
	delete(ep.posted, wc.WRID)
	fmt.Fprint(ep.out, wcLine(prefix, wc, op, imm, ep.typ == provider.QPTypeUD && posted == provider.WCRecv.String()))
	if wc.Status != provider.WCSuccess {
		fmt.Fprintf(ep.stderr, "softnic rdma: completion wr_id %#x %s vendor_err %#x qp %#x; counters: %s\n",
			wc.WRID, wc.Status, wc.VendorErr, wc.QPNum, ep.rt.CounterLine())
	}
}

// wcLine formats one completion: prefix WC <wr_id> <status> <opcode>
// <byte_len> <imm>, and for a receive on a UD QP (udRecv) src_qp=<qpn>
// grh=<0|1> as well.
func wcLine(prefix string, wc *provider.WC, op string, imm uint32, udRecv bool) string {
	s := fmt.Sprintf("%sWC %x %s %s %d %x", prefix, wc.WRID, wc.Status, op, wc.ByteLen, imm)
	if udRecv {
		grh := 0
		if wc.Flags&provider.WCFlagGRH != 0 {
			grh = 1
		}
		s += fmt.Sprintf(" src_qp=%06x grh=%d", wc.SrcQP&0xffffff, grh)
	}
	return s + "\n"
}

// maxDump is the most bytes one dump command prints.
const maxDump = 4096

// dump prints MR[off, off+n) in hex.
func (ep *rdmaEP) dump(off, n uint64) {
	if n > maxDump {
		fmt.Fprintf(ep.out, "ERR dump of %d bytes: at most %d\n", n, maxDump)
		return
	}
	if off > ep.o.mrSize || n > ep.o.mrSize-off {
		fmt.Fprintf(ep.out, "ERR range beyond the MR (%d bytes)\n", ep.o.mrSize)
		return
	}
	h := hex.EncodeToString(ep.buf.Bytes[off : off+n])
	if h == "" {
		h = "-"
	}
	fmt.Fprintf(ep.out, "DUMP %d %d %s\n", off, n, h)
}

// sum prints the zlib crc32 of MR[off, off+n).
func (ep *rdmaEP) sum(off, n uint64) {
	if off > ep.o.mrSize || n > ep.o.mrSize-off {
		fmt.Fprintf(ep.out, "ERR range beyond the MR (%d bytes)\n", ep.o.mrSize)
		return
	}
	fmt.Fprintf(ep.out, "SUM %d %d %08x\n", off, n, crc32.ChecksumIEEE(ep.buf.Bytes[off:off+n]))
}
